//! Citus's split of a DP aggregate: partial states on the workers, combined and finalized
//! on the coordinator.
//!
//! Citus splits an aggregate whose arguments and result have fixed types (the quantile
//! aggregates, dp_partition) into `worker_binary_partial_agg(agg, ROW(args))` on each
//! shard (our transition and serial functions) and `coord_binary_combine_agg(agg, state,
//! NULL::result)` on the coordinator (our deserial, combine and final functions). The
//! coordinator's Aggref has none of the call's parameters, so after Citus planned,
//! [`register`] keeps them for the plan under a tag written into the Aggref's location
//! (negative: no parsed call has one), and the metering hook reads them back
//! ([`combined_call`]) to charge the node, once, as any other. A combine this planner
//! hook did not tag (an analyst's own call of coord_binary_combine_agg) is refused.

use crate::extension::budget::dp_aggregate;
use crate::extension::forms::Aggregate;
use pgrx::is_a;
use pgrx::pg_sys::{self, NodeTag, Oid};
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::ffi::{CStr, CString};

/// Tags of registered combines, counting down from here (below the planner hook's other
/// marks).
const FIRST_TAG: i32 = -40_261_125;

/// Registered combines this process keeps; the oldest is forgotten beyond (a plan that
/// still holds it is refused when it starts, and planned again by its next statement).
const KEPT: usize = 100_000;

#[derive(Default)]
struct Registry {
    next: i32,
    calls: HashMap<i32, CString>,
    order: VecDeque<i32>,
}

thread_local! {
    static REGISTRY: RefCell<Registry> = RefCell::new(Registry::default());
}

/// A function in pg_catalog (Citus's, or PostgreSQL's) by name and argument types;
/// InvalidOid if there is none.
///
/// # Safety
/// A catalog lookup: call it inside a transaction.
pub(super) unsafe fn catalog_function(name: &CStr, arguments: &[Oid]) -> Oid {
    // SAFETY: a qualified name list built here; missing_ok.
    unsafe {
        let mut names = pg_sys::lappend(
            std::ptr::null_mut(),
            pg_sys::makeString(c"pg_catalog".as_ptr().cast_mut()).cast(),
        );
        names = pg_sys::lappend(names, pg_sys::makeString(name.as_ptr().cast_mut()).cast());
        pg_sys::LookupFuncName(names, arguments.len() as i32, arguments.as_ptr(), true)
    }
}

/// The DP aggregate a Citus combine finalizes, from its first argument.
///
/// # Safety
/// `aggref` must be a valid Aggref.
unsafe fn combined_aggregate(aggref: *mut pg_sys::Aggref) -> Option<(Oid, &'static Aggregate)> {
    // SAFETY: the arguments of an Aggref are TargetEntries; tags are checked before casts.
    unsafe {
        let first = pgrx::PgList::<pg_sys::TargetEntry>::from_pg((*aggref).args).get_ptr(0)?;
        let constant = (*first).expr as *mut pg_sys::Node;
        if !is_a(constant, NodeTag::T_Const) {
            return None;
        }
        let constant = constant as *mut pg_sys::Const;
        if (*constant).constisnull
            || ((*constant).consttype != pg_sys::OIDOID
                && (*constant).consttype != pg_sys::REGPROCEDUREOID)
        {
            return None;
        }
        let function = Oid::from((*constant).constvalue.value() as u32);
        let aggregate = dp_aggregate(function)?;
        let combine = catalog_function(
            c"coord_binary_combine_agg",
            &[pg_sys::OIDOID, pg_sys::BYTEAOID, pg_sys::ANYELEMENTOID],
        );
        let text_combine = catalog_function(
            c"coord_combine_agg",
            &[pg_sys::OIDOID, pg_sys::CSTRINGOID, pg_sys::ANYELEMENTOID],
        );
        let fnoid = (*aggref).aggfnoid;
        (fnoid != pg_sys::InvalidOid && (fnoid == combine || fnoid == text_combine))
            .then_some((function, aggregate))
    }
}

/// The DP aggregate that `aggref` combines, if it is Citus's combine of one.
///
/// # Safety
/// `aggref` must be a valid Aggref.
pub unsafe fn combined_function(aggref: *mut pg_sys::Aggref) -> Option<Oid> {
    // SAFETY: as the caller guarantees.
    unsafe { combined_aggregate(aggref).map(|(function, _)| function) }
}

/// If `aggref` is Citus's combine of DP call `original` (a copy of the call as the
/// statement wrote it), registers the call's arguments for the metering hook and tags the
/// Aggref with them; whether it was.
///
/// # Safety
/// `aggref` and `original` must be valid Aggrefs.
pub unsafe fn register(aggref: *mut pg_sys::Aggref, original: *mut pg_sys::Aggref) -> bool {
    // SAFETY: as the caller guarantees.
    unsafe {
        match combined_aggregate(aggref) {
            Some((function, _)) if function == (*original).aggfnoid => {}
            _ => return false,
        }
        let expressions: Vec<*mut pg_sys::Node> =
            pgrx::PgList::<pg_sys::TargetEntry>::from_pg((*original).args)
                .iter_ptr()
                .map(|entry| (*entry).expr.cast())
                .collect();
        let mut list: *mut pg_sys::List = std::ptr::null_mut();
        for expression in expressions {
            list = pg_sys::lappend(list, expression.cast());
        }
        let text = CStr::from_ptr(pg_sys::nodeToString(list.cast())).to_owned();
        let tag = REGISTRY.with(|registry| {
            let mut registry = registry.borrow_mut();
            if registry.next == 0 {
                registry.next = FIRST_TAG;
            }
            let tag = registry.next;
            registry.next -= 1;
            registry.calls.insert(tag, text);
            registry.order.push_back(tag);
            while registry.order.len() > KEPT {
                let oldest = registry.order.pop_front().expect("not empty");
                registry.calls.remove(&oldest);
            }
            tag
        });
        (*aggref).location = tag;
        true
    }
}

/// A Citus combine of a DP aggregate in a plan: the aggregate, and the argument
/// expressions of the call the planner hook registered for it (in the current memory
/// context). `Some(Err(name))`: a combine the planner hook did not register.
///
/// # Safety
/// `aggref` must be a valid Aggref of a plan about to start.
pub unsafe fn combined_call(
    aggref: *mut pg_sys::Aggref,
) -> Option<Result<(&'static Aggregate, Vec<*mut pg_sys::Expr>), &'static str>> {
    // SAFETY: as the caller guarantees; the registered text is nodeToString's.
    unsafe {
        let (_, aggregate) = combined_aggregate(aggref)?;
        let text =
            REGISTRY.with(|registry| registry.borrow().calls.get(&(*aggref).location).cloned());
        let Some(text) = text else {
            return Some(Err(aggregate.name));
        };
        let list = pg_sys::stringToNode(text.as_ptr()) as *mut pg_sys::List;
        Some(Ok((
            aggregate,
            pgrx::PgList::<pg_sys::Expr>::from_pg(list)
                .iter_ptr()
                .collect(),
        )))
    }
}

/// Whether the aggregate running `fcinfo` is a Citus combine that the planner hook
/// planned and registered: our deserial function may then read the bytes (a worker's
/// serial function wrote them), never bytes an analyst handed to Citus's helpers.
///
/// # Safety
/// `fcinfo` must be a valid call info.
pub unsafe fn in_planned_combine(fcinfo: pg_sys::FunctionCallInfo) -> bool {
    // SAFETY: AggGetAggref reads the call info (NULL outside an aggregation node, in a
    // window node for one); the Aggref it returns is live.
    unsafe {
        let aggref = pg_sys::AggGetAggref(fcinfo);
        !aggref.is_null()
            && combined_aggregate(aggref).is_some()
            && REGISTRY.with(|registry| registry.borrow().calls.contains_key(&(*aggref).location))
    }
}

/// Whether the aggregate running `fcinfo` is Citus's worker_binary_partial_agg: the serial
/// function then hands the state to Citus, which sends it to the coordinator's combine.
///
/// # Safety
/// `fcinfo` must be a valid call info.
pub unsafe fn in_partial_aggregation(fcinfo: pg_sys::FunctionCallInfo) -> bool {
    // SAFETY: AggGetAggref reads the call info; the Aggref it returns is live.
    unsafe {
        let aggref = pg_sys::AggGetAggref(fcinfo);
        if aggref.is_null() || !super::installed() {
            return false;
        }
        let partial = catalog_function(
            c"worker_binary_partial_agg",
            &[pg_sys::OIDOID, pg_sys::ANYELEMENTOID],
        );
        partial != pg_sys::InvalidOid && (*aggref).aggfnoid == partial
    }
}

/// Whether every argument and the result of `function` have fixed types: Citus splits
/// only such aggregates (it checks the row's types against the declared ones).
///
/// # Safety
/// A catalog lookup of an existing function.
pub unsafe fn has_fixed_types(function: Oid) -> bool {
    let mut types: *mut Oid = std::ptr::null_mut();
    let mut count = 0;
    // SAFETY: get_func_signature pallocs `count` argument types.
    unsafe {
        let result = pg_sys::get_func_signature(function, &mut types, &mut count);
        let arguments = if types.is_null() {
            &[][..]
        } else {
            std::slice::from_raw_parts(types, count as usize)
        };
        !is_polymorphic(result) && !arguments.iter().any(|&oid| is_polymorphic(oid))
    }
}

fn is_polymorphic(oid: Oid) -> bool {
    [
        pg_sys::ANYELEMENTOID,
        pg_sys::ANYARRAYOID,
        pg_sys::ANYNONARRAYOID,
        pg_sys::ANYENUMOID,
        pg_sys::ANYRANGEOID,
        pg_sys::ANYMULTIRANGEOID,
        pg_sys::ANYCOMPATIBLEOID,
        pg_sys::ANYCOMPATIBLEARRAYOID,
        pg_sys::ANYCOMPATIBLENONARRAYOID,
        pg_sys::ANYCOMPATIBLERANGEOID,
        pg_sys::ANYCOMPATIBLEMULTIRANGEOID,
        pg_sys::RECORDOID,
    ]
    .contains(&oid)
}
