"""Performance of pg_exp_mech against PostgreSQL's own aggregates, on the same tables in
the same run (`make bench`; README, section Performance).

Every query is timed the same way: client wall time of SELECT count(q.*) FROM (<query>) q,
so no result rows travel and no instrumentation runs; one warm-up each (in the first pass,
without workers), then RUNS runs alternating ours and the baseline; medians are reported,
with the number of workers each plan asked for and got (one more run, under EXPLAIN
ANALYZE).
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
    # No goal: PostgreSQL's own avg(v) keeps a by-reference state per group in the
    # aggregate's memory (float8_accum's array), as ours does, where count(v)'s counter
    # lives in the hash entry. What that costs PostgreSQL itself (issue 22).
    (f"dp_quantile, GROUP BY {GROUPS:,} groups vs avg",
     "SELECT g, dp_quantile(v, 0.5, 0, 1e6, 1.0) FROM numbers GROUP BY g",
     "SELECT g, avg(v) FROM numbers GROUP BY g", None),
    (f"dp_quantile, GROUP BY {GROUPS:,} groups vs avg, {SMALL_ROWS:,} rows",
     "SELECT g, dp_quantile(v, 0.5, 0, 1e6, 1.0) FROM numbers_small GROUP BY g",
     "SELECT g, avg(v) FROM numbers_small GROUP BY g", None),
    # No goal (issue 22 set its goals on `i % GROUPS`): the same groups in a random order,
    # as real tables hold them, where no group's memory stays in the cache between its
    # rows; PostgreSQL's count(v) pays for that too.
    (f"dp_quantile, GROUP BY {GROUPS:,} groups in random order vs count",
     "SELECT g, dp_quantile(v, 0.5, 0, 1e6, 1.0) FROM numbers_shuffled GROUP BY g",
     "SELECT g, count(v) FROM numbers_shuffled GROUP BY g", None),
]
GROUPED = CASES[5][1]

# People, not rows (README, "People, not rows"): UNIT_ROWS visits by UNIT_PEOPLE people,
# in a table labelled by person and in an unlabelled copy; each case against the same
# query at row level and against PostgreSQL's count(DISTINCT person). No goals: the
# bounding sorts the rows by person, which a row-level aggregate never does.
UNIT_ROWS = int(os.environ.get("BENCH_UNIT_ROWS", ROWS))
UNIT_PEOPLE = int(os.environ.get("BENCH_UNIT_PEOPLE", 100_000))
UNIT_RUNS = int(os.environ.get("BENCH_UNIT_RUNS", 3))
UNIT_CASES = [
    ("unit-level dp_argmax, 1,000 Zipf items",
     "SELECT dp_argmax(item, 1, 1.0) FROM visits_people",
     [("row level", "SELECT dp_argmax(item, 1, 1.0) FROM visits_rows"),
      ("count(DISTINCT person) GROUP BY item",
       "SELECT item, count(DISTINCT person) FROM visits_people GROUP BY item")]),
    ("unit-level dp_quantile, GROUP BY 100 groups, L = 1",
     "SELECT g, dp_quantile(v, 0.5, 0, 1e6, 1.0) FROM visits_people GROUP BY g",
     [("row level", "SELECT g, dp_quantile(v, 0.5, 0, 1e6, 1.0) FROM visits_rows GROUP BY g"),
      ("count(DISTINCT person) GROUP BY g",
       "SELECT g, count(DISTINCT person) FROM visits_people GROUP BY g")]),
]


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
        for name in ("items_1k", "items_100k"):
            cursor.execute(f"VACUUM (FREEZE, ANALYZE) {name}")
    create_number_tables(connection)


def create_number_tables(connection):
    """Uniform numbers in GROUPS groups: `numbers` (ROWS rows, `i % GROUPS`), `numbers_small`
    (a fifth), `numbers_shuffled` (ROWS rows, each in a random group)."""
    with connection.cursor() as cursor:
        for name, rows, group in (("numbers", ROWS, f"i % {GROUPS}"),
                                  ("numbers_small", SMALL_ROWS, f"i % {GROUPS}"),
                                  ("numbers_shuffled", ROWS, f"floor(random() * {GROUPS})::int")):
            cursor.execute(f"DROP TABLE IF EXISTS {name}")
            cursor.execute(f"CREATE TABLE {name} AS SELECT {group} AS g, random() * 1e6 AS v, "
                           f"(random() * 1e6)::int AS iv FROM generate_series(1, {rows}) i")
            cursor.execute(f"VACUUM (FREEZE, ANALYZE) {name}")


def create_unit_tables(connection):
    """Visits: a person (of UNIT_PEOPLE) has many rows; items Zipf-like; 100 groups."""
    with connection.cursor() as cursor:
        print(f"generating {UNIT_ROWS:,} visits by {UNIT_PEOPLE:,} people", flush=True)
        cursor.execute("SELECT setseed(0.43)")
        cursor.execute("DROP TABLE IF EXISTS visits_people, visits_rows")
        cursor.execute(
            f"CREATE TABLE visits_people AS SELECT floor(random() * {UNIT_PEOPLE})::int AS person, "
            f"'item-' || floor(power(1000, random()))::int AS item, i % 100 AS g, "
            f"random() * 1e6 AS v FROM generate_series(1, {UNIT_ROWS}) i")
        cursor.execute("CREATE TABLE visits_rows AS TABLE visits_people")
        cursor.execute("SECURITY LABEL FOR pg_exp_mech ON COLUMN visits_people.person IS 'privacy_unit'")
        for name in ("visits_people", "visits_rows"):
            cursor.execute(f"VACUUM (FREEZE, ANALYZE) {name}")


def run_unit_cases(connection):
    results = []
    with connection.cursor() as cursor:
        for workers in (0, 2):
            cursor.execute(f"SET max_parallel_workers_per_gather = {workers}")
            for name, ours, baselines in UNIT_CASES:
                queries = [ours] + [query for _, query in baselines]
                if workers == 0:
                    for query in queries:
                        timed(cursor, query)  # warm-up
                times = [[] for _ in queries]
                for _ in range(UNIT_RUNS):
                    for i, query in enumerate(queries):
                        times[i].append(timed(cursor, query))
                medians = [statistics.median(t) for t in times]
                result = {"case": name, "workers": workers, "ours": medians[0],
                          "ours_runs": times[0],
                          "ours_workers": workers_used(cursor, ours, workers),
                          "against": [{"name": b, "seconds": m, "runs": t, "ratio": medians[0] / m,
                                       "workers": workers_used(cursor, q, workers)}
                                      for (b, q), m, t in zip(baselines, medians[1:], times[1:])]}
                results.append(result)
                print(f"{name:52} workers {workers}: {medians[0]:7.3f} s; "
                      + "; ".join(f"{a['name']} {a['seconds']:.3f} s ({a['ratio']:.2f}x)"
                                  for a in result["against"]), flush=True)
    return results


def unit_markdown(results, memory):
    lines = [f"People, not rows: {UNIT_ROWS:,} rows by {UNIT_PEOPLE:,} people, medians of "
             f"{UNIT_RUNS} runs.", "",
             "| query | max workers | pg_exp_mech, unit level (s) | against | its time (s) | ratio |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in results:
        for a in r["against"]:
            lines.append(f"| {r['case']} | {r['workers']} | {r['ours']:.3f} | {a['name']} | "
                         f"{a['seconds']:.3f} | {a['ratio']:.2f}x |")
    lines.append("")
    lines.append("Peak private memory of the backend (RssAnon increase, no workers): "
                 + ", ".join(f"{name} {mb:.1f} MB" for name, mb in memory.items()))
    return "\n".join(lines)


def timed(cursor, query):
    started = time.perf_counter()
    # count(q.*) needs every column: with count(*) PostgreSQL skips computing an aggregate
    # nobody reads (it did for avg and percentile_cont), though not our VOLATILE ones.
    cursor.execute(f"SELECT count(q.*) FROM ({query}) q")
    cursor.fetchone()
    return time.perf_counter() - started


def workers_used(cursor, query, most):
    """The parallel workers the plan asks for and those it got (0, 0 for a serial plan),
    in one more run under EXPLAIN ANALYZE after the timed ones (a plan may ask for workers
    and get none, with no free worker slot, and then runs as a serial one); the largest
    figures of its Gathers. No run where no worker may be asked for (`most` 0)."""
    if most == 0:
        return 0, 0
    cursor.execute(f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) SELECT count(q.*) FROM ({query}) q")
    lines = [line for (line,) in cursor.fetchall()]

    def most(label):
        return max((int(line.split(":")[1]) for line in lines if label in line), default=0)

    return most("Workers Planned:"), most("Workers Launched:")


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
                    "ours_workers": workers_used(cursor, ours, workers),
                    "baseline_workers": workers_used(cursor, baseline, workers),
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


def backend_peak_memory(dsn, query, work_mem=None):
    """Peak private memory of a backend that runs `query` without workers: its RssAnon
    (palloc'd and Rust-allocated memory, not the shared buffers it maps), sampled every
    5 ms while the query runs, minus RssAnon before it."""
    with psycopg.connect(dsn, autocommit=True) as connection, connection.cursor() as cursor:
        cursor.execute("SET max_parallel_workers_per_gather = 0")
        if work_mem:
            cursor.execute(f"SET work_mem = '{work_mem}'")
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
    lines = ["| query | against | max workers | workers planned/launched (ours; PostgreSQL) | "
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
                     f"{'/'.join(map(str, r['ours_workers']))}; "
                     f"{'/'.join(map(str, r['baseline_workers']))} | {r['ours']:.3f} | "
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
    parser.add_argument("--units-only", action="store_true",
                        help="only the people-not-rows cases (bench/out/performance_units.*)")
    arguments = parser.parse_args()
    with psycopg.connect(arguments.dsn, autocommit=True) as connection:
        create_unit_tables(connection)
        unit_results = run_unit_cases(connection)
    unit_memory = {}
    for name, ours, baselines in UNIT_CASES:
        for work_mem in ("64MB", "1GB"):
            unit_memory[f"{name} (work_mem {work_mem})"] = backend_peak_memory(
                arguments.dsn, ours, work_mem)
        unit_memory[f"{baselines[1][0]} (work_mem 64MB)"] = backend_peak_memory(
            arguments.dsn, baselines[1][1], "64MB")
    os.makedirs(arguments.out, exist_ok=True)
    with open(os.path.join(arguments.out, "performance_units.json"), "w") as out:
        json.dump({"rows": UNIT_ROWS, "people": UNIT_PEOPLE, "runs": UNIT_RUNS,
                   "results": unit_results, "peak_memory_mb": unit_memory}, out, indent=1)
    unit_table = unit_markdown(unit_results, unit_memory)
    with open(os.path.join(arguments.out, "performance_units.md"), "w") as out:
        out.write(unit_table + "\n")
    print(unit_table)
    if arguments.units_only:
        return
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
