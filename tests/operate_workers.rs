//! Live workers and health on one process: a worker lists itself in `Client::workers` while it
//! runs (with its running count), says in its health that it reaches the store, and removes
//! itself on shutdown; on the embedded store a heartbeat expires by the store's clock, as on
//! Redis (the Redis side, with real processes and SIGKILL: dq-faults' `live_workers`).

use std::time::Duration;

use dq::{Client, JobContext, JobError, Worker};
use dq_testkit::{eventually, eventually_some};

const WAIT: Duration = Duration::from_secs(30);

#[dq::delayed_job(topic = "operate.hold", retry = "none", concurrency = 4)]
async fn hold(_n: u32, ctx: JobContext) -> Result<(), JobError> {
    ctx.cancelled().await;
    Ok(())
}

async fn check(client: Client) {
    let worker = Worker::builder(client.clone())
        .topics(["operate.hold"])
        .heartbeat(Duration::from_millis(100))
        .shutdown_timeout(Duration::from_millis(400))
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    client.enqueue::<hold>(1).key("a").await.unwrap();
    let listed = eventually_some("the worker listed, running its job", WAIT, || {
        let client = client.clone();
        async move {
            let w = client.workers().await.unwrap();
            (w.len() == 1 && w[0].running == 1).then(|| w[0].clone())
        }
    })
    .await;
    assert_eq!(listed.id, worker.id());
    assert_eq!(listed.pid, std::process::id());
    assert_eq!(listed.topics, vec!["operate.hold".to_string()]);
    assert_eq!(listed.concurrency, 4);
    assert_eq!(listed.expires_ms - listed.beat_ms, 300);

    let health = worker.health();
    assert!(health.reaches_store, "{health:?}");
    assert!(health.last_heartbeat_at.is_some(), "{health:?}");
    assert_eq!(health.running, 1, "{health:?}");
    assert_eq!(health.worker_id, worker.id());
    eventually("every fetcher completed a call", WAIT, || {
        let ok = worker
            .health()
            .fetchers
            .iter()
            .all(|f| f.last_call_at.is_some());
        async move { ok }
    })
    .await;

    worker.shutdown().await;
    assert!(client.workers().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_worker_lists_itself_on_redis() {
    let client = Client::builder()
        .namespace(dq_testkit::namespace("operate-workers"))
        .connect(&dq_testkit::shared().url())
        .await
        .unwrap();
    check(client).await;
}

#[tokio::test]
async fn a_worker_lists_itself_on_the_embedded_store() {
    check(Client::in_memory()).await;
}

/// On the embedded store a heartbeat lasts its ttl by the store's (tokio's) clock.
#[tokio::test(start_paused = true)]
async fn an_embedded_heartbeat_expires() {
    let client = Client::in_memory();
    let store = client.store().clone();
    let info = dq::WorkerInfo::new(vec!["t".into()], 1, 0);
    store
        .beat_worker(&info, Duration::from_secs(15))
        .await
        .unwrap();
    tokio::time::advance(Duration::from_secs(14)).await;
    assert_eq!(client.workers().await.unwrap().len(), 1);
    tokio::time::advance(Duration::from_secs(2)).await;
    assert!(client.workers().await.unwrap().is_empty());
    // Bad input is refused before anything is kept.
    assert!(matches!(
        store.beat_worker(&info, Duration::ZERO).await,
        Err(dq::Error::InvalidConfig(_))
    ));
    assert!(client.workers().await.unwrap().is_empty());
}

/// On a Redis Cluster the live workers are one hash-tag-free key, written and read by calls
/// of their own: a worker lists itself there too, and removes itself on shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_lists_itself_on_a_cluster() {
    let client = Client::builder()
        .namespace(dq_testkit::namespace("operate-cluster"))
        .connect(&dq_testkit::shared_cluster().url())
        .await
        .unwrap();
    check(client).await;
}
