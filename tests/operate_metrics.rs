//! The metrics a producer, a worker and the stats collector record, read back exactly from an
//! in-process recorder (metrics-util's `DebuggingRecorder`, installed for this test binary)
//! after a mixed workload on a real Redis: successes, a retry, a dead job, a timeout, a panic,
//! a deferral and a cancel.
//!
//! One test in this binary: the recorder is global, and a snapshot drains the histograms.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use dq::{Client, JobContext, JobError, Worker};
use dq_testkit::eventually;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshot};
use metrics_util::{CompositeKey, MetricKind};

const WAIT: Duration = Duration::from_secs(60);

static FLAKY: AtomicU32 = AtomicU32::new(0);
static SLOW: AtomicU32 = AtomicU32::new(0);
static PANICS: AtomicU32 = AtomicU32::new(0);
static DEFERS: AtomicU32 = AtomicU32::new(0);

#[dq::delayed_job(topic = "m.ok", retry = "none")]
async fn ok(_n: u32) -> Result<(), JobError> {
    Ok(())
}

#[dq::delayed_job(topic = "m.flaky", retry = "fixed(20ms, 3)")]
async fn flaky(_n: u32) -> Result<(), JobError> {
    if FLAKY.fetch_add(1, Ordering::SeqCst) == 0 {
        return Err(JobError::retry("first try fails"));
    }
    Ok(())
}

#[dq::delayed_job(topic = "m.dead", retry = "none")]
async fn dead(_n: u32) -> Result<(), JobError> {
    Err(JobError::retry("always fails"))
}

#[dq::delayed_job(topic = "m.slow", retry = "fixed(20ms, 3)", timeout = "300ms")]
async fn slow(_n: u32) -> Result<(), JobError> {
    if SLOW.fetch_add(1, Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    Ok(())
}

#[dq::delayed_job(topic = "m.panic", retry = "fixed(20ms, 3)")]
async fn panics(_n: u32) -> Result<(), JobError> {
    if PANICS.fetch_add(1, Ordering::SeqCst) == 0 {
        panic!("first run panics");
    }
    Ok(())
}

#[dq::delayed_job(topic = "m.defer", retry = "none")]
async fn defers(_n: u32, _ctx: JobContext) -> Result<(), JobError> {
    if DEFERS.fetch_add(1, Ordering::SeqCst) == 0 {
        return Err(JobError::defer(Duration::from_millis(20)));
    }
    Ok(())
}

const TOPICS: [&str; 6] = ["m.ok", "m.flaky", "m.dead", "m.slow", "m.panic", "m.defer"];

/// Every metric of the snapshot by (kind, name, sorted labels).
type Metrics = BTreeMap<(MetricKind, String, Vec<(String, String)>), DebugValue>;

fn by_key(snapshot: Snapshot) -> Metrics {
    snapshot
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value): (CompositeKey, _, _, _)| {
            let (kind, key) = key.into_parts();
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_string(), l.value().to_string()))
                .collect();
            labels.sort();
            ((kind, key.name().to_string(), labels), value)
        })
        .collect()
}

fn get<'a>(
    m: &'a Metrics,
    kind: MetricKind,
    name: &str,
    labels: &[(&str, &str)],
) -> Option<&'a DebugValue> {
    let mut labels: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    labels.sort();
    m.get(&(kind, name.to_string(), labels))
}

fn counter(m: &Metrics, name: &str, labels: &[(&str, &str)]) -> u64 {
    match get(m, MetricKind::Counter, name, labels) {
        Some(DebugValue::Counter(n)) => *n,
        None => 0,
        other => panic!("{name} {labels:?}: {other:?}"),
    }
}

fn histogram_count(m: &Metrics, name: &str, labels: &[(&str, &str)]) -> usize {
    match get(m, MetricKind::Histogram, name, labels) {
        Some(DebugValue::Histogram(v)) => v.len(),
        None => 0,
        other => panic!("{name} {labels:?}: {other:?}"),
    }
}

fn histogram(m: &Metrics, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    match get(m, MetricKind::Histogram, name, labels) {
        Some(DebugValue::Histogram(v)) => v.iter().map(|f| f.into_inner()).collect(),
        other => panic!("{name} {labels:?}: {other:?}"),
    }
}

fn gauge(m: &Metrics, name: &str, labels: &[(&str, &str)]) -> f64 {
    match get(m, MetricKind::Gauge, name, labels) {
        Some(DebugValue::Gauge(g)) => g.into_inner(),
        other => panic!("{name} {labels:?}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_workload_is_counted_exactly() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this binary");

    let client = Client::builder()
        .namespace(dq_testkit::namespace("operate-metrics"))
        .connect(&dq_testkit::shared().url())
        .await
        .unwrap();
    for topic in TOPICS {
        client.check_topic(topic).await.unwrap();
    }
    let worker = Worker::builder(client.clone())
        .topics(TOPICS)
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");

    for n in 0..3 {
        client.enqueue::<ok>(n).await.unwrap();
    }
    client.enqueue::<flaky>(0).await.unwrap();
    client.enqueue::<dead>(0).await.unwrap();
    client.enqueue::<slow>(0).await.unwrap();
    client.enqueue::<panics>(0).await.unwrap();
    client.enqueue::<defers>(0).await.unwrap();
    // Cancelled before it is due: enqueued, never started.
    client
        .enqueue::<ok>(9)
        .key("later")
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(
        client.cancel::<ok>("later").await.unwrap(),
        dq::CancelOutcome::Cancelled
    );
    // A replaced job counts as enqueued again; a duplicate key does not.
    client
        .enqueue::<ok>(7)
        .key("twice")
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    client
        .enqueue::<ok>(8)
        .key("twice")
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    client
        .enqueue::<ok>(8)
        .key("twice")
        .replace()
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    client.cancel::<ok>("twice").await.unwrap();

    eventually("every job ran to its end", WAIT, || {
        let client = client.clone();
        async move {
            let mut done = true;
            for (topic, succeeded, dead) in [
                ("m.ok", 3, 0),
                ("m.flaky", 1, 0),
                ("m.dead", 0, 1),
                ("m.slow", 1, 0),
                ("m.panic", 1, 0),
                ("m.defer", 1, 0),
            ] {
                let s = client.topic(topic).unwrap().stats().await.unwrap();
                done &= s.succeeded == succeeded && s.dead == dead;
            }
            done
        }
    })
    .await;
    worker.shutdown().await;
    dq::metrics::collect_once(&client).await.unwrap();

    let m = by_key(snapshotter.snapshot());
    let t = |topic| [("topic", topic)];
    let ft = |topic, outcome| [("topic", topic), ("outcome", outcome)];

    // Producer: jobs stored (created or replaced), cancels.
    assert_eq!(counter(&m, "dq_jobs_enqueued_total", &t("m.ok")), 3 + 1 + 2);
    for topic in &TOPICS[1..] {
        assert_eq!(
            counter(&m, "dq_jobs_enqueued_total", &t(topic)),
            1,
            "{topic}"
        );
    }
    assert_eq!(counter(&m, "dq_jobs_cancelled_total", &t("m.ok")), 2);

    // Worker: runs started, succeeded, failed by outcome.
    for (topic, started, succeeded) in [
        ("m.ok", 3, 3),
        ("m.flaky", 2, 1),
        ("m.dead", 1, 0),
        ("m.slow", 2, 1),
        ("m.panic", 2, 1),
        ("m.defer", 2, 1),
    ] {
        assert_eq!(
            counter(&m, "dq_jobs_started_total", &t(topic)),
            started,
            "{topic}"
        );
        assert_eq!(
            counter(&m, "dq_jobs_succeeded_total", &t(topic)),
            succeeded,
            "{topic}"
        );
        assert_eq!(
            histogram_count(&m, "dq_job_lateness_seconds", &t(topic)),
            started as usize,
            "{topic}"
        );
        assert_eq!(
            histogram_count(&m, "dq_job_run_seconds", &t(topic)),
            started as usize,
            "{topic}"
        );
        assert_eq!(gauge(&m, "dq_jobs_running", &t(topic)), 0.0, "{topic}");
    }
    let mut failed: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for topic in TOPICS {
        for outcome in dq::metrics::FAILED_OUTCOMES {
            let n = counter(&m, "dq_jobs_failed_total", &ft(topic, outcome));
            if n > 0 {
                failed.insert((topic, outcome), n);
            }
        }
    }
    assert_eq!(
        failed,
        BTreeMap::from([
            (("m.flaky", "retry"), 1),
            (("m.dead", "dead"), 1),
            (("m.slow", "timeout"), 1),
            (("m.panic", "panic"), 1),
            (("m.defer", "deferred"), 1),
        ])
    );
    // The timed-out run lasted its timeout, at least.
    assert!(
        histogram(&m, "dq_job_run_seconds", &t("m.slow"))
            .iter()
            .any(|s| *s >= 0.3),
        "{:?}",
        histogram(&m, "dq_job_run_seconds", &t("m.slow"))
    );
    // Lateness is never negative (start minus due, by Redis time).
    for topic in TOPICS {
        assert!(
            histogram(&m, "dq_job_lateness_seconds", &t(topic))
                .iter()
                .all(|s| *s >= 0.0)
        );
    }

    // Store: one enqueue script call per enqueue (12), one cancel call per cancel (2), no errors.
    assert_eq!(
        histogram_count(&m, "dq_store_call_seconds", &[("op", "enqueue")]),
        12
    );
    assert_eq!(
        histogram_count(&m, "dq_store_call_seconds", &[("op", "cancel")]),
        2
    );
    assert!(histogram_count(&m, "dq_store_call_seconds", &[("op", "fetch")]) > 0);
    assert!(histogram_count(&m, "dq_store_call_seconds", &[("op", "ack")]) > 0);
    // Each operation's error counter exists from its first call (so alerts see a series),
    // and stays at zero.
    let errors: Vec<_> = m
        .iter()
        .filter(|((_, name, _), v)| {
            name == "dq_store_errors_total" && **v != DebugValue::Counter(0)
        })
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(
        get(
            &m,
            MetricKind::Counter,
            "dq_store_errors_total",
            &[("op", "enqueue")]
        ),
        Some(&DebugValue::Counter(0))
    );

    // Collector: depths by state; the dead job is the only job left.
    for topic in TOPICS {
        for state in dq::metrics::QUEUE_STATES {
            let want = if (topic, state) == ("m.dead", "dead") {
                1.0
            } else {
                0.0
            };
            assert_eq!(
                gauge(&m, "dq_queue_jobs", &[("topic", topic), ("state", state)]),
                want,
                "{topic} {state}"
            );
        }
        assert_eq!(gauge(&m, "dq_queue_oldest_overdue_seconds", &t(topic)), 0.0);
    }

    // The worker stopped: no live worker left.
    assert_eq!(gauge(&m, "dq_workers_live", &[]), 0.0);

    // Labels stay bounded: topics and fixed names, never a job key.
    for (_, name, labels) in m.keys() {
        for (k, v) in labels {
            assert!(
                ["topic", "op", "outcome", "state"].contains(&k.as_str()),
                "{name} {k}"
            );
            assert!(
                !v.contains("later") && !v.contains("twice"),
                "{name} {k}={v}"
            );
        }
    }
}
