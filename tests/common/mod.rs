//! Shared support for the store tests.
//!
//! A store test is written once, in [`conformance`], as `async fn body<H: Harness>(h: &H)`, and
//! instantiated for each store by [`conformance_suite!`](crate::conformance_suite): today the
//! Redis store ([`redis::RedisHarness`]), later the embedded one. A [`Harness`] is one test's
//! private store (for Redis: a fresh namespace on the shared test server) plus the checks that
//! need to look inside it.

#![allow(dead_code)]

pub mod conformance;
pub mod conformance_inspect;
pub mod fixture;
pub mod redis;

use std::sync::Arc;

use dq::store::{Queue, Store};
use dq::{Client, ClientBuilder, JobState};

/// One test's private store, and the checks that look inside it.
///
/// Every client a harness hands out works on the same jobs (for Redis: the same namespace),
/// and no other test sees them.
#[allow(async_fn_in_trait)]
pub trait Harness {
    /// A client with default settings on this harness's store.
    async fn client(&self) -> Client;

    /// A client on this harness's store with settings changed by `configure` (partitions,
    /// payload limit, dead-queue limits, bulk chunk, …). Fails as `ClientBuilder` fails, e.g.
    /// with `InvalidTopic` for a bad topic name in `partitions`.
    async fn client_with(
        &self,
        configure: impl FnOnce(ClientBuilder) -> ClientBuilder,
    ) -> dq::Result<Client>;

    /// The store behind [`Harness::client`].
    fn store(&self) -> Arc<dyn Store>;

    /// Panics, listing every violation, unless every job's record and the structures holding
    /// it agree (see [`redis::RedisHarness::violations`] for the Redis version of the rules).
    async fn check_invariants(&self);

    /// Panics unless the store holds no job data at all: only counters (and for Redis, an
    /// unconsumed wake-up token) may remain.
    async fn assert_no_leftovers(&self);

    /// Panics unless nothing at all was ever written (for Redis: no key in the namespace).
    async fn assert_untouched(&self);

    /// Writes job `key` as a dq writing record format `format` would have left it, in
    /// `state` (due time, lease deadline or time of death `at_ms`), in the structure its state
    /// names; attempts and token are 1 once it has run. A format above the newest this dq
    /// reads stands for a newer dq's job (for Redis: its version byte, then bytes this dq
    /// cannot read).
    async fn plant_record(
        &self,
        q: &Queue,
        key: &str,
        format_state: (u8, JobState),
        at_ms: u64,
        payload: &[u8],
    );

    /// The record format of job `key` (`None`: no such job).
    async fn record_format(&self, q: &Queue, key: &str) -> Option<u8>;

    /// Everything stored about job `key` (record, the structures holding it, history, cancel
    /// request) as text, to compare before and after a call that must leave it untouched.
    async fn describe_record(&self, q: &Queue, key: &str) -> Option<String>;
}
