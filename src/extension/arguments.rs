//! Reading an aggregate's arguments without its rows.
//!
//! With no input rows no transition call ever sees epsilon or candidates, yet the answer
//! (and any parameter error) must not reveal that the input was empty. Constants, and
//! expressions built only from constants and statement parameters (`$1` of a prepared
//! statement), are the same on every row: the metering hook evaluates them once from the
//! plan, and the final function reads them from there.

use super::budget::plan_arguments;
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

    /// The value as a bigint (passed by value on 64-bit servers), when known.
    pub fn bigint(self) -> Option<Option<i64>> {
        match self {
            Argument::Known(value) => Some(value.map(|d| d.value() as i64)),
            Argument::Unknown => None,
        }
    }
}

/// Argument `position` (0-based, as written in the call) of the aggregate being finalized:
/// as the metered plan gave it (which a parallel plan's Finalize Aggregate needs: the
/// planner replaced its arguments), else read from the call's own Aggref.
///
/// # Safety
/// `fcinfo` must be the call info of an aggregate support function.
pub unsafe fn aggregate_argument(fcinfo: pg_sys::FunctionCallInfo, position: usize) -> Argument {
    // SAFETY: AggGetAggref reads a support function's call info (the caller's contract)
    // and returns NULL or the live Aggref, whose arguments are TargetEntries; the
    // context, when it is an AggState, is the node running the call.
    unsafe {
        let aggref = pg_sys::AggGetAggref(fcinfo);
        if aggref.is_null() {
            return Argument::Unknown;
        }
        let context = (*fcinfo).context;
        if let Some(Argument::Known(value)) = plan_arguments(context.cast(), aggref)
            .and_then(|arguments| arguments.get(position).copied())
        {
            return Argument::Known(value);
        }
        // Not known when the plan started, such as an init-plan's answer (candidates from
        // a public table): the same on every row of this loop, read now.
        let entries = PgList::<pg_sys::TargetEntry>::from_pg((*aggref).args);
        let Some(entry) = entries.get_ptr(position) else {
            return Argument::Unknown;
        };
        if context.is_null() || !pgrx::is_a(context, pg_sys::NodeTag::T_AggState) {
            return Argument::Unknown;
        }
        let node = &mut (*(context as *mut pg_sys::AggState)).ss.ps as *mut pg_sys::PlanState;
        evaluate_fixed((*entry).expr, (*node).state, Some(node))
    }
}

/// The value of an aggregate argument that is the same on every row (a constant, or an
/// expression of constants and statement parameters), evaluated once in `estate`;
/// Unknown when it depends on the rows (a column, a volatile function, a subquery, ...).
/// With `running`, the running node that holds the aggregate, parameters set while the
/// plan runs (an init-plan's answer) are read too; without, they are Unknown (the plan
/// has not started).
///
/// # Safety
/// `expression` must be an expression of a plan started in `estate`, and `running` one of
/// its nodes.
pub unsafe fn evaluate_fixed(
    expression: *mut pg_sys::Expr,
    estate: *mut pg_sys::EState,
    running: Option<*mut pg_sys::PlanState>,
) -> Argument {
    // SAFETY: nodes are cast after their tags are checked; the expression is evaluated in
    // a context of the query's own memory, where its value stays until the query ends.
    unsafe {
        let node = expression as *mut pg_sys::Node;
        if pgrx::is_a(node, pg_sys::NodeTag::T_Const) {
            let constant = expression as *mut pg_sys::Const;
            return Argument::Known((!(*constant).constisnull).then_some((*constant).constvalue));
        }
        // Before the plan runs, only what cannot change while it runs: constants,
        // statement parameters and immutable functions of them (a stable function such as
        // current_setting() could read another value by the time the rows are read).
        let row_independent = is_same_on_every_row(node)
            && (running.is_some()
                || (!contains_executor_parameter(node)
                    && !pg_sys::contain_mutable_functions(node)));
        if !row_independent || estate.is_null() {
            return Argument::Unknown;
        }
        let (parent, context) = match running {
            Some(parent) => (parent, (*parent).ps_ExprContext),
            None => (std::ptr::null_mut(), pg_sys::CreateExprContext(estate)),
        };
        let state = pg_sys::ExecInitExpr(expression, parent);
        let mut is_null = false;
        let value = pg_sys::ExecEvalExprSwitchContext(state, context, &mut is_null);
        Argument::Known((!is_null).then_some(value))
    }
}

/// Whether an expression is the same on every row of a loop: no column, aggregate,
/// subquery or volatile function, only constants, parameters (of the statement, or set
/// while the plan runs) and functions of them.
///
/// # Safety
/// `node` must be NULL or a valid expression node.
pub unsafe fn is_same_on_every_row(node: *mut pg_sys::Node) -> bool {
    // SAFETY: as the caller guarantees.
    unsafe {
        !pg_sys::contain_var_clause(node)
            && !pg_sys::contain_agg_clause(node)
            && !pg_sys::contain_subplans(node)
            && !pg_sys::contain_volatile_functions(node)
    }
}

/// Whether an expression reads a parameter set while the plan runs (PARAM_EXEC: an
/// outer row's column, an init-plan's answer), which may differ from loop to loop.
///
/// # Safety
/// `node` must be NULL or a valid expression node.
unsafe fn contains_executor_parameter(node: *mut pg_sys::Node) -> bool {
    #[pgrx::pg_guard]
    unsafe extern "C-unwind" fn walker(
        node: *mut pg_sys::Node,
        context: *mut std::ffi::c_void,
    ) -> bool {
        // SAFETY: as contains_executor_parameter's contract; tags checked before casts.
        unsafe {
            if node.is_null() {
                return false;
            }
            if pgrx::is_a(node, pg_sys::NodeTag::T_Param)
                && (*(node as *mut pg_sys::Param)).paramkind == pg_sys::ParamKind::PARAM_EXEC
            {
                return true;
            }
            pg_sys::expression_tree_walker(node, Some(walker), context)
        }
    }
    // SAFETY: as the caller guarantees.
    unsafe { walker(node, std::ptr::null_mut()) }
}

/// The arguments of a call, read in place from its `fcinfo`.
///
/// The per-row transition functions use this instead of `#[pg_extern]`: pgrx unboxes
/// every argument through a call that is not inlined (about 10 ns each under perf), which
/// at five arguments and 10^7 rows costs more than PostgreSQL's own avg() does in total.
pub struct CallArguments(pg_sys::FunctionCallInfo);

impl CallArguments {
    /// # Safety
    /// `fcinfo` must be the valid call info of the function being run.
    pub unsafe fn new(fcinfo: pg_sys::FunctionCallInfo) -> Self {
        Self(fcinfo)
    }

    pub fn count(&self) -> usize {
        // SAFETY: a valid call info (CallArguments::new's contract).
        unsafe { (*self.0).nargs as usize }
    }

    /// Argument `n` (0-based), None when SQL NULL (or absent).
    pub fn datum(&self, n: usize) -> Option<Datum> {
        let count = self.count();
        if n >= count {
            return None;
        }
        // SAFETY: a valid call info holds `nargs` arguments.
        let argument = unsafe { &(*self.0).args.as_slice(count)[n] };
        (!argument.isnull).then_some(argument.value)
    }

    pub fn float(&self, n: usize) -> Option<f64> {
        self.datum(n).map(|d| f64::from_bits(d.value() as u64))
    }
}

/// The `pg_finfo_*` record that marks a C function as version-1 for PostgreSQL's `dlsym`
/// (what `#[pg_extern]` writes for its own functions).
#[macro_export]
macro_rules! version_1_function_record {
    ($record:ident) => {
        #[unsafe(no_mangle)]
        #[doc(hidden)]
        pub extern "C" fn $record() -> &'static ::pgrx::pg_sys::Pg_finfo_record {
            const VERSION_1: ::pgrx::pg_sys::Pg_finfo_record =
                ::pgrx::pg_sys::Pg_finfo_record { api_version: 1 };
            &VERSION_1
        }
    };
}

/// Returns a datum, or SQL NULL, from a version-1 function.
///
/// # Safety
/// `fcinfo` must be the valid call info of the function being run.
pub unsafe fn return_datum(fcinfo: pg_sys::FunctionCallInfo, datum: Option<Datum>) -> Datum {
    match datum {
        Some(datum) => datum,
        None => {
            // SAFETY: a valid call info, as the caller guarantees.
            unsafe { (*fcinfo).isnull = true };
            Datum::from(0usize)
        }
    }
}

/// A numeric datum as double precision, without error: beyond its range ±∞, a nonzero
/// value below it 0, NaN as NaN (numeric_float8_no_overflow). The implicit cast would
/// fail on such a value, and its message would print it: data never raises an error
/// (../shared/PRIVACY.md, section 6).
///
/// # Safety
/// `numeric` must be a non-NULL numeric datum.
#[inline]
pub unsafe fn numeric_to_f64(numeric: pg_sys::Datum) -> f64 {
    // SAFETY: a numeric argument, as the caller guarantees; the function returns a
    // float8 by value.
    unsafe {
        pgrx::direct_function_call::<f64>(pg_sys::numeric_float8_no_overflow, &[Some(numeric)])
    }
    .expect("a float8 for a non-NULL numeric")
}
