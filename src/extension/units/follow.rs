//! From a query level with DP aggregates to the unit column of the protected table its
//! rows come from.
//!
//! A unit is followed only where each row keeps its own unit: a protected table in FROM,
//! or a FROM subquery (a view, once expanded) that filters and projects rows one by one,
//! to which the unit is added as a column. Where rows of different units are combined
//! before the DP aggregate (an aggregate, DISTINCT, a window function, LIMIT, a set
//! operation, a WITH query or a subquery in an expression), the unit is lost: refused,
//! never answered per row. A subquery that itself finalizes DP aggregates gives
//! releases, not rows: public (ungrouped, with no other aggregate; a grouped one's keys
//! are rows of the table).

use super::labels::{unit_of, Unit};
use super::{dp_calls, is_empty_list};
use crate::error::Error;
use pgrx::pg_sys::{self, NodeTag};
use pgrx::{is_a, PgList};
use std::ffi::{c_void, CString};

/// A foreign key column the unit was followed along: (entry, column, referenced table,
/// its key column).
pub type FollowedKey = (i32, i16, pg_sys::Oid, i16);

/// Where a query level's rows get their unit: the table's declaration and the unit as an
/// expression of the level's own rows.
pub struct Source {
    pub unit: Unit,
    pub expression: *mut pg_sys::Expr,
    /// Foreign key columns the unit was followed along, (entry, column, referenced
    /// table, its key column): an equality of one with that key joins on the unit.
    pub keys: Vec<FollowedKey>,
    /// The entry and table, when the rows are a labelled table's own (one row per value
    /// of a unique key).
    pub relation: Option<(i32, pg_sys::Oid)>,
    /// Other columns (entry, column) that hold the unit itself: a view's own copy of its
    /// table's unit column, which a join condition names.
    pub aliases: Vec<(i32, i16)>,
    /// Who a row whose unit is NULL belongs to, as a bigint: the referenced row's key
    /// (all rows that reach it are its unit). None: each such row is a unit of its own.
    pub null_identity: Option<*mut pg_sys::Expr>,
}

/// The refusal of rows of `unit`'s table that reach `aggregate` as `reason` says.
pub fn refusal(unit: &Unit, aggregate: &str, reason: &str) -> Error {
    Error::UnitNotFollowed {
        table: unit.table.clone(),
        column: unit.column.clone(),
        aggregate: aggregate.into(),
        reason: reason.into(),
    }
}

/// The unit of `query`'s rows, None when they hold no protected row.
///
/// # Safety
/// `query` must be a valid Query being planned; `enclosing` lists the queries around it.
pub unsafe fn unit_of_query(
    query: *mut pg_sys::Query,
    enclosing: &mut Vec<*mut pg_sys::Query>,
    aggregate: &str,
) -> Result<Option<Source>, Error> {
    let mut sources: Vec<Source> = Vec::new();
    // SAFETY: the range table holds RangeTblEntries of this query; the catalog lookups
    // read existing relations.
    unsafe {
        note_protected_ctes(enclosing);
        note_protected_ctes(&[query]);
        // Collected first: following a foreign key adds entries to the range table.
        let rtable: Vec<*mut pg_sys::RangeTblEntry> =
            PgList::<pg_sys::RangeTblEntry>::from_pg((*query).rtable)
                .iter_ptr()
                .collect();
        for (index, &rte) in rtable.iter().enumerate() {
            let rti = (index + 1) as i32;
            // A row-level security policy's condition is a WHERE the reader did not write:
            // a subquery over a labelled table there decides which rows come through.
            if let Some(unit) = first_protected((*rte).securityQuals.cast()) {
                return Err(refusal(&unit, aggregate, "through a row-level security policy whose condition has a subquery over it, which combines rows of different units: write the policy without subqueries over labelled tables"));
            }
            match (*rte).rtekind {
                pg_sys::RTEKind::RTE_RELATION => {
                    if let Some(unit) = unit_of((*rte).relid) {
                        if unit.attribute == super::labels::DISAGREEING_TREE {
                            return Err(refusal(&unit, aggregate, "through a partition or inheritance tree whose tables label differently named columns as their unit: label one column name throughout"));
                        }
                        if unit.attribute <= 0 {
                            return Err(refusal(&unit, aggregate, "through a parent table that lacks the unit column of its labelled child: label a column of the parent that every child has"));
                        }
                        // A join along a key to this table joins one row only if the
                        // key's unique index covers every row it reads: not with
                        // inheritance children, whose rows the index does not see.
                        let one_row_per_key = !(*rte).inh
                            || pg_sys::get_rel_relkind((*rte).relid)
                                == pg_sys::RELKIND_PARTITIONED_TABLE as std::ffi::c_char
                            || !super::labels::has_children((*rte).relid);
                        if unit.by_reference {
                            let mut source = super::keys::followed_unit(
                                query,
                                rti,
                                (*rte).relid,
                                unit,
                                aggregate,
                            )?;
                            source.relation = one_row_per_key.then_some((rti, (*rte).relid));
                            sources.push(source);
                        } else {
                            let expression = column_var((*rte).relid, rti, unit.attribute);
                            sources.push(Source {
                                unit,
                                expression,
                                keys: Vec::new(),
                                relation: one_row_per_key.then_some((rti, (*rte).relid)),
                                null_identity: None,
                                aliases: Vec::new(),
                            });
                        }
                    }
                }
                pg_sys::RTEKind::RTE_SUBQUERY => {
                    let subquery = (*rte).subquery;
                    let Some(unit) = first_protected(subquery.cast()) else {
                        continue;
                    };
                    if let Some(reason) = combines_rows(subquery) {
                        return Err(refusal(&unit, aggregate, reason));
                    }
                    enclosing.push(query);
                    let inner = unit_of_query(subquery, enclosing, aggregate);
                    enclosing.pop();
                    let Some(inner) = inner? else {
                        continue;
                    };
                    // The unit's column is added to the subquery's output: a whole-row
                    // reference to it would then carry each row's unit into the call.
                    if reads_whole_row(query, rti) {
                        return Err(refusal(&unit, aggregate, "through a whole-row reference to a subquery or view over it (s, s.*, to_jsonb(s)), which would carry each row's unit: name the columns instead"));
                    }
                    // The subquery's own columns that copy the unit or a followed key
                    // (before the unit's column is added).
                    let (aliases, keys) = copies(subquery, rti, &inner);
                    let attribute = add_column(subquery, rte, inner.expression);
                    let expression = pg_sys::makeVar(
                        rti,
                        attribute,
                        pg_sys::exprType(inner.expression.cast()),
                        pg_sys::exprTypmod(inner.expression.cast()),
                        pg_sys::exprCollation(inner.expression.cast()),
                        0,
                    );
                    sources.push(Source {
                        unit: inner.unit,
                        expression: expression.cast(),
                        keys,
                        relation: None,
                        aliases,
                        null_identity: inner.null_identity.map(|identity| {
                            let attribute = add_column(subquery, rte, identity);
                            pg_sys::makeVar(
                                rti,
                                attribute,
                                pg_sys::INT8OID,
                                -1,
                                pg_sys::InvalidOid,
                                0,
                            )
                            .cast()
                        }),
                    });
                }
                pg_sys::RTEKind::RTE_CTE => {
                    if let Some(unit) = protected_cte(query, enclosing, rte) {
                        return Err(refusal(&unit, aggregate, "through a WITH query: write it as a subquery in FROM, where the unit can be followed"));
                    }
                }
                pg_sys::RTEKind::RTE_FUNCTION
                | pg_sys::RTEKind::RTE_TABLEFUNC
                | pg_sys::RTEKind::RTE_VALUES => {
                    let expressions = [
                        (*rte).functions as *mut pg_sys::Node,
                        (*rte).values_lists.cast(),
                        (*rte).tablefunc.cast(),
                    ];
                    if let Some(unit) = expressions.into_iter().find_map(|e| first_protected(e)) {
                        return Err(refusal(&unit, aggregate, "through a subquery inside a function or VALUES list in FROM, which combines rows of different units: join the table instead"));
                    }
                }
                _ => {}
            }
        }
        // Subqueries in expressions: WHERE and ON, the select list, HAVING.
        for expressions in [
            (*query).jointree as *mut pg_sys::Node,
            (*query).targetList.cast(),
            (*query).havingQual,
        ] {
            if let Some(unit) = first_protected(expressions) {
                return Err(refusal(&unit, aggregate, "through a subquery in WHERE, ON, the select list or HAVING (IN, EXISTS or a scalar subquery), which combines rows of different units: join the table in FROM instead"));
            }
        }
        // Which rows a table sample keeps, and a window's frame: likewise.
        let samples = rtable
            .iter()
            .map(|&rte| (*rte).tablesample as *mut pg_sys::Node);
        let frames = PgList::<pg_sys::WindowClause>::from_pg((*query).windowClause)
            .iter_ptr()
            .flat_map(|window| [(*window).startOffset, (*window).endOffset])
            .collect::<Vec<_>>();
        if let Some(unit) = samples.chain(frames).find_map(|e| first_protected(e)) {
            return Err(refusal(&unit, aggregate, "through a subquery in TABLESAMPLE or in a window's frame, which combines rows of different units: give a constant"));
        }
        // How many rows come out must not depend on protected rows either.
        for expressions in [(*query).limitCount, (*query).limitOffset] {
            if let Some(unit) = first_protected(expressions) {
                return Err(refusal(&unit, aggregate, "through a subquery in LIMIT or OFFSET: the number of rows released would depend on its rows; give a constant"));
            }
        }
    }
    let source = match sources.len() {
        0 => return Ok(None),
        1 => sources.pop().expect("one source"),
        // SAFETY: the sources' expressions are Vars of this query.
        _ => unsafe { super::joins::joined_on_the_unit(query, sources, aggregate) }?,
    };
    // The unit is read above the level's joins, where an outer join may null it.
    // SAFETY: expressions over this query's range table, made for this source.
    unsafe {
        crate::extension::versions::mark_nullable(query, source.expression.cast());
        if let Some(identity) = source.null_identity {
            crate::extension::versions::mark_nullable(query, identity.cast());
        }
    }
    Ok(Some(source))
}

/// Why a subquery's rows no longer each belong to one unit, if they do not.
///
/// # Safety
/// `query` must be a valid Query.
unsafe fn combines_rows(query: *mut pg_sys::Query) -> Option<&'static str> {
    // SAFETY: fields of a valid Query.
    unsafe {
        let q = &*query;
        if q.hasAggs
            || !is_empty_list(q.groupClause)
            || !q.havingQual.is_null()
            || !is_empty_list(q.groupingSets)
        {
            Some("after an aggregate or GROUP BY in a subquery combined rows of different units: apply the DP aggregate to the table's rows directly (it sums each unit's rows itself)")
        } else if !is_empty_list(q.distinctClause) {
            Some("after DISTINCT in a subquery combined rows of different units: apply the DP aggregate to the table's rows directly (a unit counts once per item already)")
        } else if q.hasWindowFuncs {
            Some("after a window function in a subquery combined rows of different units: compute per-row values without window functions")
        } else if !q.setOperations.is_null() {
            Some("through UNION, INTERSECT or EXCEPT, which is not supported with privacy units yet: query each table separately")
        } else if !q.limitCount.is_null() || !q.limitOffset.is_null() {
            Some("after LIMIT or OFFSET in a subquery, which keeps rows depending on other units: remove it")
        } else {
            None
        }
    }
}

/// The unit of the WITH query a CTE reference reads, if it reads protected rows.
///
/// # Safety
/// `rte` must be an RTE_CTE of `query`; `enclosing` lists the queries around it.
unsafe fn protected_cte(
    query: *mut pg_sys::Query,
    enclosing: &[*mut pg_sys::Query],
    rte: *mut pg_sys::RangeTblEntry,
) -> Option<Unit> {
    // SAFETY: ctelevelsup counts levels out from `query`; cteList holds CommonTableExprs.
    unsafe {
        let up = (*rte).ctelevelsup as usize;
        let owner = if up == 0 {
            query
        } else {
            *enclosing.get(enclosing.len().checked_sub(up)?)?
        };
        let name = std::ffi::CStr::from_ptr((*rte).ctename);
        PgList::<pg_sys::CommonTableExpr>::from_pg((*owner).cteList)
            .iter_ptr()
            .find(|&cte| std::ffi::CStr::from_ptr((*cte).ctename) == name)
            .and_then(|cte| first_protected((*cte).ctequery))
    }
}

thread_local! {
    /// WITH queries over protected rows, by name, of the queries around the level being
    /// followed (a reference from a sublink deep inside names them by level and name;
    /// matching the name alone errs on the side of refusing).
    static PROTECTED_CTES: std::cell::RefCell<Vec<(std::ffi::CString, Unit)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Notes the WITH queries of `queries` (outermost first) that read protected rows.
///
/// # Safety
/// The queries must be valid Queries being planned.
unsafe fn note_protected_ctes(queries: &[*mut pg_sys::Query]) {
    for &query in queries {
        // SAFETY: cteList holds CommonTableExprs of a valid Query.
        unsafe {
            for cte in PgList::<pg_sys::CommonTableExpr>::from_pg((*query).cteList).iter_ptr() {
                if let Some(unit) = first_protected((*cte).ctequery) {
                    let name = std::ffi::CStr::from_ptr((*cte).ctename).to_owned();
                    PROTECTED_CTES.with(|ctes| ctes.borrow_mut().push((name, unit)));
                }
            }
        }
    }
}

/// The unit of a WITH query over protected rows named `name`, if one is noted.
fn protected_cte_named(name: &std::ffi::CStr) -> Option<Unit> {
    PROTECTED_CTES.with(|ctes| {
        ctes.borrow()
            .iter()
            .find(|(cte, _)| cte.as_c_str() == name)
            .map(|(_, unit)| unit.clone())
    })
}

/// Forgets the noted WITH queries: a new statement is being planned.
pub fn forget_protected_ctes() {
    PROTECTED_CTES.with(|ctes| ctes.borrow_mut().clear());
}

/// The first protected table whose rows `node` (a Query, an expression, a range table
/// entry) reads, skipping queries that finalize DP aggregates (their output is a release).
///
/// # Safety
/// `node` must be a valid node of a query being planned.
pub unsafe fn first_protected(node: *mut pg_sys::Node) -> Option<Unit> {
    let mut found: Option<Unit> = None;
    // SAFETY: the walker's context is `found`.
    unsafe { protected_walker(node, (&mut found as *mut Option<Unit>).cast()) };
    found
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn protected_walker(
    node: *mut pg_sys::Node,
    context: *mut c_void,
) -> bool {
    // SAFETY: the context is first_protected's Option<Unit>; nodes are cast after their
    // tags are checked.
    unsafe {
        if node.is_null() {
            return false;
        }
        if is_a(node, NodeTag::T_Query) {
            if dp_calls(node.cast()).release_only(node.cast()) {
                return false;
            }
            return pg_sys::query_tree_walker(
                node.cast(),
                Some(protected_walker),
                context,
                pg_sys::QTW_EXAMINE_RTES_BEFORE as i32,
            );
        }
        if is_a(node, NodeTag::T_RangeTblEntry) {
            let rte = node as *mut pg_sys::RangeTblEntry;
            if (*rte).rtekind == pg_sys::RTEKind::RTE_RELATION {
                if let Some(unit) = unit_of((*rte).relid) {
                    *(context as *mut Option<Unit>) = Some(unit);
                    return true;
                }
            }
            if (*rte).rtekind == pg_sys::RTEKind::RTE_CTE {
                if let Some(unit) = protected_cte_named(std::ffi::CStr::from_ptr((*rte).ctename)) {
                    *(context as *mut Option<Unit>) = Some(unit);
                    return true;
                }
            }
            // Other entries: range_table_walker walks their queries and expressions next.
            return false;
        }
        pg_sys::expression_tree_walker(node, Some(protected_walker), context)
    }
}

/// A column of a relation as a Var of range table entry `rti`.
///
/// # Safety
/// `relation` must exist and have column `attribute`.
pub unsafe fn column_var(relation: pg_sys::Oid, rti: i32, attribute: i16) -> *mut pg_sys::Expr {
    // SAFETY: a catalog lookup of an existing column.
    unsafe {
        let (mut typid, mut typmod, mut collation) = (pg_sys::InvalidOid, -1, pg_sys::InvalidOid);
        pg_sys::get_atttypetypmodcoll(relation, attribute, &mut typid, &mut typmod, &mut collation);
        pg_sys::makeVar(rti, attribute, typid, typmod, collation, 0).cast()
    }
}

/// The output columns of `subquery` (read as entry `rti`) that copy `inner`'s unit, and
/// those that copy a foreign key it was followed along.
///
/// # Safety
/// `subquery` must be the valid Query whose rows `inner` describes.
unsafe fn copies(
    subquery: *mut pg_sys::Query,
    rti: i32,
    inner: &Source,
) -> (Vec<(i32, i16)>, Vec<FollowedKey>) {
    // SAFETY: target entries of a valid Query; Vars are read after their tags are checked.
    unsafe {
        let mut units = inner.aliases.clone();
        if is_a(inner.expression.cast(), NodeTag::T_Var) {
            let var = inner.expression as *mut pg_sys::Var;
            units.push(((*var).varno, (*var).varattno));
        }
        let (mut aliases, mut keys) = (Vec::new(), Vec::new());
        for entry in PgList::<pg_sys::TargetEntry>::from_pg((*subquery).targetList).iter_ptr() {
            let expression = (*entry).expr as *mut pg_sys::Node;
            if (*entry).resjunk
                || !is_a(expression, NodeTag::T_Var)
                || (*(expression as *mut pg_sys::Var)).varlevelsup != 0
            {
                continue;
            }
            let var = expression as *mut pg_sys::Var;
            let column = ((*var).varno, (*var).varattno);
            if units.contains(&column) {
                aliases.push((rti, (*entry).resno));
            }
            for &(key_rti, key_column, table, key) in &inner.keys {
                if (key_rti, key_column) == column {
                    keys.push((rti, (*entry).resno, table, key));
                }
            }
        }
        (aliases, keys)
    }
}

/// Whether `query`, or a query inside it, reads a whole row of its range table entry
/// `rti` (a Var of attribute 0).
///
/// # Safety
/// `query` must be a valid Query of a query being planned.
unsafe fn reads_whole_row(query: *mut pg_sys::Query, rti: i32) -> bool {
    let mut whole_row = WholeRow {
        rti,
        depth: 0,
        found: false,
    };
    // SAFETY: the walker's context is the WholeRow.
    unsafe {
        pg_sys::query_tree_walker(
            query,
            Some(whole_row_walker),
            (&mut whole_row as *mut WholeRow).cast(),
            0,
        );
    }
    whole_row.found
}

/// What [`whole_row_walker`] looks for, and how many subqueries deep it is.
struct WholeRow {
    rti: i32,
    depth: u32,
    found: bool,
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn whole_row_walker(
    node: *mut pg_sys::Node,
    context: *mut c_void,
) -> bool {
    // SAFETY: the context is reads_whole_row's WholeRow; nodes are cast after their tags
    // are checked.
    unsafe {
        if node.is_null() {
            return false;
        }
        let whole_row = &mut *(context as *mut WholeRow);
        if is_a(node, NodeTag::T_Query) {
            whole_row.depth += 1;
            let found = pg_sys::query_tree_walker(node.cast(), Some(whole_row_walker), context, 0);
            whole_row.depth -= 1;
            return found;
        }
        if is_a(node, NodeTag::T_Var) {
            let var = node as *mut pg_sys::Var;
            if (*var).varno == whole_row.rti
                && (*var).varattno == 0
                && (*var).varlevelsup == whole_row.depth
            {
                whole_row.found = true;
                return true;
            }
            return false;
        }
        pg_sys::expression_tree_walker(node, Some(whole_row_walker), context)
    }
}

/// Adds `expression` (of the subquery's rows) to the subquery's output, after its other
/// columns; its column number in the entry `rte` that reads the subquery.
///
/// # Safety
/// `rte` must be the RTE_SUBQUERY whose query is `subquery`.
unsafe fn add_column(
    subquery: *mut pg_sys::Query,
    rte: *mut pg_sys::RangeTblEntry,
    expression: *mut pg_sys::Expr,
) -> i16 {
    // SAFETY: target lists hold TargetEntries; resjunk entries come after the others, and
    // move one place on; names are palloc'd.
    unsafe {
        let entries = PgList::<pg_sys::TargetEntry>::from_pg((*subquery).targetList);
        let columns = entries.iter_ptr().filter(|&e| !(*e).resjunk).count();
        for entry in entries.iter_ptr().filter(|&e| (*e).resjunk) {
            (*entry).resno += 1;
        }
        let name = CString::new("privacy_unit").expect("no NUL");
        let resno = (columns + 1) as i16;
        let entry =
            pg_sys::makeTargetEntry(expression, resno, pg_sys::pstrdup(name.as_ptr()), false);
        (*subquery).targetList =
            pg_sys::list_insert_nth((*subquery).targetList, columns as i32, entry.cast());
        let eref = (*rte).eref;
        (*eref).colnames = pg_sys::lappend(
            (*eref).colnames,
            pg_sys::makeString(pg_sys::pstrdup(name.as_ptr())).cast(),
        );
        resno
    }
}
