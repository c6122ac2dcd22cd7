//! Redis faults: SIGKILL under load (AOF `always` and `everysec`), down for 10 s, not yet up
//! when the worker starts, client connections killed over and over, and `FUNCTION FLUSH`.
//!
//! Every scenario runs real `fault-worker` processes against its own `redis-server` and ends
//! with the reconciliation of `dq_faults::check`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dq_faults::ledger::{Kind, now_ms};
use dq_faults::{FaultPayload, Scenario, WORK_TOPIC, WorkJob, WorkerSpec};
use dq_testkit::{Persistence, ServerOptions, eventually};
use tokio::task::block_in_place;

const BIN: &str = env!("CARGO_BIN_EXE_fault-worker");

fn spec(s: &Scenario, concurrency: usize, lease_ms: u64) -> WorkerSpec {
    let mut spec = s.spec();
    spec.concurrency = concurrency;
    spec.lease = Duration::from_millis(lease_ms);
    spec
}

/// What a background producer saw: keys whose enqueue returned `Ok` (with when), and keys
/// whose enqueue returned an error.
#[derive(Default)]
struct Produced {
    ok: BTreeMap<String, u64>,
    failed: BTreeSet<String>,
    call_started: BTreeMap<String, u64>,
}

type Shared = Arc<Mutex<Produced>>;

/// A producer task enqueueing one job at a time (key `p-{i}`), recording every outcome.
struct Producer {
    stop: tokio::sync::watch::Sender<bool>,
    seen: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl Producer {
    /// Enqueues a job working `sleep_ms` every `pace` until stopped or `max` jobs were tried.
    fn start(s: &Scenario, sleep_ms: u64, pace: Duration, max: u64) -> Producer {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let client = s.client.clone();
        let seen: Shared = Arc::default();
        let out = seen.clone();
        let task = tokio::spawn(async move {
            for i in 0..max {
                if *stopped.borrow() {
                    break;
                }
                let key = format!("p-{i}");
                let started = now_ms();
                let result = client
                    .enqueue::<WorkJob>(FaultPayload::new(i, sleep_ms))
                    .key(&key)
                    .await;
                {
                    let mut out = out.lock().unwrap();
                    out.call_started.insert(key.clone(), started);
                    match result {
                        Ok(_) => {
                            out.ok.insert(key, now_ms());
                        }
                        Err(_) => {
                            out.failed.insert(key);
                        }
                    }
                }
                tokio::time::sleep(pace).await;
            }
        });
        Producer { stop, seen, task }
    }

    /// Stops the producer and moves what it saw into the scenario's expectations; returns
    /// the numbers of Ok and failed enqueues.
    async fn absorb(self, s: &mut Scenario) -> (usize, usize) {
        self.stop.send_replace(true);
        self.task.await.unwrap();
        let p = std::mem::take(&mut *self.seen.lock().unwrap());
        let counts = (p.ok.len(), p.failed.len());
        s.expected.ok.extend(p.ok);
        s.expected.ambiguous.extend(p.failed);
        s.expected.call_started.extend(p.call_started);
        counts
    }
}

/// The usual pair of workers: concurrency 8, a 1 s lease.
fn spawn_two_workers(s: &mut Scenario) {
    let w = spec(s, 8, 1000);
    s.spawn(&w);
    s.spawn(&w);
}

fn finished(s: &Scenario) -> usize {
    s.ledger().iter().filter(|e| e.kind == Kind::Finish).count()
}

/// Kills Redis under load and restarts it on the same data; records the outage as a fault.
fn crash_and_restart(s: &mut Scenario, down_for: Duration) -> u64 {
    let at = now_ms();
    block_in_place(|| {
        s.server.kill();
        // The outage itself, not a synchronisation.
        std::thread::sleep(down_for);
        s.server.restart();
    });
    s.record_global_fault(format!("redis SIGKILL, down {down_for:?}"), at);
    at
}

fn assert_workers_alive(s: &mut Scenario) {
    for w in &mut s.workers {
        let exit = w.exited();
        assert!(
            exit.is_none(),
            "worker {} died: {exit:?}\n{}",
            w.name(),
            w.log_tail(20)
        );
        assert!(!w.log_text().contains("panicked"), "{}", w.log_tail(40));
    }
}

/// Scenario 6: Redis is SIGKILLed under load with `appendfsync always`. Every enqueue that
/// returned `Ok` is still there after the restart (or already done); the workers reconnect by
/// themselves; every job ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_sigkill_with_aof_always_loses_no_acknowledged_enqueue() {
    let options = ServerOptions::default().persistence(Persistence::AofAlways);
    let mut s = Scenario::start("redis-kill-aof-always", BIN, options).await;
    spawn_two_workers(&mut s);
    let producer = Producer::start(&s, 20, Duration::from_millis(2), 20_000);
    eventually("work is flowing", Duration::from_secs(15), || {
        let n = finished(&s);
        async move { n >= 200 }
    })
    .await;
    let killed_at = crash_and_restart(&mut s, Duration::from_millis(1500));
    // Right after the restart: every enqueue acknowledged before the kill is in the store or
    // already done. Read the store first: a job acked after that read wrote its finish line
    // before its ack, so the ledger read second has it.
    let acknowledged: Vec<String> = producer
        .seen
        .lock()
        .unwrap()
        .ok
        .iter()
        .filter(|(_, at)| **at < killed_at)
        .map(|(k, _)| k.clone())
        .collect();
    let present = dq_faults::check::states(&s.snapshot().await);
    let done: BTreeSet<String> = s
        .ledger()
        .into_iter()
        .filter(|e| e.kind == Kind::Finish)
        .map(|e| e.key)
        .collect();
    let missing: Vec<&String> = acknowledged
        .iter()
        .filter(|k| !present.contains_key(*k) && !done.contains(*k))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged enqueues missing after the restart: {:?}",
        missing.len(),
        acknowledged.len(),
        &missing[..missing.len().min(10)]
    );
    // Keep producing a while after the restart, then stop.
    eventually("work flows again", Duration::from_secs(30), || {
        let after = s
            .ledger()
            .iter()
            .filter(|e| e.kind == Kind::Finish && e.ms > killed_at + 500)
            .count();
        async move { after >= 200 }
    })
    .await;
    let (ok, failed) = producer.absorb(&mut s).await;
    s.wait_settled(WORK_TOPIC, Duration::from_secs(60)).await;
    assert_workers_alive(&mut s);

    let rec = s.reconcile().await;
    s.assert_clean(&rec, &[]);
    println!(
        "aof always: {} acknowledged before the kill all present; {ok} enqueues returned Ok, \
         {failed} failed during the outage",
        acknowledged.len()
    );
    s.stop_workers();
}

/// Scenario 7: Redis is SIGKILLed under load with `appendfsync everysec`. Measures the loss
/// window: jobs whose enqueue returned `Ok` but that are gone after the restart, without a run.
/// It must stay within the fsync interval (about 1 s, at most 2 s of writes); nothing that was
/// already acked may come back stuck, and every job that survived ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_sigkill_with_aof_everysec_loses_at_most_a_second() {
    let options = ServerOptions::default().persistence(Persistence::AofEverySec);
    let mut s = Scenario::start("redis-kill-aof-everysec", BIN, options).await;
    spawn_two_workers(&mut s);
    let producer = Producer::start(&s, 20, Duration::from_millis(2), 20_000);
    eventually("work is flowing", Duration::from_secs(15), || {
        let n = finished(&s);
        async move { n >= 300 }
    })
    .await;
    let killed_at = crash_and_restart(&mut s, Duration::ZERO);
    producer.absorb(&mut s).await;
    s.wait_settled(WORK_TOPIC, Duration::from_secs(60)).await;
    assert_workers_alive(&mut s);

    let rec = s.reconcile().await;
    let window = rec
        .lost
        .iter()
        .filter_map(|k| s.expected.ok.get(k))
        .min()
        .map_or(0, |first| killed_at.saturating_sub(*first));
    println!(
        "aof everysec: {} of {} acknowledged enqueues lost; loss window {window} ms before the kill",
        rec.lost.len(),
        rec.jobs
    );
    // everysec loses about a second of writes, two when fsync is slow (Redis then postpones
    // it up to 2 s); the window is measured from the producer's side, so allow for the
    // producer's own delay in noting its acks on a loaded machine.
    assert!(
        window <= 3_000,
        "lost {} jobs over {window} ms",
        rec.lost.len()
    );
    // Lost jobs are the measured window; everything else must hold.
    let mut rest = rec.clone();
    rest.lost.clear();
    s.assert_clean(&rest, &[]);
    s.stop_workers();
}

/// Scenario 8a: Redis is down for 10 s while jobs run. The workers ride it out (fetch backs
/// off, acks are retried, handlers whose lease cannot be renewed are cancelled) and finish
/// every job after the restart; nobody panics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_ten_seconds_during_processing() {
    let options = ServerOptions::default().persistence(Persistence::AofAlways);
    let mut s = Scenario::start("redis-down-10s", BIN, options).await;
    spawn_two_workers(&mut s);
    s.enqueue_bulk::<WorkJob>("d", 0..400, 50).await;
    eventually("some jobs are done", Duration::from_secs(15), || {
        let n = finished(&s);
        async move { n >= 100 }
    })
    .await;
    crash_and_restart(&mut s, Duration::from_secs(10));
    s.wait_settled(WORK_TOPIC, Duration::from_secs(60)).await;
    assert_workers_alive(&mut s);

    let rec = s.reconcile().await;
    s.assert_clean(&rec, &[]);
    assert_eq!(rec.succeeded, 400);
    s.stop_workers();
}

/// Scenario 8b: the worker starts while Redis is not up yet. It keeps retrying its connection
/// (the pattern `fault-worker` documents), starts once Redis is there, and runs every job —
/// those enqueued before the outage and those after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_started_before_redis_waits_and_recovers() {
    let options = ServerOptions::default().persistence(Persistence::AofAlways);
    let mut s = Scenario::start("redis-not-up-yet", BIN, options).await;
    s.enqueue_bulk::<WorkJob>("before", 0..50, 10).await;
    let down_at = now_ms();
    block_in_place(|| s.server.kill());
    let w = spec(&s, 8, 1000);
    let mut worker = s.spawn_unready(&w);
    // Redis stays down until the worker has failed to connect twice.
    eventually(
        "the worker retried its connection",
        Duration::from_secs(20),
        || {
            let tries = worker
                .log_text()
                .matches("redis unreachable; retrying")
                .count();
            async move { tries >= 2 }
        },
    )
    .await;
    assert!(!worker.poll_ready(), "ready without redis?");
    assert!(worker.exited().is_none(), "{}", worker.log_tail(20));
    block_in_place(|| s.server.restart());
    s.record_global_fault("redis not up at worker start", down_at);
    block_in_place(|| worker.wait_ready(Duration::from_secs(20)));
    assert!(
        worker.log_text().contains("redis unreachable; retrying"),
        "{}",
        worker.log_tail(20)
    );
    s.workers.push(worker);
    s.enqueue_bulk::<WorkJob>("after", 0..50, 10).await;
    s.wait_settled(WORK_TOPIC, Duration::from_secs(30)).await;
    assert_workers_alive(&mut s);

    let rec = s.reconcile().await;
    s.assert_clean(&rec, &[]);
    assert_eq!(rec.succeeded, 100);
    s.stop_workers();
}

/// Scenario 9: every client connection is killed (`CLIENT KILL TYPE normal`) every 200 ms for
/// 10 s while jobs run and a producer enqueues. Fetchers reconnect; no job is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_killed_repeatedly() {
    let mut s = Scenario::start("client-kill", BIN, ServerOptions::default()).await;
    spawn_two_workers(&mut s);
    s.enqueue_bulk::<WorkJob>("bulk", 0..600, 30).await;
    let producer = Producer::start(&s, 30, Duration::from_millis(10), 5_000);
    let started = now_ms();
    let until = Instant::now() + Duration::from_secs(10);
    let mut kills = 0u32;
    let mut killed = 0i64;
    while Instant::now() < until {
        if let Ok(n) = s
            .server
            .try_cmd::<i64>(&["CLIENT", "KILL", "TYPE", "normal"])
        {
            kills += 1;
            killed += n;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    s.record_global_fault("CLIENT KILL TYPE normal every 200 ms", started);
    producer.absorb(&mut s).await;
    s.wait_settled(WORK_TOPIC, Duration::from_secs(60)).await;
    assert_workers_alive(&mut s);

    let rec = s.reconcile().await;
    s.assert_clean(&rec, &[]);
    println!("client kill: {kills} rounds closed {killed} connections");
    assert!(
        kills >= 20 && killed >= 40,
        "{kills} rounds, {killed} closed"
    );
    s.stop_workers();
}

/// Scenario 11: `FUNCTION FLUSH` every 100 ms while jobs run: the store loads dq's library
/// again transparently (FCALL → `Function not found` → `FUNCTION LOAD` → FCALL), so every job
/// runs exactly once.
///
/// A flush that lands between the load and the second FCALL fails the call with `Function not
/// found` again; dq types that as `NOSCRIPT` and retries it like a dropped connection (see
/// `noscript_is_retryable`). Before that was so, such an ack was given up and its job ran a
/// second time after its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_mid_run_reloads_transparently() {
    let mut s = Scenario::start("script-flush", BIN, ServerOptions::default()).await;
    spawn_two_workers(&mut s);
    let producer = Producer::start(&s, 10, Duration::from_millis(5), 5_000);
    s.enqueue_bulk::<WorkJob>("bulk", 0..500, 20).await;
    let mut flushes = 0;
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        s.server.cmd::<()>(&["FUNCTION", "FLUSH"]);
        flushes += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, failed) = producer.absorb(&mut s).await;
    s.wait_settled(WORK_TOPIC, Duration::from_secs(30)).await;
    assert_workers_alive(&mut s);

    let warnings: usize = s
        .workers
        .iter()
        .map(|w| {
            w.log_text()
                .lines()
                .filter(|l| l.contains(" WARN "))
                .count()
        })
        .sum();
    let rec = s.reconcile().await;
    // No fault is recorded: a flush makes no outcome ambiguous, so no job may run twice.
    s.assert_clean(&rec, &[]);
    assert_eq!(rec.duplicates, 0);
    assert_eq!(failed, 0, "no enqueue may fail over a script flush");
    println!("script flush: {flushes} flushes; {warnings} worker warnings");
    s.stop_workers();
}

/// NOSCRIPT means the script did not run at all, so the same call is always safe to repeat:
/// dq must treat it as retryable (the retry reloads the library). dq gives a function the
/// server lacks this kind (`store::redis::scripts::script_error`). Otherwise an ack that meets
/// a `FUNCTION FLUSH` between the reload and its second FCALL is given up, and the job runs
/// twice (seen in `script_flush_mid_run_reloads_transparently`).
#[test]
fn noscript_is_retryable() {
    let e = dq::Error::from(redis::RedisError::from((
        redis::ErrorKind::Server(redis::ServerErrorKind::NoScript),
        "No matching script",
    )));
    assert!(e.is_retryable(), "{e}");
}
