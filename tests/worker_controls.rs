//! End-to-end on a real Redis: pause and resume a topic under running workers, the global
//! concurrency cap and the rate limit across two workers, a handler's throttle, and
//! cancelling a running job.

#[path = "worker/support.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dq::{CancelOutcome, Client, JobContext, JobError, JobSpec, Worker};
use dq_testkit::eventually;
use support::{Log, WAIT, record};

#[dq::delayed_job(topic = "ctl.pause", retry = "none", concurrency = 8)]
async fn paused_job(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "ran").await
}

/// How many handlers of `ctl.capped` run now, and the most that ever did.
#[derive(Clone, Default)]
struct Gauge {
    now: Arc<AtomicUsize>,
    max: Arc<AtomicUsize>,
}

#[dq::delayed_job(topic = "ctl.capped", retry = "none", concurrency = 8)]
async fn capped_job(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    let g = ctx.data::<Gauge>()?.clone();
    let running = g.now.fetch_add(1, Ordering::SeqCst) + 1;
    g.max.fetch_max(running, Ordering::SeqCst);
    // Work long enough for others to overlap if the cap let them.
    tokio::time::sleep(Duration::from_millis(30)).await;
    g.now.fetch_sub(1, Ordering::SeqCst);
    record(&ctx, "ran").await
}

/// The lease times (store ms) of `ctl.rate`'s runs: due time plus lateness.
#[derive(Clone, Default)]
struct Leased(Arc<std::sync::Mutex<Vec<u64>>>);

#[dq::delayed_job(topic = "ctl.rate", retry = "none", concurrency = 8)]
async fn rated_job(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    let leased = ctx.due_ms + ctx.late.as_millis() as u64;
    ctx.data::<Leased>()?.0.lock().unwrap().push(leased);
    Ok(())
}

/// The first run of `first` is told by "the partner" to slow down.
#[dq::delayed_job(topic = "ctl.throttle", retry = "none")]
async fn throttled_job(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "ran").await?;
    let log = ctx.data::<Log>()?;
    if ctx.key.as_str() == "first" && log.of("first").len() == 1 {
        return Err(JobError::rate_limited(Duration::from_millis(300)));
    }
    Ok(())
}

/// On a topic of two partitions, the first run of `first` is told to slow down.
#[dq::delayed_job(topic = "ctl.throttle2", retry = "none")]
async fn throttled_two(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "ran").await?;
    let log = ctx.data::<Log>()?;
    if ctx.key.as_str() == "first" && log.of("first").len() == 1 {
        return Err(JobError::rate_limited(Duration::from_secs(2)));
    }
    Ok(())
}

/// Works until cancelled (a minute at most), then gives up with an error.
#[dq::delayed_job(topic = "ctl.cancel", retry = "fixed(0ms, 5)")]
async fn cancellable(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "started").await?;
    tokio::select! {
        () = ctx.cancelled() => {
            record(&ctx, "cancelled").await?;
            Err(JobError::retry("stopped"))
        }
        () = tokio::time::sleep(Duration::from_secs(60)) => Ok(()),
    }
}

/// Declares a max_delay (written by the worker at start) and a unique_for window (the typed
/// client's default).
#[dq::delayed_job(
    topic = "ctl.unique",
    retry = "none",
    max_delay = "1h",
    unique_for = "10m"
)]
async fn unique_job(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "ran").await
}

async fn client() -> Client {
    Client::builder()
        .namespace(dq_testkit::namespace("ctl"))
        .connect(&dq_testkit::shared().url())
        .await
        .expect("connect")
}

fn worker(client: &Client, log: &Log, topic: &str) -> dq::WorkerBuilder {
    Worker::builder(client.clone())
        .topics([topic])
        .data(log.clone())
        .data(client.clone())
        .data(Gauge::default())
        .lease(Duration::from_millis(900))
}

/// A paused topic: its workers lease nothing (a fetch after the enqueue found nothing to
/// lease), enqueue works, stats say paused; resume runs everything at once.
#[tokio::test]
async fn pause_holds_workers_and_resume_releases_them() {
    let client = client().await;
    let log = Log::default();
    let t = client.topic("ctl.pause").unwrap();
    client.pause::<paused_job>().await.unwrap();
    let mut handles = Vec::new();
    for _ in 0..2 {
        handles.push(
            worker(&client, &log, "ctl.pause")
                .build()
                .unwrap()
                .start()
                .await
                .expect("the worker starts"),
        );
    }
    let jobs = (0..5u64).map(|i| JobSpec::new(i).key(format!("p{i}")));
    client.enqueue_bulk::<paused_job>(jobs).await.unwrap();
    let enqueued = Instant::now();
    // Every worker's fetcher has fetched since (the enqueue woke one; idle waits are short
    // enough for the other), and nothing ran.
    eventually("both workers fetched after the enqueue", WAIT, || async {
        handles.iter().all(|h| {
            h.health()
                .fetchers
                .iter()
                .all(|f| f.last_call_at.is_some_and(|at| at > enqueued) && f.last_call_ok)
        })
    })
    .await;
    let st = t.stats().await.unwrap();
    assert!(st.paused, "{st:?}");
    assert_eq!((st.ready, st.active, st.succeeded), (5, 0, 0), "{st:?}");
    assert!(log.runs().is_empty(), "{:?}", log.runs());

    client.resume::<paused_job>().await.unwrap();
    eventually("all five ran after resume", WAIT, || async {
        t.stats().await.unwrap().succeeded == 5
    })
    .await;
    assert!(!t.stats().await.unwrap().paused);
    for h in handles {
        h.shutdown().await;
    }
}

/// A global cap of 2 across two workers of 8 slots each: never more than 2 handlers at once,
/// and every job runs.
#[tokio::test]
async fn global_concurrency_cap_holds_across_workers() {
    let client = client().await;
    let log = Log::default();
    let gauge = Gauge::default();
    client.set_concurrency::<capped_job>(Some(2)).await.unwrap();
    let mut handles = Vec::new();
    for _ in 0..2 {
        handles.push(
            worker(&client, &log, "ctl.capped")
                .data(gauge.clone())
                .build()
                .unwrap()
                .start()
                .await
                .expect("the worker starts"),
        );
    }
    let jobs = (0..30u64).map(|i| JobSpec::new(i).key(format!("c{i}")));
    client.enqueue_bulk::<capped_job>(jobs).await.unwrap();
    eventually("30 jobs succeeded", WAIT, || async {
        client.stats::<capped_job>().await.unwrap().succeeded == 30
    })
    .await;
    let max = gauge.max.load(Ordering::SeqCst);
    assert!((1..=2).contains(&max), "{max} ran at once under a cap of 2");
    for h in handles {
        h.shutdown().await;
    }
}

/// A rate of 20 a second (no burst beyond one) across two workers: ten jobs are leased over
/// at least 9 × 50 ms of Redis time, first lease to last (a lower bound: load can only make
/// it longer).
#[tokio::test]
async fn rate_limit_spaces_starts_across_workers() {
    let client = client().await;
    let log = Log::default();
    client
        .set_rate::<rated_job>(Some("20/s".parse().unwrap()))
        .await
        .unwrap();
    let leased = Leased::default();
    let mut handles = Vec::new();
    for _ in 0..2 {
        handles.push(
            worker(&client, &log, "ctl.rate")
                .data(leased.clone())
                .build()
                .unwrap()
                .start()
                .await
                .expect("the worker starts"),
        );
    }
    let jobs = (0..10u64).map(|i| JobSpec::new(i).key(format!("r{i}")));
    client.enqueue_bulk::<rated_job>(jobs).await.unwrap();
    eventually("10 jobs succeeded", WAIT, || async {
        client.stats::<rated_job>().await.unwrap().succeeded == 10
    })
    .await;
    let times = leased.0.lock().unwrap().clone();
    assert_eq!(times.len(), 10);
    let span = times.iter().max().unwrap() - times.iter().min().unwrap();
    assert!(
        span >= 9 * 50 - 1,
        "10 leases within {span} ms at 20/s: {times:?}"
    );
    for h in handles {
        h.shutdown().await;
    }
}

/// `JobError::rate_limited` sends the job back without spending its attempt, counts a
/// throttle, and the job runs again after the delay.
#[tokio::test]
async fn rate_limited_handler_throttles_and_keeps_its_attempt() {
    let client = client().await;
    let log = Log::default();
    let handle = worker(&client, &log, "ctl.throttle")
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    client
        .enqueue::<throttled_job>(1)
        .key("first")
        .await
        .unwrap();
    eventually("first ran twice and succeeded", WAIT, || async {
        client.stats::<throttled_job>().await.unwrap().succeeded == 1
    })
    .await;
    let runs = log.of("first");
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!((runs[0].attempt, runs[1].attempt), (1, 1), "{runs:?}");
    assert!(
        runs[1].started_ms >= runs[0].started_ms + 300,
        "ran again before the throttle ended: {runs:?}"
    );
    let st = client.stats::<throttled_job>().await.unwrap();
    assert_eq!((st.throttles, st.retried, st.buried), (1, 0, 0), "{st:?}");
    handle.shutdown().await;
}

/// `cancel` of a running job: the worker learns it on a lease extension, the handler's
/// `ctx.cancelled()` fires, and the job ends as cancelled — not retried, not dead — although
/// the handler returned an error and has retries left.
#[tokio::test]
async fn cancel_stops_a_running_job_without_retry() {
    let client = client().await;
    let log = Log::default();
    let handle = worker(&client, &log, "ctl.cancel")
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    client.enqueue::<cancellable>(1).key("long").await.unwrap();
    eventually("the job started", WAIT, || async {
        log.count("started") == 1
    })
    .await;
    assert_eq!(
        client.cancel::<cancellable>("long").await.unwrap(),
        CancelOutcome::CancelRequested
    );
    eventually("the handler saw the cancel", WAIT, || async {
        log.count("cancelled") == 1
    })
    .await;
    eventually("the job ended as cancelled", WAIT, || async {
        client.stats::<cancellable>().await.unwrap().cancelled == 1
    })
    .await;
    assert!(client.job::<cancellable>("long").await.unwrap().is_none());
    let st = client.stats::<cancellable>().await.unwrap();
    assert_eq!(
        (st.retried, st.buried, st.dead, st.expired),
        (0, 0, 0, 0),
        "{st:?}"
    );
    assert_eq!(log.count("started"), 1, "it ran again: {:?}", log.runs());
    handle.shutdown().await;
}

/// A handler's throttle holds the whole topic: its worker carries it to the topic's other
/// partition, whose next job does not start before the throttle ends.
#[tokio::test]
async fn a_handler_throttle_holds_every_partition_of_its_topic() {
    const TOPIC: &str = "ctl.throttle2";
    let client = Client::builder()
        .namespace(dq_testkit::namespace("ctl"))
        .partitions(TOPIC, 2)
        .connect(&dq_testkit::shared().url())
        .await
        .expect("connect");
    let log = Log::default();
    let handle = worker(&client, &log, TOPIC)
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    client
        .enqueue::<throttled_two>(1)
        .key("first")
        .await
        .unwrap();
    let mine = dq::JobKey::new("first").unwrap().partition(2);
    let other = dq::store::Queue::new(dq::Topic::new(TOPIC).unwrap(), 1 - mine);
    let until = dq_testkit::eventually_some("the other partition is throttled", WAIT, || async {
        client
            .store()
            .control(&other, &Default::default())
            .await
            .unwrap()
            .throttled_until_ms
    })
    .await;
    let key = (0..1000)
        .map(|i| format!("o{i}"))
        .find(|k| dq::JobKey::new(k.clone()).unwrap().partition(2) == other.partition)
        .unwrap();
    client.enqueue::<throttled_two>(2).key(&key).await.unwrap();
    eventually("both succeeded", WAIT, || async {
        client.stats::<throttled_two>().await.unwrap().succeeded == 2
    })
    .await;
    let run = &log.of(&key)[0];
    assert!(
        run.started_ms >= until,
        "{key} started at {} before the throttle ended at {until}",
        run.started_ms
    );
    handle.shutdown().await;
}

/// A handler's `max_delay` is written to its topic when its worker starts (a due time beyond
/// it is then refused), and its `unique_for` is the typed client's default: a key whose job
/// ran is refused for the window.
#[tokio::test]
async fn declared_max_delay_and_unique_for_hold() {
    let client = client().await;
    let log = Log::default();
    let t = client.topic("ctl.unique").unwrap();
    let handle = worker(&client, &log, "ctl.unique")
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    eventually("the worker wrote max_delay", WAIT, || async {
        t.control().await.unwrap().max_delay == Some(Duration::from_secs(3600))
    })
    .await;
    let r = client
        .enqueue::<unique_job>(1)
        .key("far")
        .delay(Duration::from_secs(7200))
        .await;
    assert!(matches!(r, Err(dq::Error::DelayTooLong { .. })), "{r:?}");
    let done = client.enqueue::<unique_job>(2).key("u").await.unwrap();
    assert_eq!(done.outcome, dq::EnqueueOutcome::Created);
    eventually("u ran", WAIT, || async {
        t.stats().await.unwrap().succeeded == 1
    })
    .await;
    let again = client.enqueue::<unique_job>(3).key("u").await.unwrap();
    assert!(
        matches!(again.outcome, dq::EnqueueOutcome::Refused { .. }),
        "{again:?}"
    );
    handle.shutdown().await;
}
