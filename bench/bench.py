"""Performance of pg_exp_mech against PostgreSQL's own aggregates, on the same tables in
the same run (`make bench`; README, section Performance).

Every query is timed the same way: client wall time of SELECT count(q.*) FROM (<query>) q,
so no result rows travel and no instrumentation runs; one warm-up each (in the first pass,
without workers), then RUNS runs alternating ours and the baseline; medians are reported,
with the number of workers each plan asked for.
"""

import argparse
import json
import os
import statistics
import threading
import time

import psycopg

ROWS = int(os.environ.get("BENCH_ROWS", 10_000_000))
GROUPS = int(os.environ.get("BENCH_GROUPS", 10_000))
RUNS = int(os.environ.get("BENCH_RUNS", 7))
# The grouped quantile at a fifth of the rows: 200 a group, where the per-group work
# (state, draw) weighs most.
SMALL_ROWS = ROWS // 5

# (name, our query, baseline query, goal: ours/baseline at most)
CASES = [
    ("dp_argmax, 1,000 Zipf items", "SELECT dp_argmax(item, 1, 1.0) FROM items_1k",
     "SELECT item, count(*) FROM items_1k GROUP BY item", 0.5),
    ("dp_argmax, 100,000 Zipf items", "SELECT dp_argmax(item, 1, 1.0) FROM items_100k",
     "SELECT item, count(*) FROM items_100k GROUP BY item", 0.5),
    ("dp_top_k(k = 10), 1,000 Zipf items", "SELECT dp_top_k(item, 1, 10, 1.0) FROM items_1k",
     "SELECT item, count(*) FROM items_1k GROUP BY item", 1.2),
    ("dp_quantile vs percentile_cont", "SELECT dp_quantile(v, 0.5, 0, 1e6, 1.0) FROM numbers",
     "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY v) FROM numbers", 0.25),
    ("dp_quantile vs avg", "SELECT dp_quantile(v, 0.5, 0, 1e6, 1.0) FROM numbers",
     "SELECT avg(v) FROM numbers", 1.2),
    (f"dp_quantile, GROUP BY {GROUPS:,} groups",
     "SELECT g, dp_quantile(v, 0.5, 0, 1e6, 1.0) FROM numbers GROUP BY g",
     "SELECT g, percentile_cont(0.5) WITHIN GROUP (ORDER BY v) FROM numbers GROUP BY g", None),
    (f"dp_quantile, GROUP BY {GROUPS:,} groups vs count",
     "SELECT g, dp_quantile(v, 0.5, 0, 1e6, 1.0) FROM numbers GROUP BY g",
     "SELECT g, count(v) FROM numbers GROUP BY g", 1.2),
    (f"dp_quantile, GROUP BY {GROUPS:,} groups vs count, {SMALL_ROWS:,} rows",
     "SELECT g, dp_quantile(v, 0.5, 0, 1e6, 1.0) FROM numbers_small GROUP BY g",
     "SELECT g, count(v) FROM numbers_small GROUP BY g", 1.2),
    ("dp_quantile over integers vs avg",
     "SELECT dp_quantile(iv, 0.5, 0, 1000000, 1.0) FROM numbers",
     "SELECT avg(iv) FROM numbers", 1.2),
]
GROUPED = CASES[5][1]


def create_tables(connection):
    """Zipf-like items (rank = floor(N^u), P(rank r) ∝ 1/r roughly), uniform numbers."""
    with connection.cursor() as cursor:
        print(f"generating tables of {ROWS:,} rows", flush=True)
        cursor.execute("SELECT setseed(0.42)")
        for name, items in (("items_1k", 1_000), ("items_100k", 100_000)):
            cursor.execute(f"DROP TABLE IF EXISTS {name}")
            cursor.execute(
                f"CREATE TABLE {name} AS SELECT 'item-' || floor(power({items}, random()))::int AS item "
                f"FROM generate_series(1, {ROWS})")
        for name, rows in (("numbers", ROWS), ("numbers_small", SMALL_ROWS)):
            cursor.execute(f"DROP TABLE IF EXISTS {name}")
            cursor.execute(f"CREATE TABLE {name} AS SELECT i % {GROUPS} AS g, random() * 1e6 AS v, "
                           f"(random() * 1e6)::int AS iv FROM generate_series(1, {rows}) i")
        for name in ("items_1k", "items_100k", "numbers", "numbers_small"):
            cursor.execute(f"VACUUM (FREEZE, ANALYZE) {name}")


def timed(cursor, query):
    started = time.perf_counter()
    # count(q.*) needs every column: with count(*) PostgreSQL skips computing an aggregate
    # nobody reads (it did for avg and percentile_cont), though not our VOLATILE ones.
    cursor.execute(f"SELECT count(q.*) FROM ({query}) q")
    cursor.fetchone()
    return time.perf_counter() - started


def workers_planned(cursor, query):
    """The parallel workers the plan asks for (0 for a serial plan), from plain EXPLAIN."""
    cursor.execute(f"EXPLAIN (COSTS OFF) SELECT count(q.*) FROM ({query}) q")
    planned = [int(line.split(":")[1]) for (line,) in cursor.fetchall()
               if "Workers Planned:" in line]
    return max(planned, default=0)


def run_cases(connection):
    results = []
    with connection.cursor() as cursor:
        for workers in (0, 2):
            cursor.execute(f"SET max_parallel_workers_per_gather = {workers}")
            for name, ours, baseline, goal in CASES:
                if workers == 0:
                    timed(cursor, ours), timed(cursor, baseline)  # warm-up
                ours_times, baseline_times = [], []
                for _ in range(RUNS):
                    ours_times.append(timed(cursor, ours))
                    baseline_times.append(timed(cursor, baseline))
                result = {
                    "case": name, "workers": workers, "goal": goal,
                    "ours": statistics.median(ours_times),
                    "baseline": statistics.median(baseline_times),
                    "ours_runs": ours_times, "baseline_runs": baseline_times,
                    "ours_workers_planned": workers_planned(cursor, ours),
                    "baseline_workers_planned": workers_planned(cursor, baseline),
                }
                result["ratio"] = result["ours"] / result["baseline"]
                results.append(result)
                print(f"{name:42} workers {workers}: {result['ours']:7.3f} s vs "
                      f"{result['baseline']:7.3f} s = {result['ratio']:.2f}x (goal <= {goal})",
                      flush=True)
    return results


def charges_per_query(connection):
    """Ledger lines and epsilon that one execution of the grouped query adds (the bench
    runs as a superuser, whose charges are recorded like anyone's)."""
    totals = ("SELECT count(*), coalesce(sum(epsilon), 0) FROM dp_ledger "
              "WHERE kind = 'charge' AND role = current_user::regrole")
    results = {}
    with connection.cursor() as cursor:
        for workers in (0, 2):
            cursor.execute(f"SET max_parallel_workers_per_gather = {workers}")
            cursor.execute(totals)
            lines_before, epsilon_before = cursor.fetchone()
            timed(cursor, GROUPED)
            cursor.execute(totals)
            lines_after, epsilon_after = cursor.fetchone()
            results[workers] = (lines_after - lines_before, epsilon_after - epsilon_before)
            print(f"{GROUPS:,}-group query, workers {workers}: "
                  f"{results[workers][0]} ledger line(s), epsilon {results[workers][1]:g}",
                  flush=True)
    return results


def backend_peak_memory(dsn, query):
    """Peak private memory of a backend that runs `query` without workers: its RssAnon
    (palloc'd and Rust-allocated memory, not the shared buffers it maps), sampled every
    5 ms while the query runs, minus RssAnon before it."""
    with psycopg.connect(dsn, autocommit=True) as connection, connection.cursor() as cursor:
        cursor.execute("SET max_parallel_workers_per_gather = 0")
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]

        def private_kb():
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("RssAnon:"):
                        return int(line.split()[1])
            raise RuntimeError("no RssAnon")

        before = private_kb()
        running = threading.Thread(target=timed, args=(cursor, query))
        running.start()
        peak = before
        while running.is_alive():
            peak = max(peak, private_kb())
            time.sleep(0.005)
        running.join()
        return (max(peak, private_kb()) - before) / 1024


def markdown(results, memory, charges):
    lines = ["| query | against | max workers | workers planned (ours, PostgreSQL) | "
             "pg_exp_mech (s) | PostgreSQL (s) | ratio | goal |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        baseline = next(c[2] for c in CASES if c[0] == r["case"])
        against = baseline.split(" FROM ")[0].replace("SELECT ", "")
        if r["goal"] is None:
            goal = "none (for scale)"
        else:
            goal = f"<= {r['goal']}x ({'met' if r['ratio'] <= r['goal'] else '**missed**'})"
        lines.append(f"| {r['case']} | `{against}` | {r['workers']} | "
                     f"{r['ours_workers_planned']}, {r['baseline_workers_planned']} | {r['ours']:.3f} | "
                     f"{r['baseline']:.3f} | {r['ratio']:.2f}x | {goal} |")
    lines.append("")
    lines.append(f"Charges of one execution of the {GROUPS:,}-group query: " + ", ".join(
        f"{lines} ledger line(s) and epsilon {epsilon:g} with up to {workers} workers"
        for workers, (lines, epsilon) in charges.items()))
    lines.append("")
    lines.append(f"Peak private memory of the backend (RssAnon increase, no workers), {ROWS:,} rows: "
                 + ", ".join(f"{name} {mb:.1f} MB" for name, mb in memory.items()))
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--out", required=True)
    arguments = parser.parse_args()
    with psycopg.connect(arguments.dsn, autocommit=True) as connection:
        create_tables(connection)
        results = run_cases(connection)
        charges = charges_per_query(connection)
    memory = {
        "dp_quantile": backend_peak_memory(arguments.dsn, CASES[3][1]),
        "percentile_cont": backend_peak_memory(arguments.dsn, CASES[3][2]),
        "avg": backend_peak_memory(arguments.dsn, CASES[4][2]),
    }
    os.makedirs(arguments.out, exist_ok=True)
    with open(os.path.join(arguments.out, "performance.json"), "w") as out:
        json.dump({"rows": ROWS, "groups": GROUPS, "runs": RUNS, "results": results,
                   "peak_memory_mb": memory, "grouped_charges": charges}, out, indent=1)
    table = markdown(results, memory, charges)
    with open(os.path.join(arguments.out, "performance.md"), "w") as out:
        out.write(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
