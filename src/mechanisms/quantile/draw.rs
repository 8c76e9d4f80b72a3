//! Draws from the counts: the runs of equal utility and the exponential mechanism over
//! them, for one quantile and for several (recursive splitting).

use super::counts::GridCounts;
use super::grid::Place;
use crate::mechanisms::gumbel::{lazy_gumbel_max, streamed_lazy_gumbel_max, CONTENDING};
use allocator_api2::alloc::Allocator;
use rand::{Rng, RngCore};

/// The temperature of the quantile utility: its range 2·max(α, 1−α) over ε.
pub fn temperature(alpha: f64, epsilon: f64) -> f64 {
    2.0 * alpha.max(1.0 - alpha) / epsilon
}

/// A run of grid points [first, last] that share one utility.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Run {
    pub first: u32,
    pub last: u32,
    pub utility: f64,
    /// Whether (1−α)·#{x < c} − α·#{x > c} ≥ 0 here. That difference never decreases
    /// along the grid (nor does its rounding: each operation rounds monotonically), so
    /// from the first run past it the utility −|difference| never increases.
    pub(super) past_crossing: bool,
}

impl Run {
    pub(super) fn length(&self) -> u32 {
        self.last - self.first + 1
    }

    /// ln(length): the log-weight of the run as one candidate, beyond its utility.
    pub(super) fn log_length(&self) -> f64 {
        match self.length() {
            1 => 0.0,
            length => (length as f64).ln(),
        }
    }

    /// ln 2·⌈log₂ length⌉ ≥ ln(length), without a logarithm.
    pub(super) fn log_length_bound(&self) -> f64 {
        let bits = u32::BITS - (self.length() - 1).leading_zeros();
        bits as f64 * std::f64::consts::LN_2
    }
}

/// The runs of equal utility over the whole grid 0..=K, given the occupied places by
/// half cell ([`Place::half_cell`]) and their total. A stream, so that a dense histogram
/// never becomes a list of runs.
pub fn runs(
    occupied: impl Iterator<Item = (u64, u64)>,
    total: u64,
    grid_size: u32,
    alpha: f64,
) -> impl Iterator<Item = Run> {
    runs_between(occupied, total, 0, grid_size, alpha)
}

/// The runs of equal utility over the grid points first..=last, given the occupied
/// places in that range (by half cell) and their total: before each occupied place, the
/// points not yet covered, which see it above them; a point with values at it, alone; and
/// the points after the last place. #{x < c} counts the places before c's own half cell,
/// #{x > c} those after it.
pub fn runs_between(
    occupied: impl Iterator<Item = (u64, u64)>,
    total: u64,
    first: u32,
    last: u32,
    alpha: f64,
) -> impl Iterator<Item = Run> {
    runs_from(occupied, total, first, 0, last, alpha)
}

/// [`runs_between`] from a later place on: `next` is the first grid point no run covers
/// yet, `below` the values before the first place given.
fn runs_from(
    occupied: impl Iterator<Item = (u64, u64)>,
    total: u64,
    next: u32,
    below: u64,
    last: u32,
    alpha: f64,
) -> impl Iterator<Item = Run> {
    let run = move |first: u32, last: u32, below: u64, above: u64| Run {
        first,
        last,
        ..difference_run(difference(alpha, below, above))
    };
    let (mut next, mut below) = (next, below);
    let mut occupied = occupied.map(Some).chain(std::iter::once(None));
    let mut point_run: Option<Run> = None;
    std::iter::from_fn(move || loop {
        if let Some(run) = point_run.take() {
            return Some(run);
        }
        match occupied.next()? {
            Some((half_cell, count)) => {
                let place = Place::of_half_cell(half_cell);
                // The points before the place that no run covers yet: up to j − 1 for a
                // value at j, up to j for a value between j and j + 1.
                let (gap_end, point) = match place {
                    Place::At(j) => (j, j),
                    Place::Between(j) => (j + 1, j),
                };
                debug_assert_eq!(point, place.point_at_or_below());
                let gap = (gap_end > next).then(|| run(next, gap_end - 1, below, total - below));
                if let Place::At(j) = place {
                    point_run = Some(run(j, j, below, total - below - count));
                }
                below += count;
                next = next.max(point + 1);
                if gap.is_some() {
                    return gap;
                }
            }
            None => {
                return (next <= last).then(|| {
                    let after = run(next, last, below, 0);
                    next = last + 1;
                    after
                });
            }
        }
    })
}

/// (1−α)·#{x < c} − α·#{x > c} for a run with `below` values before it and `above`
/// after. Counts convert through i64 (one instruction; u64 takes a dozen), the same value
/// for any count below 2^63. Each operation rounds monotonically, so the result never
/// decreases as `below` grows and `above` shrinks.
#[inline]
fn difference(alpha: f64, below: u64, above: u64) -> f64 {
    (1.0 - alpha) * below as i64 as f64 - alpha * above as i64 as f64
}

/// The utility −|difference| of a run, and which side of the crossing it lies on (its
/// grid points to be filled in).
#[inline]
fn difference_run(difference: f64) -> Run {
    Run {
        first: 0,
        last: 0,
        utility: -difference.abs(),
        past_crossing: difference >= 0.0,
    }
}

/// Samples a grid index j with probability ∝ exp(u(c_j) / temperature): Gumbel-max over
/// the runs with log-weight ln(length) + utility/temperature, then a uniform point of the
/// chosen run.
pub fn sample_quantile<A: Allocator + Clone, R: RngCore + ?Sized>(
    counts: &GridCounts<A>,
    alpha: f64,
    epsilon: f64,
    rng: &mut R,
) -> u32 {
    let (total, grid_size) = (counts.total(), counts.grid_size());
    // The draw reads the places twice: a sparse histogram's are listed once (both halves
    // sorted together), a dense one's streamed from its counters each time.
    match counts.sparse_occupied() {
        Some(occupied) => sample_listed(&occupied, total, 0, grid_size, alpha, epsilon, rng),
        None => sample_between(
            || counts.iter_occupied(),
            total,
            0,
            grid_size,
            alpha,
            epsilon,
            rng,
        ),
    }
}

/// Samples a grid index in first..=last for the α-quantile of the occupied places given
/// (all within that range, `total` values in all), at ε.
pub(super) fn sample_between<I: Iterator<Item = (u64, u64)>, R: RngCore + ?Sized>(
    occupied: impl Fn() -> I,
    total: u64,
    first: u32,
    last: u32,
    alpha: f64,
    epsilon: f64,
    rng: &mut R,
) -> u32 {
    let range = (first, last, MAX_LISTED);
    sample_listing_at_most(occupied, total, range, alpha, epsilon, rng)
}

/// [`sample_between`], listing at most `max_listed` contenders (`range`: first, last and
/// that bound).
pub(super) fn sample_listing_at_most<I: Iterator<Item = (u64, u64)>, R: RngCore + ?Sized>(
    occupied: impl Fn() -> I,
    total: u64,
    (first, last, max_listed): (u32, u32, usize),
    alpha: f64,
    epsilon: f64,
    rng: &mut R,
) -> u32 {
    let runs = || runs_between(occupied(), total, first, last, alpha);
    let top = top_utility(runs());
    let range = (first, last, max_listed);
    race(runs, 64, top, range, temperature(alpha, epsilon), rng)
}

/// The largest utility of the runs, read up to the crossing and one run past it:
/// utilities only rise before it and only fall after it (Run::past_crossing). For a
/// median, half the runs.
fn top_utility(runs: impl Iterator<Item = Run>) -> f64 {
    let mut top = f64::NEG_INFINITY;
    for run in runs {
        // Utilities are never NaN: a plain comparison, not f64::max's NaN handling.
        if run.utility > top {
            top = run.utility;
        } else if run.past_crossing {
            break;
        }
    }
    top
}

/// Gumbel-max over the runs `runs` streams (their largest utility `top`; about
/// `runs_expected` of them, to size the list), then a uniform point of the chosen run.
///
/// The log-weight of a run is w = ln(length) + u/T, shifted by the largest u/T (a lower
/// bound of the largest w, since ln(length) ≥ 0): the same argmax. ln(length) ≤
/// ln 2·⌈log₂ length⌉ bounds w, and a run whose bound falls more than CONTENDING below
/// top/T cannot win (gumbel.rs); past the crossing the stream stops once no later run can
/// contend (its length is at most the range's). The race keys only the contenders whose
/// noise could carry them past the leader (lazy_gumbel_max).
fn race<I: Iterator<Item = Run>, R: RngCore + ?Sized>(
    runs: impl Fn() -> I,
    runs_expected: usize,
    top: f64,
    (first, last, max_listed): (u32, u32, usize),
    temperature: f64,
    rng: &mut R,
) -> u32 {
    // (u − top)/T: 0 for the best run at any temperature (ε up to f64::MAX).
    let scaled = |run: &Run| (run.utility - top) / temperature;
    let longest = longest_bound(first, last);
    let contending = || {
        runs()
            .take_while(|run| !(run.past_crossing && scaled(run) + longest < -CONTENDING))
            .filter_map(|run| {
                let bound = scaled(&run) + run.log_length_bound();
                (bound >= -CONTENDING).then_some((run, bound))
            })
    };
    let exact = |run: &Run| scaled(run) + run.log_length();
    // Listed when they are few (the leader keyed first: fewest logarithms); streamed when
    // a tiny ε·n makes most of the grid contend, so that no list of millions is made.
    let mut listed = Vec::with_capacity(runs_expected.min(max_listed + 1));
    listed.extend(contending().take(max_listed + 1));
    let chosen = if listed.len() <= max_listed {
        lazy_gumbel_max(&listed, exact, rng).map(|winner| listed[winner].0)
    } else {
        drop(listed);
        streamed_lazy_gumbel_max(contending(), exact, rng)
    }
    .expect("the range has at least one point");
    rng.random_range(chosen.first..=chosen.last)
}

/// The bound of ln(length) of a run as long as the range first..=last.
fn longest_bound(first: u32, last: u32) -> f64 {
    let whole = Run {
        first,
        last,
        ..difference_run(0.0)
    };
    whole.log_length_bound()
}

/// [`sample_between`] over places listed in a slice: the same runs, top, contenders and
/// words of `rng` as [`sample_listing_at_most`] (so the same answer, a test checks it
/// draw by draw), but both passes start near the crossing, found by binary search,
/// rather than at the first place: O(log n + contenders) beyond the listing, where a
/// median of 1,000 values at ε = 1 read 1,000 runs (issue 22).
///
/// Why the runs skipped cannot matter: the difference of every run at a place before s is
/// at most d(s), the difference of the gap before place s (differences never decrease
/// along the grid, rounding included). Before the crossing a run's utility is its
/// difference, so a run skipped by the first pass is at most d(s₀), and one skipped by the
/// race has a bound at most scaled(d(s)) + ln-bound of the whole range, below
/// −CONTENDING, so the race would have dropped it too.
pub(super) fn sample_listed<R: RngCore + ?Sized>(
    occupied: &[(u64, u64)],
    total: u64,
    first: u32,
    last: u32,
    alpha: f64,
    epsilon: f64,
    rng: &mut R,
) -> u32 {
    // below[s]: the values at the places before s.
    let mut below = Vec::with_capacity(occupied.len() + 1);
    let mut sum = 0u64;
    below.push(0);
    for &(_, count) in occupied {
        sum += count;
        below.push(sum);
    }
    debug_assert_eq!(sum, total);
    let gap_difference = |s: usize| difference(alpha, below[s], total - below[s]);
    // The runs from place s on (s = occupied.len(): the points after the last place).
    let runs_at = |s: usize| {
        let next = match s {
            0 => first,
            _ => first.max(Place::of_half_cell(occupied[s - 1].0).point_at_or_below() + 1),
        };
        runs_from(
            occupied[s..].iter().copied(),
            total,
            next,
            below[s],
            last,
            alpha,
        )
    };
    // The first place whose gap lies past the crossing (the end: (1−α)·n ≥ 0).
    let crossing = partition_point(occupied.len() + 1, |s| gap_difference(s) < 0.0);
    let start = crossing.saturating_sub(2);
    let mut top = top_utility(runs_at(start));
    if start > 0 && top < gap_difference(start) {
        top = top_utility(runs_at(0)); // a skipped run might be the best: read them all
    }
    let temperature = temperature(alpha, epsilon);
    let longest = longest_bound(first, last);
    let cannot_contend = |s: usize| {
        let d = gap_difference(s);
        d < 0.0 && (d - top) / temperature + longest < -CONTENDING
    };
    let start = partition_point(crossing, cannot_contend).saturating_sub(1);
    let range = (first, last, MAX_LISTED);
    // Each place makes at most two runs, and the points after the last one a third.
    let runs_expected = 2 * (occupied.len() - start) + 1;
    race(
        || runs_at(start),
        runs_expected,
        top,
        range,
        temperature,
        rng,
    )
}

/// The first s in 0..n for which `holds` is false (n if none), `holds` being true and
/// then false along 0..n.
fn partition_point(n: usize, holds: impl Fn(usize) -> bool) -> usize {
    let (mut low, mut high) = (0, n);
    while low < high {
        let middle = low + (high - low) / 2;
        if holds(middle) {
            low = middle + 1;
        } else {
            high = middle;
        }
    }
    low
}

/// The most contenders a draw lists (128 KiB of them); beyond, it streams them.
pub(super) const MAX_LISTED: usize = 1 << 12;
