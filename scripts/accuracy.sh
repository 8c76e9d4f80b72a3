#!/usr/bin/env bash
# The accuracy study: `make accuracy`, about 31 minutes in all. Accuracy at equal epsilon
# of pg_exp_mech, OpenDP and diffprivlib on the Adult data and a lognormal column
# (bench/accuracy.py). Tables in bench/out/accuracy.md, the plot in docs/accuracy.png.
# About 25 minutes: OpenDP 0.13 draws its noise exactly, at about a millisecond per
# candidate.
#
# Then the MovieLens privacy-unit study (bench/units.py, people, not rows): pg_exp_mech at
# user level (ratings.user_id labelled 'privacy_unit') and at row level against OpenDP
# 0.14's best user-level pipelines and capping contributions per user, at epsilon 0.1 and
# 1: the most-rated movie, the top 10, the median rating per genre. Tables in
# bench/out/accuracy_units.md and .json, the plot in docs/accuracy_units.png. About 6
# minutes on 2 cores at the default draws, 4 of them the user-level GROUP BY medians
# (UNITS_DRAWS, 200 per pg_exp_mech setting, over two connections; UNITS_OPENDP_DRAWS, 40
# per OpenDP setting). Its own Python environment, .venv-units
# (bench/requirements-units.txt: OpenDP 0.14 with Polars). The data: data/movielens (else
# ../shared/data/movielens; MOVIELENS_DIR to choose).
#
# Draws: BENCH_DRAWS (200 per quantile setting), BENCH_SELECTION_DRAWS (1,000).
# Options, as arguments or `make accuracy ACCURACY_ARGS=...`:
#   --grouped-only  the grouped study alone (a minute), no MovieLens study;
#   --multi-only    the many-quantile study alone (5 minutes), no MovieLens study;
#   --multi-float8  that study on the Adult columns as float8 instead of as the integers
#                   they are;
#   --units-only    the MovieLens study alone (no bench/accuracy.py, no Adult, no .venv).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$REPO"

ADULT_ARGS=()
UNITS=yes ADULT=yes
# shellcheck disable=SC2206  # ACCURACY_ARGS is a list of words
for arg in "$@" ${ACCURACY_ARGS:-}; do
    case "$arg" in
        --units-only) ADULT=no ;;
        --grouped-only | --multi-only) UNITS=no; ADULT_ARGS+=("$arg") ;;
        *) ADULT_ARGS+=("$arg") ;;
    esac
done
if [ "$ADULT" = no ] && [ "$UNITS" = no ]; then
    echo "--units-only cannot be combined with --grouped-only or --multi-only" >&2
    exit 2
fi

MOVIELENS="${MOVIELENS_DIR:-$REPO/data/movielens}"
if [ -z "${MOVIELENS_DIR:-}" ] && [ ! -f "$MOVIELENS/ratings.csv" ]; then
    MOVIELENS="$REPO/../shared/data/movielens"
fi
if [ "$UNITS" = yes ] && [ ! -f "$MOVIELENS/ratings.csv" ]; then
    if [ "$ADULT" = no ]; then
        echo "MovieLens data not found in $MOVIELENS (set MOVIELENS_DIR)" >&2
        exit 1
    fi
    say "MovieLens data not found in $MOVIELENS (set MOVIELENS_DIR): no privacy-unit study"
    UNITS=no
fi

ensure_prerequisites
install_extension release
if [ "$ADULT" = yes ]; then ensure_bench_venv; fi
if [ "$UNITS" = yes ]; then ensure_units_venv; fi

DIR="${PG_EXP_MECH_ACCURACY_DIR:-/tmp/pg_exp_mech-accuracy}"
PORT="$(free_port 57532)"
say "starting a cluster in $DIR on port $PORT"
start_cluster "$DIR" "$PORT"
trap 'stop_cluster "$DIR"' EXIT
DSN="host=$DIR port=$PORT user=postgres dbname=postgres"
cluster_psql "$DIR" "$PORT" -q -c "CREATE EXTENSION pg_exp_mech"
mkdir -p bench/out docs
if [ "$ADULT" = yes ]; then
    cluster_psql "$DIR" "$PORT" -q -f scripts/load_adult.sql
    .venv/bin/python bench/accuracy.py --dsn "$DSN" --out bench/out --plot docs/accuracy.png \
        ${ADULT_ARGS[@]+"${ADULT_ARGS[@]}"}
    say "done: bench/out/accuracy.md, docs/accuracy.png"
fi
if [ "$UNITS" = yes ]; then
    say "the MovieLens privacy-unit study (bench/units.py)"
    .venv-units/bin/python bench/units.py --dsn "$DSN" --data "$MOVIELENS" --out bench/out \
        --plot docs/accuracy_units.png
    say "done: bench/out/accuracy_units.md, docs/accuracy_units.png"
fi
