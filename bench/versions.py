"""Two builds of pg_exp_mech side by side (README, Performance): the same tables in two
clusters, one running each library; every query of bench.py (ours and PostgreSQL's
baseline) timed on both, runs alternated between the clusters (and their order swapped
each round), medians reported. A change to the library shows as the ratio new/old of
our queries, while the baselines' ratio shows the noise of the machine.

    bash scripts/bench_versions.sh OLD_COMMIT    (or: make bench-versions OLD=...)
"""

import argparse
import json
import os
import statistics

import psycopg

from bench import CASES, RUNS, create_tables, timed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--old", required=True, help="DSN of the cluster with the old library")
    parser.add_argument("--new", required=True, help="DSN of the cluster with the new library")
    parser.add_argument("--old-name", default="old")
    parser.add_argument("--out", required=True)
    arguments = parser.parse_args()
    old = psycopg.connect(arguments.old, autocommit=True)
    new = psycopg.connect(arguments.new, autocommit=True)
    for connection in (old, new):
        create_tables(connection)
    cursors = {"old": old.cursor(), "new": new.cursor()}
    queries = []
    for name, ours, baseline, _ in CASES:
        for query in (ours, baseline):
            if query not in queries:
                queries.append(query)
    results = []
    for workers in (0, 2):
        for cursor in cursors.values():
            cursor.execute(f"SET max_parallel_workers_per_gather = {workers}")
        for query in queries:
            times = {"old": [], "new": []}
            for cursor in cursors.values():
                timed(cursor, query)  # warm-up
            for run in range(RUNS):
                for side in (("old", "new") if run % 2 == 0 else ("new", "old")):
                    times[side].append(timed(cursors[side], query))
            row = {"query": query, "workers": workers,
                   "old": statistics.median(times["old"]), "new": statistics.median(times["new"]),
                   "old_runs": times["old"], "new_runs": times["new"]}
            row["ratio"] = row["new"] / row["old"]
            results.append(row)
            print(f"workers {workers} {row['old']:7.3f} s -> {row['new']:7.3f} s = "
                  f"{row['ratio']:.2f}x  {query}", flush=True)
    os.makedirs(arguments.out, exist_ok=True)
    with open(os.path.join(arguments.out, "versions.json"), "w") as out:
        json.dump({"old": arguments.old_name, "runs": RUNS, "results": results}, out, indent=1)
    by = {(r["query"], r["workers"]): r for r in results}
    lines = [f"| case | max workers | ours: {arguments.old_name} / new (s) | new / old | "
             "PostgreSQL's baseline: old cluster / new cluster (s) | ratio to baseline: old, new | goal |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for workers in (0, 2):
        for name, query, baseline, goal in CASES:
            o, b = by[(query, workers)], by[(baseline, workers)]
            lines.append(
                f"| {name} | {workers} | {o['old']:.3f} / {o['new']:.3f} | {o['ratio']:.2f}x | "
                f"{b['old']:.3f} / {b['new']:.3f} | {o['old'] / b['old']:.2f}x, {o['new'] / b['new']:.2f}x | "
                + ("none" if goal is None else f"<= {goal}x") + " |")
    table = "\n".join(lines)
    with open(os.path.join(arguments.out, "versions.md"), "w") as out:
        out.write(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
