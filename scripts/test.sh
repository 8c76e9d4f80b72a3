#!/usr/bin/env bash
# The whole test suite: `make test`. Installs what is missing, then runs
#   1. the gate: cargo fmt --check and cargo clippy (every warning an error, every unsafe
#      block with its SAFETY comment: Cargo.toml's [lints]);
#   2. cargo pgrx test: the pure Rust tests and the #[pg_test] SQL tests (inside PostgreSQL);
#   3. tests/run.sh: tests that drive a real cluster from outside, over psql.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$REPO"
ensure_prerequisites

say "formatting and lints (cargo fmt --check, cargo clippy)"
cargo fmt --check
cargo clippy --all-targets --quiet -- -D warnings

WORK="${PG_EXP_MECH_TEST_DIR:-/tmp/pg_exp_mech-test}"
mkdir -p "$WORK"
say "pure Rust and in-database tests (cargo pgrx test)"
# cargo pgrx test's harness installs the extension with `$CARGO_PGRX pgrx install`, as root
# with `sudo cp`, in place; this script installs it by rename, so running clusters live on.
export CARGO_PGRX="$REPO/scripts/cargo-pgrx-by-rename.sh"
if [ "$(id -u)" -eq 0 ]; then
    chown postgres: "$WORK"
    cargo pgrx test pg15 --runas postgres --pgdata "$WORK/pgrx-data"
else
    cargo pgrx test pg15
fi

install_extension debug
say "tests against a real cluster (tests/run.sh)"
bash tests/run.sh
say "all tests passed"
