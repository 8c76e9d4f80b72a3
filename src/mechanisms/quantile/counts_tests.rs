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
            let room = match &histogram.cells {
                Cells::Sparse(sparse) => {
                    let length = sparse.pending.len();
                    length < sparse.pending.capacity() && length + 1 < sparse.merge_at
                }
                Cells::Dense(_) => false,
            };
            let before = (contents(&in_place), pending_shape(&in_place));
            if in_place.add_in_place(place) {
                assert!(room, "counted in place without room: {place:?}");
                counted_in_place += 1;
            } else {
                assert!(!room, "refused with room: {place:?}");
                assert_eq!(
                    (contents(&in_place), pending_shape(&in_place)),
                    before,
                    "a refusal changed the counts"
                );
                refused += 1;
                in_place.add(place);
            }
            assert_eq!(in_place.total(), by_add.total());
        }
        assert_eq!(contents(&in_place), contents(&by_add), "{values} values");
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
