//! The lines of the privacy ledger (budget limits and charges, one line each) and what a
//! replay of them adds up to.
//!
//! Amounts of ε are kept in integer units of 1e-12 (charges rounded up, limits rounded
//! down), so that ten charges of 0.1 exactly fill a limit of 1 and a sum never drifts
//! below what was spent.

use std::collections::BTreeMap;
use std::fmt::Write;

const UNITS_PER_EPSILON: f64 = 1e12;

/// The units a charge of ε costs (rounded up).
pub fn charge_units(epsilon: f64) -> u64 {
    (epsilon * UNITS_PER_EPSILON).ceil() as u64
}

/// The units a limit of ε allows (rounded down).
pub fn limit_units(epsilon: f64) -> u64 {
    (epsilon * UNITS_PER_EPSILON).floor() as u64
}

/// ε of `units`.
pub fn epsilon_of(units: u64) -> f64 {
    units as f64 / UNITS_PER_EPSILON
}

/// One line of the ledger.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Limit(Limit),
    Charge(Charge),
}

/// A budget administrator set (or, with None, removed) a role's limit.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// PostgreSQL timestamp: microseconds since 2000-01-01 UTC.
    pub time: i64,
    pub role: u32,
    pub limit: Option<f64>,
}

/// One evaluation of a DP aggregate.
#[derive(Debug, Clone, PartialEq)]
pub struct Charge {
    pub time: i64,
    pub role: u32,
    pub epsilon: f64,
    /// The δ of an (ε, δ) mechanism, 0 for pure ε-DP (recorded, not budgeted).
    pub delta: f64,
    pub aggregate: String,
    /// FNV-1a hash of the statement's text.
    pub statement: u64,
}

impl Record {
    /// The line, tab-separated, with its newline. Numbers are written in Rust's shortest
    /// round-trip form, so that a replay reads back exactly what was charged.
    pub fn line(&self) -> String {
        let mut line = String::new();
        match self {
            Record::Limit(Limit { time, role, limit }) => {
                let limit = limit.map_or("none".to_string(), |l| format!("{l:?}"));
                let _ = writeln!(line, "limit\t{time}\t{role}\t{limit}");
            }
            Record::Charge(Charge {
                time,
                role,
                epsilon,
                delta,
                aggregate,
                statement,
            }) => {
                let _ = writeln!(
                    line,
                    "charge\t{time}\t{role}\t{epsilon:?}\t{delta:?}\t{aggregate}\t{statement:016x}"
                );
            }
        }
        line
    }

    /// Parses one line (without its newline).
    pub fn parse(line: &str) -> Result<Self, String> {
        let fields: Vec<&str> = line.split('\t').collect();
        let number = |at: usize| -> Result<f64, String> {
            fields[at]
                .parse::<f64>()
                .map_err(|e| format!("field {at} of {line:?}: {e}"))
        };
        let integer = |at: usize| -> Result<i64, String> {
            fields[at]
                .parse::<i64>()
                .map_err(|e| format!("field {at} of {line:?}: {e}"))
        };
        match (fields.first(), fields.len()) {
            (Some(&"limit"), 4) => Ok(Record::Limit(Limit {
                time: integer(1)?,
                role: integer(2)? as u32,
                limit: if fields[3] == "none" {
                    None
                } else {
                    Some(number(3)?)
                },
            })),
            (Some(&"charge"), 7) => Ok(Record::Charge(Charge {
                time: integer(1)?,
                role: integer(2)? as u32,
                epsilon: number(3)?,
                delta: number(4)?,
                aggregate: fields[5].to_string(),
                statement: u64::from_str_radix(fields[6], 16)
                    .map_err(|e| format!("field 6 of {line:?}: {e}"))?,
            })),
            _ => Err(format!("not a ledger line: {line:?}")),
        }
    }

    pub fn role(&self) -> u32 {
        match self {
            Record::Limit(Limit { role, .. }) | Record::Charge(Charge { role, .. }) => *role,
        }
    }
}

/// What one role may spend and has spent, in units.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Account {
    pub limit: Option<u64>,
    pub spent: u64,
}

impl Account {
    pub fn apply(&mut self, record: &Record) {
        match record {
            Record::Limit(Limit { limit, .. }) => self.limit = limit.map(limit_units),
            Record::Charge(Charge { epsilon, .. }) => {
                self.spent = self.spent.saturating_add(charge_units(*epsilon))
            }
        }
    }

    /// Whether a charge of `units` stays within the limit.
    pub fn allows(&self, units: u64) -> bool {
        self.limit
            .is_none_or(|limit| self.spent.saturating_add(units) <= limit)
    }

    /// The units left, when there is a limit.
    pub fn remaining(&self) -> Option<u64> {
        self.limit.map(|limit| limit.saturating_sub(self.spent))
    }
}

/// The complete lines of a ledger's text. A last line without its newline is a write cut
/// short by a crash: that charge was never fsynced, so its result never left, and it does
/// not count.
pub fn complete_lines(text: &str) -> &str {
    &text[..text.rfind('\n').map_or(0, |at| at + 1)]
}

/// The records of a ledger's complete lines, in order; any malformed line is an error.
pub fn parse(complete: &str) -> Result<Vec<Record>, String> {
    complete.lines().map(Record::parse).collect()
}

/// The accounts the records add up to, by role.
pub fn replay(records: &[Record]) -> BTreeMap<u32, Account> {
    let mut accounts: BTreeMap<u32, Account> = BTreeMap::new();
    for record in records {
        accounts.entry(record.role()).or_default().apply(record);
    }
    accounts
}

/// FNV-1a, 64 bits: a stable fingerprint of a statement's text.
pub fn fingerprint(text: &[u8]) -> u64 {
    text.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ byte as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn charge(role: u32, epsilon: f64) -> Record {
        Record::Charge(Charge {
            time: 1,
            role,
            epsilon,
            delta: 0.0,
            aggregate: "dp_argmax".into(),
            statement: fingerprint(b"SELECT 1"),
        })
    }

    fn limit(role: u32, limit: Option<f64>) -> Record {
        Record::Limit(Limit {
            time: 0,
            role,
            limit,
        })
    }

    #[test]
    fn lines_round_trip() {
        let records = [
            Record::Limit(Limit {
                time: 7,
                role: 16384,
                limit: Some(0.1 + 0.2),
            }),
            Record::Limit(Limit {
                time: 8,
                role: 16384,
                limit: None,
            }),
            Record::Charge(Charge {
                time: 803_000_000_000_000,
                role: 10,
                epsilon: 1.0 / 3.0,
                delta: 1e-9,
                aggregate: "dp_top_k_unknown_domain".into(),
                statement: u64::MAX,
            }),
        ];
        for record in records {
            let line = record.line();
            assert!(line.ends_with('\n'));
            assert_eq!(Record::parse(line.trim_end()).unwrap(), record, "{line}");
        }
        assert!(Record::parse("charge\t1\t2").is_err());
        assert!(Record::parse("refund\t1\t2\t3").is_err());
    }

    #[test]
    fn ten_tenths_fill_a_budget_of_one_exactly() {
        let mut account = Account::default();
        account.apply(&limit(1, Some(1.0)));
        for _ in 0..10 {
            assert!(account.allows(charge_units(0.1)));
            account.apply(&charge(1, 0.1));
        }
        assert_eq!(account.remaining(), Some(0));
        assert!(!account.allows(charge_units(1e-12)));
        let mut thirds = Account::default();
        thirds.apply(&limit(1, Some(0.3)));
        for _ in 0..3 {
            assert!(thirds.allows(charge_units(0.1)));
            thirds.apply(&charge(1, 0.1));
        }
    }

    #[test]
    fn a_limit_keeps_what_was_spent() {
        let mut account = Account::default();
        account.apply(&charge(1, 2.0));
        assert!(account.allows(charge_units(1e6)), "no limit, no refusal");
        account.apply(&limit(1, Some(2.5)));
        assert_eq!(account.remaining(), Some(limit_units(0.5)));
        assert!(!account.allows(charge_units(0.6)));
        account.apply(&limit(1, Some(1.0)));
        assert_eq!(account.remaining(), Some(0));
    }

    #[test]
    fn replay_adds_up_the_complete_lines() {
        let mut text = String::new();
        text += &limit(1, Some(1.0)).line();
        text += &charge(1, 0.25).line();
        text += &charge(2, 0.5).line();
        text += &charge(1, 0.25).line();
        let complete = text.len();
        text += "charge\t9\t1\t0.2";
        assert_eq!(complete_lines(&text).len(), complete);
        let accounts = replay(&parse(complete_lines(&text)).unwrap());
        assert_eq!(accounts[&1].spent, charge_units(0.5));
        assert_eq!(accounts[&1].limit, Some(limit_units(1.0)));
        assert_eq!(
            accounts[&2],
            Account {
                limit: None,
                spent: charge_units(0.5)
            }
        );
        assert!(parse("garbage\n").is_err());
        assert!(parse("").unwrap().is_empty());
        assert_eq!(complete_lines("no newline"), "");
    }

    #[test]
    fn fingerprints_are_stable() {
        // FNV-1a test vectors.
        assert_eq!(fingerprint(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fingerprint(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(fingerprint(b"SELECT 1"), fingerprint(b"SELECT 2"));
    }
}
