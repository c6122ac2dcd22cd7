//! Testing your jobs without Redis and without waiting.
//!
//! [`TestQueue`] is a client and a worker on the embedded store, whose clock is tokio's. In a
//! test started with `#[tokio::test(start_paused = true)]`, time moves only when the test lets
//! it: [`TestQueue::advance`] lets "30 minutes" pass in microseconds, running every job at its
//! exact due time on the way, and [`TestQueue::run_until_idle`] plays out whole retry
//! schedules (a day of tiered retries takes a fraction of a second).
//!
//! ```no_run
//! # use std::time::Duration;
//! # #[dq::delayed_job(topic = "orders.close")]
//! # async fn close_order(order_id: u64) -> Result<(), dq::JobError> { Ok(()) }
//! #[tokio::test(start_paused = true)]
//! async fn unpaid_order_is_closed_after_30_minutes() {
//!     let queue = dq::testing::TestQueue::start(|worker| worker).unwrap();
//!     queue.client().enqueue::<close_order>(7).key("order-7").delay(Duration::from_secs(1800)).await.unwrap();
//!     queue.advance(Duration::from_secs(1800)).await;
//!     assert_eq!(queue.client().stats::<close_order>().await.unwrap().succeeded, 1);
//! }
//! ```

use std::time::Duration;

use dq_core::{Client, Job, JobInfo, JobState, MAX_PAGE, Page, TopicStats};
use dq_worker::{ShutdownReport, Worker, WorkerBuilder, WorkerError, WorkerHandle};

/// Most rounds [`TestQueue::settle`] takes before it reports that jobs never settle.
const SETTLE_ROUNDS: usize = 20_000;

/// Looks at the store between yields, in one round of [`TestQueue::settle`], before it waits.
const YIELDS_PER_ROUND: usize = 16;

/// Longest [`TestQueue::settle`] waits for a running handler to finish (virtual time, when
/// tokio's clock is paused): a handler may sleep for days, but not for ever.
pub const SETTLE_LIMIT: Duration = Duration::from_secs(30 * 24 * 3600);

/// A client and a running worker on the embedded store, with helpers to let time pass.
///
/// The worker runs every `#[delayed_job]` handler of the test binary unless the configure
/// closure given to [`TestQueue::start`] narrows it (`.topics([...])`), and gets test-friendly
/// defaults: long leases and idle waits (the embedded store wakes fetchers directly, so these
/// only bound how often timers fire while virtual time races ahead).
pub struct TestQueue {
    client: Client,
    topics: Vec<String>,
    worker: Option<WorkerHandle>,
}

impl std::fmt::Debug for TestQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestQueue")
            .field("topics", &self.topics)
            .finish_non_exhaustive()
    }
}

impl TestQueue {
    /// Starts a worker on a fresh embedded store; `configure` adds shared data, `on_dead`
    /// hooks, topic filters and so on (pass `|w| w` for the defaults).
    pub fn start(
        configure: impl FnOnce(WorkerBuilder) -> WorkerBuilder,
    ) -> Result<TestQueue, WorkerError> {
        TestQueue::start_on(Client::in_memory(), configure)
    }

    /// Like [`TestQueue::start`], on a given client (e.g. `Client::in_memory_with(config)`).
    pub fn start_on(
        client: Client,
        configure: impl FnOnce(WorkerBuilder) -> WorkerBuilder,
    ) -> Result<TestQueue, WorkerError> {
        let builder = Worker::builder(client.clone())
            .lease(Duration::from_secs(300))
            .idle_wait(Duration::from_secs(3600))
            // Rare: "400 days" of virtual time must not take millions of beats.
            .heartbeat(Duration::from_secs(3600))
            // Schedules stored through this client wake the scheduler at once; it sleeps
            // until each next tick by itself.
            .schedule_poll(Duration::from_secs(3600));
        let worker = configure(builder).build()?;
        let topics = worker.topics().map(str::to_owned).collect();
        Ok(TestQueue {
            client,
            topics,
            worker: Some(worker.spawn()),
        })
    }

    /// The client: enqueue, cancel, reschedule and inspect jobs with it.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Runs every job that is due now to its outcome, letting no more time pass than running
    /// handlers need: a handler that sleeps (2 s, or an hour) lets its sleep pass, and jobs
    /// that come due meanwhile run on the way.
    ///
    /// # Panics
    /// If jobs keep running after many rounds (a job that defers itself to "now" forever), or
    /// a running handler has not finished after [`SETTLE_LIMIT`] of (virtual) time.
    pub async fn settle(&self) {
        let deadline = tokio::time::Instant::now() + SETTLE_LIMIT;
        for _ in 0..SETTLE_ROUNDS {
            // Subscribe before looking, so that a job finishing in between is not missed.
            let changed = self.worker.as_ref().map(WorkerHandle::running_changed);
            for _ in 0..YIELDS_PER_ROUND {
                if self.is_settled().await {
                    return;
                }
                tokio::task::yield_now().await;
            }
            let running = self.worker.as_ref().map_or(0, WorkerHandle::running);
            match changed {
                Some(changed) if running > 0 => {
                    // Handlers are running and, after all those yields, waiting: most likely
                    // on a timer. Wait for one to finish; with tokio's clock paused the
                    // runtime jumps straight to the next timer, however far ahead it is.
                    tokio::select! {
                        () = changed => {}
                        () = tokio::time::sleep_until(deadline) => panic!(
                            "a running job did not finish within {SETTLE_LIMIT:?} of settle()"
                        ),
                    }
                }
                _ => {
                    // Nothing running, yet work is due: give the fetchers a millisecond.
                    tokio::select! {
                        () = async { if let Some(c) = changed { c.await } } => {}
                        () = tokio::time::sleep(Duration::from_millis(1)) => {}
                    }
                }
            }
        }
        panic!("jobs did not settle: some job is always due or running");
    }

    async fn is_settled(&self) -> bool {
        if self.worker.as_ref().is_some_and(|w| w.running() > 0) {
            return false;
        }
        let s = self.stats().await;
        s.ready == 0 && s.active == 0 && s.overdue == 0
    }

    /// Stats of every topic the worker runs, summed.
    async fn stats(&self) -> TopicStats {
        self.client
            .admin()
            .stats_total(&self.topics)
            .await
            .expect("embedded store")
    }

    /// Lets `duration` pass, running each job at its due time on the way, then settles.
    pub async fn advance(&self, duration: Duration) {
        tokio::time::sleep(duration).await;
        self.settle().await;
    }

    /// Lets time pass until no job is waiting anywhere (every job succeeded, was cancelled,
    /// or is dead), at most `limit` of time.
    ///
    /// # Panics
    /// If jobs are still waiting after `limit`.
    pub async fn run_until_idle_within(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            self.settle().await;
            let s = self.stats().await;
            let waiting = s.scheduled + s.retry;
            if waiting == 0 {
                return;
            }
            let now = tokio::time::Instant::now();
            assert!(
                now < deadline,
                "{waiting} jobs still waiting after {limit:?}"
            );
            // The worker's own timers fire at each due time; this only bounds the loop.
            tokio::time::sleep((deadline - now).min(Duration::from_secs(3600))).await;
        }
    }

    /// [`TestQueue::run_until_idle_within`] 400 days: every retry schedule fits.
    pub async fn run_until_idle(&self) {
        self.run_until_idle_within(Duration::from_secs(400 * 24 * 3600))
            .await;
    }

    /// A job of type `J` by key, or `None` once it succeeded or was cancelled.
    /// (Times in store ms, to compare with [`TestQueue::now_ms`]; `Client::job` gives the
    /// decoded [`JobView`](crate::JobView).)
    pub async fn job<J: Job>(&self, key: &str) -> Option<JobInfo> {
        self.client
            .topic(J::TOPIC)
            .expect("valid topic")
            .job(key)
            .await
            .expect("embedded store")
    }

    /// The state of a job of type `J`, or `None` once it succeeded or was cancelled.
    pub async fn state<J: Job>(&self, key: &str) -> Option<JobState> {
        self.job::<J>(key).await.map(|j| j.state)
    }

    /// The dead jobs of `J`'s topic, oldest first.
    pub async fn dead<J: Job>(&self) -> Vec<JobInfo> {
        let topic = self.client.topic(J::TOPIC).expect("valid topic");
        let mut all = Vec::new();
        let mut page = Page::first(MAX_PAGE);
        // Bounded: each page but the last holds jobs, and the dead queue is finite.
        for _ in 0..usize::MAX {
            let listed = topic
                .list(JobState::Dead, page)
                .await
                .expect("embedded store");
            all.extend(listed.jobs);
            match listed.next {
                Some(next) => page = Page::after(next, MAX_PAGE),
                None => break,
            }
        }
        all
    }

    /// The store's clock now, in ms (to compare with due times and attempt times).
    pub async fn now_ms(&self) -> u64 {
        self.client.store().now_ms().await.expect("embedded store")
    }

    /// Stops the worker gracefully.
    pub async fn shutdown(mut self) -> ShutdownReport {
        match self.worker.take() {
            Some(w) => w.shutdown().await,
            None => ShutdownReport::default(),
        }
    }
}
