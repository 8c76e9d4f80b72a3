# Privacy budgets from the outside: an analyst logs in over TCP with a password and queries
# DP-only views; the DBA sets budgets. Checks what must hold (issue 5): charges before
# results, repetition paid for, no refund on ROLLBACK / error / cancel, no overspending by
# 8 concurrent sessions, no lost charge on a crash, and what the analyst cannot do.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO"
new_cluster budgets
sql -f scripts/load_adult.sql
sql <<'SQL'
CREATE ROLE analyst LOGIN PASSWORD 'analyst-password';
CREATE ROLE helper LOGIN PASSWORD 'helper-password';
GRANT helper TO analyst;
CREATE VIEW top_status WITH (security_barrier) AS SELECT dp_argmax(marital_status, 1, 0.5) FROM adult;
CREATE VIEW median_age WITH (security_barrier) AS SELECT dp_quantile(age, 0.5, 0, 100, 0.25) FROM adult;
CREATE VIEW median_age_by_sex WITH (security_barrier) AS SELECT sex, dp_quantile(age, 0.5, 0, 100, 0.25) FROM adult GROUP BY sex;
GRANT SELECT ON top_status, median_age, median_age_by_sex TO analyst, helper;
SELECT dp_budget_set('analyst', 5);
SELECT dp_budget_set('helper', 100);
SQL
analyst() { sql_as analyst analyst-password "$@"; }
spent() { sql -c "SELECT epsilon_spent FROM dp_budget WHERE role = '$1'::regrole"; }
# "SQLSTATE: message" of the first error of a psql run (psql's verbose error format).
first_error() { grep -m1 -oP '^(psql:[^:]*:[0-9]+: )?ERROR:  \K[0-9A-Z]{5}: .*' || true; }

echo "1. charged before the result; refused beyond the limit"
assert_eq "$(analyst -c 'SELECT * FROM top_status')" "Married-civ-spouse" "a private answer"
assert_eq "$(spent analyst)" "0.5" "one evaluation at 0.5"
assert_eq "$(analyst -c 'SELECT dp_budget_remaining()')" "4.5" "remaining, as the analyst sees it"

echo "2. repetition is paid for: 3 correlated evaluations, then a GROUP BY of 2 groups"
analyst -c 'SELECT (SELECT * FROM top_status WHERE g > 0) FROM generate_series(1, 3) g' >/dev/null
assert_eq "$(spent analyst)" "2" "3 evaluations at 0.5"
assert_eq "$(analyst -c 'SELECT count(*) FROM median_age_by_sex')" "2" "two groups"
assert_eq "$(spent analyst)" "2.25" "a GROUP BY is charged once: 0.25 for both groups"

echo "3. ROLLBACK, an error later in the transaction, and a cancelled statement refund nothing"
analyst -c 'BEGIN' -c 'SELECT * FROM median_age' -c 'ROLLBACK' >/dev/null
assert_eq "$(spent analyst)" "2.5" "after ROLLBACK"
analyst -v ON_ERROR_STOP=0 -c 'BEGIN' -c 'SELECT * FROM median_age' -c 'SELECT 1/0' -c 'COMMIT' >/dev/null 2>&1 || true
assert_eq "$(spent analyst)" "2.75" "after an error later in the transaction"
# The plan starts (and is charged), then the statement is cancelled by its timeout: no
# result reached the client, and the charge still stands (conservative).
analyst -v ON_ERROR_STOP=0 -c "SET statement_timeout = '500ms'" \
    -c 'SELECT m, pg_sleep(2) FROM median_age m' >/dev/null 2>&1 || true
assert_eq "$(spent analyst)" "3" "after a cancelled statement"

echo "4. the analyst cannot dodge or raise the budget"
out="$(analyst -v VERBOSITY=verbose -c "SELECT dp_budget_set('analyst', 1000)" 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "42501: permission denied for function dp_budget_set" "raise its budget"
out="$(analyst -v VERBOSITY=verbose -c 'SELECT * FROM dp_ledger' 2>&1 || true)"
assert_contains "$(first_error <<<"$out")" "42501: permission denied for the privacy ledger" "read the ledger"
out="$(analyst -v VERBOSITY=verbose -c 'DELETE FROM dp_ledger' 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "55000: cannot delete from view \"dp_ledger\"" "delete ledger rows"
out="$(analyst -v VERBOSITY=verbose -c 'SET pg_exp_mech.seed = 1' 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "42501: permission denied to set parameter \"pg_exp_mech.seed\"" "set the seed"
out="$(analyst -v VERBOSITY=verbose -c 'SELECT * FROM adult LIMIT 1' 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "42501: permission denied for table adult" "read the table"
assert_eq "$(analyst -c 'SELECT count(*) FROM dp_budget')" "1" "sees its own budget row only"
out="$(analyst -v VERBOSITY=verbose -c 'EXPLAIN ANALYZE SELECT * FROM top_status' 2>&1 || true)"
assert_contains "$(first_error <<<"$out")" "42501: EXPLAIN ANALYZE (or any instrumented execution) of a plan with differentially private aggregates is not allowed" "EXPLAIN ANALYZE"
out="$(analyst -v VERBOSITY=verbose -c 'PREPARE p AS SELECT * FROM median_age' -c 'EXPLAIN ANALYZE EXECUTE p' 2>&1 || true)"
assert_contains "$(first_error <<<"$out")" "42501: EXPLAIN ANALYZE (or any instrumented execution) of a plan with differentially private aggregates" "EXPLAIN ANALYZE EXECUTE"
assert_contains "$(analyst -c 'EXPLAIN SELECT * FROM top_status')" "Seq Scan on adult" "plain EXPLAIN is allowed"
# SET ROLE to a role with a larger budget still charges the login role.
analyst -c 'SET ROLE helper' -c 'SELECT * FROM median_age' >/dev/null
assert_eq "$(spent analyst)" "3.25" "SET ROLE: charged to the login role"
assert_eq "$(spent helper)" "0" "nothing charged to the role set"
assert_eq "$(spent analyst)" "3.25" "no charge for the refusals above"

echo "5. a crash never loses a charge whose result was returned"
assert_eq "$(analyst -c 'SELECT * FROM top_status')" "Married-civ-spouse" "answer before the crash"
as_owner "$(pg_bindir)/pg_ctl" -D "$CLUSTER/data" -m immediate -w stop >/dev/null
as_owner env -u RUST_BACKTRACE "$(pg_bindir)/pg_ctl" -D "$CLUSTER/data" -l "$CLUSTER/server.log" -w start >/dev/null
assert_eq "$(spent analyst)" "3.75" "after pg_ctl stop -m immediate"
# SIGKILL of the analyst's backend right after its answer arrived.
analyst -c 'SELECT * FROM top_status' -c 'SELECT pg_sleep(60)' >"$CLUSTER/killed.out" 2>&1 &
client=$!
for _ in $(seq 100); do grep -q Married "$CLUSTER/killed.out" && break; sleep 0.1; done
assert_contains "$(cat "$CLUSTER/killed.out")" "Married-civ-spouse" "answer before SIGKILL"
backend="$(sql -c "SELECT pid FROM pg_stat_activity WHERE usename = 'analyst' AND query LIKE '%pg_sleep%'")"
kill -9 "$backend"
wait "$client" || true
for _ in $(seq 100); do sql -c 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.2; done
assert_eq "$(spent analyst)" "4.25" "after SIGKILL of the backend (the server reinitialised)"
# A torn last line (a write cut short) is dropped at start-up; whole lines are kept.
as_owner "$(pg_bindir)/pg_ctl" -D "$CLUSTER/data" -m immediate -w stop >/dev/null
printf 'charge\t1\t1' | as_owner tee -a "$CLUSTER/data/pg_exp_mech/ledger" >/dev/null
as_owner env -u RUST_BACKTRACE "$(pg_bindir)/pg_ctl" -D "$CLUSTER/data" -l "$CLUSTER/server.log" -w start >/dev/null
assert_eq "$(spent analyst)" "4.25" "after a torn last line"
assert_eq "$(tail -c 1 "$CLUSTER/data/pg_exp_mech/ledger" | od -An -c | tr -d ' ')" '\n' "torn line truncated"

echo "6. 8 concurrent sessions cannot overspend"
sql -c "SELECT dp_budget_set('analyst', 4.25 + 6 * 0.5)" >/dev/null   # room for exactly 6 more
for session in $(seq 8); do
    (for _ in $(seq 10); do echo 'SELECT * FROM top_status;'; done \
        | analyst -v ON_ERROR_STOP=0 -v VERBOSITY=verbose >"$CLUSTER/race.$session.out" 2>&1) &
done
wait
answers="$(cat "$CLUSTER"/race.*.out | grep -c 'Married-civ-spouse' || true)"
refusals="$(cat "$CLUSTER"/race.*.out | grep -c 'ERROR:  53400: privacy budget of role "analyst" exceeded' || true)"
assert_eq "$answers" 6 "answers among 80 racing attempts"
assert_eq "$refusals" 74 "refusals among 80 racing attempts"
assert_eq "$(spent analyst)" "7.25" "spent = limit"
assert_eq "$(sql -c "SELECT count(*) FROM dp_ledger WHERE role = 'analyst'::regrole AND kind = 'charge'")" 17 "ledger lines: one per evaluation (one for the GROUP BY)"

echo "7. require_budget refuses roles without a budget"
sql -c "CREATE ROLE newcomer LOGIN PASSWORD 'newcomer-password'" -c "GRANT SELECT ON top_status TO newcomer" >/dev/null
assert_eq "$(sql_as newcomer newcomer-password -c 'SELECT * FROM top_status')" "Married-civ-spouse" "off by default"
sql -c "ALTER SYSTEM SET pg_exp_mech.require_budget = on" -c "SELECT pg_reload_conf()" >/dev/null
sleep 0.5
out="$(sql_as newcomer newcomer-password -v VERBOSITY=verbose -c 'SELECT * FROM top_status' 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "42501: role \"newcomer\" has no privacy budget, and pg_exp_mech.require_budget is on" "require_budget on"

echo "8. without shared_preload_libraries a cluster with a ledger refuses to run unmetered"
sql -c "ALTER SYSTEM RESET pg_exp_mech.require_budget" >/dev/null
stop_cluster "$CLUSTER"
echo "shared_preload_libraries = ''" | as_owner tee -a "$CLUSTER/data/postgresql.conf" >/dev/null
as_owner env -u RUST_BACKTRACE "$(pg_bindir)/pg_ctl" -D "$CLUSTER/data" -l "$CLUSTER/server.log" -w start >/dev/null
out="$(sql -v VERBOSITY=verbose -c 'SELECT dp_argmax(sex, 1, 1.0) FROM adult' 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "55000: privacy budgets cannot be enforced: this cluster keeps a privacy ledger (pg_exp_mech/ledger), but pg_exp_mech is not in shared_preload_libraries" "no preload, ledger present"
out="$(sql -v VERBOSITY=verbose -c "SELECT dp_budget_set('analyst', 1)" 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "55000: privacy budgets cannot be enforced: pg_exp_mech is not in shared_preload_libraries" "no preload: dp_budget_set"
as_owner mv "$CLUSTER/data/pg_exp_mech" "$CLUSTER/data/pg_exp_mech.removed"
assert_eq "$(sql -c 'SELECT dp_argmax(sex, 1, 1e6) FROM adult')" "Male" "no preload, no ledger: unmetered"
# Each psql below is a new session, whose first statement loads the library inside its
# ExecutorStart: its plan is refused all the same before any row (it was not checked).
sql -c "CREATE TABLE spelled_keys(n numeric, i interval, g int)"
several="values that compare equal can be spelled differently, and the answer would show a row's spelling"
out="$(sql -v VERBOSITY=verbose -c "SELECT n::text FROM spelled_keys GROUP BY n HAVING dp_partition(1, 1e-6)" 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "0A000: columns of type numeric read per group (group keys, output, HAVING) cannot be released by dp_partition's node: $several; group by a cast to text (each spelling then its own group)" "no preload: a session's first statement, no row"
out="$(sql -v VERBOSITY=verbose -c "SELECT g, dp_argmax(i, 1, 1.0) FROM spelled_keys GROUP BY g" 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "0A000: items of type interval cannot be answered without candidates: $several; cast the items to text (each spelling then its own item), or list the candidates (answered as listed)" "no preload: a grouped first statement, no group"
# A cursor that loads the library, then another statement, or another cursor's fetch,
# before its first fetch: still refused before any row.
sql -c "INSERT INTO spelled_keys VALUES (1.00, '1 day', 1), (1.0, '24 hours', 1)"
partition="SELECT n::text FROM spelled_keys GROUP BY n HAVING dp_partition(1, 1e-6)"
keys_refused="0A000: columns of type numeric read per group (group keys, output, HAVING) cannot be released by dp_partition's node: $several; group by a cast to text (each spelling then its own group)"
out="$(sql -v VERBOSITY=verbose -c "BEGIN" -c "DECLARE a CURSOR FOR $partition" -c "SELECT 1" -c "FETCH ALL FROM a" 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "$keys_refused" "no preload: a cursor fetched after another statement"
out="$(sql -v VERBOSITY=verbose -c "BEGIN" -c "DECLARE z CURSOR FOR SELECT 1" -c "DECLARE a CURSOR FOR $partition" \
    -c "FETCH z" -c "FETCH ALL FROM a" 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "$keys_refused" "no preload: a cursor fetched after another cursor's fetch"

echo "9. the table of accounts is sized from pg_exp_mech.max_roles and the ledger; refusals take no slot"
stop_cluster "$CLUSTER"
as_owner mv "$CLUSTER/data/pg_exp_mech.removed" "$CLUSTER/data/pg_exp_mech"
as_owner sed -i "s/^shared_preload_libraries = ''/shared_preload_libraries = 'pg_exp_mech'/" "$CLUSTER/data/postgresql.conf"
echo "pg_exp_mech.max_roles = 16" | as_owner tee -a "$CLUSTER/data/postgresql.conf" >/dev/null
# A ledger naming 40 roles (lines of roles that no longer exist) and a table of 16: the
# server starts, with room for twice the roles the ledger names.
for role in $(seq 90001 90040); do printf 'limit	0	%s	1.0	0.0
' "$role"; done | as_owner tee -a "$CLUSTER/data/pg_exp_mech/ledger" >/dev/null
as_owner env -u RUST_BACKTRACE "$(pg_bindir)/pg_ctl" -D "$CLUSTER/data" -l "$CLUSTER/server.log" -w start >/dev/null
rows="$(sql -c 'SELECT count(*) FROM dp_budget')"
[ "$rows" -gt 40 ] || fail "every role of the ledger has its account: $rows rows"
room=$((2 * rows))
assert_contains "$(cat "$CLUSTER/server.log")" "loaded $rows privacy accounts (room for $room)" "sized from the ledger: twice its roles"
assert_eq "$(spent analyst)" "7.25" "the analyst's account survived"
# Roles refused under require_budget take no slot.
sql -c "ALTER SYSTEM SET pg_exp_mech.require_budget = on" -c "SELECT pg_reload_conf()" >/dev/null
sleep 0.5
out="$(sql_as newcomer newcomer-password -v VERBOSITY=verbose -c 'SELECT * FROM top_status' 2>&1 || true)"
assert_contains "$(first_error <<<"$out")" "42501: role \"newcomer\" has no privacy budget" "refused"
assert_eq "$(sql -c 'SELECT count(*) FROM dp_budget')" "$rows" "a refusal takes no slot"
sql -c "ALTER SYSTEM RESET pg_exp_mech.require_budget" -c "SELECT pg_reload_conf()" >/dev/null
# Filling the table refuses new roles only, with the fix in the message.
sql -c "DO \$\$ BEGIN FOR i IN 1..$room - $rows LOOP
           EXECUTE format('CREATE ROLE filler_%s', i);
           PERFORM dp_budget_set(format('filler_%s', i)::regrole, 1);
         END LOOP; END \$\$" >/dev/null
out="$(sql -v VERBOSITY=verbose -c "CREATE ROLE latecomer" -c "SELECT dp_budget_set('latecomer', 1)" 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "54000: the privacy ledger tracks at most $room roles, and all are in use (raise pg_exp_mech.max_roles and restart)" "a full table"
assert_eq "$(sql_as helper helper-password -c 'SELECT * FROM top_status')" "Married-civ-spouse" "roles with a slot go on"
# A restart sizes the table anew: twice the roles now.
stop_cluster "$CLUSTER"
as_owner env -u RUST_BACKTRACE "$(pg_bindir)/pg_ctl" -D "$CLUSTER/data" -l "$CLUSTER/server.log" -w start >/dev/null
sql -c "SELECT dp_budget_set('latecomer', 1)" >/dev/null
assert_contains "$(cat "$CLUSTER/server.log")" "loaded $room privacy accounts (room for $((2 * room)))" "after a restart"

echo "10. an unreadable ledger is reported as such, not as an empty table"
stop_cluster "$CLUSTER"
printf 'refund\t1\n' | as_owner tee -a "$CLUSTER/data/pg_exp_mech/ledger" >/dev/null
as_owner env -u RUST_BACKTRACE "$(pg_bindir)/pg_ctl" -D "$CLUSTER/data" -l "$CLUSTER/server.log" -w start >/dev/null
unreadable="55000: privacy budgets cannot be enforced: the privacy ledger pg_exp_mech/ledger could not be read at start-up (see the server log)"
for query in 'SELECT * FROM dp_budget' 'SELECT dp_budget_remaining()' 'SELECT * FROM top_status'; do
    out="$(analyst -v VERBOSITY=verbose -c "$query" 2>&1 || true)"
    assert_eq "$(first_error <<<"$out")" "$unreadable" "$query"
done
assert_contains "$(cat "$CLUSTER/server.log")" "cannot be read" "the server log says why"
echo "budgets hold"
