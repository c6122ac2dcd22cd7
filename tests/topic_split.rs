//! Issue 11's second finding, on a real Redis with a real producer and a real worker: a
//! producer built with `.partitions(topic, 4)` and a worker built with the default of 1 must
//! never disagree silently. Before topic metadata, the producer stored 8 jobs over 4
//! partitions, the worker fetched from partition 0 only, the jobs elsewhere never ran, and
//! the worker's `stats()` said nothing was waiting. Now the topic's partition count is
//! recorded in Redis by its first user; a client that did not configure the topic's count
//! adopts the recorded one (issue 27), and one configured otherwise gets
//! `Error::TopicMismatch` before it writes anything — a worker configured otherwise does not
//! start (`WorkerError::TopicMismatch`).
//!
//! The first test uses only the API that existed before the fix, so that it can be run
//! against the old code, where it fails: 8 jobs stored, some never run, no error anywhere.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dq::store::Queue;
use dq::store::redis::layout::{PartitionKeys, topics_key};
use dq::{Client, Error, JobContext, JobError, Topic, Worker, WorkerBuilder, WorkerError};

const TOPIC: &str = "split.jobs";
/// Generous: the worker starts within milliseconds; this is a bound, not a pace.
const WAIT: Duration = Duration::from_secs(20);

/// The jobs that ran, by payload.
#[derive(Clone, Default)]
struct Runs(Arc<Mutex<BTreeSet<u64>>>);

impl Runs {
    fn get(&self) -> BTreeSet<u64> {
        self.0.lock().unwrap().clone()
    }
}

#[dq::delayed_job(topic = "split.jobs", retry = "none")]
async fn split_job(n: u64, ctx: JobContext) -> Result<(), JobError> {
    ctx.data::<Runs>()?.0.lock().unwrap().insert(n);
    Ok(())
}

async fn client(ns: &str, partitions: Option<u16>) -> Client {
    let b = Client::builder().namespace(ns);
    let b = match partitions {
        Some(p) => b.partitions(TOPIC, p),
        None => b,
    };
    b.connect(&dq_testkit::shared().url()).await.unwrap()
}

fn builder(client: &Client, runs: &Runs) -> WorkerBuilder {
    Worker::builder(client.clone())
        .topics([TOPIC])
        .data(runs.clone())
}

fn worker(client: &Client, runs: &Runs) -> Worker {
    builder(client, runs).build().unwrap()
}

/// The case as it was reported: the producer first, 8 jobs over 4 partitions, then a
/// worker with the default of 1. Every job the producer was told is stored either runs, or
/// the worker says — in its health — that it cannot run them; never "stored, not run, no
/// sign anywhere".
#[tokio::test]
async fn a_default_worker_never_silently_misses_a_four_partition_producers_jobs() {
    let ns = dq_testkit::namespace("split");
    let producer = client(&ns, Some(4)).await;
    let mut stored = BTreeSet::new();
    for i in 0..8u64 {
        if producer
            .enqueue::<split_job>(i)
            .key(format!("job-{i}"))
            .await
            .is_ok()
        {
            stored.insert(i);
        }
    }
    assert_eq!(
        stored.len(),
        8,
        "the first user of the topic stores its jobs"
    );

    let consumer = client(&ns, None).await;
    let runs = Runs::default();
    let handle = worker(&consumer, &runs)
        .start()
        .await
        .expect("the worker starts");
    let reported = dq_testkit::eventually_some(
        "every stored job ran, or the worker reports why it cannot run them",
        WAIT,
        || {
            let (runs, stored) = (runs.get(), stored.clone());
            let health = handle.health();
            async move {
                if runs == stored {
                    return Some(None);
                }
                health
                    .permanent_errors()
                    .next()
                    .map(|f| Some(f.last_error.clone().unwrap_or_default()))
            }
        },
    )
    .await;
    match reported {
        None => {} // every job ran
        Some(error) => {
            assert!(error.contains("partition"), "names the cause: {error}");
            // Nothing ran on the wrong partitions, and the worker's client does not claim
            // that nothing is waiting: it refuses to answer with the wrong count.
            assert!(runs.get().is_empty(), "{:?}", runs.get());
            let stats = consumer.stats::<split_job>().await;
            assert!(stats.is_err(), "stats with the wrong count: {stats:?}");
        }
    }
    handle.shutdown().await;
}

/// The same order with a worker whose client is configured with 1 for the topic
/// (`.partitions(topic, 1)`): its check is the typed error (stored 4, configured 1), its
/// `start()` fails with it naming the topic and both counts, and nothing of the topic was
/// written by it; with `skip_refused_topics` it starts without the topic, logging the refusal
/// and showing it in its health; a worker configured alike runs all 8 jobs.
#[tokio::test]
async fn the_mismatched_worker_gets_the_typed_error_and_a_matching_one_runs_everything() {
    let ns = dq_testkit::namespace("split");
    let producer = client(&ns, Some(4)).await;
    for i in 0..8u64 {
        producer
            .enqueue::<split_job>(i)
            .key(format!("job-{i}"))
            .await
            .unwrap();
    }
    let consumer = client(&ns, Some(1)).await;
    let runs = Runs::default();
    let w = worker(&consumer, &runs);
    match w.check_topics().await {
        Err(Error::TopicMismatch {
            topic,
            stored: 4,
            configured: 1,
        }) => assert_eq!(topic, TOPIC),
        other => panic!("expected TopicMismatch, got {other:?}"),
    }
    match w.start().await {
        Err(e @ WorkerError::TopicMismatch { .. }) => {
            let text = e.to_string();
            assert!(text.contains(TOPIC), "{text}");
            assert!(text.contains("4 partition(s) in the store"), "{text}");
            assert!(text.contains("configured with 1"), "{text}");
        }
        other => panic!("expected WorkerError::TopicMismatch, got {other:?}"),
    }
    let handle = builder(&consumer, &runs)
        .skip_refused_topics()
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts without the refused topic");
    let error = dq_testkit::eventually_some("the worker reports the mismatch", WAIT, || {
        let health = handle.health();
        async move {
            health
                .permanent_errors()
                .find(|f| f.partition == 0)
                .and_then(|f| f.last_error.clone())
        }
    })
    .await;
    assert!(error.contains("4 partition(s) in the store"), "{error}");
    assert!(matches!(
        consumer.stats::<split_job>().await,
        Err(Error::TopicMismatch { .. })
    ));
    handle.shutdown().await;
    assert!(runs.get().is_empty());
    let st = producer.stats::<split_job>().await.unwrap();
    assert_eq!((st.ready, st.enqueued), (8, 8), "{st:?}");

    // Configured alike, a worker runs every job.
    let fixed = client(&ns, Some(4)).await;
    let runs = Runs::default();
    let handle = worker(&fixed, &runs)
        .start()
        .await
        .expect("the worker starts");
    dq_testkit::eventually("all 8 jobs ran", WAIT, || {
        let done = runs.get().len() == 8;
        async move { done }
    })
    .await;
    handle.shutdown().await;
}

/// The other order: the default worker starts first and records 1 partition; the producer
/// with 4 then gets `TopicMismatch` from every enqueue, and nothing is stored in any
/// partition of the topic.
#[tokio::test]
async fn a_producer_that_disagrees_with_the_recorded_count_stores_nothing() {
    let ns = dq_testkit::namespace("split");
    let consumer = client(&ns, None).await;
    let runs = Runs::default();
    let w = worker(&consumer, &runs);
    let metas = w.check_topics().await.unwrap();
    assert_eq!(metas[0].partitions, 1);
    let handle = w.start().await.expect("the worker starts");

    let producer = client(&ns, Some(4)).await;
    for i in 0..8u64 {
        match producer
            .enqueue::<split_job>(i)
            .key(format!("job-{i}"))
            .await
        {
            Err(Error::TopicMismatch {
                stored: 1,
                configured: 4,
                ..
            }) => {}
            other => panic!("job {i}: expected TopicMismatch, got {other:?}"),
        }
    }
    let server = dq_testkit::shared();
    for p in 0..4 {
        let k = PartitionKeys::new(&ns, &Queue::new(Topic::new(TOPIC).unwrap(), p));
        assert_eq!(server.cmd::<i64>(&["HLEN", &k.jobs]), 0, "partition {p}");
    }
    let record: String = server.cmd(&["HGET", &topics_key(&ns), TOPIC]);
    assert!(record.contains("partitions=1"), "{record}");
    assert!(handle.health().permanent_errors().next().is_none());
    handle.shutdown().await;
    assert!(runs.get().is_empty());
}

/// A worker started while Redis is down cannot check its topics yet: that is connection
/// trouble, not a mismatch — its health shows the error (not as permanent), and once Redis is
/// back it checks, records its count and runs the topic's jobs.
#[tokio::test]
async fn a_worker_started_while_redis_is_down_checks_once_it_is_back() {
    let server = dq_testkit::RedisServer::start();
    let ns = dq_testkit::namespace("split");
    let consumer = Client::builder()
        .namespace(&ns)
        .partitions(TOPIC, 4)
        .connect(&server.url())
        .await
        .unwrap();
    server.stop();
    let runs = Runs::default();
    let handle = worker(&consumer, &runs)
        .start()
        .await
        .expect("the worker starts");
    dq_testkit::eventually("the failed check shows in the health", WAIT, || {
        let health = handle.health();
        async move {
            health.fetchers.iter().any(|f| f.last_error.is_some())
                && health.permanent_errors().next().is_none()
        }
    })
    .await;

    server.restart();
    let producer = Client::builder()
        .namespace(&ns)
        .partitions(TOPIC, 4)
        .connect(&server.url())
        .await
        .unwrap();
    for i in 0..8u64 {
        producer
            .enqueue::<split_job>(i)
            .key(format!("job-{i}"))
            .await
            .unwrap();
    }
    dq_testkit::eventually("all 8 jobs ran once Redis was back", WAIT, || {
        let done = runs.get().len() == 8;
        async move { done }
    })
    .await;
    assert!(handle.health().permanent_errors().next().is_none());
    handle.shutdown().await;
}
