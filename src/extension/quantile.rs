//! dp_quantile and dp_quantiles: the exponential mechanism on a public grid, from one
//! histogram per group (mechanisms::quantile). Their forms are described in forms.rs; the
//! steps around the state (transition, final, combine, serialization) are aggregate.rs's.

use super::aggregate::{self, final_state, transition, Source, State};
use super::arguments::{Argument, ArrayArgument, CallArguments};
use super::forms::{Form, Parameter, DP_QUANTILE, DP_QUANTILES};
use super::guc;
use super::items::array_elements;
use super::memory::ContextAllocator;
use super::serialization::Bytes;
use crate::error::Error;
use crate::mechanisms::quantile::{
    sample_quantile, sample_quantiles, sample_quantiles_recursive, Grid, Histogram, Snapper,
};
use crate::mechanisms::rng;
use crate::parameters;
use pgrx::pg_sys::{self, Datum, MemoryContext};
use pgrx::prelude::*;
use pgrx::Internal;
use serde::{Deserialize, Serialize};

/// The parameters of one quantile aggregate, fixed by its first row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuantileParameters {
    grid: Grid,
    /// One alpha for dp_quantile, several for dp_quantiles.
    alphas: Vec<f64>,
    epsilon: f64,
}

/// The alpha argument(s) of a call.
#[derive(Debug, Clone, Copy)]
enum Alphas {
    One(Option<f64>),
    /// A float8[] (None: SQL NULL), and its argument position.
    Many(Option<Datum>, usize),
}

/// The parameters as one row (or the call) gives them, before validation.
#[derive(Debug, Clone, Copy)]
pub struct QuantileArguments {
    alphas: Alphas,
    lo: Option<f64>,
    hi: Option<f64>,
    epsilon: Option<f64>,
}

/// The elements of a float8[] (NULL elements as None).
///
/// # Safety
/// `array` must be a valid, non-NULL float8[] datum.
unsafe fn float_array(array: Datum) -> Vec<Option<f64>> {
    let alignment = pg_sys::TYPALIGN_DOUBLE as std::ffi::c_char;
    // SAFETY: a float8[] has 8-byte, by-value, double-aligned elements.
    unsafe { array_elements(array, pg_sys::FLOAT8OID, 8, true, alignment) }
        .into_iter()
        .map(|element| element.map(|d| f64::from_bits(d.value() as u64)))
        .collect()
}

impl QuantileArguments {
    fn validate(&self) -> Result<QuantileParameters, Error> {
        let alphas = match self.alphas {
            Alphas::One(alpha) => vec![parameters::alpha(alpha)?],
            Alphas::Many(array, _) => {
                // SAFETY: a non-NULL float8[] argument of the call (the aggregate's
                // signature says double precision[]).
                let values = array.map(|a| unsafe { float_array(a) });
                parameters::alphas(values.as_deref())?
            }
        };
        let (lo, hi) = parameters::bounds(self.lo, self.hi)?;
        let epsilon = parameters::epsilon(self.epsilon)?;
        let grid = Grid {
            lo,
            hi,
            size: guc::quantile_grid_size(),
        };
        Ok(QuantileParameters {
            grid,
            alphas,
            epsilon,
        })
    }
}

/// The state of one group: its parameters and the histogram of its values.
pub struct QuantileState {
    parameters: QuantileParameters,
    snapper: Snapper,
    histogram: Histogram<ContextAllocator>,
    /// dp_quantiles: the first row's alphas, to check that later rows pass the same.
    alphas: Option<ArrayArgument>,
}

impl QuantileState {
    fn new(parameters: QuantileParameters, memory: MemoryContext) -> Self {
        // SAFETY: `memory` is the aggregate's (or the current) memory context, which
        // outlives the state that holds the histogram.
        let histogram = Histogram::new_in(parameters.grid.size, unsafe {
            ContextAllocator::new(memory)
        });
        Self {
            snapper: parameters.grid.snapper(),
            parameters,
            histogram,
            alphas: None,
        }
    }
}

impl State for QuantileState {
    type Arguments = QuantileArguments;
    type Parameters = QuantileParameters;
    const TRANSITION: &'static str = "a quantile transition function";
    const COMBINE: &'static str = "dp_quantile_combine";
    const SERIALIZE: &'static str =
        "dp_quantile_serialize (the serial function of a partial aggregation)";

    #[inline]
    fn read(form: &Form, source: &impl Source) -> Option<QuantileArguments> {
        let at = form.positions;
        let alpha = at.alpha.expect("every quantile form has alpha or alphas");
        let alphas = if form.parameters.contains(&Parameter::Alphas) {
            match source.argument(alpha) {
                Argument::Known(array) => Alphas::Many(array, alpha),
                Argument::Unknown => return None,
            }
        } else {
            Alphas::One(source.float(alpha)?)
        };
        Some(QuantileArguments {
            alphas,
            lo: source.float(at.lo.expect("every quantile form has lo"))?,
            hi: source.float(at.hi.expect("every quantile form has hi"))?,
            epsilon: source.float(at.epsilon)?,
        })
    }

    fn validate(form: &Form, source: &impl Source) -> Result<(), Error> {
        // A parameter that depends on the rows is checked by each row.
        Self::read(form, source).map_or(Ok(()), |arguments| arguments.validate().map(drop))
    }

    unsafe fn first(
        fcinfo: pg_sys::FunctionCallInfo,
        _form: &Form,
        arguments: &QuantileArguments,
        memory: MemoryContext,
    ) -> Result<Option<Self>, Error> {
        let mut quantiles = QuantileState::new(arguments.validate()?, memory);
        if let Alphas::Many(Some(array), position) = arguments.alphas {
            // SAFETY: the call's own non-NULL array argument at `position`.
            quantiles.alphas = Some(unsafe { ArrayArgument::new(fcinfo, position, array) });
        }
        Ok(Some(quantiles))
    }

    #[inline]
    fn check_row(&self, arguments: &QuantileArguments) -> Result<(), Error> {
        let first = &self.parameters;
        match (arguments.alphas, &self.alphas) {
            (Alphas::One(alpha), _) => parameters::unchanged("alpha", first.alphas[0], alpha)?,
            // SAFETY: a non-NULL array argument of the transition call.
            (Alphas::Many(Some(array), _), Some(alphas)) if unsafe { alphas.is_same(array) } => {}
            (Alphas::Many(..), _) => {
                return Err(Error::ParameterChanged {
                    name: "alphas",
                    first: "the array of the first row".into(),
                    now: "another array".into(),
                })
            }
        }
        parameters::unchanged("lo", first.grid.lo, arguments.lo)?;
        parameters::unchanged("hi", first.grid.hi, arguments.hi)?;
        parameters::unchanged("epsilon", first.epsilon, arguments.epsilon)
    }

    /// NULL and NaN values are skipped; ±∞ clamp to the ends of the grid.
    #[inline]
    unsafe fn add_row(&mut self, row: &CallArguments) {
        if let Some(value) = row.float(1).filter(|v| !v.is_nan()) {
            let cell = self.snapper.cell(value);
            self.histogram.add(cell);
        }
    }

    fn parameters(&self) -> &QuantileParameters {
        &self.parameters
    }

    fn privacy_cost(&self) -> (f64, f64) {
        (self.parameters.epsilon, 0.0)
    }

    fn empty_like(other: &Self, memory: MemoryContext) -> Self {
        QuantileState::new(other.parameters.clone(), memory)
    }

    fn merge(&mut self, other: &Self) {
        self.histogram.merge(&other.histogram);
    }

    fn to_bytes(&self) -> Vec<u8> {
        let serialized = SerializedQuantiles {
            parameters: self.parameters.clone(),
            histogram: Bytes(self.histogram.to_bytes()),
        };
        serde_cbor::to_vec(&serialized).expect("the state serializes")
    }

    fn from_bytes(bytes: &[u8], memory: MemoryContext) -> Self {
        let serialized: SerializedQuantiles =
            serde_cbor::from_slice(bytes).expect("a state written by dp_quantile_serialize");
        let mut quantiles = QuantileState::new(serialized.parameters, memory);
        let grid_size = quantiles.parameters.grid.size;
        // SAFETY: as in QuantileState::new.
        let allocator = unsafe { ContextAllocator::new(memory) };
        quantiles.histogram = Histogram::from_bytes(grid_size, &serialized.histogram.0, allocator);
        quantiles
    }
}

/// What dp_quantile_serialize writes: the parameters and the histogram's own encoding.
#[derive(Serialize, Deserialize)]
struct SerializedQuantiles {
    parameters: QuantileParameters,
    histogram: Bytes,
}

crate::version_1_function_record!(pg_finfo_dp_quantile_trans);

/// Transition function of dp_quantile.
#[pg_guard]
#[no_mangle]
pub unsafe extern "C-unwind" fn dp_quantile_trans(fcinfo: pg_sys::FunctionCallInfo) -> Datum {
    // SAFETY: PostgreSQL calls it as the transition function of dp_quantile.
    unsafe { transition::<QuantileState>(fcinfo, &DP_QUANTILE) }
}

crate::version_1_function_record!(pg_finfo_dp_quantiles_trans);

/// Transition function of dp_quantiles.
#[pg_guard]
#[no_mangle]
pub unsafe extern "C-unwind" fn dp_quantiles_trans(fcinfo: pg_sys::FunctionCallInfo) -> Datum {
    // SAFETY: PostgreSQL calls it as the transition function of dp_quantiles.
    unsafe { transition::<QuantileState>(fcinfo, &DP_QUANTILES) }
}

/// Samples grid point c with probability ∝ exp(ε·u(c) / (2·max(α, 1−α))).
#[pg_extern(parallel_safe)]
fn dp_quantile_final(state: Internal, fcinfo: pg_sys::FunctionCallInfo) -> Option<f64> {
    let arity = DP_QUANTILE.forms[0].arity();
    // SAFETY: PostgreSQL calls it as the final function of dp_quantile.
    let quantiles = unsafe { final_state::<QuantileState>(fcinfo, &state, &DP_QUANTILE, arity) }?;
    let parameters = &quantiles.parameters;
    let point = rng::with_generator(guc::seeding(), |rng| {
        sample_quantile(
            &quantiles.histogram,
            parameters.alphas[0],
            parameters.epsilon,
            rng,
        )
    });
    Some(parameters.grid.point(point))
}

/// One answer per alpha, ordered like the alphas, by the method of
/// pg_exp_mech.quantiles_method (recursive splitting by default, or ε/m each).
#[pg_extern(parallel_safe)]
fn dp_quantiles_final(state: Internal, fcinfo: pg_sys::FunctionCallInfo) -> Option<Vec<f64>> {
    let arity = DP_QUANTILES.forms[0].arity();
    // SAFETY: PostgreSQL calls it as the final function of dp_quantiles.
    let quantiles = unsafe { final_state::<QuantileState>(fcinfo, &state, &DP_QUANTILES, arity) }?;
    let parameters = &quantiles.parameters;
    let sample = match guc::quantiles_method() {
        guc::QuantilesMethod::Recursive => sample_quantiles_recursive,
        guc::QuantilesMethod::Split => sample_quantiles,
    };
    let points = rng::with_generator(guc::seeding(), |rng| {
        sample(
            &quantiles.histogram,
            &parameters.alphas,
            parameters.epsilon,
            rng,
        )
    });
    Some(
        points
            .into_iter()
            .map(|j| parameters.grid.point(j))
            .collect(),
    )
}

#[pg_extern(parallel_safe)]
fn dp_quantile_combine(
    first: Internal,
    second: Internal,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Internal {
    // SAFETY: PostgreSQL calls it as the combine function of the quantile aggregates.
    unsafe { aggregate::combine::<QuantileState>(fcinfo, first, second) }
}

#[pg_extern(parallel_safe, strict)]
fn dp_quantile_serialize(state: Internal, fcinfo: pg_sys::FunctionCallInfo) -> Vec<u8> {
    // SAFETY: PostgreSQL calls it as their serialize function (and it checks that).
    unsafe { aggregate::serialize::<QuantileState>(fcinfo, state) }
}

#[pg_extern(parallel_safe, strict)]
fn dp_quantile_deserialize(bytes: &[u8], _unused: Internal) -> Internal {
    aggregate::deserialize::<QuantileState>(bytes)
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use crate::extension::sql_testing::{
        assert_parallel, column, counts_of, error_of, force_parallel_plans, frequencies, run, DRAWS,
    };
    use crate::mechanisms::quantile::{sample_quantiles_recursive, temperature, Grid, Histogram};
    use crate::testing::{
        assert_matches_distribution, normalise_log_weights, quantile_distribution,
    };
    use pgrx::prelude::*;

    /// On a coarse grid (lo 0, hi 20, K = 20), values on grid points and between them,
    /// plus the values every quantile must survive: NULL and NaN (skipped), ±∞ (clamped).
    const VALUES: &str = "(2), (2), (2.4), (4.6), (5), (9), (13), (13), (20), (NULL), ('NaN'),
                          ('Infinity'), ('-Infinity'), (-7), (35)";

    /// The cells the values above count in: 2.4 → 2, 4.6 → 5, ∞ and 35 → 20, −∞ and −7 → 0.
    fn cells() -> Vec<u32> {
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
        let cells: Vec<u32> = values.iter().map(|&v| grid.cell(v)).collect();
        assert_eq!(cells, [2, 2, 2, 5, 5, 9, 13, 13, 20, 20, 0, 0, 20]);
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

    #[pg_test]
    fn quantile_high_alpha_distribution_in_a_parallel_plan() {
        grid_table();
        force_parallel_plans();
        let query = "SELECT dp_quantile(v, 0.9, 0, 20, 2.0) FROM grid_draws GROUP BY g";
        assert_parallel(query);
        check(query, 0.9, 2.0);
    }

    #[pg_test]
    fn quantiles_recursive_by_default_spend_epsilon_per_level() {
        grid_table();
        // Quartiles at ε = 2, two levels: the median is asked first, on all values (ties
        // broken at random), at ε = 1. Its law, from 10⁶ draws of the Rust sampler on the
        // same values, is what the SQL answers must follow; the split's median (ε/3,
        // exact) must be rejected.
        use rand::SeedableRng;
        let mut histogram = Histogram::new(20);
        cells().iter().for_each(|&cell| histogram.add(cell));
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
             UNION ALL SELECT dp_quantile(v, v, 0, 100, 1.0)::text FROM nothing
             UNION ALL SELECT dp_quantile(v, 0.5, v, 100, 1.0)::text FROM nothing",
        );
        // Two answers even with no row; NULL when a parameter depends on the rows.
        assert_eq!(answers, ["2", "NULL", "NULL"]);
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
        let changing = [
            ("dp_quantile(v, v / 100, 0, 1, 1)", "alpha must be the same on every row of an aggregate, got 0.01 and then 0.02"),
            ("dp_quantile(v, 0.5, v - 100, 1, 1)", "lo must be the same on every row of an aggregate, got -99 and then -98"),
            ("dp_quantile(v, 0.5, 0, v + 100, 1)", "hi must be the same on every row of an aggregate, got 101 and then 102"),
            ("dp_quantile(v, 0.5, 0, 1, v)", "epsilon must be a constant or a parameter of the statement, got an expression of the rows"),
            ("dp_quantiles(v, ARRAY[v / 100], 0, 1, 1)", "alphas must be the same on every row of an aggregate, got the array of the first row and then another array"),
        ];
        for (call, message) in changing {
            assert_eq!(
                error_of(&format!(
                    "SELECT {call} FROM (SELECT v FROM some_values ORDER BY v) s"
                )),
                format!("22023: {message}"),
                "{call}"
            );
        }
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
}
