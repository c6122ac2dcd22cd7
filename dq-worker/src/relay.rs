//! The batch relay (ARCHITECTURE.md §16): carries the ends of batch members from the outboxes
//! of this worker's partitions to their batches, and settles the batches they complete
//! (`dq_core::client::relay_outbox`); every few seconds it also sweeps the namespace's
//! batches not done (`sweep_batches`: a producer that died between its close and the
//! callback, members reserved whose job never came).
//!
//! Every worker relays the partitions it fetches, so a partition served by several workers
//! is relayed by each of them: every step is idempotent (a member counted once, the callback
//! enqueued once under its key), so they only repeat each other's reads. While a batch is open
//! (the index is not empty) a pass runs every [`RELAY_EVERY`]; once none is, the relay sleeps
//! until this worker leases a member of a batch, or [`IDLE_POLL`] (a pass then catches the
//! ends no lease of this worker announced: a cancel, an expiry): an idle worker sends nothing
//! for batches more often than that.

use std::time::Duration;

use dq_core::{Client, Queue};
use tokio_util::sync::CancellationToken;

/// How often each partition's outbox is read.
pub(crate) const RELAY_EVERY: Duration = Duration::from_millis(100);

/// How often the batches not done are swept.
pub(crate) const SWEEP_EVERY: Duration = Duration::from_secs(2);

/// How long an idle relay (no batch open at its last look) waits before it looks again,
/// unless a member of a batch is leased by this worker first: an idle worker sends nothing
/// more often than this for batches.
pub(crate) const IDLE_POLL: Duration = Duration::from_secs(60);

/// Most batches one sweep looks at (a sweep walks the index a page at a time, from where the
/// last one stopped).
const SWEEP_BATCHES: usize = 1_000;

pub(crate) struct Relay {
    pub client: Client,
    pub queues: Vec<Queue>,
    pub stop: CancellationToken,
    /// Notified when this worker leases a member of a batch.
    pub wake: std::sync::Arc<tokio::sync::Notify>,
}

impl Relay {
    pub async fn run(self) {
        let mut last_sweep = tokio::time::Instant::now();
        let mut failing = false;
        // while a batch is open: a pass every RELAY_EVERY; else one when woken or IDLE_POLL
        let mut busy = true;
        // where the next sweep starts
        let mut sweep_from = None;
        loop {
            let pause = if busy { RELAY_EVERY } else { IDLE_POLL };
            tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
                _ = self.wake.notified() => {}
            }
            let mut error = None;
            busy = match self.client.store().open_batch_count().await {
                Ok(n) => n > 0,
                Err(e) => {
                    error = Some(e);
                    true
                }
            };
            for queue in &self.queues {
                // (a busy outbox is read again at once until drained: up to 64 passes of
                // RELAY_NOTES, ~32,000 notes, per partition and tick; each tick starts at the
                // first note, so notes kept for a failing batch are tried once a tick, and a
                // pass goes on past them)
                match dq_core::client::relay_through(&self.client, queue, 64).await {
                    Ok(failed) => {
                        if let Some((_, e)) = failed.into_iter().next() {
                            error = Some(e);
                        }
                    }
                    Err(e) => error = Some(e),
                }
            }
            if last_sweep.elapsed() >= SWEEP_EVERY {
                last_sweep = tokio::time::Instant::now();
                match dq_core::client::sweep_batches(
                    &self.client,
                    sweep_from.as_ref(),
                    SWEEP_BATCHES,
                    dq_core::batch::RESERVATION_TIMEOUT,
                )
                .await
                {
                    Ok(pass) => {
                        sweep_from = pass.next;
                        if let Some((_, e)) = pass.failed.into_iter().next() {
                            error = Some(e);
                        }
                    }
                    Err(e) => error = Some(e),
                }
            }
            match error {
                Some(e) if !failing => {
                    tracing::warn!(error = %e, "batch relay failed; trying again");
                    failing = true;
                }
                Some(_) => {}
                None => failing = false,
            }
        }
    }
}
