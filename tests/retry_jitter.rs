//! Jitter for tiered and fixed retries: jobs that failed together do not retry together.
//! Each job's next attempt lands somewhere in [failure + delay, failure + delay + pct], spread
//! over that window — on the embedded store in virtual time, and on a real Redis.

use std::time::Duration;

use dq::testing::TestQueue;
use dq::{Client, JobError, JobSpec, JobState, Page, Worker};
use dq_testkit::eventually_some;

const JOBS: u64 = 200;

/// Always fails: a 10 s fixed delay with up to 50 % jitter, so retries land in [10 s, 15 s].
#[dq::delayed_job(topic = "jitter.fixed", retry = "fixed(10s, 1); jitter = 50%")]
async fn flaky(_n: u64) -> Result<(), JobError> {
    Err(JobError::retry("partner down"))
}

/// The retry delays of every job of `flaky` now waiting in `retry`: next attempt − last failure.
async fn retry_delays_ms(client: &Client) -> Vec<u64> {
    let page = client
        .list::<flaky>(JobState::Retry, Page::first(1000))
        .await
        .unwrap();
    page.jobs
        .iter()
        .map(|j| {
            let failed = j.history.last().expect("one failed attempt").at;
            j.due.duration_since(failed).unwrap().as_millis() as u64
        })
        .collect()
}

fn assert_spread(delays: &[u64]) {
    assert_eq!(delays.len(), JOBS as usize, "every job waits for its retry");
    let (lo, hi) = (*delays.iter().min().unwrap(), *delays.iter().max().unwrap());
    assert!(
        lo >= 10_000 && hi <= 15_000,
        "delays {lo}..{hi} ms outside [10 s, 15 s]"
    );
    // Without jitter all 200 would share one delay; with it they cover the window.
    assert!(hi - lo >= 2_500, "retries not spread: {lo}..{hi} ms");
    let distinct: std::collections::HashSet<_> = delays.iter().collect();
    assert!(
        distinct.len() > 50,
        "only {} distinct delays",
        distinct.len()
    );
}

fn jobs() -> Vec<JobSpec<u64>> {
    (0..JOBS)
        .map(|i| JobSpec::new(i).key(format!("j-{i}")))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn jobs_failing_together_retry_spread_out_on_the_embedded_store() {
    let queue = TestQueue::start(|w| w.topics(["jitter.fixed"])).unwrap();
    queue.client().enqueue_bulk::<flaky>(jobs()).await.unwrap();
    queue.settle().await;
    assert_spread(&retry_delays_ms(queue.client()).await);
    queue.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_failing_together_retry_spread_out_on_redis() {
    let client = Client::builder()
        .namespace(dq_testkit::namespace("jitter"))
        .connect(&dq_testkit::shared().url())
        .await
        .unwrap();
    client.enqueue_bulk::<flaky>(jobs()).await.unwrap();
    let worker = Worker::builder(client.clone())
        .topics(["jitter.fixed"])
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    let delays = eventually_some("every job failed once", Duration::from_secs(30), || async {
        let d = retry_delays_ms(&client).await;
        (d.len() == JOBS as usize).then_some(d)
    })
    .await;
    worker.shutdown().await;
    assert_spread(&delays);
}
