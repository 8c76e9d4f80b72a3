//! Counts of values at and between grid points, as two histograms.

use super::cells::*;
use super::grid::Place;
use allocator_api2::alloc::{Allocator, Global};
use allocator_api2::boxed::Box as AllocBox;
use allocator_api2::vec::Vec as AllocVec;

/// Counts of values per grid cell: memory O(min(n, K)), at most K + 1 bytes plus the
/// carries of cells holding 256 values or more.
#[derive(Debug, Clone)]
#[repr(C)] // the fields a row touches first (issue 22)
pub struct Histogram<A: Allocator + Clone = Global> {
    pub(super) total: u64,
    pub(super) cells: Cells<A>,
    pub(super) grid_size: u32,
    pub(super) allocator: A,
}

/// Pending cells a sparse histogram's bytes carry as they are, whatever their number of
/// distinct cells (1 KiB of them).
const RAW_PENDING: usize = 256;

impl Histogram<Global> {
    pub fn new(grid_size: u32) -> Self {
        Self::new_in(grid_size, Global)
    }
}

impl<A: Allocator + Clone> Histogram<A> {
    pub fn new_in(grid_size: u32, allocator: A) -> Self {
        Self {
            cells: Cells::Sparse(SparseCells::new_in(allocator.clone())),
            grid_size,
            total: 0,
            allocator,
        }
    }

    /// Counts one value in `cell`.
    pub fn add(&mut self, cell: u32) {
        debug_assert!(cell <= self.grid_size);
        self.total += 1;
        match &mut self.cells {
            Cells::Dense(dense) => dense.push(cell),
            Cells::Sparse(sparse) => match sparse.push(cell, self.grid_size) {
                Ok(false) => {}
                merged => self.densify_if(merged),
            },
        }
    }

    /// Counts one value in each of `cells`: [`Histogram::add`] for each, with one copy
    /// while sparse (a combine appends another state's pending cells).
    pub fn add_cells(&mut self, cells: &[u32]) {
        debug_assert!(cells.iter().all(|&cell| cell <= self.grid_size));
        self.total += cells.len() as u64;
        match &mut self.cells {
            Cells::Dense(dense) => dense.count_all(cells),
            Cells::Sparse(sparse) => match sparse.extend(cells, self.grid_size) {
                Ok(false) => {}
                merged => self.densify_if(merged),
            },
        }
    }

    /// After pending cells were merged into the sparse cells: dense once the sorted
    /// counts are too many (only a merge can make them so), or a count overflowed.
    #[cold]
    fn densify_if(&mut self, merged: Result<bool, CountOverflow>) {
        let Cells::Sparse(sparse) = &self.cells else {
            return;
        };
        match merged {
            Ok(false) => {}
            Ok(true) if sparse.sorted.len() as u64 <= (self.grid_size as u64 + 1) / 16 => {}
            _ => self.densify(),
        }
    }

    /// Adds counts per cell, sorted by cell (another histogram of the same grid:
    /// histograms of disjoint rows add up).
    pub fn add_counts(&mut self, occupied: &[(u32, u64)]) {
        self.total += occupied.iter().map(|&(_, n)| n).sum::<u64>();
        if let Cells::Sparse(sparse) = &mut self.cells {
            match sparse
                .compact()
                .and_then(|()| sparse.merge_sorted(occupied))
            {
                Ok(()) => {
                    if sparse.sorted.len() as u64 > (self.grid_size as u64 + 1) / 16 {
                        self.densify();
                    }
                    return;
                }
                Err(CountOverflow) => self.densify(),
            }
        }
        if let Cells::Dense(dense) = &mut self.cells {
            for &(cell, count) in occupied {
                dense.add(cell, count);
            }
        }
    }

    /// Adds every count of `other` (same grid). Two dense histograms add counter by
    /// counter (O(K), no list of a million cells in between).
    pub fn merge<B: Allocator + Clone>(&mut self, other: &Histogram<B>) {
        let theirs = match &other.cells {
            Cells::Sparse(theirs) => {
                // Their sorted counts merge in; their pending cells are appended, not
                // sorted first (a parallel plan's combine: most groups' are all pending).
                if !theirs.sorted.is_empty() {
                    let sorted: Vec<(u32, u64)> =
                        theirs.sorted.iter().map(|&(c, n)| (c, n as u64)).collect();
                    self.add_counts(&sorted);
                }
                return self.add_cells(&theirs.pending);
            }
            Cells::Dense(theirs) => theirs,
        };
        self.densify();
        self.total += other.total;
        let Cells::Dense(ours) = &mut self.cells else {
            unreachable!("just made dense");
        };
        ours.add_dense(
            &theirs.low,
            theirs.carries.iter().map(|(&c, &n)| (c, n)),
            theirs.pending(),
        );
    }

    /// The histogram as bytes (little-endian): a tag, then for a sparse one (tag 2) its
    /// counts per cell and its pending cells, for a dense one (tag 1) the byte counters,
    /// the carries and the pending cells. (Tag 0, the counts per cell alone, is what
    /// versions before tag 2 wrote: still read from them; they cannot read tag 2.)
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        self.write_bytes(&mut bytes);
        bytes
    }

    /// [`Histogram::to_bytes`] appended to `bytes`.
    pub fn write_bytes(&self, bytes: &mut Vec<u8>) {
        let put_u32 = |bytes: &mut Vec<u8>, n: u32| bytes.extend_from_slice(&n.to_le_bytes());
        let put_counts =
            |bytes: &mut Vec<u8>, counts: &mut dyn ExactSizeIterator<Item = (u32, u64)>| {
                put_u32(bytes, counts.len() as u32);
                for (cell, count) in counts {
                    put_u32(bytes, cell);
                    bytes.extend_from_slice(&count.to_le_bytes());
                }
            };
        match &self.cells {
            Cells::Sparse(sparse) => {
                bytes.push(2);
                // Pending cells travel as they came: nothing is sorted for the bytes, and
                // a combine appends them. A long list is counted per cell first if that
                // is smaller (a column of few distinct values ships its counts, not its
                // values: 12 bytes a cell against 4 a value).
                let (sorted, pending) = (&sparse.sorted, &sparse.pending);
                let smaller = |distinct: usize| 3 * distinct < 3 * sorted.len() + pending.len();
                // Sorted only if it could pay: the pending cells' distinct count is at
                // least that of a bitmap's bits they set (a float column's are all
                // distinct, and stay as they came without a sort).
                let counted = (pending.len() >= RAW_PENDING && smaller(bits_set(pending)))
                    .then(|| sparse.occupied())
                    .filter(|counted| smaller(counted.len()));
                match counted {
                    Some(counted) => {
                        put_counts(bytes, &mut counted.into_iter());
                        put_u32(bytes, 0);
                    }
                    None => {
                        put_counts(bytes, &mut sorted.iter().map(|&(c, n)| (c, n as u64)));
                        put_u32(bytes, pending.len() as u32);
                        bytes.reserve(4 * pending.len());
                        for &cell in pending {
                            put_u32(bytes, cell);
                        }
                    }
                }
            }
            Cells::Dense(dense) => {
                bytes.push(1);
                bytes.extend_from_slice(&dense.low);
                put_u32(bytes, dense.carries.len() as u32);
                for (&cell, &carry) in &dense.carries {
                    put_u32(bytes, cell);
                    bytes.extend_from_slice(&carry.to_le_bytes());
                }
                put_u32(bytes, dense.pending().len() as u32);
                for &cell in dense.pending() {
                    put_u32(bytes, cell);
                }
            }
        }
    }

    /// A histogram from [`Histogram::to_bytes`] of the same grid. Panics on bytes it did
    /// not write.
    pub fn from_bytes(grid_size: u32, bytes: &[u8], allocator: A) -> Self {
        let mut reader = Reader(bytes);
        let mut histogram = Self::new_in(grid_size, allocator);
        match reader.take(1)[0] {
            tag @ (0 | 2) => {
                let counts: Vec<(u32, u64)> = (0..reader.count(12))
                    .map(|_| (reader.u32(), reader.u64()))
                    .collect();
                if !counts.is_empty() {
                    histogram.add_counts(&counts);
                }
                if tag == 2 {
                    let pending = reader.count(4);
                    // Counted a chunk at a time from the stack: a parallel plan's leader
                    // reads a state per group and process, most of them pending cells.
                    let mut chunk = [0u32; 256];
                    for cells in reader.take(4 * pending).chunks(4 * chunk.len()) {
                        let chunk = &mut chunk[..cells.len() / 4];
                        for (cell, bytes) in chunk.iter_mut().zip(cells.chunks_exact(4)) {
                            *cell = u32::from_le_bytes(bytes.try_into().expect("4 bytes"));
                        }
                        histogram.add_cells(chunk);
                    }
                }
            }
            1 => {
                let low = reader.take(grid_size as usize + 1);
                let carries: Vec<(u32, u64)> = (0..reader.count(12))
                    .map(|_| (reader.u32(), reader.u64()))
                    .collect();
                let pending: Vec<u32> = (0..reader.count(4)).map(|_| reader.u32()).collect();
                histogram.total = low.iter().map(|&n| n as u64).sum::<u64>()
                    + 256 * carries.iter().map(|&(_, n)| n).sum::<u64>()
                    + pending.len() as u64;
                histogram.densify();
                let Cells::Dense(dense) = &mut histogram.cells else {
                    unreachable!("just made dense");
                };
                dense.add_dense(low, carries.into_iter(), &pending);
            }
            tag => panic!("not the bytes of a histogram (tag {tag})"),
        }
        histogram
    }

    /// Replaces the sparse cells (sorted and pending) by dense counters.
    pub(super) fn densify(&mut self) {
        let Cells::Sparse(sparse) = &self.cells else {
            return;
        };
        let mut dense = DenseCells::new_in(self.grid_size, self.allocator.clone());
        for &(cell, count) in &sparse.sorted {
            dense.add(cell, count as u64);
        }
        for &cell in &sparse.pending {
            dense.add(cell, 1);
        }
        self.cells = Cells::Dense(AllocBox::new_in(dense, self.allocator.clone()));
    }

    /// The number of values counted.
    pub fn total(&self) -> u64 {
        self.total
    }

    pub fn grid_size(&self) -> u32 {
        self.grid_size
    }

    /// The occupied cells and their counts, by cell: O(occupied) (the dense form is only
    /// used once a sixteenth of the grid is occupied).
    pub fn occupied(&self) -> Vec<(u32, u64)> {
        self.iter_occupied().collect()
    }

    /// [`Histogram::occupied`] as an iterator: no list of a million cells for a dense
    /// histogram.
    pub fn iter_occupied(&self) -> Box<dyn Iterator<Item = (u32, u64)> + '_> {
        match &self.cells {
            Cells::Sparse(sparse) => Box::new(sparse.occupied().into_iter()),
            Cells::Dense(dense) => Box::new(dense.iter()),
        }
    }

    /// [`Histogram::iter_occupied`] from cell `first` on.
    pub(super) fn iter_occupied_from(
        &self,
        first: u32,
    ) -> Box<dyn Iterator<Item = (u32, u64)> + '_> {
        match &self.cells {
            Cells::Sparse(sparse) => {
                let occupied = sparse.occupied();
                let skipped = occupied.partition_point(|&(cell, _)| cell < first);
                Box::new(occupied.into_iter().skip(skipped))
            }
            Cells::Dense(dense) => Box::new(dense.iter_from(first)),
        }
    }

    /// Adds the values of each cell c into `counts[c / block]`.
    pub(super) fn add_block_counts(&self, block: u32, counts: &mut [u64]) {
        match &self.cells {
            Cells::Sparse(sparse) => sparse.add_block_counts(block, counts),
            Cells::Dense(dense) => dense.add_block_counts(block, counts),
        }
    }

    /// Bytes held by the histogram's tables (not counting the struct itself).
    pub fn allocated_bytes(&self) -> usize {
        match &self.cells {
            Cells::Dense(dense) => dense.allocated_bytes(),
            Cells::Sparse(sparse) => sparse.allocated_bytes(),
        }
    }
}

/// Counts of values where they lie on a grid of K + 1 points: at each grid point, and
/// strictly between each two. Two histograms, each dense only when a sixteenth of its
/// places is occupied, so that a column whose values fall between grid points (most float
/// columns) or on them (whole numbers on a whole-number grid) holds about K + 1 one-byte
/// counters, as one histogram of nearest points did.
#[derive(Debug, Clone)]
#[repr(C)] // float values fall between points: that histogram first (issue 22)
pub struct GridCounts<A: Allocator + Clone = Global> {
    pub(super) between: Histogram<A>,
    pub(super) at: Histogram<A>,
}

impl GridCounts<Global> {
    pub fn new(grid_size: u32) -> Self {
        Self::new_in(grid_size, Global)
    }
}

impl<A: Allocator + Clone> GridCounts<A> {
    pub fn new_in(grid_size: u32, allocator: A) -> Self {
        Self {
            at: Histogram::new_in(grid_size, allocator.clone()),
            // Places between j and j + 1 for j = 0..K: K cells, numbered 0..=K − 1.
            between: Histogram::new_in(grid_size.saturating_sub(1), allocator),
        }
    }

    /// Counts one value at `place`.
    #[inline]
    pub fn add(&mut self, place: Place) {
        match place {
            Place::At(j) => self.at.add(j),
            Place::Between(j) => self.between.add(j),
        }
    }

    /// Counts one value at each place of `half_cells` ([`Place::half_cell`], below 2^32):
    /// [`GridCounts::add`] for each, in two copies (one a histogram) where a value at a
    /// time took a push, its checks and its merge point (issue 22: a group's inbox).
    pub fn add_half_cells(&mut self, half_cells: &[u32]) {
        const BATCH: usize = 64;
        for batch in half_cells.chunks(BATCH) {
            let (mut at, mut between) = ([0u32; BATCH], [0u32; BATCH]);
            let (mut ats, mut betweens) = (0, 0);
            for &half_cell in batch {
                // Without a branch: a column's values may fall at and between points.
                let odd = (half_cell & 1) as usize;
                at[ats] = half_cell / 2;
                between[betweens] = half_cell / 2;
                ats += 1 - odd;
                betweens += odd;
            }
            if ats > 0 {
                self.at.add_cells(&at[..ats]);
            }
            if betweens > 0 {
                self.between.add_cells(&between[..betweens]);
            }
        }
    }

    /// Whether both histograms are sparse.
    #[inline(always)]
    pub fn is_sparse(&self) -> bool {
        matches!(
            (&self.at.cells, &self.between.cells),
            (Cells::Sparse(_), Cells::Sparse(_))
        )
    }

    /// Adds every count of `other` (same grid).
    pub fn merge<B: Allocator + Clone>(&mut self, other: &GridCounts<B>) {
        self.at.merge(&other.at);
        self.between.merge(&other.between);
    }

    /// The number of values counted.
    pub fn total(&self) -> u64 {
        self.at.total() + self.between.total()
    }

    /// K: grid points 0..=K.
    pub fn grid_size(&self) -> u32 {
        self.at.grid_size()
    }

    /// The occupied places as (half cell, count), by half cell ([`Place::half_cell`]).
    pub fn iter_occupied(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.iter_occupied_from(0)
    }

    /// [`GridCounts::iter_occupied`] from grid point `point` on: the places at it and
    /// after it.
    pub(super) fn iter_occupied_from(&self, point: u32) -> impl Iterator<Item = (u64, u64)> + '_ {
        let at = self.at.iter_occupied_from(point);
        let mut at = at.map(|(j, n)| (Place::At(j).half_cell(), n)).peekable();
        let between = self.between.iter_occupied_from(point);
        let mut between = between
            .map(|(j, n)| (Place::Between(j).half_cell(), n))
            .peekable();
        std::iter::from_fn(move || match (at.peek(), between.peek()) {
            (Some(a), Some(b)) if a.0 < b.0 => at.next(),
            (_, Some(_)) => between.next(),
            (Some(_), None) => at.next(),
            (None, None) => None,
        })
    }

    /// The values at each block of grid points: entry b counts the places at points
    /// b·block ..= b·block + block − 1 (both histograms); K / block + 1 entries.
    pub(super) fn block_counts(&self, block: u32) -> Vec<u64> {
        let mut counts = vec![0; (self.grid_size() / block) as usize + 1];
        self.at.add_block_counts(block, &mut counts);
        self.between.add_block_counts(block, &mut counts);
        counts
    }

    /// [`GridCounts::iter_occupied`] as a list when both histograms are sparse (at most a
    /// sixteenth of the grid each); None when one is dense.
    pub fn sparse_occupied(&self) -> Option<Vec<(u64, u64)>> {
        let (at, between) = self.sparse()?;
        // Both histograms' pending cells as half cells (below 2^26: K ≤ 2^24), sorted
        // once together, then merged with their sorted counts. A copy on the Rust heap:
        // a final function must not change the state.
        let mut pending: AllocVec<u32, Global> =
            AllocVec::with_capacity_in(at.pending.len() + between.pending.len(), Global);
        pending.extend(at.pending.iter().map(|&j| 2 * j));
        pending.extend(between.pending.iter().map(|&j| 2 * j + 1));
        Some(Self::listed(pending, at, between, 0..u32::MAX))
    }

    /// Both histograms when both are sparse.
    fn sparse(&self) -> Option<(&SparseCells<A>, &SparseCells<A>)> {
        match (&self.at.cells, &self.between.cells) {
            (Cells::Sparse(at), Cells::Sparse(between)) => {
                debug_assert!(self.grid_size() <= 1 << 24, "half cells fit in u32");
                Some((at, between))
            }
            _ => None,
        }
    }

    /// The places by half cell within `half_cells`: `pending` (those half cells of the
    /// pending cells, in any order) sorted and counted, merged with the sorted counts.
    fn listed(
        mut pending: AllocVec<u32, Global>,
        at: &SparseCells<A>,
        between: &SparseCells<A>,
        half_cells: std::ops::Range<u32>,
    ) -> Vec<(u64, u64)> {
        sort_cells(&mut pending);
        let mut listed = Vec::with_capacity(pending.len());
        if at.sorted.is_empty() && between.sorted.is_empty() {
            // No merge yet (a group of at most PENDING values, or of distinct cells that
            // waited): its pending cells are all.
            for &half_cell in &pending {
                match listed.last_mut() {
                    Some((last, count)) if *last == half_cell as u64 => *count += 1,
                    _ => listed.push((half_cell as u64, 1)),
                }
            }
            return listed;
        }
        let within = |(half_cell, _): &(u32, u64)| half_cells.contains(half_cell);
        let sorted = merge_join(
            at.sorted
                .iter()
                .map(|&(j, n)| (2 * j, n as u64))
                .filter(within),
            between
                .sorted
                .iter()
                .map(|&(j, n)| (2 * j + 1, n as u64))
                .filter(within),
        );
        let incoming = pending
            .chunk_by(|a, b| a == b)
            .map(|run| (run[0], run.len() as u64));
        listed.extend(merge_join(sorted, incoming).map(|(half_cell, n)| (half_cell as u64, n)));
        listed
    }

    /// The places of the values ranked about `ranks.0` to `ranks.1` (from 0, in the
    /// order of their places), listed as [`GridCounts::sparse_occupied`] lists them all,
    /// when both histograms are sparse: a draw near the crossing reads no other place
    /// (draw.rs, sample_quantile). The window holds at least those ranks, whole places
    /// and rounded out to buckets of about four values; the values before and after it
    /// are counted. A median of 1,000 float values at ε = 1 on 2^20 points lists about 155
    /// of them (142 ranks): the sort of all 1,000 took 4 of a draw's 7 µs (issue 22).
    pub fn sparse_window(&self, ranks: (u64, u64)) -> Option<Window> {
        let (at, between) = self.sparse()?;
        let total = self.total();
        // Half cells below 2K + 2, in buckets of 2^shift half cells: about total / 4 of
        // them (at most 4,096), so that a uniform column puts about 4 values in each.
        let top_half_cell = 2 * self.grid_size() + 1;
        let width = (top_half_cell as u64 + 1).div_ceil((total / 4).clamp(16, 4096));
        let shift = u64::BITS - (width - 1).leading_zeros(); // 2^shift ≥ width
        let mut buckets = vec![0u64; (top_half_cell >> shift) as usize + 1];
        // The pending cells as half cells, in a copy the window is then kept in (a final
        // function must not change the state).
        let mut pending: AllocVec<u32, Global> =
            AllocVec::with_capacity_in(at.pending.len() + between.pending.len(), Global);
        pending.extend(at.pending.iter().map(|&j| 2 * j));
        pending.extend(between.pending.iter().map(|&j| 2 * j + 1));
        for &half_cell in pending.iter() {
            buckets[(half_cell >> shift) as usize] += 1;
        }
        for (sparse, odd) in [(at, 0), (between, 1)] {
            for &(j, n) in &sparse.sorted {
                buckets[((2 * j + odd) >> shift) as usize] += n as u64;
            }
        }
        // The first bucket that holds rank ranks.0, and the first from it on whose end
        // reaches rank ranks.1 (or the last).
        let (mut before, mut first) = (0, buckets.len());
        for (b, &n) in buckets.iter().enumerate() {
            if before + n > ranks.0 {
                first = b;
                break;
            }
            before += n;
        }
        let mut through = before;
        let mut end = first;
        while end < buckets.len() {
            through += buckets[end];
            end += 1;
            if through >= ranks.1 {
                break;
            }
        }
        let half_cells =
            (first as u32) << shift..((end as u64) << shift).min(u32::MAX as u64) as u32;
        // The pending cells in the window, kept in place, and the last half cell before
        // it (plus one: 0 for none). Without branches: which side of the window a value
        // falls on is a coin toss the branch predictor loses (it cost 3 of a window's 6
        // µs for a group of 1,000).
        let mut last_before_plus_one = 0;
        let mut kept = 0;
        for i in 0..pending.len() {
            let half_cell = pending[i];
            let before = half_cell < half_cells.start;
            last_before_plus_one = last_before_plus_one.max((half_cell + 1) * before as u32);
            pending[kept] = half_cell;
            kept += (!before && half_cell < half_cells.end) as usize;
        }
        pending.truncate(kept);
        let mut last_before = last_before_plus_one.checked_sub(1);
        for (sparse, odd) in [(at, 0), (between, 1)] {
            let sorted_before = sparse
                .sorted
                .iter()
                .map(|&(j, _)| 2 * j + odd)
                .take_while(|&half_cell| half_cell < half_cells.start);
            last_before = last_before.max(sorted_before.last());
        }
        let occupied = Self::listed(pending, at, between, half_cells);
        debug_assert_eq!(
            occupied.iter().map(|&(_, n)| n).sum::<u64>(),
            through - before
        );
        Some(Window {
            occupied,
            before,
            after: total - through,
            last_before: last_before.map(|half_cell| half_cell as u64),
        })
    }

    /// [`GridCounts::iter_occupied`] as a list.
    #[cfg(test)]
    pub fn occupied(&self) -> Vec<(u64, u64)> {
        self.iter_occupied().collect()
    }

    /// Both histograms' encodings, each after its length.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        self.write_bytes(&mut bytes);
        bytes
    }

    /// [`GridCounts::to_bytes`] appended to `bytes`, each length written in place once
    /// its histogram is (no copy of either).
    pub fn write_bytes(&self, bytes: &mut Vec<u8>) {
        for histogram in [&self.at, &self.between] {
            let length_at = bytes.len();
            bytes.extend_from_slice(&0u64.to_le_bytes());
            histogram.write_bytes(bytes);
            let length = (bytes.len() - length_at - 8) as u64;
            bytes[length_at..length_at + 8].copy_from_slice(&length.to_le_bytes());
        }
    }

    /// The bytes [`GridCounts::to_bytes`] would write for a sparse state: an upper bound
    /// to reserve (a dense one writes more, and the vector grows).
    pub fn sparse_bytes_bound(&self) -> usize {
        let histogram = |h: &Histogram<A>| match &h.cells {
            Cells::Sparse(sparse) => {
                8 + 1 + 8 + 12 * sparse.sorted.len() + 4 * sparse.pending.len()
            }
            Cells::Dense(_) => 0,
        };
        histogram(&self.at) + histogram(&self.between)
    }

    /// Counts from [`GridCounts::to_bytes`] of the same grid. Panics on bytes it did not
    /// write.
    pub fn from_bytes(grid_size: u32, bytes: &[u8], allocator: A) -> Self {
        let mut reader = Reader(bytes);
        let mut histogram = |size: u32| {
            let length = reader.u64() as usize;
            Histogram::from_bytes(size, reader.take(length), allocator.clone())
        };
        let at = histogram(grid_size);
        let between = histogram(grid_size.saturating_sub(1));
        Self { at, between }
    }
}

/// The places a draw lists near its crossing ([`GridCounts::sparse_window`]).
#[derive(Debug)]
pub struct Window {
    /// The places of the window by half cell ([`Place::half_cell`]) and their counts.
    pub occupied: Vec<(u64, u64)>,
    /// The values before the window's places, and after them.
    pub before: u64,
    pub after: u64,
    /// The last occupied half cell before the window, if any.
    pub last_before: Option<u64>,
}

/// Reads little-endian fields of bytes a state wrote ([`Histogram::to_bytes`], and the
/// SQL layer's parameters before them). Panics past their end: only bytes our serial
/// functions wrote are read.
pub struct Reader<'a>(pub &'a [u8]);

impl<'a> Reader<'a> {
    pub fn take(&mut self, length: usize) -> &'a [u8] {
        let (taken, rest) = self.0.split_at(length);
        self.0 = rest;
        taken
    }

    pub fn u8(&mut self) -> u8 {
        self.take(1)[0]
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().expect("4 bytes"))
    }

    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().expect("8 bytes"))
    }

    pub fn f64(&mut self) -> f64 {
        f64::from_bits(self.u64())
    }

    /// A u32 count of items of `width` bytes each that follow: panics if they would run
    /// past the end, before anything is sized by it (a count from bytes we did not write
    /// must not size a vector: a failed malloc aborts the backend).
    pub fn count(&mut self, width: usize) -> usize {
        let count = self.u32() as usize;
        assert!(
            count.saturating_mul(width) <= self.0.len(),
            "a count past the end of the bytes"
        );
        count
    }

    /// What is left.
    pub fn rest(&self) -> &'a [u8] {
        self.0
    }
}
