#!/usr/bin/env bash
# The accuracy study: `make accuracy`. Accuracy at equal epsilon of pg_exp_mech, OpenDP
# and diffprivlib on the Adult data and a lognormal column (bench/accuracy.py). Tables in
# bench/out/accuracy.md, the plot in docs/accuracy.png. About 25 minutes: OpenDP 0.13
# draws its noise exactly, at about a millisecond per candidate.
#
# Draws: BENCH_DRAWS (200 per quantile setting), BENCH_SELECTION_DRAWS (1,000).
# `make accuracy ACCURACY_ARGS=--grouped-only`: the grouped study alone (a minute);
# `--multi-only`: the many-quantile study alone (5 minutes); `--multi-float8`: that study
# on the Adult columns as float8 instead of as the integers they are.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$REPO"
ensure_prerequisites
install_extension release
ensure_bench_venv

DIR="${PG_EXP_MECH_ACCURACY_DIR:-/tmp/pg_exp_mech-accuracy}"
PORT="$(free_port 57532)"
say "starting a cluster in $DIR on port $PORT"
start_cluster "$DIR" "$PORT"
trap 'stop_cluster "$DIR"' EXIT
cluster_psql "$DIR" "$PORT" -q -c "CREATE EXTENSION pg_exp_mech"
cluster_psql "$DIR" "$PORT" -q -f scripts/load_adult.sql
mkdir -p bench/out docs
.venv/bin/python bench/accuracy.py --dsn "host=$DIR port=$PORT user=postgres dbname=postgres" \
    --out bench/out --plot docs/accuracy.png ${ACCURACY_ARGS:-}
say "done: bench/out/accuracy.md, docs/accuracy.png"
