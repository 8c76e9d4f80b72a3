#!/usr/bin/env bash
# The whole test suite: `make test`. Installs what is missing (PostgreSQL 18 and Citus are
# built once into a cache outside the clone), then, on PostgreSQL 15 (Debian's) and on 18:
#   1. the gate: cargo fmt --check and cargo clippy for each version (every warning an
#      error, every unsafe block with its SAFETY comment: Cargo.toml's [lints]);
#   2. cargo pgrx test: the pure Rust tests and the #[pg_test] SQL tests (inside PostgreSQL);
#   3. tests/run.sh: tests that drive a real cluster from outside, over psql.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$REPO"
ensure_prerequisites
PG18_CONFIG="$(ensure_pg18)"
ensure_citus "$PG18_CONFIG"   # for tests/test_citus.sh

say "formatting and lints (cargo fmt --check, cargo clippy for PostgreSQL 15 and 18)"
cargo fmt --check
cargo clippy --all-targets --quiet -- -D warnings
cargo clippy --all-targets --quiet --no-default-features --features pg18 -- -D warnings

WORK="${PG_EXP_MECH_TEST_DIR:-/tmp/pg_exp_mech-test}"
# cargo pgrx test's harness installs the extension with `$CARGO_PGRX pgrx install`, as root
# with `sudo cp`, in place; this script installs it by rename, so running clusters live on.
export CARGO_PGRX="$REPO/scripts/cargo-pgrx-by-rename.sh"

# suite PG_CONFIG: every test against one PostgreSQL.
suite() {
    local pg_config="$1" feature work
    feature="pg$("$pg_config" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')"
    work="$WORK/$feature"
    mkdir -p "$work"
    say "$feature: pure Rust and in-database tests (cargo pgrx test)"
    if [ "$(id -u)" -eq 0 ]; then
        chown postgres: "$WORK" "$work"
        cargo pgrx test "$feature" --runas postgres --pgdata "$work/pgrx-data"
    else
        cargo pgrx test "$feature"
    fi
    say "$feature: tests against a real cluster (tests/run.sh)"
    (
        export PG_CONFIG="$pg_config" PG_EXP_MECH_TEST_DIR="$work"
        source "$REPO/scripts/common.sh"
        install_extension debug
        bash tests/run.sh
    )
}
suite "$PG_CONFIG"
suite "$PG18_CONFIG"
say "all tests passed (PostgreSQL 15 and 18)"
