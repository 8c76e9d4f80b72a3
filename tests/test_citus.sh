# Citus, one budget (issue 21), until distributed plans are metered: a coordinator and two
# workers on 127.0.0.1 (PostgreSQL 18, Citus from ../shared/vendor). Measured before this
# check existed: a query grouped by the distribution column went whole to the workers,
# whose ledgers were charged, and the coordinator's budget never moved. Now, as a
# budgeted role over TCP: every DP aggregate over a distributed or reference table is
# refused (0A000) and charges nothing anywhere; DP aggregates over the coordinator's
# local tables answer and are charged there, once; on a worker every DP aggregate is
# refused. Runs in the PostgreSQL 18 suite.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO"
if [ "$PG_FEATURE" != pg18 ]; then
    echo "citus: runs in the PostgreSQL 18 suite"
    exit 0
fi
ensure_citus "$PG_CONFIG"
# Each node: Citus first; the nodes reach each other as postgres over 127.0.0.1.
node() {
    local dir="$TEST_ROOT/citus_$1" port="$2"
    start_cluster "$dir" "$port" "shared_preload_libraries = 'citus, pg_exp_mech'" "max_connections = 60"
    as_owner sed -i '1i host all postgres 127.0.0.1/32 trust' "$dir/data/pg_hba.conf"
    as_owner "$(pg_bindir)/pg_ctl" -D "$dir/data" reload >/dev/null
    cluster_psql "$dir" "$port" -qAt -c "CREATE EXTENSION citus" -c "CREATE EXTENSION pg_exp_mech" >/dev/null
}
COORDINATOR_PORT="$(free_port 57532)"; node coordinator "$COORDINATOR_PORT"
W1_PORT="$(free_port $((COORDINATOR_PORT + 1)))"; node worker1 "$W1_PORT"
W2_PORT="$(free_port $((W1_PORT + 1)))"; node worker2 "$W2_PORT"
trap 'for n in coordinator worker1 worker2; do stop_cluster "$TEST_ROOT/citus_$n"; done' EXIT
CLUSTER="$TEST_ROOT/citus_coordinator"; PORT="$COORDINATOR_PORT"
on_worker() { cluster_psql "$TEST_ROOT/citus_worker1" "$W1_PORT" -qAt "$@"; }
first_error() { grep -m1 -oP 'ERROR:  \K[0-9A-Z]{5}: .*' || true; }
sql <<SQL >/dev/null
SELECT citus_set_coordinator_host('127.0.0.1', $COORDINATOR_PORT);
SELECT citus_add_node('127.0.0.1', $W1_PORT);
SELECT citus_add_node('127.0.0.1', $W2_PORT);
CREATE TABLE visits(user_id int, page text);
SELECT create_distributed_table('visits', 'user_id');
INSERT INTO visits SELECT 1, 'pricing' FROM generate_series(1, 2000);
INSERT INTO visits SELECT u, 'docs' FROM generate_series(2, 40) u;
CREATE TABLE pages(page text);
SELECT create_reference_table('pages');
INSERT INTO pages VALUES ('docs'), ('pricing');
CREATE TABLE local_visits AS SELECT * FROM visits;
CREATE ROLE analyst LOGIN PASSWORD 'analyst-password';
CREATE VIEW by_user WITH (security_barrier) AS
  SELECT user_id, dp_quantile(length(page), 0.5, 0, 10, 0.4) AS median FROM visits GROUP BY user_id;
CREATE VIEW top_page WITH (security_barrier) AS SELECT dp_argmax(page, 1, 0.4) AS page FROM visits;
CREATE VIEW top_listed WITH (security_barrier) AS SELECT dp_argmax(page, 1, 0.4) AS page FROM pages;
CREATE VIEW local_top WITH (security_barrier) AS SELECT dp_argmax(page, 1, 0.4) AS page FROM local_visits;
CREATE FUNCTION top_inlined() RETURNS TABLE(page text) LANGUAGE sql STABLE
  AS 'SELECT dp_argmax(page, 1, 0.4) FROM visits';
GRANT SELECT ON by_user, top_page, top_listed, local_top TO analyst;
SELECT dp_budget_set('analyst', 0.5);
SQL
analyst() { sql_as analyst analyst-password -v VERBOSITY=verbose "$@"; }
spent() { sql -c "SELECT epsilon_spent FROM dp_budget WHERE role = 'analyst'::regrole"; }

echo "1. DP aggregates over Citus tables are refused, whatever Citus would push down"
for view in by_user top_page top_listed; do
    error="$({ analyst -c "SELECT * FROM $view" 2>&1 || true; } | first_error)"
    assert_contains "$error" '0A000: differentially private aggregates over Citus table' "$view"
done
# A SQL function that PostgreSQL inlines after the planner hook ran (as its owner, who may
# read the table) never answers: Citus itself refuses this shape today (0A000,
# "parameterized queries for SQL functions referencing distributed tables are not
# supported"); past it, the plan-start check or the worker would.
error="$({ sql -v VERBOSITY=verbose -c "SELECT * FROM top_inlined()" 2>&1 || true; } | first_error)"
assert_contains "$error" "0A000: " "through an inlined function"
assert_eq "$(spent)" "0" "nothing charged on the coordinator"
for worker in worker1 worker2; do
    port="$W1_PORT"; [ "$worker" = worker2 ] && port="$W2_PORT"
    assert_eq "$(cluster_psql "$TEST_ROOT/citus_$worker" "$port" -qAt -c "SELECT count(*) FROM dp_ledger WHERE kind = 'charge'")" "0" \
        "no charge on $worker's ledger"
done

echo "2. the coordinator's local tables answer, charged once there"
assert_eq "$(analyst -qAt -c "SELECT page FROM local_top")" "pricing" "a local table, row semantics (no label)"
assert_eq "$(spent)" "0.4" "charged 0.4 on the coordinator"
error="$({ analyst -c "SELECT page FROM local_top" 2>&1 || true; } | first_error)"
assert_contains "$error" '53400: privacy budget of role "analyst" exceeded' "0.1 left: the second 0.4 is refused"

echo "3. a worker refuses every DP aggregate"
on_worker -c "CREATE TABLE worker_local AS SELECT 'x'::text AS page" >/dev/null
error="$({ on_worker -v VERBOSITY=verbose -c "SELECT dp_argmax(page, 1, 1.0) FROM worker_local" 2>&1 || true; } | first_error)"
assert_contains "$error" '0A000: differentially private aggregates run on the Citus coordinator only' "on a worker"
echo "citus: all checks passed"
