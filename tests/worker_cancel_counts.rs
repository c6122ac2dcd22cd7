//! End-to-end on a real Redis: the counters say what happened to a running job whose cancel
//! was requested. A handler that sees the request and stops ends as cancelled; one that
//! ignores it and finishes its work succeeded, and is counted so — within the grace, or in
//! blocking work that outlasts it.

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

/// A client on the shared test server in a namespace of its own, and a worker on it running
/// `topics` with `lease`, given the client and `log` as data.
async fn start_worker(
    namespace: &str,
    topics: &[&str],
    lease: Duration,
    log: Log,
) -> (Client, dq::WorkerHandle) {
    let client = Client::builder()
        .namespace(dq_testkit::namespace(namespace))
        .connect(&dq_testkit::shared().url())
        .await
        .expect("connect");
    let handle = Worker::builder(client.clone())
        .topics(topics.iter().copied())
        .data(log)
        .data(client.clone())
        .lease(lease)
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    (client, handle)
}

#[tokio::test]
async fn a_handler_that_ignores_a_cancel_and_succeeds_counts_as_succeeded() {
    let log = Log::default();
    let (client, handle) = start_worker(
        "counts",
        &["counts.ignore", "counts.stop"],
        Duration::from_millis(900),
        log.clone(),
    )
    .await;
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

/// Side effects of [`blocks_past_the_grace`], written without an `.await` (an abort lands at
/// the next one).
static BLOCKING_SIDE_EFFECTS: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// How long [`blocks_past_the_grace`] blocks its thread once told to stop: past the worker's
/// one-second grace, so the worker has aborted it by the time it returns.
const BLOCKING_WORK: Duration = Duration::from_millis(1_300);

/// Asks for its own cancel, waits until the worker passes the request on, then does blocking
/// work (a synchronous call, no `.await`) that outlasts the grace, and succeeds.
#[dq::delayed_job(topic = "counts.block", retry = "fixed(0ms, 5)")]
async fn blocks_past_the_grace(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    let client = ctx.data::<Client>()?.clone();
    let asked = client
        .cancel::<blocks_past_the_grace>(ctx.key.as_str())
        .await;
    assert_eq!(asked.unwrap(), CancelOutcome::CancelRequested);
    ctx.cancelled().await;
    // The handler's own blocking work, the case under test (not a wait for the test).
    std::thread::sleep(BLOCKING_WORK);
    BLOCKING_SIDE_EFFECTS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    Ok(())
}

/// A handler that ignores the cancel request inside blocking work, outlasting the grace, and
/// returns `Ok` in the poll the abort found it in: the work was done, so it counts as
/// succeeded (and as succeeded after a cancel request), not as cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_blocks_past_the_grace_and_succeeds_counts_as_succeeded() {
    let (client, handle) = start_worker(
        "counts-block",
        &["counts.block"],
        Duration::from_secs(3),
        Log::default(),
    )
    .await;
    client
        .enqueue::<blocks_past_the_grace>(1)
        .key("c")
        .await
        .unwrap();
    eventually("the job ended and its work was done", WAIT, || async {
        let s = client.stats::<blocks_past_the_grace>().await.unwrap();
        s.succeeded + s.cancelled + s.retried == 1
            && BLOCKING_SIDE_EFFECTS.load(std::sync::atomic::Ordering::SeqCst) == 1
    })
    .await;
    let s = client.stats::<blocks_past_the_grace>().await.unwrap();
    assert_eq!(
        (s.succeeded, s.succeeded_after_cancel_request, s.cancelled),
        (1, 1, 0),
        "{s:?}"
    );
    handle.shutdown().await;
}
