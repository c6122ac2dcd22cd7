//! How a [`Client`] is made: [`ClientBuilder`] for its settings, and one constructor per store —
//! Redis by URL ([`Client::connect`]), or the embedded store ([`Client::in_memory`]).
//!
//! The client itself knows only the [`Store`] trait; this module is the one place that names
//! the concrete stores, so neither store depends on the client nor the client on a store.

use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

use crate::client::{
    Client, ClientConfig, DEFAULT_FORMAT_BEAT, EnqueueHook, EnqueueHooks, GroupCommit,
    Registration, check_unregistered,
};
use crate::error::{Error, Result};
use crate::format::ProcessRole;
use crate::names::Topic;
use crate::store::Store;
use crate::store::lease::DeadLimits;
use crate::store::memory::MemoryStore;
use crate::store::redis::{RedisOptions, RedisStore, TlsConfig};

/// Builds a [`Client`] with non-default settings.
#[derive(Clone, Debug)]
pub struct ClientBuilder {
    redis: RedisOptions,
    config: ClientConfig,
    /// How long [`ClientBuilder::connect`] keeps retrying while Redis cannot be reached.
    connect_timeout: Duration,
    /// Whether the client registers in the namespace's format registry, and as what.
    register: Option<ProcessRole>,
    /// How often a registered client beats.
    format_beat: Duration,
    /// Asked about every job the client enqueues (`client/hook.rs`).
    hooks: EnqueueHooks,
}

/// How long [`Client::connect`] waits for an unreachable Redis by default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            redis: RedisOptions::default(),
            config: ClientConfig::default(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            register: Some(ProcessRole::Producer),
            format_beat: DEFAULT_FORMAT_BEAT,
            hooks: EnqueueHooks::default(),
        }
    }
}

impl ClientBuilder {
    /// Prefix of every Redis key (default `dq`).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.redis.namespace = namespace.into();
        self
    }

    /// Splits `topic` into `partitions` partitions, explicitly. Producers and workers of a
    /// topic must agree on this number: the first client to use the topic records it in the
    /// store, and a client configured otherwise with this method gets
    /// [`Error::TopicMismatch`] before it writes anything (a worker does not start). A client
    /// that leaves a topic out adopts its recorded count, so the count need only be set where
    /// the topic is first used (see [`Client::check_topic`], and [`Client::reset_topic`] to
    /// change it).
    pub fn partitions(mut self, topic: impl Into<String>, partitions: u16) -> Self {
        self.config.partitions.insert(topic.into(), partitions);
        self
    }

    /// Partitions recorded for a topic not configured with [`ClientBuilder::partitions`] when
    /// this client is the first to use it (default 1). Not a configuration of any topic: a
    /// topic that already has a record keeps its recorded count, which this client adopts.
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

    /// Jobs per script call in bulk enqueue (default 100).
    pub fn bulk_chunk(mut self, jobs: usize) -> Self {
        self.config.bulk_chunk = jobs;
        self
    }

    /// Group commit of concurrent single enqueues (on by default, with
    /// [`GroupCommit::default`]: batches of up to 128, no linger). While an enqueue call to
    /// a partition is in flight, later single enqueues to that partition — from any task,
    /// any clone of the client — queue, and go together as the next call: one script call
    /// and one round trip for all of them, each caller with its own outcome and its own
    /// error. A call to an idle partition is sent at once by its own caller, as without
    /// group commit. Checked when the client is built: `max_batch` at least 1, `linger` at
    /// most [`MAX_GROUP_LINGER`](crate::client::MAX_GROUP_LINGER).
    ///
    /// ```no_run
    /// # async fn demo() -> dq_core::Result<()> {
    /// use std::time::Duration;
    /// use dq_core::{Client, GroupCommit};
    /// let client = Client::builder()
    ///     .group_commit(GroupCommit { max_batch: 64, linger: Duration::from_millis(1) })
    ///     .connect("redis://127.0.0.1:6380/")
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn group_commit(mut self, group_commit: GroupCommit) -> Self {
        self.config.group_commit = Some(group_commit);
        self
    }

    /// Turns group commit off: every single enqueue is its own script call and round trip.
    pub fn no_group_commit(mut self) -> Self {
        self.config.group_commit = None;
        self
    }

    /// Longest wait for one Redis reply (default 5 s).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.redis.response_timeout = timeout;
        self
    }

    /// TLS settings for a `rediss://` URL: the CA to trust instead of the built-in roots (a
    /// private CA), and a client certificate for mutual TLS (see [`TlsConfig`]; with the
    /// `tls` feature). A certificate refused either way fails [`ClientBuilder::connect`] at
    /// once with [`Error::Tls`] saying which. `TlsConfig::from_env()` reads the files that
    /// `DQ_TLS_CA`, `DQ_TLS_CERT` and `DQ_TLS_KEY` name, as the `dq` command line does.
    pub fn tls(mut self, tls: TlsConfig) -> Self {
        self.redis.tls = Some(tls);
        self
    }

    /// Accept a Redis whose `maxmemory-policy` may evict keys, with a warning instead of an
    /// error. Eviction deletes jobs silently: use only where losing jobs is acceptable.
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.redis.allow_eviction = allow;
        self
    }

    /// How long [`ClientBuilder::connect`] waits and retries, with backoff, while Redis cannot
    /// be reached (connection refused, a timeout, a server still loading its data) before it
    /// gives up with the last error (default 30 s, [`DEFAULT_CONNECT_TIMEOUT`]). Each failed
    /// try is logged at WARN. A service started before its Redis, as deployments do, then
    /// starts when Redis does. `Duration::ZERO` is [`ClientBuilder::fail_fast`].
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Fails [`ClientBuilder::connect`] at the first unreachable try instead of waiting for
    /// Redis (for tools and tests that want an answer now).
    pub fn fail_fast(self) -> Self {
        self.connect_timeout(Duration::ZERO)
    }

    /// Durable enqueue, off by default: every enqueue (single and each chunk of a bulk) also
    /// sends `WAIT replicas timeout` in the same pipeline, on the same connection as its
    /// script (on a cluster: to the master that stored it), and answers Ok only when at least
    /// `replicas` replicas confirmed the write. Otherwise it fails with
    /// [`Error::NotReplicated`]: the job **may** be stored all the same, so retry the same
    /// enqueue with the same key (enqueue is idempotent by key).
    ///
    /// Replication is asynchronous: without this, a failover (Sentinel or Cluster) can lose
    /// enqueues the old master answered Ok but had not yet sent to the replica that was
    /// promoted. With it, an enqueue answered Ok is on `replicas` replicas. Cost: one replica
    /// round trip per enqueue call, and a lagging replica holds the connection (`WAIT` blocks
    /// it, other calls on it queue behind) for up to `timeout`. `timeout` must be shorter
    /// than the [`response_timeout`](ClientBuilder::response_timeout); `replicas` at least 1.
    pub fn durable_enqueue(mut self, replicas: usize, timeout: Duration) -> Self {
        self.redis.durable_enqueue = Some((replicas, timeout));
        self
    }

    /// Skip the server checks on connect (version, eviction policy, persistence).
    pub fn skip_server_checks(mut self) -> Self {
        self.redis.check_server = false;
        self
    }

    /// Acts as a dq that reads record formats up to `level` only (it writes no newer one).
    /// For upgrade tests: two processes of different format levels on one namespace.
    #[doc(hidden)]
    pub fn format_level(mut self, level: u8) -> Self {
        self.redis.format_level = level;
        self
    }

    /// What this process is, as the namespace's registry of record formats lists it
    /// (`dq formats`; default [`ProcessRole::Producer`], and a client whose worker starts
    /// says [`ProcessRole::Worker`]).
    pub fn role(mut self, role: ProcessRole) -> Self {
        self.register = Some(role);
        self
    }

    /// Does not register this process in the namespace's registry of record formats: for a
    /// command that runs a moment (the `dq` CLI's commands), which would otherwise hold the
    /// format level for a registration's life (90 s) after it exits. Connecting still
    /// refuses, with [`Error::FormatTooOld`], a namespace whose level is newer than this dq
    /// reads. A process that stays up must register (the default): the level rises only
    /// once every registered process reads the newer format, so an unregistered long-lived
    /// process could meet records it cannot read.
    pub fn unregistered(mut self) -> Self {
        self.register = None;
        self
    }

    /// How often the client renews its format registration (default 30 s,
    /// [`DEFAULT_FORMAT_BEAT`]; it lasts three beats). For tests: shorter makes a process
    /// that exits stop holding the level sooner.
    #[doc(hidden)]
    pub fn format_beat(mut self, every: Duration) -> Self {
        self.format_beat = every;
        self
    }

    fn validate(&self) -> Result<()> {
        if self.format_beat < Duration::from_millis(10) {
            return Err(Error::InvalidConfig(
                "the format beat must be at least 10 ms".into(),
            ));
        }
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
        if let Some((replicas, timeout)) = self.redis.durable_enqueue {
            if replicas == 0 {
                return Err(Error::InvalidConfig(
                    "durable_enqueue needs at least 1 replica".into(),
                ));
            }
            if timeout.is_zero() || timeout >= self.redis.response_timeout {
                return Err(Error::InvalidConfig(format!(
                    "durable_enqueue timeout {timeout:?} must be above zero and shorter than \
                     the response_timeout ({:?})",
                    self.redis.response_timeout
                )));
            }
        }
        if self.config.bulk_chunk == 0 {
            return Err(Error::InvalidConfig("bulk_chunk must be at least 1".into()));
        }
        if let Some(group_commit) = &self.config.group_commit {
            group_commit.check()?;
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
    /// `tls`): any reachable seed finds the rest, and every master is checked; or a master
    /// watched by Redis Sentinel,
    /// `redis+sentinel://[user:password@]host:port[,host:port…]/<master-name>[/db]` (the hosts
    /// are sentinels, asked without credentials; the credentials and database are the
    /// master's; `rediss+sentinel://` with `tls`): after a failover the client follows the
    /// master the sentinels name, without a restart. A URL of none of these forms (no master
    /// name, no hosts, a bad port) fails with [`Error::InvalidConfig`] before anything is sent.
    ///
    /// While Redis cannot be reached, it retries with backoff for up to the
    /// [`connect_timeout`](ClientBuilder::connect_timeout) (30 s by default), logging each
    /// failed try at WARN; then it returns the last error. What retrying cannot fix — a
    /// malformed URL, bad settings, wrong credentials, an unfit server — fails at once with
    /// its typed error.
    ///
    /// Once connected, the client registers this process in the namespace's registry of
    /// record formats (docs/UPGRADING.md) and renews that every 30 s while a clone of it
    /// lives: a namespace whose records are written in a format newer than this dq reads
    /// refuses it with [`Error::FormatTooOld`] before it writes anything, and new records are
    /// written in the newest format every live process reads.
    pub async fn connect(self, url: &str) -> Result<Client> {
        self.validate()?;
        let deadline = tokio::time::Instant::now() + self.connect_timeout;
        let mut pauses = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(100))
            .with_max_delay(Duration::from_secs(2))
            .without_max_times()
            .with_jitter()
            .build();
        let mut tries: u32 = 0;
        let store = loop {
            tries += 1;
            let e = match RedisStore::connect(url, self.redis.clone()).await {
                Ok(store) => break store,
                Err(e) => e,
            };
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if !e.is_retryable() || left.is_zero() {
                return Err(e);
            }
            let pause = pauses.next().unwrap_or(Duration::from_secs(2)).min(left);
            tracing::warn!(
                error = %e,
                tries,
                retry_in = ?pause,
                gives_up_in = ?left,
                "redis unreachable; retrying"
            );
            tokio::time::sleep(pause).await;
        };
        if tries > 1 {
            tracing::info!(tries, "connected to redis");
        }
        let store: Arc<dyn Store> = Arc::new(store);
        let client = Client::from_store(store.clone(), self.config).with_hooks(self.hooks);
        match self.register {
            Some(role) => {
                let registration = Registration::start(store, role, self.format_beat).await?;
                Ok(client.with_registration(registration))
            }
            None => {
                check_unregistered(&*store).await?;
                Ok(client)
            }
        }
    }

    /// A client on another store (e.g. the embedded one), with these settings.
    pub fn build_with_store(self, store: Arc<dyn Store>) -> Result<Client> {
        self.validate()?;
        Ok(Client::from_store(store, self.config).with_hooks(self.hooks))
    }

    /// Asks `hook` about every job this client enqueues, after the job is validated and
    /// before anything is written: it may let the job through or refuse it, and a refusal is
    /// [`Error::EnqueueRefused`] (in a bulk, [`Error::BulkItem`] naming the job) with nothing
    /// written. Hooks run in the order added; the first refusal wins. Single, bulk (each job)
    /// and repeatable enqueues are asked; periodic ticks are not. See [`EnqueueHook`].
    pub fn enqueue_hook(mut self, hook: impl EnqueueHook) -> Self {
        self.hooks = self.hooks.with(Arc::new(hook));
        self
    }
}

impl Client {
    /// Connects to Redis at `url` with default settings (namespace `dq`, one partition per
    /// topic), checking that the server is fit to hold jobs. `url` is one node
    /// (`redis://host:port/`), a Redis Cluster (`redis+cluster://host:port,host:port`) or a
    /// master watched by Redis Sentinel (`redis+sentinel://host:port,host:port/mymaster`):
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
