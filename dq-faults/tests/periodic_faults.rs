//! Periodic jobs on real processes: three `fault-worker` processes (each runs the scheduler
//! of its topics) share one schedule on a real Redis; one is SIGKILLed mid-way. Every tick's
//! job is stored and run once — no tick doubled, none lost — with no leader election.

use std::collections::BTreeMap;
use std::time::Duration;

use dq::Schedule;
use dq::store::tick_key;
use dq_faults::ledger::Kind;
use dq_faults::{FaultPayload, Scenario, WORK_TOPIC, WorkJob};
use dq_testkit::{ServerOptions, eventually};

const BIN: &str = env!("CARGO_BIN_EXE_fault-worker");

/// Generous for a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(60);

/// Ledger starts of tick jobs: key → attempts started (in order).
fn tick_starts(s: &Scenario) -> BTreeMap<String, Vec<u32>> {
    let mut starts: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for e in s.ledger() {
        if e.kind == Kind::Start && e.key.starts_with("tick@") {
            starts.entry(e.key).or_default().push(e.attempt);
        }
    }
    starts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_worker_processes_run_each_tick_once_even_when_one_is_sigkilled() {
    let mut s = Scenario::start("periodic", BIN, ServerOptions::default()).await;
    let spec = s.spec();
    let workers = [s.spawn(&spec), s.spawn(&spec), s.spawn(&spec)];
    // A tick every second; each run works 300 ms, so a kill often lands mid-run.
    let every = Schedule::every(Duration::from_secs(1)).unwrap();
    s.client
        .schedule::<WorkJob>("tick", every, FaultPayload::new(0, 300))
        .await
        .unwrap();
    let first = s.client.schedules().await.unwrap()[0].next_ms.unwrap();

    // Let five ticks run, kill one worker, then let ten more run.
    let started = |s: &Scenario, tick: u64| tick_starts(s).contains_key(&tick_key("tick", tick));
    eventually("five ticks started", WAIT, || async {
        started(&s, first + 4_000)
    })
    .await;
    s.kill(workers[1]);
    eventually("fifteen ticks started", WAIT, || async {
        started(&s, first + 14_000)
    })
    .await;
    assert!(s.client.unschedule("tick").await.unwrap());
    s.wait_settled(WORK_TOPIC, WAIT).await;

    // Every tick from the first to the last enqueued (up to the look-ahead past the
    // unschedule): one job, started once as attempt 1 (a job the kill interrupted runs again
    // as attempt 2: the same job, not a second tick).
    let starts = tick_starts(&s);
    let last: u64 = starts
        .keys()
        .filter_map(|k| k.strip_prefix("tick@")?.parse().ok())
        .max()
        .unwrap();
    assert!(last >= first + 14_000);
    let ticks: Vec<u64> = (first..=last).step_by(1_000).collect();
    let expected: Vec<String> = ticks.iter().map(|t| tick_key("tick", *t)).collect();
    let seen: Vec<&String> = starts.keys().collect();
    let mut expected_sorted: Vec<&String> = expected.iter().collect();
    expected_sorted.sort();
    assert_eq!(seen, expected_sorted, "every tick's job, and no other");
    for (key, attempts) in &starts {
        assert_eq!(
            attempts.iter().filter(|a| **a == 1).count(),
            1,
            "{key} started as a first attempt once: {attempts:?}"
        );
    }
    let stats = s.stats(WORK_TOPIC).await.unwrap();
    assert_eq!(
        stats.enqueued,
        ticks.len() as u64,
        "one job stored per tick"
    );
    assert_eq!(stats.dead, 0);
    let reruns: Vec<_> = starts.iter().filter(|(_, a)| a.len() > 1).collect();
    println!(
        "{} ticks by 3 worker processes (one SIGKILLed), each stored once; re-runs of jobs the kill interrupted: {reruns:?}",
        ticks.len()
    );
}
