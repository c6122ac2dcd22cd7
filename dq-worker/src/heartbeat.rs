//! The heartbeat is responsible for this worker's entry in the store's list of live workers
//! (`Client::workers`): every beat it writes the worker's description — id, host, pid,
//! topics, concurrency, start time, jobs running, dq version — to last three beats, so a
//! worker that stops beating (crashed, frozen, cut off) drops out of the list by itself. A
//! clean shutdown removes the entry at once.
//!
//! The cadence is set by how soon an operator must see a dead worker go: nothing else waits
//! on it (a dead worker's jobs come back when their leases run out, not through its
//! heartbeat). Every [`DEFAULT_EVERY`] (10 s), lasting three beats: a dead worker leaves the
//! list (`dq workers`, the dashboard) within 30 s.
//!
//! Each beat is one small store call, bounded by the beat period; its outcome is the worker's
//! "reaches the store" in `WorkerHandle::health`. A failed beat is logged at WARN (once until
//! the next success) and tried again at the next beat: the worker runs on regardless. Its
//! reply also carries the store's schedules generation: when it moves (another process
//! stored or removed a schedule), the beat wakes this worker's scheduler, which otherwise
//! sleeps until its next tick — so a schedule change made elsewhere is seen within one beat,
//! at no extra command.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use dq_core::{Client, Store, WorkerInfo};
use tokio_util::sync::CancellationToken;

use crate::in_flight::InFlight;

/// How many beats a heartbeat lasts: one lost beat does not make a live worker look dead.
pub(crate) const BEATS_PER_TTL: u32 = 3;

/// How often a worker beats unless told otherwise (`WorkerBuilder::heartbeat`): a dead worker
/// leaves the live workers list within three beats, 30 s.
pub(crate) const DEFAULT_EVERY: Duration = Duration::from_secs(10);

/// How the heartbeat's store calls have gone, for `WorkerHandle::health`.
#[derive(Clone, Debug, Default)]
pub(crate) struct BeatHealth {
    /// When the last beat was written.
    pub last_ok_at: Option<Instant>,
    /// When the last beat completed, written or not.
    pub last_call_at: Option<Instant>,
    /// Whether the last beat was written.
    pub last_ok: bool,
    /// The last beat's error, if it failed.
    pub last_error: Option<String>,
}

pub(crate) struct Heartbeat {
    pub store: Arc<dyn Store>,
    pub info: WorkerInfo,
    pub in_flight: InFlight,
    pub every: Duration,
    pub stop: CancellationToken,
    pub health: Arc<Mutex<BeatHealth>>,
    /// Whose schedulers to wake when the schedules generation moves.
    pub client: Client,
}

impl Heartbeat {
    /// Beats until `stop`, then removes the worker's entry.
    pub async fn run(mut self) {
        let ttl = self.every * BEATS_PER_TTL;
        // None before the first beat: the first one wakes the scheduler too, so a change made
        // between the scheduler's first pass and this beat is not missed.
        let mut generation: Option<u64> = None;
        let mut ticks = tokio::time::interval(self.every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                () = self.stop.cancelled() => break,
            }
            self.info.running = self.in_flight.len();
            let result = tokio::time::timeout(self.every, self.store.beat_worker(&self.info, ttl))
                .await
                .unwrap_or(Err(dq_core::Error::Timeout(self.every)));
            let mut h = self.health.lock().unwrap_or_else(PoisonError::into_inner);
            let now = Instant::now();
            h.last_call_at = Some(now);
            match result {
                Ok(seen) => {
                    if generation != Some(seen) {
                        generation = Some(seen);
                        self.client.schedules_changed_elsewhere();
                    }
                    h.last_ok = true;
                    h.last_ok_at = Some(now);
                    h.last_error = None;
                }
                Err(e) => {
                    if h.last_ok || h.last_error.is_none() {
                        tracing::warn!(error = %e, "heartbeat failed: this worker may drop out of the live workers list");
                    }
                    h.last_ok = false;
                    h.last_error = Some(e.to_string());
                }
            }
        }
        // Bounded: shutdown must not wait long for a store that does not answer (the entry
        // then expires by itself).
        match tokio::time::timeout(self.every, self.store.remove_worker(&self.info.id)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::debug!(error = %e, "could not remove the heartbeat; it expires"),
            Err(_) => tracing::debug!("removing the heartbeat timed out; it expires"),
        }
    }
}
