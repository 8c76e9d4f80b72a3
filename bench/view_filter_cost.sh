#!/usr/bin/env bash
# Cost of keeping the analyst's conditions above a DP view (aed9115): a grouped DP view
# filtered on its key, against the same filter written into the view by the DBA (what
# pushing it down did), over 10^7 rows in 10^4 groups with an index on the key.
set -e
cd "$(dirname "${BASH_SOURCE[0]}")/.." && source scripts/common.sh
D=/tmp/pushcost; P=58981
start_bench_cluster $D $P
q() { cluster_psql $D $P -qAt "$@"; }
q <<'SQL'
CREATE TABLE t AS SELECT 'k' || (i % 10000) AS g, random() * 1e6 AS v FROM generate_series(1, 10000000) i;
CREATE INDEX ON t (g);
VACUUM ANALYZE t;
CREATE VIEW v_all WITH (security_barrier) AS SELECT g, dp_quantile(v, 0.5, 0, 1e6, 1.0) AS med FROM t GROUP BY g;
CREATE VIEW v_one WITH (security_barrier) AS SELECT g, dp_quantile(v, 0.5, 0, 1e6, 1.0) AS med FROM t WHERE g = 'k42' GROUP BY g;
CREATE VIEW v_part WITH (security_barrier) AS SELECT g, dp_quantile(v, 0.5, 0, 1e6, 1.0) AS med FROM t GROUP BY g HAVING dp_partition(1.0, 1e-6);
CREATE VIEW v_part_one WITH (security_barrier) AS SELECT g, dp_quantile(v, 0.5, 0, 1e6, 1.0) AS med FROM t WHERE g = 'k42' GROUP BY g HAVING dp_partition(1.0, 1e-6);
SQL
time_ms() { q -c '\timing on' -c "SELECT count(*) FROM ($1) s" | grep -oP 'Time: \K[0-9.]+'; }
for round in 1 2 3 4 5; do
  a=$(time_ms "SELECT * FROM v_all WHERE g = 'k42'")
  b=$(time_ms "SELECT * FROM v_one")
  c=$(time_ms "SELECT * FROM v_part WHERE g = 'k42'")
  d=$(time_ms "SELECT * FROM v_part_one")
  echo "round $round: v_all WHERE g='k42' $a ms | filter in the view $b ms | dp_partition view WHERE $c ms | filter in it $d ms"
done
q -c "EXPLAIN (COSTS OFF) SELECT * FROM v_all WHERE g = 'k42'"
stop_cluster $D; rm -rf $D
