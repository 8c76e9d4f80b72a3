//! dp_top_k (known candidates) and dp_top_k_unknown_domain (items from the data).
//!
//! Same state, combine and parallel machinery as dp_argmax (item_scores.rs, aggregate.rs);
//! only the final functions differ. Their forms are described in forms.rs.

use super::forms::{DP_TOP_K, DP_TOP_K_UNKNOWN_DOMAIN};
use super::guc;
use super::item_scores::{final_function, selection_transition, ItemScores};
use super::items::StoredItem;
use crate::mechanisms::rng;
use crate::mechanisms::scores::ItemScore;
use crate::mechanisms::top_k::{limited_domain_top_k, one_shot_top_k, LimitedDomain};
use pgrx::pg_sys::Datum;
use pgrx::prelude::*;

/// The items at `order` of `entries`, as an array of the item type.
fn items_array(scores: &ItemScores, entries: &[ItemScore<StoredItem>], order: &[usize]) -> Datum {
    // SAFETY: the items of a state are valid datums of its item type.
    unsafe {
        let items: Vec<Datum> = order
            .iter()
            .map(|&i| scores.item_type.spelled(entries[i].item.datum))
            .collect();
        scores.item_type.array(&items)
    }
}

/// One-shot Gumbel at temperature k/ε (in units of max_score): the ordered list has the
/// distribution of k peeling rounds of the exponential mechanism at ε/k each, so the whole
/// list is ε-DP (Durfee and Rogers 2019). NULL when there is nothing to choose from.
fn top_k(scores: &ItemScores) -> Option<Datum> {
    if scores.table.is_empty() {
        return None;
    }
    let k = scores.selection.k as usize;
    let temperature = k as f64 / scores.selection.epsilon;
    let entries = scores.entries();
    let utilities: Vec<f64> = entries.iter().map(|entry| entry.score).collect();
    let order = rng::with_generator(guc::seeding(), |rng| {
        one_shot_top_k(&utilities, k, temperature, rng)
    });
    Some(items_array(scores, &entries, &order))
}

/// The limited-domain mechanism, (ε, δ)-DP (see mechanisms::top_k). With no item at all
/// the answer is an empty array, as the mechanism's own answer on empty data.
fn unknown_domain_top_k(scores: &ItemScores) -> Option<Datum> {
    let selection = scores.selection;
    let parameters = LimitedDomain {
        k: selection.k as usize,
        k_bar: selection
            .k_bar
            .expect("the unknown-domain forms have k_bar") as usize,
        epsilon: selection.epsilon,
        delta: selection
            .delta
            .expect("the unknown-domain forms have delta"),
    };
    let entries = scores.entries();
    let utilities: Vec<f64> = entries.iter().map(|entry| entry.score).collect();
    // The items' hashes break ties among equal scores: a fixed function of the item.
    let tie_breaks: Vec<u32> = entries.iter().map(|entry| entry.hash).collect();
    let order = rng::with_generator(guc::seeding(), |rng| {
        limited_domain_top_k(&utilities, &tie_breaks, &parameters, rng)
    });
    Some(items_array(scores, &entries, &order))
}

selection_transition! {
    /// Transition function of every form of dp_top_k.
    dp_top_k_trans, pg_finfo_dp_top_k_trans, DP_TOP_K
}

crate::version_1_function_record!(pg_finfo_dp_top_k_final);

/// Final function of every form of dp_top_k.
#[pg_guard]
#[no_mangle]
pub unsafe extern "C-unwind" fn dp_top_k_final(fcinfo: pg_sys::FunctionCallInfo) -> Datum {
    // SAFETY: PostgreSQL calls it as the final function of dp_top_k (aggregates.sql).
    unsafe { final_function(fcinfo, &DP_TOP_K, top_k) }
}

selection_transition! {
    /// Transition function of every form of dp_top_k_unknown_domain.
    dp_top_k_unknown_domain_trans,
    pg_finfo_dp_top_k_unknown_domain_trans,
    DP_TOP_K_UNKNOWN_DOMAIN
}

crate::version_1_function_record!(pg_finfo_dp_top_k_unknown_domain_final);

/// Final function of every form of dp_top_k_unknown_domain.
#[pg_guard]
#[no_mangle]
pub unsafe extern "C-unwind" fn dp_top_k_unknown_domain_final(
    fcinfo: pg_sys::FunctionCallInfo,
) -> Datum {
    // SAFETY: PostgreSQL calls it as the final function of dp_top_k_unknown_domain.
    unsafe { final_function(fcinfo, &DP_TOP_K_UNKNOWN_DOMAIN, unknown_domain_top_k) }
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use crate::extension::sql_testing::{
        assert_parallel, column, counts_of, draws_table, error_of, force_parallel_plans,
        frequencies, run, scored_table, DRAWS,
    };
    use crate::mechanisms::top_k::LimitedDomain;
    use crate::testing::{
        assert_matches_distribution, ordered_lists, p_value, peeling_probability, SIGNIFICANCE,
    };
    use pgrx::prelude::*;

    /// The ordered lists of `k` out of `items`, as PostgreSQL prints text arrays.
    fn list_names(items: &[&str], k: usize) -> (Vec<Vec<usize>>, Vec<String>) {
        let lists = ordered_lists(items.len(), k);
        let names = lists
            .iter()
            .map(|l| {
                format!(
                    "{{{}}}",
                    l.iter().map(|&i| items[i]).collect::<Vec<_>>().join(",")
                )
            })
            .collect();
        (lists, names)
    }

    /// Frequencies of the ordered lists `query` returns against exact peeling at
    /// temperature k/ε, and against peeling at 1/ε (the k-fold budget), which must be
    /// rejected.
    fn check_lists(query: &str, items: &[&str], utilities: &[f64], k: usize, epsilon: f64) {
        let (lists, names) = list_names(items, k.min(items.len()));
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let counts = counts_of(&frequencies(query), &names);
        assert_eq!(counts.iter().sum::<u64>(), DRAWS as u64);
        let exact: Vec<f64> = lists
            .iter()
            .map(|l| peeling_probability(utilities, l, k as f64 / epsilon))
            .collect();
        let too_sharp: Vec<f64> = lists
            .iter()
            .map(|l| peeling_probability(utilities, l, 1.0 / epsilon))
            .collect();
        assert_matches_distribution(&counts, &exact, &too_sharp);
    }

    const TOP_2: &str = "SELECT dp_top_k(item, score, 2, 2.0, 2) FROM draws GROUP BY g";

    #[pg_test]
    fn top_k_lists_follow_peeling_at_epsilon_over_k() {
        draws_table();
        check_lists(TOP_2, &["a", "b", "c", "d"], &[0.0, 1.0, 2.0, 3.0], 2, 2.0);
    }

    #[pg_test]
    fn top_k_parallel_plan_gives_the_same_distribution() {
        draws_table();
        force_parallel_plans();
        assert_parallel(TOP_2);
        check_lists(TOP_2, &["a", "b", "c", "d"], &[0.0, 1.0, 2.0, 3.0], 2, 2.0);
    }

    #[pg_test]
    fn top_k_with_fewer_items_than_k_returns_all_in_noisy_order() {
        draws_table();
        check_lists(
            "SELECT dp_top_k(item, score, 10, 2.0, 2) FROM draws WHERE item <> 'a' GROUP BY g",
            &["b", "c", "d"],
            &[1.0, 2.0, 3.0],
            10,
            2.0,
        );
    }

    #[pg_test]
    fn top_k_candidates_restrict_the_answers() {
        draws_table();
        run(&[&format!(
            "INSERT INTO draws SELECT g, 'intruder', 2 FROM generate_series(1, {DRAWS}) g, generate_series(1, 50)"
        )]);
        check_lists(
            "SELECT dp_top_k(item, score, 2, 2.0, 2, ARRAY['x', 'b', 'd']) FROM draws GROUP BY g",
            &["x", "b", "d"],
            &[0.0, 1.0, 3.0],
            2,
            2.0,
        );
    }

    #[pg_test]
    fn top_k_with_candidates_and_no_rows_lists_k_candidates_uniformly() {
        scored_table();
        let (_, names) = list_names(&["p", "q", "r"], 2);
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let counts = counts_of(
            &frequencies(
                "SELECT (SELECT dp_top_k(item, score, 2, 1.0, 1, '{p,q,r}') FROM scored WHERE score < -g)
                   FROM generate_series(1, 6000) g",
            ),
            &names,
        );
        let uniform = [1.0 / 6.0; 6];
        let skewed = [0.5, 0.1, 0.1, 0.1, 0.1, 0.1];
        assert_matches_distribution(&counts, &uniform, &skewed);
    }

    #[pg_test]
    fn top_k_no_rows() {
        scored_table();
        let answers = column(
            "SELECT dp_top_k(item, score, 2, 1.0)::text FROM scored WHERE false
             UNION ALL SELECT dp_top_k(item, score, 2, 1.0, 2)::text FROM scored WHERE false
             UNION ALL SELECT dp_top_k(item, score, 2, 1.0, 2, '{}')::text FROM scored
             UNION ALL SELECT dp_top_k(item, score, 2, 1.0, 2, '{z}')::text FROM scored WHERE false
             UNION ALL SELECT dp_top_k_unknown_domain(item, score, 2, 1.0, 0.01)::text FROM scored WHERE false
             UNION ALL SELECT dp_top_k_unknown_domain(item, score, 2, 1.0, 0.01, 1, 5)::text FROM scored WHERE false",
        );
        // NULL as dp_argmax; the candidates when they are known; the unknown-domain
        // mechanism's own answer on empty data is the empty list (NULL would tell the
        // input was empty). A parameter of the rows is refused, with no row as with rows.
        assert_eq!(answers, ["NULL", "NULL", "NULL", "{z}", "{}", "{}"]);
        assert_eq!(
            error_of("SELECT dp_top_k_unknown_domain(item, score, 2, 1.0, 1e-6, score) FROM scored WHERE false"),
            "22023: max_score must be a constant or a parameter of the statement, got an expression of the rows"
        );
    }

    #[pg_test]
    fn top_k_invalid_parameters_raise_22023() {
        scored_table();
        let cases = [
            (
                "dp_top_k(item, score, 0, 1.0)",
                "k must be at least 1, got 0",
            ),
            (
                "dp_top_k(item, score, -3, 1.0, 2)",
                "k must be at least 1, got -3",
            ),
            (
                "dp_top_k(item, score, NULL, 1.0, 2, '{a}')",
                "k must be at least 1, got NULL",
            ),
            (
                "dp_top_k(item, score, 2, 0)",
                "epsilon must be finite and greater than 0, got 0",
            ),
            (
                "dp_top_k(item, score, 2, 1, 'NaN')",
                "max_score must be finite and greater than 0, got NaN",
            ),
            (
                "dp_top_k(item, score, 2, 1, 1, NULL)",
                "candidates must be an array (an empty array gives NULL), got NULL",
            ),
            (
                "dp_top_k_unknown_domain(item, score, 0, 1.0, 0.1)",
                "k must be at least 1, got 0",
            ),
            (
                "dp_top_k_unknown_domain(item, score, 2, 1.0, NULL)",
                "delta must be greater than 0 and less than 1, got NULL",
            ),
            (
                "dp_top_k_unknown_domain(item, score, 2, 1.0, 0)",
                "delta must be greater than 0 and less than 1, got 0",
            ),
            (
                "dp_top_k_unknown_domain(item, score, 2, 1.0, 1)",
                "delta must be greater than 0 and less than 1, got 1",
            ),
            (
                "dp_top_k_unknown_domain(item, score, 2, 1.0, -0.5, 1)",
                "delta must be greater than 0 and less than 1, got -0.5",
            ),
            (
                "dp_top_k_unknown_domain(item, score, 2, 1.0, 'NaN', 1, 3)",
                "delta must be greater than 0 and less than 1, got NaN",
            ),
            (
                "dp_top_k_unknown_domain(item, score, 2, 1.0, 0.1, 1, 1)",
                "k_bar must be at least k (2), got 1",
            ),
            (
                "dp_top_k_unknown_domain(item, score, 2, 1.0, 0.1, 1, NULL)",
                "k_bar must be at least k (2), got NULL",
            ),
            (
                "dp_top_k_unknown_domain(item, score, 2, 'Infinity', 0.1)",
                "epsilon must be finite and greater than 0, got Infinity",
            ),
        ];
        for (call, message) in cases {
            for filter in ["", "WHERE false"] {
                assert_eq!(
                    error_of(&format!("SELECT {call} FROM scored {filter}")),
                    format!("22023: {message}"),
                    "{call} {filter}"
                );
            }
        }
        assert_eq!(
            error_of(
                "SELECT dp_top_k(item, 1, k, 1.0) FROM (VALUES ('a', 1), ('b', 2)) v(item, k)"
            ),
            "22023: k must be a constant or a parameter of the statement, got an expression of the rows"
        );
        assert_eq!(
            error_of("SELECT dp_top_k_unknown_domain(item, 1, 1, 1.0, d) FROM (VALUES ('a', 0.1), ('b', 0.2)) v(item, d)"),
            "22023: delta must be a constant or a parameter of the statement, got an expression of the rows"
        );
    }

    /// A lonely item (one row, nothing else: the lowest possible threshold) at δ = 0.05:
    /// its frequency fits the exact probability, stays below the bound δ_t·e^{ε/k} < δ,
    /// and the threshold without our (1 + e^ε) factor would exceed the bound.
    #[pg_test]
    fn unknown_domain_rarely_returns_a_single_row_item() {
        run(&[
            "SET pg_exp_mech.seed = 5",
            "CREATE TABLE lonely AS SELECT g, 'lonely'::text AS item FROM generate_series(1, 20000) g",
        ]);
        let frequencies = frequencies(
            "SELECT dp_top_k_unknown_domain(item, 1, 1, 1.0, 0.05)::text FROM lonely GROUP BY g",
        );
        let counts = counts_of(&frequencies, &["{lonely}", "{}"]);
        let parameters = LimitedDomain {
            k: 1,
            k_bar: 1,
            epsilon: 1.0,
            delta: 0.05,
        };
        let exact = 1.0 / (1.0 + (parameters.threshold_offset() - 1.0).exp());
        assert!(
            p_value(&counts, &[exact, 1.0 - exact]) >= SIGNIFICANCE,
            "{counts:?} vs {exact}"
        );
        let frequency = counts[0] as f64 / DRAWS as f64;
        let bound = parameters.single_row_bound();
        assert!(frequency < bound && bound < 0.05, "{frequency} vs {bound}");
        let naive: f64 = 1.0 / (1.0 + (1.0f64 / 0.05).ln().exp() * (-1.0f64).exp());
        assert!(p_value(&counts, &[naive, 1.0 - naive]) < SIGNIFICANCE);
    }

    #[pg_test]
    fn unknown_domain_returns_an_item_far_ahead_nearly_always() {
        run(&[
            "SET pg_exp_mech.seed = 6",
            "CREATE TABLE skewed(item text)",
            "INSERT INTO skewed SELECT 'star' FROM generate_series(1, 1000)",
            "INSERT INTO skewed VALUES ('x'), ('x'), ('y')",
            "CREATE TABLE skewed_draws AS SELECT g, item FROM skewed, generate_series(1, 2000) g",
            "ANALYZE skewed_draws",
        ]);
        force_parallel_plans();
        let query = "SELECT dp_top_k_unknown_domain(item, 1, 2, 1.0, 1e-6)::text FROM skewed_draws GROUP BY g";
        assert_parallel(query);
        // τ = 2 and ⊥ = 1 + 2·ln((1 + e)/1e-6) ≈ 31.3: 'star' (1000) always clears it,
        // 'x' (2) with probability about e^-14.6.
        let answers = frequencies(query);
        assert_eq!(answers.get("{star}"), Some(&2000), "{answers:?}");
    }

    /// Items of every length around the inline keys (1 to 40 bytes), one compressed in
    /// place and one stored out of line, each counted as often as its rank: the rows
    /// (1-byte headers, compressed, external) and the candidates (4-byte-header constants)
    /// must find the same items, serially and in a parallel plan, whose workers' states
    /// are serialized and merged. At ε = 10^9 the order of the top k is the order of the
    /// counts.
    #[pg_test]
    fn items_of_every_storage_are_one_item_each() {
        let mut word = 0x9E37_79B9_7F4A_7C15u64;
        let noise: String = (0..3000)
            .map(|_| {
                word = word
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                char::from(b'a' + (word >> 59) as u8 % 26)
            })
            .collect();
        let compressible = "y".repeat(5000);
        let mut items: Vec<String> = (1..=40).map(|length| "a".repeat(length)).collect();
        items.push(compressible.clone());
        items.push(noise.clone());
        run(&[
            "CREATE TABLE stored(item text)",
            "INSERT INTO stored SELECT repeat('a', length) FROM generate_series(1, 40) length,
                 generate_series(1, length)",
            &format!("INSERT INTO stored SELECT '{compressible}' FROM generate_series(1, 41)"),
            &format!("INSERT INTO stored SELECT '{noise}' FROM generate_series(1, 42)"),
        ]);
        let forms = column(
            "SELECT format('%s %s', pg_column_compression(item) IS NOT NULL,
                           pg_column_size(item) < 1000)
               FROM stored WHERE length(item) > 40 GROUP BY 1 ORDER BY 1",
        );
        assert_eq!(
            forms.len(),
            2,
            "one compressed in place, one out of line: {forms:?}"
        );
        let lengths =
            |query: &str| column(&format!("SELECT length(x)::text FROM unnest(({query})) x"));
        let expected: Vec<String> = [3000, 5000]
            .into_iter()
            .chain((1..=40).rev())
            .map(|length: usize| length.to_string())
            .collect();
        let candidates = format!(
            "ARRAY[{}]",
            items
                .iter()
                .map(|item| format!("'{item}'"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let open = "SELECT dp_top_k(item, 1, 42, 1e9) FROM stored";
        let listed = format!("SELECT dp_top_k(item, 1, 42, 1e9, 1, {candidates}) FROM stored");
        for query in [open, &listed] {
            assert_eq!(lengths(query), expected, "{query}");
        }
        force_parallel_plans();
        for query in [open, &listed] {
            assert_parallel(query);
            assert_eq!(lengths(query), expected, "in parallel: {query}");
        }
    }
}
