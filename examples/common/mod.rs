//! What every example shares: where to connect, and a timeline printer.

#![allow(dead_code)]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Connects to Redis at `REDIS_URL`, in a namespace of its own for this run.
pub async fn connect(example: &str) -> dq::Client {
    let namespace = format!(
        "dq-example-{example}-{}",
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    );
    match std::env::var("REDIS_URL") {
        Ok(url) => {
            println!("store: Redis (REDIS_URL), namespace {namespace}");
            dq::Client::builder()
                .namespace(namespace)
                .connect(&url)
                .await
                .unwrap_or_else(|e| panic!("cannot use Redis at REDIS_URL: {e}"))
        }
        Err(_) => {
            println!("store: embedded (in memory) — set REDIS_URL=redis://… to run on Redis");
            dq::Client::in_memory()
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

/// Shows the worker's logs when `RUST_LOG` is set (e.g. `RUST_LOG=dq=debug`).
pub fn init_logs() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .try_init();
    }
}
