//! `dq-bench`: dq's benchmark harness.
//!
//! It implements the command-line contract of the standard benchmark scenarios
//! (`shared/bench/SCENARIOS.md`), so the same orchestration can drive dq and other queues:
//!
//! ```text
//! dq-bench enqueue --scenario S1 --mode single|bulk|concurrent --n N [--chunk 1000] [--tasks 64]
//! dq-bench enqueue --scenario S3|S3R|S5 --n N [--mode bulk]
//! dq-bench enqueue --scenario S4 --n N --start-ms T --window-ms W
//! dq-bench worker  --scenario S3|S3R|S4|S5 --conc C --n N --timeout-s T
//! ```
//!
//! Every command prints exactly one JSON line on stdout (workers print `{"ready":true}` first).
//! Both connect to `REDIS_URL` (default `redis://127.0.0.1:6379/`) with the key namespace
//! `bench`. `REDIS_URL` may name a Redis Cluster (`redis+cluster://host:port,host:port`);
//! `DQ_BENCH_PARTITIONS` (default 1) sets the partitions of every topic, for producer and
//! worker alike (on a cluster, use more partitions than masters to spread a topic).
//!
//! `dq-bench all [--quick] [--big]` is the orchestrator: it starts its own `redis-server`,
//! runs every scenario three times through the commands above (as child processes), and
//! prints a table of medians and writes everything to `bench-results/<timestamp>.json`.
//!
//! `dq-bench soak [--minutes 30] [--kill-every 10]` runs mixed load against its own
//! `redis-server` with a worker process killed over and over, then reconciles (see `soak`).

mod all;
mod enqueue;
mod jobs;
mod redis_admin;
mod soak;
mod worker;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// The key namespace producer and worker share.
pub const NAMESPACE: &str = "bench";

/// Where the contract commands connect when `REDIS_URL` is not set.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379/";

/// Errors of this binary: reported, never recovered from in detail.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// `Result` with [`BoxError`].
pub type Result<T, E = BoxError> = std::result::Result<T, E>;

/// The command line.
#[derive(Parser, Debug)]
#[command(
    name = "dq-bench",
    about = "dq's benchmark scenarios (see shared/bench/SCENARIOS.md)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Enqueue N jobs of a scenario; prints {secs, jobs_per_s, first_add_ms, last_due_ms}.
    Enqueue(enqueue::EnqueueArgs),
    /// Run one worker until N jobs succeeded; prints {"ready":true}, then the result line.
    Worker(worker::WorkerArgs),
    /// Start a private redis-server and run every scenario (the orchestrator).
    All(all::AllArgs),
    /// Mixed load for a long time with a worker process killed every few seconds; prints
    /// lost jobs, duplicates and memory drift (the soak; not run in CI).
    Soak(soak::SoakArgs),
}

/// A benchmark scenario: its topic and what its handler expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// Enqueue throughput (jobs due in 10–60 minutes).
    #[value(name = "S1", alias = "s1")]
    S1,
    /// Drain of jobs delayed 5 s.
    #[value(name = "S3", alias = "s3")]
    S3,
    /// Drain of ready (not delayed) jobs.
    #[value(name = "S3R", alias = "s3r")]
    S3R,
    /// Lateness of jobs due over a window.
    #[value(name = "S4", alias = "s4")]
    S4,
    /// Retry: the first attempt fails, the second (1 s later) succeeds.
    #[value(name = "S5", alias = "s5")]
    S5,
    /// Mass expiry: N jobs due at the same millisecond (`--start-ms`, window 0).
    #[value(name = "MASS", alias = "mass")]
    Mass,
    /// Far-future filler for the scale scenario (never runs).
    #[value(name = "FILL", alias = "fill")]
    Fill,
    /// The measured jobs of the scale scenario (same topic as FILL).
    #[value(name = "SCALE", alias = "scale")]
    Scale,
    /// A topic nothing is enqueued to: the idle-cost worker.
    #[value(name = "IDLE", alias = "idle")]
    Idle,
}

impl Scenario {
    /// The scenario's topic.
    pub fn topic(self) -> &'static str {
        match self {
            Scenario::S1 => "bench.s1",
            Scenario::S3 => "bench.s3",
            Scenario::S3R => "bench.s3r",
            Scenario::S4 => "bench.s4",
            Scenario::S5 => "bench.s5",
            Scenario::Mass => "bench.mass",
            Scenario::Fill | Scenario::Scale => "bench.scale",
            Scenario::Idle => "bench.idle",
        }
    }

    /// How many times each job is expected to run (S5: 2 attempts).
    pub fn expected_runs(self) -> u32 {
        if self == Scenario::S5 { 2 } else { 1 }
    }

    /// Whether the handler fails the first run of each job.
    pub fn fail_first(self) -> bool {
        self == Scenario::S5
    }

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::S1 => "S1",
            Scenario::S3 => "S3",
            Scenario::S3R => "S3R",
            Scenario::S4 => "S4",
            Scenario::S5 => "S5",
            Scenario::Mass => "MASS",
            Scenario::Fill => "FILL",
            Scenario::Scale => "SCALE",
            Scenario::Idle => "IDLE",
        }
    }
}

/// `REDIS_URL`, or the default for the manual contract mode.
pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| DEFAULT_REDIS_URL.to_owned())
}

/// The environment variable with every topic's partition count (default 1).
pub const PARTITIONS_ENV: &str = "DQ_BENCH_PARTITIONS";

/// `DQ_BENCH_PARTITIONS`, or 1.
pub fn partitions() -> Result<u16> {
    match std::env::var(PARTITIONS_ENV) {
        Ok(v) => match v.parse::<u16>() {
            Ok(p) if p >= 1 => Ok(p),
            _ => Err(format!("{PARTITIONS_ENV}={v:?} is not a partition count (1-65535)").into()),
        },
        Err(_) => Ok(1),
    }
}

/// A client for the benchmark: namespace `bench`, for producer and worker alike.
pub async fn connect(bulk_chunk: usize) -> Result<dq::Client> {
    let url = redis_url();
    let client = dq::Client::builder()
        .namespace(NAMESPACE)
        .default_partitions(partitions()?)
        .bulk_chunk(bulk_chunk.max(1))
        .connect(&url)
        .await
        .map_err(|e| {
            let url = dq::store::redis::redacted_url(&url);
            format!("cannot connect to {url}: {e}")
        })?;
    Ok(client)
}

/// Prints one JSON line on stdout and flushes it (the orchestrator reads line by line).
pub fn emit(value: &serde_json::Value) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{value}");
    let _ = out.flush();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Enqueue(args) => {
            runtime(args.runtime).and_then(|rt| rt.block_on(enqueue::run(args)))
        }
        Command::Worker(args) => {
            runtime(args.runtime).and_then(|rt| rt.block_on(worker::run(args)))
        }
        Command::All(args) => all::run(args),
        Command::Soak(args) => runtime(Flavor::Multi).and_then(|rt| rt.block_on(soak::run(args))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dq-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Which tokio runtime a contract command runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Flavor {
    /// The multi-threaded runtime, one thread per core (what `#[tokio::main]` gives an
    /// application; the default).
    Multi,
    /// One thread: no cross-thread wake-ups between the caller and the connection's task.
    Current,
}

fn runtime(flavor: Flavor) -> Result<tokio::runtime::Runtime> {
    let mut builder = match flavor {
        Flavor::Multi => tokio::runtime::Builder::new_multi_thread(),
        Flavor::Current => tokio::runtime::Builder::new_current_thread(),
    };
    Ok(builder.enable_all().build()?)
}
