//! Worker-process faults: SIGKILL mid-job, a chaos loop of kills and respawns, SIGSTOP longer
//! and shorter than the lease, and a poison pill that aborts its process.
//!
//! Every scenario runs real `fault-worker` processes against its own `redis-server` and ends
//! with the reconciliation of `dq_faults::check`.

use std::time::{Duration, Instant};

use dq::{AttemptOutcome, JobState};
use dq_faults::check::runs;
use dq_faults::ledger::{Kind, now_ms};
use dq_faults::{FaultPayload, POISON_TOPIC, PoisonJob, Scenario, WORK_TOPIC, WorkJob, WorkerSpec};
use dq_testkit::{ServerOptions, eventually};

const BIN: &str = env!("CARGO_BIN_EXE_fault-worker");

fn spec(s: &Scenario, concurrency: usize, lease_ms: u64) -> WorkerSpec {
    let mut spec = s.spec();
    spec.concurrency = concurrency;
    spec.lease = Duration::from_millis(lease_ms);
    spec
}

/// Waits until some worker has started `key`; returns that worker's pid.
async fn started_by(s: &Scenario, key: &str) -> u32 {
    dq_testkit::eventually_some(
        &format!("a worker started {key}"),
        Duration::from_secs(15),
        || {
            let pid = s
                .ledger()
                .iter()
                .find(|e| e.kind == Kind::Start && e.key == key)
                .map(|e| e.pid);
            async move { pid }
        },
    )
    .await
}

fn index_of(s: &Scenario, pid: u32) -> usize {
    s.workers
        .iter()
        .position(|w| w.pid() == pid)
        .expect("the pid is one of ours")
}

/// Scenario 1: a worker is SIGKILLed while running a job. After the lease, another worker runs
/// it again as attempt 2; the lost attempt is counted (`expired`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_job_runs_again_elsewhere_as_attempt_2() {
    let mut s = Scenario::start("sigkill-mid-job", BIN, ServerOptions::default()).await;
    let a = s.spawn(&spec(&s, 1, 1000));
    s.enqueue_one::<WorkJob>("long", FaultPayload::new(1, 60_000))
        .await
        .unwrap();
    let pid_a = started_by(&s, "long").await;
    assert_eq!(pid_a, s.workers[a].pid());
    s.kill(a);
    let killed_at = now_ms();

    let mut b_spec = spec(&s, 1, 1000);
    b_spec.sleep = Some(Duration::from_millis(10));
    let b = s.spawn(&b_spec);
    s.wait_settled(WORK_TOPIC, Duration::from_secs(20)).await;

    let all = runs(&s.ledger());
    let r = &all["long"];
    assert_eq!(r.len(), 2, "{r:?}");
    assert_eq!((r[0].pid, r[0].attempt, r[0].finished), (pid_a, 1, None));
    assert_eq!(r[1].pid, s.workers[b].pid());
    assert_eq!(r[1].attempt, 2, "the killed attempt is counted");
    assert!(r[1].finished.is_some());
    assert!(r[1].started >= killed_at, "{r:?}");
    let stats = s.stats(WORK_TOPIC).await.unwrap();
    assert_eq!((stats.expired, stats.succeeded), (1, 1), "{stats:?}");

    let rec = s.reconcile().await;
    s.assert_clean(&rec, &[]);
    s.stop_workers();
}

/// Scenario 2: three workers × concurrency 8 run 2,000 jobs while one of them is SIGKILLed
/// and respawned every 2 s. Every job succeeds; a job runs twice only if it was in flight at
/// a kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_kill_and_respawn_every_two_seconds() {
    const JOBS: u64 = 2_000;
    let mut s = Scenario::start("chaos", BIN, ServerOptions::default()).await;
    let worker = spec(&s, 8, 1000);
    for _ in 0..3 {
        s.spawn(&worker);
    }
    s.enqueue_bulk::<WorkJob>("c", 0..JOBS, 250).await;

    let chaos_until = Instant::now() + Duration::from_secs(30);
    let mut victim = 0;
    while Instant::now() < chaos_until {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let st = s.stats(WORK_TOPIC).await.unwrap();
        if st.scheduled + st.ready + st.active + st.retry == 0 {
            break;
        }
        s.kill(victim);
        s.respawn(victim, &worker);
        victim = (victim + 1) % 3;
    }
    let kills = s.faults.len();
    s.wait_settled(WORK_TOPIC, Duration::from_secs(60)).await;

    let rec = s.reconcile().await;
    s.assert_clean(&rec, &[]);
    assert_eq!(rec.succeeded, JOBS as usize);
    assert!(kills >= 5, "only {kills} kills happened");
    let stats = s.stats(WORK_TOPIC).await.unwrap();
    println!("chaos: {kills} kills, stats {stats:?}");
    s.stop_workers();
}

/// Scenario 3: a worker is SIGSTOPped longer than its lease. Another worker runs the job (as
/// attempt 2); the stopped one, once resumed, must not make the job's side effect: its lease
/// surely ran out during the pause, so its handler is stopped at once — `ctx.is_cancelled()`
/// reads the lease's deadline from the clock, whichever of the overdue timers fires first
/// after `SIGCONT` — and the stats count exactly one success.
///
/// The rescuer is started after the pause began and works 6 s, so that the victim resumes
/// while the rescuer still holds the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigstop_longer_than_the_lease_the_paused_run_is_not_counted() {
    let mut s = Scenario::start("sigstop-long", BIN, ServerOptions::default()).await;
    let victim = s.spawn(&spec(&s, 1, 1000));
    let victim_pid = s.workers[victim].pid();
    // Works 2 s: the pause begins well before the work is done.
    s.enqueue_one::<WorkJob>("paused", FaultPayload::new(1, 2000))
        .await
        .unwrap();
    assert_eq!(started_by(&s, "paused").await, victim_pid);
    let stopped_at = now_ms();
    s.workers[victim].signal("STOP");

    let mut rescuer_spec = spec(&s, 1, 1000);
    rescuer_spec.sleep = Some(Duration::from_secs(6));
    let rescuer = s.spawn(&rescuer_spec);
    let rescuer_pid = s.workers[rescuer].pid();
    // The rescuer can only start the job once the victim's lease has expired: that it does is
    // the proof that the pause outlasted the lease.
    eventually(
        "the rescuer started the job",
        Duration::from_secs(15),
        || {
            let started = s
                .ledger()
                .iter()
                .any(|e| e.kind == Kind::Start && e.key == "paused" && e.pid == rescuer_pid);
            async move { started }
        },
    )
    .await;
    // The pause lasts at least 3 s, longer than the victim's work: at `SIGCONT` the handler's
    // own timer is overdue too, and fires before any lease keeper's round trip could cancel
    // it. (The length of the fault, not a synchronisation.)
    let pause_end = stopped_at + 3_000;
    if let Some(left) = pause_end.checked_sub(now_ms()) {
        tokio::time::sleep(Duration::from_millis(left)).await;
    }
    s.workers[victim].signal("CONT");
    s.faults.push(dq_faults::Fault {
        what: format!("SIGSTOP pid {victim_pid}"),
        pid: Some(victim_pid),
        start_ms: stopped_at,
        end_ms: now_ms(),
    });

    eventually(
        "the resumed worker's handler returned",
        Duration::from_secs(15),
        || {
            let returned = s.ledger().iter().any(|e| {
                matches!(e.kind, Kind::Cancelled | Kind::Finish)
                    && e.key == "paused"
                    && e.pid == victim_pid
            });
            async move { returned }
        },
    )
    .await;
    s.wait_settled(WORK_TOPIC, Duration::from_secs(15)).await;
    let stats = s.stats(WORK_TOPIC).await.unwrap();
    assert_eq!((stats.succeeded, stats.expired), (1, 1), "{stats:?}");
    let r = &runs(&s.ledger())["paused"];
    assert_eq!(r.len(), 2, "{r:?}");
    assert_eq!((r[0].pid, r[0].attempt), (victim_pid, 1));
    assert_eq!((r[1].pid, r[1].attempt), (rescuer_pid, 2));
    assert!(r[1].finished.is_some(), "{r:?}");
    assert_eq!(
        r[0].finished, None,
        "the paused run made its side effect after its lease ran out: {r:?}"
    );
    assert!(r[0].cancelled, "{r:?}");

    let rec = s.reconcile().await;
    s.assert_clean(&rec, &[]);
    assert_eq!(rec.duplicates, 0);
    s.stop_workers();
}

/// Scenario 4: a SIGSTOP shorter than the lease changes nothing: no second delivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigstop_shorter_than_the_lease_is_harmless() {
    let mut s = Scenario::start("sigstop-short", BIN, ServerOptions::default()).await;
    // A 6 s lease (extended every 2 s) against a 0.7 s pause: the margin covers a loaded
    // machine's delays in stopping, continuing and extending.
    let w = spec(&s, 1, 6000);
    s.spawn(&w);
    s.spawn(&w);
    s.enqueue_one::<WorkJob>("brief", FaultPayload::new(1, 3000))
        .await
        .unwrap();
    let victim_pid = started_by(&s, "brief").await;
    let victim = index_of(&s, victim_pid);
    let stopped_at = now_ms();
    s.workers[victim].signal("STOP");
    // The pause itself (well under the lease), not a synchronisation.
    tokio::time::sleep(Duration::from_millis(700)).await;
    s.workers[victim].signal("CONT");
    s.faults.push(dq_faults::Fault {
        what: format!("SIGSTOP pid {victim_pid} for 700 ms"),
        pid: Some(victim_pid),
        start_ms: stopped_at,
        end_ms: now_ms(),
    });
    s.wait_settled(WORK_TOPIC, Duration::from_secs(15)).await;

    let r = &runs(&s.ledger())["brief"];
    assert_eq!(r.len(), 1, "no second delivery: {r:?}");
    assert_eq!((r[0].pid, r[0].attempt), (victim_pid, 1));
    assert!(r[0].finished.is_some());
    let stats = s.stats(WORK_TOPIC).await.unwrap();
    assert_eq!((stats.succeeded, stats.expired), (1, 0), "{stats:?}");
    assert!(!s.workers[victim].log_text().contains("lease lost"));

    let rec = s.reconcile().await;
    s.assert_clean(&rec, &[]);
    s.stop_workers();
}

/// Scenario 5: a handler aborts its process for one payload. That job dies after its three
/// attempts, each recorded as "lease expired"; every other job succeeds although the pill
/// takes its neighbours down with it each time (the test respawns the dead workers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_pill_dies_after_its_attempts_and_the_rest_succeed() {
    const PILL: u64 = 13;
    let mut s = Scenario::start("poison-pill", BIN, ServerOptions::default()).await;
    let mut w = spec(&s, 4, 1000);
    w.topics = vec![WORK_TOPIC.into(), POISON_TOPIC.into()];
    w.abort_on = vec![PILL];
    for _ in 0..3 {
        s.spawn(&w);
    }
    s.enqueue_bulk::<WorkJob>("w", 1000..1150, 200).await;
    s.enqueue_one::<PoisonJob>("pill", FaultPayload::new(PILL, 10))
        .await
        .unwrap();

    let deadline = Instant::now() + Duration::from_secs(60);
    let mut aborts = 0;
    loop {
        for i in 0..s.workers.len() {
            if s.workers[i].exited().is_some() {
                let pid = s.workers[i].pid();
                let at = s
                    .ledger()
                    .iter()
                    .find(|e| e.kind == Kind::Abort && e.pid == pid)
                    .map_or(now_ms(), |e| e.ms);
                s.faults.push(dq_faults::Fault {
                    what: format!("abort of pid {pid}"),
                    pid: Some(pid),
                    start_ms: at,
                    end_ms: now_ms(),
                });
                aborts += 1;
                s.respawn(i, &w);
            }
        }
        let done = async {
            let a = s.stats(WORK_TOPIC).await.ok()?;
            let b = s.stats(POISON_TOPIC).await.ok()?;
            Some(
                a.scheduled
                    + a.ready
                    + a.active
                    + a.retry
                    + b.scheduled
                    + b.ready
                    + b.active
                    + b.retry
                    == 0,
            )
        };
        if done.await == Some(true) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not settled after 60 s\n{}",
            s.logs(10)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let info = s
        .client
        .topic(POISON_TOPIC)
        .unwrap()
        .job("pill")
        .await
        .unwrap()
        .expect("the pill is in the dead queue");
    assert_eq!(info.state, JobState::Dead);
    assert_eq!(info.attempts, 3);
    assert_eq!(info.history.len(), 3, "{:?}", info.history);
    for h in &info.history {
        assert_eq!(h.outcome, AttemptOutcome::LeaseExpired, "{h:?}");
        assert_eq!(h.error, "lease expired");
    }
    assert_eq!(aborts, 3, "one abort per attempt");

    let rec = s.reconcile().await;
    s.assert_clean(&rec, &["pill"]);
    assert_eq!(rec.succeeded, 150);
    assert_eq!(rec.dead, ["pill"]);
    let hit = runs(&s.ledger())
        .values()
        .filter(|r| r.iter().any(|r| r.attempt > 1))
        .count();
    println!("poison pill: {aborts} aborts; {hit} jobs needed more than one attempt");
    s.stop_workers();
}
