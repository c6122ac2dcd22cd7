//! Issue 27, item 1, with the producer and the worker in two processes: the producer (this
//! test) records topic `fault.work` with 4 partitions and enqueues 8 jobs; a `fault-worker`
//! process started with a plain client — no partition setting for the topic — must run all
//! 8. Before the fix it compared its default count 1 with the recorded 4, logged an ERROR,
//! printed `ready` and ran none of them. A worker process whose client is configured with
//! another count does not look up at all: it exits at start with an error naming the topic
//! and both counts, as a server that cannot bind its port does.

use std::collections::BTreeSet;
use std::time::Duration;

use dq::{Client, JobSpec};
use dq_faults::ledger::Kind;
use dq_faults::{FaultPayload, Scenario, WORK_TOPIC, WorkJob};
use dq_testkit::{ServerOptions, eventually_some};

const BIN: &str = env!("CARGO_BIN_EXE_fault-worker");

/// Generous for a loaded 2-core machine: the jobs take no time; this is a bound, not a pace.
const WAIT: Duration = Duration::from_secs(60);

/// The producer of the issue: `.partitions("fault.work", 4)`, in this test process; it
/// records the topic's count with its first enqueue of 8 jobs (keys `job-0`…`job-7`).
async fn produce_eight_over_four_partitions(s: &Scenario) -> BTreeSet<String> {
    let producer = Client::builder()
        .namespace(&s.ns)
        .partitions(WORK_TOPIC, 4)
        .connect(&s.server.url())
        .await
        .unwrap();
    let jobs = (0..8u64).map(|i| JobSpec::new(FaultPayload::new(i, 0)).key(format!("job-{i}")));
    let stored = producer.enqueue_bulk::<WorkJob>(jobs).await.unwrap();
    assert_eq!(
        producer.check_topic(WORK_TOPIC).await.unwrap().partitions,
        4
    );
    stored.into_iter().map(|e| e.key.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_process_without_a_partition_setting_runs_every_job_of_a_four_partition_producer()
{
    let mut s = Scenario::start("partitions-adopt", BIN, ServerOptions::default()).await;
    let stored = produce_eight_over_four_partitions(&s).await;
    assert_eq!(stored.len(), 8);

    // A separate OS process, with a plain client: no `--partitions`, no
    // `--configured-partitions`.
    let spec = s.spec();
    assert_eq!((spec.partitions, spec.configured_partitions), (None, None));
    let w = s.spawn(&spec);
    let finished = eventually_some("every job ran in the worker process", WAIT, || {
        let finished: BTreeSet<String> = s
            .ledger()
            .into_iter()
            .filter(|e| e.kind == Kind::Finish)
            .map(|e| e.key)
            .collect();
        let stored = stored.clone();
        async move { (finished == stored).then_some(finished) }
    })
    .await;
    assert_eq!(finished.len(), 8);
    // Each ran once, and nothing was logged as refused.
    let starts = s.ledger().iter().filter(|e| e.kind == Kind::Start).count();
    assert_eq!(starts, 8);
    let log = s.workers[w].log_text();
    assert!(!log.contains("ERROR"), "{log}");
    // The default client of this test adopts the count too: it sees the whole topic (once
    // the worker's acknowledgements, written after the ledger's lines, are in).
    s.wait_settled(WORK_TOPIC, WAIT).await;
    let st = s.stats(WORK_TOPIC).await.unwrap();
    assert_eq!((st.succeeded, st.ready, st.enqueued), (8, 0, 8), "{st:?}");
    s.stop_workers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_process_configured_with_another_count_exits_at_start_naming_both_counts() {
    let mut s = Scenario::start("partitions-refused", BIN, ServerOptions::default()).await;
    produce_eight_over_four_partitions(&s).await;

    let mut spec = s.spec();
    spec.configured_partitions = Some(1);
    let mut w = s.spawn_unready(&spec);
    let status = w
        .wait_exit(WAIT)
        .unwrap_or_else(|| panic!("the refused worker kept running; log:\n{}", w.log_tail(20)));
    assert_eq!(
        status.code(),
        Some(2),
        "{status:?}; log:\n{}",
        w.log_tail(20)
    );
    let log = w.log_text();
    assert!(
        log.contains(&format!("{WORK_TOPIC:?}")),
        "names the topic: {log}"
    );
    assert!(
        log.contains("4 partition(s) in the store") && log.contains("configured with 1"),
        "names both counts: {log}"
    );
    assert!(s.ledger().is_empty(), "nothing ran: {:?}", s.ledger());
    let st = s.stats(WORK_TOPIC).await.unwrap();
    assert_eq!((st.ready, st.enqueued), (8, 8), "{st:?}");
}
