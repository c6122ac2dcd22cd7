//! The ledger: one line per handler event, appended by `fault-worker` and read by the tests.
//!
//! A line is `kind \t token \t attempt \t pid \t unix_ms \t key \n`, the key last so that it
//! may hold any printable text. Kinds:
//!
//! | kind | written |
//! |---|---|
//! | `S` | when the handler starts |
//! | `F` | when the handler has done its work and is about to return `Ok`: the job's side effect, made only if `ctx.is_cancelled()` is false right before it |
//! | `C` | when the handler saw `ctx.cancelled()` and gave up (its result is discarded anyway) |
//! | `X` | right before the handler aborts the process (the poison pill) |
//! | `E` | when the handler returns `Err` on purpose (the first attempt of a `fault.flaky` job) |
//!
//! The file is opened with `O_APPEND` and every line is one unbuffered `write(2)`, so each line
//! lands whole and a `SIGKILL` loses at most the line being written. Several processes may
//! append to one file; the tests give each process its own file and read them all.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// What happened to a handler run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The handler started.
    Start,
    /// The handler did its work and returned `Ok`.
    Finish,
    /// The handler noticed its cancellation (lease lost or hard stop) and gave up.
    Cancelled,
    /// The handler is about to abort the whole process.
    Abort,
    /// The handler failed on purpose (its attempt is retried).
    Failed,
}

impl Kind {
    fn code(self) -> char {
        match self {
            Kind::Start => 'S',
            Kind::Finish => 'F',
            Kind::Cancelled => 'C',
            Kind::Abort => 'X',
            Kind::Failed => 'E',
        }
    }

    fn from_code(code: &str) -> Option<Kind> {
        Some(match code {
            "S" => Kind::Start,
            "F" => Kind::Finish,
            "C" => Kind::Cancelled,
            "X" => Kind::Abort,
            "E" => Kind::Failed,
            _ => return None,
        })
    }
}

/// One ledger line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// What happened.
    pub kind: Kind,
    /// The job key.
    pub key: String,
    /// The delivery token.
    pub token: u64,
    /// The attempt, from 1.
    pub attempt: u32,
    /// The worker process.
    pub pid: u32,
    /// Wall-clock time of the event, Unix ms.
    pub ms: u64,
}

/// Milliseconds since the Unix epoch by this machine's clock (shared by the test and its
/// worker processes, which run on the same machine).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The writing side, used by `fault-worker`.
#[derive(Debug)]
pub struct LedgerWriter {
    file: File,
    pid: u32,
}

impl LedgerWriter {
    /// Opens (creating it if needed) the ledger at `path` for appending.
    pub fn open(path: &Path) -> std::io::Result<LedgerWriter> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(LedgerWriter {
            file,
            pid: std::process::id(),
        })
    }

    /// Appends one line with one `write(2)`. Errors are reported on stderr, never raised: a
    /// handler must not fail because its ledger could not be written, but the test will see
    /// the line missing.
    pub fn record(&self, kind: Kind, key: &str, token: u64, attempt: u32) {
        let line = format!(
            "{}\t{token}\t{attempt}\t{}\t{}\t{key}\n",
            kind.code(),
            self.pid,
            now_ms()
        );
        if let Err(e) = (&self.file).write_all(line.as_bytes()) {
            eprintln!("fault-worker: cannot write the ledger: {e}");
        }
    }
}

/// Parses one line; `None` for a malformed (e.g. torn) line.
pub fn parse_line(line: &str) -> Option<Entry> {
    let mut parts = line.splitn(6, '\t');
    let kind = Kind::from_code(parts.next()?)?;
    let token = parts.next()?.parse().ok()?;
    let attempt = parts.next()?.parse().ok()?;
    let pid = parts.next()?.parse().ok()?;
    let ms = parts.next()?.parse().ok()?;
    let key = parts.next()?.to_string();
    if key.is_empty() {
        return None;
    }
    Some(Entry {
        kind,
        key,
        token,
        attempt,
        pid,
        ms,
    })
}

/// Every ledger entry in the `*.ledger` files of `dir`, in file order per file, and how many
/// lines were malformed (a torn last line after a kill; expected to be zero).
pub fn read_dir(dir: &Path) -> (Vec<Entry>, usize) {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "ledger"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let mut entries = Vec::new();
    let mut bad = 0;
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for line in text.split_terminator('\n') {
            match parse_line(line) {
                Some(e) => entries.push(e),
                None => bad += 1,
            }
        }
    }
    (entries, bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.ledger");
        let w = LedgerWriter::open(&path).unwrap();
        w.record(Kind::Start, "job 1\twith tab", 7, 2);
        w.record(Kind::Finish, "job-2", 8, 1);
        w.record(Kind::Failed, "job-3", 9, 1);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"F\t1\t")
            .unwrap();
        let (entries, bad) = read_dir(dir.path());
        assert_eq!(bad, 1);
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[0].kind, Kind::Start);
        assert_eq!(entries[0].key, "job 1\twith tab");
        assert_eq!((entries[0].token, entries[0].attempt), (7, 2));
        assert_eq!(entries[1].pid, std::process::id());
        assert_eq!(entries[2].kind, Kind::Failed);
    }
}
