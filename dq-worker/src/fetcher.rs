//! A fetcher is responsible for one topic partition:
//!
//! 1. take pool permits *before* fetching — at least one, then whatever else is free — so it
//!    never leases a job that cannot start now;
//! 2. call `fetch` once for that many jobs (the script also promotes due jobs and recovers
//!    expired leases) and hand each job with its permit to a runner;
//! 3. with nothing to do, wait for whichever comes first: a local timer for the delay `fetch`
//!    reported (computed from Redis `TIME`), or a wake-up token (a producer queued work due
//!    now, or a new earliest job) — never a polling interval. The wait is capped so that a
//!    lost wake-up costs at most the cap;
//! 4. on store errors, back off (capped) and try again; the worker never exits over them.
//!
//! Wake-up tokens are received by a listener task with one `BLPOP` always in flight, so a
//! token is never dropped by a cancelled wait; it is turned into a local `Notify`.

use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use dq_core::{FetchRequest, Queue, Store};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::registry::TopicRuntime;
use crate::runner::{self, RunnerShared};
use crate::worker::{DeadJob, OnDead};

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
    pub queue: Queue,
    pub topic: Arc<TopicRuntime>,
    pub shared: Arc<RunnerShared>,
    pub settings: FetchSettings,
    pub stop: CancellationToken,
    pub runners: TaskTracker,
    pub on_dead: Option<OnDead>,
}

/// How long a fetch for a busy pool may wait for more free slots (see `min_batch`).
const LINGER: Duration = Duration::from_millis(1);

/// Due jobs one fetch moves to `ready` beyond those it leases: enough to keep other fetchers
/// busy, small enough that a mass expiry never makes one script call long.
const PROMOTE_BATCH: usize = 200;

fn error_backoff() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(Duration::from_secs(2))
        .without_max_times()
        .with_jitter()
        .build()
}

impl Fetcher {
    pub async fn run(self) {
        let wake = Arc::new(Notify::new());
        let listener = tokio::spawn(listen(
            self.store.clone(),
            self.queue.clone(),
            wake.clone(),
            self.settings.idle_wait,
            self.stop.clone(),
        ));
        let mut backoff = error_backoff();
        let permits = self.topic.permits.clone();
        let max_batch = self.settings.max_batch.clamp(1, self.topic.concurrency);
        // Below this many free slots, a fetch for a busy pool waits up to LINGER for more.
        let min_batch = (max_batch / 4).max(1);
        // Whether the last fetch left work behind (so more is surely waiting).
        let mut busy = false;
        loop {
            let first = tokio::select! {
                p = permits.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => break, // the pool is closed: shutting down
                },
                () = self.stop.cancelled() => break,
            };
            let mut held = vec![first];
            while held.len() < max_batch {
                match permits.clone().try_acquire_owned() {
                    Ok(p) => held.push(p),
                    Err(_) => break,
                }
            }
            if busy && held.len() < min_batch {
                // The pool is busy and more work is waiting: rather than a round trip for one
                // or two jobs, give running jobs a moment to free more slots.
                let linger = tokio::time::sleep(LINGER);
                tokio::pin!(linger);
                while held.len() < min_batch {
                    tokio::select! {
                        p = permits.clone().acquire_owned() => match p {
                            Ok(p) => held.push(p),
                            Err(_) => break,
                        },
                        () = &mut linger => break,
                    }
                }
            }
            let request = FetchRequest {
                max_jobs: held.len(),
                lease: self.settings.lease,
                promote_batch: PROMOTE_BATCH,
                recover_batch: 100,
                lease_expiry_retries: self.topic.lease_expiry_retries.clone(),
                dead_limits: self.topic.dead_limits,
            };
            let sent = tokio::time::Instant::now();
            let reply = match self.store.fetch(&self.queue, &request).await {
                Ok(reply) => {
                    backoff = error_backoff();
                    reply
                }
                Err(e) => {
                    drop(held);
                    let pause = backoff.next().unwrap_or(Duration::from_secs(2));
                    tracing::warn!(
                        topic = %self.queue.topic,
                        partition = self.queue.partition,
                        error = %e,
                        retry_in = ?pause,
                        "fetch failed"
                    );
                    tokio::select! {
                        () = tokio::time::sleep(pause) => continue,
                        () = self.stop.cancelled() => break,
                    }
                }
            };
            let (asked, got) = (held.len(), reply.jobs.len());
            busy = reply.next_in == Some(Duration::ZERO) || (got > 0 && got == asked);
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
                self.report_buried(key);
            }
            if busy {
                continue; // more work is ready; permits decide the pace
            }
            let wait = reply
                .next_in
                .unwrap_or(self.settings.idle_wait)
                .min(self.settings.idle_wait);
            // The delay was measured from Redis `TIME` while the call was in flight: counting it
            // from when the call was sent fires no later than due (never early in effect: the
            // script refuses jobs before their time and answers with the remaining delay).
            tokio::select! {
                () = tokio::time::sleep_until(sent + wait) => {}
                () = wake.notified() => {}
                () = self.stop.cancelled() => break,
            }
        }
        listener.abort();
    }

    /// A job whose lease expired on its last attempt was buried by this fetch: tell `on_dead`.
    fn report_buried(&self, key: dq_core::JobKey) {
        tracing::error!(
            topic = %self.queue.topic,
            key = %key,
            "lease expired on the last attempt; moved to the dead queue"
        );
        let Some(hook) = self.on_dead.clone() else {
            return;
        };
        let store = self.store.clone();
        let queue = self.queue.clone();
        tokio::spawn(async move {
            let info = store.job(&queue, &key).await.ok().flatten();
            let dead = DeadJob {
                topic: queue.topic.to_string(),
                attempts: info.as_ref().map_or(0, |i| i.attempts),
                error: info
                    .and_then(|i| i.history.last().map(|h| h.error.clone()))
                    .unwrap_or_else(|| "lease expired".into()),
                key,
            };
            hook(dead).await;
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
    loop {
        if stop.is_cancelled() {
            return;
        }
        if listener.is_none() {
            match store.wake_listener(&queue).await {
                Ok(l) => listener = Some(l),
                Err(e) => {
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
                // Wake the fetcher too: it may have missed a token while we were down.
                wake.notify_one();
                tokio::time::sleep(backoff.next().unwrap_or(Duration::from_secs(2))).await;
            }
        }
    }
}
