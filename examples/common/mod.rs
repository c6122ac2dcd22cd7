//! What every example shares: where to connect, and a timeline printer.

#![allow(dead_code)]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Connects to Redis at `REDIS_URL`, in a namespace of its own for this run.
pub async fn connect(example: &str) -> dq::Client {
    connect_with(example, |b| b).await
}

/// [`connect`], with the client's settings changed by `configure` (on the embedded store
/// too).
pub async fn connect_with(
    example: &str,
    configure: impl FnOnce(dq::ClientBuilder) -> dq::ClientBuilder,
) -> dq::Client {
    let namespace = format!(
        "dq-example-{example}-{}",
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    );
    match std::env::var("REDIS_URL") {
        Ok(url) => {
            println!("store: Redis (REDIS_URL), namespace {namespace}");
            configure(dq::Client::builder())
                .namespace(namespace)
                .connect(&url)
                .await
                .unwrap_or_else(|e| panic!("cannot use Redis at REDIS_URL: {e}"))
        }
        Err(_) => {
            println!("store: embedded (in memory) — set REDIS_URL=redis://… to run on Redis");
            configure(dq::Client::builder())
                .build_with_store(std::sync::Arc::new(dq::store::MemoryStore::new()))
                .expect("the example's settings are valid")
        }
    }
}

/// Prints lines stamped with the time since the example started.
#[derive(Clone, Copy)]
pub struct Timeline(Instant);

impl Timeline {
    pub fn start() -> Self {
        Timeline(Instant::now())
    }

    pub fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }

    pub fn say(&self, what: impl std::fmt::Display) {
        println!("t+{:>6.3}s  {what}", self.0.elapsed().as_secs_f64());
    }
}

/// Installs a tracing subscriber, as every application using dq should: without one, dq's
/// warnings (Redis unreachable and retried, persistence off, a job failed) go nowhere.
/// Warnings and errors by default; `RUST_LOG` chooses more (e.g. `RUST_LOG=dq=debug`).
pub fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
