//! A job's expiry with a real worker on a real Redis: jobs whose expiry passed while every
//! worker was down never run when one starts; a job whose retry would come after its expiry
//! is dropped instead of run again; the handler's `expires_after` is the default of the
//! typed client, a job's own expiry replaces it.

#[path = "worker/support.rs"]
mod support;

use std::time::Duration;

use dq::{Client, JobContext, JobError, Worker};
use dq_testkit::eventually;
use support::{Log, WAIT, record};

/// Fails the first attempt of job 2 (its retry comes 400 ms later: after its expiry).
#[dq::delayed_job(
    topic = "expiry.remind",
    retry = "fixed(400ms, 1)",
    expires_after = "250ms"
)]
async fn remind(n: u64, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "ran").await?;
    if n == 2 && ctx.attempt == 1 {
        return Err(JobError::retry("the first attempt fails"));
    }
    Ok(())
}

async fn client() -> Client {
    Client::builder()
        .namespace(dq_testkit::namespace("expiry"))
        .connect(&dq_testkit::shared().url())
        .await
        .expect("connect")
}

fn worker(client: &Client, log: &Log) -> dq::WorkerBuilder {
    Worker::builder(client.clone())
        .topics(["expiry.remind"])
        .data(log.clone())
        .data(client.clone())
        .lease(Duration::from_secs(5))
}

#[tokio::test]
async fn jobs_that_expired_while_every_worker_was_down_never_run() {
    let client = client().await;
    let log = Log::default();
    // no worker yet: the handler's default expiry (250 ms after due) passes
    client.enqueue::<remind>(1).key("late").await.unwrap();
    client
        .enqueue::<remind>(1)
        .key("later")
        .delay(Duration::from_millis(50))
        .await
        .unwrap();
    client
        .enqueue::<remind>(1)
        .key("kept")
        .expires_after(Duration::from_secs(3600))
        .await
        .unwrap();
    let late = client
        .topic("expiry.remind")
        .unwrap()
        .job("later")
        .await
        .unwrap()
        .unwrap();
    let expires = late.expires_ms.expect("the handler's expiry");
    assert_eq!(expires, late.due_ms + 250);
    let view = client.job::<remind>("later").await.unwrap().unwrap();
    assert_eq!(view.expires, Some(dq::store::from_unix_ms(expires)));
    eventually("Redis's clock passes the expiry", WAIT, || async {
        client.store().now_ms().await.unwrap() > expires
    })
    .await;
    let handle = worker(&client, &log)
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    eventually(
        "the kept job ran and the two expired were dropped",
        WAIT,
        || async {
            let st = client.stats::<remind>().await.unwrap();
            st.succeeded == 1 && st.expired_before_start == 2
        },
    )
    .await;
    handle.shutdown().await;
    let ran: Vec<String> = log.runs().into_iter().map(|r| r.key).collect();
    assert_eq!(ran, vec!["kept".to_string()]);
    for key in ["late", "later"] {
        assert!(client.job::<remind>(key).await.unwrap().is_none());
    }
}

#[tokio::test]
async fn a_job_whose_retry_comes_after_its_expiry_is_not_run_again() {
    let client = client().await;
    let log = Log::default();
    let handle = worker(&client, &log)
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    client.enqueue::<remind>(2).key("flaky").await.unwrap();
    client
        .enqueue::<remind>(2)
        .key("patient")
        .expires_after(Duration::from_secs(3600))
        .await
        .unwrap();
    eventually(
        "the patient job succeeded, the flaky one expired",
        WAIT,
        || async {
            let st = client.stats::<remind>().await.unwrap();
            st.succeeded == 1 && st.expired_before_start == 1
        },
    )
    .await;
    handle.shutdown().await;
    let attempts = |key: &str| {
        log.runs()
            .into_iter()
            .filter(|r| r.key == key)
            .map(|r| r.attempt)
            .collect::<Vec<_>>()
    };
    assert_eq!(attempts("flaky"), vec![1]);
    assert_eq!(attempts("patient"), vec![1, 2]);
    assert!(client.job::<remind>("flaky").await.unwrap().is_none());
}
