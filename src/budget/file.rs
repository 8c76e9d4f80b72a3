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
/// Where dropped archives are noted (dp_ledger_drop_archives), one line each.
pub const DROPPED_PATH: &str = "pg_exp_mech/dropped";
/// Archives of the ledger sit beside it as `ledger.<LSN>`: the ledger file as it stood
/// when a snapshot covered all of it, named by the LSN of its last record.
const ARCHIVE_PREFIX: &str = "ledger.";

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
    /// The rotation the open appender belongs to (see [`LedgerFile::follow`]).
    rotation: u64,
}

impl LedgerFile {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            appender: None,
            rotation: 0,
        }
    }

    /// After the `rotation`-th rotation the path names a new file: an appender opened
    /// before it (on the archive, under its new name) is closed, and the next append
    /// opens the new file.
    pub fn follow(&mut self, rotation: u64) {
        if self.rotation != rotation {
            self.appender = None;
            self.rotation = rotation;
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

/// One archive of the ledger.
#[derive(Debug, Clone, PartialEq)]
pub struct Archive {
    /// Its file name, `ledger.<LSN>`.
    pub name: String,
    pub path: PathBuf,
    /// The LSN of its last record: every record of the archive is at or before it.
    pub through: u64,
}

/// The archive name of a ledger file whose last record is at `through`.
pub fn archive_name(through: u64) -> String {
    format!("{ARCHIVE_PREFIX}{through:016X}")
}

/// Renames the ledger file at `ledger` to its archive beside it and syncs the directory:
/// the next append starts a new, empty file. Call it only once a snapshot covers every
/// line of the file. Refuses to replace an archive of the same name.
pub fn rotate(ledger: &Path, through: u64) -> Result<PathBuf, String> {
    let directory = ledger.parent().unwrap_or(Path::new("."));
    let archive = directory.join(archive_name(through));
    if archive.exists() {
        return Err(format!("{} exists already", archive.display()));
    }
    let at = |e: std::io::Error| format!("{}: {e}", ledger.display());
    fs::rename(ledger, &archive).map_err(at)?;
    File::open(directory)
        .and_then(|directory| directory.sync_all())
        .map_err(at)?;
    Ok(archive)
}

/// The archives in `directory`, oldest first.
pub fn archives(directory: &Path) -> Result<Vec<Archive>, String> {
    let entries = match fs::read_dir(directory) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("{}: {e}", directory.display())),
    };
    let mut archives = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", directory.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let through = name
            .strip_prefix(ARCHIVE_PREFIX)
            .filter(|hex| hex.len() == 16)
            .and_then(|hex| u64::from_str_radix(hex, 16).ok());
        if let Some(through) = through {
            archives.push(Archive {
                name,
                path: entry.path(),
                through,
            });
        }
    }
    archives.sort_by_key(|archive| archive.through);
    Ok(archives)
}

/// An archive removed by dp_ledger_drop_archives: noted in [`DROPPED_PATH`], so that
/// dp_ledger says where its history went.
#[derive(Debug, Clone, PartialEq)]
pub struct Dropped {
    /// When it was removed (PostgreSQL's microseconds since 2000).
    pub time: i64,
    pub name: String,
    pub through: u64,
}

/// Notes `dropped` (synced), before its archive is removed.
pub fn note_dropped(path: impl AsRef<Path>, dropped: &Dropped) -> Result<(), String> {
    let path = path.as_ref();
    let line = format!(
        "dropped\t{}\t{}\t{}\n",
        dropped.time,
        dropped.name,
        ledger::lsn_text(dropped.through)
    );
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut file| {
            file.write_all(line.as_bytes())
                .and_then(|()| file.sync_data())
        })
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Every archive noted as dropped, in the order they were.
pub fn read_dropped(path: impl AsRef<Path>) -> Result<Vec<Dropped>, String> {
    let path = path.as_ref();
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    complete_lines(&text)
        .lines()
        .map(|line| {
            let dropped = match line.split('\t').collect::<Vec<_>>()[..] {
                ["dropped", time, name, through] => time.parse().ok().and_then(|time| {
                    Some(Dropped {
                        time,
                        name: name.into(),
                        through: ledger::parse_lsn(through)?,
                    })
                }),
                _ => None,
            };
            dropped.ok_or_else(|| {
                format!(
                    "{}: not a line of dropped archives: {line:?}",
                    path.display()
                )
            })
        })
        .collect()
}

/// What start-up finds in the snapshot and the ledger lines after it.
#[derive(Debug, PartialEq)]
pub struct Loaded {
    pub accounts: std::collections::BTreeMap<u32, super::ledger::Account>,
    /// The LSN of the last record in the accounts.
    pub through: u64,
    /// The LSN of the ledger file's last line.
    pub file_through: u64,
    /// Where the file's last complete line ends.
    pub file_length: u64,
    /// Lines read after the snapshot.
    pub lines: u64,
    /// A torn last line was cut away.
    pub torn: bool,
    /// The snapshot's offset lies beyond the file (a rotation cut short by a crash, a
    /// restored base backup): the file was read whole, and a new snapshot must replace
    /// this one before the file grows past that offset.
    pub stale_snapshot: bool,
}

/// Reads the snapshot at `snapshot` and the ledger at `ledger` for start-up. Lines are
/// applied by LSN (those after the snapshot's), so reading more of the file than the
/// snapshot's offset never counts a line twice.
pub fn load(snapshot: &Path, ledger: &Path) -> Result<Loaded, String> {
    let snapshot = read_snapshot(snapshot)?;
    let file = LedgerFile::new(ledger);
    let offset = snapshot.as_ref().map_or(0, |s| s.offset);
    let mut contents = file.recover(offset)?;
    let stale_snapshot = contents.complete < offset;
    if stale_snapshot {
        contents = file.recover(0)?;
    }
    let through = snapshot.as_ref().map(|s| s.through);
    let mut accounts: std::collections::BTreeMap<u32, super::ledger::Account> = snapshot
        .map(|s| s.accounts.into_iter().collect())
        .unwrap_or_default();
    ledger::replay_onto(&mut accounts, &contents.records, through);
    // The newest record of the file: among the lines just read, or, when none follow
    // the snapshot, the file's last line (a line from before the WAL-logged ledger has
    // no LSN: 0), or the last archive's (a file just rotated is empty): replay appends
    // only records after it, so that none is both archived and in the new file.
    let newest = match contents.records.iter().map(|entry| entry.lsn).max() {
        Some(newest) => newest,
        None => file.last_entry()?.map_or(0, |entry| entry.lsn),
    };
    let directory = ledger.parent().unwrap_or(Path::new("."));
    let archived = archives(directory)?
        .last()
        .map_or(0, |archive| archive.through);
    let file_through = newest.max(archived);
    Ok(Loaded {
        accounts,
        through: through.unwrap_or(0).max(file_through),
        file_through,
        file_length: contents.complete,
        lines: contents.records.len() as u64,
        torn: contents.torn > 0,
        stale_snapshot,
    })
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

    fn charge_at(lsn: u64, role: u32) -> Entry {
        Entry {
            lsn,
            ..charge(role)
        }
    }

    /// A ledger of `lines` charges (LSNs 1..=lines) and a snapshot that covers it.
    fn ledger_with_snapshot(directory: &Path, lines: u64) -> (PathBuf, PathBuf, Vec<Entry>) {
        let (ledger, snapshot) = (directory.join("ledger"), directory.join("snapshot"));
        let entries: Vec<Entry> = (1..=lines)
            .map(|lsn| charge_at(lsn, lsn as u32 % 3))
            .collect();
        let mut file = LedgerFile::new(&ledger);
        file.recover(0).unwrap();
        let text: String = entries.iter().map(Entry::line).collect();
        file.append(&text, true).unwrap();
        write_snapshot(
            &snapshot,
            &Snapshot {
                through: lines,
                offset: text.len() as u64,
                accounts: ledger::replay(&entries).into_iter().collect(),
            },
        )
        .unwrap();
        (ledger, snapshot, entries)
    }

    #[test]
    fn a_rotation_keeps_every_account_through_a_crash_at_any_step() {
        let later: Vec<Entry> = (6..=8).map(|lsn| charge_at(lsn, 7)).collect();
        let later_text: String = later.iter().map(Entry::line).collect();
        // Each step a crash can stop the rotation at, then the lines written after it.
        for step in [
            "before the rename",
            "after the rename",
            "after the new snapshot",
        ] {
            let directory = scratch(&format!("rotation-{}", step.replace(' ', "-")));
            fs::create_dir_all(&directory).unwrap();
            let (ledger, snapshot, mut entries) = ledger_with_snapshot(&directory, 5);
            if step != "before the rename" {
                assert_eq!(
                    rotate(&ledger, 5).unwrap(),
                    directory.join("ledger.0000000000000005")
                );
                assert!(rotate(&ledger, 5).is_err(), "never over an archive");
            }
            if step == "after the new snapshot" {
                let mut covered = read_snapshot(&snapshot).unwrap().unwrap();
                covered.offset = 0;
                write_snapshot(&snapshot, &covered).unwrap();
            }
            let loaded = load(&snapshot, &ledger).unwrap();
            assert_eq!(loaded.accounts, ledger::replay(&entries), "{step}");
            assert_eq!((loaded.through, loaded.file_through), (5, 5), "{step}");
            assert_eq!(loaded.stale_snapshot, step == "after the rename", "{step}");
            // The server goes on: a stale snapshot is replaced at once (as start-up
            // does), then lines are appended and the next start-up counts each once.
            if loaded.stale_snapshot {
                write_snapshot(
                    &snapshot,
                    &Snapshot {
                        through: loaded.through,
                        offset: loaded.file_length,
                        accounts: loaded.accounts.clone().into_iter().collect(),
                    },
                )
                .unwrap();
            }
            LedgerFile::new(&ledger).append(&later_text, true).unwrap();
            entries.extend(later.iter().cloned());
            let again = load(&snapshot, &ledger).unwrap();
            assert_eq!(
                again.accounts,
                ledger::replay(&entries),
                "{step}, then 3 lines"
            );
            assert_eq!((again.through, again.lines), (8, 3), "{step}");
            assert!(!again.stale_snapshot);
            // The archive keeps the first five lines, once.
            let archived = archives(&directory).unwrap();
            if step == "before the rename" {
                assert!(archived.is_empty());
            } else {
                assert_eq!(archived.len(), 1);
                assert_eq!(archived[0].through, 5);
                assert_eq!(
                    LedgerFile::new(&archived[0].path)
                        .read()
                        .unwrap()
                        .records
                        .len(),
                    5
                );
            }
            fs::remove_dir_all(directory).unwrap();
        }
    }

    #[test]
    fn archives_are_listed_oldest_first_and_drops_are_noted() {
        let directory = scratch("archives");
        fs::create_dir_all(&directory).unwrap();
        for through in [0x2_0000_0000u64, 0x10, 0xff] {
            fs::write(directory.join(archive_name(through)), "").unwrap();
        }
        fs::write(directory.join("ledger.new"), "").unwrap();
        fs::write(directory.join("ledger"), "").unwrap();
        let listed: Vec<u64> = archives(&directory)
            .unwrap()
            .iter()
            .map(|a| a.through)
            .collect();
        assert_eq!(listed, [0x10, 0xff, 0x2_0000_0000]);
        let dropped = directory.join("dropped");
        assert_eq!(read_dropped(&dropped).unwrap(), []);
        let note = Dropped {
            time: 42,
            name: archive_name(0x10),
            through: 0x10,
        };
        note_dropped(&dropped, &note).unwrap();
        note_dropped(&dropped, &note).unwrap();
        assert_eq!(read_dropped(&dropped).unwrap(), [note.clone(), note]);
        fs::write(&dropped, "dropped\tx\n").unwrap();
        assert!(read_dropped(&dropped).is_err());
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
