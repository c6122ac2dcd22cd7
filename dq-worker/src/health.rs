//! What a running worker can say about itself without a store call: each fetcher's last store
//! call, the jobs running, and the shared data its handlers asked for and it does not have.
//! Written by the fetchers and runners, read through `WorkerHandle::health`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// A snapshot of a running worker's health, from [`WorkerHandle::health`](crate::WorkerHandle::health): enough for a
/// liveness or readiness probe. Cheap to take (no store call).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct WorkerHealth {
    /// This worker's id in [`Client::workers`](dq_core::Client::workers).
    pub worker_id: String,
    /// Whether the worker's last heartbeat reached the store (false until the first one
    /// completes, which is at start). The probe a liveness check wants: a worker that cannot
    /// reach Redis runs nothing.
    pub reaches_store: bool,
    /// When the last heartbeat was written (`None` before the first).
    pub last_heartbeat_at: Option<Instant>,
    /// Why the last heartbeat failed, if it did.
    pub heartbeat_error: Option<String>,
    /// One entry per fetcher (topic partition), in start order.
    pub fetchers: Vec<FetcherHealth>,
    /// Jobs running now (handlers, and outcomes not yet written).
    pub running: usize,
    /// Shared data handlers asked for (`ctx.data::<T>()`) that this worker was not given, by
    /// topic and type, in that order. Each such job was deferred without spending an
    /// attempt; non-empty means the worker is misdeployed: give it `.data(…)` of each type.
    pub missing_data: Vec<MissingDataReport>,
}

impl WorkerHealth {
    /// Whether the worker reaches the store and every fetcher's last store call succeeded
    /// (false for a fetcher that has not completed a call yet, and before the first
    /// heartbeat), and no fetcher met, in the last minute, jobs written by a newer dq that
    /// this worker cannot read ([`FetcherHealth::needs_upgrade`]).
    pub fn is_healthy(&self) -> bool {
        self.reaches_store
            && self
                .fetchers
                .iter()
                .all(|f| f.last_call_ok && f.needs_upgrade().is_none())
    }

    /// The fetchers that met, in the last minute, job records of a newer format than this
    /// worker reads: those jobs wait for a newer worker; upgrade this one.
    pub fn needing_upgrade(&self) -> impl Iterator<Item = &FetcherHealth> {
        self.fetchers.iter().filter(|f| f.needs_upgrade().is_some())
    }

    /// The fetchers whose last call failed with an error retrying cannot fix (a missing
    /// permission, a key of the wrong type): an operator has to act.
    pub fn permanent_errors(&self) -> impl Iterator<Item = &FetcherHealth> {
        self.fetchers
            .iter()
            .filter(|f| !f.last_call_ok && f.last_error_permanent)
    }
}

/// A type of shared data the handlers of one topic asked for and this worker does not have.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct MissingDataReport {
    /// The topic.
    pub topic: String,
    /// The missing type's Rust name.
    pub type_name: &'static str,
    /// Jobs of the topic deferred for it (their attempts not spent).
    pub jobs_deferred: u64,
    /// When a job first asked for it.
    pub first_at: Instant,
    /// When a job last asked for it.
    pub last_at: Instant,
}

/// The missing shared data seen by a worker's runners, shared with its handle.
#[derive(Clone, Default)]
pub(crate) struct MissingDataLog(Arc<Mutex<BTreeMap<(String, &'static str), MissingDataReport>>>);

impl MissingDataLog {
    /// Notes a job deferred for lack of `type_name`; true the first time for this topic and
    /// type (the runner logs at ERROR then, and only then).
    pub fn note(&self, topic: &str, type_name: &'static str) -> bool {
        let now = Instant::now();
        let mut log = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut first = false;
        let entry = log
            .entry((topic.to_string(), type_name))
            .or_insert_with(|| {
                first = true;
                MissingDataReport {
                    topic: topic.to_string(),
                    type_name,
                    jobs_deferred: 0,
                    first_at: now,
                    last_at: now,
                }
            });
        entry.jobs_deferred += 1;
        entry.last_at = now;
        first
    }

    /// Everything noted so far, by topic and type.
    pub fn snapshot(&self) -> Vec<MissingDataReport> {
        let log = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        log.values().cloned().collect()
    }
}

/// How one fetcher's (one topic partition's) store calls have gone.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct FetcherHealth {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: u16,
    /// Whether its last `fetch` call succeeded (false until one completes).
    pub last_call_ok: bool,
    /// When its last `fetch` call completed, successful or not (`None` before the first).
    pub last_call_at: Option<std::time::Instant>,
    /// When its last successful `fetch` call completed.
    pub last_success_at: Option<std::time::Instant>,
    /// The text of its most recent error (kept after a later success; see `last_call_ok`).
    pub last_error: Option<String>,
    /// Whether that error is one retrying cannot fix (a missing permission, a key of the
    /// wrong type, a reply dq cannot read), as opposed to connection trouble or a timeout.
    /// Such errors are logged at ERROR; the fetcher keeps retrying them.
    pub last_error_permanent: bool,
    /// Calls that have failed since the last success.
    pub failures_in_a_row: u32,
    /// Job records of a newer format than this worker reads that its fetches met (and left
    /// untouched): the newest such format, and when one was last met (`None`: never).
    pub newer_records: Option<NewerRecordsSeen>,
}

/// Records of a newer format than a worker reads, met by one fetcher: jobs a newer dq wrote,
/// which this worker leaves for a newer one (ARCHITECTURE.md §4).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct NewerRecordsSeen {
    /// The newest record format met.
    pub format: u8,
    /// The newest format this worker reads.
    pub reads: u8,
    /// When a fetch last met one.
    pub last_seen_at: Instant,
    /// When the fetcher last logged it (one WARN per fetcher per [`NEWER_RECORDS_REMEMBERED`]).
    pub(crate) warned_at: Option<Instant>,
}

/// How long a fetcher's health reports newer records after its fetches last met one, and how
/// often at most it logs them.
pub const NEWER_RECORDS_REMEMBERED: std::time::Duration = std::time::Duration::from_secs(60);

impl FetcherHealth {
    /// What this fetcher says when its fetches met, in the last
    /// [`NEWER_RECORDS_REMEMBERED`], records of a newer format than the worker reads: the
    /// topic is not served fully here until the worker is upgraded. `None` otherwise.
    pub fn needs_upgrade(&self) -> Option<String> {
        let seen = self.newer_records.as_ref()?;
        (seen.last_seen_at.elapsed() < NEWER_RECORDS_REMEMBERED).then(|| {
            format!(
                "topic {:?} partition {} holds jobs of record format {}, newer than this worker \
                 reads (formats up to {}): upgrade this worker",
                self.topic, self.partition, seen.format, seen.reads
            )
        })
    }

    /// Notes a fetch that met records of `format` (newer than `reads`); true when the fetcher
    /// should log it now (the first time, then at most once per
    /// [`NEWER_RECORDS_REMEMBERED`]).
    pub(crate) fn note_newer(&mut self, format: u8, reads: u8) -> bool {
        let now = Instant::now();
        let seen = self.newer_records.get_or_insert(NewerRecordsSeen {
            format,
            reads,
            last_seen_at: now,
            warned_at: None,
        });
        seen.format = seen.format.max(format);
        seen.reads = reads;
        seen.last_seen_at = now;
        let warn = seen
            .warned_at
            .is_none_or(|at| now.duration_since(at) >= NEWER_RECORDS_REMEMBERED);
        if warn {
            seen.warned_at = Some(now);
        }
        warn
    }
}

impl FetcherHealth {
    pub(crate) fn new(topic: &str, partition: u16) -> Self {
        FetcherHealth {
            topic: topic.to_string(),
            partition,
            last_call_ok: false,
            last_call_at: None,
            last_success_at: None,
            last_error: None,
            last_error_permanent: false,
            failures_in_a_row: 0,
            newer_records: None,
        }
    }
}
