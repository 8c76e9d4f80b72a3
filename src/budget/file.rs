//! The ledger file: append-only lines in the data directory, read back whole.
//!
//! One reader serves both start-up replay and the dp_ledger view, so that both see the
//! same records: a malformed complete line is an error for both, and a torn last line
//! (see [`complete_lines`]) counts for neither.

use super::ledger::{self, complete_lines, Record};
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;

/// The ledger's directory and file, relative to the data directory (every backend's
/// working directory).
pub const LEDGER_DIRECTORY: &str = "pg_exp_mech";
pub const LEDGER_PATH: &str = "pg_exp_mech/ledger";

/// What a ledger file holds.
#[derive(Debug, Default, PartialEq)]
pub struct Contents {
    /// The records of its complete lines, in order.
    pub records: Vec<Record>,
    /// The length of its complete lines, in bytes.
    pub complete: u64,
    /// Bytes of a torn last line after them (0 if none).
    pub torn: u64,
}

/// A ledger file, opened for appending on first use.
#[derive(Debug)]
pub struct LedgerFile {
    path: PathBuf,
    appender: Option<File>,
}

impl LedgerFile {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            appender: None,
        }
    }

    /// Every record of the file; a missing file is an empty ledger.
    pub fn read(&self) -> Result<Contents, String> {
        let bytes = match fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Contents::default()),
            Err(e) => return Err(format!("{}: {e}", self.path.display())),
        };
        let text = String::from_utf8(bytes).map_err(|e| format!("{}: {e}", self.path.display()))?;
        let complete = complete_lines(&text);
        Ok(Contents {
            records: ledger::parse(complete)?,
            complete: complete.len() as u64,
            torn: (text.len() - complete.len()) as u64,
        })
    }

    /// Reads the file for start-up: creates its directory (private to the server's
    /// user) and cuts a torn last line away, so that the next line starts on a line of
    /// its own.
    pub fn recover(&self) -> Result<Contents, String> {
        if let Some(directory) = self.path.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(directory)
                .map_err(|e| format!("{}: {e}", directory.display()))?;
        }
        let contents = self.read()?;
        if contents.torn > 0 {
            OpenOptions::new()
                .write(true)
                .open(&self.path)
                .and_then(|file| file.set_len(contents.complete))
                .map_err(|e| format!("truncating a torn last line: {e}"))?;
        }
        Ok(contents)
    }

    /// Appends one line (a [`Record::line`]); with `durable`, returns once it is on disk.
    pub fn append(&mut self, line: &str, durable: bool) -> Result<(), String> {
        if self.appender.is_none() {
            let file = OpenOptions::new()
                .append(true)
                .create(true)
                .mode(0o600)
                .open(&self.path)
                .map_err(|e| format!("{}: {e}", self.path.display()))?;
            self.appender = Some(file);
        }
        let file = self.appender.as_mut().expect("just opened");
        file.write_all(line.as_bytes())
            .and_then(|()| if durable { file.sync_data() } else { Ok(()) })
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::ledger::{Budget, Charge, Limit};

    /// A fresh directory of this test's own under the system's temporary directory.
    fn scratch(name: &str) -> PathBuf {
        let directory =
            std::env::temp_dir().join(format!("pg_exp_mech-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&directory);
        directory
    }

    fn charge(role: u32) -> Record {
        Record::Charge(Charge {
            time: 5,
            role,
            epsilon: 0.5,
            delta: 0.0,
            aggregate: "dp_argmax".into(),
            statement: 1,
        })
    }

    #[test]
    fn appended_lines_are_read_back_in_order() {
        let directory = scratch("append");
        let mut file = LedgerFile::new(directory.join("pg_exp_mech/ledger"));
        assert_eq!(
            file.recover().unwrap(),
            Contents::default(),
            "no file: an empty ledger"
        );
        let limit = Record::Limit(Limit {
            time: 1,
            role: 9,
            limit: Some(Budget {
                epsilon: 2.0,
                delta: 1e-6,
            }),
        });
        file.append(&limit.line(), true).unwrap();
        file.append(&charge(9).line(), false).unwrap();
        let contents = file.read().unwrap();
        assert_eq!(contents.records, [limit, charge(9)]);
        assert_eq!(contents.torn, 0);
        fs::remove_dir_all(directory).unwrap();
    }

    #[test]
    fn a_torn_last_line_is_ignored_then_cut_away_at_start_up() {
        let directory = scratch("torn");
        fs::create_dir_all(&directory).unwrap();
        let path = directory.join("ledger");
        let whole = charge(1).line();
        fs::write(&path, format!("{whole}charge\t9\t1\t0.2")).unwrap();
        let file = LedgerFile::new(&path);
        let read = file.read().unwrap();
        assert_eq!((read.records.len(), read.torn), (1, 14));
        assert_eq!(
            fs::read_to_string(&path).unwrap().len(),
            whole.len() + 14,
            "read leaves the file alone"
        );
        let recovered = file.recover().unwrap();
        assert_eq!(recovered.records, read.records);
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            whole,
            "recover truncates the torn line"
        );
        fs::remove_dir_all(directory).unwrap();
    }

    #[test]
    fn a_malformed_complete_line_is_an_error_for_every_reader() {
        let directory = scratch("malformed");
        fs::create_dir_all(&directory).unwrap();
        let path = directory.join("ledger");
        fs::write(
            &path,
            format!("{}refund\t1\t2\n{}", charge(1).line(), charge(2).line()),
        )
        .unwrap();
        let file = LedgerFile::new(&path);
        assert_eq!(
            file.read().unwrap_err(),
            "not a ledger line: \"refund\\t1\\t2\""
        );
        assert!(file.recover().is_err());
        fs::write(&path, [0xff, b'\n']).unwrap();
        assert!(file.read().unwrap_err().contains("invalid utf-8"));
        fs::remove_dir_all(directory).unwrap();
    }
}
