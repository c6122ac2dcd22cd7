//! A bulk enqueue that meets Redis's `maxmemory` (`noeviction`) part-way: its chunks are
//! atomic, the call is not. The error names exactly the jobs stored, and resending the others
//! stores each of them once.

use std::collections::HashSet;
use std::time::Duration;

use dq::{EnqueueOutcome, Error, Job, JobSpec};
use dq_faults::{FaultPayload, Scenario, WORK_TOPIC, WorkJob};
use dq_testkit::ServerOptions;

const BIN: &str = env!("CARGO_BIN_EXE_fault-worker");
const JOBS: usize = 5_000;

fn used_memory(s: &Scenario) -> u64 {
    let info: String = s.server.cmd(&["INFO", "memory"]);
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("INFO memory has used_memory")
}

fn records_len(s: &Scenario) -> u64 {
    let topic = dq::Topic::new(WORK_TOPIC).expect("a valid topic");
    let keys =
        dq::store::redis::layout::PartitionKeys::new(&s.ns, &dq::store::Queue::new(topic, 0));
    s.server.cmd(&["HLEN", &keys.jobs])
}

/// 5,000 padded jobs due in an hour; every tenth has no key (a generated one).
fn jobs() -> Vec<JobSpec<FaultPayload>> {
    (0..JOBS)
        .map(|i| {
            let mut p = FaultPayload::new(i as u64, 0);
            p.pad = "x".repeat(500);
            let job = JobSpec::new(p).delay(Duration::from_secs(3600));
            if i % 10 == 9 {
                job
            } else {
                job.key(format!("bulk-{i}"))
            }
        })
        .collect()
}

/// Scenario 12: Redis reaches `maxmemory` during a bulk of 5,000 jobs (chunks of `dq::DEFAULT_BULK_CHUNK`).
/// The error is `BulkPartial`: the chunks before the refused one are reported stored — a
/// prefix, with their keys, generated ones too — and exactly those are in Redis; the refused
/// chunk is named. Once memory is free, resending the jobs not stored stores each of them
/// once: 5,000 jobs in all, none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_at_maxmemory_reports_what_was_stored_and_resumes_exactly_once() {
    let s = Scenario::start("bulk-maxmemory", BIN, ServerOptions::default()).await;
    assert_eq!(s.client.topic(WorkJob::TOPIC).unwrap().partitions(), 1);
    // Room for about a thousand of these jobs (each well over 500 bytes in Redis), far
    // fewer than 5,000.
    let used = used_memory(&s);
    s.server.cmd::<()>(&[
        "CONFIG",
        "SET",
        "maxmemory",
        &(used + (1 << 20)).to_string(),
    ]);

    let err = s.client.enqueue_bulk::<WorkJob>(jobs()).await.unwrap_err();
    let Error::BulkPartial {
        outcomes,
        failed,
        source,
    } = err
    else {
        panic!("expected BulkPartial, got {err:?}")
    };
    let outcomes = outcomes.outcomes();
    assert!(matches!(*source, Error::OutOfMemory), "{source:?}");
    assert_eq!(outcomes.len(), JOBS);
    let stored = outcomes.iter().take_while(|o| o.is_some()).count();
    assert!(
        stored > 0 && stored < JOBS,
        "some chunks stored, not all: {stored}"
    );
    assert!(
        outcomes[stored..].iter().all(Option::is_none),
        "one partition: the stored jobs are a prefix"
    );
    assert_eq!(stored % dq::DEFAULT_BULK_CHUNK, 0, "whole chunks: {stored}");
    assert_eq!(
        failed,
        (stored..stored + dq::DEFAULT_BULK_CHUNK).collect::<Vec<_>>()
    );
    // Exactly the jobs reported stored are in Redis, under the keys reported.
    assert_eq!(records_len(&s), stored as u64);
    for (i, o) in outcomes.iter().enumerate().take(stored) {
        let o = o.as_ref().unwrap();
        assert_eq!(o.outcome, EnqueueOutcome::Created);
        if i % 10 != 9 {
            assert_eq!(o.key.as_str(), format!("bulk-{i}"));
        }
    }
    let last = outcomes[stored - 1].as_ref().unwrap().key.to_string();
    assert!(s.client.job::<WorkJob>(&last).await.unwrap().is_some());

    // Memory is free again: resend the jobs not stored.
    s.server.cmd::<()>(&["CONFIG", "SET", "maxmemory", "0"]);
    let rest: Vec<_> = jobs()
        .into_iter()
        .zip(outcomes)
        .filter(|(_, o)| o.is_none())
        .map(|(j, _)| j)
        .collect();
    assert_eq!(rest.len(), JOBS - stored);
    let done = s.client.enqueue_bulk::<WorkJob>(rest).await.unwrap();
    assert!(done.iter().all(|d| d.outcome == EnqueueOutcome::Created));

    // Every job once: 5,000 distinct keys, 5,000 records, 5,000 enqueued.
    let keys: HashSet<String> = outcomes
        .iter()
        .flatten()
        .chain(&done)
        .map(|d| d.key.to_string())
        .collect();
    assert_eq!(keys.len(), JOBS);
    assert_eq!(records_len(&s), JOBS as u64);
    let stats = s.stats(WORK_TOPIC).await.unwrap();
    assert_eq!(
        (stats.enqueued, stats.scheduled),
        (JOBS as u64, JOBS as u64)
    );
    println!("bulk at maxmemory: {stored} of {JOBS} stored before OutOfMemory; rest resumed");
}
