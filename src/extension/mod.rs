//! The SQL layer: thin pgrx glue between PostgreSQL and the mechanisms.

mod aggregate;
mod argmax;
mod arguments;
pub mod budget;
mod catalog;
mod citus;
mod forms;
pub mod guc;
mod item_scores;
mod items;
mod memory;
mod partition;
mod planner;
mod quantile;
mod quantile_arguments;
mod serialization;
pub(crate) mod spellings;
#[cfg(any(test, feature = "pg_test"))]
mod sql_testing;
mod top_k;
mod units;
mod versions;

pub use citus::install as install_citus;
pub use planner::install_planner;
pub use units::install_units;

use crate::error::Error;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};

/// Raises `error` as a PostgreSQL ERROR with its SQLSTATE.
pub fn raise(error: Error) -> ! {
    let code = PgSqlErrorCode::from(error.sqlstate_code());
    ErrorReport::new(code, error.to_string(), budget::OWN_ERRORS).report(PgLogLevel::ERROR);
    unreachable!("an ERROR does not return")
}

/// The value of a `Result`, or its error raised as a PostgreSQL ERROR.
pub trait OrRaise<T> {
    fn or_raise(self) -> T;
}

impl<T> OrRaise<T> for Result<T, Error> {
    fn or_raise(self) -> T {
        self.unwrap_or_else(|error| raise(error))
    }
}

// The aggregates and their transition and final functions, as forms.rs describes them.
pgrx::extension_sql_file!(
    "aggregates.sql",
    name = "aggregates",
    requires = [
        item_scores::dp_item_scores_combine,
        item_scores::dp_item_scores_serialize,
        item_scores::dp_item_scores_deserialize,
        quantile::dp_quantile_final,
        quantile::dp_quantiles_final,
        quantile::dp_quantile_smallint_final,
        quantile::dp_quantiles_smallint_final,
        quantile::dp_quantile_integer_final,
        quantile::dp_quantiles_integer_final,
        quantile::dp_quantile_bigint_final,
        quantile::dp_quantiles_bigint_final,
        quantile::dp_quantile_numeric_final,
        quantile::dp_quantiles_numeric_final,
        quantile::dp_quantile_combine,
        quantile::dp_quantile_serialize,
        quantile::dp_quantile_deserialize,
    ],
);

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
                 WHEN f.name ~ '^dp_quantiles?_(smallint|integer|bigint)_' THEN regexp_replace(f.name, '^(dp_quantiles?)_([a-z]+)_[a-z]+$', '\1 over \2 values')
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
    fn sqlstates_are_postgresqls_error_codes() {
        let invalid = Error::invalid("epsilon", None, "finite");
        let role = || "r".to_string();
        for (error, code) in [
            (invalid, PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE),
            (
                Error::NoHashFunction {
                    type_name: "point".into(),
                },
                PgSqlErrorCode::ERRCODE_UNDEFINED_FUNCTION,
            ),
            (
                Error::NotInAggregate { function: "f" },
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            ),
            (
                Error::NoBudget { role: role() },
                PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            ),
            (
                Error::BudgetsUnavailable { reason: role() },
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            ),
            (
                Error::TooManyRoles { capacity: 1 },
                PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
            ),
            (
                Error::LedgerWrite { reason: role() },
                PgSqlErrorCode::ERRCODE_IO_ERROR,
            ),
        ] {
            assert_eq!(
                PgSqlErrorCode::from(error.sqlstate_code()),
                code,
                "{error:?}"
            );
        }
    }
}
