//! Smoke test: one job through enqueue → fetch → ack on a real Redis.

use std::time::Duration;

use dq::store::{FetchRequest, Queue};
use dq::{Client, EnqueueOutcome, Job, JobKey, Topic};

#[allow(non_camel_case_types)]
struct ping;
impl Job for ping {
    type Payload = u64;
    const TOPIC: &'static str = "smoke.ping";
}

#[tokio::test]
async fn one_job_end_to_end() {
    let server = dq_testkit::shared();
    let ns = dq_testkit::namespace("smoke");
    let client = Client::builder()
        .namespace(&ns)
        .connect(&server.url())
        .await
        .unwrap();
    let e = client.enqueue::<ping>(7).key("k1").await.unwrap();
    assert_eq!(e.outcome, EnqueueOutcome::Created);
    let e2 = client.enqueue::<ping>(8).key("k1").await.unwrap();
    assert_eq!(e2.outcome, EnqueueOutcome::Exists(dq::JobState::Ready));
    let later = client
        .enqueue::<ping>(9)
        .delay(Duration::from_secs(30))
        .await
        .unwrap();
    let q = Queue::new(Topic::new("smoke.ping").unwrap(), 0);
    let reply = client
        .store()
        .fetch(&q, &FetchRequest::default())
        .await
        .unwrap();
    assert_eq!(reply.jobs.len(), 1, "{reply:?}");
    let d = &reply.jobs[0];
    assert_eq!(d.key, JobKey::new("k1").unwrap());
    assert_eq!(d.attempt, 1);
    assert_eq!(dq::payload::decode::<u64>(&d.payload).unwrap(), 7);
    let next = reply.next_in.unwrap();
    assert!(
        // the time to the next due job, from the fetch: at most the delay, and a loaded
        // machine cannot have spent most of it since the enqueue
        next <= Duration::from_secs(30) && next > Duration::from_secs(20),
        "{next:?}"
    );
    let acks = client
        .store()
        .ack(&q, "", &dq::store::Success::of(&[(d.key.clone(), d.token)]))
        .await
        .unwrap();
    assert_eq!(acks, vec![dq::store::AckOutcome::Acked]);
    let acks = client
        .store()
        .ack(&q, "", &dq::store::Success::of(&[(d.key.clone(), d.token)]))
        .await
        .unwrap();
    assert_eq!(acks, vec![dq::store::AckOutcome::Gone]);
    let info = client
        .job::<ping>(later.key.as_str())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(info.state, dq::JobState::Scheduled);
    let stats = client.stats::<ping>().await.unwrap();
    assert_eq!(
        (stats.scheduled, stats.succeeded, stats.enqueued),
        (1, 1, 2),
        "{stats:?}"
    );
}

#[tokio::test]
async fn a_long_multibyte_error_keeps_the_history_readable() {
    let server = dq_testkit::shared();
    let ns = dq_testkit::namespace("smoke");
    let client = Client::builder()
        .namespace(&ns)
        .connect(&server.url())
        .await
        .unwrap();
    client.enqueue::<ping>(1).key("k").await.unwrap();
    let q = Queue::new(Topic::new("smoke.ping").unwrap(), 0);
    let d = client
        .store()
        .fetch(&q, &FetchRequest::default())
        .await
        .unwrap()
        .jobs
        .remove(0);
    // 1023 ASCII bytes then 2-byte characters: byte 1024 falls inside a character.
    let error = format!("{}{}", "x".repeat(1023), "é".repeat(100));
    let failure = dq::store::FailedAttempt {
        key: d.key.clone(),
        token: d.token,
        action: dq::store::FailAction::Retry(Duration::from_secs(60)),
        error,
    };
    let out = client
        .store()
        .fail_many(&q, &[failure], dq::DeadLimits::default())
        .await
        .unwrap();
    out[0].as_ref().unwrap();
    let info = client.job::<ping>("k").await.unwrap().unwrap();
    // Cut on a character boundary within the limit, saying it was cut and from how long.
    let kept = &info.history[0].error;
    assert!(kept.len() <= 1024, "{} bytes kept", kept.len());
    assert!(kept.starts_with("xxx"), "{kept}");
    assert!(kept.ends_with("… [cut from 1223 bytes]"), "{kept}");
}
