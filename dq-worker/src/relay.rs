//! The batch relay (ARCHITECTURE.md §16): carries the ends of batch members from the outboxes
//! of this worker's partitions to their batches, and settles the batches they complete
//! (`dq_core::client::relay_outbox`); every few seconds it also sweeps the namespace's
//! batches not done (`sweep_batches`: a producer that died between its close and the
//! callback, members reserved whose job never came).
//!
//! Every worker relays the partitions it fetches, so a partition served by several workers
//! is relayed by each of them: every step is idempotent (a member counted once, the callback
//! enqueued once under its key), so they only repeat each other's reads. A namespace with no
//! batch open costs one `ZRANGE` of the index per pass: the outboxes are read only while a
//! batch is open (a note for a batch already done changes nothing), and every
//! [`DRAIN_EVERY`] anyway, so such notes do not pile up.

use std::time::Duration;

use dq_core::{Client, Queue};
use tokio_util::sync::CancellationToken;

/// How often each partition's outbox is read.
pub(crate) const RELAY_EVERY: Duration = Duration::from_millis(100);

/// How often the batches not done are swept.
pub(crate) const SWEEP_EVERY: Duration = Duration::from_secs(2);

/// How often the outboxes are read even while no batch is open.
pub(crate) const DRAIN_EVERY: Duration = Duration::from_secs(10);

/// Most batches one sweep looks at.
const SWEEP_BATCHES: usize = 1_000;

pub(crate) struct Relay {
    pub client: Client,
    pub queues: Vec<Queue>,
    pub stop: CancellationToken,
}

impl Relay {
    pub async fn run(self) {
        let mut ticks = tokio::time::interval(RELAY_EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_sweep = tokio::time::Instant::now();
        let mut last_drain = tokio::time::Instant::now();
        let mut failing = false;
        loop {
            tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = ticks.tick() => {}
            }
            let mut error = None;
            let open = match self.client.store().open_batches(None, 1).await {
                Ok(ids) => !ids.is_empty(),
                Err(e) => {
                    error = Some(e);
                    true
                }
            };
            if !open && last_drain.elapsed() < DRAIN_EVERY {
                continue;
            }
            last_drain = tokio::time::Instant::now();
            for queue in &self.queues {
                // (a busy outbox is read again at once until drained: up to 64 passes of
                // RELAY_NOTES, ~32,000 notes, per partition and tick)
                for _ in 0..64 {
                    match dq_core::client::relay_outbox(&self.client, queue).await {
                        Ok(n) if n >= dq_core::client::RELAY_NOTES => {}
                        Ok(_) => break,
                        Err(e) => {
                            error = Some(e);
                            break;
                        }
                    }
                }
            }
            if last_sweep.elapsed() >= SWEEP_EVERY {
                last_sweep = tokio::time::Instant::now();
                if let Err(e) = dq_core::client::sweep_batches(
                    &self.client,
                    SWEEP_BATCHES,
                    dq_core::batch::RESERVATION_TIMEOUT,
                )
                .await
                {
                    error = Some(e);
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
