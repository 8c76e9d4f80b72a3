//! The declaration: `SECURITY LABEL FOR pg_exp_mech ON COLUMN t.c IS 'privacy_unit'`, or,
//! for a table whose rows reach the person through a foreign key,
//! `... ON COLUMN order_items.order_id IS 'references_privacy_unit'` (keys.rs follows it).
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

/// The label of the column that holds the person.
pub const PRIVACY_UNIT: &str = "privacy_unit";
/// The label of a single-column foreign key to a table with a privacy unit.
pub const REFERENCES_PRIVACY_UNIT: &str = "references_privacy_unit";

/// A table's privacy unit: the column that holds the person (or, `by_reference`, the
/// foreign key column whose referenced row holds it).
#[derive(Debug, Clone)]
pub struct Unit {
    pub table: String,
    pub column: String,
    pub attribute: i16,
    pub by_reference: bool,
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
    DECLARED.with(|d| d.set(None));
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
    if class == pg_sys::ProcedureRelationId {
        // Vouching for a function lets it into DP queries over people: a superuser's word,
        // never a function owner's (an analyst could vouch for a function that reads).
        // SAFETY: reads the current user's catalog entry.
        if !unsafe { pg_sys::superuser() } {
            raise(Error::InvalidLabel {
                reason: "only a superuser may declare that a function reads no tables".into(),
            });
        }
        if let Some(label) = &label {
            if label != super::functions_called::READS_NO_TABLES {
                invalid(format!(
                    "on a function, pg_exp_mech knows one label, 'reads_no_tables', not '{label}'"
                ));
            }
        }
        // SAFETY: as below.
        unsafe { pg_sys::CacheInvalidateRelcacheAll() };
        return;
    }
    if class != pg_sys::RelationRelationId || column <= 0 {
        invalid("pg_exp_mech labels columns only: SECURITY LABEL FOR pg_exp_mech ON COLUMN table.column IS 'privacy_unit'".into());
    }
    // SAFETY: catalog lookups of an existing relation (PostgreSQL resolved it).
    let kind = unsafe { pg_sys::get_rel_relkind(relation) } as u8;
    // A materialized view's rows are a copy, no longer its tables' (red team,
    // 2026-11-27: one over a labelled table answered per row): it is labelled as a table.
    if !matches!(kind, b'r' | b'p' | b'f' | b'm') {
        invalid("a privacy unit is declared on a column of a table or materialized view (a view's rows are protected through its tables)".into());
    }
    if let Some(label) = &label {
        if label != PRIVACY_UNIT && label != REFERENCES_PRIVACY_UNIT {
            invalid(format!(
                "pg_exp_mech knows the column labels 'privacy_unit' and 'references_privacy_unit', not '{label}'"
            ));
        }
        // The plan sorts and hashes by the unit: a type without both is refused now,
        // not by an error of the planner later. (A reference's foreign key is checked
        // when a query reads it: pg_restore adds foreign keys after the labels.)
        // SAFETY: a column of an existing relation; the type cache entry lives on.
        let suitable = label == REFERENCES_PRIVACY_UNIT
            || unsafe {
                let type_ = pg_sys::get_atttype(relation, column as i16);
                let cache = pg_sys::lookup_type_cache(
                    type_,
                    (pg_sys::TYPECACHE_LT_OPR | pg_sys::TYPECACHE_HASH_EXTENDED_PROC) as i32,
                );
                (*cache).lt_opr != pg_sys::InvalidOid
                    && (*cache).hash_extended_proc != pg_sys::InvalidOid
            };
        if !suitable {
            invalid("a privacy unit column needs a type with an ordering and a hash function (such as integer, bigint, text or uuid)".into());
        }
        // SAFETY: a catalog scan inside the command's transaction.
        let others: Vec<String> = unsafe { column_labels(relation) }
            .into_iter()
            .filter(|&(attribute, _)| i32::from(attribute) != column)
            // SAFETY: a column of an existing relation.
            .map(|(attribute, _)| unsafe {
                CStr::from_ptr(pg_sys::get_attname(relation, attribute, false))
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        let others = (!others.is_empty()).then(|| others.join(", "));
        if let Some(others) = others {
            invalid(format!("this table's privacy unit is already column {others}: remove that label first (IS NULL)"));
        }
        // One unit column name for a whole partition or inheritance tree: a parent reads
        // its children's rows by the name it finds first.
        // SAFETY: a column of an existing relation; catalog scans in the transaction.
        let (name, tree) = unsafe {
            let name = CStr::from_ptr(pg_sys::get_attname(relation, column as i16, false))
                .to_string_lossy()
                .into_owned();
            (name, unit_columns_in_tree(relation))
        };
        if let Some(other) = tree.iter().find(|&other| *other != name) {
            invalid(format!("a table of this table's partition or inheritance tree has privacy unit column {other}: one tree has one unit column name"));
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

/// The unit of `relation` from the catalog: its own label, else the nearest ancestor's
/// (a partition or inheritance child is protected by its parent's), else a descendant's
/// (a parent whose partition is labelled reads that partition's people): the column of
/// `relation` with the labelled column's name.
fn look_up(relation: Oid) -> Option<Unit> {
    // SAFETY: catalog scans under the catalog snapshot (never the transaction's, which a
    // REPEATABLE READ transaction would keep from before a label was added).
    unsafe {
        let mut seen = vec![relation];
        let mut unit = nearest_labelled(relation, Direction::Parents, &mut seen, true)
            .or_else(|| nearest_labelled(relation, Direction::Children, &mut seen, false))?;
        // Tables labelled on differently named columns in one tree (labelled before they
        // were attached): one unit column would stand for all, the wrong one for some.
        if unit_columns_in_tree(relation).len() > 1 {
            unit.attribute = DISAGREEING_TREE;
        }
        Some(unit)
    }
}

/// The attribute of a [`Unit`] read through a partition or inheritance tree whose tables
/// label differently named columns: refused by the planner hook.
pub const DISAGREEING_TREE: i16 = -1;

/// The names of the columns labelled as units in the partition or inheritance tree of
/// `relation` (its ancestors, its descendants, theirs), each once.
///
/// # Safety
/// A transaction must be open.
unsafe fn unit_columns_in_tree(relation: Oid) -> Vec<String> {
    let mut tree = vec![relation];
    let mut names: Vec<String> = Vec::new();
    let mut i = 0;
    // SAFETY: catalog scans of existing relations, as the caller guarantees.
    unsafe {
        while i < tree.len() {
            let current = tree[i];
            if let Some(unit) = unit_named_by(current, current) {
                if !names.contains(&unit.column) {
                    names.push(unit.column);
                }
            }
            for direction in [Direction::Parents, Direction::Children] {
                for next in inheritance(current, direction) {
                    if !tree.contains(&next) {
                        tree.push(next);
                    }
                }
            }
            i += 1;
        }
    }
    names
}

/// Breadth first from `relation` (itself included when `itself`), the first relation
/// whose label names a unit, as a column of `relation`.
///
/// # Safety
/// A transaction must be open.
unsafe fn nearest_labelled(
    relation: Oid,
    direction: Direction,
    seen: &mut Vec<Oid>,
    itself: bool,
) -> Option<Unit> {
    // SAFETY: as the caller guarantees.
    unsafe {
        let mut queue = if itself {
            vec![relation]
        } else {
            inheritance(relation, direction)
        };
        let mut i = 0;
        while i < queue.len() {
            let current = queue[i];
            if let Some(unit) = unit_named_by(current, relation) {
                return Some(unit);
            }
            for next in inheritance(current, direction) {
                if !seen.contains(&next) {
                    seen.push(next);
                    queue.push(next);
                }
            }
            i += 1;
        }
        None
    }
}

/// The unit that `labelled`'s label names, as a column of `relation` (found by name).
///
/// # Safety
/// A transaction must be open.
unsafe fn unit_named_by(labelled: Oid, relation: Oid) -> Option<Unit> {
    // SAFETY: catalog lookups of existing relations and columns.
    unsafe {
        let (attribute, label) = column_labels(labelled)
            .into_iter()
            .filter(|(_, label)| label == PRIVACY_UNIT || label == REFERENCES_PRIVACY_UNIT)
            .min()?;
        let name = pg_sys::get_attname(labelled, attribute, true);
        if name.is_null() {
            return None;
        }
        // A column the relation lacks (a child's own column, read through its parent):
        // attribute 0, which the planner hook refuses to follow.
        let mine = pg_sys::get_attnum(relation, name).max(0);
        Some(Unit {
            table: relation_name(relation),
            column: CStr::from_ptr(name).to_string_lossy().into_owned(),
            attribute: mine,
            by_reference: label == REFERENCES_PRIVACY_UNIT,
        })
    }
}

/// A relation's name as a query would write it (qualified where the search path needs).
fn relation_name(relation: Oid) -> String {
    // SAFETY: a catalog lookup; the result is a palloc'd C string.
    unsafe {
        let name = pg_sys::get_rel_name(relation);
        if name.is_null() {
            return relation.to_u32().to_string();
        }
        CStr::from_ptr(name).to_string_lossy().into_owned()
    }
}

/// pg_inherits, which pgrx does not bind: its oids and the leading columns of its rows.
const INHERITS_RELATION: u32 = 2611;
const INHERITS_RELID_SEQNO_INDEX: u32 = 2680;
const INHERITS_PARENT_INDEX: u32 = 2187;
#[repr(C)]
struct InheritsRow {
    inhrelid: Oid,
    inhparent: Oid,
}

#[derive(Clone, Copy)]
enum Direction {
    Parents,
    Children,
}

/// The direct parents or children of `relation` (partitions and inheritance).
///
/// # Safety
/// A transaction must be open.
unsafe fn inheritance(relation: Oid, direction: Direction) -> Vec<Oid> {
    let (index, column) = match direction {
        Direction::Parents => (INHERITS_RELID_SEQNO_INDEX, 1),
        Direction::Children => (INHERITS_PARENT_INDEX, 2),
    };
    let mut found = Vec::new();
    // SAFETY: an index scan of pg_inherits under the catalog snapshot; each row starts
    // with inhrelid and inhparent (catalog/pg_inherits.h).
    unsafe {
        crate::extension::catalog::scan(
            INHERITS_RELATION,
            index,
            &[(column, relation)],
            |tuple, _| {
                let row = pg_sys::GETSTRUCT(tuple) as *const InheritsRow;
                found.push(match direction {
                    Direction::Parents => (*row).inhparent,
                    Direction::Children => (*row).inhrelid,
                });
            },
        );
    }
    found
}

/// Whether `relation` has inheritance children or partitions.
pub fn has_children(relation: Oid) -> bool {
    // SAFETY: a catalog scan; called while a query is planned.
    !unsafe { inheritance(relation, Direction::Children) }.is_empty()
}

/// pg_exp_mech's labels of `relation`'s columns: (column number, label).
///
/// # Safety
/// A transaction must be open.
unsafe fn column_labels(relation: Oid) -> Vec<(i16, String)> {
    // SAFETY: as the caller guarantees.
    unsafe { labels_of(pg_sys::RelationRelationId, relation) }
        .into_iter()
        .filter(|&(column, _)| column > 0)
        .map(|(column, label)| (column as i16, label))
        .collect()
}

/// pg_exp_mech's labels of a function (on the function itself).
pub fn function_labels(function: Oid) -> Vec<String> {
    // SAFETY: a catalog scan; functions are looked up while a query is planned.
    unsafe { labels_of(pg_sys::ProcedureRelationId, function) }
        .into_iter()
        .filter(|&(column, _)| column == 0)
        .map(|(_, label)| label)
        .collect()
}

/// pg_exp_mech's labels of an object of catalog `class`: (sub-object, label).
///
/// # Safety
/// A transaction must be open.
unsafe fn labels_of(class: Oid, object: Oid) -> Vec<(i32, String)> {
    let mut labels = Vec::new();
    // SAFETY: an index scan of pg_seclabel under the catalog snapshot; provider and
    // label are text columns, never NULL.
    unsafe {
        crate::extension::catalog::scan(
            pg_sys::SecLabelRelationId.to_u32(),
            pg_sys::SecLabelObjectIndexId,
            &[
                (pg_sys::Anum_pg_seclabel_objoid as i16, object),
                (pg_sys::Anum_pg_seclabel_classoid as i16, class),
            ],
            |tuple, descriptor| {
                let row = pg_sys::GETSTRUCT(tuple) as *const pg_sys::FormData_pg_seclabel;
                let text = |column: u32| text_attribute(tuple, descriptor, column);
                if text(pg_sys::Anum_pg_seclabel_provider) == "pg_exp_mech" {
                    labels.push(((*row).objsubid, text(pg_sys::Anum_pg_seclabel_label)));
                }
            },
        );
    }
    labels
}

/// A text column of a catalog row ("" when NULL).
///
/// # Safety
/// `tuple` must be a row described by `descriptor`, whose column `column` is text.
unsafe fn text_attribute(
    tuple: pg_sys::HeapTuple,
    descriptor: pg_sys::TupleDesc,
    column: u32,
) -> String {
    // SAFETY: as the caller guarantees; text_to_cstring pallocs a copy.
    unsafe {
        let mut null = false;
        let datum = pg_sys::heap_getattr(tuple, column as i32, descriptor, &mut null);
        if null {
            return String::new();
        }
        let text = pg_sys::pg_detoast_datum_packed(datum.cast_mut_ptr());
        CStr::from_ptr(pg_sys::text_to_cstring(text.cast()))
            .to_string_lossy()
            .into_owned()
    }
}

thread_local! {
    /// Whether any privacy unit is declared in this database; cleared with UNITS.
    static DECLARED: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
}

/// pg_seclabel's leading columns (catalog/pg_seclabel.h).
#[repr(C)]
struct SecLabelRow {
    objoid: Oid,
    classoid: Oid,
}

/// Whether any privacy unit is declared in this database (another session's temporary
/// tables aside).
pub fn any_declared() -> bool {
    if let Some(known) = DECLARED.with(|d| d.get()) {
        return known;
    }
    let mut declared = false;
    // SAFETY: a heap scan of pg_seclabel (no index on the provider) under the catalog
    // snapshot.
    unsafe {
        crate::extension::catalog::scan(
            pg_sys::SecLabelRelationId.to_u32(),
            0,
            &[],
            |tuple, descriptor| {
                if declared
                    || text_attribute(tuple, descriptor, pg_sys::Anum_pg_seclabel_provider)
                        != "pg_exp_mech"
                {
                    return;
                }
                // Another session's temporary table: its label would switch on the
                // checks of this session's DP queries, which cannot read its rows (red
                // team, 2026-11-27: any role may create and label one).
                let row = pg_sys::GETSTRUCT(tuple) as *const SecLabelRow;
                let namespace = if (*row).classoid == pg_sys::RelationRelationId {
                    pg_sys::get_rel_namespace((*row).objoid)
                } else {
                    pg_sys::InvalidOid
                };
                declared = !pg_sys::isAnyTempNamespace(namespace)
                    || pg_sys::isTempOrTempToastNamespace(namespace);
            },
        );
    }
    DECLARED.with(|d| d.set(Some(declared)));
    declared
}

pgrx::extension_sql!(
    r#"
CREATE VIEW dp_privacy_units AS
SELECT s.objoid::pg_catalog.regclass AS "table",
       a.attname AS "column",
       s.label,
       (SELECT c.confrelid::pg_catalog.regclass FROM pg_catalog.pg_constraint c
         WHERE c.conrelid = s.objoid AND c.contype = 'f' AND c.conkey = ARRAY[s.objsubid]::pg_catalog.int2[]
         ORDER BY c.oid LIMIT 1) AS "references",
       ARRAY(SELECT p.relid::pg_catalog.regclass
               FROM pg_catalog.pg_partition_tree(s.objoid::pg_catalog.regclass) p
              WHERE p.relid <> s.objoid ORDER BY p.level, p.relid::pg_catalog.regclass::text) AS partitions
  FROM pg_catalog.pg_seclabel s
  JOIN pg_catalog.pg_attribute a ON a.attrelid = s.objoid AND a.attnum = s.objsubid
 WHERE s.provider = 'pg_exp_mech' AND s.classoid = 'pg_catalog.pg_class'::pg_catalog.regclass;
COMMENT ON VIEW dp_privacy_units IS
  'The declared privacy units: each table whose rows belong to a person, the column that names the person (label privacy_unit) or the foreign key column whose referenced row does (label references_privacy_unit, and the table it references), and the partitions that inherit it. Declare one with SECURITY LABEL FOR pg_exp_mech ON COLUMN t.c IS ''privacy_unit''.';
GRANT SELECT ON dp_privacy_units TO PUBLIC;
"#,
    name = "privacy_units_view",
);
