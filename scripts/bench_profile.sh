#!/usr/bin/env bash
# Where the grouped dp_quantile's time goes: `make bench-profile` (README, Performance).
# Builds pg_exp_mech in release mode, runs the per-row micro-benchmark (our work in Rust
# alone), starts a throwaway cluster with make bench's settings, generates its number
# tables and times the grouped dp_quantile against count(v) while perf samples the
# backend (bench/profile.py). Results in bench/out/profile.md. Sizes as for make bench
# (BENCH_ROWS, BENCH_GROUPS, BENCH_RUNS). Needs perf (Debian's linux-perf, installed here
# if missing) and root, to sample another user's process.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$REPO"
ensure_prerequisites
if ! command -v perf >/dev/null; then
    say "installing perf (linux-perf)"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-perf >/dev/null
fi
install_extension release
ensure_bench_venv
mkdir -p bench/out

say "our per-row work in Rust alone (per_row_speed)"
cargo test --release --features "$PG_FEATURE pg_test" --no-default-features --lib \
    -- --ignored --nocapture --exact mechanisms::per_row_speed::per_row_speed \
    | tee bench/out/per_row_speed.txt

DIR="${PG_EXP_MECH_BENCH_DIR:-/tmp/pg_exp_mech-bench}"
PORT="$(free_port 57432)"
say "starting a benchmark cluster in $DIR on port $PORT"
trap 'stop_cluster "$DIR"' EXIT
start_bench_cluster "$DIR" "$PORT"
say "the grouped dp_quantile against count(v), sampled by perf"
(cd bench && ../.venv/bin/python profile.py --out out --per-row-speed out/per_row_speed.txt \
    --dsn "host=$DIR port=$PORT user=postgres dbname=postgres")
say "done: bench/out/profile.md"
