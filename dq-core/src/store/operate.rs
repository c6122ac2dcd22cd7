//! The operator's role: what tools and the client do to jobs that are not theirs to run —
//! cancel, reschedule or bury a waiting job, pause or limit a partition, look a job up, read the
//! stats, list a state page by page, and requeue or purge the dead. With what each call takes
//! and reports.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use crate::control::{ControlChange, ControlState};
use crate::error::{Error, Result};
use crate::events::{Event, EventId};
use crate::finished::{FinishedAs, FinishedChunk, FinishedJob};
use crate::group::{GroupChange, GroupState};
use crate::inspect::{DeadAction, ListChunk, ListFrom};
use crate::job::{JobInfo, JobState, Queue, check_due_ms, now_plus, truncate_error, unix_ms};
use crate::names::JobKey;
use crate::store::lease::DeadLimits;

/// Acting on and reading jobs by key or by state: what operators and tools need of a store.
#[async_trait]
pub trait Operate: Send + Sync + 'static {
    /// Cancels a job that has not started; for a running one, records a cancel request that
    /// the next `extend` of its lease reports
    /// ([`CancelOutcome::CancelRequested`]), and that `fail_many`, `release` and lease
    /// recovery honour (the job is deleted as cancelled, never retried).
    async fn cancel(&self, queue: &Queue, key: &JobKey) -> Result<CancelOutcome>;

    /// Gives a scheduled, ready or retry job a new due time. (The Redis store under durable
    /// enqueue waits for the replicas, as an enqueue does, and answers
    /// [`Error::NotReplicated`] when fewer confirm.)
    async fn reschedule(
        &self,
        queue: &Queue,
        key: &JobKey,
        due: NewDue,
    ) -> Result<RescheduleOutcome>;

    /// Buries a waiting (scheduled, ready or retry) job without running it: it goes to the
    /// dead queue as a failed attempt's burial takes it there — its attempts kept, `reason`
    /// (cut as an error text is, [`bury_reason`]; empty: `"buried"`) the last entry of its
    /// history, counted in [`TopicStats::buried`], a `dead` event when the topic records
    /// events, its `unique_for` window started, the dead queue trimmed to `dead_limits` (this
    /// partition's share, as [`Lease::fail_many`](crate::store::Lease::fail_many) takes it),
    /// and, for a member of a batch, its end noted in the partition's outbox as dead. A
    /// running job ([`BuryOutcome::Running`]) or a dead one ([`BuryOutcome::Dead`]) is not
    /// touched. Harmless to repeat: a second call finds the job dead. (The Redis store under
    /// durable enqueue waits for the replicas, as `reschedule` does, and answers
    /// [`Error::NotReplicated`] when fewer confirm.)
    async fn bury(
        &self,
        queue: &Queue,
        key: &JobKey,
        reason: &str,
        dead_limits: DeadLimits,
    ) -> Result<BuryOutcome>;

    /// Gives a scheduled, ready or retry job a new payload (MessagePack), keeping its due
    /// time, attempts, history, expiry and place in line; a running or dead job is not
    /// touched.
    async fn update_payload(
        &self,
        queue: &Queue,
        key: &JobKey,
        payload: &[u8],
    ) -> Result<UpdateOutcome>;

    /// Changes this partition's control settings as `change` says (nothing, for a default
    /// change) and returns them as stored. A change wakes the partition's fetchers.
    /// `fetch` enforces them: nothing is leased while paused or throttled; at most the rate's
    /// budget and the concurrency share minus the jobs running are leased.
    async fn control(&self, queue: &Queue, change: &ControlChange) -> Result<ControlState>;

    /// Changes this partition's group settings as `change` says (nothing, for a default
    /// change: a read) and returns the group's settings and state in this partition (for no
    /// group: the defaults only). New limits and holds take effect from the next fetch; a
    /// change wakes the partition's fetchers. Refuses a hold without a group
    /// ([`Error::InvalidConfig`]) before any write.
    async fn group(&self, queue: &Queue, change: &GroupChange) -> Result<GroupState>;

    /// Everything known about one job, or `None`.
    async fn job(&self, queue: &Queue, key: &JobKey) -> Result<Option<JobInfo>>;

    /// The finished job of this key that the partition keeps ([`Retention`](crate::Retention)),
    /// or `None`. A key enqueued again after it finished has both: its live job
    /// ([`Operate::job`]) and its last kept run.
    async fn finished(&self, queue: &Queue, key: &JobKey) -> Result<Option<FinishedJob>>;

    /// Up to `limit` kept jobs that ended as `outcome`, in the order their keeping ends, from
    /// `from` ([`ListFrom::Start`] or [`ListFrom::After`] a place); reads only. A call may
    /// return fewer than `limit` while `more` says the partition holds more (kept jobs of
    /// other outcomes share the index and are skipped).
    async fn list_finished(
        &self,
        queue: &Queue,
        outcome: FinishedAs,
        from: &ListFrom,
        limit: usize,
    ) -> Result<FinishedChunk>;

    /// Depths and counters of one partition.
    async fn stats(&self, queue: &Queue) -> Result<TopicStats>;

    /// About `limit` events of this partition written after `after`, oldest first; reads
    /// only (nothing, for a partition that records no events). The Redis store writes the
    /// events of one call together and returns them together, so a page may go beyond
    /// `limit` by the rest of one call's events. See [`crate::events`].
    async fn read_events(&self, queue: &Queue, after: EventId, limit: usize) -> Result<Vec<Event>>;

    /// The id of the partition's newest event kept, or `None` (no events): where a reader
    /// that wants only new events starts.
    async fn last_event(&self, queue: &Queue) -> Result<Option<EventId>>;

    /// Up to `limit` jobs in `state`, from `from`, in the partition's listing order, each with
    /// its place; reads only (it works at Redis's `maxmemory`).
    ///
    /// `scheduled` and `retry` are ordered by due time, `active` by lease deadline, `dead` by
    /// time of death, ties as the store keeps them, then by key; `from` is
    /// [`ListFrom::Start`] or [`ListFrom::After`] a place. `ready` is in queue order; `from`
    /// is `Start` or a queue position ([`ListFrom::Index`]); a call skips a bounded number of
    /// stale entries and reports where it stopped in [`ListChunk::next_index`]. Another
    /// combination is refused with [`Error::InvalidConfig`].
    async fn list(
        &self,
        queue: &Queue,
        state: JobState,
        from: &ListFrom,
        limit: usize,
    ) -> Result<ListChunk>;

    /// Moves dead jobs back to `ready` with attempts reset; `true` for each one moved.
    async fn requeue_dead(&self, queue: &Queue, keys: &[JobKey]) -> Result<Vec<bool>>;

    /// Deletes the named dead jobs, or (with `keys` empty) the oldest `limit`; returns how many.
    async fn purge_dead(&self, queue: &Queue, keys: &[JobKey], limit: usize) -> Result<u64>;

    /// Requeues or deletes dead jobs, each only if it is still dead with the time of death
    /// given — as a listing of `dead` reported it ([`JobInfo::died_ms`]); `true` for each one
    /// acted on, in order (a key named twice is acted on once). A sweep by filter acts
    /// through this, so a job that was requeued and died again since it was listed, whose
    /// error or age the filter has not seen, is left alone. At most [`MAX_DEAD_ACT`] jobs per
    /// call.
    async fn act_on_dead(
        &self,
        queue: &Queue,
        action: DeadAction,
        seen: &[(JobKey, u64)],
    ) -> Result<Vec<bool>>;
}

/// Most jobs one [`Operate::act_on_dead`] call takes.
pub const MAX_DEAD_ACT: usize = 1000;

/// Refuses an [`Operate::act_on_dead`] call of more than [`MAX_DEAD_ACT`] jobs.
pub(crate) fn check_act_len(seen: &[(JobKey, u64)]) -> Result<()> {
    if seen.len() > MAX_DEAD_ACT {
        return Err(Error::InvalidConfig(format!(
            "{} dead jobs in one call; at most {MAX_DEAD_ACT}",
            seen.len()
        )));
    }
    Ok(())
}

/// Refuses a concurrency share of 0 and an invalid rate before a control change is written
/// (both stores).
pub(crate) fn check_control(change: &ControlChange) -> Result<()> {
    if let Some(Some(retention)) = change.retention {
        retention.check()?;
    }
    if let Some(Some(events)) = change.events {
        events.check()?;
    }
    if let Some(Some(rate)) = change.rate {
        rate.check()?;
    }
    if let Some(Some(d)) = change.max_delay {
        crate::control::check_max_delay(d)?;
    }
    if change.concurrency == Some(Some(0)) {
        return Err(Error::InvalidConfig(
            "a concurrency share must be at least 1".into(),
        ));
    }
    Ok(())
}

/// What `update_payload` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateOutcome {
    /// The job was waiting in this state and has its new payload.
    Updated(JobState),
    /// The job is running: not touched (its handler has the old payload).
    Running,
    /// The job is in the dead queue: not touched.
    Dead,
    /// No job has this key.
    NotFound,
}

/// What `cancel` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The job was scheduled, ready or in retry, and is gone; it will never run.
    Cancelled,
    /// The job is running now: a cancel request was recorded. The worker holding it learns
    /// it on its next lease extension, its handler's `ctx.cancelled()` fires, and the job ends
    /// as cancelled, never retried (unless the handler finishes successfully first).
    CancelRequested,
    /// No job has this key.
    NotFound,
    /// The job is in the dead queue; it was not touched (purge it instead).
    Dead,
    /// Reported only when the client retried the call after an ambiguous error (a timeout or
    /// a connection dropped after the request was sent): no job has this key now, and the
    /// earlier try may be what cancelled it — or the job ended otherwise in between (it ran,
    /// or was purged). Either way it will not run. (A cancel leaves no receipt, so the two
    /// cannot be told apart; a retry after a try that surely never reached the store reports
    /// `NotFound` as usual.)
    Gone,
}

/// What `bury` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuryOutcome {
    /// The job was scheduled, ready or in retry, and is in the dead queue now, with the
    /// reason in its history; it will not run unless requeued from there.
    Buried,
    /// The job is running now: not touched (its run ends as its handler decides; cancel it
    /// to stop it).
    Running,
    /// The job is in the dead queue already: not touched. (After a retried call, the earlier
    /// try may be what buried it.)
    Dead,
    /// No job has this key.
    NotFound,
}

/// The reason a burial keeps in the job's history ([`Operate::bury`]): `reason` cut as an
/// error text is ([`truncate_error`]), or `"buried"` for an empty one.
pub fn bury_reason(reason: &str) -> std::borrow::Cow<'_, str> {
    if reason.is_empty() {
        return std::borrow::Cow::Borrowed("buried");
    }
    truncate_error(reason)
}

/// A new due time for `reschedule`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NewDue {
    /// At this wall-clock time.
    At(SystemTime),
    /// This long after now.
    After(Duration),
    /// Moved from its current due time by this many ms (negative: earlier).
    ///
    /// Unlike `At` and `After`, a shift is relative: repeating it after an ambiguous error
    /// (a timeout) shifts again, so the client never retries it and surfaces the error. Where
    /// a retry must be harmless, read the job's `due_ms` and reschedule `At` the time you
    /// want.
    Shift(i64),
}

impl NewDue {
    /// Refuses a due time dq cannot store (past [`MAX_DUE_MS`](crate::job::MAX_DUE_MS)), and
    /// a shift larger than the whole range. A shift within range that would move a job past
    /// `MAX_DUE_MS` stops there.
    pub fn check(&self) -> Result<()> {
        match *self {
            NewDue::After(d) => check_due_ms(now_plus(d)),
            NewDue::At(t) => check_due_ms(u128::from(unix_ms(t))),
            NewDue::Shift(delta) => check_due_ms(u128::from(delta.unsigned_abs())),
        }
    }
}

/// What `reschedule` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RescheduleOutcome {
    /// Now due at this time (store ms); `ready` if that is not in the future.
    Rescheduled {
        /// The new due time (store ms).
        due_ms: u64,
    },
    /// The job is running now; it was not touched.
    Running,
    /// The job is in the dead queue; it was not touched (requeue it instead).
    Dead,
    /// No job has this key.
    NotFound,
}

/// Counters and depths of one topic (summed over its partitions).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopicStats {
    /// Jobs waiting for their due time.
    pub scheduled: u64,
    /// Jobs due and waiting for a worker.
    pub ready: u64,
    /// Jobs running.
    pub active: u64,
    /// Jobs waiting for a retry.
    pub retry: u64,
    /// Jobs in the dead queue.
    pub dead: u64,
    /// Jobs ever enqueued (created or replaced).
    pub enqueued: u64,
    /// Jobs that succeeded (their handler returned `Ok` and the ack was written), including
    /// those counted in [`succeeded_after_cancel_request`](Self::succeeded_after_cancel_request).
    pub succeeded: u64,
    /// Failed attempts that were scheduled for retry.
    pub retried: u64,
    /// Jobs moved to the dead queue.
    pub buried: u64,
    /// Leases that expired and were recovered.
    pub expired: u64,
    /// Jobs dropped because their expiry ([`Expiry`](crate::Expiry)) came before they
    /// started (or, after a release at shutdown or a lost lease, before they started again).
    /// Stores written by versions before expiry read 0.
    pub expired_before_start: u64,
    /// Jobs that ended cancelled, their work not done: removed by a cancel before they
    /// started, or running when a cancel was requested and then stopped without success (the
    /// handler returned an error or was stopped, the worker shut down, or the lease ran out).
    pub cancelled: u64,
    /// Jobs whose cancel was requested while they ran but whose handler succeeded anyway (it
    /// finished before it saw the request, or ignored it): their work was done, so they are
    /// counted in `succeeded` (and here), never in `cancelled`. Stores written by versions
    /// before this counter read 0.
    pub succeeded_after_cancel_request: u64,
    /// Jobs a handler's retry function discarded ([`RetryDecision::Discard`](crate::retry::RetryDecision)):
    /// deleted after a failed attempt (or an expired lease) instead of retried or buried.
    /// Stores written by versions before retry functions read 0.
    pub discarded: u64,
    /// Dead jobs removed by the dead queue's cap or retention.
    pub trimmed: u64,
    /// How long the most overdue job (due but not started) has waited, in ms.
    pub oldest_overdue_ms: u64,
    /// Jobs whose due time has come but that are still in `scheduled` or `retry` (a worker
    /// moves them to `ready` on its next fetch); with `ready`, what is due and not running.
    pub overdue: u64,
    /// Leasing is paused ([`TopicClient::pause`](crate::TopicClient::pause)).
    pub paused: bool,
    /// A limit holds due work back now: the rate limit's budget is spent, the global
    /// concurrency cap is reached with work waiting, or a handler asked to slow the topic
    /// down. Lateness this causes is not an error.
    pub throttled: bool,
    /// Times a handler asked to slow the topic down
    /// ([`FailAction::Throttle`](crate::store::lease::FailAction::Throttle)).
    pub throttles: u64,
    /// Finished jobs kept now ([`Retention`](crate::Retention)).
    pub kept: u64,
    /// Kept jobs dropped before their time because the topic kept its cap
    /// ([`Retention::max_kept`](crate::Retention::max_kept)).
    pub kept_trimmed: u64,
    /// Events that could not be written (the `events` key held another type, or the Redis
    /// user may not `XADD`); the jobs' changes were made all the same.
    pub events_lost: u64,
}
