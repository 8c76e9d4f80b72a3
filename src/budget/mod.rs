//! Privacy budgets, in plain Rust: the ledger's lines and replay ([`ledger`]), the file
//! that keeps them ([`file`]), the snapshot that bounds start-up ([`snapshot`]) and the
//! table of accounts with the rules that refuse a charge ([`accounts`]). The SQL layer
//! (`extension::budget`) keeps the table in shared memory, logs every change to WAL,
//! decides who must have a budget, and charges each plan when it starts.

pub mod accounts;
pub mod file;
pub mod ledger;
pub mod snapshot;
