//! The transformation of one query level whose DP aggregates read rows of a protected
//! table, from input tree to output tree. The level
//!
//! ```sql
//! SELECT g, dp_argmax(item, score, ε), dp_quantile(v, α, lo, hi, ε)
//!   FROM <from> WHERE <where> GROUP BY g
//! ```
//!
//! becomes (L = max_groups_per_unit, m = max_values_per_unit, read when the plan runs)
//!
//! ```sql
//! SELECT g, dp_argmax(item, dp_unit_total(score_1, 1), dp_unit_share(ε, L)) FILTER (WHERE group_rank <= L AND first_1 = 1),
//!        dp_quantile(v, α, lo, hi, dp_unit_share(ε, L·m)) FILTER (WHERE group_rank <= L AND sample_2 <= m)
//!   FROM (SELECT <the columns the level reads>,
//!                dense_rank() OVER (PARTITION BY unit ORDER BY keyed_hash(unit, g), g) AS group_rank,
//!                row_number() OVER (PARTITION BY unit, g, item) AS first_1,
//!                sum(dp_unit_score(score, 1)) OVER (PARTITION BY unit, g, item) AS score_1,
//!                row_number() OVER (PARTITION BY unit, g ORDER BY v IS NULL, dp_unit_priority()) AS sample_2
//!           FROM <from> WHERE <where>) AS privacy_unit_bounded
//!  GROUP BY g
//! ```
//!
//! Each unit keeps the L groups with the smallest keyed hashes (a choice that depends
//! only on its own groups and the statement's key); within a group a selection
//! aggregate sees one row per (unit, item) whose score is the unit's sum (summed in units
//! of max_score, 1 here, so that no sum overflows; clamped to max_score: range
//! max_score per unit, PRIVACY.md §1), a quantile a
//! uniform sample of m of the unit's values, dp_partition one row per unit. Each group's
//! ε (and δ) is divided by the releases one unit takes part in; `dp_unit_share` keeps
//! the statement's total visible, and the metering hook charges that. The pre-bounding
//! is PostgreSQL's own plan: sorts and window aggregates, which spill to disk.

use super::expressions::{
    arithmetic, call, collated, compare, copy, float8, has_ordering, hashed, int8, list, row,
    unhashable, when_null,
};
use super::follow::{refusal, Source};
use super::function_oids::functions;
use super::Calls;
use crate::error::Error;
use crate::extension::budget::dp_aggregate;
use crate::extension::forms::Family;
use pgrx::pg_sys::{self, NodeTag, Oid};
use pgrx::{is_a, PgBox, PgList};
use std::collections::HashMap;
use std::ffi::{c_void, CString};

/// How one DP call of the level is bounded: the columns of the bounded rows it reads.
#[derive(Clone, Copy)]
struct Bounded {
    family: Family,
    /// The item (selection) or value (quantile) as the rows were bounded by it.
    value: *mut pg_sys::Var,
    /// The call's FILTER, as the rows were bounded by it.
    filter: Option<*mut pg_sys::Var>,
    /// The row's unit-level score (selection).
    score: *mut pg_sys::Expr,
    /// The condition that keeps the call's rows.
    keep: *mut pg_sys::Expr,
    /// What one group's ε is divided by; None for 1.
    divisor: Option<*mut pg_sys::Expr>,
    /// What one group's δ is divided by; None for 1.
    delta_divisor: Option<*mut pg_sys::Expr>,
    epsilon: usize,
    delta: Option<usize>,
}

/// The inner query's output columns and windows, built up.
struct Inner {
    entries: Vec<*mut pg_sys::TargetEntry>,
    names: Vec<String>,
    windows: Vec<*mut pg_sys::WindowClause>,
    references: u32,
}

impl Inner {
    /// Adds an output column; a Var of it for the outer level.
    unsafe fn column(&mut self, expression: *mut pg_sys::Expr, name: &str) -> *mut pg_sys::Var {
        // SAFETY: a valid expression of the level's rows; the name is palloc'd.
        unsafe {
            let resno = (self.entries.len() + 1) as i16;
            let c_name = CString::new(name).expect("no NUL");
            let entry =
                pg_sys::makeTargetEntry(expression, resno, pg_sys::pstrdup(c_name.as_ptr()), false);
            self.entries.push(entry);
            self.names.push(name.into());
            let node = expression.cast();
            pg_sys::makeVar(
                1,
                resno,
                pg_sys::exprType(node),
                pg_sys::exprTypmod(node),
                pg_sys::exprCollation(node),
                0,
            )
        }
    }

    /// Adds a column that windows partition or sort by; its sort-group reference.
    unsafe fn key(&mut self, expression: *mut pg_sys::Expr, name: &str) -> u32 {
        // SAFETY: as column's.
        unsafe { self.key_column(expression, name).0 }
    }

    /// Adds a column that windows partition or sort by: its sort-group reference, and a
    /// Var of it for the outer level (which reads the value the rows were bounded by,
    /// never a second evaluation of a volatile expression).
    unsafe fn key_column(
        &mut self,
        expression: *mut pg_sys::Expr,
        name: &str,
    ) -> (u32, *mut pg_sys::Var) {
        // SAFETY: as column's.
        unsafe {
            let var = self.column(expression, name);
            self.references += 1;
            let entry = *self.entries.last().expect("just added");
            (*entry).ressortgroupref = self.references;
            (self.references, var)
        }
    }

    /// A window over keys `partition`, sorted by `order`; the columns its functions give.
    unsafe fn window(
        &mut self,
        partition: &[u32],
        order: &[u32],
        functions: &[(Oid, Oid, *mut pg_sys::List, bool, &str)],
    ) -> Vec<*mut pg_sys::Var> {
        // SAFETY: nodes made with PostgreSQL's constructors; the keys are columns added by
        // `key`, whose types get their sort and equality operators from the catalog.
        unsafe {
            let winref = (self.windows.len() + 1) as u32;
            let mut clause = PgBox::<pg_sys::WindowClause>::alloc_node(NodeTag::T_WindowClause);
            clause.partitionClause = self.sort_clauses(partition);
            clause.orderClause = self.sort_clauses(order);
            clause.frameOptions = pg_sys::FRAMEOPTION_DEFAULTS as i32;
            clause.winref = winref;
            self.windows.push(clause.into_pg());
            functions
                .iter()
                .map(|&(function, result, arguments, aggregate, name)| {
                    let mut call = PgBox::<pg_sys::WindowFunc>::alloc_node(NodeTag::T_WindowFunc);
                    call.winfnoid = function;
                    call.wintype = result;
                    call.args = arguments;
                    call.winref = winref;
                    call.winagg = aggregate;
                    call.location = -1;
                    self.column(call.into_pg().cast(), name)
                })
                .collect()
        }
    }

    unsafe fn sort_clauses(&self, references: &[u32]) -> *mut pg_sys::List {
        // SAFETY: each reference names an entry added by `key`.
        unsafe {
            let mut list = std::ptr::null_mut();
            for &reference in references {
                let entry = self
                    .entries
                    .iter()
                    .copied()
                    .find(|&e| (*e).ressortgroupref == reference)
                    .expect("a key column");
                let type_ = pg_sys::exprType((*entry).expr.cast());
                let (mut less, mut equal, mut hashable) =
                    (pg_sys::InvalidOid, pg_sys::InvalidOid, false);
                pg_sys::get_sort_group_operators(
                    type_,
                    true,
                    true,
                    false,
                    &mut less,
                    &mut equal,
                    std::ptr::null_mut(),
                    &mut hashable,
                );
                let mut clause =
                    PgBox::<pg_sys::SortGroupClause>::alloc_node(NodeTag::T_SortGroupClause);
                clause.tleSortGroupRef = reference;
                clause.eqop = equal;
                clause.sortop = less;
                clause.nulls_first = false;
                clause.hashable = hashable;
                list = pg_sys::lappend(list, clause.into_pg().cast());
            }
            list
        }
    }
}

/// Bounds `query`'s DP calls by `source`'s unit, as the module's comment shows.
///
/// # Safety
/// `query` must be a valid Query being planned whose rows get their unit from `source`.
pub unsafe fn bound(
    query: *mut pg_sys::Query,
    source: &Source,
    calls: &Calls,
) -> Result<(), Error> {
    let name = calls.name();
    let refuse = |reason: &str| Err(refusal(&source.unit, name, reason));
    // SAFETY: fields of a valid Query; nodes made with PostgreSQL's constructors in the
    // planner's memory; the level's range table and join tree move, unchanged, into the
    // inner query.
    unsafe {
        let q = &mut *query;
        if calls.window.is_some() {
            return refuse("as a window function: each frame would need its own bounding; aggregate with GROUP BY instead");
        }
        if calls.nested.is_some() {
            return refuse("from inside a subquery of the level whose rows it aggregates: write the aggregate in that level's select list");
        }
        if !PgList::<c_void>::from_pg(q.cteList).is_empty()
            && (pg_sys::checkExprHasSubLink(q.targetList.cast())
                || pg_sys::checkExprHasSubLink(q.havingQual))
        {
            return refuse("in a query with both a WITH clause and subqueries in its select list or HAVING: move the WITH query into a FROM subquery");
        }
        let f = functions();
        let mut inner = Inner {
            entries: Vec::new(),
            names: Vec::new(),
            windows: Vec::new(),
            references: 0,
        };
        let unit_expression = source.expression;
        let unit = inner.key(copy(unit_expression), "unit");
        // A number of its own for a row whose unit is NULL (CASE: no call for the others),
        // or the referenced row's, which all rows that reach it share.
        let of_null = inner.key(
            when_null(unit_expression, f.of_null, source.null_identity),
            "null_unit",
        );
        let group_keys: Vec<*mut pg_sys::Expr> =
            PgList::<pg_sys::SortGroupClause>::from_pg(q.groupClause)
                .iter_ptr()
                .map(|clause| copy(grouped_expression(q, (*clause).tleSortGroupRef)))
                .collect();
        let grouped = !group_keys.is_empty();
        if group_keys
            .iter()
            .any(|&key| pg_sys::expression_returns_set(key.cast()))
        {
            return refuse(
                "grouped by a set-returning function: group by a column or a per-row expression",
            );
        }
        let (groups, group_vars): (Vec<u32>, Vec<*mut pg_sys::Var>) = group_keys
            .iter()
            .enumerate()
            .map(|(i, &key)| inner.key_column(key, &format!("group_{}", i + 1)))
            .unzip();
        // Each DP call keeps the rows of a unit's first L groups through its FILTER, not a
        // WHERE: a group whose rows all belong to units that chose other groups must still
        // be output (with a public key table joined in, which keys come out would
        // otherwise tell who chose what).
        let mut in_chosen_group: Option<*mut pg_sys::Expr> = None;
        // The groups' hash, which the calls' windows also partition by (a function of the
        // unit and the group: the same partitions), so that one sort by (unit, hash,
        // group, ...) serves the group ranks and every call.
        let mut group_hash: Option<u32> = None;
        let unit_hash = hashed(unit_expression);
        if grouped {
            // Each unit's groups in the order of a keyed hash of (unit, group) (ties, which
            // need a 64-bit collision, broken by the keys): the unit keeps its first L. The
            // types' own extended hash functions; a record hash for several keys.
            let group_hash_value = if group_keys.len() == 1 {
                hashed(group_keys[0])
            } else {
                let keys: Vec<_> = group_keys.iter().map(|&k| copy(k)).collect();
                if group_keys.iter().all(|&key| !hashed(key).is_null()) {
                    call(
                        Oid::from(pg_sys::F_HASH_RECORD_EXTENDED),
                        pg_sys::INT8OID,
                        &[row(&keys), int8(0)],
                    )
                } else {
                    std::ptr::null_mut()
                }
            };
            if unit_hash.is_null() || group_hash_value.is_null() {
                return refuse(&unhashable(
                    std::iter::once(&unit_expression).chain(&group_keys),
                    "to choose each unit's groups: group by a hashable expression",
                ));
            }
            let hash = call(
                f.group_order,
                pg_sys::INT8OID,
                &[copy(unit_hash), group_hash_value],
            );
            let hash = inner.key(hash, "group_hash");
            group_hash = Some(hash);
            let mut order = vec![hash];
            for (i, &key) in group_keys.iter().enumerate() {
                if has_ordering(key) {
                    order.push(groups[i]);
                }
            }
            let rank = inner.window(
                &[unit, of_null],
                &order,
                &[(
                    Oid::from(pg_sys::F_DENSE_RANK_),
                    pg_sys::INT8OID,
                    std::ptr::null_mut(),
                    false,
                    "group_rank",
                )],
            )[0];
            in_chosen_group = Some(compare(
                "<=",
                rank.cast(),
                call(f.max_groups, pg_sys::INT8OID, &[]),
            ));
        }
        // How each call is bounded.
        let mut bounded: HashMap<usize, Bounded> = HashMap::new();
        for (number, &aggref) in calls.aggregates.iter().enumerate() {
            let aggregate = dp_aggregate((*aggref).aggfnoid).expect("a DP call");
            let arguments: Vec<*mut pg_sys::Expr> =
                PgList::<pg_sys::TargetEntry>::from_pg((*aggref).args)
                    .iter_ptr()
                    .map(|entry| (*entry).expr)
                    .collect();
            let form = aggregate.form(arguments.len());
            if !PgList::<c_void>::from_pg((*aggref).aggdistinct).is_empty() {
                return refuse("with DISTINCT inside the call: drop DISTINCT, a unit already counts once per item");
            }
            let mut partition = vec![unit, of_null];
            partition.extend(group_hash);
            partition.extend(&groups);
            let mut filter = None;
            if !(*aggref).aggfilter.is_null() {
                let (reference, var) = inner.key_column(
                    copy((*aggref).aggfilter.cast()),
                    &format!("filter_{}", number + 1),
                );
                partition.push(reference);
                filter = Some(var);
            }
            let groups_divisor = || call(f.max_groups, pg_sys::INT8OID, &[]);
            let one = int8(1);
            let plan = match aggregate.family {
                Family::Selection => {
                    // Items are told apart as the aggregate tells them (its input
                    // collation: a COLLATE on the candidates makes case variants one
                    // item), so that a unit's rows of one item are summed once.
                    let (reference, item) = inner.key_column(
                        collated(copy(arguments[0]), (*aggref).inputcollid),
                        &format!("item_{}", number + 1),
                    );
                    partition.push(reference);
                    let numeric = pg_sys::exprType(arguments[1].cast()) == pg_sys::NUMERICOID;
                    let read = if numeric { f.numeric_score } else { f.score };
                    // In units of max_score (the forms without it read 1), summed
                    // without overflow and scaled back (dp_unit_score, dp_unit_total).
                    let max_score = || match form.positions.max_score {
                        Some(position) => copy(arguments[position]),
                        None => float8(1.0),
                    };
                    let score = call(read, pg_sys::FLOAT8OID, &[copy(arguments[1]), max_score()]);
                    let columns = inner.window(
                        &partition,
                        &[],
                        &[
                            (
                                Oid::from(pg_sys::F_ROW_NUMBER),
                                pg_sys::INT8OID,
                                std::ptr::null_mut(),
                                false,
                                &format!("first_{}", number + 1),
                            ),
                            (
                                Oid::from(pg_sys::F_SUM_FLOAT8),
                                pg_sys::FLOAT8OID,
                                list(&[score]),
                                true,
                                &format!("score_{}", number + 1),
                            ),
                        ],
                    );
                    let score = call(
                        f.total,
                        pg_sys::FLOAT8OID,
                        &[columns[1].cast(), max_score()],
                    );
                    // The numeric overload reads the sum back in numeric (exact for a
                    // double).
                    let score = if numeric {
                        call(
                            Oid::from(pg_sys::F_NUMERIC_FLOAT8),
                            pg_sys::NUMERICOID,
                            &[score],
                        )
                    } else {
                        score
                    };
                    let mut keep = compare("=", columns[0].cast(), one);
                    let mut delta_divisor = grouped.then(groups_divisor);
                    if form.positions.delta.is_some() {
                        // Items from the data (dp_top_k_unknown_domain): each unit gives a
                        // group at most Δ0 items, its first in a keyed hash order, and the
                        // group's δ is divided by Δ0 (see `limited_domain_top_k`).
                        let item_hash = hashed(arguments[0]);
                        if unit_hash.is_null() || item_hash.is_null() {
                            return refuse(&unhashable(
                                [&unit_expression, &arguments[0]].into_iter(),
                                "to choose each unit's items",
                            ));
                        }
                        let order = inner.key(
                            call(
                                f.group_order,
                                pg_sys::INT8OID,
                                &[copy(unit_hash), item_hash],
                            ),
                            &format!("item_hash_{}", number + 1),
                        );
                        let item_partition = &partition[..partition.len() - 1];
                        let mut order = vec![order];
                        if has_ordering(arguments[0]) {
                            order.push(reference);
                        }
                        let rank = inner.window(
                            item_partition,
                            &order,
                            &[(
                                Oid::from(pg_sys::F_DENSE_RANK_),
                                pg_sys::INT8OID,
                                std::ptr::null_mut(),
                                false,
                                &format!("item_rank_{}", number + 1),
                            )],
                        )[0];
                        let items = call(f.max_items, pg_sys::INT8OID, &[]);
                        keep = pg_sys::make_andclause(list(&[
                            keep,
                            compare("<=", rank.cast(), copy(items)),
                        ]));
                        delta_divisor = Some(match delta_divisor {
                            Some(groups) => arithmetic("*", groups, items),
                            None => items,
                        });
                    }
                    Bounded {
                        family: aggregate.family,
                        value: item,
                        filter,
                        score,
                        keep,
                        divisor: grouped.then(groups_divisor),
                        delta_divisor,
                        epsilon: form.positions.epsilon,
                        delta: form.positions.delta,
                    }
                }
                Family::Quantile(_) => {
                    let value = inner.column(copy(arguments[0]), &format!("value_{}", number + 1));
                    let mut missing = PgBox::<pg_sys::NullTest>::alloc_node(NodeTag::T_NullTest);
                    missing.arg = copy(arguments[0]);
                    missing.nulltesttype = pg_sys::NullTestType::IS_NULL;
                    missing.location = -1;
                    let order = [
                        inner.key(missing.into_pg().cast(), &format!("missing_{}", number + 1)),
                        inner.key(
                            call(f.priority, pg_sys::FLOAT8OID, &[]),
                            &format!("priority_{}", number + 1),
                        ),
                    ];
                    let sample = inner.window(
                        &partition,
                        &order,
                        &[(
                            Oid::from(pg_sys::F_ROW_NUMBER),
                            pg_sys::INT8OID,
                            std::ptr::null_mut(),
                            false,
                            &format!("sample_{}", number + 1),
                        )],
                    )[0];
                    let values = call(f.max_values, pg_sys::INT8OID, &[]);
                    Bounded {
                        family: aggregate.family,
                        value,
                        filter,
                        score: std::ptr::null_mut(),
                        keep: compare(
                            "<=",
                            sample.cast(),
                            call(f.max_values, pg_sys::INT8OID, &[]),
                        ),
                        divisor: Some(if grouped {
                            arithmetic("*", groups_divisor(), copy(values))
                        } else {
                            copy(values)
                        }),
                        delta_divisor: None,
                        epsilon: form.positions.epsilon,
                        delta: form.positions.delta,
                    }
                }
                Family::Partition => {
                    let first = inner.window(
                        &partition,
                        &[],
                        &[(
                            Oid::from(pg_sys::F_ROW_NUMBER),
                            pg_sys::INT8OID,
                            std::ptr::null_mut(),
                            false,
                            &format!("first_{}", number + 1),
                        )],
                    )[0];
                    Bounded {
                        family: aggregate.family,
                        value: std::ptr::null_mut(),
                        filter,
                        score: std::ptr::null_mut(),
                        keep: compare("=", first.cast(), one),
                        divisor: grouped.then(groups_divisor),
                        delta_divisor: grouped.then(groups_divisor),
                        epsilon: form.positions.epsilon,
                        delta: form.positions.delta,
                    }
                }
            };
            let mut plan = plan;
            if let Some(chosen) = in_chosen_group {
                plan.keep = pg_sys::make_andclause(list(&[copy(chosen), plan.keep]));
            }
            bounded.insert(aggref as usize, plan);
        }
        // The outer level reads the inner query's columns.
        let mut remap = Remap {
            depth: 0,
            inner: &mut inner,
            columns: HashMap::new(),
            bounded: &bounded,
            share: f.share,
        };
        let context = (&mut remap as *mut Remap).cast();
        let target_list = mutate(q.targetList.cast(), context) as *mut pg_sys::List;
        let having = mutate(q.havingQual, context);
        // The outer level groups by the keys the rows were bounded by.
        for (clause, &var) in PgList::<pg_sys::SortGroupClause>::from_pg(q.groupClause)
            .iter_ptr()
            .zip(&group_vars)
        {
            for entry in PgList::<pg_sys::TargetEntry>::from_pg(target_list).iter_ptr() {
                if (*entry).ressortgroupref == (*clause).tleSortGroupRef {
                    (*entry).expr = copy(var.cast());
                }
            }
        }
        // The inner query: the level's FROM and WHERE, one level further down.
        let mut bounded_rows = PgBox::<pg_sys::Query>::alloc_node(NodeTag::T_Query);
        bounded_rows.commandType = pg_sys::CmdType::CMD_SELECT;
        bounded_rows.querySource = pg_sys::QuerySource::QSRC_ORIGINAL;
        bounded_rows.canSetTag = true;
        bounded_rows.rtable = q.rtable;
        crate::extension::versions::move_permissions(query, &mut *bounded_rows);
        bounded_rows.jointree = q.jointree;
        bounded_rows.cteList = q.cteList;
        bounded_rows.hasRecursive = q.hasRecursive;
        bounded_rows.hasModifyingCTE = q.hasModifyingCTE;
        bounded_rows.hasSubLinks = q.hasSubLinks;
        bounded_rows.hasRowSecurity = q.hasRowSecurity;
        bounded_rows.hasWindowFuncs = !inner.windows.is_empty();
        bounded_rows.windowClause = list(&inner.windows);
        bounded_rows.targetList = list(&inner.entries);
        let bounded_rows = bounded_rows.into_pg();
        pg_sys::IncrementVarSublevelsUp(bounded_rows.cast(), 1, 1);
        let alias = CString::new("privacy_unit_bounded").expect("no NUL");
        let mut names = std::ptr::null_mut();
        for name in &inner.names {
            let name = CString::new(name.as_str()).expect("no NUL");
            names = pg_sys::lappend(
                names,
                pg_sys::makeString(pg_sys::pstrdup(name.as_ptr())).cast(),
            );
        }
        let mut rte = PgBox::<pg_sys::RangeTblEntry>::alloc_node(NodeTag::T_RangeTblEntry);
        rte.rtekind = pg_sys::RTEKind::RTE_SUBQUERY;
        rte.subquery = bounded_rows;
        rte.alias = pg_sys::makeAlias(alias.as_ptr(), std::ptr::null_mut());
        rte.eref = pg_sys::makeAlias(alias.as_ptr(), names);
        rte.inFromCl = true;
        let mut reference = PgBox::<pg_sys::RangeTblRef>::alloc_node(NodeTag::T_RangeTblRef);
        reference.rtindex = 1;
        q.rtable = pg_sys::lappend(std::ptr::null_mut(), rte.into_pg().cast());
        q.jointree = pg_sys::makeFromExpr(
            pg_sys::lappend(std::ptr::null_mut(), reference.into_pg().cast()),
            std::ptr::null_mut(),
        );
        q.cteList = std::ptr::null_mut();
        q.hasRecursive = false;
        q.hasModifyingCTE = false;
        q.targetList = target_list;
        q.havingQual = having;
        Ok(())
    }
}

/// The outer level's expressions, moved onto the inner query's columns.
struct Remap<'a> {
    /// How many subqueries deep the mutator is.
    depth: u32,
    inner: &'a mut Inner,
    /// The inner column of each (varno, varattno) of the level.
    columns: HashMap<(i32, i16), *mut pg_sys::Var>,
    bounded: &'a HashMap<usize, Bounded>,
    share: Oid,
}

unsafe fn mutate(node: *mut pg_sys::Node, context: *mut c_void) -> *mut pg_sys::Node {
    // SAFETY: the mutator's context is a Remap.
    unsafe { remap_mutator(node, context) }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn remap_mutator(
    node: *mut pg_sys::Node,
    context: *mut c_void,
) -> *mut pg_sys::Node {
    // SAFETY: the context is a Remap; nodes are cast after their tags are checked and
    // copied before they change.
    unsafe {
        if node.is_null() {
            return node;
        }
        let remap = &mut *(context as *mut Remap);
        if is_a(node, NodeTag::T_Query) {
            remap.depth += 1;
            let query =
                crate::extension::versions::mutate_query(node.cast(), remap_mutator, context);
            remap.depth -= 1;
            return query.cast();
        }
        if is_a(node, NodeTag::T_Var) {
            let var = node as *mut pg_sys::Var;
            if (*var).varlevelsup != remap.depth {
                return pg_sys::copyObjectImpl(node.cast()).cast();
            }
            let key = ((*var).varno, (*var).varattno);
            let column = match remap.columns.get(&key) {
                Some(&column) => column,
                None => {
                    let inner_var = pg_sys::copyObjectImpl(node.cast()) as *mut pg_sys::Var;
                    (*inner_var).varlevelsup = 0;
                    let column = remap.inner.column(
                        inner_var.cast(),
                        &format!("column_{}", remap.columns.len() + 1),
                    );
                    remap.columns.insert(key, column);
                    column
                }
            };
            let outer = pg_sys::copyObjectImpl(column.cast()) as *mut pg_sys::Var;
            (*outer).varlevelsup = remap.depth;
            return outer.cast();
        }
        if remap.depth == 0 && is_a(node, NodeTag::T_Aggref) {
            if let Some(&plan) = remap.bounded.get(&(node as usize)) {
                return bounded_call(node.cast(), &plan, context);
            }
            // Never a DP call of this level left reading rows unbounded.
            let aggref = node as *mut pg_sys::Aggref;
            if (*aggref).agglevelsup == 0 {
                if let Some(aggregate) = dp_aggregate((*aggref).aggfnoid) {
                    crate::extension::raise(Error::UnitsUnavailable {
                        reason: format!("{} was not bounded by privacy unit (an internal error): the statement is refused", aggregate.name),
                    });
                }
            }
        }
        crate::extension::versions::mutate_children(node, remap_mutator, context)
    }
}

/// A DP call of the level, reading the bounded rows.
///
/// # Safety
/// `aggref` must be a call of the level, `context` the Remap.
unsafe fn bounded_call(
    aggref: *mut pg_sys::Aggref,
    plan: &Bounded,
    context: *mut c_void,
) -> *mut pg_sys::Node {
    // SAFETY: the copy's args are TargetEntries; each expression is replaced by its remap.
    unsafe {
        let share = (*(context as *mut Remap)).share;
        let copy_ = pg_sys::copyObjectImpl(aggref.cast()) as *mut pg_sys::Aggref;
        for (position, entry) in PgList::<pg_sys::TargetEntry>::from_pg((*copy_).args)
            .iter_ptr()
            .enumerate()
        {
            (*entry).expr = if matches!(plan.family, Family::Selection) && position == 1 {
                pg_sys::copyObjectImpl(plan.score.cast()).cast()
            } else if position == 0 && !plan.value.is_null() {
                pg_sys::copyObjectImpl(plan.value.cast()).cast()
            } else {
                mutate((*entry).expr.cast(), context).cast()
            };
            let divisor = if position == plan.epsilon {
                plan.divisor
            } else if Some(position) == plan.delta {
                plan.delta_divisor
            } else {
                None
            };
            if let Some(divisor) = divisor {
                (*entry).expr = call(share, pg_sys::FLOAT8OID, &[(*entry).expr, copy(divisor)]);
            }
        }
        let keep = copy(plan.keep);
        (*copy_).aggfilter = match plan.filter {
            None => keep,
            Some(filter) => pg_sys::make_andclause(list(&[copy(filter.cast()), keep])),
        };
        copy_.cast()
    }
}

/// The expression of the select-list entry that GROUP BY reference `reference` names.
unsafe fn grouped_expression(query: &pg_sys::Query, reference: u32) -> *mut pg_sys::Expr {
    // SAFETY: a parsed GROUP BY refers to an entry of the select list.
    unsafe {
        PgList::<pg_sys::TargetEntry>::from_pg(query.targetList)
            .iter_ptr()
            .find(|&entry| (*entry).ressortgroupref == reference)
            .map(|entry| (*entry).expr)
            .expect("GROUP BY refers to the select list")
    }
}
