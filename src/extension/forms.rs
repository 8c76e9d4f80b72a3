//! One description of each aggregate form, and everything that follows from it: the SQL
//! that creates the aggregates and their transition and final functions
//! (`aggregates.sql`, generated from here and checked by a test), and where the
//! transition and final functions find each parameter.
//!
//! Plain Rust: no database types.

#[cfg(test)]
use std::fmt::Write;

/// A parameter of an aggregate: an argument the analyst writes, the same on every row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parameter {
    K,
    Epsilon,
    Delta,
    MaxScore,
    Candidates,
    KBar,
    Alpha,
    Alphas,
    Lo,
    Hi,
}

// Names, SQL types and comments are read when aggregates.sql is generated, by a test.
#[cfg_attr(not(test), allow(dead_code))]
impl Parameter {
    pub const fn name(self) -> &'static str {
        match self {
            Parameter::K => "k",
            Parameter::Epsilon => "epsilon",
            Parameter::Delta => "delta",
            Parameter::MaxScore => "max_score",
            Parameter::Candidates => "candidates",
            Parameter::KBar => "k_bar",
            Parameter::Alpha => "alpha",
            Parameter::Alphas => "alphas",
            Parameter::Lo => "lo",
            Parameter::Hi => "hi",
        }
    }

    /// The parameter's SQL type in an aggregate of `family`.
    pub const fn sql_type(self, family: Family) -> &'static str {
        match (self, family) {
            (Parameter::K | Parameter::KBar, _) => "integer",
            (Parameter::Candidates, _) => "anyarray",
            (Parameter::Alphas, _) => "double precision[]",
            (Parameter::Lo | Parameter::Hi, Family::Quantile(value)) => value.bound_type(),
            _ => "double precision",
        }
    }
}

/// The SQL type of a quantile aggregate's values, which is also the type of its answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ValueType {
    Float,
    Smallint,
    Integer,
    Bigint,
    /// numeric: located on the float grid (converted without error), answered in numeric.
    Numeric,
}

#[cfg_attr(not(test), allow(dead_code))]
impl ValueType {
    pub const fn sql_type(self) -> &'static str {
        match self {
            ValueType::Float => "double precision",
            ValueType::Smallint => "smallint",
            ValueType::Integer => "integer",
            ValueType::Bigint => "bigint",
            ValueType::Numeric => "numeric",
        }
    }

    /// The type of lo and hi: bigint for every integer type, so that integer literals
    /// pick the overload of the column's own type.
    pub const fn bound_type(self) -> &'static str {
        match self {
            ValueType::Float | ValueType::Numeric => "double precision",
            _ => "bigint",
        }
    }

    /// The range of an integer type (None for float).
    pub const fn range(self) -> Option<(i64, i64)> {
        match self {
            ValueType::Float | ValueType::Numeric => None,
            ValueType::Smallint => Some((i16::MIN as i64, i16::MAX as i64)),
            ValueType::Integer => Some((i32::MIN as i64, i32::MAX as i64)),
            ValueType::Bigint => Some((i64::MIN, i64::MAX)),
        }
    }
}

/// The two kinds of aggregate state, each with its own row arguments and support
/// functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Per-item scores (dp_argmax, dp_top_k, dp_top_k_unknown_domain): rows give an item
    /// and a score.
    Selection,
    /// A histogram on the public grid (dp_quantile, dp_quantiles): rows give a value of
    /// this type.
    Quantile(ValueType),
    /// A row count (dp_partition): rows give nothing but themselves.
    Partition,
}

impl Family {
    /// The arguments each row gives, before the parameters: (name, SQL type).
    pub const fn row_arguments(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Family::Selection => &[("item", "anyelement"), ("score", "double precision")],
            Family::Quantile(ValueType::Float) => &[("value", "double precision")],
            Family::Quantile(ValueType::Smallint) => &[("value", "smallint")],
            Family::Quantile(ValueType::Integer) => &[("value", "integer")],
            Family::Quantile(ValueType::Bigint) => &[("value", "bigint")],
            Family::Quantile(ValueType::Numeric) => &[("value", "numeric")],
            Family::Partition => &[],
        }
    }
}

/// Where each parameter stands among a form's arguments (0-based, as written in the
/// call); None where the form does not have it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Positions {
    pub k: Option<usize>,
    pub epsilon: usize,
    pub delta: Option<usize>,
    pub max_score: Option<usize>,
    pub candidates: Option<usize>,
    pub k_bar: Option<usize>,
    /// alpha or alphas.
    pub alpha: Option<usize>,
    pub lo: Option<usize>,
    pub hi: Option<usize>,
}

/// One form of an aggregate: its parameters in order, and what `\df+` shows of it.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(test), allow(dead_code))]
pub struct Form {
    pub family: Family,
    pub parameters: &'static [Parameter],
    pub positions: Positions,
    pub comment: &'static str,
}

impl Form {
    const fn new(family: Family, parameters: &'static [Parameter], comment: &'static str) -> Self {
        let first = family.row_arguments().len();
        let mut positions = Positions {
            k: None,
            epsilon: usize::MAX,
            delta: None,
            max_score: None,
            candidates: None,
            k_bar: None,
            alpha: None,
            lo: None,
            hi: None,
        };
        let mut i = 0;
        while i < parameters.len() {
            let at = Some(first + i);
            match parameters[i] {
                Parameter::K => positions.k = at,
                Parameter::Epsilon => positions.epsilon = first + i,
                Parameter::Delta => positions.delta = at,
                Parameter::MaxScore => positions.max_score = at,
                Parameter::Candidates => positions.candidates = at,
                Parameter::KBar => positions.k_bar = at,
                Parameter::Alpha | Parameter::Alphas => positions.alpha = at,
                Parameter::Lo => positions.lo = at,
                Parameter::Hi => positions.hi = at,
            }
            i += 1;
        }
        assert!(positions.epsilon != usize::MAX, "every form has epsilon");
        Form {
            family,
            parameters,
            positions,
            comment,
        }
    }

    /// How many arguments the aggregate takes in this form.
    #[inline]
    pub const fn arity(&self) -> usize {
        self.family.row_arguments().len() + self.parameters.len()
    }

    /// "item anyelement, score double precision, epsilon double precision".
    #[cfg(test)]
    fn sql_arguments(&self) -> String {
        self.arguments()
            .map(|(name, sql_type)| format!("{name} {sql_type}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// "anyelement, double precision, double precision".
    #[cfg(test)]
    fn sql_types(&self) -> String {
        self.arguments()
            .map(|(_, sql_type)| sql_type)
            .collect::<Vec<_>>()
            .join(", ")
    }

    #[cfg(test)]
    fn arguments(&self) -> impl Iterator<Item = (&'static str, &'static str)> + '_ {
        let family = self.family;
        let parameters = self
            .parameters
            .iter()
            .map(move |p| (p.name(), p.sql_type(family)));
        self.family
            .row_arguments()
            .iter()
            .copied()
            .chain(parameters)
    }
}

/// An aggregate and its forms.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(test), allow(dead_code))]
pub struct Aggregate {
    pub name: &'static str,
    /// The prefix of its support functions (`{key}_trans`, `{key}_final`): the name, or
    /// for an overload on another value type the name and the type.
    pub key: &'static str,
    pub family: Family,
    /// The SQL type of the answer.
    pub returns: &'static str,
    pub forms: &'static [Form],
}

impl Aggregate {
    /// The form called with `arity` arguments. PostgreSQL calls the support functions
    /// only through the aggregates `aggregates.sql` creates, one per form.
    #[inline]
    pub fn form(&self, arity: usize) -> &'static Form {
        self.forms
            .iter()
            .find(|form| form.arity() == arity)
            .unwrap_or_else(|| panic!("{} has no form of {arity} arguments", self.name))
    }
}

use Parameter::*;

const ARGMAX: Form = Form::new(
    Family::Selection,
    &[Epsilon],
    "Differentially private most common item: item i with probability proportional to exp(epsilon * count(i)). Each row adds clamp(score, 0, 1) to its item. epsilon-DP for one row added or removed; the set of items that can win comes from the data (use the candidates form when items are private). NULL when no row.",
);
const ARGMAX_SCORED: Form = Form::new(
    Family::Selection,
    &[Epsilon, MaxScore],
    "Differentially private argmax: item i with probability proportional to exp(epsilon * S(i) / max_score), S(i) = sum of clamp(score, 0, max_score) over the rows of i. epsilon-DP for one row added or removed; the set of items that can win comes from the data (use the candidates form when items are private). NULL when no row.",
);
const ARGMAX_CANDIDATES: Form = Form::new(
    Family::Selection,
    &[Epsilon, MaxScore, Candidates],
    "Differentially private argmax over a public list of candidates: only listed items can win, listed items without rows score 0, rows of other items are ignored. epsilon-DP for one row added or removed, also when the items are private. With no row: a uniformly drawn candidate (not NULL, which would reveal the empty input). NULL for an empty list.",
);
const TOP_K: Form = Form::new(
    Family::Selection,
    &[K, Epsilon],
    "Differentially private top k by count: the k items with the largest count(i) + Gumbel noise at temperature k/epsilon, best first (one-shot top-k, equal in distribution to k exponential mechanisms at epsilon/k each). The whole list is epsilon-DP for one row added or removed; the items come from the data (use the candidates form when items are private). NULL when no row.",
);
const TOP_K_SCORED: Form = Form::new(
    Family::Selection,
    &[K, Epsilon, MaxScore],
    "Differentially private top k: scores S(i) = sum of clamp(score, 0, max_score), Gumbel noise at temperature k*max_score/epsilon added once, the k best returned best first. The whole list is epsilon-DP for one row added or removed; the items come from the data (use the candidates form when items are private). NULL when no row.",
);
const TOP_K_CANDIDATES: Form = Form::new(
    Family::Selection,
    &[K, Epsilon, MaxScore, Candidates],
    "Differentially private top k over a public list of candidates (listed items without rows score 0, other items are ignored). The whole list is epsilon-DP for one row added or removed, also when the items are private. With no row: k candidates in uniformly random order. NULL for an empty list.",
);
const UNKNOWN_DOMAIN: Form = Form::new(
    Family::Selection,
    &[K, Epsilon, Delta],
    "(epsilon, delta)-DP top k by count when the items themselves are private (limited-domain mechanism of Durfee and Rogers 2019): the true top k compete with a threshold above the (k+1)-th count; items come out in noisy order until k are out or the threshold comes first. An item with a single row is returned with probability below delta.",
);
const UNKNOWN_DOMAIN_SCORED: Form = Form::new(
    Family::Selection,
    &[K, Epsilon, Delta, MaxScore],
    "(epsilon, delta)-DP top k of S(i) = sum of clamp(score, 0, max_score) when the items themselves are private (limited-domain mechanism of Durfee and Rogers 2019, k_bar = k).",
);
const UNKNOWN_DOMAIN_K_BAR: Form = Form::new(
    Family::Selection,
    &[K, Epsilon, Delta, MaxScore, KBar],
    "(epsilon, delta)-DP top k of S(i) = sum of clamp(score, 0, max_score) when the items themselves are private; the top k_bar items (k_bar >= k) compete with a threshold above the (k_bar+1)-th score (limited-domain mechanism of Durfee and Rogers 2019).",
);
const QUANTILE: Form = Form::new(
    Family::Quantile(ValueType::Float),
    &[Alpha, Lo, Hi, Epsilon],
    "Differentially private alpha-quantile of value on the public grid lo + j*(hi - lo)/K (K = pg_exp_mech.quantile_grid_size, 2^20 by default): grid point c with probability proportional to exp(epsilon * u(c) / (2*max(alpha, 1 - alpha))), u(c) = -|(1 - alpha)*#{x < c} - alpha*#{x > c}|. Values are clamped to [lo, hi] and counted exactly (#{x < c} and #{x > c} as the values lie, at a grid point or strictly between two); NULL and NaN are skipped. epsilon-DP for one row added or removed. No row: a uniform grid point.",
);
const QUANTILES: Form = Form::new(
    Family::Quantile(ValueType::Float),
    &[Alphas, Lo, Hi, Epsilon],
    "Several differentially private quantiles from one scan, epsilon-DP in total, returned in the order of alphas and non-decreasing where the alphas are. By default (pg_exp_mech.quantiles_method = recursive) by recursive splitting (Kaplan, Schnapp and Stemmer 2022): the middle alpha on all values, then each side on its own values, epsilon/ceil(log2(m + 1)) per level; with quantiles_method = split, dp_quantile for each alpha at epsilon/m.",
);

const INTEGER_QUANTILE_COMMENT: &str = "Differentially private alpha-quantile of an integer column, in the column's type: a whole-number grid point c of lo, lo + step, ..., hi (step 1 when hi - lo <= K = pg_exp_mech.quantile_grid_size, otherwise step ceil((hi - lo)/K), at most K steps; the last step may be shorter), drawn with probability proportional to exp(epsilon * u(c) / (2*max(alpha, 1 - alpha))), u(c) = -|(1 - alpha)*#{x < c} - alpha*#{x > c}|, counted exactly. Values are clamped to [lo, hi]; NULL is skipped. epsilon-DP for one row added or removed. No row: a uniform grid point.";
const INTEGER_QUANTILES_COMMENT: &str = "Several differentially private quantiles of an integer column from one scan, in the column's type, on the whole-number grid of dp_quantile over integers: epsilon-DP in total, returned in the order of alphas and non-decreasing where the alphas are (recursive splitting by default, or epsilon/m each with pg_exp_mech.quantiles_method = split).";

/// dp_quantile and dp_quantiles over an integer type.
macro_rules! integer_quantiles {
    ($value:expr, $one:ident, $one_key:literal, $one_type:literal, $many:ident, $many_key:literal, $many_type:literal) => {
        pub const $one: Aggregate = Aggregate {
            name: "dp_quantile",
            key: $one_key,
            family: Family::Quantile($value),
            returns: $one_type,
            forms: &[Form::new(
                Family::Quantile($value),
                &[Alpha, Lo, Hi, Epsilon],
                INTEGER_QUANTILE_COMMENT,
            )],
        };
        pub const $many: Aggregate = Aggregate {
            name: "dp_quantiles",
            key: $many_key,
            family: Family::Quantile($value),
            returns: $many_type,
            forms: &[Form::new(
                Family::Quantile($value),
                &[Alphas, Lo, Hi, Epsilon],
                INTEGER_QUANTILES_COMMENT,
            )],
        };
    };
}

integer_quantiles!(
    ValueType::Smallint,
    DP_QUANTILE_SMALLINT,
    "dp_quantile_smallint",
    "smallint",
    DP_QUANTILES_SMALLINT,
    "dp_quantiles_smallint",
    "smallint[]"
);
integer_quantiles!(
    ValueType::Integer,
    DP_QUANTILE_INTEGER,
    "dp_quantile_integer",
    "integer",
    DP_QUANTILES_INTEGER,
    "dp_quantiles_integer",
    "integer[]"
);
integer_quantiles!(
    ValueType::Bigint,
    DP_QUANTILE_BIGINT,
    "dp_quantile_bigint",
    "bigint",
    DP_QUANTILES_BIGINT,
    "dp_quantiles_bigint",
    "bigint[]"
);

const NUMERIC_QUANTILE_COMMENT: &str = "Differentially private alpha-quantile of a numeric column, in numeric: dp_quantile over double precision on the same grid lo + j*(hi - lo)/K (K = pg_exp_mech.quantile_grid_size), each value converted to double precision without error (beyond its range a value clamps like +-Infinity, a nonzero value below it counts as 0) and the answer, a grid point, converted to numeric by PostgreSQL's own cast (15 significant digits). Values are clamped to [lo, hi]; NULL and NaN are skipped. epsilon-DP for one row added or removed. No row: a uniform grid point.";
const NUMERIC_QUANTILES_COMMENT: &str = "Several differentially private quantiles of a numeric column from one scan, in numeric, on the grid of dp_quantile over numeric: epsilon-DP in total, returned in the order of alphas and non-decreasing where the alphas are (recursive splitting by default, or epsilon/m each with pg_exp_mech.quantiles_method = split).";

pub const DP_QUANTILE_NUMERIC: Aggregate = Aggregate {
    name: "dp_quantile",
    key: "dp_quantile_numeric",
    family: Family::Quantile(ValueType::Numeric),
    returns: "numeric",
    forms: &[Form::new(
        Family::Quantile(ValueType::Numeric),
        &[Alpha, Lo, Hi, Epsilon],
        NUMERIC_QUANTILE_COMMENT,
    )],
};
pub const DP_QUANTILES_NUMERIC: Aggregate = Aggregate {
    name: "dp_quantiles",
    key: "dp_quantiles_numeric",
    family: Family::Quantile(ValueType::Numeric),
    returns: "numeric[]",
    forms: &[Form::new(
        Family::Quantile(ValueType::Numeric),
        &[Alphas, Lo, Hi, Epsilon],
        NUMERIC_QUANTILES_COMMENT,
    )],
};

/// The selection aggregates take numeric scores too, through the same functions: each
/// score is converted to double precision without error (beyond its range it clamps like
/// ±Infinity), never by the implicit cast, which fails on such a value and prints it.
#[cfg(test)]
const NUMERIC_SCORES_COMMENT: &str = " A numeric score is converted to double precision without error (beyond its range it counts as +-Infinity, clamped).";

/// The selection aggregates skip long items (items.rs, MAX_ITEM_BYTES).
#[cfg(test)]
const LONG_ITEMS_COMMENT: &str = " Items longer than 1 MiB (detoasted) are skipped as NULL items are, and left out of the candidates.";
/// The answers of the forms without candidates are the rows' items: what their spelling
/// may show (spellings.rs).
#[cfg(test)]
const SPELLINGS_COMMENT: &str = " Answers are spelled canonically (numeric 1.00 as 1, float -0 as 0); item types that spell one value several ways otherwise (interval, jsonb, char(n), text under a nondeterministic collation) are refused: list the candidates, cast the items to text, or compare them under COLLATE \"C\".";

const PARTITION: Form = Form::new(
    Family::Partition,
    &[Epsilon, Delta],
    "Differentially private partition selection, for HAVING: true for a group of n rows with the optimal probability of Desfontaines, Voss, Gipson and Mandayam (PETS 2022), pi(0) = 0, pi(n) = min(exp(epsilon)*pi(n-1) + delta, 1 - exp(-epsilon)*(1 - pi(n-1) - delta), 1), so that the set of group keys released is (epsilon, delta)-DP for one row added or removed. A one-row group is kept with probability delta. Charged once per execution, whatever the number of groups. Group keys, and every column the node reads per group outside its aggregates, must be of a type that spells each value one way (integers, oid, dates, times, timestamps, booleans, \"char\", uuid, bytea, enums, text and varchar under a deterministic collation, domains over these; not numeric, floats, interval, arrays, jsonb, char(n), ranges, nondeterministic collations): PostgreSQL reads them from the group's first row.",
);

pub const DP_ARGMAX: Aggregate = Aggregate {
    name: "dp_argmax",
    key: "dp_argmax",
    family: Family::Selection,
    returns: "anyelement",
    forms: &[ARGMAX, ARGMAX_SCORED, ARGMAX_CANDIDATES],
};
pub const DP_TOP_K: Aggregate = Aggregate {
    name: "dp_top_k",
    key: "dp_top_k",
    family: Family::Selection,
    returns: "anyarray",
    forms: &[TOP_K, TOP_K_SCORED, TOP_K_CANDIDATES],
};
pub const DP_TOP_K_UNKNOWN_DOMAIN: Aggregate = Aggregate {
    name: "dp_top_k_unknown_domain",
    key: "dp_top_k_unknown_domain",
    family: Family::Selection,
    returns: "anyarray",
    forms: &[UNKNOWN_DOMAIN, UNKNOWN_DOMAIN_SCORED, UNKNOWN_DOMAIN_K_BAR],
};
pub const DP_QUANTILE: Aggregate = Aggregate {
    name: "dp_quantile",
    key: "dp_quantile",
    family: Family::Quantile(ValueType::Float),
    returns: "double precision",
    forms: &[QUANTILE],
};
pub const DP_QUANTILES: Aggregate = Aggregate {
    name: "dp_quantiles",
    key: "dp_quantiles",
    family: Family::Quantile(ValueType::Float),
    returns: "double precision[]",
    forms: &[QUANTILES],
};

pub const DP_PARTITION: Aggregate = Aggregate {
    name: "dp_partition",
    key: "dp_partition",
    family: Family::Partition,
    returns: "boolean",
    forms: &[PARTITION],
};

/// Every aggregate of the extension.
pub const AGGREGATES: &[Aggregate] = &[
    DP_ARGMAX,
    DP_TOP_K,
    DP_TOP_K_UNKNOWN_DOMAIN,
    DP_QUANTILE,
    DP_QUANTILES,
    DP_QUANTILE_SMALLINT,
    DP_QUANTILES_SMALLINT,
    DP_QUANTILE_INTEGER,
    DP_QUANTILES_INTEGER,
    DP_QUANTILE_BIGINT,
    DP_QUANTILES_BIGINT,
    DP_QUANTILE_NUMERIC,
    DP_QUANTILES_NUMERIC,
    DP_PARTITION,
];

/// The text of `aggregates.sql`.
#[cfg(test)]
pub fn sql() -> String {
    let mut sql = String::from(
        "-- Generated from src/extension/forms.rs by its test `aggregates_sql_is_generated_from_the_forms`\n\
         -- (PG_EXP_MECH_WRITE_SQL=1 cargo pgrx test pg15 aggregates_sql rewrites it). Do not edit by hand.\n\
         --\n\
         -- Transition and selection final functions are version-1 C functions, one symbol per\n\
         -- aggregate for all its forms (see arguments.rs). The selection final functions take\n\
         -- the aggregate's arguments too (FINALFUNC_EXTRA), so that they can return the\n\
         -- polymorphic item type. CREATE AGGREGATE records an aggregate as IMMUTABLE: mod.rs\n\
         -- marks them VOLATILE afterwards (two calls are two draws and two charges).\n",
    );
    for aggregate in AGGREGATES {
        // Selection aggregates: double precision scores, then numeric ones.
        let scores: &[&str] = match aggregate.family {
            Family::Selection => &["double precision", "numeric"],
            _ => &["double precision"],
        };
        for (form, score) in aggregate
            .forms
            .iter()
            .flat_map(|form| scores.iter().map(move |score| (form, *score)))
        {
            let (name, key) = (aggregate.name, aggregate.key);
            let numeric_scores = score == "numeric";
            let with_score = |text: String, from: &str, to: &str| {
                if numeric_scores {
                    text.replacen(from, to, 1)
                } else {
                    text
                }
            };
            let arguments = with_score(
                form.sql_arguments(),
                "score double precision",
                "score numeric",
            );
            let types = with_score(
                form.sql_types(),
                "anyelement, double precision",
                "anyelement, numeric",
            );
            let mut comment = form.comment.to_string();
            if aggregate.family == Family::Selection && form.positions.candidates.is_none() {
                comment.push_str(SPELLINGS_COMMENT);
            }
            if aggregate.family == Family::Selection {
                comment.push_str(LONG_ITEMS_COMMENT);
            }
            if numeric_scores {
                comment.push_str(NUMERIC_SCORES_COMMENT);
            }
            if aggregate.family == Family::Partition {
                // The state is PostgreSQL's own row count (regr_count's transition
                // function, strict in epsilon and delta, which the plan checks first).
                let _ = write!(
                    sql,
                    "\nCREATE FUNCTION {name}_final(state bigint, {arguments})\n    \
                     RETURNS boolean AS 'MODULE_PATHNAME', '{name}_final' LANGUAGE C PARALLEL SAFE;\n\
                     CREATE AGGREGATE {name}({arguments}) (\n    \
                     SFUNC = pg_catalog.int8inc_float8_float8, STYPE = bigint, INITCOND = '0',\n    \
                     FINALFUNC = {name}_final, FINALFUNC_EXTRA,\n    \
                     COMBINEFUNC = pg_catalog.int8pl, PARALLEL = SAFE);\n\
                     COMMENT ON AGGREGATE {name}({types}) IS\n'{comment}';\n",
                    comment = comment.replace('\'', "''"),
                );
                continue;
            }
            let _ = write!(
                sql,
                "\nCREATE FUNCTION {key}_trans(state internal, {arguments})\n    \
                 RETURNS internal AS 'MODULE_PATHNAME', '{key}_trans' LANGUAGE C PARALLEL SAFE;\n"
            );
            let (state, final_function) = match aggregate.family {
                Family::Selection => {
                    let returns = aggregate.returns;
                    let _ = write!(
                        sql,
                        "CREATE FUNCTION {name}_final(state internal, {arguments})\n    \
                         RETURNS {returns} AS 'MODULE_PATHNAME', '{name}_final' LANGUAGE C PARALLEL SAFE;\n"
                    );
                    ("dp_item_scores", format!("{name}_final, FINALFUNC_EXTRA"))
                }
                Family::Quantile(_) | Family::Partition => ("dp_quantile", format!("{key}_final")),
            };
            let space = match aggregate.family {
                Family::Selection => 4096,
                Family::Quantile(_) | Family::Partition => 1024,
            };
            let _ = write!(
                sql,
                "CREATE AGGREGATE {name}({arguments}) (\n    \
                 SFUNC = {key}_trans, STYPE = internal, SSPACE = {space},\n    \
                 FINALFUNC = {final_function}, FINALFUNC_MODIFY = READ_ONLY,\n    \
                 COMBINEFUNC = {state}_combine,\n    \
                 SERIALFUNC = {state}_serialize, DESERIALFUNC = {state}_deserialize,\n    \
                 PARALLEL = SAFE);\n\
                 COMMENT ON AGGREGATE {name}({types}) IS\n'{comment}';\n",
                comment = comment.replace('\'', "''"),
            );
        }
    }
    sql
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregates_sql_is_generated_from_the_forms() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/extension/aggregates.sql");
        if std::env::var_os("PG_EXP_MECH_WRITE_SQL").is_some() {
            std::fs::write(path, sql()).unwrap();
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == sql(),
            "{path} is not what forms.rs describes: rewrite it with PG_EXP_MECH_WRITE_SQL=1 cargo pgrx test pg15 aggregates_sql"
        );
    }

    #[test]
    fn positions_follow_the_parameters() {
        let positions = DP_TOP_K_UNKNOWN_DOMAIN.form(7).positions;
        assert_eq!(
            (positions.k, positions.epsilon, positions.delta),
            (Some(2), 3, Some(4))
        );
        assert_eq!(
            (positions.max_score, positions.k_bar, positions.candidates),
            (Some(5), Some(6), None)
        );
        let positions = DP_QUANTILES.form(5).positions;
        assert_eq!(
            (
                positions.alpha,
                positions.lo,
                positions.hi,
                positions.epsilon
            ),
            (Some(1), Some(2), Some(3), 4)
        );
        assert_eq!(DP_ARGMAX.form(5).positions.candidates, Some(4));
        for aggregate in AGGREGATES {
            let mut arities: Vec<usize> = aggregate.forms.iter().map(Form::arity).collect();
            arities.dedup();
            assert_eq!(
                arities.len(),
                aggregate.forms.len(),
                "{}: one form per arity",
                aggregate.name
            );
        }
    }
}
