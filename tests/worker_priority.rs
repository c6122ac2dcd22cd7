//! Priorities with a real worker on a real Redis: a backlog of normal jobs, a few urgent and a
//! few low ones enqueued before the worker starts; a worker running one job at a time runs the
//! urgent ones first (highest first), the normal ones in their order, the low ones last; the
//! handler's `priority` is the typed client's default.

#[path = "worker/support.rs"]
mod support;

use std::time::Duration;

use dq::{Client, JobContext, JobError, JobSpec, Priority, Worker};
use dq_testkit::eventually;
use support::{Log, WAIT, record};

/// A bulk job: normal priority unless the enqueue says otherwise.
#[dq::delayed_job(topic = "priority.bulk")]
async fn bulk(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "ran").await
}

/// An alert: high priority by default (the handler's `priority`).
#[dq::delayed_job(topic = "priority.bulk2", priority = 7)]
async fn alert(_n: u64) -> Result<(), JobError> {
    Ok(())
}

async fn client() -> Client {
    Client::builder()
        .namespace(dq_testkit::namespace("priority"))
        .connect(&dq_testkit::shared().url())
        .await
        .expect("connect")
}

#[tokio::test]
async fn a_worker_runs_the_due_jobs_highest_priority_first() {
    let client = client().await;
    let log = Log::default();
    let mut specs: Vec<JobSpec<u64>> = (0..20)
        .map(|i| JobSpec::new(i).key(format!("n{i:02}")))
        .collect();
    specs.insert(5, JobSpec::new(0).key("low").priority(Priority::LOW));
    specs.push(JobSpec::new(0).key("high").priority(Priority::HIGH));
    specs.push(JobSpec::new(0).key("top").priority(Priority::HIGHEST));
    client.enqueue_bulk::<bulk>(specs).await.unwrap();
    client.enqueue::<alert>(1).key("alert").await.unwrap();
    let alert_job = client.job::<alert>("alert").await.unwrap().unwrap();
    assert_eq!(alert_job.priority, Priority::HIGH, "the handler's default");

    let handle = Worker::builder(client.clone())
        .topics(["priority.bulk"])
        .concurrency("priority.bulk", 1)
        .data(log.clone())
        .data(client.clone())
        .lease(Duration::from_secs(5))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    eventually("every bulk job ran", WAIT, || async {
        client.stats::<bulk>().await.unwrap().succeeded == 23
    })
    .await;
    handle.shutdown().await;
    let ran: Vec<String> = log.runs().into_iter().map(|r| r.key).collect();
    let mut expected = vec!["top".to_string(), "high".to_string()];
    expected.extend((0..20).map(|i| format!("n{i:02}")));
    expected.push("low".to_string());
    assert_eq!(ran, expected);
}
