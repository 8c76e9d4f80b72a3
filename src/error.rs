//! The one error type of pg_exp_mech.
//!
//! Plain Rust, no database types: the mechanisms and the parameter checks return it, and
//! the SQL layer turns it into an `ereport` with the SQLSTATE that [`Error::sqlstate`]
//! names. An error may depend on the analyst's parameters, never on the data
//! (../shared/PRIVACY.md, section 6), so every variant is about a parameter, a type or the
//! budget.

/// Every error of pg_exp_mech, with its message. The SQLSTATE of each is in
/// [`Error::sqlstate`], the one table of them.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// A parameter is NULL or outside its domain.
    #[error("{name} must be {requirement}, got {value}")]
    InvalidParameter {
        name: &'static str,
        value: String,
        requirement: String,
    },
    /// A parameter that must be constant took another value on a later row.
    #[error("{name} must be the same on every row of an aggregate, got {first} and then {now}")]
    ParameterChanged {
        name: &'static str,
        first: String,
        now: String,
    },
    /// The item type has no default hash operator class.
    #[error("could not identify a hash function for type {type_name}: items must have a default hash operator class")]
    NoHashFunction { type_name: String },
    /// ORDER BY inside a DP aggregate's call.
    #[error("ORDER BY inside {aggregate}(...) is not accepted: its answer does not depend on the order of its rows; drop the ORDER BY")]
    OrderedCall { aggregate: &'static str },
    /// Items of a collatable type whose inputs' implicit collations conflict.
    #[error("could not determine which collation to use for items of type {type_name}: their inputs' collations conflict; set one with the COLLATE clause")]
    IndeterminateCollation { type_name: String },
    /// A released value's type spells equal values in more than one way (spellings.rs).
    #[error("{values} of type {type_name}{collation} {refusal}: values that compare equal can be spelled differently, and the answer would show a row's spelling; {remedy}")]
    SeveralSpellings {
        values: &'static str,
        type_name: String,
        collation: String,
        refusal: &'static str,
        remedy: &'static str,
    },
    /// A support function was called outside an aggregate.
    #[error("{function} can only be called as part of an aggregate")]
    NotInAggregate { function: &'static str },
    /// A charge would exceed the role's privacy budget.
    #[error(
        "privacy budget of role \"{role}\" exceeded: {aggregate} needs epsilon {}, {} of {} remain",
        format_number(Some(*.epsilon)),
        format_number(Some(*.remaining)),
        format_number(Some(*.limit))
    )]
    BudgetExceeded {
        role: String,
        aggregate: String,
        epsilon: f64,
        remaining: f64,
        limit: f64,
    },
    /// A charge would exceed the role's δ budget.
    #[error(
        "privacy budget of role \"{role}\" exceeded: {aggregate} needs delta {}, {} of {} remain",
        format_number(Some(*.delta)),
        format_number(Some(*.remaining)),
        format_number(Some(*.limit))
    )]
    DeltaBudgetExceeded {
        role: String,
        aggregate: String,
        delta: f64,
        remaining: f64,
        limit: f64,
    },
    /// pg_exp_mech.require_budget is on and the role has no budget.
    #[error("role \"{role}\" has no privacy budget, and pg_exp_mech.require_budget is on")]
    NoBudget { role: String },
    /// EXPLAIN ANALYZE of a statement with DP aggregates, by a role with a budget.
    #[error("EXPLAIN ANALYZE (or any instrumented execution) of a plan with differentially private aggregates is not allowed for role \"{role}\", which has a privacy budget: it would show exact row counts")]
    ExplainAnalyzeRefused { role: String },
    /// A DP statement of a role with a budget, in a SERIALIZABLE transaction.
    #[error("a plan with differentially private aggregates cannot run under SERIALIZABLE isolation for role \"{role}\", which has a privacy budget: its predicate locks, which pg_locks shows to every role, count the rows it reads; use REPEATABLE READ or READ COMMITTED")]
    SerializableRefused { role: String },
    /// A DP aggregate used as a window function, by a role with a budget.
    #[error("{aggregate} cannot be used as a window function by role \"{role}\", which has a privacy budget: each frame would be a release; aggregate with GROUP BY instead")]
    WindowRefused { role: String, aggregate: String },
    /// A DP aggregation node, or the plan under it, that calls a volatile function, run
    /// by a role with a budget.
    #[error("role \"{role}\", which has a privacy budget, cannot run a differentially private aggregation that calls volatile function {function}, itself or in the rows under it: it runs once per row or per group, where its side effects and its values follow the rows; take it out of the view, or declare the function STABLE if it has no side effects")]
    VolatileCall { role: String, function: String },
    /// A DP aggregate run once per row or group of a DP node, by a role with a budget.
    #[error("role \"{role}\", which has a privacy budget, cannot run {aggregate} once per row or per group of another differentially private aggregation (a correlated subquery, a nested loop's inner side): each run is charged, and the charges would count the rows; compute it once, in an uncorrelated subquery, or outside the view")]
    NestedAggregate { role: String, aggregate: String },
    /// A view with DP aggregates that is not a security barrier, read by a role with a
    /// budget.
    #[error("view \"{view}\" is refused: {reason}")]
    ViewNotBarrier { view: String, reason: String },
    /// Rows of a table with a privacy unit reach a DP aggregate in a way that loses the
    /// unit (an aggregate, DISTINCT, a subquery, ...): refused, never answered per row.
    #[error("rows of table \"{table}\", whose privacy unit is column \"{column}\", reach {aggregate} {reason}")]
    UnitNotFollowed {
        table: String,
        column: String,
        aggregate: String,
        reason: String,
    },
    /// Where privacy units are declared, a DP query calls a function whose body the
    /// planner hook cannot see.
    #[error("{aggregate} cannot run with function {function} where privacy units are declared: its body may read a table with a privacy unit out of pg_exp_mech's sight; if it reads no table, a superuser may declare it with SECURITY LABEL FOR pg_exp_mech ON FUNCTION {function} IS 'reads_no_tables'")]
    OpaqueFunction { function: String, aggregate: String },
    /// A SECURITY LABEL FOR pg_exp_mech that is not a privacy unit on a table's column.
    #[error("{reason}")]
    InvalidLabel { reason: String },
    /// Privacy units are declared, but this session cannot bound by them.
    #[error("privacy units are declared in this database, but {reason}")]
    UnitsUnavailable { reason: String },
    /// A DP aggregate finalized in a plan node that was not metered.
    #[error("{reason}")]
    NotMetered { reason: String },
    /// A DP aggregate that Citus would run where the cluster's one budget cannot meter
    /// it: on a worker, or over a distributed table.
    #[error("{reason}")]
    Distributed { reason: String },
    /// A role oid that names no role (dp_budget_set(0::regrole, ...)).
    #[error("role with OID {oid} does not exist")]
    UnknownRole { oid: u32 },
    /// A setting the aggregates read, changed while a plan with DP aggregates runs.
    #[error("it cannot change while a statement with differentially private aggregates runs (or a cursor over one is open): the aggregates read it once, when their plan starts")]
    SettingFixed,
    /// The ledger is for budget administrators only.
    #[error("permission denied for the privacy ledger: role \"{role}\" is not a budget administrator (one that may execute dp_budget_set)")]
    NotBudgetAdministrator { role: String },
    /// A budgeted role's DP aggregate, or a budget change, on a server in recovery (a
    /// standby), which cannot write the ledger's WAL.
    #[error("{action} on a standby, which cannot write the privacy ledger: run it on the primary")]
    OnStandby { action: String },
    /// Budgets are configured but cannot be enforced in this session.
    #[error("privacy budgets cannot be enforced: {reason}")]
    BudgetsUnavailable { reason: String },
    /// A budgeted role may read the temporary files DP statements spill, or their memory.
    #[error("role \"{role}\", which has a privacy budget, may execute {function}{through}, which reads the temporary files or the memory of a differentially private statement (both grow with its rows): in every database of the cluster, REVOKE EXECUTE ON FUNCTION {function} FROM PUBLIC, and from the role and every role it is a member of")]
    TemporaryFilesReadable {
        role: String,
        function: String,
        /// Empty, or the role whose grant it reaches.
        through: String,
    },
    /// A budgeted role may read any file of the server.
    #[error("role \"{role}\", which has a privacy budget, is a member of role \"{member_of}\", whose COPY reads any file of the server: the temporary files a differentially private statement spills, and the server's log, which holds the texts withheld from the client: REVOKE {member_of} FROM the role")]
    ServerFilesReadable { role: String, member_of: String },
    /// A budgeted role has, or may become a role that has, an attribute that reads the
    /// files of the server or grants the roles that do.
    #[error("role \"{role}\", which has a privacy budget, {through}has {attribute}, with which it {reach}, and so the temporary files a differentially private statement spills: ALTER ROLE ... NO{attribute}, or REVOKE the membership")]
    RoleAttributeReads {
        role: String,
        /// Empty, or "may become role \"r\", which ".
        through: String,
        attribute: &'static str,
        reach: &'static str,
    },
    /// A transaction not yet committed changes what the refusal of readers reads.
    #[error("role \"{role}\", which has a privacy budget, runs a differentially private aggregate while a transaction not yet committed (this one, another session's or a prepared one) changes roles or role memberships, or this one the privileges of a function that reads temporary files: that transaction's sessions may have privileges the check cannot see; retry once it has ended")]
    PrivilegesChanging { role: String },
    /// A budgeted role's DP node held more groups than it may (held_groups.rs).
    #[error("a differentially private aggregation of a role with a privacy budget hands out its groups only once it has read every row, and they exceed {limit_kb} kB (work_mem * hash_mem_multiplier, at least 64 MB): raise work_mem, or ask for fewer groups")]
    HeldGroupsTooLarge { limit_kb: i32 },
    /// The shared table of accounts is full.
    #[error("the privacy ledger tracks at most {capacity} roles, and all are in use (raise pg_exp_mech.max_roles and restart)")]
    TooManyRoles { capacity: usize },
    /// The ledger could not be written.
    #[error("could not write the privacy ledger: {reason}")]
    LedgerWrite { reason: String },
    /// The ledger could not be read back (dp_ledger).
    #[error("could not read the privacy ledger: {reason}")]
    LedgerRead { reason: String },
}

impl Error {
    /// The SQLSTATE the SQL layer reports: the one table of them.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            // invalid_parameter_value
            Error::InvalidParameter { .. }
            | Error::ParameterChanged { .. }
            | Error::InvalidLabel { .. } => "22023",
            // undefined_function, as PostgreSQL's own "could not identify a hash function"
            Error::NoHashFunction { .. } => "42883",
            // indeterminate_collation
            Error::IndeterminateCollation { .. } => "42P22",
            // feature_not_supported: a support function called outside an aggregate, a
            // DP aggregate finalized in a plan node the executor hook could not meter
            // (refused, fails closed), or a released type spelling equal values in
            // several ways (as PostgreSQL's own refusals of nondeterministic collations)
            Error::NotInAggregate { .. }
            | Error::SeveralSpellings { .. }
            | Error::OrderedCall { .. }
            | Error::NotMetered { .. }
            | Error::UnitNotFollowed { .. }
            | Error::OpaqueFunction { .. }
            | Error::Distributed { .. }
            | Error::SerializableRefused { .. } => "0A000",
            // configuration_limit_exceeded
            Error::BudgetExceeded { .. } | Error::DeltaBudgetExceeded { .. } => "53400",
            // insufficient_privilege
            Error::NoBudget { .. }
            | Error::ExplainAnalyzeRefused { .. }
            | Error::WindowRefused { .. }
            | Error::VolatileCall { .. }
            | Error::NestedAggregate { .. }
            | Error::NotBudgetAdministrator { .. } => "42501",
            // read_only_sql_transaction, as PostgreSQL's own refusals during recovery
            Error::OnStandby { .. } => "25006",
            // object_not_in_prerequisite_state
            Error::BudgetsUnavailable { .. }
            | Error::TemporaryFilesReadable { .. }
            | Error::ServerFilesReadable { .. }
            | Error::RoleAttributeReads { .. }
            | Error::PrivilegesChanging { .. }
            | Error::ViewNotBarrier { .. }
            | Error::UnitsUnavailable { .. } => "55000",
            // undefined_object, as PostgreSQL's own "role ... does not exist"
            Error::UnknownRole { .. } => "42704",
            // cant_change_runtime_param, as PostgreSQL's own "cannot be changed now"
            Error::SettingFixed => "55P02",
            // program_limit_exceeded
            Error::TooManyRoles { .. } | Error::HeldGroupsTooLarge { .. } => "54000",
            // io_error
            Error::LedgerWrite { .. } | Error::LedgerRead { .. } => "58030",
        }
    }

    /// PostgreSQL's packed form of [`Error::sqlstate`] (the MAKE_SQLSTATE macro of
    /// utils/elog.h: six bits per character, the first character lowest).
    pub fn sqlstate_code(&self) -> i32 {
        self.sqlstate()
            .bytes()
            .enumerate()
            .map(|(i, c)| (((c - b'0') & 0x3F) as i32) << (6 * i))
            .sum()
    }

    pub fn invalid(name: &'static str, value: Option<f64>, requirement: impl Into<String>) -> Self {
        Error::InvalidParameter {
            name,
            value: format_number(value),
            requirement: requirement.into(),
        }
    }
}

/// Formats a number the way PostgreSQL prints a double precision value (float8out): the
/// shortest digits that round-trip, in exponent form below 1e-4 or from 1e15 on.
pub fn format_number(value: Option<f64>) -> String {
    match value {
        None => "NULL".to_string(),
        Some(v) if v.is_nan() => "NaN".to_string(),
        Some(v) if v == f64::INFINITY => "Infinity".to_string(),
        Some(v) if v == f64::NEG_INFINITY => "-Infinity".to_string(),
        Some(v) => {
            let scientific = format!("{v:e}");
            let (mantissa, exponent) = scientific.split_once('e').expect("{:e} has an exponent");
            let exponent: i32 = exponent.parse().expect("an integer exponent");
            if v != 0.0 && !(-4..15).contains(&exponent) {
                let sign = if exponent < 0 { '-' } else { '+' };
                format!("{mantissa}e{sign}{:02}", exponent.abs())
            } else {
                format!("{v}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_parameter_and_the_value() {
        let e = Error::invalid("epsilon", Some(-1.0), "finite and greater than 0");
        assert_eq!(
            e.to_string(),
            "epsilon must be finite and greater than 0, got -1"
        );
        assert_eq!(e.sqlstate(), "22023");
        assert_eq!(
            Error::invalid("epsilon", None, "finite and greater than 0").to_string(),
            "epsilon must be finite and greater than 0, got NULL"
        );
        assert_eq!(format_number(Some(f64::NAN)), "NaN");
        assert_eq!(format_number(Some(f64::NEG_INFINITY)), "-Infinity");
        assert_eq!(format_number(Some(0.1)), "0.1");
        // As PostgreSQL prints them.
        assert_eq!(format_number(Some(1e308)), "1e+308");
        assert_eq!(format_number(Some(-1e308)), "-1e+308");
        assert_eq!(
            format_number(Some(123456789012345678.0)),
            "1.2345678901234568e+17"
        );
        assert_eq!(format_number(Some(100000000000000.0)), "100000000000000");
        assert_eq!(format_number(Some(0.0001)), "0.0001");
        assert_eq!(format_number(Some(0.00001)), "1e-05");
        assert_eq!(format_number(Some(-0.0)), "-0");
        assert_eq!(format_number(Some(2.5)), "2.5");
    }

    #[test]
    fn sqlstates_pack_as_postgresql_packs_them() {
        // ERRCODE_INVALID_PARAMETER_VALUE and ERRCODE_CONFIGURATION_LIMIT_EXCEEDED of
        // utils/errcodes.h, packed by MAKE_SQLSTATE.
        assert_eq!(
            Error::invalid("epsilon", None, "x").sqlstate_code(),
            2 | 2 << 6 | 2 << 18 | 3 << 24
        );
        let exceeded = Error::BudgetExceeded {
            role: "r".into(),
            aggregate: "dp_argmax".into(),
            epsilon: 0.25,
            remaining: 0.1,
            limit: 0.6,
        };
        assert_eq!(exceeded.sqlstate_code(), 5 | 3 << 6 | 4 << 12);
        assert_eq!(
            exceeded.to_string(),
            "privacy budget of role \"r\" exceeded: dp_argmax needs epsilon 0.25, 0.1 of 0.6 remain"
        );
    }
}
