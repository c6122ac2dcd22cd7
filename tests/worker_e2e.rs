//! End-to-end worker tests on a real Redis: timing, exactly-once without faults, retries,
//! failure paths, shutdown, lease loss, a Redis restart, and the idle command rate.

#[path = "worker/support.rs"]
mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dq::store::redis::layout::script_of_function;
use dq::{Client, JobContext, JobError, JobSpec, JobState, Worker};
use dq_testkit::{Persistence, RedisServer, ServerOptions, eventually};
use support::{Log, NoExtend, WAIT, record};

#[dq::delayed_job(topic = "e2e.record", retry = "none", concurrency = 16)]
async fn record_job(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "ran").await
}

/// Like `record_job`, with retries: its handler reads Redis's clock, and a read that meets
/// the restart fails the attempt (with no retries the job would rightly go to the dead queue).
#[dq::delayed_job(topic = "e2e.restart", retry = "fixed(100ms, 10)", concurrency = 16)]
async fn restart_job(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "ran").await
}

#[dq::delayed_job(topic = "e2e.flaky", retry = "fixed(200ms, 3)")]
async fn flaky(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "ran").await?;
    if ctx.attempt < 3 {
        return Err(JobError::retry(format!("flaky failure {}", ctx.attempt)));
    }
    Ok(())
}

#[dq::delayed_job(topic = "e2e.failonce", retry = "fixed(50ms, 1)", concurrency = 32)]
async fn fail_once(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "ran").await?;
    if ctx.attempt == 1 {
        return Err(JobError::retry("the first attempt fails"));
    }
    Ok(())
}

#[dq::delayed_job(topic = "e2e.doomed", retry = "100ms, 100ms")]
async fn doomed(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "ran").await?;
    Err(JobError::retry(format!(
        "partner down (attempt {})",
        ctx.attempt
    )))
}

#[dq::delayed_job(topic = "e2e.permanent")]
async fn permanent(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "ran").await?;
    Err(JobError::permanent("order does not exist"))
}

#[dq::delayed_job(topic = "e2e.panics", retry = "none")]
async fn panics(n: u64, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "ran").await?;
    panic!("boom {n}");
}

/// An error whose `Display` panics.
#[derive(Debug)]
struct Unprintable;

impl std::fmt::Display for Unprintable {
    fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        panic!("display exploded")
    }
}

impl std::error::Error for Unprintable {}

#[dq::delayed_job(topic = "e2e.unprintable", retry = "none")]
async fn unprintable(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "ran").await?;
    Err(JobError::retry(Unprintable))
}

/// Ignores cancellation: works a minute whatever it is told.
#[dq::delayed_job(topic = "e2e.stubborn", retry = "none")]
async fn stubborn(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "started").await?;
    tokio::time::sleep(Duration::from_secs(60)).await;
    Ok(())
}

#[dq::delayed_job(topic = "e2e.slow", timeout = "200ms", retry = "none")]
async fn slow(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "ran").await?;
    tokio::time::sleep(Duration::from_secs(30)).await;
    Ok(())
}

#[dq::delayed_job(topic = "e2e.long")]
async fn long(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "started").await?;
    if ctx.data::<Log>()?.finish_long_jobs {
        return Ok(());
    }
    tokio::select! {
        // Gives up with an error, as handlers should: at shutdown it is not recorded (the job
        // is released without spending its attempt). An `Ok` here would be acknowledged.
        () = ctx.cancelled() => {
            record(&ctx, "cancelled").await?;
            Err(JobError::retry("cancelled"))
        }
        () = tokio::time::sleep(Duration::from_secs(60)) => Ok(()),
    }
}

#[dq::delayed_job(topic = "e2e.lease", retry = "fixed(0ms, 3)")]
async fn lease_job(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "started").await?;
    if ctx.attempt == 1 {
        tokio::select! {
            () = ctx.cancelled() => record(&ctx, "cancelled").await?,
            () = tokio::time::sleep(Duration::from_secs(20)) => {},
        }
    }
    Ok(())
}

/// A payload with a shape: what the worker publishes for `e2e.shaped`.
#[derive(serde::Serialize, serde::Deserialize)]
struct ShapedOrder {
    order_id: u64,
    note: Option<String>,
}

#[dq::delayed_job(topic = "e2e.shaped", retry = "none")]
async fn shaped(_order: ShapedOrder) -> Result<(), JobError> {
    Ok(())
}

async fn client_for(server: &RedisServer) -> Client {
    Client::builder()
        .namespace(dq_testkit::namespace("e2e"))
        .connect(&server.url())
        .await
        .expect("connect")
}

fn worker(client: &Client, log: &Log, topic: &str) -> dq::WorkerBuilder {
    Worker::builder(client.clone())
        .topics([topic])
        .data(log.clone())
        .data(client.clone())
        .lease(Duration::from_secs(5))
}

#[tokio::test]
async fn delayed_job_runs_after_its_delay_and_due_now_runs_at_once() {
    let client = client_for(dq_testkit::shared()).await;
    let log = Log::default();
    let handle = worker(&client, &log, "e2e.record")
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");

    let delayed = client
        .enqueue::<record_job>(1)
        .key("delayed")
        .delay(Duration::from_millis(400))
        .await
        .unwrap();
    let info = client
        .topic("e2e.record")
        .unwrap()
        .job("delayed")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(info.due_ms - info.created_ms, 400);

    // How soon a due job starts is measured by the benchmarks (S4), not asserted here.
    client.enqueue::<record_job>(2).key("now").await.unwrap();
    eventually("due-now job ran", WAIT, || async {
        log.of("now").len() == 1
    })
    .await;

    eventually("delayed job ran", WAIT, || async {
        log.of(delayed.key.as_str()).len() == 1
    })
    .await;
    let run = &log.of("delayed")[0];
    assert!(
        run.started_ms >= info.due_ms,
        "started {} before due {}",
        run.started_ms,
        info.due_ms
    );
    assert_eq!(run.due_ms, info.due_ms);
    handle.shutdown().await;
    eventually("both acked", WAIT, || async {
        client.stats::<record_job>().await.unwrap().succeeded == 2
    })
    .await;
}

/// Issue 15: failures are written in batches (`fail_many`, one call per partition for what
/// failed meanwhile); with 2,000 jobs failing at once on two workers, each job still gets its
/// own outcome: one failed attempt in its history, one retry, one success, nothing left.
#[tokio::test]
async fn many_jobs_failing_at_once_each_retry_once() {
    // A private server, so that its SLOWLOG holds only this test's script calls.
    let server = RedisServer::start();
    server.cmd::<()>(&["CONFIG", "SET", "slowlog-max-len", "100000"]);
    server.cmd::<()>(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    let client = client_for(&server).await;
    let log = Log::default();
    let mut handles = Vec::new();
    for _ in 0..2 {
        handles.push(
            worker(&client, &log, "e2e.failonce")
                .build()
                .unwrap()
                .start()
                .await
                .expect("the worker starts"),
        );
    }
    let jobs = (0..2000u64).map(|i| JobSpec::new(i).key(format!("job-{i}")));
    client.enqueue_bulk::<fail_once>(jobs).await.unwrap();
    eventually("2000 jobs succeeded", Duration::from_secs(120), || async {
        client.stats::<fail_once>().await.unwrap().succeeded == 2000
    })
    .await;
    for h in handles {
        h.shutdown().await;
    }
    let mut runs: HashMap<String, Vec<u32>> = HashMap::new();
    for r in log.runs() {
        runs.entry(r.key).or_default().push(r.attempt);
    }
    assert_eq!(runs.len(), 2000);
    for (key, mut attempts) in runs {
        attempts.sort_unstable();
        assert_eq!(attempts, [1, 2], "{key}");
    }
    let stats = client.stats::<fail_once>().await.unwrap();
    assert_eq!(
        (
            stats.retried,
            stats.succeeded,
            stats.ready,
            stats.active,
            stats.retry,
            stats.dead
        ),
        (2000, 2000, 0, 0, 0, 0)
    );
    // The failures were written in batches: fewer `fail` calls (`FCALL dq_<hash>_fail`)
    // than failures. (One at a time would need the completer to never find a second failure
    // waiting while a call is in flight, with 32 jobs failing together after each fetch.)
    type Entry = (i64, i64, i64, Vec<Vec<u8>>, Vec<u8>, Vec<u8>);
    let log: Vec<Entry> = server.cmd(&["SLOWLOG", "GET", "100000"]);
    let fail_calls = log
        .iter()
        .filter(|(_, _, _, args, _, _)| {
            args.first()
                .is_some_and(|a| a.eq_ignore_ascii_case(b"fcall"))
                && args.get(1).is_some_and(|f| {
                    std::str::from_utf8(f).is_ok_and(|f| script_of_function(f) == Some("fail"))
                })
        })
        .count();
    assert!(
        (1..2000).contains(&fail_calls),
        "{fail_calls} fail calls for 2000 failures"
    );
}

#[tokio::test]
async fn three_workers_run_5000_jobs_exactly_once() {
    let client = client_for(dq_testkit::shared()).await;
    let log = Log::default();
    let mut handles = Vec::new();
    for _ in 0..3 {
        handles.push(
            worker(&client, &log, "e2e.record")
                .build()
                .unwrap()
                .start()
                .await
                .expect("the worker starts"),
        );
    }
    let jobs = (0..5000u64).map(|i| JobSpec::new(i).key(format!("job-{i}")));
    client.enqueue_bulk::<record_job>(jobs).await.unwrap();
    eventually("5000 jobs succeeded", Duration::from_secs(120), || async {
        client.stats::<record_job>().await.unwrap().succeeded == 5000
    })
    .await;
    for h in handles {
        h.shutdown().await;
    }
    let mut runs: HashMap<String, usize> = HashMap::new();
    for r in log.runs() {
        *runs.entry(r.key).or_default() += 1;
    }
    assert_eq!(runs.len(), 5000);
    assert!(runs.values().all(|n| *n == 1), "some job ran twice");
    let stats = client.stats::<record_job>().await.unwrap();
    assert_eq!(
        (
            stats.ready,
            stats.active,
            stats.scheduled,
            stats.retry,
            stats.dead
        ),
        (0, 0, 0, 0, 0)
    );
}

#[tokio::test]
async fn retries_follow_the_schedule_then_the_dead_queue_and_on_dead() {
    let client = client_for(dq_testkit::shared()).await;
    let log = Log::default();
    let dead_calls = Arc::new(AtomicUsize::new(0));
    let calls = dead_calls.clone();
    let handles = vec![
        worker(&client, &log, "e2e.flaky")
            .build()
            .unwrap()
            .start()
            .await
            .expect("the worker starts"),
        worker(&client, &log, "e2e.doomed")
            .on_dead(move |dead| {
                let calls = calls.clone();
                async move {
                    assert_eq!(dead.key.as_str(), "webhook-1");
                    assert_eq!(dead.attempts, 3);
                    assert!(dead.error.contains("attempt 3"), "{}", dead.error);
                    calls.fetch_add(1, Ordering::SeqCst);
                }
            })
            .build()
            .unwrap()
            .start()
            .await
            .expect("the worker starts"),
    ];
    client.enqueue::<flaky>(1).key("flaky-1").await.unwrap();
    client.enqueue::<doomed>(1).key("webhook-1").await.unwrap();

    eventually("flaky job succeeded", WAIT, || async {
        client.stats::<flaky>().await.unwrap().succeeded == 1
    })
    .await;
    let runs = log.of("flaky-1");
    assert_eq!(
        runs.iter().map(|r| r.attempt).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    for pair in runs.windows(2) {
        let gap = pair[1].started_ms - pair[0].started_ms;
        assert!(
            gap >= 200,
            "retry came after {gap} ms, before the 200 ms delay"
        );
    }

    eventually("doomed job dead", WAIT, || async {
        client
            .job::<doomed>("webhook-1")
            .await
            .unwrap()
            .is_some_and(|j| j.state == JobState::Dead)
    })
    .await;
    let dead = client.job::<doomed>("webhook-1").await.unwrap().unwrap();
    assert_eq!(dead.attempts, 3);
    let errors: Vec<_> = dead.history.iter().map(|h| h.error.as_str()).collect();
    assert_eq!(
        errors,
        [
            "partner down (attempt 1)",
            "partner down (attempt 2)",
            "partner down (attempt 3)"
        ]
    );
    eventually("on_dead called", WAIT, || async {
        dead_calls.load(Ordering::SeqCst) == 1
    })
    .await;
    for h in handles {
        h.shutdown().await;
    }
    assert_eq!(
        dead_calls.load(Ordering::SeqCst),
        1,
        "on_dead must be called once"
    );
    assert_eq!(log.of("webhook-1").len(), 3);
}

#[tokio::test]
async fn permanent_panic_timeout_and_undecodable_each_take_their_path() {
    let client = client_for(dq_testkit::shared()).await;
    let log = Log::default();
    let handle = Worker::builder(client.clone())
        .topics(["e2e.permanent", "e2e.panics", "e2e.slow", "e2e.record"])
        .data(log.clone())
        .data(client.clone())
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    client.enqueue::<permanent>(1).key("p").await.unwrap();
    client.enqueue::<panics>(1).key("p").await.unwrap();
    client.enqueue::<slow>(1).key("p").await.unwrap();
    // Bytes that are not MessagePack for a u64, through the untyped API.
    client
        .topic("e2e.record")
        .unwrap()
        .enqueue(b"\xc1\xc1".to_vec())
        .key("garbage")
        .await
        .unwrap();

    async fn dead_reason(client: &Client, topic: &str, key: &str) -> Option<(u32, String)> {
        let job = client.topic(topic).unwrap().job(key).await.unwrap()?;
        (job.state == JobState::Dead)
            .then(|| (job.attempts, job.history.last().unwrap().error.clone()))
    }
    let cases = [
        ("e2e.permanent", "p", "order does not exist"),
        ("e2e.panics", "p", "handler panicked: boom 1"),
        ("e2e.slow", "p", "timed out after 200ms"),
        ("e2e.record", "garbage", "undecodable payload"),
    ];
    for (topic, key, reason) in cases {
        let (attempts, error) = dq_testkit::eventually_some(&format!("{topic} dead"), WAIT, || {
            dead_reason(&client, topic, key)
        })
        .await;
        assert!(
            error.contains(reason),
            "{topic}: {error:?} should contain {reason:?}"
        );
        assert_eq!(attempts, 1, "{topic}: one attempt only");
    }
    // The undecodable job never reached the handler.
    assert_eq!(log.of("garbage").len(), 0);
    handle.shutdown().await;
}

/// A handler error whose `Display` panics is caught like a handler's panic: the attempt is
/// recorded as failed (here: dead, no retries) instead of the job staying active forever.
#[tokio::test]
async fn an_error_that_cannot_be_displayed_still_fails_the_attempt() {
    let client = client_for(dq_testkit::shared()).await;
    let log = Log::default();
    let handle = worker(&client, &log, "e2e.unprintable")
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    client.enqueue::<unprintable>(1).key("u").await.unwrap();
    let job = dq_testkit::eventually_some("the job is dead", WAIT, || async {
        client
            .job::<unprintable>("u")
            .await
            .unwrap()
            .filter(|j| j.state == JobState::Dead)
    })
    .await;
    assert_eq!(job.attempts, 1);
    let errors: Vec<_> = job.history.iter().map(|h| h.error.as_str()).collect();
    assert_eq!(errors, ["error could not be displayed: display exploded"]);
    handle.shutdown().await;
    assert_eq!(log.of("u").len(), 1);
}

#[tokio::test]
async fn shutdown_releases_a_long_job_and_another_worker_completes_it() {
    let client = client_for(dq_testkit::shared()).await;
    let log = Log::default();
    let first = worker(&client, &log, "e2e.long")
        .shutdown_timeout(Duration::from_millis(200))
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    client.enqueue::<long>(1).key("report").await.unwrap();
    eventually("long job started", WAIT, || async {
        log.count("started") == 1
    })
    .await;
    let report = first.shutdown().await;
    assert_eq!(
        report,
        dq::ShutdownReport {
            released: 1,
            drained: false
        }
    );
    assert_eq!(log.count("cancelled"), 1, "the handler was told to stop");
    let job = client.job::<long>("report").await.unwrap().unwrap();
    assert_eq!(
        (job.state, job.attempts),
        (JobState::Ready, 0),
        "released without spending the attempt"
    );

    let finisher = Log {
        finish_long_jobs: true,
        ..Log::default()
    };
    let second = worker(&client, &finisher, "e2e.long")
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    eventually("second worker completed it", WAIT, || async {
        client.stats::<long>().await.unwrap().succeeded == 1
    })
    .await;
    assert_eq!(finisher.of("report")[0].attempt, 1);
    second.shutdown().await;
}

/// Shutdown keeps to its deadline even when a handler ignores cancellation: the cancel grace
/// is taken out of the deadline, not added to it. (Before, a 2 s timeout took at least 3 s:
/// the drain, then a 1 s grace. The bound leaves 900 ms for the release and a busy machine.)
#[tokio::test]
async fn shutdown_keeps_its_deadline_when_a_handler_ignores_cancellation() {
    const TIMEOUT: Duration = Duration::from_secs(2);
    let client = client_for(dq_testkit::shared()).await;
    let log = Log::default();
    let handle = worker(&client, &log, "e2e.stubborn")
        .shutdown_timeout(TIMEOUT)
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    client.enqueue::<stubborn>(1).key("mule").await.unwrap();
    eventually("the handler started", WAIT, || async {
        log.count("started") == 1
    })
    .await;
    let began = Instant::now();
    let report = handle.shutdown().await;
    let took = began.elapsed();
    eprintln!("shutdown with a {TIMEOUT:?} timeout took {took:?}");
    assert_eq!(
        report,
        dq::ShutdownReport {
            released: 1,
            drained: false
        }
    );
    assert!(
        took < TIMEOUT + Duration::from_millis(900),
        "shutdown took {took:?} for a {TIMEOUT:?} deadline"
    );
    let job = client.job::<stubborn>("mule").await.unwrap().unwrap();
    assert_eq!((job.state, job.attempts), (JobState::Ready, 0));
}

/// A store error retrying cannot fix (here a partition key of the wrong type) is logged at
/// ERROR and shown in the worker's health as permanent; once fixed, the worker is healthy
/// again and runs the partition's jobs.
#[tokio::test]
async fn a_permanent_store_error_shows_in_health_and_is_logged_at_error() {
    // The test's runtime has one thread: every worker task logs to this subscriber.
    let (captured, _guard) =
        dq_testkit::CapturedLog::install(tracing_subscriber::filter::LevelFilter::WARN);
    let server = dq_testkit::shared();
    let ns = dq_testkit::namespace("e2e");
    let client = Client::builder()
        .namespace(&ns)
        .connect(&server.url())
        .await
        .unwrap();
    // Every fetch reads `scheduled` first: as a string it fails with WRONGTYPE.
    let queue = dq::store::Queue::new(dq::Topic::new("e2e.record").unwrap(), 0);
    let scheduled = dq::store::redis::layout::PartitionKeys::new(&ns, &queue).scheduled;
    let _: () = server.cmd(&["SET", &scheduled, "not a sorted set"]);
    let log = Log::default();
    let handle = worker(&client, &log, "e2e.record")
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    let broken = dq_testkit::eventually_some("health shows the error", WAIT, || {
        let h = handle.health();
        async move { h.permanent_errors().next().cloned() }
    })
    .await;
    assert_eq!((broken.topic.as_str(), broken.partition), ("e2e.record", 0));
    assert!(!handle.health().is_healthy());
    let error = broken.last_error.clone().unwrap_or_default();
    assert!(error.contains("WRONGTYPE"), "{error}");
    assert!(broken.last_call_at.is_some() && broken.last_success_at.is_none());
    let logged = captured.text();
    let line = logged
        .lines()
        .find(|l| l.contains("WRONGTYPE"))
        .unwrap_or_else(|| panic!("no log line with the error:\n{logged}"));
    assert!(line.contains("ERROR"), "{line}");

    let _: () = server.cmd(&["DEL", &scheduled]);
    client.enqueue::<record_job>(1).key("after").await.unwrap();
    eventually("the job ran once the key was fixed", WAIT, || async {
        log.of("after").len() == 1
    })
    .await;
    let health = handle.health();
    assert!(health.is_healthy(), "{health:?}");
    assert!(health.fetchers[0].last_success_at.is_some());
    handle.shutdown().await;
}

#[tokio::test]
async fn a_lost_lease_cancels_the_handler_and_the_job_is_acked_once() {
    let client = client_for(dq_testkit::shared()).await;
    let log = Log::default();
    // Worker A cannot extend its leases (its extend calls fail), so its 400 ms lease runs out.
    let cut_off = Client::from_store(
        Arc::new(NoExtend(client.store().clone())),
        client.config().clone(),
    );
    let a = Worker::builder(cut_off)
        .topics(["e2e.lease"])
        .data(log.clone())
        .data(client.clone())
        .lease(Duration::from_millis(400))
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    client.enqueue::<lease_job>(1).key("turn-7").await.unwrap();
    eventually("attempt 1 started", WAIT, || async {
        log.count("started") == 1
    })
    .await;
    // Worker B recovers the expired lease and runs attempt 2.
    let b = worker(&client, &log, "e2e.lease")
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    eventually("attempt 1 cancelled", WAIT, || async {
        log.count("cancelled") == 1
    })
    .await;
    eventually("job succeeded", WAIT, || async {
        client.stats::<lease_job>().await.unwrap().succeeded == 1
    })
    .await;
    a.shutdown().await;
    b.shutdown().await;
    let stats = client.stats::<lease_job>().await.unwrap();
    assert_eq!(stats.succeeded, 1, "acked exactly once");
    assert_eq!(stats.expired, 1);
    let attempts: Vec<u32> = log
        .of("turn-7")
        .iter()
        .filter(|r| r.note == "started")
        .map(|r| r.attempt)
        .collect();
    assert_eq!(attempts, vec![1, 2]);
}

#[tokio::test]
async fn worker_survives_a_redis_restart_without_losing_jobs() {
    let server =
        RedisServer::start_with(ServerOptions::default().persistence(Persistence::AofAlways));
    let client = client_for(&server).await;
    let log = Log::default();
    let handle = worker(&client, &log, "e2e.restart")
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    let jobs = (0..300u64).map(|i| {
        JobSpec::new(i)
            .key(format!("r-{i}"))
            .delay(Duration::from_millis(i * 10))
    });
    client.enqueue_bulk::<restart_job>(jobs).await.unwrap();
    eventually("some jobs ran", WAIT, || async { log.runs().len() >= 50 }).await;
    server.kill();
    server.restart();
    // By hand rather than `eventually`, to report the last answer if it never comes.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let stats = client.stats::<restart_job>().await;
        let done = stats
            .as_ref()
            .is_ok_and(|s| s.succeeded >= 300 && s.scheduled + s.ready + s.active + s.retry == 0);
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not all 300 jobs succeeded within 60 s of the restart: last stats {stats:?}, \
             {} runs logged",
            log.runs().len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    handle.shutdown().await;
    let mut keys: Vec<String> = log.runs().into_iter().map(|r| r.key).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 300, "every job ran at least once");
}

#[tokio::test]
async fn an_idle_worker_sends_about_one_command_per_second() {
    let server = RedisServer::start();
    let client = client_for(&server).await;
    let log = Log::default();
    let handle = worker(&client, &log, "e2e.record")
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    // Let start-up traffic settle: the first fetch has happened once the listener blocks.
    eventually("fetcher idle", WAIT, || async {
        let info: String = server.cmd(&["INFO", "clients"]);
        info.contains("blocked_clients:1")
    })
    .await;
    let _: () = server.cmd(&["CONFIG", "RESETSTAT"]);
    let window = Duration::from_secs(10);
    let started = Instant::now();
    // The measurement window itself: an idle worker must stay quiet while time passes.
    tokio::time::sleep(window).await;
    let info: String = server.cmd(&["INFO", "commandstats"]);
    let elapsed = started.elapsed().as_secs_f64();
    handle.shutdown().await;
    // Commands scripts run inside Redis are listed too; count what a client sends.
    let sent_by_clients = [
        "fcall", "fcall_ro", "function", "evalsha", "eval", "blpop", "script", "ping", "hello",
        "client", "select",
    ];
    let calls: u64 = info
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            sent_by_clients
                .contains(&name.split('|').next()?)
                .then_some(rest)
        })
        .filter_map(|rest| {
            rest.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    let rate = calls as f64 / elapsed;
    eprintln!("idle worker: {calls} commands in {elapsed:.1} s = {rate:.2}/s (1 fetcher)\n{info}");
    assert!(rate <= 1.0, "idle worker sent {rate:.2} commands/s");
}

/// A worker publishes the JSON shape of each handler's payload when it starts, replacing the
/// one an earlier deploy published (the last to start wins), for `dq serve` to check against.
#[tokio::test]
async fn a_worker_publishes_its_payload_shapes_at_start() {
    use dq::shape::PayloadShape;
    let client = client_for(dq_testkit::shared()).await;
    let topic = dq::Topic::new("e2e.shaped").unwrap();
    let earlier = PayloadShape::of::<String>().unwrap();
    client
        .store()
        .put_payload_shape(&topic, Some(&earlier))
        .await
        .unwrap();
    let handle = Worker::builder(client.clone())
        .topics(["e2e.shaped", "e2e.record"])
        .data(Log::default())
        .data(client.clone())
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    let shape = client
        .store()
        .payload_shape(&topic)
        .await
        .unwrap()
        .expect("published at start");
    assert_eq!(Some(&shape), PayloadShape::of::<ShapedOrder>().as_ref());
    assert!(shape.check(&serde_json::json!({"order_id": 7})).is_ok());
    let why = shape
        .check(&serde_json::json!({"order_id": "7"}))
        .unwrap_err();
    assert_eq!(
        why.to_string(),
        "order_id: expected an unsigned integer, found a string"
    );
    let record = dq::Topic::new("e2e.record").unwrap();
    let shape = client.store().payload_shape(&record).await.unwrap();
    assert!(shape.is_some_and(|s| s.check(&serde_json::json!(-1)).is_err()));
    handle.shutdown().await;
}

/// Publishing the shapes never blocks a start: a worker started while Redis is down starts,
/// and publishes them once Redis is back.
#[tokio::test]
async fn a_worker_started_while_redis_is_down_publishes_its_shapes_once_it_is_back() {
    let server = RedisServer::start();
    let client = client_for(&server).await;
    server.stop();
    let handle = Worker::builder(client.clone())
        .topics(["e2e.shaped"])
        .data(Log::default())
        .data(client.clone())
        .build()
        .unwrap()
        .start()
        .await
        .expect("a store that cannot be reached does not fail the start");
    server.restart();
    let topic = dq::Topic::new("e2e.shaped").unwrap();
    eventually("the shape is published", WAIT, || {
        let (client, topic) = (client.clone(), topic.clone());
        async move { matches!(client.store().payload_shape(&topic).await, Ok(Some(_))) }
    })
    .await;
    handle.shutdown().await;
}
