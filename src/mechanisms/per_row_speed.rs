//! The per-row paths of dp_quantile and dp_argmax in pure Rust, timed (issue 22): where
//! each nanosecond of a row goes, without PostgreSQL around it. Not a test of correctness
//! (the exact-law tests are); run it with
//!
//!     cargo test --release --features "pg15 pg_test" --no-default-features --lib \
//!         -- --ignored --nocapture per_row_speed
//!
//! It prints nanoseconds per row (the median of 5 runs) for locating and counting float
//! and integer values in one group, and in 10,000 groups of 1,000 values and of 200 (rows
//! arriving round-robin, as `i % 10000` groups do in `make bench`, and in a random order)
//! and in 9,000 groups of
//! 1,100 (counted and listed), then the cost per group of a merge (a parallel plan's
//! combine) and of a draw (over 1,000 values and over 200, with what the latter reads:
//! its listing, its runs, its words of ChaCha20), and a parallel plan's partial states
//! (thirds of groups of 200) serialized, deserialized and merged.
//! `argmax_per_row_speed` does the same for dp_argmax's hash and score table.

use super::quantile::{
    runs_between, sample_quantile, window_ranks, Grid, GridCounts, IntegerGrid, Place,
};
use rand::{Rng, RngCore, SeedableRng};
use std::hint::black_box;
use std::time::Instant;

const ROWS: usize = 10_000_000;
const GROUPS: usize = 10_000;
const K: u32 = 1 << 20;

/// The median of 5 timings of `run`, in nanoseconds per `per` units.
fn median_ns(per: usize, mut run: impl FnMut()) -> f64 {
    let mut times: Vec<f64> = (0..5)
        .map(|_| {
            let started = Instant::now();
            run();
            started.elapsed().as_nanos() as f64 / per as f64
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[2]
}

/// Places an inbox holds (extension/quantile/inbox.rs: INBOX_CELLS).
const INBOX_CELLS: usize = 62;

/// Groups counted as the transition counts them (extension/quantile/inbox.rs): a row
/// writes its place in its group's inbox at the slot its group's datum names (the datum
/// kept apart, as PostgreSQL keeps it in its own per-group array); a full inbox is
/// counted into the group's counts at once.
struct Inboxed {
    slots: Vec<usize>,
    inboxes: Vec<[u32; INBOX_CELLS]>,
    counts: Vec<GridCounts>,
}

impl Inboxed {
    fn new(groups: usize, grid_size: u32) -> Self {
        Self {
            slots: vec![0; groups],
            inboxes: vec![[0; INBOX_CELLS]; groups],
            counts: (0..groups).map(|_| GridCounts::new(grid_size)).collect(),
        }
    }

    #[inline(always)]
    fn count_row(&mut self, group: usize, place: Place) {
        let slot = self.slots[group];
        if slot == INBOX_CELLS {
            self.counts[group].add_half_cells(&self.inboxes[group]);
            self.inboxes[group][0] = place.half_cell() as u32;
            self.slots[group] = 1;
        } else {
            self.inboxes[group][slot] = place.half_cell() as u32;
            self.slots[group] = slot + 1;
        }
    }

    /// Every group's counts, its inbox counted first (as a final function does).
    fn counted(mut self) -> Vec<GridCounts> {
        for (group, counts) in self.counts.iter_mut().enumerate() {
            counts.add_half_cells(&self.inboxes[group][..self.slots[group]]);
        }
        self.counts
    }
}

#[test]
#[ignore]
fn per_row_speed() {
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(22);
    let floats: Vec<f64> = (0..ROWS).map(|_| rng.random::<f64>() * 1e6).collect();
    let integers: Vec<i64> = (0..ROWS).map(|_| rng.random_range(0..=1_000_000)).collect();
    let grid = Grid {
        lo: 0.0,
        hi: 1e6,
        size: K,
    };
    let locator = grid.locator();
    let integer_grid = IntegerGrid::new(0, 1_000_000, K);

    let float_one = median_ns(ROWS, || {
        let mut group = Inboxed::new(1, K);
        for &value in &floats {
            group.count_row(0, locator.locate(value));
        }
        black_box(group.counted()[0].total());
    });
    let locate_only = median_ns(ROWS, || {
        let mut sum = 0u64;
        for &value in &floats {
            sum += locator.locate(value).half_cell();
        }
        black_box(sum);
    });
    let integer_one = median_ns(ROWS, || {
        let mut group = Inboxed::new(1, integer_grid.size);
        for &value in &integers {
            group.count_row(0, integer_grid.locate(value));
        }
        black_box(group.counted()[0].total());
    });
    let float_grouped = median_ns(ROWS, || {
        let mut groups = Inboxed::new(GROUPS, K);
        for (i, &value) in floats.iter().enumerate() {
            groups.count_row(i % GROUPS, locator.locate(value));
        }
        black_box(groups.counted().len());
    });
    // Groups in a random order (`floor(random() * 10000)`): no group's inbox line stays
    // in the cache between its rows.
    let random_groups: Vec<u16> = (0..ROWS)
        .map(|_| rng.random_range(0..GROUPS as u16))
        .collect();
    let float_grouped_random = median_ns(ROWS, || {
        let mut groups = Inboxed::new(GROUPS, K);
        for (&group, &value) in random_groups.iter().zip(&floats) {
            groups.count_row(group as usize, locator.locate(value));
        }
        black_box(groups.counted().len());
    });
    let float_grouped_small = median_ns(ROWS / 5, || {
        let mut groups = Inboxed::new(GROUPS, K);
        for (i, &value) in floats[..ROWS / 5].iter().enumerate() {
            groups.count_row(i % GROUPS, locator.locate(value));
        }
        black_box(groups.counted().len());
    });
    let integer_grouped = median_ns(ROWS, || {
        let mut groups = Inboxed::new(GROUPS, integer_grid.size);
        for (i, &value) in integers.iter().enumerate() {
            groups.count_row(i % GROUPS, integer_grid.locate(value));
        }
        black_box(groups.counted().len());
    });
    // Groups of 1,100 float values, past the 1,024 pending cells at which repeated
    // values merge (distinct ones wait pending, SparseCells), counted and listed.
    let (past_merge, past_merge_groups) = (9_000 * 1_100, 9_000);
    let float_past_merge = median_ns(past_merge, || {
        let mut groups = Inboxed::new(past_merge_groups, K);
        for (i, &value) in floats[..past_merge].iter().enumerate() {
            groups.count_row(i % past_merge_groups, locator.locate(value));
        }
        (groups.counted().iter()).for_each(|counts| drop(black_box(counts.sparse_occupied())));
    });
    // A draw and a merge per group of 1,000 float values; a draw per group of 200.
    let groups_of = |values: &[f64]| {
        let mut groups: Vec<GridCounts> = (0..GROUPS).map(|_| GridCounts::new(K)).collect();
        for (i, &value) in values.iter().enumerate() {
            groups[i % GROUPS].add(locator.locate(value));
        }
        groups
    };
    let mut draw_costs = |groups: &[GridCounts]| {
        let draw = median_ns(GROUPS, || {
            let sum: u64 = (groups.iter())
                .map(|counts| sample_quantile(counts, 0.5, 1.0, &mut rng) as u64)
                .sum();
            black_box(sum);
        });
        // What the draw lists: the places near the crossing (a window) when they are few
        // against the group's values, all of them otherwise.
        let listing = median_ns(GROUPS, || {
            groups
                .iter()
                .for_each(|counts| match window_ranks(counts.total(), K, 0.5, 1.0) {
                    Some(ranks) => drop(black_box(counts.sparse_window(ranks))),
                    None => drop(black_box(counts.sparse_occupied())),
                });
        });
        (draw, listing)
    };
    let groups = groups_of(&floats);
    let (draw, listing) = draw_costs(&groups);
    let small_groups = groups_of(&floats[..ROWS / 5]);
    let (small_draw, small_listing) = draw_costs(&small_groups);
    // The same draws in a random order of the groups, as a hash aggregation finalizes
    // them (its table's order, not the order its groups were made in).
    let mut order: Vec<usize> = (0..GROUPS).collect();
    rand::seq::SliceRandom::shuffle(order.as_mut_slice(), &mut rng);
    let small_draw_shuffled = median_ns(GROUPS, || {
        let sum: u64 = (order.iter())
            .map(|&group| sample_quantile(&small_groups[group], 0.5, 1.0, &mut rng) as u64)
            .sum();
        black_box(sum);
    });
    // What else a draw from 200 values reads and draws: every run of equal utility over
    // its listed places, and a word of ChaCha20 for each of about 100 contenders.
    let listed: Vec<Vec<(u64, u64)>> = (small_groups.iter())
        .map(|counts| counts.sparse_occupied().expect("200 values stay sparse"))
        .collect();
    let small_runs = median_ns(GROUPS, || {
        for (counts, places) in small_groups.iter().zip(&listed) {
            let runs = runs_between(places.iter().copied(), counts.total(), 0, K, 0.5);
            black_box(runs.count());
        }
    });
    let words = median_ns(GROUPS, || {
        for _ in 0..GROUPS * 100 {
            black_box(rng.next_u64());
        }
    });
    let merge = median_ns(GROUPS / 2, || {
        for pair in groups.chunks(2) {
            let mut merged = pair[0].clone();
            merged.merge(&pair[1]);
            black_box(merged.total());
        }
    });
    // A parallel plan's partial states: three processes' thirds of each group of 200
    // (about 67 values each), each serialized in its process, then deserialized and
    // merged into its group in the leader.
    let partial_counts: Vec<GridCounts> = (0..3 * GROUPS)
        .map(|part| {
            let mut counts = GridCounts::new(K);
            let rows = floats[..ROWS / 5].iter().skip(part).step_by(3 * GROUPS);
            rows.for_each(|&value| counts.add(locator.locate(value)));
            counts
        })
        .collect();
    let partials: Vec<Vec<u8>> = partial_counts.iter().map(GridCounts::to_bytes).collect();
    let serialize = median_ns(3 * GROUPS, || {
        partial_counts
            .iter()
            .for_each(|part| drop(black_box(part.to_bytes())));
    });
    let combine = median_ns(GROUPS, || {
        // Part p holds the rows of group p mod GROUPS (a third of them each).
        for group in 0..GROUPS {
            let mut merged = GridCounts::new(K);
            for bytes in [group, group + GROUPS, group + 2 * GROUPS].map(|p| &partials[p]) {
                merged.merge(&GridCounts::from_bytes(
                    K,
                    bytes,
                    allocator_api2::alloc::Global,
                ));
            }
            black_box(merged.total());
        }
    });
    let mut one = GridCounts::new(K);
    for &value in &floats {
        one.add(locator.locate(value));
    }
    let one_draw = median_ns(1, || {
        black_box(sample_quantile(&one, 0.5, 1.0, &mut rng));
    });
    println!("per-row path of dp_quantile, {ROWS} rows, K = 2^20 (median of 5 runs):");
    println!(
        "  float, one group:            {float_one:6.1} ns/row (locate alone {locate_only:.1})"
    );
    println!("  integer, one group:          {integer_one:6.1} ns/row");
    println!("  float, {GROUPS} groups:       {float_grouped:6.1} ns/row");
    println!("  float, {GROUPS} groups, random order: {float_grouped_random:5.1} ns/row");
    println!("  float, {GROUPS} groups of 200: {float_grouped_small:5.1} ns/row");
    println!("  integer, {GROUPS} groups:     {integer_grouped:6.1} ns/row");
    println!(
        "  float, {past_merge_groups} groups of 1,100, counted and listed: {float_past_merge:5.1} ns/row"
    );
    println!("  draw, a group of 1,000:      {:6.1} µs", draw / 1e3);
    println!(
        "    of which listing its places: {:6.1} µs (near the crossing)",
        listing / 1e3
    );
    println!(
        "  draw, a group of 200:        {:6.1} µs ({:.1} µs in a random order of the groups)",
        small_draw / 1e3,
        small_draw_shuffled / 1e3
    );
    println!(
        "    of which listing its places: {:6.1} µs",
        small_listing / 1e3
    );
    println!(
        "    every run of its places:     {:6.1} µs; 100 words of ChaCha20: {:.1} µs",
        small_runs / 1e3,
        words / 1e3
    );
    println!("  merge, two groups of 1,000:  {:6.1} µs", merge / 1e3);
    println!(
        "  a partial state of about 67 values: serialized {:5.2} µs; three deserialized and merged into their group {:5.2} µs",
        serialize / 1e3,
        combine / 1e3
    );
    println!("  draw, one group of 10^7:     {:6.1} µs", one_draw / 1e3);
}

/// The per-row path of dp_argmax in pure Rust: a key's hash (foldhash, as the SQL layer
/// hashes text) and its score table's probe, for 10^7 keys 'item-N' with N log-uniform
/// below 1,000 and below 100,000 (the Zipf-like tables of `make bench`).
#[test]
#[ignore]
fn argmax_per_row_speed() {
    use super::scores::ScoreTable;
    use std::hash::BuildHasher;
    let hasher = foldhash::fast::FixedState::with_seed(0x7067_5f65_7870_6d65);
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(22);
    for items in [1_000f64, 100_000f64] {
        let keys: Vec<String> = (0..ROWS)
            .map(|_| format!("item-{}", items.powf(rng.random::<f64>()).floor() as u64))
            .collect();
        let hash_only = median_ns(ROWS, || {
            let mut sum = 0u32;
            for key in &keys {
                sum ^= (hasher.hash_one(key.as_bytes()) >> 32) as u32;
            }
            black_box(sum);
        });
        let table = median_ns(ROWS, || {
            let mut table: ScoreTable<&str> = ScoreTable::new();
            for key in &keys {
                let hash = (hasher.hash_one(key.as_bytes()) >> 32) as u32;
                table.add(hash, 1.0, |&stored| stored == key, || key.as_str());
            }
            black_box(table.len());
        });
        println!("dp_argmax, {items} items: hash {hash_only:.1} ns/row, hash and table {table:.1}");
    }
}
