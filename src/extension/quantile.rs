//! dp_quantile and dp_quantiles: the exponential mechanism on a public grid, from one
//! histogram per group (mechanisms::quantile), over float8 values (and what casts to it)
//! or over smallint, integer and bigint values, answered in their own type. Their forms
//! are described in forms.rs; the steps around the state (transition, final, combine,
//! serialization) are aggregate.rs's.

use super::aggregate::{self, final_state, transition, Source, State};
use super::arguments::{numeric_to_f64, Argument, CallArguments};
use super::forms::{
    Aggregate, Family, Form, Parameter, ValueType, DP_QUANTILE, DP_QUANTILES, DP_QUANTILES_BIGINT,
    DP_QUANTILES_INTEGER, DP_QUANTILES_NUMERIC, DP_QUANTILES_SMALLINT, DP_QUANTILE_BIGINT,
    DP_QUANTILE_INTEGER, DP_QUANTILE_NUMERIC, DP_QUANTILE_SMALLINT,
};
use super::guc;
use super::memory::ContextAllocator;
use super::quantile_arguments::{Alphas, Bounds, QuantileArguments, QuantileParameters, ValueGrid};
use super::serialization::{to_cbor, Bytes};
use crate::error::Error;
use crate::mechanisms::quantile::{
    sample_quantile, sample_quantiles, sample_quantiles_recursive, GridCounts, IntegerGrid,
    Locator, Place,
};
use crate::mechanisms::rng;
use pgrx::pg_sys::{self, Datum, MemoryContext};
use pgrx::prelude::*;
use pgrx::Internal;
use serde::{Deserialize, Serialize};

/// How a row's value finds its place on the grid: integer datums are passed by value,
/// each type read at its own width.
#[derive(Debug, Clone, Copy)]
enum Locating {
    Float(Locator),
    /// numeric datums (pointers), converted without error, on the float grid.
    Numeric(Locator),
    Smallint(IntegerGrid),
    Integer(IntegerGrid),
    Bigint(IntegerGrid),
}

/// Where a row's value lies, as far as its datum alone says.
enum Located {
    Place(Place),
    /// NaN: not counted.
    NotANumber,
    /// A numeric datum is a pointer (it may need detoasting): located by the caller.
    Numeric(Locator),
}

impl Locating {
    /// The place of a non-NULL value of a by-value type, or what the caller must do with it
    /// (the guarded transition's `add_row`).
    #[inline(always)]
    fn by_value(&self, value: Datum) -> Located {
        match self {
            Locating::Float(locator) => Self::float(locator, value),
            Locating::Numeric(locator) => Located::Numeric(*locator),
            Locating::Smallint(grid) => Located::Place(grid.locate(value.value() as i16 as i64)),
            Locating::Integer(grid) => Located::Place(grid.locate(value.value() as i32 as i64)),
            Locating::Bigint(grid) => Located::Place(grid.locate(value.value() as i64)),
        }
    }

    /// [`Locating::by_value`] in the transition of `kind` values, for a rule of that
    /// by-value kind; None for numeric values and for a rule of another kind (the guarded
    /// transition then takes the row). `kind` is a constant where this is inlined (each
    /// transition symbol is one aggregate's, [`value_kind`]), and a state's rule is its
    /// aggregate's kind: a row tests one tag and takes its path, with no dispatch on the
    /// rule (issue 22). No PostgreSQL call, and no panic on validated parameters
    /// ([`count_row_in_place`]), so that rows may be counted outside pgrx's guard.
    #[inline(always)]
    fn by_value_of(&self, kind: ValueType, value: Datum) -> Option<Located> {
        Some(match (kind, self) {
            (ValueType::Float, Locating::Float(locator)) => Self::float(locator, value),
            (ValueType::Smallint, Locating::Smallint(grid)) => {
                Located::Place(grid.locate(value.value() as i16 as i64))
            }
            (ValueType::Integer, Locating::Integer(grid)) => {
                Located::Place(grid.locate(value.value() as i32 as i64))
            }
            (ValueType::Bigint, Locating::Bigint(grid)) => {
                Located::Place(grid.locate(value.value() as i64))
            }
            _ => return None,
        })
    }

    /// A float8 datum's place; NaN is not counted.
    #[inline(always)]
    fn float(locator: &Locator, value: Datum) -> Located {
        let value = f64::from_bits(value.value() as u64);
        if value.is_nan() {
            return Located::NotANumber;
        }
        Located::Place(locator.locate(value))
    }
}

/// The state of one group: its parameters and the counts of its values on the grid.
/// What each row reads comes first, so that with thousands of groups a row's cache misses
/// are few (issue 22): the locating rule, then the histograms' totals and pending cells.
/// Aligned to a cache line, a float value counted in place between grid points touches
/// two lines of its state (the locating rule; the histogram's total and pending cells),
/// where an 8-byte-aligned state spread the same bytes over three.
#[repr(C, align(64))]
pub struct QuantileState {
    locating: Locating,
    counts: GridCounts<ContextAllocator>,
    parameters: QuantileParameters,
}

// The locating rule takes the first 80 bytes, the histogram of values between points
// follows with what a row reads of it (GridCounts::ROW_BYTES, tested there): two lines.
// The state and its reset callback stay in one 512-byte chunk (memory::request_size).
const _: () = assert!(crate::extension::memory::request_size::<QuantileState>() <= 512);
const _: () = assert!(
    std::mem::offset_of!(QuantileState, locating) == 0
        && std::mem::size_of::<Locating>() <= 80
        && std::mem::offset_of!(QuantileState, counts) <= 80
        && std::mem::offset_of!(QuantileState, counts) + GridCounts::<ContextAllocator>::ROW_BYTES
            <= 128
);

impl QuantileState {
    fn new(parameters: QuantileParameters, memory: MemoryContext) -> Self {
        // SAFETY: `memory` is the aggregate's (or the current) memory context, which
        // outlives the state that holds the histograms.
        let counts = GridCounts::new_in(parameters.grid.size(), unsafe {
            ContextAllocator::new(memory)
        });
        let locating = match (parameters.grid, parameters.value_type) {
            (ValueGrid::Float(grid), ValueType::Numeric) => Locating::Numeric(grid.locator()),
            (ValueGrid::Float(grid), _) => Locating::Float(grid.locator()),
            (ValueGrid::Integer(grid), ValueType::Smallint) => Locating::Smallint(grid),
            (ValueGrid::Integer(grid), ValueType::Integer) => Locating::Integer(grid),
            (ValueGrid::Integer(grid), _) => Locating::Bigint(grid),
        };
        Self {
            parameters,
            locating,
            counts,
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
    const DESERIALIZE: &'static str =
        "dp_quantile_deserialize (the deserial function of a partial aggregation's combine)";

    #[inline]
    fn read(form: &Form, source: &impl Source) -> Option<QuantileArguments> {
        let Family::Quantile(value_type) = form.family else {
            unreachable!("a quantile form");
        };
        let at = form.positions;
        let alpha = at.alpha.expect("every quantile form has alpha or alphas");
        let alphas = if form.parameters.contains(&Parameter::Alphas) {
            match source.argument(alpha) {
                Argument::Known(array) => Alphas::Many(array),
                Argument::Unknown => return None,
            }
        } else {
            Alphas::One(source.float(alpha)?)
        };
        let (lo, hi) = (
            at.lo.expect("every quantile form has lo"),
            at.hi.expect("every quantile form has hi"),
        );
        let bounds = match value_type {
            ValueType::Float | ValueType::Numeric => {
                Bounds::Float(source.float(lo)?, source.float(hi)?)
            }
            _ => Bounds::Integer(source.bigint(lo)?, source.bigint(hi)?),
        };
        Some(QuantileArguments {
            value_type,
            alphas,
            bounds,
            epsilon: source.float(at.epsilon)?,
        })
    }

    fn validate(form: &Form, source: &impl Source) -> Result<(), Error> {
        // A parameter that depends on the rows is checked by each row.
        Self::read(form, source).map_or(Ok(()), |arguments| arguments.validate().map(drop))
    }

    unsafe fn first(
        _fcinfo: pg_sys::FunctionCallInfo,
        _form: &Form,
        arguments: &QuantileArguments,
        memory: MemoryContext,
    ) -> Result<Option<Self>, Error> {
        Ok(Some(QuantileState::new(arguments.validate()?, memory)))
    }

    /// NULL and NaN values are skipped; ±∞ and values beyond [lo, hi] clamp to its ends.
    #[inline]
    unsafe fn add_row(&mut self, row: &CallArguments) {
        let Some(value) = row.datum(1) else {
            return;
        };
        if cfg!(feature = "bench_floor") {
            return; // make bench-profile's floor build: the row is not counted
        }
        let place = match self.locating.by_value(value) {
            Located::Place(place) => place,
            Located::NotANumber => return,
            Located::Numeric(locator) => {
                // SAFETY: a non-NULL numeric argument of the transition call.
                let value = unsafe { numeric_to_f64(value) };
                if value.is_nan() {
                    return;
                }
                locator.locate(value)
            }
        };
        self.counts.add(place);
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
        self.counts.merge(&other.counts);
    }

    fn to_bytes(&self) -> Vec<u8> {
        let serialized = SerializedQuantiles {
            parameters: self.parameters.clone(),
            counts: Bytes(self.counts.to_bytes()),
        };
        to_cbor(&serialized)
    }

    fn from_bytes(bytes: &[u8], memory: MemoryContext) -> Self {
        let serialized: SerializedQuantiles =
            serde_cbor::from_slice(bytes).expect("a state written by dp_quantile_serialize");
        let mut quantiles = QuantileState::new(serialized.parameters, memory);
        let grid_size = quantiles.parameters.grid.size();
        // SAFETY: as in QuantileState::new.
        let allocator = unsafe { ContextAllocator::new(memory) };
        quantiles.counts = GridCounts::from_bytes(grid_size, &serialized.counts.0, allocator);
        quantiles
    }
}

/// What dp_quantile_serialize writes: the parameters and the counts' own encoding.
#[derive(Serialize, Deserialize)]
struct SerializedQuantiles {
    parameters: QuantileParameters,
    counts: Bytes,
}

/// A row counted without pgrx's guard, when it needs no more than that: a group's later
/// row whose value is NULL, or of a by-value type and fits its histogram's pending cells
/// (no allocation, no merge) or a dense histogram's counter without a carry. None: the
/// guarded transition takes the row (a group's first row, a list that must grow or
/// merge or a counter that reaches 256 (that row is located twice), numeric values, a
/// state whose rule is not of `kind`, which [`value_kind`] rules out). In
/// the grouped dp_quantile of `make bench` the guard and the calls
/// around it took 4-6 % of the query (issue 22).
///
/// Sound without the guard, which turns PostgreSQL's errors and Rust's panics into each
/// other at the boundary: nothing here calls PostgreSQL (so no error can longjmp over
/// these frames) or allocates, and nothing can panic with the parameters a state was
/// made from: no indexing but within bounds; the integer grid divides only by a step of at least 2; the
/// clamps of the locate functions assert lo <= hi, neither NaN, which validation
/// required before the state existed (parameters.rs: finite lo < hi).
///
/// # Safety
/// `fcinfo` must be the call info of a quantile transition function of `kind` values.
#[inline(always)]
unsafe fn count_row_in_place(fcinfo: pg_sys::FunctionCallInfo, kind: ValueType) -> Option<Datum> {
    // SAFETY: a valid call info (the caller's contract).
    let arguments = unsafe { &*fcinfo };
    // Every quantile transition takes the state and the value first (aggregates.sql).
    if arguments.nargs < 2 {
        return None;
    }
    // SAFETY: nargs >= 2 arguments follow the call info.
    let (state, value) = unsafe {
        let arguments = arguments.args.as_ptr();
        (&*arguments, &*arguments.add(1))
    };
    if state.isnull || state.value.is_null() {
        return None;
    }
    if value.isnull || cfg!(feature = "bench_floor") {
        // (make bench-profile's floor build counts nothing, and no row of it pays the
        // guard a real build's rows skip.)
        return Some(state.value);
    }
    // SAFETY: a non-NULL state of a quantile transition is the QuantileState it returned
    // before (aggregate::transition), which no one else holds during this call.
    let quantiles = unsafe { &mut *state.value.cast_mut_ptr::<QuantileState>() };
    let counted = match quantiles.locating.by_value_of(kind, value.value) {
        Some(Located::Place(place)) => quantiles.counts.add_in_place(place),
        Some(Located::NotANumber) => true,
        // None: numeric, or a rule of another kind (never met); by_value_of gives no
        // Numeric.
        Some(Located::Numeric(_)) | None => false,
    };
    counted.then_some(state.value)
}

/// The value type a quantile aggregate counts, at compile time: the kind its transition
/// symbol locates by in place ([`count_row_in_place`]). Every form of the aggregate must
/// count it, since a state's rule is made from its form's kind: otherwise each row would
/// quietly take the guarded path.
const fn value_kind(aggregate: &Aggregate) -> ValueType {
    let Family::Quantile(kind) = aggregate.family else {
        panic!("a quantile aggregate");
    };
    let mut i = 0;
    while i < aggregate.forms.len() {
        match aggregate.forms[i].family {
            Family::Quantile(form_kind) if form_kind as u8 == kind as u8 => {}
            _ => panic!("every form of a quantile aggregate counts its value type"),
        }
        i += 1;
    }
    kind
}

/// Whether `symbol` is `{key}_trans`, the transition function aggregates.sql names.
const fn is_transition_of(symbol: &str, key: &str) -> bool {
    let (symbol, key, suffix) = (symbol.as_bytes(), key.as_bytes(), b"_trans");
    if symbol.len() != key.len() + suffix.len() {
        return false;
    }
    let mut i = 0;
    while i < symbol.len() {
        let expected = if i < key.len() {
            key[i]
        } else {
            suffix[i - key.len()]
        };
        if symbol[i] != expected {
            return false;
        }
        i += 1;
    }
    true
}

/// The transition functions, one C symbol per aggregate (`{key}_trans`, aggregates.sql,
/// checked at compile time): most rows in place, unguarded; the others through the
/// guarded transition.
macro_rules! quantile_transitions {
    ($($function:ident, $record:ident, $aggregate:ident;)*) => {$(
        crate::version_1_function_record!($record);

        /// A transition function of the quantile aggregates.
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $function(fcinfo: pg_sys::FunctionCallInfo) -> Datum {
            const _: () = assert!(is_transition_of(stringify!($function), $aggregate.key));
            const KIND: ValueType = value_kind(&$aggregate);
            // SAFETY: PostgreSQL calls it as the transition function of this aggregate.
            if let Some(state) = unsafe { count_row_in_place(fcinfo, KIND) } {
                return state;
            }
            #[pg_guard]
            unsafe extern "C-unwind" fn guarded(fcinfo: pg_sys::FunctionCallInfo) -> Datum {
                // SAFETY: as above.
                unsafe { transition::<QuantileState>(fcinfo, &$aggregate) }
            }
            // SAFETY: as above.
            unsafe { guarded(fcinfo) }
        }
    )*};
}

quantile_transitions! {
    dp_quantile_trans, pg_finfo_dp_quantile_trans, DP_QUANTILE;
    dp_quantiles_trans, pg_finfo_dp_quantiles_trans, DP_QUANTILES;
    dp_quantile_smallint_trans, pg_finfo_dp_quantile_smallint_trans, DP_QUANTILE_SMALLINT;
    dp_quantiles_smallint_trans, pg_finfo_dp_quantiles_smallint_trans, DP_QUANTILES_SMALLINT;
    dp_quantile_integer_trans, pg_finfo_dp_quantile_integer_trans, DP_QUANTILE_INTEGER;
    dp_quantiles_integer_trans, pg_finfo_dp_quantiles_integer_trans, DP_QUANTILES_INTEGER;
    dp_quantile_bigint_trans, pg_finfo_dp_quantile_bigint_trans, DP_QUANTILE_BIGINT;
    dp_quantiles_bigint_trans, pg_finfo_dp_quantiles_bigint_trans, DP_QUANTILES_BIGINT;
    dp_quantile_numeric_trans, pg_finfo_dp_quantile_numeric_trans, DP_QUANTILE_NUMERIC;
    dp_quantiles_numeric_trans, pg_finfo_dp_quantiles_numeric_trans, DP_QUANTILES_NUMERIC;
}

/// The grid and the answers (grid indices, one per alpha, in the order of the alphas) of
/// a final call of `aggregate`: dp_quantile samples P(c) ∝ exp(ε·u(c) / (2·max(α, 1−α)));
/// dp_quantiles follows pg_exp_mech.quantiles_method (recursive splitting by default, or
/// ε/m each). None (SQL NULL) when a parameter depends on the rows and no row came.
fn answers(
    state: &Internal,
    fcinfo: pg_sys::FunctionCallInfo,
    aggregate: &Aggregate,
) -> Option<(ValueGrid, Vec<u32>)> {
    let form = &aggregate.forms[0];
    // SAFETY: PostgreSQL calls the final functions of the quantile aggregates with their
    // own state (aggregates.sql).
    let quantiles =
        unsafe { final_state::<QuantileState>(fcinfo, state, aggregate, form.arity()) }?;
    let parameters = &quantiles.parameters;
    let (counts, alphas, epsilon) = (&quantiles.counts, &parameters.alphas, parameters.epsilon);
    if cfg!(feature = "bench_floor") {
        // make bench-profile's floor build: no draw (per_row_speed times the draws).
        return Some((parameters.grid, vec![0; alphas.len()]));
    }
    let points = rng::with_generator(guc::seeding(), |rng| {
        if !form.parameters.contains(&Parameter::Alphas) {
            vec![sample_quantile(counts, alphas[0], epsilon, rng)]
        } else if guc::quantiles_method() == guc::QuantilesMethod::Split {
            sample_quantiles(counts, alphas, epsilon, rng)
        } else {
            sample_quantiles_recursive(counts, alphas, epsilon, rng)
        }
    });
    Some((parameters.grid, points))
}

/// The answers as values of the column's type: the grid points sampled.
trait FromGrid: Sized {
    fn from_grid(grid: ValueGrid, point: u32) -> Self;

    fn one(answers: Option<(ValueGrid, Vec<u32>)>) -> Option<Self> {
        answers.map(|(grid, points)| Self::from_grid(grid, points[0]))
    }

    fn many(answers: Option<(ValueGrid, Vec<u32>)>) -> Option<Vec<Self>> {
        answers.map(|(grid, points)| {
            points
                .into_iter()
                .map(|point| Self::from_grid(grid, point))
                .collect()
        })
    }
}

impl FromGrid for f64 {
    fn from_grid(grid: ValueGrid, point: u32) -> Self {
        match grid {
            ValueGrid::Float(grid) => grid.point(point),
            ValueGrid::Integer(grid) => grid.point(point) as f64,
        }
    }
}

/// Integer answers: lo and hi lie within the type's range (validated), and so does every
/// grid point between them.
macro_rules! integer_from_grid {
    ($($type:ty),*) => {$(
        impl FromGrid for $type {
            fn from_grid(grid: ValueGrid, point: u32) -> Self {
                match grid {
                    ValueGrid::Integer(grid) => grid.point(point) as $type,
                    ValueGrid::Float(_) => unreachable!("integer aggregates have integer grids"),
                }
            }
        }
    )*};
}

integer_from_grid!(i16, i32, i64);

/// numeric answers: the float grid point, converted by PostgreSQL's own cast (float8 to
/// numeric: 15 significant digits), so that they read as the double precision answers do.
impl FromGrid for AnyNumeric {
    fn from_grid(grid: ValueGrid, point: u32) -> Self {
        let point = f64::from_grid(grid, point);
        // SAFETY: float8_numeric takes a float8 by value and returns a numeric in the
        // current memory context; a grid point is finite, so it does not fail.
        unsafe {
            pgrx::direct_function_call::<AnyNumeric>(pg_sys::float8_numeric, &[point.into_datum()])
        }
        .expect("a numeric for a float8")
    }
}

#[pg_extern(parallel_safe)]
fn dp_quantile_numeric_final(
    state: Internal,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<AnyNumeric> {
    AnyNumeric::one(answers(&state, fcinfo, &DP_QUANTILE_NUMERIC))
}

#[pg_extern(parallel_safe)]
fn dp_quantiles_numeric_final(
    state: Internal,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<Vec<AnyNumeric>> {
    AnyNumeric::many(answers(&state, fcinfo, &DP_QUANTILES_NUMERIC))
}

#[pg_extern(parallel_safe)]
fn dp_quantile_final(state: Internal, fcinfo: pg_sys::FunctionCallInfo) -> Option<f64> {
    f64::one(answers(&state, fcinfo, &DP_QUANTILE))
}

#[pg_extern(parallel_safe)]
fn dp_quantiles_final(state: Internal, fcinfo: pg_sys::FunctionCallInfo) -> Option<Vec<f64>> {
    f64::many(answers(&state, fcinfo, &DP_QUANTILES))
}

#[pg_extern(parallel_safe)]
fn dp_quantile_smallint_final(state: Internal, fcinfo: pg_sys::FunctionCallInfo) -> Option<i16> {
    i16::one(answers(&state, fcinfo, &DP_QUANTILE_SMALLINT))
}

#[pg_extern(parallel_safe)]
fn dp_quantiles_smallint_final(
    state: Internal,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<Vec<i16>> {
    i16::many(answers(&state, fcinfo, &DP_QUANTILES_SMALLINT))
}

#[pg_extern(parallel_safe)]
fn dp_quantile_integer_final(state: Internal, fcinfo: pg_sys::FunctionCallInfo) -> Option<i32> {
    i32::one(answers(&state, fcinfo, &DP_QUANTILE_INTEGER))
}

#[pg_extern(parallel_safe)]
fn dp_quantiles_integer_final(
    state: Internal,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<Vec<i32>> {
    i32::many(answers(&state, fcinfo, &DP_QUANTILES_INTEGER))
}

#[pg_extern(parallel_safe)]
fn dp_quantile_bigint_final(state: Internal, fcinfo: pg_sys::FunctionCallInfo) -> Option<i64> {
    i64::one(answers(&state, fcinfo, &DP_QUANTILE_BIGINT))
}

#[pg_extern(parallel_safe)]
fn dp_quantiles_bigint_final(
    state: Internal,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<Vec<i64>> {
    i64::many(answers(&state, fcinfo, &DP_QUANTILES_BIGINT))
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
fn dp_quantile_deserialize(
    bytes: &[u8],
    _unused: Internal,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Internal {
    // SAFETY: PostgreSQL calls it as their deserialize function (and it checks that).
    unsafe { aggregate::deserialize::<QuantileState>(fcinfo, bytes) }
}

/// The row path of each transition symbol places every value where the rule of its kind
/// does, and leaves a rule of another kind (never met: a state is its aggregate's) to the
/// guarded transition.
#[cfg(test)]
mod locating_tests {
    use super::{Located, Locating, ValueType};
    use crate::mechanisms::quantile::{Grid, IntegerGrid, Place};
    use pgrx::pg_sys::Datum;

    fn place(located: Option<Located>) -> Option<Option<Place>> {
        located.map(|located| match located {
            Located::Place(place) => Some(place),
            Located::NotANumber | Located::Numeric(_) => None,
        })
    }

    #[test]
    fn each_kind_places_as_its_rule_and_refuses_the_others() {
        let float = Grid {
            lo: -3.0,
            hi: 1e6,
            size: 1 << 20,
        }
        .locator();
        let integers = IntegerGrid::new(-40_000, 40_000, 1 << 10);
        let rules = [
            (ValueType::Float, Locating::Float(float)),
            (ValueType::Numeric, Locating::Numeric(float)),
            (ValueType::Smallint, Locating::Smallint(integers)),
            (ValueType::Integer, Locating::Integer(integers)),
            (ValueType::Bigint, Locating::Bigint(integers)),
        ];
        let floats = [
            -1e300,
            -3.0,
            -0.0,
            0.5,
            1234.5678,
            999_999.0,
            1e6,
            f64::INFINITY,
            f64::NAN,
        ];
        let datums: Vec<Datum> = floats
            .iter()
            .map(|v| Datum::from(v.to_bits() as i64))
            .chain([i16::MIN as i64, -1, 0, 7, i16::MAX as i64].map(Datum::from))
            .chain([i32::MIN as i64, -40_001, 39_999, i32::MAX as i64].map(Datum::from))
            .chain([i64::MIN, i64::MAX].map(Datum::from))
            .collect();
        let mut compared = 0;
        for (kind, _) in &rules {
            for (rule_kind, rule) in &rules {
                for &datum in &datums {
                    let by_kind = place(rule.by_value_of(*kind, datum));
                    if kind != rule_kind || *kind == ValueType::Numeric {
                        assert!(by_kind.is_none(), "{kind:?} took a {rule_kind:?} rule");
                        continue;
                    }
                    let expected = place(Some(rule.by_value(datum)));
                    assert_eq!(by_kind, expected, "{kind:?}, datum {:#x}", datum.value());
                    compared += 1;
                }
            }
        }
        assert_eq!(compared, 4 * datums.len());
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
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
                std::mem::size_of::<super::QuantileState>(),
            ),
            (
                "dp_argmax(item, 1, 1.0)",
                std::mem::size_of::<super::super::item_scores::ItemScores>(),
            ),
        ];
        for (call, state_size) in states {
            let kb = hash_aggregate_memory_kb(&format!("SELECT g, {call} FROM singles GROUP BY g"));
            let least = 100_000 * (state_size + 48) / 1024;
            assert!(kb as usize >= least, "{call}: {kb} kB, at least {least}");
        }
    }
}
