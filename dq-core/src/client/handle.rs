//! The two handles, [`Client`] and [`TopicClient`], and what every call goes through: the
//! check of a topic's partition count against the store's record, once per topic per client.
//! A client that configured the topic's count (`.partitions(topic, n)`) must agree with the
//! record ([`Error::TopicMismatch`] before anything is written); one that did not adopts the
//! recorded count and routes every call with it.
//!
//! Both types live here because each holds or makes the other; their calls live in their own
//! files (`typed.rs`, `topic.rs`, `enqueue.rs`, `list.rs`, `sweep.rs`, `schedules.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::config::{ClientConfig, TopicCount};
use super::group::Lanes;
use super::registration::Registration;
use super::retrying::retry_harmless;
use crate::error::{Error, Result};
use crate::job::Queue;
use crate::names::{JobKey, Topic};
use crate::store::Store;
use crate::topic::TopicMeta;

/// The handle applications use to enqueue and manage jobs. Cheap to clone; share it.
#[derive(Clone)]
pub struct Client {
    pub(super) store: Arc<dyn Store>,
    pub(super) config: Arc<ClientConfig>,
    /// Each topic's metadata as read from the store, once per topic for this client, its
    /// clones and the workers built from it (a cell per topic: concurrent first calls share
    /// one round trip).
    pub(super) topics: Arc<Mutex<HashMap<Topic, Arc<tokio::sync::OnceCell<TopicMeta>>>>>,
    /// Bumped when this client stores or removes a periodic schedule, so that a scheduler on
    /// it looks at once (see `client/schedules.rs`).
    pub(super) schedules_changed: Arc<tokio::sync::watch::Sender<u64>>,
    /// Group commit's lanes: one per partition with an enqueue call in flight (see
    /// `client/group.rs`).
    pub(super) lanes: Arc<Lanes>,
    /// This process's registration in the namespace's format registry (a client connected
    /// to Redis; see `client/registration.rs`); its beat task stops when the last clone goes.
    pub(super) registration: Option<Arc<Registration>>,
    /// Asked about every job this client enqueues, before it is written (`client/hook.rs`).
    pub(super) hooks: super::EnqueueHooks,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client on an existing store.
    pub fn from_store(store: Arc<dyn Store>, config: ClientConfig) -> Client {
        Client {
            store,
            config: Arc::new(config),
            topics: Arc::default(),
            schedules_changed: Arc::new(tokio::sync::watch::Sender::new(0)),
            lanes: Arc::default(),
            registration: None,
            hooks: Default::default(),
        }
    }

    /// The same client, with these enqueue hooks (the builder's).
    pub(crate) fn with_hooks(mut self, hooks: super::EnqueueHooks) -> Client {
        self.hooks = hooks;
        self
    }

    /// The same client, registered in the namespace's format registry (the connect path).
    pub(crate) fn with_registration(mut self, registration: Arc<Registration>) -> Client {
        self.registration = Some(registration);
        self
    }

    /// This process as it is registered in the namespace's registry of record formats
    /// (`dq formats` lists it), or `None` for a client that does not register (the embedded
    /// store, [`ClientBuilder::unregistered`](crate::ClientBuilder::unregistered)).
    pub fn registered_process(&self) -> Option<crate::format::ProcessInfo> {
        self.registration.as_ref().map(|r| r.info().clone())
    }

    /// Registers this process with `role` from its next format beat on (the worker calls it
    /// when it starts, so `dq formats` shows a worker).
    #[doc(hidden)]
    pub fn set_process_role(&self, role: crate::format::ProcessRole) {
        if let Some(r) = &self.registration {
            r.set_role(role);
        }
    }

    /// How many single enqueues are queued behind a call in flight now, waiting for group
    /// commit to send them (for tests: a caller has joined its lane once this counts it).
    #[doc(hidden)]
    pub fn enqueues_waiting(&self) -> usize {
        self.lanes.waiting()
    }

    /// The store behind this client (for the worker and for tests).
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The client's settings.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// The untyped API of `topic` with a given partition count (the store's, for tools that
    /// read every registered topic whatever this client is configured with).
    pub(crate) fn topic_with(&self, topic: Topic, partitions: u16) -> TopicClient {
        TopicClient {
            client: self.clone(),
            topic,
            count: TopicCount::Configured(partitions),
        }
    }

    /// The untyped API of one topic: raw MessagePack payloads, any topic name. Its calls
    /// route with the topic's recorded partition count (see [`Client::check_topic`]).
    pub fn topic(&self, name: &str) -> Result<TopicClient> {
        let topic = Topic::new(name)?;
        Ok(TopicClient {
            client: self.clone(),
            count: self.config.count_of(name),
            topic,
        })
    }

    /// Checks this client's partition count for topic `name` against the store's record of
    /// the topic, recording this client's count if the topic has none yet (the first client
    /// to use a topic — producer, worker or tool — fixes its count); returns the topic's
    /// metadata. Every call on a topic does this implicitly before anything else, and a worker
    /// does it for each of its topics when it starts: call it directly to fail fast at
    /// start-up.
    ///
    /// One store round trip per topic for the life of this client (and its clones): the
    /// answer is kept. What happens when the record holds another count depends on whether
    /// this client configured the topic's count:
    ///
    /// - configured for this topic with
    ///   [`ClientBuilder::partitions`](crate::connect::ClientBuilder::partitions): a count
    ///   different from the one recorded is [`Error::TopicMismatch`] — producers and workers
    ///   that disagreed would otherwise store jobs in partitions no fetcher reads;
    /// - not configured (the topic falls back to
    ///   [`ClientBuilder::default_partitions`](crate::connect::ClientBuilder::default_partitions),
    ///   which only says what to record for a topic with no record yet): the client adopts
    ///   the recorded count, and every call on the topic routes with it.
    ///
    /// To change a topic's count, see [`Client::reset_topic`].
    ///
    /// Retried inside through connection trouble, as every call is (recording is harmless
    /// to repeat).
    pub async fn check_topic(&self, name: &str) -> Result<TopicMeta> {
        let topic = Topic::new(name)?;
        self.ensure_topic(&topic, self.config.count_of(name)).await
    }

    /// [`Client::check_topic`] with a single try, for a caller that retries by itself (the
    /// worker's fetchers, which show each failed try in their health).
    #[doc(hidden)]
    pub async fn check_topic_once(&self, name: &str) -> Result<TopicMeta> {
        let topic = Topic::new(name)?;
        self.checked(&topic, self.config.count_of(name), false, TopicMeta::clone)
            .await
    }

    /// [`Client::check_topic`] for a validated topic and this client's count for it.
    pub(super) async fn ensure_topic(&self, topic: &Topic, count: TopicCount) -> Result<TopicMeta> {
        self.checked(topic, count, true, TopicMeta::clone).await
    }

    /// Checks `count` against `topic`'s record (read once, then kept) and passes the record
    /// to `f`: a configured count must be the recorded one, a fallback gives way to it. Every
    /// call on a topic comes through here: after the first, it costs a map lookup and no
    /// allocation.
    pub(super) async fn checked<T>(
        &self,
        topic: &Topic,
        count: TopicCount,
        retry: bool,
        f: impl FnOnce(&TopicMeta) -> T,
    ) -> Result<T> {
        let cell = {
            let mut cache = self.topics.lock().unwrap_or_else(PoisonError::into_inner);
            match cache.get(topic) {
                Some(cell) => cell.clone(),
                None => cache.entry(topic.clone()).or_default().clone(),
            }
        };
        let store = &self.store;
        let meta = cell
            .get_or_try_init(|| async {
                // Recording is idempotent (the first record wins): safe to retry.
                retry_harmless(|| store.register_topic(topic, count.get()), retry)
                    .await
                    .map(|(meta, _)| meta)
            })
            .await?;
        match count {
            TopicCount::Configured(configured) if meta.partitions != configured => {
                Err(Error::TopicMismatch {
                    topic: topic.to_string(),
                    stored: meta.partitions,
                    configured,
                })
            }
            _ => Ok(f(meta)),
        }
    }

    /// The live workers of the store (for Redis: of this client's namespace), by id: each
    /// running worker beats every few seconds (see `WorkerBuilder::heartbeat` in dq-worker),
    /// and one that stops beating — crashed, frozen, cut off from Redis — is left out once
    /// its heartbeat expires (three beats). One store round trip; what tools show as
    /// "processes". An empty list while jobs are due means nothing runs them.
    pub async fn workers(&self) -> Result<Vec<crate::workers::WorkerInfo>> {
        self.store.workers().await
    }

    /// Every topic recorded in the store (for Redis: in this client's namespace), by name,
    /// with its metadata: the topics some producer or worker has used.
    pub async fn topics(&self) -> Result<Vec<TopicMeta>> {
        self.store.topics().await
    }

    /// Deletes topic `name`'s metadata, so that the next client to use it records its own
    /// partition count; returns the metadata deleted (`None`: the topic had none). Refused
    /// with [`Error::TopicNotEmpty`] while the topic holds any job, dead ones included.
    ///
    /// This is how a topic's partition count is changed; jobs are never moved between
    /// partitions, so the topic must be empty:
    ///
    /// 1. stop the topic's producers;
    /// 2. let its workers drain it (`stats()` shows nothing scheduled, ready, active or in
    ///    retry), then stop them; requeue or purge its dead jobs;
    /// 3. `client.reset_topic(name)` (refused, changing nothing, if a job is left);
    /// 4. start producers and workers with the new `.partitions(name, n)`: the first one
    ///    records it.
    ///
    /// A process that kept running across the reset still holds the old count (each client
    /// reads a topic's record once): restart every process that uses the topic. This
    /// client forgets its own copy.
    pub async fn reset_topic(&self, name: &str) -> Result<Option<TopicMeta>> {
        let topic = Topic::new(name)?;
        let reset = self.store.reset_topic(&topic).await?;
        self.topics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&topic);
        Ok(reset)
    }
}

/// The untyped API of one topic: raw MessagePack payloads.
#[derive(Clone)]
pub struct TopicClient {
    pub(super) client: Client,
    pub(super) topic: Topic,
    /// This client's count for the topic; calls route with the recorded count, which
    /// [`TopicClient::ensure`] returns.
    pub(super) count: TopicCount,
}

impl std::fmt::Debug for TopicClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopicClient")
            .field("topic", &self.topic)
            .field("count", &self.count)
            .finish()
    }
}

impl TopicClient {
    /// The topic.
    pub fn topic(&self) -> &Topic {
        &self.topic
    }

    /// How many partitions this client has for the topic before it reads the store's record:
    /// the configured count, or the fallback that a topic with no record yet is recorded
    /// with. Calls route with the recorded count ([`TopicClient::check`] returns it).
    pub fn partitions(&self) -> u16 {
        self.count.get()
    }

    /// This client's count for the topic, and whether it was configured.
    pub fn count(&self) -> TopicCount {
        self.count
    }

    /// Checks this client's partition count against the topic's record in the store
    /// (recording it if the topic has none): see [`Client::check_topic`]. Every call of
    /// this type does it after validating its input and before its first store call.
    pub async fn check(&self) -> Result<TopicMeta> {
        self.client.ensure_topic(&self.topic, self.count).await
    }

    /// [`TopicClient::check`] without the copy, for every call's first step: the recorded
    /// partition count, which the call routes with.
    pub(super) async fn ensure(&self) -> Result<u16> {
        self.client
            .checked(&self.topic, self.count, true, |meta| meta.partitions)
            .await
    }

    /// The queue of `key` in a topic of `partitions` partitions (the count
    /// [`TopicClient::ensure`] returned).
    pub(super) fn queue_of(&self, key: &JobKey, partitions: u16) -> Queue {
        Queue::new(self.topic.clone(), key.partition(partitions))
    }

    /// Every queue of a topic of `partitions` partitions.
    pub(super) fn queues(&self, partitions: u16) -> impl Iterator<Item = Queue> + '_ {
        (0..partitions).map(|p| Queue::new(self.topic.clone(), p))
    }
}
