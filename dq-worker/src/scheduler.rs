//! The scheduler is responsible for this worker's share of the periodic schedules
//! (`Client::schedule`): those of the topics it runs. In a loop it runs one pass
//! (`Client::run_schedules`: each tick due within the look-ahead is enqueued by key and the
//! schedule's cursor moved by compare-and-set, so any number of workers can run it at once
//! and each tick's job is stored once), then sleeps until the earliest next tick less the
//! look-ahead — or until a schedule changes on this worker's client, or at most `poll`, to
//! find schedules other processes stored.
//!
//! A failed pass is logged at WARN (once until a pass succeeds) and tried again after a short
//! back-off: the worker runs on regardless.

use std::collections::HashSet;
use std::time::Duration;

use dq_core::Client;
use tokio_util::sync::CancellationToken;

/// Wait after a failed pass.
const RETRY_AFTER: Duration = Duration::from_millis(500);

pub(crate) struct Scheduler {
    pub client: Client,
    pub topics: HashSet<String>,
    pub poll: Duration,
    pub stop: CancellationToken,
}

impl Scheduler {
    /// Runs passes until `stop`.
    pub async fn run(self) {
        let mut changed = self.client.schedules_changed();
        let mut failing = false;
        loop {
            changed.borrow_and_update();
            let wait = match self
                .client
                .run_schedules(|topic| self.topics.contains(topic))
                .await
            {
                Ok(pass) => {
                    if failing {
                        tracing::info!("scheduler reaches the store again");
                    }
                    failing = false;
                    for (name, tick) in &pass.created {
                        tracing::debug!(schedule = %name, tick_ms = tick, "periodic job enqueued");
                    }
                    pass.wait.map_or(self.poll, |w| w.min(self.poll))
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(error = %e, "scheduler pass failed; periodic jobs wait until it succeeds");
                    }
                    failing = true;
                    RETRY_AFTER
                }
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = changed.changed() => {}
                () = self.stop.cancelled() => break,
            }
        }
    }
}
