//! The job model: what a job is, the states it moves through, and what each operation reports.
//!
//! Times are milliseconds on the store's clock: Unix time from Redis `TIME` for the Redis store,
//! tokio's (virtual-able) clock for the embedded store. Producer and worker clocks never decide.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Serialize, de::DeserializeOwned};

use crate::names::{JobKey, Topic};

/// A kind of job: a topic and the payload type its handler takes.
///
/// `#[delayed_job]` implements this on a type named like the handler, so that
/// `client.enqueue::<close_order>(payload)` is checked against the handler's payload type.
pub trait Job: Send + Sync + 'static {
    /// The handler's payload; stored as MessagePack.
    type Payload: Serialize + DeserializeOwned + Send + Sync + 'static;
    /// The topic jobs of this kind are queued under.
    const TOPIC: &'static str;
}

/// One partition of a topic: the unit every store operation works on.
///
/// All keys of a partition share one Redis hash tag, so each script touches one slot.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Queue {
    /// The topic.
    pub topic: Topic,
    /// The partition, `0..partitions`.
    pub partition: u16,
}

impl Queue {
    /// Partition `partition` of `topic`.
    pub fn new(topic: Topic, partition: u16) -> Self {
        Queue { topic, partition }
    }
}

/// Where a job is in its life (docs/ARCHITECTURE.md §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Waiting for its due time.
    Scheduled,
    /// Due; waiting for a worker.
    Ready,
    /// Leased to a worker and running.
    Active,
    /// Failed; waiting for its next attempt.
    Retry,
    /// Out of attempts, failed permanently or undecodable; kept for inspection and requeue.
    Dead,
}

impl JobState {
    /// The state's name as used in logs and errors.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Scheduled => "scheduled",
            JobState::Ready => "ready",
            JobState::Active => "active",
            JobState::Retry => "retry",
            JobState::Dead => "dead",
        }
    }

    /// The one-letter code stored in records and returned by scripts.
    pub fn code(self) -> u8 {
        match self {
            JobState::Scheduled => b'S',
            JobState::Ready => b'R',
            JobState::Active => b'A',
            JobState::Retry => b'F',
            JobState::Dead => b'D',
        }
    }

    /// The state for a one-letter code.
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            b'S' => JobState::Scheduled,
            b'R' => JobState::Ready,
            b'A' => JobState::Active,
            b'F' => JobState::Retry,
            b'D' => JobState::Dead,
            _ => return None,
        })
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The latest due time dq can store, in Unix ms: 2^48 − 1, in the year 10889 (a job record
/// keeps due times in 48 bits). A delay or time past it is refused with
/// [`Error::DueOutOfRange`](crate::error::Error::DueOutOfRange) before anything is written.
pub const MAX_DUE_MS: u64 = (1 << 48) - 1;

/// Refuses a due time past [`MAX_DUE_MS`]: `After(d)` counts from this machine's clock (the
/// store counts from its own, which differs by far less than the thousands of years at stake).
fn check_due_ms(requested_ms: u128) -> crate::error::Result<()> {
    if requested_ms > u128::from(MAX_DUE_MS) {
        return Err(crate::error::Error::DueOutOfRange {
            requested_ms,
            max_ms: MAX_DUE_MS,
        });
    }
    Ok(())
}

fn now_plus(delay: Duration) -> u128 {
    u128::from(unix_ms(SystemTime::now())) + delay.as_millis()
}

/// When a job becomes due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due {
    /// Now: straight to `ready`.
    Now,
    /// This long after the store's "now".
    After(Duration),
    /// At this wall-clock time (due at once if it has passed).
    At(SystemTime),
}

impl Due {
    /// Refuses a due time dq cannot store (past [`MAX_DUE_MS`]).
    pub fn check(&self) -> crate::error::Result<()> {
        match *self {
            Due::Now => Ok(()),
            Due::After(d) => check_due_ms(now_plus(d)),
            Due::At(t) => check_due_ms(u128::from(unix_ms(t))),
        }
    }
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
    /// written: the job is not created a second time.
    Ended,
}

/// How long the store keeps the receipt of an applied [`EnqueueCall`], at least. A retry must
/// reach the store within it to be recognised; the client stops retrying an enqueue well
/// before (see [`ENQUEUE_RETRY_WINDOW`](crate::client::ENQUEUE_RETRY_WINDOW)).
pub const ENQUEUE_RECEIPT_LIFE: Duration = Duration::from_secs(30);

/// One client call to [`Store::enqueue`](crate::store::Store::enqueue), the same across its tries.
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

/// How long the store keeps the receipt of a fetch call, at most: a receipt lives
/// [`FetchCall::receipt_life`] — this, or the call's lease if that is shorter (a lease that
/// has run out is recovered anyway; its receipt is of no more use).
pub const FETCH_RECEIPT_LIFE: Duration = Duration::from_secs(10);

/// One call to [`Store::fetch`](crate::store::Store::fetch), the same across its tries.
///
/// `fetch` leases jobs before its reply is on its way; a reply lost to a dropped connection or
/// a timeout would leave them leased to nobody until the lease runs out, and that expiry
/// counts as a failed attempt (on a topic without retries, the job is dead without having
/// run). So a fetch that leased jobs leaves a receipt of `id` with their leases, and a retry
/// of the same call (`retry > 0`) that finds it gets those jobs again, under fresh tokens and
/// a fresh lease, with no attempt spent. A retry that finds no receipt is an ordinary fetch
/// (the earlier try never ran, or leased nothing).
///
/// A `FetchCall` is one call: a new fetch takes a new one ([`FetchCall::new`]). A first try
/// (`retry == 0`) is always an ordinary fetch, so reusing a request for several first tries
/// is harmless.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchCall {
    /// Chosen at random before the first try.
    pub id: u64,
    /// 0 for the first try; `n` for the `n`-th retry after an ambiguous error. A try that
    /// reaches the store after a later try of the same call has run (it was held up on an old
    /// connection) does nothing: nobody waits for its reply any more.
    pub retry: u32,
}

impl FetchCall {
    /// A new call with a random id (its first try).
    pub fn new() -> FetchCall {
        FetchCall {
            id: rand::random(),
            retry: 0,
        }
    }

    /// The next try of the same call.
    pub fn retried(self) -> FetchCall {
        FetchCall {
            retry: self.retry.saturating_add(1),
            ..self
        }
    }

    /// Whether this try repeats an earlier one whose outcome is unknown.
    pub fn is_retry(self) -> bool {
        self.retry > 0
    }

    /// How long the store keeps the receipt of a fetch leasing for `lease`: the shorter of
    /// the lease and [`FETCH_RECEIPT_LIFE`], at least 1 ms.
    pub fn receipt_life(lease: Duration) -> Duration {
        lease.min(FETCH_RECEIPT_LIFE).max(Duration::from_millis(1))
    }

    /// How long after its first try a fetch leasing for `lease` is still retried: half its
    /// receipt's life, so that a retry reaches the store while the receipt is there (and
    /// long before the lease of what the lost try leased runs out).
    pub fn retry_window(lease: Duration) -> Duration {
        Self::receipt_life(lease) / 2
    }
}

impl Default for FetchCall {
    fn default() -> Self {
        FetchCall::new()
    }
}

/// A job leased to a worker by `fetch`.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// The partition it came from.
    pub queue: Queue,
    /// Its key.
    pub key: JobKey,
    /// The fencing token of this delivery; ack, fail, extend and release must present it.
    pub token: u64,
    /// Which attempt this is, from 1.
    pub attempt: u32,
    /// When it was due (store ms).
    pub due_ms: u64,
    /// When it was first enqueued (store ms).
    pub created_ms: u64,
    /// When it was leased (store ms); `started_ms - due_ms` is how late it started.
    pub leased_ms: u64,
    /// When the lease runs out unless extended (store ms).
    pub lease_deadline_ms: u64,
    /// The MessagePack payload.
    pub payload: Vec<u8>,
}

/// The limits of one topic's dead queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeadLimits {
    /// Most dead jobs kept per topic (spread evenly over its partitions); oldest trimmed first.
    pub cap: u64,
    /// How long a dead job is kept.
    pub retention: Duration,
}

impl Default for DeadLimits {
    fn default() -> Self {
        DeadLimits {
            cap: 100_000,
            retention: Duration::from_secs(30 * 24 * 3600),
        }
    }
}

/// What a worker asks of `fetch`.
#[derive(Clone, Debug)]
pub struct FetchRequest {
    /// Most jobs to lease in this call (the worker's free permits).
    pub max_jobs: usize,
    /// Lease length for the leased jobs.
    pub lease: Duration,
    /// Most due jobs moved from `scheduled` and from `retry` to `ready` per call.
    pub promote_batch: usize,
    /// Most expired leases recovered per call.
    pub recover_batch: usize,
    /// The topic's retry policy: a job whose lease expired after attempt `n` waits
    /// [`RetryPolicy::delay_after`](crate::RetryPolicy::delay_after)`(n)`, drawn afresh for
    /// each job, or is dead ("lease expired") when the policy has no more retries.
    pub retry_policy: crate::retry::RetryPolicy,
    /// Dead-queue limits applied when a recovered job is buried.
    pub dead_limits: DeadLimits,
    /// Which call and try this is: a retry after an ambiguous error gets back what an earlier
    /// try of the same call leased (see [`FetchCall`]).
    pub call: FetchCall,
}

/// Most jobs one fetch may lease.
pub const MAX_FETCH_JOBS: usize = 10_000;
/// Largest promote or recover batch of one fetch (it bounds the script's running time).
pub const MAX_FETCH_BATCH: usize = 100_000;

impl FetchRequest {
    /// Checks the limits; both stores refuse a request that fails this, before any work.
    pub fn validate(&self) -> crate::error::Result<()> {
        if self.lease.is_zero() || self.promote_batch == 0 || self.recover_batch == 0 {
            return Err(crate::error::Error::InvalidConfig(
                "fetch needs a lease and batch sizes above zero".into(),
            ));
        }
        if self.max_jobs > MAX_FETCH_JOBS
            || self.promote_batch > MAX_FETCH_BATCH
            || self.recover_batch > MAX_FETCH_BATCH
        {
            return Err(crate::error::Error::InvalidConfig(format!(
                "fetch limits too large: at most {MAX_FETCH_JOBS} jobs, batches of \
                 {MAX_FETCH_BATCH}"
            )));
        }
        Ok(())
    }
}

impl Default for FetchRequest {
    fn default() -> Self {
        FetchRequest {
            max_jobs: 16,
            lease: Duration::from_secs(30),
            promote_batch: 1000,
            recover_batch: 100,
            retry_policy: crate::retry::RetryPolicy::default(),
            dead_limits: DeadLimits::default(),
            call: FetchCall::new(),
        }
    }
}

/// What `fetch` returned.
#[derive(Clone, Debug, Default)]
pub struct FetchReply {
    /// The leased jobs, in delivery order.
    pub jobs: Vec<Delivery>,
    /// With no jobs: how long until the next due time or lease deadline in this partition
    /// (`None`: nothing is pending at all). With jobs: `Some(ZERO)` if more are ready.
    pub next_in: Option<Duration>,
    /// Jobs buried by lease recovery in this call (for the `on_dead` hook).
    pub buried: Vec<JobKey>,
    /// Dead jobs removed by cap or retention in this call.
    pub trimmed: u64,
}

/// The outcome of a failed attempt, chosen by the worker from the retry policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FailAction {
    /// Retry after this delay; the attempt counts.
    Retry(Duration),
    /// Run again after this delay without counting the attempt ("not yet").
    Defer(Duration),
    /// No retry: to the dead queue now.
    Bury,
    /// The job was cancelled while it ran ([`CancelOutcome::CancelRequested`]): deleted,
    /// counted as cancelled, never retried.
    Cancel,
    /// The handler reported that a partner is rate-limiting it
    /// ([`JobError::rate_limited`](crate::JobError::rate_limited)): the job runs again after
    /// this delay without spending its attempt, and its partition leases nothing before then.
    Throttle(Duration),
}

/// What `fail` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailOutcome {
    /// Waiting in `retry` (or `scheduled`, when deferred) until this time (store ms).
    Retrying {
        /// Next attempt time (store ms).
        at_ms: u64,
    },
    /// In the dead queue.
    Buried {
        /// Dead jobs trimmed to make room (cap / retention).
        trimmed: u64,
    },
    /// The job no longer exists (already acked and deleted, cancelled, purged): nothing done.
    Gone,
    /// The job was cancelled: deleted and counted as cancelled, not retried (the action was
    /// [`FailAction::Cancel`], or a cancel had been requested while it ran).
    Cancelled,
}

/// What `extend` found for one lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extended {
    /// Still owned: extended.
    Held,
    /// Lost: the job is gone, or leased under another token; nothing done.
    Lost,
    /// Still owned and extended, but [`Client`](crate::Client)'s `cancel` asked for the
    /// running job to stop: the worker cancels its handler and ends the job as cancelled.
    CancelRequested,
}

/// What `ack` did for one job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckOutcome {
    /// The job succeeded and was deleted.
    Acked,
    /// The job was already gone (a repeated ack); nothing done.
    Gone,
    /// The token no longer owns the job (lease lost); nothing done.
    Stale,
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
    /// Refuses a due time dq cannot store (past [`MAX_DUE_MS`]), and a shift larger than the
    /// whole range. A shift within range that would move a job past [`MAX_DUE_MS`] stops there.
    pub fn check(&self) -> crate::error::Result<()> {
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

/// How one attempt of a job ended, as kept in its history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// The handler returned an error (or panicked, or timed out).
    Failed,
    /// The worker lost the lease (crashed, stalled, partitioned).
    LeaseExpired,
    /// The handler deferred itself; no attempt was spent.
    Deferred,
    /// The job was buried without retry (permanent error, undecodable payload).
    Buried,
}

impl AttemptOutcome {
    pub(crate) fn from_code(code: &str) -> Self {
        match code {
            "L" => AttemptOutcome::LeaseExpired,
            "d" => AttemptOutcome::Deferred,
            "B" => AttemptOutcome::Buried,
            _ => AttemptOutcome::Failed,
        }
    }
}

/// One entry of a job's attempt history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptRecord {
    /// Which attempt (from 1).
    pub attempt: u32,
    /// When it ended (store ms).
    pub at_ms: u64,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// The error text (truncated to 1 KiB).
    pub error: String,
}

/// Longest error text kept in a job's history, in bytes.
pub const MAX_ERROR_LEN: usize = 1024;

/// An error text cut to at most [`MAX_ERROR_LEN`] bytes, on a character boundary (a cut
/// inside a character would make the history undecodable).
pub(crate) fn truncate_error(text: &str) -> &str {
    if text.len() <= MAX_ERROR_LEN {
        return text;
    }
    let mut end = MAX_ERROR_LEN;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// How many attempt records a job keeps; older ones are dropped first.
pub const MAX_HISTORY: usize = 32;

/// Everything known about one job, as the store keeps it (times in store ms, the payload as
/// MessagePack); [`JobInfo::decode`] gives the typed [`JobView`](crate::inspect::JobView).
#[derive(Clone, Debug)]
pub struct JobInfo {
    /// Its key.
    pub key: JobKey,
    /// Its state.
    pub state: JobState,
    /// When it is (or was) due (store ms); for `retry`, the next attempt time.
    pub due_ms: u64,
    /// When it was enqueued (store ms).
    pub created_ms: u64,
    /// Attempts started so far.
    pub attempts: u32,
    /// For a running (`active`) job: when its lease runs out unless extended (store ms);
    /// `None` in every other state.
    pub lease_deadline_ms: Option<u64>,
    /// For a dead job: when it went to the dead queue (store ms); `None` in every other state.
    pub died_ms: Option<u64>,
    /// Its failed attempts, oldest first (at most [`MAX_HISTORY`]).
    pub history: Vec<AttemptRecord>,
    /// The MessagePack payload.
    pub payload: Vec<u8>,
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
    /// Jobs that succeeded.
    pub succeeded: u64,
    /// Failed attempts that were scheduled for retry.
    pub retried: u64,
    /// Jobs moved to the dead queue.
    pub buried: u64,
    /// Leases that expired and were recovered.
    pub expired: u64,
    /// Jobs cancelled.
    pub cancelled: u64,
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
    /// Times a handler asked to slow the topic down ([`FailAction::Throttle`]).
    pub throttles: u64,
}

/// Milliseconds since the Unix epoch of a wall-clock time (0 before the epoch).
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The wall-clock time of a Unix-ms value.
pub fn from_unix_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// The result of enqueueing one job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enqueued {
    /// The job's key (generated if none was given).
    pub key: JobKey,
    /// What happened.
    pub outcome: EnqueueOutcome,
}
