//! Counting in place: the rows a transition counts outside pgrx's guard.

use super::cells::*;
use super::counts::*;
use super::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// What a histogram holds, to compare two of them.
fn contents(counts: &GridCounts) -> (u64, Vec<(u64, u64)>) {
    (counts.total(), counts.iter_occupied().collect())
}

/// The pending cells in the order they came and the point at which they merge, for each
/// histogram.
fn pending_shape(counts: &GridCounts) -> Vec<Option<(Vec<u32>, u32)>> {
    [&counts.at, &counts.between]
        .iter()
        .map(|histogram| match &histogram.cells {
            Cells::Sparse(sparse) => Some((sparse.pending_cells().collect(), sparse.merge_at)),
            Cells::Dense(_) => None,
        })
        .collect()
}

/// Where the pending cells are kept: the list's length and capacity, and the staged ones.
fn pending_storage(histogram: &Histogram) -> Option<(usize, usize, Vec<u32>)> {
    match &histogram.cells {
        Cells::Sparse(sparse) => Some((
            sparse.pending.len(),
            sparse.pending.capacity(),
            sparse.staged().to_vec(),
        )),
        Cells::Dense(_) => None,
    }
}

/// Values counted in place where that is possible, and by `add` otherwise (as the
/// transition does), end in the same counts as values counted by `add` alone; counting
/// in place refuses exactly the values that would allocate, merge or find a dense
/// histogram, and changes nothing when it refuses.
#[test]
fn counting_in_place_is_counting_where_no_allocation_is_needed() {
    let mut rng = ChaCha20Rng::seed_from_u64(22);
    let grid_size = 1 << 12; // a sixteenth of it occupied turns a histogram dense
    for (values, distinct) in [(300, 40), (5_000, 60), (5_000, 4_000), (20_000, 1 << 12)] {
        let (mut by_add, mut in_place) = (GridCounts::new(grid_size), GridCounts::new(grid_size));
        let (mut counted_in_place, mut refused) = (0, 0);
        for _ in 0..values {
            let j = rng.random_range(0..distinct);
            let place = if rng.random_bool(0.3) {
                Place::At(j)
            } else {
                Place::Between(j.min(grid_size - 1))
            };
            by_add.add(place);
            let histogram = match place {
                Place::At(_) => &in_place.at,
                Place::Between(_) => &in_place.between,
            };
            // Room: below the merge, and a staged slot free or room in the list for the
            // staged cells.
            let room = match &histogram.cells {
                Cells::Sparse(sparse) => {
                    sparse.pending_len() + 1 < sparse.merge_at as usize
                        && (sparse.staged().len() < STAGED
                            || sparse.pending.capacity() - sparse.pending.len() >= STAGED)
                }
                Cells::Dense(_) => false,
            };
            let capacity = pending_storage(histogram).map(|(_, capacity, _)| capacity);
            let before = (
                contents(&in_place),
                pending_shape(&in_place),
                pending_storage(&in_place.at),
                pending_storage(&in_place.between),
            );
            if in_place.add_in_place(place) {
                assert!(room, "counted in place without room: {place:?}");
                let histogram = match place {
                    Place::At(_) => &in_place.at,
                    Place::Between(_) => &in_place.between,
                };
                let after = pending_storage(histogram).map(|(_, capacity, _)| capacity);
                assert_eq!(after, capacity, "counting in place allocated");
                counted_in_place += 1;
            } else {
                assert!(!room, "refused with room: {place:?}");
                assert_eq!(
                    (
                        contents(&in_place),
                        pending_shape(&in_place),
                        pending_storage(&in_place.at),
                        pending_storage(&in_place.between),
                    ),
                    before,
                    "a refusal changed the counts"
                );
                refused += 1;
                in_place.add(place);
            }
            assert_eq!(in_place.total(), by_add.total());
        }
        assert_eq!(contents(&in_place), contents(&by_add), "{values} values");
        // The same pending cells in the same order (staged ones last), merged alike.
        assert_eq!(pending_shape(&in_place), pending_shape(&by_add));
        if distinct < 4_000 {
            // Growth and merges take a few values; the others count in place.
            assert!(in_place.is_sparse());
            assert!(
                refused * 10 < counted_in_place,
                "{refused} refused of {values}"
            );
        } else {
            // Dense histograms refuse every value.
            assert!(
                !in_place.is_sparse(),
                "{values} values over {distinct} cells"
            );
            assert!(refused > values / 4, "{refused} refused of {values}");
        }
    }
}

/// An allocator the size of the extension's (a memory context pointer).
#[derive(Clone)]
struct PointerSized(#[allow(dead_code)] usize);

// SAFETY: every call goes to Global, which upholds the trait's contract.
unsafe impl allocator_api2::alloc::Allocator for PointerSized {
    fn allocate(
        &self,
        layout: std::alloc::Layout,
    ) -> Result<std::ptr::NonNull<[u8]>, allocator_api2::alloc::AllocError> {
        allocator_api2::alloc::Global.allocate(layout)
    }

    unsafe fn deallocate(&self, ptr: std::ptr::NonNull<u8>, layout: std::alloc::Layout) {
        // SAFETY: allocated by Global (allocate above), as the caller guarantees.
        unsafe { allocator_api2::alloc::Global.deallocate(ptr, layout) }
    }
}

/// What a row counted in place reads and writes of its histogram (the total, the sparse
/// cells' tag, the pending cells' pointer, length and capacity, merge_at, the staged
/// cells) lies in the histogram's first cache line, the line it starts on (issue 22).
#[test]
fn a_row_touches_one_line_of_its_histogram() {
    let mut counts = GridCounts::new_in(1 << 20, PointerSized(0));
    for cell in 0..100 {
        counts.add(Place::Between(cell));
    }
    for histogram in [&counts.between, &counts.at] {
        let start = histogram as *const _ as usize;
        assert_eq!(start % 64, 0);
        let Cells::Sparse(sparse) = &histogram.cells else {
            panic!("sparse");
        };
        let end_of = |field: usize, size: usize| field + size - start;
        let fields = [
            end_of(&histogram.total as *const _ as usize, 8),
            end_of(&histogram.cells as *const _ as usize, 1),
            end_of(&sparse.pending as *const _ as usize, 4 * 8),
            end_of(&sparse.merge_at as *const _ as usize, 4),
            end_of(sparse.staged().as_ptr() as usize, 4 * STAGED),
        ];
        assert!(fields.iter().all(|&end| end <= 64), "{fields:?}");
    }
}
