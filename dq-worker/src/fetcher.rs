//! A fetcher is responsible for one topic partition:
//!
//! 1. take pool permits *before* fetching — at least one, then whatever else is free — so it
//!    never leases a job that cannot start now;
//! 2. call `fetch` once for that many jobs (the script also promotes due jobs and recovers
//!    expired leases) and hand each job with its permit to a runner. While one call is in
//!    flight, slots freed by finished jobs start a second one once half the batch is
//!    free (`second_fetch_min`): a busy pool is not left idle for a round trip, and a busy
//!    Redis is not spent on one-job fetches (a fetch's fixed cost is many times a job's);
//! 3. with nothing to do, wait for whichever comes first: a local timer for the delay `fetch`
//!    reported (computed from Redis `TIME`), or a wake-up token (a producer queued work due
//!    now, or a new earliest job) — never a polling interval. The wait is capped so that a
//!    lost wake-up costs at most the cap;
//! 4. on store errors, back off (capped at 500 ms, reset by any success, cut short by a
//!    wake-up) and try again; the worker never exits over them. Errors retrying cannot fix
//!    (permissions, wrong key types) are logged at ERROR and shown in the worker's health.
//!    A fetch whose outcome is unknown (a dropped connection, a timeout) is first retried as
//!    the same call for a short window, so that the jobs it may have leased come back (see
//!    [`FetchCall`]) instead of waiting out their lease and losing an attempt.
//!
//! Before its first fetch, a fetcher checks its topic's partition count against the store's
//! record (`Client::check_topic`, shared by the topic's fetchers: one round trip; normally
//! already answered by `Worker::start`). A mismatch
//! would have it fetch from partitions the producers do not use (or miss the ones they do):
//! it does not fetch at all, and says so at ERROR (once per topic) and in the health. Other
//! errors of the check are retried as failing fetches are.
//!
//! Wake-up tokens are received by a listener task with one `BLPOP` always in flight, so a
//! token is never dropped by a cancelled wait; it is turned into a local `Notify`. The
//! `BLPOP` blocks for [`LISTEN_BLOCK`] (a minute), not `idle_wait`: its timeout only finds a
//! listener connection that died silently, and meanwhile the fetcher's own capped wait still
//! bounds a lost token, so a quiet partition costs one fetch per `idle_wait` and one `BLPOP`
//! per minute.

use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use dq_core::{Client, FetchCall, FetchRequest, Queue, Store};
use tokio::sync::{Notify, OwnedSemaphorePermit};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::dead::{DeadJob, DeadLetters};
use crate::health::FetcherHealth;
use crate::registry::TopicRuntime;
use crate::runner::{self, RunnerShared};

/// How long the wake-up listener's `BLPOP` blocks (at least; `idle_wait` if longer).
const LISTEN_BLOCK: Duration = Duration::from_secs(60);

/// How a fetcher behaves (from the worker's settings).
#[derive(Clone, Debug)]
pub(crate) struct FetchSettings {
    pub lease: Duration,
    pub max_batch: usize,
    /// Longest wait without a fetch, bounding the cost of a lost wake-up.
    pub idle_wait: Duration,
}

pub(crate) struct Fetcher {
    pub store: Arc<dyn Store>,
    /// For the topic check before the first fetch.
    pub client: Client,
    pub queue: Queue,
    pub topic: Arc<TopicRuntime>,
    pub shared: Arc<RunnerShared>,
    pub settings: FetchSettings,
    pub stop: CancellationToken,
    pub runners: TaskTracker,
    pub dead: DeadLetters,
    /// What this fetcher's last store call did, for [`crate::WorkerHandle::health`].
    pub health: Arc<std::sync::Mutex<FetcherHealth>>,
}

/// Fetch calls one partition may have in flight: a second one starts with the slots freed
/// while the first is on its way, so slots never wait out a whole round trip.
const MAX_FETCHES_IN_FLIGHT: usize = 2;

/// Free slots a second fetch (one already in flight) waits for: half the batch. The
/// first fetch starts with one free slot (no added latency when the pool is idle); a second one
/// for one slot at a time would cost Redis a whole call's fixed cost per job while the pool is
/// busy, and the first fetch's reply is at most a round trip away anyway.
fn second_fetch_min(max_batch: usize) -> u32 {
    u32::try_from((max_batch / 2).max(1)).unwrap_or(u32::MAX)
}

/// Due jobs one fetch moves to `ready` beyond those it leases: enough to keep other fetchers
/// busy, small enough that a mass expiry never makes one script call long.
const PROMOTE_BATCH: usize = 16;

/// Longest pause between fetch attempts while the store fails: short, so that a worker
/// resumes soon after the store is reachable again (a failing call is cheap to repeat).
const MAX_ERROR_PAUSE: Duration = Duration::from_millis(500);

fn error_backoff() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(20))
        .with_max_delay(MAX_ERROR_PAUSE)
        .without_max_times()
        .with_jitter()
        .build()
}

/// An error that retrying cannot fix: a missing permission, a key of the wrong type, a reply
/// dq cannot read. It needs an operator; transient ones (connection trouble, timeouts, a
/// server still loading, `maxmemory`) pass by themselves.
pub(crate) fn is_permanent(e: &dq_core::Error) -> bool {
    !e.is_retryable() && !matches!(e, dq_core::Error::OutOfMemory)
}

/// Pauses between the tries of one fetch call after an ambiguous error: short, since a
/// connection that was merely dropped is back at once, and a lost reply's jobs wait.
fn fetch_retry_backoff() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(20))
        .with_max_delay(Duration::from_millis(500))
        .without_max_times()
        .with_jitter()
        .build()
}

/// What one fetch call brings back to the loop, with the permits it took.
type FetchDone = (
    dq_core::Result<dq_core::FetchReply>,
    Vec<OwnedSemaphorePermit>,
    tokio::time::Instant,
);

impl Fetcher {
    pub async fn run(self) {
        if !self.check_topic().await {
            return;
        }
        let wake = Arc::new(Notify::new());
        let listener = tokio::spawn(listen(
            self.store.clone(),
            self.queue.clone(),
            wake.clone(),
            self.settings.idle_wait.max(LISTEN_BLOCK),
            self.stop.clone(),
        ));
        let mut backoff = error_backoff();
        let permits = self.topic.permits.clone();
        let max_batch = self.settings.max_batch.clamp(1, self.topic.concurrency);
        let second_min = second_fetch_min(max_batch);
        let mut in_flight: JoinSet<FetchDone> = JoinSet::new();
        // Set when the last fetch found nothing to do: wait this long (or for a wake-up).
        let mut idle: Option<(tokio::time::Instant, Duration)> = None;
        loop {
            if in_flight.is_empty() {
                if let Some((sent, wait)) = idle.take() {
                    // The delay was measured from Redis `TIME` while the call was in flight:
                    // counting it from when the call was sent fires no later than due (never
                    // early in effect: the script refuses jobs before their time and answers
                    // with the remaining delay).
                    tokio::select! {
                        () = tokio::time::sleep_until(sent + wait) => {}
                        () = wake.notified() => {}
                        () = self.stop.cancelled() => break,
                    }
                }
                // Nothing in flight: wait for a free slot.
                let first = tokio::select! {
                    p = permits.clone().acquire_owned() => match p {
                        Ok(p) => p,
                        Err(_) => break, // the pool is closed: shutting down
                    },
                    () = self.stop.cancelled() => break,
                };
                self.start_fetch(&mut in_flight, &permits, first, max_batch);
                continue;
            }
            // A fetch is in flight. While it is, slots freed by finished jobs start a second
            // one (once `second_min` are free), so the pool never sits idle for a whole round
            // trip.
            let can_start = in_flight.len() < MAX_FETCHES_IN_FLIGHT;
            tokio::select! {
                done = in_flight.join_next() => {
                    let Some(Ok((reply, held, sent))) = done else { continue };
                    self.record_health(&reply);
                    match reply {
                        Ok(reply) => {
                            backoff = error_backoff();
                            idle = self.dispatch(reply, held, sent);
                        }
                        Err(e) => {
                            drop(held);
                            let pause = backoff.next().unwrap_or(MAX_ERROR_PAUSE);
                            if is_permanent(&e) {
                                tracing::error!(
                                    topic = %self.queue.topic,
                                    partition = self.queue.partition,
                                    error = %e,
                                    retry_in = ?pause,
                                    "fetch failed with an error retrying cannot fix (permissions, \
                                     a key of the wrong type, scripts): no job of this partition \
                                     runs until it is fixed"
                                );
                            } else {
                                tracing::warn!(
                                    topic = %self.queue.topic,
                                    partition = self.queue.partition,
                                    error = %e,
                                    retry_in = ?pause,
                                    "fetch failed"
                                );
                            }
                            // A wake-up (a producer's token, or the listener reconnecting: the
                            // store is reachable again) ends the pause early.
                            tokio::select! {
                                () = tokio::time::sleep(pause) => {}
                                () = wake.notified() => {}
                                () = self.stop.cancelled() => break,
                            }
                        }
                    }
                }
                p = permits.clone().acquire_many_owned(second_min), if can_start && idle.is_none() => {
                    let Ok(first) = p else { break };
                    self.start_fetch(&mut in_flight, &permits, first, max_batch);
                }
                () = self.stop.cancelled() => break,
            }
        }
        // Fetches still in flight may have leased jobs: run them (shutdown drains or
        // releases them) rather than leave them to expire.
        while let Some(done) = in_flight.join_next().await {
            if let Ok((reply, held, sent)) = done {
                self.record_health(&reply);
                if let Ok(reply) = reply {
                    self.dispatch(reply, held, sent);
                }
            }
        }
        listener.abort();
    }

    /// Checks the topic's partition count before the first fetch: `true` once the store's
    /// record is the count this fetcher's topic was started with, `false` if it never will be
    /// (a mismatch: stays stopped until shutdown) or the worker is stopping. Other errors (the
    /// store unreachable; a permanent one, logged at ERROR, until an operator fixes it) are
    /// retried with the fetch error backoff.
    async fn check_topic(&self) -> bool {
        let mut backoff = error_backoff();
        loop {
            let result = tokio::select! {
                // One try per round: this loop retries, and shows each failure in the health.
                r = self.client.check_topic_once(self.queue.topic.as_str()) => r,
                () = self.stop.cancelled() => return false,
            };
            // Started before the record could be read (the store unreachable at start), with
            // a count that gives way to the record but is not it: these fetchers cover the
            // wrong partitions.
            let result = result.and_then(|meta| {
                if meta.partitions == self.topic.partitions {
                    Ok(())
                } else {
                    Err(dq_core::Error::TopicMismatch {
                        topic: meta.topic.to_string(),
                        stored: meta.partitions,
                        configured: self.topic.partitions,
                    })
                }
            });
            if let Err(e) = &result {
                let mut h = self
                    .health
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                h.last_call_at = Some(std::time::Instant::now());
                h.last_call_ok = false;
                h.last_error = Some(e.to_string());
                h.last_error_permanent = is_permanent(e);
                h.failures_in_a_row = h.failures_in_a_row.saturating_add(1);
            }
            match result {
                Ok(()) => return true,
                Err(e @ dq_core::Error::TopicMismatch { .. }) => {
                    if self.queue.partition == 0 {
                        tracing::error!(
                            topic = %self.queue.topic,
                            error = %e,
                            "this worker's partition count for the topic is not the one \
                             recorded in the store: no job of this topic runs on this worker \
                             until it is configured alike and restarted"
                        );
                    }
                    self.stop.cancelled().await;
                    return false;
                }
                Err(e) => {
                    let pause = backoff.next().unwrap_or(MAX_ERROR_PAUSE);
                    if is_permanent(&e) {
                        tracing::error!(
                            topic = %self.queue.topic,
                            partition = self.queue.partition,
                            error = %e,
                            retry_in = ?pause,
                            "topic check failed with an error retrying cannot fix (permissions, \
                             a key of the wrong type, scripts): no job of this partition runs \
                             until it is fixed"
                        );
                    } else {
                        tracing::warn!(
                            topic = %self.queue.topic,
                            partition = self.queue.partition,
                            error = %e,
                            retry_in = ?pause,
                            "topic check failed"
                        );
                    }
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        () = self.stop.cancelled() => return false,
                    }
                }
            }
        }
    }

    /// Notes how the last fetch call went, for the worker's health view.
    fn record_health(&self, reply: &dq_core::Result<dq_core::FetchReply>) {
        let mut h = self
            .health
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = std::time::Instant::now();
        h.last_call_at = Some(now);
        match reply {
            Ok(reply) => {
                h.last_call_ok = true;
                h.last_success_at = Some(now);
                h.failures_in_a_row = 0;
                if let Some(format) = reply.newer.iter().map(|n| n.format).max() {
                    let reads = self.store.formats().reads();
                    if h.note_newer(format, reads) {
                        tracing::warn!(
                            topic = %self.queue.topic,
                            partition = self.queue.partition,
                            format,
                            reads,
                            records = reply.newer.len(),
                            "jobs of a newer record format than this worker reads: left \
                             untouched for a newer worker; upgrade this worker"
                        );
                    }
                    for n in &reply.newer {
                        self.topic.metrics.newer_records(n.format, 1);
                    }
                }
            }
            Err(e) => {
                h.last_call_ok = false;
                h.last_error = Some(e.to_string());
                h.last_error_permanent = is_permanent(e);
                h.failures_in_a_row = h.failures_in_a_row.saturating_add(1);
            }
        }
    }

    /// Takes what other slots are free beside `first` (one or more permits) and starts one
    /// fetch for that many jobs.
    fn start_fetch(
        &self,
        in_flight: &mut JoinSet<FetchDone>,
        permits: &Arc<tokio::sync::Semaphore>,
        mut first: OwnedSemaphorePermit,
        max_batch: usize,
    ) {
        let mut held = Vec::with_capacity(max_batch);
        while first.num_permits() > 1 {
            match first.split(1) {
                Some(p) => held.push(p),
                None => break,
            }
        }
        held.push(first);
        while held.len() < max_batch {
            match permits.clone().try_acquire_owned() {
                Ok(p) => held.push(p),
                Err(_) => break,
            }
        }
        let request = FetchRequest {
            max_jobs: held.len(),
            lease: self.settings.lease,
            promote_batch: PROMOTE_BATCH,
            recover_batch: 100,
            retry_policy: self.topic.policy.clone(),
            dead_limits: self.topic.dead_limits,
            call: FetchCall::new(),
        };
        let store = self.store.clone();
        let queue = self.queue.clone();
        let stop = self.stop.clone();
        in_flight.spawn(async move {
            // A fetch whose reply is lost may have leased jobs to nobody. Retry the same call
            // at once (not after the loop's back-off): the store finds its receipt and hands
            // those jobs over again under fresh tokens, with no attempt spent. Only within
            // the call's retry window, well inside the receipt's life and the lease; after
            // it the leases run out as they would have. Shutdown does not wait for retries:
            // its quiet phase must not eat the drain time.
            let mut request = request;
            let first = tokio::time::Instant::now();
            let window = FetchCall::retry_window(request.lease);
            let mut pauses = fetch_retry_backoff();
            loop {
                let sent = tokio::time::Instant::now();
                let result = store.fetch(&queue, &request).await;
                let pause = match &result {
                    Err(e) if e.is_retryable() => pauses.next(),
                    _ => None,
                };
                match pause {
                    Some(pause) if first.elapsed() + pause < window && !stop.is_cancelled() => {
                        tokio::select! {
                            () = tokio::time::sleep(pause) => {}
                            () = stop.cancelled() => return (result, held, sent),
                        }
                        request.call = request.call.retried();
                    }
                    // `sent` is the start of the try that leased: the local lease deadline
                    // counts from there.
                    _ => return (result, held, sent),
                }
            }
        });
    }

    /// Hands fetched jobs to runners; returns the idle wait if this fetch found nothing.
    fn dispatch(
        &self,
        reply: dq_core::FetchReply,
        mut held: Vec<OwnedSemaphorePermit>,
        sent: tokio::time::Instant,
    ) -> Option<(tokio::time::Instant, Duration)> {
        let (asked, got) = (held.len(), reply.jobs.len());
        let busy = reply.next_in == Some(Duration::ZERO) || (got > 0 && got == asked);
        for job in reply.jobs {
            let Some(permit) = held.pop() else { break };
            self.runners.spawn(runner::run(
                job,
                sent,
                self.settings.lease,
                permit,
                self.topic.clone(),
                self.shared.clone(),
            ));
        }
        drop(held);
        for key in reply.buried {
            // Its last attempt's lease expired: the run failed, and the job is dead.
            self.topic.metrics.failed(crate::metrics::Failure::Dead);
            self.report_buried(key);
        }
        if busy || got > 0 {
            return None; // more work may be ready; permits decide the pace
        }
        let wait = reply
            .next_in
            .unwrap_or(self.settings.idle_wait)
            .min(self.settings.idle_wait);
        Some((sent, wait))
    }

    /// A job whose lease expired on its last attempt was buried by this fetch: report it, with
    /// its attempts and last error as the store has them.
    fn report_buried(&self, key: dq_core::JobKey) {
        let store = self.store.clone();
        let queue = self.queue.clone();
        self.dead.report_when(async move {
            let info = store.job(&queue, &key).await.ok().flatten();
            DeadJob {
                topic: queue.topic.to_string(),
                attempts: info.as_ref().map_or(0, |i| i.attempts),
                error: info
                    .and_then(|i| i.history.last().map(|h| h.error.clone()))
                    .unwrap_or_else(|| "lease expired".into()),
                key,
            }
        });
    }
}

/// Keeps one `BLPOP wake` in flight and turns each token into a `Notify` permit.
async fn listen(
    store: Arc<dyn Store>,
    queue: Queue,
    wake: Arc<Notify>,
    max_wait: Duration,
    stop: CancellationToken,
) {
    let mut backoff = error_backoff();
    let mut listener = None;
    let mut reconnecting = false;
    loop {
        if stop.is_cancelled() {
            return;
        }
        if listener.is_none() {
            match store.wake_listener(&queue).await {
                Ok(l) => {
                    if reconnecting {
                        // The store is reachable again: a fetcher pausing after errors need
                        // not wait out its back-off.
                        wake.notify_one();
                    }
                    reconnecting = false;
                    listener = Some(l);
                }
                Err(e) => {
                    reconnecting = true;
                    tracing::debug!(error = %e, "wake listener unavailable");
                    tokio::time::sleep(backoff.next().unwrap_or(Duration::from_secs(2))).await;
                    continue;
                }
            }
        }
        let Some(l) = listener.as_mut() else { continue };
        match l.wait(max_wait).await {
            Ok(true) => {
                backoff = error_backoff();
                wake.notify_one();
            }
            Ok(false) => backoff = error_backoff(),
            Err(e) => {
                tracing::debug!(error = %e, "wake listener failed; reconnecting");
                listener = None;
                reconnecting = true;
                // Wake the fetcher too: it may have missed a token while we were down.
                wake.notify_one();
                tokio::time::sleep(backoff.next().unwrap_or(Duration::from_secs(2))).await;
            }
        }
    }
}
