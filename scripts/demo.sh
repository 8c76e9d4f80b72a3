#!/usr/bin/env bash
# The demo: `make demo`. Builds pg_exp_mech in release mode, installs it into the system
# PostgreSQL 15, starts a throwaway cluster on a free port, loads the Adult data and runs
# scripts/demo.sql. The cluster keeps running so that you can explore with psql.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$REPO"
ensure_prerequisites
install_extension release

DIR="${PG_EXP_MECH_DEMO_DIR:-/tmp/pg_exp_mech-demo}"
PORT="$(free_port 55432)"
say "starting a throwaway PostgreSQL 15 cluster in $DIR on port $PORT"
start_cluster "$DIR" "$PORT"
cluster_psql "$DIR" "$PORT" -q -c "CREATE DATABASE demo" >/dev/null
cluster_psql "$DIR" "$PORT" -q -d demo -c "CREATE EXTENSION pg_exp_mech"
say "loading data/adult.csv (UCI Adult, 32,561 people)"
cluster_psql "$DIR" "$PORT" -q -d demo -f scripts/load_adult.sql
say "loading data/movielens (MovieLens ml-latest-small: 100,004 ratings by 671 users)"
cluster_psql "$DIR" "$PORT" -q -d demo -f scripts/load_movielens.sql
say "differentially private queries"
# The analyst of step 6 logs in over TCP with this password.
PGPASSWORD=analyst-demo-password cluster_psql "$DIR" "$PORT" -d demo -v socket="$DIR" -f scripts/demo.sql 2>&1 \
    | grep -v '^LOCATION:'

cat <<EOF

Privacy budgets need pg_exp_mech in shared_preload_libraries: this cluster has it. The
ledger is $DIR/data/pg_exp_mech/ledger.
EOF

cat <<EOF

Keep exploring (the cluster keeps running):
    psql -h $DIR -p $PORT -U postgres demo
for example:
    SELECT dp_argmax(education, 1, 0.1) FROM adult;
Stop it with:
    $( [ "$(id -u)" -eq 0 ] && printf 'runuser -u postgres -- ' )$(pg_bindir)/pg_ctl -D $DIR/data stop
EOF
