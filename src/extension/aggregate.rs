//! The skeleton both state families share (per-item scores, quantile histograms): the
//! transition, final, combine, serialize and deserialize steps, written once over the
//! [`State`] each family implements.

use super::arguments::{aggregate_argument, Argument, CallArguments};
use super::budget::require_metered;
use super::forms::{Aggregate, Form};
use super::memory::move_into;
use super::{raise, OrRaise};
use crate::error::Error;
use pgrx::pg_sys::{self, Datum, MemoryContext};
use pgrx::{Internal, PgMemoryContexts};
use std::fmt::Debug;

/// Where a step reads an argument of the aggregate call (by its 0-based position as
/// written in the call).
pub trait Source {
    fn argument(&self, position: usize) -> Argument;

    fn float(&self, position: usize) -> Option<Option<f64>> {
        self.argument(position).float()
    }

    fn integer(&self, position: usize) -> Option<Option<i32>> {
        self.argument(position).integer()
    }

    fn bigint(&self, position: usize) -> Option<Option<i64>> {
        self.argument(position).bigint()
    }
}

/// A transition call: the state comes first, so argument n of the aggregate is n + 1.
pub struct Row<'a>(pub &'a CallArguments);

impl Source for Row<'_> {
    #[inline]
    fn argument(&self, position: usize) -> Argument {
        Argument::Known(self.0.datum(position + 1))
    }
}

/// A final function with no rows: the arguments as the call's Aggref gives them, Unknown
/// where they depend on the rows.
pub struct Call(pub pg_sys::FunctionCallInfo);

impl Source for Call {
    fn argument(&self, position: usize) -> Argument {
        // SAFETY: Call is only made in final functions, from their own call info.
        unsafe { aggregate_argument(self.0, position) }
    }
}

/// An aggregate state family.
pub trait State: Sized {
    /// The parameters as a row (or the call) gives them, before validation.
    type Arguments;
    /// The validated parameters, fixed by the first row; equal in states that combine.
    type Parameters: PartialEq + Debug;
    /// Names for errors raised outside an aggregate.
    const TRANSITION: &'static str;
    const COMBINE: &'static str;
    const SERIALIZE: &'static str;
    const DESERIALIZE: &'static str;

    /// The parameters of `form` from `source`; None when one of them depends on the rows.
    fn read(form: &Form, source: &impl Source) -> Option<Self::Arguments>;

    /// Checks the parameters that `source` knows, as the first row would: the metering
    /// hook calls it on the plan's arguments, before any row.
    fn validate(form: &Form, source: &impl Source) -> Result<(), Error>;

    /// A new state in `memory` from the first row's arguments (or, in a final function
    /// with no rows, the call's). Validates them, so that an error never depends on
    /// whether rows arrived. Ok(None): an argument depends on the rows (only the call
    /// can say so), and the answer is NULL.
    ///
    /// # Safety
    /// `fcinfo` must be the call info of this family's transition or final function.
    unsafe fn first(
        fcinfo: pg_sys::FunctionCallInfo,
        form: &Form,
        arguments: &Self::Arguments,
        memory: MemoryContext,
    ) -> Result<Option<Self>, Error>;

    /// Adds the values of one row.
    ///
    /// # Safety
    /// `row` must be read from this family's transition call.
    unsafe fn add_row(&mut self, row: &CallArguments);

    fn parameters(&self) -> &Self::Parameters;

    /// ε and δ of one evaluation, as the rows gave them.
    fn privacy_cost(&self) -> (f64, f64);

    /// An empty state with the parameters of `other`, in `memory`.
    fn empty_like(other: &Self, memory: MemoryContext) -> Self;

    /// Adds `other`'s rows into this state.
    fn merge(&mut self, other: &Self);

    fn to_bytes(&self) -> Vec<u8>;

    /// A state rebuilt from [`State::to_bytes`], in `memory`.
    fn from_bytes(bytes: &[u8], memory: MemoryContext) -> Self;

    /// The state an `internal` datum of this family stands for: a datum that
    /// [`State::datum_of`] gave, or one a transition then returned (by default the state's
    /// address). It may reorganise the state, never change what it counts, so that a
    /// final function may read it.
    ///
    /// # Safety
    /// `datum` must be such a datum, of a state that outlives `'a`, with no other
    /// reference to the state in use.
    #[inline]
    unsafe fn of_datum<'a>(datum: Datum) -> &'a mut Self {
        // SAFETY: as the caller guarantees, the datum is the state's address.
        unsafe { &mut *datum.cast_mut_ptr::<Self>() }
    }

    /// The datum a transition or combine returns for `state`, which [`State::of_datum`]
    /// gave or [`State::placed`] set up.
    ///
    /// # Safety
    /// `state` must lie in a memory context (placed), as [`state_in`] leaves it.
    #[inline]
    unsafe fn datum_of(state: &mut Self) -> Datum {
        Datum::from(state as *mut Self)
    }

    /// Where a transition or combine makes a new state, given the aggregate's memory
    /// context (by default there).
    ///
    /// # Safety
    /// `fcinfo` must be this family's transition or combine call info, and `memory` the
    /// aggregate's context of that call.
    #[inline]
    unsafe fn state_memory(
        _fcinfo: pg_sys::FunctionCallInfo,
        memory: MemoryContext,
    ) -> MemoryContext {
        memory
    }

    /// Sets up a state just moved to its place in `memory`, before its first datum.
    ///
    /// # Safety
    /// `state` must lie in `memory` for as long as the context lives.
    #[inline]
    unsafe fn placed(_state: &mut Self, _memory: MemoryContext) {}
}

/// The transition function of every form of `aggregate`: (state, row values,
/// parameters), told apart by their number.
///
/// # Safety
/// `fcinfo` must be the call info of `aggregate`'s transition function.
#[inline(always)]
pub unsafe fn transition<S: State>(
    fcinfo: pg_sys::FunctionCallInfo,
    aggregate: &Aggregate,
) -> Datum {
    // SAFETY: the caller passes the transition function's own call info.
    let call = unsafe { CallArguments::new(fcinfo) };
    // Later rows are not read for parameters: the metering hook refused, before any row,
    // every parameter that could differ between the rows of a loop (budget/cost.rs),
    // and a node it did not meter answers nothing (final_state). So a row costs its
    // values only.
    let state = match call.datum(0) {
        // SAFETY: the state argument is NULL or the datum this function returned before,
        // of a state of type S (each aggregate has one state family).
        Some(datum) => unsafe { S::of_datum(datum) },
        // SAFETY: as the caller guarantees.
        None => unsafe { first_state::<S>(fcinfo, aggregate, &call) },
    };
    // SAFETY: the state was just found or made, of type S, in its memory context.
    unsafe {
        state.add_row(&call);
        S::datum_of(state)
    }
}

/// The first row's state, in the aggregate's memory context. Out of line: a group's
/// first row is rare, and inlined it made every row's call set up its large frame.
///
/// # Safety
/// As for [`transition`]; `call` reads `fcinfo`, and `state` is its NULL state.
#[cold]
#[inline(never)]
unsafe fn first_state<'a, S: State>(
    fcinfo: pg_sys::FunctionCallInfo,
    aggregate: &Aggregate,
    call: &CallArguments,
) -> &'a mut S {
    let form = aggregate.form(call.count() - 1);
    let arguments = S::read(form, &Row(call)).expect("a row knows its arguments");
    // SAFETY: a transition's call info (the caller's contract); the new state lives in
    // the aggregate's memory context.
    unsafe {
        let memory = S::state_memory(fcinfo, aggregate_memory(fcinfo, S::TRANSITION));
        let first = PgMemoryContexts::For(memory)
            .switch_to(|_| S::first(fcinfo, form, &arguments, memory).or_raise());
        state_in(memory, first.expect("a row knows its arguments"))
    }
}

/// A state moved into `memory` (the aggregate's context, or the one PostgreSQL expects
/// a deserialized state in), dropped when that context is reset, and set up for its
/// datum ([`State::placed`]).
///
/// # Safety
/// `memory` must be a valid memory context that outlives every use of the state.
unsafe fn state_in<'a, S: State>(memory: MemoryContext, state: S) -> &'a mut S {
    // SAFETY: as the caller guarantees; the state is ours until its context goes.
    unsafe {
        let state = &mut *move_into(memory, state).as_ptr();
        S::placed(state, memory);
        state
    }
}

/// What a final function samples from.
pub enum FinalState<'a, S> {
    /// The state the rows built.
    Rows(&'a S),
    /// No row arrived: the state the call's arguments describe.
    NoRows(S),
}

impl<S> std::ops::Deref for FinalState<'_, S> {
    type Target = S;

    fn deref(&self) -> &S {
        match self {
            FinalState::Rows(state) => state,
            FinalState::NoRows(state) => state,
        }
    }
}

/// The state a final function of `aggregate` (with `arity` arguments) samples from: the
/// rows' state, or with no rows the one the plan's arguments describe. None when an
/// argument depends on the rows and cannot be read without them: the answer is then NULL.
/// The evaluation was charged when its plan node started (metering.rs); a node that was
/// not metered is refused.
///
/// # Safety
/// `fcinfo` must be the call info of `aggregate`'s final function, and `state` its state.
pub unsafe fn final_state<'a, S: State>(
    fcinfo: pg_sys::FunctionCallInfo,
    state: Option<Datum>,
    aggregate: &Aggregate,
    arity: usize,
) -> Option<FinalState<'a, S>> {
    // SAFETY: as above.
    unsafe { require_metered(fcinfo) };
    let form = aggregate.form(arity);
    // SAFETY: the state is NULL or this family's, as the caller guarantees; the final
    // function holds the only reference to it, which lives through the call.
    let rows = state.map(|datum| unsafe { S::of_datum::<'a>(datum) });
    let final_state = match rows {
        Some(rows) => FinalState::Rows(rows),
        None => {
            let arguments = S::read(form, &Call(fcinfo))?;
            // SAFETY: a final function's call info; the state lives as long as the call.
            let first = unsafe { S::first(fcinfo, form, &arguments, pg_sys::CurrentMemoryContext) };
            FinalState::NoRows(first.or_raise()?)
        }
    };
    if let FinalState::Rows(rows) = &final_state {
        // The rows must have spent what the plan was charged for (a stable expression
        // could read another value while the rows are read than when the plan started).
        let (epsilon, delta) = rows.privacy_cost();
        let call = Call(fcinfo);
        let charged = [
            (Some(form.positions.epsilon), "epsilon", epsilon),
            (form.positions.delta, "delta", delta),
        ];
        for (position, name, spent) in charged {
            if let Some(Some(Some(paid))) = position.map(|at| call.float(at)) {
                if paid != spent {
                    raise(Error::ParameterChanged {
                        name,
                        first: crate::error::format_number(Some(paid)),
                        now: crate::error::format_number(Some(spent)),
                    });
                }
            }
        }
    }
    Some(final_state)
}

/// Combine function: adds the second state's rows into the first.
///
/// # Safety
/// `fcinfo` must be the call info of this family's combine function, and the states
/// NULL or of type S.
pub unsafe fn combine<S: State>(
    fcinfo: pg_sys::FunctionCallInfo,
    first: Internal,
    second: Internal,
) -> Internal {
    // SAFETY: as the caller guarantees.
    unsafe {
        let memory = S::state_memory(fcinfo, aggregate_memory(fcinfo, S::COMBINE));
        let Some(other) = second.unwrap().map(|datum| S::of_datum::<'_>(datum)) else {
            return first;
        };
        let state = match first.unwrap() {
            Some(datum) => {
                let state = S::of_datum(datum);
                if state.parameters() != other.parameters() {
                    raise(Error::ParameterChanged {
                        name: "the parameters",
                        first: format!("{:?}", state.parameters()),
                        now: format!("{:?}", other.parameters()),
                    });
                }
                state
            }
            None => {
                let empty =
                    PgMemoryContexts::For(memory).switch_to(|_| S::empty_like(other, memory));
                state_in(memory, empty)
            }
        };
        state.merge(other);
        Internal::from(Some(S::datum_of(state)))
    }
}

/// Serialize function: the state as bytes for the leader of a parallel aggregation.
///
/// # Safety
/// `fcinfo` must be the call info of this family's serialize function, and the state of
/// type S.
pub unsafe fn serialize<S: State>(fcinfo: pg_sys::FunctionCallInfo, state: Internal) -> Vec<u8> {
    // SAFETY: as the caller guarantees.
    unsafe {
        require_serializing(fcinfo, S::SERIALIZE);
        let datum = state
            .unwrap()
            .expect("the serialize function is strict in its state");
        S::of_datum(datum).to_bytes()
    }
}

/// Deserialize function: rebuilds a state, in the current memory context. Only bytes
/// that our serial function wrote reach it: the combine of a PostgreSQL partial
/// aggregation, or a Citus combine the planner hook planned (citus/combine.rs), never
/// bytes an analyst hands to Citus's helpers.
///
/// # Safety
/// `fcinfo` must be the call info of this family's deserialize function.
pub unsafe fn deserialize<S: State>(fcinfo: pg_sys::FunctionCallInfo, bytes: &[u8]) -> Internal {
    // SAFETY: the context is read only after its tag says it is an AggState.
    let combining = unsafe {
        let context = (*fcinfo).context;
        (!context.is_null()
            && pgrx::is_a(context, pg_sys::NodeTag::T_AggState)
            && (*(context as *mut pg_sys::AggState)).aggsplit & pg_sys::AGGSPLITOP_DESERIALIZE != 0)
            || crate::extension::citus::in_planned_combine(fcinfo)
    };
    if !combining {
        raise(Error::NotInAggregate {
            function: S::DESERIALIZE,
        });
    }
    // SAFETY: the current memory context is where PostgreSQL expects the result.
    let memory = unsafe { pg_sys::CurrentMemoryContext };
    // SAFETY: that context holds the result as long as PostgreSQL uses it.
    unsafe {
        let state = state_in(memory, S::from_bytes(bytes, memory));
        Internal::from(Some(S::datum_of(state)))
    }
}

/// The aggregate's memory context; an error when not called by an aggregate.
///
/// # Safety
/// `fcinfo` must be a valid call info.
pub unsafe fn aggregate_memory(
    fcinfo: pg_sys::FunctionCallInfo,
    function: &'static str,
) -> MemoryContext {
    let mut memory: MemoryContext = std::ptr::null_mut();
    // SAFETY: AggCheckCallContext reads the call info the caller vouches for.
    if unsafe { pg_sys::AggCheckCallContext(fcinfo, &mut memory) } == 0 {
        raise(Error::NotInAggregate { function });
    }
    memory
}

/// A serialize function hands out the exact state: it must only run as the serial
/// function of a partial aggregation (PostgreSQL's, or Citus's on a shard), never as the
/// final function of a home-made aggregate over our transition function.
///
/// # Safety
/// `fcinfo` must be a valid call info.
pub unsafe fn require_serializing(fcinfo: pg_sys::FunctionCallInfo, function: &'static str) {
    // SAFETY: the context is read only after its tag says it is an AggState.
    let serializing = unsafe {
        let context = (*fcinfo).context;
        !context.is_null()
            && pgrx::is_a(context, pg_sys::NodeTag::T_AggState)
            && (*(context as *mut pg_sys::AggState)).aggsplit & pg_sys::AGGSPLITOP_SERIALIZE != 0
    };
    // Citus's partial aggregation on a shard (citus/combine.rs): the state goes to the
    // coordinator's combine, which only a plan this extension metered finalizes.
    // SAFETY: as the caller guarantees.
    if !serializing && !unsafe { crate::extension::citus::in_partial_aggregation(fcinfo) } {
        raise(Error::NotInAggregate { function });
    }
}
