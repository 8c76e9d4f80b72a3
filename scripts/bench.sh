#!/usr/bin/env bash
# The benchmark: `make bench`. Builds pg_exp_mech in release mode, starts a throwaway
# cluster, generates the tables and measures (bench/bench.py) speed against PostgreSQL's
# own aggregates on the same tables in the same run, and (bench/end_to_end.py) the same
# questions answered by exporting the data to OpenDP and diffprivlib, and
# (scripts/bench_citus.sh) one PostgreSQL 18 server against a Citus cluster. Results in
# bench/out/.
#
# Sizes: BENCH_ROWS (10,000,000), BENCH_GROUPS (10,000), BENCH_RUNS (7); privacy units:
# BENCH_UNIT_ROWS (BENCH_ROWS), BENCH_UNIT_PEOPLE (100,000), BENCH_UNIT_RUNS (3).
# `make bench BENCH_ARGS=--units-only`: the people-not-rows cases alone.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$REPO"
ensure_prerequisites
install_extension release
ensure_bench_venv

DIR="${PG_EXP_MECH_BENCH_DIR:-/tmp/pg_exp_mech-bench}"
PORT="$(free_port 57432)"
say "starting a benchmark cluster in $DIR on port $PORT"
trap 'stop_cluster "$DIR"' EXIT
start_bench_cluster "$DIR" "$PORT"
DSN="host=$DIR port=$PORT user=postgres dbname=postgres"
mkdir -p bench/out

say "speed against PostgreSQL's own aggregates"
.venv/bin/python bench/bench.py --dsn "$DSN" --out bench/out ${BENCH_ARGS:-}
if [[ "${BENCH_ARGS:-}" == *--units-only* ]]; then
    say "done: bench/out/performance_units.md"
    exit 0
fi
say "end to end against OpenDP and diffprivlib"
.venv/bin/python bench/end_to_end.py --dsn "$DSN" --out bench/out
bash scripts/bench_citus.sh
say "done: bench/out/performance.md, bench/out/performance_units.md, bench/out/end_to_end.md, bench/out/citus.md"
