//! GROUPING SETS, ROLLUP and CUBE over protected rows: each grouping set is its own
//! release, with L applying within it, so each becomes its own GROUP BY, bounded alone.
//! The level
//!
//! ```sql
//! SELECT a, b, GROUPING(a, b), dp_argmax(item, 1, ε) FROM <from> WHERE <where>
//!  GROUP BY ROLLUP (a, b) HAVING <having> ORDER BY <order> LIMIT <n>
//! ```
//!
//! becomes
//!
//! ```sql
//! SELECT * FROM (SELECT a, b, 0, dp_argmax(item, 1, ε) FROM <from> WHERE <where> GROUP BY a, b HAVING <having>
//!      UNION ALL SELECT a, NULL, 1, dp_argmax(...) FROM <from> WHERE <where> GROUP BY a HAVING <having>
//!      UNION ALL SELECT NULL, NULL, 3, dp_argmax(...) FROM <from> WHERE <where> HAVING <having>) AS grouping_sets
//!  ORDER BY <order> LIMIT <n>
//! ```
//!
//! A key outside a set reads NULL (outside aggregates, as PostgreSQL's grouping sets
//! give it) and GROUPING() its constant. The plan has one aggregation per set, as before,
//! and the metering hook charges each; each branch is then bounded as a plain GROUP BY.
//! Each branch reads the input again: volatile input (TABLESAMPLE, random() in WHERE)
//! differs from set to set, where PostgreSQL reads it once.

use super::follow::{refusal, Source};
use crate::error::Error;
use pgrx::pg_sys::{self, NodeTag};
use pgrx::{is_a, PgBox, PgList};
use std::ffi::c_void;

unsafe extern "C-unwind" {
    /// parser/parse_agg.h: the grouping sets as lists of sort-group references. Not in
    /// pgrx's bindings; called through `pg_guard_ffi_boundary` (it may raise).
    fn expand_grouping_sets(
        grouping_sets: *mut pg_sys::List,
        group_distinct: bool,
        limit: i32,
    ) -> *mut pg_sys::List;
}

/// Replaces `query`'s grouping sets by a UNION ALL of one GROUP BY per set, as the
/// module's comment shows; the branches, to be bounded each as a plain GROUP BY. None
/// when the level has no grouping sets.
///
/// # Safety
/// `query` must be a valid Query being planned, whose DP calls read rows of `source`.
pub unsafe fn split(
    query: *mut pg_sys::Query,
    source: &Source,
    aggregate: &str,
) -> Result<Option<Vec<*mut pg_sys::Query>>, Error> {
    // SAFETY: fields of a valid Query; nodes copied or made with PostgreSQL's
    // constructors in the planner's memory.
    unsafe {
        let q = &mut *query;
        if PgList::<c_void>::from_pg(q.groupingSets).is_empty() {
            return Ok(None);
        }
        let refuse = |reason: &str| Err(refusal(&source.unit, aggregate, reason));
        if q.hasWindowFuncs || q.hasTargetSRFs {
            return refuse("with GROUPING SETS, ROLLUP or CUBE and a window or set-returning function in the same select list: compute them in an outer query");
        }
        if q.hasModifyingCTE {
            return refuse("with GROUPING SETS, ROLLUP or CUBE and a data-modifying WITH query, which each grouping set would run again: run the modification first");
        }
        if pg_sys::checkExprHasSubLink(q.targetList.cast())
            || pg_sys::checkExprHasSubLink(q.havingQual)
        {
            return refuse("with GROUPING SETS, ROLLUP or CUBE and a subquery in the select list or HAVING: compute it in an outer query");
        }
        let sets = pg_sys::ffi::pg_guard_ffi_boundary(|| {
            expand_grouping_sets(q.groupingSets, q.groupDistinct, -1)
        });
        let sets: Vec<Vec<u32>> = PgList::<pg_sys::List>::from_pg(sets)
            .iter_ptr()
            .map(|set| {
                (0..pg_sys::list_length(set))
                    .map(|i| pg_sys::list_nth_int(set, i) as u32)
                    .collect()
            })
            .collect();
        // The expressions of every key, to be read as NULL in the sets without it.
        let keys: Vec<(u32, *mut pg_sys::Expr)> =
            PgList::<pg_sys::SortGroupClause>::from_pg(q.groupClause)
                .iter_ptr()
                .map(|clause| {
                    let reference = (*clause).tleSortGroupRef;
                    (reference, entry_of(q, reference))
                })
                .collect();
        let mut branches = Vec::new();
        for set in &sets {
            let branch = pg_sys::copyObjectImpl(query.cast()) as *mut pg_sys::Query;
            let b = &mut *branch;
            b.groupingSets = std::ptr::null_mut();
            b.groupDistinct = false;
            let mut group_clause = std::ptr::null_mut();
            for clause in PgList::<pg_sys::SortGroupClause>::from_pg(q.groupClause).iter_ptr() {
                if set.contains(&(*clause).tleSortGroupRef) {
                    group_clause =
                        pg_sys::lappend(group_clause, pg_sys::copyObjectImpl(clause.cast()));
                }
            }
            b.groupClause = group_clause;
            b.sortClause = std::ptr::null_mut();
            b.distinctClause = std::ptr::null_mut();
            b.hasDistinctOn = false;
            b.limitOffset = std::ptr::null_mut();
            b.limitCount = std::ptr::null_mut();
            b.limitOption = pg_sys::LimitOption::LIMIT_OPTION_COUNT;
            let (present, absent): (Vec<_>, Vec<_>) = keys
                .iter()
                .partition(|(reference, _)| set.contains(reference));
            let mut outside = Outside {
                set,
                keys: keys.iter().map(|&(reference, _)| reference).collect(),
                present: present.iter().map(|&&(_, expression)| expression).collect(),
                absent: absent.iter().map(|&&(_, expression)| expression).collect(),
            };
            let context = (&mut outside as *mut Outside).cast();
            b.targetList = outside_mutator(b.targetList.cast(), context).cast();
            b.havingQual = outside_mutator(b.havingQual, context);
            for entry in PgList::<pg_sys::TargetEntry>::from_pg(b.targetList).iter_ptr() {
                (*entry).resjunk = false;
            }
            // Two levels further down: under the UNION ALL, under the level itself.
            pg_sys::IncrementVarSublevelsUp(branch.cast(), 2, 1);
            branches.push(branch);
        }
        // The UNION ALL of the branches, left-deep.
        let mut union = PgBox::<pg_sys::Query>::alloc_node(NodeTag::T_Query);
        union.commandType = pg_sys::CmdType::CMD_SELECT;
        union.querySource = pg_sys::QuerySource::QSRC_ORIGINAL;
        union.canSetTag = true;
        let entries: Vec<*mut pg_sys::TargetEntry> =
            PgList::<pg_sys::TargetEntry>::from_pg(q.targetList)
                .iter_ptr()
                .collect();
        let (mut types, mut typmods, mut collations) = (
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        for &entry in &entries {
            let expression = (*entry).expr.cast();
            types = pg_sys::lappend_oid(types, pg_sys::exprType(expression));
            typmods = pg_sys::lappend_int(typmods, pg_sys::exprTypmod(expression));
            collations = pg_sys::lappend_oid(collations, pg_sys::exprCollation(expression));
        }
        let mut tree: *mut pg_sys::Node = std::ptr::null_mut();
        for (index, &branch) in branches.iter().enumerate() {
            union.rtable = pg_sys::lappend(union.rtable, subquery(branch, "grouping_set").cast());
            let mut reference = PgBox::<pg_sys::RangeTblRef>::alloc_node(NodeTag::T_RangeTblRef);
            reference.rtindex = index as i32 + 1;
            let reference = reference.into_pg().cast();
            tree = if tree.is_null() {
                reference
            } else {
                let mut operation =
                    PgBox::<pg_sys::SetOperationStmt>::alloc_node(NodeTag::T_SetOperationStmt);
                operation.op = pg_sys::SetOperation::SETOP_UNION;
                operation.all = true;
                operation.larg = tree;
                operation.rarg = reference;
                operation.colTypes = pg_sys::list_copy(types);
                operation.colTypmods = pg_sys::list_copy(typmods);
                operation.colCollations = pg_sys::list_copy(collations);
                operation.into_pg().cast()
            };
        }
        if branches.len() == 1 {
            // One set: the union is a query over its only branch.
            let mut only = PgBox::<pg_sys::RangeTblRef>::alloc_node(NodeTag::T_RangeTblRef);
            only.rtindex = 1;
            union.jointree = pg_sys::makeFromExpr(
                pg_sys::lappend(std::ptr::null_mut(), only.into_pg().cast()),
                std::ptr::null_mut(),
            );
        } else {
            union.setOperations = tree;
            union.jointree = pg_sys::makeFromExpr(std::ptr::null_mut(), std::ptr::null_mut());
        }
        union.targetList = columns_of(&entries, false);
        let union = union.into_pg();
        // The level reads the union's columns; ORDER BY, DISTINCT and LIMIT stay here.
        q.rtable = pg_sys::lappend(
            std::ptr::null_mut(),
            subquery(union, "grouping_sets").cast(),
        );
        crate::extension::versions::clear_permissions(query);
        let mut reference = PgBox::<pg_sys::RangeTblRef>::alloc_node(NodeTag::T_RangeTblRef);
        reference.rtindex = 1;
        q.jointree = pg_sys::makeFromExpr(
            pg_sys::lappend(std::ptr::null_mut(), reference.into_pg().cast()),
            std::ptr::null_mut(),
        );
        q.targetList = columns_of(&entries, true);
        q.groupClause = std::ptr::null_mut();
        q.groupingSets = std::ptr::null_mut();
        q.groupDistinct = false;
        q.havingQual = std::ptr::null_mut();
        q.hasAggs = false;
        q.hasSubLinks = false;
        // Each branch keeps its copy of the WITH queries.
        q.cteList = std::ptr::null_mut();
        q.hasRecursive = false;
        Ok(Some(branches))
    }
}

/// The select-list entry that sort-group reference `reference` names.
unsafe fn entry_of(query: &pg_sys::Query, reference: u32) -> *mut pg_sys::Expr {
    // SAFETY: a parsed GROUP BY refers to an entry of the select list.
    unsafe {
        PgList::<pg_sys::TargetEntry>::from_pg(query.targetList)
            .iter_ptr()
            .find(|&entry| (*entry).ressortgroupref == reference)
            .map(|entry| (*entry).expr)
            .expect("GROUP BY refers to the select list")
    }
}

/// Vars of range-table entry 1's columns, one per entry, with the entries' names (and,
/// for the level itself, their references and junk flags).
unsafe fn columns_of(entries: &[*mut pg_sys::TargetEntry], keep_flags: bool) -> *mut pg_sys::List {
    // SAFETY: valid TargetEntries; Vars made with PostgreSQL's constructor.
    unsafe {
        let mut list = std::ptr::null_mut();
        for (index, &entry) in entries.iter().enumerate() {
            let expression = (*entry).expr.cast();
            let var = pg_sys::makeVar(
                1,
                index as i16 + 1,
                pg_sys::exprType(expression),
                pg_sys::exprTypmod(expression),
                pg_sys::exprCollation(expression),
                0,
            );
            let name = if (*entry).resname.is_null() {
                pg_sys::pstrdup(c"?column?".as_ptr())
            } else {
                pg_sys::pstrdup((*entry).resname)
            };
            let column = pg_sys::makeTargetEntry(var.cast(), index as i16 + 1, name, false);
            if keep_flags {
                (*column).ressortgroupref = (*entry).ressortgroupref;
                (*column).resjunk = (*entry).resjunk;
            }
            list = pg_sys::lappend(list, column.cast());
        }
        list
    }
}

/// A subquery range-table entry over `query`, named `name`, its columns named as its
/// select list names them.
unsafe fn subquery(query: *mut pg_sys::Query, name: &str) -> *mut pg_sys::RangeTblEntry {
    // SAFETY: a valid Query; nodes made with PostgreSQL's constructors.
    unsafe {
        let name = std::ffi::CString::new(name).expect("no NUL");
        let mut names = std::ptr::null_mut();
        for entry in PgList::<pg_sys::TargetEntry>::from_pg((*query).targetList).iter_ptr() {
            let column = if (*entry).resname.is_null() {
                pg_sys::pstrdup(c"?column?".as_ptr())
            } else {
                pg_sys::pstrdup((*entry).resname)
            };
            names = pg_sys::lappend(names, pg_sys::makeString(column).cast());
        }
        let mut rte = PgBox::<pg_sys::RangeTblEntry>::alloc_node(NodeTag::T_RangeTblEntry);
        rte.rtekind = pg_sys::RTEKind::RTE_SUBQUERY;
        rte.subquery = query;
        rte.alias = pg_sys::makeAlias(name.as_ptr(), std::ptr::null_mut());
        rte.eref = pg_sys::makeAlias(name.as_ptr(), names);
        rte.inFromCl = true;
        rte.into_pg()
    }
}

/// One grouping set's view of the level's expressions, as PostgreSQL's planner matches
/// them (setrefs.c): top down, an expression equal to a key is that key, whole.
struct Outside<'a> {
    set: &'a [u32],
    /// The sort-group references of every key.
    keys: Vec<u32>,
    /// The keys in the set, kept whole (never looked into).
    present: Vec<*mut pg_sys::Expr>,
    /// The keys not in the set, read as NULL outside aggregates.
    absent: Vec<*mut pg_sys::Expr>,
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn outside_mutator(
    node: *mut pg_sys::Node,
    context: *mut c_void,
) -> *mut pg_sys::Node {
    // SAFETY: the context is an Outside; nodes are cast after their tags are checked.
    unsafe {
        if node.is_null() {
            return node;
        }
        let outside = &*(context as *mut Outside);
        let equals = |keys: &[*mut pg_sys::Expr]| {
            keys.iter()
                .any(|&key| pg_sys::equal(key.cast(), node.cast()))
        };
        // A key's own select-list entry is the key, whatever its expression.
        if is_a(node, NodeTag::T_TargetEntry) {
            let reference = (*(node as *mut pg_sys::TargetEntry)).ressortgroupref;
            if outside.keys.contains(&reference) {
                let entry = pg_sys::copyObjectImpl(node.cast()) as *mut pg_sys::TargetEntry;
                if !outside.set.contains(&reference) {
                    let expression = (*entry).expr.cast();
                    (*entry).expr = pg_sys::makeNullConst(
                        pg_sys::exprType(expression),
                        pg_sys::exprTypmod(expression),
                        pg_sys::exprCollation(expression),
                    )
                    .cast();
                }
                return entry.cast();
            }
        }
        // Elsewhere a constant is itself in every set (PostgreSQL never reads it from the
        // group).
        if is_a(node, NodeTag::T_Const) || equals(&outside.present) {
            return pg_sys::copyObjectImpl(node.cast()).cast();
        }
        if equals(&outside.absent) {
            let expression = node.cast();
            return pg_sys::makeNullConst(
                pg_sys::exprType(expression),
                pg_sys::exprTypmod(expression),
                pg_sys::exprCollation(expression),
            )
            .cast();
        }
        if is_a(node, NodeTag::T_Aggref) {
            // An aggregate reads the rows' own values; an ordered-set aggregate's direct
            // arguments are evaluated once per group, outside it.
            let aggref = pg_sys::copyObjectImpl(node.cast()) as *mut pg_sys::Aggref;
            (*aggref).aggdirectargs =
                outside_mutator((*aggref).aggdirectargs.cast(), context).cast();
            return aggref.cast();
        }
        if is_a(node, NodeTag::T_GroupingFunc) {
            // GROUPING(k1, ..., kn): bit n−i set when k_i is not in the set.
            let grouping = node as *mut pg_sys::GroupingFunc;
            let refs = (*grouping).refs;
            let n = pg_sys::list_length(refs);
            let mut value: i32 = 0;
            for i in 0..n {
                value <<= 1;
                if !outside
                    .set
                    .contains(&(pg_sys::list_nth_int(refs, i) as u32))
                {
                    value |= 1;
                }
            }
            return pg_sys::makeConst(
                pg_sys::INT4OID,
                -1,
                pg_sys::InvalidOid,
                4,
                pg_sys::Datum::from(value),
                false,
                true,
            )
            .cast();
        }
        crate::extension::versions::mutate_children(node, outside_mutator, context)
    }
}
