//! Operating dq: Prometheus metrics, a health probe and the live workers, served over HTTP.
//!
//! ```text
//! cargo run --example metrics                      # embedded store
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example metrics
//! cargo run --example metrics -- --serve           # keep serving until Ctrl-C
//! ```
//!
//! It installs `metrics-exporter-prometheus` as the recorder (dq only records through the
//! `metrics` facade; the application picks the exporter), starts a worker and the stats
//! collector, enqueues a few jobs (some fail and retry, one dies), then scrapes its own
//! `GET /metrics` and prints dq's figures. Routes (axum, on `METRICS_ADDR`; by default
//! `127.0.0.1:9898` with `--serve`, a free port without):
//!
//! - `GET /metrics` — Prometheus text format;
//! - `GET /health` — the worker's health as JSON, `200` when it reaches the store and every
//!   fetcher's last call succeeded, `503` otherwise (a Kubernetes readiness probe);
//! - `GET /workers` — the live workers of the namespace (`Client::workers`), as JSON.

#![allow(dead_code)] // the test of this example uses its parts, not `main`

#[path = "common/mod.rs"]
mod common;

use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use dq::{Client, HealthProbe, JobContext, JobError, Worker};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Job `n` works for a few ms; one in three fails its first attempt (and is retried), and
/// job 13 always fails (after three attempts it is dead).
#[dq::delayed_job(topic = "metrics.demo", retry = "fixed(200ms, 2)")]
pub async fn demo(n: u32, ctx: JobContext) -> Result<(), JobError> {
    tokio::time::sleep(Duration::from_millis(5 * u64::from(n % 7))).await;
    if n == 13 || (n.is_multiple_of(3) && ctx.attempt == 1) {
        return Err(JobError::retry(format!("job {n} failed")));
    }
    Ok(())
}

/// Latency buckets (seconds) for dq's histograms, so that Prometheus can compute quantiles
/// across workers (`histogram_quantile`): from 5 ms to 10 minutes.
pub const BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0, 300.0, 600.0,
];

/// Installs the Prometheus recorder for this process (once) and describes dq's metrics.
pub fn install_prometheus() -> PrometheusHandle {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Prefix("dq_".into()), &BUCKETS)
        .expect("buckets are not empty")
        .install_recorder()
        .expect("no other recorder is installed");
    dq::metrics::describe();
    handle
}

/// What the routes read.
#[derive(Clone)]
pub struct AppState {
    /// Renders the scrape.
    pub prometheus: PrometheusHandle,
    /// The worker's health.
    pub probe: HealthProbe,
    /// For the live workers.
    pub client: Client,
}

/// `/metrics`, `/health` and `/workers`.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/health", get(health))
        .route("/workers", get(workers))
        .with_state(state)
}

async fn metrics(State(s): State<AppState>) -> String {
    s.prometheus.render()
}

async fn health(State(s): State<AppState>) -> impl IntoResponse {
    let h = s.probe.health();
    let status = if h.is_healthy() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let ago = |at: Option<std::time::Instant>| at.map(|t| t.elapsed().as_secs_f64());
    let body = serde_json::json!({
        "healthy": h.is_healthy(),
        "worker_id": h.worker_id,
        "reaches_store": h.reaches_store,
        "last_heartbeat_seconds_ago": ago(h.last_heartbeat_at),
        "heartbeat_error": h.heartbeat_error,
        "running": h.running,
        "fetchers": h.fetchers.iter().map(|f| serde_json::json!({
            "topic": f.topic,
            "partition": f.partition,
            "last_call_ok": f.last_call_ok,
            "last_call_seconds_ago": ago(f.last_call_at),
            "last_error": f.last_error,
        })).collect::<Vec<_>>(),
        "missing_data": h.missing_data.iter().map(|m| format!("{}: {}", m.topic, m.type_name)).collect::<Vec<_>>(),
    });
    (status, axum::Json(body))
}

async fn workers(State(s): State<AppState>) -> impl IntoResponse {
    match s.client.workers().await {
        Ok(list) => {
            let list: Vec<_> = list
                .iter()
                .map(|w| {
                    serde_json::json!({
                        "id": w.id, "host": w.host, "pid": w.pid, "topics": w.topics,
                        "concurrency": w.concurrency, "running": w.running,
                        "started_ms": w.started_ms, "version": w.version,
                    })
                })
                .collect();
            (StatusCode::OK, axum::Json(serde_json::json!(list)))
        }
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(serde_json::json!({ "error": e.to_string() })),
        ),
    }
}

/// Serves `router` on `listener` until the process ends.
pub fn serve(listener: tokio::net::TcpListener, router: Router) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            eprintln!("metrics server stopped: {e}");
        }
    })
}

/// `GET path` on `addr` over plain HTTP/1.1: the status code and body.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_owned());
    Ok((status, body))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::init_logs();
    let prometheus = install_prometheus();
    let client = common::connect("metrics").await;
    let worker = Worker::builder(client.clone())
        .topics(["metrics.demo"])
        .build()?
        .start()
        .await?;
    // One collector per deployment: queue depths by state, the oldest overdue job.
    let collector = dq::metrics::spawn_stats_collector(client.clone(), Duration::from_secs(1));

    // A fixed port to curl when serving; any free one for a run that only shows its scrape.
    let serve_on = std::env::args().any(|a| a == "--serve");
    let addr = std::env::var("METRICS_ADDR").unwrap_or_else(|_| {
        if serve_on {
            "127.0.0.1:9898"
        } else {
            "127.0.0.1:0"
        }
        .into()
    });
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let addr = listener.local_addr()?;
    let server = serve(
        listener,
        router(AppState {
            prometheus,
            probe: worker.health_probe(),
            client: client.clone(),
        }),
    );
    println!("serving http://{addr}/metrics, /health and /workers");

    for n in 0..30 {
        client.enqueue::<demo>(n).await?;
    }
    // Let the jobs (and their retries) run, and the collector read the queues.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let s = client.stats::<demo>().await?;
        if s.ready + s.active + s.retry + s.scheduled == 0 || tokio::time::Instant::now() > deadline
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let (status, body) = http_get(addr, "/metrics").await?;
    println!("GET /metrics -> {status}; dq's figures:");
    for line in body.lines().filter(|l| {
        l.starts_with("dq_") && !l.contains("_bucket{") && !l.starts_with("dq_store_call")
    }) {
        println!("  {line}");
    }
    let (status, body) = http_get(addr, "/health").await?;
    println!("GET /health -> {status}: {body}");
    let (status, body) = http_get(addr, "/workers").await?;
    println!("GET /workers -> {status}: {body}");

    if serve_on {
        println!("serving until Ctrl-C");
        tokio::signal::ctrl_c().await?;
    }
    collector.abort();
    server.abort();
    worker.shutdown().await;
    Ok(())
}
