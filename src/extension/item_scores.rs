//! The aggregate state of the selection aggregates (dp_argmax, dp_top_k): per-item scores
//! in a hash table, in the aggregate's memory context, with combine, serialize and
//! deserialize for parallel aggregation. One implementation for every selection aggregate.

use super::aggregate::{aggregate_memory, require_serializing};
use super::arguments::{aggregate_argument, return_internal, Argument, ArrayArgument, CallArguments};
use super::budget::{charge, Release};
use super::memory::ContextAllocator;
use super::serialization::Bytes;
use super::items::{ItemType, RawItem};
use super::raise;
use crate::error::Error;
use crate::mechanisms::scores::{contribution, ScoreTable};
use crate::parameters;
use pgrx::pg_sys::{self, Datum, MemoryContext};
use pgrx::prelude::*;
use pgrx::{Internal, PgMemoryContexts};
use serde::{Deserialize, Serialize};

/// The parameters of one selection, fixed by its first row.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Selection {
    pub epsilon: f64,
    pub max_score: f64,
    /// How many items the answer lists (1 for dp_argmax).
    pub k: u32,
    /// dp_top_k_unknown_domain: the δ of (ε, δ)-DP and how many top items compete.
    pub delta: Option<f64>,
    pub k_bar: Option<u32>,
}

/// The parameters as one row (or the call itself) gives them, before validation. The
/// forms without a parameter pass its default (max_score 1, k 1) or None.
#[derive(Debug, Clone, Copy)]
pub struct SelectionArguments {
    pub epsilon: Option<f64>,
    pub max_score: Option<f64>,
    pub k: Option<i32>,
    /// None: the form has no delta; Some(None): SQL NULL.
    pub delta: Option<Option<f64>>,
    /// None: the form has no k_bar (k̄ = k); Some(None): SQL NULL.
    pub k_bar: Option<Option<i32>>,
}

impl SelectionArguments {
    fn validate(&self) -> Result<Selection, Error> {
        let epsilon = parameters::epsilon(self.epsilon)?;
        let max_score = parameters::max_score(self.max_score)?;
        let k = parameters::k(self.k)?;
        let delta = self.delta.map(parameters::delta).transpose()?;
        let k_bar = match (self.delta, self.k_bar) {
            (_, Some(k_bar)) => Some(parameters::k_bar(k_bar, k)?),
            (Some(_), None) => Some(k),
            (None, None) => None,
        };
        Ok(Selection { epsilon, max_score, k, delta, k_bar })
    }

    fn check_unchanged(&self, first: &Selection) -> Result<(), Error> {
        parameters::unchanged("epsilon", first.epsilon, self.epsilon)?;
        parameters::unchanged("max_score", first.max_score, self.max_score)?;
        parameters::unchanged_integer("k", first.k as i64, self.k)?;
        if let (Some(first), Some(now)) = (first.delta, self.delta) {
            parameters::unchanged("delta", first, now)?;
        }
        if let (Some(first), Some(now)) = (first.k_bar, self.k_bar) {
            parameters::unchanged_integer("k_bar", first as i64, now)?;
        }
        Ok(())
    }
}

/// The candidates argument of a call, for the forms that have one.
#[derive(Debug, Clone, Copy)]
pub enum Candidates {
    /// The form without candidates: any item may win.
    Open,
    /// The array given (None: SQL NULL, which is an error), and its argument position.
    Listed { array: Option<Datum>, position: usize },
}

/// Where a form of a selection aggregate takes its parameters (0-based argument positions;
/// None: the form does not have it), for reading them from the call when no row arrived.
#[derive(Debug, Clone, Copy, Default)]
pub struct Form {
    pub epsilon: usize,
    /// None: the form counts rows (max_score = 1).
    pub max_score: Option<usize>,
    /// None: dp_argmax (k = 1).
    pub k: Option<usize>,
    pub delta: Option<usize>,
    pub k_bar: Option<usize>,
    pub candidates: Option<usize>,
}

/// The scores of one group's items.
pub struct ItemScores {
    pub item_type: ItemType,
    pub selection: Selection,
    pub table: ScoreTable<Datum, ContextAllocator>,
    /// Where the items and the table live: the aggregate's memory context.
    memory: MemoryContext,
    /// The first row's candidates, to check that later rows pass the same array.
    candidates: Option<ArrayArgument>,
}

impl ItemScores {
    /// An empty state; with candidates, every listed item starts at score 0 and the table
    /// is closed to other items.
    fn new(
        fcinfo: pg_sys::FunctionCallInfo,
        item_type: ItemType,
        selection: Selection,
        candidates: Candidates,
        memory: MemoryContext,
    ) -> Result<Self, Error> {
        let mut state = Self {
            item_type,
            selection,
            table: ScoreTable::new_in(ContextAllocator(memory)),
            memory,
            candidates: None,
        };
        if let Candidates::Listed { array: list, position } = candidates {
            let array = list.ok_or(Error::InvalidParameter {
                name: "candidates",
                value: "NULL".into(),
                requirement: "an array (an empty array gives NULL)".into(),
            })?;
            unsafe {
                for candidate in item_type.array_elements(array) {
                    state.add(candidate, 0.0);
                }
                state.candidates = Some(ArrayArgument::new(fcinfo, position, array));
            }
            state.table.close();
        }
        Ok(state)
    }

    /// Adds `amount` (in units of max_score) to the item's score.
    fn add(&mut self, item: Datum, amount: f64) {
        let item_type = self.item_type;
        let memory = self.memory;
        self.table.add(
            item_type.hash(item),
            amount,
            |&stored| item_type.equal(stored, item),
            || unsafe { PgMemoryContexts::For(memory).switch_to(|_| item_type.copy(item)) },
        );
    }

    /// Later rows must pass the parameters and candidates of the first.
    fn check_row(&self, arguments: &SelectionArguments, candidates: Candidates) -> Result<(), Error> {
        arguments.check_unchanged(&self.selection)?;
        match (candidates, &self.candidates) {
            (Candidates::Listed { array: Some(array), .. }, Some(first))
                if unsafe { first.is_same(array) } =>
            {
                Ok(())
            }
            (Candidates::Listed { .. }, _) => Err(Error::ParameterChanged {
                name: "candidates",
                first: "the array of the first row".into(),
                now: "another array".into(),
            }),
            (Candidates::Open, _) => Ok(()),
        }
    }
}

/// The item type of this call (argument 1 of a transition or final function), checked
/// for a hash operator class even when no row arrived, so that the error does not depend
/// on the data.
unsafe fn call_item_type(fcinfo: pg_sys::FunctionCallInfo) -> ItemType {
    let type_oid = pg_sys::get_fn_expr_argtype((*fcinfo).flinfo, 1);
    ItemType::lookup(type_oid, (*fcinfo).fncollation).unwrap_or_else(|e| raise(e))
}

impl Candidates {
    /// The candidates of a transition call: its argument `index` (the aggregate's argument
    /// `index − 1`, as the state comes first) in the forms that have it, else Open.
    pub fn of_call(call: &CallArguments, index: usize) -> Self {
        if call.count() > index {
            Candidates::Listed {
                array: call.datum(index),
                position: index - 1,
            }
        } else {
            Candidates::Open
        }
    }
}

/// The transition function of every selection aggregate, called as
/// (state, item, score, ...): the rest of the call is already read into `arguments` and
/// `candidates`.
///
/// # Safety
/// `fcinfo` must be the call info of that transition function, and `call` read from it.
pub unsafe fn transition(
    fcinfo: pg_sys::FunctionCallInfo,
    call: &CallArguments,
    arguments: SelectionArguments,
    candidates: Candidates,
) -> Datum {
    let state = accumulate(
        fcinfo,
        Internal::from(call.datum(0)),
        call.datum(1).map(RawItem),
        call.float(2),
        arguments,
        candidates,
    );
    return_internal(fcinfo, state)
}

/// The transition step shared by every selection aggregate.
unsafe fn accumulate(
    fcinfo: pg_sys::FunctionCallInfo,
    mut state: Internal,
    item: Option<RawItem>,
    score: Option<f64>,
    arguments: SelectionArguments,
    candidates: Candidates,
) -> Internal {
    if let Some(scores) = state.get::<ItemScores>() {
        scores
            .check_row(&arguments, candidates)
            .unwrap_or_else(|e| raise(e));
    } else {
        let memory = aggregate_memory(fcinfo, "a selection transition function");
        let selection = arguments.validate().unwrap_or_else(|e| raise(e));
        let item_type = call_item_type(fcinfo);
        PgMemoryContexts::For(memory).switch_to(|_| {
            let scores = ItemScores::new(fcinfo, item_type, selection, candidates, memory)
                .unwrap_or_else(|e| raise(e));
            state.insert(scores);
        });
    }
    let scores = state.get_mut::<ItemScores>().expect("the state was just made");
    if let Some(RawItem(item)) = item {
        // NULL items are skipped; NULL or NaN scores count 0; ±∞ clamp (PRIVACY.md 6).
        let amount = contribution(score, scores.selection.max_score);
        scores.add(item, amount);
    }
    state
}

/// The state a final function samples from, once the evaluation is charged to the
/// session's privacy budget: the rows' state, or with no rows, the one the call's
/// arguments describe (its candidates at score 0, or no item at all). None when an
/// argument depends on the rows and cannot be read without them: the answer is then NULL
/// (nothing is sampled, nothing charged).
///
/// Parameters are validated in both cases, so that an error never depends on whether
/// rows arrived.
///
/// # Safety
/// `fcinfo` must be the call info of a final function whose argument 1 is the item.
pub unsafe fn final_state<'a>(
    fcinfo: pg_sys::FunctionCallInfo,
    state: &'a Internal,
    form: Form,
    aggregate: &'static str,
) -> Option<FinalState<'a>> {
    let scores = unrecorded_final_state(fcinfo, state, form)?;
    let release = Release {
        aggregate,
        epsilon: scores.selection.epsilon,
        epsilon_position: form.epsilon,
        delta: scores.selection.delta.unwrap_or(0.0),
    };
    charge(fcinfo, release);
    Some(scores)
}

unsafe fn unrecorded_final_state<'a>(
    fcinfo: pg_sys::FunctionCallInfo,
    state: &'a Internal,
    form: Form,
) -> Option<FinalState<'a>> {
    let item_type = call_item_type(fcinfo);
    if let Some(scores) = state.get::<ItemScores>() {
        return Some(FinalState::Rows(scores));
    }
    let argument = |at: usize| aggregate_argument(fcinfo, at);
    let arguments = SelectionArguments {
        epsilon: argument(form.epsilon).float()?,
        max_score: match form.max_score {
            Some(at) => argument(at).float()?,
            None => Some(1.0),
        },
        k: match form.k {
            Some(at) => argument(at).integer()?,
            None => Some(1),
        },
        delta: match form.delta {
            Some(at) => Some(argument(at).float()?),
            None => None,
        },
        k_bar: match form.k_bar {
            Some(at) => Some(argument(at).integer()?),
            None => None,
        },
    };
    let selection = arguments.validate().unwrap_or_else(|e| raise(e));
    let candidates = match form.candidates.map(|at| (at, argument(at))) {
        None => Candidates::Open,
        Some((_, Argument::Unknown)) => return None,
        Some((position, Argument::Known(array))) => Candidates::Listed { array, position },
    };
    let memory = pg_sys::CurrentMemoryContext;
    let scores = ItemScores::new(fcinfo, item_type, selection, candidates, memory)
        .unwrap_or_else(|e| raise(e));
    Some(FinalState::NoRows(scores))
}

/// What a final function samples from.
pub enum FinalState<'a> {
    /// The state the rows built.
    Rows(&'a ItemScores),
    /// No row arrived: the candidates of the call, all at score 0.
    NoRows(ItemScores),
}

impl std::ops::Deref for FinalState<'_> {
    type Target = ItemScores;

    fn deref(&self) -> &ItemScores {
        match self {
            FinalState::Rows(scores) => scores,
            FinalState::NoRows(scores) => scores,
        }
    }
}

/// What [`dp_item_scores_serialize`] writes: the items as their bytes.
#[derive(Serialize, Deserialize)]
struct SerializedItemScores {
    type_oid: u32,
    collation: u32,
    selection: Selection,
    open: bool,
    hashes: Vec<u32>,
    scores: Vec<f64>,
    lengths: Vec<u32>,
    images: Bytes,
}

/// Combine function: adds the second state's scores into the first.
///
/// # Safety
/// `fcinfo` must be the call info of an aggregate combine function.
pub unsafe fn combine(fcinfo: pg_sys::FunctionCallInfo, mut first: Internal, second: Internal) -> Internal {
    let memory = aggregate_memory(fcinfo, "dp_item_scores_combine");
    let Some(other) = second.get::<ItemScores>() else {
        return first;
    };
    if let Some(scores) = first.get::<ItemScores>() {
        if scores.selection != other.selection {
            raise(Error::ParameterChanged {
                name: "the parameters",
                first: format!("{:?}", scores.selection),
                now: format!("{:?}", other.selection),
            });
        }
    } else {
        PgMemoryContexts::For(memory).switch_to(|_| {
            let empty =
                ItemScores::new(fcinfo, other.item_type, other.selection, Candidates::Open, memory)
                    .unwrap_or_else(|e| raise(e));
            first.insert(empty);
        });
    }
    let scores = first.get_mut::<ItemScores>().expect("the state was just made");
    for entry in other.table.iter() {
        scores.add(entry.item, entry.score);
    }
    if !other.table.is_open() {
        scores.table.close();
    }
    first
}

/// Serialize function: the state as bytes for the leader of a parallel aggregation.
///
/// # Safety
/// `fcinfo` must be the call info of an aggregate serialize function.
pub unsafe fn serialize(fcinfo: pg_sys::FunctionCallInfo, state: Internal) -> Vec<u8> {
    require_serializing(fcinfo, "dp_item_scores_serialize (the serial function of a partial aggregation)");
    let scores = state
        .get::<ItemScores>()
        .expect("the serialize function is strict in its state");
    let entries: Vec<_> = scores.table.iter().collect();
    let mut serialized = SerializedItemScores {
        type_oid: scores.item_type.type_oid.to_u32(),
        collation: scores.item_type.collation.to_u32(),
        selection: scores.selection,
        open: scores.table.is_open(),
        hashes: entries.iter().map(|e| e.hash).collect(),
        scores: entries.iter().map(|e| e.score).collect(),
        lengths: Vec::with_capacity(entries.len()),
        images: Bytes::default(),
    };
    for entry in entries {
        let length = scores.item_type.write_image(entry.item, &mut serialized.images.0);
        serialized.lengths.push(length);
    }
    serde_cbor::to_vec(&serialized).expect("the state serializes")
}

/// Deserialize function: rebuilds a state, in the current memory context.
///
/// # Safety
/// `bytes` must come from [`serialize`] in the same cluster.
pub unsafe fn deserialize(fcinfo: pg_sys::FunctionCallInfo, bytes: &[u8]) -> Internal {
    let serialized: SerializedItemScores =
        serde_cbor::from_slice(bytes).expect("a state written by dp_item_scores_serialize");
    let item_type = ItemType::lookup(serialized.type_oid.into(), serialized.collation.into())
        .unwrap_or_else(|e| raise(e));
    let memory = pg_sys::CurrentMemoryContext;
    let mut scores =
        ItemScores::new(fcinfo, item_type, serialized.selection, Candidates::Open, memory)
            .unwrap_or_else(|e| raise(e));
    let mut offset = 0usize;
    for ((&hash, &score), &length) in serialized
        .hashes
        .iter()
        .zip(&serialized.scores)
        .zip(&serialized.lengths)
    {
        let image = &serialized.images.0[offset..offset + length as usize];
        offset += length as usize;
        let item = item_type.restore(image);
        scores.table.add(hash, score, |_| false, || item);
    }
    if !serialized.open {
        scores.table.close();
    }
    Internal::new(scores)
}

#[pg_extern(parallel_safe)]
fn dp_item_scores_combine(
    first: Internal,
    second: Internal,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Internal {
    unsafe { combine(fcinfo, first, second) }
}

#[pg_extern(parallel_safe, strict)]
fn dp_item_scores_serialize(state: Internal, fcinfo: pg_sys::FunctionCallInfo) -> Vec<u8> {
    unsafe { serialize(fcinfo, state) }
}

#[pg_extern(parallel_safe, strict)]
fn dp_item_scores_deserialize(
    bytes: &[u8],
    _unused: Internal,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Internal {
    unsafe { deserialize(fcinfo, bytes) }
}

// Every selection aggregate: the same state type and support functions, its own
// transition and final functions (FINALFUNC_EXTRA, so that the final function can return
// the polymorphic item type and read its arguments). VOLATILE comes later, with the
// catalog fix-ups of mod.rs.
extension_sql!(
    r#"
DO $aggregates$
DECLARE
    aggregate record;
BEGIN
    FOR aggregate IN
        SELECT * FROM (VALUES
            ('dp_argmax', 'item anyelement, score double precision, epsilon double precision'),
            ('dp_argmax', 'item anyelement, score double precision, epsilon double precision, max_score double precision'),
            ('dp_argmax', 'item anyelement, score double precision, epsilon double precision, max_score double precision, candidates anyarray'),
            ('dp_top_k', 'item anyelement, score double precision, k integer, epsilon double precision'),
            ('dp_top_k', 'item anyelement, score double precision, k integer, epsilon double precision, max_score double precision'),
            ('dp_top_k', 'item anyelement, score double precision, k integer, epsilon double precision, max_score double precision, candidates anyarray'),
            ('dp_top_k_unknown_domain', 'item anyelement, score double precision, k integer, epsilon double precision, delta double precision'),
            ('dp_top_k_unknown_domain', 'item anyelement, score double precision, k integer, epsilon double precision, delta double precision, max_score double precision'),
            ('dp_top_k_unknown_domain', 'item anyelement, score double precision, k integer, epsilon double precision, delta double precision, max_score double precision, k_bar integer')
        ) AS a(name, arguments)
    LOOP
        -- The transition functions are version-1 C functions of their own (see
        -- arguments.rs), one symbol for every form of an aggregate.
        EXECUTE format(
            'CREATE FUNCTION %I(state internal, %s) RETURNS internal
             AS %L, %L LANGUAGE C PARALLEL SAFE',
            aggregate.name || '_trans', aggregate.arguments, 'MODULE_PATHNAME', aggregate.name || '_trans');
        EXECUTE format(
            'CREATE AGGREGATE %I(%s) (
                SFUNC = %I, STYPE = internal, SSPACE = 4096,
                FINALFUNC = %I, FINALFUNC_EXTRA, FINALFUNC_MODIFY = READ_ONLY,
                COMBINEFUNC = dp_item_scores_combine,
                SERIALFUNC = dp_item_scores_serialize, DESERIALFUNC = dp_item_scores_deserialize,
                PARALLEL = SAFE)',
            aggregate.name, aggregate.arguments, aggregate.name || '_trans', aggregate.name || '_final');
    END LOOP;
END
$aggregates$;
"#,
    name = "selection_aggregates",
    requires = [
        dp_item_scores_combine,
        dp_item_scores_serialize,
        dp_item_scores_deserialize,
        argmax::dp_argmax_final_counting,
        argmax::dp_argmax_final_scored,
        argmax::dp_argmax_final_candidates,
        top_k::dp_top_k_final_counting,
        top_k::dp_top_k_final_scored,
        top_k::dp_top_k_final_candidates,
        top_k::dp_top_k_unknown_domain_final_counting,
        top_k::dp_top_k_unknown_domain_final_scored,
        top_k::dp_top_k_unknown_domain_final_k_bar,
    ],
);
