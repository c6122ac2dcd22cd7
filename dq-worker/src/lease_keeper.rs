//! The lease keeper is responsible for keeping running jobs owned by this worker:
//!
//! 1. every third of the lease, it extends the leases of all in-flight jobs, one `extend`
//!    call per partition and batch;
//! 2. a lease whose running job a client cancelled (`extend` says so) cancels that handler
//!    too, but keeps the lease: the runner ends the job as cancelled, never retried;
//! 3. a lease the store no longer grants (it expired during a pause or partition, and the job
//!    was recovered and maybe delivered elsewhere) cancels that handler through its
//!    `JobContext`; its result is discarded, and its token would be rejected anyway;
//!    (the runner and the handler's `JobContext` also stop at the lease's local deadline
//!    without waiting for this tick: after a pause, every timer is overdue at once);
//! 4. a call that fails with connection trouble is tried again at once (20 ms doubling to
//!    200 ms) until the earliest lease of its batch would run out — after a dropped connection
//!    the next call already goes to a new one, and extending is harmless to repeat; after
//!    that, store errors are logged and retried on the next tick. Once a lease has surely run
//!    out by this process's clock (no extension got through in time), the handler is cancelled
//!    as if the lease were lost: a worker cut off from the store must not keep running a job
//!    others now own.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use dq_core::{Extended, Queue, Store};
use tokio_util::sync::CancellationToken;

use crate::in_flight::{InFlight, Lease};

const BATCH: usize = 500;

/// Pauses between the tries of one extension after connection trouble: short, since a dropped
/// connection is replaced at once.
fn retry_pauses() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(20))
        .with_max_delay(Duration::from_millis(200))
        .without_max_times()
        .with_jitter()
        .build()
}

pub(crate) struct LeaseKeeper {
    pub store: Arc<dyn Store>,
    pub in_flight: InFlight,
    pub lease: Duration,
    pub stop: CancellationToken,
}

impl LeaseKeeper {
    pub async fn run(self) {
        let period = (self.lease / 3).max(Duration::from_millis(20));
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await; // the first tick is immediate; new leases are fresh
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                () = self.stop.cancelled() => return,
            }
            self.extend_all().await;
        }
    }

    async fn extend_all(&self) {
        let mut by_queue: HashMap<Queue, Vec<Lease>> = HashMap::new();
        for lease in self.in_flight.snapshot() {
            // A lease that surely ran out is not asked for again (after a pause, an extension
            // could still be granted if no one has recovered the job yet, but its handler has
            // already been told to stop).
            if lease.has_expired() {
                self.lost(&lease);
                continue;
            }
            by_queue.entry(lease.queue.clone()).or_default().push(lease);
        }
        for (queue, leases) in by_queue {
            for chunk in leases.chunks(BATCH) {
                let pairs: Vec<_> = chunk.iter().map(|l| (l.key.clone(), l.token)).collect();
                let (sent, result) = self.extend_batch(&queue, chunk, &pairs).await;
                match result {
                    Ok(held) => {
                        for (lease, held) in chunk.iter().zip(held) {
                            match held {
                                Extended::Held => lease.extended(sent, self.lease),
                                Extended::CancelRequested => {
                                    lease.extended(sent, self.lease);
                                    if !lease.is_cancel_requested() {
                                        tracing::info!(
                                            topic = %lease.queue.topic,
                                            key = %lease.key,
                                            "cancel requested: stopping the handler"
                                        );
                                    }
                                    lease.request_cancel();
                                }
                                Extended::Lost => self.lost(lease),
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(
                            topic = %queue.topic,
                            error = %e,
                            "could not extend leases; retrying on the next tick"
                        );
                        let now = tokio::time::Instant::now();
                        for lease in chunk.iter().filter(|l| l.expires() <= now) {
                            self.lost(lease);
                        }
                    }
                }
            }
        }
    }

    /// One `extend` call for a batch, tried again after connection trouble while the
    /// earliest lease of the batch holds. Returns when the try that answered was sent.
    async fn extend_batch(
        &self,
        queue: &Queue,
        chunk: &[Lease],
        pairs: &[(dq_core::JobKey, u64)],
    ) -> (tokio::time::Instant, dq_core::Result<Vec<Extended>>) {
        // Never wait past the earliest lease of the batch: a hung connection must not keep a
        // handler running after its job may have gone to another worker.
        let earliest = chunk
            .iter()
            .map(Lease::expires)
            .min()
            .unwrap_or_else(tokio::time::Instant::now);
        let mut pauses = retry_pauses();
        loop {
            let sent = tokio::time::Instant::now();
            let call = self.store.extend(queue, pairs, self.lease);
            let result = match tokio::time::timeout_at(earliest.max(sent), call).await {
                Ok(result) => result,
                Err(_) => Err(dq_core::Error::Timeout(
                    earliest.saturating_duration_since(sent),
                )),
            };
            let retry = match &result {
                Err(e) if e.is_retryable() && !self.stop.is_cancelled() => pauses.next(),
                _ => None,
            };
            match retry {
                Some(pause) if tokio::time::Instant::now() + pause < earliest => {
                    tokio::time::sleep(pause).await;
                }
                _ => return (sent, result),
            }
        }
    }

    fn lost(&self, lease: &Lease) {
        // An entry whose handler finished may simply have been acked a moment ago; one the
        // runner already let go of was reported there.
        let running = self.in_flight.remove(&lease.queue, lease.token).is_some();
        if running && !lease.is_finished() {
            tracing::warn!(
                topic = %lease.queue.topic,
                key = %lease.key,
                token = lease.token,
                "lease lost: cancelling the handler; another delivery owns the job"
            );
        }
        lease.revoke();
    }
}
