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
#[cfg(test)]
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
#[cfg(test)]
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
                // (Values after the places given, if any, are above these points.)
                return (next <= last).then(|| {
                    let after = run(next, last, below, total - below);
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
    if let Some(drawn) = sample_window(counts, alpha, epsilon, rng) {
        return drawn;
    }
    // The draw reads the places twice: a sparse histogram's are listed once (both halves
    // sorted together), a dense one's streamed from its counters each time, from a block
    // near the crossing.
    match counts.sparse_occupied() {
        Some(occupied) => sample_listed(&occupied, total, 0, grid_size, alpha, epsilon, rng),
        None => sample_dense(counts, alpha, epsilon, rng),
    }
}

/// Groups with fewer values list them all: a window saves little there.
const WINDOWED_FROM: u64 = 256;

/// Values of slack on each side of a window, beyond the reach of the runs that can
/// contend: for a top utility below 0 (values tied at the crossing's place). A window too
/// narrow for the draw is seen and not used (sample_from_crossing).
const WINDOW_SLACK: f64 = 16.0;

/// [`sample_quantile`] over the places near the crossing alone, for a sparse histogram
/// with many values and a narrow window: the same answer from the same words, as the
/// draws from the crossing ([`sample_from_crossing`]) read no run far from it. None, with
/// no word of `rng` used, when it does not apply or the window might miss a run the full
/// pass reads.
///
/// A run before the crossing whose difference d has (d − top)/T + ln-bound < −CONTENDING
/// cannot contend, and d = (1−α)·below − α·above = below − α·n: so the runs that can lie
/// within T·(CONTENDING + ln-bound) − top values of rank α·n. The top is not known before
/// the draw; the window allows WINDOW_SLACK values for it and is checked once it is.
fn sample_window<A: Allocator + Clone, R: RngCore + ?Sized>(
    counts: &GridCounts<A>,
    alpha: f64,
    epsilon: f64,
    rng: &mut R,
) -> Option<u32> {
    #[cfg(test)]
    WINDOWED.set(false);
    let (total, grid_size) = (counts.total(), counts.grid_size());
    let window = counts.sparse_window(window_ranks(total, grid_size, alpha, epsilon)?)?;
    let next = window.last_before.map_or(0, |half_cell| {
        Place::of_half_cell(half_cell).point_at_or_below() + 1
    });
    let listing = Listing {
        occupied: &window.occupied,
        before: window.before,
        after: window.after,
        next,
    };
    draw_listed(listing, total, (0, grid_size), alpha, epsilon, rng)
}

/// The ranks a window must hold for a draw of the α-quantile of `total` values on K =
/// `grid_size` at ε ([`sample_window`]); None when the window would not be narrow.
pub fn window_ranks(total: u64, grid_size: u32, alpha: f64, epsilon: f64) -> Option<(u64, u64)> {
    let temperature = temperature(alpha, epsilon);
    let reach = temperature * (CONTENDING + longest_bound(0, grid_size)) + WINDOW_SLACK;
    if total < WINDOWED_FROM || 4.0 * reach >= total as f64 {
        return None;
    }
    let crossing = alpha * total as f64;
    Some((
        (crossing - reach).max(0.0) as u64,
        ((crossing + reach).ceil() as u64).min(total),
    ))
}

#[cfg(test)]
thread_local! {
    /// Whether the last sample_quantile drew from a window: tests check that draws do.
    pub(super) static WINDOWED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The full pass: Gumbel-max over every run of first..=last, for the α-quantile of the
/// occupied places given (all within that range, `total` values in all), at ε, listing
/// at most `max_listed` contenders (`range`: first, last and that bound). The reference
/// the draws that start near the crossing are tested against, word for word.
#[cfg(test)]
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
    race(
        runs,
        STREAMED_RUNS_EXPECTED,
        top,
        range,
        temperature(alpha, epsilon),
        rng,
    )
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

/// Samples a grid index in first..=last for the α-quantile of the places listed (by half
/// cell, all within that range, `total` values in all), at ε: from the boundaries the
/// places are (see [`sample_from_crossing`]).
pub(super) fn sample_listed<R: RngCore + ?Sized>(
    occupied: &[(u64, u64)],
    total: u64,
    first: u32,
    last: u32,
    alpha: f64,
    epsilon: f64,
    rng: &mut R,
) -> u32 {
    let listing = Listing {
        occupied,
        before: 0,
        after: 0,
        next: first,
    };
    draw_listed(listing, total, (first, last), alpha, epsilon, rng).expect("every place is listed")
}

/// Places listed for a draw: all those of its range, or a window of them.
struct Listing<'a> {
    /// By half cell, with their counts.
    occupied: &'a [(u64, u64)],
    /// The values before the places listed, and after them.
    before: u64,
    after: u64,
    /// The first grid point after the places before the listed ones (the range's first
    /// point when there are none).
    next: u32,
}

/// [`sample_listed`] over a listing (a window when values lie before or after it), or
/// None, with no word of `rng` used, when a window might miss a run the full pass reads.
fn draw_listed<R: RngCore + ?Sized>(
    listing: Listing,
    total: u64,
    (first, last): (u32, u32),
    alpha: f64,
    epsilon: f64,
    rng: &mut R,
) -> Option<u32> {
    let Listing {
        occupied,
        before,
        after,
        next,
    } = listing;
    // below[s]: the values at the places before s.
    let counts = occupied.iter().map(|&(_, count)| count);
    let below = prefix_sums(counts, before, total - after);
    // The runs from place s on (s = occupied.len(): the points after the last place).
    let runs_at = |s: usize| {
        let next = match s {
            0 => next,
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
    let boundaries = Boundaries {
        count: occupied.len() + 1,
        below: |s: usize| below[s],
        runs_at,
        // Each place makes at most two runs, and the points after the last one a third.
        runs_expected: |s: usize| 2 * (occupied.len() - s) + 1,
    };
    let window = (before > 0, after > 0);
    sample_from_crossing(
        boundaries,
        total,
        (first, last),
        window,
        alpha,
        epsilon,
        rng,
    )
}

/// `start` and the sums of it and the first 1, 2, … of `counts` (the last one `total`).
fn prefix_sums(counts: impl ExactSizeIterator<Item = u64>, start: u64, total: u64) -> Vec<u64> {
    let mut sums = Vec::with_capacity(counts.len() + 1);
    sums.push(start);
    let mut sum = start;
    sums.extend(counts.map(|count| {
        sum += count;
        sum
    }));
    debug_assert_eq!(sum, total);
    sums
}

/// Grid points a block of [`sample_dense`] spans.
pub(super) const BLOCK: u32 = 1 << 12;

/// [`sample_quantile`] over counts with a dense histogram: the same answer as the full
/// pass over all their places, from the boundaries of blocks of BLOCK grid points (see
/// [`sample_from_crossing`]), found from the values each block holds: O(K) adds that
/// vectorize and O(BLOCK + contenders) places read, where the full pass read every place
/// up to the crossing, twice (9.7 ms for a median of 10^7 values on 2^20 points).
pub(super) fn sample_dense<A: Allocator + Clone, R: RngCore + ?Sized>(
    counts: &GridCounts<A>,
    alpha: f64,
    epsilon: f64,
    rng: &mut R,
) -> u32 {
    let (total, grid_size) = (counts.total(), counts.grid_size());
    let blocks = counts.block_counts(BLOCK);
    // below[b]: the values at the points before b·BLOCK (b = blocks.len(): all of them).
    let below = prefix_sums(blocks.iter().copied(), 0, total);
    // The runs from the block's first point on: the run that holds that point starts
    // there, shorter than in the full pass, which changes nothing (sample_from_crossing).
    let runs_at = |b: usize| {
        let point = b as u32 * BLOCK;
        let occupied = counts.iter_occupied_from(point);
        runs_from(occupied, total, point, below[b], grid_size, alpha)
    };
    let boundaries = Boundaries {
        count: blocks.len() + 1,
        below: |b: usize| below[b],
        runs_at,
        runs_expected: |_| STREAMED_RUNS_EXPECTED,
    };
    sample_from_crossing(
        boundaries,
        total,
        (0, grid_size),
        (false, false),
        alpha,
        epsilon,
        rng,
    )
    .expect("every block is read")
}

/// Where a draw may start reading the runs: boundary s in 0..count has `below(s)` values
/// before it (non-decreasing in s; boundary 0 is the range's first point, the last one
/// past its last place), and `runs_at(s)` streams the runs the full pass makes from
/// boundary s on (about `runs_expected(s)` of them), including one that holds it and
/// starts before it, which may start at the boundary instead.
struct Boundaries<B, S, E> {
    count: usize,
    below: B,
    runs_at: S,
    runs_expected: E,
}

/// Gumbel-max over the runs of the range first..=last: the same top, contenders and
/// words of `rng` as the full pass (`sample_listing_at_most`), so the same answer (tests
/// check it draw by draw), but both passes start at a boundary near the crossing, found
/// by binary search, rather than at the first point: a median of 1,000 listed values at
/// ε = 1 read 1,000 runs, and of 10^7 values on 2^20 points half a million (issue 22).
///
/// Why the runs skipped cannot matter: the difference of every run before boundary s is
/// at most d(s), the difference of a run with below(s) values before it and the rest
/// after (differences never decrease along the grid, rounding included). Before the
/// crossing a run's utility is its difference, so a run skipped by the first pass is at
/// most d(s₀), and one skipped by the race has a bound at most scaled(d(s)) + ln-bound of
/// the whole range, below −CONTENDING, so the race would have dropped it too. A run that
/// holds the boundary and starts before it (a gap, or the points after the last place)
/// has difference d(s) however long it is: the first pass reads only its utility, and
/// the race drops it likewise (its boundary cannot contend, or is the range's first
/// point); a value's own point is never cut short.
///
/// A window (`window`: values lie before its first boundary, after its last) gives the
/// same answer when both passes start within it and stop before its end. Before it: the
/// crossing is at least its third boundary (so the first pass starts past its first, as
/// the full pass starts past the range's first), that pass finds no skipped run better,
/// and its first boundary cannot contend. After it: its last boundary (its last place's
/// values below, the rest above) is past the crossing, below the top and cannot contend,
/// and so is every run the full pass reads after it (their differences are larger), so
/// both passes stop there or before (its tail run stands for them). Otherwise None,
/// before any word of `rng` is used.
fn sample_from_crossing<I, R>(
    boundaries: Boundaries<impl Fn(usize) -> u64, impl Fn(usize) -> I, impl Fn(usize) -> usize>,
    total: u64,
    (first, last): (u32, u32),
    (cut_before, cut_after): (bool, bool),
    alpha: f64,
    epsilon: f64,
    rng: &mut R,
) -> Option<u32>
where
    I: Iterator<Item = Run>,
    R: RngCore + ?Sized,
{
    let Boundaries {
        count,
        below,
        runs_at,
        runs_expected,
    } = boundaries;
    let gap_difference = |s: usize| difference(alpha, below(s), total - below(s));
    // The first boundary past the crossing (the last: (1−α)·n ≥ 0).
    let crossing = partition_point(count, |s| gap_difference(s) < 0.0);
    if (cut_before && crossing < 3) || (cut_after && crossing == count) {
        return None;
    }
    let start = crossing.saturating_sub(2);
    let mut top = top_utility(runs_at(start));
    if start > 0 && top < gap_difference(start) {
        if cut_before {
            return None;
        }
        top = top_utility(runs_at(0)); // a skipped run might be the best: read them all
    }
    let temperature = temperature(alpha, epsilon);
    let longest = longest_bound(first, last);
    let cannot_contend = |s: usize| {
        let d = gap_difference(s);
        d < 0.0 && (d - top) / temperature + longest < -CONTENDING
    };
    if cut_before && !cannot_contend(0) {
        return None;
    }
    if cut_after {
        let utility = -gap_difference(count - 1);
        if !(utility < top && (utility - top) / temperature + longest < -CONTENDING) {
            return None;
        }
    }
    #[cfg(test)]
    WINDOWED.set(cut_before || cut_after);
    let start = partition_point(crossing, cannot_contend).saturating_sub(1);
    #[cfg(test)]
    RACE_START.set(start);
    let range = (first, last, MAX_LISTED);
    Some(race(
        || runs_at(start),
        runs_expected(start),
        top,
        range,
        temperature,
        rng,
    ))
}

#[cfg(test)]
thread_local! {
    /// The boundary the last draw's race started at: tests check that draws skip.
    pub(super) static RACE_START: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
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

/// The contenders a draw over streamed places first makes room for: a guess (the list
/// grows when more contend), where listed places say how many runs there can be.
const STREAMED_RUNS_EXPECTED: usize = 64;

/// The most contenders a draw lists (128 KiB of them); beyond, it streams them.
pub(super) const MAX_LISTED: usize = 1 << 12;
