//! Privacy budgets, in plain Rust: the ledger's lines and replay ([`ledger`]), the file
//! that keeps them ([`file`]) and the table of accounts with the rules that refuse a
//! charge ([`accounts`]). The SQL layer (`extension::budget`) keeps the table in shared
//! memory, decides who must have a budget, and charges from the final functions.

pub mod accounts;
pub mod file;
pub mod ledger;
