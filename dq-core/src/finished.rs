//! Finished jobs a topic keeps: the retention policy ([`Retention`]), what a kept job holds
//! ([`FinishedJob`]) and the handler's result in it ([`StoredResult`]).
//!
//! By default dq deletes a job when it ends (succeeded, cancelled, expired before it started).
//! A topic with a [`Retention`] keeps those of the outcomes it names for a while instead, with
//! their timings (due, started, finished, attempts, the worker that ran them), their history,
//! their payload and — for a succeeded job — the value its handler returned. Dead jobs are not
//! concerned: the dead queue keeps them already, with its own limits.
//!
//! Kept jobs are bounded twice: each goes when its outcome's time has passed, and a partition
//! keeps at most its share of [`Retention::max_kept`], the soonest to go trimmed first and
//! counted ([`TopicStats::kept_trimmed`](crate::TopicStats::kept_trimmed)).

use std::time::Duration;

use crate::error::{Error, Result};
use crate::inspect::ListPos;
use crate::job::AttemptRecord;
use crate::names::JobKey;

/// How a kept job ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FinishedAs {
    /// Its handler returned `Ok`.
    Succeeded,
    /// It was cancelled: before it started, or while it ran.
    Cancelled,
    /// Its expiry came before it started ([`Expiry`](crate::Expiry)).
    Expired,
}

impl FinishedAs {
    /// Every outcome a topic may keep.
    pub const ALL: [FinishedAs; 3] = [
        FinishedAs::Succeeded,
        FinishedAs::Cancelled,
        FinishedAs::Expired,
    ];

    /// The outcome's name in logs, the CLI and the dashboard.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishedAs::Succeeded => "succeeded",
            FinishedAs::Cancelled => "cancelled",
            FinishedAs::Expired => "expired",
        }
    }

    /// The outcome of a name ([`FinishedAs::as_str`]).
    pub fn parse(name: &str) -> Option<FinishedAs> {
        FinishedAs::ALL.into_iter().find(|o| o.as_str() == name)
    }

    /// The letter a kept job stores (`lua/lib.lua` `KEPT`, tied by a test).
    pub fn code(self) -> u8 {
        match self {
            FinishedAs::Succeeded => b's',
            FinishedAs::Cancelled => b'c',
            FinishedAs::Expired => b'e',
        }
    }

    /// The outcome of a stored letter.
    pub fn from_code(code: u8) -> Option<FinishedAs> {
        FinishedAs::ALL.into_iter().find(|o| o.code() == code)
    }
}

impl std::fmt::Display for FinishedAs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The longest a finished job can be kept: 90 days.
pub const MAX_KEEP: Duration = Duration::from_secs(90 * 24 * 3600);

/// The most finished jobs a topic can keep: 10 million (each a payload and its result).
pub const MAX_KEPT: u64 = 10_000_000;

/// The cap a retention gets when none is given: 10,000 kept jobs per topic.
pub const DEFAULT_MAX_KEPT: u64 = 10_000;

/// Which finished jobs a topic keeps, and how long: set by the handler's attributes
/// (`#[delayed_job(keep_succeeded = "1h")]`) at every worker start, or at run time with
/// [`TopicClient::set_retention`](crate::TopicClient::set_retention).
///
/// ```
/// use std::time::Duration;
/// let keep = dq_core::Retention::default()
///     .succeeded(Duration::from_secs(3600))
///     .cancelled(Duration::from_secs(24 * 3600))
///     .max_kept(50_000);
/// assert!(keep.check().is_ok());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// How long a succeeded job is kept (with its result); `None`: not kept.
    pub succeeded: Option<Duration>,
    /// How long a cancelled job is kept; `None`: not kept.
    pub cancelled: Option<Duration>,
    /// How long a job that expired before it started is kept; `None`: not kept.
    pub expired: Option<Duration>,
    /// The most kept jobs of the topic, all outcomes together (spread evenly over its
    /// partitions); beyond it the soonest to go are trimmed first, and counted.
    pub max_kept: u64,
}

impl Default for Retention {
    /// Keeps nothing, with a cap of [`DEFAULT_MAX_KEPT`].
    fn default() -> Self {
        Retention {
            succeeded: None,
            cancelled: None,
            expired: None,
            max_kept: DEFAULT_MAX_KEPT,
        }
    }
}

impl Retention {
    /// Keeps succeeded jobs (and their results) for `d`.
    pub fn succeeded(mut self, d: Duration) -> Self {
        self.succeeded = Some(d);
        self
    }

    /// Keeps cancelled jobs for `d`.
    pub fn cancelled(mut self, d: Duration) -> Self {
        self.cancelled = Some(d);
        self
    }

    /// Keeps jobs that expired before they started for `d`.
    pub fn expired(mut self, d: Duration) -> Self {
        self.expired = Some(d);
        self
    }

    /// Keeps at most `n` finished jobs of the topic.
    pub fn max_kept(mut self, n: u64) -> Self {
        self.max_kept = n;
        self
    }

    /// Partition `partition`'s share of it over `partitions` partitions: the same times, and
    /// `max_kept / partitions` (one more for the first `max_kept % partitions`), at least 1.
    pub fn share(self, partitions: u16, partition: u16) -> Retention {
        let p = u64::from(partitions.max(1));
        let n = self.max_kept / p + u64::from(u64::from(partition) < self.max_kept % p);
        Retention {
            max_kept: n.max(1),
            ..self
        }
    }

    /// How long jobs ending as `outcome` are kept (`None`: not kept).
    pub fn keep_for(&self, outcome: FinishedAs) -> Option<Duration> {
        match outcome {
            FinishedAs::Succeeded => self.succeeded,
            FinishedAs::Cancelled => self.cancelled,
            FinishedAs::Expired => self.expired,
        }
    }

    /// Whether it keeps anything.
    pub fn keeps_any(&self) -> bool {
        FinishedAs::ALL.iter().any(|o| self.keep_for(*o).is_some())
    }

    /// Refuses a retention dq cannot honour, before anything is written: a time of less than
    /// 1 ms or more than [`MAX_KEEP`], a cap of 0 or over [`MAX_KEPT`], or nothing kept (to
    /// keep nothing, remove the retention).
    pub fn check(&self) -> Result<()> {
        for outcome in FinishedAs::ALL {
            if let Some(d) = self.keep_for(outcome)
                && (d < Duration::from_millis(1) || d > MAX_KEEP)
            {
                return Err(Error::InvalidConfig(format!(
                    "keeping {outcome} jobs for {d:?}: a retention is from 1 ms to {} days",
                    MAX_KEEP.as_secs() / 86_400
                )));
            }
        }
        if self.max_kept == 0 || self.max_kept > MAX_KEPT {
            return Err(Error::InvalidConfig(format!(
                "keeping at most {} finished jobs: the cap is from 1 to {MAX_KEPT}",
                self.max_kept
            )));
        }
        if !self.keeps_any() {
            return Err(Error::InvalidConfig(
                "a retention that keeps no outcome: remove the retention instead".into(),
            ));
        }
        Ok(())
    }

    /// The policy as the control hash stores it for a partition whose share of the cap is
    /// `cap`: `<succeeded ms>/<cancelled ms>/<expired ms>/<cap>` (`lua/lib.lua`
    /// `keep_policy`).
    pub(crate) fn encode(&self, cap: u64) -> String {
        let ms = |d: Option<Duration>| d.map_or(0, |d| d.as_millis().max(1) as u64);
        format!(
            "{}/{}/{}/{}",
            ms(self.succeeded),
            ms(self.cancelled),
            ms(self.expired),
            cap.max(1)
        )
    }

    /// The policy of a stored `keep` field (`None` for a malformed one, as the scripts read
    /// it), with the partition's cap as `max_kept`.
    pub(crate) fn decode(text: &str) -> Option<Retention> {
        let mut parts = text.split('/').map(|p| p.parse::<u64>().ok());
        let mut next = || parts.next().flatten();
        let d = |ms: u64| (ms > 0).then(|| Duration::from_millis(ms));
        let (s, c, e, cap) = (next()?, next()?, next()?, next()?);
        let r = Retention {
            succeeded: d(s),
            cancelled: d(c),
            expired: d(e),
            max_kept: cap,
        };
        (cap > 0 && cap <= MAX_KEPT && r.keeps_any()).then_some(r)
    }
}

/// The value a handler returned, as a kept job holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoredResult {
    /// Nothing: the handler returns `()` (or `None`), or the job did not succeed.
    None,
    /// The value, MessagePack-encoded.
    Value(Vec<u8>),
    /// The handler returned a value that was not stored, and why (larger than the worker's
    /// payload limit, or its serialization failed). The job's success counts all the same.
    NotStored(String),
}

/// What the handler's run gave back, for the worker to store with the succeeded job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Returned {
    /// `()` or a value that encodes as nil: nothing to keep.
    Nothing,
    /// A value, MessagePack-encoded.
    Value(Vec<u8>),
    /// A value whose serialization failed (the error's text).
    Unencodable(String),
}

impl Returned {
    /// `value` encoded as a result (nil, as `()` encodes, is [`Returned::Nothing`]).
    pub fn of<T: serde::Serialize + ?Sized>(value: &T) -> Returned {
        match rmp_serde::to_vec_named(value) {
            Ok(bytes) if bytes == [0xc0] => Returned::Nothing,
            Ok(bytes) => Returned::Value(bytes),
            Err(e) => Returned::Unencodable(e.to_string()),
        }
    }

    /// What is stored for it, with values over `max_len` bytes not stored.
    pub fn stored(self, max_len: usize) -> StoredResult {
        match self {
            Returned::Nothing => StoredResult::None,
            Returned::Value(v) if v.len() > max_len => StoredResult::NotStored(format!(
                "the result is {} bytes, over the worker's limit of {max_len}",
                v.len()
            )),
            Returned::Value(v) => StoredResult::Value(v),
            Returned::Unencodable(e) => {
                StoredResult::NotStored(format!("the result could not be serialized: {e}"))
            }
        }
    }
}

/// One partition's part of a listing of kept jobs
/// ([`Operate::list_finished`](crate::store::Operate::list_finished)).
#[derive(Clone, Debug, Default)]
pub struct FinishedChunk {
    /// The jobs, in the order their keeping ends, each with its place.
    pub jobs: Vec<(ListPos, FinishedJob)>,
    /// Whether the partition holds more after what was returned.
    pub more: bool,
    /// The place of the last entry read (of any outcome): with `more`, where the partition's
    /// next call starts, so that a page of other outcomes still moves the listing on.
    pub read_to: Option<ListPos>,
}

/// A finished job that its topic keeps ([`Retention`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinishedJob {
    /// Its key.
    pub key: JobKey,
    /// How it ended.
    pub outcome: FinishedAs,
    /// When it was due (store ms; for a retried job, its last due time).
    pub due_ms: u64,
    /// When it was first enqueued (store ms).
    pub created_ms: u64,
    /// When the run that succeeded was leased (store ms); `None` for a job that was not
    /// running when it ended (cancelled or expired while waiting, or cancelled while it ran).
    pub started_ms: Option<u64>,
    /// When it ended (store ms).
    pub finished_ms: u64,
    /// When the topic lets it go (store ms).
    pub kept_until_ms: u64,
    /// Attempts started.
    pub attempts: u32,
    /// The id of the worker that ran it to success (`None` for other outcomes).
    pub worker: Option<String>,
    /// The handler's result.
    pub result: StoredResult,
    /// Its failed attempts, oldest first.
    pub history: Vec<AttemptRecord>,
    /// The progress and log lines its last run reported (`None`: none).
    pub progress: Option<crate::progress::JobProgress>,
    /// The MessagePack payload.
    pub payload: Vec<u8>,
}

impl FinishedJob {
    /// How long its run took, from lease to ack (a succeeded job's).
    pub fn run_time(&self) -> Option<Duration> {
        self.started_ms
            .map(|s| Duration::from_millis(self.finished_ms.saturating_sub(s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retention_round_trips_through_its_stored_form() {
        let r = Retention::default()
            .succeeded(Duration::from_secs(60))
            .expired(Duration::from_millis(5))
            .max_kept(7);
        let back = Retention::decode(&r.encode(7)).unwrap();
        assert_eq!(back, r);
        assert_eq!(Retention::decode("0/0/0/5"), None, "keeps nothing");
        assert_eq!(Retention::decode("1/0/0/0"), None, "no cap");
        assert_eq!(Retention::decode("x"), None);
    }

    #[test]
    fn bad_retentions_are_refused() {
        assert!(Retention::default().check().is_err(), "nothing kept");
        let one = Retention::default().succeeded(Duration::from_secs(1));
        assert!(one.check().is_ok());
        assert!(one.max_kept(0).check().is_err());
        assert!(one.max_kept(MAX_KEPT + 1).check().is_err());
        assert!(one.succeeded(Duration::ZERO).check().is_err());
        assert!(
            one.succeeded(MAX_KEEP + Duration::from_secs(1))
                .check()
                .is_err()
        );
    }

    #[test]
    fn unit_and_none_return_nothing() {
        assert_eq!(Returned::of(&()), Returned::Nothing);
        assert_eq!(Returned::of(&None::<u32>), Returned::Nothing);
        assert!(matches!(Returned::of(&7u32), Returned::Value(_)));
        let big = Returned::of(&vec![1u8; 100]).stored(10);
        assert!(matches!(big, StoredResult::NotStored(_)), "{big:?}");
    }
}
