//! dp_top_k (known candidates) and dp_top_k_unknown_domain (items from the data).
//!
//! Same state, combine and parallel machinery as dp_argmax (item_scores.rs); only the
//! final functions differ.

use super::arguments::CallArguments;
use super::guc;
use super::item_scores::{final_state, Candidates, Form, ItemScores, SelectionArguments};
use crate::mechanisms::rng;
use crate::mechanisms::scores::ItemScore;
use crate::mechanisms::top_k::{limited_domain_top_k, one_shot_top_k, LimitedDomain};
use pgrx::pg_sys::Datum;
use pgrx::prelude::*;
use super::items::{ExtraArray, RawItem};
use super::item_scores::transition;
use pgrx::{AnyArray, Internal};

const TOP_K: Form = Form {
    k: Some(2),
    epsilon: 3,
    max_score: None,
    delta: None,
    k_bar: None,
    candidates: None,
};
const TOP_K_SCORED: Form = Form {
    max_score: Some(4),
    ..TOP_K
};
const TOP_K_CANDIDATES: Form = Form {
    candidates: Some(5),
    ..TOP_K_SCORED
};
const UNKNOWN_DOMAIN: Form = Form {
    delta: Some(4),
    ..TOP_K
};
const UNKNOWN_DOMAIN_SCORED: Form = Form {
    max_score: Some(5),
    ..UNKNOWN_DOMAIN
};
const UNKNOWN_DOMAIN_K_BAR: Form = Form {
    k_bar: Some(6),
    ..UNKNOWN_DOMAIN_SCORED
};

fn arguments(
    k: Option<i32>,
    epsilon: Option<f64>,
    max_score: Option<f64>,
    delta: Option<Option<f64>>,
    k_bar: Option<Option<i32>>,
) -> SelectionArguments {
    SelectionArguments {
        epsilon,
        max_score,
        k,
        delta,
        k_bar,
    }
}

/// The items at `order` of `entries`, as an array of the item type.
fn items_array(scores: &ItemScores, entries: &[&ItemScore<Datum>], order: &[usize]) -> Option<AnyArray> {
    let items: Vec<Datum> = order.iter().map(|&i| entries[i].item).collect();
    let item_type = scores.item_type;
    let array = item_type.array(&items);
    unsafe {
        AnyArray::from_polymorphic_datum(array, false, pg_sys::get_array_type(item_type.type_oid))
    }
}

/// One-shot Gumbel at temperature k/ε (in units of max_score): the ordered list has the
/// distribution of k peeling rounds of the exponential mechanism at ε/k each, so the whole
/// list is ε-DP (Durfee and Rogers 2019). NULL when there is nothing to choose from.
unsafe fn top_k_final(fcinfo: pg_sys::FunctionCallInfo, state: &Internal, form: Form) -> Option<AnyArray> {
    let scores = final_state(fcinfo, state, form, "dp_top_k")?;
    if scores.table.is_empty() {
        return None;
    }
    let k = scores.selection.k as usize;
    let temperature = k as f64 / scores.selection.epsilon;
    let entries: Vec<_> = scores.table.iter().collect();
    let utilities: Vec<f64> = entries.iter().map(|entry| entry.score).collect();
    let order = rng::with_generator(guc::seeding(), |rng| {
        one_shot_top_k(&utilities, k, temperature, rng)
    });
    items_array(&scores, &entries, &order)
}

/// The limited-domain mechanism, (ε, δ)-DP (see mechanisms::top_k). With no item at all
/// the answer is an empty array, as the mechanism's own answer on empty data.
unsafe fn unknown_domain_final(fcinfo: pg_sys::FunctionCallInfo, state: &Internal, form: Form) -> Option<AnyArray> {
    let scores = final_state(fcinfo, state, form, "dp_top_k_unknown_domain")?;
    let selection = scores.selection;
    let parameters = LimitedDomain {
        k: selection.k as usize,
        k_bar: selection.k_bar.expect("the unknown-domain forms have k_bar") as usize,
        epsilon: selection.epsilon,
        delta: selection.delta.expect("the unknown-domain forms have delta"),
    };
    let entries: Vec<_> = scores.table.iter().collect();
    let utilities: Vec<f64> = entries.iter().map(|entry| entry.score).collect();
    // The items' hashes break ties among equal scores: a fixed function of the item.
    let tie_breaks: Vec<u32> = entries.iter().map(|entry| entry.hash).collect();
    let order = rng::with_generator(guc::seeding(), |rng| {
        limited_domain_top_k(&utilities, &tie_breaks, &parameters, rng)
    });
    items_array(&scores, &entries, &order)
}

crate::version_1_function_record!(pg_finfo_dp_top_k_trans);

/// Transition function of every form of dp_top_k, told apart by their number of
/// arguments: (state, item, score, k, epsilon [, max_score [, candidates]]).
#[pg_guard]
#[no_mangle]
pub unsafe extern "C-unwind" fn dp_top_k_trans(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    let call = CallArguments::new(fcinfo);
    let max_score = if call.count() >= 6 { call.float(5) } else { Some(1.0) };
    let arguments = arguments(call.integer(3), call.float(4), max_score, None, None);
    transition(fcinfo, &call, arguments, Candidates::of_call(&call, 6))
}

crate::version_1_function_record!(pg_finfo_dp_top_k_unknown_domain_trans);

/// Transition function of every form of dp_top_k_unknown_domain, told apart by their
/// number of arguments: (state, item, score, k, epsilon, delta [, max_score [, k_bar]]).
#[pg_guard]
#[no_mangle]
pub unsafe extern "C-unwind" fn dp_top_k_unknown_domain_trans(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    let call = CallArguments::new(fcinfo);
    let max_score = if call.count() >= 7 { call.float(6) } else { Some(1.0) };
    let k_bar = (call.count() >= 8).then(|| call.integer(7));
    let arguments = arguments(call.integer(3), call.float(4), max_score, Some(call.float(5)), k_bar);
    transition(fcinfo, &call, arguments, Candidates::Open)
}

#[pg_extern(name = "dp_top_k_final", parallel_safe)]
fn dp_top_k_final_counting(
    state: Internal,
    _item: Option<RawItem>,
    _score: Option<f64>,
    _k: Option<i32>,
    _epsilon: Option<f64>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<AnyArray> {
    unsafe { top_k_final(fcinfo, &state, TOP_K) }
}

#[pg_extern(name = "dp_top_k_final", parallel_safe)]
fn dp_top_k_final_scored(
    state: Internal,
    _item: Option<RawItem>,
    _score: Option<f64>,
    _k: Option<i32>,
    _epsilon: Option<f64>,
    _max_score: Option<f64>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<AnyArray> {
    unsafe { top_k_final(fcinfo, &state, TOP_K_SCORED) }
}

#[pg_extern(name = "dp_top_k_final", parallel_safe)]
#[allow(clippy::too_many_arguments)]
fn dp_top_k_final_candidates(
    state: Internal,
    _item: Option<RawItem>,
    _score: Option<f64>,
    _k: Option<i32>,
    _epsilon: Option<f64>,
    _max_score: Option<f64>,
    _candidates: Option<ExtraArray>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<AnyArray> {
    unsafe { top_k_final(fcinfo, &state, TOP_K_CANDIDATES) }
}

#[pg_extern(name = "dp_top_k_unknown_domain_final", parallel_safe)]
#[allow(clippy::too_many_arguments)]
fn dp_top_k_unknown_domain_final_counting(
    state: Internal,
    _item: Option<RawItem>,
    _score: Option<f64>,
    _k: Option<i32>,
    _epsilon: Option<f64>,
    _delta: Option<f64>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<AnyArray> {
    unsafe { unknown_domain_final(fcinfo, &state, UNKNOWN_DOMAIN) }
}

#[pg_extern(name = "dp_top_k_unknown_domain_final", parallel_safe)]
#[allow(clippy::too_many_arguments)]
fn dp_top_k_unknown_domain_final_scored(
    state: Internal,
    _item: Option<RawItem>,
    _score: Option<f64>,
    _k: Option<i32>,
    _epsilon: Option<f64>,
    _delta: Option<f64>,
    _max_score: Option<f64>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<AnyArray> {
    unsafe { unknown_domain_final(fcinfo, &state, UNKNOWN_DOMAIN_SCORED) }
}

#[pg_extern(name = "dp_top_k_unknown_domain_final", parallel_safe)]
#[allow(clippy::too_many_arguments)]
fn dp_top_k_unknown_domain_final_k_bar(
    state: Internal,
    _item: Option<RawItem>,
    _score: Option<f64>,
    _k: Option<i32>,
    _epsilon: Option<f64>,
    _delta: Option<f64>,
    _max_score: Option<f64>,
    _k_bar: Option<i32>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<AnyArray> {
    unsafe { unknown_domain_final(fcinfo, &state, UNKNOWN_DOMAIN_K_BAR) }
}

extension_sql!(
    r#"
COMMENT ON AGGREGATE dp_top_k(anyelement, double precision, integer, double precision) IS
'Differentially private top k by count: the k items with the largest count(i) + Gumbel noise at temperature k/epsilon, best first (one-shot top-k, equal in distribution to k exponential mechanisms at epsilon/k each). The whole list is epsilon-DP for one row added or removed; the items come from the data (use the candidates form when items are private). NULL when no row.';
COMMENT ON AGGREGATE dp_top_k(anyelement, double precision, integer, double precision, double precision) IS
'Differentially private top k: scores S(i) = sum of clamp(score, 0, max_score), Gumbel noise at temperature k*max_score/epsilon added once, the k best returned best first. The whole list is epsilon-DP for one row added or removed; the items come from the data (use the candidates form when items are private). NULL when no row.';
COMMENT ON AGGREGATE dp_top_k(anyelement, double precision, integer, double precision, double precision, anyarray) IS
'Differentially private top k over a public list of candidates (listed items without rows score 0, other items are ignored). The whole list is epsilon-DP for one row added or removed, also when the items are private. With no row: k candidates in uniformly random order. NULL for an empty list.';
COMMENT ON AGGREGATE dp_top_k_unknown_domain(anyelement, double precision, integer, double precision, double precision) IS
'(epsilon, delta)-DP top k by count when the items themselves are private (limited-domain mechanism of Durfee and Rogers 2019): the true top k compete with a threshold above the (k+1)-th count; items come out in noisy order until k are out or the threshold comes first. An item with a single row is returned with probability below delta.';
COMMENT ON AGGREGATE dp_top_k_unknown_domain(anyelement, double precision, integer, double precision, double precision, double precision) IS
'(epsilon, delta)-DP top k of S(i) = sum of clamp(score, 0, max_score) when the items themselves are private (limited-domain mechanism of Durfee and Rogers 2019, k_bar = k).';
COMMENT ON AGGREGATE dp_top_k_unknown_domain(anyelement, double precision, integer, double precision, double precision, double precision, integer) IS
'(epsilon, delta)-DP top k of S(i) = sum of clamp(score, 0, max_score) when the items themselves are private; the top k_bar items (k_bar >= k) compete with a threshold above the (k_bar+1)-th score (limited-domain mechanism of Durfee and Rogers 2019).';
"#,
    name = "dp_top_k_comments",
    requires = ["selection_aggregates"],
);

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use crate::extension::sql_testing::{
        assert_parallel, column, counts_of, draws_table, error_of, force_parallel_plans,
        frequencies, run, scored_table, DRAWS,
    };
    use crate::mechanisms::top_k::LimitedDomain;
    use crate::testing::{assert_matches_distribution, ordered_lists, p_value, peeling_probability, SIGNIFICANCE};
    use pgrx::prelude::*;

    /// The ordered lists of `k` out of `items`, as PostgreSQL prints text arrays.
    fn list_names(items: &[&str], k: usize) -> (Vec<Vec<usize>>, Vec<String>) {
        let lists = ordered_lists(items.len(), k);
        let names = lists
            .iter()
            .map(|l| format!("{{{}}}", l.iter().map(|&i| items[i]).collect::<Vec<_>>().join(",")))
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
        let exact: Vec<f64> = lists.iter().map(|l| peeling_probability(utilities, l, k as f64 / epsilon)).collect();
        let too_sharp: Vec<f64> = lists.iter().map(|l| peeling_probability(utilities, l, 1.0 / epsilon)).collect();
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
             UNION ALL SELECT dp_top_k_unknown_domain(item, score, 2, 1.0, 0.01, 1, 5)::text FROM scored WHERE false
             UNION ALL SELECT dp_top_k_unknown_domain(item, score, 2, 1.0, score)::text FROM scored WHERE false",
        );
        // NULL as dp_argmax; the candidates when they are known; the unknown-domain
        // mechanism's own answer on empty data is the empty list (NULL would tell the
        // input was empty); NULL when an argument depends on the rows.
        assert_eq!(answers, ["NULL", "NULL", "NULL", "{z}", "{}", "{}", "NULL"]);
    }

    #[pg_test]
    fn top_k_invalid_parameters_raise_22023() {
        scored_table();
        let cases = [
            ("dp_top_k(item, score, 0, 1.0)", "k must be at least 1, got 0"),
            ("dp_top_k(item, score, -3, 1.0, 2)", "k must be at least 1, got -3"),
            ("dp_top_k(item, score, NULL, 1.0, 2, '{a}')", "k must be at least 1, got NULL"),
            ("dp_top_k(item, score, 2, 0)", "epsilon must be finite and greater than 0, got 0"),
            ("dp_top_k(item, score, 2, 1, 'NaN')", "max_score must be finite and greater than 0, got NaN"),
            ("dp_top_k(item, score, 2, 1, 1, NULL)", "candidates must be an array (an empty array gives NULL), got NULL"),
            ("dp_top_k_unknown_domain(item, score, 0, 1.0, 0.1)", "k must be at least 1, got 0"),
            ("dp_top_k_unknown_domain(item, score, 2, 1.0, NULL)", "delta must be greater than 0 and less than 1, got NULL"),
            ("dp_top_k_unknown_domain(item, score, 2, 1.0, 0)", "delta must be greater than 0 and less than 1, got 0"),
            ("dp_top_k_unknown_domain(item, score, 2, 1.0, 1)", "delta must be greater than 0 and less than 1, got 1"),
            ("dp_top_k_unknown_domain(item, score, 2, 1.0, -0.5, 1)", "delta must be greater than 0 and less than 1, got -0.5"),
            ("dp_top_k_unknown_domain(item, score, 2, 1.0, 'NaN', 1, 3)", "delta must be greater than 0 and less than 1, got NaN"),
            ("dp_top_k_unknown_domain(item, score, 2, 1.0, 0.1, 1, 1)", "k_bar must be at least k (2), got 1"),
            ("dp_top_k_unknown_domain(item, score, 2, 1.0, 0.1, 1, NULL)", "k_bar must be at least k (2), got NULL"),
            ("dp_top_k_unknown_domain(item, score, 2, 'Infinity', 0.1)", "epsilon must be finite and greater than 0, got Infinity"),
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
            error_of("SELECT dp_top_k(item, 1, k, 1.0) FROM (VALUES ('a', 1), ('b', 2)) v(item, k)"),
            "22023: k must be the same on every row of an aggregate, got 1 and then 2"
        );
        assert_eq!(
            error_of("SELECT dp_top_k_unknown_domain(item, 1, 1, 1.0, d) FROM (VALUES ('a', 0.1), ('b', 0.2)) v(item, d)"),
            "22023: delta must be the same on every row of an aggregate, got 0.1 and then 0.2"
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
        let parameters = LimitedDomain { k: 1, k_bar: 1, epsilon: 1.0, delta: 0.05 };
        let exact = 1.0 / (1.0 + (parameters.threshold_offset() - 1.0).exp());
        assert!(p_value(&counts, &[exact, 1.0 - exact]) >= SIGNIFICANCE, "{counts:?} vs {exact}");
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
}
