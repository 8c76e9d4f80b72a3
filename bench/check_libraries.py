"""Quick check of bench/libraries.py: versions, privacy maps, plausible outputs, sampling laws.

Run: .venv/bin/python bench/check_libraries.py [--full]

OpenDP 0.13.0 draws Gumbel noise exactly, with arbitrary precision. One draw costs
about 1 ms of CPU per candidate, so 20,000 noisy-max draws over 4 candidates take
about 80 s. By default the OpenDP samples are therefore smaller (4,000 noisy-max
draws, still enough to tell the laws apart), so that the script finishes in under a minute. --full uses
20,000 draws everywhere. Exits 1 if any check fails.
"""

import argparse
import sys
import time
from collections import Counter
from importlib.metadata import version

import numpy as np

import libraries as L

FAILED = []


def check(ok, what):
    print(f"  [{'ok' if ok else 'FAIL'}] {what}")
    if not ok:
        FAILED.append(what)


def law(u, k):
    """Normalised exp(k * u)."""
    e = np.exp(k * (np.asarray(u, dtype=float) - np.max(u)))
    return e / e.sum()


def freqs(draw, n, labels):
    c = Counter(draw() for _ in range(n))
    return np.array([c[x] / n for x in labels])


def compare(title, labels, emp, laws, expected):
    """Print the empirical frequencies next to the candidate laws and check that the expected law fits best."""
    names = list(laws)
    print(f"  {title}")
    print("    " + "value".rjust(7) + "empirical".rjust(11) + "".join(n.rjust(24) for n in names))
    for i, x in enumerate(labels):
        print("    " + f"{x:>7}" + f"{emp[i]:>11.4f}" + "".join(f"{laws[n][i]:>24.4f}" for n in names))
    dev = {n: float(np.max(np.abs(emp - laws[n]))) for n in names}
    print("    max |empirical - law|: " + ", ".join(f"{n}: {d:.4f}" for n, d in dev.items()))
    check(min(dev, key=dev.get) == expected, f"{title}: closest law is {expected}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true", help="20,000 draws for the OpenDP samples too (slow)")
    args = ap.parse_args()
    n_dpl = 20_000
    n_odp_max = 20_000 if args.full else 4_000
    n_odp_q = 5_000 if args.full else 1_000
    t0 = time.time()

    print("== versions")
    print(f"  python {sys.version.split()[0]}")
    for pkg in ["opendp", "diffprivlib", "numpy", "scipy", "scikit-learn", "matplotlib", "psycopg", "psycopg-binary"]:
        print(f"  {pkg} {version(pkg)}")

    print("== OpenDP privacy maps (d_in = 1)")
    grid = [float(x) for x in range(0, 201)]
    for alpha in [0.5, 0.1, 0.9, 1 / 3]:
        for eps in [0.5, 1.0, 10.0]:
            f = L.make_opendp_quantile(alpha, 0, 200, eps, grid)
            used = f.measurement.map(1)
            print(f"  quantile alpha={alpha:.4f} eps={eps:<4}: scale={f.scale:.6g}  map(1)={used!r}"
                  f"  max(a,1-a)/scale={max(alpha, 1 - alpha) / f.scale:.6g}")
            check(used <= eps and used >= eps * (1 - 1e-6), f"quantile map(1) <= {eps} and close")
    for eps in [0.5, 1.0, 10.0]:
        f = L.make_opendp_noisy_max(4, eps)
        used = f.measurement.map(1)
        print(f"  noisy_max eps={eps:<4}: scale={f.scale:.6g}  map(1)={used!r}  1/scale={1 / f.scale:.6g}")
        check(used <= eps and used >= eps * (1 - 1e-6), f"noisy_max map(1) <= {eps} and close")

    print("== plausibility (eps = 10)")
    data = list(range(1, 102))
    odp_med = L.make_opendp_quantile(0.5, 0, 200, 10.0, grid)
    odp_q10 = L.make_opendp_quantile(0.1, 0, 200, 10.0, grid)
    for name, med, q10, big in [
        ("opendp_quantile", lambda v: odp_med(v), lambda v: odp_q10(v), lambda v: odp_med(v)),
        ("diffprivlib_quantile", lambda v: L.diffprivlib_quantile(v, 0.5, 0, 200, 10.0),
         lambda v: L.diffprivlib_quantile(v, 0.1, 0, 200, 10.0),
         lambda v: L.diffprivlib_quantile(v, 0.5, 0, 200, 10.0)),
    ]:
        m = [med(data) for _ in range(3)]
        q = [q10(data) for _ in range(3)]
        b = [big([1000.0] * 101) for _ in range(3)]
        print(f"  {name}: median(1..101) {np.round(m, 2).tolist()}, 0.1-quantile {np.round(q, 2).tolist()},"
              f" median(101 x 1000, clamped to 200) {np.round(b, 2).tolist()}")
        check(all(abs(x - 51) <= 3 for x in m), f"{name} median near 51")
        check(all(abs(x - 11) <= 3 for x in q), f"{name} 0.1-quantile near 11")
        if name == "opendp_quantile":
            check(all(x >= 195 for x in b), f"{name} clamps to hi")
        else:
            # Clipping makes all 101 values equal to 200. Their intervals have length 0 and so weight 0,
            # which leaves only [0, 200]: diffprivlib answers uniformly on [lo, hi] (a property of the library).
            check(all(0 <= x <= 200 for x in b), f"{name} stays in [lo, hi] (uniform on [0, 200] for tied data)")
    odp_nm = L.make_opendp_noisy_max(4, 10.0)
    for name, draw in [("opendp_noisy_max", lambda: odp_nm([0, 0, 50, 0])),
                       ("opendp_noisy_max (one-shot)", lambda: L.opendp_noisy_max([0, 0, 50, 0], 10.0)),
                       ("diffprivlib_exponential", lambda: L.diffprivlib_exponential([0, 0, 50, 0], 10.0))]:
        r = [draw() for _ in range(20)]
        print(f"  {name}: [0, 0, 50, 0] -> {r}")
        check(all(x == 2 for x in r), f"{name} returns 2")
    print(f"  opendp_quantile (one-shot) median(1..101) = {L.opendp_quantile(data, 0.5, 0, 200, 10.0, grid)}")

    print("== noisy max on counts [0, 1, 2, 3], eps = 1")
    counts = [0, 1, 2, 3]
    laws = {"exp(eps*c)/sum": law(counts, 1.0), "exp(eps*c/2)/sum": law(counts, 0.5)}
    nm1 = L.make_opendp_noisy_max(4, 1.0)
    compare(f"opendp_noisy_max, {n_odp_max} draws", range(4),
            freqs(lambda: nm1(counts), n_odp_max, range(4)), laws, "exp(eps*c)/sum")
    compare(f"diffprivlib_exponential, {n_dpl} draws", range(4),
            freqs(lambda: L.diffprivlib_exponential(counts, 1.0), n_dpl, range(4)), laws, "exp(eps*c/2)/sum")

    print("== quantile sampling law on 1..101, alpha = 0.5, eps = 1 (u = |(1-a)#{x<c} - a#{x>c}|)")
    x = np.arange(1, 102)
    tight, half = "exp(-eps*u/(2*0.5))", "exp(-eps*u/2)"
    cands = [47.0, 49.0, 51.0, 53.0, 55.0]
    u = np.array([abs(0.5 * (x < c).sum() - 0.5 * (x > c).sum()) for c in cands])
    q1 = L.make_opendp_quantile(0.5, 0, 200, 1.0, cands)
    compare(f"opendp_quantile on candidates {cands}, {n_odp_q} draws", [int(c) for c in cands],
            freqs(lambda: q1(x), n_odp_q, cands), {tight: law(-u, 1.0), half: law(-u, 0.5)}, tight)
    # diffprivlib: with bounds (0, 102) every interval [i, i+1] has length 1 and utility -|i - a*n|.
    bins = np.arange(0, 102)
    ub = np.abs(bins - 0.5 * 101)
    emp = freqs(lambda: int(L.diffprivlib_quantile(x, 0.5, 0, 102, 1.0)), n_dpl, bins)
    show = slice(47, 55)
    compare(f"diffprivlib_quantile interval [i, i+1], bounds (0, 102), {n_dpl} draws (i = 47..54 shown)",
            bins[show].tolist(), emp[show], {tight: law(-ub, 1.0)[show], half: law(-ub, 0.5)[show]}, half)

    print(f"== done in {time.time() - t0:.1f} s, {len(FAILED)} failed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
