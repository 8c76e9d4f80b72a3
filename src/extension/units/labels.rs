//! The declaration: `SECURITY LABEL FOR pg_exp_mech ON COLUMN t.c IS 'privacy_unit'`.
//!
//! A security label lives in the catalog (pg_seclabel): pg_dump and pg_restore keep it,
//! standbys receive it, and only the table's owner may set it (PostgreSQL checks that
//! before the provider's hook runs). A partition is protected by its partitioned
//! ancestors' label, the column found by name.

use crate::error::Error;
use crate::extension::raise;
use pgrx::pg_sys::{self, Oid};
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, CStr};

/// The one label the provider accepts.
pub const PRIVACY_UNIT: &str = "privacy_unit";

/// A table's privacy unit: the column that holds the person.
#[derive(Debug, Clone)]
pub struct Unit {
    pub table: String,
    pub column: String,
    pub attribute: i16,
}

thread_local! {
    /// The unit of each table this process has planned, by oid (None: no unit). Cleared
    /// by every relation cache invalidation, which a label change sends (below).
    static UNITS: RefCell<HashMap<Oid, Option<Unit>>> = RefCell::new(HashMap::new());
}

/// Registers the label provider and the cache's invalidation; called from _PG_init.
pub fn install_labels() {
    // SAFETY: _PG_init runs once per process, before any statement; the hook and the
    // callback are functions that live as long as the library.
    unsafe {
        pg_sys::register_label_provider(c"pg_exp_mech".as_ptr(), Some(check_label));
        pg_sys::CacheRegisterRelcacheCallback(Some(forget_units), pg_sys::Datum::from(0usize));
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn forget_units(_argument: pg_sys::Datum, _relation: Oid) {
    UNITS.with(|units| units.borrow_mut().clear());
}

/// The provider's hook: only 'privacy_unit' (or NULL, to remove it), only on a column of
/// a table, at most one column per table. Invalidates every cached plan over tables, so
/// that a prepared statement does not keep the semantics of before the change.
#[pg_guard]
unsafe extern "C-unwind" fn check_label(
    object: *const pg_sys::ObjectAddress,
    label: *const c_char,
) {
    // SAFETY: PostgreSQL passes a valid ObjectAddress and a NUL-terminated label or NULL.
    let (class, relation, column, label) = unsafe {
        let label =
            (!label.is_null()).then(|| CStr::from_ptr(label).to_string_lossy().into_owned());
        (
            (*object).classId,
            (*object).objectId,
            (*object).objectSubId,
            label,
        )
    };
    let invalid = |reason: String| raise(Error::InvalidLabel { reason });
    if class != pg_sys::RelationRelationId || column <= 0 {
        invalid("pg_exp_mech labels columns only: SECURITY LABEL FOR pg_exp_mech ON COLUMN table.column IS 'privacy_unit'".into());
    }
    // SAFETY: catalog lookups of an existing relation (PostgreSQL resolved it).
    let kind = unsafe { pg_sys::get_rel_relkind(relation) } as u8;
    if !matches!(kind, b'r' | b'p' | b'f') {
        invalid("a privacy unit is declared on a column of a table (a view's rows are protected through its tables)".into());
    }
    if let Some(label) = &label {
        if label != PRIVACY_UNIT {
            invalid(format!(
                "pg_exp_mech knows one label, 'privacy_unit', not '{label}'"
            ));
        }
        let others: Option<String> = select_one(
            "SELECT string_agg(quote_ident(a.attname), ', ') FROM pg_catalog.pg_seclabel s
               JOIN pg_catalog.pg_attribute a ON a.attrelid = s.objoid AND a.attnum = s.objsubid
              WHERE s.provider = 'pg_exp_mech' AND s.classoid = 'pg_catalog.pg_class'::regclass
                AND s.objoid = $1 AND s.objsubid <> $2",
            &[relation.into(), column.into()],
        );
        if let Some(others) = others {
            invalid(format!("this table's privacy unit is already column {others}: remove that label first (IS NULL)"));
        }
    }
    // SAFETY: queues a relation cache invalidation for every backend, sent at commit;
    // the plan cache re-plans every plan over any relation when it arrives.
    unsafe { pg_sys::CacheInvalidateRelcacheAll() };
}

/// The privacy unit of table `relation`, its own or its ancestors' (partitioned tables,
/// inheritance parents).
pub fn unit_of(relation: Oid) -> Option<Unit> {
    if let Some(known) = UNITS.with(|units| units.borrow().get(&relation).cloned()) {
        return known;
    }
    let unit = look_up(relation);
    UNITS.with(|units| units.borrow_mut().insert(relation, unit.clone()));
    unit
}

fn look_up(relation: Oid) -> Option<Unit> {
    let row = with_snapshot(|| {
        Spi::connect(|client| {
            client
                .select(
        "WITH RECURSIVE ancestors(relid) AS (
             SELECT $1::pg_catalog.oid
             UNION
             SELECT i.inhparent FROM ancestors a
               JOIN pg_catalog.pg_inherits i ON i.inhrelid = a.relid)
         SELECT pg_catalog.format('%s', $1::pg_catalog.regclass), mine.attname::text, mine.attnum
           FROM ancestors a
           JOIN pg_catalog.pg_seclabel s ON s.objoid = a.relid AND s.provider = 'pg_exp_mech'
                AND s.classoid = 'pg_catalog.pg_class'::pg_catalog.regclass AND s.objsubid > 0
           JOIN pg_catalog.pg_attribute labelled ON labelled.attrelid = a.relid AND labelled.attnum = s.objsubid
           JOIN pg_catalog.pg_attribute mine ON mine.attrelid = $1 AND mine.attname = labelled.attname
                AND NOT mine.attisdropped
          LIMIT 1",
                    Some(1),
                    &[relation.into()],
                )?
                .first()
                .get_three::<String, String, i16>()
        })
        .ok()
    });
    match row {
        Some((Some(table), Some(column), Some(attribute))) => Some(Unit {
            table,
            column,
            attribute,
        }),
        _ => None,
    }
}

/// Whether any privacy unit is declared in this database.
pub fn any_declared() -> bool {
    select_one::<bool>(
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_seclabel WHERE provider = 'pg_exp_mech')",
        &[],
    )
    .unwrap_or(false)
}

/// The first column of the first row of a read-only catalog query.
pub fn select_one<T: pgrx::FromDatum + pgrx::IntoDatum>(
    query: &str,
    arguments: &[pgrx::datum::DatumWithOid],
) -> Option<T> {
    with_snapshot(|| {
        Spi::connect(|client| {
            client
                .select(query, Some(1), arguments)?
                .first()
                .get_one::<T>()
        })
        .ok()
        .flatten()
    })
}

/// Runs `f` with an active snapshot (a read-only SPI query needs one; planning a cached
/// plan again may happen without).
fn with_snapshot<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: a transaction is open (planning or a utility command runs in one); the
    // snapshot pushed here is popped before returning, also on error (the transaction's
    // abort pops it).
    unsafe {
        if pg_sys::ActiveSnapshotSet() {
            return f();
        }
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
        let result = f();
        pg_sys::PopActiveSnapshot();
        result
    }
}

pgrx::extension_sql!(
    r#"
CREATE VIEW dp_privacy_units AS
SELECT s.objoid::pg_catalog.regclass AS "table",
       a.attname AS "column",
       s.label,
       ARRAY(SELECT p.relid::pg_catalog.regclass
               FROM pg_catalog.pg_partition_tree(s.objoid::pg_catalog.regclass) p
              WHERE p.relid <> s.objoid ORDER BY p.level, p.relid::pg_catalog.regclass::text) AS partitions
  FROM pg_catalog.pg_seclabel s
  JOIN pg_catalog.pg_attribute a ON a.attrelid = s.objoid AND a.attnum = s.objsubid
 WHERE s.provider = 'pg_exp_mech' AND s.classoid = 'pg_catalog.pg_class'::pg_catalog.regclass;
COMMENT ON VIEW dp_privacy_units IS
  'The declared privacy units: each table whose rows belong to a person, the column that names the person, and the partitions that inherit it. Declare one with SECURITY LABEL FOR pg_exp_mech ON COLUMN t.c IS ''privacy_unit''.';
GRANT SELECT ON dp_privacy_units TO PUBLIC;
"#,
    name = "privacy_units_view",
);
