# Budgets across a major upgrade (issue 21): accounts live in $PGDATA/pg_exp_mech, which
# neither pg_upgrade nor pg_dump carries. A PostgreSQL 15 cluster's roles spend; its
# dp_budget_export() statements, run on a PostgreSQL 18 cluster after the roles moved
# (pg_dumpall --globals-only), give every role the same limits and the same spent ε and
# δ, and a role with 0.5 left cannot spend 0.8 there. Runs in the PostgreSQL 18 suite
# (both versions installed by then).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO"
if [ "$PG_FEATURE" != pg18 ]; then
    echo "upgrade: runs in the PostgreSQL 18 suite (from 15 to 18)"
    exit 0
fi
NEW_CONFIG="$PG_CONFIG"
OLD="$TEST_ROOT/upgrade_from_15"
OLD_PORT="$(free_port 57432)"
old() { PG_CONFIG=/usr/bin/pg_config cluster_psql "$OLD" "$OLD_PORT" -qAt "$@"; }
PG_CONFIG=/usr/bin/pg_config start_cluster "$OLD" "$OLD_PORT"
trap 'PG_CONFIG=/usr/bin/pg_config stop_cluster "$OLD"; stop_cluster "$CLUSTER"' EXIT
old -c "CREATE EXTENSION pg_exp_mech" >/dev/null
old <<'SQL' >/dev/null
REVOKE EXECUTE ON FUNCTION pg_tablespace_size(name), pg_tablespace_size(oid) FROM PUBLIC;
CREATE ROLE analyst LOGIN PASSWORD 'analyst-password';
CREATE ROLE "Delta Analyst" LOGIN PASSWORD 'delta-password';
CREATE TABLE visits AS SELECT i % 5 AS page FROM generate_series(1, 200) i;
CREATE VIEW top_page WITH (security_barrier) AS SELECT dp_argmax(page, 1, 0.5) AS page FROM visits;
CREATE VIEW pages WITH (security_barrier) AS
  SELECT dp_top_k_unknown_domain(page, 1, 2, 0.25, 1e-6) AS pages FROM visits;
GRANT SELECT ON top_page, pages TO analyst, "Delta Analyst";
SELECT dp_budget_set('analyst', 1.5);
SELECT dp_budget_set('"Delta Analyst"', 2, 1e-5);
SQL
PGPASSWORD=analyst-password "$(PG_CONFIG=/usr/bin/pg_config pg_bindir)/psql" -X -qAt -v ON_ERROR_STOP=1 \
    -h 127.0.0.1 -p "$OLD_PORT" -U analyst -d postgres -c "SELECT page FROM top_page" -c "SELECT page FROM top_page" >/dev/null
PGPASSWORD=delta-password "$(PG_CONFIG=/usr/bin/pg_config pg_bindir)/psql" -X -qAt -v ON_ERROR_STOP=1 \
    -h 127.0.0.1 -p "$OLD_PORT" -U "Delta Analyst" -d postgres -c "SELECT pages FROM pages" >/dev/null
accounts="SELECT string_agg(format('%s %s %s %s %s', role, epsilon_limit, epsilon_spent, delta_limit, delta_spent), ' | ' ORDER BY role::text) FROM dp_budget"
before="$(old -c "$accounts")"
assert_eq "$before" '"Delta Analyst" 2 0.25 1e-05 1e-06 | analyst 1.5 1 0 0' "the accounts on 15"
old -c "SELECT s FROM dp_budget_export() s" > "$OLD/budgets.sql"
echo "1. the roles and the exported statements move to 18"
new_cluster upgrade_to_18
trap 'PG_CONFIG=/usr/bin/pg_config stop_cluster "$OLD"; stop_cluster "$CLUSTER"' EXIT
"$(pg_bindir)/pg_dumpall" -h "$OLD" -p "$OLD_PORT" -U postgres --globals-only > "$OLD/globals.sql"
sql -v ON_ERROR_STOP=0 -f "$OLD/globals.sql" >/dev/null 2>&1   # the bootstrap role exists
sql -f "$OLD/budgets.sql" >/dev/null
assert_eq "$(sql -c "$accounts")" "$before" "the same limits and spent epsilon and delta on 18"
assert_eq "$(sql -c "SELECT count(*) || ' ' || min(aggregate) FROM dp_ledger WHERE kind = 'charge'")" "2 carried over" \
    "one carried-over line per role that spent"
echo "2. what was spent on 15 counts on 18"
sql <<'SQL' >/dev/null
CREATE TABLE visits AS SELECT i % 5 AS page FROM generate_series(1, 200) i;
CREATE VIEW wide WITH (security_barrier) AS SELECT dp_argmax(page, 1, 0.8) AS page FROM visits;
GRANT SELECT ON wide TO analyst;
SQL
error="$({ sql_as analyst analyst-password -v VERBOSITY=verbose -c "SELECT page FROM wide" 2>&1 || true; } | grep -m1 -oP 'ERROR:  \K[0-9A-Z]{5}: .*' || true)"
assert_contains "$error" '53400: privacy budget of role "analyst" exceeded' "0.8 with 0.5 left"
assert_eq "$(sql -c "SELECT epsilon_spent FROM dp_budget WHERE role = 'analyst'::regrole")" "1" "the refusal charged nothing"
echo "upgrade: all checks passed"
