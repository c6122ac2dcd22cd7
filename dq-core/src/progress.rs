//! A running job's progress and log lines: what a handler reports with
//! [`JobContext::progress`](crate::JobContext::progress) and
//! [`JobContext::log`](crate::JobContext::log), visible while it runs
//! ([`JobInfo::progress`](crate::JobInfo::progress)) and kept with the finished job when its
//! topic keeps it ([`FinishedJob::progress`](crate::FinishedJob::progress)).
//!
//! Bounded per job: one progress value of at most [`MAX_PROGRESS_LEN`] bytes (each report
//! replaces the last) and the last [`MAX_LOG_LINES`] log lines, each cut at 1 KiB like an
//! error; older lines are dropped and counted. A report is written only while the job runs
//! under the lease that reports it; every end of the run (success, failure, release, a lost
//! lease) clears it, so a retry starts afresh.

use std::sync::Arc;

use async_trait::async_trait;
use serde::de::{DeserializeOwned, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::job::{Queue, truncate_error};
use crate::names::JobKey;

/// The largest progress value, encoded: 64 KiB.
pub const MAX_PROGRESS_LEN: usize = 65_536;

/// Most log lines kept per job run; older ones are dropped and counted.
pub const MAX_LOG_LINES: usize = 100;

/// One report of a running job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Report {
    /// Its progress: a MessagePack value replacing the last.
    Progress(Vec<u8>),
    /// A log line.
    Log(String),
}

/// What a running job reported.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobProgress {
    /// The last progress value, MessagePack-encoded ([`JobProgress::value_as`] decodes it).
    pub value: Option<Vec<u8>>,
    /// The log lines, oldest first (the last [`MAX_LOG_LINES`]).
    pub log: Vec<LogLine>,
    /// Log lines dropped because there were more than [`MAX_LOG_LINES`].
    pub dropped_lines: u64,
}

/// One log line of a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// When it was written (store ms).
    pub at_ms: u64,
    /// The text (cut at 1 KiB).
    pub text: String,
}

impl JobProgress {
    /// The progress value decoded as `T` (`None` if none was reported).
    pub fn value_as<T: DeserializeOwned>(&self) -> Option<Result<T>> {
        self.value.as_deref().map(crate::payload::decode)
    }
}

/// Where a running job's reports go: the worker gives each job's context one, bound to its
/// lease.
#[async_trait]
pub trait Reporter: Send + Sync {
    /// Writes one report; `false` when the job no longer runs under this lease (nothing was
    /// written).
    async fn report(&self, report: Report) -> Result<bool>;
}

/// A [`Reporter`] that writes through a store, under one lease.
pub struct LeaseReporter {
    /// The store.
    pub store: Arc<dyn crate::store::Store>,
    /// The job's partition.
    pub queue: Queue,
    /// The job.
    pub key: JobKey,
    /// The delivery token of its lease.
    pub token: u64,
}

#[async_trait]
impl Reporter for LeaseReporter {
    async fn report(&self, report: Report) -> Result<bool> {
        self.store
            .report(&self.queue, &self.key, self.token, &report)
            .await
    }
}

/// Refuses a report dq cannot store, before any write; cuts a log line like an error.
pub(crate) fn checked(report: &Report) -> Result<Report> {
    match report {
        Report::Progress(v) if v.len() > MAX_PROGRESS_LEN => Err(Error::InvalidConfig(format!(
            "a progress value of {} bytes: at most {MAX_PROGRESS_LEN}",
            v.len()
        ))),
        Report::Progress(v) => Ok(Report::Progress(v.clone())),
        Report::Log(text) => Ok(Report::Log(truncate_error(text).into_owned())),
    }
}

/// The stored form (`lua/lib.lua`: a cmsgpack map `{v, l, d}`, strings as MessagePack str).
#[derive(Deserialize, Serialize, Default)]
struct Wire {
    #[serde(default)]
    v: Option<Blob>,
    #[serde(default)]
    l: Option<Vec<(u64, String)>>,
    #[serde(default)]
    d: Option<u64>,
}

/// Bytes stored as a MessagePack str or bin.
struct Blob(Vec<u8>);

impl<'de> Deserialize<'de> for Blob {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Blob, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Blob;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E>(self, v: &[u8]) -> std::result::Result<Blob, E> {
                Ok(Blob(v.to_vec()))
            }
            fn visit_str<E>(self, v: &str) -> std::result::Result<Blob, E> {
                Ok(Blob(v.as_bytes().to_vec()))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Blob {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

/// Reads a stored progress value.
pub(crate) fn decode(bytes: &[u8]) -> Result<JobProgress> {
    let w: Wire =
        rmp_serde::from_slice(bytes).map_err(|e| Error::Protocol(format!("job progress: {e}")))?;
    Ok(JobProgress {
        value: w.v.map(|b| b.0),
        log: w
            .l
            .unwrap_or_default()
            .into_iter()
            .map(|(at_ms, text)| LogLine { at_ms, text })
            .collect(),
        dropped_lines: w.d.unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_progress_decodes_from_str_or_bin() {
        let w = Wire {
            v: Some(Blob(vec![0x2a])),
            l: Some(vec![(5, "half way".into())]),
            d: Some(3),
        };
        let p = decode(&rmp_serde::to_vec_named(&w).unwrap()).unwrap();
        assert_eq!(p.value, Some(vec![0x2a]));
        assert_eq!(p.value_as::<u8>().unwrap().unwrap(), 42);
        assert_eq!(p.log[0].text, "half way");
        assert_eq!(p.dropped_lines, 3);
        assert_eq!(decode(&[0x80]).unwrap(), JobProgress::default());
    }

    #[test]
    fn reports_dq_cannot_store_are_refused() {
        let big = Report::Progress(vec![0; MAX_PROGRESS_LEN + 1]);
        assert!(checked(&big).is_err());
        let long = Report::Log("x".repeat(5000));
        let Report::Log(cut) = checked(&long).unwrap() else {
            unreachable!()
        };
        assert!(cut.len() <= 1100, "{}", cut.len());
    }
}
