# The red team's side channels (issue 19), tried as a budgeted login role over TCP on a
# cluster set up as README's DBA guide says (require_budget on, no REVOKE of any
# statistics view). Each section failed on the code before its fix.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO"
new_cluster side_channels "shared_preload_libraries = 'pg_exp_mech, pg_stat_statements'" \
    "track_functions = 'all'" "pg_exp_mech.require_budget = on" "autovacuum = off" \
    "max_prepared_transactions = 4"
sql -f scripts/load_adult.sql
sql <<'SQL'
CREATE EXTENSION pg_stat_statements;
CREATE ROLE analyst LOGIN PASSWORD 'analyst-password';
SELECT dp_budget_set('analyst', 1000, 1e-3);
CREATE INDEX adult_native_country_idx ON adult (native_country);
-- A DBA's function under the aggregate: its calls are counted per row with track_functions.
CREATE FUNCTION counted(x text) RETURNS boolean LANGUAGE plpgsql STABLE AS $$ BEGIN RETURN true; END $$;
CREATE VIEW v_country_part WITH (security_barrier) AS
  SELECT native_country, dp_quantile(age, 0.5, 0, 100, 0.1) AS med
    FROM adult WHERE counted(native_country) GROUP BY native_country HAVING dp_partition(0.1, 1e-6);
CREATE VIEW v_cs WITH (security_barrier) AS
  SELECT native_country, dp_quantile(age, 0.5, 0, 100, current_setting('dp.eps')::float8) AS med
    FROM adult GROUP BY native_country HAVING dp_partition(0.1, 1e-6);
CREATE VIEW v_cs_all WITH (security_barrier) AS
  SELECT native_country, dp_quantile(age, 0.5, 0, 100, current_setting('dp.eps')::float8) AS med
    FROM adult GROUP BY native_country;
CREATE VIEW v_country WITH (security_barrier) AS
  SELECT native_country, dp_quantile(age, 0.5, 0, 100, 0.1) AS med
    FROM adult GROUP BY native_country HAVING dp_partition(0.1, 1e-6);
CREATE VIEW v_marital WITH (security_barrier) AS
  SELECT dp_argmax(marital_status, 1, 0.1) AS most_common FROM adult;
-- One salary beyond double precision's range, in department d3.
CREATE TABLE salaries(dept text, pay numeric);
INSERT INTO salaries SELECT 'd' || (i % 3), 1000 + i FROM generate_series(1, 300) i;
INSERT INTO salaries VALUES ('d3', 1e400), ('d3', 2000), ('d4', 1e-400), ('d4', -1e400);
CREATE VIEW v_pay WITH (security_barrier) AS
  SELECT dept, dp_quantile(pay, 0.5, 0, 10000, 1) AS median FROM salaries GROUP BY dept;
CREATE VIEW v_top_dept WITH (security_barrier) AS
  SELECT dp_argmax(dept, pay, 1, 5000) AS dept FROM salaries;
GRANT SELECT ON v_country_part, v_country, v_cs, v_cs_all, v_marital, v_pay, v_top_dept TO analyst;
ALTER ROLE analyst SET dp.eps = '0.1';
SQL
analyst() { sql_as analyst analyst-password -v VERBOSITY=verbose "$@"; }
spent() { sql -c "SELECT epsilon_spent FROM dp_budget WHERE role = 'analyst'::regrole"; }
first_error() { grep -m1 -oP '^(psql:[^:]*:[0-9]+: )?ERROR:  \K[0-9A-Z]{5}: .*' || true; }

echo "1. statistics counters do not count what a DP plan touched"
INDEX_SCAN="SET enable_seqscan = off; SET enable_bitmapscan = off;"
# Every per-transaction counter of the table and its index, read in the DP query's
# transaction, for a key with 1 row, 13 rows and 0 rows (and one with 27,000).
xact_counters() {
    analyst -c "$INDEX_SCAN" -f - <<SQL
BEGIN;
SELECT count(*) FROM v_country_part WHERE native_country = '$1';
SELECT concat_ws(' ', pg_stat_get_xact_numscans(r), pg_stat_get_xact_tuples_returned(r),
         pg_stat_get_xact_tuples_fetched(r), pg_stat_get_xact_blocks_fetched(r),
         pg_stat_get_xact_blocks_hit(r))
  FROM unnest(ARRAY['adult'::regclass, 'adult_native_country_idx'::regclass]) r;
SELECT coalesce(pg_stat_get_xact_function_calls('counted(text)'::regprocedure), 0);
COMMIT;
SQL
}
assert_contains "$(analyst -c "$INDEX_SCAN EXPLAIN (COSTS OFF) SELECT * FROM v_country_part WHERE native_country = 'Holand-Netherlands'")" \
    "Index Scan using adult_native_country_idx" "the red team's plan"
# (The first line, how many groups were released, is the answer.)
quiet="$(xact_counters Holand-Netherlands | sed 1d)"
for key in Holand-Netherlands Hungary Atlantis United-States; do
    assert_eq "$(xact_counters "$key" | sed 1d)" "$quiet" "per-transaction counters after the key $key"
done
assert_eq "$(sed -n 1,2p <<<"$quiet" | tr '\n' ' ')" "0 0 0 0 0 0 0 0 0 0 " "the table's and the index's counters do not move"
assert_eq "$(sed -n 3p <<<"$quiet")" "0" "the DBA's function under the aggregate: no calls counted"

# Cumulative views (after the statistics are flushed) and the database's totals, as
# differences over one DP query; temporary files of a grouped query that spills.
flushed() {
    analyst -c "$INDEX_SCAN" -c "SET work_mem = '64kB'" \
        -c "SELECT count(*) FROM v_country_part WHERE native_country = '$1'" \
        -c "SELECT count(*) FROM v_cs_all" -c "SELECT pg_stat_force_next_flush()" >/dev/null
    sql -c "SELECT concat_ws(' ',
        (SELECT concat_ws(' ', seq_scan, seq_tup_read, idx_scan, idx_tup_fetch) FROM pg_stat_user_tables WHERE relname = 'adult'),
        (SELECT concat_ws(' ', idx_scan, idx_tup_read, idx_tup_fetch) FROM pg_stat_user_indexes WHERE indexrelname = 'adult_native_country_idx'),
        (SELECT concat_ws(' ', heap_blks_read, heap_blks_hit, idx_blks_read, idx_blks_hit) FROM pg_statio_user_tables WHERE relname = 'adult'),
        (SELECT concat_ws(' ', temp_files, temp_bytes) FROM pg_stat_database WHERE datname = current_database()))"
}
before="$(flushed Holand-Netherlands)"
for key in Holand-Netherlands United-States; do
    assert_eq "$(flushed "$key")" "$before" "pg_stat_user_tables, pg_stat_user_indexes, pg_statio_user_tables, pg_stat_database temp files after the key $key"
done
# pg_stat_database's tuple and block totals, read by the analyst around one DP query in
# one fresh session: the same difference whatever the key.
database() {
    local totals="SELECT concat_ws(' ', tup_returned, tup_fetched, blks_read, blks_hit) FROM pg_stat_database WHERE datname = current_database()"
    analyst -c "$INDEX_SCAN" -c "$totals" -c "SELECT count(*) FROM v_country_part WHERE native_country = '$1'" \
        -c "SELECT pg_stat_force_next_flush()" -c "SELECT pg_stat_clear_snapshot()" -c "$totals" \
        | awk 'NR == 1 { split($0, a, " ") } END { split($0, b, " "); print b[1] - a[1], b[2] - a[2], b[3] - a[3], b[4] - a[4] }'
}
database Holand-Netherlands >/dev/null
rare="$(database Holand-Netherlands)"
for key in Hungary United-States Holand-Netherlands; do
    assert_eq "$(database "$key")" "$rare" "pg_stat_database's tuple and block totals over a DP query on the key $key"
done
# A parallel worker under a DP aggregate above its Gather (the worker's own plan holds no
# DP aggregate), found by the red team: its sort spills to temporary files as its share
# of the filtered rows grows, and its scans are counted.
PARALLEL="SET max_parallel_workers_per_gather = 2; SET min_parallel_table_scan_size = 0;
  SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET parallel_leader_participation = off;
  SET enable_indexscan = off; SET enable_bitmapscan = off; SET work_mem = '64kB';"
parallel_query="SELECT count(*) FROM v_country WHERE native_country IN ('Scotland', 'KEY', 'Nowhere')"
assert_contains "$(analyst -c "$PARALLEL" -c "EXPLAIN (COSTS OFF) ${parallel_query/KEY/Hungary}")" "Parallel Seq Scan" "a parallel plan"
parallel_counters() {
    analyst -c "$PARALLEL" -c "${parallel_query/KEY/$1}" >/dev/null
    sleep 1   # the workers report as they exit
    sql -c "SELECT concat_ws(' ', seq_scan, seq_tup_read, idx_scan, idx_tup_fetch, (SELECT temp_files || ' ' || temp_bytes FROM pg_stat_database WHERE datname = current_database())) FROM pg_stat_user_tables WHERE relname = 'adult'"
}
before="$(parallel_counters Holand-Netherlands)"
for key in Nowhere2 United-States Holand-Netherlands; do
    assert_eq "$(parallel_counters "$key")" "$before" "parallel workers' counters and temporary files after the key $key"
done
# Temporary files closed by a ROLLBACK or an error, after the executor's end was skipped.
temp_bytes() { sql -c "SELECT temp_files || ' ' || temp_bytes FROM pg_stat_database WHERE datname = current_database()"; }
SPILL="SET work_mem = '64kB'; SET enable_hashagg = off; SET enable_indexscan = off; SET enable_bitmapscan = off;"
before="$(temp_bytes)"
for key in A Ma V Z; do
    analyst -c "$SPILL" -c "BEGIN" -c "DECLARE c CURSOR FOR SELECT * FROM v_country WHERE native_country >= '$key'" \
        -c "FETCH 1 FROM c" -c "ROLLBACK" >/dev/null
    analyst -c "$SPILL" -c "SELECT 1 / (med * 0)::int FROM v_country WHERE native_country IN ('$key', 'United-States')" >/dev/null 2>&1 || true
    # A savepoint rolled back after the cursor spilled, then the transaction.
    analyst -v ON_ERROR_STOP=0 -c "$SPILL" -c "BEGIN" \
        -c "DECLARE c CURSOR FOR SELECT * FROM v_country WHERE native_country >= '$key'" \
        -c "FETCH 1 FROM c" -c "SAVEPOINT s" -c "SELECT 1 / 0" -c "ROLLBACK TO s" -c "SELECT 1" \
        -c "ROLLBACK" >/dev/null 2>&1
    sleep 0.2
    assert_eq "$(temp_bytes)" "$before" "temporary files after a ROLLBACK, an error and a savepoint, key $key"
done

# pg_stat_statements: no buffers, no temporary blocks for the DP statements.
sql -c "SELECT pg_stat_statements_reset()" >/dev/null
analyst -c "SET work_mem = '64kB'" -c "SELECT count(*) FROM v_cs_all" \
    -c "SELECT count(*) FROM v_country_part WHERE native_country = 'United-States'" >/dev/null
assert_eq "$(sql -c "SELECT count(*) || ' ' || sum(shared_blks_hit + shared_blks_read + temp_blks_written + local_blks_hit)
                       FROM pg_stat_statements WHERE query LIKE '%FROM v_c%'")" "2 0" "pg_stat_statements"
# A superuser (who can read the table anyway) is counted as before.
sql -c "SELECT count(*) FROM v_country_part WHERE native_country = 'United-States'" -c "SELECT pg_stat_force_next_flush()" >/dev/null
assert_eq "$(sql -c "SELECT (seq_scan + coalesce(idx_scan, 0)) > 0 FROM pg_stat_user_tables WHERE relname = 'adult'")" "t" "a superuser's scans are counted"

echo "2. numeric values never raise an error"
for filter in "" "WHERE dept = 'd3'" "WHERE dept = 'd4'" "WHERE dept = 'd9'"; do
    out="$(analyst -c "SELECT dept, median, pg_typeof(median) FROM v_pay $filter" 2>&1)" || fail "numeric quantile $filter:\n$out"
done
assert_contains "$(analyst -c "SELECT pg_typeof(median) FROM v_pay WHERE dept = 'd1'")" "numeric" "numeric quantiles answer in numeric"
out="$(analyst -c "SELECT * FROM v_top_dept" 2>&1)" || fail "numeric scores:\n$out"

echo "3. a setting changed between groups: no error, whatever the hidden keys"
for keys in "'Germany', 'Hungary'" "'Germany', 'Atlantis'" "'United-States', 'Mexico'"; do
    for value in 0.2 abc; do
        out="$(analyst -c "SET dp.eps = '0.1'" -c "SET enable_hashagg = off" \
            -c "SELECT native_country, med, set_config('dp.eps', '$value', false) FROM v_cs WHERE native_country IN ($keys)" 2>&1)" \
            || fail "set_config('dp.eps', '$value') between the groups $keys:\n$out"
    done
done
assert_contains "$(analyst -c "SET dp.eps = '0.1'" -c "EXPLAIN (COSTS OFF) SELECT * FROM v_cs")" "InitPlan" "epsilon, an init-plan"
# The settings the aggregates read cannot change during a DP plan: refused at the first
# row the plan outputs, before anything else can read them.
for keys in "'Germany', 'Hungary'" "'Germany', 'Atlantis'"; do
    out="$(analyst -c "SET dp.eps = '0.1'" -c "SET enable_hashagg = off" \
        -c "SELECT native_country, set_config('pg_exp_mech.quantile_grid_size', '7', false) FROM v_cs_all WHERE native_country IN ($keys)" 2>&1 || true)"
    assert_eq "$(first_error <<<"$out")" "55P02: invalid value for parameter \"pg_exp_mech.quantile_grid_size\": 7" "grid size changed during the plan ($keys)"
    assert_contains "$out" "the aggregates read it once, when their plan starts" "the detail says why"
done

echo "4. a DP view in a recursive query is metered per loop, not an internal error"
before="$(spent)"
out="$(analyst -c "WITH RECURSIVE r(n, x) AS (SELECT 1, ''::text UNION ALL
      SELECT n + 1, (SELECT most_common FROM v_marital WHERE n > 0) FROM r WHERE n < 4)
    SELECT count(*), count(x) FROM r" 2>&1)" || fail "recursive CTE: $out"
assert_eq "$out" "4|4" "the first row and three answers"
assert_eq "$(sql -c "SELECT round(($(spent) - $before)::numeric, 6)")" "0.300000" "three loops of 0.1"

echo "5. budgets name real roles"
out="$(sql -v VERBOSITY=verbose -c "SELECT dp_budget_set(0::regrole, 1)" 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "42704: role with OID 0 does not exist" "role oid 0"
echo "6. an answer does not show which spelling of a value a row holds"
sql <<'SQL'
CREATE COLLATION ignore_case (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
CREATE TABLE codes(code numeric, tag text COLLATE ignore_case);
-- One person spells the popular code and tag their own way, and comes first.
INSERT INTO codes VALUES (1.00, 'PRICING');
INSERT INTO codes SELECT 1.0, 'pricing' FROM generate_series(1, 300);
INSERT INTO codes SELECT 2, 'docs' FROM generate_series(1, 50);
CREATE VIEW v_top_codes WITH (security_barrier) AS
  SELECT dp_top_k_unknown_domain(code, 1, 1, 1, 1e-6) AS top FROM codes;
CREATE VIEW v_code_groups WITH (security_barrier) AS
  SELECT code FROM codes GROUP BY code HAVING dp_partition(1, 1e-6);
CREATE VIEW v_top_tag WITH (security_barrier) AS SELECT dp_argmax(tag, 1, 1) AS tag FROM codes;
GRANT SELECT ON v_top_codes, v_code_groups, v_top_tag TO analyst;
SQL
answers="$(for i in $(seq 20); do analyst -c "SELECT top FROM v_top_codes"; done | sort | uniq -c | awk '{print $2}' | tr '\n' ' ')"
assert_eq "$answers" "{1} " "the popular code, spelled canonically (it was the first row's 1.00)"
before="$(spent)"
several="values that compare equal can be spelled differently, and the answer would show a row's spelling"
out="$(analyst -c "SELECT * FROM v_code_groups" 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "0A000: columns of type numeric read per group (group keys, output, HAVING) cannot be released by dp_partition's node: $several; group by a cast to text (each spelling then its own group)" "numeric group keys"
# The view filtered on its key (pushed into the view, where PostgreSQL 16 on leaves the
# pinned key out of the group keys): refused all the same.
out="$(analyst -c "SELECT code::text FROM v_code_groups WHERE code = 1" 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "0A000: columns of type numeric read per group (group keys, output, HAVING) cannot be released by dp_partition's node: $several; group by a cast to text (each spelling then its own group)" "numeric group keys, pinned"
out="$(analyst -c "SELECT * FROM v_top_tag" 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "0A000: items of type text under the nondeterministic collation \"ignore_case\" cannot be answered without candidates: $several; compare the items under a deterministic collation (COLLATE \"C\"), or list the candidates (answered as listed)" "case-insensitive items"
assert_eq "$(spent)" "$before" "a refused statement is not charged"
echo "7. the analyst's functions and the server's LOG messages do not count a DP view's rows"
# A function that reads no column rode a leakproof comparison below the view's DP
# aggregate, once per raw row (its NOTICEs counted the rows); trace_sort reported a sort's
# memory under the aggregate (about 55 bytes a row) to client_min_messages = log.
ticks() {
    analyst -f - 2>&1 <<SQL | grep -c "NOTICE:.*tick" || true
CREATE FUNCTION pg_temp.tick() RETURNS text LANGUAGE plpgsql STABLE AS \$\$ BEGIN RAISE NOTICE 'tick'; RETURN ''; END \$\$;
SELECT count(*) FROM v_cs_all WHERE native_country = '$1' AND native_country <> pg_temp.tick();
SQL
}
sort_log() {
    analyst -f - 2>&1 <<SQL | grep -v "^[0-9]*$" || true
SET trace_sort = on; SET client_min_messages = log; SET enable_hashagg = off;
SELECT count(*) FROM v_country_part WHERE native_country IN ('$1', 'Nowhere');
SQL
}
# (Keys that have rows: v_cs_all releases a group for each, its keys being the DBA's
# choice to show.)
one="$(ticks Holand-Netherlands)" one_log="$(sort_log Holand-Netherlands)"
for key in Hungary Germany United-States; do
    assert_eq "$(ticks "$key")" "$one" "the analyst's function's calls, key $key"
done
for key in Germany United-States Atlantis; do
    assert_eq "$(sort_log "$key")" "$one_log" "LOG messages to the analyst, key $key"
done
assert_eq "$(grep -c "sort" <<<"$one_log")" "0" "no trace_sort line reaches the analyst"
# PostgreSQL passes only the messages it logs to the hook that keeps them from the
# client: client_min_messages lowered inside the statement let DEBUG messages that the
# server does not log through (review of 2026-11-27). The analyst's own RAISE DEBUG
# stands for any of them; the same call outside a DP statement still reaches the client.
debug_lines() {
    analyst -f - 2>&1 <<SQL | grep -c "DEBUG:  .*debugged" || true
CREATE FUNCTION pg_temp.debugged() RETURNS text LANGUAGE plpgsql STABLE AS \$\$ BEGIN RAISE DEBUG 'debugged'; RETURN ''; END \$\$;
SELECT set_config('client_min_messages', 'debug5', false) || pg_temp.debugged() $1;
SQL
}
assert_eq "$(debug_lines "FROM v_cs_all WHERE native_country = 'Germany'")" "0" "DEBUG messages inside a DP statement"
assert_eq "$(debug_lines "")" "1" "DEBUG messages outside a DP statement"
# The session's own set_config is kept after the statement, as PostgreSQL records it.
assert_contains "$(analyst -c "SELECT set_config('client_min_messages', 'debug5', false) FROM v_cs_all WHERE native_country = 'Germany'" \
    -c "SELECT current_setting('client_min_messages')" 2>/dev/null)" "debug5" "set_config inside a DP statement, kept"
echo "8. another session's temporary table labelled as people changes nothing here"
# Any role may label its own temporary table; the label switched on the function checks
# of DP queries over people in every session (the DBA's view calling counted() failed).
analyst -c "CREATE TEMP TABLE mine(u int); SECURITY LABEL FOR pg_exp_mech ON COLUMN mine.u IS 'privacy_unit'; SELECT pg_sleep(8)" >/dev/null &
holder=$!
sleep 4
out="$(sql -c "SELECT count(*) FROM v_country_part WHERE native_country = 'Germany'" 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "" "a DBA's DP view with its own function, while the analyst's temporary label exists"
wait "$holder"
echo "9. the fourth review: messages at an abort, and SERIALIZABLE's predicate locks"
# After an error or a ROLLBACK, PostgreSQL closes the plan's temporary files while it
# cleans up, after the statement's guards are gone: under log_temp_files their sizes
# (about 32 bytes a row) reached a client at client_min_messages = log.
sql -c "ALTER SYSTEM SET log_temp_files = 0" -c "SELECT pg_reload_conf()" >/dev/null
spill() {
    analyst -f - 2>&1 <<SQL | grep -c "temporary file" || true
SET work_mem = '64kB'; SET enable_hashagg = off; SET enable_indexscan = off;
SET enable_bitmapscan = off; SET max_parallel_workers_per_gather = 0; SET client_min_messages = log;
$1
SQL
}
failing="SELECT native_country, 1 / (length(native_country) - length(native_country)) FROM v_cs_all WHERE native_country >= 'A';"
assert_eq "$(spill "$failing")" "0" "a temporary file's size after an error"
assert_eq "$(spill "BEGIN; DECLARE c CURSOR FOR SELECT * FROM v_cs_all WHERE native_country >= 'A'; FETCH 1 FROM c; ROLLBACK;")" "0" \
    "a temporary file's size after a ROLLBACK"
# The session's own settings are back for the next statement, and its LOG lines of a
# statement without DP aggregates reach it.
out="$(analyst -f - 2>&1 <<SQL || true
\\set ON_ERROR_STOP off
SET client_min_messages = log;
$failing
SELECT current_setting('client_min_messages') || ', ' || current_setting('log_min_messages');
SQL
)"
assert_contains "$out" "log, warning" "client_min_messages and log_min_messages after the abort"
# A SET LOCAL undone by the abort stays undone (the fifth review: the value saved at the
# abort was put back at the next statement).
out="$(analyst -f - 2>&1 <<SQL || true
\\set ON_ERROR_STOP off
BEGIN; SET LOCAL client_min_messages = debug1;
SELECT count(*) FROM v_cs_all WHERE native_country = 'Greece';
SELECT 1 / 0;
ROLLBACK;
SELECT 'now ' || current_setting('client_min_messages');
SQL
)"
assert_contains "$out" "now notice" "SET LOCAL after a rolled back DP statement"
[ "$(spill "SELECT count(*) FROM (SELECT * FROM generate_series(1, 100000) g ORDER BY g) s;")" -ge 1 ] \
    || fail "a LOG line of a statement without DP aggregates: none"
# A subtransaction that aborts inside the DP statement (a PL/pgSQL exception block) left
# the statement's silenced settings to be restored at the next one.
out="$(analyst -f - 2>&1 <<'SQL'
CREATE FUNCTION pg_temp.caught() RETURNS int LANGUAGE plpgsql AS $$
BEGIN PERFORM 1 / 0; RETURN 0; EXCEPTION WHEN division_by_zero THEN RETURN 1; END $$;
SELECT count(*) + pg_temp.caught() FROM v_cs_all WHERE native_country = 'Germany';
SELECT current_setting('track_counts') || ', ' || current_setting('log_min_messages');
SQL
)"
assert_contains "$out" "on, warning" "settings after an exception block in a DP statement"
sql -c "ALTER SYSTEM RESET log_temp_files" -c "SELECT pg_reload_conf()" >/dev/null
# SERIALIZABLE took a predicate lock on each tuple the scan read, and pg_locks shows them
# to every role: 29 for Greece, 1 for Holand-Netherlands, none for Atlantis.
for key in Greece Atlantis; do
    out="$(analyst -c "SET enable_seqscan = off" -c "SET enable_bitmapscan = off" -c "BEGIN ISOLATION LEVEL SERIALIZABLE" \
        -c "SELECT count(*) FROM v_country WHERE native_country = '$key'" 2>&1 || true)"
    assert_eq "$(first_error <<<"$out")" "0A000: a plan with differentially private aggregates cannot run under SERIALIZABLE isolation for role \"analyst\", which has a privacy budget: its predicate locks, which pg_locks shows to every role, count the rows it reads; use REPEATABLE READ or READ COMMITTED" \
        "SERIALIZABLE, key $key"
done
assert_eq "$(analyst -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT count(*) FROM v_country WHERE native_country = 'Greece'" -c "COMMIT")" "0" \
    "REPEATABLE READ answers"
# What PostgreSQL says below a DP aggregate, in the DBA's view, is said of its rows: a
# NOTICE or WARNING once per row (to_tsvector's "word is too long to be indexed", or the
# DBA's own function) reached the analyst; it goes to the server's log only. The
# analyst's own NOTICE above the view still reaches the analyst.
sql >/dev/null <<'SQL'
CREATE FUNCTION noisy(x text) RETURNS boolean LANGUAGE plpgsql STABLE AS $$
BEGIN RAISE NOTICE 'a row of %', x; RAISE WARNING 'a row'; RETURN true; END $$;
CREATE VIEW v_noisy WITH (security_barrier) AS
  SELECT native_country, dp_quantile(age, 0.5, 0, 100, 0.1) AS med
    FROM adult WHERE noisy(native_country) GROUP BY native_country;
CREATE VIEW v_words WITH (security_barrier) AS
  SELECT native_country, dp_argmax(length(to_tsvector('simple', repeat('x', 3000) || native_country)), 1, 0.1) AS top
    FROM adult GROUP BY native_country;
GRANT SELECT ON v_noisy, v_words TO analyst;
SQL
said() { analyst -c "$1" 2>&1 | grep -cE "^(NOTICE|WARNING|INFO):" || true; }
for key in Greece Holand-Netherlands Atlantis; do
    assert_eq "$(said "SELECT count(*) FROM v_noisy WHERE native_country = '$key'")" "0" "the DBA's function's messages, key $key"
    assert_eq "$(said "SELECT count(*) FROM v_words WHERE native_country = '$key'")" "0" "to_tsvector's NOTICEs, key $key"
done
mine="$(analyst -f - 2>&1 <<'SQL' | grep -c "NOTICE:.*mine" || true
CREATE FUNCTION pg_temp.mine() RETURNS text LANGUAGE plpgsql STABLE AS $$ BEGIN RAISE NOTICE 'mine'; RETURN ''; END $$;
SELECT count(*), pg_temp.mine() FROM v_noisy WHERE native_country = 'Greece';
SQL
)"
[ "$mine" -ge 1 ] || fail "the analyst's own NOTICE above the view: none"
echo "10. an error of the DBA's expression: its SQLSTATE, not its text"
# An error of the DBA's expression fails the statement only on a row it cannot take, and
# PostgreSQL's message named that row's value (invalid input syntax ... "ABC-secret"),
# also to a PL/pgSQL exception block (SQLERRM) and from a parallel worker. Its SQLSTATE
# stays, its text goes to the server's log only.
sql >/dev/null <<'SQL'
CREATE TABLE badges(code text);
INSERT INTO badges SELECT i::text FROM generate_series(1, 2000) i;
INSERT INTO badges VALUES ('ABC-secret');
CREATE VIEW v_badges WITH (security_barrier) AS SELECT dp_quantile(code::int, 0.5, 0, 3000, 0.1) AS med FROM badges;
CREATE VIEW v_badges_where WITH (security_barrier) AS SELECT dp_argmax(length(code), 1, 0.1) AS top FROM badges WHERE code::int > 0;
GRANT SELECT ON v_badges, v_badges_where TO analyst;
SQL
WITHHELD="a row under a differentially private aggregate raised an error; its text, which can name a value of the row, is withheld"
PARALLEL="SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0; SET parallel_leader_participation = off"
for view in v_badges v_badges_where; do
    for setting in "SET max_parallel_workers_per_gather = 0" "$PARALLEL"; do
        out="$(analyst -c "$setting" -c "SELECT * FROM $view" 2>&1 || true)"
        assert_eq "$(first_error <<<"$out")" "22P02: $WITHHELD" "the error of $view ($setting)"
        assert_not_contains "$out" "ABC" "the error of $view ($setting)"
    done
done
assert_contains "$(analyst -c "$PARALLEL" -c "EXPLAIN (COSTS OFF) SELECT * FROM v_badges")" "Workers Planned" "a parallel plan"
out="$(analyst -f - 2>&1 <<'SQL'
CREATE FUNCTION pg_temp.caught() RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM * FROM v_badges; RETURN 'none';
EXCEPTION WHEN OTHERS THEN RETURN SQLSTATE || ': ' || SQLERRM; END $$;
SELECT pg_temp.caught();
SQL
)"
assert_eq "$out" "22P02: $WITHHELD" "SQLERRM in an exception block"
out="$(sql -c "SELECT * FROM v_badges" 2>&1 || true)"
assert_contains "$out" 'invalid input syntax for type integer: "ABC-secret"' "a superuser's error keeps its text"
[ "$(grep -cF "$WITHHELD: invalid input syntax for type integer: \"ABC-secret\"" "$CLUSTER/server.log")" -ge 5 ] \
    || fail "the withheld texts are in the server's log"
echo "11. a budgeted role that may read the temporary files' directory is refused"
# pg_tablespace_size counts base/pgsql_tmp, where DP statements spill about 32 bytes a row
# (the fourth review counted rows to within about 12 by bisecting work_mem); pg_ls_tmpdir
# lists each file's size to pg_monitor. README's step 6 revokes the first; a budgeted
# role that may still execute one, granted to PUBLIC, to itself, to a role it belongs to
# (even without INHERIT: it may switch to it, or read from another session) is refused
# before any row, and charged nothing.
SERVER_FILES="55000: role \"analyst\", which has a privacy budget, is a member of role \"pg_read_server_files\", whose COPY reads any file of the server: the temporary files a differentially private statement spills, and the server's log, which holds the texts withheld from the client: REVOKE pg_read_server_files FROM the role"
refused() { echo "55000: role \"analyst\", which has a privacy budget, may execute $1${2:-}, which reads the temporary files or the memory of a differentially private statement (both grow with its rows): in every database of the cluster, REVOKE EXECUTE ON FUNCTION $1 FROM PUBLIC, and from the role and every role it is a member of"; }
before="$(spent)"
sql -c "GRANT EXECUTE ON FUNCTION pg_tablespace_size(name) TO PUBLIC"
assert_eq "$(analyst -c "SELECT * FROM v_marital" 2>&1 | first_error)" "$(refused "pg_tablespace_size(name)")" "granted to PUBLIC"
sql -c "REVOKE EXECUTE ON FUNCTION pg_tablespace_size(name) FROM PUBLIC" -c "GRANT EXECUTE ON FUNCTION pg_tablespace_size(oid) TO analyst"
assert_eq "$(analyst -c "SELECT * FROM v_marital" 2>&1 | first_error)" "$(refused "pg_tablespace_size(oid)")" "granted to the role"
# (NOINHERIT before the GRANT: from PostgreSQL 16 on, a membership takes it then.)
sql -c "REVOKE EXECUTE ON FUNCTION pg_tablespace_size(oid) FROM analyst" -c "CREATE ROLE sizer" \
    -c "GRANT EXECUTE ON FUNCTION pg_tablespace_size(name) TO sizer" -c "GRANT SELECT ON v_marital TO sizer" \
    -c "ALTER ROLE analyst NOINHERIT" -c "GRANT sizer TO analyst"
assert_eq "$(analyst -c "SELECT * FROM v_marital" 2>&1 | first_error)" \
    "$(refused "pg_tablespace_size(name)" " as a member of role \"sizer\"")" "a role the analyst may switch to"
assert_eq "$(analyst -c "SET ROLE sizer" -c "SELECT * FROM v_marital" 2>&1 | first_error)" \
    "$(refused "pg_tablespace_size(name)" " as a member of role \"sizer\"")" "a role the analyst switched to"
sql -c "REVOKE sizer FROM analyst" -c "ALTER ROLE analyst INHERIT" -c "GRANT pg_monitor TO analyst"
assert_eq "$(analyst -c "SELECT * FROM v_marital" 2>&1 | first_error)" "$(refused "pg_ls_tmpdir()")" "pg_monitor"
# pg_backend_memory_contexts showed pg_read_all_stats the hash table of a dp_partition
# view, about 656 bytes a group, withheld groups included (the third round).
sql -c "REVOKE pg_monitor FROM analyst" -c "GRANT pg_read_all_stats TO analyst"
assert_eq "$(analyst -c "SELECT * FROM v_marital" 2>&1 | first_error)" "$(refused "pg_get_backend_memory_contexts()")" "pg_read_all_stats"
sql -c "REVOKE pg_read_all_stats FROM analyst" -c "GRANT EXECUTE ON FUNCTION pg_ls_logdir() TO analyst"
# The server's log holds the withheld texts: its size told a withheld value's length, and
# pg_read_server_files read the value with COPY (the fourth round).
assert_eq "$(analyst -c "SELECT * FROM v_marital" 2>&1 | first_error)" "$(refused "pg_ls_logdir()")" "pg_ls_logdir"
sql -c "REVOKE EXECUTE ON FUNCTION pg_ls_logdir() FROM analyst" -c "GRANT pg_read_server_files TO analyst"
assert_eq "$(analyst -c "SELECT * FROM v_marital" 2>&1 | first_error)" "$SERVER_FILES" "pg_read_server_files"
sql -c "REVOKE pg_read_server_files FROM analyst" -c "GRANT pg_monitor TO analyst"
assert_eq "$(spent)" "$before" "refusals charge nothing"
sql -c "REVOKE pg_monitor FROM analyst"
assert_eq "$(analyst -c "SELECT * FROM v_marital")" "Married-civ-spouse" "revoked: answered"
# A session remembers that its role was cleared until a privilege, a role or a membership
# changes: a GRANT from another session between two statements is seen at the second.
superuser="$(pg_bindir)/psql -X -qAt -h $CLUSTER -p $PORT -U postgres"
sql -c "CREATE ROLE lister" -c "GRANT EXECUTE ON FUNCTION pg_ls_dir(text) TO lister"
for grant in "GRANT EXECUTE ON FUNCTION pg_ls_dir(text) TO analyst" "GRANT lister TO analyst" \
    "GRANT pg_read_server_files TO analyst"; do
    out="$(analyst -c "SELECT * FROM v_marital" -c "\\! $superuser -c '$grant'" -c "SELECT * FROM v_marital" 2>&1 || true)"
    assert_contains "$out" "Married-civ-spouse" "before $grant: answered"
    assert_eq "$(first_error <<<"$out")" "$(case "$grant" in
        *pg_read_server_files*) echo "$SERVER_FILES" ;;
        *) refused "pg_ls_dir(text)" ;;
    esac)" "$grant in the same session, after an answer"
    revoke="${grant/GRANT/REVOKE}"
    sql -c "${revoke/ TO / FROM }"
done
sql -c "REVOKE EXECUTE ON FUNCTION pg_ls_dir(text) FROM lister" -c "DROP ROLE lister"
# A transaction not yet committed gives its sessions what the check cannot see: on
# PostgreSQL 15 a role WITH ADMIN OPTION revoked its own membership, ran the DP statement
# and read the spill from a second session before it rolled back; another session
# granted a membership and read the spill before it rolled back; CREATEROLE, a SUPERUSER
# role to switch to and REPLICATION read it too (the red teams of 2026-11-28). Such
# statements are refused; a transaction that wrote anything else is not.
MAJOR="$(sql -c "SHOW server_version_num")"
CHANGED="55000: role \"analyst\", which has a privacy budget, runs a differentially private aggregate while a transaction not yet committed (this one, another session's or a prepared one) changes roles or role memberships, or this one the privileges of a function that reads temporary files: that transaction's sessions may have privileges the check cannot see; retry once it has ended"
attribute() { echo "55000: role \"analyst\", which has a privacy budget, $1has $2, with which it $3, and so the temporary files a differentially private statement spills: ALTER ROLE ... NO$2, or REVOKE the membership"; }
sql -c "CREATE ROLE lister" -c "GRANT EXECUTE ON FUNCTION pg_ls_dir(text) TO lister" -c "GRANT lister TO analyst WITH ADMIN OPTION"
out="$(analyst -c "BEGIN" -c "REVOKE lister FROM analyst" -c "SELECT * FROM v_marital" 2>&1 || true)"
if [ "$MAJOR" -lt 160000 ]; then
    assert_eq "$(first_error <<<"$out")" "$CHANGED" "a membership revoked WITH ADMIN OPTION, not committed"
else
    # (From 16 on a role revokes only the grants it made: the membership stays.)
    assert_eq "$(first_error <<<"$out")" "$(refused "pg_ls_dir(text)")" "a membership WITH ADMIN OPTION"
fi
sql -c "REVOKE lister FROM analyst" -c "REVOKE EXECUTE ON FUNCTION pg_ls_dir(text) FROM lister" -c "DROP ROLE lister"
assert_eq "$(analyst -c "BEGIN" -c "ALTER ROLE analyst PASSWORD 'analyst-password'" -c "SELECT * FROM v_marital" 2>&1 | first_error)" \
    "$CHANGED" "a role changed in the transaction"
assert_eq "$(analyst -c "BEGIN" -c "CREATE TEMP TABLE scratch (i int)" -c "INSERT INTO scratch VALUES (1)" -c "SELECT * FROM v_marital" -c "ROLLBACK")" \
    "Married-civ-spouse" "a transaction that wrote something else: answered"
# Another session of the analyst grants, WITH ADMIN OPTION, a group of it a role with
# pg_monitor and holds the grant uncommitted while the first one revokes its own
# membership and runs the DP statement (PostgreSQL 15; from 16 on the revoke does
# nothing: refused as a member).
sql -c "CREATE ROLE analysts" -c "GRANT analysts TO analyst" -c "CREATE ROLE monitors" \
    -c "GRANT pg_monitor TO monitors" -c "GRANT monitors TO analyst WITH ADMIN OPTION"
analyst -c "BEGIN" -c "GRANT monitors TO analysts" -c "SELECT pg_sleep(4)" -c "ROLLBACK" >/dev/null 2>&1 &
granting=$!
for _ in $(seq 100); do
    [ -n "$(sql -c "SELECT pid FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(4)' AND state = 'active'")" ] && break
    sleep 0.05
done
out="$(analyst -c "REVOKE monitors FROM analyst" -c "SELECT * FROM v_marital" 2>&1 || true)"
if [ "$MAJOR" -lt 160000 ]; then
    assert_eq "$(first_error <<<"$out")" "$CHANGED" "another session's grant, not yet committed"
else
    assert_eq "$(first_error <<<"$out")" "$(refused "pg_ls_tmpdir()")" "a member through a role it administers"
fi
wait "$granting"
# The same grant prepared, to be committed while the DP cursor is open (the third red
# team of 2026-11-28): a prepared transaction has no session. (From 16 on the revoke
# does nothing, and waits for the prepared grant's lock on the role.)
if [ "$MAJOR" -lt 160000 ]; then
    sql -c "GRANT monitors TO analyst WITH ADMIN OPTION"
    analyst -c "BEGIN" -c "GRANT monitors TO analysts" -c "PREPARE TRANSACTION 'grant_later'" >/dev/null 2>&1
    out="$(analyst -c "REVOKE monitors FROM analyst" -c "SELECT * FROM v_marital" 2>&1 || true)"
    assert_eq "$(first_error <<<"$out")" "$CHANGED" "a prepared grant"
    sql -c "ROLLBACK PREPARED 'grant_later'"
fi
sql -c "DROP ROLE monitors"
# Other roles' transactions, not committed, are theirs alone: the analyst is answered.
sql -c "BEGIN" -c "GRANT pg_monitor TO analysts" -c "SELECT pg_sleep(3)" -c "ROLLBACK" >/dev/null &
granting=$!
for _ in $(seq 100); do
    [ -n "$(sql -c "SELECT pid FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(3)' AND state = 'active'")" ] && break
    sleep 0.05
done
assert_eq "$(analyst -c "SELECT * FROM v_marital")" "Married-civ-spouse" "another role's grant, not committed: answered"
wait "$granting"
sql -c "ALTER ROLE analysts CREATEROLE"
if [ "$MAJOR" -lt 160000 ]; then
    assert_eq "$(analyst -c "SELECT * FROM v_marital" 2>&1 | first_error)" \
        "$(attribute 'may become role "analysts", which ' CREATEROLE "may grant itself pg_monitor or pg_read_server_files")" \
        "a role with CREATEROLE to switch to (PostgreSQL 15)"
else
    assert_eq "$(analyst -c "SELECT * FROM v_marital")" "Married-civ-spouse" "CREATEROLE grants only the roles it administers"
fi
sql -c "ALTER ROLE analysts NOCREATEROLE SUPERUSER"
assert_eq "$(analyst -c "SELECT * FROM v_marital" 2>&1 | first_error)" \
    "$(attribute 'may become role "analysts", which ' SUPERUSER "reads every file of the server")" "a SUPERUSER role to switch to"
sql -c "REVOKE analysts FROM analyst" -c "DROP ROLE analysts" -c "ALTER ROLE analyst REPLICATION"
assert_eq "$(analyst -c "SELECT * FROM v_marital" 2>&1 | first_error)" \
    "$(attribute "" REPLICATION "may copy the data directory with pg_basebackup")" "REPLICATION"
sql -c "ALTER ROLE analyst NOREPLICATION"
assert_eq "$(analyst -c "SELECT * FROM v_marital")" "Married-civ-spouse" "every attribute removed: answered"
echo "12. a FATAL while a DP node runs does not carry the rows' CONTEXT"
# pg_terminate_backend from the analyst's other session ends the DP statement where it
# is: the CONTEXT of the DBA's function's dynamic SQL named the row being read (the red
# team of 2026-11-27, one value per charged statement).
sql >/dev/null <<'SQL'
CREATE TABLE patients AS SELECT 'secret-' || i AS diagnosis FROM generate_series(1, 2000) i;
CREATE FUNCTION weight_of(x text) RETURNS int LANGUAGE plpgsql STABLE AS $$
DECLARE w int; BEGIN EXECUTE format('SELECT length(%L) FROM pg_sleep(0.01)', x) INTO w; RETURN w; END $$;
CREATE VIEW v_diag WITH (security_barrier) AS
  SELECT dp_quantile(weight_of(diagnosis), 0.5, 0, 20, 0.1) AS med FROM patients;
GRANT SELECT ON v_diag TO analyst;
SQL
analyst -c "SELECT * FROM v_diag" > "$CLUSTER/terminated.out" 2>&1 &
victim=$!
for _ in $(seq 100); do
    pid="$(sql -c "SELECT pid FROM pg_stat_activity WHERE query = 'SELECT * FROM v_diag' AND state = 'active'")"
    [ -n "$pid" ] && break
    sleep 0.05
done
[ -n "$pid" ] || fail "the DP statement to terminate did not start"
sleep 0.3
assert_eq "$(analyst -c "SELECT pg_terminate_backend($pid)")" "t" "the analyst terminates its own session"
wait "$victim" || true
out="$(cat "$CLUSTER/terminated.out")"
assert_contains "$out" "FATAL:  57P01: terminating connection due to administrator command" "the terminated statement"
assert_not_contains "$out" "secret-" "the terminated statement's message"
assert_not_contains "$out" "CONTEXT" "the terminated statement's message"
grep -q "CONTEXT: SQL statement \"SELECT length('secret-" "$CLUSTER/server.log" || fail "the withheld CONTEXT is in the server's log"
echo "13. a grouped DP node hands out its groups once it read every row"
# Under sorted grouping, groups left one by one: those sent before an error of the DBA's
# expression told in which group the failing row lies (the red team of 2026-11-27).
sql >/dev/null <<'SQL'
CREATE TABLE grouped_badges AS SELECT 'g' || (i % 10) AS grp, i::text AS code FROM generate_series(1, 2000) i;
INSERT INTO grouped_badges VALUES ('g9', 'ABC-secret');
CREATE VIEW v_badge_groups WITH (security_barrier) AS
  SELECT grp, dp_quantile(code::int, 0.5, 0, 3000, 0.1) AS med FROM grouped_badges GROUP BY grp;
CREATE VIEW v_badge_groups_ok WITH (security_barrier) AS
  SELECT grp, dp_quantile(code::int, 0.5, 0, 3000, 0.1) AS med FROM grouped_badges WHERE code ~ '^[0-9]+$' GROUP BY grp;
GRANT SELECT ON v_badge_groups, v_badge_groups_ok TO analyst;
SQL
SORTED="SET enable_hashagg = off"
assert_contains "$(analyst -c "$SORTED" -c "EXPLAIN (COSTS OFF) SELECT * FROM v_badge_groups")" "GroupAggregate" "sorted grouping"
out="$(analyst -c "$SORTED" -c "BEGIN" -c "DECLARE c CURSOR FOR SELECT grp FROM v_badge_groups" -c "FETCH 1 FROM c" 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "22P02: $WITHHELD" "a cursor's first FETCH: the error"
assert_not_contains "$out" "g0" "a cursor's first FETCH: no group before the error"
out="$(analyst -v FETCH_COUNT=1 -c "$SORTED" -c "SELECT grp FROM v_badge_groups" 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "22P02: $WITHHELD" "FETCH_COUNT 1"
assert_not_contains "$out" "g0" "FETCH_COUNT 1: no group before the error"
# Held groups come out all, in order, and again at each loop of a rescanned node.
assert_eq "$(analyst -c "$SORTED" -c "SELECT string_agg(grp, ' ') FROM v_badge_groups_ok")" "g0 g1 g2 g3 g4 g5 g6 g7 g8 g9" "every group, sorted"
assert_eq "$(analyst -c "SELECT string_agg(grp, ' ' ORDER BY grp) FROM v_badge_groups_ok")" "g0 g1 g2 g3 g4 g5 g6 g7 g8 g9" "every group, hashed"
before="$(spent)"
assert_eq "$(analyst -c "$SORTED" -c "SELECT string_agg(k || ':' || (SELECT count(*) FROM v_badge_groups_ok v WHERE v.grp = k), ' ') FROM unnest(ARRAY['g1', 'g5', 'g7']) k")" \
    "g1:1 g5:1 g7:1" "a rescanned node's groups"
assert_eq "$(sql -c "SELECT round(($(spent) - $before)::numeric, 6)")" "0.300000" "each loop charged"
# Partitionwise, each partition's node finalized its groups under an Append, which sent
# one partition's groups before reading the next one's rows (the red team's second
# round): a budgeted role's DP statement is planned without it.
sql >/dev/null <<'SQL'
CREATE TABLE parted_badges (grp text, code text) PARTITION BY LIST (grp);
CREATE TABLE parted_badges_a PARTITION OF parted_badges FOR VALUES IN ('g0', 'g1', 'g2');
CREATE TABLE parted_badges_b PARTITION OF parted_badges FOR VALUES IN ('g3', 'g4', 'g5');
CREATE TABLE parted_badges_c PARTITION OF parted_badges FOR VALUES IN ('g6', 'g7', 'g8', 'g9');
INSERT INTO parted_badges SELECT 'g' || (i % 10), i::text FROM generate_series(1, 2000) i;
INSERT INTO parted_badges VALUES ('g7', 'ABC-secret');
CREATE VIEW v_parted_badges WITH (security_barrier) AS
  SELECT grp, dp_quantile(code::int, 0.5, 0, 3000, 0.1) AS med FROM parted_badges GROUP BY grp;
GRANT SELECT ON v_parted_badges TO analyst;
SQL
PARTITIONWISE="SET enable_partitionwise_aggregate = on"
assert_eq "$(sql -c "$PARTITIONWISE" -c "EXPLAIN (COSTS OFF) SELECT * FROM v_parted_badges" | grep -c "Aggregate")" "3" "partitionwise for a superuser"
assert_eq "$(analyst -c "$PARTITIONWISE" -c "EXPLAIN (COSTS OFF) SELECT * FROM v_parted_badges" | grep -c "Aggregate")" "1" "not partitionwise for the analyst"
out="$(analyst -v FETCH_COUNT=1 -c "$PARTITIONWISE" -c "SELECT grp FROM v_parted_badges" 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "22P02: $WITHHELD" "partitionwise: the error"
assert_not_contains "$out" "g0" "partitionwise: no group before the error"
# Held groups stay in memory up to work_mem * hash_mem_multiplier, and at least 64 MB (a
# store that spilled kept a temporary file that a failed FETCH in a savepoint closed, and
# its end wrote to it: the red team's second round); more is refused, by the size of the
# groups the client would get. An error after many groups leaves the session working.
sql >/dev/null <<'SQL'
CREATE TABLE many_badges AS SELECT i AS grp, i::text AS code FROM generate_series(1, 70000) i;
CREATE VIEW v_many_badges WITH (security_barrier) AS
  SELECT grp, dp_quantile(code::int, 0.5, 0, 100000, 0.1) AS med FROM many_badges GROUP BY grp;
CREATE VIEW v_wide_badges WITH (security_barrier) AS
  SELECT grp, repeat('x', 1000) || grp AS pad, dp_quantile(code::int, 0.5, 0, 100000, 0.1) AS med FROM many_badges GROUP BY grp;
GRANT SELECT ON v_many_badges, v_wide_badges TO analyst;
SQL
out="$(analyst -c "SET work_mem = '64kB'" -c "SELECT count(*), count(DISTINCT grp) FROM v_many_badges" 2>&1)"
assert_eq "$out" "70000|70000" "held groups past work_mem"
assert_eq "$(analyst -c "SELECT count(*), max(length(pad)) FROM v_wide_badges" 2>&1 | first_error)" \
    "54000: a differentially private aggregation of a role with a privacy budget hands out its groups only once it has read every row, and they exceed 65536 kB (work_mem * hash_mem_multiplier, at least 64 MB): raise work_mem, or ask for fewer groups" \
    "held groups past 64 MB"
assert_eq "$(analyst -c "SET work_mem = '100MB'" -c "SELECT count(*), max(length(pad)) FROM v_wide_badges")" "70000|1005" "held groups within a larger work_mem"
# The limit counts each value as the client gets it, uncompressed and inline: a key read
# from the table came as its group's first row stored it, compressed or not, and counted
# so it told how that row was stored (the fifth round's LOW). The same 23,000 keys of
# 3,005 bytes, stored inline (PLAIN) or compressed to a few dozen bytes (EXTENDED), are
# refused alike.
sql >/dev/null <<'SQL'
CREATE TABLE keys_plain (grp text, v int);
ALTER TABLE keys_plain ALTER grp SET STORAGE PLAIN;
INSERT INTO keys_plain SELECT repeat('x', 3000) || lpad(i::text, 5, '0'), i % 100 FROM generate_series(1, 23000) i;
CREATE TABLE keys_compressed AS TABLE keys_plain;
CREATE VIEW v_keys_plain WITH (security_barrier) AS
  SELECT grp, dp_quantile(v, 0.5, 0, 100, 0.1) AS med FROM keys_plain GROUP BY grp;
CREATE VIEW v_keys_compressed WITH (security_barrier) AS
  SELECT grp, dp_quantile(v, 0.5, 0, 100, 0.1) AS med FROM keys_compressed GROUP BY grp;
GRANT SELECT ON v_keys_plain, v_keys_compressed TO analyst;
SQL
assert_eq "$(sql -c "SELECT pg_column_size(grp) < 200 FROM keys_compressed LIMIT 1") $(sql -c "SELECT pg_column_size(grp) FROM keys_plain LIMIT 1")" "t 3009" "stored compressed, and inline"
for view in v_keys_plain v_keys_compressed; do
    assert_eq "$(analyst -c "SELECT count(*) FROM $view" 2>&1 | first_error)" \
        "54000: a differentially private aggregation of a role with a privacy budget hands out its groups only once it has read every row, and they exceed 65536 kB (work_mem * hash_mem_multiplier, at least 64 MB): raise work_mem, or ask for fewer groups" \
        "$view: 69 MB of keys as the client gets them"
done
assert_eq "$(analyst -c "SET work_mem = '72MB'" -c "SELECT count(*), min(length(grp)) FROM v_keys_compressed")" "23000|3005" "within a larger work_mem"
# A hashed node's groups leave in a random order: theirs followed the hash table, and a
# spill's first batch, where withheld groups took room, counted them (the fourth round).
orders="$(for i in 1 2 3; do analyst -c "SELECT string_agg(grp::text, ',') FROM (SELECT grp FROM v_many_badges LIMIT 5) s"; done | sort -u | wc -l)"
assert_eq "$orders" "3" "three hashed runs, three orders"
orders="$(for i in 1 2 3; do analyst -c "$SORTED" -c "SELECT string_agg(grp::text, ',') FROM (SELECT grp FROM v_many_badges LIMIT 5) s"; done | sort -u)"
assert_eq "$orders" "1,2,3,4,5" "sorted runs, in key order"
assert_eq "$(analyst -c "SELECT string_agg(grp::text, ',') FROM (SELECT grp FROM v_many_badges ORDER BY grp LIMIT 5) s")" "1,2,3,4,5" \
    "ORDER BY over a hashed node's shuffled groups"
sql -c "INSERT INTO many_badges VALUES (70001, 'ABC-secret')" >/dev/null
out="$(analyst -c "SET work_mem = '64kB'" -c "$SORTED" -c "SELECT count(*) FROM v_many_badges" -c "SELECT 'still here'" 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "22P02: $WITHHELD" "an error after many held groups"
# Past the limit, the node still reads its last row before refusing: the error of a late
# row comes first, wherever the limit falls (refused at once, 54000 or 22P02 told on
# which side of it the failing row's group lies: the third round).
assert_eq "$(analyst -c "$SORTED" -c "SET hash_mem_multiplier = 1" -c "SET work_mem = '64MB'" \
    -c "SELECT count(*), max(length(pad)) FROM v_wide_badges" 2>&1 | first_error)" "22P02: $WITHHELD" "an error beyond the limit"
assert_eq "$(analyst -v ON_ERROR_STOP=0 -c "SET work_mem = '64kB'" -c "$SORTED" -c "BEGIN" -c "DECLARE c CURSOR FOR SELECT * FROM v_many_badges" \
    -c "SAVEPOINT s" -c "FETCH 1 FROM c" -c "ROLLBACK TO s" -c "SELECT 'still here'" -c "COMMIT" 2>&1 | tail -1)" "still here" \
    "an error after the spill, in a savepoint"
assert_not_contains "$(grep -i "temporary file leak" "$CLUSTER/server.log" || true)" "leak" "no temporary file left open"
# What a DP node evaluates runs per row (its calls' arguments and filters, the plan under
# it) or per group (its output list and HAVING, before its groups are shuffled): a view
# that output nextval(...) per group gave back the node's order (ORDER BY it), and a
# hashed node's order counted the groups it withheld (the fifth round); clock_timestamp()
# timed each group; a sequence advanced in HAVING (through a domain's check, an
# ordered-set aggregate's direct argument or an aggregate's final function), in a
# FILTER or under the node counted the withheld groups or the rows (the red team of
# 2026-11-28), and so did, in its second round, a window aggregate under the node, a
# domain's check run by an input function, and an init-plan attached above the node
# (ORDER BY in the view); in its third round, a domain's check in a hash key, an index
# condition, a run condition, a function's column list, XMLTABLE's columns or a
# multirange; in its fourth, a domain a function returns (OUT, RETURNS TABLE), an
# aggregate's state of a domain, a ROW of a domain column. A volatile function anywhere
# there is refused before any row,
# charged nothing; above the view, and for a role without a budget, it is not.
sql >/dev/null <<'SQL'
CREATE SEQUENCE group_order;
CREATE TABLE numbered AS SELECT 'g' || (i % 10) AS grp, i AS v FROM generate_series(1, 1000) i;
CREATE FUNCTION label(g text) RETURNS text LANGUAGE plpgsql AS $$ BEGIN RETURN 'group ' || g; END $$;
CREATE FUNCTION ticked(x anyelement) RETURNS boolean LANGUAGE plpgsql AS $$ BEGIN PERFORM nextval('group_order'); RETURN true; END $$;
CREATE FUNCTION ticked_final(int) RETURNS int LANGUAGE plpgsql AS $$ BEGIN PERFORM nextval('group_order'); RETURN 0; END $$;
CREATE AGGREGATE ticking(int) (sfunc = int4pl, stype = int, initcond = '0', finalfunc = ticked_final);
CREATE DOMAIN ticked_boolean AS boolean CHECK (ticked(VALUE));
CREATE DOMAIN ticked_int AS int CHECK (ticked(VALUE));
CREATE TYPE ticked_pair AS (a ticked_int);
CREATE FUNCTION ticked_add(s bigint, x int) RETURNS bigint LANGUAGE plpgsql AS $$ BEGIN PERFORM nextval('group_order'); RETURN coalesce(s, 0) + 1; END $$;
CREATE AGGREGATE ticked_count(int) (sfunc = ticked_add, stype = bigint);
CREATE TYPE ticked_range AS RANGE (subtype = ticked_int, multirange_type_name = ticked_multirange);
CREATE TABLE lookup (k int PRIMARY KEY, w int);
INSERT INTO lookup SELECT i, i FROM generate_series(0, 49) i;
ANALYZE numbered, lookup;
CREATE FUNCTION ticked_pair_of(x int, OUT a ticked_int, OUT b int) LANGUAGE plpgsql IMMUTABLE AS $$ BEGIN a := x; b := 1; END $$;
CREATE FUNCTION ticked_rows(x int) RETURNS TABLE (a ticked_int, b int) LANGUAGE plpgsql IMMUTABLE AS $$ BEGIN a := x; b := 1; RETURN NEXT; END $$;
CREATE FUNCTION ticked_plus(s ticked_int, x int) RETURNS ticked_int LANGUAGE sql IMMUTABLE AS $$ SELECT coalesce(s, 0) + x $$;
CREATE AGGREGATE ticked_sum(int) (sfunc = ticked_plus, stype = ticked_int);
CREATE TABLE domain_column AS SELECT i AS v, (i % 10)::int AS d FROM generate_series(1, 1000) i;
ALTER TABLE domain_column ALTER d TYPE ticked_int;
CREATE VIEW v_numbered WITH (security_barrier) AS
  SELECT grp, nextval('group_order') AS n, dp_quantile(v, 0.5, 0, 1000, 0.1) AS med FROM numbered GROUP BY grp;
CREATE VIEW v_timed WITH (security_barrier) AS
  SELECT grp, clock_timestamp() AS t, dp_quantile(v, 0.5, 0, 1000, 0.1) AS med FROM numbered GROUP BY grp;
CREATE VIEW v_counted_having WITH (security_barrier) AS
  SELECT grp, dp_quantile(v, 0.5, 0, 1000, 0.1) AS med FROM numbered
    GROUP BY grp HAVING dp_partition(0.1, 1e-6) AND nextval('group_order') > 0;
CREATE VIEW v_domain_having WITH (security_barrier) AS
  SELECT grp, dp_quantile(v, 0.5, 0, 1000, 0.1) AS med FROM numbered GROUP BY grp HAVING dp_partition(0.1, 1e-6)::ticked_boolean;
CREATE VIEW v_direct_argument WITH (security_barrier) AS
  SELECT grp, dp_quantile(v, 0.5, 0, 1000, 0.1) AS med FROM numbered
    GROUP BY grp HAVING dp_partition(0.1, 1e-6) AND percentile_disc(nextval('group_order') * 0) WITHIN GROUP (ORDER BY v) > 0;
CREATE VIEW v_final_function WITH (security_barrier) AS
  SELECT grp, ticking(1) AS z, dp_quantile(v, 0.5, 0, 1000, 0.1) AS med FROM numbered GROUP BY grp HAVING dp_partition(0.1, 1e-6);
CREATE VIEW v_subquery WITH (security_barrier) AS
  SELECT grp, (SELECT max(x) FROM generate_series(1, 3) x WHERE x < random() * 10 + length(grp)) AS r,
         dp_quantile(v, 0.5, 0, 1000, 0.1) AS med FROM numbered GROUP BY grp;
CREATE VIEW v_labelled WITH (security_barrier) AS
  SELECT label(grp) AS grp, dp_quantile(v, 0.5, 0, 1000, 0.1) AS med FROM numbered GROUP BY grp;
CREATE VIEW v_counted_filter WITH (security_barrier) AS
  SELECT dp_argmax(grp, 1, 0.1) FILTER (WHERE nextval('group_order') > 0) AS top FROM numbered WHERE v > 500;
CREATE VIEW v_counted_rows WITH (security_barrier) AS
  SELECT dp_argmax(grp, 1, 0.1) AS top FROM numbered WHERE v > 500 AND ticked(v);
CREATE VIEW v_window WITH (security_barrier) AS
  SELECT dp_quantile(v, 0.5, 0, 1000, 0.1) AS med FROM (SELECT v, ticked_count(v) OVER () AS c FROM numbered WHERE v > 500) s WHERE c >= 0;
CREATE VIEW v_domain_array WITH (security_barrier) AS
  SELECT dp_quantile(v, 0.5, 0, 1000, 0.1) FILTER (WHERE ('{' || v || '}')::ticked_int[] IS NOT NULL) AS med FROM numbered WHERE v > 500;
CREATE VIEW v_domain_record WITH (security_barrier) AS
  SELECT dp_quantile(v, 0.5, 0, 1000, 0.1) FILTER (WHERE jsonb_populate_record(NULL::ticked_pair, jsonb_build_object('a', v)) IS NOT NULL) AS med
    FROM numbered WHERE v > 500;
CREATE VIEW v_init_plan_above WITH (security_barrier) AS
  SELECT grp, dp_quantile(v + 0 * (SELECT nextval('group_order'))::int, 0.5, 0, 1000, 0.1) AS med FROM numbered
    WHERE v > 500 GROUP BY grp HAVING dp_partition(0.1, 1e-6) ORDER BY 2;
CREATE VIEW v_column_list WITH (security_barrier) AS
  SELECT dp_quantile(v, 0.5, 0, 1000, 0.1) AS med FROM numbered, jsonb_to_record(jsonb_build_object('a', v)) AS r(a ticked_int);
CREATE VIEW v_xmltable WITH (security_barrier) AS
  SELECT dp_quantile(v, 0.5, 0, 1000, 0.1) AS med
    FROM numbered, XMLTABLE('/r' PASSING (('<r><a>' || v || '</a></r>')::xml) COLUMNS a ticked_int PATH 'a') x;
CREATE VIEW v_joined WITH (security_barrier) AS
  SELECT dp_quantile(n.v, 0.5, 0, 1000, 0.1) AS med FROM numbered n JOIN lookup l ON l.k = (n.v % 50)::ticked_int;
CREATE VIEW v_run_condition WITH (security_barrier) AS
  SELECT dp_quantile(v, 0.5, 0, 1000, 0.1) AS med FROM (SELECT v, row_number() OVER (ORDER BY v) AS rn FROM numbered) s
    WHERE rn <= 900::ticked_int;
CREATE VIEW v_multirange WITH (security_barrier) AS
  SELECT dp_quantile(v, 0.5, 0, 1000, 0.1) AS med FROM numbered WHERE ('{[' || v || ',' || (v + 1) || ')}')::ticked_multirange IS NOT NULL;
CREATE VIEW v_out_parameter WITH (security_barrier) AS
  SELECT dp_quantile(v, 0.5, 0, 1000, 0.1) FILTER (WHERE (ticked_pair_of(v)).b = 1) AS med FROM numbered WHERE v > 500;
CREATE VIEW v_table_function WITH (security_barrier) AS
  SELECT dp_quantile(v, 0.5, 0, 1000, 0.1) AS med FROM numbered, ticked_rows(v) t WHERE v > 500;
CREATE VIEW v_domain_state WITH (security_barrier) AS
  SELECT dp_quantile(v, 0.5, 0, 1000, 0.1) AS med, ticked_sum(1) AS s FROM numbered WHERE v > 500;
CREATE VIEW v_row_of_column WITH (security_barrier) AS
  SELECT dp_quantile(v, 0.5, 0, 1000, 0.1) FILTER (WHERE jsonb_populate_record(ROW(d), jsonb_build_object('f1', v)) IS NOT NULL) AS med
    FROM domain_column WHERE v > 500;
CREATE VIEW v_jittered WITH (security_barrier) AS
  SELECT grp, upper(grp) AS name, dp_quantile(v + random() - 0.5, 0.5, 0, 1000, 0.1) AS med FROM numbered GROUP BY grp;
CREATE VIEW v_plain WITH (security_barrier) AS
  SELECT grp, upper(grp) AS name, now() AS at, dp_quantile(v, 0.5, 0, 1000, 0.1) AS med FROM numbered GROUP BY grp;
GRANT SELECT ON v_numbered, v_timed, v_counted_having, v_domain_having, v_direct_argument, v_final_function,
  v_subquery, v_labelled, v_counted_filter, v_counted_rows, v_window, v_domain_array, v_domain_record,
  v_init_plan_above, v_column_list, v_xmltable, v_joined, v_run_condition, v_multirange, v_out_parameter,
  v_table_function, v_domain_state, v_row_of_column, v_jittered, v_plain TO analyst;
GRANT USAGE ON SEQUENCE group_order TO analyst;
SELECT setval('group_order', 1, false);
SQL
volatile() { echo "42501: role \"analyst\", which has a privacy budget, cannot run a differentially private aggregation that calls volatile function $1, itself or in the rows under it: it runs once per row or per group, where its side effects and its values follow the rows; take it out of the view, or declare the function STABLE if it has no side effects"; }
before="$(spent)"
for case in "v_numbered|nextval|nextval per group" "v_timed|clock_timestamp|clock_timestamp per group" \
    "v_counted_having|nextval|nextval in HAVING" "v_domain_having|ticked|a domain's check in HAVING" \
    "v_direct_argument|nextval|an ordered-set aggregate's direct argument" "v_final_function|ticked_final|an aggregate's final function" \
    "v_subquery|random|a subquery run per group" "v_labelled|label|a function declared VOLATILE (the default), not inlined" \
    "v_counted_filter|nextval|a FILTER, per row" "v_counted_rows|ticked|a condition under the node, per row" \
    "v_window|ticked_add|a window aggregate under the node" "v_domain_array|ticked|a domain's check in an array's input" \
    "v_domain_record|ticked|a domain's check in jsonb_populate_record" "v_init_plan_above|nextval|an init-plan attached above the node" \
    "v_column_list|ticked|a function's column list in FROM" "v_xmltable|ticked|XMLTABLE's columns" \
    "v_run_condition|ticked|a window's run condition" "v_multirange|ticked|a multirange of a domain" \
    "v_out_parameter|ticked|a function's OUT parameter of a domain" "v_table_function|ticked|a function's result column of a domain" \
    "v_domain_state|ticked|an aggregate's state of a domain" "v_row_of_column|ticked|a row of a domain column, populated" \
    "v_jittered|random|a DP call's argument, per row"; do
    IFS='|' read -r view function what <<<"$case"
    assert_eq "$(analyst -c "SELECT * FROM $view" 2>&1 | first_error)" "$(volatile "$function")" "$what"
done
assert_eq "$(analyst -c "SET enable_hashagg = off" -c "SELECT string_agg(grp, ' ' ORDER BY n) FROM v_numbered" 2>&1 | first_error)" \
    "$(volatile nextval)" "nextval per group, sorted"
# A domain's coercion is not volatile to PostgreSQL: it may land in a hash join's keys, a
# parameterized index scan (the red team's third round).
for plan in "Hash Cond|" "Index Cond|SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_memoize = off"; do
    IFS='|' read -r shape settings <<<"$plan"
    assert_contains "$(sql -c "$settings" -c "EXPLAIN (COSTS OFF) SELECT * FROM v_joined")" "$shape" "the join planned with $shape"
    assert_eq "$(analyst -c "$settings" -c "SELECT * FROM v_joined" 2>&1 | first_error)" "$(volatile ticked)" "a domain's check in $shape"
done
assert_eq "$(sql -c "SELECT last_value, is_called FROM group_order")" "1|f" "no group or row reached the sequence"
assert_eq "$(spent)" "$before" "volatile calls: charged nothing"
sql -c "ALTER FUNCTION label(text) STABLE"
assert_eq "$(analyst -c "SELECT count(*) FROM v_labelled")" "10" "the function declared STABLE"
assert_eq "$(analyst -c "SELECT count(*), count(DISTINCT name) FROM v_plain")" "10|10" "stable and immutable functions per group"
assert_eq "$(analyst -c "SELECT count(*), count(DISTINCT n) FROM (SELECT nextval('group_order') AS n, random() AS r FROM v_plain ORDER BY r) q")" "10|10" "volatile above the view"
assert_eq "$(sql -c "SELECT count(*) FROM v_numbered")" "10" "a role without a budget: answered"
# A DP aggregate run once per row or group of a DP node is charged at each run: a
# correlated subquery's (in HAVING: once per group, withheld ones too) or a LATERAL's
# charges counted the rows or groups that drove it, exactly (the red team's fifth round).
sql >/dev/null <<'SQL'
CREATE VIEW v_nested_having WITH (security_barrier) AS
  SELECT grp, dp_quantile(v, 0.5, 0, 1000, 0.1) AS med FROM numbered n GROUP BY grp
    HAVING dp_partition(0.1, 1e-6) AND (SELECT dp_quantile(m.v, 0.5, 0, 1000, 0.001) FROM numbered m WHERE m.grp = n.grp) IS NOT NULL;
CREATE VIEW v_nested_row WITH (security_barrier) AS
  SELECT dp_quantile(n.v, 0.5, 0, 1000, 0.1) AS med FROM numbered n
    WHERE n.v > 990 AND (SELECT dp_quantile(m.v + n.v, 0.5, 0, 2000, 0.001) FROM numbered m WHERE m.v = 1) IS NOT NULL;
CREATE VIEW v_nested_lateral WITH (security_barrier) AS
  SELECT dp_quantile(n.v, 0.5, 0, 1000, 0.1) AS med
    FROM numbered n, LATERAL (SELECT dp_quantile(m.v + n.v, 0.5, 0, 2000, 0.001) AS q FROM numbered m WHERE m.v = 1) s WHERE n.v > 990;
CREATE VIEW v_bounded_once WITH (security_barrier) AS
  SELECT dp_quantile(v, 0.5, 0, 1000, 0.1) FILTER (WHERE v < (SELECT dp_quantile(m.v, 0.9, 0, 1000, 0.1) FROM numbered m)) AS med FROM numbered;
GRANT SELECT ON v_nested_having, v_nested_row, v_nested_lateral, v_bounded_once TO analyst;
SQL
nested() { echo "42501: role \"analyst\", which has a privacy budget, cannot run dp_quantile once per row or per group of another differentially private aggregation (a correlated subquery, a nested loop's inner side): each run is charged, and the charges would count the rows; compute it once, in an uncorrelated subquery, or outside the view"; }
before="$(spent)"
for view in v_nested_having v_nested_row v_nested_lateral; do
    assert_eq "$(analyst -c "SELECT * FROM $view" 2>&1 | first_error)" "$(nested)" "$view: a DP aggregate per row or group of another"
done
assert_eq "$(spent)" "$before" "nested DP aggregates: charged nothing"
assert_eq "$(analyst -c "SELECT count(*) FROM v_bounded_once")" "1" "a DP bound computed once (an init-plan): answered"
assert_eq "$(sql -c "SELECT round(($(spent) - $before)::numeric, 6)")" "0.200000" "and charged once for each call"
assert_eq "$(analyst -c "SELECT dp_argmax(grp, 1, 0.1) IS NOT NULL FROM v_plain")" "t" "a DP aggregate over a DP view's groups: answered"
# The search reads each plan once: a CTE that 24 levels read twice each took 16 s (and
# 2 minutes at 27, deaf to statement_timeout and pg_terminate_backend) while the search
# followed every reference (the third round).
ctes="c1 AS MATERIALIZED (SELECT 1 AS x)"
for level in $(seq 2 24); do ctes="$ctes, c$level AS MATERIALIZED (SELECT x FROM c$((level - 1)) UNION ALL SELECT x FROM c$((level - 1)))"; done
# Ranges of ranges nest without end: 35,000 levels of the analyst's own temporary types
# overflowed the stack of the search, and the server restarted (the fourth round).
out="$(analyst -v ON_ERROR_STOP=0 2>&1 <<'SQL'
CREATE TYPE pg_temp.r0 AS RANGE (subtype = int4);
DO $$ BEGIN FOR i IN 1..35000 LOOP
  EXECUTE format('CREATE TYPE pg_temp.r%s AS RANGE (subtype = pg_temp.r%s)', i, i - 1);
  IF i % 1000 = 0 THEN COMMIT; END IF;
END LOOP; END $$;
SELECT dp_quantile(x::float8, 0.5, 0, 10, 0.1) FILTER (WHERE 'empty'::text::pg_temp.r35000 IS NOT NULL) FROM generate_series(1, 3) x;
SELECT 'still here';
-- Dropped a few at a time: at the session's end, one transaction dropping them all ran
-- out of locks and left them to fail the next session given this temporary schema.
DO $$ BEGIN FOR i IN REVERSE 35000..0 LOOP
  EXECUTE format('DROP TYPE pg_temp.r%s', i);
  IF i % 100 = 0 THEN COMMIT; END IF;
END LOOP; END $$;
SQL
)"
assert_eq "$(first_error <<<"$out")" "54001: stack depth limit exceeded" "35,000 nested ranges: an error, not a crash"
assert_contains "$out" "still here" "the session goes on"
assert_eq "$(analyst -c "SET statement_timeout = '5s'" -c "WITH $ctes SELECT dp_quantile(x::float8, 0.5, 0, 10, 0.1) IS NOT NULL FROM c24 WHERE x < 0" 2>&1)" "t" \
    "a CTE read 2^23 times: searched once"
echo "side channels: ok"
