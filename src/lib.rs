#![doc = include_str!("../README.md")]
//!
//! # The crate
//!
//! The root of `dq` is the application's API: [`delayed_job`] to declare handlers, [`Client`]
//! to enqueue and manage jobs, [`Worker`] to run them, [`testing::TestQueue`] to test them in
//! virtual time. What a store implements, and what tools read of the Redis layout, is under
//! [`store`]; the plumbing of hand-written job descriptors under [`handler`].

pub mod testing;

// Declaring handlers.
pub use dq_macros::delayed_job;

// Producing and managing jobs.
pub use dq_core::client::DEFAULT_BULK_CHUNK;
pub use dq_core::{
    Admin, Client, ClientBuilder, ClientConfig, ENQUEUE_RETRY_WINDOW, Enqueue, Enqueued, JobSpec,
    TlsConfig, TopicClient,
};
pub use dq_core::{
    BuryOutcome, CancelOutcome, DeadLimits, Due, EnqueueOutcome, Expiry, MAX_DUE_MS, NewDue,
    Priority, RescheduleOutcome, UpdateOutcome,
};
pub use dq_core::{DEFAULT_GROUP_BATCH, GroupCommit, MAX_GROUP_LINGER};
// Key windows (unique_for, debounce, throttle).
pub use dq_core::KeyWindow;
// Groups: fair turns and limits per group of a topic's jobs.
pub use dq_core::group::{CAP_RECHECK, GROUP_SCAN, MAX_GROUP_LEN, MAX_GROUP_WEIGHT};
pub use dq_core::{GroupLimits, GroupName, GroupState};

// Pause, rate and concurrency limits of a topic.
pub use dq_core::{Rate, TopicControl};
// The event stream.
pub use dq_core::events::{DEFAULT_EVENTS_KEPT, MAX_EVENTS_KEPT};
pub use dq_core::{
    DEFAULT_EVENTS_POLL, Event, EventCursor, EventId, EventKind, EventStream, EventsFrom,
    EventsOptions, EventsPolicy,
};
// Periodic jobs.
pub use dq_core::schedule::{
    MISSED_GRACE, Missed, SCHEDULE_LOOKAHEAD, Schedule, ScheduleInfo, ScheduleOutcome,
};

// Operating on the dead queue by filter.
pub use dq_core::{
    DeadAction, DeadFilter, DeadSweep, MAX_LIST_SCAN, MAX_SWEEP_CHUNK, SweepProgress,
};

// Inspecting jobs.
pub use dq_core::{
    AttemptOutcome, AttemptRecord, AttemptView, Cursor, JobInfo, JobPage, JobState, JobView,
    MAX_PAGE, Page, TopicMeta, TopicStats, WorkerInfo,
};

// Writing handlers.
pub use dq_core::{BoxError, ErrorKind, Jitter, Job, JobContext, JobError, RetryPolicy};
// Custom retry functions (`#[delayed_job(retry_fn = …)]`).
pub use dq_core::{FailureKind, RetryDecision, RetryError, RetryFn};

// Results and finished jobs a topic keeps; progress and log lines of a running job.
pub use dq_core::{
    BatchBuilder, BatchCounts, BatchHandle, BatchId, BatchInfo, BatchStatus, FLOW_WAIT_MS,
    FailurePolicy, FlowBuilder, FlowHandle, MemberId, MemberPage, MemberState,
};
pub use dq_core::{
    FinishedAs, FinishedJob, FinishedPage, JobOutput, Retention, StoredResult, WaitOutcome,
};
/// Batches and flows (issue 24): the types a store and a tool see, and the relay's steps.
pub mod batch {
    pub use dq_core::batch::*;
    pub use dq_core::client::{
        ADD_CHUNK, RELAY_NOTES, RelayPass, SweepPass, relay_outbox, relay_pass, relay_through,
        settle, sweep_batches,
    };
    // what the operator API reads of batches (`Admin::batches`, `Admin::batch_follow_up`)
    pub use dq_core::client::admin::{
        BatchFollowUp, BatchList, FollowUpJob, FollowUpKind, MAX_BATCH_PAGE, MAX_BATCHES_COUNTED,
    };
}
pub use dq_core::{JobProgress, LogLine, MAX_LOG_LINES, MAX_PROGRESS_LEN, Report};

// Names and errors.
pub use dq_core::{BulkStored, Error, JobKey, Result, Topic};

// Running the worker.
pub use dq_worker::{
    DeadJob, FetcherHealth, HealthProbe, MissingDataReport, NewerRecordsSeen, ShutdownReport,
    Worker, WorkerBuilder, WorkerError, WorkerHandle, WorkerHealth,
};

/// Middleware: tower layers around every handler run of a worker
/// ([`WorkerBuilder::layer`]), and hooks around every enqueue of a client
/// ([`ClientBuilder::enqueue_hook`]). README § Middleware; the docs of
/// [`dq_worker::middleware`] say how a run goes through the layers.
pub mod middleware {
    pub use dq_core::{EnqueueHook, EnqueueRequest, Returned, async_trait};
    pub use dq_worker::middleware::*;
}

/// dq's metrics (the `metrics` crate's facade): their names, [`metrics::describe`] and the
/// optional queue-depth collector [`metrics::spawn_stats_collector`].
pub mod metrics {
    pub use dq_core::client::admin::{collect_once, spawn_stats_collector};
    pub use dq_core::metrics::*;
}

/// Trace context carried with a job from producer to handler (written with the `otel`
/// feature; read by every decoder).
pub mod trace {
    pub use dq_core::trace::*;
}

/// Payload encoding: MessagePack (`rmp-serde`) with struct fields by name, read by name (and
/// positional payloads stored by earlier dq still read), with a size limit; what changes to a
/// payload type are safe is listed there. For producers and tools that use the untyped
/// [`TopicClient`] and handle payload bytes themselves.
pub mod payload {
    pub use dq_core::payload::*;
}

/// Payload shapes: the JSON shape of a handler's payload type, which every worker publishes
/// for its topics when it starts, so that the HTTP API (`dq serve`) refuses a JSON payload
/// the handler could not decode. See docs/HTTP.md.
pub mod shape {
    pub use dq_core::shape::*;
}

/// The store protocol: the [`Store`](store::Store) every store implements (Redis, the embedded
/// one, or your own) — the sum of four roles, [`Produce`](store::Produce),
/// [`Lease`](store::Lease), [`Operate`](store::Operate) and [`Catalog`](store::Catalog), whose
/// methods [`prelude`](store::prelude) brings into scope — the types its calls take and
/// return, and the Redis store's layout for tools and tests. Applications need none of it to enqueue or run jobs.
pub mod store {
    pub use dq_core::client::SchedulerPass;
    pub use dq_core::format::{
        BATCH_FORMAT, EXPIRING_FORMAT, FormatLevel, FormatRegistry, Formats, GROUP_FORMAT,
        LEGACY_FORMAT, NEWEST_FORMAT, PRIORITY_FORMAT, ProcessInfo, ProcessRole,
    };
    pub use dq_core::group::GroupChange;
    pub use dq_core::job::{from_unix_ms, unix_ms};
    pub use dq_core::schedule::{NO_MORE_TICKS, ScheduleRecord, TickPlan, tick_key};
    pub use dq_core::store::{
        Batches, Catalog, FailedAttempt, Lease, Operate, Produce, Store, Success, WakeListener,
        lease_of, prelude,
    };
    pub use dq_core::{
        AckOutcome, ControlChange, ControlState, Delivery, ENQUEUE_RECEIPT_LIFE, EnqueueCall,
        Extended, FETCH_RECEIPT_LIFE, FailAction, FailOutcome, FetchCall, FetchReply, FetchRequest,
        FinishedChunk, ListChunk, ListFrom, ListPos, NewJob, Queue,
    };
    pub use dq_core::{MemoryStore, RedisOptions, RedisStore, ServerReport};

    /// The Redis store's own parts that tools read: its key layout, record format and
    /// invariant checker; the ACL rule a process needs; a URL with its password hidden.
    pub mod redis {
        pub use dq_core::store::redis::layout;
        pub use dq_core::store::redis::{ACL_COMMANDS, acl_rule, redacted_url};
    }
}

/// Handler plumbing: what `#[delayed_job]` generates, for registering a handler by hand with
/// [`WorkerBuilder::job`].
pub mod handler {
    /// A retry function's signature and bounds (`JobDescriptor::retry_fn`).
    pub use dq_core::retry::{DEFAULT_FN_ATTEMPTS, MAX_FN_ATTEMPTS, RetryFnPtr};
    pub use dq_core::{
        CancellationToken, DataNeed, HandlerFn, HandlerFuture, JobDescriptor, LeaseDeadline,
        ScheduleDecl, SharedData, registered_jobs,
    };
}

/// What code generated by `#[delayed_job]` names, and nothing else may: not a public API.
///
/// The generated code reaches every dependency through here (`::dq::__private::…`, or
/// `<crate>::__private::…` with `crate = "…"`), so users never depend on inventory, serde or
/// tokio to declare a handler.
#[doc(hidden)]
pub mod __private {
    pub use dq_core::inventory;
    pub use dq_core::payload::decode;
    pub use dq_core::{
        DataNeed, Error, GroupLimitsDecl, HandlerFuture, HandlerReturn, Job, JobContext,
        JobDescriptor, JobError, JobOutput, KeepDecl, KeyWindow, Priority, RetryFn, Returned,
        ScheduleDecl,
    };
    pub use serde;
    pub use tokio;

    /// The JSON shape of job `J`'s payload (the descriptor's `shape`).
    pub fn payload_shape<J: Job>() -> Option<dq_core::shape::PayloadShape> {
        dq_core::shape::of::<J::Payload>()
    }

    /// Decodes a payload for job `J`.
    ///
    /// Generic over the job on purpose: the generated code names the payload type only in its
    /// `Job` impl and in one spanned serde check, so a payload that is not serde gives one error
    /// on the payload type, not one more for every place that decodes it.
    pub fn decode_payload<J: Job>(bytes: &[u8]) -> Result<J::Payload, Error> {
        decode::<J::Payload>(bytes)
    }

    /// A handler's `Result<T, E>` as the worker sees it: the value encoded for keeping.
    ///
    /// The generated code spans this call on the handler's return type, so a return type that
    /// is not `Result<T: Serialize, E: Into<JobError>>` is reported there.
    pub fn handler_result<T: serde::Serialize, E: Into<JobError>>(
        result: Result<T, E>,
    ) -> Result<Returned, JobError> {
        result.map(|v| Returned::of(&v)).map_err(Into::into)
    }

    /// The payload of a periodic job declared on the handler (`cron = …` or `every = …`):
    /// its type's `Default`, encoded.
    pub fn default_payload<J: Job>() -> Result<Vec<u8>, Error>
    where
        J::Payload: Default,
    {
        dq_core::payload::encode(
            &J::Payload::default(),
            dq_core::payload::DEFAULT_MAX_PAYLOAD,
        )
    }

    /// Runs a blocking (non-`async`) handler on tokio's blocking pool.
    ///
    /// A panic becomes a retryable error, as the worker does for a panicking `async` handler.
    pub async fn run_blocking(
        handler: impl FnOnce() -> Result<Returned, JobError> + Send + 'static,
    ) -> Result<Returned, JobError> {
        match tokio::task::spawn_blocking(handler).await {
            Ok(result) => result,
            Err(join) if join.is_panic() => Err(JobError::retry(format!(
                "handler panicked: {}",
                panic_message(join.into_panic())
            ))),
            Err(join) => Err(JobError::retry(format!("handler did not finish: {join}"))),
        }
    }

    fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
        match panic.downcast::<String>() {
            Ok(message) => *message,
            Err(panic) => match panic.downcast::<&'static str>() {
                Ok(message) => (*message).to_owned(),
                Err(_) => "(a panic without a message)".to_owned(),
            },
        }
    }
}
