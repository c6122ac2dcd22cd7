//! Issue 21 (versioned records): a worker that meets jobs written by a newer dq, in a record
//! format it does not read, leaves them byte for byte as they are, says so once per minute at
//! WARN (naming the topic, the format and what it reads), reports "upgrade this worker" in its
//! health (not healthy) and counts them in `dq_newer_records_total`; it does not poll on them.
//!
//! One test in this binary: the metrics recorder is global.

use std::time::Duration;

use dq::store::redis::layout::{PartitionKeys, RecordHeader};
use dq::store::{NEWEST_FORMAT, Queue};
use dq::{Client, JobContext, JobError, JobState, Topic, Worker};
use dq_testkit::{CapturedLog, eventually};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tracing_subscriber::filter::LevelFilter;

const TOPIC: &str = "newer.jobs";
/// Generous for a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(30);

#[dq::delayed_job(topic = "newer.jobs", retry = "none")]
async fn newer_job(_n: u64, _ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

/// A record as a dq writing record format `format` (newer than this one) would: its version
/// byte, then bytes this dq does not read.
fn newer_record(format: u8, state: JobState, due_ms: u64) -> Vec<u8> {
    let mut r = vec![format];
    r.extend(
        RecordHeader {
            format: 1,
            state,
            attempts: 0,
            due_ms,
            created_ms: due_ms,
            token: 0,
            expires_ms: 0,
            priority: 5,
            group_len: 0,
            batch_len: 0,
        }
        .encode(b"a payload of a newer dq"),
    );
    r
}

#[tokio::test]
async fn a_worker_leaves_newer_records_warns_once_and_asks_to_be_upgraded() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this binary");
    // The test's runtime has one thread: every worker task logs to this subscriber.
    let (captured, _guard) = CapturedLog::install(LevelFilter::WARN);
    let server = dq_testkit::shared();
    let ns = dq_testkit::namespace("newer");
    let client = Client::builder()
        .namespace(&ns)
        .connect(&server.url())
        .await
        .unwrap();
    client.check_topic(TOPIC).await.unwrap();
    let format = NEWEST_FORMAT + 1;
    let k = PartitionKeys::new(&ns, &Queue::new(Topic::new(TOPIC).unwrap(), 0));
    let now: u64 = client.store().now_ms().await.unwrap();
    // one at the front of ready, one due in scheduled: both in the way of every fetch
    let planted = [
        ("n-ready", newer_record(format, JobState::Ready, now)),
        (
            "n-scheduled",
            newer_record(format, JobState::Scheduled, now - 1000),
        ),
    ];
    let mut conn = server.connection();
    for (key, record) in &planted {
        let _: i64 = dq_testkit::redis::cmd("HSET")
            .arg(&k.jobs)
            .arg(key)
            .arg(record)
            .query(&mut conn)
            .unwrap();
    }
    server.cmd::<i64>(&["RPUSH", &k.ready, "n-ready"]);
    server.cmd::<i64>(&[
        "ZADD",
        &k.scheduled,
        &(now - 1000).to_string(),
        "n-scheduled",
    ]);

    let handle = Worker::builder(client.clone())
        .topics([TOPIC])
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let health = eventually_health(&handle).await;
    let says = health
        .needing_upgrade()
        .filter_map(dq::FetcherHealth::needs_upgrade)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(!health.is_healthy(), "{health:?}");
    for needle in [
        "newer.jobs",
        &format!("record format {format}"),
        &format!("formats up to {NEWEST_FORMAT}"),
        "upgrade this worker",
    ] {
        assert!(says.contains(needle), "{needle:?} not in {says:?}");
    }

    // several fetches meet them (two records each), one WARN for them all
    let counted = |snapshot: metrics_util::debugging::Snapshot| {
        snapshot
            .into_vec()
            .into_iter()
            .filter(|(key, ..)| key.key().name() == "dq_newer_records_total")
            .filter(|(key, ..)| {
                key.key()
                    .labels()
                    .any(|l| l.key() == "format" && l.value() == format.to_string())
            })
            .map(|(.., value)| match value {
                DebugValue::Counter(n) => n,
                other => panic!("{other:?}"),
            })
            .sum::<u64>()
    };
    // (a snapshot drains the counters: they are summed here)
    let mut total = 0;
    eventually("three fetches meet the newer records", WAIT, || {
        total += counted(snapshotter.snapshot());
        let enough = total >= 6;
        async move { enough }
    })
    .await;
    let text = captured.text();
    let warned: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("newer record format"))
        .collect();
    assert_eq!(warned.len(), 1, "{text}");
    for needle in [
        "WARN",
        "newer.jobs",
        &format!("format={format}"),
        &format!("reads={}", dq::store::NEWEST_FORMAT),
        "upgrade this worker",
    ] {
        assert!(
            warned[0].contains(needle),
            "{needle:?} not in {}",
            warned[0]
        );
    }
    handle.shutdown().await;

    for (key, record) in &planted {
        let now: Vec<u8> = dq_testkit::redis::cmd("HGET")
            .arg(&k.jobs)
            .arg(key)
            .query(&mut conn)
            .unwrap();
        assert_eq!(&now, record, "{key} was changed");
    }
    assert_eq!(
        server.cmd::<Vec<String>>(&["LRANGE", &k.ready, "0", "-1"]),
        ["n-ready"]
    );
    assert_eq!(
        server.cmd::<Vec<String>>(&["ZRANGE", &k.scheduled, "0", "-1"]),
        ["n-scheduled"]
    );
}

/// The worker's health once a fetcher reports newer records.
async fn eventually_health(handle: &dq::WorkerHandle) -> dq::WorkerHealth {
    dq_testkit::eventually_some("the health asks for an upgrade", WAIT, || {
        let health = handle.health();
        let found = health.needing_upgrade().next().is_some();
        async move { found.then_some(health) }
    })
    .await
}
