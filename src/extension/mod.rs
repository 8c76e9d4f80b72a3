//! The SQL layer: thin pgrx glue between PostgreSQL and the mechanisms.

mod aggregate;
mod argmax;
mod arguments;
pub mod budget;
pub mod guc;
mod item_scores;
mod items;
mod memory;
mod quantile;
mod serialization;
mod top_k;
#[cfg(any(test, feature = "pg_test"))]
mod sql_testing;

use crate::error::Error;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};

/// Raises `error` as a PostgreSQL ERROR with its SQLSTATE.
pub fn raise(error: Error) -> ! {
    let code = match &error {
        Error::InvalidParameter { .. } | Error::ParameterChanged { .. } => {
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE
        }
        Error::NoHashFunction { .. } => PgSqlErrorCode::ERRCODE_UNDEFINED_FUNCTION,
        Error::NotInAggregate { .. } => PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        Error::BudgetExceeded { .. } => PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
        Error::NoBudget { .. }
        | Error::ExplainAnalyzeRefused { .. }
        | Error::NotBudgetAdministrator { .. } => PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
        Error::BudgetsUnavailable { .. } => PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        Error::TooManyRoles { .. } => PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
        Error::LedgerWrite { .. } => PgSqlErrorCode::ERRCODE_IO_ERROR,
    };
    debug_assert_eq!(sqlstate_of(code), error.sqlstate());
    ErrorReport::new(code, error.to_string(), "pg_exp_mech").report(PgLogLevel::ERROR);
    unreachable!("an ERROR does not return")
}

/// The five-character SQLSTATE of a PostgreSQL error code.
fn sqlstate_of(code: PgSqlErrorCode) -> String {
    let packed = code as i32;
    (0..5)
        .map(|i| (((packed >> (6 * i)) & 0x3F) as u8 + b'0') as char)
        .collect()
}

pgrx::extension_sql!(
    r#"
-- CREATE AGGREGATE records every aggregate as IMMUTABLE. Ours draw randomness: mark them
-- VOLATILE like random(), so that two calls in one query are two draws (and two charges).
UPDATE pg_catalog.pg_proc SET provolatile = 'v'
 WHERE prokind = 'a'
   AND oid IN (SELECT objid FROM pg_catalog.pg_depend
                WHERE classid = 'pg_catalog.pg_proc'::regclass
                  AND refclassid = 'pg_catalog.pg_extension'::regclass
                  AND refobjid = (SELECT oid FROM pg_catalog.pg_extension
                                   WHERE extname = 'pg_exp_mech'));

-- Support functions: a comment that says what calls them.
DO $comments$
DECLARE
    f record;
    role text;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure AS signature, p.proname::text AS name
          FROM pg_catalog.pg_proc p
          JOIN pg_catalog.pg_depend d
            ON d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid
           AND d.refclassid = 'pg_catalog.pg_extension'::regclass
         WHERE d.refobjid = (SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'pg_exp_mech')
           AND p.prokind = 'f'
           AND pg_catalog.obj_description(p.oid, 'pg_proc') IS NULL
           AND p.proname ~ '_(trans|final|combine|serialize|deserialize)$'
    LOOP
        role := CASE substring(f.name from '_([a-z]+)$')
            WHEN 'trans' THEN 'Transition function'
            WHEN 'final' THEN 'Final function (samples the answer)'
            WHEN 'combine' THEN 'Combine function (parallel aggregation)'
            WHEN 'serialize' THEN 'Serialize function (parallel aggregation)'
            WHEN 'deserialize' THEN 'Deserialize function (parallel aggregation)'
        END;
        EXECUTE format('COMMENT ON FUNCTION %s IS %L', f.signature,
            role || ' of ' ||
            CASE WHEN f.name LIKE 'dp_item_scores_%' THEN 'the selection aggregates (dp_argmax, dp_top_k, dp_top_k_unknown_domain)'
                 WHEN f.name ~ '^dp_quantile_(combine|serialize|deserialize)$' THEN 'dp_quantile and dp_quantiles'
                 ELSE substring(f.name from '^(.*)_[a-z]+$') END ||
            '. Called by PostgreSQL inside the aggregate; not for direct use.');
    END LOOP;
END
$comments$;
"#,
    name = "finalize_catalog",
    finalize,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_match_the_error_enum() {
        assert_eq!(sqlstate_of(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE), "22023");
        assert_eq!(sqlstate_of(PgSqlErrorCode::ERRCODE_UNDEFINED_FUNCTION), "42883");
        assert_eq!(sqlstate_of(PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED), "0A000");
        assert_eq!(sqlstate_of(PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED), "53400");
        assert_eq!(sqlstate_of(PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE), "42501");
        assert_eq!(sqlstate_of(PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE), "55000");
        assert_eq!(sqlstate_of(PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED), "54000");
        assert_eq!(sqlstate_of(PgSqlErrorCode::ERRCODE_IO_ERROR), "58030");
    }
}
