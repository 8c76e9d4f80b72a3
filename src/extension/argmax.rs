//! dp_argmax: the exponential mechanism (or permute-and-flip) over per-item scores, as an
//! aggregate. Its forms are described in forms.rs.

use super::forms::DP_ARGMAX;
use super::guc::{self, ArgmaxMechanism};
use super::item_scores::{final_function, selection_transition, ItemScores};
use crate::mechanisms::gumbel::exponential_mechanism;
use crate::mechanisms::permute_and_flip::permute_and_flip;
use crate::mechanisms::rng;
use pgrx::pg_sys::Datum;
use pgrx::prelude::*;

selection_transition! {
    /// Transition function of every form of dp_argmax.
    dp_argmax_trans, pg_finfo_dp_argmax_trans, DP_ARGMAX
}

crate::version_1_function_record!(pg_finfo_dp_argmax_final);

/// Final function of every form of dp_argmax.
#[pg_guard]
#[no_mangle]
pub unsafe extern "C-unwind" fn dp_argmax_final(fcinfo: pg_sys::FunctionCallInfo) -> Datum {
    // SAFETY: PostgreSQL calls it as the final function of dp_argmax (aggregates.sql).
    unsafe { final_function(fcinfo, &DP_ARGMAX, argmax) }
}

/// Samples item i with probability ∝ exp(ε·S(i)/max_score) by Gumbel-max, or by
/// permute-and-flip at the same temperature (pg_exp_mech.argmax_mechanism).
///
/// The scores are in units of max_score, so the temperature is 1/ε: one row moves every
/// score by at most one unit in the same direction (range 1), which makes either ε-DP
/// under adding or removing a row (Dong, Durfee, Rogers 2019; McKenna and Sheldon 2020;
/// ../shared/PRIVACY.md, section 3).
fn argmax(scores: &ItemScores) -> Option<Datum> {
    let temperature = 1.0 / scores.selection.epsilon;
    let entries = scores.entries();
    let utilities: Vec<f64> = entries.iter().map(|entry| entry.score).collect();
    let mechanism = guc::argmax_mechanism();
    let winner = rng::with_generator(guc::seeding(), |rng| match mechanism {
        ArgmaxMechanism::Exponential => exponential_mechanism(&utilities, temperature, rng),
        ArgmaxMechanism::PermuteAndFlip => permute_and_flip(&utilities, temperature, rng),
    })?;
    // SAFETY: the items of a state are valid datums of its item type.
    Some(unsafe {
        let item = scores.item_type.spelled(entries[winner].item.datum);
        scores.item_type.copy(item)
    })
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use crate::extension::sql_testing::{
        assert_parallel, column, column_by_seed, counts_of, draws_table, error_of,
        force_parallel_plans, frequencies, run, scored_table, DRAWS,
    };
    use crate::testing::{assert_matches_distribution, normalise_log_weights, softmax};
    use pgrx::prelude::*;

    const DRAWS_QUERY: &str = "SELECT dp_argmax(item, score, 1.0, 2) FROM draws GROUP BY g";

    fn check_scored_distribution(query: &str) {
        let counts = counts_of(&frequencies(query), &["a", "b", "c", "d"]);
        assert_eq!(counts.iter().sum::<u64>(), DRAWS as u64);
        let units = [0.0, 1.0, 2.0, 3.0];
        // exp(ε·S/max_score) at ε = 1, and the textbook exp(ε·S/(2·max_score)).
        assert_matches_distribution(&counts, &softmax(&units, 1.0), &softmax(&units, 2.0));
    }

    #[pg_test]
    fn argmax_distribution_is_exp_epsilon_score_over_max_score() {
        draws_table();
        check_scored_distribution(DRAWS_QUERY);
    }

    #[pg_test]
    fn argmax_permute_and_flip_has_its_own_distribution() {
        draws_table();
        run(&["SET LOCAL pg_exp_mech.argmax_mechanism = permute_and_flip"]);
        let counts = counts_of(&frequencies(DRAWS_QUERY), &["a", "b", "c", "d"]);
        let units = [0.0, 1.0, 2.0, 3.0];
        // Permute-and-flip at ε = 1 by its definition, against the exponential
        // mechanism's softmax at the same ε.
        let exact = crate::testing::permute_and_flip_distribution(&units, 1.0);
        assert_matches_distribution(&counts, &exact, &softmax(&units, 1.0));
        // In a parallel plan too, and back to the default.
        force_parallel_plans();
        assert_parallel(DRAWS_QUERY);
        let counts = counts_of(&frequencies(DRAWS_QUERY), &["a", "b", "c", "d"]);
        assert_matches_distribution(&counts, &exact, &softmax(&units, 1.0));
        run(&["RESET pg_exp_mech.argmax_mechanism"]);
        check_scored_distribution(DRAWS_QUERY);
        assert_eq!(
            error_of("SET pg_exp_mech.argmax_mechanism = laplace"),
            "22023: invalid value for parameter \"pg_exp_mech.argmax_mechanism\": \"laplace\""
        );
    }

    /// numeric scores take their own path (issue 19, part 2): the same law as float8,
    /// with 1e400 clamped to max_score and -1e400 to 0 as ±Infinity are, never the
    /// implicit cast's error (which printed the value).
    #[pg_test]
    fn argmax_numeric_scores_clamp_instead_of_failing() {
        draws_table();
        run(&[
            "CREATE TABLE numeric_draws AS SELECT g, item, CASE score WHEN -1 THEN -1e400
                 WHEN 5 THEN 1e400 ELSE score::numeric END AS score FROM draws",
        ]);
        check_scored_distribution(
            "SELECT dp_argmax(item, score, 1.0, 2) FROM numeric_draws GROUP BY g",
        );
        run(&["INSERT INTO numeric_draws VALUES (-1, 'x', 1e-400), (-1, 'y', 'NaN'), (-2, 'z', -1e131000)"]);
        assert_eq!(
            column(
                "SELECT count(*)::text FROM (SELECT g, dp_argmax(item, score, 1.0, 2),
                   dp_top_k(item, score, 2, 1.0, 2), dp_top_k_unknown_domain(item, score, 1, 1.0, 1e-6, 2)
                   FROM numeric_draws GROUP BY g) q"
            ),
            [(DRAWS + 2).to_string()]
        );
        // Literal scores keep the double precision overload.
        assert_eq!(
            column("SELECT pg_typeof(dp_argmax(item, 1, 1.0))::text FROM scored"),
            ["text"]
        );
    }

    #[pg_test]
    fn argmax_parallel_plan_gives_the_same_distribution() {
        draws_table();
        force_parallel_plans();
        assert_parallel(DRAWS_QUERY);
        check_scored_distribution(DRAWS_QUERY);
    }

    #[pg_test]
    fn argmax_candidates_restrict_the_answers() {
        scored_table();
        run(&[&format!(
            "CREATE TABLE draws AS
             SELECT g, item, score FROM scored, generate_series(1, {DRAWS}) g
             UNION ALL
             SELECT g, 'intruder', 2 FROM generate_series(1, {DRAWS}) g, generate_series(1, 50)"
        )]);
        // 'x' has no row (score 0); 'intruder' has the highest score but is not listed.
        let counts = counts_of(
            &frequencies(
                "SELECT dp_argmax(item, score, 1.0, 2, ARRAY['x', 'b', 'd']) FROM draws GROUP BY g",
            ),
            &["x", "b", "d"],
        );
        let units = [0.0, 1.0, 3.0];
        assert_matches_distribution(&counts, &softmax(&units, 1.0), &softmax(&units, 2.0));
    }

    #[pg_test]
    fn argmax_with_candidates_and_no_rows_draws_a_uniform_candidate() {
        scored_table();
        // Correlated with g, so that each g evaluates the aggregate over zero rows anew.
        let counts = counts_of(
            &frequencies(
                "SELECT (SELECT dp_argmax(item, score, 1.0, 1, '{p,q,r}') FROM scored
                          WHERE score < -g)
                   FROM generate_series(1, 6000) g",
            ),
            &["p", "q", "r"],
        );
        let uniform = [1.0 / 3.0; 3];
        assert_matches_distribution(&counts, &uniform, &normalise_log_weights(&[1.0, 0.0, 0.0]));
    }

    #[pg_test]
    fn argmax_no_rows() {
        scored_table();
        let answers = column(
            "SELECT dp_argmax(item, score, 1.0)::text FROM scored WHERE false
             UNION ALL SELECT dp_argmax(item, score, 1.0, 2)::text FROM scored WHERE false
             UNION ALL SELECT dp_argmax(item, score, 1.0, 2, '{}')::text FROM scored
             UNION ALL SELECT dp_argmax(item, score, 1.0, 2, '{}')::text FROM scored WHERE false
             UNION ALL SELECT dp_argmax(item, score, 1.0, 2, '{z}') FROM scored WHERE false
             UNION ALL SELECT dp_argmax(item, score, 1.0) FROM scored WHERE item IS NULL",
        );
        // NULL without candidates and for an empty list; a candidate when the list is
        // known. A parameter of the rows is refused, with no row as with rows.
        assert_eq!(answers, ["NULL", "NULL", "NULL", "NULL", "z", "NULL"]);
        for (call, name) in [
            ("dp_argmax(item, score, 1.0, 2, ARRAY[item])", "candidates"),
            ("dp_argmax(item, score, 1.0, score, '{z}')", "max_score"),
        ] {
            assert_eq!(
                error_of(&format!("SELECT {call} FROM scored WHERE false")),
                format!("22023: {name} must be a constant or a parameter of the statement, got an expression of the rows")
            );
        }
    }

    /// An item longer than 1 MiB (detoasted) is skipped, as a NULL item is, in a serial
    /// and in a parallel plan alike, wherever it is stored: one item of nearly 1 GB made a
    /// parallel worker's state too large for a bytea (XX000) and not a serial plan's.
    #[pg_test]
    fn items_longer_than_a_mebibyte_are_skipped() {
        run(&[
            "CREATE TABLE long_items (item text, n int)",
            "ALTER TABLE long_items ALTER COLUMN item SET STORAGE MAIN",
            "ALTER TABLE long_items SET (parallel_workers = 2)",
            "INSERT INTO long_items SELECT 'short-' || s, i FROM generate_series(0, 2) s, generate_series(1, 12 - s) i",
            // Stored compressed: skipped. Exactly the limit, its header included: counted.
            "INSERT INTO long_items SELECT repeat('x', 1048577), i FROM generate_series(1, 20) i",
            "INSERT INTO long_items VALUES (repeat('y', 1048576 - 4), 0)",
            "ANALYZE long_items",
        ]);
        let query = "SELECT dp_top_k_unknown_domain(item, 1, 5, 1e6, 1e-6)::text FROM long_items";
        let serial = column(query);
        assert_eq!(
            serial,
            ["{short-0,short-1,short-2}"],
            "the 20 long rows are skipped"
        );
        assert_eq!(
            column("SELECT length(dp_argmax(item, 1, 1e6, 1, ARRAY['short-0', repeat('y', 1048572)]))::text FROM long_items WHERE n = 0"),
            ["1048572"],
            "an item of 1 MiB counts"
        );
        force_parallel_plans();
        assert_parallel(query);
        assert_eq!(column(query), serial);
        // A candidate that long is left out too: its rows, matched in place against the
        // table after a group's first, counted (the group's first was skipped).
        assert_eq!(
            column("SELECT string_agg(r, ',') FROM (SELECT left(dp_argmax(x, 1, 1e6, 1, ARRAY['b', repeat('z', 1048577)]), 1) r
                      FROM (SELECT repeat('z', 1048577) FROM generate_series(1, 3)) v(x), generate_series(1, 4) g GROUP BY g) s"),
            ["b,b,b,b"]
        );
        // Computed in the query, not stored.
        assert_eq!(
            column("SELECT dp_argmax(x, 1, 1e6) FROM (SELECT CASE WHEN i <= 50 THEN repeat('z', 1048577) ELSE 'b' END FROM generate_series(1, 60) i) v(x)"),
            ["b"]
        );
    }

    /// A row whose item the group's table holds is added in place, outside pgrx's guard
    /// (item_scores::add_row_in_place): its score clamps to [0, max_score], NaN and NULL
    /// count 0, NULL items are skipped, and rows of an item outside the candidates are
    /// ignored, as for an item's first row; for short items (inline in the table) and
    /// long ones. At ε = 10^9 the top k is the order of the scores: c 3, d 2, a 1.2,
    /// f 1.1, b 1, e 0.9 (unclamped, b and f would lead and c and e trail).
    #[pg_test]
    fn rows_added_in_place_count_as_first_rows_do() {
        for long in ["", "-long-enough-to-be-kept-apart"] {
            let rows = [
                "('a', 0.6), ('a', 0.6), ('b', 0), ('b', 100)",
                "('c', 1), ('c', 1), ('c', 1), ('c', -100)",
                "('d', 1), ('d', 1), ('d', 'NaN'), ('d', NULL)",
                "('e', 0.5), ('e', '-Infinity'), ('e', 0.4), ('f', 0.1), ('f', 'Infinity')",
                "(NULL, 1), (NULL, 1), ('z', 1), ('z', 1), ('z', 1), ('z', 1)",
            ]
            .join(", ");
            run(&[
                "DROP TABLE IF EXISTS later",
                "CREATE TABLE later(item text, score float8)",
                &format!("INSERT INTO later SELECT item || '{long}', score FROM (VALUES {rows}) v(item, score)"),
            ]);
            let named = |items: &str| {
                let items: Vec<String> = items.chars().map(|c| format!("{c}{long}")).collect();
                items
            };
            let array = |items: &str| format!("{{{}}}", named(items).join(","));
            let candidates = format!(
                "ARRAY[{}]",
                named("abcdef")
                    .iter()
                    .map(|item| format!("'{item}'"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            assert_eq!(
                column("SELECT dp_top_k(item, score, 7, 1e9)::text FROM later"),
                [array("zcdafbe")]
            );
            assert_eq!(
                column(&format!(
                    "SELECT dp_top_k(item, score, 6, 1e9, 1, {candidates})::text FROM later"
                )),
                [array("cdafbe")]
            );
            assert_eq!(
                column(&format!(
                    "SELECT dp_argmax(item, score, 1e9, 1, {candidates}) FROM later"
                )),
                named("c")
            );
            assert_eq!(
                column("SELECT dp_argmax(item, score, 1e9) FROM later"),
                named("z")
            );
        }
    }

    #[pg_test]
    fn argmax_data_never_errors() {
        // With ε = 1e6 the argmax is the true one with probability 1 - e^-1e6.
        run(&[
            "CREATE TABLE odd(item text, score float8)",
            "INSERT INTO odd SELECT 'nan', 'NaN' FROM generate_series(1, 100)",
            "INSERT INTO odd SELECT 'null', NULL FROM generate_series(1, 100)",
            "INSERT INTO odd SELECT NULL, 1 FROM generate_series(1, 100)",
            "INSERT INTO odd VALUES ('inf', 'Infinity'), ('neg', '-Infinity'), ('neg', '-Infinity'),
                                    ('two', 1), ('two', 1)",
        ]);
        let answers = column(
            "SELECT dp_argmax(item, score, 1e6, 1) FROM odd
             UNION ALL SELECT dp_argmax(item, score, 1e6, 1) FROM odd WHERE item <> 'two'
             UNION ALL SELECT dp_argmax(item, score, 1e6, 1) FROM odd WHERE item IN ('nan', 'null', 'neg')",
        );
        // NaN and NULL scores count 0, NULL items are skipped, +∞ clamps to max_score
        // (one unit, less than two rows of 1), -∞ clamps to 0.
        assert_eq!(answers[0], "two");
        assert_eq!(answers[1], "inf");
        assert!(["nan", "null", "neg"].contains(&answers[2].as_str()));
    }

    #[pg_test]
    fn argmax_items_compare_by_their_type() {
        run(&[
            "SET pg_exp_mech.seed = 3",
            "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
            "CREATE COLLATION case_insensitive (provider = icu, locale = 'und-u-ks-level2',
                                                 deterministic = false)",
        ]);
        let cases = [
            ("VALUES (1), (2), (2)", "integer", "2"),
            ("VALUES (1::bigint), (2), (2)", "bigint", "2"),
            ("VALUES (1.0::numeric), (1.00), (2)", "numeric", "1"),
            ("VALUES ('x'::varchar), ('y'), ('y')", "character varying", "y"),
            ("VALUES (DATE '2024-01-01'), ('2024-01-02'), ('2024-01-02')", "date", "2024-01-02"),
            (
                "VALUES ('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid), ('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'), (gen_random_uuid())",
                "uuid",
                "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            ),
            ("VALUES ('ok'::mood), ('happy'), ('happy')", "mood", "happy"),
            ("VALUES (ARRAY[1, 2]), (ARRAY[1, 2]), (ARRAY[2, 1])", "integer[]", "{1,2}"),
            ("VALUES (true), (false), (false)", "boolean", "false"),
        ];
        for (values, type_name, winner) in cases {
            for _ in 0..20 {
                let row = column(&format!(
                    "SELECT pg_typeof(w)::text || ' ' || w::text
                       FROM (SELECT dp_argmax(x, 1, 1e6) AS w FROM ({values}) v(x)) s"
                ));
                assert_eq!(row, [format!("{type_name} {winner}")], "{values}");
            }
        }
        // Case-insensitive items count together; the answer is spelled as listed
        // (without candidates it would be a row's spelling: spellings.rs).
        for _ in 0..20 {
            assert_eq!(
                column(
                    "SELECT dp_argmax(x, 1, 1e6, 1, ARRAY['A', 'b']) FROM
                       (VALUES ('a' COLLATE case_insensitive), ('A'), ('a'), ('b'), ('b')) v(x)"
                ),
                ["A"]
            );
        }
        assert_eq!(
            error_of("SELECT dp_argmax(point(1, 2), 1, 1.0)"),
            "42883: could not identify a hash function for type point: items must have a default hash operator class"
        );
        assert_eq!(
            error_of("SELECT dp_argmax(point(1, 2), 1, 1.0) FROM generate_series(1, 0)"),
            "42883: could not identify a hash function for type point: items must have a default hash operator class"
        );
    }

    #[pg_test]
    fn argmax_invalid_parameters_raise_22023() {
        scored_table();
        let positive = "must be finite and greater than 0, got";
        let cases = [
            (
                "dp_argmax(item, score, NULL)",
                format!("epsilon {positive} NULL"),
            ),
            ("dp_argmax(item, score, 0)", format!("epsilon {positive} 0")),
            (
                "dp_argmax(item, score, -0.5)",
                format!("epsilon {positive} -0.5"),
            ),
            (
                "dp_argmax(item, score, 'NaN')",
                format!("epsilon {positive} NaN"),
            ),
            (
                "dp_argmax(item, score, 'Infinity')",
                format!("epsilon {positive} Infinity"),
            ),
            (
                "dp_argmax(item, score, 1, NULL)",
                format!("max_score {positive} NULL"),
            ),
            (
                "dp_argmax(item, score, 1, 0)",
                format!("max_score {positive} 0"),
            ),
            (
                "dp_argmax(item, score, 1, -2)",
                format!("max_score {positive} -2"),
            ),
            (
                "dp_argmax(item, score, 1, 'NaN')",
                format!("max_score {positive} NaN"),
            ),
            (
                "dp_argmax(item, score, 1, '-Infinity')",
                format!("max_score {positive} -Infinity"),
            ),
            (
                "dp_argmax(item, score, 1, 1, NULL)",
                "candidates must be an array (an empty array gives NULL), got NULL".into(),
            ),
        ];
        for (call, message) in &cases {
            // The same error with rows and without: errors depend on parameters only.
            for filter in ["", "WHERE false"] {
                assert_eq!(
                    error_of(&format!("SELECT {call} FROM scored {filter}")),
                    format!("22023: {message}"),
                    "{call} {filter}"
                );
            }
        }
        // A parameter computed from the rows is refused before any row (with rows or
        // without, whatever their values): otherwise "must be the same on every row"
        // would fail only when two rows differ, and print their values.
        let of_the_rows = [
            ("epsilon", "SELECT dp_argmax(item, 1, e) FROM (VALUES ('a', 1.0), ('b', 2.0)) v(item, e)"),
            ("max_score", "SELECT dp_argmax(item, 1, 1, m) FROM (VALUES ('a', 3.0), ('b', NULL)) v(item, m)"),
            ("max_score", "SELECT dp_argmax(item, 1, 1, m) FROM (VALUES ('a', 3.0), ('b', 3.0)) v(item, m)"),
            (
                "candidates",
                "SELECT dp_argmax(item, 1, 1, 1, CASE item WHEN 'a' THEN '{a}'::text[] ELSE '{b}' END)
                   FROM (VALUES ('a'), ('b')) v(item)",
            ),
            ("candidates", "SELECT dp_argmax(item, 1, 1, 1, ARRAY[item]) FROM (VALUES ('a'), ('b'), ('c')) v(item)"),
            ("candidates", "SELECT dp_argmax(item, 1, 1, 1, ARRAY['a', item]) FROM (VALUES ('a'), ('a')) v(item)"),
        ];
        for (name, query) in of_the_rows {
            for filter in ["", " WHERE false"] {
                assert_eq!(
                    error_of(&format!("{query}{filter}")),
                    format!("22023: {name} must be a constant or a parameter of the statement, got an expression of the rows"),
                    "{query}"
                );
            }
        }
        // An array of constants, whatever its form, is a parameter.
        assert_eq!(
            error_of("SELECT dp_argmax(item, 1, 1, 1, ARRAY['a', 'b']) FROM (VALUES ('a'), ('a')) v(item)"),
            "no error"
        );
    }

    #[pg_test]
    fn argmax_arguments_known_without_rows_are_validated() {
        scored_table();
        run(&[
            "SET LOCAL plan_cache_mode = force_generic_plan",
            "PREPARE p(float8, text[]) AS SELECT dp_argmax(item, score, $1, 1, $2) FROM scored WHERE false",
        ]);
        assert_eq!(column("EXECUTE p(1.0, '{only}')"), ["only"]);
        assert_eq!(
            error_of("EXECUTE p(-1, '{only}')"),
            "22023: epsilon must be finite and greater than 0, got -1"
        );
        // Candidates from a public table, through an init-plan.
        assert_eq!(
            column(
                "SELECT dp_argmax(item, score, 1.0, 1, (SELECT array_agg('public'::text)))
                   FROM scored WHERE false"
            ),
            ["public"]
        );
    }

    #[pg_test]
    fn argmax_seed_is_superuser_only_and_reproducible() {
        scored_table();
        let sequence = || {
            column("SELECT dp_argmax(item, score, 0.5, 2) FROM scored, generate_series(1, 30) g GROUP BY g ORDER BY g")
        };
        run(&["SET pg_exp_mech.seed = 99"]);
        let first = sequence();
        run(&["SET pg_exp_mech.seed = 99"]);
        assert_eq!(
            sequence(),
            first,
            "setting the seed again restarts the stream"
        );
        assert_ne!(
            sequence(),
            first,
            "the stream goes on while the seed is unchanged"
        );
        run(&[
            "RESET pg_exp_mech.seed",
            "CREATE ROLE seed_analyst",
            "SET ROLE seed_analyst",
        ]);
        assert_eq!(
            error_of("SET pg_exp_mech.seed = 1"),
            "42501: permission denied to set parameter \"pg_exp_mech.seed\""
        );
        // PostgreSQL's own wording changed in 18 ("permission denied to examine ...").
        let shown = error_of("SHOW pg_exp_mech.seed");
        assert!(
            shown.starts_with("42501: ") && shown.ends_with(" to examine \"pg_exp_mech.seed\""),
            "{shown}"
        );
        run(&["RESET ROLE"]);
    }

    #[pg_test]
    fn argmax_catalog_entries() {
        // Every aggregate volatile and parallel safe; every function has a comment.
        let aggregates = column(
            "SELECT p.oid::regprocedure::text || ' ' || p.provolatile::text || p.proparallel::text
               FROM pg_proc p WHERE p.proname = 'dp_argmax' ORDER BY 1",
        );
        // Three forms, each with double precision and numeric scores.
        assert_eq!(aggregates.len(), 6);
        assert!(
            aggregates.iter().all(|a| a.ends_with(" vs")),
            "{aggregates:?}"
        );
        let uncommented = column(
            "SELECT p.oid::regprocedure::text FROM pg_proc p
               JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                AND d.refclassid = 'pg_extension'::regclass
              WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pg_exp_mech')
                AND p.pronamespace <> 'tests'::regnamespace -- the #[pg_test] functions
                AND obj_description(p.oid, 'pg_proc') IS NULL",
        );
        assert!(uncommented.is_empty(), "{uncommented:?}");
    }

    #[pg_test]
    fn argmax_state_cannot_be_read_by_a_home_made_aggregate() {
        scored_table();
        run(&["CREATE AGGREGATE leak(anyelement, float8, float8) (
                   SFUNC = dp_argmax_trans, STYPE = internal,
                   FINALFUNC = dp_item_scores_serialize)"]);
        assert!(error_of("SELECT leak(item, score, 1.0) FROM scored").starts_with("0A000: "));
    }

    /// With a seed, the answer does not depend on the order the rows arrive in (the score
    /// table keeps items in arrival order; a seeded draw takes them in hash order): the
    /// same rows forwards and backwards, the same 20 seeds, the same answers.
    #[pg_test]
    fn a_seed_gives_the_same_answer_whatever_the_order_of_the_rows() {
        run(&[
            "CREATE TABLE forwards AS SELECT 'item-' || i AS item FROM generate_series(1, 50) i",
            "CREATE TABLE backwards AS SELECT item FROM forwards ORDER BY item DESC",
        ]);
        let answers = |table: &str| -> Vec<String> {
            let query = format!(
                "SELECT dp_argmax(item, 1, 0.1) FROM {table}
                 UNION ALL SELECT dp_top_k(item, 1, 3, 0.1)::text FROM {table}"
            );
            column_by_seed(&query, 1..=20)
        };
        let forwards = answers("forwards");
        assert_eq!(forwards, answers("backwards"));
        let distinct: std::collections::HashSet<_> = forwards.iter().collect();
        assert!(
            distinct.len() > 20,
            "the answers vary with the seed: {forwards:?}"
        );
    }

    /// Two items whose 32-bit hashes collide, with equal scores: with a seed, which one
    /// wins must not depend on which arrived first (their bytes order them).
    #[pg_test]
    fn a_seed_orders_items_whose_hashes_collide_by_their_bytes() {
        let mut seen = std::collections::HashMap::new();
        let (a, b) = (0i64..)
            .find_map(|i| {
                let hash = crate::extension::items::hash_bytes(&i.to_ne_bytes());
                seen.insert(hash, i).map(|j| (j, i))
            })
            .expect("a collision within 2^32 + 1 items");
        let answers = |first: i64, second: i64| -> Vec<String> {
            let query = format!(
                "SELECT dp_argmax(item, 1, 0.1)::text
                 FROM (VALUES (1, {first}::bigint), (2, {second}::bigint)) AS r(o, item)
                 UNION ALL SELECT dp_top_k(item, 1, 1, 0.1)::text
                 FROM (VALUES (1, {first}::bigint), (2, {second}::bigint)) AS r(o, item)"
            );
            column_by_seed(&query, 1..=20)
        };
        let forwards = answers(a, b);
        assert_eq!(forwards, answers(b, a), "items {a} and {b}");
        assert!(forwards.contains(&a.to_string()) && forwards.contains(&b.to_string()));
    }
}
