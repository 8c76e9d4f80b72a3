"""End-to-end time of the same questions answered without the extension: export the
column with psql's COPY ... TO STDOUT, then OpenDP or diffprivlib in Python (`make bench`).

The median of `numbers.v` (BENCH_ROWS values in [0, 1e6]) and the most common item of
`items_1k`, at epsilon = 1. OpenDP 0.13 draws its Gumbel noise exactly, at about 1 ms per
candidate, so it gets a grid of 1,001 candidates where dp_quantile uses 2^20 + 1.
"""

import argparse
import collections
import os
import statistics
import subprocess
import time

import numpy as np
import psycopg

import libraries

# Medians of OURS_RUNS for pg_exp_mech (about a second each); the libraries take 5-40 s a
# run, so by default one run each keeps `make bench` within 15 minutes.
OURS_RUNS = 5
LIBRARY_RUNS = int(os.environ.get("BENCH_END_TO_END_RUNS", 1))


def export(dsn, query):
    """A column exported with COPY ... TO STDOUT through psql, as bytes: the fastest export
    measured here (psql 3.5 s for 10^7 numbers, psycopg's COPY 11 s, fetchall 8 s), so
    the libraries are not slowed by a slow client."""
    command = ["psql", "--no-psqlrc", "--quiet", "--dbname", dsn, "--command",
               f"COPY ({query}) TO STDOUT"]
    return subprocess.run(command, capture_output=True, check=True).stdout


def median_numbers(dsn):
    return np.array(export(dsn, "SELECT v FROM numbers").split(), dtype=np.float64)


def item_counts(dsn):
    counts = collections.Counter(export(dsn, "SELECT item FROM items_1k").split(b"\n"))
    counts.pop(b"", None)
    return list(counts.values())


def clock(work):
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--out", required=True)
    arguments = parser.parse_args()
    grid_1001 = [1e6 * j / 1000 for j in range(1001)]
    opendp_median = libraries.make_opendp_quantile(0.5, 0.0, 1e6, 1.0, grid_1001)
    rows = []
    with psycopg.connect(arguments.dsn, autocommit=True) as connection:
        def sql(query):
            with connection.cursor() as cursor:
                cursor.execute(query)
                cursor.fetchall()

        rows_label = f"{int(os.environ.get('BENCH_ROWS', 10_000_000)):,}"
        questions = [
            (f"median of {rows_label} values, epsilon = 1", {
                "pg_exp_mech dp_quantile": lambda: sql(
                    "SELECT dp_quantile(v, 0.5, 0, 1e6, 1.0) FROM numbers"),
                "COPY + diffprivlib tools.quantile": lambda: libraries.diffprivlib_quantile(
                    median_numbers(arguments.dsn), 0.5, 0.0, 1e6, 1.0),
                "COPY + OpenDP make_private_quantile (1,001 candidates)": lambda: opendp_median(
                    median_numbers(arguments.dsn)),
            }),
            (f"most common of 1,000 items in {rows_label} rows, epsilon = 1", {
                "pg_exp_mech dp_argmax": lambda: sql(
                    "SELECT dp_argmax(item, 1, 1.0) FROM items_1k"),
                "COPY + diffprivlib Exponential": lambda: libraries.diffprivlib_exponential(
                    item_counts(arguments.dsn), 1.0),
                "COPY + OpenDP report_noisy_max_gumbel": lambda: libraries.opendp_noisy_max(
                    item_counts(arguments.dsn), 1.0),
            }),
        ]
        for question, systems in questions:
            ours = None
            for system, work in systems.items():
                if ours is None:
                    work()  # warm-up: the table into shared buffers, the plan cached
                runs = OURS_RUNS if ours is None else LIBRARY_RUNS
                seconds = statistics.median(clock(work) for _ in range(runs))
                ours = ours or seconds
                rows.append((question, system, seconds, seconds / ours))
                print(f"{question:55} {system:55} {seconds:8.2f} s  {seconds / ours:6.1f}x",
                      flush=True)
    lines = ["| question | system | end-to-end time (s) | relative to pg_exp_mech |",
             "| --- | --- | --- | --- |"]
    lines += [f"| {q} | {s} | {t:.2f} | {r:.1f}x |" for q, s, t, r in rows]
    table = "\n".join(lines)
    with open(os.path.join(arguments.out, "end_to_end.md"), "w") as out:
        out.write(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
