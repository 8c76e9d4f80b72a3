//! Values that compare equal but are spelled differently: numeric 1.0 and 1.00, float
//! -0 and 0, 'A' and 'a' under a case-insensitive collation, interval '1 day' and
//! '24 hours'. An answer that releases a value read from the rows (an item of dp_argmax
//! or dp_top_k without candidates, of dp_top_k_unknown_domain, or a group key that
//! dp_partition selects) is one value to the mechanism, which counts every spelling of
//! it together; but the spelling released was the first row's. One row, one person's,
//! could then decide the answer's bytes with certainty: unbounded privacy loss, outside
//! ε and δ. So a released value is spelled canonically (numeric and floats), or its type
//! must spell equal values alike, or the statement is refused for its types alone, never
//! for its rows (../shared/PRIVACY.md, section 6).

use super::forms::{Aggregate, Family};
use super::items::{array_elements, ItemType};
use super::{raise, OrRaise};
use crate::error::Error;
use pgrx::pg_sys::{self, Datum, Oid};
use pgrx::PgList;

/// How the equal values of a type (under a collation) are spelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spelling {
    /// Equal values have equal bytes: the type's equality is bit or byte equality.
    Alike,
    /// Equal values may differ, and [`Canonical::spell`] gives each value one spelling.
    Canonical(Canonical),
    /// Equal values may differ, with no canonical spelling known here.
    Several,
}

/// The types whose equal values are given one spelling when answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Canonical {
    Scalar(Scalar),
    /// An array of `element`s (spelled alike, or each spelled as `scalar` says), rebuilt:
    /// PostgreSQL's equal arrays have the same bounds and equal elements, but one may
    /// carry a null bitmap without a null (the flag its binary output sends).
    Array {
        element: Oid,
        scalar: Option<Scalar>,
    },
}

/// The scalar types given one spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scalar {
    /// The scale trimmed (trim_scale): 1.0 and 1.00 are 1.
    Numeric,
    /// -0 is 0, and every NaN is the one NaN float4in makes.
    Float4,
    /// As Float4, for float8.
    Float8,
}

/// Whether `collation` compares strings by their bytes (as texteq then does).
pub fn is_deterministic(collation: Oid) -> bool {
    collation == pg_sys::DEFAULT_COLLATION_OID
        || collation == pg_sys::C_COLLATION_OID
        || (collation != pg_sys::InvalidOid
            // SAFETY: a catalog lookup of a collation the statement names; an unknown
            // oid raises an ERROR, never undefined behaviour.
            && unsafe { pg_sys::get_collation_isdeterministic(collation) })
}

/// By-value types whose values are equal exactly when their bits are (so hashed and
/// compared by their bits: items.rs), and spelled alike.
pub const EQUAL_BITS: [Oid; 10] = [
    pg_sys::INT2OID,
    pg_sys::INT4OID,
    pg_sys::INT8OID,
    pg_sys::OIDOID,
    pg_sys::DATEOID,
    pg_sys::TIMEOID,
    pg_sys::TIMESTAMPOID,
    pg_sys::TIMESTAMPTZOID,
    pg_sys::BOOLOID,
    pg_sys::CHAROID,
];

/// How the equal values of `type_oid`, compared under `collation`, are spelled. A domain
/// is spelled as its base type, an array as its elements; composites, ranges, jsonb,
/// interval, bpchar and the types of other extensions are Several (their equality is
/// coarser than their bytes, or unknown here; their text casts spell each value alike).
pub fn spelling(type_oid: Oid, collation: Oid) -> Spelling {
    let scalar = |scalar| Spelling::Canonical(Canonical::Scalar(scalar));
    // The built-in types first, without the catalog (a lookup per group's state).
    match type_oid {
        _ if EQUAL_BITS.contains(&type_oid) => return Spelling::Alike,
        pg_sys::UUIDOID | pg_sys::BYTEAOID => return Spelling::Alike,
        pg_sys::TEXTOID | pg_sys::VARCHAROID if is_deterministic(collation) => {
            return Spelling::Alike
        }
        pg_sys::NUMERICOID => return scalar(Scalar::Numeric),
        pg_sys::FLOAT4OID => return scalar(Scalar::Float4),
        pg_sys::FLOAT8OID => return scalar(Scalar::Float8),
        _ => {}
    }
    // SAFETY: catalog lookups by oid; an unknown oid raises an ERROR.
    let (base, is_enum, element) = unsafe {
        let base = pg_sys::getBaseType(type_oid);
        (
            base,
            pg_sys::type_is_enum(base),
            pg_sys::get_element_type(base),
        )
    };
    if base != type_oid {
        // A domain: its base type's spelling, unless a canonical spelling could break a
        // constraint of the domain (CHECK (scale(VALUE) = 2)).
        return match spelling(base, collation) {
            // SAFETY: a catalog lookup of the domain's constraints.
            Spelling::Canonical(_) if unsafe { pg_sys::DomainHasConstraints(type_oid) } => {
                Spelling::Several
            }
            base => base,
        };
    }
    if is_enum {
        return Spelling::Alike;
    }
    // get_element_type names the element only of a true array (PostgreSQL 14 on: a
    // varlena whose subscripts are array_subscript_handler's), whose datum is an ArrayType.
    if element == pg_sys::InvalidOid {
        return Spelling::Several;
    }
    match spelling(element, collation) {
        Spelling::Alike => Spelling::Canonical(Canonical::Array {
            element,
            scalar: None,
        }),
        Spelling::Canonical(Canonical::Scalar(scalar)) => Spelling::Canonical(Canonical::Array {
            element,
            scalar: Some(scalar),
        }),
        _ => Spelling::Several,
    }
}

/// The refusal of items of a type that spells equal values in several ways, in a form
/// without candidates (whose answers are a row's item).
pub fn item_spellings(type_oid: Oid, collation: Oid) -> Error {
    several_spellings(
        ("items", "cannot be answered without candidates"),
        type_oid,
        collation,
        [
            "cast the items to text (each spelling then its own item), or list the candidates (answered as listed)",
            "compare the items under a deterministic collation (COLLATE \"C\"), or list the candidates (answered as listed)",
        ],
    )
}

/// The refusal of a column of a type that spells equal values in several ways, read per
/// group by a node that dp_partition selects (PostgreSQL reads it from the group's first
/// row).
pub fn group_column_spellings(type_oid: Oid, collation: Oid) -> Error {
    several_spellings(
        (
            "columns",
            "read per group (group keys, output, HAVING) cannot be released by dp_partition's node",
        ),
        type_oid,
        collation,
        [
            "group by a cast to text (each spelling then its own group)",
            "group by the column under a deterministic collation (COLLATE \"C\")",
        ],
    )
}

/// `remedies`: for a type, and for a collation (nondeterministic, or none: a collatable
/// type whose inputs' implicit collations conflict has no collation, and PostgreSQL's
/// hashing of text would raise an ERROR at its first row).
fn several_spellings(
    (values, refusal): (&'static str, &'static str),
    type_oid: Oid,
    collation: Oid,
    remedies: [&'static str; 2],
) -> Error {
    // SAFETY: a catalog lookup of the type the statement names.
    let without_collation =
        collation == pg_sys::InvalidOid && unsafe { pg_sys::type_is_collatable(type_oid) };
    let nondeterministic = collation != pg_sys::InvalidOid && !is_deterministic(collation);
    let remedy = remedies[(nondeterministic || without_collation) as usize];
    let collation = if without_collation {
        " under no collation (its inputs' collations conflict)".to_string()
    } else if !nondeterministic {
        String::new()
    } else {
        // SAFETY: a catalog lookup of the collation the statement names.
        let name = unsafe { pg_sys::get_collation_name(collation) };
        let name = if name.is_null() {
            collation.to_u32().to_string()
        } else {
            // SAFETY: a palloc'd C string.
            unsafe { std::ffi::CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        };
        format!(" under the nondeterministic collation \"{name}\"")
    };
    Error::SeveralSpellings {
        values,
        type_name: crate::extension::items::type_name(type_oid),
        collation,
        refusal,
        remedy,
    }
}

/// Refuses, before any row is read, an aggregation node whose DP call `aggref` would
/// release a value's spelling from the rows: the items of a selection form without
/// candidates, or the group keys of a node that dp_partition selects. Called by the
/// executor hook for every DP call it meters (metering.rs), so the refusal depends on the
/// statement and its plan alone. `combined`: the argument expressions of the call a
/// Citus combine finalizes (its Aggref is Citus's own).
///
/// # Safety
/// `plan` must be the Agg plan node that finalizes `aggref`, a valid Aggref, and
/// `combined` valid expressions.
pub unsafe fn check_released(
    plan: *mut pg_sys::Agg,
    aggref: *mut pg_sys::Aggref,
    combined: Option<&[*mut pg_sys::Expr]>,
    aggregate: &Aggregate,
) {
    // SAFETY: an Aggref's argument types are a list of oids, its input collation an oid;
    // `combined` holds valid expressions (the caller's contract); `plan` is an Agg.
    unsafe {
        match aggregate.family {
            Family::Selection => {
                let (arity, item) = match combined {
                    Some(arguments) => (
                        arguments.len(),
                        arguments.first().map(|&item| {
                            (
                                pg_sys::exprType(item.cast()),
                                pg_sys::exprCollation(item.cast()),
                            )
                        }),
                    ),
                    None => {
                        let types = PgList::<pg_sys::Oid>::from_pg((*aggref).aggargtypes);
                        let item = types.get_oid(0).map(|item| (item, (*aggref).inputcollid));
                        (types.len(), item)
                    }
                };
                if let Some((item_type, collation)) = item {
                    check_items(aggregate, arity, item_type, collation);
                }
            }
            Family::Partition => check_group_columns(plan),
            Family::Quantile(_) => {}
        }
    }
}

/// Refuses, from its plan, a selection call of `arity` arguments whose items (of
/// `item_type`, compared under `collation`) have no hash operator class, or are spelled
/// several ways in a form without candidates (an aggregation's call, or a window's).
pub fn check_items(aggregate: &Aggregate, arity: usize, item_type: Oid, collation: Oid) {
    if aggregate.family != Family::Selection {
        return;
    }
    // PostgreSQL's text hashing would raise this at the first row only: an empty list of
    // candidates answered NULL without rows and failed with them (red team, 2026-11-27).
    // SAFETY: a catalog lookup of the type the plan names.
    if collation == pg_sys::InvalidOid && unsafe { pg_sys::type_is_collatable(item_type) } {
        raise(Error::IndeterminateCollation {
            type_name: crate::extension::items::type_name(item_type),
        });
    }
    let item_type = ItemType::lookup(item_type, collation).or_raise();
    let form = aggregate.form(arity);
    if form.positions.candidates.is_none() && item_type.spelling == Spelling::Several {
        raise(item_spellings(item_type.type_oid, collation));
    }
}

/// Refuses a node that dp_partition selects if a column it reads from its input outside
/// its aggregates (a group key, or a column it outputs or tests in HAVING per group) is
/// of a type spelled several ways: PostgreSQL reads it from the group's first row. The
/// planner can leave a GROUP BY column out of the group keys (one a WHERE clause pins to a
/// constant, PostgreSQL 16 on; one a primary key determines), and still output it.
///
/// # Safety
/// `plan` must be an Agg plan node with its input.
unsafe fn check_group_columns(plan: *mut pg_sys::Agg) {
    // SAFETY: an Agg's group columns are numCols indexes (1-based) into its input's
    // target list, with as many collations; a chained Agg (grouping sets) has its own,
    // into the same input; after set_plan_references the Vars of its target list and
    // qual that read the input are OUTER_VAR Vars, whose varattno indexes the same list.
    unsafe {
        let mut columns: Vec<(i32, Option<pg_sys::Oid>)> = Vec::new();
        let chained = PgList::<pg_sys::Agg>::from_pg((*plan).chain);
        for node in std::iter::once(plan).chain(chained.iter_ptr()) {
            for i in 0..(*node).numCols.max(0) as usize {
                let column = *(*node).grpColIdx.add(i) as i32;
                columns.push((column, Some(*(*node).grpCollations.add(i))));
            }
        }
        let flags = (pg_sys::PVC_INCLUDE_AGGREGATES
            | pg_sys::PVC_INCLUDE_WINDOWFUNCS
            | pg_sys::PVC_RECURSE_PLACEHOLDERS) as i32;
        // The Vars outside aggregates, and in the direct arguments of ordered-set ones
        // (rank(n::text) WITHIN GROUP (...)), evaluated once per group too.
        let mut pending = vec![(*plan).plan.targetlist, (*plan).plan.qual];
        while let Some(list) = pending.pop() {
            let read = pg_sys::pull_var_clause(list.cast(), flags);
            for node in PgList::<pg_sys::Node>::from_pg(read).iter_ptr() {
                if pgrx::is_a(node, pg_sys::NodeTag::T_Aggref) {
                    pending.push((*(node as *mut pg_sys::Aggref)).aggdirectargs);
                } else if pgrx::is_a(node, pg_sys::NodeTag::T_Var) {
                    let var = node as *mut pg_sys::Var;
                    if (*var).varno != pg_sys::OUTER_VAR {
                        raise(Error::NotMetered {
                            reason: "dp_partition's node reads a column that is not its input's"
                                .into(),
                        });
                    }
                    columns.push(((*var).varattno as i32, None));
                }
            }
        }
        let entries = PgList::<pg_sys::TargetEntry>::from_pg((*(*plan).plan.lefttree).targetlist);
        for (column, grouped_by) in columns {
            let entry = usize::try_from(column)
                .ok()
                .and_then(|column| column.checked_sub(1))
                .and_then(|index| entries.get_ptr(index));
            let Some(entry) = entry else {
                raise(Error::NotMetered {
                    reason: format!("dp_partition's node reads column {column} of its input, which its input does not have"),
                });
            };
            let expression = (*entry).expr.cast();
            let value_type = pg_sys::exprType(expression);
            let collation = grouped_by.unwrap_or_else(|| pg_sys::exprCollation(expression));
            if spelling(value_type, collation) != Spelling::Alike {
                raise(group_column_spellings(value_type, collation));
            }
        }
    }
}

impl Canonical {
    /// The one spelling of `value`'s value, in the current memory context when it is not
    /// passed by value.
    ///
    /// # Safety
    /// `value` must be a valid, non-NULL datum of the type.
    pub unsafe fn spell(self, value: Datum) -> Datum {
        match self {
            // SAFETY: as the caller guarantees.
            Canonical::Scalar(scalar) => unsafe { scalar.spell(value) },
            // SAFETY: a valid array of `element`s (the caller's contract), its elements
            // read with their type's layout and rebuilt with the same dimensions and lower
            // bounds (ndim of each, after the header of its detoasted form: ARR_DIMS,
            // ARR_LBOUND); construct_md_array copies what it is given.
            Canonical::Array { element, scalar } => unsafe {
                let (mut length, mut by_value, mut alignment) = (0, false, 0);
                pg_sys::get_typlenbyvalalign(element, &mut length, &mut by_value, &mut alignment);
                let elements = array_elements(value, element, length, by_value, alignment);
                let mut nulls: Vec<bool> = elements.iter().map(Option::is_none).collect();
                let mut values: Vec<Datum> = elements
                    .into_iter()
                    .map(|item| match (item, scalar) {
                        (Some(item), Some(scalar)) => scalar.spell(item),
                        (Some(item), None) => item,
                        (None, _) => Datum::from(0usize),
                    })
                    .collect();
                let array =
                    pg_sys::pg_detoast_datum(value.cast_mut_ptr()) as *mut pg_sys::ArrayType;
                let dimensions = (*array).ndim;
                let dims = array.add(1) as *mut i32;
                let lower_bounds = dims.add(dimensions.max(0) as usize);
                let rebuilt = pg_sys::construct_md_array(
                    values.as_mut_ptr(),
                    nulls.as_mut_ptr(),
                    dimensions,
                    dims,
                    lower_bounds,
                    element,
                    length as i32,
                    by_value,
                    alignment,
                );
                Datum::from(rebuilt)
            },
        }
    }
}

impl Scalar {
    /// As [`Canonical::spell`].
    ///
    /// # Safety
    /// `value` must be a valid, non-NULL datum of the type.
    pub unsafe fn spell(self, value: Datum) -> Datum {
        match self {
            // SAFETY: trim_scale (a built-in, found without the catalog) reads a numeric
            // datum (the caller's contract), returns a new one and raises no ERROR but out
            // of memory.
            Scalar::Numeric => unsafe {
                pg_sys::OidFunctionCall1Coll(
                    pg_sys::Oid::from(pg_sys::F_TRIM_SCALE),
                    pg_sys::InvalidOid,
                    value,
                )
            },
            Scalar::Float4 => {
                let bits = value.value() as u32;
                Datum::from(canonical_float4(f32::from_bits(bits)).to_bits() as usize)
            }
            Scalar::Float8 => {
                let bits = value.value() as u64;
                Datum::from(canonical_float8(f64::from_bits(bits)).to_bits() as usize)
            }
        }
    }
}

/// -0 as 0 and every NaN as one (float8 compares them equal, and its binary output sends
/// their bits).
pub fn canonical_float8(value: f64) -> f64 {
    if value.is_nan() {
        f64::NAN
    } else if value == 0.0 {
        0.0
    } else {
        value
    }
}

/// As [`canonical_float8`], for float4.
pub fn canonical_float4(value: f32) -> f32 {
    if value.is_nan() {
        f32::NAN
    } else if value == 0.0 {
        0.0
    } else {
        value
    }
}

#[cfg(test)]
mod canonical_tests {
    use super::*;

    #[test]
    fn floats_spell_zero_and_nan_once() {
        assert_eq!(canonical_float8(-0.0).to_bits(), 0.0f64.to_bits());
        assert_eq!(canonical_float8(0.0).to_bits(), 0.0f64.to_bits());
        let payload = f64::from_bits(0x7ff8_0000_0000_0001);
        let negative = f64::from_bits(0xfff8_0000_0000_0000);
        for nan in [payload, negative, f64::NAN] {
            assert_eq!(canonical_float8(nan).to_bits(), f64::NAN.to_bits());
        }
        assert_eq!(canonical_float8(-1.5), -1.5);
        assert_eq!(canonical_float8(f64::INFINITY), f64::INFINITY);
        assert_eq!(canonical_float4(-0.0).to_bits(), 0.0f32.to_bits());
        assert_eq!(
            canonical_float4(f32::from_bits(0xffc0_0001)).to_bits(),
            f32::NAN.to_bits()
        );
        assert_eq!(canonical_float4(2.5), 2.5);
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use crate::extension::sql_testing::{column, error_of, run};
    use pgrx::prelude::*;

    const SEVERAL: &str = "values that compare equal can be spelled differently, and the answer would show a row's spelling";
    /// The remedy the refusals give: for a type, or for a nondeterministic collation.
    fn remedy(type_name: &str, items: bool) -> &'static str {
        let collation =
            type_name.contains("nondeterministic") || type_name.contains("no collation");
        match (collation, items) {
            (false, true) => "cast the items to text (each spelling then its own item), or list the candidates (answered as listed)",
            (true, true) => "compare the items under a deterministic collation (COLLATE \"C\"), or list the candidates (answered as listed)",
            (false, false) => "group by a cast to text (each spelling then its own group)",
            (true, false) => "group by the column under a deterministic collation (COLLATE \"C\")",
        }
    }

    fn refused_items(type_name: &str) -> String {
        let remedy = remedy(type_name, true);
        format!("0A000: items of type {type_name} cannot be answered without candidates: {SEVERAL}; {remedy}")
    }

    fn refused_keys(type_name: &str) -> String {
        let remedy = remedy(type_name, false);
        format!("0A000: columns of type {type_name} read per group (group keys, output, HAVING) cannot be released by dp_partition's node: {SEVERAL}; {remedy}")
    }

    /// One row spells its item (or its array) its own way and comes first; 40 rows spell
    /// the same value another way. The answer must not show the first row's spelling,
    /// which it did before (the first row's item was stored and answered).
    #[pg_test]
    fn released_items_are_spelled_canonically() {
        run(&[
            "CREATE TABLE spelled (n numeric, f float8, r real, a int[])",
            "CREATE FUNCTION bitmap_without_null() RETURNS int[] LANGUAGE plpgsql AS $$
               DECLARE a int[] := ARRAY[NULL, 2]; BEGIN a[1] := 1; RETURN a; END $$",
            "INSERT INTO spelled VALUES (1.00, '-0', '-0', bitmap_without_null())",
            "INSERT INTO spelled SELECT 1.0, 0, 0, ARRAY[1, 2] FROM generate_series(1, 40)",
            "INSERT INTO spelled SELECT 2, 2, 2, ARRAY[2] FROM generate_series(1, 10)",
        ]);
        // The row's own spellings, as PostgreSQL keeps them.
        assert_eq!(
            column("SELECT concat_ws(' ', n, float8send(f), float4send(r), array_send(a)) FROM spelled LIMIT 1"),
            ["1.00 \\x8000000000000000 \\x80000000 \\x000000010000000100000017000000020000000100000004000000010000000400000002"]
        );
        let cases = [
            ("dp_argmax(n, 1, 1e6)", "1"),
            ("dp_top_k(n, 1, 1, 1e6)", "{1}"),
            ("dp_top_k_unknown_domain(n, 1, 1, 1e6, 1e-6)", "{1}"),
            ("dp_argmax(n, 1, 1e6, 1, ARRAY[1.000, 2.50])", "1"),
            ("float8send(dp_argmax(f, 1, 1e6))", "\\x0000000000000000"),
            ("float4send(dp_argmax(r, 1, 1e6))", "\\x00000000"),
            ("dp_top_k_unknown_domain(f, 1, 1, 1e6, 1e-6)", "{0}"),
            (
                "array_send(dp_argmax(a, 1, 1e6))",
                "\\x000000010000000000000017000000020000000100000004000000010000000400000002",
            ),
        ];
        for (call, answer) in cases {
            assert_eq!(
                column(&format!("SELECT ({call})::text FROM spelled")),
                [answer],
                "{call}"
            );
        }
        // Two dimensions and their lower bounds kept, each element spelled.
        assert_eq!(
            column(
                "SELECT (array_send(dp_argmax(x, 1, 1e6)) = array_send('[0:1][2:3]={{1,2.5},{3,4}}'::numeric[]))::text
                   FROM (VALUES ('[0:1][2:3]={{1.0,2.50},{3,4.000}}'::numeric[]), ('[0:1][2:3]={{1,2.5},{3,4}}')) v(x)"
            ),
            ["true"]
        );
        // A domain over numeric is spelled canonically, unless a constraint could refuse
        // that spelling.
        run(&[
            "CREATE DOMAIN amount AS numeric",
            "CREATE DOMAIN cents AS numeric CHECK (scale(VALUE) = 2)",
        ]);
        assert_eq!(
            column("SELECT dp_argmax(n::amount, 1, 1e6)::text FROM spelled"),
            ["1"]
        );
        assert_eq!(
            error_of("SELECT dp_argmax(round(n, 2)::cents, 1, 1e6) FROM spelled"),
            refused_items("cents")
        );
        // Arrays of numerics are spelled element by element; NULL elements stay.
        assert_eq!(
            column("SELECT dp_argmax(x, 1, 1e6)::text FROM (VALUES (ARRAY[1.0, NULL]), (ARRAY[1.00, NULL]), (ARRAY[3])) v(x)"),
            ["{1,NULL}"]
        );
    }

    #[pg_test]
    fn items_spelled_several_ways_need_candidates() {
        run(&[
            "CREATE COLLATION ignore_case (provider = icu, locale = 'und-u-ks-level2', deterministic = false)",
            "CREATE TABLE several (t text COLLATE ignore_case, i interval, j jsonb, c char(3), g int, u text COLLATE \"C\")",
            "INSERT INTO several VALUES ('a', '24 hours', '{\"x\": 1.0}', 'ab', 1), ('A', '1 day', '{\"x\": 1.00}', 'ab ', 1)",
            "CREATE TABLE none_yet (LIKE several)",
        ]);
        let calls = [
            (
                "dp_argmax(t, 1, 1.0)",
                "text under the nondeterministic collation \"ignore_case\"",
            ),
            ("dp_top_k(i, 1, 1, 1.0)", "interval"),
            ("dp_top_k_unknown_domain(j, 1, 1, 1.0, 1e-6)", "jsonb"),
            ("dp_argmax(c, 1, 1.0, 1)", "character"),
            ("dp_argmax(ARRAY[i], 1, 1.0)", "interval[]"),
            ("dp_argmax(numrange(g, g + 1), 1, 1.0)", "numrange"),
        ];
        for (call, type_name) in calls {
            // Refused from the statement alone: with rows, without, in a GROUP BY of no
            // group (no final function runs there; the plan is refused), and as a window
            // function over no row.
            for query in [
                format!("SELECT {call} FROM several"),
                format!("SELECT {call} FROM none_yet"),
                format!("SELECT g, {call} FROM none_yet GROUP BY g"),
                format!("SELECT {call} OVER () FROM none_yet"),
            ] {
                assert_eq!(error_of(&query), refused_items(type_name), "{query}");
            }
        }
        // Implicit collations that conflict leave the items without one: refused from the
        // plan in every form (an empty list of candidates answered NULL without rows).
        for call in [
            "dp_argmax(t || u, 1, 1.0)",
            "dp_argmax(t || u, 1, 1.0, 1, '{}')",
            "dp_top_k(t || u, 1, 1, 1.0, 1, ARRAY['a'])",
        ] {
            for table in ["several", "none_yet"] {
                assert_eq!(
                    error_of(&format!("SELECT {call} FROM {table}")),
                    "42P22: could not determine which collation to use for items of type text: their inputs' collations conflict; set one with the COLLATE clause",
                    "{call} FROM {table}"
                );
            }
        }
        // With candidates, the answer is a candidate as listed.
        assert_eq!(
            column("SELECT dp_argmax(t, 1, 1e6, 1, ARRAY['A', 'b']) FROM several"),
            ["A"]
        );
        assert_eq!(
            column("SELECT dp_top_k(i, 1, 1, 1e6, 1, ARRAY['1 day'::interval, '2 days'])::text FROM several"),
            ["{\"1 day\"}"]
        );
        // Cast to text, each spelling is its own item.
        let answer = column("SELECT dp_top_k(t::text COLLATE \"C\", 1, 2, 1e6)::text FROM several");
        assert!(answer == ["{a,A}"] || answer == ["{A,a}"], "{answer:?}");
        // A type without a hash operator class is refused for its plan too.
        assert_eq!(
            error_of("SELECT g, dp_argmax(point(g, g), 1, 1.0) FROM none_yet GROUP BY g"),
            "42883: could not identify a hash function for type point: items must have a default hash operator class"
        );
    }

    #[pg_test]
    fn dp_partition_refuses_group_keys_spelled_several_ways() {
        run(&[
            "CREATE COLLATION ignore_case_keys (provider = icu, locale = 'und-u-ks-level2', deterministic = false)",
            "CREATE TABLE keyed (n numeric, f float8, i interval, t text, a int[], k int)",
            "INSERT INTO keyed VALUES (1.00, '-0', '24 hours', 'A', ARRAY[1], 1), (1.0, 0, '1 day', 'a', ARRAY[1], 1)",
            "CREATE TABLE keyed_empty (LIKE keyed)",
        ]);
        let keys = [
            ("n", "numeric".to_string()),
            ("f", "double precision".to_string()),
            ("i", "interval".to_string()),
            ("a", "integer[]".to_string()),
            (
                "t COLLATE ignore_case_keys",
                "text under the nondeterministic collation \"ignore_case_keys\"".to_string(),
            ),
        ];
        for (key, type_name) in keys {
            for table in ["keyed", "keyed_empty"] {
                let query = format!(
                    "SELECT {key} FROM {table} GROUP BY {key} HAVING dp_partition(1.0, 1e-6)"
                );
                assert_eq!(error_of(&query), refused_keys(&type_name), "{query}");
            }
            // A grouping set that holds it, sorted or hashed.
            for hashed in ["on", "off"] {
                run(&[&format!("SET LOCAL enable_hashagg = {hashed}")]);
                let query = format!(
                    "SELECT k, {key} FROM keyed GROUP BY GROUPING SETS ((k), ({key})) HAVING dp_partition(1.0, 1e-6)"
                );
                assert_eq!(error_of(&query), refused_keys(&type_name), "{query}");
            }
        }
        // A column the planner leaves out of the group keys but reads per group: pinned
        // by WHERE or HAVING (left out from PostgreSQL 16 on), determined by a primary
        // key, or tested in HAVING.
        run(&[
            "ALTER TABLE keyed ADD COLUMN c text COLLATE ignore_case_keys",
            "CREATE TABLE keyed_pk (id int PRIMARY KEY, n numeric)",
        ]);
        let read_per_group = [
            ("SELECT k, n::text FROM keyed WHERE n = 1 GROUP BY k, n HAVING dp_partition(1.0, 1e-6)", "numeric".to_string()),
            ("SELECT k, n::text FROM keyed GROUP BY k, n HAVING n = 1 AND dp_partition(1.0, 1e-6)", "numeric".to_string()),
            ("SELECT k FROM keyed WHERE n = 1 GROUP BY k, n HAVING n::text = '1.00' AND dp_partition(1.0, 1e-6)", "numeric".to_string()),
            (
                "SELECT k, c FROM keyed WHERE c = 'a' GROUP BY k, c HAVING dp_partition(1.0, 1e-6)",
                "text under the nondeterministic collation \"ignore_case_keys\"".to_string(),
            ),
            ("SELECT id, n FROM keyed_pk GROUP BY id, n HAVING dp_partition(1.0, 1e-6)", "numeric".to_string()),
            (
                "SELECT k, rank(n::text) WITHIN GROUP (ORDER BY '1.0'::text) FROM keyed WHERE n = 1 GROUP BY k, n HAVING dp_partition(1.0, 1e-6)",
                "numeric".to_string(),
            ),
        ];
        for (query, type_name) in read_per_group {
            assert_eq!(error_of(query), refused_keys(&type_name), "{query}");
        }
        // Keys spelled alike are selected as before.
        for key in ["n::text", "k", "t", "t COLLATE \"C\""] {
            let query = format!("SELECT count(*) FROM (SELECT {key} FROM keyed GROUP BY {key} HAVING dp_partition(1.0, 1e-6)) s");
            assert_eq!(error_of(&query), "no error", "{query}");
        }
    }
}
