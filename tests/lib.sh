# Helpers for the tests that drive a real cluster from outside (psql over a socket or TCP).
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"
TEST_ROOT="${PG_EXP_MECH_TEST_DIR:-/tmp/pg_exp_mech-test}"

fail() { printf 'FAIL: %b\n' "$*" >&2; exit 1; }
assert_eq() { [ "$1" == "$2" ] || fail "${3:-}: expected [$2], got [$1]"; }
assert_contains() { grep -qF -- "$2" <<<"$1" || fail "${3:-}: [$2] is not in:\n$1"; }

# new_cluster NAME [postgresql.conf lines...]: a fresh cluster for this test file, with
# pg_exp_mech created in database postgres. Sets CLUSTER and PORT; stopped on exit.
new_cluster() {
    CLUSTER="$TEST_ROOT/$1"; shift
    PORT="$(free_port 56432)"
    start_cluster "$CLUSTER" "$PORT" "$@"
    trap 'stop_cluster "$CLUSTER"' EXIT
    sql -c "CREATE EXTENSION pg_exp_mech"
}

# sql [psql args...]: as the superuser, over the socket, unaligned and quiet.
sql() { cluster_psql "$CLUSTER" "$PORT" -qAt "$@"; }

# sql_as ROLE PASSWORD [psql args...]: as ROLE over TCP, authenticated by password.
sql_as() {
    local role="$1" password="$2"; shift 2
    PGPASSWORD="$password" "$(pg_bindir)/psql" -X -qAt -v ON_ERROR_STOP=1 \
        -h 127.0.0.1 -p "$PORT" -U "$role" -d postgres "$@"
}
