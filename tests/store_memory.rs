//! The store conformance suite against the embedded store ([`dq::store::MemoryStore`]), in real time:
//! the suite polls the store's clock, which here is tokio's (not paused).

mod common;

use std::sync::Arc;

use dq::store::{MemoryStore, Queue, Store};
use dq::{Client, ClientBuilder, ClientConfig, JobKey, JobState};

use common::Harness;

/// A fresh in-memory store per test.
struct MemoryHarness {
    store: Arc<MemoryStore>,
    client: Client,
}

impl MemoryHarness {
    fn new() -> Self {
        let store = Arc::new(MemoryStore::new());
        let client = Client::from_store(store.clone(), ClientConfig::default());
        MemoryHarness { store, client }
    }
}

impl Harness for MemoryHarness {
    async fn client(&self) -> Client {
        self.client.clone()
    }

    async fn client_with(
        &self,
        configure: impl FnOnce(ClientBuilder) -> ClientBuilder,
    ) -> dq::Result<Client> {
        configure(Client::builder()).build_with_store(self.store.clone())
    }

    fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    async fn check_invariants(&self) {
        let v = self.store.violations();
        assert!(
            v.is_empty(),
            "store invariants violated:\n  {}",
            v.join("\n  ")
        );
    }

    async fn assert_no_leftovers(&self) {
        assert!(
            self.store.is_empty(),
            "{} jobs left in the store",
            self.store.len()
        );
    }

    async fn assert_untouched(&self) {
        assert!(self.store.is_untouched(), "the store was written to");
    }

    async fn plant_record(
        &self,
        q: &Queue,
        key: &str,
        format_state: (u8, JobState),
        at_ms: u64,
        payload: &[u8],
    ) {
        let key = JobKey::new(key).expect("a valid key");
        self.store
            .plant_record(q, &key, format_state, at_ms, payload);
    }

    async fn record_format(&self, q: &Queue, key: &str) -> Option<u8> {
        self.store
            .record_format(q, &JobKey::new(key).expect("a valid key"))
    }

    async fn describe_record(&self, q: &Queue, key: &str) -> Option<String> {
        self.store
            .describe_record(q, &JobKey::new(key).expect("a valid key"))
    }
}

conformance_suite!(MemoryHarness::new());
conformance_inspect_suite!(MemoryHarness::new());
