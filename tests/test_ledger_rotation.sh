# A ledger that does not grow forever (issue 19, part 5): with a 1 kB rotation size and a
# snapshot every 5 lines, the ledger file is archived again and again while charges are
# made. Every account and every line survive a crash, a streaming standby and
# point-in-time recovery across rotations; dp_ledger reads the archives, and
# dp_ledger_drop_archives removes them, leaving a note and the accounts.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO"
WAL_ARCHIVE="$TEST_ROOT/rotation_wal"
as_root rm -rf "$WAL_ARCHIVE"; mkdir -p "$WAL_ARCHIVE"; chown postgres: "$WAL_ARCHIVE"
new_cluster rotation_primary "wal_level = replica" "max_wal_senders = 4" \
    "pg_exp_mech.ledger_snapshot_interval = 5" "pg_exp_mech.ledger_rotation_size = 1" \
    "archive_mode = on" "archive_command = 'cp %p $WAL_ARCHIVE/%f'"
PRIMARY="$CLUSTER" PRIMARY_PORT="$PORT"
STANDBY="$TEST_ROOT/rotation_standby" STANDBY_PORT="$(free_port $((PORT + 1)))"
COPY="$TEST_ROOT/rotation_copy" COPY_PORT="$(free_port $((STANDBY_PORT + 1)))"
trap 'stop_cluster "$PRIMARY"; stop_cluster "$STANDBY"; stop_cluster "$COPY"' EXIT
sql <<'SQL'
CREATE ROLE analyst LOGIN PASSWORD 'analyst-password';
CREATE TABLE t AS SELECT i % 5 AS item FROM generate_series(1, 100) i;
CREATE VIEW top_item WITH (security_barrier) AS SELECT dp_argmax(item, 1, 0.25) FROM t;
GRANT SELECT ON top_item TO analyst;
SELECT dp_budget_set('analyst', 100);
SQL
charges() { for _ in $(seq "$1"); do echo 'SELECT * FROM top_item;'; done | sql_as analyst analyst-password >/dev/null; }
spent() { on "$1" "$2" -c "SELECT epsilon_spent FROM dp_budget WHERE role = 'analyst'::regrole"; }
# Charge lines in dp_ledger, and how many distinct WAL positions they have.
lines() { on "$1" "$2" -c "SELECT count(*) || ' ' || count(DISTINCT lsn) FROM dp_ledger WHERE kind = 'charge'"; }
archives() { as_root find "$1/data/pg_exp_mech" -name 'ledger.*' | wc -l; }

echo "1. the ledger rotates; dp_ledger reads every line, from the archives and the file"
charges 40
assert_eq "$(spent "$PRIMARY" "$PRIMARY_PORT")" "10" "40 charges of 0.25"
[ "$(archives "$PRIMARY")" -ge 2 ] || fail "expected at least 2 archives, found $(archives "$PRIMARY")"
assert_eq "$(lines "$PRIMARY" "$PRIMARY_PORT")" "40 40" "every charge once"
assert_eq "$(on "$PRIMARY" "$PRIMARY_PORT" -c "SELECT count(DISTINCT file) >= 3 AND bool_or(file = 'pg_exp_mech/ledger') FROM dp_ledger")" "t" "lines come from archives and from the file"
assert_contains "$(cat "$PRIMARY/server.log")" "the privacy ledger reached 1 kB and is archived in pg_exp_mech/ledger." "the log says so"
[ "$(as_root stat -c %s "$PRIMARY/data/pg_exp_mech/ledger")" -lt 2048 ] || fail "the ledger file kept growing"

echo "2. a crash replays without losing or doubling a line"
as_owner "$(pg_bindir)/pg_ctl" -D "$PRIMARY/data" -m immediate -w stop >/dev/null
start "$PRIMARY"
assert_eq "$(spent "$PRIMARY" "$PRIMARY_PORT")" "10" "after a crash"
assert_eq "$(lines "$PRIMARY" "$PRIMARY_PORT")" "40 40" "every charge once after a crash"

echo "3. a streaming standby rotates its own ledger and keeps the primary's accounts"
make_standby "$STANDBY" "$STANDBY_PORT"
start "$STANDBY"
charges 20
caught_up "$STANDBY" "$STANDBY_PORT"
assert_eq "$(spent "$STANDBY" "$STANDBY_PORT")" "15" "the standby's account"
assert_eq "$(lines "$STANDBY" "$STANDBY_PORT")" "60 60" "the standby's ledger: every line once"
[ "$(archives "$STANDBY")" -ge 1 ] || fail "the standby did not rotate"
as_owner "$(pg_bindir)/pg_ctl" -D "$STANDBY/data" -m immediate -w stop >/dev/null
start "$STANDBY"
caught_up "$STANDBY" "$STANDBY_PORT"
assert_eq "$(spent "$STANDBY" "$STANDBY_PORT") $(lines "$STANDBY" "$STANDBY_PORT")" "15 60 60" "after a crash of the standby"
stop_cluster "$STANDBY"

echo "4. point-in-time recovery across rotations gives the accounts at the target"
make_standby "$COPY" "$COPY_PORT"
as_owner rm -f "$COPY/data/standby.signal"
charges 12
target="$(on "$PRIMARY" "$PRIMARY_PORT" -c 'SELECT pg_current_wal_lsn()')"
charges 12
on "$PRIMARY" "$PRIMARY_PORT" -c 'SELECT pg_switch_wal()' >/dev/null
sleep 1
printf "primary_conninfo = ''\nrestore_command = 'cp %s/%%f %%p'\nrecovery_target_lsn = '%s'\nrecovery_target_action = 'promote'\nrecovery_target_inclusive = off\n" \
    "$WAL_ARCHIVE" "$target" | as_owner tee -a "$COPY/data/postgresql.conf" >/dev/null
as_owner touch "$COPY/data/recovery.signal"
start "$COPY"
for _ in $(seq 100); do [ "$(on "$COPY" "$COPY_PORT" -c 'SELECT pg_is_in_recovery()')" = f ] && break; sleep 0.2; done
assert_eq "$(spent "$COPY" "$COPY_PORT") $(lines "$COPY" "$COPY_PORT")" "18 72 72" "at the target: 72 charges"
assert_eq "$(spent "$PRIMARY" "$PRIMARY_PORT") $(lines "$PRIMARY" "$PRIMARY_PORT")" "21 84 84" "the primary went on"
stop_cluster "$COPY"

echo "5. archives are dropped only on request, noted, and the accounts stay"
out="$(sql_as analyst analyst-password -v VERBOSITY=verbose -c "SELECT dp_ledger_drop_archives(now())" 2>&1 || true)"
assert_contains "$out" "42501: permission denied for function dp_ledger_drop_archives" "not for PUBLIC"
kept="$(archives "$PRIMARY")"
assert_eq "$(sql -c "SELECT dp_ledger_drop_archives(now() - interval '1 day')")" "0" "none older than a day"
assert_eq "$(sql -c "SELECT dp_ledger_drop_archives(now())")" "$kept" "every archive"
assert_eq "$(archives "$PRIMARY")" "0" "removed"
assert_eq "$(sql -c "SELECT count(*) FROM dp_ledger WHERE kind = 'dropped' AND file LIKE 'pg_exp_mech/ledger.%' AND lsn IS NOT NULL")" "$kept" "a dropped row each"
[ "$(sql -c "SELECT count(*) FROM dp_ledger WHERE kind = 'charge'")" -lt 84 ] || fail "the dropped lines are still listed"
stop_cluster "$PRIMARY"; start "$PRIMARY"
assert_eq "$(spent "$PRIMARY" "$PRIMARY_PORT")" "21" "the accounts keep what the archives held, after a restart"
echo "ledger rotation: ok"
