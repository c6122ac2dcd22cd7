//! Issue 27, items 1 and 5, for a refusal that is not a partition mismatch: a worker whose
//! Redis user may not run scripts cannot serve its topic. `Worker::start` fails with
//! `WorkerError::TopicCheck` naming the topic (nothing is started); with
//! `skip_refused_topics` it starts, and its fetchers log the failing topic check at ERROR —
//! a permanent error, as README's Guarantees promise — not at WARN, and show it in the health.

use std::time::Duration;

use dq::{Client, JobContext, JobError, Worker, WorkerError};
use dq_testkit::{CapturedLog, RedisServer, eventually};
use tracing_subscriber::filter::LevelFilter;

const TOPIC: &str = "refused.jobs";
/// Generous for a loaded 2-core machine: the first check fails within milliseconds.
const WAIT: Duration = Duration::from_secs(20);

#[dq::delayed_job(topic = "refused.jobs", retry = "none")]
async fn refused_job(_n: u64, _ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

/// A client whose Redis user may do anything but run scripts.
async fn client_without_scripts(server: &RedisServer) -> Client {
    server.cmd::<()>(&[
        "ACL",
        "SETUSER",
        "noscripts",
        "on",
        ">secret",
        "~*",
        "&*",
        "+@all",
        "-@scripting",
    ]);
    Client::builder()
        .namespace(dq_testkit::namespace("refused"))
        .connect(&format!(
            "redis://noscripts:secret@127.0.0.1:{}/",
            server.port()
        ))
        .await
        .expect("connecting needs no script")
}

fn builder(client: &Client) -> dq::WorkerBuilder {
    Worker::builder(client.clone()).topics([TOPIC])
}

#[tokio::test]
async fn a_worker_whose_user_may_not_run_scripts_fails_to_start_naming_the_topic() {
    let server = RedisServer::start();
    let client = client_without_scripts(&server).await;
    match builder(&client).build().unwrap().start().await {
        Err(e @ WorkerError::TopicCheck { .. }) => {
            let text = e.to_string();
            assert!(text.contains(TOPIC), "{text}");
        }
        other => panic!("expected WorkerError::TopicCheck, got {other:?}"),
    }
}

#[tokio::test]
async fn a_failing_topic_check_that_retrying_cannot_fix_is_logged_at_error() {
    // The test's runtime has one thread: every worker task logs to this subscriber.
    let (captured, _guard) = CapturedLog::install(LevelFilter::WARN);
    let server = RedisServer::start();
    let client = client_without_scripts(&server).await;
    let handle = builder(&client)
        .skip_refused_topics()
        .build()
        .unwrap()
        .start()
        .await
        .expect("skip_refused_topics starts the worker");
    eventually("the failed topic check is logged", WAIT, || {
        let logged = captured.text().contains("topic check failed");
        async move { logged }
    })
    .await;
    let text = captured.text();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("topic check failed"))
        .collect();
    assert!(
        lines
            .iter()
            .all(|l| l.contains("ERROR") && !l.contains("WARN")),
        "logged at ERROR, not WARN: {lines:#?}"
    );
    let health = handle.health();
    assert!(
        health.permanent_errors().next().is_some(),
        "shown as a permanent error: {health:?}"
    );
    handle.shutdown().await;
}
