//! Pause, the global concurrency cap and cancelling a running job, across real worker
//! processes (`fault-worker`), measured from their ledgers: the cap is never exceeded
//! however many processes ask, a pause stops every process from leasing, and a cancel
//! reaches a job running in another process.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use dq::{CancelOutcome, JobState};
use dq_faults::ledger::{Entry, Kind, read_dir};
use dq_faults::{Scenario, WorkJob};
use dq_testkit::{ServerOptions, eventually};

const BIN: &str = env!("CARGO_BIN_EXE_fault-worker");

/// Generous for a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(60);

fn ledger(s: &Scenario) -> Vec<Entry> {
    let (entries, bad) = read_dir(s.dir.path());
    assert_eq!(bad, 0, "torn ledger lines");
    entries
}

/// The most handler runs that overlapped in time: runs are [start, end] per delivery
/// (key, token); an end is the finish or cancelled line. A run's interval lies inside its
/// lease (started after the fetch, ended before the ack), so this is at most what the store
/// had active at once.
fn max_overlap(entries: &[Entry]) -> usize {
    let mut runs: HashMap<(String, u64), (u64, Option<u64>)> = HashMap::new();
    for e in entries {
        let run = runs
            .entry((e.key.clone(), e.token))
            .or_insert((u64::MAX, None));
        match e.kind {
            Kind::Start => run.0 = e.ms,
            Kind::Finish | Kind::Cancelled | Kind::Abort | Kind::Failed => run.1 = Some(e.ms),
        }
    }
    // Ends sort before starts at the same ms: a slot freed and taken in one ms is not an
    // overlap (the ledger's clock is coarser than the store's order).
    let mut events: Vec<(u64, i32)> = Vec::new();
    for (start, end) in runs.values() {
        events.push((*start, 1));
        events.push((end.expect("every run ended"), -1));
    }
    events.sort();
    let (mut now, mut max) = (0i32, 0i32);
    for (_, delta) in events {
        now += delta;
        max = max.max(now);
    }
    max as usize
}

/// A cap of 3 across three processes of 4 slots each: at most 3 handlers ever ran at once,
/// and every job ran exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_cap_holds_across_three_worker_processes() {
    let mut s = Scenario::start("limits-cap", BIN, ServerOptions::default()).await;
    s.client.set_concurrency::<WorkJob>(Some(3)).await.unwrap();
    let mut spec = s.spec();
    spec.concurrency = 4;
    spec.lease = Duration::from_secs(2);
    for _ in 0..3 {
        s.spawn(&spec);
    }
    s.enqueue_bulk::<WorkJob>("cap", 0..60, 40).await;
    let client = s.client.clone();
    eventually("60 jobs succeeded", WAIT, || async {
        client.stats::<WorkJob>().await.unwrap().succeeded == 60
    })
    .await;
    let entries = ledger(&s);
    let max = max_overlap(&entries);
    assert!(
        (1..=3).contains(&max),
        "{max} handlers ran at once under a cap of 3"
    );
    let finishes: BTreeMap<&str, usize> =
        entries
            .iter()
            .filter(|e| e.kind == Kind::Finish)
            .fold(BTreeMap::new(), |mut m, e| {
                *m.entry(e.key.as_str()).or_default() += 1;
                m
            });
    assert_eq!(finishes.len(), 60);
    assert!(finishes.values().all(|n| *n == 1), "{finishes:?}");
    let pids: std::collections::BTreeSet<u32> = entries.iter().map(|e| e.pid).collect();
    assert!(
        pids.len() >= 2,
        "the jobs ran in one process only: {pids:?}"
    );
}

/// A paused topic: no process leases, though a fetch has run since the jobs became due (it
/// moved them from `scheduled` to `ready`, and leased none); after resume every job runs
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_stops_leasing_across_worker_processes() {
    let mut s = Scenario::start("limits-pause", BIN, ServerOptions::default()).await;
    let mut spec = s.spec();
    spec.concurrency = 4;
    spec.idle_wait = Some(Duration::from_millis(200));
    for _ in 0..3 {
        s.spawn(&spec);
    }
    let client = s.client.clone();
    let ctl = client.pause::<WorkJob>().await.unwrap();
    assert!(ctl.paused);
    // Due in 300 ms: still in `scheduled` when enqueued, moved to ready by a fetch after.
    let jobs: Vec<_> = (0..20u64)
        .map(|i| {
            dq::JobSpec::new(dq_faults::FaultPayload::new(i, 10))
                .key(format!("pause-{i}"))
                .delay(Duration::from_millis(300))
        })
        .collect();
    client.enqueue_bulk::<WorkJob>(jobs).await.unwrap();
    eventually("a fetch moved the due jobs to ready", WAIT, || async {
        let st = client.stats::<WorkJob>().await.unwrap();
        st.scheduled == 0 && st.overdue == 0 && st.ready == 20
    })
    .await;
    let st = client.stats::<WorkJob>().await.unwrap();
    assert!(st.paused, "{st:?}");
    assert_eq!((st.active, st.succeeded), (0, 0), "{st:?}");
    assert!(ledger(&s).is_empty(), "a paused topic ran jobs");
    let t = client.topic(dq_faults::WORK_TOPIC).unwrap();
    assert_eq!(
        t.job("pause-0").await.unwrap().unwrap().state,
        JobState::Ready
    );

    client.resume::<WorkJob>().await.unwrap();
    eventually("all 20 ran after resume", WAIT, || async {
        client.stats::<WorkJob>().await.unwrap().succeeded == 20
    })
    .await;
    let starts = ledger(&s).iter().filter(|e| e.kind == Kind::Start).count();
    assert_eq!(starts, 20);
}

/// A cancel reaches a job running in another process: its handler sees `ctx.cancelled()`
/// (the ledger's cancelled line), and the job ends as cancelled — never run again, not dead,
/// although its topic retries failures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_reaches_a_job_running_in_another_process() {
    let mut s = Scenario::start("limits-cancel", BIN, ServerOptions::default()).await;
    let mut spec = s.spec();
    spec.concurrency = 2;
    spec.lease = Duration::from_secs(1);
    s.spawn(&spec);
    s.spawn(&spec);
    // Works for a minute unless stopped.
    s.enqueue_bulk::<WorkJob>("long", 0..1, 60_000).await;
    let client = s.client.clone();
    eventually("the job started", WAIT, || async {
        ledger(&s).iter().any(|e| e.kind == Kind::Start)
    })
    .await;
    assert_eq!(
        client.cancel::<WorkJob>("long-0").await.unwrap(),
        CancelOutcome::CancelRequested
    );
    eventually("the handler was told", WAIT, || async {
        ledger(&s).iter().any(|e| e.kind == Kind::Cancelled)
    })
    .await;
    eventually("the job ended as cancelled", WAIT, || async {
        client.stats::<WorkJob>().await.unwrap().cancelled == 1
    })
    .await;
    assert!(client.job::<WorkJob>("long-0").await.unwrap().is_none());
    let st = client.stats::<WorkJob>().await.unwrap();
    assert_eq!((st.retried, st.dead, st.expired), (0, 0, 0), "{st:?}");
    let entries = ledger(&s);
    assert_eq!(
        entries.iter().filter(|e| e.kind == Kind::Start).count(),
        1,
        "{entries:?}"
    );
}
