//! `MemoryStore`: the store in process, for tests and for quick starts without Redis.
//!
//! It implements the same semantics as [`RedisStore`](super::redis::RedisStore), operation by
//! operation: each method mirrors one Lua script in `store/redis/lua/` (due times, ordering,
//! dedup by key, replace, cancel/reschedule outcomes, lease recovery, retry/defer/bury, bounded
//! history, dead-queue cap and retention, counters and wake-ups). The conformance suite, which
//! runs the same tests against both stores, is the proof. Where Redis keeps *hints* (the `ready`
//! list may hold stale keys of cancelled or rescheduled jobs), this store keeps exact structures.
//! The only visible trace of that: a job made ready again while a stale hint of it is still
//! queued takes its new place in line here, where Redis may deliver it at the old hint's place;
//! and `fetch` never answers `next_in = 0` just because stale hints remain. Groups (`groups.rs`)
//! keep exact queues too; its notes say the one place where this store chose otherwise than
//! `fetch.lua` (a group emptied and refilled by the same fetch keeps a turn).
//!
//! **The clock is tokio's.** "Now" is a Unix-ms base read from [`SystemTime`](std::time::SystemTime) once, when the
//! store is built, plus the time elapsed on [`tokio::time::Instant`] since then. Under
//! `tokio::time::pause()` (or `#[tokio::test(start_paused = true)]`) time moves only when the
//! test advances it, so "30 minutes later" or a whole tiered retry schedule runs instantly and
//! every due time, lease deadline and retry time is exact to the millisecond.
//!
//! All partitions live in one [`Mutex`](std::sync::Mutex); every operation takes it once, does its bounded work
//! and releases it, never holding it across an `.await`. Wake-ups are a [`Notify`](tokio::sync::Notify) per
//! partition, so an idle fetcher waits without polling.
//!
//! The rooms: `store.rs` (the state and its locks), `partition.rs` (one partition's records,
//! indexes, counters and shared moves), `clock.rs`, `receipts.rs`, one file per role
//! (`produce.rs`, `lease.rs`, `operate.rs`, `catalog.rs`: each call, mirroring its script),
//! `batches.rs` (the batches' records and index, `batch.lua`'s mirror) with `outbox.rs` (each
//! partition's notes of its members' ends, written by the calls that end them), and
//! `violations.rs` (the audit for test harnesses).

mod batches;
mod catalog;
mod clock;
mod events;
mod groups;
mod kept;
mod lease;
mod operate;
mod outbox;
mod partition;
mod produce;
mod receipts;
mod store;
mod violations;

pub use store::MemoryStore;

#[cfg(test)]
mod tests;
mod uniq;
