"""The same queries on one server and on a Citus cluster (scripts/bench_citus.sh).

For each query, pg_exp_mech's and PostgreSQL's own aggregate over the same column: client
wall time (all rows fetched), medians of --runs runs alternating the two systems, and on
Citus the bytes the coordinator received from the workers (Citus's EXPLAIN ANALYZE,
"Tuple data received from nodes"). pg_exp_mech's aggregates run on the coordinator over
the rows Citus ships (or, with privacy units, over each unit's bounded contribution);
PostgreSQL's own combine partial states from the workers.
"""

import argparse
import json
import re
import statistics
import time

import psycopg

QUERIES = [
    (
        "dp_argmax, 10^3 items",
        "SELECT dp_argmax(item, 1, 1.0) FROM events",
        "SELECT item, count(*) FROM events GROUP BY item",
    ),
    (
        "dp_quantile, one group",
        "SELECT dp_quantile(v, 0.5, 0, 1e6, 1.0) FROM events",
        "SELECT avg(v) FROM events",
    ),
    (
        "dp_quantile, 100 groups (not the distribution column)",
        "SELECT g, dp_quantile(v, 0.5, 0, 1e6, 1.0) FROM events GROUP BY g",
        "SELECT g, count(v) FROM events GROUP BY g",
    ),
    (
        "dp_argmax per person (table distributed by its privacy unit)",
        "SELECT dp_argmax(item, 1, 1.0) FROM visits",
        "SELECT item, count(DISTINCT person) FROM visits GROUP BY item",
    ),
]

SETUP = """
SET client_min_messages = warning;
DROP TABLE IF EXISTS events, visits;
CREATE TABLE events(id int, g int, item text, v float8);
CREATE TABLE visits(person int, item text);
"""

LOAD = """
INSERT INTO events SELECT i, i % 100, 'item-' || floor(1000 ^ random())::int, random() * 1e6
  FROM generate_series(1, {rows}) i;
INSERT INTO visits SELECT i % {people}, 'item-' || floor(1000 ^ random())::int
  FROM generate_series(1, {rows}) i;
SECURITY LABEL FOR pg_exp_mech ON COLUMN visits.person IS 'privacy_unit';
ANALYZE events, visits;
"""


def load(connection, rows, distributed):
    with connection.cursor() as cursor:
        cursor.execute(SETUP)
        if distributed:
            cursor.execute("SELECT create_distributed_table('events', 'id')")
            cursor.execute("SELECT create_distributed_table('visits', 'person')")
        cursor.execute(LOAD.format(rows=rows, people=max(rows // 20, 1)))


def timed(connection, query):
    start = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(query)
        cursor.fetchall()
    return time.perf_counter() - start


def bytes_received(connection, query):
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, COSTS OFF) " + query)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    units = {"bytes": 1, "kB": 1024, "MB": 1024**2, "GB": 1024**3}
    found = re.findall(r"Tuple data received from nodes: (\d+) (bytes|kB|MB|GB)", plan)
    return sum(int(amount) * units[unit] for amount, unit in found)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--single", required=True)
    parser.add_argument("--citus", required=True)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    single = psycopg.connect(args.single, autocommit=True)
    citus = psycopg.connect(args.citus, autocommit=True)
    load(single, args.rows, False)
    load(citus, args.rows, True)
    results = []
    for name, ours, theirs in QUERIES:
        times = {key: [] for key in ("single ours", "citus ours", "single theirs", "citus theirs")}
        for connection, system in ((single, "single"), (citus, "citus")):
            timed(connection, ours)  # warm-up
            timed(connection, theirs)
        for _ in range(args.runs):
            for connection, system in ((single, "single"), (citus, "citus")):
                times[f"{system} ours"].append(timed(connection, ours))
                times[f"{system} theirs"].append(timed(connection, theirs))
        row = {"query": name, "ours": ours, "theirs": theirs}
        row.update({key: statistics.median(values) for key, values in times.items()})
        row["bytes ours"] = bytes_received(citus, ours)
        row["bytes theirs"] = bytes_received(citus, theirs)
        results.append(row)
        print(
            f"{name}: one server {row['single ours']:.2f} s (PostgreSQL {row['single theirs']:.2f} s), "
            f"Citus {row['citus ours']:.2f} s (PostgreSQL {row['citus theirs']:.2f} s), "
            f"received {row['bytes ours'] / 1e6:.1f} MB (PostgreSQL {row['bytes theirs'] / 1e6:.3f} MB)",
            flush=True,
        )
    with open(f"{args.out}/citus.json", "w") as out:
        json.dump({"rows": args.rows, "runs": args.runs, "results": results}, out, indent=2)
    with open(f"{args.out}/citus.md", "w") as out:
        out.write(
            f"{args.rows:,} rows; medians of {args.runs} runs alternating the systems; "
            "Citus: a coordinator and 2 workers on the same 2 cores\n\n"
            "| query | PostgreSQL's own | one server: ours (s) | PostgreSQL (s) | Citus: ours (s) "
            "| PostgreSQL (s) | received by the coordinator: ours | PostgreSQL |\n"
            "|---|---|---|---|---|---|---|---|\n"
        )
        for row in results:
            out.write(
                f"| {row['query']} | `{row['theirs']}` | {row['single ours']:.2f} | {row['single theirs']:.2f} "
                f"| {row['citus ours']:.2f} | {row['citus theirs']:.2f} "
                f"| {row['bytes ours'] / 1e6:.1f} MB | {row['bytes theirs'] / 1e6:.3f} MB |\n"
            )


if __name__ == "__main__":
    main()
