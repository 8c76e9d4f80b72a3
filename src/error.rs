//! The one error type of pg_exp_mech.
//!
//! Plain Rust, no database types: the mechanisms and the parameter checks return it, and
//! the SQL layer turns it into an `ereport` with the SQLSTATE that [`Error::sqlstate`]
//! names. PRIVACY.md section 6: an error may depend on the analyst's parameters, never on
//! the data, so every variant here is about a parameter, a type or the budget.

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// A parameter is NULL or outside its domain (SQLSTATE 22023).
    InvalidParameter {
        name: &'static str,
        value: String,
        requirement: String,
    },
    /// A parameter that must be constant took another value on a later row (22023).
    ParameterChanged {
        name: &'static str,
        first: String,
        now: String,
    },
    /// The item type has no default hash operator class (42883, as PostgreSQL's own).
    NoHashFunction { type_name: String },
    /// A support function was called outside an aggregate (0A000).
    NotInAggregate { function: &'static str },
    /// A charge would exceed the role's privacy budget (53400).
    BudgetExceeded {
        role: String,
        aggregate: &'static str,
        epsilon: f64,
        remaining: f64,
        limit: f64,
    },
    /// pg_exp_mech.require_budget is on and the role has no budget (42501).
    NoBudget { role: String },
    /// EXPLAIN ANALYZE of a statement with DP aggregates, by a role with a budget (42501).
    ExplainAnalyzeRefused { role: String },
    /// The ledger is for budget administrators only (42501).
    NotBudgetAdministrator { role: String },
    /// Budgets are configured but cannot be enforced in this session (55000).
    BudgetsUnavailable { reason: String },
    /// The shared table of accounts is full (54000).
    TooManyRoles { capacity: usize },
    /// The ledger could not be written (58030).
    LedgerWrite { reason: String },
}

impl Error {
    /// The SQLSTATE the SQL layer reports.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            Error::InvalidParameter { .. } | Error::ParameterChanged { .. } => "22023",
            Error::NoHashFunction { .. } => "42883",
            Error::NotInAggregate { .. } => "0A000",
            Error::BudgetExceeded { .. } => "53400",
            Error::NoBudget { .. }
            | Error::ExplainAnalyzeRefused { .. }
            | Error::NotBudgetAdministrator { .. } => "42501",
            Error::BudgetsUnavailable { .. } => "55000",
            Error::TooManyRoles { .. } => "54000",
            Error::LedgerWrite { .. } => "58030",
        }
    }

    pub fn invalid(name: &'static str, value: Option<f64>, requirement: impl Into<String>) -> Self {
        Error::InvalidParameter {
            name,
            value: format_number(value),
            requirement: requirement.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidParameter {
                name,
                value,
                requirement,
            } => write!(f, "{name} must be {requirement}, got {value}"),
            Error::ParameterChanged { name, first, now } => write!(
                f,
                "{name} must be the same on every row of an aggregate, got {first} and then {now}"
            ),
            Error::NoHashFunction { type_name } => write!(
                f,
                "could not identify a hash function for type {type_name}: items must have a default hash operator class"
            ),
            Error::NotInAggregate { function } => {
                write!(f, "{function} can only be called as part of an aggregate")
            }
            Error::BudgetExceeded {
                role,
                aggregate,
                epsilon,
                remaining,
                limit,
            } => write!(
                f,
                "privacy budget of role \"{role}\" exceeded: {aggregate} needs epsilon {}, {} of {} remain",
                format_number(Some(*epsilon)),
                format_number(Some(*remaining)),
                format_number(Some(*limit))
            ),
            Error::NoBudget { role } => write!(
                f,
                "role \"{role}\" has no privacy budget, and pg_exp_mech.require_budget is on"
            ),
            Error::ExplainAnalyzeRefused { role } => write!(
                f,
                "EXPLAIN ANALYZE of a statement with differentially private aggregates is not allowed for role \"{role}\", which has a privacy budget: it would show exact row counts"
            ),
            Error::NotBudgetAdministrator { role } => write!(
                f,
                "permission denied for the privacy ledger: role \"{role}\" is not a budget administrator (one that may execute dp_budget_set)"
            ),
            Error::BudgetsUnavailable { reason } => {
                write!(f, "privacy budgets cannot be enforced: {reason}")
            }
            Error::TooManyRoles { capacity } => write!(
                f,
                "the privacy ledger tracks at most {capacity} roles, and all are in use"
            ),
            Error::LedgerWrite { reason } => write!(f, "could not write the privacy ledger: {reason}"),
        }
    }
}

impl std::error::Error for Error {}

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
        assert_eq!(e.to_string(), "epsilon must be finite and greater than 0, got -1");
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
        assert_eq!(format_number(Some(123456789012345678.0)), "1.2345678901234568e+17");
        assert_eq!(format_number(Some(100000000000000.0)), "100000000000000");
        assert_eq!(format_number(Some(0.0001)), "0.0001");
        assert_eq!(format_number(Some(0.00001)), "1e-05");
        assert_eq!(format_number(Some(-0.0)), "-0");
        assert_eq!(format_number(Some(2.5)), "2.5");
    }
}
