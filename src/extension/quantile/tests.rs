//! SQL-level tests of dp_quantile and dp_quantiles: exact laws over SQL draws, answers
//! in the value's own type, parallel plans, refusals.

#[pgrx::pg_schema]
mod tests {
    use crate::extension::sql_testing::{
        assert_parallel, column, column_by_seed, counts_of, error_of, force_parallel_plans,
        frequencies, run, DRAWS,
    };
    use crate::mechanisms::quantile::{
        sample_quantiles_recursive, temperature, Grid, GridCounts, Place,
    };
    use crate::testing::{
        assert_matches_distribution, normalise_log_weights, quantile_distribution,
    };
    use pgrx::prelude::*;

    /// On a coarse grid (lo 0, hi 20, K = 20), values on grid points and between them,
    /// plus the values every quantile must survive: NULL and NaN (skipped), ±∞ (clamped).
    const VALUES: &str = "(2), (2), (2.4), (4.6), (5), (9), (13), (13), (20), (NULL), ('NaN'),
                          ('Infinity'), ('-Infinity'), (-7), (35)";

    /// Where the values above are counted, by half cell: 2.4 between 2 and 3 (5), 4.6
    /// between 4 and 5 (9), ∞ and 35 at 20 (40), −∞ and −7 at 0.
    fn cells() -> Vec<u64> {
        let grid = Grid {
            lo: 0.0,
            hi: 20.0,
            size: 20,
        };
        let values = [
            2.0,
            2.0,
            2.4,
            4.6,
            5.0,
            9.0,
            13.0,
            13.0,
            20.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            -7.0,
            35.0,
        ];
        let cells: Vec<u64> = values.iter().map(|&v| grid.locate(v).half_cell()).collect();
        assert_eq!(cells, [4, 4, 5, 9, 10, 18, 26, 26, 40, 40, 0, 0, 40]);
        cells
    }

    fn grid_table() {
        run(&[
            "SET pg_exp_mech.seed = 31",
            "SET pg_exp_mech.quantile_grid_size = 20",
            "CREATE TABLE grid_values(v float8)",
            &format!("INSERT INTO grid_values VALUES {VALUES}"),
            &format!("CREATE TABLE grid_draws AS SELECT g, v FROM grid_values, generate_series(1, {DRAWS}) g"),
            "ANALYZE grid_draws",
        ]);
    }

    /// 20,000 answers against the exact distribution, which must also tell apart the
    /// textbook temperature (2·) and the off-by-one #{x ≤ c}.
    fn check(query: &str, alpha: f64, epsilon: f64) {
        let names: Vec<String> = (0..=20).map(|j| j.to_string()).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let counts = counts_of(&frequencies(query), &names);
        assert_eq!(counts.iter().sum::<u64>(), DRAWS as u64);
        let t = temperature(alpha, epsilon);
        let exact = quantile_distribution(&cells(), 20, alpha, t, true);
        assert_matches_distribution(
            &counts,
            &exact,
            &quantile_distribution(&cells(), 20, alpha, 2.0 * t, true),
        );
        assert_matches_distribution(
            &counts,
            &exact,
            &quantile_distribution(&cells(), 20, alpha, t, false),
        );
    }

    #[pg_test]
    fn quantile_median_distribution() {
        grid_table();
        check(
            "SELECT dp_quantile(v, 0.5, 0, 20, 1.0) FROM grid_draws GROUP BY g",
            0.5,
            1.0,
        );
    }

    /// numeric values follow the float law on the same grid, and values beyond double
    /// precision's range clamp like ±∞ instead of failing the cast (issue 19, part 2):
    /// 1e400 counts at hi, -1e400 at lo, as ±Infinity do for float8.
    #[pg_test]
    fn quantile_of_numeric_values_clamps_and_answers_in_numeric() {
        grid_table();
        run(&[
            "CREATE TABLE grid_numeric AS SELECT g, CASE WHEN v = 'Infinity' THEN 1e400
                 WHEN v = '-Infinity' THEN -1e400 ELSE v::numeric END AS v FROM grid_draws",
        ]);
        check(
            "SELECT dp_quantile(v, 0.5, 0, 20, 1.0) FROM grid_numeric GROUP BY g",
            0.5,
            1.0,
        );
        // Tiny and huge values, in a group of their own: no error, whatever the group.
        run(&["INSERT INTO grid_numeric VALUES (-1, 1e-400), (-1, -1e-400), (-2, 1e400), (-2, -1e131000)"]);
        assert_eq!(
            column("SELECT count(*)::text FROM (SELECT g, dp_quantile(v, 0.5, 0, 20, 1.0) FROM grid_numeric GROUP BY g) q"),
            [(DRAWS + 2).to_string()]
        );
        // The type: numeric for numeric values, double precision for README's calls.
        run(&["CREATE TABLE typed_values AS SELECT 40 AS age, 3.5::numeric AS price, 2.5::float8 AS f"]);
        assert_eq!(
            column(
                "SELECT pg_typeof(dp_quantile(price, 0.5, 0, 100, 1.0))::text FROM typed_values
                 UNION ALL SELECT pg_typeof(dp_quantiles(price, '{0.5}', 0, 100, 1.0))::text FROM typed_values
                 UNION ALL SELECT pg_typeof(dp_quantile(age, 0.5, 0.0, 100.0, 1.0))::text FROM typed_values
                 UNION ALL SELECT pg_typeof(dp_quantile(age, 0.5, 0, 100, 1.0))::text FROM typed_values
                 UNION ALL SELECT pg_typeof(dp_quantile(f, 0.5, 0, 100, 1.0))::text FROM typed_values"
            ),
            ["numeric", "numeric[]", "double precision", "integer", "double precision"]
        );
        // A numeric answer reads as the float one: the median 5 at ε = 1e6 on this grid
        // (0, 0, 2, 2, 2.4, 4.6, 5, 9, 13, 13, 20, 20, 20 after clamping).
        assert_eq!(
            column("SELECT dp_quantile(v, 0.5, 0, 20, 1e6)::text FROM grid_numeric WHERE g = 1"),
            ["5"]
        );
    }

    #[pg_test]
    fn quantile_high_alpha_distribution_in_a_parallel_plan() {
        grid_table();
        force_parallel_plans();
        let query = "SELECT dp_quantile(v, 0.9, 0, 20, 2.0) FROM grid_draws GROUP BY g";
        assert_parallel(query);
        check(query, 0.9, 2.0);
    }

    /// A state reads back from dp_quantile_serialize's bytes, and from the CBOR that
    /// versions before them wrote (a Citus coordinator may combine an older worker's):
    /// the same parameters and counts, sparse or dense, float or integer grid.
    #[pg_test]
    fn a_state_reads_back_from_its_bytes_and_from_earlier_cbor() {
        use super::super::{QuantileState, STATE_BYTES};
        use crate::extension::aggregate::State;
        use crate::extension::forms::ValueType;
        use crate::extension::quantile_arguments::{QuantileParameters, ValueGrid};
        use crate::extension::serialization::{to_cbor, Bytes};
        use crate::mechanisms::quantile::IntegerGrid;

        #[derive(serde::Serialize)]
        struct Earlier<'a> {
            parameters: &'a QuantileParameters,
            counts: Bytes,
        }
        let float = ValueGrid::Float(Grid {
            lo: 0.0,
            hi: 1e6,
            size: 1 << 20,
        });
        let integer = ValueGrid::Integer(IntegerGrid::new(-40_000, 40_000, 1 << 10));
        let cases = [
            (float, ValueType::Float, vec![0.5], 70),
            (float, ValueType::Numeric, vec![0.1, 0.9], 5_000),
            (integer, ValueType::Smallint, vec![0.5], 3_000),
            (integer, ValueType::Bigint, vec![0.25, 0.5, 0.75], 40),
        ];
        // SAFETY: a test's transaction context outlives the states made in it.
        let memory = unsafe { pg_sys::CurrentMemoryContext };
        for (grid, value_type, alphas, values) in cases {
            let parameters = QuantileParameters {
                grid,
                value_type,
                alphas: alphas.into(),
                epsilon: 0.7,
            };
            let mut state = QuantileState::new(parameters.clone(), memory);
            let size = grid.size() as u64;
            for i in 0..values {
                state.counts.add(Place::of_half_cell(i * 7919 % (2 * size)));
            }
            let ours = state.to_bytes();
            assert_eq!(ours[0], STATE_BYTES);
            let earlier = to_cbor(&Earlier {
                parameters: &parameters,
                counts: Bytes(state.counts.to_bytes()),
            });
            assert!((0x80..0xc0).contains(&earlier[0]), "a CBOR array or map");
            for bytes in [ours, earlier] {
                let read = QuantileState::from_bytes(&bytes, memory);
                assert_eq!(read.parameters, parameters);
                assert_eq!(read.counts.total(), values);
                let occupied = |counts: &GridCounts<_>| counts.iter_occupied().collect::<Vec<_>>();
                assert_eq!(occupied(&read.counts), occupied(&state.counts));
            }
        }
    }

    /// With one seed, a parallel plan answers as the serial one: its partial states
    /// travel as bytes and combine into the same counts, and the draw reads only the
    /// counts. 40 distinct values travel counted per cell; 10⁵ as they came, with sorted
    /// counts; 4·10⁵, about a third in each process, dense (a sparse histogram goes dense
    /// once it sorts 82,944 cells, past a sixteenth of the grid).
    #[pg_test]
    fn a_parallel_plan_answers_as_the_serial_one_with_the_same_seed() {
        run(&[
            "CREATE TABLE spread AS SELECT (i % 40)::float8 AS few,
                    (i % 100000)::float8 / 100 AS many, i::float8 / 400 AS dense
               FROM generate_series(1, 400000) i",
            "ANALYZE spread",
        ]);
        let answers = |value: &str| -> Vec<String> {
            let query = format!("SELECT dp_quantile({value}, 0.3, 0, 1000, 0.5)::text FROM spread");
            column_by_seed(&query, 1..=5)
        };
        run(&["SET LOCAL max_parallel_workers_per_gather = 0"]);
        let serial: Vec<Vec<String>> = ["few", "many", "dense"].map(answers).into();
        force_parallel_plans();
        assert_parallel("SELECT dp_quantile(dense, 0.3, 0, 1000, 0.5) FROM spread");
        let parallel: Vec<Vec<String>> = ["few", "many", "dense"].map(answers).into();
        assert_eq!(serial, parallel);
        assert!(serial
            .iter()
            .all(|a| a.iter().collect::<std::collections::HashSet<_>>().len() > 1));
    }

    #[pg_test]
    fn quantiles_recursive_by_default_spend_epsilon_per_level() {
        grid_table();
        // Quartiles at ε = 2, two levels: the median is asked first, on all values (ties
        // broken at random), at ε = 1. Its law, from 10⁶ draws of the Rust sampler on the
        // same values, is what the SQL answers must follow; the split's median (ε/3,
        // exact) must be rejected.
        use rand::SeedableRng;
        let mut histogram = GridCounts::new(20);
        cells()
            .iter()
            .for_each(|&cell| histogram.add(Place::of_half_cell(cell)));
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(41);
        let mut reference = [0u64; 21];
        for _ in 0..1_000_000 {
            reference[sample_quantiles_recursive(&histogram, &[0.75, 0.5, 0.25], 2.0, &mut rng)[1]
                as usize] += 1;
        }
        let reference: Vec<f64> = reference.iter().map(|&c| c as f64 / 1e6).collect();
        let names: Vec<String> = (0..=20).map(|j| j.to_string()).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let counts = counts_of(
            &frequencies("SELECT (dp_quantiles(v, '{0.75, 0.5, 0.25}', 0, 20, 2.0))[2] FROM grid_draws GROUP BY g"),
            &names,
        );
        let split = quantile_distribution(&cells(), 20, 0.5, temperature(0.5, 2.0 / 3.0), true);
        assert_matches_distribution(&counts, &reference, &split);
        let unordered = column(
            "SELECT count(*)::text FROM (
                 SELECT dp_quantiles(v, '{0.9, 0.1, 0.5, 0.3}', 0, 20, 0.3) AS q FROM grid_draws GROUP BY g) s
              WHERE NOT (q[2] <= q[4] AND q[4] <= q[3] AND q[3] <= q[1])",
        );
        assert_eq!(unordered, ["0"]);
    }

    #[pg_test]
    fn quantiles_split_spend_epsilon_over_m_and_keep_the_order_of_alphas() {
        grid_table();
        run(&["SET pg_exp_mech.quantiles_method = split"]);
        // Two equal alphas at ε = 2: each answer follows dp_quantile at ε = 1 (sorting a
        // pair keeps its multiset).
        check(
            &format!(
                "SELECT unnest(dp_quantiles(v, '{{0.1, 0.1}}', 0, 20, 4.0)) FROM grid_draws WHERE g <= {} GROUP BY g",
                DRAWS / 2
            ),
            0.1,
            2.0,
        );
        let unordered = column(
            "SELECT count(*)::text FROM (
                 SELECT dp_quantiles(v, '{0.9, 0.1, 0.5}', 0, 20, 0.3) AS q FROM grid_draws GROUP BY g) s
              WHERE NOT (q[2] <= q[3] AND q[3] <= q[1])",
        );
        assert_eq!(unordered, ["0"]);
        run(&["RESET pg_exp_mech.quantiles_method"]);
    }

    /// Rows counted in place (count_row_in_place) skip NULL and NaN exactly as the guarded
    /// transition does: with the same seed, groups with NULLs and NaNs among their rows
    /// (a group's first row among them) answer as the same groups without them, for float
    /// and integer columns, with groups that stay sparse and one that goes dense.
    #[pg_test]
    fn rows_skipped_in_place_leave_the_answers_of_the_rows_without_them() {
        run(&[
            "CREATE TABLE gaps AS SELECT i % 50 AS g,
                    CASE WHEN i % 7 = 0 THEN NULL WHEN i % 11 = 0 THEN 'NaN'::float8
                         ELSE (i * 37 % 100000)::float8 / 100 END AS v,
                    CASE WHEN i % 7 = 3 THEN NULL ELSE i * 13 % 1000 END AS iv
               FROM generate_series(1, 200000) i",
            "SET LOCAL enable_hashagg = off",
            "SET LOCAL max_parallel_workers_per_gather = 0",
        ]);
        let answers = |query: &str| column_by_seed(query, 1..=3);
        for (value, kept) in [
            ("v", "v IS NOT NULL AND v <> 'NaN'"),
            ("iv", "iv IS NOT NULL"),
        ] {
            // (The answer first: `column` reads the first column.)
            for group in [" GROUP BY g ORDER BY g", ""] {
                let query = |filter: &str| {
                    format!(
                        "SELECT dp_quantile({value}, 0.5, 0, 1000, 1.0)::text
                           FROM gaps{filter}{group}"
                    )
                };
                let all = answers(&query(""));
                assert_eq!(
                    all,
                    answers(&query(&format!(" WHERE {kept}"))),
                    "{value}{group}"
                );
                // (Over all the rows, one group of 1.7*10^5 values, the median is sharp.)
                let distinct: std::collections::HashSet<_> = all.iter().collect();
                assert!(
                    group.is_empty() || distinct.len() > 10,
                    "{value}: few answers"
                );
            }
        }
    }

    #[pg_test]
    fn quantile_empty_input_is_a_uniform_grid_point() {
        run(&[
            "SET pg_exp_mech.seed = 32",
            "SET pg_exp_mech.quantile_grid_size = 10",
            "CREATE TABLE nothing(v float8)",
        ]);
        let names: Vec<String> = (0..=10).map(|j| (j * 10).to_string()).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let counts = counts_of(
            &frequencies("SELECT (SELECT dp_quantile(v, 0.5, 0, 100, 1.0) FROM nothing WHERE v > g) FROM generate_series(1, 11000) g"),
            &names,
        );
        let uniform = vec![1.0 / 11.0; 11];
        let mut skewed = vec![0.0; 11];
        skewed[5] = 1.0;
        assert_matches_distribution(&counts, &uniform, &normalise_log_weights(&skewed));
        let answers = column(
            "SELECT array_length(dp_quantiles(v, '{0.1, 0.9}', 0, 100, 1.0), 1)::text FROM nothing
",
        );
        // Two answers even with no row. A parameter of the rows is refused, with no
        // row as with rows.
        assert_eq!(answers, ["2"]);
        for (call, name) in [
            ("dp_quantile(v, v, 0, 100, 1.0)", "alpha"),
            ("dp_quantile(v, 0.5, v, 100, 1.0)", "lo"),
        ] {
            assert_eq!(
                error_of(&format!("SELECT {call} FROM nothing")),
                format!("22023: {name} must be a constant or a parameter of the statement, got an expression of the rows")
            );
        }
    }

    #[pg_test]
    fn quantile_accepts_integer_numeric_and_real_columns() {
        run(&["SET pg_exp_mech.quantile_grid_size = 200", "CREATE TABLE typed AS SELECT i, i::bigint AS b, i::numeric AS n, i::real AS r FROM generate_series(1, 101) i"]);
        // At ε = 1e6 the answer is the quantile of 1..101 on the integer grid: the unique
        // c with (1 − α)·#{x < c} = α·#{x > c}.
        let answers = column(
            "SELECT dp_quantile(i, 0.5, 0, 200, 1e6)::text FROM typed
             UNION ALL SELECT dp_quantile(b, 0.5, 0, 200, 1e6)::text FROM typed
             UNION ALL SELECT dp_quantile(n, 0.5, 0, 200, 1e6)::text FROM typed
             UNION ALL SELECT dp_quantile(r, 0.5, 0, 200, 1e6)::text FROM typed
             UNION ALL SELECT dp_quantiles(i, ARRAY[0.25, 0.75], 0, 200, 1e6)::text FROM typed",
        );
        assert_eq!(answers, ["51", "51", "51", "51", "{26,76}"]);
    }

    #[pg_test]
    fn quantile_invalid_parameters_raise_22023() {
        run(&["CREATE TABLE some_values AS SELECT i::float8 AS v FROM generate_series(1, 10) i"]);
        let cases = [
            (
                "dp_quantile(v, NULL, 0, 1, 1)",
                "alpha must be between 0 and 1, got NULL",
            ),
            (
                "dp_quantile(v, -0.1, 0, 1, 1)",
                "alpha must be between 0 and 1, got -0.1",
            ),
            (
                "dp_quantile(v, 1.5, 0, 1, 1)",
                "alpha must be between 0 and 1, got 1.5",
            ),
            (
                "dp_quantile(v, 'NaN', 0, 1, 1)",
                "alpha must be between 0 and 1, got NaN",
            ),
            (
                "dp_quantile(v, 0.5, 1, 1, 1)",
                "hi must be greater than lo (1), got 1",
            ),
            (
                "dp_quantile(v, 0.5, 2, 1, 1)",
                "hi must be greater than lo (2), got 1",
            ),
            (
                "dp_quantile(v, 0.5, '-Infinity', 1, 1)",
                "lo must be finite, got -Infinity",
            ),
            (
                "dp_quantile(v, 0.5, NULL, 1, 1)",
                "lo must be finite, got NULL",
            ),
            (
                "dp_quantile(v, 0.5, 0, 'Infinity', 1)",
                "hi must be finite, got Infinity",
            ),
            (
                "dp_quantile(v, 0.5, 0, 'NaN', 1)",
                "hi must be finite, got NaN",
            ),
            (
                "dp_quantile(v, 0.5, -1e308, 1e308, 1)",
                "hi must be within the largest finite double of lo (-1e+308), got 1e+308",
            ),
            (
                "dp_quantile(v, 0.5, 0, 1, 0)",
                "epsilon must be finite and greater than 0, got 0",
            ),
            (
                "dp_quantile(v, 0.5, 0, 1, NULL)",
                "epsilon must be finite and greater than 0, got NULL",
            ),
            (
                "dp_quantile(v, 0.5, 0, 1, 'NaN')",
                "epsilon must be finite and greater than 0, got NaN",
            ),
            (
                "dp_quantile(v, 0.5, 0, 1, 'Infinity')",
                "epsilon must be finite and greater than 0, got Infinity",
            ),
            (
                "dp_quantiles(v, NULL, 0, 1, 1)",
                "alphas must be a non-empty array, got NULL",
            ),
            (
                "dp_quantiles(v, '{}', 0, 1, 1)",
                "alphas must be a non-empty array, got {}",
            ),
            (
                "dp_quantiles(v, '{0.5, NULL}', 0, 1, 1)",
                "alphas must be between 0 and 1, got NULL",
            ),
            (
                "dp_quantiles(v, '{0.5, 2}', 0, 1, 1)",
                "alphas must be between 0 and 1, got 2",
            ),
            (
                "dp_quantiles(v, '{0.5}', 3, 1, 1)",
                "hi must be greater than lo (3), got 1",
            ),
        ];
        for (call, message) in cases {
            for filter in ["", "WHERE false"] {
                assert_eq!(
                    error_of(&format!("SELECT {call} FROM some_values {filter}")),
                    format!("22023: {message}"),
                    "{call} {filter}"
                );
            }
        }
        // Parameters of the rows: refused before any row, with rows or without.
        let of_the_rows = [
            ("dp_quantile(v, v / 100, 0, 1, 1)", "alpha"),
            ("dp_quantile(v, 0.5, v - 100, 1, 1)", "lo"),
            ("dp_quantile(v, 0.5, 0, v + 100, 1)", "hi"),
            ("dp_quantile(v, 0.5, 0, 1, v)", "epsilon"),
            ("dp_quantiles(v, ARRAY[v / 100], 0, 1, 1)", "alphas"),
        ];
        for (call, name) in of_the_rows {
            for filter in ["", "WHERE false"] {
                assert_eq!(
                    error_of(&format!(
                        "SELECT {call} FROM (SELECT v FROM some_values ORDER BY v) s {filter}"
                    )),
                    format!("22023: {name} must be a constant or a parameter of the statement, got an expression of the rows"),
                    "{call}"
                );
            }
        }
    }

    /// Whole numbers on a coarse integer grid: K = 10 steps for lo 0, hi 95, so the step
    /// is 10 and the points 0, 10, ..., 90, 95. Values on points, between them, beyond
    /// [lo, hi] and NULL, in a smallint, an integer and a bigint column.
    fn integer_table() {
        run(&[
            "SET pg_exp_mech.seed = 33",
            "SET pg_exp_mech.quantile_grid_size = 10",
            "CREATE TABLE integer_values(s smallint, i integer, b bigint)",
            "INSERT INTO integer_values
             SELECT v, v, v FROM unnest(ARRAY[10, 10, 14, 20, 37, 40, 40, 93, 95, -5, 200, NULL]) v",
            &format!("CREATE TABLE integer_draws AS SELECT g, s, i, b FROM integer_values, generate_series(1, {DRAWS}) g"),
            "ANALYZE integer_draws",
        ]);
    }

    /// Where the values above are counted on that grid, by half cell (2j at point j,
    /// 2j + 1 between j and j + 1): 14 between 10 and 20, 37 between 30 and 40, 93
    /// between 90 and 95, −5 at 0, 200 at 95 (point 10).
    const INTEGER_CELLS: [u64; 11] = [2, 2, 3, 4, 7, 8, 8, 19, 20, 0, 20];
    const INTEGER_POINTS: [&str; 11] = [
        "0", "10", "20", "30", "40", "50", "60", "70", "80", "90", "95",
    ];

    #[pg_test]
    fn quantile_of_integers_is_an_integer_grid_point_with_the_exact_distribution() {
        integer_table();
        let t = temperature(0.3, 1.0);
        let exact = quantile_distribution(&INTEGER_CELLS, 10, 0.3, t, true);
        // Counting each value at its nearest point instead (14 at 10, 37 at 40, 93 at
        // 95) gives another law, which must be rejected, and so must twice the
        // temperature.
        let snapped =
            quantile_distribution(&[2, 2, 2, 4, 8, 8, 8, 20, 20, 0, 20], 10, 0.3, t, true);
        for (value, type_name) in [("s", "smallint"), ("i", "integer"), ("b", "bigint")] {
            let query = format!(
                "SELECT dp_quantile({value}, 0.3, 0, 95, 1.0) FROM integer_draws GROUP BY g"
            );
            let counts = counts_of(&frequencies(&query), &INTEGER_POINTS);
            assert_eq!(counts.iter().sum::<u64>(), DRAWS as u64, "{value}");
            assert_matches_distribution(&counts, &exact, &snapped);
            assert_matches_distribution(
                &counts,
                &exact,
                &quantile_distribution(&INTEGER_CELLS, 10, 0.3, 2.0 * t, true),
            );
            assert_matches_distribution(
                &counts,
                &exact,
                &quantile_distribution(&INTEGER_CELLS, 10, 0.3, t, false),
            );
            let types = column(&format!(
                "SELECT pg_typeof(dp_quantile({value}, 0.5, 0, 95, 1.0))::text || ' ' ||
                        pg_typeof(dp_quantiles({value}, '{{0.5}}', 0, 95, 1.0))::text
                   FROM integer_values"
            ));
            assert_eq!(types, [format!("{type_name} {type_name}[]")]);
        }
    }

    #[pg_test]
    fn quantiles_of_integers_in_a_parallel_plan() {
        integer_table();
        force_parallel_plans();
        // dp_quantile over each type, and one alpha through dp_quantiles over bigint and
        // smallint (recursive: one level at the whole ε), follow dp_quantile's law in a
        // parallel plan.
        let t = temperature(0.8, 2.0);
        let exact = quantile_distribution(&INTEGER_CELLS, 10, 0.8, t, true);
        let off_by_one = quantile_distribution(&INTEGER_CELLS, 10, 0.8, t, false);
        for call in [
            "dp_quantile(s, 0.8, 0, 95, 2.0)",
            "dp_quantile(i, 0.8, 0, 95, 2.0)",
            "(dp_quantiles(b, '{0.8}', 0, 95, 2.0))[1]",
            "(dp_quantiles(s, '{0.8}', 0, 95, 2.0))[1]",
        ] {
            let query = format!("SELECT {call} FROM integer_draws GROUP BY g");
            assert_parallel(&query);
            let counts = counts_of(&frequencies(&query), &INTEGER_POINTS);
            assert_matches_distribution(&counts, &exact, &off_by_one);
        }
    }

    #[pg_test]
    fn quantile_of_integers_on_the_whole_number_grid_and_at_the_ends_of_the_types() {
        run(&[
            "SET pg_exp_mech.seed = 34",
            "CREATE TABLE ages AS SELECT (i % 90)::integer AS age FROM generate_series(1, 10000) i",
            "CREATE TABLE nothing_integer(s smallint, b bigint)",
        ]);
        // hi − lo fits the default grid: every whole number is a candidate, and a large
        // ε finds the true median (44 or 45 of 0..89 each ~111 times).
        let answers = column(
            "SELECT dp_quantile(age, 0.5, 0, 100, 1e6)::text FROM ages
             UNION ALL SELECT dp_quantiles(age, '{0.1, 0.9}', 0, 100, 1e6)::text FROM ages",
        );
        assert!(answers[0] == "44" || answers[0] == "45", "{answers:?}");
        assert_eq!(answers[1], "{8,80}");
        // The ends of the types are answers like any other grid point; over the whole
        // bigint range the step is ⌈(2^64 − 1)/2^20⌉ = 2^44, and every answer is
        // lo + j·2^44 or hi.
        let ends = column(
            "SELECT dp_quantile(s, 0.5, -32768, 32767, 1e6)::text FROM (VALUES (32767::smallint), (32767::smallint)) v(s)
             UNION ALL SELECT dp_quantile(s, 0.5, -32768, 32767, 1e6)::text FROM (VALUES ((-32768)::smallint)) v(s)
             UNION ALL SELECT dp_quantile(b, 1.0, 9223372036854775805, 9223372036854775807, 1e6)::text FROM (VALUES (9223372036854775807::bigint)) v(b)
             UNION ALL SELECT count(*) FILTER (WHERE (q::numeric + 9223372036854775808) % 17592186044416 <> 0
                                                 AND q <> 9223372036854775807)::text
                 FROM (SELECT (SELECT dp_quantile(b, 0.5, -9223372036854775808, 9223372036854775807, 0.001)
                                 FROM nothing_integer WHERE b > g) AS q
                         FROM generate_series(1, 1000) g) draws",
        );
        assert_eq!(ends, ["32767", "-32768", "9223372036854775807", "0"]);
        // No row: a uniform point of the whole-number grid, in the column's type.
        let names: Vec<String> = (0..=4).map(|j| j.to_string()).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let counts = counts_of(
            &frequencies("SELECT (SELECT dp_quantile(s, 0.5, 0, 4, 1.0) FROM nothing_integer WHERE s > g) FROM generate_series(1, 5000) g"),
            &names,
        );
        let mut skewed = vec![0.0; 5];
        skewed[2] = 1.0;
        assert_matches_distribution(&counts, &[0.2; 5], &normalise_log_weights(&skewed));
        assert_eq!(
            error_of("SELECT dp_quantile(s, 0.5, s, 4, 1.0) FROM nothing_integer"),
            "22023: lo must be a constant or a parameter of the statement, got an expression of the rows"
        );
    }

    #[pg_test]
    fn quantile_of_integers_invalid_parameters_raise_22023() {
        run(&["CREATE TABLE some_integers AS SELECT i::smallint AS s, i AS i, i::bigint AS b FROM generate_series(1, 10) i"]);
        let cases = [
            (
                "dp_quantile(s, 0.5, -40000, 1, 1)",
                "lo must be within the range of smallint, got -40000",
            ),
            (
                "dp_quantile(s, 0.5, 0, 32768, 1)",
                "hi must be within the range of smallint, got 32768",
            ),
            (
                "dp_quantile(i, 0.5, 0, 3000000000, 1)",
                "hi must be within the range of integer, got 3000000000",
            ),
            (
                "dp_quantile(b, 0.5, NULL, 1, 1)",
                "lo must be within the range of bigint, got NULL",
            ),
            (
                "dp_quantile(b, 0.5, 1, NULL, 1)",
                "hi must be within the range of bigint, got NULL",
            ),
            (
                "dp_quantile(i, 0.5, 5, 5, 1)",
                "hi must be greater than lo (5), got 5",
            ),
            (
                "dp_quantiles(b, '{0.5}', 7, -7, 1)",
                "hi must be greater than lo (7), got -7",
            ),
            (
                "dp_quantile(i, 1.5, 0, 1, 1)",
                "alpha must be between 0 and 1, got 1.5",
            ),
            (
                "dp_quantiles(s, '{}', 0, 1, 1)",
                "alphas must be a non-empty array, got {}",
            ),
            (
                "dp_quantile(b, 0.5, 0, 1, 0)",
                "epsilon must be finite and greater than 0, got 0",
            ),
        ];
        for (call, message) in cases {
            for filter in ["", "WHERE false"] {
                assert_eq!(
                    error_of(&format!("SELECT {call} FROM some_integers {filter}")),
                    format!("22023: {message}"),
                    "{call} {filter}"
                );
            }
        }
        assert_eq!(
            error_of("SELECT dp_quantile(i, 0.5, i::bigint - 100, 1, 1) FROM (SELECT i FROM some_integers ORDER BY i) s"),
            "22023: lo must be a constant or a parameter of the statement, got an expression of the rows"
        );
        // A fractional bound is not a bigint: the float8 aggregate answers, on its grid.
        let float =
            column("SELECT pg_typeof(dp_quantile(i, 0.5, 0.5, 10.5, 1))::text FROM some_integers");
        assert_eq!(float, ["double precision"]);
    }

    /// Memory, as PostgreSQL accounts it (the histograms live in the aggregate's memory
    /// context): EXPLAIN ANALYZE of a hash aggregation reports its peak.
    fn hash_aggregate_memory_kb(query: &str) -> u64 {
        let plan = column(&format!(
            "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) {query}"
        ))
        .join("\n");
        assert!(
            plan.contains("HashAggregate") && plan.contains("Batches: 1 "),
            "{plan}"
        );
        let at = plan
            .find("Memory Usage: ")
            .expect("hash aggregation reports its memory")
            + "Memory Usage: ".len();
        plan[at..]
            .split("kB")
            .next()
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// One group of 10^6 values uses about K + 1 = 2^20 + 1 one-byte counters (1 MiB;
    /// no cell holds 256 values here, so no carry): bound 1.5 MiB. 10^4 groups of 100
    /// values use sparse cells each: bound 2.5 KiB per group with PostgreSQL's own hash
    /// table and palloc's rounding, 25 MiB in all.
    #[pg_test]
    fn quantile_memory_stays_within_its_bounds() {
        run(&[
            "SET LOCAL work_mem = '1GB'",
            "SET LOCAL max_parallel_workers_per_gather = 0",
            // Stored group keys, so that PostgreSQL sizes its own hash table for the true
            // number of groups (its buckets count in the reported memory too).
            "CREATE TABLE million AS
             SELECT 1 AS one, i % 10000 AS g, (i::bigint * 7919 % 1000000)::float8 AS v
               FROM generate_series(1, 1000000) i",
            "ANALYZE million",
        ]);
        let one_group = hash_aggregate_memory_kb(
            "SELECT one, dp_quantile(v, 0.5, 0, 1e6, 1.0) FROM million GROUP BY one",
        );
        assert!(one_group <= 1536, "one group: {one_group} kB");
        assert!(
            one_group >= 1024,
            "the dense histogram is accounted: {one_group} kB"
        );
        let many_groups = hash_aggregate_memory_kb(
            "SELECT g, dp_quantile(v, 0.5, 0, 1e6, 1.0) FROM million GROUP BY g",
        );
        assert!(many_groups <= 25 * 1024, "10^4 groups: {many_groups} kB");
    }

    /// Every state lives in the aggregate's memory context, where hash aggregation counts
    /// it against work_mem (memory.rs, move_into): 10^5 groups of one row each report at
    /// least their states' size beside PostgreSQL's own 48 bytes a group (its hash
    /// entry and group key). Boxed on the Rust heap, the states were missing from it.
    #[pg_test]
    fn every_state_counts_in_the_aggregates_memory() {
        run(&[
            "SET LOCAL work_mem = '1GB'",
            "SET LOCAL max_parallel_workers_per_gather = 0",
            "CREATE TABLE singles AS
             SELECT i AS g, (i % 1000)::float8 AS v, 'item-' || i AS item
               FROM generate_series(1, 100000) i",
            "ANALYZE singles",
        ]);
        let states = [
            (
                "dp_quantile(v, 0.5, 0, 1e6, 1.0)",
                std::mem::size_of::<super::super::QuantileState>(),
            ),
            (
                "dp_argmax(item, 1, 1.0)",
                std::mem::size_of::<super::super::super::item_scores::ItemScores>(),
            ),
        ];
        for (call, state_size) in states {
            let kb = hash_aggregate_memory_kb(&format!("SELECT g, {call} FROM singles GROUP BY g"));
            let least = 100_000 * (state_size + 48) / 1024;
            assert!(kb as usize >= least, "{call}: {kb} kB, at least {least}");
        }
    }
}
