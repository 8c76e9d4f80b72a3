//! What the workers evaluate of a DP call, and how they know it is one.
//!
//! Citus sends each argument of a call to the workers, which evaluate it on every row
//! they read (as a column they ship, or inside their partial aggregation). A parameter
//! that could fail there (`current_setting('dp.eps')`, a setting the worker's session
//! lacks; `1 / $1`) would fail only where rows exist: an error that tells whether the
//! rows are there. So before Citus plans, [`fix_parameters`] evaluates each parameter on
//! the coordinator, once, into a constant (statement parameters take their values;
//! dp_unit_share keeps its call, which the metering hook reads as the total it charges).
//!
//! The workers' statistics counters would count the rows a fragment reads, an exact
//! count under a DP aggregate. Each row value of a call is wrapped in `dp_fragment`, an
//! identity, and a plan that calls it is not counted ([`calls_fragment_marker`]), on a
//! worker or wherever Citus runs the fragment, whoever runs it.

use crate::extension::units::charged_expression;
use pgrx::pg_sys::{self, NodeTag, Oid};
use pgrx::prelude::*;
use pgrx::{is_a, PgList};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;

thread_local! {
    /// Which functions are dp_fragment, by oid.
    static MARKERS: RefCell<HashMap<Oid, bool>> = RefCell::new(HashMap::new());
}

/// Forgets which oids are dp_fragment when functions change; called from _PG_init.
pub fn install() {
    // SAFETY: _PG_init runs once per process; the callback lives as long as the library.
    unsafe {
        pg_sys::CacheRegisterSyscacheCallback(
            pg_sys::SysCacheIdentifier::PROCOID as i32,
            Some(forget_markers),
            pg_sys::Datum::from(0usize),
        );
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn forget_markers(_argument: pg_sys::Datum, _cache: i32, _hash: u32) {
    MARKERS.with(|markers| markers.borrow_mut().clear());
}

/// Whether `function` is this extension's dp_fragment (by name and membership: no lookup
/// by schema while a plan starts).
fn is_marker(function: Oid) -> bool {
    if function.to_u32() < pg_sys::FirstNormalObjectId {
        return false;
    }
    if let Some(known) = MARKERS.with(|markers| markers.borrow().get(&function).copied()) {
        return known;
    }
    // SAFETY: catalog lookups by oid; NULL and InvalidOid are checked.
    let marker = unsafe {
        let name = pg_sys::get_func_name(function);
        !name.is_null() && std::ffi::CStr::from_ptr(name).to_bytes() == b"dp_fragment" && {
            let extension = pg_sys::get_extension_oid(c"pg_exp_mech".as_ptr(), true);
            extension != pg_sys::InvalidOid
                && pg_sys::getExtensionOfObject(pg_sys::ProcedureRelationId, function) == extension
        }
    };
    MARKERS.with(|markers| markers.borrow_mut().insert(function, marker));
    marker
}

/// Whether a query (or any query inside it) calls dp_fragment and only reads: a fragment
/// that Citus sends to a worker, planned there (where Citus is installed).
///
/// # Safety
/// `query` must be a valid Query.
pub unsafe fn is_fragment(query: *mut pg_sys::Query) -> bool {
    #[pgrx::pg_guard]
    unsafe extern "C-unwind" fn walker(node: *mut pg_sys::Node, context: *mut c_void) -> bool {
        // SAFETY: tags are checked before casts.
        unsafe {
            if node.is_null() {
                return false;
            }
            if is_a(node, NodeTag::T_Query) {
                return pg_sys::query_tree_walker(node.cast(), Some(walker), context, 0);
            }
            if is_a(node, NodeTag::T_FuncExpr)
                && is_marker((*(node as *mut pg_sys::FuncExpr)).funcid)
            {
                return true;
            }
            pg_sys::expression_tree_walker(node, Some(walker), context)
        }
    }
    // SAFETY: as the caller guarantees.
    unsafe {
        (*query).commandType == pg_sys::CmdType::CMD_SELECT
            && !(*query).hasModifyingCTE
            && pg_sys::query_tree_walker(query, Some(walker), std::ptr::null_mut(), 0)
            && super::installed()
    }
}

/// Whether an expression tree calls dp_fragment (a walker over plan expressions).
///
/// # Safety
/// `node` must be NULL or a valid expression tree.
pub unsafe fn calls_fragment_marker(node: *mut pg_sys::Node) -> bool {
    #[pgrx::pg_guard]
    unsafe extern "C-unwind" fn walker(node: *mut pg_sys::Node, context: *mut c_void) -> bool {
        // SAFETY: tags are checked before casts.
        unsafe {
            if node.is_null() {
                return false;
            }
            if is_a(node, NodeTag::T_FuncExpr)
                && is_marker((*(node as *mut pg_sys::FuncExpr)).funcid)
            {
                return true;
            }
            pg_sys::expression_tree_walker(node, Some(walker), context)
        }
    }
    // SAFETY: as the caller guarantees.
    unsafe { walker(node, std::ptr::null_mut()) }
}

/// Evaluates the parameters of the DP call `aggref` on the coordinator, and marks the
/// fragments that read its rows: its FILTER gains `AND dp_fragment(true)` (volatile, so
/// never folded away), which every fragment of the call evaluates, split or shipped.
///
/// # Safety
/// `aggref` must be an Aggref of a query being planned; `bound` NULL or the statement's
/// parameters.
pub unsafe fn fix_parameters(
    aggref: *mut pg_sys::Aggref,
    bound: pg_sys::ParamListInfo,
    marker: Oid,
) {
    // SAFETY: an Aggref's arguments are TargetEntries; its filter a boolean expression.
    unsafe {
        for entry in PgList::<pg_sys::TargetEntry>::from_pg((*aggref).args).iter_ptr() {
            let expression = (*entry).expr;
            if is_parameter(expression.cast()) {
                (*entry).expr = fixed(expression, bound);
            }
        }
        (*aggref).aggfilter = and(mark(marker), (*aggref).aggfilter);
    }
}

/// Marks the queries `levels` of a DP statement that call no DP aggregate themselves (a
/// subquery or sublink Citus may plan and send to the workers as a statement of its
/// own): each gains `AND dp_fragment(true)` in its WHERE, which leaves its rows, its
/// columns and its grouping as they were (Citus still pushes it down where it could).
///
/// # Safety
/// `levels` must be queries being planned.
pub unsafe fn mark_levels(levels: &[*mut pg_sys::Query], marker: Oid) {
    // SAFETY: a Query's jointree is a FromExpr whose quals are an expression or NULL.
    unsafe {
        // A query that writes is left as it is (Citus checks what it writes); a set
        // operation has no WHERE of its own (each branch is marked).
        for &level in levels.iter().filter(|&&level| {
            (*level).commandType == pg_sys::CmdType::CMD_SELECT
                && (*level).setOperations.is_null()
                && !(*level).jointree.is_null()
        }) {
            let jointree = (*level).jointree;
            (*jointree).quals = and(mark(marker), (*jointree).quals.cast()).cast();
        }
    }
}

/// `mark AND other` (`mark` alone when `other` is NULL).
///
/// # Safety
/// Both must be boolean expressions, `other` possibly NULL.
unsafe fn and(mark: *mut pg_sys::Expr, other: *mut pg_sys::Expr) -> *mut pg_sys::Expr {
    // SAFETY: as the caller guarantees.
    unsafe {
        if other.is_null() {
            return mark;
        }
        let both = pg_sys::lappend(
            pg_sys::lappend(std::ptr::null_mut(), other.cast()),
            mark.cast(),
        );
        pg_sys::makeBoolExpr(pg_sys::BoolExprType::AND_EXPR, both, -1).cast()
    }
}

/// `dp_fragment(true)`.
///
/// # Safety
/// A node constructor: call it where the planner's memory is current.
unsafe fn mark(marker: Oid) -> *mut pg_sys::Expr {
    // SAFETY: PostgreSQL's constructors.
    unsafe {
        let argument = pg_sys::makeBoolConst(true, false);
        pg_sys::makeFuncExpr(
            marker,
            pg_sys::BOOLOID,
            pg_sys::lappend(std::ptr::null_mut(), argument.cast()),
            pg_sys::InvalidOid,
            pg_sys::InvalidOid,
            pg_sys::CoercionForm::COERCE_EXPLICIT_CALL,
        )
        .cast()
    }
}

/// A parameter: the same on every row of every level (no column of any level, no
/// sublink, no executor parameter, nothing volatile).
///
/// # Safety
/// `node` must be a valid expression.
unsafe fn is_parameter(node: *mut pg_sys::Node) -> bool {
    #[pgrx::pg_guard]
    unsafe extern "C-unwind" fn reads_rows(node: *mut pg_sys::Node, context: *mut c_void) -> bool {
        // SAFETY: tags are checked before casts.
        unsafe {
            if node.is_null() {
                return false;
            }
            let rows = [
                NodeTag::T_Var,
                NodeTag::T_PlaceHolderVar,
                NodeTag::T_Aggref,
                NodeTag::T_WindowFunc,
                NodeTag::T_GroupingFunc,
                NodeTag::T_SubLink,
                NodeTag::T_SubPlan,
                NodeTag::T_AlternativeSubPlan,
            ];
            if rows.iter().any(|&tag| is_a(node, tag)) {
                return true;
            }
            if is_a(node, NodeTag::T_Param)
                && (*(node as *mut pg_sys::Param)).paramkind != pg_sys::ParamKind::PARAM_EXTERN
            {
                return true;
            }
            pg_sys::expression_tree_walker(node, Some(reads_rows), context)
        }
    }
    // SAFETY: as the caller guarantees.
    unsafe { !reads_rows(node, std::ptr::null_mut()) && !pg_sys::contain_volatile_functions(node) }
}

/// A parameter as a constant, evaluated now; a call of dp_unit_share keeps its call with
/// its arguments evaluated; one that reads a parameter the statement has no value for (a
/// generic plan, which Citus does not plan) is left as it is.
///
/// # Safety
/// `expression` must be a parameter ([`is_parameter`]).
unsafe fn fixed(expression: *mut pg_sys::Expr, bound: pg_sys::ParamListInfo) -> *mut pg_sys::Expr {
    // SAFETY: tags are checked before casts; evaluate_expr evaluates a planned expression
    // of constants in a memory context of its own and copies the result out.
    unsafe {
        if is_a(expression.cast(), NodeTag::T_Const) {
            return expression;
        }
        if charged_expression(expression) != expression {
            let call = pg_sys::copyObjectImpl(expression.cast()) as *mut pg_sys::FuncExpr;
            let mut arguments: *mut pg_sys::List = std::ptr::null_mut();
            for argument in PgList::<pg_sys::Expr>::from_pg((*call).args).iter_ptr() {
                arguments = pg_sys::lappend(arguments, fixed(argument, bound).cast());
            }
            (*call).args = arguments;
            return call.cast();
        }
        let Some(resolved) = resolve_parameters(expression, bound) else {
            return pg_sys::expression_planner(expression);
        };
        let planned = pg_sys::expression_planner(resolved);
        pg_sys::evaluate_expr(
            planned,
            pg_sys::exprType(expression.cast()),
            pg_sys::exprTypmod(expression.cast()),
            pg_sys::exprCollation(expression.cast()),
        )
    }
}

/// `expression` with each statement parameter replaced by its value; None if one has no
/// value.
///
/// # Safety
/// `expression` must be valid; `bound` NULL or the statement's parameters.
unsafe fn resolve_parameters(
    expression: *mut pg_sys::Expr,
    bound: pg_sys::ParamListInfo,
) -> Option<*mut pg_sys::Expr> {
    struct Resolve {
        bound: pg_sys::ParamListInfo,
        missing: bool,
    }
    #[pgrx::pg_guard]
    unsafe extern "C-unwind" fn mutator(
        node: *mut pg_sys::Node,
        context: *mut c_void,
    ) -> *mut pg_sys::Node {
        // SAFETY: the context is a Resolve; tags are checked before casts; a
        // ParamListInfo holds numParams entries, fetched through paramFetch if set.
        unsafe {
            if node.is_null() {
                return node;
            }
            let resolve = &mut *(context as *mut Resolve);
            if is_a(node, NodeTag::T_Param) {
                let param = node as *mut pg_sys::Param;
                let bound = resolve.bound;
                let id = (*param).paramid;
                if bound.is_null() || id < 1 || id > (*bound).numParams {
                    resolve.missing = true;
                    return node;
                }
                let mut workspace = std::mem::zeroed::<pg_sys::ParamExternData>();
                let data = match (*bound).paramFetch {
                    Some(fetch) => fetch(bound, id, false, &mut workspace),
                    None => (*bound).params.as_mut_ptr().add(id as usize - 1),
                };
                if data.is_null() || (*data).ptype != (*param).paramtype {
                    resolve.missing = true;
                    return node;
                }
                let mut length = 0i16;
                let mut by_value = false;
                pg_sys::get_typlenbyval((*param).paramtype, &mut length, &mut by_value);
                let value = if (*data).isnull || by_value {
                    (*data).value
                } else {
                    copy_datum((*data).value, length)
                };
                return pg_sys::makeConst(
                    (*param).paramtype,
                    (*param).paramtypmod,
                    (*param).paramcollid,
                    length as i32,
                    value,
                    (*data).isnull,
                    by_value,
                )
                .cast();
            }
            crate::extension::versions::mutate_children(node, mutator, context)
        }
    }
    let mut resolve = Resolve {
        bound,
        missing: false,
    };
    // SAFETY: as the caller guarantees; the mutator copies what it changes.
    let resolved = unsafe { mutator(expression.cast(), (&mut resolve as *mut Resolve).cast()) };
    (!resolve.missing).then_some(resolved.cast())
}

/// A by-reference value copied into the current memory context (the plan's).
///
/// # Safety
/// `value` must be a valid datum of a by-reference type of `length`.
unsafe fn copy_datum(value: pg_sys::Datum, length: i16) -> pg_sys::Datum {
    // SAFETY: a varlena (-1) is copied detoasted, a C string (-2) with its NUL, a
    // fixed-length value by its length.
    unsafe {
        let source = value.cast_mut_ptr::<std::ffi::c_char>();
        match length {
            -1 => pg_sys::Datum::from(pg_sys::pg_detoast_datum_copy(source.cast())),
            -2 => pg_sys::Datum::from(pg_sys::pstrdup(source)),
            _ => {
                let copy = pg_sys::palloc(length as usize);
                std::ptr::copy_nonoverlapping(
                    source.cast::<u8>(),
                    copy.cast::<u8>(),
                    length as usize,
                );
                pg_sys::Datum::from(copy)
            }
        }
    }
}

/// The identity on booleans, written by pg_exp_mech into DP statements over Citus tables
/// (`AND dp_fragment(true)` in each call's FILTER and in the WHERE of other levels): a
/// read-only plan that calls it belongs to a DP statement, and is not counted. VOLATILE:
/// never folded away. One fixed signature: Citus sends the call to the workers as text,
/// and an analyst's overload of a polymorphic one in a schema they may write would be
/// chosen there, and run with the rows.
#[pg_extern(volatile, parallel_safe)]
fn dp_fragment(mark: bool) -> bool {
    mark
}

pgrx::extension_sql!(
    r#"
COMMENT ON FUNCTION dp_fragment(boolean) IS
  'The identity. Written by pg_exp_mech into DP statements over Citus tables (in each call''s FILTER and in the WHERE of other query levels): a read-only plan that calls it is not counted in statistics where Citus is installed.';
"#,
    name = "dp_fragment_comment",
    requires = [dp_fragment]
);

/// A copy of `query` in which each call that the privacy-unit bounding wrote of a
/// polymorphic extended hash function of pg_catalog (`hashenumextended`,
/// `hash_array_extended`, ...: it hashes units and group keys with their type's own)
/// hashes the value's text instead
/// (`hashtextextended(value::text, seed)`). Citus sends the call to the workers as text,
/// unqualified, and there an analyst's exact-type overload in a schema of the search path
/// would be chosen over the polymorphic one, and run with every row; a cast to text and
/// `hashtextextended(text, bigint)` have no better match.
///
/// # Safety
/// `query` must be a valid Query.
pub unsafe fn fix_polymorphic_hashes(query: *mut pg_sys::Query) -> *mut pg_sys::Query {
    #[pgrx::pg_guard]
    unsafe extern "C-unwind" fn mutator(
        node: *mut pg_sys::Node,
        context: *mut c_void,
    ) -> *mut pg_sys::Node {
        // SAFETY: tags are checked before casts; nodes made with PostgreSQL's
        // constructors over copies of valid expressions.
        unsafe {
            if node.is_null() {
                return node;
            }
            if is_a(node, NodeTag::T_Query) {
                return crate::extension::versions::mutate_query(node.cast(), mutator, context)
                    .cast();
            }
            if is_a(node, NodeTag::T_FuncExpr) {
                let call = node as *mut pg_sys::FuncExpr;
                let arguments = PgList::<pg_sys::Expr>::from_pg((*call).args);
                // Only the calls the bounding wrote (no parse location): a statement's own
                // call keeps its meaning.
                if arguments.len() == 2
                    && (*call).location < 0
                    && is_polymorphic_hash((*call).funcid)
                {
                    let value = crate::extension::versions::mutate_children(
                        arguments.get_ptr(0).expect("two arguments").cast(),
                        mutator,
                        context,
                    );
                    let seed =
                        pg_sys::copyObjectImpl(arguments.get_ptr(1).expect("two arguments").cast());
                    let text = pg_sys::palloc0(std::mem::size_of::<pg_sys::CoerceViaIO>())
                        as *mut pg_sys::CoerceViaIO;
                    (*text).xpr.type_ = NodeTag::T_CoerceViaIO;
                    (*text).arg = value.cast();
                    (*text).resulttype = pg_sys::TEXTOID;
                    (*text).resultcollid = pg_sys::DEFAULT_COLLATION_OID;
                    (*text).coerceformat = pg_sys::CoercionForm::COERCE_EXPLICIT_CAST;
                    (*text).location = -1;
                    let both =
                        pg_sys::lappend(pg_sys::lappend(std::ptr::null_mut(), text.cast()), seed);
                    return pg_sys::makeFuncExpr(
                        text_hash(),
                        pg_sys::INT8OID,
                        both,
                        pg_sys::InvalidOid,
                        pg_sys::DEFAULT_COLLATION_OID,
                        pg_sys::CoercionForm::COERCE_EXPLICIT_CALL,
                    )
                    .cast();
                }
            }
            crate::extension::versions::mutate_children(node, mutator, context)
        }
    }
    // SAFETY: as the caller guarantees.
    unsafe { crate::extension::versions::mutate_query(query, mutator, std::ptr::null_mut()) }
}

/// Whether `function` is one of pg_catalog's extended hash functions of a polymorphic
/// argument.
fn is_polymorphic_hash(function: Oid) -> bool {
    // SAFETY: catalog lookups by oid; NULL is checked.
    unsafe {
        if pg_sys::get_func_namespace(function) != pg_sys::PG_CATALOG_NAMESPACE.into() {
            return false;
        }
        let name = pg_sys::get_func_name(function);
        if name.is_null() {
            return false;
        }
        let name = std::ffi::CStr::from_ptr(name).to_bytes();
        let hash = name.starts_with(b"hash") && name.ends_with(b"extended");
        hash && !super::combine::has_fixed_types(function)
    }
}

/// pg_catalog.hashtextextended(text, bigint).
fn text_hash() -> Oid {
    // SAFETY: a lookup by qualified name and exact argument types.
    unsafe {
        super::combine::catalog_function(c"hashtextextended", &[pg_sys::TEXTOID, pg_sys::INT8OID])
    }
}
