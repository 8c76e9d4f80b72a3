"""People, not rows: user-level accuracy on MovieLens (`make accuracy`, or
`bash scripts/accuracy.sh --units-only`).

MovieLens ml-latest-small (data/movielens, or ../shared/data/movielens, or --data: 100,004
ratings of 9,125 listed movies by 671 users, GroupLens's research license, README.txt there). One user is the person to
protect and rates many movies, so row-level DP says little about them. Three queries, each
at a total epsilon of 0.1 and 1.0 per query, for every system:

(A) The movie rated by the most users (distinct users per movie; the truth: 356, Forrest
    Gump, 341 users, then 296 with 324). Metrics: the fraction of draws naming 356, and
    the mean regret, 341 minus the true number of users of the movie answered.
(B) The top 10 movies by distinct users. Metric: the mean overlap of the answer with the
    true top 10 (0 to 10).
(C) The median rating of every genre (a public movie -> genre table from movies.csv, genres
    split on '|', 20 genres with "(no genres listed)", joined to the ratings), on the
    half-star grid 0.5, 1.0, ..., 5.0. The truth is the median of all the genre's ratings
    (lower median, numpy's inverted_cdf). Metrics over genres and draws: mean |error| in
    stars, the rate of exact hits, and the answers missing (NULL, or a genre not output).

Systems:
- pg_exp_mech, user level: the table `ratings` with
  SECURITY LABEL FOR pg_exp_mech ON COLUMN ratings.user_id IS 'privacy_unit'. A and B:
  dp_argmax / dp_top_k(movie_id, 1, [10,] epsilon, 1, candidates), the candidates an
  init-plan over the public table movies (every listed movie can win, unrated ones with
  score 0); with the label each user's score per movie is summed and clamped to
  max_score 1, so a movie's score is its number of distinct users. A also with
  pg_exp_mech.argmax_mechanism = permute_and_flip (the distribution OpenDP 0.14's
  exponential-noise noisy max samples). C: dp_quantile(rating, 0.5, 0.5, 5, epsilon)
  over genres LEFT JOIN (movie_genres JOIN ratings) GROUP BY genre, grid size 9 (the 10
  half stars), at pg_exp_mech.max_groups_per_unit L = 1 and 3 (each user counts in at
  most L genres, each genre at epsilon / L; max_values_per_unit 1: one rating per user and
  genre).
- pg_exp_mech, row level: the same statements over `ratings_rows`, an unlabelled copy. NOT
  user-level DP: its guarantee is per rating. For A and B the distribution is that of the
  user level, because this data has one rating per (user, movie), which nothing enforces;
  for C a user's hundreds of ratings all count, in up to 20 genres, each at epsilon.
- OpenDP 0.14.0 (.venv-units, bench/requirements-units.txt), its best user-level pipelines.
  A and B: distinct-user counts computed here in Python (one user changes each count by
  at most 1, all in one direction: linf_distance(monotonic=True), d_in = 1) into
  make_noisy_max(scale = 1/epsilon) and make_noisy_top_k(k = 10, scale = 10/epsilon),
  asserting map(1) == epsilon. C: Context.compositor with
  privacy_unit = unit_of(contributions=[Bound(by=[col("genre")], per_group=1,
  num_groups=L)]), margins = [Margin(by=["genre"], max_length=10**8)],
  group_by("genre").agg(col("rating").fill_nan(3).fill_null(3).dp.median(half stars))
  .with_keys(genres), for L = 5 and 3; the data handed to it is truncated here first, per
  draw and at random (one rating per user and genre, then L of the user's genres), since
  0.14.0's own truncate_num_groups(keep="sample") fails under polars 1.32 ("multiple
  fields with name 'genre'") and would rank genres by a fixed hash, the same for everyone.
- Capping (what BigQuery and Tumult do), in OpenDP Polars: unit_of(contributions=1,
  identifier="user_id"), truncate_per_group(1, by=["movie_id"]), truncate_per_group(20)
  (20 random movies per user), group_by("movie_id").agg(dp.len()).with_keys(movies); the
  argmax and the top 10 of the noisy counts (ties at random). For C, capping at 1 genre:
  the OpenDP median at L = 1.

Each OpenDP query is built and resolved once per setting and released once per draw.
Draws: UNITS_DRAWS (default 200) per pg_exp_mech setting, over two connections, one
statement per draw; UNITS_OPENDP_DRAWS (default 40) per OpenDP or capping setting.
work_mem 64MB. Results in OUT/accuracy_units.md and .json, the plot in --plot.
"""

import argparse
import concurrent.futures
import json
import os
import platform
import statistics
import time
from importlib import metadata
from pathlib import Path

import matplotlib
import numpy as np
import opendp.prelude as dp
import polars as pl
import psycopg
from polars import col

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DRAWS = int(os.environ.get("UNITS_DRAWS", 200))
OPENDP_DRAWS = int(os.environ.get("UNITS_OPENDP_DRAWS", 40))
EPSILONS = [0.1, 1.0]
K = 10                   # query B: the top 10
CAP_MOVIES = 20          # capping: movies kept per user
OURS_L = [1, 3]          # pg_exp_mech.max_groups_per_unit in query C
OPENDP_L = [5, 3]        # OpenDP's num_groups in query C (L = 1 is "capping at 1 genre")
HALF_STARS = [0.5 * i for i in range(1, 11)]
WORK_MEM = "64MB"
SEED = 20161017          # the truncation's randomness in Python (OpenDP's noise is its own)

USER = "pg_exp_mech, user level"
USER_PF = "pg_exp_mech, user level, permute-and-flip"
ROWS = "pg_exp_mech, row level (NOT user-level DP)"
OPENDP = "OpenDP noisy max / top-k on distinct-user counts"
CAPPING = f"Capping {CAP_MOVIES} movies per user (OpenDP Polars)"


def ours_median(L):
    return f"pg_exp_mech, user level, L = {L}"


def opendp_median(L):
    return f"OpenDP median, {L} genres per user"


CAPPING_GENRE = "Capping at 1 genre (OpenDP median)"

dp.enable_features("contrib")


# ---------------------------------------------------------------- data

def read_data(data_dir):
    """The CSV files as Polars frames, and everything the truths need."""
    ratings = (pl.read_csv(data_dir / "ratings.csv")
               .rename({"userId": "user_id", "movieId": "movie_id"})
               .select("user_id", "movie_id", col("rating").cast(pl.Float64)))
    movies = pl.read_csv(data_dir / "movies.csv").rename({"movieId": "movie_id"})
    movie_genres = (movies.select("movie_id", col("genres").str.split("|").alias("genre"))
                    .explode("genre"))
    genres = movie_genres.select("genre").unique().sort("genre")
    rated_genres = ratings.join(movie_genres, on="movie_id").select("user_id", "genre", "rating")
    return ratings, movies, movie_genres, genres, rated_genres


def truths(ratings, movies, rated_genres):
    users = (ratings.unique(["user_id", "movie_id"]).group_by("movie_id").len("users"))
    counts = (movies.select("movie_id").join(users, on="movie_id", how="left")
              .with_columns(col("users").fill_null(0)))
    movie_ids = counts["movie_id"].to_list()
    users_of = dict(zip(movie_ids, counts["users"].to_list()))
    ranked = sorted(movie_ids, key=lambda m: -users_of[m])
    medians, optima = {}, {}
    for (genre,), group in rated_genres.group_by("genre"):
        values = group["rating"].to_numpy()
        medians[genre] = float(np.quantile(values, 0.5, method="inverted_cdf"))
        # The half star that the median's utility -|#{x < c} - #{x > c}| (pg_exp_mech's and
        # OpenDP's) ranks first on all the ratings: what noise-free answers would be.
        optima[genre] = min(HALF_STARS, key=lambda c: (abs(int((values < c).sum())
                                                           - int((values > c).sum())), c))
    # What capping leaves the best movie on average: each of its users keeps it with
    # probability min(1, CAP_MOVIES / the user's number of movies).
    per_user = ratings.unique(["user_id", "movie_id"]).group_by("user_id").len("n")
    kept = (ratings.filter(col("movie_id") == ranked[0]).select("user_id").unique()
            .join(per_user, on="user_id")
            .select((pl.lit(CAP_MOVIES) / col("n")).clip(upper_bound=1.0).sum())).item()
    # The exact law of the exponential mechanism (pg_exp_mech's default) on these counts.
    scores = np.array([users_of[m] for m in movie_ids], dtype=float)
    exact = {}
    for epsilon in EPSILONS:
        weights = np.exp(epsilon * (scores - scores.max()))
        weights /= weights.sum()
        exact[epsilon] = (float(weights.max()), float(weights @ (scores.max() - scores)))
    return {"movie_ids": movie_ids, "users_of": users_of, "best": ranked[0],
            "best_capped": float(kept), "exponential": exact,
            "top": ranked[:K], "medians": medians, "optima": optima,
            "tenth_vs_eleventh": (users_of[ranked[K - 1]], users_of[ranked[K]])}


def load(connection, data_dir):
    """movies, genres, movie_genres (public); ratings (labelled) and ratings_rows (not).
    Returns whether the privacy-unit label could be set (None) or the error it raised."""
    with connection.cursor() as cursor:
        cursor.execute("SET client_min_messages = warning")
        cursor.execute("DROP TABLE IF EXISTS ratings, ratings_rows, movie_genres, genres, movies")
        cursor.execute("CREATE TABLE movies (movie_id int PRIMARY KEY, title text, genres text)")
        for table in ["ratings", "ratings_rows"]:
            cursor.execute(f"CREATE TABLE {table} (user_id int, movie_id int REFERENCES movies, "
                           f"rating numeric(2,1), rated_at bigint)")
        for table, path in [("movies", "movies.csv"), ("ratings", "ratings.csv"),
                            ("ratings_rows", "ratings.csv")]:
            with open(data_dir / path, "rb") as f, \
                    cursor.copy(f"COPY {table} FROM STDIN WITH (FORMAT csv, HEADER true)") as copy:
                while chunk := f.read(1 << 20):
                    copy.write(chunk)
        cursor.execute("CREATE TABLE movie_genres AS SELECT movie_id, "
                       "unnest(string_to_array(genres, '|')) AS genre FROM movies")
        cursor.execute("CREATE TABLE genres AS SELECT DISTINCT genre FROM movie_genres")
        cursor.execute("ALTER TABLE genres ADD PRIMARY KEY (genre)")
        cursor.execute("CREATE INDEX ON movie_genres (movie_id)")
        for table in ["movies", "genres", "movie_genres", "ratings", "ratings_rows"]:
            cursor.execute(f"ANALYZE {table}")
    connection.commit()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SECURITY LABEL FOR pg_exp_mech ON COLUMN ratings.user_id "
                           "IS 'privacy_unit'")
        connection.commit()
        return None
    except psycopg.Error as error:
        connection.rollback()
        return str(error).strip()


# ---------------------------------------------------------------- pg_exp_mech

CANDIDATES = "(SELECT array_agg(movie_id ORDER BY movie_id) FROM movies)"


def sql_argmax(table, epsilon):
    return f"SELECT dp_argmax(movie_id, 1, {epsilon}, 1, {CANDIDATES}) FROM {table}"


def sql_top_k(table, epsilon):
    return f"SELECT dp_top_k(movie_id, 1, {K}, {epsilon}, 1, {CANDIDATES}) FROM {table}"


def sql_median(table, epsilon):
    return ("SELECT g.genre, dp_quantile(r.rating, 0.5, 0.5, 5, {e}) FROM genres g "
            "LEFT JOIN (movie_genres mg JOIN {t} r ON r.movie_id = mg.movie_id) "
            "ON mg.genre = g.genre GROUP BY g.genre").format(t=table, e=epsilon)


def pg_draws(dsn, setup, sql, draws):
    """`draws` runs of sql over two connections (each runs setup first): a list of each
    run's rows, the seconds, and the first error (then fewer runs)."""
    def worker(n):
        results = []
        with psycopg.connect(dsn, autocommit=True) as connection:
            with connection.cursor() as cursor:
                cursor.execute(f"SET work_mem = '{WORK_MEM}'")
                for statement in setup:
                    cursor.execute(statement)
                for _ in range(n):
                    cursor.execute(sql)
                    results.append(cursor.fetchall())
        return results

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(worker, n) for n in (draws - draws // 2, draws // 2)]
        results, error = [], None
        for future in futures:
            try:
                results.extend(future.result())
            except psycopg.Error as e:
                error = error or str(e).strip()
    return results, time.perf_counter() - start, error


# ---------------------------------------------------------------- OpenDP

def opendp_selection(truth, epsilon):
    """make_noisy_max and make_noisy_top_k on the distinct-user counts, d_in = 1."""
    n = len(truth["movie_ids"])
    space = (dp.vector_domain(dp.atom_domain(T=int), size=n),
             dp.linf_distance(T=int, monotonic=True))
    noisy_max = dp.m.make_noisy_max(*space, dp.max_divergence(), scale=1 / epsilon)
    top_k = dp.m.make_noisy_top_k(*space, dp.max_divergence(), k=K, scale=K / epsilon)
    assert abs(noisy_max.map(1) - epsilon) < 1e-12, noisy_max.map(1)
    assert abs(top_k.map(1) - epsilon) < 1e-12, top_k.map(1)
    counts = [truth["users_of"][m] for m in truth["movie_ids"]]
    ids = truth["movie_ids"]
    start = time.perf_counter()
    best = [ids[noisy_max(counts)] for _ in range(OPENDP_DRAWS)]
    seconds_a = time.perf_counter() - start
    start = time.perf_counter()
    tops = [[ids[i] for i in top_k(counts)] for _ in range(OPENDP_DRAWS)]
    return best, seconds_a, tops, time.perf_counter() - start


def capping_selection(ratings, movies, epsilon, rng):
    """BigQuery/Tumult-style: at most CAP_MOVIES movies per user, one count each, noisy
    counts of every listed movie; the argmax and the top 10 of each release."""
    data = ratings.select("user_id", "movie_id").lazy()
    context = dp.Context.compositor(
        data=data, privacy_unit=dp.unit_of(contributions=1, identifier="user_id"),
        privacy_loss=dp.loss_of(epsilon=epsilon), split_evenly_over=1)
    query = (context.query()
             .truncate_per_group(1, by=["movie_id"])
             .truncate_per_group(CAP_MOVIES)
             .group_by("movie_id").agg(dp.len())
             .with_keys(movies.select("movie_id").lazy()))
    start = time.perf_counter()
    measurement = query.resolve()
    assert measurement.map(1) <= epsilon + 1e-12, measurement.map(1)
    scale = query.summarize()["scale"][0]
    build = time.perf_counter() - start
    best, tops = [], []
    start = time.perf_counter()
    for _ in range(OPENDP_DRAWS):
        out = measurement(data).collect()
        ids = out["movie_id"].to_numpy()
        noisy = out["len"].fill_null(0).to_numpy().astype(float)
        order = np.lexsort((rng.random(len(ids)), -noisy))   # ties at random
        best.append(int(ids[order[0]]))
        tops.append([int(i) for i in ids[order[:K]]])
    return best, tops, build, time.perf_counter() - start, float(scale)


def truncate_genres(rated_genres, L, rng):
    """One random rating per user and genre, then L random genres per user."""
    frame = rated_genres.with_columns(pl.Series("u", rng.random(rated_genres.height)))
    frame = frame.filter(col("u") == col("u").min().over("user_id", "genre"))
    frame = frame.with_columns(pl.Series("v", rng.random(frame.height)))
    frame = frame.filter(col("v").rank("ordinal").over("user_id") <= L)
    return frame.select("genre", "rating")


def opendp_medians(rated_genres, genres, epsilon, L, rng):
    context = dp.Context.compositor(
        data=truncate_genres(rated_genres, L, rng).lazy(),
        privacy_unit=dp.unit_of(contributions=[
            dp.polars.Bound(by=[col("genre")], per_group=1, num_groups=L)]),
        privacy_loss=dp.loss_of(epsilon=epsilon), split_evenly_over=1,
        margins=[dp.polars.Margin(by=["genre"], max_length=10**8)])
    query = (context.query().group_by("genre")
             .agg(col("rating").fill_nan(3.0).fill_null(3.0).dp.median(HALF_STARS))
             .with_keys(genres.lazy()))
    start = time.perf_counter()
    measurement = query.resolve()
    scale = query.summarize()["scale"][0]
    build = time.perf_counter() - start
    draws = []
    start = time.perf_counter()
    for _ in range(OPENDP_DRAWS):
        out = measurement(truncate_genres(rated_genres, L, rng).lazy()).collect()
        draws.append(list(zip(out["genre"].to_list(), out["rating"].to_list())))
    return draws, build, time.perf_counter() - start, float(scale)


# ---------------------------------------------------------------- metrics

def metrics_a(truth, answers):
    users = truth["users_of"]
    best = users[truth["best"]]
    valid = [a for a in answers if a is not None]
    return {"draws": len(answers), "missing": len(answers) - len(valid),
            "right": sum(a == truth["best"] for a in valid) / len(answers),
            "regret": statistics.fmean(best - users.get(a, 0) for a in valid) if valid else None}


def metrics_b(truth, answers):
    top = set(truth["top"])
    return {"draws": len(answers), "missing": sum(a is None for a in answers),
            "overlap": statistics.fmean(len(top & set(a or [])) for a in answers)}


def metrics_c(truth, answers):
    """answers: per draw, a list of (genre, answer)."""
    medians = truth["medians"]
    errors, absent, null, absent_by_genre = [], 0, 0, {}
    for draw in answers:
        got = {g: a for g, a in draw}
        for genre, median in medians.items():
            if genre not in got:      # the public key's row is not in the output
                absent += 1
                absent_by_genre[genre] = absent_by_genre.get(genre, 0) + 1
            elif got[genre] is None:
                null += 1
            else:
                errors.append(abs(float(got[genre]) - median))
    return {"draws": len(answers), "answers": len(answers) * len(medians),
            "missing": absent + null, "absent": absent, "null": null,
            "absent_by_genre": absent_by_genre,
            "abs_error": statistics.fmean(errors) if errors else None,
            "exact": sum(e < 1e-9 for e in errors) / len(errors) if errors else None}


# ---------------------------------------------------------------- the study

def run(dsn, data_dir, log):
    ratings, movies, movie_genres, genres, rated_genres = read_data(data_dir)
    truth = truths(ratings, movies, rated_genres)
    rng = np.random.default_rng(SEED)
    log(f"truth: best {truth['best']} ({truth['users_of'][truth['best']]} users), "
        f"top {K} {truth['top']}; genre medians {truth['medians']}")
    with psycopg.connect(dsn) as connection:
        label_error = load(connection, data_dir)
    if label_error:
        log(f"privacy-unit label refused, user-level pg_exp_mech not run: {label_error}")
    rows = []

    def add(query, system, epsilon, metrics, seconds, user_level, error=None, sql=None,
            **extra):
        row = {"query": query, "system": system, "epsilon": epsilon, **metrics,
               "seconds": round(seconds, 2), "user_level": user_level, "failure": error}
        if sql:
            row["sql"] = sql
        row.update(extra)
        rows.append(row)
        shown = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in metrics.items()}
        log(f"{query} eps {epsilon:<4} {system}: {shown} ({seconds:.1f} s)"
            + (f" ERROR {error}" if error else ""))

    def not_run(query, system, epsilon, why, sql):
        rows.append({"query": query, "system": system, "epsilon": epsilon, "draws": 0,
                     "user_level": True, "failure": why, "not_run": True, "sql": sql,
                     "seconds": 0})
        log(f"{query} eps {epsilon} {system}: not run ({why})")

    for epsilon in EPSILONS:
        # A and B in pg_exp_mech.
        for system, table, setup, user_level in [
                (USER, "ratings", [], True),
                (USER_PF, "ratings", ["SET pg_exp_mech.argmax_mechanism = permute_and_flip"], True),
                (ROWS, "ratings_rows", [], False)]:
            for query, sql, convert, metric in [
                    ("A", sql_argmax(table, epsilon), lambda r: r[0][0], metrics_a),
                    ("B", sql_top_k(table, epsilon), lambda r: r[0][0], metrics_b)]:
                if system == USER_PF and query == "B":
                    continue   # dp_top_k is Gumbel-max whatever the setting
                if user_level and label_error:
                    not_run(query, system, epsilon, label_error, sql)
                    continue
                results, seconds, error = pg_draws(dsn, setup, sql, DRAWS)
                answers = [convert(r) for r in results]
                add(query, system, epsilon, metric(truth, answers) if answers else {"draws": 0},
                    seconds, user_level, error, sql if error else None)
        # A and B in OpenDP.
        best, seconds_a, tops, seconds_b = opendp_selection(truth, epsilon)
        add("A", OPENDP, epsilon, metrics_a(truth, best), seconds_a, True)
        add("B", OPENDP, epsilon, metrics_b(truth, tops), seconds_b, True)
        best, tops, build, seconds, scale = capping_selection(ratings, movies, epsilon, rng)
        add("A", CAPPING, epsilon, metrics_a(truth, best), build + seconds, True,
            build_seconds=round(build, 2), laplace_scale=scale)
        add("B", CAPPING, epsilon, metrics_b(truth, tops), 0.0, True,
            note="the same releases as A")

        # C in pg_exp_mech.
        grid = "SET pg_exp_mech.quantile_grid_size = 9"
        for L in OURS_L:
            sql = sql_median("ratings", epsilon)
            if label_error:
                not_run("C", ours_median(L), epsilon, label_error, sql)
                continue
            results, seconds, error = pg_draws(
                dsn, [grid, f"SET pg_exp_mech.max_groups_per_unit = {L}"], sql, DRAWS)
            add("C", ours_median(L), epsilon,
                metrics_c(truth, results) if results else {"draws": 0}, seconds, True, error,
                sql if error else None)
        sql = sql_median("ratings_rows", epsilon)
        results, seconds, error = pg_draws(dsn, [grid], sql, DRAWS)
        add("C", ROWS, epsilon, metrics_c(truth, results) if results else {"draws": 0},
            seconds, False, error, sql if error else None)
        # C in OpenDP.
        for L, system in [(L, opendp_median(L)) for L in OPENDP_L] + [(1, CAPPING_GENRE)]:
            draws, build, seconds, scale = opendp_medians(rated_genres, genres, epsilon, L, rng)
            add("C", system, epsilon, metrics_c(truth, draws), build + seconds, True,
                build_seconds=round(build, 2), noise_scale=scale)
    return truth, rows, label_error


# ---------------------------------------------------------------- report

LICENSE_NOTE = """\
Data: MovieLens "ml-latest-small" (GroupLens Research, generated October 17, 2016; read
from {source}, with GroupLens's README.txt beside it). Used under the GroupLens usage
license in that README.txt: research use only; no endorsement by the University of
Minnesota or the GroupLens Research Group is stated or implied; no commercial or
revenue-bearing use without permission; redistribution, including transformations, only
under the same license conditions (the figures below are aggregates of the data and are
shared under those conditions). Citation: F. Maxwell Harper and Joseph A. Konstan. 2015.
The MovieLens Datasets: History and Context. ACM Transactions on Interactive Intelligent
Systems (TiiS) 5, 4, Article 19 (December 2015), 19 pages.
https://doi.org/10.1145/2827872"""


def fmt(value, digits=2, percent=False):
    if value is None:
        return "–"
    return f"{100 * value:.0f} %" if percent else f"{value:.{digits}f}"


def table(rows, query, columns):
    """columns: (header, function of a row -> text)."""
    systems = list(dict.fromkeys(r["system"] for r in rows if r["query"] == query))
    head = ["system"] + [f"{h}, ε = {e}" for e in EPSILONS for h, _ in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for system in systems:
        cells = [system]
        for epsilon in EPSILONS:
            row = next(r for r in rows if r["query"] == query and r["system"] == system
                       and r["epsilon"] == epsilon)
            for _, f in columns:
                cells.append("not run" if not row.get("draws") else f(row))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(out, plot, truth, rows, label_error, seconds, versions, source):
    users = truth["users_of"]
    off = sorted(g for g in truth["medians"] if truth["optima"][g] != truth["medians"][g])
    floor = statistics.fmean(abs(truth["optima"][g] - truth["medians"][g])
                             for g in truth["medians"])
    md = [
        "# People, not rows: user-level accuracy on MovieLens",
        "",
        f"`make accuracy` (or `bash scripts/accuracy.sh --units-only`), bench/units.py. "
        f"{DRAWS} draws per pg_exp_mech setting, {OPENDP_DRAWS} per OpenDP or capping "
        f"setting; ε is each query's total. Run time {seconds / 60:.1f} minutes. "
        f"{versions}.",
        "",
        LICENSE_NOTE.format(source=source),
        "",
        "The person protected is the user (671 users, 100,004 ratings, 9,125 listed movies). "
        "pg_exp_mech at user level reads the table `ratings` labelled with "
        "`SECURITY LABEL FOR pg_exp_mech ON COLUMN ratings.user_id IS 'privacy_unit'`; "
        "the row-level rows read an unlabelled copy and are **not user-level DP** (see "
        "below). Candidates of A and B come from the public table `movies`; the genre "
        "keys of C from the public table `genres` (movies.csv).",
        "",
    ]
    if label_error:
        md += [f"**Not run:** the user-level pg_exp_mech rows. The extension installed "
               f"refused the label: `{label_error}`", ""]
    md += [
        "## A: the movie rated by the most users",
        "",
        f"Truth: movie {truth['best']} with {users[truth['best']]} users "
        f"(then 296 with {users.get(296)}). Right: draws naming it; regret: "
        f"{users[truth['best']]} minus the users of the movie named, averaged. The "
        "exponential mechanism's exact law on these counts: "
        + ", ".join(f"{100 * p:.1f} % right and regret {r:.2f} at ε = {e}"
                    for e, (p, r) in truth["exponential"].items()) + ".",
        "",
        table(rows, "A", [("right", lambda r: fmt(r["right"], percent=True)),
                          ("regret", lambda r: fmt(r["regret"], 1))]),
        "",
        f"## B: the top {K} movies",
        "",
        f"Mean overlap with the true top {K} ({', '.join(map(str, truth['top']))}; the "
        f"10th has {truth['tenth_vs_eleventh'][0]} users, the 11th "
        f"{truth['tenth_vs_eleventh'][1]}).",
        "",
        table(rows, "B", [("overlap", lambda r: fmt(r["overlap"], 2))]),
        "",
        "With the label, a user's score per movie is clamped to 1 and removing the user "
        "lowers every movie's score by 0 or 1, so dp_argmax and dp_top_k keep the "
        "row-level noise: no cap on movies per user is needed. Capping at "
        f"{CAP_MOVIES} movies per user leaves movie {truth['best']} about "
        f"{truth['best_capped']:.0f} of its {users[truth['best']]} users on average, and "
        f"the 9,125 counts get Laplace noise of scale {CAP_MOVIES}/ε.",
        "",
        "## C: the median rating of every genre",
        "",
        "Over the 20 genres and the draws: mean |answer − median of all the genre's "
        "ratings| in stars, exact hits, and answers missing (of 20 per draw). True "
        "medians: " + ", ".join(f"{g} {m:g}" for g, m in sorted(truth["medians"].items()))
        + ". Ratings are half stars, so many equal values sit at the median: the utility "
        "both pg_exp_mech and OpenDP use, −|#{x < c} − #{x > c}|, ranks first a half star "
        "other than the median in " + str(len(off)) + " genres on all the ratings ("
        + ", ".join(f"{g}: {truth['optima'][g]:g} for {truth['medians'][g]:g}" for g in off)
        + "), so even answers without noise would be off by "
        + f"{floor:.3f} stars on average on this metric (by more or less at user level, "
        "where each user adds one rating to a genre).",
        "",
        table(rows, "C", [("mean abs. error", lambda r: fmt(r["abs_error"], 3)),
                          ("exact", lambda r: fmt(r["exact"], percent=True)),
                          ("missing", lambda r: f"{r['missing']} of {r['answers']}")]),
        "",
        "## Settings",
        "",
        "- pg_exp_mech, A: `" + sql_argmax("ratings", "ε") + "`; B: `"
        + sql_top_k("ratings", "ε") + "`; C: `SET pg_exp_mech.quantile_grid_size = 9; "
        "SET pg_exp_mech.max_groups_per_unit = L;` then `" + sql_median("ratings", "ε")
        + "`. Row level: the same over `ratings_rows`. One statement per draw, two "
        f"connections, work_mem {WORK_MEM}.",
        "- Row level is not user-level DP. For A and B its answers have the user level's "
        "distribution only because this data has one rating per (user, movie), which "
        "nothing enforces; for C every rating counts, a user in up to 20 genres, each "
        "genre at ε.",
        "- OpenDP noisy max / top-k: `make_noisy_max(vector_domain(atom_domain(T=int), "
        "size=9125), linf_distance(T=int, monotonic=True), max_divergence(), scale=1/ε)` "
        f"and `make_noisy_top_k(..., k={K}, scale={K}/ε)` (both map(1) = ε) on "
        "distinct-user counts computed in Python.",
        "- Capping: `unit_of(contributions=1, identifier=\"user_id\")`, "
        f"`truncate_per_group(1, by=[\"movie_id\"])`, `truncate_per_group({CAP_MOVIES})`, "
        "`group_by(\"movie_id\").agg(dp.len()).with_keys(movies)`: Laplace noise of scale "
        + " and ".join(f"{r['laplace_scale']:g} (ε = {r['epsilon']})" for r in rows
                       if r["system"] == CAPPING and "laplace_scale" in r)
        + " on each count; A and B are read from the same releases.",
        "- OpenDP median: `unit_of(contributions=[Bound(by=[col(\"genre\")], per_group=1, "
        "num_groups=L)])`, `Margin(by=[\"genre\"], max_length=10**8)`, "
        "`group_by(\"genre\").agg(col(\"rating\").fill_nan(3).fill_null(3).dp.median("
        "[0.5, 1.0, ..., 5.0])).with_keys(genres)`, on data truncated in Python per draw "
        "(one random rating per user and genre, L random genres per user): OpenDP "
        "0.14.0's `truncate_num_groups(keep=\"sample\")` fails under polars 1.32 "
        "(\"multiple fields with name 'genre'\") and ranks groups by a fixed hash, the "
        "same genres for every user. Capping at 1 genre: L = 1.",
        "",
    ]
    absent = [r for r in rows if r["query"] == "C" and r.get("absent")]
    if absent:
        md += [
            "## Genres missing from a GROUP BY over public keys",
            "",
            "The C statement lists the genres from the public table `genres` (LEFT JOIN), "
            "so every genre should come out in every draw, as it does at row level and in "
            "OpenDP's with_keys (an empty group gets a noisy answer). At user level, "
            "pg_exp_mech left rows out: "
            + "; ".join(f"{r['system']}, ε = {r['epsilon']}: {r['absent']} of {r['answers']} ("
                        + ", ".join(f"{g} {n}" for g, n in sorted(r["absent_by_genre"].items()))
                        + ")" for r in absent)
            + ". The genre's row is absent, not NULL: it happens when none of the genre's "
            "users kept it among their L groups (\"(no genres listed)\" has 14 users, each in "
            "many genres). Whether a public key comes out then depends on the data: one "
            "user more or less can make it appear or vanish with certainty, which no ε "
            "bounds. Reproduction (pg_exp_mech.max_groups_per_unit = 1):",
            "",
            "```sql",
            "CREATE TEMP TABLE t(user_id int, g text, v float8);",
            "INSERT INTO t VALUES (1, 'a', 1), (1, 'b', 2);",
            "SECURITY LABEL FOR pg_exp_mech ON COLUMN t.user_id IS 'privacy_unit';",
            "CREATE TEMP TABLE keys(g text PRIMARY KEY);",
            "INSERT INTO keys VALUES ('a'), ('b'), ('c');",
            "SELECT k.g, dp_quantile(t.v, 0.5, 0, 10, 1.0) FROM keys k LEFT JOIN t ON t.g = k.g",
            " GROUP BY k.g;   -- 2 rows: 'c' and one of 'a', 'b'; without user 1's rows, 3",
            "```",
            "",
            "The mean errors above are over the answers given.",
            "",
        ]
    errors = [r for r in rows if r.get("failure") and not r.get("not_run")]
    if errors:
        md += ["## Errors", ""]
        for r in errors:
            md.append(f"- {r['query']}, {r['system']}, ε = {r['epsilon']}: `{r['failure']}`"
                      + (f" — SQL: `{r['sql']}`" if r.get("sql") else ""))
        md.append("")
    (out / "accuracy_units.md").write_text("\n".join(md))
    (out / "accuracy_units.json").write_text(json.dumps(
        {"draws": DRAWS, "opendp_draws": OPENDP_DRAWS, "epsilons": EPSILONS,
         "seconds": round(seconds, 1), "versions": versions, "label_error": label_error,
         "truth": {"best": truth["best"], "best_users": users[truth["best"]],
                   "top": truth["top"], "medians": truth["medians"],
                   "utility_optima": truth["optima"]},
         "rows": rows}, indent=1))
    draw_plot(plot, rows)


def draw_plot(path, rows):
    colors = {s: plt.get_cmap("tab10")(i) for i, s in enumerate(dict.fromkeys(
        r["system"] for r in rows if "row level" not in r["system"]))}
    colors[ROWS] = "lightgray"
    panels = [("A", "right", "A: most-rated movie, fraction right", (0, 1.05)),
              ("B", "overlap", f"B: top {K}, mean overlap", (0, K + 0.5)),
              ("C", "abs_error", "C: median rating per genre, mean |error| (stars)", None)]
    fig, axes = plt.subplots(1, 3, figsize=(17, 6.4))
    for ax, (query, metric, title, ylim) in zip(axes, panels):
        systems = list(dict.fromkeys(r["system"] for r in rows if r["query"] == query))
        width = 0.8 / max(len(systems), 1)
        for i, system in enumerate(systems):
            values = []
            for epsilon in EPSILONS:
                row = next(r for r in rows if r["query"] == query and r["system"] == system
                           and r["epsilon"] == epsilon)
                values.append(row.get(metric) if row.get("draws") else np.nan)
            values = [np.nan if v is None else v for v in values]
            ax.bar(np.arange(len(EPSILONS)) + (i - (len(systems) - 1) / 2) * width, values,
                   width, label=system, color=colors[system],
                   hatch="//" if "row level" in system else None, edgecolor="dimgray")
        ax.set_xticks(range(len(EPSILONS)), [f"ε = {e}" for e in EPSILONS])
        ax.set_title(title, fontsize=10)
        if ylim:
            ax.set_ylim(*ylim)
        ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.09), frameon=False)
    fig.suptitle("MovieLens, user-level DP (hatched: row level, not user-level DP)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--data", type=Path, default=None,
                        help="the folder of ratings.csv and movies.csv (default: the "
                        "repository's data/movielens, else ../shared/data/movielens)")
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    parser.add_argument("--plot", type=Path, default=Path("docs/accuracy_units.png"))
    args = parser.parse_args()
    repo = Path(__file__).resolve().parents[1]
    if args.data is None:
        args.data = next((d for d in [repo / "data/movielens", repo / "../shared/data/movielens"]
                          if (d / "ratings.csv").exists()), repo / "data/movielens")
    data = args.data.resolve()
    source = (str(data.relative_to(repo)) if data.is_relative_to(repo)
              else os.path.relpath(data, repo))
    args.out.mkdir(parents=True, exist_ok=True)
    args.plot.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()

    def log(message):
        print(f"[{time.perf_counter() - start:7.1f} s] {message}", flush=True)

    with psycopg.connect(args.dsn) as connection:
        extension = connection.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'pg_exp_mech'").fetchone()[0]
        server = connection.execute("SHOW server_version").fetchone()[0]
    versions = (f"pg_exp_mech {extension} on PostgreSQL {server.split()[0]}, OpenDP "
                f"{metadata.version('opendp')}, polars {pl.__version__}, Python "
                f"{platform.python_version()}")
    truth, rows, label_error = run(args.dsn, data, log)
    seconds = time.perf_counter() - start
    report(args.out, args.plot, truth, rows, label_error, seconds, versions, source)
    log(f"wrote {args.out / 'accuracy_units.md'}, {args.out / 'accuracy_units.json'}, "
        f"{args.plot}")


if __name__ == "__main__":
    main()
