//! The ledger file: append-only lines in the data directory, and the snapshot of the
//! accounts beside it.
//!
//! One reader serves start-up, replay and the dp_ledger view, so that all see the same
//! records: a malformed complete line is an error for each, and a torn last line (see
//! [`complete_lines`]) counts for none.

use super::ledger::{self, complete_lines, Entry};
use super::snapshot::Snapshot;
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The ledger's directory and files, relative to the data directory (every server
/// process's working directory).
pub const LEDGER_DIRECTORY: &str = "pg_exp_mech";
pub const LEDGER_PATH: &str = "pg_exp_mech/ledger";
pub const SNAPSHOT_PATH: &str = "pg_exp_mech/snapshot";

/// What a ledger file holds from some offset on.
#[derive(Debug, Default, PartialEq)]
pub struct Contents {
    /// The entries of its complete lines after the offset, in order.
    pub records: Vec<Entry>,
    /// Where its complete lines end, in bytes from the start of the file.
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
        self.read_from(0)
    }

    /// The records after the first `offset` bytes (which end a line). An offset past
    /// the end reads nothing.
    pub fn read_from(&self, offset: u64) -> Result<Contents, String> {
        let at = |e: std::io::Error| format!("{}: {e}", self.path.display());
        let mut file = match File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Contents::default()),
            Err(e) => return Err(at(e)),
        };
        let length = file.metadata().map_err(at)?.len();
        let start = offset.min(length);
        let mut bytes = Vec::new();
        file.seek(SeekFrom::Start(start))
            .and_then(|_| file.read_to_end(&mut bytes))
            .map_err(at)?;
        let text = String::from_utf8(bytes).map_err(|e| format!("{}: {e}", self.path.display()))?;
        let complete = complete_lines(&text);
        Ok(Contents {
            records: ledger::parse(complete)?,
            complete: start + complete.len() as u64,
            torn: (text.len() - complete.len()) as u64,
        })
    }

    /// The last complete line's entry, read from the end of the file (a line is far
    /// shorter than the 64 KiB read).
    pub fn last_entry(&self) -> Result<Option<Entry>, String> {
        let length = match fs::metadata(&self.path) {
            Ok(metadata) => metadata.len(),
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", self.path.display())),
        };
        let start = length.saturating_sub(1 << 16);
        let mut file =
            File::open(&self.path).map_err(|e| format!("{}: {e}", self.path.display()))?;
        let mut bytes = Vec::new();
        file.seek(SeekFrom::Start(start))
            .and_then(|_| file.read_to_end(&mut bytes))
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        let text = String::from_utf8_lossy(&bytes);
        let complete = complete_lines(&text);
        match complete.lines().last() {
            // A chunk that starts mid-line has a last line all the same.
            Some(line) if start == 0 || complete.lines().count() > 1 => {
                Entry::parse(line).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// Reads the file from `offset` for start-up: creates its directory (private to the
    /// server's user) and cuts a torn last line away, so that the next line starts on a
    /// line of its own.
    pub fn recover(&self, offset: u64) -> Result<Contents, String> {
        if let Some(directory) = self.path.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(directory)
                .map_err(|e| format!("{}: {e}", directory.display()))?;
        }
        let contents = self.read_from(offset)?;
        if contents.torn > 0 {
            OpenOptions::new()
                .write(true)
                .open(&self.path)
                .and_then(|file| file.set_len(contents.complete))
                .map_err(|e| format!("truncating a torn last line: {e}"))?;
        }
        Ok(contents)
    }

    /// Opens the file for appending unless it is open: the one step of an append that
    /// can fail for reasons known in advance (permissions, a missing directory).
    pub fn open(&mut self) -> Result<(), String> {
        if self.appender.is_none() {
            let file = OpenOptions::new()
                .append(true)
                .create(true)
                .mode(0o600)
                .open(&self.path)
                .map_err(|e| format!("{}: {e}", self.path.display()))?;
            self.appender = Some(file);
        }
        Ok(())
    }

    /// Appends lines (of [`Entry::line`]); with `durable`, returns once they are on disk.
    pub fn append(&mut self, lines: &str, durable: bool) -> Result<(), String> {
        self.open()?;
        let file = self.appender.as_mut().expect("just opened");
        file.write_all(lines.as_bytes())
            .and_then(|()| if durable { file.sync_data() } else { Ok(()) })
            .map_err(|e| e.to_string())
    }
}

/// The snapshot at `path`, if there is one.
pub fn read_snapshot(path: impl AsRef<Path>) -> Result<Option<Snapshot>, String> {
    let path = path.as_ref();
    match fs::read_to_string(path) {
        Ok(text) => Snapshot::parse(&text)
            .map(Some)
            .map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Replaces the snapshot at `path` whole: written to a temporary file, synced, renamed
/// over the old one and the directory synced, so that a crash leaves the old snapshot
/// or the new one.
pub fn write_snapshot(path: impl AsRef<Path>, snapshot: &Snapshot) -> Result<(), String> {
    let path = path.as_ref();
    let temporary = path.with_extension("new");
    let at = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)
        .map_err(at)?;
    file.write_all(snapshot.text().as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(at)?;
    fs::rename(&temporary, path).map_err(at)?;
    let directory = path.parent().filter(|p| !p.as_os_str().is_empty());
    File::open(directory.unwrap_or(Path::new(".")))
        .and_then(|directory| directory.sync_all())
        .map_err(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::ledger::{Budget, Charge, Limit, Record};

    /// A fresh directory of this test's own under the system's temporary directory.
    fn scratch(name: &str) -> PathBuf {
        let directory =
            std::env::temp_dir().join(format!("pg_exp_mech-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&directory);
        directory
    }

    fn charge(role: u32) -> Entry {
        entry(Record::Charge(Charge {
            time: 5,
            role,
            epsilon: 0.5,
            delta: 0.0,
            aggregate: "dp_argmax".into(),
            statement: 1,
        }))
    }

    fn entry(record: Record) -> Entry {
        Entry {
            lsn: 0x2_0000_0010,
            record,
        }
    }

    #[test]
    fn appended_lines_are_read_back_in_order() {
        let directory = scratch("append");
        let mut file = LedgerFile::new(directory.join("pg_exp_mech/ledger"));
        assert_eq!(
            file.recover(0).unwrap(),
            Contents::default(),
            "no file: an empty ledger"
        );
        let limit = entry(Record::Limit(Limit {
            time: 1,
            role: 9,
            limit: Some(Budget {
                epsilon: 2.0,
                delta: 1e-6,
            }),
        }));
        file.append(&limit.line(), true).unwrap();
        file.append(&charge(9).line(), false).unwrap();
        let contents = file.read().unwrap();
        assert_eq!(contents.records, [limit.clone(), charge(9)]);
        assert_eq!(contents.torn, 0);
        assert_eq!(file.last_entry().unwrap(), Some(charge(9)));
        let tail = file.read_from(limit.line().len() as u64).unwrap();
        assert_eq!(tail.records, [charge(9)], "the lines after an offset");
        assert_eq!(tail.complete, contents.complete);
        assert!(file
            .read_from(contents.complete + 10)
            .unwrap()
            .records
            .is_empty());
        // The snapshot beside it: none yet, then the one written last.
        let snapshot_path = directory.join("pg_exp_mech/snapshot");
        assert_eq!(read_snapshot(&snapshot_path).unwrap(), None);
        for offset in [1, 2] {
            let snapshot = Snapshot {
                through: 0x10,
                offset,
                accounts: vec![(9, Default::default())],
            };
            write_snapshot(&snapshot_path, &snapshot).unwrap();
            assert_eq!(read_snapshot(&snapshot_path).unwrap(), Some(snapshot));
        }
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
        let after = file.read_from(whole.len() as u64).unwrap();
        assert_eq!(
            (after.records.len(), after.complete, after.torn),
            (0, whole.len() as u64, 14)
        );
        assert_eq!(
            fs::read_to_string(&path).unwrap().len(),
            whole.len() + 14,
            "read leaves the file alone"
        );
        let recovered = file.recover(0).unwrap();
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
        assert!(file.recover(0).is_err());
        fs::write(&path, [0xff, b'\n']).unwrap();
        assert!(file.read().unwrap_err().contains("invalid utf-8"));
        fs::remove_dir_all(directory).unwrap();
    }
}
