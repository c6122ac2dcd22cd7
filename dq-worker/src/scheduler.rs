//! The scheduler is responsible for this worker's share of the periodic schedules
//! (`Client::schedule`): those of the topics it runs. In a loop it runs one pass
//! (`Client::run_schedules`: each tick due within the look-ahead is enqueued by key and the
//! schedule's cursor moved by compare-and-set, so any number of workers can run it at once
//! and each tick's job is stored once), then sleeps — sending nothing — until the earliest
//! next tick less the look-ahead, or until the schedules change:
//!
//! - at once for a change made through this worker's own client;
//! - within one heartbeat (10 s by default) for a change made by another process: every
//!   `schedule`/`unschedule` bumps the store's schedules generation, which each heartbeat's
//!   reply carries (`heartbeat.rs`), so learning of it costs no command of its own. A new
//!   schedule's first tick is at least `SCHEDULE_LOOKAHEAD` (5 s) away, so with the default
//!   heartbeat a schedule stored elsewhere can see its first tick enqueued up to 5 s late
//!   (well within `MISSED_GRACE`: it still runs, late, not as a missed tick);
//! - at the latest after `poll` ([`DEFAULT_POLL`], 10 min): a safety pass for a process that
//!   stored a schedule and died before announcing it.
//!
//! A failed pass is logged at WARN (once until a pass succeeds) and tried again after a short
//! back-off: the worker runs on regardless.

use std::collections::HashSet;
use std::time::Duration;

use dq_core::{Client, ScheduleDecl};
use tokio_util::sync::CancellationToken;

/// Wait after a failed pass.
const RETRY_AFTER: Duration = Duration::from_millis(500);

/// The longest a scheduler sleeps without a pass unless told otherwise
/// (`WorkerBuilder::schedule_poll`): only a lost announcement waits this long.
pub(crate) const DEFAULT_POLL: Duration = Duration::from_secs(600);

pub(crate) struct Scheduler {
    pub client: Client,
    pub topics: HashSet<String>,
    pub poll: Duration,
    pub stop: CancellationToken,
    /// Schedules declared on handlers (`#[delayed_job(cron = …)]`), by topic: stored (named
    /// after the topic) before the first pass that reaches the store.
    pub declared: Vec<(String, ScheduleDecl)>,
}

impl Scheduler {
    /// Stores the declared schedules not stored yet; `Err` for a store error (tried again
    /// next pass). A declaration that cannot be used is logged at ERROR and dropped.
    async fn declare(&mut self) -> dq_core::Result<()> {
        while let Some((topic, decl)) = self.declared.last() {
            let built = decl.schedule().and_then(|s| Ok((s, (decl.payload)()?)));
            let result = match built {
                Ok((schedule, payload)) => {
                    self.client
                        .schedule_raw(topic, topic, schedule, payload)
                        .await
                }
                Err(e) => Err(e),
            };
            match result {
                Ok(outcome) => {
                    tracing::info!(schedule = %topic, ?outcome, "periodic job declared");
                }
                Err(e) if e.is_retryable() => return Err(e),
                Err(e) => {
                    tracing::error!(schedule = %topic, error = %e, "the periodic job declared on this topic's handler cannot be stored");
                }
            }
            self.declared.pop();
        }
        Ok(())
    }

    /// Runs passes until `stop`.
    pub async fn run(mut self) {
        let mut changed = self.client.schedules_changed();
        let mut failing = false;
        loop {
            changed.borrow_and_update();
            let pass = match self.declare().await {
                Ok(()) => {
                    self.client
                        .run_schedules(|topic| self.topics.contains(topic))
                        .await
                }
                Err(e) => Err(e),
            };
            let wait = match pass {
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
