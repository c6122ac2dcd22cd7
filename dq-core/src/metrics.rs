//! dq's metrics, through the [`metrics`] crate's facade: dq records, the application picks
//! the exporter (Prometheus, StatsD, …) by installing a recorder; without one every record is
//! a no-op. This module names every metric dq emits and records the producer's and the Redis
//! store's. The optional queue-depth collector, which sets the gauges marked "collector", is
//! `dq_core::client::admin::spawn_stats_collector` (facade: `dq::metrics::spawn_stats_collector`),
//! beside the operator API it reads with. The worker's metrics are recorded by `dq-worker`'s own
//! `metrics` module, with these names.
//!
//! Labels are bounded: `topic` (the application's topic names), `op` (a store operation's
//! fixed name), `outcome` and `state` (fixed names). Never a job key.
//!
//! | metric | kind | labels | meaning |
//! |---|---|---|---|
//! | `dq_jobs_enqueued_total` | counter | topic | jobs stored by enqueue (created or replaced) |
//! | `dq_jobs_started_total` | counter | topic | handler runs started |
//! | `dq_jobs_succeeded_total` | counter | topic | handler runs that succeeded |
//! | `dq_jobs_failed_total` | counter | topic, outcome | failed runs: `dead` (buried), `timeout`, `panic` (retried), `deferred`, `retry`, `cancelled` (cancelled while running), `throttled` (`JobError::rate_limited`) |
//! | `dq_jobs_cancelled_total` | counter | topic | jobs cancelled by a client before they started |
//! | `dq_store_errors_total` | counter | op | failed store calls (Redis) |
//! | `dq_job_lateness_seconds` | histogram | topic | start minus due, by Redis time |
//! | `dq_job_run_seconds` | histogram | topic | how long handlers ran |
//! | `dq_store_call_seconds` | histogram | op | store call latency (Redis) |
//! | `dq_enqueue_batch_jobs` | histogram | topic | jobs per single-enqueue store call under group commit (1 when alone) |
//! | `dq_jobs_running` | gauge | topic | handlers running now, per worker process |
//! | `dq_queue_jobs` | gauge | topic, state | jobs per state (collector) |
//! | `dq_queue_oldest_overdue_seconds` | gauge | topic | how long the most overdue job has waited (collector) |
//! | `dq_workers_live` | gauge | — | workers whose heartbeat is live (collector; `Client::workers`) |
//! | `dq_batches_open` | gauge | — | batches not done: open, closed with members not ended, or complete with their callback not enqueued yet (collector; `Admin::open_batch_count`) |
//! | `dq_newer_records_total` | counter | topic, format | job records of a newer format than the worker reads, met and left untouched by its fetches (upgrade the worker) |
//!
//! Recorders are looked up when a metric is first recorded: install yours before the first
//! job runs (a worker's per-topic handles are registered on its topic's first job).

use std::time::Duration;

/// Counter: jobs stored by enqueue, created or replaced (`topic`).
pub const JOBS_ENQUEUED: &str = "dq_jobs_enqueued_total";
/// Counter: handler runs started (`topic`).
pub const JOBS_STARTED: &str = "dq_jobs_started_total";
/// Counter: handler runs that succeeded (`topic`).
pub const JOBS_SUCCEEDED: &str = "dq_jobs_succeeded_total";
/// Counter: failed handler runs (`topic`, `outcome`, one of [`FAILED_OUTCOMES`]).
pub const JOBS_FAILED: &str = "dq_jobs_failed_total";
/// Counter: jobs cancelled by a client before they started (`topic`).
pub const JOBS_CANCELLED: &str = "dq_jobs_cancelled_total";
/// Counter: failed store calls (`op`).
pub const STORE_ERRORS: &str = "dq_store_errors_total";
/// Histogram: seconds from a job's due time to its start, by the store's clock (`topic`).
pub const JOB_LATENESS: &str = "dq_job_lateness_seconds";
/// Histogram: seconds a handler ran (`topic`).
pub const JOB_RUN: &str = "dq_job_run_seconds";
/// Histogram: seconds one store call took (`op`).
pub const STORE_CALL: &str = "dq_store_call_seconds";
/// Histogram: jobs in one store call of single enqueues under group commit: 1 for a caller
/// that sent alone, more for callers coalesced into one call (`topic`).
pub const ENQUEUE_BATCH: &str = "dq_enqueue_batch_jobs";
/// Gauge: handlers running now in this process (`topic`).
pub const JOBS_RUNNING: &str = "dq_jobs_running";
/// Gauge: jobs per state, from the stats collector (`topic`, `state`, one of
/// [`QUEUE_STATES`]).
pub const QUEUE_JOBS: &str = "dq_queue_jobs";
/// Gauge: seconds the most overdue job (due, not started) has waited, from the stats
/// collector (`topic`).
pub const QUEUE_OLDEST_OVERDUE: &str = "dq_queue_oldest_overdue_seconds";

/// Gauge: workers whose heartbeat is live, from the stats collector (no labels).
pub const WORKERS_LIVE: &str = "dq_workers_live";

/// Gauge: batches not done — open, closed with members that have not ended, or complete
/// with their callback not enqueued yet (flows' batches included) — from the stats collector
/// (no labels). One that stays up while no batch is being filled points at stuck members or
/// a relay that does not run (no worker serves the members' topics).
pub const BATCHES_OPEN: &str = "dq_batches_open";

/// Counter: job records of a newer format than the worker reads that its fetches met and left
/// untouched (`topic`, `format`: the record's format number, 2 to 31). Non-zero means a
/// newer dq wrote jobs this worker cannot run: upgrade it.
pub const NEWER_RECORDS: &str = "dq_newer_records_total";

/// The `outcome` label values of [`JOBS_FAILED`]. Each failed run counts once, by what
/// matters most to an operator: `dead` if the job was buried (whatever the cause), else
/// `timeout` or `panic` if the handler timed out or panicked (the job is retried), else
/// `deferred` (the handler asked for it) or `retry`; `cancelled` for a run stopped because a
/// client cancelled its job while it ran (it is not retried), `throttled` for a run whose
/// handler reported a partner's rate limit (`JobError::rate_limited`: the job runs again
/// later, its attempt given back, and the topic slows down); `discarded` for a job its
/// handler's retry function discarded (deleted, whatever the cause).
pub const FAILED_OUTCOMES: [&str; 8] = [
    "retry",
    "dead",
    "deferred",
    "timeout",
    "panic",
    "cancelled",
    "throttled",
    "discarded",
];

/// The `state` label values of [`QUEUE_JOBS`].
pub const QUEUE_STATES: [&str; 5] = ["scheduled", "ready", "active", "retry", "dead"];

/// Registers the description and unit of every dq metric with the installed recorder (an
/// exporter shows them, e.g. Prometheus's `# HELP`). Optional; call it after installing the
/// recorder.
pub fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        JOBS_ENQUEUED,
        "Jobs stored by enqueue (created or replaced)."
    );
    describe_counter!(JOBS_STARTED, "Handler runs started.");
    describe_counter!(JOBS_SUCCEEDED, "Handler runs that succeeded.");
    describe_counter!(
        JOBS_FAILED,
        "Failed handler runs by outcome: dead, timeout, panic, deferred, retry, cancelled, throttled."
    );
    describe_counter!(JOBS_CANCELLED, "Jobs cancelled before they started.");
    describe_counter!(STORE_ERRORS, "Failed store calls by operation.");
    describe_histogram!(
        JOB_LATENESS,
        Unit::Seconds,
        "Start minus due time of each run, by the store's clock."
    );
    describe_histogram!(JOB_RUN, Unit::Seconds, "How long handlers ran.");
    describe_histogram!(
        STORE_CALL,
        Unit::Seconds,
        "Store call latency by operation."
    );
    describe_histogram!(
        ENQUEUE_BATCH,
        "Jobs per store call of single enqueues under group commit."
    );
    describe_gauge!(JOBS_RUNNING, "Handlers running now in this process.");
    describe_counter!(
        NEWER_RECORDS,
        "Job records of a newer format than this worker reads, met and left untouched."
    );
    describe_gauge!(QUEUE_JOBS, "Jobs per state (stats collector).");
    describe_gauge!(
        WORKERS_LIVE,
        "Workers whose heartbeat is live (stats collector)."
    );
    describe_gauge!(
        BATCHES_OPEN,
        "Batches not done: open, closed with members not ended, or complete (stats collector)."
    );
    describe_gauge!(
        QUEUE_OLDEST_OVERDUE,
        Unit::Seconds,
        "How long the most overdue job has waited (stats collector)."
    );
}

/// Counts jobs stored by one enqueue call.
pub(crate) fn enqueued(topic: &str, jobs: u64) {
    if jobs > 0 {
        metrics::counter!(JOBS_ENQUEUED, "topic" => topic.to_owned()).increment(jobs);
    }
}

/// Records the size of one group commit call.
pub(crate) fn enqueue_batch(topic: &str, jobs: usize) {
    metrics::histogram!(ENQUEUE_BATCH, "topic" => topic.to_owned()).record(jobs as f64);
}

/// Counts a job cancelled by a client.
pub(crate) fn cancelled(topic: &str) {
    metrics::counter!(JOBS_CANCELLED, "topic" => topic.to_owned()).increment(1);
}

/// One store operation's metric handles (`op` = a fixed name), registered with the
/// recorder on the operation's first call and kept: a call then costs two atomic operations.
#[derive(Debug)]
pub(crate) struct StoreOpMetrics {
    op: &'static str,
    handles: std::sync::OnceLock<(metrics::Histogram, metrics::Counter)>,
}

impl StoreOpMetrics {
    /// Handles of operation `op`, registered on first use.
    pub(crate) const fn new(op: &'static str) -> Self {
        StoreOpMetrics {
            op,
            handles: std::sync::OnceLock::new(),
        }
    }

    /// Records one call: its latency, and an error if it failed.
    pub(crate) fn record(&self, elapsed: Duration, ok: bool) {
        let (seconds, errors) = self.handles.get_or_init(|| {
            (
                metrics::histogram!(STORE_CALL, "op" => self.op),
                metrics::counter!(STORE_ERRORS, "op" => self.op),
            )
        });
        seconds.record(elapsed.as_secs_f64());
        if !ok {
            errors.increment(1);
        }
    }
}
