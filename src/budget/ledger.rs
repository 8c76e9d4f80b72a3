//! The lines of the privacy ledger (budget limits and charges, one line each) and what a
//! replay of them adds up to.
//!
//! Amounts of ε are kept in integer units of 1e-12, amounts of δ in units of 1e-18
//! (charges rounded up, limits rounded down), so that ten charges of 0.1 exactly fill a
//! limit of 1 and a sum never drifts below what was spent.

use std::collections::BTreeMap;
use std::fmt::Write;

/// Integer units of an amount: charges rounded up, limits rounded down.
#[derive(Debug, Clone, Copy)]
pub struct Scale(f64);

/// ε in units of 1e-12.
pub const EPSILON: Scale = Scale(1e12);
/// δ in units of 1e-18 (a δ of 1e-10 is 10^8 units; u64 holds up to 18).
pub const DELTA: Scale = Scale(1e18);

impl Scale {
    /// The units a charge of `amount` costs (rounded up).
    pub fn charge(self, amount: f64) -> u64 {
        (amount * self.0).ceil() as u64
    }

    /// The units a limit of `amount` allows (rounded down).
    pub fn limit(self, amount: f64) -> u64 {
        (amount * self.0).floor() as u64
    }

    /// The amount of `units`.
    pub fn amount(self, units: u64) -> f64 {
        units as f64 / self.0
    }
}

/// One line of the ledger.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Limit(Limit),
    Charge(Charge),
}

/// A budget administrator set (or, with None, removed) a role's limits.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// PostgreSQL timestamp: microseconds since 2000-01-01 UTC.
    pub time: i64,
    pub role: u32,
    pub limit: Option<Budget>,
}

/// What a role may spend in all: ε, and δ for (ε, δ) mechanisms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    pub epsilon: f64,
    pub delta: f64,
}

/// One evaluation of a DP aggregate.
#[derive(Debug, Clone, PartialEq)]
pub struct Charge {
    pub time: i64,
    pub role: u32,
    pub epsilon: f64,
    /// The δ of an (ε, δ) mechanism, 0 for pure ε-DP.
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
                let limit = limit.map_or("none".to_string(), |l| {
                    format!("{:?}\t{:?}", l.epsilon, l.delta)
                });
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
            // A limit line of four fields comes from before δ was budgeted: δ limit 0.
            (Some(&"limit"), count @ (4 | 5)) => Ok(Record::Limit(Limit {
                time: integer(1)?,
                role: integer(2)? as u32,
                limit: match (fields[3], count) {
                    ("none", 4) => None,
                    (_, 4) => Some(Budget {
                        epsilon: number(3)?,
                        delta: 0.0,
                    }),
                    _ => Some(Budget {
                        epsilon: number(3)?,
                        delta: number(4)?,
                    }),
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

    /// When it was written (a timestamp in PostgreSQL's microseconds since 2000).
    pub fn time(&self) -> i64 {
        match self {
            Record::Limit(limit) => limit.time,
            Record::Charge(charge) => charge.time,
        }
    }

    pub fn role(&self) -> u32 {
        match self {
            Record::Limit(Limit { role, .. }) | Record::Charge(Charge { role, .. }) => *role,
        }
    }
}

/// What one role may spend and has spent, in units: ε in `limit` and `spent`, δ in
/// `delta_limit` and `delta_spent` (a role with a limit has both).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Account {
    pub limit: Option<u64>,
    pub spent: u64,
    pub delta_limit: Option<u64>,
    pub delta_spent: u64,
}

/// What a charge costs, in units.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cost {
    pub epsilon: u64,
    pub delta: u64,
}

impl Cost {
    pub fn of(charge: &Charge) -> Self {
        Cost {
            epsilon: EPSILON.charge(charge.epsilon),
            delta: DELTA.charge(charge.delta),
        }
    }

    pub fn plus(self, other: Cost) -> Self {
        Cost {
            epsilon: self.epsilon.saturating_add(other.epsilon),
            delta: self.delta.saturating_add(other.delta),
        }
    }
}

impl Account {
    pub fn apply(&mut self, record: &Record) {
        match record {
            Record::Limit(Limit { limit, .. }) => {
                self.limit = limit.map(|l| EPSILON.limit(l.epsilon));
                self.delta_limit = limit.map(|l| DELTA.limit(l.delta));
            }
            Record::Charge(charge) => {
                let cost = Cost::of(charge);
                self.spent = self.spent.saturating_add(cost.epsilon);
                self.delta_spent = self.delta_spent.saturating_add(cost.delta);
            }
        }
    }

    /// Whether a charge of `units` of ε stays within the limit.
    pub fn allows(&self, units: u64) -> bool {
        self.limit
            .is_none_or(|limit| self.spent.saturating_add(units) <= limit)
    }

    /// Whether a charge of `units` of δ stays within the δ limit (a pure ε-DP charge,
    /// of no δ, always does: lowering a δ limit below what was spent stops only (ε, δ)
    /// mechanisms).
    pub fn allows_delta(&self, units: u64) -> bool {
        units == 0
            || self
                .delta_limit
                .is_none_or(|limit| self.delta_spent.saturating_add(units) <= limit)
    }

    /// The units of ε left, when there is a limit.
    pub fn remaining(&self) -> Option<u64> {
        self.limit.map(|limit| limit.saturating_sub(self.spent))
    }

    /// The units of δ left, when there is a limit.
    pub fn delta_remaining(&self) -> Option<u64> {
        self.delta_limit
            .map(|limit| limit.saturating_sub(self.delta_spent))
    }
}

/// The complete lines of a ledger's text. A last line without its newline is a write cut
/// short by a crash: that charge was never fsynced, so its result never left, and it does
/// not count.
pub fn complete_lines(text: &str) -> &str {
    &text[..text.rfind('\n').map_or(0, |at| at + 1)]
}

/// One line of the ledger file: a record and the write-ahead log position (LSN) that
/// wrote it. Every record since the ledger is WAL-logged carries the end of its WAL
/// record; 0 marks a line written before (by a release that kept only the file). The
/// LSN is what makes replay idempotent: a line or record at or before what was applied
/// is not applied again.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub lsn: u64,
    pub record: Record,
}

impl Entry {
    /// The record's line, with the LSN as a last field in PostgreSQL's `X/Y` form (a `/`
    /// no other field has).
    pub fn line(&self) -> String {
        let mut line = self.record.line();
        if self.lsn != 0 {
            line.pop();
            let _ = writeln!(line, "\t{}", lsn_text(self.lsn));
        }
        line
    }

    /// Parses one line (without its newline).
    pub fn parse(line: &str) -> Result<Self, String> {
        match line.rsplit_once('\t') {
            Some((record, lsn)) if lsn.contains('/') => Ok(Entry {
                lsn: parse_lsn(lsn).ok_or_else(|| format!("not an LSN in {line:?}"))?,
                record: Record::parse(record)?,
            }),
            _ => Ok(Entry {
                lsn: 0,
                record: Record::parse(line)?,
            }),
        }
    }
}

/// An LSN as PostgreSQL writes it (`pg_lsn`): two hexadecimal halves.
pub fn lsn_text(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xffff_ffff)
}

pub fn parse_lsn(text: &str) -> Option<u64> {
    let (high, low) = text.split_once('/')?;
    let high = u32::from_str_radix(high, 16).ok()? as u64;
    let low = u32::from_str_radix(low, 16).ok()? as u64;
    Some(high << 32 | low)
}

/// The entries of a ledger's complete lines, in order; any malformed line is an error.
pub fn parse(complete: &str) -> Result<Vec<Entry>, String> {
    complete.lines().map(Entry::parse).collect()
}

/// The records of a WAL record's payload (lines without LSNs), stamped with its LSN.
pub fn parse_payload(payload: &str, lsn: u64) -> Result<Vec<Entry>, String> {
    payload
        .lines()
        .map(|line| {
            Ok(Entry {
                lsn,
                record: Record::parse(line)?,
            })
        })
        .collect()
}

/// The accounts `entries` add to `accounts`, by role: only entries after `through` (all
/// of them when it is None: nothing was applied yet).
pub fn replay_onto(accounts: &mut BTreeMap<u32, Account>, entries: &[Entry], through: Option<u64>) {
    for entry in entries
        .iter()
        .filter(|entry| through.is_none_or(|through| entry.lsn > through))
    {
        accounts
            .entry(entry.record.role())
            .or_default()
            .apply(&entry.record);
    }
}

/// The accounts the entries add up to, by role.
pub fn replay(entries: &[Entry]) -> BTreeMap<u32, Account> {
    let mut accounts = BTreeMap::new();
    replay_onto(&mut accounts, entries, None);
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
            limit: limit.map(|epsilon| Budget {
                epsilon,
                delta: 1e-6,
            }),
        })
    }

    #[test]
    fn lines_round_trip() {
        let records = [
            Record::Limit(Limit {
                time: 7,
                role: 16384,
                limit: Some(Budget {
                    epsilon: 0.1 + 0.2,
                    delta: 1e-7,
                }),
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
        // A limit from before δ was budgeted allows no δ.
        assert_eq!(
            Record::parse("limit\t1\t2\t0.5").unwrap(),
            Record::Limit(Limit {
                time: 1,
                role: 2,
                limit: Some(Budget {
                    epsilon: 0.5,
                    delta: 0.0
                })
            })
        );
        assert!(Record::parse("refund\t1\t2\t3").is_err());
    }

    #[test]
    fn ten_tenths_fill_a_budget_of_one_exactly() {
        let mut account = Account::default();
        account.apply(&limit(1, Some(1.0)));
        for _ in 0..10 {
            assert!(account.allows(EPSILON.charge(0.1)));
            account.apply(&charge(1, 0.1));
        }
        assert_eq!(account.remaining(), Some(0));
        assert!(!account.allows(EPSILON.charge(1e-12)));
        let mut thirds = Account::default();
        thirds.apply(&limit(1, Some(0.3)));
        for _ in 0..3 {
            assert!(thirds.allows(EPSILON.charge(0.1)));
            thirds.apply(&charge(1, 0.1));
        }
    }

    #[test]
    fn delta_is_limited_beside_epsilon() {
        let mut account = Account::default();
        account.apply(&limit(1, Some(10.0)));
        assert_eq!(account.delta_remaining(), Some(DELTA.limit(1e-6)));
        let spend = |delta| {
            Record::Charge(Charge {
                time: 1,
                role: 1,
                epsilon: 0.1,
                delta,
                aggregate: "dp_partition".into(),
                statement: 0,
            })
        };
        for _ in 0..4 {
            account.apply(&spend(2.5e-7));
        }
        assert_eq!(account.delta_remaining(), Some(0));
        assert!(!account.allows_delta(DELTA.charge(1e-18)));
        assert!(account.allows_delta(0), "pure epsilon-DP needs no delta");
        assert_eq!(account.remaining(), Some(EPSILON.limit(9.6)));
    }

    #[test]
    fn a_limit_keeps_what_was_spent() {
        let mut account = Account::default();
        account.apply(&charge(1, 2.0));
        assert!(account.allows(EPSILON.charge(1e6)), "no limit, no refusal");
        account.apply(&limit(1, Some(2.5)));
        assert_eq!(account.remaining(), Some(EPSILON.limit(0.5)));
        assert!(!account.allows(EPSILON.charge(0.6)));
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
        assert_eq!(accounts[&1].spent, EPSILON.charge(0.5));
        assert_eq!(accounts[&1].limit, Some(EPSILON.limit(1.0)));
        assert_eq!(
            accounts[&2],
            Account {
                limit: None,
                spent: EPSILON.charge(0.5),
                delta_limit: None,
                delta_spent: 0,
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
