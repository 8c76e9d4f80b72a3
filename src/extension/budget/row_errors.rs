//! An error raised by the rows under a DP aggregate keeps its SQLSTATE, not its text.
//!
//! A DBA's view whose expression fails on one row (`code::int` of `'ABC'`) fails the
//! statement only when such a row is read, and PostgreSQL's message names the value
//! (`invalid input syntax for type integer: "ABC"`): a whole field of one row, which an
//! analyst could also catch in PL/pgSQL and read from SQLERRM. For a budgeted role's DP
//! statement, an error that unwinds out of a DP aggregation node, or out of a parallel
//! worker's plan, is raised again with its SQLSTATE and a fixed text; its own text goes to
//! the server's log only. That an error happened, and its SQLSTATE, still depend on the
//! rows (README, "Side channels that remain").
//!
//! Left as they are: pg_exp_mech's own errors, which depend on parameters only
//! (../shared/PRIVACY.md, section 6), and query_canceled (a cancel or a timeout, whose
//! text names no value).

use pgrx::pg_sys;
use pgrx::pg_sys::panic::{CaughtError, ErrorReport};
use pgrx::{PgLogLevel, PgSqlErrorCode};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

/// The function name pg_exp_mech's own errors carry (crate::extension::raise).
pub const OWN_ERRORS: &str = "pg_exp_mech";

/// What the client reads in place of the withheld text.
pub const WITHHELD: &str = "a row under a differentially private aggregate raised an error; its text, which can name a value of the row, is withheld";

/// Runs `step` (the rows of a budgeted role's DP statement); an error it raises leaves
/// with its text withheld when `withhold` is true at that moment.
pub fn withheld<T>(withhold: impl Fn() -> bool, step: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(step)) {
        Ok(value) => value,
        Err(payload) => {
            if !withhold() {
                resume_unwind(payload)
            }
            let Some(CaughtError::PostgresError(error)) = payload.downcast_ref::<CaughtError>()
            else {
                resume_unwind(payload)
            };
            let code = error.sql_error_code();
            // (A Citus worker's withheld error comes back raised by Citus.)
            if error.function_name() == Some(OWN_ERRORS)
                || error.message() == WITHHELD
                || code == PgSqlErrorCode::ERRCODE_QUERY_CANCELED
            {
                resume_unwind(payload)
            }
            // The DBA's log keeps the text (as PostgreSQL would have logged it).
            let mut original = format!("{WITHHELD}: {}", error.message());
            for (label, text) in [("DETAIL", error.detail()), ("HINT", error.hint())] {
                if let Some(text) = text {
                    original.push_str(&format!("\n{label}:  {text}"));
                }
            }
            ErrorReport::new(code, original, OWN_ERRORS).report(PgLogLevel::LOG_SERVER_ONLY);
            drop(payload);
            ErrorReport::new(code, WITHHELD, OWN_ERRORS)
                .set_hint("The server's log holds the text; a DBA can read it there.")
                .report(PgLogLevel::ERROR);
            unreachable!("an ERROR does not return")
        }
    }
}

/// A FATAL raised while a budgeted role's DP node runs (`pg_terminate_backend` of the
/// analyst's own session, from another) ends the process without unwinding, and carries
/// the CONTEXT of what ran then: the DBA's function's dynamic SQL named the row's value
/// (`SQL statement "SELECT ... WHERE code = 'flu-6aca...'"`; the red team of 2026-11-27).
/// Its message and SQLSTATE stay (they name no row); its context, detail, hint and
/// internal query go to the server's log only.
///
/// # Safety
/// `message` must be the message being emitted (from emit_log_hook).
pub unsafe fn withhold_context(message: *mut pg_sys::ErrorData) {
    // SAFETY: as the caller guarantees; the strings live in ErrorContext, where a
    // message's strings are allocated, and is current while it is emitted.
    unsafe {
        let message = &mut *message;
        let mut withheld = String::new();
        for (label, text) in [
            ("DETAIL", &mut message.detail),
            ("HINT", &mut message.hint),
            ("QUERY", &mut message.internalquery),
            ("CONTEXT", &mut message.context),
        ] {
            if !text.is_null() {
                let said = std::ffi::CStr::from_ptr(*text).to_string_lossy();
                withheld.push_str(&format!("{label}: {said}\n"));
                *text = std::ptr::null_mut();
            }
        }
        message.internalpos = 0;
        if withheld.is_empty() {
            return;
        }
        if !message.detail_log.is_null() {
            let said = std::ffi::CStr::from_ptr(message.detail_log).to_string_lossy();
            withheld.insert_str(0, &format!("{said}\n"));
        }
        let text =
            std::ffi::CString::new(withheld.trim_end().replace('\0', "")).expect("no NUL left");
        message.detail_log = pg_sys::MemoryContextStrdup(pg_sys::ErrorContext, text.as_ptr());
    }
}
