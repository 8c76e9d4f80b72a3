use super::cells::*;
use super::counts::*;
use super::draw::*;
use super::*;
use crate::testing::{
    assert_matches_distribution, normalise_log_weights, quantile_distribution as exact,
};
use allocator_api2::alloc::Global;
use allocator_api2::vec::Vec as AllocVec;
use rand::Rng;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

pub(super) const DRAWS: usize = 1_000_000;

/// Counts of values at the places given by half cell ([`Place::half_cell`]).
pub(super) fn counts_of(half_cells: &[u64], grid_size: u32) -> GridCounts {
    let mut counts = GridCounts::new(grid_size);
    for &half_cell in half_cells {
        counts.add(Place::of_half_cell(half_cell));
    }
    counts
}

fn check(cells: &[u64], grid_size: u32, alpha: f64, epsilon: f64, seed: u64) {
    check_with(cells, grid_size, alpha, epsilon, seed, |histogram, rng| {
        sample_quantile(histogram, alpha, epsilon, rng)
    });
}

/// [`check`] of a given sampler.
fn check_with(
    cells: &[u64],
    grid_size: u32,
    alpha: f64,
    epsilon: f64,
    seed: u64,
    sample: impl Fn(&GridCounts, &mut ChaCha20Rng) -> u32,
) {
    let histogram = counts_of(cells, grid_size);
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let mut counts = vec![0u64; grid_size as usize + 1];
    for _ in 0..DRAWS {
        counts[sample(&histogram, &mut rng) as usize] += 1;
    }
    let t = temperature(alpha, epsilon);
    let right = exact(cells, grid_size, alpha, t, true);
    assert_matches_distribution(
        &counts,
        &right,
        &exact(cells, grid_size, alpha, 2.0 * t, true),
    );
    assert_matches_distribution(&counts, &right, &exact(cells, grid_size, alpha, t, false));
}

/// Values on grid points (so #{x < c} and #{x ≤ c} differ) and between them, with
/// gaps and ties, on a coarse grid of 21 points, by half cell: 2j at point j, 2j + 1
/// between j and j + 1.
pub(super) const DATA: [u64; 10] = [4, 4, 5, 5, 10, 19, 26, 26, 27, 40];

#[test]
fn median_matches_the_exact_distribution() {
    check(&DATA, 20, 0.5, 1.0, 21);
}

#[test]
fn streamed_contenders_match_the_exact_distribution() {
    // Listing none: every draw streams its contenders, as when a tiny ε·n makes more
    // than MAX_LISTED runs contend.
    for (alpha, seed) in [(0.5, 24), (0.1, 25)] {
        check_with(&DATA, 20, alpha, 1.0, seed, |histogram, rng| {
            let range = (0, 20, 0);
            let total = histogram.total();
            let places = || histogram.iter_occupied();
            sample_listing_at_most(places, total, range, alpha, 1.0, rng)
        });
    }
}

#[test]
fn the_largest_epsilon_still_draws() {
    // 1/ε is subnormal: the best run must still weigh e^0, never 0·∞.
    let mut rng = ChaCha20Rng::seed_from_u64(26);
    assert!(sample_quantile(&GridCounts::new(10), 0.5, f64::MAX, &mut rng) <= 10);
    // Points 6 to 9 have 5 values below and 5 above (utility 0); any other loses.
    for _ in 0..100 {
        let median = sample_quantile(&counts_of(&DATA, 20), 0.5, f64::MAX, &mut rng);
        assert!((6..=9).contains(&median), "{median}");
    }
    let quartiles =
        sample_quantiles_recursive(&counts_of(&DATA, 20), &[0.25, 0.75], f64::MAX, &mut rng);
    assert_eq!(quartiles.len(), 2);
}

#[test]
fn low_quantile_matches_the_exact_distribution() {
    check(&DATA, 20, 0.1, 2.0, 22);
}

#[test]
fn high_quantile_matches_the_exact_distribution() {
    check(&DATA, 20, 0.9, 2.0, 23);
}

#[test]
fn empty_input_is_uniform_over_the_grid() {
    let mut rng = ChaCha20Rng::seed_from_u64(24);
    let mut counts = vec![0u64; 11];
    let empty = GridCounts::new(10);
    for _ in 0..100_000 {
        counts[sample_quantile(&empty, 0.5, 1.0, &mut rng) as usize] += 1;
    }
    let uniform = vec![1.0 / 11.0; 11];
    let mut skewed: Vec<f64> = vec![0.0; 11];
    skewed[0] = std::f64::consts::LN_2;
    let skewed = normalise_log_weights(&skewed);
    assert_matches_distribution(&counts, &uniform, &skewed);
}

#[test]
fn runs_cover_the_grid_once() {
    let histogram = counts_of(&DATA, 20);
    let runs: Vec<Run> = runs(histogram.iter_occupied(), histogram.total(), 20, 0.5).collect();
    assert_eq!(runs.first().unwrap().first, 0);
    assert_eq!(runs.last().unwrap().last, 20);
    for pair in runs.windows(2) {
        assert_eq!(pair[0].last + 1, pair[1].first);
    }
    // An occupied last cell leaves no gap after it.
    assert_eq!(runs.iter().filter(|r| r.first == 20).count(), 1);
}

#[test]
fn values_are_located_at_grid_points_or_strictly_between_and_clamped() {
    let grid = Grid {
        lo: 0.0,
        hi: 10.0,
        size: 10,
    };
    assert_eq!(grid.locate(3.0), Place::At(3));
    assert_eq!(grid.locate(3.4), Place::Between(3));
    assert_eq!(grid.locate(3.9999), Place::Between(3));
    assert_eq!(grid.locate(-5.0), Place::At(0));
    assert_eq!(grid.locate(f64::INFINITY), Place::At(10));
    assert_eq!(grid.locate(f64::NEG_INFINITY), Place::At(0));
    assert_eq!(grid.locate(9.5), Place::Between(9));
    assert_eq!(grid.point(0), 0.0);
    assert_eq!(grid.point(10), 10.0);
    assert_eq!(grid.point(7), 7.0);
    let whole = Grid {
        lo: 0.0,
        hi: 100.0,
        size: 100,
    };
    assert!((0..=100).all(|j| whole.point(j) == j as f64));
    let huge = Grid {
        lo: -8e307,
        hi: 9e307,
        size: DEFAULT_GRID_SIZE,
    };
    assert!((0..=DEFAULT_GRID_SIZE)
        .step_by(4099)
        .all(|j| huge.point(j).is_finite()));
    // On an irregular grid every point is located at itself and the values just
    // beside it between it and its neighbour, whatever the rounding of the guess.
    for grid in [
        Grid {
            lo: -1e6,
            hi: 1e6,
            size: DEFAULT_GRID_SIZE,
        },
        Grid {
            lo: 0.1,
            hi: 0.7,
            size: 3 * 7 * 11 * 13,
        },
        // Points closer than the precision of the values: found by binary search.
        Grid {
            lo: 1e15,
            hi: 1e15 + 1.0,
            size: DEFAULT_GRID_SIZE,
        },
        // lo + step·K rounds below hi here.
        Grid {
            lo: 0.2,
            hi: 0.9,
            size: DEFAULT_GRID_SIZE,
        },
    ] {
        let locator = grid.locator();
        for j in (0..=grid.size).step_by(97).chain([grid.size]) {
            let point = grid.point(j);
            let Place::At(at) = locator.locate(point) else {
                panic!("{grid:?}: point {j} is not at a point");
            };
            assert_eq!(grid.point(at), point, "{grid:?}: {j}");
            if j < grid.size && grid.point(j + 1) > point.next_up() {
                assert_eq!(locator.locate(point.next_up()), Place::Between(at));
            }
        }
    }
}

/// Where lo + step·K rounds below hi, hi is still the last grid point: values at or
/// beyond it are counted there, also once the histograms are dense and after they
/// travel as bytes (a place beyond the last cell would index out of the counters).
#[test]
fn the_last_grid_point_is_hi_exactly() {
    let grid = Grid {
        lo: 0.2,
        hi: 0.9,
        size: DEFAULT_GRID_SIZE,
    };
    let size = f64::from(DEFAULT_GRID_SIZE);
    assert!(0.2 + ((0.9 - 0.2) / size) * size < 0.9);
    assert_eq!(grid.point(DEFAULT_GRID_SIZE), 0.9);
    assert_eq!(grid.locate(0.9), Place::At(DEFAULT_GRID_SIZE));
    assert_eq!(grid.locate(5.0), Place::At(DEFAULT_GRID_SIZE));
    assert_eq!(
        grid.locate(0.9f64.next_down()),
        Place::Between(DEFAULT_GRID_SIZE - 1)
    );
    let locator = grid.locator();
    let mut counts = GridCounts::new(grid.size);
    for i in 0..200_000u32 {
        counts.add(locator.locate(0.2 + 0.7 * (i as f64 + 0.5) / 200_000.0));
    }
    counts.add(locator.locate(7.0));
    assert!(matches!(counts.between.cells, Cells::Dense(_)));
    let copy = GridCounts::from_bytes(grid.size, &counts.to_bytes(), Global);
    assert_eq!(copy.occupied(), counts.occupied());
    assert_eq!(copy.total(), 200_001);
    let last = *copy.occupied().last().unwrap();
    assert_eq!(last, (Place::At(DEFAULT_GRID_SIZE).half_cell(), 1));
}

#[test]
fn integer_grids_are_whole_numbers_located_exactly() {
    let ages = IntegerGrid::new(0, 100, DEFAULT_GRID_SIZE);
    assert_eq!((ages.step, ages.size), (1, 100));
    assert_eq!(ages.locate(37), Place::At(37));
    assert_eq!(ages.locate(-3), Place::At(0));
    assert_eq!(ages.locate(250), Place::At(100));
    assert_eq!(ages.point(37), 37);
    // A range wider than the grid: the smallest step that fits, a shorter last step.
    let wide = IntegerGrid::new(-10, 95, 10);
    assert_eq!((wide.step, wide.size), (11, 10));
    assert_eq!(wide.point(9), 89);
    assert_eq!(wide.point(10), 95);
    assert_eq!(wide.locate(89), Place::At(9));
    assert_eq!(wide.locate(90), Place::Between(9));
    assert_eq!(wide.locate(95), Place::At(10));
    assert_eq!(wide.locate(2), Place::Between(1));
    assert_eq!(wide.locate(1), Place::At(1));
    let everything = IntegerGrid::new(i64::MIN, i64::MAX, DEFAULT_GRID_SIZE);
    assert_eq!(everything.size, DEFAULT_GRID_SIZE);
    assert_eq!(everything.locate(i64::MIN), Place::At(0));
    assert_eq!(everything.locate(i64::MAX), Place::At(DEFAULT_GRID_SIZE));
    assert_eq!(everything.point(DEFAULT_GRID_SIZE), i64::MAX);
    assert_eq!(
        everything.locate(everything.point(12_345)),
        Place::At(12_345)
    );
    assert_eq!(
        everything.locate(everything.point(12_345) + 1),
        Place::Between(12_345)
    );
}

/// The utility of every grid point, from the places the values were counted at,
/// equals the utility from the raw values themselves (OpenDP's counting), on a
/// coarse grid where values fall on points, between them and outside [lo, hi].
#[test]
fn utilities_from_places_equal_those_from_raw_values() {
    for (lo, hi) in [(0.0, 1.0), (0.2, 0.9), (-3.3, 9.9)] {
        utilities_match_raw_values(Grid { lo, hi, size: 10 });
    }
}

fn utilities_match_raw_values(grid: Grid) {
    let (lo, hi) = (grid.lo, grid.hi);
    let mut rng = ChaCha20Rng::seed_from_u64(30);
    let width = hi - lo;
    let mut values: Vec<f64> = (0..200)
        .map(|_| rng.random_range(lo - 0.2 * width..hi + 0.2 * width))
        .collect();
    values.extend((0..=10).map(|j| grid.point(j)));
    values.extend([grid.point(3), grid.point(3), hi, lo]);
    let mut counts = GridCounts::new(grid.size);
    values.iter().for_each(|&v| counts.add(grid.locate(v)));
    for alpha in [0.1, 0.5, 0.9] {
        let runs: Vec<Run> = runs(counts.iter_occupied(), counts.total(), 10, alpha).collect();
        for j in 0..=10 {
            let c = grid.point(j);
            let clamped = values.iter().map(|v| v.clamp(lo, hi));
            let below = clamped.clone().filter(|&x| x < c).count() as f64;
            let above = clamped.filter(|&x| x > c).count() as f64;
            let raw = -((1.0 - alpha) * below - alpha * above).abs();
            let run = runs.iter().find(|r| r.first <= j && j <= r.last).unwrap();
            assert!(
                (run.utility - raw).abs() < 1e-9,
                "{grid:?} alpha {alpha}, point {j}"
            );
        }
    }
}

#[test]
fn the_histogram_goes_dense_and_stays_exact() {
    let grid_size = 1000;
    let mut sparse = Histogram::new(grid_size);
    let mut dense = Histogram::new(grid_size);
    for cell in (0..=grid_size).step_by(20) {
        sparse.add(cell);
    }
    for cell in 0..=grid_size {
        dense.add(cell);
        dense.add(cell);
    }
    assert!(matches!(sparse.cells, Cells::Sparse(_)));
    assert!(matches!(dense.cells, Cells::Dense(_)));
    assert!(dense.allocated_bytes() <= grid_size as usize + 1 + 64);
    dense.merge(&sparse);
    let occupied = dense.occupied();
    assert_eq!(occupied.len(), grid_size as usize + 1);
    assert_eq!(occupied[20], (20, 3));
    assert_eq!(occupied[21], (21, 2));
    assert_eq!(dense.total(), 2 * 1001 + 51);
}

/// The shortcut of Locator::locate (a value well inside a cell) gives the place the
/// comparisons with the grid points give, on grids whose points round (a step that is
/// not a binary fraction, points far from zero, points closer than the precision of
/// the values), for values drawn near points, near cell middles and anywhere.
#[test]
fn locating_by_the_offset_agrees_with_the_grid_points() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(7);
    let grids = [
        (0.0, 1e6, 1 << 20),
        (0.2, 0.9, 1 << 20),
        (-1e15, 1e15, 1 << 24),
        (1e15, 1e15 + 1.0, 1 << 20),
        (0.0, 100.0, 100),
        (-3.0, 7.0, 1),
        (0.1, 0.3, 3),
        // Points closer than the values' precision, at a step that is no power of two.
        (1e15, 1e15 + 1000.0, 1 << 20),
        (-7e14, -7e14 + 3.0, 12_345),
    ];
    for (lo, hi, size) in grids {
        let grid = Grid { lo, hi, size };
        let locator = grid.locator();
        // The shorter path answers only as the full rule does, and not at all where
        // the rounding of the points leaves no cell a margin (slack 0.5).
        let shorter = |value: f64| {
            let place = locator.well_inside(value);
            if let Some(place) = place {
                assert_eq!(place, locator.locate_fully(value), "{value}");
            }
            place
        };
        // The place by comparisons only: the last point at or below the value.
        let compared = |value: f64| {
            let value = value.clamp(lo, hi);
            let (mut low, mut high) = (0u32, size);
            while low < high {
                let middle = low + (high - low).div_ceil(2);
                if grid.point(middle) <= value {
                    low = middle;
                } else {
                    high = middle - 1;
                }
            }
            if grid.point(low) == value {
                Place::At(low)
            } else {
                Place::Between(low)
            }
        };
        // Values whose offset does not fit an integer clamp as the rule says.
        for value in [
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MAX,
            f64::MIN,
            1e300,
            -1e300,
        ] {
            assert_eq!(locator.locate(value), compared(value), "{value}");
        }
        for _ in 0..200_000 {
            let j = rng.random_range(0..=size);
            let point = grid.point(j);
            let value = match rng.random_range(0..4) {
                0 => point,
                1 => f64::from_bits(
                    point
                        .to_bits()
                        .wrapping_add(rng.random_range(0..4))
                        .wrapping_sub(2),
                ),
                2 => point + (hi - lo) / size as f64 * rng.random::<f64>(),
                _ => lo - 1.0 + (hi - lo + 2.0) * rng.random::<f64>(),
            };
            if value.is_nan() {
                continue; // (the bits below 0.0's); NaN is skipped before locating
            }
            assert_eq!(
                locator.locate(value),
                compared(value),
                "{value} on ({lo}, {hi}, {size})"
            );
            if shorter(value).is_some() {
                assert!(locator.slack < 0.5, "a shortcut at slack 0.5: {value}");
            }
        }
    }
}

#[test]
fn sparse_cells_count_exactly_in_little_memory() {
    // 10,000 values over 40 cells, in an order that forces several compactions.
    let mut histogram = Histogram::new(DEFAULT_GRID_SIZE);
    let mut expected = std::collections::BTreeMap::new();
    for i in 0..10_000u32 {
        let cell = (i * 7919) % 40 * 1000;
        histogram.add(cell);
        *expected.entry(cell).or_insert(0u64) += 1;
    }
    let expected: Vec<(u32, u64)> = expected.into_iter().collect();
    assert_eq!(histogram.occupied(), expected);
    assert_eq!(histogram.total(), 10_000);
    assert!(matches!(histogram.cells, Cells::Sparse(_)));
    assert!(
        histogram.allocated_bytes() <= 40 * 8 + 1024 * 4,
        "{}",
        histogram.allocated_bytes()
    );
    // Merging sparse histograms adds them up.
    let mut other = Histogram::new(DEFAULT_GRID_SIZE);
    other.add(5);
    other.add(0);
    histogram.merge(&other);
    assert_eq!(histogram.occupied()[0], (0, expected[0].1 + 1));
    assert_eq!(histogram.occupied()[1], (5, 1));
    assert_eq!(histogram.total(), 10_002);
}

/// The listing a draw takes from sparse histograms (pending and sorted cells of both,
/// sorted together) is the merged stream of occupied places: with only pending cells (the
/// fast path), with one histogram's cells merged and the other's not, and with both.
#[test]
fn the_sparse_listing_is_the_occupied_places() {
    let mut rng = ChaCha20Rng::seed_from_u64(42);
    for (n, at_share) in [
        (0, 0.5),
        (1, 0.5),
        (200, 0.5),
        (1_500, 0.0),
        (1_500, 1.0),
        (5_000, 0.5),
    ] {
        let cells: Vec<u64> = (0..n)
            .map(|_| {
                let j = rng.random_range(0..3_000u64);
                if rng.random::<f64>() < at_share {
                    2 * j
                } else {
                    2 * j + 1
                }
            })
            .collect();
        let counts = counts_of(&cells, DEFAULT_GRID_SIZE);
        let listed = counts
            .sparse_occupied()
            .expect("3,000 cells of 2^20 are sparse");
        assert_eq!(listed, counts.occupied(), "{n} values");
        assert_eq!(listed.iter().map(|&(_, c)| c).sum::<u64>(), n);
    }
}

#[test]
fn dense_counters_carry_every_256() {
    let mut histogram = Histogram::new(100);
    for cell in 0..=100 {
        histogram.add(cell); // dense beyond a sixteenth of the grid
    }
    for _ in 0..1000 {
        histogram.add(7);
    }
    histogram.add_counts(&[(7, 300), (9, 256), (100, 1)]);
    let occupied = histogram.occupied();
    assert_eq!(occupied[7], (7, 1301));
    assert_eq!(occupied[9], (9, 257));
    assert_eq!(occupied[100], (100, 2));
    assert_eq!(histogram.total(), 101 + 1000 + 557);
    assert_eq!(
        occupied.iter().map(|&(_, n)| n).sum::<u64>(),
        histogram.total()
    );
}

#[test]
fn dense_counters_count_exactly() {
    // Many values, spread and repeated, against a plain count (a grid of 2^18 goes
    // dense at 2^14 occupied cells).
    let grid_size = 1 << 18;
    let mut histogram = Histogram::new(grid_size);
    let mut expected = vec![0u64; grid_size as usize + 1];
    for i in 0..(3 * (1u64 << 14) + 12_345) {
        let cell = ((i * 2_654_435_761) % (grid_size as u64 + 1)) as u32 % 70_001;
        histogram.add(cell);
        expected[cell as usize] += 1;
    }
    assert!(matches!(histogram.cells, Cells::Dense(_)));
    let expected: Vec<(u32, u64)> = expected
        .iter()
        .enumerate()
        .filter(|&(_, &n)| n > 0)
        .map(|(c, &n)| (c as u32, n))
        .collect();
    assert_eq!(histogram.occupied(), expected);
    let mut cells = AllocVec::new_in(Global);
    cells.extend([70_000u32, 3, 65_536, 255, 256, 3, 0]);
    let mut scratch = AllocVec::new_in(Global);
    radix_sort(&mut cells, &mut scratch, 17);
    assert_eq!(cells.as_slice(), [0, 3, 3, 255, 256, 65_536, 70_000]);
}

#[test]
fn histograms_travel_as_bytes_and_merge() {
    let grid_size = 1 << 12;
    let fill = |range: std::ops::Range<u32>, step: u32| {
        let mut histogram = Histogram::new(grid_size);
        for i in range.step_by(step as usize) {
            histogram.add((i * 7) % (grid_size + 1));
        }
        histogram
    };
    let sparse = fill(0..300, 3);
    let dense = fill(0..(3 * (1 << 14) + 700), 1);
    let also_dense = fill(1000..60_000, 1);
    assert!(matches!(dense.cells, Cells::Dense(_)) && matches!(sparse.cells, Cells::Sparse(_)));
    for histogram in [&sparse, &dense] {
        let copy = Histogram::from_bytes(grid_size, &histogram.to_bytes(), Global);
        assert_eq!(copy.occupied(), histogram.occupied());
        assert_eq!(copy.total(), histogram.total());
    }
    // Pending cells travel last, after their number, and are counted when read.
    let Cells::Dense(cells) = &dense.cells else {
        unreachable!("dense");
    };
    let pending = cells.pending().len();
    assert_eq!(pending, DELAY);
    let mut bytes = dense.to_bytes();
    let at = bytes.len() - 4 * pending - 4;
    bytes[at..at + 4].copy_from_slice(&(pending as u32 + 2).to_le_bytes());
    for cell in [5u32, 5] {
        bytes.extend_from_slice(&cell.to_le_bytes());
    }
    let mut with_pending = dense.clone();
    with_pending.add(5);
    with_pending.add(5);
    let copy = Histogram::from_bytes(grid_size, &bytes, Global);
    assert_eq!(copy.occupied(), with_pending.occupied());
    assert_eq!(copy.total(), dense.total() + 2);
    // Merging, whatever the forms, equals adding the occupied lists.
    let expected = |a: &Histogram, b: &Histogram| {
        let mut plain = Histogram::new(grid_size);
        plain.add_counts(&a.occupied());
        plain.add_counts(&b.occupied());
        plain.occupied()
    };
    // Sparse ones with sorted counts and pending cells (2,000 values: merged once), one
    // with pending cells only, and ones whose pending cells together pass the merge
    // threshold, or pass a sixteenth of the grid (the merge goes dense).
    // (A sparse histogram holds at most 256 sorted cells on this grid.)
    let repeating = |values: u32, distinct: u32, first: u32| {
        let mut histogram = Histogram::new(grid_size);
        (0..values).for_each(|i| histogram.add(first + i % distinct));
        histogram
    };
    let sorted_and_pending = repeating(1500, 200, 0);
    let Cells::Sparse(cells) = &sorted_and_pending.cells else {
        unreachable!("sparse");
    };
    assert_eq!((cells.sorted.len(), cells.pending.len()), (200, 476));
    let pending_only = repeating(900, 150, 1000);
    let many = repeating(800, 100, 2000);
    let overlapping = repeating(1500, 100, 50);
    let pairs = [
        (&dense, &also_dense),
        (&sparse, &dense),
        (&dense, &sparse),
        (&sparse, &sorted_and_pending),
        (&sorted_and_pending, &sparse),
        (&pending_only, &pending_only),
        (&sorted_and_pending, &many),
        (&sorted_and_pending, &overlapping),
    ];
    for (a, b) in pairs {
        let mut merged = a.clone();
        merged.merge(b);
        assert_eq!(merged.occupied(), expected(a, b));
        assert_eq!(merged.total(), a.total() + b.total());
        let copy = Histogram::from_bytes(grid_size, &merged.to_bytes(), Global);
        assert_eq!(copy.occupied(), merged.occupied());
        assert_eq!(copy.total(), merged.total());
    }
    let mut twice = pending_only.clone();
    twice.merge(&pending_only);
    let Cells::Sparse(cells) = &twice.cells else {
        unreachable!("150 cells stay sparse");
    };
    assert_eq!(
        (cells.sorted.len(), cells.pending.len()),
        (150, 0),
        "the appended cells passed the threshold and were merged"
    );
    let mut both_sorted = sorted_and_pending.clone();
    both_sorted.merge(&overlapping);
    assert!(
        matches!(&both_sorted.cells, Cells::Sparse(cells) if cells.sorted.len() == 200),
        "sorted counts on both sides, 200 cells: sparse"
    );
    let mut dense_now = sorted_and_pending.clone();
    dense_now.merge(&many);
    assert!(
        matches!(dense_now.cells, Cells::Dense(_)),
        "300 cells: past a sixteenth"
    );
}

/// A sparse histogram travels as its counts per cell and its pending cells as they came
/// (tag 2): nothing is sorted to write the bytes, and the copy holds the same cells.
#[test]
fn sparse_histograms_travel_unsorted() {
    let mut histogram = Histogram::new(1 << 12);
    for cell in [9, 3, 9, 1] {
        histogram.add(cell);
    }
    let mut expected = vec![2u8];
    expected.extend(0u32.to_le_bytes());
    expected.extend(4u32.to_le_bytes());
    for cell in [9u32, 3, 9, 1] {
        expected.extend(cell.to_le_bytes());
    }
    assert_eq!(histogram.to_bytes(), expected);
    let copy = Histogram::from_bytes(1 << 12, &expected, Global);
    let Cells::Sparse(cells) = &copy.cells else {
        unreachable!("sparse");
    };
    assert_eq!(cells.pending.as_slice(), [9, 3, 9, 1]);
    assert_eq!(copy.occupied(), [(1, 1), (3, 1), (9, 2)]);
}

/// A long pending list of few distinct cells travels counted per cell (12 bytes a cell,
/// not 4 a value); one of many distinct cells, or a short one, as it came. Tag 0 (the
/// counts alone, as earlier versions wrote them) is still read.
#[test]
fn sparse_histograms_travel_in_their_smaller_form() {
    let grid_size = 1 << 12;
    let filled = |cells: &mut dyn Iterator<Item = u32>| {
        let mut histogram = Histogram::new(grid_size);
        cells.for_each(|cell| histogram.add(cell));
        histogram
    };
    let few_distinct = filled(&mut (0..1000).map(|i| i % 10));
    let bytes = few_distinct.to_bytes();
    assert_eq!(
        bytes.len(),
        1 + 4 + 10 * 12 + 4,
        "counted: ten cells, no pending one"
    );
    let many_distinct = filled(&mut (0..1000).map(|i| (i * 7) % 4000));
    let short = filled(&mut (0..255).map(|i| i % 3));
    for (histogram, raw) in [(&many_distinct, 1000), (&short, 255)] {
        let bytes = histogram.to_bytes();
        assert_eq!(bytes.len(), 1 + 4 + 4 + 4 * raw, "as it came");
    }
    for histogram in [&few_distinct, &many_distinct, &short] {
        let copy = Histogram::from_bytes(grid_size, &histogram.to_bytes(), Global);
        assert_eq!(copy.occupied(), histogram.occupied());
        assert_eq!(copy.total(), histogram.total());
    }
    // At the boundary: 255 pending cells travel as they came, 256 counted (content
    // checked). The sorted counts weigh in: 100 sorted cells and 300 pending values in 50
    // new cells travel counted (3·150 < 3·100 + 300), in 300 new cells as they came.
    let at_255 = filled(&mut (0..255).map(|i| i % 5));
    assert_eq!(at_255.to_bytes().len(), 1 + 4 + 4 + 4 * 255);
    let at_256 = filled(&mut (0..256).map(|i| i % 5));
    let mut expected = vec![2u8];
    expected.extend(5u32.to_le_bytes());
    for (cell, count) in [(0u32, 52u64), (1, 51), (2, 51), (3, 51), (4, 51)] {
        expected.extend(cell.to_le_bytes());
        expected.extend(count.to_le_bytes());
    }
    expected.extend(0u32.to_le_bytes());
    assert_eq!(at_256.to_bytes(), expected);
    let sorted_then_pending = |new_cells: u32| {
        let mut histogram = filled(&mut (0..1024).map(|i| i % 100));
        (0..300).for_each(|i| histogram.add(1000 + i % new_cells));
        histogram
    };
    let narrow = sorted_then_pending(50);
    assert_eq!(narrow.to_bytes().len(), 1 + 4 + 150 * 12 + 4);
    let wide = sorted_then_pending(300);
    assert_eq!(wide.to_bytes().len(), 1 + 4 + 100 * 12 + 4 + 4 * 300);
    for histogram in [&at_255, &at_256, &wide, &narrow] {
        let copy = Histogram::from_bytes(grid_size, &histogram.to_bytes(), Global);
        assert_eq!(copy.occupied(), histogram.occupied());
        assert_eq!(copy.total(), histogram.total());
    }
    let mut earlier = vec![0u8];
    earlier.extend(2u32.to_le_bytes());
    for (cell, count) in [(4u32, 3u64), (70, 1)] {
        earlier.extend(cell.to_le_bytes());
        earlier.extend(count.to_le_bytes());
    }
    let copy = Histogram::from_bytes(grid_size, &earlier, Global);
    assert_eq!(copy.occupied(), [(4, 3), (70, 1)]);
    assert_eq!(copy.total(), 4);
}

/// Distinct cells wait pending (4 bytes a value) rather than merge into sorted counts (8
/// bytes a cell) until a 4,096-bit map can no longer show half of them distinct; repeated
/// cells merge at 1,024 as before; on a grid whose dense form is small, distinct cells
/// merge at 1,024 and go dense as before. Every way counts exactly.
#[test]
fn distinct_cells_wait_pending_and_repeated_cells_merge() {
    let sparse = |histogram: &Histogram| match &histogram.cells {
        Cells::Sparse(sparse) => (sparse.sorted.len(), sparse.pending.len()),
        Cells::Dense(_) => panic!("dense"),
    };
    let mut rng = ChaCha20Rng::seed_from_u64(8_192);
    let mut distinct = std::collections::BTreeSet::new();
    while distinct.len() < 20_000 {
        distinct.insert(rng.random_range(0..=DEFAULT_GRID_SIZE));
    }
    let mut distinct: Vec<u32> = distinct.into_iter().collect();
    rand::seq::SliceRandom::shuffle(&mut distinct[..], &mut rng); // no order by cell

    let mut histogram = Histogram::new(DEFAULT_GRID_SIZE);
    for (n, &cell) in distinct.iter().enumerate() {
        histogram.add(cell);
        match n + 1 {
            // A group of 1,100 floats: 8 KiB of pending cells, where 1,024 of them merged
            // into 8 KiB of counts beside 4 KiB of pending room.
            1_100 => assert!(histogram.allocated_bytes() <= 2_048 * 4),
            8_191 => assert_eq!(sparse(&histogram), (0, 8_191)),
            8_192 => assert_eq!(sparse(&histogram), (8_192, 0), "merged at last"),
            _ => {}
        }
    }
    let mut expected: Vec<(u32, u64)> = distinct.iter().map(|&cell| (cell, 1)).collect();
    expected.sort_unstable();
    assert_eq!(histogram.occupied(), expected);
    assert_eq!(histogram.total(), 20_000);

    // 40 cells repeated: merged at 1,024 values into 40 counts. Distinct cells after
    // them wait beside those counts.
    let mut repeated = Histogram::new(DEFAULT_GRID_SIZE);
    for i in 0..1_500u32 {
        repeated.add(distinct[(i % 40) as usize]);
    }
    assert_eq!(sparse(&repeated), (40, 1_500 - 1_024));
    assert_eq!(repeated.occupied().len(), 40);
    for &cell in &distinct[40..2_040] {
        repeated.add(cell);
    }
    assert_eq!(sparse(&repeated), (40, 476 + 2_000));
    // (1,500 values round 40 cells: the first 20 take 38, the others 37.)
    let mut expected: Vec<(u32, u64)> = (distinct[..2_040].iter())
        .enumerate()
        .map(|(i, &cell)| (cell, if i < 40 { 37 + (i < 20) as u64 } else { 1 }))
        .collect();
    expected.sort_unstable();
    assert_eq!(repeated.occupied(), expected);

    // Exactly half of 1,024 cells distinct (512 cells, each twice, whose bits differ):
    // their counts would take the 4 KiB they take pending, so they wait.
    let mut apart: Vec<u32> = Vec::new();
    for cell in 0.. {
        apart.push(cell);
        if bits_set(&apart) < apart.len() {
            apart.pop();
        }
        if apart.len() == 512 {
            break;
        }
    }
    let mut half = Histogram::new(DEFAULT_GRID_SIZE);
    for &cell in apart.iter().chain(&apart) {
        half.add(cell);
    }
    assert_eq!(sparse(&half), (0, 1_024));

    // A grid of 2^14 points holds 1,024 sorted cells sparse at most: 1,024 distinct cells
    // wait there (2,048 pending ones take their memory), and on a grid one point smaller
    // they merge and go dense.
    for (grid_size, waits) in [((1 << 14) - 1, true), ((1 << 14) - 2, false)] {
        let mut edge = Histogram::new(grid_size);
        for j in 0..1_024 {
            edge.add(j * 13 % grid_size);
        }
        match waits {
            true => assert_eq!(sparse(&edge), (0, 1_024)),
            false => assert!(matches!(edge.cells, Cells::Dense(_))),
        }
        assert_eq!(edge.occupied().len(), 1_024);
    }

    // 2^12 + 1 grid points: 1,024 distinct cells are more than its sparse form holds
    // (a sixteenth of the grid), so they merge and go dense.
    let small_grid = 1 << 12;
    let mut small = Histogram::new(small_grid);
    for (n, cell) in (0..small_grid).map(|j| j * 2_009 % small_grid).enumerate() {
        small.add(cell);
        assert_eq!(
            matches!(small.cells, Cells::Sparse(_)),
            n + 1 < 1_024,
            "{} values",
            n + 1
        );
    }
    assert_eq!(
        small.occupied(),
        (0..small_grid).map(|j| (j, 1)).collect::<Vec<_>>()
    );
}

/// The bitmap that spares a float column's bytes a sort: each distinct cell sets at most
/// one bit (so a count of them never overstates), and 333 distinct cells set nearly 333.
#[test]
fn bits_set_bound_the_distinct_cells() {
    let repeated: Vec<u32> = (0..1000).map(|i| (i % 10) * 7919).collect();
    assert!(bits_set(&repeated) <= 10);
    // The cells of 333 values of a float column (random places on 2^21 half cells).
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(22);
    let distinct: std::collections::BTreeSet<u32> =
        (0..333).map(|_| rng.random_range(0..1 << 21)).collect();
    let distinct: Vec<u32> = distinct.into_iter().collect();
    let set = bits_set(&distinct);
    assert!(
        set <= distinct.len() && set >= 300,
        "{set} of {}",
        distinct.len()
    );
}

#[test]
#[should_panic(expected = "not the bytes of a histogram (tag 3)")]
fn bytes_of_no_histogram_are_refused() {
    Histogram::from_bytes(1 << 12, &[3, 0, 0, 0, 0], Global);
}

/// A count that the bytes cannot hold sizes nothing: each form's counts, pending cells and
/// carries are refused before a vector is made for them (a 64 GiB malloc would abort).
#[test]
fn counts_past_the_end_of_the_bytes_are_refused() {
    let huge = u32::MAX.to_le_bytes();
    let zero = 0u32.to_le_bytes();
    let sparse_counts = [&[2][..], &huge].concat();
    let sparse_pending = [&[2][..], &zero, &huge].concat();
    let dense_carries = [&[1][..], &[0; 17], &huge].concat();
    let dense_pending = [&[1][..], &[0; 17], &zero, &huge].concat();
    for bytes in [sparse_counts, sparse_pending, dense_carries, dense_pending] {
        let read = std::panic::catch_unwind(|| Histogram::from_bytes(16, &bytes, Global));
        let message = read.expect_err("refused");
        let message = message.downcast_ref::<&str>().copied().unwrap_or_default();
        assert_eq!(message, "a count past the end of the bytes", "{bytes:?}");
    }
}

/// Cells appended in bulk (a combine) that overflow a cell's 32-bit count make the
/// histogram dense, as single values do.
#[test]
fn appended_cells_beyond_32_bits_go_dense() {
    let mut histogram = Histogram::new(100);
    histogram.add_counts(&[(5, u32::MAX as u64)]);
    histogram.add_cells(&[5; 1024]);
    assert!(matches!(histogram.cells, Cells::Dense(_)));
    assert_eq!(histogram.occupied(), [(5, u32::MAX as u64 + 1024)]);
    assert_eq!(histogram.total(), u32::MAX as u64 + 1024);
}

#[test]
fn a_count_beyond_32_bits_goes_dense() {
    let mut histogram = Histogram::new(100);
    histogram.add(3);
    histogram.add_counts(&[(3, u32::MAX as u64), (50, 2)]);
    assert!(matches!(histogram.cells, Cells::Dense(_)));
    assert_eq!(histogram.occupied(), [(3, u32::MAX as u64 + 1), (50, 2)]);
    assert_eq!(histogram.total(), u32::MAX as u64 + 3);
}
