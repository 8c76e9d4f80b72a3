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
use super::memory::{child_context, ContextAllocator};
use super::quantile_arguments::{Alphas, Bounds, QuantileArguments, QuantileParameters, ValueGrid};
use super::serialization::Bytes;
use crate::error::Error;
use crate::mechanisms::quantile::{
    sample_quantile, sample_quantiles, sample_quantiles_recursive, GridCounts, IntegerGrid,
    Locator, Place, Reader,
};
use crate::mechanisms::rng;
use inbox::{leave, Inbox, RowRule};
use pgrx::pg_sys::{self, Datum, MemoryContext};
use pgrx::prelude::*;
use pgrx::Internal;
use serde::Deserialize;

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

/// The state of one group: its parameters and the counts of its values on the grid. Rows
/// read none of it: they leave their places in the group's inbox (inbox.rs), which is
/// counted here when full and before anything reads the state.
pub struct QuantileState {
    locating: Locating,
    counts: GridCounts<ContextAllocator>,
    parameters: QuantileParameters,
    /// Where the group's rows leave their places (inbox.rs); NULL until the state is
    /// placed in its memory context.
    inbox: *mut Inbox,
    /// The places of the inbox already counted into `counts`.
    counted: usize,
}

// The state and its reset callback stay in one 512-byte chunk (memory::request_size).
const _: () = assert!(crate::extension::memory::request_size::<QuantileState>() <= 512);

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
            inbox: std::ptr::null_mut(),
            counted: 0,
        }
    }

    /// Counts the places of the inbox before slot `to` not yet counted.
    fn count_inbox(&mut self, to: usize) {
        // SAFETY: a placed state's inbox lives as long as the state, and `counted` and
        // `to` are slots of it, `counted` the first one not counted (of_datum).
        let places = unsafe { Inbox::places(self.inbox, self.counted, to) };
        self.counts.add_half_cells(places);
        self.counted = to;
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

    /// [`STATE_BYTES`], the parameters, the counts: one vector, written once.
    fn to_bytes(&self) -> Vec<u8> {
        let parameters = 64 + 8 * self.parameters.alphas.len();
        let mut bytes = Vec::with_capacity(parameters + self.counts.sparse_bytes_bound());
        bytes.push(STATE_BYTES);
        self.parameters.write_bytes(&mut bytes);
        self.counts.write_bytes(&mut bytes);
        bytes
    }

    /// The datum is a slot of the group's inbox: the state is the inbox's, with the
    /// places left there counted first.
    #[inline]
    unsafe fn of_datum<'a>(datum: Datum) -> &'a mut Self {
        // SAFETY: a datum of a quantile state is a slot of its live inbox, whose state
        // lives as long as it (the caller's contract).
        unsafe {
            let (inbox, slot) = Inbox::of_slot(datum);
            let state = &mut *Inbox::state(inbox);
            state.count_inbox(slot);
            state
        }
    }

    /// Every place of the inbox was counted (of_datum): it starts again, empty.
    #[inline]
    unsafe fn datum_of(state: &mut Self) -> Datum {
        debug_assert!(!state.inbox.is_null(), "a placed state");
        state.counted = 0;
        Inbox::first_slot(state.inbox)
    }

    /// A hash aggregation's states and inboxes live in a child of its context: among
    /// PostgreSQL's key tuples, 10^4 groups' 768 bytes each spread those tuples (read on
    /// every row) over megabytes.
    unsafe fn state_memory(
        fcinfo: pg_sys::FunctionCallInfo,
        memory: MemoryContext,
    ) -> MemoryContext {
        // SAFETY: the call info of an aggregate's support function, whose context is
        // read only once its tag says it is an AggState.
        unsafe {
            let context = (*fcinfo).context;
            // The hash table's context: AGG_HASHED, and the hashed sets of AGG_MIXED
            // (whose sorted sets' contexts are reset at every group).
            let hashed = !context.is_null()
                && pgrx::is_a(context, pg_sys::NodeTag::T_AggState)
                && !(*(context as *mut pg_sys::AggState)).hashcontext.is_null()
                && (*(*(context as *mut pg_sys::AggState)).hashcontext).ecxt_per_tuple_memory
                    == memory;
            if hashed {
                child_context(memory, c"pg_exp_mech quantile states")
            } else {
                memory
            }
        }
    }

    unsafe fn placed(state: &mut Self, memory: MemoryContext) {
        // SAFETY: the state lies in `memory` (the caller's contract), as the inbox will.
        state.inbox = unsafe { Inbox::new_in(memory, state) };
        state.counted = 0;
    }

    fn from_bytes(bytes: &[u8], memory: MemoryContext) -> Self {
        let with_counts = |parameters: QuantileParameters, counts: &[u8]| {
            let mut quantiles = QuantileState::new(parameters, memory);
            let grid_size = quantiles.parameters.grid.size();
            // SAFETY: as in QuantileState::new.
            let allocator = unsafe { ContextAllocator::new(memory) };
            quantiles.counts = GridCounts::from_bytes(grid_size, counts, allocator);
            quantiles
        };
        let mut reader = Reader(bytes);
        if reader.u8() != STATE_BYTES {
            let earlier: EarlierSerializedQuantiles =
                serde_cbor::from_slice(bytes).expect("a state written by dp_quantile_serialize");
            return with_counts(earlier.parameters, &earlier.counts.0);
        }
        let parameters = QuantileParameters::read_bytes(&mut reader);
        with_counts(parameters, reader.rest())
    }
}

/// The first byte of what dp_quantile_serialize writes: then the parameters
/// ([`QuantileParameters::write_bytes`]) and the counts ([`GridCounts::to_bytes`]).
/// Earlier versions wrote CBOR, whose first byte here is an array's or a map's header
/// (0x80 and up); a Citus coordinator may read their workers' states during an upgrade.
const STATE_BYTES: u8 = 1;

/// What dp_quantile_serialize wrote before [`STATE_BYTES`]: CBOR of the parameters and
/// the counts' own encoding.
#[derive(Deserialize)]
struct EarlierSerializedQuantiles {
    parameters: QuantileParameters,
    counts: Bytes,
}

/// A row taken without pgrx's guard, when it needs no more than that: a group's later row
/// whose value is NULL, or of a by-value type, located and left in its group's inbox
/// with room. None: the guarded transition takes the row (a group's first row, a full
/// inbox, numeric values, a rule not of `kind`, which [`value_kind`] rules out). In the
/// grouped dp_quantile of `make bench` the guard and the calls around it took 4-6 % of
/// the query (issue 22).
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
    // SAFETY: a quantile transition's call info, and a state datum it returned.
    let locating = unsafe { row_locating(fcinfo, state.value) };
    match locating.by_value_of(kind, value.value) {
        // SAFETY: a non-NULL state datum of a quantile transition is the inbox slot it
        // returned before (aggregate::transition), which no one else uses during this
        // call.
        Some(Located::Place(place)) => unsafe { leave(state.value, place) },
        Some(Located::NotANumber) => Some(state.value),
        // None: numeric, or a rule of another kind (never met); by_value_of gives no
        // Numeric.
        Some(Located::Numeric(_)) | None => None,
    }
}

/// The rule a later row of the group at `slot` is located by: the call site's shared one
/// (no read of the group's state), else the state's own, read through its inbox (a call
/// site whose groups' parameters differ, or Citus's partial aggregation, which calls the
/// transition with a new FmgrInfo, and so no `fn_extra`, for every row).
///
/// # Safety
/// `fcinfo` must be a quantile transition's call info and `slot` a state datum it
/// returned.
#[inline(always)]
unsafe fn row_locating<'a>(fcinfo: pg_sys::FunctionCallInfo, slot: Datum) -> &'a Locating {
    // SAFETY: as the caller guarantees; a slot's inbox and state are live.
    unsafe {
        match RowRule::of_call(fcinfo) {
            Some(rule) => &rule.locating,
            None => &(*Inbox::state(Inbox::of_slot(slot).0)).locating,
        }
    }
}

/// The guarded transition: a group's first row (which makes its state and inbox), a row
/// that finds its inbox full (the inbox is counted and starts again), a numeric value
/// (located here, inside the guard, and left in the inbox when it has room), and every
/// row of a call site whose groups do not share one locating rule.
///
/// # Safety
/// `fcinfo` must be the call info of `aggregate`'s transition function.
unsafe fn guarded_transition(fcinfo: pg_sys::FunctionCallInfo, aggregate: &Aggregate) -> Datum {
    // SAFETY: a transition's call info, with the state and the value first.
    let call = unsafe { CallArguments::new(fcinfo) };
    let (state, value) = (call.datum(0), call.datum(1));
    if let (Some(slot), Some(value)) = (state, value) {
        // SAFETY: a quantile transition's call info (the caller's contract), and a state
        // datum it returned.
        if let Locating::Numeric(locator) = unsafe { row_locating(fcinfo, slot) } {
            // SAFETY: a non-NULL numeric argument of the transition call.
            let value = unsafe { numeric_to_f64(value) };
            if value.is_nan() {
                return slot;
            }
            // SAFETY: the state datum is an inbox slot this transition returned.
            if let Some(next) = unsafe { leave(slot, locator.locate(value)) } {
                return next;
            }
        }
    }
    // SAFETY: as the caller guarantees.
    let datum = unsafe { transition::<QuantileState>(fcinfo, aggregate) };
    if state.is_none() {
        // A new group: its parameters decide whether the call site's rows may keep
        // leaving their places by the shared rule.
        // SAFETY: the datum the transition just returned, of a live state.
        unsafe {
            let (inbox, _) = Inbox::of_slot(datum);
            RowRule::note_group(fcinfo, &*Inbox::state(inbox));
        }
    }
    datum
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
                unsafe { guarded_transition(fcinfo, &$aggregate) }
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
    state: Internal,
    fcinfo: pg_sys::FunctionCallInfo,
    aggregate: &Aggregate,
) -> Option<(ValueGrid, Vec<u32>)> {
    let form = &aggregate.forms[0];
    // SAFETY: PostgreSQL calls the final functions of the quantile aggregates with their
    // own state (aggregates.sql).
    let quantiles =
        unsafe { final_state::<QuantileState>(fcinfo, state.unwrap(), aggregate, form.arity()) }?;
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
    AnyNumeric::one(answers(state, fcinfo, &DP_QUANTILE_NUMERIC))
}

#[pg_extern(parallel_safe)]
fn dp_quantiles_numeric_final(
    state: Internal,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<Vec<AnyNumeric>> {
    AnyNumeric::many(answers(state, fcinfo, &DP_QUANTILES_NUMERIC))
}

#[pg_extern(parallel_safe)]
fn dp_quantile_final(state: Internal, fcinfo: pg_sys::FunctionCallInfo) -> Option<f64> {
    f64::one(answers(state, fcinfo, &DP_QUANTILE))
}

#[pg_extern(parallel_safe)]
fn dp_quantiles_final(state: Internal, fcinfo: pg_sys::FunctionCallInfo) -> Option<Vec<f64>> {
    f64::many(answers(state, fcinfo, &DP_QUANTILES))
}

#[pg_extern(parallel_safe)]
fn dp_quantile_smallint_final(state: Internal, fcinfo: pg_sys::FunctionCallInfo) -> Option<i16> {
    i16::one(answers(state, fcinfo, &DP_QUANTILE_SMALLINT))
}

#[pg_extern(parallel_safe)]
fn dp_quantiles_smallint_final(
    state: Internal,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<Vec<i16>> {
    i16::many(answers(state, fcinfo, &DP_QUANTILES_SMALLINT))
}

#[pg_extern(parallel_safe)]
fn dp_quantile_integer_final(state: Internal, fcinfo: pg_sys::FunctionCallInfo) -> Option<i32> {
    i32::one(answers(state, fcinfo, &DP_QUANTILE_INTEGER))
}

#[pg_extern(parallel_safe)]
fn dp_quantiles_integer_final(
    state: Internal,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<Vec<i32>> {
    i32::many(answers(state, fcinfo, &DP_QUANTILES_INTEGER))
}

#[pg_extern(parallel_safe)]
fn dp_quantile_bigint_final(state: Internal, fcinfo: pg_sys::FunctionCallInfo) -> Option<i64> {
    i64::one(answers(state, fcinfo, &DP_QUANTILE_BIGINT))
}

#[pg_extern(parallel_safe)]
fn dp_quantiles_bigint_final(
    state: Internal,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<Vec<i64>> {
    i64::many(answers(state, fcinfo, &DP_QUANTILES_BIGINT))
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

mod inbox;
#[cfg(any(test, feature = "pg_test"))]
mod inbox_tests;
#[cfg(test)]
mod locating_tests;
#[cfg(any(test, feature = "pg_test"))]
mod tests;
