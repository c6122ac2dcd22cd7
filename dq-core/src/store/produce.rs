//! The producer's role: storing new jobs (`Produce::enqueue`), with what an enqueue takes and
//! reports, and the receipt that makes a retried call harmless (ARCHITECTURE.md §6.1).

use std::time::Duration;

use async_trait::async_trait;

use crate::error::Result;
use crate::job::{Due, Expiry, JobState, Priority, Queue};
use crate::names::JobKey;
use crate::unique::KeyWindow;

/// Storing new jobs: what a producer needs of a store.
#[async_trait]
pub trait Produce: Send + Sync + 'static {
    /// Stores new jobs of one partition; one outcome per job, in order. Jobs due now go
    /// straight to `ready` and wake a fetcher.
    ///
    /// A call that stored something leaves a receipt of `call.id` for
    /// [`ENQUEUE_RECEIPT_LIFE`]; a retry (`call.retry`) that finds it writes nothing and
    /// reports each job as it is now, or [`EnqueueOutcome::Ended`] if it is gone.
    async fn enqueue(
        &self,
        queue: &Queue,
        jobs: &[NewJob],
        call: EnqueueCall,
    ) -> Result<Vec<EnqueueOutcome>>;
}

/// A job to enqueue, already validated and encoded.
#[derive(Clone, Debug)]
pub struct NewJob {
    /// Its key within the topic.
    pub key: JobKey,
    /// MessagePack bytes, opaque to the store.
    pub payload: Vec<u8>,
    /// When it becomes due.
    pub due: Due,
    /// Replace a pending job with the same key instead of reporting it.
    pub replace: bool,
    /// When it is dropped if it has not started (checked against `due` by the client).
    pub expires: Option<Expiry>,
    /// Its priority among the partition's due jobs (normal: written as format 4 would).
    pub priority: Priority,
    /// The window it opens on its key (`unique_for`, `debounce`, `throttle`; checked by the
    /// client: [`KeyWindow::check`]).
    pub window: Option<KeyWindow>,
    /// Its group: once due it waits in its group's queue for its turn (written in record
    /// format 6; none: as format 5 would).
    pub group: Option<crate::group::GroupName>,
    /// The batch it is a member of (written in record format 7): the script that ends it
    /// notes its end in the partition's outbox ([`crate::batch`]). Reserved in the batch
    /// first by the client ([`crate::client::BatchHandle::add`]).
    pub batch: Option<crate::batch::BatchId>,
}

/// What an enqueue did.
///
/// When dq retries a call after an ambiguous error (a timeout or dropped connection) and an
/// earlier try of it was applied — its reply lost — the outcome is still what that try did:
/// `Created` / `Replaced` for a job it stored that is still there (in whatever state it is
/// now), `Exists` for a job someone else holds the key with, `Ended` for one gone since.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnqueueOutcome {
    /// A new job was stored by this call.
    Created,
    /// A pending (scheduled, ready or retry) or dead job with the key was replaced by the new
    /// one: payload and due time are the new ones, attempts start again from zero.
    Replaced,
    /// A job with this key, not stored by this call, exists in this state; nothing was
    /// written. With `replace`, this is reported only for a running job (`Active`), which is
    /// never replaced under its handler.
    Exists(JobState),
    /// Reported only when a call is retried after an ambiguous error (a timeout or dropped
    /// connection): an earlier try of the same call was applied — its reply was lost — and
    /// the job with this key is gone since (it ran and succeeded, or was cancelled or purged;
    /// this is also the answer for a job the earlier try found already there). Nothing was
    /// written: the job is not created a second time. Also the answer for a member added
    /// again to its batch once it has ended ([`BatchHandle::add`](crate::BatchHandle::add)).
    Ended,
    /// The key is inside a window that refuses it until `until_ms` (store time, Unix ms): a
    /// `unique_for` window after its job finished, or a `throttle` window after an accepted
    /// enqueue ([`KeyWindow`]). Nothing was written.
    Refused {
        /// When the window ends (Unix ms, by the store's clock).
        until_ms: u64,
    },
}

/// How long the store keeps the receipt of an applied [`EnqueueCall`], at least. A retry must
/// reach the store within it to be recognised; the client stops retrying an enqueue well
/// before (see [`ENQUEUE_RETRY_WINDOW`](crate::client::ENQUEUE_RETRY_WINDOW)).
pub const ENQUEUE_RECEIPT_LIFE: Duration = Duration::from_secs(30);

/// One client call to [`Produce::enqueue`], the same across its tries.
///
/// A try whose reply is lost (a timeout, a dropped connection) may or may not have been
/// applied. Its retry presents the same `id` with `retry` set; a store that finds the receipt
/// of that id writes nothing and reports what is there now, so a job that ran in the meantime
/// is not created again ([`EnqueueOutcome::Ended`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnqueueCall {
    /// Chosen at random before the first try.
    pub id: u64,
    /// Whether this try repeats an earlier one whose outcome is unknown.
    pub retry: bool,
}

impl EnqueueCall {
    /// A new call with a random id (its first try).
    pub fn new() -> EnqueueCall {
        EnqueueCall {
            id: rand::random(),
            retry: false,
        }
    }

    /// The same call, marked as a retry.
    pub fn retried(self) -> EnqueueCall {
        EnqueueCall {
            retry: true,
            ..self
        }
    }
}

impl Default for EnqueueCall {
    fn default() -> Self {
        EnqueueCall::new()
    }
}

/// The result of enqueueing one job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enqueued {
    /// The job's key (generated if none was given).
    pub key: JobKey,
    /// What happened.
    pub outcome: EnqueueOutcome,
}
