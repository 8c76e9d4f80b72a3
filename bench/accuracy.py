"""Accuracy at equal epsilon: pg_exp_mech against OpenDP and diffprivlib (`make accuracy`).

Quantiles: the Adult columns age, hours_per_week and capital_gain, and a synthetic
lognormal column of the same size, at alpha 0.1, 0.5, 0.9 and epsilon 0.01, 0.1, 1; the
median of |answer - true quantile| over DRAWS draws per setting (true quantile: the
inverted-CDF quantile, numpy's method="inverted_cdf"). OpenDP 0.13 draws Gumbel noise
exactly at about 1 ms per candidate, so OpenDP and pg_exp_mech share a public grid of 101
points per column (whole numbers for age and hours); pg_exp_mech also runs on its default
grid of 2^20 + 1 points, diffprivlib on the continuum. These pg_exp_mech columns read the
values as float8; "pg_exp_mech (integer column)" passes the Adult columns as the integers
they are, with integer bounds, so dp_quantile answers on the whole numbers lo..hi (the
integer grid: step 1 while hi - lo fits the default grid size).

Selection: how often each system names the most common occupation (Prof-specialty 4,140,
Craft-repair 4,099, Exec-managerial 4,066) over SELECTION_DRAWS draws.

Grouped: the median hours per week of every occupation (a GROUP BY) at a total epsilon of
0.1 and 1, on the grid of whole hours: each group at epsilon (parallel composition, what a
GROUP BY is charged now) against each group at epsilon / groups (what charging every group
separately left). The median over groups and draws of |answer - true median of the group|.
`--grouped-only` runs this study alone (a minute) and writes bench/out/accuracy_grouped.md.

Many quantiles: dp_quantiles for m = 3, 9, 19, 99 evenly spaced alphas (j / (m + 1)) on
the four columns at epsilon 0.1 and 1, default grid (the Adult columns as the integers they
are, answered on the whole numbers of [lo, hi]): recursive splitting (the default)
against the epsilon / m split (pg_exp_mech.quantiles_method = split). Per draw, the mean
over the m quantiles of |answer - true quantile|; the table gives the median (and mean)
of that over the draws. `--multi-only` runs this study alone and writes
bench/out/accuracy_multi.md.
"""

import argparse
import multiprocessing
import os
import statistics

import matplotlib
import numpy as np
import psycopg

import libraries

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DRAWS = int(os.environ.get("BENCH_DRAWS", 200))
SELECTION_DRAWS = int(os.environ.get("BENCH_SELECTION_DRAWS", 1000))
EPSILONS = [0.01, 0.1, 1.0]
ALPHAS = [0.1, 0.5, 0.9]
GRID = 100  # steps of the grid shared with OpenDP
COLUMNS = [  # (table, column, lo, hi)
    ("adult", "age", 0.0, 100.0),
    ("adult", "hours_per_week", 0.0, 100.0),
    ("adult", "capital_gain", 0.0, 100000.0),
    ("lognormal", "v", 0.0, 1e6),
]
SYSTEMS = ["pg_exp_mech (grid 101)", "pg_exp_mech (grid 2^20+1)",
           "pg_exp_mech (integer column)", "OpenDP (grid 101)", "diffprivlib"]
INTEGER = SYSTEMS[2]


def load_lognormal(connection):
    """A heavy-tailed column: 32,561 draws of exp(N(10, 1)), fixed seed."""
    values = np.random.default_rng(7).lognormal(mean=10.0, sigma=1.0, size=32_561)
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS lognormal")
        cursor.execute("CREATE TABLE lognormal(v float8)")
        with cursor.copy("COPY lognormal (v) FROM STDIN") as copy:
            for value in values:
                copy.write_row((float(value),))
        cursor.execute("ANALYZE lognormal")


def column_values(connection, table, column):
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {column}::float8 FROM {table} WHERE {column} IS NOT NULL")
        return np.array([row[0] for row in cursor.fetchall()])


def ours(connection, table, column, alpha, lo, hi, epsilon, grid_size, integer=False):
    """DRAWS independent dp_quantile answers: a correlated subquery evaluates it per g. The
    values as float8 with float8 bounds, or (integer) as the column's integers with integer
    bounds."""
    value, lo, hi = (column, int(lo), int(hi)) if integer else (f"{column}::float8", lo, hi)
    with connection.cursor() as cursor:
        cursor.execute(f"SET pg_exp_mech.quantile_grid_size = {grid_size}")
        cursor.execute(
            f"SELECT (SELECT dp_quantile({value}, {alpha}, {lo}, {hi}, {epsilon}) "
            f"FROM {table} WHERE g > 0) FROM generate_series(1, {DRAWS}) g")
        return [None if row[0] is None else float(row[0]) for row in cursor.fetchall()]


def opendp_draws(task):
    values, alpha, lo, hi, epsilon = task
    grid = [lo + (hi - lo) * j / GRID for j in range(GRID + 1)]
    quantile = libraries.make_opendp_quantile(alpha, lo, hi, epsilon, grid)
    return [quantile(values) for _ in range(DRAWS)]


def diffprivlib_or_failure(data, alpha, lo, hi, epsilon):
    """diffprivlib's answer, or None where it raises: tools.quantile 0.6.6 fails ("Can't find
    a candidate to return", probabilities NaN) when every interval of positive width lies so
    far from the quantile that exp(epsilon * u / 2) underflows, e.g. the median of
    hours_per_week (about half the people work exactly 40 hours) at epsilon = 1."""
    try:
        return libraries.diffprivlib_quantile(data, alpha, lo, hi, epsilon)
    except RuntimeError:
        return None


def median_error(answers, truth):
    """Median |answer - truth| over the draws that gave an answer (NaN if none did)."""
    errors = [abs(a - truth) for a in answers if a is not None]
    return statistics.median(errors) if errors else float("nan")


def quantile_study(connection):
    settings = [(c, a, e) for c in COLUMNS for a in ALPHAS for e in EPSILONS]
    values = {(t, c): column_values(connection, t, c) for t, c, _, _ in COLUMNS}
    print(f"OpenDP: {len(settings)} settings x {DRAWS} draws on two processes", flush=True)
    tasks = [(values[(t, c)], a, lo, hi, e) for (t, c, lo, hi), a, e in settings]
    with multiprocessing.Pool(2) as pool:
        opendp = pool.map(opendp_draws, tasks)
    results = []
    for ((table, column, lo, hi), alpha, epsilon), opendp_answers in zip(settings, opendp):
        data = values[(table, column)]
        truth = float(np.quantile(data, alpha, method="inverted_cdf"))
        answers = {
            SYSTEMS[0]: ours(connection, table, column, alpha, lo, hi, epsilon, GRID),
            SYSTEMS[1]: ours(connection, table, column, alpha, lo, hi, epsilon, 1 << 20),
            # The lognormal column is float8: no integer answers to compare.
            INTEGER: (ours(connection, table, column, alpha, lo, hi, epsilon, 1 << 20, True)
                      if table == "adult" else None),
            SYSTEMS[3]: opendp_answers,
            SYSTEMS[4]: [diffprivlib_or_failure(data, alpha, lo, hi, epsilon)
                         for _ in range(DRAWS)],
        }
        answers = {s: a for s, a in answers.items() if a is not None}
        errors = {s: median_error(answers[s], truth) for s in answers}
        failures = {s: sum(a is None for a in answers[s]) for s in answers}
        results.append({"column": column if table == "adult" else "lognormal", "alpha": alpha,
                        "epsilon": epsilon, "truth": truth, "median_error": errors,
                        "failures": failures})
        print(f"{column:15} alpha {alpha} eps {epsilon:5}: truth {truth:10.1f}  " +
              "  ".join(f"{s} {errors[s]:10.2f} ({failures[s]} failed)" for s in answers),
              flush=True)
    return results


def selection_study(connection):
    with connection.cursor() as cursor:
        cursor.execute("SELECT occupation, count(*) FROM adult WHERE occupation IS NOT NULL "
                       "GROUP BY occupation ORDER BY 2 DESC")
        rows = cursor.fetchall()
    items, counts = [r[0] for r in rows], [int(r[1]) for r in rows]
    results = []
    for epsilon in EPSILONS:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT (SELECT dp_argmax(occupation, 1, {epsilon}) FROM adult WHERE g > 0) "
                f"FROM generate_series(1, {SELECTION_DRAWS}) g")
            ours_right = sum(row[0] == items[0] for row in cursor.fetchall())
        opendp = libraries.make_opendp_noisy_max(len(counts), epsilon)
        opendp_right = sum(opendp(counts) == 0 for _ in range(SELECTION_DRAWS))
        diffprivlib_right = sum(libraries.diffprivlib_exponential(counts, epsilon) == 0
                                for _ in range(SELECTION_DRAWS))
        row = {"epsilon": epsilon, "pg_exp_mech": ours_right / SELECTION_DRAWS,
               "OpenDP": opendp_right / SELECTION_DRAWS,
               "diffprivlib": diffprivlib_right / SELECTION_DRAWS}
        results.append(row)
        print(f"top occupation, eps {epsilon}: {row}", flush=True)
    return results


GROUPED_EPSILONS = [0.1, 1.0]


def grouped_study(connection):
    """Per-group errors of a grouped median, with and without parallel composition."""
    with connection.cursor() as cursor:
        cursor.execute("SET pg_exp_mech.quantile_grid_size = 100")
        cursor.execute("SELECT occupation, hours_per_week::float8 FROM adult")
        groups = {}
        for occupation, hours in cursor.fetchall():
            groups.setdefault(occupation, []).append(hours)
        truths = {k: float(np.quantile(v, 0.5, method="inverted_cdf")) for k, v in groups.items()}
        results = []
        for epsilon in GROUPED_EPSILONS:
            row = {"epsilon": epsilon, "groups": len(groups)}
            for name, per_group in [("parallel", epsilon), ("split", epsilon / len(groups))]:
                # DRAWS independent draws of every group in one GROUP BY (g, occupation).
                cursor.execute(
                    f"SELECT occupation, dp_quantile(hours_per_week, 0.5, 0, 100, {per_group}) "
                    f"FROM adult, generate_series(1, {DRAWS}) g GROUP BY g, occupation")
                errors = [abs(answer - truths[occupation])
                          for occupation, answer in cursor.fetchall()]
                row[name] = statistics.median(errors)
                row[name + "_mean"] = statistics.fmean(errors)
            results.append(row)
            print(f"grouped median, {row['groups']} groups, total epsilon {epsilon}: "
                  f"parallel {row['parallel']:.3g} (mean {row['parallel_mean']:.3g}), "
                  f"split {row['split']:.3g} (mean {row['split_mean']:.3g})", flush=True)
        cursor.execute("RESET pg_exp_mech.quantile_grid_size")
    return results


MULTI_COUNTS = [3, 9, 19, 99]
MULTI_EPSILONS = [0.1, 1.0]
MULTI_METHODS = ["recursive", "split"]


def multi_quantile_study(connection, float8=False):
    """Mean error over m quantiles, recursive splitting against the epsilon / m split.
    float8: the Adult columns as double precision values with float bounds (the method of
    the previous release, which drew the last panel of the committed plot)."""
    results = []
    with connection.cursor() as cursor:
        for table, column, lo, hi in COLUMNS:
            data = column_values(connection, table, column)
            for m in MULTI_COUNTS:
                alphas = [j / (m + 1) for j in range(1, m + 1)]
                truths = np.array([float(np.quantile(data, a, method="inverted_cdf"))
                                   for a in alphas])
                array = "ARRAY[" + ", ".join(repr(a) for a in alphas) + "]::float8[]"
                # As a user writes it: the Adult columns are integers with integer bounds
                # (whole-number answers), the lognormal column float8.
                integer = table == "adult" and not float8
                bounds = f"{int(lo)}, {int(hi)}" if integer else f"{lo}, {hi}"
                value = column if integer else f"{column}::float8"
                for epsilon in MULTI_EPSILONS:
                    row = {"column": column if table == "adult" else "lognormal", "m": m,
                           "epsilon": epsilon}
                    for method in MULTI_METHODS:
                        cursor.execute(f"SET pg_exp_mech.quantiles_method = {method}")
                        cursor.execute(
                            f"SELECT (SELECT dp_quantiles({value}, {array}, {bounds}, "
                            f"{epsilon}) FROM {table} WHERE g > 0) "
                            f"FROM generate_series(1, {DRAWS}) g")
                        errors = [float(np.mean(np.abs(np.array(answers) - truths)))
                                  for (answers,) in cursor.fetchall()]
                        row[method] = statistics.median(errors)
                        row[method + "_mean"] = statistics.fmean(errors)
                    cursor.execute("RESET pg_exp_mech.quantiles_method")
                    results.append(row)
                    ratio = row["recursive"] / row["split"] if row["split"] else float("nan")
                    print(f"{row['column']:15} m {m:3} eps {epsilon:4}: recursive "
                          f"{row['recursive']:10.3g}  split {row['split']:10.3g}  ratio "
                          f"{ratio:.2f}", flush=True)
    return results


def multi_table(multi):
    lines = ["| column | m | epsilon | recursive: median (mean) of the mean abs error | "
             "epsilon / m split: median (mean) | recursive / split |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in multi:
        ratio = r["recursive"] / r["split"] if r["split"] else float("nan")
        lines.append(f"| {r['column']} | {r['m']} | {r['epsilon']} | {r['recursive']:.3g} "
                     f"({r['recursive_mean']:.3g}) | {r['split']:.3g} ({r['split_mean']:.3g}) "
                     f"| {ratio:.2f} |")
    return lines


def grouped_table(grouped):
    lines = ["| total epsilon | groups | each group at epsilon (parallel composition): "
             "median (mean) abs error | each group at epsilon / groups: median (mean) abs "
             "error |", "| --- | --- | --- | --- |"]
    for r in grouped:
        lines.append(f"| {r['epsilon']} | {r['groups']} | {r['parallel']:.3g} "
                     f"({r['parallel_mean']:.3g}) | {r['split']:.3g} ({r['split_mean']:.3g}) |")
    return lines


def cell(row, system):
    """A median error, with the number of draws that failed (no answer) if any did."""
    if system not in row["failures"]:
        return "n/a (float column)"
    failed = row["failures"][system]
    if failed == DRAWS:
        return f"fails in all {DRAWS} draws"
    error = f"{row['median_error'][system]:.3g}"
    return f"{error} ({failed} of {DRAWS} draws failed)" if failed else error


def write_tables(quantiles, selection, grouped, multi, out):
    lines = ["| column | alpha | epsilon | true quantile | " + " | ".join(SYSTEMS) + " |",
             "| --- | --- | --- | --- |" + " --- |" * len(SYSTEMS)]
    for r in quantiles:
        lines.append(f"| {r['column']} | {r['alpha']} | {r['epsilon']} | {r['truth']:g} | " +
                     " | ".join(cell(r, s) for s in SYSTEMS) + " |")
    lines += ["", "| epsilon | pg_exp_mech dp_argmax | OpenDP noisy max (Gumbel) | "
              "diffprivlib Exponential |", "| --- | --- | --- | --- |"]
    for r in selection:
        lines.append(f"| {r['epsilon']} | {r['pg_exp_mech']:.3f} | {r['OpenDP']:.3f} | "
                     f"{r['diffprivlib']:.3f} |")
    lines += [""] + grouped_table(grouped)
    lines += [""] + multi_table(multi)
    table = "\n".join(lines)
    with open(os.path.join(out, "accuracy.md"), "w") as f:
        f.write(table + "\n")
    print(table)


def plot(quantiles, selection, multi, path):
    figure, axes = plt.subplots(1, 6, figsize=(26, 4.4))
    styles = dict(zip(SYSTEMS, ["o-", "s--", "d-", "^:", "x-."]))
    for axis, column in zip(axes, ["age", "hours_per_week", "capital_gain", "lognormal"]):
        for system in SYSTEMS:
            rows = [r for r in quantiles if r["column"] == column and r["alpha"] == 0.5
                    and system in r["median_error"]]
            if not rows:
                continue
            axis.plot([r["epsilon"] for r in rows],
                      [max(r["median_error"][system], 1e-3) for r in rows],
                      styles[system], label=system)
        axis.set(xscale="log", yscale="log", xlabel="epsilon",
                 title=f"median of {column}: median |error|")
        axis.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    axis = axes[4]
    for system, style in [("pg_exp_mech", "o-"), ("OpenDP", "^:"), ("diffprivlib", "x-.")]:
        axis.plot([r["epsilon"] for r in selection], [r[system] for r in selection], style,
                  label=system)
    axis.set(xscale="log", xlabel="epsilon", ylim=(0, 1.02),
             title="most common occupation: P(right)")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=8)
    axis = axes[5]
    for method, style in [("recursive", "o-"), ("split", "s--")]:
        for epsilon, color in [(0.1, "tab:red"), (1.0, "tab:blue")]:
            rows = [r for r in multi if r["column"] == "age" and r["epsilon"] == epsilon]
            axis.plot([r["m"] for r in rows], [max(r[method], 1e-3) for r in rows], style,
                      color=color, label=f"{method}, epsilon {epsilon}")
    axis.set(xscale="log", yscale="log", xlabel="m quantiles",
             title="m quantiles of age: median of mean |error|")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=8)
    figure.suptitle(f"Accuracy at equal epsilon on the UCI Adult data and a lognormal column "
                    f"({DRAWS} draws per point, {SELECTION_DRAWS} for selection; errors below 1e-3 "
                    f"are drawn at 1e-3; a missing point: every draw failed)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def write_alone(lines, out, name):
    """One study's table, written to out/name and printed."""
    table = "\n".join(lines)
    with open(os.path.join(out, name), "w") as f:
        f.write(table + "\n")
    print(table)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--plot", required=True)
    parser.add_argument("--grouped-only", action="store_true")
    parser.add_argument("--multi-only", action="store_true")
    parser.add_argument("--multi-float8", action="store_true",
                        help="the many-quantile study on the Adult columns as float8")
    arguments = parser.parse_args()
    with psycopg.connect(arguments.dsn, autocommit=True) as connection:
        if arguments.grouped_only:
            return write_alone(grouped_table(grouped_study(connection)), arguments.out,
                               "accuracy_grouped.md")
        load_lognormal(connection)
        if arguments.multi_only:
            return write_alone(multi_table(multi_quantile_study(connection,
                                                                arguments.multi_float8)),
                               arguments.out, "accuracy_multi.md")
        quantiles = quantile_study(connection)
        selection = selection_study(connection)
        grouped = grouped_study(connection)
        multi = multi_quantile_study(connection, arguments.multi_float8)
    write_tables(quantiles, selection, grouped, multi, arguments.out)
    plot(quantiles, selection, multi, arguments.plot)


if __name__ == "__main__":
    main()
