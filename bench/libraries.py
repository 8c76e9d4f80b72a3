"""The two DP libraries a user would reach for instead of pg_exp_mech.

Each function takes plain Python lists or numpy arrays and returns a plain
Python value. Each is epsilon-DP at exactly the given epsilon for add/remove-one-record
(unbounded) neighbours, and the epsilon comes from the library's own accounting.
We do not add any noise ourselves.

Versions are pinned in bench/requirements.txt. OpenDP is pinned to 0.13.0 on
purpose: it is the last release whose pure-DP report-noisy-max uses Gumbel noise,
so it samples exactly from the exponential mechanism. From 0.14.0 on,
make_report_noisy_max_gumbel is deprecated and make_noisy_max(max_divergence())
uses exponential noise, which gives the permute-and-flip law. Tested in 0.14.2,
0.15.1 and 0.16.0. In 0.14.2 and 0.15.1 the deprecated make_report_noisy_max_gumbel
also returns the argmin when optimize="max". make_private_quantile switched to
permute-and-flip as well: in 0.15.1 and 0.16.0 it takes an output_measure argument
and has map(1) = 2*max(a, 1-a)/scale.
"""

import numpy as np
import opendp.prelude as dp
from diffprivlib.accountant import BudgetAccountant
from diffprivlib.mechanisms import Exponential
from diffprivlib.tools import quantile as _dpl_quantile

# OpenDP refuses to build make_private_quantile, make_clamp or
# make_report_noisy_max_gumbel without this flag.
dp.enable_features("contrib")

# binary_search_param returns the smallest scale with map(1) <= epsilon. We also
# require the achieved epsilon to be within this relative gap of the target.
_EPS_REL_GAP = 1e-6


def _verified(meas, epsilon):
    """Return meas after checking that epsilon * (1 - gap) <= meas.map(1) <= epsilon."""
    used = meas.map(1)
    if not (epsilon * (1.0 - _EPS_REL_GAP) <= used <= epsilon):
        raise RuntimeError(f"OpenDP map(1) = {used!r}, wanted <= {epsilon!r} and close to it")
    return meas


# --------------------------------------------------------------------------
# OpenDP (0.13.0)
# --------------------------------------------------------------------------
#
# Quantile: scale vs. alpha and epsilon (checked with meas.map(1); see check_libraries.py)
#   map(d_in) = max(a, 1 - a) * d_in / scale,
# where a is alpha rounded down to a multiple of 1e-4. OpenDP turns alpha into a
# fraction over 10_000, so 1/3 acts as 0.3333, 2/3 as 0.6666, 0.12349 as 0.1234,
# and 1e-5 as 0. Both the quantile that is targeted and map(1) use a.
# So scale = max(a, 1 - a) / epsilon. This is the tight range bound
# 2 * max(a, 1-a) * d_in / scale', where scale' = 2 * scale is the Gumbel
# scale in units of u(c) = |(1-a) * #{x < c} - a * #{x > c}|. The sampled
# candidate follows the exponential mechanism:
#   P(c) proportional to exp(-epsilon * u(c) / (2 * max(a, 1 - a))).
# The scale is not written out by hand. binary_search_param finds it, and
# _verified checks map(1).


def make_opendp_quantile(alpha, lo, hi, epsilon, candidates):
    """Build OpenDP's quantile mechanism once and return a callable values -> float.

    Privacy: clamp to [lo, hi], then make_private_quantile on the candidate grid,
    under symmetric distance and max divergence. The scale comes from binary_search_param
    and is checked so that map(1) <= epsilon and is close to it.
    """
    space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.symmetric_distance()
    clamp = dp.t.make_clamp(*space, bounds=(float(lo), float(hi)))
    grid = [float(c) for c in candidates]

    def build(scale):
        return clamp >> dp.m.then_private_quantile(grid, alpha=float(alpha), scale=scale)

    scale = dp.binary_search_param(build, d_in=1, d_out=float(epsilon))
    meas = _verified(build(scale), float(epsilon))

    def draw(values):
        return float(meas(np.asarray(values, dtype=float).tolist()))

    draw.measurement, draw.scale = meas, scale
    return draw


def opendp_quantile(values, alpha, lo, hi, epsilon, candidates):
    """Return one OpenDP private alpha-quantile of values on the candidate grid.

    Privacy: epsilon-DP under add/remove-one, as in make_opendp_quantile. The
    mechanism is rebuilt on every call, so use make_opendp_quantile in loops.
    """
    return make_opendp_quantile(alpha, lo, hi, epsilon, candidates)(values)


# Noisy max: monotonic L-infinity metric with Gumbel noise, so
#   map(d_in) = d_in / scale  and  P(i) = exp(epsilon * c_i) / sum_j exp(epsilon * c_j).
# Without monotonic=True, map(d_in) would be 2 * d_in / scale.


def make_opendp_noisy_max(n_candidates, epsilon):
    """Build OpenDP's Gumbel report-noisy-max once and return a callable counts -> index.

    Privacy: counts move by at most 1, all in the same direction (monotonic
    L-infinity, d_in = 1). make_report_noisy_max_gumbel is used with the scale
    from binary_search_param (1/epsilon), and map(1) <= epsilon is checked.
    """
    space = (dp.vector_domain(dp.atom_domain(T=int), size=int(n_candidates)),
             dp.linf_distance(T=int, monotonic=True))

    def build(scale):
        return dp.m.make_report_noisy_max_gumbel(*space, scale=scale, optimize="max")

    scale = dp.binary_search_param(build, d_in=1, d_out=float(epsilon))
    meas = _verified(build(scale), float(epsilon))

    def draw(counts):
        return int(meas(_int_list(counts)))

    draw.measurement, draw.scale = meas, scale
    return draw


def opendp_noisy_max(counts, epsilon):
    """Return the index that OpenDP's Gumbel report-noisy-max picks from counts.

    Privacy: epsilon-DP, as in make_opendp_noisy_max. The mechanism is rebuilt on every call.
    """
    return make_opendp_noisy_max(len(counts), epsilon)(counts)


def _int_list(counts):
    """Turn counts into a list of Python ints, and refuse values that are not integers."""
    arr = np.asarray(counts)
    ints = arr.astype(np.int64)
    if not np.array_equal(ints, arr):
        raise ValueError("counts must be integers")
    return ints.tolist()


# --------------------------------------------------------------------------
# diffprivlib (0.6.6)
# --------------------------------------------------------------------------
#
# tools/quantiles.py (0.6.6), quantile(), lines 126-141:
#   array = clip_to_bounds(np.ravel(array), bounds); k = array.size
#   array = np.append(array, list(bounds)); array.sort()
#   mech = Exponential(epsilon=epsilon, sensitivity=1,
#                      utility=list(-np.abs(np.arange(0, k + 1) - quant * k)),
#                      measure=list(interval_sizes), ...)
#   output = random_state.random() * (array[idx+1] - array[idx]) + array[idx]
# This is Smith's interval exponential mechanism. Its sensitivity is 1 and it is
# non-monotonic, so mechanisms/exponential.py line 131 gives
#   scale = epsilon / sensitivity / (2 - monotonic) = epsilon / 2,
# and interval i is drawn with probability proportional to
# length_i * exp(-epsilon * |i - alpha*n| / 2). The value is uniform inside the
# interval, so it is continuous and does not lie on our grid. OpenDP uses
# exp(-epsilon * u / (2 * max(a, 1-a))), so diffprivlib is max(a, 1-a) times
# as sharp: half as sharp at the median, and the same as a approaches 0 or 1.


def diffprivlib_quantile(values, alpha, lo, hi, epsilon):
    """Return diffprivlib's private alpha-quantile of values clipped to [lo, hi] (a float).

    Privacy: epsilon-DP. Exponential mechanism over the intervals between sorted
    values, utility -|i - alpha*n|, sensitivity 1, exp(epsilon*u/2).
    A fresh BudgetAccountant keeps repeated calls from piling up in the global default.
    """
    return float(_dpl_quantile(np.asarray(values, dtype=float), quant=alpha, epsilon=epsilon,
                               bounds=(lo, hi), accountant=BudgetAccountant()))


# mechanisms/exponential.py (0.6.6), Exponential._find_probabilities, lines 131 and 139:
#   scale = epsilon / sensitivity / (2 - monotonic)
#   probabilities = np.exp(scale * utility)
# monotonic defaults to False, so P(i) is proportional to exp(epsilon * c_i / 2) with
# sensitivity 1. Passing monotonic=True would give the tight exp(epsilon * c_i).
# We keep the default, since that is the documented call a user would write.


def diffprivlib_exponential(counts, epsilon):
    """Return the index that diffprivlib's Exponential mechanism picks, with counts as utility.

    Privacy: epsilon-DP with sensitivity 1 and the default monotonic=False, so
    P(i) is proportional to exp(epsilon * c_i / 2).
    """
    mech = Exponential(epsilon=epsilon, sensitivity=1, utility=[float(c) for c in counts],
                       candidates=list(range(len(counts))))
    return int(mech.randomise())
