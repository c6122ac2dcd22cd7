//! A paused worker's handlers stop at their lease's local deadline.
//!
//! README: a handler "is cancelled once its lease has surely run out, even if the store cannot
//! be reached". A process that was paused (`SIGSTOP`, a VM freeze) longer than its lease
//! resumes with every timer overdue at once; the handler's own timer may fire before the lease
//! keeper's. The promise holds only if nothing on the handler's side waits for a tick: its
//! `ctx.is_cancelled()` reads the lease's deadline from the clock, the runner never starts a
//! delivery whose lease has run out, and a result that comes back after the deadline is
//! discarded.
//!
//! The scenario runs real `fault-worker` processes against their own `redis-server` and ends
//! with the reconciliation of `dq_faults::check`.

use std::time::Duration;

use dq::JobSpec;
use dq_faults::check::runs;
use dq_faults::ledger::{Kind, now_ms};
use dq_faults::{FaultPayload, Scenario, WORK_TOPIC, WorkJob};
use dq_testkit::{ServerOptions, eventually};

const BIN: &str = env!("CARGO_BIN_EXE_fault-worker");

/// The reproduction: 3 workers with a 3 s lease run jobs that work 0–400 ms and then
/// make their side effect (the ledger's finish line, made only if `!ctx.is_cancelled()`); one
/// worker is paused for 8 s. None of the paused worker's runs may make its side effect after
/// the pause (its leases ran out 5 s before it resumed, and other workers ran those jobs), and
/// none may start after the pause on a delivery leased before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigstop_8s_on_a_3s_lease_no_side_effect_after_the_lease_ran_out() {
    const JOBS: u64 = 1_500;
    const LEASE_MS: u64 = 3_000;
    let mut s = Scenario::start("sigstop-deadline", BIN, ServerOptions::default()).await;
    let mut spec = s.spec();
    spec.lease = Duration::from_millis(LEASE_MS);
    for _ in 0..3 {
        s.spawn(&spec);
    }
    // Work times spread over 0–400 ms.
    let jobs: Vec<JobSpec<FaultPayload>> = (0..JOBS)
        .map(|i| JobSpec::new(FaultPayload::new(i, i * 7_919 % 401)).key(format!("d-{i}")))
        .collect();
    s.client.enqueue_bulk::<WorkJob>(jobs).await.unwrap();
    let accepted = now_ms();
    for i in 0..JOBS {
        s.expected.ok.insert(format!("d-{i}"), accepted);
    }

    // Pause a worker while it is busy.
    let victim_pid = s.workers[0].pid();
    eventually(
        "the victim is running jobs",
        Duration::from_secs(15),
        || {
            let busy = s
                .ledger()
                .iter()
                .filter(|e| e.kind == Kind::Start && e.pid == victim_pid)
                .count()
                >= 20;
            async move { busy }
        },
    )
    .await;
    let stopped_at = now_ms();
    s.workers[0].signal("STOP");
    // The pause itself (much longer than the lease), not a synchronisation.
    tokio::time::sleep(Duration::from_secs(8)).await;
    s.workers[0].signal("CONT");
    let continued_at = now_ms();
    s.faults.push(dq_faults::Fault {
        what: format!("SIGSTOP pid {victim_pid} for 8 s"),
        pid: Some(victim_pid),
        start_ms: stopped_at,
        end_ms: continued_at,
    });
    s.wait_settled(WORK_TOPIC, Duration::from_secs(90)).await;

    let all = runs(&s.ledger());
    // Tokens grow with every lease (one partition): the highest token another worker started
    // before the resume bounds the tokens leased before it.
    let leased_before_resume = all
        .values()
        .flatten()
        .filter(|r| r.pid != victim_pid && r.started < continued_at)
        .map(|r| r.token)
        .max()
        .unwrap_or(0);
    let mut paused_runs = 0;
    let mut effects_after_lease = Vec::new();
    let mut started_after_lease = Vec::new();
    for (key, key_runs) in &all {
        for r in key_runs.iter().filter(|r| r.pid == victim_pid) {
            if r.started <= stopped_at {
                paused_runs += usize::from(r.finished.is_none_or(|f| f >= stopped_at));
                // Its lease ended at most LEASE_MS after the pause began.
                if r.finished.is_some_and(|f| f >= stopped_at + LEASE_MS) {
                    effects_after_lease.push(format!("{key}: {r:?}"));
                }
            } else if r.started >= continued_at && r.token < leased_before_resume {
                started_after_lease.push(format!("{key}: {r:?}"));
            }
        }
    }
    println!(
        "sigstop-deadline: {paused_runs} runs in flight at the pause; {} made their side effect \
         after their lease ran out; {} deliveries leased before the pause started after it",
        effects_after_lease.len(),
        started_after_lease.len()
    );
    assert!(paused_runs > 0, "the pause caught no run in flight");
    assert!(
        effects_after_lease.is_empty(),
        "{} side effects after the lease ran out: {:?}",
        effects_after_lease.len(),
        &effects_after_lease[..effects_after_lease.len().min(5)]
    );
    assert!(
        started_after_lease.is_empty(),
        "{} handlers started on leases that had run out: {:?}",
        started_after_lease.len(),
        &started_after_lease[..started_after_lease.len().min(5)]
    );

    let rec = s.reconcile().await;
    s.assert_clean(&rec, &[]);
    assert_eq!(rec.succeeded, JOBS as usize);
    s.stop_workers();
}
