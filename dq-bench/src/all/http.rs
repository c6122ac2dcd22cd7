//! The HTTP API's throughput (section `http`, issue 26): single enqueues over HTTP+JSON
//! (`dq_http`, keep-alive) beside the direct client's, in the same repetition.
//!
//! Each repetition, on an emptied server, in this process on one multi-thread tokio runtime:
//! the API is served on a loopback port over a client with group commit on (the default),
//! and four runs of N single enqueues each (the S1 order payload, due in 30 minutes, a
//! generated key, each run its own topic) are timed:
//! - direct, concurrency 1: `TopicClient::enqueue` awaited one at a time;
//! - HTTP, concurrency 1: `POST /v1/topics/{topic}/jobs` one at a time over one keep-alive
//!   connection (reqwest);
//! - direct and HTTP at concurrency 64 (64 tasks; HTTP over a pool of keep-alive
//!   connections): group commit coalesces the concurrent enqueues behind the API as it does
//!   for the direct client.
//!
//! The HTTP client runs in the same process as the server (they share its CPU): the ratios
//! are a floor for a producer on another machine. Target: HTTP c=1 ≥ 0.5 × direct c=1.

use super::*;
use crate::jobs::Order;

/// How many tasks the concurrent runs use.
const CONCURRENCY: usize = 64;

/// The topics of the four runs.
const TOPICS: [&str; 4] = [
    "bench.http.direct1",
    "bench.http.http1",
    "bench.http.direct64",
    "bench.http.http64",
];

/// Jobs per second of `n` enqueues split over `tasks` tasks, each enqueue done by `one(i)`.
async fn timed<F, Fut>(n: u64, tasks: usize, one: F) -> Result<f64>
where
    F: Fn(u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let started = Instant::now();
    let mut handles = Vec::with_capacity(tasks);
    for t in 0..tasks as u64 {
        let one = one.clone();
        let tasks = tasks as u64;
        handles.push(tokio::spawn(async move {
            let mut i = t;
            while i < n {
                one(i).await?;
                i += tasks;
            }
            Ok::<(), crate::BoxError>(())
        }));
    }
    for h in handles {
        h.await.map_err(|e| format!("a task failed: {e}"))??;
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

/// One run's figures: jobs per second, and jobs per script call Redis ran (group commit
/// puts several jobs in one call).
#[derive(Clone, Copy, Debug, Default)]
struct Run {
    rate: f64,
    jobs_per_call: f64,
}

/// Script calls Redis has run since its stats were last reset, and resets them.
fn script_calls(admin: &mut Connection) -> Result<u64> {
    let calls = admin::script_calls(&admin::commandstats(admin)?).calls;
    admin::cmd::<()>(admin, &["CONFIG", "RESETSTAT"])?;
    Ok(calls)
}

/// The four runs: direct c1, HTTP c1, direct c64, HTTP c64.
fn measure(url: &str, n: u64) -> Result<[Run; 4]> {
    let mut stats = redis::Client::open(url)?.get_connection()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let url = url.to_owned();
    rt.block_on(async move {
        let client = dq::Client::builder()
            .namespace("bench-http")
            .connect(&url)
            .await?;
        for t in TOPICS {
            client.topic(t)?.check().await?;
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let token = "bench-token";
        let config = dq_http::HttpConfig::default()
            .token(dq_http::Token::new(token, dq_http::Access::ReadWrite));
        let server = tokio::spawn(
            axum::serve(
                dq_http::no_delay(listener),
                dq_http::router(client.clone(), config),
            )
            .into_future(),
        );
        let delay = Duration::from_secs(1800);
        let max = client.config().max_payload;
        let direct = |t: dq::TopicClient| {
            move |i: u64| {
                let t = t.clone();
                async move {
                    let payload = dq::payload::encode(&Order::new(i, 0), max)?;
                    t.enqueue(payload).delay(delay).await?;
                    Ok::<(), crate::BoxError>(())
                }
            }
        };
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(CONCURRENCY)
            .tcp_nodelay(true)
            .build()?;
        let over_http = |topic: &'static str| {
            let (http, url) = (http.clone(), format!("{base}/v1/topics/{topic}/jobs"));
            move |i: u64| {
                let (http, url) = (http.clone(), url.clone());
                async move {
                    let body =
                        serde_json::to_vec(&json!({"payload": Order::new(i, 0), "delay": "30m"}))?;
                    let r = http
                        .post(&url)
                        .bearer_auth(token)
                        .header("Content-Type", "application/json")
                        .body(body)
                        .send()
                        .await?;
                    if r.status().as_u16() != 201 {
                        return Err(format!("HTTP {}: {}", r.status(), r.text().await?).into());
                    }
                    Ok::<(), crate::BoxError>(())
                }
            }
        };
        let mut runs = [Run::default(); 4];
        for (i, run) in runs.iter_mut().enumerate() {
            // the Redis calls of a run: its own (the stats are read in between)
            script_calls(&mut stats)?;
            run.rate = match i {
                0 => timed(n, 1, direct(client.topic(TOPICS[0])?)).await?,
                1 => timed(n, 1, over_http(TOPICS[1])).await?,
                2 => timed(n, CONCURRENCY, direct(client.topic(TOPICS[2])?)).await?,
                _ => timed(n, CONCURRENCY, over_http(TOPICS[3])).await?,
            };
            run.jobs_per_call = n as f64 / script_calls(&mut stats)?.max(1) as f64;
        }
        server.abort();
        // every job is stored, once
        for t in TOPICS {
            let enqueued = client.topic(t)?.stats().await?.enqueued;
            if enqueued != n {
                return Err(format!("{t}: {enqueued} jobs enqueued, not {n}").into());
            }
        }
        Ok(runs)
    })
}

impl Orchestrator {
    pub(super) fn http(&mut self) -> Result<()> {
        // --quick: a smoke run of 1000 jobs per run
        let n = if self.plan.quick {
            1_000
        } else {
            self.plan.s1_n.min(20_000)
        };
        let reps = self.plan.reps;
        let url = self.url();
        self.reps("http", reps, |o, _| {
            o.flush()?;
            let runs = measure(&url, n)?;
            o.flush()?;
            let [direct_c1, http_c1, direct_c64, http_c64] = runs.map(|r| r.rate);
            let [_, _, direct_c64_batch, http_c64_batch] = runs.map(|r| r.jobs_per_call);
            for (key, label, value) in [
                (
                    "http_direct_c1",
                    "HTTP section: direct single enqueue, c=1",
                    direct_c1,
                ),
                (
                    "http_c1",
                    "HTTP section: HTTP single enqueue, keep-alive, c=1",
                    http_c1,
                ),
                (
                    "http_direct_c64",
                    "HTTP section: direct single enqueue, c=64",
                    direct_c64,
                ),
                (
                    "http_c64",
                    "HTTP section: HTTP single enqueue, keep-alive, c=64",
                    http_c64,
                ),
            ] {
                o.push_labeled(key, label, "jobs/s", value);
            }
            o.push_target(
                "http_c1_ratio",
                "HTTP c=1 / direct c=1",
                http_c1 / direct_c1,
                ("≥ 0.5", figures::Check::MedianAtLeast(0.5)),
            );
            o.push_labeled(
                "http_c64_ratio",
                "HTTP c=64 / direct c=64",
                "×",
                http_c64 / direct_c64,
            );
            o.push_labeled(
                "http_c64_jobs_per_call",
                "HTTP c=64: jobs per enqueue script call (group commit)",
                "jobs",
                http_c64_batch,
            );
            Ok(json!({"n": n, "direct_c1": direct_c1, "http_c1": http_c1,
                      "direct_c64": direct_c64, "http_c64": http_c64,
                      "ratio_c1": http_c1 / direct_c1, "ratio_c64": http_c64 / direct_c64,
                      "direct_c64_jobs_per_call": direct_c64_batch,
                      "http_c64_jobs_per_call": http_c64_batch}))
        })
    }

    /// Pushes `value` to a ratio figure with a target, declared on first use.
    fn push_target(
        &mut self,
        key: &str,
        label: &str,
        value: f64,
        target: (&'static str, figures::Check),
    ) {
        if !self.figures.iter().any(|f| f.key == key) {
            self.figures.push(Figure {
                key: key.to_owned(),
                label: label.to_owned(),
                unit: "×",
                values: Vec::new(),
                target: Some(target),
            });
        }
        self.push(key, value);
    }
}
