# The demo's queries and every ```sql example of README.md run on a real cluster with the
# Adult data: documentation that does not run is a bug.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO"
new_cluster demo_and_readme
sql -f scripts/load_adult.sql
sql -q -f scripts/load_movielens.sql

demo="$(PGPASSWORD=analyst-demo-password sql -v socket="$CLUSTER" -f scripts/demo.sql 2>&1)"
# The lead of Married-civ-spouse is 4,293 people: at ε ≥ 0.1 a wrong draw has probability
# below e^-429, so all 300 draws are right.
assert_eq "$(grep -c '100 / 100' <<<"$demo")" 3 "demo: marital status at every epsilon"
assert_contains "$demo" "Prof-specialty" "demo: occupation race"
assert_contains "$demo" 'ERROR:  53400: privacy budget of role "analyst" exceeded: dp_argmax needs epsilon 0.5, 0.2 of 1.2 remain' "demo: the analyst runs out"
assert_contains "$demo" "ERROR:  42501: EXPLAIN ANALYZE (or any instrumented execution) of a plan with differentially private aggregates is not allowed" "demo: EXPLAIN ANALYZE refused"
# Step 8: users, not ratings. Forrest Gump leads by 17 users: at epsilon 1 a wrong draw
# has probability below e^-17.
assert_eq "$(grep -cx 'Forrest Gump (1994)' <<<"$demo")" 1 "demo: the movie the most people rated"
assert_contains "$demo" 'ERROR:  0A000: rows of table "ratings", whose privacy unit is column "user_id", reach dp_argmax after an aggregate or GROUP BY in a subquery' "demo: aggregating users away is refused"
# Step 7: the grouped tile costs epsilon 1 and delta 1e-6 in all.
assert_contains "$demo" "spent: epsilon 2 of 2.2, delta 1e-06 of 1e-06" "demo: the grouped step's budget"

# README: every ```sql block, in order, in one psql session; any error fails.
python3 - README.md > "$CLUSTER/readme_blocks.sql" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
blocks = re.findall(r"```sql\n(.*?)```", text, re.S)
assert blocks, "README.md has no sql examples"
for i, block in enumerate(blocks, 1):
    print(f"\\echo README example {i}\n{block}")
PY
sql -v ON_ERROR_STOP=1 -f "$CLUSTER/readme_blocks.sql" >/dev/null \
    || fail "a README example failed (see above)"
# The types README promises for its calls (overload resolution: integer bounds pick the
# column's own type, fractional ones double precision, numeric columns numeric).
assert_eq "$(sql -c "SELECT concat_ws(' | ', pg_typeof(dp_quantile(age, 0.5, 0, 100, 1.0)),
    pg_typeof(dp_quantile(age, 0.5, 0.0, 100.0, 1.0)), pg_typeof(dp_quantiles(age::bigint, '{0.5}', 0, 100, 1.0)),
    pg_typeof(dp_quantile(age::numeric, 0.5, 0, 100, 1.0)),
    pg_typeof(dp_quantiles(hours_per_week, ARRAY[0.25, 0.5, 0.75], 0, 100, 1.0)),
    pg_typeof(dp_argmax(marital_status, 1, 1.0)), pg_typeof(dp_top_k(occupation, 1, 3, 1.0))) FROM adult")" \
    "integer | double precision | bigint[] | numeric | integer[] | text | text[]" "the types of README's calls"
echo "demo and $(grep -c '^\\echo README example' "$CLUSTER/readme_blocks.sql") README examples ran"
