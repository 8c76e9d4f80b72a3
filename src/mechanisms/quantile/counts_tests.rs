//! Counting in place: the rows a transition counts outside pgrx's guard.

use super::cells::*;
use super::counts::*;
use super::*;
use allocator_api2::alloc::Global;
use allocator_api2::vec::Vec as AllocVec;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// What a histogram holds, to compare two of them.
fn contents(counts: &GridCounts) -> (u64, Vec<(u64, u64)>) {
    (counts.total(), counts.iter_occupied().collect())
}

/// The pending cells' room and the point at which they merge, for each histogram.
fn pending_shape(counts: &GridCounts) -> Vec<Option<(usize, usize, usize)>> {
    [&counts.at, &counts.between]
        .iter()
        .map(|histogram| match &histogram.cells {
            Cells::Sparse(sparse) => Some((
                sparse.pending.len(),
                sparse.pending.capacity(),
                sparse.merge_at,
            )),
            Cells::Dense(_) => None,
        })
        .collect()
}

/// Places counted in batches of 1 to 62 by `add_half_cells` (a group's inbox drained,
/// quantile/inbox.rs) end in the same counts as each counted by `add`: sparse
/// histograms that merge, dense ones whose counters carry past 255, values at and
/// between points mixed, batches that straddle a histogram's turn to dense.
#[test]
fn counting_half_cells_is_counting_each_place() {
    let mut rng = ChaCha20Rng::seed_from_u64(22);
    let grid_size = 1 << 12; // a sixteenth of it occupied turns a histogram dense
    for (values, distinct, at_share) in [
        (300, 40, 0.3),
        (5_000, 60, 0.0),
        (5_000, 4_000, 1.0),
        (20_000, 1 << 12, 0.3),
        (300_000, 600, 0.3), // dense, with carries
    ] {
        let places: Vec<Place> = (0..values)
            .map(|_| {
                let j = rng.random_range(0..distinct);
                match rng.random_bool(at_share) {
                    true => Place::At(j),
                    false => Place::Between(j.min(grid_size - 1)),
                }
            })
            .collect();
        let mut by_add = GridCounts::new(grid_size);
        places.iter().for_each(|&place| by_add.add(place));
        let half_cells: Vec<u32> = places.iter().map(|p| p.half_cell() as u32).collect();
        let mut batched = GridCounts::new(grid_size);
        let mut counted = 0;
        while counted < half_cells.len() {
            let batch = rng.random_range(1..=62).min(half_cells.len() - counted);
            batched.add_half_cells(&half_cells[counted..counted + batch]);
            counted += batch;
            assert_eq!(batched.total(), counted as u64);
        }
        assert_eq!(contents(&batched), contents(&by_add), "{values} values");
        assert_eq!(batched.is_sparse(), by_add.is_sparse(), "{values} values");
        assert_eq!(
            by_add.is_sparse(),
            distinct < grid_size / 16,
            "{values} values over {distinct} cells"
        );
        assert_eq!(batched.sparse_occupied(), by_add.sparse_occupied());
    }
}

/// The sorted counts of each histogram, while sparse.
fn sorted_lengths(counts: &GridCounts) -> Vec<Option<usize>> {
    [&counts.at, &counts.between]
        .iter()
        .map(|histogram| match &histogram.cells {
            Cells::Sparse(sparse) => Some(sparse.sorted.len()),
            Cells::Dense(_) => None,
        })
        .collect()
}

/// Distinct cells that wait pending (the default grid), counted from inboxes of 62,
/// count exactly as by `add`, and still wait, with the same counts, after a parallel
/// plan's combine (which appends another state's pending cells) and after the bytes a
/// partial state travels in; the listing a draw takes has every value.
#[test]
fn waiting_cells_count_combine_and_travel_exactly() {
    let mut rng = ChaCha20Rng::seed_from_u64(8_192);
    let grid_size = DEFAULT_GRID_SIZE;
    let places: Vec<Place> = (0..6_000)
        .map(|_| match rng.random_bool(0.1) {
            true => Place::At(rng.random_range(0..=grid_size)),
            false => Place::Between(rng.random_range(0..grid_size)),
        })
        .collect();
    let (mut by_add, mut in_place) = (GridCounts::new(grid_size), GridCounts::new(grid_size));
    for &place in &places[..3_000] {
        by_add.add(place);
    }
    let half_cells: Vec<u32> = places[..3_000]
        .iter()
        .map(|p| p.half_cell() as u32)
        .collect();
    half_cells
        .chunks(62)
        .for_each(|batch| in_place.add_half_cells(batch));
    assert_eq!(contents(&in_place), contents(&by_add));
    // About 2,700 values between points waited at 1,024 and at 2,048 cells, all pending
    // either way; a batch may pass a merge point by up to 61 cells, which each wait
    // doubles: the next merge point lies up to 6 × 61 past 4,096 (where the counts are
    // kept, never what they are).
    assert_eq!(sorted_lengths(&in_place), [Some(0), Some(0)]);
    assert_eq!(sorted_lengths(&by_add), [Some(0), Some(0)]);
    let lengths = |counts: &GridCounts| -> Vec<_> {
        (pending_shape(counts).into_iter())
            .map(|shape| shape.map(|s| s.0))
            .collect()
    };
    assert_eq!(lengths(&in_place), lengths(&by_add));
    assert_eq!(pending_shape(&by_add)[1].map(|shape| shape.2), Some(4_096));
    let merge_at = pending_shape(&in_place)[1].map_or(0, |shape| shape.2);
    assert!((4_096..=4_096 + 6 * 61).contains(&merge_at), "{merge_at}");

    let mut other = GridCounts::new(grid_size);
    let mut all = by_add.clone();
    for &place in &places[3_000..] {
        other.add(place);
        all.add(place);
    }
    let mut combined = in_place.clone();
    combined.merge(&other);
    assert_eq!(contents(&combined), contents(&all));
    // About 5,400 between points, appended past the merge point, wait on.
    assert_eq!(sorted_lengths(&combined), [Some(0), Some(0)]);
    let copy = GridCounts::from_bytes(grid_size, &combined.to_bytes(), Global);
    assert_eq!(contents(&copy), contents(&all));
    assert_eq!(sorted_lengths(&copy), [Some(0), Some(0)]);

    let mut expected = std::collections::BTreeMap::new();
    for place in &places {
        *expected.entry(place.half_cell()).or_insert(0u64) += 1;
    }
    let expected: Vec<(u64, u64)> = expected.into_iter().collect();
    assert_eq!(combined.sparse_occupied(), Some(expected));
}

/// The radix sort a draw lists a group's cells with sorts as a comparison sort does: any
/// width from 1 to 32 bits (one to four passes), few cells and many, ties, and cells
/// that share a digit (a pass skipped) or all digits.
#[test]
fn radix_sort_sorts_as_a_comparison_sort_does() {
    let mut rng = ChaCha20Rng::seed_from_u64(22);
    let mut scratch = AllocVec::new_in(Global);
    for case in 0..4_000 {
        let bits = 1 + case % 32;
        let largest = if bits == 32 {
            u32::MAX
        } else {
            (1u32 << bits) - 1
        };
        let length = [2, 3, 17, 64, 200, 1_000, 5_000][case % 7];
        let mut cells = AllocVec::new_in(Global);
        // (The pattern steps apart from the width: every width meets every pattern.)
        match (case / 32) % 4 {
            0 => cells.extend((0..length).map(|_| rng.random_range(0..=largest))),
            // Few distinct cells: ties, and a high digit all share.
            1 => cells.extend((0..length).map(|_| rng.random_range(0..=largest.min(40)))),
            // The low digit all share.
            2 => cells.extend((0..length).map(|_| rng.random_range(0..=largest) & !0xff)),
            _ => cells.extend(std::iter::repeat_n(largest, length)),
        }
        let mut expected = cells.to_vec();
        expected.sort_unstable();
        radix_sort(&mut cells, &mut scratch, bits as u32);
        assert_eq!(
            cells.as_slice(),
            expected.as_slice(),
            "{bits} bits, {length} cells"
        );
    }
}
