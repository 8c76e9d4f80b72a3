//! Reading an aggregate's arguments from its own call when no row arrived.
//!
//! With no input rows no transition call ever sees epsilon or candidates, yet the answer
//! (and any parameter error) must not reveal that the input was empty. The final function
//! can read the arguments from its `Aggref`: constants, and expressions built only from
//! constants and query parameters (`$1` of a prepared statement, an init-plan), evaluate
//! to the same value on every row, so they can be evaluated once here.

use pgrx::pg_sys::{self, Datum};
use pgrx::PgList;

/// An argument as seen from the final function.
#[derive(Debug, Clone, Copy)]
pub enum Argument {
    /// Known without rows; None is SQL NULL.
    Known(Option<Datum>),
    /// Depends on the rows (a column, a volatile function, ...).
    Unknown,
}

impl Argument {
    /// The value as a double precision number, when known.
    pub fn float(self) -> Option<Option<f64>> {
        match self {
            Argument::Known(value) => Some(value.map(|d| f64::from_bits(d.value() as u64))),
            Argument::Unknown => None,
        }
    }

    /// The value as an integer, when known.
    pub fn integer(self) -> Option<Option<i32>> {
        match self {
            Argument::Known(value) => Some(value.map(|d| d.value() as i32)),
            Argument::Unknown => None,
        }
    }
}

/// Argument `position` (0-based, as written in the call) of the aggregate being finalized.
///
/// # Safety
/// `fcinfo` must be the call info of an aggregate support function.
pub unsafe fn aggregate_argument(fcinfo: pg_sys::FunctionCallInfo, position: usize) -> Argument {
    let aggref = pg_sys::AggGetAggref(fcinfo);
    if aggref.is_null() {
        return Argument::Unknown;
    }
    let entries = PgList::<pg_sys::TargetEntry>::from_pg((*aggref).args);
    let Some(entry) = entries.get_ptr(position) else {
        return Argument::Unknown;
    };
    let expression = (*entry).expr;
    let node = expression as *mut pg_sys::Node;
    if pgrx::is_a(node, pg_sys::NodeTag::T_Const) {
        let constant = expression as *mut pg_sys::Const;
        return Argument::Known((!(*constant).constisnull).then_some((*constant).constvalue));
    }
    let context = (*fcinfo).context;
    let row_independent = !pg_sys::contain_var_clause(node)
        && !pg_sys::contain_agg_clause(node)
        && !pg_sys::contain_subplans(node)
        && !pg_sys::contain_volatile_functions(node);
    if !row_independent || context.is_null() || !pgrx::is_a(context, pg_sys::NodeTag::T_AggState)
    {
        return Argument::Unknown;
    }
    let aggregate = context as *mut pg_sys::AggState;
    let parent = &mut (*aggregate).ss.ps as *mut pg_sys::PlanState;
    let state = pg_sys::ExecInitExpr(expression, parent);
    let mut is_null = false;
    let value = pg_sys::ExecEvalExpr(state, (*parent).ps_ExprContext, &mut is_null);
    Argument::Known((!is_null).then_some(value))
}
