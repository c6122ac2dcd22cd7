//! The HTTP API's throughput (section `http`, issue 26): single enqueues over HTTP+JSON
//! (`dq_http`, keep-alive) beside the direct client's, in the same repetition, and the floor
//! of the HTTP round trip itself.
//!
//! Each repetition, on an emptied server, in this process on one multi-thread tokio runtime:
//! the API is served on a loopback port over a client with group commit on (the default),
//! and four runs of N single enqueues each (the S1 order payload, due in 30 minutes, a
//! generated key, each run its own topic) are timed:
//! - direct, concurrency 1: `TopicClient::enqueue` awaited one at a time;
//! - HTTP, concurrency 1: `POST /v1/topics/{topic}/jobs` one at a time over one keep-alive
//!   connection (these two and the floor's c=1 run alternate in 10 blocks, the order
//!   rotating, so that the machine's drifting load weighs on each alike);
//! - direct and HTTP at concurrency 64 (64 tasks, each over its own keep-alive connection):
//!   group commit coalesces the concurrent enqueues behind the API as it does for the
//!   direct client.
//!
//! Then the floor: the same requests (body, token) to a route served beside the API by the
//! same server, listener and client, that reads the body, does nothing with it and answers a
//! fixed small JSON (no auth, no parsing, no Redis), at concurrency 1 and 64. `direct / (direct + floor)` (µs at c=1) bounds the c=1 ratio: what
//! it would be if the API added only the HTTP round trip to the direct enqueue.
//!
//! The client is hyper's HTTP/1.1 client connection (what a Rust producer's HTTP stack is
//! built on; reqwest adds a connection pool, URL parsing and tower layers over it: ~15 µs more
//! per request at c=1 here, and its shared pool halved the c=64 floor). The body is the
//! producer's own type serialized with serde_json, the answer read whole. The client runs in
//! the same process as the server (they share its CPU): the ratios are a floor for a producer
//! on another machine. Target: HTTP c=1 ≥ 0.5 × direct c=1.

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

/// The route of the floor, served beside the API: does nothing and answers a fixed small
/// JSON.
const FLOOR: &str = "/bench/floor";

/// How many blocks the c=1 runs alternate in.
const BLOCKS: u64 = 10;

/// The bearer token the API is served with.
const TOKEN: &str = "bench-token";

/// The `Authorization` header the client sends.
const BEARER: &str = "Bearer bench-token";

/// Calls per second of `n` calls split over `tasks` tasks: each task makes its state with
/// `init()` (a connection), then makes its calls one at a time, call `i` being
/// `one(state, i)` (which hands the state back).
async fn timed<S, I, IF, F, Fut>(n: u64, tasks: usize, init: I, one: F) -> Result<f64>
where
    S: Send + 'static,
    I: Fn() -> IF,
    IF: std::future::Future<Output = Result<S>> + Send + 'static,
    F: Fn(S, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<S>> + Send,
{
    let started = Instant::now();
    let mut handles = Vec::with_capacity(tasks);
    for t in 0..tasks as u64 {
        let one = one.clone();
        let state = init();
        let tasks = tasks as u64;
        handles.push(tokio::spawn(async move {
            let mut state = state.await?;
            let mut i = t;
            while i < n {
                state = one(state, i).await?;
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

/// What one repetition measures: the four runs (direct c1, HTTP c1, direct c64, HTTP c64)
/// and the floor's calls per second at c1 and c64.
struct Measured {
    runs: [Run; 4],
    floor_c1: f64,
    floor_c64: f64,
}

/// Script calls Redis has run since its stats were last reset, and resets them.
fn script_calls(admin: &mut Connection) -> Result<u64> {
    let calls = admin::script_calls(&admin::commandstats(admin)?).calls;
    admin::cmd::<()>(admin, &["CONFIG", "RESETSTAT"])?;
    Ok(calls)
}

/// The body of an enqueue request, serialized as a producer serializes its own type.
#[derive(serde::Serialize)]
struct EnqueueBody<'a> {
    payload: &'a Order,
    delay: &'static str,
}

/// The JSON body of enqueue `i`: the S1 order, due in 30 minutes.
fn enqueue_body(i: u64) -> Result<Vec<u8>> {
    Ok(serde_json::to_vec(&EnqueueBody {
        payload: &Order::new(i, 0),
        delay: "30m",
    })?)
}

/// One HTTP/1.1 keep-alive connection to the API (hyper's client connection).
type Conn = hyper::client::conn::http1::SendRequest<http_body_util::Full<axum::body::Bytes>>;

/// Opens a keep-alive connection to `addr` (Nagle off), its driver spawned.
async fn connect(addr: std::net::SocketAddr) -> Result<Conn> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let (conn, driver) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await?;
    tokio::spawn(driver);
    Ok(conn)
}

/// `POST path` with a JSON `body` and the bearer token on `conn`, the answer read whole; an
/// error unless its status is `want`. Hands the connection back for the next request.
async fn post(mut conn: Conn, path: &str, body: Vec<u8>, want: u16) -> Result<Conn> {
    use http_body_util::BodyExt;
    conn.ready().await?;
    let req = hyper::Request::post(path)
        .header(hyper::header::HOST, "127.0.0.1")
        .header(hyper::header::AUTHORIZATION, BEARER)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(http_body_util::Full::new(body.into()))?;
    let r = conn.send_request(req).await?;
    let status = r.status().as_u16();
    let answer = r.into_body().collect().await?.to_bytes();
    if status != want {
        return Err(format!("HTTP {status}: {}", String::from_utf8_lossy(&answer)).into());
    }
    Ok(conn)
}

/// The four runs and the floor, each timed in this process on one multi-thread runtime.
fn measure(url: &str, n: u64) -> Result<Measured> {
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
        let addr = listener.local_addr()?;
        let config = dq_http::HttpConfig::default()
            .token(dq_http::Token::new(TOKEN, dq_http::Access::ReadWrite));
        // the floor: the same server, listener and client, a route that reads the request
        // and does nothing with it
        let floor = |_body: axum::body::Bytes| async { axum::Json(json!({"ok": true})) };
        let app = dq_http::router(client.clone(), config).route(FLOOR, axum::routing::post(floor));
        let server = tokio::spawn(axum::serve(dq_http::no_delay(listener), app).into_future());
        let delay = Duration::from_secs(1800);
        let max = client.config().max_payload;
        let direct = |t: dq::TopicClient| {
            move |(), i: u64| {
                let t = t.clone();
                async move {
                    let payload = dq::payload::encode(&Order::new(i, 0), max)?;
                    t.enqueue(payload).delay(delay).await?;
                    Ok::<(), crate::BoxError>(())
                }
            }
        };
        let no_state = || async { Ok(()) };
        // each task its own keep-alive connection; the body encoded per request
        let over_http = |path: String, want: u16, tasks: usize| {
            let one = move |conn, i| {
                let path = path.clone();
                async move { post(conn, &path, enqueue_body(i)?, want).await }
            };
            timed(n, tasks, move || connect(addr), one)
        };
        let jobs = |t: &str| format!("/v1/topics/{t}/jobs");
        // c=1: direct, HTTP and the floor in alternating blocks, the order rotating (the
        // machine's load drifts: each gets its share of every period); each rate from its
        // blocks' summed time
        let c1 = {
            let direct_one = direct(client.topic(TOPICS[0])?);
            let path = jobs(TOPICS[1]);
            tokio::spawn(async move {
                let (mut api, mut bare) = (connect(addr).await?, connect(addr).await?);
                let mut spent = [Duration::ZERO; 3];
                for b in 0..BLOCKS {
                    let range = b * n / BLOCKS..(b + 1) * n / BLOCKS;
                    for k in 0..3 {
                        let which = (b as usize + k) % 3;
                        let started = Instant::now();
                        for i in range.clone() {
                            match which {
                                0 => direct_one((), i).await?,
                                1 => api = post(api, &path, enqueue_body(i)?, 201).await?,
                                _ => bare = post(bare, FLOOR, enqueue_body(i)?, 200).await?,
                            }
                        }
                        spent[which] += started.elapsed();
                    }
                }
                Ok::<_, crate::BoxError>(spent.map(|d| n as f64 / d.as_secs_f64()))
            })
        };
        let [direct_c1, http_c1, floor_c1] =
            c1.await.map_err(|e| format!("a task failed: {e}"))??;
        let mut runs = [Run::default(); 4];
        runs[0].rate = direct_c1;
        runs[1].rate = http_c1;
        for (i, run) in runs.iter_mut().enumerate().skip(2) {
            // the Redis calls of a run: its own (the stats are read in between)
            script_calls(&mut stats)?;
            run.rate = match i {
                2 => timed(n, CONCURRENCY, no_state, direct(client.topic(TOPICS[2])?)).await?,
                _ => over_http(jobs(TOPICS[3]), 201, CONCURRENCY).await?,
            };
            run.jobs_per_call = n as f64 / script_calls(&mut stats)?.max(1) as f64;
        }
        let floor_c64 = over_http(FLOOR.into(), 200, CONCURRENCY).await?;
        server.abort();
        // every job is stored, once
        for t in TOPICS {
            let enqueued = client.topic(t)?.stats().await?.enqueued;
            if enqueued != n {
                return Err(format!("{t}: {enqueued} jobs enqueued, not {n}").into());
            }
        }
        Ok(Measured {
            runs,
            floor_c1,
            floor_c64,
        })
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
            let Measured {
                runs,
                floor_c1,
                floor_c64,
            } = measure(&url, n)?;
            o.flush()?;
            let [direct_c1, http_c1, direct_c64, http_c64] = runs.map(|r| r.rate);
            let [_, _, direct_c64_batch, http_c64_batch] = runs.map(|r| r.jobs_per_call);
            // µs per call at c=1: direct enqueue, HTTP enqueue, the bare HTTP round trip
            let (direct_us, http_us, floor_us) = (1e6 / direct_c1, 1e6 / http_c1, 1e6 / floor_c1);
            // the c=1 ratio if HTTP added only its round trip to the direct enqueue
            let bound = direct_us / (direct_us + floor_us);
            // what the API adds beyond the round trip and the direct enqueue: its own work
            // (parsing, auth, encoding: ~10 µs when timed inside the server) and the wake-ups
            // of the longer chain (client, server connection, Redis connection tasks)
            let rest_us = http_us - direct_us - floor_us;
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
            o.push_labeled(
                "http_floor_c64",
                "HTTP section: floor (a route that reads the request, does nothing), c=64",
                "calls/s",
                floor_c64,
            );
            o.push_target(
                "http_c1_ratio",
                "HTTP c=1 / direct c=1",
                http_c1 / direct_c1,
                ("≥ 0.5", figures::Check::MedianAtLeast(0.5)),
            );
            o.push_labeled(
                "http_floor_c1_us",
                "HTTP round trip alone (the floor route, same server and client), c=1",
                "µs",
                floor_us,
            );
            o.push_labeled(
                "http_c1_bound",
                "HTTP c=1 / direct c=1 bound by that round trip (direct / (direct + floor))",
                "×",
                bound,
            );
            o.push_labeled(
                "http_c1_rest_us",
                "HTTP c=1: µs per enqueue beyond direct + floor (the API's work, its extra wake-ups)",
                "µs",
                rest_us,
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
                      "direct_c1_us": direct_us, "http_c1_us": http_us,
                      "floor_c1": floor_c1, "floor_c1_us": floor_us, "floor_c64": floor_c64,
                      "bound_c1": bound, "rest_c1_us": rest_us,
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
