//! Network faults through the TCP fault proxy (`dq_testkit::proxy::FaultProxy`): replies
//! delayed past the client's response timeout after Redis applied the command (ambiguous
//! enqueue and ack), and a worker partitioned from Redis (black hole).

use std::time::Duration;

use dq::{Client, EnqueueOutcome};
use dq_faults::check::runs;
use dq_faults::ledger::{Kind, now_ms};
use dq_faults::{FaultPayload, Scenario, WORK_TOPIC, WorkJob, WorkerSpec};
use dq_testkit::proxy::FaultProxy;
use dq_testkit::{ServerOptions, eventually};
use tokio::task::block_in_place;

const BIN: &str = env!("CARGO_BIN_EXE_fault-worker");

/// The client's response timeout in the ambiguous-reply tests: long, so that only the cut
/// below ends the first try.
const TIMEOUT: Duration = Duration::from_secs(30);
/// The reply delay while a fault is on: the reply never arrives while the test runs. The test
/// then cuts the connection, dropping the held reply, so the try that sent the command always
/// fails however late any thread is scheduled, and the retry, on a new connection, gets a
/// prompt reply. (A merely late reply — a delay just past a short timeout — raced the client's
/// timer: on a loaded machine both were ready at the same poll and the reply could win.)
const HELD: Duration = Duration::from_secs(3600);

/// Ends the fault: replies flow again, and every connection holding a late reply is closed.
fn lift(proxy: &FaultProxy) {
    proxy.set_reply_delay(Duration::ZERO);
    proxy.cut();
}

fn spec(s: &Scenario, url: &str, lease_ms: u64) -> WorkerSpec {
    let mut spec = s.spec();
    spec.redis_url = url.to_string();
    spec.concurrency = 4;
    spec.lease = Duration::from_millis(lease_ms);
    spec
}

/// A client through the proxy that has already checked the work topic's partition count
/// (every client does on its first call of a topic), so the first reply a test holds is the
/// call under test.
async fn client_via(s: &Scenario, proxy: &FaultProxy) -> Client {
    let c = Client::builder()
        .namespace(&s.ns)
        .response_timeout(TIMEOUT)
        .connect(&proxy.url())
        .await
        .expect("connect through the proxy");
    c.check_topic(WORK_TOPIC)
        .await
        .expect("topic check through the proxy");
    c
}

async fn exists(s: &Scenario, key: &str) -> bool {
    matches!(s.client.job::<WorkJob>(key).await, Ok(Some(_)))
}

/// Scenario 10a: an enqueue whose reply is delayed past the response timeout after Redis
/// stored the job. The client retries; the retry finds the job and creates nothing, and
/// reports it `Created` (by this call): one job, one run, one ack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_enqueue_is_retried_harmlessly() {
    let mut s = Scenario::start("ambiguous-enqueue", BIN, ServerOptions::default()).await;
    let proxy = FaultProxy::start(s.server.port());
    let producer = client_via(&s, &proxy).await;
    // Load the enqueue script first: a NOSCRIPT reply delayed like any other would make every
    // try fail before anything is applied, which is not the case under test.
    s.enqueue_one::<WorkJob>("warm-up", FaultPayload::new(0, 10))
        .await
        .unwrap();

    proxy.set_reply_delay(HELD);
    let sent = producer
        .enqueue::<WorkJob>(FaultPayload::new(1, 10))
        .key("amb-enq");
    let call = tokio::spawn(sent.into_future());
    eventually("Redis applied the enqueue", Duration::from_secs(5), || {
        exists(&s, "amb-enq")
    })
    .await;
    lift(&proxy);
    let outcome = call.await.unwrap();
    let enqueued = outcome.expect("the retry succeeds");
    // The first try's reply was lost; the retry found the job the first try had stored and
    // reports it as this call's: created by it, not someone else's job holding the key.
    assert_eq!(enqueued.outcome, EnqueueOutcome::Created);
    s.expected.ok.insert("amb-enq".into(), now_ms());

    let w = spec(&s, &s.server.url(), 1000);
    s.spawn(&w);
    s.wait_settled(WORK_TOPIC, Duration::from_secs(10)).await;
    let stats = s.stats(WORK_TOPIC).await.unwrap();
    assert_eq!((stats.enqueued, stats.succeeded), (2, 2), "{stats:?}");
    let rec = s.reconcile().await;
    s.assert_clean(&rec, &[]);
    assert_eq!(runs(&s.ledger())["amb-enq"].len(), 1);
    s.stop_workers();
}

/// Scenario 10b: an ack whose reply is delayed past the worker's response timeout after Redis
/// deleted the job. The completer retries; the retry finds the job gone and does nothing:
/// one run, one success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_ack_is_retried_harmlessly() {
    let mut s = Scenario::start("ambiguous-ack", BIN, ServerOptions::default()).await;
    let proxy = FaultProxy::start(s.server.port());
    // The lease outlives the time the ack is held (a hung extend must not cancel the job).
    let mut w = spec(&s, &proxy.url(), 10_000);
    w.response_timeout = Some(TIMEOUT);
    w.log = "warn,dq_worker=debug".into();
    s.spawn(&w);
    // One job first, so that every script the worker uses is loaded (see the enqueue test).
    s.enqueue_one::<WorkJob>("warm-up", FaultPayload::new(0, 10))
        .await
        .unwrap();
    s.wait_settled(WORK_TOPIC, Duration::from_secs(10)).await;
    // The job runs 3 s: the reply delay is on well before its ack is sent.
    s.enqueue_one::<WorkJob>("amb-ack", FaultPayload::new(1, 3000))
        .await
        .unwrap();
    eventually("the job started", Duration::from_secs(10), || {
        let started = s
            .ledger()
            .iter()
            .any(|e| e.kind == Kind::Start && e.key == "amb-ack");
        async move { started }
    })
    .await;
    proxy.set_reply_delay(HELD);
    eventually(
        "the ack was applied (the job is gone)",
        Duration::from_secs(10),
        || async { !exists(&s, "amb-ack").await },
    )
    .await;
    lift(&proxy);
    eventually(
        "the worker retried the ack and found the job gone",
        Duration::from_secs(10),
        || {
            let log = s.workers[0].log_text();
            async move {
                log.contains("ack failed; retrying") && log.contains("already acknowledged")
            }
        },
    )
    .await;
    let stats = s.stats(WORK_TOPIC).await.unwrap();
    assert_eq!((stats.succeeded, stats.expired), (2, 0), "{stats:?}");
    let rec = s.reconcile().await;
    s.assert_clean(&rec, &[]);
    let r = &runs(&s.ledger())["amb-ack"];
    assert_eq!(r.len(), 1, "{r:?}");
    s.stop_workers();
}

/// Scenario 15 (extra): a worker is partitioned from Redis (black hole) while it runs a job.
/// Its lease keeper cannot extend, so it cancels the handler once the lease has run out by its
/// own clock; another worker runs the job; after the partition heals the job has succeeded
/// exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_worker_gives_up_its_job() {
    let mut s = Scenario::start("partition", BIN, ServerOptions::default()).await;
    let proxy = FaultProxy::start(s.server.port());
    let mut cut_off = spec(&s, &proxy.url(), 1000);
    cut_off.response_timeout = Some(Duration::from_millis(500));
    let victim = s.spawn(&cut_off);
    let victim_pid = s.workers[victim].pid();
    s.enqueue_one::<WorkJob>("part", FaultPayload::new(1, 4000))
        .await
        .unwrap();
    eventually(
        "the victim started the job",
        Duration::from_secs(10),
        || {
            let started = s.ledger().iter().any(|e| e.kind == Kind::Start);
            async move { started }
        },
    )
    .await;
    let cut_at = now_ms();
    proxy.set_blackhole(true);
    let mut rescuer = spec(&s, &s.server.url(), 1000);
    rescuer.sleep = Some(Duration::from_millis(10));
    let rescuer = s.spawn(&rescuer);
    let rescuer_pid = s.workers[rescuer].pid();
    eventually(
        "the rescuer finished the job",
        Duration::from_secs(15),
        || {
            let done = s
                .ledger()
                .iter()
                .any(|e| e.kind == Kind::Finish && e.pid == rescuer_pid);
            async move { done }
        },
    )
    .await;
    eventually(
        "the victim cancelled its handler",
        Duration::from_secs(15),
        || {
            let cancelled = s
                .ledger()
                .iter()
                .any(|e| e.kind == Kind::Cancelled && e.pid == victim_pid);
            async move { cancelled }
        },
    )
    .await;
    proxy.set_blackhole(false);
    s.faults.push(dq_faults::Fault {
        what: "partition".into(),
        pid: Some(victim_pid),
        start_ms: cut_at,
        end_ms: now_ms(),
    });
    s.wait_settled(WORK_TOPIC, Duration::from_secs(15)).await;
    let stats = s.stats(WORK_TOPIC).await.unwrap();
    assert_eq!((stats.succeeded, stats.expired), (1, 1), "{stats:?}");
    let r = &runs(&s.ledger())["part"];
    assert_eq!(r.len(), 2, "{r:?}");
    assert!(r[0].cancelled && r[0].finished.is_none(), "{r:?}");
    assert_eq!((r[1].pid, r[1].attempt), (rescuer_pid, 2));
    // How long the cut-off handler kept running after the rescuer had started it.
    let victim_stop = s
        .ledger()
        .iter()
        .find(|e| e.kind == Kind::Cancelled && e.pid == victim_pid)
        .map_or(cut_at, |e| e.ms);
    println!(
        "partition: victim cancelled {} ms after the cut; rescuer started {} ms after the cut; \
         overlap {} ms",
        victim_stop - cut_at,
        r[1].started - cut_at,
        victim_stop.saturating_sub(r[1].started)
    );
    let rec = s.reconcile().await;
    s.assert_clean(&rec, &[]);
    block_in_place(|| s.stop_workers());
}

/// Scenario 9b (extra): the proxy cuts every connection of two workers every 200 ms for 5 s
/// while they run jobs (the client-side twin of `CLIENT KILL`). Every job succeeds; a job runs
/// twice only if it was in flight during the cuts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_cuts_every_connection_repeatedly() {
    let mut s = Scenario::start("proxy-cuts", BIN, ServerOptions::default()).await;
    let proxy = FaultProxy::start(s.server.port());
    let mut w = spec(&s, &proxy.url(), 1000);
    w.concurrency = 8;
    s.spawn(&w);
    s.spawn(&w);
    s.enqueue_bulk::<WorkJob>("cut", 0..600, 20).await;
    let started = now_ms();
    let mut cuts = 0;
    for _ in 0..25 {
        proxy.cut();
        cuts += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    s.record_global_fault("proxy cuts every 200 ms", started);
    s.wait_settled(WORK_TOPIC, Duration::from_secs(60)).await;
    let rec = s.reconcile().await;
    s.assert_clean(&rec, &[]);
    assert_eq!(rec.succeeded, 600);
    println!(
        "proxy cuts: {cuts} cuts, {} connections accepted",
        proxy.accepted_connections()
    );
    s.stop_workers();
}

/// Found by this suite (docs/GUARANTEES.md: repeated calls have no double effect): enqueue-by-key was idempotent only while the job
/// existed. An enqueue whose reply is lost is retried by the client; if a worker ran and acked
/// the job in between, the retry created the job a second time and it ran twice — with no
/// worker or Redis fault at all. Now the retry presents its call id, finds the receipt the
/// first try left, and writes nothing: it answers `Ended`, and the job runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_enqueue_of_a_job_that_already_ran_does_not_run_it_twice() {
    let mut s = Scenario::start("ambiguous-enqueue-ran", BIN, ServerOptions::default()).await;
    let proxy = FaultProxy::start(s.server.port());
    let producer = client_via(&s, &proxy).await;
    let w = spec(&s, &s.server.url(), 1000);
    s.spawn(&w);
    s.enqueue_one::<WorkJob>("warm-up", FaultPayload::new(0, 10))
        .await
        .unwrap();
    s.wait_settled(WORK_TOPIC, Duration::from_secs(10)).await;

    proxy.set_reply_delay(HELD);
    let call = tokio::spawn(
        producer
            .enqueue::<WorkJob>(FaultPayload::new(1, 10))
            .key("ran-once")
            .into_future(),
    );
    eventually(
        "the worker ran and acked the job before the client's retry",
        Duration::from_secs(5),
        || {
            let finished = s
                .ledger()
                .iter()
                .any(|e| e.kind == Kind::Finish && e.key == "ran-once");
            let s = &s;
            async move { finished && !exists(s, "ran-once").await }
        },
    )
    .await;
    lift(&proxy);
    let outcome = call.await.unwrap().expect("the retry succeeds");
    s.expected.ok.insert("ran-once".into(), now_ms());
    s.wait_settled(WORK_TOPIC, Duration::from_secs(10)).await;
    let r = &runs(&s.ledger())["ran-once"];
    let stats = s.stats(WORK_TOPIC).await.unwrap();
    println!(
        "retried enqueue answered {:?}; the job ran {} times; stats {stats:?}",
        outcome.outcome,
        r.len()
    );
    assert_eq!(r.len(), 1, "one enqueue call, one job: {r:?}");
    assert_eq!(outcome.outcome, EnqueueOutcome::Ended);
    assert_eq!((stats.enqueued, stats.succeeded), (2, 2), "{stats:?}");
    let rec = s.reconcile().await;
    s.assert_clean(&rec, &[]);
    s.stop_workers();
}

/// Found by this suite (fenced deliveries, docs/ARCHITECTURE.md §6.3): a worker cut off from Redis by a hung connection kept
/// running its handler past its lease for up to the client's response timeout, because the
/// lease keeper checked its local deadline only when an `extend` call returned an error. The
/// handler must be cancelled at the local deadline, whatever the calls in flight are doing.
/// The response timeout here is 30 s, so the two behaviours are far apart: about one lease
/// (1 s) after the cut, or 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_handler_stops_at_its_lease_deadline_while_calls_hang() {
    let mut s = Scenario::start("partition-hang", BIN, ServerOptions::default()).await;
    let proxy = FaultProxy::start(s.server.port());
    let mut cut_off = spec(&s, &proxy.url(), 1000);
    cut_off.response_timeout = Some(Duration::from_secs(30));
    let victim = s.spawn(&cut_off);
    let victim_pid = s.workers[victim].pid();
    s.enqueue_one::<WorkJob>("part", FaultPayload::new(1, 20_000))
        .await
        .unwrap();
    eventually(
        "the victim started the job",
        Duration::from_secs(10),
        || {
            let started = s.ledger().iter().any(|e| e.kind == Kind::Start);
            async move { started }
        },
    )
    .await;
    let cut_at = now_ms();
    proxy.set_blackhole(true);
    let stopped = dq_testkit::eventually_some(
        "the victim cancelled its handler",
        Duration::from_secs(20),
        || {
            let at = s
                .ledger()
                .iter()
                .find(|e| e.kind == Kind::Cancelled && e.pid == victim_pid)
                .map(|e| e.ms);
            async move { at }
        },
    )
    .await;
    proxy.set_blackhole(false);
    let ran_on = stopped - cut_at;
    println!("partition, calls hanging: handler cancelled {ran_on} ms after the cut");
    // The lease is 1 s (extended at most a third of a lease before the cut); a handler
    // stopped only when the hung `extend` times out would have run 30 s.
    assert!(ran_on < 15_000, "handler ran {ran_on} ms past the cut");
    block_in_place(|| s.stop_workers());
}
