//! Which functions are this extension's aggregates: found by name (and, for the quantile
//! overloads, by the type of their first argument) among those the extension owns, and
//! remembered by oid until a function is created, changed or dropped.

use crate::extension::forms::{Aggregate, Family, ValueType, AGGREGATES};
use pgrx::pg_sys::{self, Oid};
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CStr;

thread_local! {
    /// Which functions are this extension's aggregates, by oid.
    static IDENTITIES: RefCell<HashMap<Oid, Option<&'static Aggregate>>> =
        RefCell::new(HashMap::new());
}

/// A function was created, changed or dropped: forget which oids are ours.
#[pg_guard]
pub(super) unsafe extern "C-unwind" fn forget_identities(
    _argument: pg_sys::Datum,
    _cache: i32,
    _hash: u32,
) {
    IDENTITIES.with(|identities| identities.borrow_mut().clear());
}

/// The aggregate of this extension that `function` is, if it is one.
pub fn dp_aggregate(function: Oid) -> Option<&'static Aggregate> {
    if let Some(known) = IDENTITIES.with(|identities| identities.borrow().get(&function).copied()) {
        return known;
    }
    // SAFETY: catalog lookups by oid; a missing function or extension gives NULL or
    // InvalidOid, which are checked.
    let identity = unsafe {
        let name = pg_sys::get_func_name(function);
        let aggregate = if name.is_null() {
            None
        } else {
            let name = CStr::from_ptr(name).to_bytes();
            // Quantile aggregates are overloaded on their value type (float8, smallint,
            // ...): the first argument's type tells them apart, looked up once.
            let mut value_type = None;
            AGGREGATES.iter().find(|a| {
                a.name.as_bytes() == name
                    && match a.family {
                        Family::Quantile(v) => {
                            type_oid(v)
                                == *value_type.get_or_insert_with(|| first_argument_type(function))
                        }
                        _ => true,
                    }
            })
        };
        aggregate.filter(|_| {
            let extension = pg_sys::get_extension_oid(c"pg_exp_mech".as_ptr(), true);
            extension != pg_sys::InvalidOid
                && pg_sys::getExtensionOfObject(pg_sys::ProcedureRelationId, function) == extension
        })
    };
    IDENTITIES.with(|identities| identities.borrow_mut().insert(function, identity));
    identity
}

/// The catalog's oid of a quantile aggregate's value type.
fn type_oid(value: ValueType) -> Oid {
    match value {
        ValueType::Float => pg_sys::FLOAT8OID,
        ValueType::Smallint => pg_sys::INT2OID,
        ValueType::Integer => pg_sys::INT4OID,
        ValueType::Bigint => pg_sys::INT8OID,
        ValueType::Numeric => pg_sys::NUMERICOID,
    }
}

/// The type of a function's first argument (InvalidOid if it has none).
///
/// # Safety
/// A catalog lookup: call it inside a transaction.
unsafe fn first_argument_type(function: Oid) -> Oid {
    let mut types: *mut Oid = std::ptr::null_mut();
    let mut count = 0;
    // SAFETY: a syscache lookup of an existing function (the caller found its name);
    // it pallocs the array of `count` argument types.
    unsafe {
        pg_sys::get_func_signature(function, &mut types, &mut count);
        if count > 0 && !types.is_null() {
            *types
        } else {
            pg_sys::InvalidOid
        }
    }
}
