# Privacy units from the outside (issue 20): a budgeted analyst over TCP reads a DP-only
# view over MovieLens ratings, labelled by user; the declaration survives pg_dump and
# pg_restore and reaches a streaming standby; nothing the analyst sets lowers the charge
# or brings back row semantics.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO"
new_cluster privacy_units "wal_level = replica" "max_wal_senders = 4"
sql -f scripts/load_movielens.sql
sql <<'SQL'
CREATE ROLE analyst LOGIN PASSWORD 'analyst-password';
CREATE VIEW most_rated WITH (security_barrier) AS
  SELECT dp_argmax(m.title, (r.user_id IS NOT NULL)::int, 1.0) AS title
    FROM movies m LEFT JOIN ratings r USING (movie_id);
CREATE VIEW median_by_genre WITH (security_barrier) AS
  SELECT g.genre, dp_quantile(r.rating, 0.5, 0.5, 5, 0.5) AS median
    FROM movie_genres g JOIN ratings r USING (movie_id) GROUP BY g.genre;
GRANT SELECT ON most_rated, median_by_genre TO analyst;
SELECT dp_budget_set('analyst', 10);
ALTER SYSTEM SET pg_exp_mech.require_budget = on;
SELECT pg_reload_conf();
SQL
analyst() { sql_as analyst analyst-password "$@"; }
spent() { sql -c "SELECT epsilon_spent FROM dp_budget WHERE role = 'analyst'::regrole"; }
first_error() { grep -m1 -oP '^(psql:[^:]*:[0-9]+: )?ERROR:  \K[0-9A-Z]{5}: .*' || true; }

echo "1. users, not ratings: one user's 2,000 ratings of an obscure movie do not win"
sql -c "INSERT INTO movies VALUES (999999, 'Obscure (2016)', 'Drama')"
sql -c "INSERT INTO ratings SELECT 1, 999999, 5, 0 FROM generate_series(1, 2000)"
for _ in 1 2 3; do
    assert_eq "$(analyst -c 'SELECT title FROM most_rated')" "Forrest Gump (1994)" "the movie the most users rated"
done
assert_eq "$(spent)" "3" "three statements at 1.0"

echo "2. L and m are the analyst's to choose, and change nothing in the charge"
answer="$(analyst -c 'SET pg_exp_mech.max_groups_per_unit = 20' -c 'SET pg_exp_mech.max_values_per_unit = 50' \
    -c 'SELECT count(*) FROM median_by_genre')"
assert_eq "$answer" "20" "every genre answered"
assert_eq "$(spent)" "3.5" "the grouped view at 0.5, whatever L and m"
assert_eq "$(sql -c "SELECT epsilon || ' ' || aggregate FROM dp_ledger WHERE role = 'analyst'::regrole AND kind = 'charge' ORDER BY at DESC LIMIT 1")" \
    "0.5 dp_quantile" "one ledger line for the grouped view"

echo "3. the analyst cannot lift the label, nor read around it"
error="$({ analyst -v VERBOSITY=verbose -c "SECURITY LABEL FOR pg_exp_mech ON COLUMN ratings.user_id IS NULL" 2>&1 || true; } | first_error)"
assert_eq "$error" "42501: must be owner of relation ratings" "only the owner labels"
error="$({ analyst -v VERBOSITY=verbose -c "SELECT dp_argmax(movie_id, 1, 1.0) FROM ratings" 2>&1 || true; } | first_error)"
assert_eq "$error" "42501: permission denied for table ratings" "no access to the table"
assert_eq "$(spent)" "3.5" "refusals are not charged"

echo "4. pg_dump and pg_restore keep the declaration (foreign key references too)"
# Each order is a customer's own; one customer's order holds 500 rows of 'rare'.
sql <<'SQL'
CREATE TABLE orders(id bigint PRIMARY KEY, customer int);
CREATE TABLE order_items(order_id bigint REFERENCES orders (id), item text);
SECURITY LABEL FOR pg_exp_mech ON COLUMN orders.customer IS 'privacy_unit';
SECURITY LABEL FOR pg_exp_mech ON COLUMN order_items.order_id IS 'references_privacy_unit';
INSERT INTO orders SELECT o, o FROM generate_series(1, 30) o;
INSERT INTO order_items SELECT 1, 'rare' FROM generate_series(1, 500);
INSERT INTO order_items SELECT o, 'common' FROM generate_series(1, 30) o;
SQL
dump="$CLUSTER/units.dump"
as_owner "$(pg_bindir)/pg_dump" -h "$CLUSTER" -p "$PORT" -U postgres -Fc -f "$dump" postgres
sql -c "CREATE DATABASE restored"
as_owner "$(pg_bindir)/pg_restore" -h "$CLUSTER" -p "$PORT" -U postgres -d restored "$dump"
assert_eq "$(sql -d restored -c "SELECT string_agg(format('%s.%s %s', \"table\", \"column\", coalesce(\"references\"::text, '-')), ' ' ORDER BY \"table\"::text) FROM dp_privacy_units")" \
    "order_items.order_id orders orders.customer - ratings.user_id -" "the labels after restore"
assert_eq "$(sql -d restored -c "SELECT dp_argmax(item, 1, 1.0) FROM order_items")" \
    "common" "the restored foreign key still leads to the customer"
assert_eq "$(sql -d restored -c "SELECT dp_argmax(m.title, (r.user_id IS NOT NULL)::int, 1.0) FROM movies m LEFT JOIN ratings r USING (movie_id)")" \
    "Forrest Gump (1994)" "the restored table counts users"
error="$({ sql -d restored -v VERBOSITY=verbose -c "SELECT dp_argmax(movie_id, 1, 1.0) FROM (SELECT DISTINCT movie_id, user_id FROM ratings) s" 2>&1 || true; } | first_error)"
assert_contains "$error" '0A000: rows of table "ratings", whose privacy unit is column "user_id", reach dp_argmax after DISTINCT' "refusals in the restored database"

echo "5. a streaming standby receives the declaration and bounds the same way"
PRIMARY="$CLUSTER"; PRIMARY_PORT="$PORT"
STANDBY="$TEST_ROOT/privacy_units_standby"; STANDBY_PORT="$(free_port $((PORT + 1)))"
make_standby "$STANDBY" "$STANDBY_PORT"
start "$STANDBY"
trap 'stop_cluster "$STANDBY"; stop_cluster "$CLUSTER"' EXIT
sql -c "CREATE TABLE late(person int, item text)" \
    -c "SECURITY LABEL FOR pg_exp_mech ON COLUMN late.person IS 'privacy_unit'"
caught_up "$STANDBY" "$STANDBY_PORT"
assert_eq "$(on "$STANDBY" "$STANDBY_PORT" -c "SELECT string_agg(format('%s.%s', \"table\", \"column\"), ' ' ORDER BY \"table\"::text) FROM dp_privacy_units")" \
    "late.person order_items.order_id orders.customer ratings.user_id" "labels on the standby"
assert_eq "$(on "$STANDBY" "$STANDBY_PORT" -c "SELECT dp_argmax(m.title, (r.user_id IS NOT NULL)::int, 1.0) FROM movies m LEFT JOIN ratings r USING (movie_id)")" \
    "Forrest Gump (1994)" "the standby counts users"
echo "privacy units: all checks passed"
