//! `TestQueue::settle` with handlers that sleep: it lets exactly their sleep pass, however long.

use std::time::Duration;

use dq::JobError;
use dq::testing::TestQueue;

#[dq::delayed_job(topic = "test.settle.nap", retry = "none")]
async fn nap(ms: u64) -> Result<(), JobError> {
    tokio::time::sleep(Duration::from_millis(ms)).await;
    Ok(())
}

async fn settle_after_nap(ms: u64) {
    let queue = TestQueue::start(|w| w.topics(["test.settle.nap"])).unwrap();
    let start = queue.now_ms().await;
    queue.client().enqueue::<nap>(ms).key("n").await.unwrap();
    queue.settle().await;
    let took = queue.now_ms().await - start;
    let stats = queue.client().stats::<nap>().await.unwrap();
    assert_eq!(stats.succeeded, 1, "the sleeping job finished");
    assert!(
        (ms..ms + 10).contains(&took),
        "settle let {took} ms pass for a {ms} ms sleep"
    );
    queue.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn settle_waits_out_a_handler_that_sleeps_two_seconds() {
    settle_after_nap(2_000).await;
}

#[tokio::test(start_paused = true)]
async fn settle_waits_out_a_handler_that_sleeps_an_hour() {
    settle_after_nap(3_600_000).await;
}

#[tokio::test(start_paused = true)]
async fn settle_does_not_run_jobs_that_are_not_due() {
    let queue = TestQueue::start(|w| w.topics(["test.settle.nap"])).unwrap();
    queue.client().enqueue::<nap>(5).key("now").await.unwrap();
    queue
        .client()
        .enqueue::<nap>(5)
        .key("later")
        .delay(Duration::from_secs(60))
        .await
        .unwrap();
    queue.settle().await;
    assert_eq!(queue.state::<nap>("now").await, None, "ran");
    assert_eq!(
        queue.state::<nap>("later").await,
        Some(dq::JobState::Scheduled),
        "a job due in a minute waits"
    );
    queue.shutdown().await;
}
