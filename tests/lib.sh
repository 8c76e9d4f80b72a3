# Helpers for the tests that drive a real cluster from outside (psql over a socket or TCP).
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"
TEST_ROOT="${PG_EXP_MECH_TEST_DIR:-/tmp/pg_exp_mech-test}"

fail() { printf 'FAIL: %b\n' "$*" >&2; exit 1; }
assert_eq() { [ "$1" == "$2" ] || fail "${3:-}: expected [$2], got [$1]"; }
assert_contains() { grep -qF -- "$2" <<<"$1" || fail "${3:-}: [$2] is not in:\n$1"; }
assert_not_contains() { ! grep -qF -- "$2" <<<"$1" || fail "${3:-}: [$2] is in:\n$1"; }

# new_cluster NAME [postgresql.conf lines...]: a fresh cluster for this test file, with
# pg_exp_mech created in database postgres. Sets CLUSTER and PORT; stopped on exit.
new_cluster() {
    CLUSTER="$TEST_ROOT/$1"; shift
    PORT="$(free_port 56432)"
    start_cluster "$CLUSTER" "$PORT" "$@"
    trap 'stop_cluster "$CLUSTER"' EXIT
    sql -c "CREATE EXTENSION pg_exp_mech"
    revoke_tablespace_size postgres
}

# revoke_tablespace_size DATABASE: the DBA guide's step 6 (a budgeted role that may read
# the size of the directory where DP statements spill is refused).
revoke_tablespace_size() {
    sql -d "$1" -c "REVOKE EXECUTE ON FUNCTION pg_tablespace_size(name), pg_tablespace_size(oid) FROM PUBLIC"
}

# sql [psql args...]: as the superuser, over the socket, unaligned and quiet.
sql() { cluster_psql "$CLUSTER" "$PORT" -qAt "$@"; }

# sql_as ROLE PASSWORD [psql args...]: as ROLE over TCP, authenticated by password.
sql_as() {
    local role="$1" password="$2"; shift 2
    PGPASSWORD="$password" "$(pg_bindir)/psql" -X -qAt -v ON_ERROR_STOP=1 \
        -h 127.0.0.1 -p "$PORT" -U "$role" -d postgres "$@"
}

# Servers beside the test's own (standbys, restored copies). PRIMARY and PRIMARY_PORT
# name the primary.
# on DIR PORT [psql args...]: as the superuser on one server.
on() { local dir="$1" port="$2"; shift 2; cluster_psql "$dir" "$port" -qAt "$@"; }
# start DIR: starts the server whose data directory is DIR/data.
start() { as_owner env -u RUST_BACKTRACE "$(pg_bindir)/pg_ctl" -D "$1/data" -l "$1/server.log" -w start >/dev/null; }
# make_standby DIR PORT [postgresql.conf lines...]: a base backup of the primary,
# streaming from it.
make_standby() {
    local dir="$1" port="$2"; shift 2
    stop_cluster "$dir"
    as_root rm -rf "$dir"
    mkdir -p "$dir"
    chown postgres: "$dir"
    as_owner "$(pg_bindir)/pg_basebackup" -h "$PRIMARY" -p "$PRIMARY_PORT" -U postgres \
        -D "$dir/data" -R -X stream -c fast
    {
        echo "port = $port"
        echo "unix_socket_directories = '$dir'"
        for line in "$@"; do echo "$line"; done
    } | as_owner tee -a "$dir/data/postgresql.conf" >/dev/null
}
# caught_up DIR PORT: waits until the server in DIR replayed everything the primary wrote.
caught_up() {
    local target
    target="$(on "$PRIMARY" "$PRIMARY_PORT" -c 'SELECT pg_current_wal_lsn()')"
    for _ in $(seq 100); do
        [ "$(on "$1" "$2" -c "SELECT pg_last_wal_replay_lsn() >= '$target'")" = t ] && return
        sleep 0.1
    done
    fail "the server in $1 did not reach $target"
}
