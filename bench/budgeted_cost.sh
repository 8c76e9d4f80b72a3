#!/usr/bin/env bash
# What a budgeted analyst's statement costs beyond the same statement of a login role without one: the
# refusal of roles that may read temporary files, held groups (copied and, when hashed,
# shuffled), withheld error texts, silenced statistics and the lowered log level
# (README: Performance). The tables of `make bench` (10^7 rows and a fifth of them, 10^4
# groups), each query through a security-barrier view, as each role over TCP, alternated
# (charges are recorded for both; only the budgeted one is checked against a limit); and 2,000 statements of a
# one-row view in one session each (the latency of a small statement). About 2 minutes.
set -e
cd "$(dirname "${BASH_SOURCE[0]}")/.." && source scripts/common.sh
D=/tmp/pg_exp_mech-budgeted-cost; P=58982; RUNS="${BENCH_RUNS:-7}"
install_extension release >/dev/null
start_bench_cluster $D $P
q() { cluster_psql $D $P -qAt "$@"; }
q <<'SQL'
SELECT setseed(0.42);
CREATE TABLE numbers AS SELECT i % 10000 AS g, random() * 1e6 AS v FROM generate_series(1, 10000000) i;
CREATE TABLE numbers_small AS SELECT i % 10000 AS g, random() * 1e6 AS v FROM generate_series(1, 2000000) i;
CREATE TABLE items AS SELECT 'item-' || (i % 10) AS item FROM generate_series(1, 100) i;
VACUUM (FREEZE, ANALYZE) numbers, numbers_small, items;
REVOKE EXECUTE ON FUNCTION pg_tablespace_size(name), pg_tablespace_size(oid) FROM PUBLIC;
CREATE VIEW grouped WITH (security_barrier) AS
  SELECT g, dp_quantile(v, 0.5, 0, 1e6, 1.0) AS med FROM numbers GROUP BY g;
CREATE VIEW grouped_small WITH (security_barrier) AS
  SELECT g, dp_quantile(v, 0.5, 0, 1e6, 1.0) AS med FROM numbers_small GROUP BY g;
CREATE VIEW whole WITH (security_barrier) AS SELECT dp_quantile(v, 0.5, 0, 1e6, 1.0) AS med FROM numbers;
CREATE VIEW top_item WITH (security_barrier) AS SELECT dp_argmax(item, 1, 1.0) AS best FROM items;
CREATE ROLE analyst LOGIN PASSWORD 'analyst-bench';
CREATE ROLE reader LOGIN PASSWORD 'reader-bench';
GRANT SELECT ON grouped, grouped_small, whole, top_item TO analyst, reader;
SELECT dp_budget_set('analyst', 1e12);
SQL
over_tcp() { local role="$1"; shift; PGPASSWORD="$role-bench" "$(pg_bindir)/psql" -X -qAt -v ON_ERROR_STOP=1 -h 127.0.0.1 -p $P -U "$role" postgres "$@"; }
analyst() { over_tcp analyst "$@"; }
reader() { over_tcp reader "$@"; }
time_ms() { "$@" -c '\timing on' -c "SET max_parallel_workers_per_gather = 0" -c "$QUERY" | grep -oP 'Time: \K[0-9.]+' | tail -1; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
for view in grouped grouped_small whole; do
    QUERY="SELECT count(*) FROM (SELECT * FROM $view) s"
    time_ms reader >/dev/null; time_ms analyst >/dev/null
    su=(); an=()
    for _ in $(seq "$RUNS"); do su+=("$(time_ms reader)"); an+=("$(time_ms analyst)"); done
    s=$(printf '%s\n' "${su[@]}" | median); a=$(printf '%s\n' "${an[@]}" | median)
    echo "$view: without a budget ${su[*]} ms (median $s); with a budget ${an[*]} ms (median $a); ratio $(awk "BEGIN {printf \"%.3f\", $a / $s}")"
done
# A small statement's latency, one session each, 2,000 statements; the median of 3.
printf 'SELECT best FROM top_item;\n%.0s' $(seq 2000) > $D/small.sql
small() { local start end; start=$(date +%s%N); "$@" -f $D/small.sql >/dev/null; end=$(date +%s%N); echo $(( (end - start) / 2000000 )); }
su=(); an=()
for _ in 1 2 3; do
    su+=("$(small reader)")
    an+=("$(small analyst)")
done
echo "one-row view, 2,000 statements in one session, us a statement: without a budget ${su[*]}; with a budget ${an[*]}"
stop_cluster $D; rm -rf $D
