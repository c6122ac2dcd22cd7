//! Stored formats: the version a job record says it was written in, the versions this dq
//! reads, and the one a process writes while a rolling upgrade runs (ARCHITECTURE.md §4).
//!
//! Format 1 is what dq wrote before records carried a version (the header starts with the
//! state letter); every later format starts its record with its version byte. A process
//! reads every format up to [`Formats::reads`] and writes [`Formats::write`], which starts
//! at the oldest format a live process of the namespace may still need and rises only once
//! every live process reads the newer one.
//!
//! The namespace's registry of formats (`<ns>:formats`, docs/UPGRADING.md) says which format
//! new records are written in ([`FormatLevel`]) and which formats its live processes read
//! ([`ProcessInfo`], [`FormatRegistry`]); every client connected to Redis registers in it.

use std::sync::atomic::{AtomicU8, Ordering};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The format of records written before dq versioned them: no version byte.
pub const LEGACY_FORMAT: u8 = 1;

/// The newest record format this dq reads and writes.
pub const NEWEST_FORMAT: u8 = 2;

/// The highest format number a record's first byte can name (bytes 2..=31 are versions;
/// a state letter is format 1).
pub const HIGHEST_FORMAT: u8 = 31;

/// What the namespace's registry says about the formats written: the level new records are
/// written in, and an operator's hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct FormatLevel {
    /// The format new records are written in (1 until every live process reads a newer
    /// one); it never lowers.
    pub level: u8,
    /// The operator's hold (`dq formats hold`): the level never rises past it.
    pub hold: Option<u8>,
}

impl FormatLevel {
    /// A level with no hold.
    pub fn new(level: u8, hold: Option<u8>) -> FormatLevel {
        FormatLevel { level, hold }
    }
}

/// What kind of process registered (shown by `dq formats`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum ProcessRole {
    /// An application's client: enqueues and manages jobs (the default).
    Producer,
    /// A process running a worker (its client says so once the worker starts).
    Worker,
    /// The web dashboard (`dq dashboard`).
    Dashboard,
    /// A role a later dq wrote that this one does not know.
    #[serde(other)]
    Other,
}

impl std::fmt::Display for ProcessRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ProcessRole::Producer => "producer",
            ProcessRole::Worker => "worker",
            ProcessRole::Dashboard => "dashboard",
            ProcessRole::Other => "other",
        })
    }
}

/// One live process of the namespace, as its last registration described it: which formats
/// it reads, and who it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ProcessInfo {
    /// Unique for the life of the client: `<host>-<pid>-<random>`.
    pub id: String,
    /// The host name it runs on.
    pub host: String,
    /// Its process id on that host.
    pub pid: u32,
    /// The dq version it runs.
    pub version: String,
    /// What it does.
    pub role: ProcessRole,
    /// The newest record format it reads (it reads every older one).
    pub reads: u8,
    /// When it started, in Unix ms (its own clock).
    pub started_ms: u64,
    /// When the store received its last registration, in Unix ms (the store's clock). Set by
    /// the store; ignored when registering.
    #[serde(default)]
    pub beat_ms: u64,
    /// When its registration expires unless renewed, in Unix ms (the store's clock). Set by
    /// the store; ignored when registering.
    #[serde(default)]
    pub expires_ms: u64,
}

impl ProcessInfo {
    /// A description of this process reading formats up to `reads`, with a fresh id.
    pub fn new(role: ProcessRole, reads: u8) -> ProcessInfo {
        let host = gethostname::gethostname().to_string_lossy().into_owned();
        let pid = std::process::id();
        let id = format!("{host}-{pid}-{:08x}", rand::random::<u32>());
        ProcessInfo {
            id,
            host,
            pid,
            version: env!("CARGO_PKG_VERSION").to_string(),
            role,
            reads,
            started_ms: crate::job::unix_ms(std::time::SystemTime::now()),
            beat_ms: 0,
            expires_ms: 0,
        }
    }

    /// Checks what a store is asked to keep: an id of 1 to
    /// [`MAX_WORKER_ID`](crate::workers::MAX_WORKER_ID) bytes without control characters, and
    /// a format in `1..=HIGHEST_FORMAT`.
    pub(crate) fn validate(&self) -> Result<()> {
        let max = crate::workers::MAX_WORKER_ID;
        if self.id.is_empty() || self.id.len() > max || self.id.chars().any(char::is_control) {
            return Err(Error::InvalidConfig(format!(
                "process id {:?} must be 1-{max} bytes without control characters",
                self.id
            )));
        }
        check_format(self.reads)
    }

    /// The record a store keeps (MessagePack, fields by name: readable by later versions).
    pub(crate) fn encode(&self) -> Result<Vec<u8>> {
        rmp_serde::to_vec_named(self).map_err(|e| Error::Encode(e.to_string()))
    }

    /// Reads a record back, with the store's beat and expiry times.
    pub(crate) fn decode(bytes: &[u8], beat_ms: u64, expires_ms: u64) -> Result<ProcessInfo> {
        let mut info: ProcessInfo = rmp_serde::from_slice(bytes)
            .map_err(|e| Error::Protocol(format!("unreadable format registration: {e}")))?;
        info.beat_ms = beat_ms;
        info.expires_ms = expires_ms;
        Ok(info)
    }
}

/// The namespace's registry of formats as read now: the level, the hold and the live
/// processes (by id).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FormatRegistry {
    /// The level and the hold.
    pub level: FormatLevel,
    /// The processes whose registration has not expired, by id.
    pub processes: Vec<ProcessInfo>,
}

impl FormatRegistry {
    /// A registry as read.
    pub fn new(level: FormatLevel, processes: Vec<ProcessInfo>) -> FormatRegistry {
        FormatRegistry { level, processes }
    }
}

/// Checks a format number given as input (a hold, what a process reads): `1..=HIGHEST_FORMAT`.
pub(crate) fn check_format(format: u8) -> Result<()> {
    if (LEGACY_FORMAT..=HIGHEST_FORMAT).contains(&format) {
        Ok(())
    } else {
        Err(Error::InvalidConfig(format!(
            "format {format} is not a record format (1-{HIGHEST_FORMAT})"
        )))
    }
}

/// Which record formats a store reads, and which one it writes now.
///
/// Shared by a client, its store and its workers: the namespace's registry of live
/// processes raises [`write`](Formats::write) during a rolling upgrade; every new record is
/// written in it, and a record moved from one state to another keeps the format it has.
#[derive(Debug)]
pub struct Formats {
    reads: u8,
    write: AtomicU8,
}

impl Formats {
    /// A process that reads formats up to `reads` (clamped to `LEGACY_FORMAT..=NEWEST_FORMAT`)
    /// and writes `write` (clamped to `LEGACY_FORMAT..=reads`).
    pub fn new(reads: u8, write: u8) -> Formats {
        let reads = reads.clamp(LEGACY_FORMAT, NEWEST_FORMAT);
        Formats {
            reads,
            write: AtomicU8::new(write.clamp(LEGACY_FORMAT, reads)),
        }
    }

    /// A store no other process shares (the embedded one): it writes the newest it reads.
    pub fn single_process(reads: u8) -> Formats {
        Formats::new(reads, reads)
    }

    /// A store shared with other processes: it writes the legacy format until the
    /// namespace's registry says every live process reads a newer one.
    pub fn shared(reads: u8) -> Formats {
        Formats::new(reads, LEGACY_FORMAT)
    }

    /// The newest format this process reads (it reads every older one too).
    pub fn reads(&self) -> u8 {
        self.reads
    }

    /// The format new records are written in now.
    pub fn write(&self) -> u8 {
        self.write.load(Ordering::Acquire)
    }

    /// Sets the format new records are written in, clamped to `LEGACY_FORMAT..=reads`;
    /// returns the format now written.
    pub fn set_write(&self, format: u8) -> u8 {
        let f = format.clamp(LEGACY_FORMAT, self.reads);
        self.write.store(f, Ordering::Release);
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_never_passes_what_the_process_reads() {
        let f = Formats::shared(NEWEST_FORMAT);
        assert_eq!((f.reads(), f.write()), (NEWEST_FORMAT, LEGACY_FORMAT));
        assert_eq!(f.set_write(9), NEWEST_FORMAT);
        let old = Formats::single_process(LEGACY_FORMAT);
        assert_eq!(old.set_write(NEWEST_FORMAT), LEGACY_FORMAT);
        assert_eq!(Formats::new(0, 0).reads(), LEGACY_FORMAT);
    }

    /// A registration reads back as written; one from a later dq with a role this one does
    /// not know still reads.
    #[test]
    fn process_records_read_back() {
        let p = ProcessInfo::new(ProcessRole::Worker, NEWEST_FORMAT);
        let back = ProcessInfo::decode(&p.encode().unwrap(), 5, 9).unwrap();
        assert_eq!(
            (back.id.as_str(), back.role, back.reads),
            (p.id.as_str(), p.role, p.reads)
        );
        assert_eq!((back.beat_ms, back.expires_ms), (5, 9));
        let mut later = p.clone();
        later.role = ProcessRole::Other;
        let mut bytes = rmp_serde::to_vec_named(&later).unwrap();
        let other = rmp_serde::to_vec("other").unwrap();
        let future = rmp_serde::to_vec("scheduler").unwrap();
        let at = bytes.windows(other.len()).position(|w| w == other).unwrap();
        bytes.splice(at..at + other.len(), future);
        assert_eq!(
            ProcessInfo::decode(&bytes, 0, 0).unwrap().role,
            ProcessRole::Other
        );
        assert!(check_format(0).is_err() && check_format(32).is_err());
    }
}
