//! dq-core: the job model, the `Store` (by role) with its Redis and embedded implementations,
//! retry policies, and the `Client` applications enqueue with.
//!
//! Users depend on the `dq` facade crate, which re-exports what they need from here.

pub mod batch;
pub mod client;
pub mod connect;
pub mod control;
pub mod error;
pub mod events;
pub mod finished;
pub mod format;
pub mod group;
pub mod handler;
pub mod inspect;
pub mod job;
pub mod metrics;
pub mod names;
pub mod payload;
pub mod progress;
pub mod retry;
pub mod schedule;
pub mod shape;
/// The retry, duration and topic syntax, shared with `dq-macros` (the `dq-syntax` crate).
pub use dq_syntax as retry_syntax;
pub mod store;
pub mod topic;
pub mod trace;
pub mod unique;
pub mod workers;

/// The attribute that implements [`EnqueueHook`] with an `async fn` (re-exported from the
/// `async-trait` crate, so that an application needs no dependency of its own for it).
pub use async_trait::async_trait;
pub use batch::{
    BatchCounts, BatchId, BatchInfo, BatchStatus, FailurePolicy, MemberId, MemberPage, MemberState,
}; // batches and flows (issue 24)
pub use client::{
    Admin, Client, ClientConfig, ENQUEUE_RETRY_WINDOW, Enqueue, Enqueued, JobSpec, TopicClient,
    TopicCount,
};
pub use client::{BatchBuilder, BatchHandle, FLOW_WAIT_MS, FlowBuilder, FlowHandle};
pub use client::{DEFAULT_EVENTS_POLL, EventStream, EventsOptions, MAX_RECENT_EVENTS}; // events (issue 23)
pub use client::{DEFAULT_GROUP_BATCH, GroupCommit, MAX_GROUP_LINGER}; // group commit (issue 15)
pub use client::{DeadFilter, DeadSweep, MAX_LIST_SCAN, MAX_SWEEP_CHUNK, SweepProgress}; // dead queue by filter (issue 13)
pub use client::{EnqueueHook, EnqueueRequest}; // enqueue hooks (issue 25)
pub use client::{FinishedPage, WAIT_FIRST_PAUSE, WAIT_MAX_PAUSE, WaitOutcome}; // results (issue 23)
pub use connect::ClientBuilder;
pub use control::{ControlChange, ControlState, Rate, TopicControl};
pub use error::{BulkStored, Error, Result};
pub use events::{Event, EventCursor, EventId, EventKind, EventsFrom, EventsPolicy};
pub use finished::{FinishedAs, FinishedChunk, FinishedJob, Retention, Returned, StoredResult};
pub use group::{GroupChange, GroupLimits, GroupName, GroupState}; // groups (issue 25)
pub use handler::{
    BoxError, DataNeed, ErrorKind, GroupLimitsDecl, HandlerFn, HandlerFuture, JobContext,
    JobDescriptor, JobError, KeepDecl, LeaseDeadline, ScheduleDecl, SharedData, registered_jobs,
};
pub use inspect::{
    AttemptView, Cursor, DeadAction, JobPage, JobView, ListChunk, ListFrom, ListPos, MAX_PAGE, Page,
};
pub use job::{
    AttemptOutcome, AttemptRecord, Due, Expiry, HandlerReturn, Job, JobInfo, JobOutput, JobState,
    MAX_DUE_MS, Priority, Queue,
};
pub use names::{JobKey, Topic};
pub use progress::{JobProgress, LogLine, MAX_LOG_LINES, MAX_PROGRESS_LEN, Report, Reporter};
pub use retry::{FailureKind, Jitter, RetryDecision, RetryError, RetryFn, RetryPolicy};
pub use schedule::{Missed, Schedule, ScheduleInfo, ScheduleOutcome, ScheduleRecord};
pub use store::lease::{
    AckOutcome, DeadLimits, Delivery, Extended, FETCH_RECEIPT_LIFE, FailAction, FailOutcome,
    FetchCall, FetchReply, FetchRequest, Success,
};
pub use store::memory::MemoryStore;
pub use store::operate::{
    BuryOutcome, CancelOutcome, NewDue, RescheduleOutcome, TopicStats, UpdateOutcome,
};
pub use store::produce::{ENQUEUE_RECEIPT_LIFE, EnqueueCall, EnqueueOutcome, NewJob};
pub use store::redis::{RedisOptions, RedisStore, ServerReport, TlsConfig};
pub use store::{FailedAttempt, Store, WakeListener};
pub use topic::TopicMeta;
pub use unique::KeyWindow; // key windows (issue 25)
pub use workers::WorkerInfo;

#[doc(hidden)]
pub use inventory;
#[doc(hidden)]
pub use tokio_util::sync::CancellationToken;
