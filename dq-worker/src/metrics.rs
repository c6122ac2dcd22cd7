//! The worker's metrics (names and meanings in `dq_core::metrics`): per topic, the runs
//! started, succeeded and failed (by outcome), lateness and run time, and the handlers
//! running. Each topic's handles are registered with the installed recorder on its first
//! job and kept, so a run costs a few atomic operations and no allocation.

use std::sync::OnceLock;
use std::time::Duration;

use dq_core::metrics::{
    FAILED_OUTCOMES, JOB_LATENESS, JOB_RUN, JOBS_FAILED, JOBS_RUNNING, JOBS_STARTED,
    JOBS_SUCCEEDED, NEWER_RECORDS,
};
use metrics::{Counter, Gauge, Histogram};

/// Why a handler run failed, for the `outcome` label of `dq_jobs_failed_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    Retry = 0,
    Dead = 1,
    Deferred = 2,
    Timeout = 3,
    Panic = 4,
    Cancelled = 5,
    Throttled = 6,
    Discarded = 7,
}

/// One topic's metric handles, registered on first use.
#[derive(Debug)]
pub(crate) struct TopicMetrics {
    topic: String,
    handles: OnceLock<Handles>,
}

#[derive(Debug)]
struct Handles {
    started: Counter,
    succeeded: Counter,
    failed: [Counter; 8],
    lateness: Histogram,
    run: Histogram,
    running: Gauge,
}

impl TopicMetrics {
    pub fn new(topic: &str) -> Self {
        TopicMetrics {
            topic: topic.to_owned(),
            handles: OnceLock::new(),
        }
    }

    fn handles(&self) -> &Handles {
        self.handles.get_or_init(|| {
            let t = self.topic.clone();
            Handles {
                started: metrics::counter!(JOBS_STARTED, "topic" => t.clone()),
                succeeded: metrics::counter!(JOBS_SUCCEEDED, "topic" => t.clone()),
                failed: FAILED_OUTCOMES.map(
                    |outcome| metrics::counter!(JOBS_FAILED, "topic" => t.clone(), "outcome" => outcome),
                ),
                lateness: metrics::histogram!(JOB_LATENESS, "topic" => t.clone()),
                run: metrics::histogram!(JOB_RUN, "topic" => t.clone()),
                running: metrics::gauge!(JOBS_RUNNING, "topic" => t),
            }
        })
    }

    /// A handler starts, `late` after its due time: counted, and running until the guard
    /// drops, which records the run's time.
    pub fn started(&self, late: Duration) -> RunningGuard<'_> {
        let h = self.handles();
        h.started.increment(1);
        h.lateness.record(late.as_secs_f64());
        h.running.increment(1.0);
        RunningGuard {
            handles: h,
            since: std::time::Instant::now(),
        }
    }

    /// A run succeeded.
    pub fn succeeded(&self) {
        self.handles().succeeded.increment(1);
    }

    /// A run failed.
    pub fn failed(&self, why: Failure) {
        self.handles().failed[why as usize].increment(1);
    }

    /// A fetch met `n` records of record format `format`, newer than this worker reads (rare:
    /// a newer dq's jobs; the handle is looked up on each call).
    pub fn newer_records(&self, format: u8, n: u64) {
        metrics::counter!(NEWER_RECORDS, "topic" => self.topic.clone(), "format" => format.to_string())
            .increment(n);
    }
}

/// Keeps `dq_jobs_running` counted while a handler runs, and records its run time when it
/// ends, whatever way it ends (a result, a timeout, a lost lease, the hard stop).
pub(crate) struct RunningGuard<'a> {
    handles: &'a Handles,
    since: std::time::Instant,
}

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        self.handles.run.record(self.since.elapsed().as_secs_f64());
        self.handles.running.decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_labels_match_the_names() {
        for (f, name) in [
            (Failure::Retry, "retry"),
            (Failure::Dead, "dead"),
            (Failure::Deferred, "deferred"),
            (Failure::Timeout, "timeout"),
            (Failure::Panic, "panic"),
            (Failure::Cancelled, "cancelled"),
            (Failure::Throttled, "throttled"),
            (Failure::Discarded, "discarded"),
        ] {
            assert_eq!(FAILED_OUTCOMES[f as usize], name);
        }
    }
}
