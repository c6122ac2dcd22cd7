//! How a [`Client`] is made: [`ClientBuilder`] for its settings, and one constructor per store —
//! Redis by URL ([`Client::connect`]), or the embedded store ([`Client::in_memory`]).
//!
//! The client itself knows only the [`Store`] trait; this module is the one place that names
//! the concrete stores, so neither store depends on the client nor the client on a store.

use std::sync::Arc;
use std::time::Duration;

use crate::client::{Client, ClientConfig};
use crate::error::{Error, Result};
use crate::job::DeadLimits;
use crate::names::Topic;
use crate::store::Store;
use crate::store::memory::MemoryStore;
use crate::store::redis::{RedisOptions, RedisStore};

/// Builds a [`Client`] with non-default settings.
#[derive(Clone, Debug, Default)]
pub struct ClientBuilder {
    redis: RedisOptions,
    config: ClientConfig,
}

impl ClientBuilder {
    /// Prefix of every Redis key (default `dq`).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.redis.namespace = namespace.into();
        self
    }

    /// Splits `topic` into `partitions` partitions (default 1). Producers and workers of a
    /// topic must agree on this number: the first client to use the topic records it in the
    /// store, and a client configured otherwise gets
    /// [`Error::TopicMismatch`] before it writes anything
    /// (see [`Client::check_topic`], and [`Client::reset_topic`] to change it).
    pub fn partitions(mut self, topic: impl Into<String>, partitions: u16) -> Self {
        self.config.partitions.insert(topic.into(), partitions);
        self
    }

    /// Partitions of every topic not configured with [`ClientBuilder::partitions`].
    pub fn default_partitions(mut self, partitions: u16) -> Self {
        self.config.default_partitions = partitions;
        self
    }

    /// Largest encoded payload accepted (default 1 MiB).
    pub fn max_payload(mut self, bytes: usize) -> Self {
        self.config.max_payload = bytes;
        self
    }

    /// Dead-queue cap and retention of `topic` (default 100,000 jobs, 30 days).
    pub fn dead_limits(mut self, topic: impl Into<String>, limits: DeadLimits) -> Self {
        self.config.dead_limits.insert(topic.into(), limits);
        self
    }

    /// Jobs per script call in bulk enqueue (default 250).
    pub fn bulk_chunk(mut self, jobs: usize) -> Self {
        self.config.bulk_chunk = jobs;
        self
    }

    /// Longest wait for one Redis reply (default 5 s).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.redis.response_timeout = timeout;
        self
    }

    /// Accept a Redis whose `maxmemory-policy` may evict keys, with a warning instead of an
    /// error. Eviction deletes jobs silently: use only where losing jobs is acceptable.
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.redis.allow_eviction = allow;
        self
    }

    /// Skip the server checks on connect (version, eviction policy, persistence).
    pub fn skip_server_checks(mut self) -> Self {
        self.redis.check_server = false;
        self
    }

    fn validate(&self) -> Result<()> {
        for (topic, &p) in &self.config.partitions {
            Topic::new(topic.clone())?;
            if p == 0 {
                return Err(Error::InvalidConfig(format!(
                    "topic {topic:?} needs at least one partition"
                )));
            }
        }
        if self.config.default_partitions == 0 {
            return Err(Error::InvalidConfig(
                "default_partitions must be at least 1".into(),
            ));
        }
        if self.config.bulk_chunk == 0 {
            return Err(Error::InvalidConfig("bulk_chunk must be at least 1".into()));
        }
        for (topic, limits) in &self.config.dead_limits {
            Topic::new(topic.clone())?;
            if limits.cap == 0 {
                return Err(Error::InvalidConfig(format!(
                    "dead-queue cap of {topic:?} must be at least 1"
                )));
            }
        }
        Ok(())
    }

    /// Connects to Redis at `url` and checks the server.
    ///
    /// `url` is one node, `redis://[user:password@]host:port/db` (`rediss://` with the `tls`
    /// feature), or a Redis Cluster by seed nodes,
    /// `redis+cluster://[user:password@]host:port[,host:port…]` (`rediss+cluster://` with
    /// `tls`): any reachable seed finds the rest, and every master is checked.
    pub async fn connect(self, url: &str) -> Result<Client> {
        self.validate()?;
        let store = RedisStore::connect(url, self.redis).await?;
        Ok(Client::from_store(Arc::new(store), self.config))
    }

    /// A client on another store (e.g. the embedded one), with these settings.
    pub fn build_with_store(self, store: Arc<dyn Store>) -> Result<Client> {
        self.validate()?;
        Ok(Client::from_store(store, self.config))
    }
}

impl Client {
    /// Connects to Redis at `url` with default settings (namespace `dq`, one partition per
    /// topic), checking that the server is fit to hold jobs. `url` is one node
    /// (`redis://host:port/`) or a Redis Cluster (`redis+cluster://host:port,host:port`):
    /// see [`ClientBuilder::connect`].
    pub async fn connect(url: &str) -> Result<Client> {
        Client::builder().connect(url).await
    }

    /// Starts building a client with non-default settings.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// A client on a fresh [`MemoryStore`] with default settings: no Redis needed, and under
    /// `tokio::time::pause()` delays and retries run in virtual time.
    pub fn in_memory() -> Client {
        Client::in_memory_with(ClientConfig::default())
    }

    /// A client on a fresh [`MemoryStore`] with these settings (partitions, dead-queue limits,
    /// payload limit).
    pub fn in_memory_with(config: ClientConfig) -> Client {
        Client::from_store(Arc::new(MemoryStore::new()), config)
    }
}
