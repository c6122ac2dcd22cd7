//! The metrics example's HTTP routes on a real Redis: a scrape of `/metrics` over HTTP finds
//! every metric family dq emits, with real figures; `/health` answers 200 with the worker's
//! health as JSON, and 503 once the worker cannot reach Redis; `/workers` lists the worker.

#[path = "../examples/metrics.rs"]
mod example;

use std::time::Duration;

use dq::{Client, Worker};
use dq_testkit::{RedisServer, eventually, eventually_some};

const WAIT: Duration = Duration::from_secs(60);

const FAMILIES: [&str; 13] = [
    "dq_jobs_enqueued_total",
    "dq_jobs_started_total",
    "dq_jobs_succeeded_total",
    "dq_jobs_failed_total",
    "dq_jobs_cancelled_total",
    "dq_store_errors_total",
    "dq_job_lateness_seconds",
    "dq_job_run_seconds",
    "dq_store_call_seconds",
    "dq_jobs_running",
    "dq_queue_jobs",
    "dq_queue_oldest_overdue_seconds",
    "dq_workers_live",
];

/// The value of the sample `line_start` (a metric name with its labels, as rendered).
fn sample(scrape: &str, line_start: &str) -> Option<f64> {
    scrape
        .lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_serves_every_metric_family_and_health() {
    let prometheus = example::install_prometheus();
    // A private server: the test stops it to see the health probe turn 503.
    let server = RedisServer::start();
    let ns = dq_testkit::namespace("operate-example");
    let client = Client::builder()
        .namespace(&ns)
        .connect(&server.url())
        .await
        .unwrap();
    let worker = Worker::builder(client.clone())
        .topics(["metrics.demo"])
        .heartbeat(Duration::from_millis(100))
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let _server = example::serve(
        listener,
        example::router(example::AppState {
            prometheus,
            probe: worker.health_probe(),
            client: client.clone(),
        }),
    );

    for n in 0..10 {
        client.enqueue::<example::demo>(n).await.unwrap();
    }
    client.enqueue::<example::demo>(13).await.unwrap();
    client
        .enqueue::<example::demo>(99)
        .key("later")
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    client.cancel::<example::demo>("later").await.unwrap();
    // A store error: a topic whose `jobs` key is of the wrong type refuses every enqueue.
    server.cmd::<()>(&["SET", &format!("{ns}:{{metrics.broken#0}}:jobs"), "x"]);
    let broken = client.topic("metrics.broken").unwrap();
    assert!(broken.enqueue(vec![0xc0]).await.is_err());

    eventually("every job ran; 13 is dead", WAIT, || {
        let client = client.clone();
        async move {
            let s = client.stats::<example::demo>().await.unwrap();
            s.succeeded == 10 && s.dead == 1
        }
    })
    .await;
    dq::metrics::collect_once(&client).await.unwrap();

    let (status, scrape) = example::http_get(addr, "/metrics").await.unwrap();
    assert_eq!(status, 200);
    for family in FAMILIES {
        assert!(
            scrape.contains(&format!("# TYPE {family} ")),
            "{family} missing from the scrape:\n{scrape}"
        );
    }
    let t = r#"{topic="metrics.demo"}"#;
    assert_eq!(
        sample(&scrape, &format!("dq_jobs_enqueued_total{t}")),
        Some(12.0)
    );
    assert_eq!(
        sample(&scrape, &format!("dq_jobs_succeeded_total{t}")),
        Some(10.0)
    );
    assert_eq!(
        sample(&scrape, &format!("dq_jobs_cancelled_total{t}")),
        Some(1.0)
    );
    // 0..10 run once, 0, 3, 6, 9 twice, 13 three times.
    assert_eq!(
        sample(&scrape, &format!("dq_jobs_started_total{t}")),
        Some(17.0)
    );
    assert_eq!(
        sample(
            &scrape,
            r#"dq_jobs_failed_total{topic="metrics.demo",outcome="dead"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &scrape,
            r#"dq_jobs_failed_total{topic="metrics.demo",outcome="retry"}"#
        ),
        Some(6.0)
    );
    assert_eq!(
        sample(
            &scrape,
            r#"dq_queue_jobs{topic="metrics.demo",state="dead"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&scrape, r#"dq_store_errors_total{op="enqueue"}"#),
        Some(1.0)
    );
    assert_eq!(sample(&scrape, "dq_workers_live "), Some(1.0));
    // Histograms come with buckets, for quantiles across workers.
    assert_eq!(
        sample(&scrape, &format!("dq_job_lateness_seconds_count{t}")),
        Some(17.0)
    );
    assert!(scrape.contains(r#"dq_job_lateness_seconds_bucket{topic="metrics.demo",le="0.005"}"#));

    let (status, body) = example::http_get(addr, "/health").await.unwrap();
    assert_eq!(status, 200, "{body}");
    let health: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["reaches_store"], true, "{body}");
    assert_eq!(health["worker_id"], worker.id(), "{body}");
    assert_eq!(health["fetchers"][0]["topic"], "metrics.demo", "{body}");

    let (status, body) = example::http_get(addr, "/workers").await.unwrap();
    assert_eq!(status, 200, "{body}");
    let workers: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(workers[0]["id"], worker.id(), "{body}");

    // Redis gone: the next heartbeat fails, and the probe says 503.
    server.kill();
    let body = eventually_some("the health probe turned 503", WAIT, || async move {
        let (status, body) = example::http_get(addr, "/health").await.ok()?;
        (status == 503).then_some(body)
    })
    .await;
    let health: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["reaches_store"], false, "{body}");
    assert!(health["heartbeat_error"].is_string(), "{body}");
    server.restart();
    eventually("the health probe is back to 200", WAIT, || async move {
        matches!(example::http_get(addr, "/health").await, Ok((200, _)))
    })
    .await;
    worker.shutdown().await;
}
