"""Where the grouped dp_quantile's time goes (`make bench-profile`; README, Performance).

Issue 22 asks the grouped dp_quantile (10,000 groups) to take at most 1.2x PostgreSQL's
own `count(v)` with the same GROUP BY, and, where that proves out of reach, to show with
figures where the time goes: PostgreSQL's own share, ours, libm. For each table (10^7
rows, and a fifth of them) this prints:

- the medians of RUNS runs of four queries, alternated run by run: our query and
  `count(v)` on the cluster of the real library (A), then our query and `count(v)` on
  the cluster of the floor build (B: feature bench_floor, each group's state made, each
  row left uncounted, each group finalized without a draw, the statement charged);
- the samples of `perf record` (cpu-clock) in A's backend while our query runs, by
  library: `postgres` (PostgreSQL's own work: the scan, the hash table, calling the
  aggregate, palloc), `pg_exp_mech.so` (ours), libm, libc and the kernel, each turned
  into seconds as its share of our median;
- our per-row work and draws at their speed in Rust alone, with nothing else in the
  caches (per_row_speed, which times these sizes only: 10^4 groups of 1,000 and of 200);
- an estimate, not a lower bound, of this design's time if that work ran inside
  PostgreSQL at its Rust-alone speed: the floor build's time plus the Rust-alone costs,
  against A's and B's `count(v)` (the two clusters' `count(v)` differ by a few percent).

All of that for the serial plan. Then, for the plan with up to 2 workers on A: the
medians of plain runs of both queries, and of runs under EXPLAIN ANALYZE split into
phases: the partial aggregation in each process (scan, transitions, serialize), until the
last partial state reaches the leader, and the finalize node's own time, which
PostgreSQL spends in the leader alone (deserialize and combine the partial states, and
the finals).
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import psycopg

from bench import GROUPS, ROWS, RUNS, SMALL_ROWS, create_number_tables, timed

OURS = "SELECT g, dp_quantile(v, 0.5, 0, 1e6, 1.0) FROM {table} GROUP BY g"
BASELINE = "SELECT g, count(v) FROM {table} GROUP BY g"
GOAL = 1.2


def rust_alone(path):
    """Per-row and per-draw costs from the per_row_speed output saved at `path`."""
    text = open(path, encoding="utf-8").read()

    def number(pattern):
        match = re.search(pattern, text)
        if not match:
            raise SystemExit(f"{path}: no line matches {pattern!r}")
        return float(match.group(1))

    return {
        "numbers": {"ns_per_row": number(r"float, \d+ groups:\s+([\d.]+) ns/row"),
                    "us_per_draw": number(r"draw, a group of 1,000:\s+([\d.]+) µs")},
        "numbers_small": {"ns_per_row": number(r"float, \d+ groups of 200:\s+([\d.]+) ns/row"),
                          "us_per_draw": number(r"draw, a group of 200:\s+([\d.]+) µs")},
    }


def shares_by_library(dsn, query, runs):
    """Fractions of the backend's perf samples by library while `query` runs `runs` times."""
    with psycopg.connect(dsn, autocommit=True) as connection, connection.cursor() as cursor:
        cursor.execute("SET max_parallel_workers_per_gather = 0")
        timed(cursor, query)  # warm-up, outside the profile
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
        with tempfile.TemporaryDirectory() as directory:
            data, log = os.path.join(directory, "perf.data"), os.path.join(directory, "perf.log")
            with open(log, "w") as errors:
                recorder = subprocess.Popen(
                    ["perf", "record", "-e", "cpu-clock", "-F", "2000", "-p", str(pid),
                     "-o", data], stdout=subprocess.DEVNULL, stderr=errors)
            time.sleep(0.5)
            if recorder.poll() is not None:
                sys.exit(f"perf record failed:\n{open(log).read()}")
            try:
                for _ in range(runs):
                    timed(cursor, query)
            finally:
                recorder.send_signal(signal.SIGINT)
                recorder.wait()
            report = subprocess.run(
                ["perf", "report", "-i", data, "--sort", "dso", "--stdio", "--no-children"],
                capture_output=True, text=True)
            if report.returncode != 0:
                sys.exit(f"perf report failed:\n{open(log).read()}{report.stderr}")
    shares = {}
    for line in report.stdout.splitlines():
        match = re.match(r"\s+([\d.]+)%\s+(\S.*?)\s*$", line)
        if match:
            shares[match.group(2)] = float(match.group(1)) / 100
    return shares


def library_group(library):
    if library == "postgres":
        return "postgres"
    if library.startswith("pg_exp_mech"):
        return "ours"
    if library.startswith("libm"):
        return "libm"
    if library.startswith("[kernel"):
        return "kernel"
    if library.startswith("libc"):
        return "libc"
    return "other"


def alternated(dsn, floor_dsn, ours, baseline):
    """RUNS runs of our query and `count(v)` on A, then on B, alternated run by run."""
    times = {"ours": [], "baseline": [], "floor": [], "floor_baseline": []}
    with psycopg.connect(dsn, autocommit=True) as a, psycopg.connect(floor_dsn,
                                                                     autocommit=True) as b:
        with a.cursor() as on_a, b.cursor() as on_b:
            for cursor in (on_a, on_b):
                cursor.execute("SET max_parallel_workers_per_gather = 0")
                timed(cursor, ours), timed(cursor, baseline)  # warm-up
            for _ in range(RUNS):
                times["ours"].append(timed(on_a, ours))
                times["baseline"].append(timed(on_a, baseline))
                times["floor"].append(timed(on_b, ours))
                times["floor_baseline"].append(timed(on_b, baseline))
    return times


def measure(dsn, floor_dsn, table, rows, speed):
    ours, baseline = OURS.format(table=table), BASELINE.format(table=table)
    runs = alternated(dsn, floor_dsn, ours, baseline)
    result = {"table": table, "rows": rows, "groups": GROUPS, "runs": runs}
    for name, times in runs.items():
        result[name] = statistics.median(times)
    seconds = {}
    for library, share in shares_by_library(dsn, ours, RUNS).items():
        group = library_group(library)
        seconds[group] = seconds.get(group, 0.0) + share * result["ours"]
    result["seconds_by_library"] = seconds
    result["baseline_postgres_share"] = shares_by_library(dsn, baseline, RUNS).get("postgres", 0.0)
    alone = speed[table]
    result["rust_alone"] = {
        "rows": rows * alone["ns_per_row"] * 1e-9,
        "draws": GROUPS * alone["us_per_draw"] * 1e-6,
        **alone,
    }
    result["estimate"] = result["floor"] + result["rust_alone"]["rows"] + \
        result["rust_alone"]["draws"]
    result["parallel"] = parallel(dsn, table)
    return result


def plan_nodes(plan):
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)


def parallel_phases(cursor, query):
    """One run of `query` (as `timed` runs it) with 2 workers under EXPLAIN ANALYZE, in
    phases (ms, each inflated by EXPLAIN's timing of every row; node times include their
    children's): the partial aggregation (scan, transitions, serialize; the mean of its
    processes), until the Gather's last partial state (a Gather Merge's sort included),
    and the finalize node's own time, in the leader alone: deserialize and combine every
    partial state, and every group's final function. A hashed finalize combines them all
    before its first answer, which splits the two; a sorted one interleaves them."""
    cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) SELECT count(q.*) FROM ({query}) q")
    ((explained,),) = cursor.fetchall()
    nodes = list(plan_nodes(explained[0]["Plan"]))
    partial = next((n for n in nodes if n.get("Partial Mode") == "Partial"), None)
    gather = next((n for n in nodes if n["Node Type"] in ("Gather", "Gather Merge")), None)
    final = next((n for n in nodes if n.get("Partial Mode") == "Finalize"), None)
    if None in (partial, gather, final) or final["Plans"][0] is not gather:
        # Another plan shape (serial, or a sort between the Gather and the finalize): no
        # phases, only its total.
        return {"workers_launched": gather["Workers Launched"] if gather else 0,
                "partial": None, "gather": None, "leader": None, "finals": None,
                "total": explained[0]["Execution Time"]}
    hashed = final.get("Strategy") == "Hashed"
    return {
        "workers_launched": gather["Workers Launched"],
        "partial": partial["Actual Total Time"],
        "gather": gather["Actual Total Time"] - partial["Actual Total Time"],
        "leader": final["Actual Total Time"] - gather["Actual Total Time"],
        "finals": final["Actual Total Time"] - final["Actual Startup Time"] if hashed else None,
        "total": explained[0]["Execution Time"],
    }


def summary(phase, values):
    """The fewest workers launched; the median of a phase (None if a run had none)."""
    if phase == "workers_launched":
        return min(values)
    return None if None in values else statistics.median(values)


def parallel(dsn, table):
    """A's queries with up to 2 workers: RUNS plain runs each, alternated (medians, s),
    and RUNS runs of each under EXPLAIN ANALYZE in phases (medians, ms)."""
    ours, baseline = OURS.format(table=table), BASELINE.format(table=table)
    times, phases = {"ours": [], "baseline": []}, {"ours": [], "baseline": []}
    with psycopg.connect(dsn, autocommit=True) as connection, connection.cursor() as cursor:
        cursor.execute("SET max_parallel_workers_per_gather = 2")
        timed(cursor, ours), timed(cursor, baseline)  # warm-up
        for _ in range(RUNS):
            times["ours"].append(timed(cursor, ours))
            times["baseline"].append(timed(cursor, baseline))
        for _ in range(RUNS):
            phases["ours"].append(parallel_phases(cursor, ours))
            phases["baseline"].append(parallel_phases(cursor, baseline))
    return {
        "runs": times,
        "ours": statistics.median(times["ours"]),
        "baseline": statistics.median(times["baseline"]),
        "phases": {name: {phase: summary(phase, [run[phase] for run in runs])
                          for phase in runs[0]} for name, runs in phases.items()},
        "phase_runs": phases,
    }


def markdown(results):
    lines = [
        "| rows (10,000 groups) | A: `count(v)` (s) | goal: 1.2x (s) | A: dp_quantile (s) | "
        "PostgreSQL (`postgres`) | ours (`pg_exp_mech.so`) | kernel | libc | libm |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        s = r["seconds_by_library"]
        lines.append(
            f"| {r['rows']:,} | {r['baseline']:.3f} | {GOAL * r['baseline']:.3f} | "
            f"{r['ours']:.3f} ({r['ours'] / r['baseline']:.2f}x) | "
            f"{s.get('postgres', 0):.3f} | {s.get('ours', 0):.3f} | {s.get('kernel', 0):.3f} | "
            f"{s.get('libc', 0):.3f} | {s.get('libm', 0):.4f} |")
    lines.append("")
    lines.append("Seconds of A's dp_quantile median by library (perf cpu-clock samples of the "
                 f"backend, {RUNS} runs); `count(v)` spent "
                 + ", ".join(f"{r['baseline_postgres_share']:.1%}" for r in results)
                 + " of its samples in `postgres`.")
    lines += [
        "",
        "| rows (10,000 groups) | ours in Rust alone: rows + draws (s) | B: floor build (s) | "
        "B: `count(v)` (s) | estimate: floor + ours in Rust alone (s) | "
        "estimate / A's `count(v)` | estimate / B's `count(v)` |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        alone = r["rust_alone"]
        lines.append(
            f"| {r['rows']:,} | {alone['rows']:.3f} + {alone['draws']:.3f} "
            f"({alone['ns_per_row']} ns a row, {alone['us_per_draw']} µs a draw) | "
            f"{r['floor']:.3f} ({r['floor'] / r['floor_baseline']:.2f}x of B's `count(v)`) | "
            f"{r['floor_baseline']:.3f} | {r['estimate']:.3f} | "
            f"{r['estimate'] / r['baseline']:.2f}x | {r['estimate'] / r['floor_baseline']:.2f}x |")
    lines += [
        "",
        "With up to 2 workers (A; the leader takes part in the scan, so three processes "
        "share the two cores): plain runs (s), then the phases of runs under EXPLAIN "
        "ANALYZE (ms, medians; its timing inflates each).",
        "",
        "| rows (10,000 groups) | query | plain run (s) | fewest workers launched | partial "
        "aggregation (scan, transitions, serialize) | until the last partial state (a "
        "Gather Merge's sort included) | "
        "finalize, in the leader alone (combine and finals) | of which finals (hashed "
        "finalize only) | EXPLAIN ANALYZE total |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        p = r["parallel"]
        for name, label in (("ours", "dp_quantile"), ("baseline", "`count(v)`")):
            f = p["phases"][name]
            ratio = f" ({p['ours'] / p['baseline']:.2f}x)" if name == "ours" else ""
            shown = {phase: "-" if f[phase] is None else f"{f[phase]:.0f}"
                     for phase in ("partial", "gather", "leader", "finals")}
            lines.append(
                f"| {r['rows']:,} | {label} | {p[name]:.3f}{ratio} | {f['workers_launched']:g} | "
                f"{shown['partial']} | {shown['gather']} | {shown['leader']} | "
                f"{shown['finals']} | {f['total']:.0f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True, help="A: a cluster with the real library")
    parser.add_argument("--floor-dsn", required=True, help="B: a cluster with the floor build")
    parser.add_argument("--out", required=True)
    parser.add_argument("--per-row-speed", required=True,
                        help="the saved output of the per_row_speed micro-benchmark")
    arguments = parser.parse_args()
    if (ROWS, GROUPS) != (10_000_000, 10_000):
        sys.exit("per_row_speed times 10^7 rows in 10^4 groups only: unset BENCH_ROWS and "
                 "BENCH_GROUPS")
    speed = rust_alone(arguments.per_row_speed)
    for dsn in (arguments.dsn, arguments.floor_dsn):
        with psycopg.connect(dsn, autocommit=True) as connection:
            connection.execute("SELECT setseed(0.42)")
            print(f"generating tables of {ROWS:,} and {SMALL_ROWS:,} rows", flush=True)
            create_number_tables(connection)
    results = [measure(arguments.dsn, arguments.floor_dsn, table, rows, speed)
               for table, rows in (("numbers", ROWS), ("numbers_small", SMALL_ROWS))]
    os.makedirs(arguments.out, exist_ok=True)
    with open(os.path.join(arguments.out, "profile.json"), "w") as out:
        json.dump({"runs": RUNS, "goal": GOAL, "results": results}, out, indent=1)
    table = markdown(results)
    with open(os.path.join(arguments.out, "profile.md"), "w") as out:
        out.write(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
