//! Graceful shutdown under load: it never spends the attempt of a job it cancels.
//!
//! At the shutdown deadline the worker cancels the handlers still running and releases their
//! jobs without spending the attempt. A handler that gives up with `Err` when `ctx.cancelled()`
//! fires (the pattern the docs suggest) returns its error at the same moment the runner sees
//! the cancellation; if that error were recorded, a job of a `retry = "none"` topic would go to
//! the dead queue because its worker was shut down.
//!
//! The scenario runs real `fault-worker` processes against their own `redis-server` and ends
//! with the reconciliation of `dq_faults::check`.

use std::time::Duration;

use dq_faults::ledger::Kind;
use dq_faults::{ONCE_TOPIC, OnceJob, Scenario};
use dq_testkit::{ServerOptions, eventually};

const BIN: &str = env!("CARGO_BIN_EXE_fault-worker");

/// Rounds of: two workers take 8 long jobs each of a `retry = "none"` topic, then both are shut
/// down gracefully (`SIGTERM`, 200 ms shutdown timeout) while every handler is running; the
/// handlers return `Err` on cancellation. 12 rounds cancel about 190 runs. Then quick workers
/// drain the queue: no job may be dead, and every job ends exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_never_spends_the_attempt_of_a_job_it_cancels() {
    const JOBS: u64 = 40;
    const ROUNDS: usize = 12;
    let mut s = Scenario::start("shutdown-cancel", BIN, ServerOptions::default()).await;
    let mut spec = s.spec();
    spec.topics = vec![ONCE_TOPIC.into()];
    spec.concurrency = 8;
    spec.shutdown_timeout = Some(Duration::from_millis(200));
    s.enqueue_bulk::<OnceJob>("once", 0..JOBS, 120_000).await;

    let mut cancelled_runs = 0;
    for round in 0..ROUNDS {
        let a = s.spawn(&spec);
        let b = s.spawn(&spec);
        let pids = [s.workers[a].pid(), s.workers[b].pid()];
        // Every slot busy: 16 handlers running.
        eventually("both workers run 8 jobs", Duration::from_secs(30), || {
            let ledger = s.ledger();
            let busy = pids.iter().all(|pid| {
                ledger
                    .iter()
                    .filter(|e| e.kind == Kind::Start && e.pid == *pid)
                    .count()
                    >= 8
            });
            async move { busy }
        })
        .await;
        for i in [a, b] {
            let status = s.workers[i].terminate(Duration::from_secs(20));
            assert!(
                status.success(),
                "round {round}: {status:?}\n{}",
                s.workers[i].log_tail(20)
            );
        }
        let stats = s.stats(ONCE_TOPIC).await.unwrap();
        assert_eq!(
            (stats.active, stats.dead),
            (0, 0),
            "round {round}: every cancelled job is released, none spent: {stats:?}\n{}",
            s.logs(10)
        );
        cancelled_runs += s
            .ledger()
            .iter()
            .filter(|e| e.kind == Kind::Cancelled && pids.contains(&e.pid))
            .count();
    }

    // Quick workers finish every job.
    let mut quick = spec.clone();
    quick.sleep = Some(Duration::from_millis(5));
    s.spawn(&quick);
    s.wait_settled(ONCE_TOPIC, Duration::from_secs(60)).await;
    let rec = s.reconcile().await;
    println!("shutdown-cancel: {cancelled_runs} runs cancelled by {ROUNDS} x 2 shutdowns");
    assert!(cancelled_runs > 0, "no handler saw its cancellation");
    s.assert_clean(&rec, &[]);
    assert_eq!(rec.succeeded, JOBS as usize);
    let stats = s.stats(ONCE_TOPIC).await.unwrap();
    assert_eq!((stats.dead, stats.succeeded), (0, JOBS), "{stats:?}");
    s.stop_workers();
}
