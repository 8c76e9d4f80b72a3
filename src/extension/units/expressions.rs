//! Planner expressions the rewrite builds: calls, constants, bigint operators, the
//! unit's NULL replacement, hashes and rows, made with PostgreSQL's own constructors so
//! that the planner sees what it would have parsed.

use crate::extension::items::type_name;
use pgrx::pg_sys::{self, NodeTag, Oid};
use pgrx::PgBox;
use std::ffi::CString;

pub(super) unsafe fn copy(expression: *mut pg_sys::Expr) -> *mut pg_sys::Expr {
    // SAFETY: a valid node.
    unsafe { pg_sys::copyObjectImpl(expression.cast()).cast() }
}

pub(super) unsafe fn list<T>(items: &[*mut T]) -> *mut pg_sys::List {
    let mut list = std::ptr::null_mut();
    for &item in items {
        // SAFETY: appending node pointers to a List.
        list = unsafe { pg_sys::lappend(list, item.cast()) };
    }
    list
}

pub(super) unsafe fn call(
    function: Oid,
    result: Oid,
    arguments: &[*mut pg_sys::Expr],
) -> *mut pg_sys::Expr {
    // SAFETY: a FuncExpr over valid arguments.
    unsafe {
        pg_sys::makeFuncExpr(
            function,
            result,
            list(arguments),
            pg_sys::InvalidOid,
            pg_sys::InvalidOid,
            pg_sys::CoercionForm::COERCE_EXPLICIT_CALL,
        )
        .cast()
    }
}

/// A bigint constant.
///
/// # Safety
/// Call it in a backend, where it pallocs the node in the current memory context.
pub(crate) unsafe fn int8(value: i64) -> *mut pg_sys::Expr {
    // SAFETY: a by-value bigint constant.
    unsafe {
        pg_sys::makeConst(
            pg_sys::INT8OID,
            -1,
            pg_sys::InvalidOid,
            8,
            pg_sys::Datum::from(value),
            false,
            true,
        )
        .cast()
    }
}

/// A double precision constant.
///
/// # Safety
/// As [`int8`]'s.
pub(crate) unsafe fn float8(value: f64) -> *mut pg_sys::Expr {
    // SAFETY: a by-value double precision constant.
    unsafe {
        pg_sys::makeConst(
            pg_sys::FLOAT8OID,
            -1,
            pg_sys::InvalidOid,
            8,
            pg_sys::Datum::from(value.to_bits()),
            false,
            true,
        )
        .cast()
    }
}

/// `left operator right` over bigints.
unsafe fn operation(
    operator: &str,
    left: *mut pg_sys::Expr,
    right: *mut pg_sys::Expr,
    result: Oid,
) -> *mut pg_sys::Expr {
    // SAFETY: pg_catalog's bigint operators; OpernameGetOprid finds them by qualified name.
    unsafe {
        let schema = pg_sys::makeString(pg_sys::pstrdup(c"pg_catalog".as_ptr()));
        let name = CString::new(operator).expect("no NUL");
        let names = list(&[schema, pg_sys::makeString(pg_sys::pstrdup(name.as_ptr()))]);
        let operator = pg_sys::OpernameGetOprid(names, pg_sys::INT8OID, pg_sys::INT8OID);
        let expression = pg_sys::make_opclause(
            operator,
            result,
            false,
            left,
            right,
            pg_sys::InvalidOid,
            pg_sys::InvalidOid,
        );
        pg_sys::set_opfuncid(expression.cast());
        expression
    }
}

pub(super) unsafe fn compare(
    operator: &str,
    left: *mut pg_sys::Expr,
    right: *mut pg_sys::Expr,
) -> *mut pg_sys::Expr {
    // SAFETY: as operation's.
    unsafe { operation(operator, left, right, pg_sys::BOOLOID) }
}

pub(super) unsafe fn arithmetic(
    operator: &str,
    left: *mut pg_sys::Expr,
    right: *mut pg_sys::Expr,
) -> *mut pg_sys::Expr {
    // SAFETY: as operation's.
    unsafe { operation(operator, left, right, pg_sys::INT8OID) }
}

/// `CASE WHEN unit IS NULL THEN COALESCE(identity, of_null()) END`.
pub(super) unsafe fn when_null(
    unit: *mut pg_sys::Expr,
    of_null: Oid,
    identity: Option<*mut pg_sys::Expr>,
) -> *mut pg_sys::Expr {
    // SAFETY: nodes made with PostgreSQL's constructors over a valid expression.
    unsafe {
        let mut missing = PgBox::<pg_sys::NullTest>::alloc_node(NodeTag::T_NullTest);
        missing.arg = copy(unit);
        missing.nulltesttype = pg_sys::NullTestType::IS_NULL;
        missing.location = -1;
        let mut when = PgBox::<pg_sys::CaseWhen>::alloc_node(NodeTag::T_CaseWhen);
        when.expr = missing.into_pg().cast();
        let own = call(of_null, pg_sys::INT8OID, &[]);
        when.result = match identity {
            None => own,
            Some(identity) => {
                let mut coalesce =
                    PgBox::<pg_sys::CoalesceExpr>::alloc_node(NodeTag::T_CoalesceExpr);
                coalesce.coalescetype = pg_sys::INT8OID;
                coalesce.args = list(&[copy(identity), own]);
                coalesce.location = -1;
                coalesce.into_pg().cast()
            }
        };
        when.location = -1;
        let mut case = PgBox::<pg_sys::CaseExpr>::alloc_node(NodeTag::T_CaseExpr);
        case.casetype = pg_sys::INT8OID;
        case.args = list(&[when.into_pg()]);
        case.defresult = pg_sys::makeNullConst(pg_sys::INT8OID, -1, pg_sys::InvalidOid).cast();
        case.location = -1;
        case.into_pg().cast()
    }
}

/// `expression`'s extended hash (seed 0) by its type's own function; NULL when the type
/// has none.
pub(super) unsafe fn hashed(expression: *mut pg_sys::Expr) -> *mut pg_sys::Expr {
    // SAFETY: the type cache of a valid expression's type; a FuncExpr over a copy of it.
    unsafe {
        let cache = pg_sys::lookup_type_cache(
            pg_sys::exprType(expression.cast()),
            pg_sys::TYPECACHE_HASH_EXTENDED_PROC as i32,
        );
        if (*cache).hash_extended_proc == pg_sys::InvalidOid {
            return std::ptr::null_mut();
        }
        pg_sys::makeFuncExpr(
            (*cache).hash_extended_proc,
            pg_sys::INT8OID,
            list(&[copy(expression), int8(0)]),
            pg_sys::InvalidOid,
            pg_sys::exprCollation(expression.cast()),
            pg_sys::CoercionForm::COERCE_EXPLICIT_CALL,
        )
        .cast()
    }
}

/// Whether `expression`'s type has a default ordering (to break ties of hashes; a
/// collision of 64-bit hashes is all that would need it).
pub(super) unsafe fn has_ordering(expression: *mut pg_sys::Expr) -> bool {
    // SAFETY: the type cache of a valid expression's type.
    unsafe {
        let cache = pg_sys::lookup_type_cache(
            pg_sys::exprType(expression.cast()),
            pg_sys::TYPECACHE_LT_OPR as i32,
        );
        (*cache).lt_opr != pg_sys::InvalidOid
    }
}

/// Why a unit or key without a hash function is refused.
pub(super) unsafe fn unhashable<'a>(
    expressions: impl Iterator<Item = &'a *mut pg_sys::Expr>,
    purpose: &str,
) -> String {
    // SAFETY: valid expressions.
    let type_ = unsafe {
        expressions
            .copied()
            .find(|&expression| hashed(expression).is_null())
            .map_or(pg_sys::InvalidOid, |expression| {
                pg_sys::exprType(expression.cast())
            })
    };
    format!(
        "with a unit, group key or item of type {}, which has no hash function {purpose}",
        type_name(type_)
    )
}

/// `expression` under `collation` (a RelabelType, as COLLATE is planned), unless it
/// already has it or none is given.
pub(super) unsafe fn collated(expression: *mut pg_sys::Expr, collation: Oid) -> *mut pg_sys::Expr {
    // SAFETY: a valid expression; the node made with PostgreSQL's constructor.
    unsafe {
        let node = expression.cast();
        if collation == pg_sys::InvalidOid || pg_sys::exprCollation(node) == collation {
            return expression;
        }
        pg_sys::makeRelabelType(
            expression,
            pg_sys::exprType(node),
            pg_sys::exprTypmod(node),
            collation,
            pg_sys::CoercionForm::COERCE_IMPLICIT_CAST,
        )
        .cast()
    }
}

/// `ROW(expressions...)`, an anonymous record.
pub(super) unsafe fn row(expressions: &[*mut pg_sys::Expr]) -> *mut pg_sys::Expr {
    // SAFETY: a RowExpr of valid expressions.
    unsafe {
        let mut row = PgBox::<pg_sys::RowExpr>::alloc_node(NodeTag::T_RowExpr);
        row.args = list(expressions);
        row.row_typeid = pg_sys::RECORDOID;
        row.row_format = pg_sys::CoercionForm::COERCE_IMPLICIT_CAST;
        row.location = -1;
        row.into_pg().cast()
    }
}
