//! The store protocol: every state move a job can make, as one atomic operation each, grouped
//! by who calls it.
//!
//! | role | file | calls | caller |
//! |---|---|---|---|
//! | [`Produce`] | `produce.rs` | `enqueue` | producers (the client) |
//! | [`Lease`] | `lease.rs` | `fetch`, `ack`, `fail_many`, `extend`, `release`, `wake_listener` | the worker |
//! | [`Operate`] | `operate.rs` | `cancel`, `reschedule`, `bury`, `control`, `job`, `stats`, `list`, the dead queue | operators, tools, the client |
//! | [`Batches`] | `batches.rs` | a batch's record, the index of batches, the outboxes | the client, the workers' relay |
//! | [`Catalog`] | `catalog.rs` | the topic registry, live workers, schedules, the clock | everyone, namespace-wide |
//!
//! [`Store`] is the sum of the five, implemented for every type that implements them, so an
//! `Arc<dyn Store>` offers every call; bring the roles into scope to call them
//! (`use dq_core::store::prelude::*`). Each role file also holds the types its calls take and
//! return.
//!
//! [`RedisStore`](redis::RedisStore) implements each call with one Lua script and
//! [`MemoryStore`](memory::MemoryStore) with its in-process mirror, one file per role each.
//! Every partition call works on one partition ([`Queue`](crate::job::Queue)); routing a key to
//! its partition is the client's job. Batch calls (`enqueue`, `ack`, `fail_many`, `extend`,
//! `release`) take many jobs of one partition at once so that a busy worker spends one round
//! trip per batch, not per job. Every call validates before it writes; the calls that change a
//! job and may be retried after an ambiguous error (`enqueue` of a key, `ack`, `fail_many`,
//! `cancel`, `reschedule`, `bury`) have no double effect when repeated.

pub mod batches;
pub mod catalog;
pub mod lease;
pub mod memory;
pub mod operate;
pub mod produce;
pub mod redis;

pub use crate::format::Formats;
pub use batches::Batches;
pub use catalog::Catalog;
pub use lease::{FailedAttempt, Lease, Success, WakeListener, lease_of};
pub use operate::{MAX_DEAD_ACT, Operate};
pub use produce::Produce;

/// A place jobs live: Redis, or (for tests and quick starts) memory. The sum of the four
/// roles; every type that plays them all is a `Store`.
pub trait Store: Produce + Lease + Operate + Catalog + Batches {}

impl<T: Produce + Lease + Operate + Catalog + Batches> Store for T {}

/// The store's traits, to call any store's methods (`Arc<dyn Store>` included) with one
/// import: `use dq_core::store::prelude::*;`. The roles come in unnamed, so they never clash
/// with a name of the caller's own.
pub mod prelude {
    pub use super::Store;
    pub use super::batches::Batches as _;
    pub use super::catalog::Catalog as _;
    pub use super::lease::Lease as _;
    pub use super::operate::Operate as _;
    pub use super::produce::Produce as _;
}

#[cfg(test)]
mod shape_tests;
