# Citus, one budget (issue 21): a coordinator and two workers on 127.0.0.1 (PostgreSQL 18,
# Citus from ../shared/vendor). Measured before this work: a query grouped by the
# distribution column went whole to the workers, whose ledgers were charged, and the
# coordinator's budget never moved. Now DP aggregates over distributed and reference
# tables are finalized on the coordinator and charged there once, from its plan:
# 1. the law: 2,000 draws per plan shape match exp(ε·S) (chi-square, 2 degrees of
#    freedom, p > 1e-4) and reject the textbook exp(ε·S/2), or the rows' law where
#    privacy units are declared; split quantiles match the same query on one server
#    (two-sample chi-square) and tell half the epsilon apart;
# 2. the plans: Citus splits the quantile aggregates (partial states on the workers,
#    combined and finalized on the coordinator), ships rows for the selection ones
#    (whose item type is polymorphic), and never finalizes on a worker; with a table
#    distributed by its privacy unit, each unit is bounded on the worker that holds it;
#    Adult and MovieLens, distributed, give the exact answers at a large ε;
# 3. one budget: a role with 0.5 left runs one 0.4 query and is refused the second, in
#    every plan shape, over TCP; no worker's ledger is charged;
# 4. a worker refuses every DP aggregate, and a combine of partial states that the planner
#    hook did not plan is refused, so nothing bypasses the coordinator.
# Runs in the PostgreSQL 18 suite.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO"
if [ "$PG_FEATURE" != pg18 ]; then
    echo "citus: runs in the PostgreSQL 18 suite"
    exit 0
fi
ensure_citus "$PG_CONFIG"
# Each node: Citus first. The coordinator connects to the workers as the querying role
# (Citus's rule): the workers trust 127.0.0.1, the coordinator asks for passwords.
node() {
    local dir="$TEST_ROOT/citus_$1" port="$2" trusted="$3"
    start_cluster "$dir" "$port" "shared_preload_libraries = 'citus, pg_exp_mech, pg_stat_statements'" "max_connections = 80"
    as_owner sed -i "1i host all $trusted 127.0.0.1/32 trust" "$dir/data/pg_hba.conf"
    as_owner "$(pg_bindir)/pg_ctl" -D "$dir/data" reload >/dev/null
    cluster_psql "$dir" "$port" -qAt -c "CREATE EXTENSION citus" -c "CREATE EXTENSION pg_exp_mech" \
        -c "CREATE EXTENSION pg_stat_statements" \
        -c "REVOKE EXECUTE ON FUNCTION pg_tablespace_size(name), pg_tablespace_size(oid) FROM PUBLIC" >/dev/null
}
COORDINATOR_PORT="$(free_port 57532)"; node coordinator "$COORDINATOR_PORT" postgres
W1_PORT="$(free_port $((COORDINATOR_PORT + 1)))"; node worker1 "$W1_PORT" all
W2_PORT="$(free_port $((W1_PORT + 1)))"; node worker2 "$W2_PORT" all
trap 'for n in coordinator worker1 worker2; do stop_cluster "$TEST_ROOT/citus_$n"; done' EXIT
CLUSTER="$TEST_ROOT/citus_coordinator"; PORT="$COORDINATOR_PORT"
first_error() { grep -m1 -oP '^(psql:[^:]*:[0-9]+: )?ERROR:  \K[0-9A-Z]{5}: .*' || true; }
error_of() { { "$@" 2>&1 || true; } | first_error; }
sql <<SQL >/dev/null
SELECT citus_set_coordinator_host('127.0.0.1', $COORDINATOR_PORT);
SELECT citus_add_node('127.0.0.1', $W1_PORT);
SELECT citus_add_node('127.0.0.1', $W2_PORT);
SET citus.shard_count = 4;
-- The law's tables: 3 choices each; votes is distributed by voter, unit_votes by its
-- privacy unit. Person 1 votes a six times, person 5 votes c five times.
CREATE TABLE votes(voter int, region text, choice text);
SELECT create_distributed_table('votes', 'voter');
INSERT INTO votes SELECT v, 'r1', CASE WHEN v <= 10 THEN 'a' WHEN v <= 21 THEN 'b' ELSE 'c' END
  FROM generate_series(1, 33) v;
INSERT INTO votes SELECT v, 'r2', CASE WHEN v <= 45 THEN 'a' WHEN v <= 55 THEN 'b' ELSE 'c' END
  FROM generate_series(34, 66) v;
INSERT INTO votes VALUES (101, 'r3', 'a'), (101, 'r3', 'a'), (101, 'r3', 'a'), (101, 'r3', 'b'),
  (101, 'r3', 'b'), (101, 'r3', 'c'), (102, 'r4', 'a'), (102, 'r4', 'b'), (102, 'r4', 'c'),
  (102, 'r4', 'c'), (102, 'r4', 'c');
CREATE TABLE unit_votes(person int, choice text);
SELECT create_distributed_table('unit_votes', 'person');
SECURITY LABEL FOR pg_exp_mech ON COLUMN unit_votes.person IS 'privacy_unit';
INSERT INTO unit_votes SELECT 1, 'a' FROM generate_series(1, 6);
INSERT INTO unit_votes VALUES (2, 'b'), (3, 'b'), (4, 'b'), (5, 'c'), (6, 'c');
INSERT INTO unit_votes SELECT 5, 'c' FROM generate_series(1, 4);
CREATE TABLE pages(page text);
SELECT create_reference_table('pages');
INSERT INTO pages VALUES ('docs'), ('docs'), ('pricing');
CREATE TABLE local_votes AS SELECT * FROM votes;
SQL
sql -q -f scripts/load_adult.sql
sql -q -f scripts/load_movielens.sql
sql <<SQL >/dev/null
SET client_min_messages = warning;
SELECT create_distributed_table('adult', 'education');
SELECT create_reference_table('movies');
SELECT create_reference_table('movie_genres');
SELECT create_distributed_table('ratings', 'user_id');
SQL

echo "1. the law, as on one server: 2,000 draws of each plan shape"
sql <<'SQL' >/dev/null
CREATE TABLE draws(shape text, grp text, answer text);
DO $$
DECLARE r record;
BEGIN
  FOR i IN 1..2000 LOOP
    FOR r IN SELECT dp_argmax(choice, 1, 0.5) AS answer FROM votes LOOP
      INSERT INTO draws VALUES ('ungrouped', '', r.answer);
    END LOOP;
    FOR r IN SELECT region, dp_argmax(choice, 1, 0.5) AS answer FROM votes GROUP BY region LOOP
      INSERT INTO draws VALUES ('by region', r.region, r.answer);
    END LOOP;
    FOR r IN SELECT voter, dp_argmax(choice, 1, 0.5) AS answer FROM votes WHERE voter > 100 GROUP BY voter LOOP
      INSERT INTO draws VALUES ('by voter', r.voter::text, r.answer);
    END LOOP;
    FOR r IN SELECT dp_argmax(choice, 1, 0.5) AS answer FROM unit_votes LOOP
      INSERT INTO draws VALUES ('units', '', r.answer);
    END LOOP;
    -- Split by Citus: partial states on the workers; against a local copy.
    FOR r IN SELECT dp_quantile(voter, 0.5, 0, 200, 0.1) AS answer FROM votes LOOP
      INSERT INTO draws VALUES ('quantile', 'citus', r.answer);
    END LOOP;
    FOR r IN SELECT region, dp_quantile(voter, 0.5, 0, 200, 0.1) AS answer FROM votes WHERE region IN ('r1', 'r2') GROUP BY region LOOP
      INSERT INTO draws VALUES ('quantile by region', 'citus ' || r.region, r.answer);
    END LOOP;
    FOR r IN SELECT voter, dp_quantile(ascii(choice), 0.5, 90, 110, 0.1) AS answer FROM votes WHERE voter > 100 GROUP BY voter LOOP
      INSERT INTO draws VALUES ('quantile by voter', 'citus ' || r.voter, r.answer);
    END LOOP;
    FOR r IN SELECT dp_quantile(voter, 0.5, 0, 200, 0.1) AS answer FROM local_votes LOOP
      INSERT INTO draws VALUES ('quantile', 'one server', r.answer);
    END LOOP;
    FOR r IN SELECT region, dp_quantile(voter, 0.5, 0, 200, 0.1) AS answer FROM local_votes WHERE region IN ('r1', 'r2') GROUP BY region LOOP
      INSERT INTO draws VALUES ('quantile by region', 'one server ' || r.region, r.answer);
    END LOOP;
    FOR r IN SELECT voter, dp_quantile(ascii(choice), 0.5, 90, 110, 0.1) AS answer FROM local_votes WHERE voter > 100 GROUP BY voter LOOP
      INSERT INTO draws VALUES ('quantile by voter', 'one server ' || r.voter, r.answer);
    END LOOP;
    FOR r IN SELECT dp_quantile(voter, 0.5, 0, 200, 0.05) AS answer FROM local_votes LOOP
      INSERT INTO draws VALUES ('quantile', 'one server at half epsilon', r.answer);
    END LOOP;
  END LOOP;
END $$;
SQL
# shape|group|choice|draws|score the law uses|score the wrong law uses
{
    sql -F'|' -c "
      WITH scores AS (
        SELECT 'ungrouped' AS shape, '' AS grp, choice, count(*) AS s, count(*) / 2.0 AS wrong FROM votes GROUP BY choice
        UNION ALL SELECT 'by region', region, choice, count(*), count(*) / 2.0 FROM votes GROUP BY region, choice
        UNION ALL SELECT 'by voter', voter::text, choice, count(*), count(*) / 2.0 FROM votes WHERE voter > 100 GROUP BY voter, choice
        UNION ALL SELECT 'units', '', choice, count(DISTINCT person), count(*) FROM unit_votes GROUP BY choice)
      SELECT s.shape, s.grp, s.choice, (SELECT count(*) FROM draws d WHERE d.shape = s.shape AND d.grp = s.grp AND d.answer = s.choice), s.s, s.wrong
      FROM scores s ORDER BY 1, 2, 3"
} | python3 -c '
import math, sys
from collections import defaultdict
groups = defaultdict(list)
for line in sys.stdin:
    shape, group, choice, drawn, score, wrong = line.strip().split("|")
    groups[(shape, group)].append((int(drawn), float(score), float(wrong)))
epsilon = 0.5
def chi2(rows, column):
    weights = [math.exp(epsilon * row[column]) for row in rows]
    n = sum(row[0] for row in rows)
    return sum((row[0] - n * w / sum(weights)) ** 2 / (n * w / sum(weights)) for row, w in zip(rows, weights))
failed = False
for (shape, group), rows in sorted(groups.items()):
    assert len(rows) == 3, (shape, group, rows)
    right, wrong = chi2(rows, 1), chi2(rows, 2)
    # 3 choices: 2 degrees of freedom, P(chi2 > x) = exp(-x/2)
    ok = math.exp(-right / 2) > 1e-4 and math.exp(-wrong / 2) < 1e-4
    failed |= not ok
    verdict = "ok" if ok else "FAIL"
    print(f"  {shape} {group}: draws {[r[0] for r in rows]}, chi-square {right:.2f} (p {math.exp(-right / 2):.3f}), against the wrong law {wrong:.1f}: {verdict}")
sys.exit(1 if failed else 0)
' || fail "a law differs under Citus"
# The quantiles Citus splits, against the same query on a local copy: a two-sample
# chi-square over 5 bins of the answers (at the pooled sample's quintiles), p > 1e-4; the
# same test tells the local copy at half the epsilon apart (p < 1e-4).
sql -F'|' -c "SELECT shape, grp, answer::int FROM draws WHERE shape LIKE 'quantile%'" | python3 -c '
import bisect, math, sys
from collections import defaultdict
answers = defaultdict(list)
for line in sys.stdin:
    shape, group, answer = line.strip().split("|")
    answers[(shape, group)].append(int(answer))
def chi2_sf(x, df):
    # P(chi2 > x): 1 - the regularized lower incomplete gamma function, by its series.
    s, z = df / 2, x / 2
    term = total = 1 / s
    for n in range(1, 1000):
        term *= z / (s + n)
        total += term
    return max(0.0, 1 - total * math.exp(-z + s * math.log(z) - math.lgamma(s))) if z > 0 else 1.0
def p_value(a, b):
    pooled = sorted(a + b)
    edges = sorted(set(pooled[len(pooled) * q // 5] for q in range(1, 5)))
    counts = [[0] * (len(edges) + 1) for _ in (a, b)]
    for row, sample in zip(counts, (a, b)):
        for answer in sample:
            row[bisect.bisect_right(edges, answer)] += 1
    total = [x + y for x, y in zip(*counts)]
    x = sum((o - t * sum(row) / len(pooled)) ** 2 / (t * sum(row) / len(pooled))
            for row in counts for o, t in zip(row, total) if t)
    return chi2_sf(x, sum(1 for t in total if t) - 1), counts
failed = False
pairs = [(("quantile", "citus"), ("quantile", "one server"), True),
         (("quantile", "one server at half epsilon"), ("quantile", "one server"), False)]
pairs += [(("quantile by region", "citus " + g), ("quantile by region", "one server " + g), True) for g in ("r1", "r2")]
pairs += [(("quantile by voter", "citus " + v), ("quantile by voter", "one server " + v), True) for v in ("101", "102")]
for first, second, same in pairs:
    assert len(answers[first]) == len(answers[second]) == 2000, (first, second)
    p, counts = p_value(answers[first], answers[second])
    ok = (p > 1e-4) == same
    failed |= not ok
    verdict = "ok" if ok else "FAIL"
    print(f"  {first[0]}, {first[1]} {counts[0]} against {second[1]} {counts[1]}: p {p:.2g}: {verdict}")
sys.exit(1 if failed else 0)
' || fail "a quantile law differs under Citus"

echo "2. the plans: the coordinator finalizes; units are bounded next to their rows"
plan="$(sql -c "EXPLAIN (VERBOSE, COSTS OFF) SELECT voter, dp_argmax(choice, 1, 0.5) FROM votes GROUP BY voter")"
assert_contains "$plan" "dp_argmax(remote_scan." "grouped by the distribution column: finalized on the coordinator"
assert_contains "$plan" "SELECT COALESCE(voter, voter) AS voter" "the grouping is not pushed down"
if grep -F "Query:" <<<"$plan" | grep -qF "dp_argmax("; then fail "a worker's fragment calls dp_argmax:\n$plan"; fi
plan="$(sql -c "EXPLAIN (VERBOSE, COSTS OFF) SELECT voter, dp_quantile(voter, 0.5, 0, 200, 0.5) FROM votes GROUP BY voter")"
assert_contains "$(grep -F "Query:" <<<"$plan")" "pg_catalog.worker_binary_partial_agg('public.dp_quantile(" "a quantile's partial states on the workers"
assert_contains "$plan" "coord_binary_combine_agg(" "combined and finalized on the coordinator"
plan="$(sql -c "EXPLAIN (VERBOSE, COSTS OFF) SELECT dp_argmax(choice, 1, 0.5) FROM unit_votes")"
assert_contains "$(grep -F "Query:" <<<"$plan")" "OVER (PARTITION BY unit_votes.person" "each unit bounded on its worker"
assert_contains "$plan" "dp_argmax(remote_scan." "finalized on the coordinator"
assert_eq "$(sql -c "SELECT dp_argmax(occupation, 1, 50) FROM adult")" \
    "$(sql -c "SELECT occupation FROM adult GROUP BY 1 ORDER BY count(*) DESC LIMIT 1")" "Adult, ungrouped"
assert_eq "$(sql -c "SELECT bool_and(dp = exact) FROM (SELECT education, dp_argmax(sex, 1, 50) AS dp, mode() WITHIN GROUP (ORDER BY sex) AS exact FROM adult GROUP BY education) s")" "t" "Adult, grouped by its distribution column"
assert_eq "$(sql -c "SELECT count(*) FROM (SELECT race, dp_quantile(age, 0.5, 0, 100, 50) AS dp, percentile_disc(0.5) WITHIN GROUP (ORDER BY age) AS exact FROM adult GROUP BY race) s WHERE abs(dp - exact) <= 1")" "5" "Adult, quantiles grouped by another column"
assert_eq "$(sql -c "SELECT dp_argmax(movie_id, 1, 20) FROM ratings")" "356" "MovieLens by user (the most raters: 341)"
assert_eq "$(sql -c "SELECT dp_argmax(m.title, 1, 20) FROM ratings r JOIN movies m USING (movie_id)")" "Forrest Gump (1994)" "MovieLens joined with a reference table"

echo "3. one budget: a role with 0.5 left runs one 0.4 query, whatever the plan shape"
sql <<'SQL' >/dev/null
CREATE ROLE dp_only LOGIN PASSWORD 'dp-only-password';
CREATE FUNCTION top_choice() RETURNS text LANGUAGE plpgsql SECURITY DEFINER
  AS $$ DECLARE r text; BEGIN SELECT dp_argmax(choice, 1, 0.4) INTO r FROM votes; RETURN r; END $$;
GRANT EXECUTE ON FUNCTION top_choice() TO dp_only;
SELECT dp_budget_set('dp_only', 0.5);
SQL
shapes=(
    "SELECT dp_argmax(choice, 1, 0.4) FROM votes"
    "SELECT region, dp_argmax(choice, 1, 0.4) FROM votes GROUP BY region"
    "SELECT voter, dp_argmax(choice, 1, 0.4) FROM votes GROUP BY voter"
    "SELECT dp_argmax(choice, 1, 0.4) FROM votes WHERE voter = 1"
    "SELECT * FROM (SELECT region, dp_argmax(choice, 1, 0.4) FROM votes GROUP BY region) s"
    "WITH c AS (SELECT dp_quantile(voter, 0.5, 0, 200, 0.4) FROM votes) SELECT * FROM c"
    "SELECT (SELECT dp_argmax(choice, 1, 0.4) FROM votes)"
    "SELECT dp_argmax(choice, 1, 0.4) FROM unit_votes"
    "SELECT dp_argmax(page, 1, 0.4) FROM pages"
    "SELECT voter, dp_quantile(voter, 0.5, 0, 200, 0.4) FROM votes GROUP BY voter"
    "SELECT region, dp_quantiles(voter, ARRAY[0.25, 0.75], 0, 200, 0.4) FROM votes GROUP BY region"
    "SELECT region, count(*) FROM votes GROUP BY region HAVING dp_partition(0.4, 1e-6)"
)
spent() { sql -c "SELECT epsilon_spent FROM dp_budget WHERE role = '$1'::regrole"; }
for number in "${!shapes[@]}"; do
    role="analyst$number"
    sql -c "CREATE ROLE $role LOGIN PASSWORD 'analyst-password'" \
        -c "GRANT SELECT ON votes, unit_votes, pages TO $role" -c "SELECT dp_budget_set('$role', 0.5, 1e-5)" >/dev/null
    answer="$(sql_as "$role" analyst-password -v VERBOSITY=verbose -c "${shapes[$number]}" 2>&1)"
    ! grep -q ERROR <<<"$answer" || fail "${shapes[$number]}: no answer: $answer"
    assert_eq "$(spent "$role")" "0.4" "${shapes[$number]}: charged once, on the coordinator"
    assert_contains "$(error_of sql_as "$role" analyst-password -v VERBOSITY=verbose -c "${shapes[$number]}")" \
        "53400: privacy budget of role \"$role\" exceeded" "${shapes[$number]}: the second 0.4"
done
# A prepared statement: PostgreSQL tries a generic plan at the sixth execution, which
# Citus cannot plan; the values' plan runs, charged each time.
sql -c "CREATE ROLE prepared LOGIN PASSWORD 'analyst-password'" -c "GRANT SELECT ON votes TO prepared" \
    -c "SELECT dp_budget_set('prepared', 0.5)" >/dev/null
out="$({ echo "PREPARE q(float8) AS SELECT dp_argmax(choice, 1, \$1) FROM votes;"
          for _ in 1 2 3 4 5 6; do echo "EXECUTE q(0.1);"; done; } |
      sql_as prepared analyst-password -v VERBOSITY=verbose 2>&1 || true)"
assert_eq "$(grep -c '^[abc]$' <<<"$out")" "5" "five executions at 0.1 answer"
assert_contains "$(first_error <<<"$out")" '53400: privacy budget of role "prepared" exceeded' "the sixth is refused"
# A role that may not read the table: a SECURITY DEFINER function runs its query as the
# owner (Citus connects to the workers as the owner), charged to the caller.
answer="$(sql_as dp_only dp-only-password -c "SELECT top_choice()" 2>&1)"
[[ "$answer" =~ ^[abc]$ ]] || fail "through a SECURITY DEFINER function: $answer"
assert_eq "$(spent dp_only)" "0.4" "the caller is charged"
assert_contains "$(error_of sql_as dp_only dp-only-password -v VERBOSITY=verbose -c "SELECT top_choice()")" \
    '53400: privacy budget of role "dp_only" exceeded' "its second call"
# A correlated subquery that Citus pushes down whole, loops and all: the workers refuse
# it, and nothing is charged.
sql -c "CREATE ROLE looper LOGIN PASSWORD 'analyst-password'" -c "GRANT SELECT ON votes TO looper" \
    -c "SELECT dp_budget_set('looper', 0.5)" >/dev/null
assert_contains "$(error_of sql_as looper analyst-password -v VERBOSITY=verbose -c \
    "SELECT v.voter, (SELECT dp_argmax(w.choice, 1, 0.4) FROM votes w WHERE w.voter = v.voter) FROM votes v")" \
    "0A000: differentially private aggregates run on the Citus coordinator only" "a correlated subquery pushed down"
assert_eq "$(spent looper)" "0" "the refused loop charged nothing"
for worker in worker1 worker2; do
    port="$W1_PORT"; [ "$worker" = worker2 ] && port="$W2_PORT"
    assert_eq "$(cluster_psql "$TEST_ROOT/citus_$worker" "$port" -qAt -c "SELECT count(*) FROM dp_ledger WHERE kind = 'charge'")" "0" \
        "no charge on $worker's ledger"
done

echo "4. nothing runs around the coordinator, and nothing depends on the rows"
# Parameters are evaluated once, on the coordinator, before Citus plans: not on the
# workers for each row, where an error would tell whether rows exist (the first Citus red
# team's findings: a crash, and an error only where rows matched).
sql -c "CREATE ROLE prober LOGIN PASSWORD 'analyst-password'" -c "GRANT SELECT ON votes, local_votes TO prober" \
    -c "SELECT dp_budget_set('prober', 100, 1e-3)" >/dev/null
for expression in "length(normalize('abc'))::float8 / 10" "extract(epoch from make_interval(secs => 0.4))::float8" \
    "current_setting('dp.eps')::float8"; do
    for filter in "voter = 7" "voter = 7000"; do
        out="$(sql_as prober analyst-password -v VERBOSITY=verbose -c "SET dp.eps = '0.4'" \
            -c "SELECT dp_argmax(choice, 1, $expression) FROM votes WHERE $filter" 2>&1)" || fail "$expression where $filter: $out"
    done
done
sql -c "SELECT dp_argmax(choice, 1, 0.4, 1, ARRAY['a', 'b', 'c'] COLLATE \"C\") FROM votes" >/dev/null || fail "candidates with a collation"
# The workers' statistics do not count what a fragment of a DP statement reads (the
# worker does not know the coordinator's budgets: it never counts such a fragment).
counted() {
    local total=0 worker port
    sleep 1.5   # counters reach the shared statistics when a session goes idle
    for worker in worker1 worker2; do
        port="$W1_PORT"; [ "$worker" = worker2 ] && port="$W2_PORT"
        total=$((total + $(cluster_psql "$TEST_ROOT/citus_$worker" "$port" -qAt -c "SET citus.override_table_visibility = off" \
            -c "SELECT coalesce(sum(seq_tup_read + coalesce(idx_tup_fetch, 0)), 0) FROM pg_stat_all_tables WHERE relname ~ '^(votes|adult)_[0-9]+$'")))
    done
    echo "$total"
}
sql -c "GRANT SELECT ON adult TO prober" -c "CREATE INDEX ON adult (age)" >/dev/null
before="$(counted)"
sql -c "SELECT dp_budget_set('dp_only', 10)" >/dev/null
sql_as dp_only dp-only-password -c "SELECT top_choice()" >/dev/null
sql_as prober analyst-password -c "SELECT voter, dp_quantile(voter, 0.5, 0, 200, 0.1) FROM votes GROUP BY voter" \
    -c "SELECT dp_argmax(choice, 1, 0.1) FROM votes WHERE region = 'r1'" \
    -c "SELECT dp_partition(0.1, 1e-6) FROM votes WHERE voter < 10" \
    -c "SELECT dp_argmax(choice, 1, 0.1) FROM votes WHERE choice IN (SELECT lower(left(sex, 1)) FROM adult WHERE age = 39)" \
    -c "SELECT dp_argmax(choice, 1, 0.1) FROM votes WHERE EXISTS (SELECT 1 FROM adult WHERE age = 17)" >/dev/null
assert_contains "$(error_of sql_as prober analyst-password -v VERBOSITY=verbose -c "SET citus.enable_repartition_joins = on" \
    -c "SELECT dp_argmax(a.choice, 1, 0.1) FROM votes a JOIN votes b ON a.region = b.choice")" \
    "the query contains a join that requires repartitioning" "a join Citus would repartition (its fragments carry no marker)"
assert_eq "$(counted)" "$before" "the workers counted nothing of the DP statements"
sql_as prober analyst-password -c "SELECT count(*) FROM votes" >/dev/null
[ "$(counted)" -gt "$before" ] || fail "a plain count is counted (the check can fail)"
# dp_fragment is public: it silences only reads, never a statement that writes (whose
# counts autovacuum needs).
sql -c "CREATE TABLE mine AS SELECT x FROM generate_series(1, 100) x" -c "GRANT ALL ON mine TO prober" >/dev/null
sql_as prober analyst-password -c "DELETE FROM mine WHERE dp_fragment(x <= 60)" >/dev/null
sleep 1.5
assert_eq "$(sql -c "SELECT n_tup_del FROM pg_stat_user_tables WHERE relname = 'mine'")" "60" "a DELETE through dp_fragment is counted"
# The calls Citus sends to the workers as text resolve to ours (the second and third
# Citus red teams ran their own overloads there, with the rows, as the owner of a SECURITY
# DEFINER function): ours have one fixed signature each, a function of one of their names
# that is not ours refuses the statement before it is charged (it could make the call
# ambiguous), and the bounding hashes a key of a polymorphic hash (an enum's) by its text.
sql -c "GRANT CREATE ON SCHEMA public TO prober" -c "GRANT SELECT ON unit_votes TO prober" >/dev/null
assert_contains "$(error_of sql_as prober analyst-password -v VERBOSITY=verbose -c \
    "CREATE FUNCTION public.dp_fragment(boolean) RETURNS boolean LANGUAGE sql AS 'SELECT true'")" "42723: " \
    "the marker's one signature is taken"
spent_before="$(spent prober)"
for signature in "dp_fragment(m boolean, x integer DEFAULT 0)|boolean" "dp_unit_of_null(x integer DEFAULT 0)|bigint"; do
    IFS='|' read -r function result <<<"$signature"
    sql_as prober analyst-password -c "CREATE FUNCTION public.$function RETURNS $result LANGUAGE plpgsql AS
        \$\$ BEGIN RAISE NOTICE 'overload ran'; RETURN NULL; END \$\$" >/dev/null
    assert_contains "$(error_of sql_as prober analyst-password -v VERBOSITY=verbose -c "SELECT dp_argmax(choice, 1, 0.1) FROM unit_votes")" \
        "would stand for pg_exp_mech's own functions in the queries Citus sends to the workers" "$function"
    sql_as prober analyst-password -c "DROP FUNCTION public.${function%%(*}(boolean, integer)" >/dev/null 2>&1 || \
        sql_as prober analyst-password -c "DROP FUNCTION public.${function%%(*}(integer)" >/dev/null
done
assert_eq "$(spent prober)" "$spent_before" "refused before any charge"
sql <<'SQL' >/dev/null
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE moods(person int, m mood);
SELECT create_distributed_table('moods', 'person');
SECURITY LABEL FOR pg_exp_mech ON COLUMN moods.person IS 'privacy_unit';
INSERT INTO moods SELECT v % 10, (ARRAY['sad', 'ok', 'happy'])[1 + v % 3]::mood FROM generate_series(1, 60) v;
CREATE FUNCTION top_moods() RETURNS text LANGUAGE plpgsql SECURITY DEFINER
  AS $$ DECLARE r text; BEGIN SELECT dp_top_k_unknown_domain(m, 1, 1, 0.1, 1e-6)::text INTO r FROM moods; RETURN r; END $$;
GRANT EXECUTE ON FUNCTION top_moods() TO prober;
GRANT SELECT ON moods TO prober;
SQL
# (An exception, not a NOTICE: what is said below a DP aggregate does not reach a
# budgeted role.)
sql_as prober analyst-password -c "CREATE FUNCTION public.hashenumextended(v mood, seed bigint) RETURNS bigint LANGUAGE plpgsql AS
    \$\$ BEGIN RAISE EXCEPTION 'overload ran'; END \$\$" >/dev/null
out="$(sql_as prober analyst-password -c "SELECT top_moods()" -c "SELECT m, dp_quantile(person, 0.5, 0, 10, 0.1) FROM moods GROUP BY m" \
    -c "SELECT voter, dp_argmax(choice, 1, 0.1) FROM votes GROUP BY voter" -c "SELECT dp_argmax(choice, 1, 0.1) FROM unit_votes" 2>&1 || true)"
if grep -qE "overload ran|ERROR" <<<"$out"; then fail "an overload ran on a worker, or an error:\n$out"; fi
sql -c "REVOKE CREATE ON SCHEMA public FROM prober" >/dev/null
# Other references to a grouping column read the group's key, as on one server.
out="$(sql_as prober analyst-password -c "SELECT voter::text || '!', dp_quantile(voter, 0.5, 0, 300, 0.1) FROM votes WHERE voter > 100 GROUP BY voter ORDER BY 1" 2>&1)" \
    || fail "a grouping column used again: $out"
assert_eq "$(cut -d'|' -f1 <<<"$out" | tr '\n' ' ')" "101! 102! " "the group keys"
# A function of the rows that starts a distributed query from a worker is refused there,
# even where the analyst allows nested execution: its fragments would be counted.
sql_as prober analyst-password -c "CREATE FUNCTION public.nested(int) RETURNS bool LANGUAGE plpgsql STABLE AS
    \$\$ BEGIN RETURN EXISTS (SELECT 1 FROM votes WHERE voter = \$1); END \$\$" >/dev/null 2>&1 || \
    sql -c "CREATE FUNCTION public.nested(int) RETURNS bool LANGUAGE plpgsql STABLE AS
    \$\$ BEGIN RETURN EXISTS (SELECT 1 FROM votes WHERE voter = \$1); END \$\$" >/dev/null
# (Where privacy units are declared, as here, the planner refuses a function of the rows
# unless its owner declares that it reads no table: declared here, untruly, to get past.)
sql -c "ALTER FUNCTION public.nested(int) OWNER TO postgres" \
    -c "SECURITY LABEL FOR pg_exp_mech ON FUNCTION public.nested(int) IS 'reads_no_tables'" >/dev/null
assert_contains "$(error_of sql_as prober analyst-password -v VERBOSITY=verbose -c "SET citus.propagate_set_commands = 'local'" \
    -c "BEGIN" -c "SET LOCAL citus.allow_nested_distributed_execution = on" \
    -c "SELECT dp_argmax(choice, 1, 0.1) FROM votes WHERE voter < 20 AND nested(voter)")" \
    "a row under a differentially private aggregate raised an error; its text, which can name a value of the row, is withheld" \
    "nested execution from a fragment"
# The fragment's error depends on its rows: its text is in the worker's log only.
grep -q "is withheld: cannot execute a distributed query from a query on a shard" "$TEST_ROOT"/citus_worker*/server.log \
    || fail "nested execution from a fragment: the worker's log"
# pg_stat_statements on a worker: a fragment's rows (the rows it shipped) are not kept.
fragment_rows() {
    cluster_psql "$TEST_ROOT/citus_worker1" "$W1_PORT" -qAt -c \
        "SELECT coalesce(sum(rows), 0) FROM pg_stat_statements WHERE query LIKE '%$1%' AND query NOT LIKE '%pg_stat_statements%'"
}
assert_eq "$(fragment_rows dp_fragment)" "0" "the workers' pg_stat_statements keep no row count of a DP fragment"
[ "$(fragment_rows 'count(')" -gt 0 ] || fail "a plain count's rows are kept (the check can fail)"
on_worker() { PGPASSWORD=x "$(pg_bindir)/psql" -X -qAt -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -h 127.0.0.1 -p "$W1_PORT" -U "$@"; }
shard="$(sql -c "SELECT shard_name FROM citus_shards WHERE table_name = 'votes'::regclass AND nodeport = $W1_PORT LIMIT 1")"
for role in analyst0 postgres; do
    for table in votes "$shard"; do
        assert_contains "$(error_of on_worker "$role" -d postgres -c "SELECT dp_argmax(choice, 1, 1.0) FROM $table")" \
            '0A000: differentially private aggregates run on the Citus coordinator only' "$role on a worker, over $table"
    done
done
assert_contains "$(error_of on_worker dp_only -d postgres -c "SELECT count(*) FROM $shard")" "42501: permission denied" \
    "a role that may not read the table cannot read its shards"
# Citus's helpers give an analyst the partial state of rows the analyst may read, never a
# final answer: only a combine that the planner hook planned, and so charged, finalizes.
partial="worker_binary_partial_agg('dp_quantile(float8, float8, float8, float8, float8)'::regprocedure, ROW(voter::float8, 0.5::float8, 0::float8, 200::float8, 1::float8))"
assert_contains "$(error_of sql_as analyst0 analyst-password -v VERBOSITY=verbose -c \
    "SELECT coord_binary_combine_agg('dp_quantile(float8, float8, float8, float8, float8)'::regprocedure, s, NULL::float8) FROM (SELECT $partial AS s FROM votes WHERE voter = 1) x")" \
    "0A000: Citus's combine of dp_quantile in this plan was not planned by pg_exp_mech's planner hook" "a home-made combine"
assert_contains "$(error_of sql_as analyst0 analyst-password -v VERBOSITY=verbose -c \
    "SELECT coord_binary_combine_agg('dp_quantile(float8, float8, float8, float8, float8)'::regprocedure, NULL::bytea, NULL::float8)")" \
    "0A000: Citus's combine of dp_quantile" "a home-made combine of nothing"
# A combine as a window function ran our deserial function on the analyst's bytes (a
# crafted item image crashed the server, the second Citus red team): only a combine the
# planner hook planned, or PostgreSQL's own, may deserialize.
for aggregate in "dp_quantile(float8, float8, float8, float8, float8)|NULL::float8|dp_quantile_deserialize" \
    "dp_argmax(anyelement, float8, float8)|NULL::text|dp_item_scores_deserialize"; do
    IFS='|' read -r signature result function <<<"$aggregate"
    assert_contains "$(error_of sql_as analyst0 analyst-password -v VERBOSITY=verbose -c \
        "SELECT coord_binary_combine_agg('$signature'::regprocedure, s, $result) OVER () FROM (VALUES ('\\x00'::bytea)) x(s)")" \
        "0A000: $function (the deserial function of a partial aggregation's combine) can only be called as part of an aggregate" \
        "a combine used as a window function"
done
# Citus's combines carry no trace of their calls: two calls of one aggregate with
# different parameters are refused before they run (they were matched in order, which a
# window's ORDER BY changed, and the mismatch failed only where rows existed).
for filter in "voter = 7" "voter = 7000"; do
    assert_contains "$(error_of sql_as analyst0 analyst-password -v VERBOSITY=verbose -c \
        "SELECT dp_quantile(voter, 0.5, 0, 100, 0.1), rank() OVER (ORDER BY dp_quantile(voter, 0.5, 0, 100, 0.2)) FROM votes WHERE $filter")" \
        "0A000: over Citus tables, the calls of dp_quantile in one statement must have the same parameters" "where $filter"
done
# A SQL function that PostgreSQL inlines after the planner hook ran never answers: Citus
# itself refuses this shape today; past it, the plan-start check would.
sql -c "CREATE FUNCTION top_inlined() RETURNS TABLE(top text) LANGUAGE sql STABLE AS 'SELECT dp_argmax(choice, 1, 0.4) FROM votes'" >/dev/null
assert_contains "$(error_of sql -v VERBOSITY=verbose -c "SELECT * FROM top_inlined()")" "0A000: " "through an inlined function"
# ORDER BY inside a DP call is refused before Citus plans, as on one server (its sort
# keys were read as arguments of another form: a panic, XX000).
for call in "dp_argmax(choice, 1, 0.4 ORDER BY choice)" "dp_quantile(voter, 0.5, 0, 100, 0.4 ORDER BY voter)"; do
    assert_contains "$(error_of sql_as prober analyst-password -v VERBOSITY=verbose -c "SELECT $call FROM votes")" \
        "0A000: ORDER BY inside ${call%%(*}(...) is not accepted" "$call"
done
# A condition that calls a function that is not leakproof stays above a DP view over a
# distributed table, as on one server (test_side_channels, section 7): its calls do not
# count the rows of the view's groups (33, 33, 6 and 5: the view shows which regions
# have rows, its GROUP BY being the DBA's choice). Citus plans such a view as a subplan
# whose released groups the condition filters, with or without the planner hook's
# LIMIT ALL (measured): this guards that plan.
sql -c "CREATE FUNCTION tick() RETURNS text LANGUAGE plpgsql STABLE AS \$\$ BEGIN RAISE NOTICE 'tick'; RETURN ''; END \$\$" \
    -c "CREATE VIEW region_top WITH (security_barrier) AS SELECT region, dp_argmax(choice, 1, 0.1) AS top FROM votes GROUP BY region" \
    -c "GRANT SELECT ON region_top TO prober" >/dev/null
ticks() {
    sql_as prober analyst-password -c "SELECT count(*) FROM region_top WHERE region = '$1' AND region <> tick()" 2>&1 \
        | grep -c "NOTICE:.*tick" || true
}
one="$(ticks r4)"
for key in r1 r2 r3; do
    assert_eq "$(ticks "$key")" "$one" "the analyst's function's calls over Citus, key $key"
done
echo "citus: all checks passed"
