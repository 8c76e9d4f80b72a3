#!/usr/bin/env bash
# One server against Citus (`make bench-citus`, and the last part of `make bench`): the
# same tables and queries on a PostgreSQL 18 server and on a Citus cluster of a
# coordinator and two workers, all on this machine (bench/citus.py). Reports times and the
# bytes the coordinator received from the workers. Results in bench/out/citus.md.
#
# Sizes: BENCH_CITUS_ROWS (2,000,000), BENCH_CITUS_RUNS (5).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$REPO"
ensure_prerequisites
ensure_bench_venv
PG_CONFIG="$(ensure_pg18)"
export PG_CONFIG
ensure_citus "$PG_CONFIG"
source "$REPO/scripts/common.sh"   # PG_FEATURE and the binaries of 18
install_extension release

ROOT="${PG_EXP_MECH_BENCH_DIR:-/tmp/pg_exp_mech-bench}/citus"
SETTINGS=("shared_buffers = '1GB'" "work_mem = '256MB'" "jit = off" "max_connections = 80")
node() {   # node NAME PORT PRELOAD
    start_cluster "$ROOT/$1" "$2" "shared_preload_libraries = '$3'" "${SETTINGS[@]}"
    as_owner sed -i '1i host all postgres 127.0.0.1/32 trust' "$ROOT/$1/data/pg_hba.conf"
    as_owner "$(pg_bindir)/pg_ctl" -D "$ROOT/$1/data" reload >/dev/null
}
SINGLE_PORT="$(free_port 57632)"; node single "$SINGLE_PORT" pg_exp_mech
COORDINATOR_PORT="$(free_port $((SINGLE_PORT + 1)))"; node coordinator "$COORDINATOR_PORT" "citus, pg_exp_mech"
W1_PORT="$(free_port $((COORDINATOR_PORT + 1)))"; node worker1 "$W1_PORT" "citus, pg_exp_mech"
W2_PORT="$(free_port $((W1_PORT + 1)))"; node worker2 "$W2_PORT" "citus, pg_exp_mech"
trap 'for n in single coordinator worker1 worker2; do stop_cluster "$ROOT/$n"; done' EXIT
cluster_psql "$ROOT/single" "$SINGLE_PORT" -q -c "CREATE EXTENSION pg_exp_mech"
for n in coordinator:"$COORDINATOR_PORT" worker1:"$W1_PORT" worker2:"$W2_PORT"; do
    cluster_psql "$ROOT/${n%%:*}" "${n##*:}" -q -c "CREATE EXTENSION citus" -c "CREATE EXTENSION pg_exp_mech"
done
cluster_psql "$ROOT/coordinator" "$COORDINATOR_PORT" -qAt \
    -c "SELECT citus_set_coordinator_host('127.0.0.1', $COORDINATOR_PORT)" \
    -c "SELECT citus_add_node('127.0.0.1', $W1_PORT)" -c "SELECT citus_add_node('127.0.0.1', $W2_PORT)" >/dev/null
mkdir -p bench/out
say "one server against Citus (a coordinator and 2 workers on this machine)"
.venv/bin/python bench/citus.py --out bench/out --rows "${BENCH_CITUS_ROWS:-2000000}" --runs "${BENCH_CITUS_RUNS:-5}" \
    --single "host=$ROOT/single port=$SINGLE_PORT user=postgres dbname=postgres" \
    --citus "host=$ROOT/coordinator port=$COORDINATOR_PORT user=postgres dbname=postgres"
say "done: bench/out/citus.md"
