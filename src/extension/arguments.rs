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
    // SAFETY: AggGetAggref reads a support function's call info (the caller's contract)
    // and returns NULL or the live Aggref; its arguments are TargetEntries whose
    // expressions are cast only after their tags are checked, and an expression is
    // evaluated in the aggregate's own expression context, as PostgreSQL evaluates it.
    unsafe {
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
        if !row_independent
            || context.is_null()
            || !pgrx::is_a(context, pg_sys::NodeTag::T_AggState)
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
}

/// Whether argument `position` of the aggregate has the same datum on every row: a
/// constant, or a parameter of the statement (`$1`).
///
/// # Safety
/// `fcinfo` must be the call info of an aggregate support function.
unsafe fn argument_is_fixed(fcinfo: pg_sys::FunctionCallInfo, position: usize) -> bool {
    // SAFETY: as in aggregate_argument: the Aggref and its nodes, tags checked first.
    unsafe {
        let aggref = pg_sys::AggGetAggref(fcinfo);
        if aggref.is_null() {
            return false;
        }
        let entries = PgList::<pg_sys::TargetEntry>::from_pg((*aggref).args);
        let Some(entry) = entries.get_ptr(position) else {
            return false;
        };
        let node = (*entry).expr as *mut pg_sys::Node;
        pgrx::is_a(node, pg_sys::NodeTag::T_Const)
            || (pgrx::is_a(node, pg_sys::NodeTag::T_Param)
                && (*(node as *mut pg_sys::Param)).paramkind == pg_sys::ParamKind::PARAM_EXTERN)
    }
}

/// An array argument that must be the same on every row (candidates, alphas).
///
/// A constant or a statement parameter arrives as the same pointer on every row, so that
/// comparison is free. Any other array is compared by its bytes on every row: a pointer
/// alone proves nothing there, since an array rebuilt per row can land where the previous
/// row's was.
pub struct ArrayArgument {
    datum: Datum,
    fixed: bool,
    bytes: Vec<u8>,
}

impl ArrayArgument {
    /// The array passed as argument `position` of the aggregate call.
    ///
    /// # Safety
    /// `array` must be a valid, non-NULL array datum; `fcinfo` the call info of an
    /// aggregate support function.
    pub unsafe fn new(fcinfo: pg_sys::FunctionCallInfo, position: usize, array: Datum) -> Self {
        // SAFETY: as the caller guarantees.
        unsafe {
            Self {
                datum: array,
                fixed: argument_is_fixed(fcinfo, position),
                bytes: array_bytes(array).to_vec(),
            }
        }
    }

    /// # Safety
    /// `array` must be a valid, non-NULL array datum.
    pub unsafe fn is_same(&self, array: Datum) -> bool {
        // SAFETY: as the caller guarantees.
        (self.fixed && array == self.datum)
            || unsafe { array_bytes(array) } == self.bytes.as_slice()
    }
}

/// The bytes of an array, detoasted (a copy only if it was toasted).
///
/// # Safety
/// `array` must be a valid, non-NULL array datum that outlives the slice.
unsafe fn array_bytes<'a>(array: Datum) -> &'a [u8] {
    // SAFETY: a valid varlena, detoasted, is VARSIZE bytes long.
    unsafe {
        let flat = pg_sys::pg_detoast_datum(array.cast_mut_ptr());
        std::slice::from_raw_parts(flat as *const u8, pgrx::varsize_any(flat))
    }
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

/// Returns an Internal state from a version-1 function.
///
/// # Safety
/// `fcinfo` must be the valid call info of the function being run.
pub unsafe fn return_internal(fcinfo: pg_sys::FunctionCallInfo, state: pgrx::Internal) -> Datum {
    // SAFETY: as the caller guarantees.
    unsafe { return_datum(fcinfo, state.unwrap()) }
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
