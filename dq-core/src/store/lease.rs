//! The worker's role: the lease protocol (ARCHITECTURE.md §6.2–6.4). `fetch` leases due jobs
//! under fresh tokens; every later call about a delivery (`ack`, `fail_many`, `extend`,
//! `release`) presents its `(key, token)`, and a token that no longer owns the job changes
//! nothing. An idle fetcher waits on a [`WakeListener`] instead of polling.

use std::time::Duration;

use async_trait::async_trait;

use crate::error::Result;
use crate::finished::StoredResult;
use crate::job::Queue;
use crate::names::JobKey;
use crate::progress::Report;

/// Leasing jobs and settling each delivery: what a worker needs of a store.
#[async_trait]
pub trait Lease: Send + Sync + 'static {
    /// Recovers expired leases, promotes due jobs, and leases up to `max_jobs` ready ones.
    ///
    /// A call that leased jobs leaves a receipt of `request.call` for
    /// [`FetchCall::receipt_life`]; a retry of the call (after an ambiguous error) that finds
    /// it leases those of its jobs still held under the recorded tokens again — fresh tokens,
    /// a fresh lease, no attempt spent — before anything else, so a lost reply costs no job an
    /// attempt.
    async fn fetch(&self, queue: &Queue, request: &FetchRequest) -> Result<FetchReply>;

    /// Marks leased jobs as succeeded, one outcome per [`Success`]: each is deleted, or kept
    /// with its result and timings when its topic keeps succeeded jobs
    /// ([`Retention`](crate::Retention)); `worker` is the id kept with them ("" for none).
    async fn ack(&self, queue: &Queue, worker: &str, done: &[Success]) -> Result<Vec<AckOutcome>>;

    /// Records failed attempts of one partition, each retried, deferred, buried or deleted as
    /// its `action` says: one result per failure, in order (a stale token is
    /// `Err(`[`StaleToken`](crate::error::Error::StaleToken)`)` in its place; a key named twice
    /// is failed once, its later namings get what a second call would). An `Err` of the whole
    /// call is a store error: repeating the call is safe, as a failure already written is
    /// refused by its token. The Redis store makes it one script call, so a worker's failures
    /// cost Redis about what its acks do.
    async fn fail_many(
        &self,
        queue: &Queue,
        failures: &[FailedAttempt],
        dead_limits: DeadLimits,
    ) -> Result<Vec<Result<FailOutcome>>>;

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

    /// Writes a running job's progress or log line under its lease ([`Report`]); `false` when
    /// the job does not run under `token` (nothing written). A progress value over
    /// [`MAX_PROGRESS_LEN`](crate::progress::MAX_PROGRESS_LEN) is refused before any write.
    async fn report(
        &self,
        queue: &Queue,
        key: &JobKey,
        token: u64,
        report: &Report,
    ) -> Result<bool>;

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

/// One failed attempt for [`Lease::fail_many`]: the job, the token of its lease, what to do
/// with it, and the error text kept in its history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailedAttempt {
    /// The job.
    pub key: JobKey,
    /// The delivery token of the lease that failed.
    pub token: u64,
    /// Retry, defer, bury, cancel, throttle or discard.
    pub action: FailAction,
    /// The error, kept in the job's history.
    pub error: String,
}

/// One succeeded delivery for [`Lease::ack`]: the job, the token of its lease, when that lease
/// began, and what its handler returned (kept only when the topic keeps succeeded jobs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Success {
    /// The job.
    pub key: JobKey,
    /// The delivery token of the lease that succeeded.
    pub token: u64,
    /// When that lease began (store ms, [`Delivery::leased_ms`]); 0 if unknown.
    pub started_ms: u64,
    /// The handler's result.
    pub result: StoredResult,
}

impl Success {
    /// A success of the lease `(key, token)`, with no start time and no result.
    pub fn new(key: JobKey, token: u64) -> Self {
        Success {
            key,
            token,
            started_ms: 0,
            result: StoredResult::None,
        }
    }

    /// Successes of these leases, with no start times and no results.
    pub fn of(leases: &[(JobKey, u64)]) -> Vec<Success> {
        leases
            .iter()
            .map(|(key, token)| Success::new(key.clone(), *token))
            .collect()
    }
}

/// A delivery's handle for the calls that must present its token.
pub fn lease_of(delivery: &Delivery) -> (JobKey, u64) {
    (delivery.key.clone(), delivery.token)
}

/// How long the store keeps the receipt of a fetch call, at most: a receipt lives
/// [`FetchCall::receipt_life`] — this, or the call's lease if that is shorter (a lease that
/// has run out is recovered anyway; its receipt is of no more use).
pub const FETCH_RECEIPT_LIFE: Duration = Duration::from_secs(10);

/// One call to [`Lease::fetch`], the same across its tries.
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
    /// Its group, if it has one ([`crate::group`]).
    pub group: Option<crate::group::GroupName>,
    /// The batch it is a member of, if any ([`crate::batch`]).
    pub batch: Option<crate::batch::BatchId>,
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

/// The least wait before a fetch looks again at a structure it found held by a newer dq's
/// record (the ready list, a due set, the expired leases): such a record is work this process
/// cannot do, so it must not make the worker poll. (`fetch.lua`'s `NEWER_WAIT_MS`, tied by a
/// test.)
pub const NEWER_RECORD_WAIT: Duration = Duration::from_millis(1000);

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
    /// Records of a newer format than this process reads, met and left untouched by this
    /// call (a newer dq's jobs: this worker cannot run them; see ARCHITECTURE.md §4).
    pub newer: Vec<NewerRecord>,
}

/// A job record written by a newer dq, in a format this process does not read: it is never
/// leased, moved, buried or deleted here, only reported (the worker logs it and says so in
/// its health report).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewerRecord {
    /// The job's key.
    pub key: JobKey,
    /// The format the record says it was written in.
    pub format: u8,
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
    /// The job was cancelled while it ran
    /// ([`CancelOutcome::CancelRequested`](crate::store::operate::CancelOutcome::CancelRequested)):
    /// deleted, counted as cancelled, never retried.
    Cancel,
    /// The handler reported that a partner is rate-limiting it
    /// ([`JobError::rate_limited`](crate::JobError::rate_limited)): the job runs again after
    /// this delay without spending its attempt, and its partition leases nothing before then.
    Throttle(Duration),
    /// The handler's retry function said [`RetryDecision::Discard`](crate::retry::RetryDecision):
    /// deleted with its history, counted in
    /// [`TopicStats::discarded`](crate::TopicStats::discarded), never kept.
    Discard,
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
    /// The job was discarded ([`FailAction::Discard`]): deleted with its history and counted.
    Discarded,
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
