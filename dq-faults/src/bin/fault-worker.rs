//! `fault-worker`: a dq worker process for fault-injection tests.
//!
//! It embeds a [`dq::Worker`] running the `#[dq::delayed_job]` handlers below, and every
//! handler run appends to a ledger (see `dq_faults::ledger`): a start line, then a finish line
//! (or a cancelled line, or an abort line). It prints `ready` on stdout once the worker has
//! started, and on `SIGTERM` shuts down gracefully (stop fetching, drain, release) and exits 0.
//!
//! # Options
//!
//! Each option is `--name value` on the command line, or the environment variable in brackets.
//!
//! | option | meaning | default |
//! |---|---|---|
//! | `--redis-url` (`REDIS_URL`) | where Redis is | `redis://127.0.0.1/` |
//! | `--namespace` (`FW_NAMESPACE`) | dq key namespace | `dq` |
//! | `--topics` (`FW_TOPICS`) | comma-separated topics to run | `fault.work` |
//! | `--concurrency` (`FW_CONCURRENCY`) | pool size of every topic | 8 |
//! | `--lease-ms` (`FW_LEASE_MS`) | lease length | 1000 |
//! | `--ledger` (`FW_LEDGER`) | ledger file (appended to) | `fault-worker.ledger` |
//! | `--sleep-ms` (`FW_SLEEP_MS`) | work time of every job, overriding the payload's | the payload's `sleep_ms` |
//! | `--abort-on` (`FW_ABORT_ON`) | comma-separated payload ids whose handler calls `std::process::abort()` | none |
//! | `--response-timeout-ms` (`FW_RESPONSE_TIMEOUT_MS`) | the Redis client's response timeout | dq's (5 s) |
//! | `--shutdown-timeout-ms` (`FW_SHUTDOWN_TIMEOUT_MS`) | graceful shutdown's drain time | 5000 |
//! | `--idle-wait-ms` (`FW_IDLE_WAIT_MS`) | longest idle wait between fetches | dq's (5 s) |
//! | `--connect-timeout-ms` (`FW_CONNECT_TIMEOUT_MS`) | how long to keep retrying the first connection | 120000 |
//! | `--heartbeat-ms` (`FW_HEARTBEAT_MS`) | the worker's heartbeat period (`Client::workers`) | dq's (5 s) |
//! | `--partitions` (`FW_PARTITIONS`) | partitions recorded for a topic with no record yet (`default_partitions`; a recorded count is adopted) | dq's (1) |
//! | `--configured-partitions` (`FW_CONFIGURED_PARTITIONS`) | partitions configured for each of its topics (`.partitions(topic, n)`: must match the record) | none |
//! | `--durable-replicas` (`FW_DURABLE_REPLICAS`) | replicas each enqueue and each batch apply waits for (`durable_enqueue`) | none (not durable) |
//! | `--durable-timeout-ms` (`FW_DURABLE_TIMEOUT_MS`) | how long that `WAIT` waits | 500 |
//! | `--exit-on-stdin-eof` (`FW_EXIT_ON_STDIN_EOF=1`) | exit at once when stdin closes (tie the process to its parent's life) | off |
//!
//! The log (tracing, to stderr) is filtered by `FW_LOG` (default `warn`).
//!
//! The `fault.callback` handler (a batch's callback) and the `fault.parent` handler (a flow's
//! parent, reading its children's batch) also append what they read to
//! `<ledger stem>.callbacks` (see `dq_faults::callbacks`).
//!
//! # Connecting when Redis is not up yet
//!
//! `dq::Client::connect` waits for a Redis that cannot be reached yet, retrying with backoff
//! until its connect timeout (here `--connect-timeout-ms`); only errors that are not
//! retryable (a bad URL, an unsuitable server) end it at once. Once connected, dq rides out
//! Redis outages by itself.

use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use dq::{Client, JobContext, JobError, Worker};
use dq_faults::callbacks::{CallbackRun, CallbackWriter};
use dq_faults::ledger::{Kind, LedgerWriter};
use dq_faults::{Fate, FaultPayload};
use tokio::signal::unix::{SignalKind, signal};

/// What the handlers do, from the options.
#[derive(Debug)]
struct Behaviour {
    ledger: LedgerWriter,
    callbacks: CallbackWriter,
    sleep: Option<Duration>,
    abort_on: HashSet<u64>,
    /// The worker's client, for the callback's reads.
    client: Client,
}

/// Ordinary jobs: many attempts, so a job survives the crashes of the chaos test.
#[dq::delayed_job(topic = "fault.work", retry = "fixed(50ms, 20)")]
async fn work(job: FaultPayload, ctx: JobContext) -> Result<(), JobError> {
    behave(job, ctx).await
}

/// Poison-pill jobs: three attempts, then the dead queue.
#[dq::delayed_job(topic = "fault.poison", retry = "fixed(100ms, 2)")]
async fn poison(job: FaultPayload, ctx: JobContext) -> Result<(), JobError> {
    behave(job, ctx).await
}

/// Jobs with a single attempt (`retry = "none"`): a failed attempt sends the job to the dead
/// queue at once, so a run charged to the job by a fault shows as a dead job.
#[dq::delayed_job(topic = "fault.once", retry = "none")]
async fn once(job: FaultPayload, ctx: JobContext) -> Result<(), JobError> {
    behave(job, ctx).await
}

/// Jobs whose first attempt fails on purpose (a `Failed` ledger line), retried 500 ms later.
#[dq::delayed_job(topic = "fault.flaky", retry = "fixed(500ms, 5)")]
async fn flaky(job: FaultPayload, ctx: JobContext) -> Result<(), JobError> {
    if ctx.attempt == 1 {
        let b = ctx.data::<Arc<Behaviour>>()?;
        b.ledger
            .record(Kind::Start, ctx.key.as_str(), ctx.token, ctx.attempt);
        b.ledger
            .record(Kind::Failed, ctx.key.as_str(), ctx.token, ctx.attempt);
        return Err(JobError::retry("the first attempt of a flaky job fails"));
    }
    behave(job, ctx).await
}

/// Batch members: what each does is its `member_fate` (succeed; fail the first attempt, then
/// succeed; fail permanently, to the dead queue).
#[dq::delayed_job(topic = "fault.member", retry = "fixed(100ms, 10)")]
async fn member(job: FaultPayload, ctx: JobContext) -> Result<(), JobError> {
    let fail = |permanent: bool| -> Result<(), JobError> {
        let b = ctx.data::<Arc<Behaviour>>()?;
        b.ledger
            .record(Kind::Start, ctx.key.as_str(), ctx.token, ctx.attempt);
        b.ledger
            .record(Kind::Failed, ctx.key.as_str(), ctx.token, ctx.attempt);
        Err(if permanent {
            JobError::permanent("a member made to die")
        } else {
            JobError::retry("the first attempt of this member fails")
        })
    };
    match dq_faults::member_fate(job.id) {
        Fate::Dies => fail(true),
        Fate::FailsFirst if ctx.attempt == 1 => fail(false),
        Fate::FailsFirst | Fate::Succeeds => behave(job, ctx).await,
    }
}

/// A batch's callback: reads the batch its key names and its own record (its `created_ms`
/// tells one enqueue of the callback from another), appends both to the callbacks file, then
/// finishes like any job (ledger start and finish). A read that fails is retried.
#[dq::delayed_job(topic = "fault.callback", retry = "fixed(200ms, 50)")]
async fn callback(_job: FaultPayload, ctx: JobContext) -> Result<(), JobError> {
    let batch = ctx.completed_batch();
    read_batch(&ctx, batch).await
}

/// A flow's parent (at any level): reads its children's batch (`JobContext::children`) and
/// its own record, appends both to the callbacks file under its own key, then finishes like
/// any job — the callback's run, for the batch that released it. A read that fails is retried.
#[dq::delayed_job(topic = "fault.parent", retry = "fixed(200ms, 50)")]
async fn parent(_job: FaultPayload, ctx: JobContext) -> Result<(), JobError> {
    let batch = Some(ctx.children());
    read_batch(&ctx, batch).await
}

/// The run of a job that reads `batch` (a callback's or a flow parent's): ledger start, the
/// batch's counts and the job's own `created_ms` to the callbacks file, ledger finish (or
/// failed, for a read that failed: retried; or cancelled).
async fn read_batch(ctx: &JobContext, batch: Option<dq::BatchId>) -> Result<(), JobError> {
    let b = ctx.data::<Arc<Behaviour>>()?;
    let key = ctx.key.as_str();
    b.ledger.record(Kind::Start, key, ctx.token, ctx.attempt);
    let read = async {
        let batch = batch.ok_or_else(|| JobError::permanent("not a batch's callback key"))?;
        let info = b
            .client
            .batch(batch.as_str())?
            .info()
            .await?
            .ok_or_else(|| JobError::retry("the batch is not stored"))?;
        let own = b
            .client
            .topic(ctx.topic)?
            .job(key)
            .await?
            .ok_or_else(|| JobError::retry("the job's own record is not stored"))?;
        Ok::<_, JobError>((info, own))
    };
    let (info, own) = match read.await {
        Ok(read) => read,
        Err(e) => {
            b.ledger.record(Kind::Failed, key, ctx.token, ctx.attempt);
            return Err(e);
        }
    };
    b.callbacks.record(&CallbackRun {
        key: key.to_string(),
        token: ctx.token,
        attempt: ctx.attempt,
        pid: std::process::id(),
        created_ms: own.created_ms,
        closed: info.closed,
        done: info.done,
        reserved: info.counts.reserved,
        enqueued: info.counts.enqueued,
        succeeded: info.counts.succeeded,
        dead: info.counts.dead,
        cancelled: info.counts.cancelled,
        total: info.counts.total(),
    });
    if ctx.is_cancelled() {
        b.ledger
            .record(Kind::Cancelled, key, ctx.token, ctx.attempt);
        return Err(JobError::retry("cancelled: lease lost or hard stop"));
    }
    b.ledger.record(Kind::Finish, key, ctx.token, ctx.attempt);
    Ok(())
}

/// One run: ledger start → (abort | work until done or cancelled) → ledger finish/cancelled.
async fn behave(job: FaultPayload, ctx: JobContext) -> Result<(), JobError> {
    let b = ctx.data::<Arc<Behaviour>>()?;
    let key = ctx.key.as_str();
    b.ledger.record(Kind::Start, key, ctx.token, ctx.attempt);
    if b.abort_on.contains(&job.id) {
        b.ledger.record(Kind::Abort, key, ctx.token, ctx.attempt);
        std::process::abort();
    }
    let work = b.sleep.unwrap_or(Duration::from_millis(job.sleep_ms));
    tokio::select! {
        // The finish line is the job's side effect: made only if the job has not been told to
        // stop (`is_cancelled` reads the lease's deadline from the clock, so after a pause it
        // is true even if this timer fired first).
        () = tokio::time::sleep(work) => {
            if ctx.is_cancelled() {
                b.ledger.record(Kind::Cancelled, key, ctx.token, ctx.attempt);
                return Err(JobError::retry("cancelled: lease lost or hard stop"));
            }
            b.ledger.record(Kind::Finish, key, ctx.token, ctx.attempt);
            Ok(())
        }
        () = ctx.cancelled() => {
            b.ledger.record(Kind::Cancelled, key, ctx.token, ctx.attempt);
            Err(JobError::retry("cancelled: lease lost or hard stop"))
        }
    }
}

/// The parsed options.
#[derive(Debug)]
struct Options {
    redis_url: String,
    namespace: String,
    topics: Vec<String>,
    concurrency: usize,
    lease: Duration,
    ledger: PathBuf,
    sleep: Option<Duration>,
    abort_on: HashSet<u64>,
    response_timeout: Option<Duration>,
    shutdown_timeout: Duration,
    idle_wait: Option<Duration>,
    connect_timeout: Duration,
    heartbeat: Option<Duration>,
    partitions: Option<u16>,
    configured_partitions: Option<u16>,
    durable_replicas: Option<usize>,
    durable_timeout: Duration,
    exit_on_stdin_eof: bool,
}

fn usage(problem: &str) -> ! {
    eprintln!("fault-worker: {problem} (see the module docs of src/bin/fault-worker.rs)");
    std::process::exit(64);
}

impl Options {
    fn parse() -> Options {
        let mut cli: Vec<(String, String)> = Vec::new();
        let mut flags: HashSet<String> = HashSet::new();
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let Some(name) = arg.strip_prefix("--") else {
                usage(&format!("unexpected argument {arg:?}"));
            };
            if name == "exit-on-stdin-eof" {
                flags.insert(name.to_string());
                continue;
            }
            let Some(value) = args.next() else {
                usage(&format!("--{name} needs a value"));
            };
            cli.push((name.to_string(), value));
        }
        let get = |name: &str, env: &str| -> Option<String> {
            cli.iter()
                .rev()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
                .or_else(|| std::env::var(env).ok())
        };
        for (name, _) in &cli {
            const KNOWN: [&str; 17] = [
                "redis-url",
                "namespace",
                "topics",
                "concurrency",
                "lease-ms",
                "ledger",
                "sleep-ms",
                "abort-on",
                "response-timeout-ms",
                "shutdown-timeout-ms",
                "idle-wait-ms",
                "connect-timeout-ms",
                "heartbeat-ms",
                "partitions",
                "configured-partitions",
                "durable-replicas",
                "durable-timeout-ms",
            ];
            if !KNOWN.contains(&name.as_str()) {
                usage(&format!("unknown option --{name}"));
            }
        }
        let num = |name: &str, env: &str| -> Option<u64> {
            get(name, env).map(|v| {
                v.parse()
                    .unwrap_or_else(|_| usage(&format!("--{name} {v:?} is not a number")))
            })
        };
        let ms = |name: &str, env: &str| num(name, env).map(Duration::from_millis);
        Options {
            redis_url: get("redis-url", "REDIS_URL").unwrap_or("redis://127.0.0.1/".into()),
            namespace: get("namespace", "FW_NAMESPACE").unwrap_or("dq".into()),
            topics: get("topics", "FW_TOPICS")
                .unwrap_or(dq_faults::WORK_TOPIC.into())
                .split(',')
                .filter(|t| !t.is_empty())
                .map(String::from)
                .collect(),
            concurrency: num("concurrency", "FW_CONCURRENCY").unwrap_or(8) as usize,
            lease: ms("lease-ms", "FW_LEASE_MS").unwrap_or(Duration::from_secs(1)),
            ledger: get("ledger", "FW_LEDGER")
                .unwrap_or("fault-worker.ledger".into())
                .into(),
            sleep: ms("sleep-ms", "FW_SLEEP_MS"),
            abort_on: get("abort-on", "FW_ABORT_ON")
                .unwrap_or_default()
                .split(',')
                .filter(|s| !s.is_empty())
                .map(|s| {
                    s.parse()
                        .unwrap_or_else(|_| usage(&format!("--abort-on: {s:?} is not an id")))
                })
                .collect(),
            response_timeout: ms("response-timeout-ms", "FW_RESPONSE_TIMEOUT_MS"),
            shutdown_timeout: ms("shutdown-timeout-ms", "FW_SHUTDOWN_TIMEOUT_MS")
                .unwrap_or(Duration::from_secs(5)),
            idle_wait: ms("idle-wait-ms", "FW_IDLE_WAIT_MS"),
            connect_timeout: ms("connect-timeout-ms", "FW_CONNECT_TIMEOUT_MS")
                .unwrap_or(Duration::from_secs(120)),
            heartbeat: ms("heartbeat-ms", "FW_HEARTBEAT_MS"),
            partitions: num("partitions", "FW_PARTITIONS").map(|p| {
                u16::try_from(p).unwrap_or_else(|_| usage(&format!("--partitions {p} is too big")))
            }),
            configured_partitions: num("configured-partitions", "FW_CONFIGURED_PARTITIONS").map(
                |p| {
                    u16::try_from(p).unwrap_or_else(|_| {
                        usage(&format!("--configured-partitions {p} is too big"))
                    })
                },
            ),
            durable_replicas: num("durable-replicas", "FW_DURABLE_REPLICAS").map(|n| n as usize),
            durable_timeout: ms("durable-timeout-ms", "FW_DURABLE_TIMEOUT_MS")
                .unwrap_or(Duration::from_millis(500)),
            exit_on_stdin_eof: flags.contains("exit-on-stdin-eof")
                || std::env::var("FW_EXIT_ON_STDIN_EOF").is_ok_and(|v| v == "1"),
        }
    }
}

/// Connects, retrying while Redis cannot be reached (see the module docs).
async fn connect_with_retry(o: &Options) -> Client {
    let mut builder = Client::builder().namespace(&o.namespace);
    if let Some(t) = o.response_timeout {
        builder = builder.response_timeout(t);
    }
    if let Some(p) = o.partitions {
        builder = builder.default_partitions(p);
    }
    if let Some(n) = o.durable_replicas {
        builder = builder.durable_enqueue(n, o.durable_timeout);
    }
    if let Some(p) = o.configured_partitions {
        for topic in &o.topics {
            builder = builder.partitions(topic.clone(), p);
        }
    }
    match builder
        .connect_timeout(o.connect_timeout)
        .connect(&o.redis_url)
        .await
    {
        Ok(client) => client,
        Err(e) => {
            eprintln!("fault-worker: cannot connect to redis: {e}");
            std::process::exit(2);
        }
    }
}

/// Exits the process as soon as stdin reaches end-of-file: the parent (the test) died or let
/// go of us. Runs on a plain thread so it works even while the runtime is busy.
fn exit_on_stdin_eof() {
    std::thread::spawn(|| {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        std::process::exit(3);
    });
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FW_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .init();
    let o = Options::parse();
    if o.exit_on_stdin_eof {
        exit_on_stdin_eof();
    }
    let ledger = LedgerWriter::open(&o.ledger).unwrap_or_else(|e| {
        eprintln!("fault-worker: cannot open {}: {e}", o.ledger.display());
        std::process::exit(2);
    });
    let callbacks_path = dq_faults::callbacks::path_beside(&o.ledger);
    let callbacks = CallbackWriter::open(&callbacks_path).unwrap_or_else(|e| {
        eprintln!(
            "fault-worker: cannot open {}: {e}",
            callbacks_path.display()
        );
        std::process::exit(2);
    });
    let mut term = signal(SignalKind::terminate()).unwrap_or_else(|e| {
        eprintln!("fault-worker: cannot listen for SIGTERM: {e}");
        std::process::exit(2);
    });

    let client = connect_with_retry(&o).await;
    let mut builder = Worker::builder(client.clone())
        .topics(o.topics.clone())
        .lease(o.lease)
        .shutdown_timeout(o.shutdown_timeout)
        .data(Arc::new(Behaviour {
            ledger,
            callbacks,
            sleep: o.sleep,
            abort_on: o.abort_on.clone(),
            client: client.clone(),
        }));
    for topic in &o.topics {
        builder = builder.concurrency(topic.clone(), o.concurrency);
    }
    if let Some(w) = o.idle_wait {
        builder = builder.idle_wait(w);
    }
    if let Some(h) = o.heartbeat {
        builder = builder.heartbeat(h);
    }
    let worker = builder.build().unwrap_or_else(|e| {
        eprintln!("fault-worker: {e}");
        std::process::exit(2);
    });
    let handle = worker.start().await.unwrap_or_else(|e| {
        eprintln!("fault-worker: {e}");
        std::process::exit(2);
    });
    println!("ready");
    let _ = std::io::stdout().flush();

    term.recv().await;
    let report = handle.shutdown().await;
    println!(
        "stopped drained={} released={}",
        report.drained, report.released
    );
    let _ = std::io::stdout().flush();
}
