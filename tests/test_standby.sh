# Budgets on every server (issue 12): a primary and streaming standbys made with
# pg_basebackup -R. Limits and charges reach the standby through WAL; a standby refuses
# budgeted roles; promotion keeps every charge; a base backup taken while charges are
# made replays to the primary's accounts (no double charge); a standby without the
# library stops replay with an error that names the fix; snapshots bound start-up.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO"
ARCHIVE="$TEST_ROOT/standby_archive"
as_root rm -rf "$ARCHIVE"; mkdir -p "$ARCHIVE"; chown postgres: "$ARCHIVE"
new_cluster standby_primary "wal_level = replica" "max_wal_senders = 6" \
    "pg_exp_mech.ledger_snapshot_interval = 5" "archive_mode = on" \
    "archive_command = 'cp %p $ARCHIVE/%f'"
PRIMARY="$CLUSTER" PRIMARY_PORT="$PORT"
STANDBY="$TEST_ROOT/standby_replica" STANDBY_PORT="$(free_port $((PORT + 1)))"
COPY="$TEST_ROOT/standby_copy" COPY_PORT="$(free_port $((STANDBY_PORT + 1)))"
trap 'stop_cluster "$PRIMARY"; stop_cluster "$STANDBY"; stop_cluster "$COPY"' EXIT

sql -f scripts/load_adult.sql
sql <<'SQL'
CREATE ROLE analyst LOGIN PASSWORD 'analyst-password';
CREATE ROLE free LOGIN PASSWORD 'free-password';
CREATE VIEW top_status WITH (security_barrier) AS SELECT dp_argmax(marital_status, 1, 0.25) FROM adult;
GRANT SELECT ON top_status TO analyst, free;
SELECT dp_budget_set('analyst', 2);
SQL
# first_error: "SQLSTATE: message" of the first error of a psql run.
first_error() { grep -m1 -oP '^(psql:[^:]*:[0-9]+: )?ERROR:  \K[0-9A-Z]{5}: .*' || true; }
# as ROLE DIR PORT [psql args...]: as ROLE (password = ROLE-password) over TCP.
as() {
    local role="$1" port="$3"; shift 3
    PGPASSWORD="$role-password" "$(pg_bindir)/psql" -X -qAt -v ON_ERROR_STOP=1 \
        -h 127.0.0.1 -p "$port" -U "$role" -d postgres "$@"
}
accounts() { on "$1" "$2" -c "SELECT role, epsilon_limit, epsilon_spent FROM dp_budget ORDER BY role::text"; }
spent() { on "$1" "$2" -c "SELECT epsilon_spent FROM dp_budget WHERE role = '$3'::regrole"; }
echo "1. the standby starts from a base backup and follows the primary's limits and charges"
as analyst "$PRIMARY" "$PRIMARY_PORT" -c 'SELECT * FROM top_status' >/dev/null
make_standby "$STANDBY" "$STANDBY_PORT"
start "$STANDBY"
assert_eq "$(spent "$STANDBY" "$STANDBY_PORT" analyst)" "0.25" "spent, from the base backup"
on "$PRIMARY" "$PRIMARY_PORT" -c "CREATE ROLE late LOGIN PASSWORD 'late-password'" \
    -c "GRANT SELECT ON top_status TO late" -c "SELECT dp_budget_set('late', 0.5)" >/dev/null
for _ in 1 2 3; do as analyst "$PRIMARY" "$PRIMARY_PORT" -c 'SELECT * FROM top_status' >/dev/null; done
caught_up "$STANDBY" "$STANDBY_PORT"
assert_eq "$(spent "$STANDBY" "$STANDBY_PORT" analyst)" "1" "charges made on the primary after the backup"
assert_eq "$(on "$STANDBY" "$STANDBY_PORT" -c "SELECT epsilon_limit FROM dp_budget WHERE role = 'late'::regrole")" "0.5" "a limit set after the backup"
assert_eq "$(accounts "$STANDBY" "$STANDBY_PORT")" "$(accounts "$PRIMARY" "$PRIMARY_PORT")" "the standby's accounts are the primary's"

echo "2. budgeted roles are refused on the standby, and nothing is released or charged"
for role in analyst late; do
    out="$(as "$role" "$STANDBY" "$STANDBY_PORT" -v VERBOSITY=verbose -c 'SELECT * FROM top_status' 2>&1 || true)"
    assert_eq "$(first_error <<<"$out")" "25006: differentially private aggregates of role \"$role\", which has a privacy budget, cannot be charged on a standby, which cannot write the privacy ledger: run it on the primary" "$role on the standby"
    grep -q Married <<<"$out" && fail "an answer left the standby for $role"
done
out="$(on "$STANDBY" "$STANDBY_PORT" -v VERBOSITY=verbose -c "SELECT dp_budget_set('analyst', 100)" 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "25006: privacy budgets cannot be set on a standby, which cannot write the privacy ledger: run it on the primary" "dp_budget_set on the standby"
assert_eq "$(as free "$STANDBY" "$STANDBY_PORT" -c 'SELECT * FROM top_status')" "Married-civ-spouse" "a role without a limit runs on the standby"
# Under require_budget a role without a limit is refused there too, told why.
on "$STANDBY" "$STANDBY_PORT" -c "ALTER SYSTEM SET pg_exp_mech.require_budget = on" -c "SELECT pg_reload_conf()" >/dev/null
sleep 0.5
out="$(as free "$STANDBY" "$STANDBY_PORT" -v VERBOSITY=verbose -c 'SELECT * FROM top_status' 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "25006: differentially private aggregates of role \"free\", which must have a privacy budget (pg_exp_mech.require_budget is on), cannot be charged on a standby, which cannot write the privacy ledger: run it on the primary" "require_budget on the standby"
on "$STANDBY" "$STANDBY_PORT" -c "ALTER SYSTEM RESET pg_exp_mech.require_budget" -c "SELECT pg_reload_conf()" >/dev/null
sleep 0.5
assert_eq "$(spent "$STANDBY" "$STANDBY_PORT" analyst)" "1" "nothing charged by the refusals"
assert_eq "$(spent "$PRIMARY" "$PRIMARY_PORT" analyst)" "1" "nor on the primary"
# dp_budget and dp_ledger read on a standby and from a parallel worker.
# (PostgreSQL 16 renamed force_parallel_mode to debug_parallel_query.)
parallel="SET force_parallel_mode = on"
[ "${PG_FEATURE#pg}" -ge 16 ] && parallel="SET debug_parallel_query = on"
for server in "$PRIMARY $PRIMARY_PORT" "$STANDBY $STANDBY_PORT"; do
    read -r dir port <<<"$server"
    assert_eq "$(on "$dir" "$port" -c "$parallel" -c "SELECT count(*) FROM dp_ledger WHERE kind = 'charge' AND role = 'analyst'::regrole")" 4 "dp_ledger in a parallel worker on $dir"
    assert_eq "$(on "$dir" "$port" -c "$parallel" -c "SELECT epsilon_spent FROM dp_budget WHERE role = 'analyst'::regrole")" 1 "dp_budget in a parallel worker on $dir"
    assert_contains "$(on "$dir" "$port" -c "$parallel" -c 'EXPLAIN (COSTS OFF) SELECT count(*) FROM dp_ledger')" "Gather" "a parallel plan on $dir"
done
assert_eq "$(on "$STANDBY" "$STANDBY_PORT" -c "SELECT count(*) FROM dp_ledger WHERE lsn IS NOT NULL")" \
    "$(on "$PRIMARY" "$PRIMARY_PORT" -c "SELECT count(*) FROM dp_ledger")" "every line has its WAL position"

echo "3. restarts and crashes of the standby replay without charging twice"
as_owner "$(pg_bindir)/pg_ctl" -D "$STANDBY/data" -m immediate -w stop >/dev/null
start "$STANDBY"
caught_up "$STANDBY" "$STANDBY_PORT"
assert_eq "$(accounts "$STANDBY" "$STANDBY_PORT")" "$(accounts "$PRIMARY" "$PRIMARY_PORT")" "after a crash of the standby"
assert_eq "$(on "$STANDBY" "$STANDBY_PORT" -c "SELECT count(*) FROM dp_ledger")" \
    "$(on "$PRIMARY" "$PRIMARY_PORT" -c "SELECT count(*) FROM dp_ledger")" "no line twice in the standby's ledger"

echo "3b. a standby whose ledger cannot be read refuses DP aggregates and stops replay at a ledger record"
# A restartpoint after every ledger record so far: the restart below replays none.
on "$PRIMARY" "$PRIMARY_PORT" -c CHECKPOINT
caught_up "$STANDBY" "$STANDBY_PORT"
on "$STANDBY" "$STANDBY_PORT" -c CHECKPOINT
stop_cluster "$STANDBY"
ledger="$STANDBY/data/pg_exp_mech/ledger"
printf 'refund\t1\n' | as_owner tee -a "$ledger" >/dev/null
start "$STANDBY"
out="$(as free "$STANDBY" "$STANDBY_PORT" -v VERBOSITY=verbose -c 'SELECT * FROM top_status' 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "55000: privacy budgets cannot be enforced: the privacy ledger pg_exp_mech/ledger could not be read at start-up (see the server log)" "even a role without a limit: who is budgeted is unknown"
as analyst "$PRIMARY" "$PRIMARY_PORT" -c 'SELECT * FROM top_status' >/dev/null
for _ in $(seq 50); do grep -q "cannot replay a ledger record" "$STANDBY/server.log" && break; sleep 0.2; done
assert_contains "$(cat "$STANDBY/server.log")" "could not be read at start-up (see above); repair it and start the server again" "replay stops, saying why"
for _ in $(seq 50); do [ -f "$STANDBY/data/postmaster.pid" ] || break; sleep 0.2; done
[ -f "$STANDBY/data/postmaster.pid" ] && fail "the standby went on without its ledger"
as_owner truncate -s -9 "$ledger"   # the repair: the bad line removed
start "$STANDBY"
caught_up "$STANDBY" "$STANDBY_PORT"
assert_eq "$(accounts "$STANDBY" "$STANDBY_PORT")" "$(accounts "$PRIMARY" "$PRIMARY_PORT")" "after the repair, replay resumed and lost nothing"

echo "4. a base backup taken while charges are made replays to the primary's accounts"
# 60 charges in 3 sessions while the backup copies the ledger; more than 5 lines between
# snapshots, so snapshots are written during the copy too.
for session in 1 2 3; do
    (for _ in $(seq 20); do echo 'SELECT * FROM top_status;'; done | as free "$PRIMARY" "$PRIMARY_PORT" >/dev/null) &
done
make_standby "$COPY" "$COPY_PORT"
wait
start "$COPY"
caught_up "$COPY" "$COPY_PORT"
assert_eq "$(spent "$PRIMARY" "$PRIMARY_PORT" free)" "15" "60 charges of 0.25 on the primary"
assert_eq "$(accounts "$COPY" "$COPY_PORT")" "$(accounts "$PRIMARY" "$PRIMARY_PORT")" "the copy's accounts are the primary's"
assert_eq "$(on "$COPY" "$COPY_PORT" -c "SELECT count(*), count(DISTINCT (lsn, role, at)) FROM dp_ledger")" \
    "$(on "$PRIMARY" "$PRIMARY_PORT" -c "SELECT count(*), count(DISTINCT (lsn, role, at)) FROM dp_ledger")" "the copy's ledger has every line once"
[ -f "$PRIMARY/data/pg_exp_mech/snapshot" ] || fail "no snapshot on the primary"
[ -f "$COPY/data/pg_exp_mech/snapshot" ] || fail "no snapshot on the copy"
stop_cluster "$COPY"

echo "5. a standby without the library stops replay, with the fix in the hint"
as_owner sed -i "s/^shared_preload_libraries = 'pg_exp_mech'/shared_preload_libraries = ''/" "$COPY/data/postgresql.conf"
as analyst "$PRIMARY" "$PRIMARY_PORT" -c 'SELECT * FROM top_status' >/dev/null
start "$COPY" 2>/dev/null || true
for _ in $(seq 50); do grep -q "not registered" "$COPY/server.log" && break; sleep 0.2; done
assert_contains "$(cat "$COPY/server.log")" "resource manager with ID 171 not registered" "the error"
# (PostgreSQL 18 quotes the setting's name.)
assert_contains "$(tr -d '"' < "$COPY/server.log")" "Include the extension module that implements this resource manager in shared_preload_libraries." "the hint"
stop_cluster "$COPY"
as_owner sed -i "s/^shared_preload_libraries = ''/shared_preload_libraries = 'pg_exp_mech'/" "$COPY/data/postgresql.conf"
start "$COPY"
caught_up "$COPY" "$COPY_PORT"
assert_eq "$(accounts "$COPY" "$COPY_PORT")" "$(accounts "$PRIMARY" "$PRIMARY_PORT")" "replay resumed with the library"
stop_cluster "$COPY"

echo "5b. point-in-time recovery from a base backup gives the accounts at the target"
make_standby "$COPY" "$COPY_PORT"
as_owner rm -f "$COPY/data/standby.signal"
for _ in 1 2 3; do as free "$PRIMARY" "$PRIMARY_PORT" -c 'SELECT * FROM top_status' >/dev/null; done
target="$(on "$PRIMARY" "$PRIMARY_PORT" -c 'SELECT pg_current_wal_lsn()')"
at_target="$(accounts "$PRIMARY" "$PRIMARY_PORT")"
for _ in 1 2 3; do as free "$PRIMARY" "$PRIMARY_PORT" -c 'SELECT * FROM top_status' >/dev/null; done
on "$PRIMARY" "$PRIMARY_PORT" -c 'SELECT pg_switch_wal()' >/dev/null
sleep 1
{
    echo "primary_conninfo = ''"
    echo "restore_command = 'cp $ARCHIVE/%f %p'"
    echo "recovery_target_lsn = '$target'"
    echo "recovery_target_action = 'promote'"
    echo "recovery_target_inclusive = off"
} | as_owner tee -a "$COPY/data/postgresql.conf" >/dev/null
as_owner touch "$COPY/data/recovery.signal"
start "$COPY"
for _ in $(seq 100); do [ "$(on "$COPY" "$COPY_PORT" -c 'SELECT pg_is_in_recovery()')" = f ] && break; sleep 0.2; done
assert_eq "$(accounts "$COPY" "$COPY_PORT")" "$at_target" "the accounts at the recovery target, not after it"
assert_eq "$(spent "$PRIMARY" "$PRIMARY_PORT" free)" "16.5" "the primary went on (6 more charges)"
stop_cluster "$COPY"

echo "6. promotion keeps every charge made on the old primary"
as analyst "$PRIMARY" "$PRIMARY_PORT" -c 'SELECT * FROM top_status' >/dev/null
caught_up "$STANDBY" "$STANDBY_PORT"
before="$(accounts "$PRIMARY" "$PRIMARY_PORT")"
assert_eq "$(spent "$PRIMARY" "$PRIMARY_PORT" analyst)" "1.75" "analyst on the old primary"
as_owner "$(pg_bindir)/pg_ctl" -D "$PRIMARY/data" -m immediate -w stop >/dev/null
as_owner "$(pg_bindir)/pg_ctl" -D "$STANDBY/data" -w promote >/dev/null
assert_eq "$(accounts "$STANDBY" "$STANDBY_PORT")" "$before" "the promoted standby's accounts"
# The rest of the limit of 2, then a refusal: 1.75 was spent on the old primary.
for _ in 1; do
    assert_eq "$(as analyst "$STANDBY" "$STANDBY_PORT" -c 'SELECT * FROM top_status')" "Married-civ-spouse" "on the new primary"
done
out="$(as analyst "$STANDBY" "$STANDBY_PORT" -v VERBOSITY=verbose -c 'SELECT * FROM top_status' 2>&1 || true)"
assert_eq "$(first_error <<<"$out")" "53400: privacy budget of role \"analyst\" exceeded: dp_argmax needs epsilon 0.25, 0 of 2 remain" "the limit holds across the failover"
as_owner "$(pg_bindir)/pg_ctl" -D "$STANDBY/data" -m immediate -w stop >/dev/null
start "$STANDBY"
assert_eq "$(spent "$STANDBY" "$STANDBY_PORT" analyst)" "2" "after a crash of the new primary"
echo "ok"
