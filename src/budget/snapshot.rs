//! A snapshot of the accounts: what the ledger added up to through one WAL position,
//! and how many bytes of the ledger file that covers. Start-up reads the snapshot and
//! only the ledger lines after it, so its cost does not grow with the history; the
//! ledger file keeps every line for dp_ledger.

use super::ledger::{lsn_text, Account};

/// The accounts through `through`, which the first `offset` bytes of the ledger add up to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// The LSN of the last record in the accounts (0: only lines from before WAL).
    pub through: u64,
    /// The length of the ledger file the accounts cover, in bytes.
    pub offset: u64,
    pub accounts: Vec<(u32, Account)>,
}

impl Snapshot {
    /// The file's text: a header, a line per account (amounts in units), and an `end`
    /// line, so that a file cut short is never read as a smaller set of accounts.
    pub fn text(&self) -> String {
        let optional = |units: Option<u64>| units.map_or("none".to_string(), |u| u.to_string());
        let mut text = format!("snapshot\t{}\t{}\n", lsn_text(self.through), self.offset);
        for (role, account) in &self.accounts {
            text.push_str(&format!(
                "account\t{role}\t{}\t{}\t{}\t{}\n",
                optional(account.limit),
                account.spent,
                optional(account.delta_limit),
                account.delta_spent
            ));
        }
        text.push_str("end\n");
        text
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let malformed = |line: &str| format!("not a snapshot line: {line:?}");
        let mut lines = text.lines();
        let header = lines.next().unwrap_or_default();
        let mut snapshot = match header.split('\t').collect::<Vec<_>>()[..] {
            ["snapshot", through, offset] => Snapshot {
                through: super::ledger::parse_lsn(through).ok_or_else(|| malformed(header))?,
                offset: offset.parse().map_err(|_| malformed(header))?,
                accounts: Vec::new(),
            },
            _ => return Err(malformed(header)),
        };
        let units = |field: &str| field.parse::<u64>().ok();
        let optional = |field: &str| match field {
            "none" => Some(None),
            _ => units(field).map(Some),
        };
        for line in lines {
            match line.split('\t').collect::<Vec<_>>()[..] {
                ["end"] => return Ok(snapshot),
                ["account", role, limit, spent, delta_limit, delta_spent] => {
                    let account = (|| {
                        Some(Account {
                            limit: optional(limit)?,
                            spent: units(spent)?,
                            delta_limit: optional(delta_limit)?,
                            delta_spent: units(delta_spent)?,
                        })
                    })()
                    .ok_or_else(|| malformed(line))?;
                    let role = role.parse().map_err(|_| malformed(line))?;
                    snapshot.accounts.push((role, account));
                }
                _ => return Err(malformed(line)),
            }
        }
        Err("the snapshot has no end line (cut short)".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_round_trip_and_a_cut_is_an_error() {
        let snapshot = Snapshot {
            through: 0x1_0000_00a8,
            offset: 4096,
            accounts: vec![
                (
                    16384,
                    Account {
                        limit: Some(1_000_000_000_000),
                        spent: 250_000_000_000,
                        delta_limit: Some(1_000_000_000_000),
                        delta_spent: 0,
                    },
                ),
                (10, Account::default()),
            ],
        };
        let text = snapshot.text();
        assert!(text.starts_with("snapshot\t1/A8\t4096\n"), "{text}");
        assert_eq!(Snapshot::parse(&text).unwrap(), snapshot);
        let cut = &text[..text.len() - 4];
        assert_eq!(
            Snapshot::parse(cut).unwrap_err(),
            "the snapshot has no end line (cut short)"
        );
        assert!(Snapshot::parse("account\t1\n").is_err());
        assert!(Snapshot::parse("snapshot\t0/0\t0\naccount\t1\tx\t0\tnone\t0\nend\n").is_err());
    }
}
