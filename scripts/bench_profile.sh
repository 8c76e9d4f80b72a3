#!/usr/bin/env bash
# Where the grouped dp_quantile's time goes: `make bench-profile` (README, Performance).
# Builds pg_exp_mech in release mode, and its floor build (feature bench_floor: the
# quantile transitions make each group's state and return without counting the row, the
# finals answer without a draw; in target/floor) into a copy of the PostgreSQL
# installation under /var/tmp; runs the per-row micro-benchmark (our work in Rust alone);
# starts one throwaway cluster with each library and make bench's settings, generates the
# number tables in both, and times the grouped dp_quantile against count(v) on both while
# perf samples the backend, then on the first with 2 workers, in phases (bench/profile.py).
# Results in bench/out/profile.md. 10^7 rows
# in 10^4 groups only (the sizes per_row_speed times); BENCH_RUNS (7) runs. Needs root,
# for perf to sample another user's process and the kernel, and perf (Debian's
# linux-perf, installed here if missing).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$REPO"
if [ "$(id -u)" -ne 0 ]; then
    echo "make bench-profile runs as root: perf samples the server's backend and the kernel" >&2
    exit 1
fi
ensure_prerequisites
if ! command -v perf >/dev/null; then
    say "installing perf (linux-perf)"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-perf >/dev/null
fi
say "building the floor build (feature bench_floor) into a copy of PostgreSQL"
# A target directory of its own, so that neither build makes the other rebuild.
FLOOR_TARGET="${CARGO_TARGET_DIR:-$REPO/target}/floor"
rm -rf "$FLOOR_TARGET/package"
CARGO_TARGET_DIR="$FLOOR_TARGET" cargo pgrx package --features bench_floor \
    --pg-config "$PG_CONFIG" --out-dir "$FLOOR_TARGET/package" >/dev/null
FLOOR_ROOT="/var/tmp/pg_exp_mech-floor"
install_into_copy "$FLOOR_ROOT" "$FLOOR_TARGET/package"
FLOOR_PG_CONFIG="$FLOOR_ROOT$("$PG_CONFIG" --bindir)/pg_config"
install_extension release
ensure_bench_venv
mkdir -p bench/out

say "our per-row work in Rust alone (per_row_speed)"
cargo test --release --features "$PG_FEATURE pg_test" --no-default-features --lib \
    -- --ignored --nocapture --exact mechanisms::per_row_speed::per_row_speed \
    | tee bench/out/per_row_speed.txt

DIR="${PG_EXP_MECH_BENCH_DIR:-/tmp/pg_exp_mech-bench}"
PORT="$(free_port 57432)"
FLOOR_PORT="$(free_port $((PORT + 1)))"
say "starting benchmark clusters in $DIR (port $PORT) and $DIR-floor (port $FLOOR_PORT)"
trap 'stop_cluster "$DIR"; PG_CONFIG="$FLOOR_PG_CONFIG" stop_cluster "$DIR-floor"
      rm -rf "$FLOOR_ROOT"' EXIT
start_bench_cluster "$DIR" "$PORT"
(PG_CONFIG="$FLOOR_PG_CONFIG"; start_bench_cluster "$DIR-floor" "$FLOOR_PORT")
say "the grouped dp_quantile against count(v), sampled by perf"
(cd bench && ../.venv/bin/python profile.py --out out --per-row-speed out/per_row_speed.txt \
    --dsn "host=$DIR port=$PORT user=postgres dbname=postgres" \
    --floor-dsn "host=$DIR-floor port=$FLOOR_PORT user=postgres dbname=postgres")
say "done: bench/out/profile.md"
