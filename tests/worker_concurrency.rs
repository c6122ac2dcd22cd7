//! The per-worker cap on running jobs, on a real Redis: a handler declared `concurrency = 3`
//! never has more than 3 runs at once in one worker, and does reach 3; the worker builder's
//! `concurrency(topic, n)` overrides the declared cap.
//!
//! Handlers hold their slot until the test lets them go (a semaphore permit each), so every
//! run overlaps every other the cap allows; the test releases them one at a time and, before
//! each release, waits until the worker has filled every slot it may fill.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dq::{Client, JobContext, JobError, JobSpec, Worker};
use dq_testkit::eventually;
use tokio::sync::Semaphore;

/// How long a condition may take to come true before a test fails.
const WAIT: Duration = Duration::from_secs(20);

/// How long a handler waits for its release before it gives up (a bound, never reached when
/// the test runs as it should).
const HOLD_AT_MOST: Duration = Duration::from_secs(60);

/// The handlers running now, the most that ever ran at once, and the permits that let them
/// finish.
#[derive(Clone)]
struct InFlight {
    now: Arc<AtomicUsize>,
    high_water: Arc<AtomicUsize>,
    release: Arc<Semaphore>,
}

impl Default for InFlight {
    fn default() -> Self {
        InFlight {
            now: Arc::default(),
            high_water: Arc::default(),
            release: Arc::new(Semaphore::new(0)),
        }
    }
}

impl InFlight {
    /// Counts a run in, waits for its release, counts it out.
    async fn hold(&self) -> Result<(), JobError> {
        let running = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.high_water.fetch_max(running, Ordering::SeqCst);
        let released = tokio::time::timeout(HOLD_AT_MOST, self.release.acquire()).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
        match released {
            Ok(Ok(permit)) => {
                permit.forget();
                Ok(())
            }
            _ => Err(JobError::permanent("the test never released this run")),
        }
    }
}

#[dq::delayed_job(topic = "conc.declared", retry = "none", concurrency = 3)]
async fn declared_three(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    ctx.data::<InFlight>()?.hold().await
}

#[dq::delayed_job(topic = "conc.overridden", retry = "none", concurrency = 3)]
async fn overridden_to_two(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    ctx.data::<InFlight>()?.hold().await
}

async fn client() -> Client {
    Client::builder()
        .namespace(dq_testkit::namespace("conc"))
        .connect(&dq_testkit::shared().url())
        .await
        .expect("connect")
}

/// Releases `jobs` held runs one at a time. Before each release, waits until as many run
/// at once as the cap allows (`cap`, or the jobs left when fewer); returns the high-water mark.
async fn release_one_at_a_time(in_flight: &InFlight, jobs: usize, cap: usize) -> usize {
    for released in 0..jobs {
        let expected = cap.min(jobs - released);
        eventually(
            &format!("{expected} runs at once after {released} released"),
            WAIT,
            || async { in_flight.now.load(Ordering::SeqCst) == expected },
        )
        .await;
        in_flight.release.add_permits(1);
    }
    eventually("every run finished", WAIT, || async {
        in_flight.now.load(Ordering::SeqCst) == 0
    })
    .await;
    in_flight.high_water.load(Ordering::SeqCst)
}

/// `#[delayed_job(concurrency = 3)]` with 12 jobs due at once: 3 run together, never a 4th.
#[tokio::test]
async fn a_declared_concurrency_caps_and_fills_the_workers_slots() {
    let client = client().await;
    let in_flight = InFlight::default();
    let jobs = (0..12u64).map(|i| JobSpec::new(i).key(format!("d{i}")));
    client.enqueue_bulk::<declared_three>(jobs).await.unwrap();
    let worker = Worker::builder(client.clone())
        .topics(["conc.declared"])
        .data(in_flight.clone())
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");

    let high_water = release_one_at_a_time(&in_flight, 12, 3).await;
    assert_eq!(high_water, 3, "at most 3 runs at once, and 3 were reached");
    eventually("12 jobs succeeded", WAIT, || async {
        client.stats::<declared_three>().await.unwrap().succeeded == 12
    })
    .await;
    worker.shutdown().await;
}

/// `WorkerBuilder::concurrency(topic, 2)` overrides the handler's `concurrency = 3`.
#[tokio::test]
async fn the_worker_builder_overrides_the_declared_concurrency() {
    let client = client().await;
    let in_flight = InFlight::default();
    let jobs = (0..8u64).map(|i| JobSpec::new(i).key(format!("o{i}")));
    client
        .enqueue_bulk::<overridden_to_two>(jobs)
        .await
        .unwrap();
    let worker = Worker::builder(client.clone())
        .topics(["conc.overridden"])
        .concurrency("conc.overridden", 2)
        .data(in_flight.clone())
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");

    let high_water = release_one_at_a_time(&in_flight, 8, 2).await;
    assert_eq!(high_water, 2, "at most 2 runs at once, and 2 were reached");
    eventually("8 jobs succeeded", WAIT, || async {
        client.stats::<overridden_to_two>().await.unwrap().succeeded == 8
    })
    .await;
    worker.shutdown().await;
}
