//! The oids of the functions a bounded plan calls (rewrite.rs; the functions are in
//! functions.rs), found in the extension's own schema, and what the metering hook
//! charges for a group's share of a parameter.

use crate::error::Error;
use pgrx::pg_sys::{self, NodeTag, Oid};
use pgrx::{is_a, PgList};
use std::cell::RefCell;
use std::ffi::CString;

/// The oids of the functions the bounded plan calls.
#[derive(Clone, Copy)]
pub(crate) struct Functions {
    /// dp_fragment, which marks the queries Citus sends to the workers for a DP
    /// statement (citus/fragments.rs).
    pub(crate) fragment: Oid,
    pub(super) share: Oid,
    pub(super) score: Oid,
    pub(super) numeric_score: Oid,
    pub(super) total: Oid,
    pub(super) group_order: Oid,
    pub(super) priority: Oid,
    pub(super) of_null: Oid,
    pub(crate) max_groups: Oid,
    pub(crate) max_values: Oid,
    pub(crate) max_items: Oid,
}

thread_local! {
    static FUNCTIONS: RefCell<Option<Functions>> = const { RefCell::new(None) };
}

/// Forgets the oids when functions change (ALTER EXTENSION ... SET SCHEMA, a reinstall).
pub fn install_function_cache() {
    // SAFETY: _PG_init runs once per process; the callback lives as long as the library.
    unsafe {
        pg_sys::CacheRegisterSyscacheCallback(
            pg_sys::SysCacheIdentifier::PROCOID as i32,
            Some(forget_functions),
            pg_sys::Datum::from(0usize),
        );
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn forget_functions(_argument: pg_sys::Datum, _cache: i32, _hash: u32) {
    FUNCTIONS.with(|functions| *functions.borrow_mut() = None);
}

/// Looks our functions up in the extension's own schema (never through search_path,
/// where an analyst's function of the same name could stand first).
pub(crate) fn functions() -> Functions {
    if let Some(known) = FUNCTIONS.with(|f| *f.borrow()) {
        return known;
    }
    // SAFETY: pg_extension scanned by oid under the catalog snapshot; its rows start
    // with the fixed columns of FormData_pg_extension.
    let schema: String = unsafe {
        let extension = pg_sys::get_extension_oid(c"pg_exp_mech".as_ptr(), true);
        let mut namespace = pg_sys::InvalidOid;
        crate::extension::catalog::scan(
            pg_sys::ExtensionRelationId.to_u32(),
            pg_sys::ExtensionOidIndexId,
            &[(pg_sys::Anum_pg_extension_oid as i16, extension)],
            |tuple, _| {
                namespace = (*(pg_sys::GETSTRUCT(tuple) as *const pg_sys::FormData_pg_extension))
                    .extnamespace;
            },
        );
        let name = pg_sys::get_namespace_name(namespace);
        if name.is_null() {
            crate::extension::raise(Error::UnitsUnavailable {
                reason: "the pg_exp_mech extension is not created in this database".into(),
            })
        }
        std::ffi::CStr::from_ptr(name)
            .to_string_lossy()
            .into_owned()
    };
    let find = |name: &str, arguments: &[Oid]| -> Oid {
        // SAFETY: a qualified name list built here; LookupFuncName raises if missing.
        unsafe {
            let schema = CString::new(schema.as_str()).expect("no NUL");
            let name = CString::new(name).expect("no NUL");
            let mut names = pg_sys::lappend(
                std::ptr::null_mut(),
                pg_sys::makeString(pg_sys::pstrdup(schema.as_ptr())).cast(),
            );
            names = pg_sys::lappend(
                names,
                pg_sys::makeString(pg_sys::pstrdup(name.as_ptr())).cast(),
            );
            pg_sys::LookupFuncName(names, arguments.len() as i32, arguments.as_ptr(), false)
        }
    };
    let known = Functions {
        fragment: find("dp_fragment", &[pg_sys::BOOLOID]),
        share: find("dp_unit_share", &[pg_sys::FLOAT8OID, pg_sys::INT8OID]),
        score: find("dp_unit_score", &[pg_sys::FLOAT8OID, pg_sys::FLOAT8OID]),
        numeric_score: find(
            "dp_unit_numeric_score",
            &[pg_sys::NUMERICOID, pg_sys::FLOAT8OID],
        ),
        total: find("dp_unit_total", &[pg_sys::FLOAT8OID, pg_sys::FLOAT8OID]),
        group_order: find("dp_unit_group_order", &[pg_sys::INT8OID, pg_sys::INT8OID]),
        priority: find("dp_unit_priority", &[]),
        of_null: find("dp_unit_of_null", &[]),
        max_groups: find("dp_max_groups_per_unit", &[]),
        max_values: find("dp_max_values_per_unit", &[]),
        max_items: find("dp_max_items_per_unit", &[]),
    };
    FUNCTIONS.with(|f| *f.borrow_mut() = Some(known));
    known
}

/// What the metering hook charges for a parameter: the statement's total when the plan
/// gives a group its share (`dp_unit_share(total, divisor)`), else the parameter itself.
///
/// # Safety
/// `expression` must be a valid expression of a plan.
pub unsafe fn charged_expression(expression: *mut pg_sys::Expr) -> *mut pg_sys::Expr {
    // SAFETY: nodes are cast after their tags are checked; a FuncExpr's args is a List.
    unsafe {
        if !expression.is_null() && is_a(expression.cast(), NodeTag::T_FuncExpr) {
            let call = expression as *mut pg_sys::FuncExpr;
            if is_share((*call).funcid) {
                if let Some(total) = PgList::<pg_sys::Expr>::from_pg((*call).args).get_ptr(0) {
                    return total;
                }
            }
        }
        expression
    }
}

/// Whether `function` is this extension's dp_unit_share (by name and membership, so that
/// no lookup by schema is needed while a plan starts).
fn is_share(function: Oid) -> bool {
    // SAFETY: catalog lookups by oid; NULL and InvalidOid are checked.
    unsafe {
        let name = pg_sys::get_func_name(function);
        if name.is_null() || std::ffi::CStr::from_ptr(name).to_bytes() != b"dp_unit_share" {
            return false;
        }
        let extension = pg_sys::get_extension_oid(c"pg_exp_mech".as_ptr(), true);
        extension != pg_sys::InvalidOid
            && pg_sys::getExtensionOfObject(pg_sys::ProcedureRelationId, function) == extension
    }
}
