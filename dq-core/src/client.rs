//! `Client`: how applications enqueue, cancel, reschedule and inspect jobs.
//!
//! The typed API takes a job type (`client.enqueue::<close_order>(payload)`), so the payload
//! is checked against the handler at compile time. The untyped API takes a topic name and raw
//! MessagePack bytes ([`Client::topic`]), for producers that do not link the handlers.
//!
//! Every input is validated — topic, key, payload size — before anything is written.
//!
//! Every call on a topic first checks the client's partition count against the one recorded
//! in the store ([`TopicMeta`]; the first client to use the topic records its own), once per
//! topic per client: a mismatch is [`Error::TopicMismatch`] before anything is written.

use std::collections::HashMap;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use backon::{ExponentialBuilder, Retryable};

use crate::control::{ControlChange, Rate, TopicControl};
use crate::error::{BulkStored, Error, Result};
use crate::inspect::{Cursor, JobPage, JobView, ListChunk, ListFrom, ListPos, Page};
use crate::job::{Due, Job, JobInfo, JobState, Queue};
use crate::names::{JobKey, Topic};
use crate::payload::{self, DEFAULT_MAX_PAYLOAD};
use crate::store::Store;
use crate::store::lease::DeadLimits;
use crate::store::operate::{CancelOutcome, NewDue, RescheduleOutcome, TopicStats};
pub use crate::store::produce::Enqueued;
use crate::store::produce::{EnqueueCall, EnqueueOutcome, NewJob};
use crate::topic::TopicMeta;

mod group;
mod schedules;
mod sweep;
pub use crate::inspect::DeadAction;
pub use group::{DEFAULT_GROUP_BATCH, GroupCommit, MAX_GROUP_LINGER};
pub use schedules::SchedulerPass;
pub use sweep::{DeadFilter, DeadSweep, MAX_LIST_SCAN, MAX_SWEEP_CHUNK, SweepProgress};

/// Largest number of jobs sent in one enqueue script call by bulk enqueue: small enough that
/// one call stays under ~2 ms of Redis time even with a million jobs due within a minute
/// (`dq-bench all`, section `scale-dense`), so Redis never stalls its other clients. A
/// larger chunk saves little: the per-call cost is a few µs against ~7–10 µs per job.
pub const DEFAULT_BULK_CHUNK: usize = 100;

/// Settings shared by a client and the workers built from it.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Partitions per topic; topics not listed have [`ClientConfig::default_partitions`].
    pub partitions: HashMap<String, u16>,
    /// Partitions of topics not listed in `partitions` (default 1).
    pub default_partitions: u16,
    /// Largest encoded payload accepted (default 1 MiB).
    pub max_payload: usize,
    /// Dead-queue limits per topic; topics not listed get [`DeadLimits::default`].
    pub dead_limits: HashMap<String, DeadLimits>,
    /// Jobs per enqueue script call in bulk enqueue (default 100); also the most jobs one
    /// group commit call carries.
    pub bulk_chunk: usize,
    /// Group commit of concurrent single enqueues (default on, [`GroupCommit::default`]);
    /// `None` sends every single enqueue as its own call.
    pub group_commit: Option<GroupCommit>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            partitions: HashMap::new(),
            default_partitions: 1,
            max_payload: DEFAULT_MAX_PAYLOAD,
            dead_limits: HashMap::new(),
            bulk_chunk: DEFAULT_BULK_CHUNK,
            group_commit: Some(GroupCommit::default()),
        }
    }
}

impl ClientConfig {
    /// How many partitions `topic` has.
    pub fn partitions_of(&self, topic: &str) -> u16 {
        self.partitions
            .get(topic)
            .copied()
            .unwrap_or(self.default_partitions)
            .max(1)
    }

    /// The dead-queue limits of `topic`, for the whole topic.
    pub fn dead_limits_of(&self, topic: &str) -> DeadLimits {
        self.dead_limits.get(topic).copied().unwrap_or_default()
    }

    /// The dead-queue limits of one partition of `topic`: the cap is shared evenly.
    pub fn partition_dead_limits(&self, topic: &str) -> DeadLimits {
        let limits = self.dead_limits_of(topic);
        let p = u64::from(self.partitions_of(topic));
        DeadLimits {
            cap: limits.cap.div_ceil(p).max(1),
            ..limits
        }
    }
}

/// The handle applications use to enqueue and manage jobs. Cheap to clone; share it.
#[derive(Clone)]
pub struct Client {
    store: Arc<dyn Store>,
    config: Arc<ClientConfig>,
    /// Each topic's metadata as read from the store, once per topic for this client, its
    /// clones and the workers built from it (a cell per topic: concurrent first calls share
    /// one round trip).
    topics: Arc<Mutex<HashMap<Topic, Arc<tokio::sync::OnceCell<TopicMeta>>>>>,
    /// Bumped when this client stores or removes a periodic schedule, so that a scheduler on
    /// it looks at once (see `client/schedules.rs`).
    schedules_changed: Arc<tokio::sync::watch::Sender<u64>>,
    /// Group commit's lanes: one per partition with an enqueue call in flight (see
    /// `client/group.rs`).
    lanes: Arc<group::Lanes>,
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
            partitions,
        }
    }

    /// The untyped API of one topic: raw MessagePack payloads, any topic name.
    pub fn topic(&self, name: &str) -> Result<TopicClient> {
        let topic = Topic::new(name)?;
        let partitions = self.config.partitions_of(name);
        Ok(TopicClient {
            client: self.clone(),
            topic,
            partitions,
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
    /// answer is kept. A count different from the one recorded is
    /// [`Error::TopicMismatch`] — producers and workers that disagreed would otherwise store
    /// jobs in partitions no fetcher reads. To change a topic's count, see
    /// [`Client::reset_topic`].
    ///
    /// Retried inside through connection trouble, as every call is (recording is harmless
    /// to repeat).
    pub async fn check_topic(&self, name: &str) -> Result<TopicMeta> {
        let topic = Topic::new(name)?;
        self.ensure_topic(&topic, self.config.partitions_of(name))
            .await
    }

    /// [`Client::check_topic`] with a single try, for a caller that retries by itself (the
    /// worker's fetchers, which show each failed try in their health).
    #[doc(hidden)]
    pub async fn check_topic_once(&self, name: &str) -> Result<TopicMeta> {
        let topic = Topic::new(name)?;
        self.checked(
            &topic,
            self.config.partitions_of(name),
            false,
            TopicMeta::clone,
        )
        .await
    }

    /// [`Client::check_topic`] for a validated topic and this client's count for it.
    async fn ensure_topic(&self, topic: &Topic, configured: u16) -> Result<TopicMeta> {
        self.checked(topic, configured, true, TopicMeta::clone)
            .await
    }

    /// Checks `configured` against `topic`'s record (read once, then kept) and passes the
    /// record to `f`. Every call on a topic comes through here: after the first, it costs a
    /// map lookup and no allocation.
    async fn checked<T>(
        &self,
        topic: &Topic,
        configured: u16,
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
                retry_harmless(|| store.register_topic(topic, configured), retry)
                    .await
                    .map(|(meta, _)| meta)
            })
            .await?;
        if meta.partitions != configured {
            return Err(Error::TopicMismatch {
                topic: topic.to_string(),
                stored: meta.partitions,
                configured,
            });
        }
        Ok(f(meta))
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

    fn typed<J: Job>(&self) -> Result<TopicClient> {
        self.topic(J::TOPIC)
    }

    /// Enqueues a job of type `J`. Await the returned builder; before that, set
    /// `.key(…)`, `.delay(…)` or `.at(…)`, `.replace()`.
    ///
    /// ```no_run
    /// # async fn demo(client: dq_core::Client) -> dq_core::Result<()> {
    /// # struct close_order;
    /// # impl dq_core::Job for close_order { type Payload = u64; const TOPIC: &'static str = "orders.close"; }
    /// use std::time::Duration;
    /// let done = client
    ///     .enqueue::<close_order>(7)
    ///     .key("order-7")
    ///     .delay(Duration::from_secs(1800))
    ///     .await?;
    /// println!("{} {:?}", done.key, done.outcome);
    /// # Ok(()) }
    /// ```
    pub fn enqueue<J: Job>(&self, payload: J::Payload) -> Enqueue {
        let encoded = payload::encode(&payload, self.config.max_payload);
        Enqueue::new(self.typed::<J>(), encoded)
    }

    /// Enqueues many jobs of type `J` with one script call per partition and chunk of
    /// [`ClientConfig::bulk_chunk`]. Every job is validated before any is written; a bad one
    /// is refused as [`Error::BulkItem`], which names its index and key. See
    /// [`TopicClient::enqueue_bulk`] for what an error after that means.
    pub async fn enqueue_bulk<J: Job>(
        &self,
        jobs: impl IntoIterator<Item = JobSpec<J::Payload>>,
    ) -> Result<Vec<Enqueued>> {
        let max = self.config.max_payload;
        let raw = jobs
            .into_iter()
            .enumerate()
            .map(|(i, j)| {
                Ok(JobSpec {
                    payload: payload::encode(&j.payload, max)
                        .map_err(|e| e.in_bulk_item(i, j.key.as_deref()))?,
                    key: j.key,
                    due: j.due,
                    replace: j.replace,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        self.typed::<J>()?.enqueue_bulk(raw).await
    }

    /// Cancels a job of type `J` that has not started; the outcome says what happened.
    /// Retried inside through connection trouble: see [`TopicClient::cancel`].
    pub async fn cancel<J: Job>(&self, key: &str) -> Result<CancelOutcome> {
        self.typed::<J>()?.cancel(key).await
    }

    /// Gives a waiting job of type `J` a new due time: [`NewDue::At`] a time,
    /// [`NewDue::After`] a delay from now, or [`NewDue::Shift`] by ± ms from its current due
    /// time. `At` and `After` are retried inside through connection trouble, `Shift` is
    /// not: see [`TopicClient::reschedule`].
    pub async fn reschedule<J: Job>(&self, key: &str, due: NewDue) -> Result<RescheduleOutcome> {
        self.typed::<J>()?.reschedule(key, due).await
    }

    /// Everything known about a job of type `J`, decoded, or `None` if no such job exists.
    ///
    /// The payload is decoded as `J::Payload`; one that does not decode does not fail the call
    /// (see [`JobView::payload`]). [`TopicClient::job`] gives the undecoded [`JobInfo`].
    pub async fn job<J: Job>(&self, key: &str) -> Result<Option<JobView<J::Payload>>> {
        Ok(self.typed::<J>()?.job(key).await?.map(JobInfo::decode))
    }

    /// One page of `J`'s jobs in `state`, decoded, across all partitions of its topic: see
    /// [`TopicClient::list`] for the order and the paging.
    ///
    /// ```no_run
    /// # async fn demo(client: dq_core::Client) -> dq_core::Result<()> {
    /// # struct close_order;
    /// # impl dq_core::Job for close_order { type Payload = u64; const TOPIC: &'static str = "orders.close"; }
    /// use dq_core::{JobState, Page};
    /// let mut page = Page::first(100);
    /// loop {
    ///     let jobs = client.list::<close_order>(JobState::Scheduled, page).await?;
    ///     for job in &jobs.jobs {
    ///         println!("{} due {:?}: {:?}", job.key, job.due, job.payload);
    ///     }
    ///     let Some(next) = jobs.next else { break };
    ///     page = Page::after(next, 100);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list<J: Job>(
        &self,
        state: JobState,
        page: Page,
    ) -> Result<JobPage<JobView<J::Payload>>> {
        let page = self.typed::<J>()?.list(state, page).await?;
        Ok(JobPage {
            jobs: page.jobs.into_iter().map(JobInfo::decode).collect(),
            next: page.next,
        })
    }

    /// One page of `J`'s dead queue, decoded, oldest death first: `list(JobState::Dead, page)`.
    pub async fn dead<J: Job>(&self, page: Page) -> Result<JobPage<JobView<J::Payload>>> {
        self.list::<J>(JobState::Dead, page).await
    }

    /// Moves the named dead jobs of `J` back to `ready`, attempts reset and history kept;
    /// returns how many moved (a key that is not dead, or not there, is skipped). Every key
    /// is validated before anything moves.
    pub async fn requeue_dead<J: Job>(&self, keys: &[&str]) -> Result<u64> {
        self.typed::<J>()?.requeue_dead(keys).await
    }

    /// Deletes the named dead jobs of `J`; returns how many were deleted (a key that is not
    /// dead, or not there, is skipped). Every key is validated before anything is deleted.
    pub async fn purge_dead<J: Job>(&self, keys: &[&str]) -> Result<u64> {
        self.typed::<J>()?.purge_dead(keys).await
    }

    /// Deletes every dead job of `J`, in bounded batches; returns how many.
    pub async fn purge_all_dead<J: Job>(&self) -> Result<u64> {
        self.typed::<J>()?.purge_all_dead().await
    }

    /// Depths and counters of `J`'s topic.
    pub async fn stats<J: Job>(&self) -> Result<TopicStats> {
        self.typed::<J>()?.stats().await
    }

    /// Pauses `J`'s topic: see [`TopicClient::pause`].
    pub async fn pause<J: Job>(&self) -> Result<TopicControl> {
        self.typed::<J>()?.pause().await
    }

    /// Resumes `J`'s topic: see [`TopicClient::resume`].
    pub async fn resume<J: Job>(&self) -> Result<TopicControl> {
        self.typed::<J>()?.resume().await
    }

    /// Sets or removes the rate limit of `J`'s topic: see [`TopicClient::set_rate`].
    pub async fn set_rate<J: Job>(&self, rate: Option<Rate>) -> Result<TopicControl> {
        self.typed::<J>()?.set_rate(rate).await
    }

    /// Sets or removes the global concurrency cap of `J`'s topic: see
    /// [`TopicClient::set_concurrency`].
    pub async fn set_concurrency<J: Job>(&self, cap: Option<u32>) -> Result<TopicControl> {
        self.typed::<J>()?.set_concurrency(cap).await
    }
}

/// A job to enqueue: its payload, and optionally its key, due time and `replace`. Built like
/// a single enqueue (`JobSpec::new(p).key(k).delay(d)`), and passed in a list to
/// [`Client::enqueue_bulk`]:
///
/// ```no_run
/// # async fn demo(client: dq_core::Client) -> dq_core::Result<()> {
/// # struct close_order;
/// # impl dq_core::Job for close_order { type Payload = u64; const TOPIC: &'static str = "orders.close"; }
/// use dq_core::JobSpec;
/// let specs = (1..=3).map(|id| JobSpec::new(id).key(format!("order-{id}")));
/// client.enqueue_bulk::<close_order>(specs).await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct JobSpec<P> {
    /// The payload.
    pub payload: P,
    /// Its key; generated if `None`.
    pub key: Option<String>,
    /// When it is due.
    pub due: Due,
    /// Replace an existing job with the same key.
    pub replace: bool,
}

/// The old name of [`JobSpec`], from when it served bulk enqueue only.
#[deprecated(since = "0.2.0", note = "renamed to `JobSpec`")]
pub type BulkJob<P> = JobSpec<P>;

impl<P> JobSpec<P> {
    /// A job due now with a generated key.
    pub fn new(payload: P) -> Self {
        JobSpec {
            payload,
            key: None,
            due: Due::Now,
            replace: false,
        }
    }

    /// Sets the job's key.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Makes the job due `delay` from now.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.due = Due::After(delay);
        self
    }

    /// Makes the job due at `time`.
    pub fn at(mut self, time: SystemTime) -> Self {
        self.due = Due::At(time);
        self
    }

    /// Replaces an existing pending or dead job with the same key.
    pub fn replace(mut self) -> Self {
        self.replace = true;
        self
    }
}

/// A pending enqueue; `.await` it to send.
#[must_use = "an enqueue does nothing until awaited"]
pub struct Enqueue {
    topic: Result<TopicClient>,
    payload: Result<Vec<u8>>,
    key: Option<String>,
    due: Due,
    replace: bool,
}

impl Enqueue {
    fn new(topic: Result<TopicClient>, payload: Result<Vec<u8>>) -> Self {
        Enqueue {
            topic,
            payload,
            key: None,
            due: Due::Now,
            replace: false,
        }
    }

    /// The job's key (default: a generated, time-sortable key). An existing job with this key
    /// is kept and reported as [`EnqueueOutcome::Exists`] — unless `.replace()` is set.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Due `delay` after now (by the store's clock).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.due = Due::After(delay);
        self
    }

    /// Due at `time` (at once if it has passed).
    pub fn at(mut self, time: SystemTime) -> Self {
        self.due = Due::At(time);
        self
    }

    /// Replace an existing job with the same key: a scheduled, ready, retry or dead job is
    /// replaced atomically (new payload and due time, attempts and history start again).
    /// A running job is never replaced: the outcome is then `Exists(Active)`.
    pub fn replace(mut self) -> Self {
        self.replace = true;
        self
    }

    async fn send(self) -> Result<Enqueued> {
        let topic = self.topic?;
        let payload = self.payload?;
        let (queue, job) = topic.new_job(JobSpec {
            payload,
            key: self.key,
            due: self.due,
            replace: self.replace,
        })?;
        let key = job.key.clone();
        let outcome = topic.enqueue_one(queue, job).await?;
        Ok(Enqueued { key, outcome })
    }
}

impl IntoFuture for Enqueue {
    type Output = Result<Enqueued>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Enqueued>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}

/// The untyped API of one topic: raw MessagePack payloads.
#[derive(Clone)]
pub struct TopicClient {
    client: Client,
    topic: Topic,
    partitions: u16,
}

impl std::fmt::Debug for TopicClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopicClient")
            .field("topic", &self.topic)
            .field("partitions", &self.partitions)
            .finish()
    }
}

/// How long after its first try an enqueue call is still retried. Shorter than
/// [`ENQUEUE_RECEIPT_LIFE`](crate::store::produce::ENQUEUE_RECEIPT_LIFE) by a margin, so that a retry always
/// finds the receipt of an earlier try that was applied.
pub const ENQUEUE_RETRY_WINDOW: Duration = Duration::from_secs(20);

/// Retries a call that is safe to repeat after connection trouble or a timeout.
fn retrying() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(Duration::from_secs(1))
        .with_max_times(3)
        .with_jitter()
}

/// Runs a store call that is harmless to repeat, retrying it (if `repeatable`) through
/// connection trouble for up to [`ENQUEUE_RETRY_WINDOW`]. Also says whether an earlier try
/// that failed may have been applied (its reply lost), which a later outcome may need to
/// account for.
async fn retry_harmless<T, Fut>(call: impl FnMut() -> Fut, repeatable: bool) -> Result<(T, bool)>
where
    Fut: Future<Output = Result<T>>,
{
    let started = tokio::time::Instant::now();
    let ambiguous = AtomicBool::new(false);
    let outcome = call
        .retry(retrying())
        .when(|e| repeatable && e.is_retryable() && started.elapsed() < ENQUEUE_RETRY_WINDOW)
        .notify(|e, _| {
            if e.may_have_applied() {
                ambiguous.store(true, Ordering::Relaxed);
            }
        })
        .await?;
    Ok((outcome, ambiguous.load(Ordering::Relaxed)))
}

impl TopicClient {
    /// The topic.
    pub fn topic(&self) -> &Topic {
        &self.topic
    }

    /// How many partitions this client is configured with for the topic (every call checks
    /// it against the store's record first: see [`TopicClient::check`]).
    pub fn partitions(&self) -> u16 {
        self.partitions
    }

    /// Checks this client's partition count against the topic's record in the store
    /// (recording it if the topic has none): see [`Client::check_topic`]. Every call of
    /// this type does it after validating its input and before its first store call.
    pub async fn check(&self) -> Result<TopicMeta> {
        self.client.ensure_topic(&self.topic, self.partitions).await
    }

    /// [`TopicClient::check`] without the copy, for every call's first step.
    async fn ensure(&self) -> Result<()> {
        self.client
            .checked(&self.topic, self.partitions, true, |_| ())
            .await
    }

    fn queue_of(&self, key: &JobKey) -> Queue {
        Queue::new(self.topic.clone(), key.partition(self.partitions))
    }

    fn queues(&self) -> impl Iterator<Item = Queue> + '_ {
        (0..self.partitions).map(|p| Queue::new(self.topic.clone(), p))
    }

    /// Enqueues one job with a raw MessagePack payload.
    pub fn enqueue(&self, payload: Vec<u8>) -> Enqueue {
        let checked =
            payload::check_size(&payload, self.client.config.max_payload).map(|()| payload);
        Enqueue::new(Ok(self.clone()), checked)
    }

    /// Enqueues many jobs with raw payloads; every job is validated before any is written, and
    /// a bad one is refused as [`Error::BulkItem`] (its index in `jobs`, its key, and the
    /// item's own error as `source`): nothing is written then.
    ///
    /// Jobs are sent in calls (chunks) of at most `bulk_chunk` jobs per partition, partition
    /// by partition, each in the order given; each call is atomic and is retried inside
    /// through connection trouble with no double effect (keys, generated ones too, and a call
    /// id are fixed before its first try; see [`ENQUEUE_RETRY_WINDOW`]). The bulk as a whole
    /// is not atomic:
    ///
    /// - An error other than [`Error::BulkPartial`] means that no chunk was stored (for a
    ///   retryable error, the first chunk may have been, as for a single enqueue).
    /// - [`Error::BulkPartial`] means that some chunks were stored before one failed (e.g.
    ///   with [`Error::OutOfMemory`] at Redis's `maxmemory`): its `outcomes` has one entry per
    ///   job, `Some` for each job stored (with its key, generated ones too) and `None` for
    ///   each job not stored. To resume, send again exactly the jobs whose entry is `None`:
    ///   every job is then stored once. (If `source` is retryable, the chunk named by
    ///   `failed` may have been stored: resending those jobs with keys creates no second job
    ///   while the first exists; give every job a key where that matters.)
    ///
    /// ```no_run
    /// # async fn demo(t: dq_core::TopicClient, jobs: Vec<dq_core::JobSpec<Vec<u8>>>) -> dq_core::Result<()> {
    /// match t.enqueue_bulk(jobs.clone()).await {
    ///     Err(dq_core::Error::BulkPartial { outcomes, .. }) => {
    ///         // Later (e.g. once memory is free): the jobs not stored, each once.
    ///         let rest = jobs
    ///             .into_iter()
    ///             .zip(outcomes.outcomes())
    ///             .filter(|(_, stored)| stored.is_none())
    ///             .map(|(job, _)| job)
    ///             .collect();
    ///         t.enqueue_bulk(rest).await?;
    ///     }
    ///     other => { other?; }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn enqueue_bulk(&self, jobs: Vec<JobSpec<Vec<u8>>>) -> Result<Vec<Enqueued>> {
        // Validate everything first: nothing is written if any job is bad.
        let n = jobs.len();
        let mut by_partition: HashMap<u16, (Vec<usize>, Vec<NewJob>)> = HashMap::new();
        for (i, job) in jobs.into_iter().enumerate() {
            let key = job.key.clone();
            let (queue, job) = self
                .new_job(job)
                .map_err(|e| e.in_bulk_item(i, key.as_deref()))?;
            let (indices, jobs) = by_partition.entry(queue.partition).or_default();
            indices.push(i);
            jobs.push(job);
        }
        let mut out: Vec<Option<Enqueued>> = vec![None; n];
        let chunk = self.client.config.bulk_chunk.max(1);
        let mut partitions: Vec<_> = by_partition.into_iter().collect();
        partitions.sort_by_key(|(p, _)| *p);
        let mut stored_any = false;
        for (partition, (indices, jobs)) in partitions {
            let queue = Queue::new(self.topic.clone(), partition);
            for (indices, jobs) in indices.chunks(chunk).zip(jobs.chunks(chunk)) {
                let outcomes = match self.store_enqueue(&queue, jobs).await {
                    Ok(outcomes) => outcomes,
                    Err(source) if stored_any => {
                        return Err(Error::BulkPartial {
                            outcomes: BulkStored::new(out),
                            failed: indices.to_vec(),
                            source: Box::new(source),
                        });
                    }
                    Err(e) => return Err(e),
                };
                stored_any = true;
                for ((i, job), outcome) in indices.iter().zip(jobs).zip(outcomes) {
                    out[*i] = Some(Enqueued {
                        key: job.key.clone(),
                        outcome,
                    });
                }
            }
        }
        out.into_iter()
            .map(|o| o.ok_or_else(|| Error::Protocol("enqueue lost an outcome".into())))
            .collect()
    }

    /// Validates one job and finds its partition.
    fn new_job(&self, job: JobSpec<Vec<u8>>) -> Result<(Queue, NewJob)> {
        payload::check_size(&job.payload, self.client.config.max_payload)?;
        // The producer's trace context travels in front of the payload (not counted in its
        // limit): see `crate::trace`.
        #[cfg(feature = "otel")]
        let job = match crate::trace::current_traceparent() {
            Some(tp) => JobSpec {
                payload: crate::trace::wrap(&tp, job.payload),
                ..job
            },
            None => job,
        };
        job.due.check()?;
        let key = match job.key {
            Some(k) => JobKey::new(k)?,
            None => JobKey::generate(),
        };
        Ok((
            self.queue_of(&key),
            NewJob {
                key,
                payload: job.payload,
                due: job.due,
                replace: job.replace,
            },
        ))
    }

    /// One enqueue call to the store, retried through connection trouble. Keys and the call
    /// id are fixed before the first try, and every retry says it is one: a retry after a try
    /// that was applied (its reply lost) finds the call's receipt and writes nothing, even if
    /// the job has run and gone in between. Retries stop [`ENQUEUE_RETRY_WINDOW`] after the
    /// first try, well inside the receipt's life. The topic's partition count is checked
    /// first (cached after the first call).
    async fn store_enqueue(&self, queue: &Queue, jobs: &[NewJob]) -> Result<Vec<EnqueueOutcome>> {
        self.store_enqueue_as(queue, jobs, EnqueueCall::new()).await
    }

    /// One job as [`TopicClient::store_enqueue`] stores it, under a given call (a periodic
    /// tick's: an id derived from its key, so that schedulers repeating each other's call
    /// find its receipt).
    pub(crate) async fn enqueue_as(
        &self,
        job: JobSpec<Vec<u8>>,
        call: EnqueueCall,
    ) -> Result<EnqueueOutcome> {
        let (queue, job) = self.new_job(job)?;
        let mut outcomes = self.store_enqueue_as(&queue, &[job], call).await?;
        outcomes
            .pop()
            .ok_or_else(|| Error::Protocol("enqueue returned no outcome".into()))
    }

    /// One validated single job, coalesced with concurrent ones to the same partition when
    /// group commit is on ([`GroupCommit`]): the topic is checked for this caller first, so
    /// a mismatch is its own error; the call is then [`TopicClient::send_enqueue`] of one
    /// job, or of a batch of callers.
    async fn enqueue_one(&self, queue: Queue, job: NewJob) -> Result<EnqueueOutcome> {
        self.ensure().await?;
        match self.client.config.group_commit {
            Some(gc) => group::enqueue(self, gc, queue, job).await,
            None => self
                .send_enqueue(&queue, std::slice::from_ref(&job), EnqueueCall::new())
                .await?
                .pop()
                .ok_or_else(|| Error::Protocol("enqueue returned no outcome".into())),
        }
    }

    /// [`TopicClient::store_enqueue`] whose first try is `first`.
    async fn store_enqueue_as(
        &self,
        queue: &Queue,
        jobs: &[NewJob],
        first: EnqueueCall,
    ) -> Result<Vec<EnqueueOutcome>> {
        self.ensure().await?;
        self.send_enqueue(queue, jobs, first).await
    }

    /// [`TopicClient::store_enqueue_as`] without the topic check (done by the caller): one
    /// store call, the same call id on every try, retried through connection trouble for up
    /// to [`ENQUEUE_RETRY_WINDOW`]; counts the jobs stored.
    async fn send_enqueue(
        &self,
        queue: &Queue,
        jobs: &[NewJob],
        first: EnqueueCall,
    ) -> Result<Vec<EnqueueOutcome>> {
        let store = &self.client.store;
        let started = tokio::time::Instant::now();
        let tries = &AtomicU32::new(0);
        (move || async move {
            let call = match tries.fetch_add(1, Ordering::Relaxed) {
                0 => first,
                _ => first.retried(),
            };
            store.enqueue(queue, jobs, call).await
        })
        .retry(retrying())
        .when(|e| e.is_retryable() && started.elapsed() < ENQUEUE_RETRY_WINDOW)
        .await
        .inspect(|outcomes| {
            let stored = outcomes
                .iter()
                .filter(|o| matches!(o, EnqueueOutcome::Created | EnqueueOutcome::Replaced))
                .count();
            crate::metrics::enqueued(self.topic.as_str(), stored as u64);
        })
    }

    /// Cancels a job: one that has not started is removed ([`CancelOutcome::Cancelled`]);
    /// for one running now, a cancel request is recorded ([`CancelOutcome::CancelRequested`]):
    /// the worker holding it learns it on its next lease extension (every third of the
    /// lease), its handler's `ctx.cancelled()` fires, and the job ends as cancelled without a
    /// retry — unless the handler succeeds first. A worker that crashed, released the job at
    /// shutdown or had its lease expire ends it as cancelled too.
    ///
    /// Retried inside through connection trouble (as enqueue is; for up to
    /// [`ENQUEUE_RETRY_WINDOW`]): cancelling is harmless to repeat. A retry after a try whose
    /// reply was lost (it may have cancelled the job) that finds no job reports
    /// [`CancelOutcome::Gone`], not `NotFound`: the job will not run, but whether this call
    /// cancelled it or it ended otherwise in between is not known.
    pub async fn cancel(&self, key: &str) -> Result<CancelOutcome> {
        let key = JobKey::new(key)?;
        self.ensure().await?;
        let (queue, store) = (&self.queue_of(&key), &self.client.store);
        let (outcome, ambiguous) = retry_harmless(|| store.cancel(queue, &key), true).await?;
        if outcome == CancelOutcome::Cancelled {
            crate::metrics::cancelled(self.topic.as_str());
        }
        Ok(match outcome {
            CancelOutcome::NotFound if ambiguous => CancelOutcome::Gone,
            other => other,
        })
    }

    /// Gives a scheduled, ready or retry job a new due time.
    ///
    /// [`NewDue::At`] and [`NewDue::After`] are retried inside through connection trouble (for
    /// up to [`ENQUEUE_RETRY_WINDOW`]), as enqueue is: repeating them sets the same time again
    /// — for `After`, counted from the try that was applied last, so at most the retry window
    /// later than from the first try (as if the call had been sent that much later); the
    /// reported `due_ms` is the one stored. Each outcome is the job as the last try found it.
    /// [`NewDue::Shift`] is relative and would shift twice: it is never retried, and an
    /// error after which it may have been applied is returned as is.
    pub async fn reschedule(&self, key: &str, due: NewDue) -> Result<RescheduleOutcome> {
        let key = JobKey::new(key)?;
        due.check()?;
        self.ensure().await?;
        let (queue, store) = (&self.queue_of(&key), &self.client.store);
        let repeatable = !matches!(due, NewDue::Shift(_));
        retry_harmless(|| store.reschedule(queue, &key, due), repeatable)
            .await
            .map(|(outcome, _)| outcome)
    }

    /// Everything known about a job, or `None`: times in store ms, the payload as MessagePack
    /// ([`JobInfo::decode`] decodes it).
    pub async fn job(&self, key: &str) -> Result<Option<JobInfo>> {
        let key = JobKey::new(key)?;
        self.ensure().await?;
        self.client.store.job(&self.queue_of(&key), &key).await
    }

    /// Pauses the topic: from the next wake-up of each fetcher (at once, for an idle one) no
    /// worker leases another of its jobs, until [`TopicClient::resume`]. Running jobs go on;
    /// waiting jobs keep their due times; enqueue, cancel and reschedule still work. Stored
    /// in the store, so it holds for every worker, and across their restarts. Returns the
    /// topic's settings as stored.
    pub async fn pause(&self) -> Result<TopicControl> {
        self.change(ControlChange {
            paused: Some(true),
            ..ControlChange::default()
        })
        .await
    }

    /// Resumes a paused topic; its fetchers are woken at once.
    pub async fn resume(&self) -> Result<TopicControl> {
        self.change(ControlChange {
            paused: Some(false),
            ..ControlChange::default()
        })
        .await
    }

    /// Sets (or with `None` removes) a rate limit across every worker of the topic: at most
    /// `rate.count` jobs leased per `rate.per`, enforced by the store's fetch with Redis time.
    /// Each partition holds an equal share (the count over `partitions × per`). Jobs held
    /// back start late; that lateness is not an error.
    pub async fn set_rate(&self, rate: Option<Rate>) -> Result<TopicControl> {
        if let Some(rate) = &rate {
            rate.check()?;
        }
        self.change(ControlChange {
            rate: Some(rate),
            ..ControlChange::default()
        })
        .await
    }

    /// Sets (or with `None` removes) a cap on the jobs of this topic running at once across
    /// every worker. Each partition enforces its own share (the shares add up to `cap`), so
    /// `cap` must be at least the partition count; with jobs spread unevenly over partitions
    /// fewer than `cap` may run at once, never more.
    pub async fn set_concurrency(&self, cap: Option<u32>) -> Result<TopicControl> {
        if let Some(cap) = cap {
            crate::control::check_concurrency(cap, self.partitions)?;
        }
        self.change(ControlChange {
            concurrency: Some(cap),
            ..ControlChange::default()
        })
        .await
    }

    /// The topic's pause, limits and throttle, as stored.
    pub async fn control(&self) -> Result<TopicControl> {
        self.change(ControlChange::default()).await
    }

    /// Applies `change` to every partition (each with its share of a limit), in order; each
    /// call is harmless to repeat, so each is retried through connection trouble.
    async fn change(&self, change: ControlChange) -> Result<TopicControl> {
        self.ensure().await?;
        let mut out = TopicControl::default();
        let store = &self.client.store;
        for queue in self.queues() {
            let share = ControlChange {
                paused: change.paused,
                rate: change.rate.map(|r| r.map(|r| r.share(self.partitions))),
                concurrency: change.concurrency.map(|c| {
                    c.map(|c| {
                        crate::control::concurrency_share(c, self.partitions, queue.partition)
                    })
                }),
                throttle: change.throttle,
            };
            let (state, _) = retry_harmless(|| store.control(&queue, &share), true).await?;
            out.paused |= state.paused;
            if queue.partition == 0 {
                out.rate = state.rate.map(|r| Rate {
                    count: r.count,
                    per: r.per / u32::from(self.partitions.max(1)),
                });
            }
            out.concurrency = match (out.concurrency, state.concurrency) {
                (Some(a), Some(b)) => Some(a + b),
                (a, b) => a.or(b),
            };
            out.throttled_until_ms = out.throttled_until_ms.max(state.throttled_until_ms);
        }
        Ok(out)
    }

    /// Depths and counters, summed over the topic's partitions.
    pub async fn stats(&self) -> Result<TopicStats> {
        self.ensure().await?;
        let mut total = TopicStats::default();
        for queue in self.queues() {
            let s = self.client.store.stats(&queue).await?;
            total.scheduled += s.scheduled;
            total.ready += s.ready;
            total.active += s.active;
            total.retry += s.retry;
            total.dead += s.dead;
            total.enqueued += s.enqueued;
            total.succeeded += s.succeeded;
            total.retried += s.retried;
            total.buried += s.buried;
            total.expired += s.expired;
            total.cancelled += s.cancelled;
            total.trimmed += s.trimmed;
            total.oldest_overdue_ms = total.oldest_overdue_ms.max(s.oldest_overdue_ms);
            total.overdue += s.overdue;
            total.paused |= s.paused;
            total.throttled |= s.throttled;
            total.throttles += s.throttles;
        }
        Ok(total)
    }

    /// One page of the topic's jobs in `state`, across all its partitions, merged in one
    /// order:
    ///
    /// - `scheduled` and `retry` by due time (a retry's next attempt), `active` by lease
    ///   deadline, `dead` by time of death; jobs of the same millisecond in the order the store
    ///   keeps them, then by key. Paging by [`Cursor`] is exact: the next page starts right
    ///   after the last job of this one, so however jobs move in between, no job is listed
    ///   twice and none that stayed in place is skipped, at any depth.
    /// - `ready` in queue order (the order workers take them) within a partition; partitions
    ///   are merged by due time. The queue moves as workers take jobs from its front, so a
    ///   later page may miss jobs that moved up past its cursor. (Redis only: a job made ready
    ///   again while a stale entry of it is still queued may be listed on two pages.)
    ///
    /// Each page costs one read-only call per partition, each reading at most `limit` jobs
    /// (`ready`: skipping at most a bounded number of stale entries), so a page reads up to
    /// `partitions × limit` jobs to return `limit`. `limit` is 1 to [`MAX_PAGE`](crate::inspect::MAX_PAGE); a page may
    /// hold fewer jobs and still have a next one: stop when [`JobPage::next`] is `None`.
    /// Listing writes nothing, so it works when Redis is at `maxmemory`.
    pub async fn list(&self, state: JobState, page: Page) -> Result<JobPage<JobInfo>> {
        page.check(state)?;
        self.ensure().await?;
        let mut parts = Vec::with_capacity(usize::from(self.partitions));
        for queue in self.queues() {
            let from = match &page.after {
                Some(cursor) => cursor.start_of(queue.partition, self.partitions)?,
                None => ListFrom::Start,
            };
            parts.push(
                self.client
                    .store
                    .list(&queue, state, &from, page.limit)
                    .await?,
            );
        }
        Ok(if state == JobState::Ready {
            merge_ready(parts, page.after.as_ref(), self.partitions, page.limit)?
        } else {
            merge_sorted(parts, state, page.limit)
        })
    }

    /// Dead jobs, oldest death first: `limit` of them after skipping `offset`. Reads
    /// `offset + limit` jobs of every partition; [`TopicClient::list`] with
    /// [`JobState::Dead`] pages at any depth for the cost of one page.
    pub async fn dead_jobs(&self, offset: usize, limit: usize) -> Result<Vec<JobInfo>> {
        self.ensure().await?;
        let mut all = Vec::new();
        for queue in self.queues() {
            // Each partition's first offset+limit are enough to find the merged page.
            let first = (self.client.store)
                .list(&queue, JobState::Dead, &ListFrom::Start, offset + limit)
                .await?;
            all.extend(first.jobs.into_iter().map(|(_, job)| job));
        }
        all.sort_by_key(|j| (j.died_ms, j.key.clone()));
        Ok(all.into_iter().skip(offset).take(limit).collect())
    }

    /// Moves dead jobs back to ready with their attempts reset; returns how many moved.
    pub async fn requeue_dead(&self, keys: &[&str]) -> Result<u64> {
        let groups = self.group(keys)?;
        self.ensure().await?;
        let mut moved = 0;
        for (queue, keys) in groups {
            moved += self
                .client
                .store
                .requeue_dead(&queue, &keys)
                .await?
                .into_iter()
                .filter(|m| *m)
                .count() as u64;
        }
        Ok(moved)
    }

    /// Deletes the named dead jobs; returns how many were deleted.
    pub async fn purge_dead(&self, keys: &[&str]) -> Result<u64> {
        let groups = self.group(keys)?;
        self.ensure().await?;
        let mut purged = 0;
        for (queue, keys) in groups {
            purged += self
                .client
                .store
                .purge_dead(&queue, &keys, keys.len())
                .await?;
        }
        Ok(purged)
    }

    /// Deletes every dead job of the topic, in bounded batches; returns how many.
    pub async fn purge_all_dead(&self) -> Result<u64> {
        self.ensure().await?;
        let mut purged = 0;
        for queue in self.queues() {
            // Bounded: each round deletes up to 1000; stop when a round deletes nothing.
            for _ in 0..1_000_000 {
                let n = self.client.store.purge_dead(&queue, &[], 1000).await?;
                purged += n;
                if n == 0 {
                    break;
                }
            }
        }
        Ok(purged)
    }

    fn group(&self, keys: &[&str]) -> Result<Vec<(Queue, Vec<JobKey>)>> {
        let mut groups: HashMap<u16, Vec<JobKey>> = HashMap::new();
        for k in keys {
            let key = JobKey::new(*k)?;
            groups
                .entry(key.partition(self.partitions))
                .or_default()
                .push(key);
        }
        Ok(groups
            .into_iter()
            .map(|(p, keys)| (Queue::new(self.topic.clone(), p), keys))
            .collect())
    }
}

/// Merges the partitions' parts of a time-ordered listing: the first `limit` by place. The
/// next page starts after the last one taken, if anything is left beyond it.
fn merge_sorted(parts: Vec<ListChunk>, state: JobState, limit: usize) -> JobPage<JobInfo> {
    let more = parts.iter().any(|p| p.more);
    let mut all: Vec<(ListPos, JobInfo)> = parts.into_iter().flat_map(|p| p.jobs).collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    let left_over = all.len() > limit;
    all.truncate(limit);
    let next = match all.last() {
        Some((pos, _)) if more || left_over => Some(Cursor::sorted(state, pos.clone())),
        _ => None,
    };
    JobPage {
        jobs: all.into_iter().map(|(_, info)| info).collect(),
        next,
    }
}

/// Merges the partitions' parts of the `ready` listing: each partition's jobs stay in queue
/// order; the next job is the earliest due of the partitions' next ones. The cursor keeps,
/// per partition, the queue position after the last job taken (or where its call stopped).
fn merge_ready(
    parts: Vec<ListChunk>,
    after: Option<&Cursor>,
    partitions: u16,
    limit: usize,
) -> Result<JobPage<JobInfo>> {
    let mut next = Vec::with_capacity(parts.len());
    let mut heads = Vec::with_capacity(parts.len());
    for (p, part) in parts.iter().enumerate() {
        let start = match after {
            Some(c) => match c.start_of(p as u16, partitions)? {
                ListFrom::Index(i) => i,
                _ => 0,
            },
            None => 0,
        };
        next.push(start);
        heads.push(part.jobs.iter().peekable());
    }
    let mut jobs = Vec::new();
    while jobs.len() < limit {
        let pick = heads
            .iter_mut()
            .enumerate()
            .filter_map(|(p, h)| h.peek().map(|(_, info)| (info.due_ms, p)))
            .min();
        let Some((_, p)) = pick else { break };
        let Some((pos, info)) = heads[p].next() else {
            break;
        };
        next[p] = pos.order.0 + 1;
        jobs.push(info.clone());
    }
    let mut more = false;
    for (p, (part, head)) in parts.iter().zip(heads.iter_mut()).enumerate() {
        if head.peek().is_some() {
            more = true;
        } else {
            // Everything this partition returned was taken: resume where its call stopped.
            next[p] = next[p].max(part.next_index);
            more |= part.more;
        }
    }
    Ok(JobPage {
        jobs,
        next: more.then(|| Cursor::ready(next)),
    })
}

impl BulkStored {
    fn new(entries: Vec<Option<Enqueued>>) -> Self {
        BulkStored {
            stored: entries.iter().flatten().count(),
            len: entries.len(),
            entries: Arc::new(entries),
        }
    }

    /// One entry per job of the bulk, in the order given: `Some` (its key, generated keys
    /// too, and its outcome) for a job that was stored, `None` for one that was not.
    pub fn outcomes(&self) -> &[Option<Enqueued>] {
        self.entries
            .downcast_ref::<Vec<Option<Enqueued>>>()
            .map_or(&[], Vec::as_slice)
    }
}
