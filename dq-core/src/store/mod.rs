//! The `Store` trait: every state move a job can make, as one atomic operation each.
//!
//! [`RedisStore`](redis::RedisStore) implements it with one Lua script per operation. All
//! operations work on one partition ([`Queue`]); routing a key to its partition is the
//! client's job. Batch operations (`enqueue`, `ack`, `extend`, `release`) take many jobs of one
//! partition at once so that a busy worker spends one round trip per batch, not per job.

use std::time::Duration;

use async_trait::async_trait;

use crate::control::{ControlChange, ControlState};
use crate::error::Result;
use crate::inspect::{DeadAction, ListChunk, ListFrom};
use crate::job::{
    AckOutcome, CancelOutcome, DeadLimits, Delivery, EnqueueCall, EnqueueOutcome, Extended,
    FailAction, FailOutcome, FetchReply, FetchRequest, JobInfo, JobState, NewDue, NewJob, Queue,
    RescheduleOutcome, TopicStats,
};
use crate::names::{JobKey, Topic};
use crate::schedule::{ScheduleOutcome, ScheduleRecord};
use crate::topic::TopicMeta;
use crate::workers::WorkerInfo;

pub mod memory;
pub mod redis;

/// One failed attempt for [`Store::fail_many`]: the job, the token of its lease, what to do
/// with it, and the error text kept in its history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailedAttempt {
    /// The job.
    pub key: JobKey,
    /// The delivery token of the lease that failed.
    pub token: u64,
    /// Retry, defer, bury, cancel or throttle.
    pub action: FailAction,
    /// The error, kept in the job's history.
    pub error: String,
}

/// A place jobs live: Redis, or (for tests and quick starts) memory.
///
/// Every method is one atomic step that validates before it writes. The methods that change a
/// job and may be retried after an ambiguous error (`enqueue` of a key, `ack`, `fail`,
/// `cancel`, `reschedule`) have no double effect when repeated.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Stores new jobs of one partition; one outcome per job, in order. Jobs due now go
    /// straight to `ready` and wake a fetcher.
    ///
    /// A call that stored something leaves a receipt of `call.id` for
    /// [`ENQUEUE_RECEIPT_LIFE`](crate::job::ENQUEUE_RECEIPT_LIFE); a retry (`call.retry`) that finds
    /// it writes nothing and reports each job as it is now, or
    /// [`EnqueueOutcome::Ended`] if it is gone.
    async fn enqueue(
        &self,
        queue: &Queue,
        jobs: &[NewJob],
        call: EnqueueCall,
    ) -> Result<Vec<EnqueueOutcome>>;

    /// Recovers expired leases, promotes due jobs, and leases up to `max_jobs` ready ones.
    ///
    /// A call that leased jobs leaves a receipt of `request.call` for
    /// [`FetchCall::receipt_life`](crate::job::FetchCall::receipt_life); a retry of the call (after
    /// an ambiguous error) that finds it leases those of its jobs still held under the
    /// recorded tokens again — fresh tokens, a fresh lease, no attempt spent — before anything
    /// else, so a lost reply costs no job an attempt.
    async fn fetch(&self, queue: &Queue, request: &FetchRequest) -> Result<FetchReply>;

    /// Marks leased jobs as succeeded (deleting them); one outcome per `(key, token)`.
    async fn ack(&self, queue: &Queue, done: &[(JobKey, u64)]) -> Result<Vec<AckOutcome>>;

    /// Records a failed attempt and retries, defers or buries the job as `action` says.
    /// A stale token is reported as [`Error::StaleToken`](crate::error::Error::StaleToken).
    async fn fail(
        &self,
        queue: &Queue,
        key: &JobKey,
        token: u64,
        action: &FailAction,
        error: &str,
        dead_limits: DeadLimits,
    ) -> Result<FailOutcome>;

    /// Records many failed attempts of one partition at once: one result per failure, in
    /// order, each what [`Store::fail`] returns for it alone (a stale token is
    /// `Err(StaleToken)` in its place; a key named twice is failed once, its later namings
    /// get what a second call would). An `Err` of the whole call is a store error: repeating
    /// the call is safe, as a failure already written is refused by its token.
    ///
    /// The default calls [`Store::fail`] for each; the Redis store makes it one script call,
    /// so a worker's failures cost Redis about what its acks do.
    async fn fail_many(
        &self,
        queue: &Queue,
        failures: &[FailedAttempt],
        dead_limits: DeadLimits,
    ) -> Result<Vec<Result<FailOutcome>>> {
        let mut out = Vec::with_capacity(failures.len());
        for f in failures {
            match self
                .fail(queue, &f.key, f.token, &f.action, &f.error, dead_limits)
                .await
            {
                Err(e @ crate::error::Error::StaleToken { .. }) => out.push(Err(e)),
                Err(e) => return Err(e),
                Ok(o) => out.push(Ok(o)),
            }
        }
        Ok(out)
    }

    /// Renews leases to `lease` from now; for each lease whether it is still owned, and
    /// whether a cancel was requested for its running job ([`Extended::CancelRequested`]).
    async fn extend(
        &self,
        queue: &Queue,
        leases: &[(JobKey, u64)],
        lease: Duration,
    ) -> Result<Vec<Extended>>;

    /// Hands leased jobs back to the front of `ready` without charging the attempt.
    async fn release(&self, queue: &Queue, leases: &[(JobKey, u64)]) -> Result<Vec<bool>>;

    /// Cancels a job that has not started; for a running one, records a cancel request that
    /// the next `extend` of its lease reports ([`CancelOutcome::CancelRequested`]), and that
    /// `fail`, `release` and lease recovery honour (the job is deleted as cancelled, never
    /// retried).
    async fn cancel(&self, queue: &Queue, key: &JobKey) -> Result<CancelOutcome>;

    /// Gives a scheduled, ready or retry job a new due time.
    async fn reschedule(
        &self,
        queue: &Queue,
        key: &JobKey,
        due: NewDue,
    ) -> Result<RescheduleOutcome>;

    /// Changes this partition's control settings as `change` says (nothing, for a default
    /// change) and returns them as stored. A change wakes the partition's fetchers.
    /// `fetch` enforces them: nothing is leased while paused or throttled; at most the rate's
    /// budget and the concurrency share minus the jobs running are leased.
    async fn control(&self, queue: &Queue, change: &ControlChange) -> Result<ControlState>;

    /// Everything known about one job, or `None`.
    async fn job(&self, queue: &Queue, key: &JobKey) -> Result<Option<JobInfo>>;

    /// Depths and counters of one partition.
    async fn stats(&self, queue: &Queue) -> Result<TopicStats>;

    /// Up to `limit` jobs in `state`, from `from`, in the partition's listing order, each with
    /// its place; reads only (it works at Redis's `maxmemory`).
    ///
    /// `scheduled` and `retry` are ordered by due time, `active` by lease deadline, `dead` by
    /// time of death, ties as the store keeps them, then by key; `from` is
    /// [`ListFrom::Start`] or [`ListFrom::After`] a place. `ready` is in queue order; `from`
    /// is `Start` or a queue position ([`ListFrom::Index`]); a call skips a bounded number of
    /// stale entries and reports where it stopped in [`ListChunk::next_index`]. Another
    /// combination is refused with [`Error::InvalidConfig`](crate::error::Error::InvalidConfig).
    async fn list(
        &self,
        queue: &Queue,
        state: JobState,
        from: &ListFrom,
        limit: usize,
    ) -> Result<ListChunk>;

    /// Dead jobs, oldest death first, from `offset`, at most `limit`.
    async fn dead(&self, queue: &Queue, offset: usize, limit: usize) -> Result<Vec<JobInfo>>;

    /// Moves dead jobs back to `ready` with attempts reset; `true` for each one moved.
    async fn requeue_dead(&self, queue: &Queue, keys: &[JobKey]) -> Result<Vec<bool>>;

    /// Deletes the named dead jobs, or (with `keys` empty) the oldest `limit`; returns how many.
    async fn purge_dead(&self, queue: &Queue, keys: &[JobKey], limit: usize) -> Result<u64>;

    /// Requeues or deletes dead jobs, each only if it is still dead with the time of death
    /// given — as a listing of `dead` reported it ([`JobInfo::died_ms`]); `true` for each one
    /// acted on, in order (a key named twice is acted on once). A sweep by filter acts
    /// through this, so a job that was requeued and died again since it was listed, whose
    /// error or age the filter has not seen, is left alone. At most 1000 jobs per call.
    async fn act_on_dead(
        &self,
        queue: &Queue,
        action: DeadAction,
        seen: &[(JobKey, u64)],
    ) -> Result<Vec<bool>>;

    /// Records `partitions` as `topic`'s partition count if the topic has no metadata yet —
    /// the first caller wins, atomically — and returns the metadata stored (the first
    /// caller's). The client compares it with its own configuration
    /// ([`Error::TopicMismatch`](crate::error::Error::TopicMismatch)).
    async fn register_topic(&self, topic: &Topic, partitions: u16) -> Result<TopicMeta>;

    /// Every topic with metadata in this store (for Redis: this namespace), by name.
    async fn topics(&self) -> Result<Vec<TopicMeta>>;

    /// Deletes `topic`'s metadata, so that the next client to use it records its own count.
    /// Refused with [`Error::TopicNotEmpty`](crate::error::Error::TopicNotEmpty) while any
    /// partition of the recorded count holds a job (in any state); returns the metadata
    /// deleted, or `None` if there was none. Not atomic with the clients using the topic:
    /// stop its producers and workers first.
    async fn reset_topic(&self, topic: &Topic) -> Result<Option<TopicMeta>>;

    /// Records or renews a live worker's heartbeat (`worker.id` names it): it lasts `ttl`
    /// from now (the store's clock) unless renewed. Namespace-wide.
    async fn beat_worker(&self, worker: &WorkerInfo, ttl: Duration) -> Result<()>;

    /// The workers whose heartbeat has not expired, by id, with the store's beat and expiry
    /// times; expired heartbeats are removed on the way.
    async fn workers(&self) -> Result<Vec<WorkerInfo>>;

    /// Removes a worker's heartbeat at once (a worker that stopped cleanly); `true` if there
    /// was one.
    async fn remove_worker(&self, id: &str) -> Result<bool>;

    /// Stores a periodic schedule (namespace-wide, by `record.name`): a new name is
    /// [`ScheduleOutcome::Created`]; a name whose stored definition is byte for byte
    /// `record.definition` is left as it is, cursor included ([`ScheduleOutcome::Unchanged`]);
    /// another definition is replaced, cursor and all ([`ScheduleOutcome::Updated`]).
    ///
    /// The default refuses: a store that keeps no schedules.
    async fn put_schedule(&self, record: &ScheduleRecord) -> Result<ScheduleOutcome> {
        let _ = record;
        Err(no_schedules())
    }

    /// Deletes a schedule by name; `true` if there was one.
    async fn remove_schedule(&self, name: &str) -> Result<bool> {
        let _ = name;
        Err(no_schedules())
    }

    /// Every stored schedule, by name.
    async fn schedules(&self) -> Result<Vec<ScheduleRecord>> {
        Err(no_schedules())
    }

    /// Moves schedule `name`'s cursor from `from_ms` to `to_ms`, only if it is still
    /// `from_ms` (compare-and-set: of schedulers that race, one wins); `true` if moved.
    /// `false` also for a schedule that no longer exists.
    async fn advance_schedule(&self, name: &str, from_ms: u64, to_ms: u64) -> Result<bool> {
        let _ = (name, from_ms, to_ms);
        Err(no_schedules())
    }

    /// The store's clock, in ms (Redis `TIME` for Redis).
    async fn now_ms(&self) -> Result<u64>;

    /// A listener for the partition's wake-up tokens, for a fetcher that found nothing to do.
    async fn wake_listener(&self, queue: &Queue) -> Result<Box<dyn WakeListener>>;
}

/// Waits for a wake-up token: a producer queued work that is due now or became the earliest.
#[async_trait]
pub trait WakeListener: Send {
    /// Waits up to `max_wait` for a token; `true` if one arrived. Cancel-safe only in the sense
    /// that a dropped wait may swallow one token — callers keep one wait in flight instead.
    async fn wait(&mut self, max_wait: Duration) -> Result<bool>;
}

/// The error of a store that keeps no schedules (the trait's default methods).
fn no_schedules() -> crate::error::Error {
    crate::error::Error::InvalidConfig("this store does not keep periodic schedules".into())
}

/// Most jobs one [`Store::act_on_dead`] call takes.
pub const MAX_DEAD_ACT: usize = 1000;

/// Refuses an [`Store::act_on_dead`] call of more than [`MAX_DEAD_ACT`] jobs.
pub(crate) fn check_act_len(seen: &[(JobKey, u64)]) -> Result<()> {
    if seen.len() > MAX_DEAD_ACT {
        return Err(crate::error::Error::InvalidConfig(format!(
            "{} dead jobs in one call; at most {MAX_DEAD_ACT}",
            seen.len()
        )));
    }
    Ok(())
}

/// A delivery's handle for the calls that must present its token.
pub fn lease_of(delivery: &Delivery) -> (JobKey, u64) {
    (delivery.key.clone(), delivery.token)
}
