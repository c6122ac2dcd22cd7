//! `Client`: how applications enqueue, cancel, reschedule and inspect jobs, and the operator
//! API tools build on.
//!
//! The typed API takes a job type (`client.enqueue::<close_order>(payload)`), so the payload
//! is checked against the handler at compile time. The untyped API takes a topic name and raw
//! MessagePack bytes ([`Client::topic`]), for producers that do not link the handlers. The
//! operator API ([`Client::admin`]) reads and acts across every registered topic.
//!
//! Every input is validated — topic, key, payload size — before anything is written.
//!
//! Every call on a topic first checks the client's partition count against the one recorded
//! in the store ([`TopicMeta`](crate::topic::TopicMeta); the first client to use the topic
//! records its own), once per topic per client: a mismatch is
//! [`Error::TopicMismatch`](crate::Error::TopicMismatch) before anything is written.
//!
//! This file only assembles the files below; none of them imports it.

pub mod admin;
mod batch;
mod config;
mod enqueue;
mod events;
mod finished;
mod flow;
mod group;
mod groups;
mod handle;
mod hook;
mod list;
mod registration;
mod retrying;
mod schedules;
mod sweep;
mod topic;
mod typed;

pub use self::batch::{
    ADD_CHUNK, BatchBuilder, BatchHandle, RELAY_NOTES, RelayPass, SweepPass, relay_outbox,
    relay_pass, relay_through, settle, sweep_batches,
};
pub use self::config::{
    ClientConfig, DEFAULT_BULK_CHUNK, DEFAULT_GROUP_BATCH, GroupCommit, MAX_GROUP_LINGER,
    TopicCount,
};
pub use self::enqueue::{Enqueue, JobSpec};
pub use self::events::{DEFAULT_EVENTS_POLL, EventStream, EventsOptions, MAX_RECENT_EVENTS};
pub use self::finished::{FinishedPage, WAIT_FIRST_PAUSE, WAIT_MAX_PAUSE, WaitOutcome};
pub use self::flow::{FLOW_WAIT_MS, FlowBuilder, FlowHandle};
pub use self::handle::{Client, TopicClient};
pub(crate) use self::hook::EnqueueHooks;
pub use self::hook::{EnqueueHook, EnqueueRequest};
pub use self::registration::{BEATS_PER_TTL, DEFAULT_FORMAT_BEAT};
pub(crate) use self::registration::{Registration, check_unregistered};
pub use self::retrying::ENQUEUE_RETRY_WINDOW;
pub use self::schedules::SchedulerPass;
pub use self::sweep::{DeadFilter, DeadSweep, MAX_LIST_SCAN, MAX_SWEEP_CHUNK, SweepProgress};
pub use crate::inspect::DeadAction;
pub use crate::store::produce::Enqueued;
pub use admin::Admin;
