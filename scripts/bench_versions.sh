#!/usr/bin/env bash
# Two builds side by side: `bash scripts/bench_versions.sh OLD_COMMIT` (README, Performance).
# Builds the library of OLD_COMMIT (a git worktree under target/, built once, installed
# into a copy of the PostgreSQL installation under /var/tmp) and of the working tree, in
# release mode; starts two clusters, each with its own library; loads the same tables in
# both and times bench.py's queries on both, runs alternated (bench/versions.py). Results
# in bench/out/versions.md. Sizes as for make bench (BENCH_ROWS, BENCH_GROUPS, BENCH_RUNS).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$REPO"
OLD="${1:?usage: bench_versions.sh OLD_COMMIT}"
OLD_SHA="$(git rev-parse --short "$OLD")"
ensure_prerequisites
install_extension release
ensure_bench_venv

TARGET="${CARGO_TARGET_DIR:-$REPO/target}"
TREE="$TARGET/versions/$OLD_SHA"
# The old library in a copy of the PostgreSQL installation, so that each cluster finds
# its own library and SQL under $libdir.
ROOT="/var/tmp/pg_exp_mech-versions/$OLD_SHA"
OLD_PG_CONFIG="$ROOT$("$PG_CONFIG" --bindir)/pg_config"
if [ ! -x "$OLD_PG_CONFIG" ]; then
    say "building the library of $OLD_SHA (once)"
    [ -d "$TREE" ] || git worktree add --detach "$TREE" "$OLD_SHA" >/dev/null
    (cd "$TREE" && CARGO_TARGET_DIR="$TREE/target" cargo pgrx package --pg-config "$PG_CONFIG" \
        --out-dir "$TREE/package") >/dev/null
    install_into_copy "$ROOT" "$TREE/package"
fi

DIR="${PG_EXP_MECH_BENCH_DIR:-/tmp/pg_exp_mech-bench}"
SETTINGS=("shared_buffers = '2GB'" "work_mem = '1GB'" "jit = off"
          "max_parallel_workers_per_gather = 2" "max_parallel_workers = 4")
NEW_PORT="$(free_port 57432)"
start_cluster "$DIR-new" "$NEW_PORT" "${SETTINGS[@]}"
OLD_PORT="$(free_port $((NEW_PORT + 1)))"
(PG_CONFIG="$OLD_PG_CONFIG"; start_cluster "$DIR-old" "$OLD_PORT" "${SETTINGS[@]}")
trap 'stop_cluster "$DIR-new"; PG_CONFIG="$OLD_PG_CONFIG" stop_cluster "$DIR-old"' EXIT
cluster_psql "$DIR-new" "$NEW_PORT" -q -c "CREATE EXTENSION pg_exp_mech"
cluster_psql "$DIR-old" "$OLD_PORT" -q -c "CREATE EXTENSION pg_exp_mech"
mkdir -p bench/out
say "$OLD_SHA against the working tree"
(cd bench && ../.venv/bin/python versions.py --old-name "$OLD_SHA" --out out \
    --old "host=$DIR-old port=$OLD_PORT user=postgres dbname=postgres" \
    --new "host=$DIR-new port=$NEW_PORT user=postgres dbname=postgres")
