//! How soon fetchers recover from repeated connection kills.
//!
//! While the store fails, a fetcher backs off between tries; the back-off must not outgrow
//! the outage, or the worker idles long after the store answers again. This scenario measures
//! the longest stretch without a job start while every connection is killed every 200 ms, and
//! reports it (a figure, not an assertion: wall-clock speed is not asserted on a shared
//! machine). The reconciliation checks that no job was lost or run twice for nothing.

use std::time::{Duration, Instant};

use dq_faults::ledger::{Kind, now_ms};
use dq_faults::{Scenario, WORK_TOPIC, WorkJob};
use dq_testkit::ServerOptions;

const BIN: &str = env!("CARGO_BIN_EXE_fault-worker");

/// `CLIENT KILL TYPE normal` every 200 ms for 10 s while one worker drains 6,000 short jobs;
/// prints the longest gap between job starts during the kills and after the last kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_kills_every_200ms_report_the_longest_gap_without_a_job_start() {
    let mut s = Scenario::start("kill-gaps", BIN, ServerOptions::default()).await;
    // One worker: another would cover its gaps.
    let w = s.spec();
    s.spawn(&w);
    s.enqueue_bulk::<WorkJob>("g", 0..6_000, 20).await;
    let started = now_ms();
    let until = Instant::now() + Duration::from_secs(10);
    let mut kills = 0u32;
    let mut last_kill = started;
    while Instant::now() < until {
        if s.server
            .try_cmd::<i64>(&["CLIENT", "KILL", "TYPE", "normal"])
            .is_ok()
        {
            kills += 1;
            last_kill = now_ms();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    s.record_global_fault("CLIENT KILL TYPE normal every 200 ms", started);
    s.wait_settled(WORK_TOPIC, Duration::from_secs(120)).await;

    let mut starts: Vec<u64> = s
        .ledger()
        .iter()
        .filter(|e| e.kind == Kind::Start)
        .map(|e| e.ms)
        .collect();
    starts.sort_unstable();
    let during: Vec<u64> = starts
        .iter()
        .copied()
        .filter(|ms| (started..=last_kill).contains(ms))
        .collect();
    let longest = during
        .windows(2)
        .map(|w| w[1] - w[0])
        .chain(during.first().map(|f| f - started))
        .max()
        .unwrap_or(last_kill - started);
    let after_last_kill = starts
        .iter()
        .find(|ms| **ms >= last_kill)
        .map(|ms| ms - last_kill);
    println!(
        "kill-gaps: {kills} kills over {:.1} s; {} job starts during them; longest gap without \
         a job start: {longest} ms; first start after the last kill: {after_last_kill:?} ms",
        (last_kill - started) as f64 / 1000.0,
        during.len()
    );

    let rec = s.reconcile().await;
    s.assert_clean(&rec, &[]);
    assert_eq!(rec.succeeded, 6_000);
    assert!(kills >= 20, "only {kills} kills");
    s.stop_workers();
}
