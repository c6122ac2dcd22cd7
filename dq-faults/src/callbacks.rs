//! What each run of a batch's callback saw: one line per run that read its batch, appended by
//! `fault-worker`'s `fault.callback` handler to `<name>.callbacks` beside its ledger and read
//! by the tests. A flow's parent (`fault.parent`) writes the same line about its children's
//! batch, under its own key.
//!
//! A line is `token \t attempt \t pid \t created_ms \t closed \t done \t reserved \t enqueued \t
//! succeeded \t dead \t cancelled \t total \t key \n`: the delivery, the callback job's
//! `created_ms` as the store has it (a second enqueue of the callback would be a second job,
//! created later; a second run of one job reads the same value), and the batch's counts as the
//! handler read them. Written like the ledger: `O_APPEND`, one `write(2)` a line.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// One callback run's observation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallbackRun {
    /// The callback job's key (`batch:<id>`), or a flow parent's own key.
    pub key: String,
    /// The delivery token.
    pub token: u64,
    /// The attempt, from 1.
    pub attempt: u32,
    /// The worker process.
    pub pid: u32,
    /// When the callback job was enqueued (store ms, from its record): one value per job.
    pub created_ms: u64,
    /// The batch was closed when the handler read it.
    pub closed: bool,
    /// The batch was marked done when the handler read it.
    pub done: bool,
    /// Members reserved and not seen enqueued.
    pub reserved: u64,
    /// Members enqueued and not ended.
    pub enqueued: u64,
    /// Members succeeded.
    pub succeeded: u64,
    /// Members dead.
    pub dead: u64,
    /// Members cancelled.
    pub cancelled: u64,
    /// Every member.
    pub total: u64,
}

/// The writing side, used by `fault-worker`.
#[derive(Debug)]
pub struct CallbackWriter {
    file: File,
}

impl CallbackWriter {
    /// Opens (creating it if needed) the file at `path` for appending.
    pub fn open(path: &Path) -> std::io::Result<CallbackWriter> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(CallbackWriter { file })
    }

    /// Appends `run` as one line with one `write(2)`; an error is reported on stderr (the
    /// test then finds the line missing).
    pub fn record(&self, run: &CallbackRun) {
        let line = format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            run.token,
            run.attempt,
            run.pid,
            run.created_ms,
            u8::from(run.closed),
            u8::from(run.done),
            run.reserved,
            run.enqueued,
            run.succeeded,
            run.dead,
            run.cancelled,
            run.total,
            run.key
        );
        if let Err(e) = (&self.file).write_all(line.as_bytes()) {
            eprintln!("fault-worker: cannot write the callbacks file: {e}");
        }
    }
}

/// The callbacks file beside ledger `ledger` (`w001.ledger` → `w001.callbacks`).
pub fn path_beside(ledger: &Path) -> PathBuf {
    ledger.with_extension("callbacks")
}

/// Parses one line; `None` for a malformed (torn) one.
pub fn parse_line(line: &str) -> Option<CallbackRun> {
    let mut parts = line.splitn(13, '\t');
    let mut num = || parts.next()?.parse::<u64>().ok();
    let token = num()?;
    let attempt = u32::try_from(num()?).ok()?;
    let pid = u32::try_from(num()?).ok()?;
    let created_ms = num()?;
    let closed = num()? == 1;
    let done = num()? == 1;
    let (reserved, enqueued, succeeded, dead, cancelled, total) =
        (num()?, num()?, num()?, num()?, num()?, num()?);
    let key = parts.next()?.to_string();
    if key.is_empty() {
        return None;
    }
    Some(CallbackRun {
        key,
        token,
        attempt,
        pid,
        created_ms,
        closed,
        done,
        reserved,
        enqueued,
        succeeded,
        dead,
        cancelled,
        total,
    })
}

/// Every callback run recorded in the `*.callbacks` files of `dir`, and how many lines were
/// malformed.
pub fn read_dir(dir: &Path) -> (Vec<CallbackRun>, usize) {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "callbacks"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let mut runs = Vec::new();
    let mut bad = 0;
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for line in text.split_terminator('\n') {
            match parse_line(line) {
                Some(r) => runs.push(r),
                None => bad += 1,
            }
        }
    }
    (runs, bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_beside(&dir.path().join("w001.ledger"));
        assert_eq!(path, dir.path().join("w001.callbacks"));
        let w = CallbackWriter::open(&path).unwrap();
        let run = CallbackRun {
            key: "batch:b\t1".into(),
            token: 7,
            attempt: 2,
            pid: 42,
            created_ms: 1_700_000_000_000,
            closed: true,
            done: false,
            reserved: 0,
            enqueued: 0,
            succeeded: 9,
            dead: 1,
            cancelled: 0,
            total: 10,
        };
        w.record(&run);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"7\t2\t")
            .unwrap();
        let (runs, bad) = read_dir(dir.path());
        assert_eq!((runs, bad), (vec![run], 1));
    }
}
