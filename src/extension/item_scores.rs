//! The aggregate state of the selection aggregates (dp_argmax, dp_top_k,
//! dp_top_k_unknown_domain): per-item scores in a hash table, in the aggregate's memory
//! context. The steps around it (transition, final, combine, serialization) are
//! aggregate.rs's, shared with the quantile state.

use super::aggregate::{self, final_state, Source, State};
use super::arguments::{numeric_to_f64, return_datum, Argument, CallArguments};
use super::forms::{Aggregate, Form};
use super::guc;
use super::items::{ItemType, StoredItem};
use super::memory::ContextAllocator;
use super::serialization::{to_cbor, Bytes};
use super::spellings::{item_spellings, Spelling};
use super::OrRaise;
use crate::error::Error;
use crate::mechanisms::rng::Seeding;
use crate::mechanisms::scores::{contribution, ItemScore, ScoreTable};
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
        Ok(Selection {
            epsilon,
            max_score,
            k,
            delta,
            k_bar,
        })
    }
}

/// The candidates argument of a call, for the forms that have one.
#[derive(Debug, Clone, Copy)]
pub enum Candidates {
    /// The form without candidates: any item may win.
    Open,
    /// The array given (None: SQL NULL, which is an error).
    Listed { array: Option<Datum> },
    /// A final function with no rows whose candidates depend on the rows.
    Unknown,
}

fn null_candidates() -> Error {
    Error::InvalidParameter {
        name: "candidates",
        value: "NULL".into(),
        requirement: "an array (an empty array gives NULL)".into(),
    }
}

/// The parameters and candidates of one row, or of the call.
pub struct RowArguments {
    selection: SelectionArguments,
    candidates: Candidates,
}

/// The scores of one group's items.
pub struct ItemScores {
    pub item_type: ItemType,
    pub selection: Selection,
    pub table: ScoreTable<StoredItem, ContextAllocator>,
    /// Where the items and the table live: the aggregate's memory context.
    memory: MemoryContext,
    /// Scores are numeric datums (the numeric overloads), converted without error.
    numeric_scores: bool,
}

impl ItemScores {
    /// An empty state; with candidates, every listed item starts at score 0 and the table
    /// is closed to other items.
    ///
    /// # Safety
    /// `memory` must outlive the state; `fcinfo` NULL or the call info of a selection
    /// transition or final function.
    unsafe fn new(
        fcinfo: pg_sys::FunctionCallInfo,
        item_type: ItemType,
        selection: Selection,
        candidates: Candidates,
        memory: MemoryContext,
    ) -> Result<Self, Error> {
        let mut state = Self {
            item_type,
            selection,
            // SAFETY: the caller guarantees that `memory` outlives the state.
            table: ScoreTable::new_in(unsafe { ContextAllocator::new(memory) }),
            memory,
            // SAFETY: a transition or final function's call info (NULL for a state that
            // only merges); argument 2 is the score in both.
            numeric_scores: !fcinfo.is_null()
                && unsafe { pg_sys::get_fn_expr_argtype((*fcinfo).flinfo, 2) }
                    == pg_sys::NUMERICOID,
        };
        if let Candidates::Listed { array: list } = candidates {
            let array = list.ok_or_else(null_candidates)?;
            // SAFETY: a non-NULL array argument of the call, of the item type's array type
            // (the aggregate's signature says anyarray of anyelement).
            unsafe {
                // A candidate longer than MAX_ITEM_BYTES is left out, as its rows are:
                // rows matched in place against the table would count otherwise.
                for candidate in item_type.array_elements(array) {
                    if !item_type.too_long(candidate) {
                        state.add(candidate, 0.0);
                    }
                }
            }
            state.table.close();
        }
        Ok(state)
    }

    /// The items and their scores, to draw from: in the order they arrived, or with a
    /// seed (`pg_exp_mech.seed`, tests only) in the order of their hashes (then bytes), so that the
    /// same seed gives the same answer however the rows arrived (a parallel plan merges
    /// its workers' states in the order they finish). The order changes no probability:
    /// the mechanisms treat the items alike.
    pub fn entries(&self) -> Vec<ItemScore<'_, StoredItem>> {
        let mut entries: Vec<_> = self.table.iter().collect();
        if let Seeding::Fixed { .. } = guc::seeding() {
            // Two items whose 32-bit hashes are equal (one pair in about 2^16 items) go
            // by their bytes, so that their order of arrival does not show either.
            let image = |entry: &ItemScore<'_, StoredItem>| {
                let mut bytes = Vec::new();
                // SAFETY: a stored item is a valid datum of the state's item type.
                unsafe { self.item_type.write_image(entry.item.datum, &mut bytes) };
                bytes
            };
            entries.sort_by(|a, b| a.hash.cmp(&b.hash).then_with(|| image(a).cmp(&image(b))));
        }
        entries
    }

    /// Adds `amount` (in units of max_score) to the item's score.
    ///
    /// # Safety
    /// `item` must be a valid, non-NULL datum of the state's item type.
    #[inline]
    unsafe fn add(&mut self, item: Datum, amount: f64) {
        let item_type = &self.item_type;
        let memory = self.memory;
        // SAFETY: `item` is valid, as the caller guarantees, and so is every stored item
        // (a copy in the state's memory context); the copy is made in that context.
        unsafe {
            let key = item_type.key(item);
            self.table.add(
                item_type.hash(key),
                amount,
                |stored| item_type.matches(stored, key),
                || item_type.store(item_type.copy_into(item, memory), key),
            );
        }
    }
}

/// A row added without pgrx's guard, when it needs no more than that: a group's later row
/// whose item is NULL, or is in the table already, read and compared without PostgreSQL
/// ([`ItemType::key_in_place`]), with a float score. None: the guarded transition takes
/// the row (a group's first row, a new item or one outside the candidates, an item
/// compared by its type's functions or compressed or out of line, numeric scores). Over
/// 1,000 text items the guard and the calls around it took about 6 % of dp_argmax's
/// samples (issue 22).
///
/// Sound without the guard, which turns PostgreSQL's errors and Rust's panics into each
/// other at the boundary: nothing here calls PostgreSQL (so no error can longjmp over
/// these frames) or allocates, and nothing can panic on what a state holds: slices lie
/// within the lengths a key and a stored item carry (a stored item's inline bytes at most
/// 15), table slots are read through `get`, and max_score was validated positive and
/// finite before the state existed.
///
/// # Safety
/// `fcinfo` must be the call info of a selection transition function (every form takes
/// the state, the item and the score first, as [`ItemScores::add_row`] reads them).
#[inline(always)]
pub unsafe fn add_row_in_place(fcinfo: pg_sys::FunctionCallInfo) -> Option<Datum> {
    // SAFETY: a valid call info (the caller's contract).
    let arguments = unsafe { &*fcinfo };
    if arguments.nargs < 3 {
        return None;
    }
    // SAFETY: nargs >= 3 arguments follow the call info.
    let (state, item, score) = unsafe {
        let arguments = arguments.args.as_ptr();
        (&*arguments, &*arguments.add(1), &*arguments.add(2))
    };
    if state.isnull || state.value.is_null() {
        return None;
    }
    if item.isnull {
        return Some(state.value);
    }
    // SAFETY: a non-NULL state of a selection transition is the ItemScores it returned
    // before (aggregate::transition), which no one else holds during this call.
    let scores = unsafe { &mut *state.value.cast_mut_ptr::<ItemScores>() };
    if scores.numeric_scores {
        return None;
    }
    let item_type = &scores.item_type;
    // SAFETY: a non-NULL item argument of the transition call, of the item type.
    let key = unsafe { item_type.key_in_place(item.value) }?;
    let score = (!score.isnull).then(|| f64::from_bits(score.value.value() as u64));
    let amount = contribution(score, scores.selection.max_score);
    // SAFETY: stored items are valid datums of the item type, as is the key's.
    let same = |stored: &StoredItem| unsafe { item_type.matches(stored, key) };
    // SAFETY: the key is this type's, made from a valid datum.
    let hash = unsafe { item_type.hash(key) };
    scores.table.add_to_item(hash, amount, same).ok()?;
    Some(state.value)
}

/// A transition function of the selection aggregates (`{key}_trans`, aggregates.sql):
/// most rows in place, unguarded ([`add_row_in_place`]); the others through the guarded
/// transition.
macro_rules! selection_transition {
    ($(#[$doc:meta])* $function:ident, $record:ident, $aggregate:expr) => {
        $crate::version_1_function_record!($record);

        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $function(fcinfo: pg_sys::FunctionCallInfo) -> Datum {
            // SAFETY: PostgreSQL calls it as this aggregate's transition function.
            if let Some(state) = unsafe { $crate::extension::item_scores::add_row_in_place(fcinfo) } {
                return state;
            }
            #[pg_guard]
            unsafe extern "C-unwind" fn guarded(fcinfo: pg_sys::FunctionCallInfo) -> Datum {
                // SAFETY: as above.
                unsafe {
                    $crate::extension::aggregate::transition::<
                        $crate::extension::item_scores::ItemScores,
                    >(fcinfo, &$aggregate)
                }
            }
            // SAFETY: as above.
            unsafe { guarded(fcinfo) }
        }
    };
}
pub(super) use selection_transition;

/// The item type of this call (argument 1 of a transition or final function), checked
/// for a hash operator class even when no row arrived, so that the error does not depend
/// on the data.
///
/// # Safety
/// `fcinfo` must be the call info of a selection transition or final function.
unsafe fn call_item_type(fcinfo: pg_sys::FunctionCallInfo) -> ItemType {
    // SAFETY: the call info's flinfo describes the function being called.
    let (type_oid, collation) = unsafe {
        (
            pg_sys::get_fn_expr_argtype((*fcinfo).flinfo, 1),
            (*fcinfo).fncollation,
        )
    };
    ItemType::lookup(type_oid, collation).or_raise()
}

impl State for ItemScores {
    type Arguments = RowArguments;
    type Parameters = Selection;
    const TRANSITION: &'static str = "a selection transition function";
    const COMBINE: &'static str = "dp_item_scores_combine";
    const SERIALIZE: &'static str =
        "dp_item_scores_serialize (the serial function of a partial aggregation)";
    const DESERIALIZE: &'static str =
        "dp_item_scores_deserialize (the deserial function of a partial aggregation's combine)";

    #[inline]
    fn read(form: &Form, source: &impl aggregate::Source) -> Option<RowArguments> {
        let at = form.positions;
        let selection = SelectionArguments {
            epsilon: source.float(at.epsilon)?,
            max_score: match at.max_score {
                Some(position) => source.float(position)?,
                None => Some(1.0),
            },
            k: match at.k {
                Some(position) => source.integer(position)?,
                None => Some(1),
            },
            delta: match at.delta {
                Some(position) => Some(source.float(position)?),
                None => None,
            },
            k_bar: match at.k_bar {
                Some(position) => Some(source.integer(position)?),
                None => None,
            },
        };
        let candidates = match at.candidates.map(|position| source.argument(position)) {
            None => Candidates::Open,
            Some(Argument::Known(array)) => Candidates::Listed { array },
            Some(Argument::Unknown) => Candidates::Unknown,
        };
        Some(RowArguments {
            selection,
            candidates,
        })
    }

    fn validate(form: &Form, source: &impl Source) -> Result<(), Error> {
        let Some(arguments) = Self::read(form, source) else {
            return Ok(()); // A parameter depends on the rows: each row checks it.
        };
        arguments.selection.validate()?;
        match arguments.candidates {
            Candidates::Listed { array: None, .. } => Err(null_candidates()),
            _ => Ok(()),
        }
    }

    unsafe fn first(
        fcinfo: pg_sys::FunctionCallInfo,
        form: &Form,
        arguments: &RowArguments,
        memory: MemoryContext,
    ) -> Result<Option<Self>, Error> {
        // SAFETY: a selection transition or final function's call info.
        let item_type = unsafe { call_item_type(fcinfo) };
        // Without candidates the answer is a row's item: its spelling must not be a row's
        // choice (spellings.rs). Checked here too, for a plan the executor hook did not
        // meter (metering.rs checks every plan before its rows).
        if form.positions.candidates.is_none() && item_type.spelling == Spelling::Several {
            return Err(item_spellings(item_type.type_oid, item_type.collation));
        }
        let selection = arguments.selection.validate()?;
        if let Candidates::Unknown = arguments.candidates {
            return Ok(None);
        }
        // SAFETY: as above; the candidates are the call's own array argument.
        unsafe { ItemScores::new(fcinfo, item_type, selection, arguments.candidates, memory) }
            .map(Some)
    }

    #[inline]
    unsafe fn add_row(&mut self, row: &CallArguments) {
        if let Some(item) = row.datum(1) {
            // SAFETY: a non-NULL item argument of the transition call, of the item type.
            if unsafe { self.item_type.too_long(item) } {
                return;
            }
            // NULL items are skipped; NULL or NaN scores count 0; ±∞ clamp
            // (../shared/PRIVACY.md, section 6: clamp, never error, on data).
            let score = if self.numeric_scores {
                // SAFETY: a numeric overload's score argument.
                row.datum(2).map(|score| unsafe { numeric_to_f64(score) })
            } else {
                row.float(2)
            };
            let amount = contribution(score, self.selection.max_score);
            // SAFETY: a non-NULL item argument of the transition call, of the item type.
            unsafe { self.add(item, amount) };
        }
    }

    fn parameters(&self) -> &Selection {
        &self.selection
    }

    fn privacy_cost(&self) -> (f64, f64) {
        (self.selection.epsilon, self.selection.delta.unwrap_or(0.0))
    }

    fn empty_like(other: &Self, memory: MemoryContext) -> Self {
        // SAFETY: an open table needs no call info (no candidates are read).
        unsafe {
            ItemScores::new(
                std::ptr::null_mut(),
                other.item_type,
                other.selection,
                Candidates::Open,
                memory,
            )
        }
        .or_raise()
    }

    fn merge(&mut self, other: &Self) {
        for entry in other.table.iter() {
            // SAFETY: the items of a state are valid datums of its item type, which is
            // this state's (the parameters were compared, and the type is fixed by the
            // aggregate's signature).
            unsafe { self.add(entry.item.datum, entry.score) };
        }
        if !other.table.is_open() {
            self.table.close();
        }
    }

    fn to_bytes(&self) -> Vec<u8> {
        let entries: Vec<_> = self.table.iter().collect();
        let mut serialized = SerializedItemScores {
            type_oid: self.item_type.type_oid.to_u32(),
            collation: self.item_type.collation.to_u32(),
            selection: self.selection,
            open: self.table.is_open(),
            hashes: entries.iter().map(|e| e.hash).collect(),
            scores: entries.iter().map(|e| e.score).collect(),
            lengths: Vec::with_capacity(entries.len()),
            images: Bytes::default(),
        };
        for entry in entries {
            // SAFETY: the items of a state are valid datums of its item type.
            let length = unsafe {
                self.item_type
                    .write_image(entry.item.datum, &mut serialized.images.0)
            };
            serialized.lengths.push(length);
        }
        to_cbor(&serialized)
    }

    fn from_bytes(bytes: &[u8], memory: MemoryContext) -> Self {
        let serialized: SerializedItemScores =
            serde_cbor::from_slice(bytes).expect("a state written by dp_item_scores_serialize");
        let item_type =
            ItemType::lookup(serialized.type_oid.into(), serialized.collation.into()).or_raise();
        // SAFETY: an open table needs no call info (no candidates are read).
        let mut scores = unsafe {
            ItemScores::new(
                std::ptr::null_mut(),
                item_type,
                serialized.selection,
                Candidates::Open,
                memory,
            )
        }
        .or_raise();
        let mut offset = 0usize;
        for ((&hash, &score), &length) in serialized
            .hashes
            .iter()
            .zip(&serialized.scores)
            .zip(&serialized.lengths)
        {
            let image = serialized
                .images
                .0
                .get(offset..offset + length as usize)
                .filter(|image| item_type.is_image(image))
                .expect("a state written by dp_item_scores_serialize: an item's image");
            offset += length as usize;
            // SAFETY: `memory` is the current memory context, live for the whole call.
            let item =
                unsafe { PgMemoryContexts::For(memory).switch_to(|_| item_type.restore(image)) };
            // The items of a serialized table are distinct: no comparison needed.
            // SAFETY: a valid item of the type, just restored; it lives in `memory`.
            let stored = item_type.store(item, unsafe { item_type.key(item) });
            scores.table.add(hash, score, |_| false, || stored);
        }
        if !serialized.open {
            scores.table.close();
        }
        scores
    }
}

/// A final function of `aggregate`: (state, the aggregate's arguments), answered by
/// `mechanism` once the evaluation is charged.
///
/// # Safety
/// `fcinfo` must be the call info of `aggregate`'s final function.
pub unsafe fn final_function(
    fcinfo: pg_sys::FunctionCallInfo,
    aggregate: &Aggregate,
    mechanism: fn(&ItemScores) -> Option<Datum>,
) -> Datum {
    // SAFETY: as the caller guarantees; FINALFUNC_EXTRA passes one argument per argument
    // of the aggregate after the state.
    unsafe {
        let call = CallArguments::new(fcinfo);
        let answer = final_state::<ItemScores>(fcinfo, call.datum(0), aggregate, call.count() - 1)
            .and_then(|scores| mechanism(&scores));
        return_datum(fcinfo, answer)
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

#[pg_extern(parallel_safe)]
fn dp_item_scores_combine(
    first: Internal,
    second: Internal,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Internal {
    // SAFETY: PostgreSQL calls it as the combine function of the selection aggregates.
    unsafe { aggregate::combine::<ItemScores>(fcinfo, first, second) }
}

#[pg_extern(parallel_safe, strict)]
fn dp_item_scores_serialize(state: Internal, fcinfo: pg_sys::FunctionCallInfo) -> Vec<u8> {
    // SAFETY: PostgreSQL calls it as their serialize function (and it checks that).
    unsafe { aggregate::serialize::<ItemScores>(fcinfo, state) }
}

#[pg_extern(parallel_safe, strict)]
fn dp_item_scores_deserialize(
    bytes: &[u8],
    _unused: Internal,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Internal {
    // SAFETY: PostgreSQL calls it as their deserialize function (and it checks that).
    unsafe { aggregate::deserialize::<ItemScores>(fcinfo, bytes) }
}
