//! Rows of several protected tables joined on the unit: each joined row then belongs to
//! one unit. The join's equalities (WHERE and ON, through AND) link the tables' unit
//! columns; an outer join's missing side is NULL, so the joined row's unit is the
//! COALESCE of the sides. Joined any other way, rows of different units meet: refused.

use super::follow::{refusal, Source};
use crate::error::Error;
use pgrx::pg_sys::{self, NodeTag};
use pgrx::{is_a, PgList};

/// Tables with privacy units joined on the unit: every one linked to the others by
/// equalities of their unit columns (in WHERE or ON). Each joined row then belongs to
/// one unit, the one its non-NULL unit columns name (an outer join's missing side is
/// NULL): COALESCE of them. Joined any other way, rows of different units meet: refused.
///
/// # Safety
/// `query` must be a valid Query whose rows get their units from `sources`' Vars.
pub(super) unsafe fn joined_on_the_unit(
    query: *mut pg_sys::Query,
    sources: Vec<Source>,
    aggregate: &str,
) -> Result<Source, Error> {
    // SAFETY: quals of a valid Query; nodes are cast after their tags are checked.
    unsafe {
        let mut equalities = Vec::new();
        conjuncts((*query).jointree.cast(), &mut equalities);
        // Union-find over the sources, joined by equalities between their unit columns.
        let mut root: Vec<usize> = (0..sources.len()).collect();
        fn find(root: &mut [usize], i: usize) -> usize {
            if root[i] == i {
                i
            } else {
                let r = find(root, root[i]);
                root[i] = r;
                r
            }
        }
        for (left, right) in equalities {
            if let Some((a, b)) = same_unit(&sources, left, right) {
                let (a, b) = (find(&mut root, a), find(&mut root, b));
                root[a] = b;
            }
        }
        let first = find(&mut root, 0);
        let type_ = pg_sys::exprType(sources[0].expression.cast());
        for (i, source) in sources.iter().enumerate().skip(1) {
            if find(&mut root, i) != first {
                let how = if source.unit.by_reference || sources[0].unit.by_reference {
                    "join them along the foreign key that leads to the unit (referenced.key = referencing.column)".to_string()
                } else {
                    format!(
                        "join them on {}.{} = {}.{}",
                        source.unit.table,
                        source.unit.column,
                        sources[0].unit.table,
                        sources[0].unit.column
                    )
                };
                return Err(refusal(
                    &source.unit,
                    aggregate,
                    &format!(
                        "joined to \"{}\", another table with a privacy unit, other than on the unit: rows of different units would meet; {how} (or join one of them to public tables only)",
                        sources[0].unit.table
                    ),
                ));
            }
            if pg_sys::exprType(source.expression.cast()) != type_ {
                return Err(refusal(
                    &source.unit,
                    aggregate,
                    &format!(
                        "joined to \"{}\" on unit columns of different types: declare units of one type",
                        sources[0].unit.table
                    ),
                ));
            }
        }
        let mut coalesce = pgrx::PgBox::<pg_sys::CoalesceExpr>::alloc_node(NodeTag::T_CoalesceExpr);
        coalesce.coalescetype = type_;
        coalesce.coalescecollid = pg_sys::exprCollation(sources[0].expression.cast());
        coalesce.location = -1;
        for source in &sources {
            coalesce.args = pg_sys::lappend(coalesce.args, source.expression.cast());
        }
        // A joined row whose unit is NULL belongs to the referenced row any side names.
        let identities: Vec<*mut pg_sys::Expr> = sources
            .iter()
            .filter_map(|source| source.null_identity)
            .collect();
        let null_identity = (!identities.is_empty()).then(|| {
            let mut coalesce =
                pgrx::PgBox::<pg_sys::CoalesceExpr>::alloc_node(NodeTag::T_CoalesceExpr);
            coalesce.coalescetype = pg_sys::INT8OID;
            coalesce.location = -1;
            for identity in identities {
                coalesce.args = pg_sys::lappend(coalesce.args, identity.cast());
            }
            coalesce.into_pg().cast()
        });
        Ok(Source {
            unit: sources[0].unit.clone(),
            expression: coalesce.into_pg().cast(),
            keys: Vec::new(),
            relation: None,
            null_identity,
            aliases: Vec::new(),
        })
    }
}

/// The two sources whose rows `left = right` puts in one unit: their unit columns; a
/// foreign key followed to the unit and the key it references (order_items.order_id =
/// orders.id); or two foreign keys to the same key.
///
/// # Safety
/// The sources' expressions and the two arguments must be Vars of one query.
unsafe fn same_unit(
    sources: &[Source],
    left: *mut pg_sys::Var,
    right: *mut pg_sys::Var,
) -> Option<(usize, usize)> {
    // SAFETY: as the caller guarantees.
    unsafe {
        let at = |var: *mut pg_sys::Var| ((*var).varno, (*var).varattno);
        let unit_of = |var| {
            sources.iter().position(|source| {
                at(source.expression as *mut pg_sys::Var) == at(var)
                    || source.aliases.contains(&at(var))
            })
        };
        if let (Some(a), Some(b)) = (unit_of(left), unit_of(right)) {
            return Some((a, b));
        }
        // (source, referenced table, key column) of a followed foreign key column.
        let key_of = |var| {
            sources.iter().enumerate().find_map(|(i, source)| {
                source
                    .keys
                    .iter()
                    .find(|&&(rti, column, _, _)| (rti, column) == at(var))
                    .map(|&(_, _, table, key)| (i, table, key))
            })
        };
        // (source, table, column) of a labelled table's own column.
        let column_of = |var| {
            sources.iter().enumerate().find_map(|(i, source)| {
                source
                    .relation
                    .filter(|&(rti, _)| rti == at(var).0)
                    .map(|(_, table)| (i, table, at(var).1))
            })
        };
        for (a, b) in [(left, right), (right, left)] {
            if let Some((i, table, key)) = key_of(a) {
                if let Some((j, other, column)) = column_of(b) {
                    if (other, column) == (table, key) {
                        return Some((i, j));
                    }
                }
                if let Some((j, other, other_key)) = key_of(b) {
                    if (other, other_key) == (table, key) {
                        return Some((i, j));
                    }
                }
            }
        }
        None
    }
}

/// The equalities between two columns among the AND-ed conditions of a join tree (WHERE
/// and every ON).
///
/// # Safety
/// `node` must be a join tree node of a valid Query, or one of its quals.
unsafe fn conjuncts(
    node: *mut pg_sys::Node,
    found: &mut Vec<(*mut pg_sys::Var, *mut pg_sys::Var)>,
) {
    // SAFETY: nodes are cast after their tags are checked.
    unsafe {
        if node.is_null() {
            return;
        }
        if is_a(node, NodeTag::T_FromExpr) {
            let from = node as *mut pg_sys::FromExpr;
            for item in PgList::<pg_sys::Node>::from_pg((*from).fromlist).iter_ptr() {
                conjuncts(item, found);
            }
            conjuncts((*from).quals, found);
        } else if is_a(node, NodeTag::T_JoinExpr) {
            let join = node as *mut pg_sys::JoinExpr;
            conjuncts((*join).larg, found);
            conjuncts((*join).rarg, found);
            let mut on = Vec::new();
            conjuncts((*join).quals, &mut on);
            // An outer join's ON removes no row of a preserved side: an equality there
            // links two units only if no preserved side holds both (matched rows satisfy
            // it, the others are NULL on the side it names).
            let (left, right) = (range_indexes((*join).larg), range_indexes((*join).rarg));
            let side = |var: *mut pg_sys::Var| {
                (left.contains(&(*var).varno), right.contains(&(*var).varno))
            };
            for (a, b) in on {
                let ((a_left, a_right), (b_left, b_right)) = (side(a), side(b));
                let across = (a_left && b_right) || (a_right && b_left);
                let keeps = match (*join).jointype {
                    pg_sys::JoinType::JOIN_INNER => true,
                    pg_sys::JoinType::JOIN_LEFT => across || (a_right && b_right),
                    pg_sys::JoinType::JOIN_RIGHT => across || (a_left && b_left),
                    _ => across,
                };
                if keeps {
                    found.push((a, b));
                }
            }
        } else if is_a(node, NodeTag::T_BoolExpr) {
            let boolean = node as *mut pg_sys::BoolExpr;
            if (*boolean).boolop == pg_sys::BoolExprType::AND_EXPR {
                for argument in PgList::<pg_sys::Node>::from_pg((*boolean).args).iter_ptr() {
                    conjuncts(argument, found);
                }
            }
        } else if is_a(node, NodeTag::T_OpExpr) {
            let operation = node as *mut pg_sys::OpExpr;
            let arguments = PgList::<pg_sys::Node>::from_pg((*operation).args);
            if let (2, Some(left), Some(right)) =
                (arguments.len(), arguments.get_ptr(0), arguments.get_ptr(1))
            {
                let (left, right) = (strip(left), strip(right));
                if is_a(left, NodeTag::T_Var)
                    && is_a(right, NodeTag::T_Var)
                    && (*(left as *mut pg_sys::Var)).varlevelsup == 0
                    && (*(right as *mut pg_sys::Var)).varlevelsup == 0
                    && is_identity((*operation).opno, (*operation).inputcollid, left, right)
                {
                    found.push((left.cast(), right.cast()));
                }
            }
        }
    }
}

/// Whether `operator` compares two values as the same value: the equality of a built-in
/// btree operator family of one side's type (never an operator an analyst can make,
/// such as one created with MERGES over `>=`), under a deterministic collation.
///
/// # Safety
/// `left` and `right` must be the operator's valid arguments.
unsafe fn is_identity(
    operator: pg_sys::Oid,
    collation: pg_sys::Oid,
    left: *mut pg_sys::Node,
    right: *mut pg_sys::Node,
) -> bool {
    // SAFETY: catalog lookups of existing types, operators and collations.
    unsafe {
        let equality_of = |type_: pg_sys::Oid| {
            let class = pg_sys::GetDefaultOpClass(type_, pg_sys::BTREE_AM_OID);
            if class == pg_sys::InvalidOid {
                return false;
            }
            let family = pg_sys::get_opclass_family(class);
            family.to_u32() < pg_sys::FirstNormalObjectId
                && pg_sys::get_op_opfamily_strategy(operator, family)
                    == pg_sys::BTEqualStrategyNumber as i32
        };
        (equality_of(pg_sys::exprType(left)) || equality_of(pg_sys::exprType(right)))
            && (collation == pg_sys::InvalidOid || pg_sys::get_collation_isdeterministic(collation))
    }
}

/// The range table indexes a join tree node covers (its joins' own included).
///
/// # Safety
/// `node` must be a join tree node of a valid Query.
unsafe fn range_indexes(node: *mut pg_sys::Node) -> Vec<i32> {
    // SAFETY: nodes are cast after their tags are checked.
    unsafe {
        if node.is_null() {
            Vec::new()
        } else if is_a(node, NodeTag::T_RangeTblRef) {
            vec![(*(node as *mut pg_sys::RangeTblRef)).rtindex]
        } else if is_a(node, NodeTag::T_JoinExpr) {
            let join = node as *mut pg_sys::JoinExpr;
            let mut indexes = range_indexes((*join).larg);
            indexes.extend(range_indexes((*join).rarg));
            indexes.push((*join).rtindex);
            indexes
        } else if is_a(node, NodeTag::T_FromExpr) {
            PgList::<pg_sys::Node>::from_pg((*(node as *mut pg_sys::FromExpr)).fromlist)
                .iter_ptr()
                .flat_map(|item| range_indexes(item))
                .collect()
        } else {
            Vec::new()
        }
    }
}

/// An expression without the binary-compatible casts around it.
unsafe fn strip(mut node: *mut pg_sys::Node) -> *mut pg_sys::Node {
    // SAFETY: nodes are cast after their tags are checked.
    unsafe {
        while is_a(node, NodeTag::T_RelabelType) {
            node = (*(node as *mut pg_sys::RelabelType)).arg.cast();
        }
        node
    }
}
