//! The main example, `examples/order_timeout.rs`, runs unchanged on a Redis Cluster (the
//! testkit's: 3 masters, 3 replicas) and through Redis Sentinel (a master, 2 replicas, 3
//! sentinels), and ends with the summary it prints on one node: 3 paid, 7 closed, nothing left.

#[allow(dead_code)]
#[path = "../examples/order_timeout.rs"]
mod order_timeout;

use order_timeout::Summary;

/// What the example ends with on every store.
const EXPECTED: Summary = Summary {
    paid: 3,
    closed: 7,
    fired: 7,
    cancelled: 3,
    pending: 0,
};

/// Connects to `url` in a namespace of this test's own.
async fn client(url: &str) -> dq::Client {
    dq::Client::builder()
        .namespace(dq_testkit::namespace("order-timeout"))
        .connect(url)
        .await
        .expect("connect")
}

#[tokio::test]
async fn the_example_runs_on_a_redis_cluster() {
    let cluster = dq_testkit::shared_cluster();
    let summary = order_timeout::run(client(&cluster.url()).await)
        .await
        .unwrap();
    assert_eq!(summary, EXPECTED);
}

#[tokio::test]
async fn the_example_runs_through_sentinel() {
    let set = dq_testkit::shared_sentinel();
    let summary = order_timeout::run(client(&set.url()).await).await.unwrap();
    assert_eq!(summary, EXPECTED);
}
