//! The worker: builds the runtime for the registered handlers, runs it, and stops it in order.
//!
//! Start-up:
//! 1. resolve the handlers (`#[delayed_job]` registrations, filtered by `.topics(…)`): a topic
//!    registered twice is an error naming both source locations, and so is a handler whose
//!    declared shared data (`#[delayed_job(data(…))]`) was not given; each handler is logged;
//! 2. [`Worker::start`] checks each topic's partition count against the store's record
//!    (`Client::check_topic`: one round trip per topic, recording the count if the topic has
//!    none; a topic whose count the client did not configure adopts the recorded one, so its
//!    fetchers cover every partition the producers use). A refused topic — a configured count
//!    that differs (`Error::TopicMismatch`), or an error retrying cannot fix, such as a Redis
//!    user without the right to run scripts — fails the start with a [`WorkerError`] naming
//!    the topic, as a server that cannot bind its port does; with
//!    [`WorkerBuilder::skip_refused_topics`] the refused topic's fetchers stay stopped
//!    instead (logged at ERROR, a permanent error in the health) and the other topics run.
//!    A store that cannot be reached does not fail the start: that topic's fetchers retry
//!    their check like a failing fetch, so a worker started while Redis is down begins once
//!    Redis is back;
//! 3. start the completer, the lease keeper, and one fetcher per topic partition.
//!
//! Shutdown, in this order (two phases):
//! 1. **quiet** — fetchers stop; no new job is leased;
//! 2. **drain** — running handlers get until the shutdown timeout to finish; their outcomes
//!    are written as usual and leases are kept alive meanwhile;
//! 3. **stop** — shortly before the deadline, handlers still running are cancelled (their
//!    `JobContext` says so), at the deadline those still running are aborted, and their jobs
//!    are released back to the front of `ready` without spending the attempt, for another
//!    worker to pick up (a failure returned after the cancellation is not recorded);
//! 4. the completer writes what is left, then the lease keeper stops.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use dq_core::{Client, JobDescriptor, JobKey, SharedData, Store, TopicMeta, WorkerInfo};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::completer::Completer;
use crate::dead::{DeadJob, DeadLetters, OnDead};
use crate::error::WorkerError;
use crate::fetcher::{FetchSettings, Fetcher};
use crate::health::{FetcherHealth, MissingDataLog, WorkerHealth};
use crate::heartbeat::{BeatHealth, Heartbeat};
use crate::in_flight::InFlight;
use crate::lease_keeper::LeaseKeeper;
use crate::registry::{self, Selection, TopicRuntime};
use crate::runner::RunnerShared;
use crate::scheduler::Scheduler;

/// Configures a [`Worker`].
pub struct WorkerBuilder {
    client: Client,
    data: SharedData,
    only: Option<HashSet<String>>,
    concurrency: HashMap<String, usize>,
    default_concurrency: usize,
    lease: Duration,
    shutdown_timeout: Duration,
    max_fetch_batch: usize,
    idle_wait: Duration,
    missing_data_delay: Duration,
    on_dead: Option<OnDead>,
    extra: Vec<&'static JobDescriptor>,
    registered: bool,
    heartbeat: Duration,
    schedule_poll: Duration,
    skip_refused: bool,
    /// The layers around every handler run, in the order added (`middleware.rs`).
    layers: Vec<crate::middleware::Wrap>,
}

impl std::fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("only", &self.only)
            .field("lease", &self.lease)
            .field("shutdown_timeout", &self.shutdown_timeout)
            .field("layers", &self.layers.len())
            .finish_non_exhaustive()
    }
}

impl WorkerBuilder {
    /// Shares a value with every handler, found by type with `ctx.data::<T>()`; a second
    /// value of the same type replaces the first.
    ///
    /// A handler that declares what it takes — `#[delayed_job(data(Db))]` — is checked
    /// against these at [`build`](WorkerBuilder::build): a worker that runs it without a `Db`
    /// does not start ([`WorkerError::MissingData`], naming the handler and the type). A
    /// handler that asks for a type it did not declare and the worker lacks is caught when
    /// it runs: its job is deferred without spending an attempt (see
    /// [`WorkerBuilder::missing_data_delay`]), never buried, logged at ERROR and listed in
    /// [`WorkerHealth::missing_data`].
    pub fn data<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.data.insert(value);
        self
    }

    /// Runs only these topics (default: every registered handler).
    pub fn topics<I, S>(mut self, topics: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.only = Some(topics.into_iter().map(Into::into).collect());
        self
    }

    /// Overrides one topic's pool size (its handler's `concurrency`).
    pub fn concurrency(mut self, topic: impl Into<String>, jobs: usize) -> Self {
        self.concurrency.insert(topic.into(), jobs);
        self
    }

    /// Pool size of topics whose handler sets none (default 10).
    pub fn default_concurrency(mut self, jobs: usize) -> Self {
        self.default_concurrency = jobs;
        self
    }

    /// How long a leased job stays owned without an extension (default 30 s). Leases are
    /// extended every third of this while the handler runs; a worker that stops for longer
    /// (crash, pause, partition) loses its jobs to others.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long shutdown waits for running handlers before releasing their jobs (default 30 s).
    ///
    /// Handlers still running a little before the deadline — `min(1 s, timeout / 4)` before
    /// it — are told to stop (`ctx.cancelled()`), and those still running at the deadline are
    /// aborted, so handlers that ignore cancellation do not hold shutdown up. A success
    /// returned in that window is acknowledged; a failure is not recorded, and the job is
    /// released without spending its attempt. [`WorkerHandle::shutdown`] returns within this
    /// timeout plus the store calls that follow it (releasing the jobs, writing the outcomes
    /// already produced): a few milliseconds while the store answers, and each call is bounded
    /// by the client's response timeout and retries when it does not.
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// Most jobs one fetch call leases (default 100; never more than the pool's size).
    pub fn max_fetch_batch(mut self, jobs: usize) -> Self {
        self.max_fetch_batch = jobs;
        self
    }

    /// Longest an idle fetcher waits before asking the store again, bounding the cost of a
    /// lost wake-up (default 5 s). An idle worker sends one command per this period per
    /// partition, and its wake-up listener one per minute.
    pub fn idle_wait(mut self, wait: Duration) -> Self {
        self.idle_wait = wait;
        self
    }

    /// How long a job is deferred, without spending its attempt, when its handler asked for
    /// shared data (`ctx.data::<T>()`) this worker was not given (default 30 s; at least
    /// 100 ms). Long enough that a misdeployed worker does not spin on the job; a worker that
    /// has the data runs it once it is due again.
    pub fn missing_data_delay(mut self, delay: Duration) -> Self {
        self.missing_data_delay = delay;
        self
    }

    /// Longest the worker's scheduler sleeps without looking at the schedules (default
    /// 10 min; at least 10 ms). It wakes by itself for the ticks it knows of, at once for
    /// schedules stored through this worker's own client, and at the next heartbeat for a
    /// change made by another process (the heartbeat's reply says the schedules changed); this
    /// period only covers a process that died between storing a schedule and announcing it.
    pub fn schedule_poll(mut self, every: Duration) -> Self {
        self.schedule_poll = every;
        self
    }

    /// How often the worker writes its heartbeat to the store (default 10 s; at least 50 ms).
    /// The heartbeat lists it in [`Client::workers`](dq_core::Client::workers) and lasts
    /// three beats: a worker that stops beating (crashed, frozen, cut off) drops out of the
    /// list within three beats (30 s by default). Each beat also tells
    /// [`WorkerHandle::health`] whether the worker reaches the store, and the scheduler
    /// whether another process changed the schedules.
    pub fn heartbeat(mut self, every: Duration) -> Self {
        self.heartbeat = every;
        self
    }

    /// Calls `hook` each time this worker moves a job to the dead queue — the place to alert
    /// someone. Runs on its own task; a slow hook delays nothing else.
    pub fn on_dead<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(DeadJob) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.on_dead = Some(Arc::new(move |job| Box::pin(hook(job))));
        self
    }

    /// Starts even when a topic is refused at start-up (see [`Worker::start`]): the refused
    /// topic's fetchers stay stopped — logged at ERROR and shown in [`WorkerHandle::health`]
    /// as a permanent error — and the worker runs its other topics. By default a refused
    /// topic fails [`Worker::start`] and [`Worker::run_until`].
    pub fn skip_refused_topics(mut self) -> Self {
        self.skip_refused = true;
        self
    }

    /// Wraps every handler run of this worker in a tower [`Layer`](crate::middleware::Layer):
    /// its service gets each run as a [`JobRequest`](crate::middleware::JobRequest) (the
    /// job's context and payload) and answers with the handler's outcome, so it can time or
    /// log runs, refuse one (its `JobError` takes the handler's failure path: retry on the
    /// topic's policy, then dead), or change the outcome. See [`crate::middleware`].
    ///
    /// Layers apply to every handler of the worker in the order added: **the first added is
    /// the outermost** (it sees the request first and the response last), as with
    /// `tower::ServiceBuilder`, which is itself a layer. A worker without layers pays nothing
    /// for them.
    pub fn layer<L>(mut self, layer: L) -> Self
    where
        L: tower::Layer<crate::middleware::JobService> + Send + Sync + 'static,
        L::Service: tower::Service<
                crate::middleware::JobRequest,
                Response = dq_core::Returned,
                Error = dq_core::JobError,
            > + Clone
            + Send
            + 'static,
        <L::Service as tower::Service<crate::middleware::JobRequest>>::Future: Send + 'static,
    {
        self.layers.push(Arc::new(move |inner| {
            crate::middleware::JobService::new(layer.layer(inner))
        }));
        self
    }

    /// Adds a handler by its descriptor, beside those registered by `#[delayed_job]`.
    pub fn job(mut self, descriptor: &'static JobDescriptor) -> Self {
        self.extra.push(descriptor);
        self
    }

    /// Ignores the handlers registered by `#[delayed_job]`; only those added with
    /// [`WorkerBuilder::job`] run.
    pub fn without_registered_jobs(mut self) -> Self {
        self.registered = false;
        self
    }

    /// Checks the settings and resolves the handlers: fails with a typed [`WorkerError`] on a
    /// topic registered twice, a topic named that has no handler, or shared data a handler
    /// declares (`#[delayed_job(data(…))]`) and [`WorkerBuilder::data`] did not give.
    pub fn build(self) -> Result<Worker, WorkerError> {
        if self.lease < Duration::from_millis(100) {
            return Err(WorkerError::InvalidSetting(
                "lease must be at least 100 ms".into(),
            ));
        }
        if self.default_concurrency == 0 || self.max_fetch_batch == 0 {
            return Err(WorkerError::InvalidSetting(
                "concurrency and fetch batch must be at least 1".into(),
            ));
        }
        if self.idle_wait < Duration::from_millis(10) {
            return Err(WorkerError::InvalidSetting(
                "idle_wait must be at least 10 ms".into(),
            ));
        }
        if self.heartbeat < Duration::from_millis(50) {
            return Err(WorkerError::InvalidSetting(
                "heartbeat must be at least 50 ms".into(),
            ));
        }
        if self.schedule_poll < Duration::from_millis(10) {
            return Err(WorkerError::InvalidSetting(
                "schedule_poll must be at least 10 ms".into(),
            ));
        }
        if self.missing_data_delay < Duration::from_millis(100) {
            return Err(WorkerError::InvalidSetting(
                "missing_data_delay must be at least 100 ms".into(),
            ));
        }
        let registered: Box<dyn Iterator<Item = &'static JobDescriptor>> = if self.registered {
            Box::new(dq_core::registered_jobs())
        } else {
            Box::new(std::iter::empty())
        };
        let topics = registry::resolve(
            registered,
            Selection {
                extra: &self.extra,
                only: self.only.as_ref(),
                concurrency: &self.concurrency,
                default_concurrency: self.default_concurrency,
                data: &self.data,
            },
            self.client.config(),
        )?;
        Ok(Worker {
            store: self.client.store().clone(),
            client: self.client,
            topics,
            data: Arc::new(self.data),
            settings: FetchSettings {
                lease: self.lease,
                max_batch: self.max_fetch_batch,
                idle_wait: self.idle_wait,
            },
            shutdown_timeout: self.shutdown_timeout,
            missing_data_delay: self.missing_data_delay,
            on_dead: self.on_dead,
            heartbeat: self.heartbeat,
            schedule_poll: self.schedule_poll,
            skip_refused: self.skip_refused,
            middleware: crate::middleware::Stack::of(&self.layers),
            retention_pending: None,
            shapes_pending: None,
        })
    }
}

/// Runs the registered handlers inside the application's own process.
///
/// ```no_run
/// # async fn demo(client: dq_core::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use dq_worker::Worker;
/// let worker = Worker::builder(client).build()?;
/// worker.run_until(async { let _ = tokio::signal::ctrl_c().await; }).await?;
/// # Ok(()) }
/// ```
pub struct Worker {
    store: Arc<dyn Store>,
    /// For the topic checks: its cache of each topic's record is shared with the producers
    /// that use the same client.
    client: Client,
    topics: Vec<Arc<TopicRuntime>>,
    data: Arc<SharedData>,
    settings: FetchSettings,
    shutdown_timeout: Duration,
    missing_data_delay: Duration,
    on_dead: Option<OnDead>,
    heartbeat: Duration,
    schedule_poll: Duration,
    skip_refused: bool,
    /// The layers around every handler, built once (`None`: none added).
    middleware: Option<Arc<crate::middleware::Stack>>,
    /// The topics whose declared retention `start` could not write yet (`None`: not
    /// started through `start`, so every declared one).
    retention_pending: Option<Vec<Arc<TopicRuntime>>>,
    /// The topics whose payload shape `start` could not publish yet (`None`: not started
    /// through `start`, so every one).
    shapes_pending: Option<Vec<Arc<TopicRuntime>>>,
}

/// Publishes the JSON shape of a handler's payload for its topic (`None`: deletes the one
/// stored, its type's shape cannot be known), for the HTTP API to check payloads against.
/// The last worker to start wins.
async fn publish_shape(store: &dyn Store, topic: &TopicRuntime) -> dq_core::Result<()> {
    let shape = (topic.descriptor.shape)();
    store.put_payload_shape(&topic.topic, shape.as_ref()).await
}

/// What a handler declares of its topic's control settings: which finished jobs it keeps,
/// how many events it records, its `max_delay` and its groups' default limits.
#[derive(Clone, Copy, Debug)]
struct Declared {
    keep: Option<dq_core::KeepDecl>,
    events_kept: Option<u64>,
    max_delay_ms: Option<u64>,
    group_limits: Option<dq_core::GroupLimitsDecl>,
}

impl Declared {
    /// What `descriptor` declares, or `None` when it declares nothing to write.
    fn of(descriptor: &dq_core::JobDescriptor) -> Option<Declared> {
        (descriptor.keep.is_some()
            || descriptor.events_kept.is_some()
            || descriptor.max_delay_ms.is_some()
            || descriptor.group_limits.is_some())
        .then_some(Declared {
            keep: descriptor.keep,
            events_kept: descriptor.events_kept,
            max_delay_ms: descriptor.max_delay_ms,
            group_limits: descriptor.group_limits,
        })
    }
}

/// Writes the retention, events, `max_delay` and group limits a handler declares to its topic
/// (every partition).
async fn write_declared(
    client: &Client,
    topic: &dq_core::Topic,
    declared: Declared,
) -> dq_core::Result<()> {
    let topic = client.topic(topic.as_str())?;
    if let Some(keep) = declared.keep {
        topic.set_retention(Some(keep.retention())).await?;
    }
    if let Some(max_kept) = declared.events_kept {
        topic
            .set_events(Some(dq_core::EventsPolicy { max_kept }))
            .await?;
    }
    if let Some(ms) = declared.max_delay_ms {
        topic
            .set_max_delay(Some(std::time::Duration::from_millis(ms)))
            .await?;
    }
    if let Some(limits) = declared.group_limits {
        topic.set_group_limits(None, Some(limits.limits())).await?;
    }
    Ok(())
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let topics: Vec<&str> = self.topics.iter().map(|t| t.topic.as_str()).collect();
        f.debug_struct("Worker")
            .field("topics", &topics)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// Starts configuring a worker that takes jobs through `client`'s store.
    pub fn builder(client: Client) -> WorkerBuilder {
        WorkerBuilder {
            client,
            data: SharedData::default(),
            only: None,
            concurrency: HashMap::new(),
            default_concurrency: 10,
            lease: Duration::from_secs(30),
            shutdown_timeout: Duration::from_secs(30),
            max_fetch_batch: 100,
            idle_wait: Duration::from_secs(5),
            missing_data_delay: Duration::from_secs(30),
            on_dead: None,
            extra: Vec::new(),
            registered: true,
            heartbeat: crate::heartbeat::DEFAULT_EVERY,
            schedule_poll: crate::scheduler::DEFAULT_POLL,
            skip_refused: false,
            layers: Vec::new(),
        }
    }

    /// The topics this worker runs.
    pub fn topics(&self) -> impl Iterator<Item = &str> {
        self.topics.iter().map(|t| t.topic.as_str())
    }

    /// Checks every topic of this worker against the store's record of its partition count
    /// (recording the worker's count for a topic that has none), and returns each topic's
    /// metadata; fails with the first error, e.g. [`dq_core::Error::TopicMismatch`] for a
    /// topic this worker is configured with a different count for, or a store that cannot
    /// be reached (retried inside first, as every client call is). [`Worker::start`] checks
    /// too, but lets a store that cannot be reached pass (its fetchers wait for it); call
    /// this first to fail on that as well:
    ///
    /// ```no_run
    /// # async fn demo(client: dq_core::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let worker = dq_worker::Worker::builder(client).build()?;
    /// worker.check_topics().await?; // fail fast: a mismatch, or Redis unreachable
    /// worker.run_until(async { let _ = tokio::signal::ctrl_c().await; }).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// The answers are kept by the client: starting after this costs no further round trip.
    pub async fn check_topics(&self) -> dq_core::Result<Vec<TopicMeta>> {
        let mut metas = Vec::with_capacity(self.topics.len());
        for topic in &self.topics {
            metas.push(self.client.check_topic(topic.topic.as_str()).await?);
        }
        Ok(metas)
    }

    /// Starts the worker ([`Worker::start`]: a refused topic is an error), runs until
    /// `signal` completes, then shuts down gracefully (see the module docs).
    pub async fn run_until(
        self,
        signal: impl Future<Output = ()>,
    ) -> Result<ShutdownReport, WorkerError> {
        let handle = self.start().await?;
        signal.await;
        Ok(handle.shutdown().await)
    }

    /// Checks every topic against the store's record (see the module docs), then starts the
    /// worker on the current tokio runtime and returns a handle to stop it.
    ///
    /// A topic whose partition count this worker's client did not configure adopts the
    /// recorded count. A topic refused — [`WorkerError::TopicMismatch`] for a configured
    /// count that is not the recorded one, [`WorkerError::TopicCheck`] for another error
    /// retrying cannot fix — fails the start, and nothing is started; with
    /// [`WorkerBuilder::skip_refused_topics`] the worker starts without that topic's jobs. A
    /// store that cannot be reached is no error here: the fetchers retry until it is back.
    pub async fn start(mut self) -> Result<WorkerHandle, WorkerError> {
        for topic in &mut self.topics {
            let checked =
                crate::topic_check::at_start(&self.client, &topic.topic, self.skip_refused).await?;
            if let Some(partitions) = checked {
                // Built by `build` and held by this worker alone until it spawns its tasks.
                let runtime = Arc::get_mut(topic).ok_or_else(|| {
                    WorkerError::InvalidSetting("a topic's runtime is shared before start".into())
                })?;
                runtime.partitions = partitions;
                runtime.dead_limits = self
                    .client
                    .config()
                    .partition_dead_limits(runtime.topic.as_str(), partitions);
            }
        }
        // The retention and events its handlers declare, before the first job can finish. A
        // store that cannot be reached is no error here (the fetchers wait for it); the write
        // is then retried in the background, and until it lands the topic keeps what it kept
        // (and records what it recorded) before.
        let mut unwritten = Vec::new();
        for topic in &self.topics {
            if let Some(declared) = Declared::of(topic.descriptor)
                && let Err(e) = write_declared(&self.client, &topic.topic, declared).await
            {
                tracing::warn!(topic = %topic.topic, error = %e, "could not write the topic's retention or events yet; retrying in the background");
                unwritten.push(topic.clone());
            }
        }
        self.retention_pending = Some(unwritten);
        // The shape of each handler's payload, for `dq serve` to check JSON payloads against:
        // best effort, retried in the background as the retention is.
        let mut unpublished = Vec::new();
        for topic in &self.topics {
            if let Err(e) = publish_shape(self.store.as_ref(), topic).await {
                tracing::warn!(topic = %topic.topic, error = %e, "could not publish the topic's payload shape yet; retrying in the background");
                unpublished.push(topic.clone());
            }
        }
        self.shapes_pending = Some(unpublished);
        Ok(self.spawn())
    }

    /// Starts the worker without waiting for its topic checks, for a caller that cannot
    /// await (the synchronous `dq::testing::TestQueue`): each topic's fetchers check it
    /// themselves, and a refused topic is handled as [`WorkerBuilder::skip_refused_topics`]
    /// says. Prefer [`Worker::start`].
    #[doc(hidden)]
    pub fn spawn(self) -> WorkerHandle {
        let pending: Vec<(dq_core::Topic, Declared)> = match &self.retention_pending {
            Some(topics) => topics.iter(),
            None => self.topics.iter(),
        }
        .filter_map(|t| Some((t.topic.clone(), Declared::of(t.descriptor)?)))
        .collect();
        if !pending.is_empty() {
            let client = self.client.clone();
            tokio::spawn(async move {
                use backon::{ExponentialBuilder, Retryable};
                for (topic, declared) in pending {
                    let written = (|| write_declared(&client, &topic, declared))
                        .retry(
                            ExponentialBuilder::default()
                                .with_max_delay(Duration::from_secs(5))
                                .with_max_times(120),
                        )
                        .await;
                    if let Err(e) = written {
                        tracing::error!(topic = %topic, error = %e, "could not write the topic's retention or events: its finished jobs are not kept, or its events not recorded, as declared");
                    }
                }
            });
        }
        let shapes: Vec<Arc<TopicRuntime>> = match &self.shapes_pending {
            Some(topics) => topics.clone(),
            None => self.topics.clone(),
        };
        if !shapes.is_empty() {
            let store = self.store.clone();
            tokio::spawn(async move {
                use backon::{ExponentialBuilder, Retryable};
                for topic in shapes {
                    let published = (|| publish_shape(store.as_ref(), &topic))
                        .retry(
                            ExponentialBuilder::default()
                                .with_max_delay(Duration::from_secs(5))
                                .with_max_times(120),
                        )
                        .await;
                    if let Err(e) = published {
                        tracing::error!(topic = %topic.topic, error = %e, "could not publish the topic's payload shape: the HTTP API does not check its payloads");
                    }
                }
            });
        }
        let in_flight = InFlight::default();
        let by_name: HashMap<String, Arc<TopicRuntime>> = self
            .topics
            .iter()
            .map(|t| (t.topic.to_string(), t.clone()))
            .collect();
        let dead = DeadLetters::new(self.on_dead.clone());
        let mut info = WorkerInfo::new(
            self.topics.iter().map(|t| t.topic.to_string()).collect(),
            self.topics.iter().map(|t| t.concurrency).sum(),
            dq_core::job::unix_ms(std::time::SystemTime::now()),
        );
        info.reads_format = self.store.formats().reads();
        let (completer, sender) = Completer::new(
            self.store.clone(),
            in_flight.clone(),
            Arc::new(by_name),
            dead.clone(),
            info.id.clone().into(),
        );
        let completer = tokio::spawn(completer.run());
        let keeper_stop = CancellationToken::new();
        let keeper = tokio::spawn(
            LeaseKeeper {
                store: self.store.clone(),
                in_flight: in_flight.clone(),
                lease: self.settings.lease,
                stop: keeper_stop.clone(),
            }
            .run(),
        );
        let hard_stop = CancellationToken::new();
        let missing_data = MissingDataLog::default();
        let relay_wake = Arc::new(tokio::sync::Notify::new());
        let shared = Arc::new(RunnerShared {
            relay_wake: relay_wake.clone(),
            data: self.data.clone(),
            store: self.store.clone(),
            max_result: self.client.config().max_payload,
            in_flight: in_flight.clone(),
            completer: sender,
            hard_stop: hard_stop.clone(),
            stop_grace: stop_grace(self.shutdown_timeout),
            missing_data_delay: self.missing_data_delay,
            missing_data: missing_data.clone(),
            middleware: self.middleware.clone(),
        });
        let stop = CancellationToken::new();
        let runners = TaskTracker::new();
        let mut fetchers = Vec::new();
        let mut health = Vec::new();
        for topic in &self.topics {
            for partition in 0..topic.partitions {
                let fetcher_health = Arc::new(std::sync::Mutex::new(FetcherHealth::new(
                    topic.topic.as_str(),
                    partition,
                )));
                health.push(fetcher_health.clone());
                let fetcher = Fetcher {
                    store: self.store.clone(),
                    client: self.client.clone(),
                    queue: dq_core::Queue::new(topic.topic.clone(), partition),
                    topic: topic.clone(),
                    shared: shared.clone(),
                    settings: self.settings.clone(),
                    stop: stop.clone(),
                    runners: runners.clone(),
                    dead: dead.clone(),
                    health: fetcher_health,
                };
                fetchers.push(tokio::spawn(fetcher.run()));
            }
        }
        self.client
            .set_process_role(dq_core::format::ProcessRole::Worker);
        let beat_stop = CancellationToken::new();
        let in_flight_probe = in_flight.clone();
        let beat_health = Arc::new(std::sync::Mutex::new(BeatHealth::default()));
        let worker_id = info.id.clone();
        let beat = tokio::spawn(
            Heartbeat {
                store: self.store.clone(),
                info,
                in_flight: in_flight.clone(),
                every: self.heartbeat,
                stop: beat_stop.clone(),
                health: beat_health.clone(),
                client: self.client.clone(),
            }
            .run(),
        );
        tracing::info!(
            id = %worker_id,
            topics = self.topics.len(),
            fetchers = fetchers.len(),
            "worker started"
        );
        // The periodic schedules of this worker's topics: stopped with the fetchers (phase 1
        // of shutdown), so a stopping worker enqueues no further tick.
        fetchers.push(tokio::spawn(
            Scheduler {
                client: self.client.clone(),
                topics: self.topics.iter().map(|t| t.topic.to_string()).collect(),
                poll: self.schedule_poll,
                stop: stop.clone(),
                declared: self
                    .topics
                    .iter()
                    .filter_map(|t| Some((t.topic.to_string(), t.descriptor.schedule?)))
                    .collect(),
            }
            .run(),
        ));
        // The batch relay of this worker's partitions: stopped with the fetchers.
        fetchers.push(tokio::spawn(
            crate::relay::Relay {
                client: self.client.clone(),
                queues: self
                    .topics
                    .iter()
                    .flat_map(|t| {
                        (0..t.partitions).map(|p| dq_core::Queue::new(t.topic.clone(), p))
                    })
                    .collect(),
                stop: stop.clone(),
                wake: relay_wake,
            }
            .run(),
        ));
        WorkerHandle {
            store: self.store,
            stop,
            hard_stop,
            fetchers,
            runners,
            shared: Some(shared),
            in_flight,
            completer,
            keeper,
            keeper_stop,
            shutdown_timeout: self.shutdown_timeout,
            probe: HealthProbe {
                fetchers: Arc::new(health),
                in_flight: in_flight_probe,
                missing_data,
                worker_id: worker_id.into(),
                beat: beat_health,
            },
            dead,
            beat,
            beat_stop,
        }
    }
}

/// How long before the shutdown deadline running handlers are told to stop: they are aborted
/// at the deadline, so shutdown does not overrun it by a grace period.
fn stop_grace(shutdown_timeout: Duration) -> Duration {
    (shutdown_timeout / 4).min(Duration::from_secs(1))
}

/// What shutdown did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Jobs still running at the deadline, released back to `ready` for another worker.
    pub released: usize,
    /// Whether every running handler finished before the deadline.
    pub drained: bool,
}

/// A running worker. Call [`WorkerHandle::shutdown`] to stop it gracefully; dropping the
/// handle leaves the worker running until the runtime ends (leases then expire and the jobs
/// run elsewhere, so nothing is lost — but shutdown is kinder).
pub struct WorkerHandle {
    store: Arc<dyn Store>,
    stop: CancellationToken,
    hard_stop: CancellationToken,
    fetchers: Vec<JoinHandle<()>>,
    runners: TaskTracker,
    shared: Option<Arc<RunnerShared>>,
    in_flight: InFlight,
    completer: JoinHandle<()>,
    keeper: JoinHandle<()>,
    keeper_stop: CancellationToken,
    shutdown_timeout: Duration,
    probe: HealthProbe,
    dead: DeadLetters,
    beat: JoinHandle<()>,
    beat_stop: CancellationToken,
}

/// A cheap, cloneable reader of a running worker's health, for a probe endpoint that lives
/// apart from the [`WorkerHandle`] (which shutdown consumes): see
/// [`WorkerHandle::health_probe`]. After shutdown it reports the worker's last state.
#[derive(Clone)]
pub struct HealthProbe {
    fetchers: Arc<Vec<Arc<std::sync::Mutex<FetcherHealth>>>>,
    in_flight: InFlight,
    missing_data: MissingDataLog,
    worker_id: Arc<str>,
    beat: Arc<std::sync::Mutex<BeatHealth>>,
}

impl std::fmt::Debug for HealthProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HealthProbe")
            .field("worker_id", &self.worker_id)
            .finish_non_exhaustive()
    }
}

impl HealthProbe {
    /// The worker's health now: see [`WorkerHandle::health`].
    pub fn health(&self) -> WorkerHealth {
        let beat = self
            .beat
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        WorkerHealth {
            worker_id: self.worker_id.to_string(),
            reaches_store: beat.last_ok,
            last_heartbeat_at: beat.last_ok_at,
            heartbeat_error: beat.last_error,
            fetchers: self
                .fetchers
                .iter()
                .map(|h| {
                    h.lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .clone()
                })
                .collect(),
            running: self.in_flight.len(),
            missing_data: self.missing_data.snapshot(),
        }
    }
}

impl std::fmt::Debug for WorkerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerHandle")
            .field("fetchers", &self.fetchers.len())
            .field("running", &self.in_flight.len())
            .finish_non_exhaustive()
    }
}

impl WorkerHandle {
    /// This worker's id, as [`Client::workers`](dq_core::Client::workers) lists it.
    pub fn id(&self) -> &str {
        &self.probe.worker_id
    }

    /// How many jobs are running now.
    pub fn running(&self) -> usize {
        self.in_flight.len()
    }

    /// Completes the next time a job starts or finishes on this worker (after this call).
    ///
    /// For tests and tools that wait for the worker without polling: with tokio's clock paused,
    /// waiting on this lets virtual time jump straight to the next timer a running handler
    /// waits on, however far ahead.
    pub fn running_changed(&self) -> impl Future<Output = ()> + Send + 'static {
        self.in_flight.next_change()
    }

    /// How the worker is doing: each fetcher's last store call, the jobs running, and the
    /// shared data its handlers asked for and it lacks. A fetcher whose calls keep failing
    /// runs no job of its partition; one failing with an error retrying cannot fix (see
    /// [`FetcherHealth::last_error_permanent`]) needs an operator, and so does any entry in
    /// [`WorkerHealth::missing_data`] (a misdeployed worker: its jobs are deferred, not run).
    ///
    /// For a Kubernetes probe: [`WorkerHealth::reaches_store`] (the last heartbeat got
    /// through) for liveness, [`WorkerHealth::is_healthy`] for readiness, and each fetcher's
    /// [`FetcherHealth::last_call_at`] to tell a stuck fetcher. No store call.
    pub fn health(&self) -> WorkerHealth {
        self.probe.health()
    }

    /// A cloneable reader of this worker's health, for an HTTP probe route that must not own
    /// the handle.
    pub fn health_probe(&self) -> HealthProbe {
        self.probe.clone()
    }

    /// Stops the worker: quiet, drain until the shutdown timeout, release the rest.
    pub async fn shutdown(mut self) -> ShutdownReport {
        let started = tokio::time::Instant::now();
        tracing::info!(running = self.in_flight.len(), "worker shutting down");
        // 1. quiet
        self.stop.cancel();
        for f in self.fetchers.drain(..) {
            let _ = f.await;
        }
        // 2. drain, until the grace before the deadline (counted from the start of shutdown)
        let deadline = started + self.shutdown_timeout;
        let grace = stop_grace(self.shutdown_timeout);
        self.runners.close();
        let drained = tokio::time::timeout_at(deadline - grace, self.runners.wait())
            .await
            .is_ok();
        // 3. stop: cancel what is still running, abort it at the deadline (each runner does,
        //    after its grace), release the jobs
        let mut released = 0;
        if !drained {
            self.hard_stop.cancel();
            // Runners end within their grace; the margin only covers a busy scheduler.
            let _ = tokio::time::timeout(grace + Duration::from_secs(1), self.runners.wait()).await;
            let mut by_queue: HashMap<dq_core::Queue, Vec<(JobKey, u64)>> = HashMap::new();
            for lease in self.in_flight.snapshot() {
                if !lease.is_finished() {
                    self.in_flight.remove(&lease.queue, lease.token);
                    by_queue
                        .entry(lease.queue.clone())
                        .or_default()
                        .push((lease.key.clone(), lease.token));
                }
            }
            for (queue, leases) in by_queue {
                match self.store.release(&queue, &leases).await {
                    Ok(done) => released += done.into_iter().filter(|d| *d).count(),
                    Err(e) => tracing::error!(
                        error = %e,
                        jobs = leases.len(),
                        "could not release jobs at shutdown; they run again when their leases expire"
                    ),
                }
            }
        }
        // 4. flush outcomes and dead-letter reports, then stop keeping leases
        self.shared.take();
        let _ = (&mut self.completer).await;
        self.dead.finish().await;
        self.keeper_stop.cancel();
        let _ = (&mut self.keeper).await;
        // Last: the worker is listed as live while it drains.
        self.beat_stop.cancel();
        let _ = (&mut self.beat).await;
        tracing::info!(drained, released, "worker stopped");
        ShutdownReport { released, drained }
    }
}
