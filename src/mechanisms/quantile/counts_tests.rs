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

/// The cells of the histogram that counts `place`.
fn histogram_cells(counts: &GridCounts, place: Place) -> &Cells<Global> {
    match place {
        Place::At(_) => &counts.at.cells,
        Place::Between(_) => &counts.between.cells,
    }
}

/// Values counted in place where that is possible, and by `add` otherwise (as the
/// transition does), end in the same counts as values counted by `add` alone; counting
/// in place refuses exactly the values that would allocate, merge or carry a dense
/// histogram's counter past 255, and changes nothing when it refuses.
#[test]
fn counting_in_place_is_counting_where_no_allocation_is_needed() {
    let mut rng = ChaCha20Rng::seed_from_u64(22);
    let grid_size = 1 << 12; // a sixteenth of it occupied turns a histogram dense
    for (values, distinct) in [
        (300, 40),
        (5_000, 60),
        (5_000, 4_000),
        (20_000, 1 << 12),
        (300_000, 600), // dense, with carries
    ] {
        let (mut by_add, mut in_place) = (GridCounts::new(grid_size), GridCounts::new(grid_size));
        let (mut counted_in_place, mut refused, mut refused_dense) = (0, 0, 0);
        for _ in 0..values {
            let j = rng.random_range(0..distinct);
            let place = if rng.random_bool(0.3) {
                Place::At(j)
            } else {
                Place::Between(j.min(grid_size - 1))
            };
            by_add.add(place);
            let room = match histogram_cells(&in_place, place) {
                Cells::Sparse(sparse) => {
                    let length = sparse.pending.len();
                    length < sparse.pending.capacity() && length + 1 < sparse.merge_at
                }
                // The cell counted now is the one pushed DELAY values ago.
                Cells::Dense(dense) => {
                    dense.pushed < DELAY
                        || dense.low[dense.recent[dense.pushed % DELAY] as usize] < u8::MAX
                }
            };
            let before = (!room).then(|| (contents(&in_place), pending_shape(&in_place)));
            if in_place.add_in_place(place) {
                assert!(room, "counted in place without room: {place:?}");
                counted_in_place += 1;
            } else {
                assert!(!room, "refused with room: {place:?}");
                assert_eq!(
                    Some((contents(&in_place), pending_shape(&in_place))),
                    before,
                    "a refusal changed the counts"
                );
                refused += 1;
                refused_dense +=
                    matches!(histogram_cells(&in_place, place), Cells::Dense(_)) as u32;
                in_place.add(place);
            }
            assert_eq!(in_place.total(), by_add.total());
        }
        assert_eq!(contents(&in_place), contents(&by_add), "{values} values");
        assert_eq!(pending_shape(&in_place), pending_shape(&by_add));
        if distinct < grid_size / 16 {
            // Growth and merges take a few values; the others count in place.
            assert!(in_place.is_sparse());
            assert!(
                refused * 10 < counted_in_place,
                "{refused} refused of {values}"
            );
        } else {
            // Dense histograms refuse only a counter's 256th value (a carry).
            assert!(
                !in_place.is_sparse(),
                "{values} values over {distinct} cells"
            );
            assert!(
                refused * 10 < counted_in_place,
                "{refused} refused of {values}"
            );
            // 350 values a cell between points: each counter's 256th is refused.
            assert_eq!(
                refused_dense > 0,
                values / distinct > 256,
                "{refused_dense}"
            );
        }
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

/// Distinct cells that wait pending (the default grid) count in place exactly as by
/// `add`, and still wait, with the same counts, after a parallel plan's combine (which
/// appends another state's pending cells) and after the bytes a partial state travels
/// in; the listing a draw takes has every value.
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
        if !in_place.add_in_place(place) {
            in_place.add(place);
        }
    }
    assert_eq!(contents(&in_place), contents(&by_add));
    assert_eq!(pending_shape(&in_place), pending_shape(&by_add));
    // About 2,700 values between points waited at 1,024 and at 2,048 cells.
    assert_eq!(sorted_lengths(&in_place), [Some(0), Some(0)]);
    assert_eq!(
        pending_shape(&in_place)[1].map(|shape| shape.2),
        Some(4_096)
    );

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

/// An allocator the size of the extension's (a memory context pointer), so that the
/// counts are laid out as the extension's are.
#[derive(Clone)]
struct PointerSized(#[allow(dead_code)] usize);

// SAFETY: every call goes to Global, which upholds the trait's contract.
unsafe impl allocator_api2::alloc::Allocator for PointerSized {
    fn allocate(
        &self,
        layout: std::alloc::Layout,
    ) -> Result<std::ptr::NonNull<[u8]>, allocator_api2::alloc::AllocError> {
        Global.allocate(layout)
    }

    unsafe fn deallocate(&self, block: std::ptr::NonNull<u8>, layout: std::alloc::Layout) {
        // SAFETY: allocated by Global (allocate above), as the caller guarantees.
        unsafe { Global.deallocate(block, layout) }
    }
}

/// What a value counted in place between grid points reads and writes of its counts (the
/// between histogram's total, the sparse cells' pending pointer, length and capacity,
/// the merge point) lies in the first GridCounts::ROW_BYTES bytes, which the quantile
/// state places in its second cache line (issue 22).
#[test]
fn a_row_reads_the_first_48_bytes_of_its_counts() {
    let mut counts = GridCounts::new_in(1 << 20, PointerSized(0));
    for cell in 0..100 {
        counts.add(Place::Between(cell));
    }
    let start = &counts as *const _ as usize;
    let histogram = &counts.between;
    let Cells::Sparse(sparse) = &histogram.cells else {
        panic!("sparse");
    };
    let end_of = |field: usize, size: usize| field + size - start;
    let ends = [
        end_of(&histogram.total as *const _ as usize, 8),
        end_of(
            &sparse.pending as *const _ as usize,
            size_of_val(&sparse.pending),
        ),
        end_of(&sparse.merge_at as *const _ as usize, 8),
    ];
    assert!(
        ends.iter()
            .all(|&end| end <= GridCounts::<PointerSized>::ROW_BYTES),
        "{ends:?}"
    );
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
