//! Units found along foreign keys: a table whose column is labelled
//! 'references_privacy_unit' (order_items.order_id) has the unit of the row its
//! single-column foreign key references (orders, whose customer_id is the unit, or which
//! itself references such a table).
//!
//! Each row of the referencing table is joined, inside the level, to the row it
//! references: the range-table entry `order_items` becomes `(order_items JOIN orders ON
//! orders.id = order_items.order_id)` in the join tree, and the unit is
//! `orders.customer_id`. The referenced table is read for the unit only (no privilege on
//! it is needed, and nothing of it reaches the answer). A row whose key is NULL, or
//! names no row (a foreign key NOT VALID), belongs to no person and is left out: a
//! transformation of that row alone. Neighbours differ by one unit's rows in every
//! protected table: its orders and the order_items that reference them.

use super::follow::{refusal, Source};
use super::labels::{unit_of, Unit};
use crate::error::Error;
use pgrx::pg_sys::{self, NodeTag, Oid};
use pgrx::{is_a, PgBox, PgList};

/// How many references deep a unit is followed (order_item_notes → order_items →
/// orders): beyond, a cycle of declarations.
const MAX_DEPTH: usize = 8;

/// The unit of range-table entry `rti` (table `relation`, declared by `unit`) as an
/// expression of `query`'s rows, joining the referenced tables into the level.
///
/// # Safety
/// `query` must be a valid Query being planned whose entry `rti` reads `relation`.
pub unsafe fn followed_unit(
    query: *mut pg_sys::Query,
    rti: i32,
    relation: Oid,
    unit: Unit,
    aggregate: &str,
) -> Result<Source, Error> {
    let mut keys = Vec::new();
    let mut null_identity = None;
    let (mut rti, mut relation, mut current) = (rti, relation, unit.clone());
    for _ in 0..MAX_DEPTH {
        if !current.by_reference {
            // SAFETY: a column of an existing relation, entry `rti` of the query.
            let expression = unsafe { super::follow::column_var(relation, rti, current.attribute) };
            return Ok(Source {
                unit,
                expression,
                keys,
                relation: None,
                null_identity,
                aliases: Vec::new(),
            });
        }
        // SAFETY: the relation is locked by the query that reads it.
        let key = unsafe { foreign_key(relation, current.attribute) }
            .map_err(|reason| refusal(&current, aggregate, &reason))?;
        let Some(next) = unit_of(key.confrelid) else {
            return Err(refusal(
                &current,
                aggregate,
                &format!(
                    "through its foreign key to table \"{}\", which has no privacy unit: label that table's unit column",
                    relation_name(key.confrelid)
                ),
            ));
        };
        if next.attribute <= 0 {
            return Err(refusal(&next, aggregate, "through a parent table that lacks the unit column of its labelled child: label a column of the parent that every child has"));
        }
        // SAFETY: as the caller guarantees; the new entry is locked before it is read.
        let joined = unsafe { join_referenced(query, rti, &key) };
        keys.push((rti, current.attribute, key.confrelid, key.confkey[0]));
        // A referenced row whose unit is NULL is a unit of its own, with every row that
        // reaches it: named by its key's hash (a collision merges two such units into one,
        // which only bounds them together).
        // SAFETY: a column of the new entry.
        null_identity = unsafe {
            let key_column = super::follow::column_var(key.confrelid, joined, key.confkey[0]);
            let hash = super::expressions::hashed(key_column);
            (!hash.is_null()).then_some(hash)
        };
        (rti, relation, current) = (joined, key.confrelid, next);
    }
    Err(refusal(
        &unit,
        aggregate,
        "through more than 8 foreign keys declared 'references_privacy_unit' (a cycle?): label the unit column of one of the tables",
    ))
}

/// The one single-column foreign key of `relation` on column `attribute`.
///
/// # Safety
/// `relation` must be locked.
unsafe fn foreign_key(
    relation: Oid,
    attribute: i16,
) -> Result<pg_sys::ForeignKeyCacheInfo, String> {
    // SAFETY: the relation cache's list of foreign keys, copied out before the relation
    // is closed.
    unsafe {
        let opened = pg_sys::relation_open(relation, pg_sys::NoLock as i32);
        // A key to a partitioned table comes with one per partition (conparentid set),
        // which reference partitions: the parent's alone counts.
        let keys: Vec<pg_sys::ForeignKeyCacheInfo> =
            PgList::<pg_sys::ForeignKeyCacheInfo>::from_pg(pg_sys::RelationGetFKeyList(opened))
                .iter_ptr()
                .filter(|&key| {
                    (*key).nkeys == 1
                        && (*key).conkey[0] == attribute
                        && !pg_sys::get_rel_relispartition((*key).confrelid)
                })
                .map(|key| *key)
                .collect();
        pg_sys::relation_close(opened, pg_sys::NoLock as i32);
        match keys.as_slice() {
            [key] => Ok(*key),
            [] => Err("through a column labelled 'references_privacy_unit' that has no single-column foreign key: add one (FOREIGN KEY (column) REFERENCES table (key)), or label the unit column itself 'privacy_unit'".into()),
            _ => Err("through a column labelled 'references_privacy_unit' that has several foreign keys: keep one".into()),
        }
    }
}

/// Adds the table `key` references to the range table, and replaces entry `rti` in the
/// join tree by `rti JOIN referenced ON referenced.key = rti.column`; the new entry.
///
/// # Safety
/// `query` must be a valid Query whose entry `rti` reads the key's table.
unsafe fn join_referenced(
    query: *mut pg_sys::Query,
    rti: i32,
    key: &pg_sys::ForeignKeyCacheInfo,
) -> i32 {
    // SAFETY: nodes made with PostgreSQL's constructors; the referenced table is locked
    // as the parser locks what it reads, and read without a privilege check.
    unsafe {
        let referenced = key.confrelid;
        pg_sys::LockRelationOid(referenced, pg_sys::AccessShareLock as i32);
        let mut rte = PgBox::<pg_sys::RangeTblEntry>::alloc_node(NodeTag::T_RangeTblEntry);
        rte.rtekind = pg_sys::RTEKind::RTE_RELATION;
        rte.relid = referenced;
        rte.relkind = pg_sys::get_rel_relkind(referenced);
        rte.rellockmode = pg_sys::AccessShareLock as i32;
        // The key's unique index covers a partitioned table's partitions, never an
        // inheritance parent's children: their rows would multiply a referencing row.
        rte.inh = rte.relkind == pg_sys::RELKIND_PARTITIONED_TABLE as std::ffi::c_char;
        let name = pg_sys::get_rel_name(referenced);
        let mut names = std::ptr::null_mut();
        let opened = pg_sys::relation_open(referenced, pg_sys::NoLock as i32);
        let columns = (*(*opened).rd_rel).relnatts;
        pg_sys::relation_close(opened, pg_sys::NoLock as i32);
        for attribute in 1..=columns {
            let column = pg_sys::get_attname(referenced, attribute, false);
            names = pg_sys::lappend(names, pg_sys::makeString(column).cast());
        }
        rte.alias = std::ptr::null_mut();
        rte.eref = pg_sys::makeAlias(name, names);
        rte.inFromCl = true;
        let rte = rte.into_pg();
        (*query).rtable = pg_sys::lappend((*query).rtable, rte.cast());
        // Read as the referencing entry is read (a view's owner inside a view), with
        // SELECT on the key and the unit: what the lookup reveals, through DP answers,
        // is the referenced table's.
        let (_, checker) = crate::extension::versions::permission_of(query, rti);
        let unit = super::labels::unit_of(referenced).map_or(0, |unit| unit.attribute);
        crate::extension::versions::add_select_permission(
            query,
            rte,
            checker,
            &[key.confkey[0], unit],
        );
        let joined = PgList::<pg_sys::RangeTblEntry>::from_pg((*query).rtable).len() as i32;
        // PK = FK as the foreign key compares them: its operator's input types, the
        // referencing value cast as RI does (an int key of a numeric one, char of text).
        let (mut left, mut right) = (pg_sys::InvalidOid, pg_sys::InvalidOid);
        pg_sys::op_input_types(key.conpfeqop[0], &mut left, &mut right);
        let pk_column = super::follow::column_var(referenced, joined, key.confkey[0]);
        let fk_column = super::follow::column_var(key.conrelid, rti, key.conkey[0]);
        let as_input = |column: *mut pg_sys::Expr, input: Oid| {
            let type_ = pg_sys::exprType(column.cast());
            if type_ == input {
                return column;
            }
            pg_sys::coerce_to_target_type(
                std::ptr::null_mut(),
                column.cast(),
                type_,
                input,
                -1,
                pg_sys::CoercionContext::COERCION_IMPLICIT,
                pg_sys::CoercionForm::COERCE_IMPLICIT_CAST,
                -1,
            )
            .cast()
        };
        let (pk, fk) = (as_input(pk_column, left), as_input(fk_column, right));
        if pk.is_null() || fk.is_null() {
            crate::extension::raise(crate::error::Error::UnitsUnavailable {
                reason: "a foreign key declared 'references_privacy_unit' compares types pg_exp_mech cannot cast".into(),
            });
        }
        let collation = pg_sys::exprCollation(pk_column.cast());
        let equal = pg_sys::make_opclause(
            key.conpfeqop[0],
            pg_sys::BOOLOID,
            false,
            pk,
            fk,
            pg_sys::InvalidOid,
            collation,
        );
        pg_sys::set_opfuncid(equal.cast());
        let pair = pg_sys::makeFromExpr(
            pg_sys::lappend(
                pg_sys::lappend(std::ptr::null_mut(), reference(rti).cast()),
                reference(joined).cast(),
            ),
            equal.cast(),
        );
        (*query).jointree = replace(((*query).jointree).cast(), rti, pair.cast()).cast();
        joined
    }
}

unsafe fn reference(rti: i32) -> *mut pg_sys::RangeTblRef {
    let mut reference = PgBox::<pg_sys::RangeTblRef>::alloc_node(NodeTag::T_RangeTblRef);
    reference.rtindex = rti;
    reference.into_pg()
}

/// `node` with the reference to entry `rti` replaced by `by`.
///
/// # Safety
/// `node` must be a join tree node of a valid Query.
unsafe fn replace(node: *mut pg_sys::Node, rti: i32, by: *mut pg_sys::Node) -> *mut pg_sys::Node {
    // SAFETY: nodes are cast after their tags are checked; lists are changed in place.
    unsafe {
        if node.is_null() {
            return node;
        }
        if is_a(node, NodeTag::T_RangeTblRef) {
            return if (*(node as *mut pg_sys::RangeTblRef)).rtindex == rti {
                by
            } else {
                node
            };
        }
        if is_a(node, NodeTag::T_JoinExpr) {
            let join = node as *mut pg_sys::JoinExpr;
            (*join).larg = replace((*join).larg, rti, by);
            (*join).rarg = replace((*join).rarg, rti, by);
        } else if is_a(node, NodeTag::T_FromExpr) {
            let from = node as *mut pg_sys::FromExpr;
            let mut items = std::ptr::null_mut();
            for item in PgList::<pg_sys::Node>::from_pg((*from).fromlist).iter_ptr() {
                items = pg_sys::lappend(items, replace(item, rti, by).cast());
            }
            (*from).fromlist = items;
        }
        node
    }
}

fn relation_name(relation: Oid) -> String {
    // SAFETY: a catalog lookup; NULL for a missing relation.
    unsafe {
        let name = pg_sys::get_rel_name(relation);
        if name.is_null() {
            relation.to_u32().to_string()
        } else {
            std::ffi::CStr::from_ptr(name)
                .to_string_lossy()
                .into_owned()
        }
    }
}
