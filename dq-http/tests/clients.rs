//! The API from real clients: a Python script (requests, from PyPI, in a venv this test makes)
//! and a Node script (built-in fetch) enqueue, cancel and reschedule jobs that a Rust worker
//! runs, and check the answers to a bad token, a read-only token, a body that is not JSON, a
//! payload that does not fit the topic's type and a retried request. This test then checks
//! the store: the jobs that should run ran with their payloads, the cancelled one did not,
//! the retried request made one job, the refused ones made none.
//!
//! The API is served as `dq serve` serves it, alone: it knows no payload type
//! (`HttpConfig::default()`, no `HttpConfig::job`), so the misfit payload is refused against
//! the shape the Rust worker published when it started. (The typed check of
//! `HttpConfig::job`, and `dq serve` as a process, have tests of their own: tests/api.rs,
//! dq-cli's tests/cli_serve.rs.)
//!
//! Skipped, loudly, only where `python3` or `node` is not installed at all;
//! `./scripts/test.sh` installs both (python3-venv, nodejs).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{READ_TOKEN, TOKEN, TOPIC, WAIT, ran, repo, serve_with};
use dq_http::HttpConfig;
use dq_testkit::eventually;

/// `program --version` runs.
fn installed(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A venv with the pinned requests (clients/python/requirements.txt), made once per target
/// directory: its python.
fn venv() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dq-http-venv");
    let python = dir.join("bin").join("python");
    let ready = || {
        Command::new(&python)
            .args(["-c", "import requests"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if ready() {
        return python;
    }
    let made = Command::new("python3")
        .args(["-m", "venv", "--clear"])
        .arg(&dir)
        .output()
        .expect("run python3 -m venv");
    assert!(
        made.status.success(),
        "python3 -m venv failed (install Debian's python3-venv; scripts/test.sh does): {}",
        String::from_utf8_lossy(&made.stderr)
    );
    let pip = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-r",
        ])
        .arg(repo().join("clients/python/requirements.txt"))
        .output()
        .expect("run pip");
    assert!(
        pip.status.success(),
        "pip install -r clients/python/requirements.txt failed: {}",
        String::from_utf8_lossy(&pip.stderr)
    );
    assert!(ready(), "requests does not import after pip install");
    python
}

/// Runs `program script` against the API at `url` with keys prefixed `prefix`; its stdout.
async fn run_script(program: &Path, script: &Path, url: &str, prefix: &str) -> String {
    let out = tokio::process::Command::new(program)
        .arg(script)
        .env("DQ_URL", url)
        .env("DQ_TOKEN", TOKEN)
        .env("DQ_READ_TOKEN", READ_TOKEN)
        .env("DQ_TOPIC", TOPIC)
        .env("DQ_PREFIX", prefix)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(WAIT, out)
        .await
        .expect("the script finishes within a minute")
        .expect("run the script");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{} failed ({}):\nstdout: {stdout}\nstderr: {}",
        script.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Checks what a script's calls did to the store and the worker.
async fn check_effects(served: &common::Served, prefix: &str, summary: &str) {
    let summary: serde_json::Value = serde_json::from_str(summary.trim())
        .unwrap_or_else(|e| panic!("the script's summary {summary:?}: {e}"));
    let t = served.client.admin().topic_with(TOPIC, 1).unwrap();
    // the job due now and the one rescheduled to now ran, with their payloads
    for (key, payload) in [
        (format!("{prefix}-run"), format!("1:from {prefix}")),
        (format!("{prefix}-resched"), "3:sooner".to_owned()),
    ] {
        let ns = served.ns.clone();
        eventually(&format!("the worker runs {key}"), WAIT, || {
            let (ns, key) = (ns.clone(), key.clone());
            async move { ran(&ns, &key).is_some() }
        })
        .await;
        let got = ran(&served.ns, &key).unwrap();
        assert_eq!(got, payload, "{key}");
    }
    // the cancelled one is gone and never ran
    let cancelled = summary["cancelled"].as_str().unwrap();
    assert!(t.job(cancelled).await.unwrap().is_none());
    assert_eq!(ran(&served.ns, cancelled), None);
    // the retried request made one job, waiting
    let retried = summary["retried"].as_str().unwrap();
    let job = t.job(retried).await.unwrap().expect("the retried job");
    assert_eq!(job.state, dq::JobState::Scheduled);
    // the refused requests wrote nothing
    for key in summary["refused"].as_array().unwrap() {
        assert!(
            t.job(key.as_str().unwrap()).await.unwrap().is_none(),
            "{key}"
        );
    }
    // four jobs enqueued in all: run, cancel, resched, retried (once)
    let stats = t.stats().await.unwrap();
    assert_eq!(stats.enqueued, 4, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_enqueues_cancels_and_reschedules() {
    if !installed("python3") {
        eprintln!(
            "\n\n*** SKIPPED: python3 is not installed (scripts/test.sh installs it) ***\n\n"
        );
        return;
    }
    let python = tokio::task::spawn_blocking(venv).await.unwrap();
    let served = serve_with("http-py", HttpConfig::default()).await;
    let script = repo().join("clients/python/check_api.py");
    let summary = run_script(&python, &script, &served.url, "python").await;
    check_effects(&served, "python", &summary).await;
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_client_enqueues_cancels_and_reschedules() {
    if !installed("node") {
        eprintln!("\n\n*** SKIPPED: node is not installed (scripts/test.sh installs it) ***\n\n");
        return;
    }
    let served = serve_with("http-node", HttpConfig::default()).await;
    let script = repo().join("clients/node/check_api.mjs");
    let summary = run_script(Path::new("node"), &script, &served.url, "node").await;
    check_effects(&served, "node", &summary).await;
    served.stop().await;
}
