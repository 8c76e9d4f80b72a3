# Metering from the plan, tried as a hostile analyst over TCP (issue 11, points 1-4):
# a budgeted login role tries to get rows, row counts or answers without paying, and
# grouped queries are charged once (parallel composition).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO"
new_cluster metering "max_parallel_workers_per_gather = 2"
sql -f scripts/load_adult.sql
sql <<'SQL'
CREATE ROLE analyst LOGIN PASSWORD 'analyst-password';
CREATE ROLE watched LOGIN PASSWORD 'watched-password';
-- A DBA's grouped DP view (a security barrier: see below for one that is not).
CREATE VIEW hours_by_occupation_safe WITH (security_barrier) AS
  SELECT occupation, dp_quantile(hours_per_week, 0.5, 0, 100, 0.5) AS median
    FROM adult GROUP BY occupation;
-- A view over the safe one, itself no barrier: nothing of the analyst's passes the inner one.
CREATE VIEW hours_wrapped AS SELECT * FROM hours_by_occupation_safe;
-- The DBA's own function under the aggregate: it shows when rows are read.
CREATE FUNCTION rows_read(x text) RETURNS boolean LANGUAGE plpgsql STABLE AS
  $$ BEGIN RAISE NOTICE 'row read'; RETURN true; END $$;
CREATE VIEW watched_rows WITH (security_barrier) AS
  SELECT sex, dp_argmax(race, 1, 0.5) FROM adult WHERE rows_read(sex) GROUP BY sex;
CREATE VIEW top_race WITH (security_barrier) AS SELECT dp_argmax(race, 1, 0.25) FROM adult;
CREATE VIEW top_occupations WITH (security_barrier) AS
  SELECT dp_top_k_unknown_domain(occupation, 1, 3, 0.5, 1e-6) FROM adult;
CREATE TABLE many_groups AS SELECT i % 10000 AS grp, (i % 1000)::float8 AS v FROM generate_series(1, 200000) i;
ANALYZE many_groups;
CREATE VIEW many_medians WITH (security_barrier) AS
  SELECT grp, dp_quantile(v, 0.5, 0, 1e5, 1) FROM many_groups GROUP BY grp;
CREATE VIEW kept_occupations WITH (security_barrier) AS
  SELECT occupation, dp_quantile(hours_per_week, 0.5, 0, 100, 0.5) AS median
    FROM adult GROUP BY occupation HAVING dp_partition(0.5, 1e-6);
GRANT SELECT ON hours_by_occupation_safe, hours_wrapped, watched_rows,
  top_race, top_occupations, many_medians, kept_occupations TO analyst, watched;
SELECT dp_budget_set('analyst', 100, 1e-5);
SELECT dp_budget_set('watched', 100, 1e-5);
-- auto_explain with log_analyze instruments every plan of this role.
ALTER ROLE watched SET session_preload_libraries = 'auto_explain';
ALTER ROLE watched SET auto_explain.log_min_duration = 0;
ALTER ROLE watched SET auto_explain.log_analyze = on;
SQL
analyst() { sql_as analyst analyst-password -v VERBOSITY=verbose "$@"; }
spent() { sql -c "SELECT epsilon_spent || ' ' || delta_spent FROM dp_budget WHERE role = '$1'::regrole"; }
lines() { sql -c "SELECT count(*) FROM dp_ledger WHERE role = '$1'::regrole AND kind = 'charge'"; }
first_error() { grep -m1 -oP '^(psql:[^:]*:[0-9]+: )?ERROR:  \K[0-9A-Z]{5}: .*' || true; }
PEEK="CREATE FUNCTION pg_temp.peek(x text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE
  AS \$\$ BEGIN RAISE NOTICE 'item=%', x; RETURN false; END \$\$;"

echo "1. no peeking under the aggregate; no group is charged like any group"
REFUSED="is refused: it computes differentially private aggregates but is not a security barrier, so functions of a querying role could see the rows under them"
out="$(sql -v VERBOSITY=verbose -c "CREATE VIEW hours_by_occupation AS SELECT occupation, dp_quantile(hours_per_week, 0.5, 0, 100, 0.5) FROM adult GROUP BY occupation" 2>&1 || true)"
assert_contains "$(first_error <<<"$out")" "55000: view \"hours_by_occupation\" $REFUSED; create it WITH (security_barrier), or ALTER VIEW hours_by_occupation SET (security_barrier = true)" "a DP view without security_barrier cannot be made"
out="$(sql -v VERBOSITY=verbose -c "ALTER VIEW hours_by_occupation_safe RESET (security_barrier)" 2>&1 || true)"
assert_contains "$(first_error <<<"$out")" "55000: view \"hours_by_occupation_safe\" $REFUSED" "nor can a barrier be dropped"
# One made behind the extension's back (a catalog edit) is still refused to the analyst.
sql -c "CREATE VIEW hours_by_occupation WITH (security_barrier) AS SELECT occupation, dp_quantile(hours_per_week, 0.5, 0, 100, 0.5) FROM adult GROUP BY occupation" \
    -c "UPDATE pg_class SET reloptions = NULL WHERE oid = 'hours_by_occupation'::regclass" \
    -c "GRANT SELECT ON hours_by_occupation TO analyst" >/dev/null
out="$(analyst -c "$PEEK" -c 'SELECT * FROM hours_by_occupation WHERE pg_temp.peek(occupation)' 2>&1 || true)"
assert_contains "$(first_error <<<"$out")" "55000: view \"hours_by_occupation\" $REFUSED" "a view without security_barrier, at query time"
assert_eq "$(grep -c 'item=' <<<"$out" || true)" 0 "no NOTICE before the refusal"
assert_eq "$(spent analyst)" "0 0" "refused, not charged"
# A SQL function with a BEGIN ATOMIC body is not parse-analysed again when it runs: the
# barrier of the view it reads is what stops the analyst's function.
ATOMIC="CREATE FUNCTION pg_temp.atomic() RETURNS bigint LANGUAGE sql
  BEGIN ATOMIC SELECT count(*) FROM hours_by_occupation_safe WHERE pg_temp.peek(occupation); END;"
out="$(analyst -c "$PEEK" -c "$ATOMIC" -c 'SELECT pg_temp.atomic()' 2>&1)"
assert_eq "$(grep -c 'item=' <<<"$out")" 15 "BEGIN ATOMIC: one NOTICE per released group"
assert_eq "$(spent analyst)" "0.5 0" "and charged"
for view in hours_by_occupation_safe hours_wrapped; do
    out="$(analyst -c "$PEEK" -c "SELECT * FROM $view WHERE pg_temp.peek(occupation)" 2>&1)"
    # The function sees the 15 released groups, not the 32,561 rows under them.
    assert_eq "$(grep -c 'item=' <<<"$out")" 15 "$view: NOTICEs, one per released group"
done
assert_eq "$(spent analyst)" "1.5 0" "two queries whose filter keeps no group, 0.5 each"
assert_eq "$(analyst -c "SELECT count(*) FROM hours_by_occupation_safe WHERE occupation = 'no such job'")" 0 "no group"
assert_eq "$(analyst -c "SELECT count(*) FROM hours_by_occupation_safe WHERE occupation = 'Sales'")" 1 "one group"
assert_eq "$(spent analyst)" "2.5 0" "charged the same with and without a matching group"
assert_eq "$(lines analyst)" 5 "one ledger line per query"
# A refusal comes before any row is read, whatever the data.
# The DBA's function's NOTICEs go to the server's log only (said below a DP aggregate,
# they are said of its rows: test_side_channels, section 9), counted there.
sql -c "ALTER SYSTEM SET log_min_messages = notice" -c "SELECT pg_reload_conf()" >/dev/null
rows_read() {
    local before after
    before="$(grep -c 'row read' "$CLUSTER/server.log" || true)"
    analyst -c "$1" >"$CLUSTER/client.out" 2>&1 || true
    after="$(grep -c 'row read' "$CLUSTER/server.log" || true)"
    echo "$((after - before))"
}
sql -c "SELECT dp_budget_set('analyst', 2.75, 1e-5)" >/dev/null
for filter in "sex = 'nobody'" "true"; do
    assert_eq "$(rows_read "SELECT * FROM watched_rows WHERE $filter")" 0 "no row read before the refusal ($filter)"
    assert_contains "$(first_error <"$CLUSTER/client.out")" \
        "53400: privacy budget of role \"analyst\" exceeded: dp_argmax needs epsilon 0.5, 0.25 of 2.75 remain" "refused ($filter)"
done
sql -c "SELECT dp_budget_set('analyst', 100, 1e-5)" >/dev/null
assert_eq "$(rows_read "SELECT count(*) FROM watched_rows")" 32561 "the DBA's own function reads the rows once paid"
assert_eq "$(grep -c 'row read' "$CLUSTER/client.out" || true)" 0 "its NOTICEs do not reach the analyst"
sql -c "ALTER SYSTEM RESET log_min_messages" -c "SELECT pg_reload_conf()" >/dev/null
assert_eq "$(spent analyst)" "3 0" "paid once"

echo "2. no instrumented execution of a plan with DP aggregates"
PREFIX="42501: EXPLAIN ANALYZE (or any instrumented execution) of a plan with differentially private aggregates is not allowed for role"
for statement in \
    "EXPLAIN ANALYZE SELECT * FROM top_race" \
    "PREPARE p AS SELECT * FROM hours_by_occupation_safe WHERE occupation = 'no such job'; EXPLAIN (ANALYZE, TIMING OFF) EXECUTE p" \
    "EXPLAIN ANALYZE CREATE TEMP TABLE copy AS SELECT * FROM top_race"; do
    out="$(analyst -c "$statement" 2>&1 || true)"
    assert_contains "$(first_error <<<"$out")" "$PREFIX \"analyst\"" "$statement"
done
# A SQL function that PostgreSQL inlines after the planner hook ran: refused to a
# budgeted role however it runs.
for run in "EXPLAIN ANALYZE" ""; do
    statement="CREATE FUNCTION pg_temp.f() RETURNS SETOF hours_by_occupation_safe LANGUAGE sql STABLE AS 'SELECT * FROM hours_by_occupation_safe'; $run SELECT * FROM pg_temp.f()"
    out="$(analyst -c "$statement" 2>&1 || true)"
    assert_contains "$(first_error <<<"$out")" "0A000: for a role with a privacy budget, dp_quantile was planned out of pg_exp_mech's sight (inside a SQL function that PostgreSQL inlines" "$statement"
done
out="$(sql_as watched watched-password -v VERBOSITY=verbose -c 'SELECT * FROM top_race' 2>&1 || true)"
assert_contains "$(first_error <<<"$out")" "$PREFIX \"watched\"" "auto_explain with log_analyze"
assert_contains "$(analyst -c 'EXPLAIN SELECT * FROM top_race')" "Seq Scan on adult" "plain EXPLAIN runs nothing"
assert_eq "$(spent analyst)" "3 0" "nothing charged for the refusals"
assert_eq "$(spent watched)" "0 0" "nothing charged to the watched role"

echo "3. parallel plans: parameters from the plan, the documented answer on empty input"
PARALLEL="SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0;"
assert_contains "$(analyst -c "$PARALLEL" -c 'EXPLAIN SELECT * FROM top_race')" "Partial Aggregate" "a parallel plan"
assert_eq "$(analyst -c "$PARALLEL" -c 'SELECT * FROM top_race')" "White" "answered in a parallel plan"
out="$(analyst -c "$PARALLEL" -c 'SELECT dp_quantile(age, 0.5, 0, 100, 0.25) IS NOT NULL FROM adult' 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "42501: permission denied for table adult" "the table itself stays closed"
sql -c "CREATE VIEW empty_median WITH (security_barrier) AS SELECT dp_quantile(age, 0.5, 0, 100, 0.25) AS m FROM adult WHERE age > 1000" \
    -c "GRANT SELECT ON empty_median TO analyst" >/dev/null
assert_contains "$(analyst -c "$PARALLEL" -c 'EXPLAIN SELECT * FROM empty_median')" "Gather" "a parallel plan over no row"
assert_eq "$(analyst -c "$PARALLEL" -c 'SELECT m IS NOT NULL AND m BETWEEN 0 AND 100 FROM empty_median')" "t" "a grid point, not NULL"
assert_eq "$(spent analyst)" "3.5 0" "both charged"

echo "4. GROUP BY is charged once, whatever the number of groups"
assert_eq "$(analyst -c 'SELECT count(*) FROM many_medians')" 10000 "10^4 groups"
assert_eq "$(spent analyst)" "4.5 0" "epsilon 1, once"
assert_eq "$(lines analyst)" 9 "one ledger line for the 10^4 groups"
# A cursor closed after one FETCH pays what its plan started.
analyst -c 'BEGIN' -c 'DECLARE c CURSOR FOR SELECT * FROM many_medians' -c 'FETCH 1 FROM c' -c 'CLOSE c' -c 'COMMIT' >/dev/null
assert_eq "$(spent analyst)" "5.5 0" "a cursor"
# Private keys: partition selection in HAVING, epsilon 0.5 + 0.5 and delta 1e-6 in all.
kept="$(analyst -c 'SELECT count(*) FROM kept_occupations')"
[ "$kept" -ge 12 ] && [ "$kept" -le 15 ] || fail "kept occupations: $kept"
assert_eq "$(spent analyst)" "6.5 1e-06" "a grouped query with dp_partition"
# delta is budgeted: 1e-5 allows ten 1e-6 releases in all.
for _ in $(seq 9); do analyst -c 'SELECT * FROM top_occupations' >/dev/null; done
out="$(analyst -c 'SELECT * FROM top_occupations' 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "53400: privacy budget of role \"analyst\" exceeded: dp_top_k_unknown_domain needs delta 1e-06, 0 of 1e-05 remain" "delta exhausted"
# Window use would release one answer per frame: refused to a budgeted role.
sql -c "CREATE VIEW windowed WITH (security_barrier) AS SELECT dp_argmax(race, 1, 0.5) OVER (PARTITION BY sex) FROM adult" \
    -c "GRANT SELECT ON windowed TO analyst" >/dev/null
out="$(analyst -c 'SELECT * FROM windowed LIMIT 1' 2>&1 || true)"
assert_contains "$(first_error <<<"$out")" "42501: dp_argmax cannot be used as a window function by role \"analyst\"" "window use"
echo "metering holds"
