//! dq's worker runtime: it runs the handlers registered with `#[delayed_job]` on per-topic
//! pools, on time, with durable retries.
//!
//! One component per file, each opening with what it is responsible for:
//!
//! | file | component |
//! |---|---|
//! | [`worker`] | builder, start-up checks, the shutdown order |
//! | `registry` | which handlers run here, with their policies |
//! | `fetcher` | one per topic partition: permits first, then `fetch`, then wait without polling |
//! | `runner` | one job: decode, call the handler under its timeout, catch panics, decide the outcome |
//! | `completer` | writes outcomes back: acks in batches, failures one by one, retried until done |
//! | `lease_keeper` | extends the leases of running jobs in batches; cancels handlers whose lease is lost |
//! | `in_flight` | the running jobs, shared by runner, completer and lease keeper |
//! | `dead` | dead letters: the one place a job buried by this worker is logged and handed to `on_dead` |
//! | `health` | what a running worker says about itself (`WorkerHandle::health`) |
//! | `metrics` | the worker's metrics, per topic (names in `dq_core::metrics`) |
//! | [`middleware`] | tower layers around every handler run (`WorkerBuilder::layer`) |
//! | `heartbeat` | this worker's entry in the store's live workers (`Client::workers`) |
//! | `topic_check` | each topic's partition count against the store's record, before start |
//! | `error` | why a worker could not start |

mod completer;
mod dead;
mod error;
mod fetcher;
mod health;
mod heartbeat;
mod in_flight;
mod lease_keeper;
mod metrics;
pub mod middleware;
mod registry;
mod relay;
mod runner;
mod scheduler;
mod topic_check;
pub mod worker;

pub use dead::DeadJob;
pub use error::WorkerError;
pub use health::{
    FetcherHealth, MissingDataReport, NEWER_RECORDS_REMEMBERED, NewerRecordsSeen, WorkerHealth,
};
pub use worker::{HealthProbe, ShutdownReport, Worker, WorkerBuilder, WorkerHandle};
