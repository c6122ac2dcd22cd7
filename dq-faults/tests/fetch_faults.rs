//! Lost fetch replies: every client connection is killed (`CLIENT KILL TYPE normal`) every
//! 200 ms while two workers drain a `retry = "none"` topic.
//!
//! A fetch leases its jobs in Redis before its reply is on the wire, so a kill between the two
//! leaves jobs leased to nobody. Before fetch receipts, those leases ran out and counted as the
//! jobs' one attempt: they went to the dead queue with history `["lease expired"]`, attempts 1,
//! and no handler ever started. Now the fetcher retries the call, the store finds its receipt
//! and hands the same jobs over again under fresh tokens, and no attempt is spent.
//!
//! The scenario runs real `fault-worker` processes against its own `redis-server` and ends with
//! the reconciliation of `dq_faults::check`.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use dq::{AttemptOutcome, JobState, MAX_PAGE, Page};
use dq_faults::ledger::{Kind, now_ms};
use dq_faults::{ONCE_TOPIC, OnceJob, Scenario};
use dq_testkit::ServerOptions;

const BIN: &str = env!("CARGO_BIN_EXE_fault-worker");

/// Jobs drained under the kills: enough fetches that lost replies are sure to happen (the
/// unfixed code lost several jobs per run at this size).
const JOBS: u64 = 20_000;

/// No job dies of a fetch reply that never reached a worker: with connections killed every
/// 200 ms through a 20,000-job drain on a topic without retries, every job runs (exactly once,
/// or twice only if it was in flight at a kill), none is dead, and none was charged a
/// "lease expired" attempt without ever starting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fetch_replies_spend_no_attempt() {
    let mut s = Scenario::start("fetch-reply-lost", BIN, ServerOptions::default()).await;
    s.enqueue_bulk::<OnceJob>("once", 0..JOBS, 0).await;
    let mut spec = s.spec();
    spec.topics = vec![ONCE_TOPIC.to_string()];
    spec.concurrency = 8;
    // Long enough that no handler (they do no work) outlives its lease on a busy machine: a
    // lease lost any other way would also kill a job on this topic.
    spec.lease = Duration::from_secs(2);
    s.spawn(&spec);
    s.spawn(&spec);

    // Kill every connection every 200 ms until the topic has drained.
    let started = now_ms();
    let deadline = Instant::now() + Duration::from_secs(240);
    let (mut kills, mut killed) = (0u32, 0i64);
    loop {
        if let Ok(st) = s.stats(ONCE_TOPIC).await
            && st.scheduled + st.ready + st.active + st.retry == 0
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not drained after 240 s; {:?}\n{}",
            s.stats(ONCE_TOPIC).await,
            s.logs(15)
        );
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
    s.wait_settled(ONCE_TOPIC, Duration::from_secs(60)).await;
    for w in &mut s.workers {
        assert!(
            w.exited().is_none(),
            "{} died\n{}",
            w.name(),
            w.log_tail(20)
        );
    }

    // The bug's signature: dead after one "lease expired" attempt that never started.
    let ledger = s.ledger();
    let ran: HashSet<&str> = ledger
        .iter()
        .filter(|e| e.kind == Kind::Start)
        .map(|e| e.key.as_str())
        .collect();
    let topic = s.client.topic(ONCE_TOPIC).unwrap();
    let mut dead = Vec::new();
    let mut page = Page::first(MAX_PAGE);
    // Bounded: at most JOBS dead jobs, a full page at a time.
    for _ in 0..=JOBS as usize / MAX_PAGE {
        let listed = topic.list(JobState::Dead, page).await.unwrap();
        dead.extend(listed.jobs);
        match listed.next {
            Some(next) => page = Page::after(next, MAX_PAGE),
            None => break,
        }
    }
    let never_ran: Vec<String> = dead
        .iter()
        .filter(|j| {
            j.attempts == 1
                && j.history.len() == 1
                && j.history[0].outcome == AttemptOutcome::LeaseExpired
                && !ran.contains(j.key.as_str())
        })
        .map(|j| j.key.to_string())
        .collect();
    let stats = s.stats(ONCE_TOPIC).await.unwrap();
    let rec = s.reconcile().await;
    println!(
        "fetch reply lost: {kills} kill rounds closed {killed} connections; {} dead, {} of them \
         leased by a lost fetch and never started; {} leases expired",
        dead.len(),
        never_ran.len(),
        stats.expired
    );
    assert!(
        never_ran.is_empty(),
        "{} jobs died of a fetch reply that never reached a worker: {:?}",
        never_ran.len(),
        &never_ran[..never_ran.len().min(10)]
    );
    s.assert_clean(&rec, &[]);
    assert_eq!(rec.succeeded, JOBS as usize);
    assert!(
        kills >= 10 && killed >= 20,
        "{kills} rounds, {killed} closed"
    );
    s.stop_workers();
}
