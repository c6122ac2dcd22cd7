//! End-to-end on a real Redis: the counters say what happened to a running job whose cancel
//! was requested. A handler that sees the request and stops ends as cancelled; one that
//! ignores it and finishes its work within the grace succeeded, and is counted so.

#[path = "worker/support.rs"]
mod support;

use std::time::Duration;

use dq::{CancelOutcome, Client, JobContext, JobError, Worker};
use dq_testkit::eventually;
use support::{Log, WAIT, record};

/// Asks for its own cancel, waits until the worker passes the request on, then does its
/// side effect anyway and succeeds (well within the worker's one-second grace).
#[dq::delayed_job(topic = "counts.ignore", retry = "fixed(0ms, 5)")]
async fn ignores_the_cancel(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    let client = ctx.data::<Client>()?.clone();
    let asked = client.cancel::<ignores_the_cancel>(ctx.key.as_str()).await;
    assert_eq!(asked.unwrap(), CancelOutcome::CancelRequested);
    ctx.cancelled().await;
    record(&ctx, "side effect").await
}

/// Asks for its own cancel and stops when told.
#[dq::delayed_job(topic = "counts.stop", retry = "fixed(0ms, 5)")]
async fn stops_when_cancelled(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    let client = ctx.data::<Client>()?.clone();
    let asked = client
        .cancel::<stops_when_cancelled>(ctx.key.as_str())
        .await;
    assert_eq!(asked.unwrap(), CancelOutcome::CancelRequested);
    ctx.cancelled().await;
    Err(JobError::retry("stopped"))
}

#[tokio::test]
async fn a_handler_that_ignores_a_cancel_and_succeeds_counts_as_succeeded() {
    let client = Client::builder()
        .namespace(dq_testkit::namespace("counts"))
        .connect(&dq_testkit::shared().url())
        .await
        .expect("connect");
    let log = Log::default();
    let handle = Worker::builder(client.clone())
        .topics(["counts.ignore", "counts.stop"])
        .data(log.clone())
        .data(client.clone())
        .lease(Duration::from_millis(900))
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    client
        .enqueue::<ignores_the_cancel>(1)
        .key("a")
        .await
        .unwrap();
    client
        .enqueue::<stops_when_cancelled>(1)
        .key("b")
        .await
        .unwrap();
    eventually("both jobs ended", WAIT, || async {
        let ignored = client.stats::<ignores_the_cancel>().await.unwrap();
        let stopped = client.stats::<stops_when_cancelled>().await.unwrap();
        ignored.succeeded + ignored.cancelled == 1 && stopped.succeeded + stopped.cancelled == 1
    })
    .await;
    let ignored = client.stats::<ignores_the_cancel>().await.unwrap();
    assert_eq!(log.count("side effect"), 1, "{:?}", log.runs());
    assert_eq!(
        (
            ignored.succeeded,
            ignored.succeeded_after_cancel_request,
            ignored.cancelled
        ),
        (1, 1, 0),
        "{ignored:?}"
    );
    let stopped = client.stats::<stops_when_cancelled>().await.unwrap();
    assert_eq!(
        (
            stopped.succeeded,
            stopped.succeeded_after_cancel_request,
            stopped.cancelled
        ),
        (0, 0, 1),
        "{stopped:?}"
    );
    assert_eq!((ignored.retried, stopped.retried), (0, 0));
    handle.shutdown().await;
}
