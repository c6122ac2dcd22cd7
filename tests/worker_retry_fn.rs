//! A handler's retry function with a real worker on a real Redis: it sees the attempt, how the
//! run failed and the handler's own error (downcast), and its decisions are what happens —
//! retries after its own delays then dead, discarded (deleted and counted), a panic retried;
//! `JobError::permanent` buries without asking it.

#[path = "worker/support.rs"]
mod support;

use std::time::Duration;

use dq::{Client, FailureKind, JobContext, JobError, RetryDecision, RetryError, Worker};
use dq_testkit::eventually;
use support::{Log, WAIT, record};

/// The partner's answer, the handler's own error type.
#[derive(Debug)]
struct Declined(u16);

impl std::fmt::Display for Declined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "declined with {}", self.0)
    }
}

impl std::error::Error for Declined {}

/// 410: discard; 503: retry after 20 ms × attempt, dead from the third attempt; a panic:
/// retry at once; anything else: dead.
fn charge_retry(attempt: u32, e: &RetryError<'_>) -> RetryDecision {
    match (e.failure(), e.downcast_ref::<Declined>()) {
        (_, Some(Declined(410))) => RetryDecision::Discard,
        (_, Some(Declined(503))) if attempt < 3 => {
            RetryDecision::After(Duration::from_millis(20 * u64::from(attempt)))
        }
        (FailureKind::Panic, _) => RetryDecision::After(Duration::ZERO),
        (FailureKind::LeaseExpired, _) => RetryDecision::After(Duration::from_secs(60)),
        _ => RetryDecision::Dead,
    }
}

/// Job 1 is always declined with 503, job 2 with 410; job 3 panics on its first attempt;
/// job 4 fails permanently.
#[dq::delayed_job(topic = "retry_fn.charge", retry_fn = charge_retry, max_attempts = 4)]
async fn charge(n: u64, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "ran").await?;
    assert_eq!(ctx.max_attempts, 4, "the function's bound");
    match n {
        1 => Err(JobError::retry(Declined(503))),
        2 => Err(JobError::retry(Declined(410))),
        3 if ctx.attempt == 1 => panic!("card reader on fire"),
        4 => Err(JobError::permanent(Declined(410))),
        _ => Ok(()),
    }
}

#[tokio::test]
async fn the_retry_function_decides_what_follows_a_failure() {
    let d = dq::handler::registered_jobs()
        .find(|d| d.topic == "retry_fn.charge")
        .unwrap();
    let f = d.retry_fn.expect("registered with its retry function");
    assert_eq!((f.name(), f.max_attempts()), ("charge_retry", 4));
    // what every fetch carries: the decisions for expired leases, one per attempt
    let policy = d.retry_policy().unwrap();
    assert_eq!(policy.max_attempts(), 4);
    assert_eq!(
        policy.decision_with(1, 0.5),
        RetryDecision::After(Duration::from_secs(60))
    );
    assert_eq!(policy.decision_with(4, 0.5), RetryDecision::Dead);

    let client = Client::builder()
        .namespace(dq_testkit::namespace("retry_fn"))
        .connect(&dq_testkit::shared().url())
        .await
        .expect("connect");
    let log = Log::default();
    for (key, n) in [
        ("declined", 1),
        ("gone", 2),
        ("panics", 3),
        ("permanent", 4),
    ] {
        client.enqueue::<charge>(n).key(key).await.unwrap();
    }
    let handle = Worker::builder(client.clone())
        .topics(["retry_fn.charge"])
        .data(log.clone())
        .data(client.clone())
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    eventually("every job reached its end", WAIT, || async {
        let st = client.stats::<charge>().await.unwrap();
        st.succeeded == 1 && st.discarded == 1 && st.dead == 2
    })
    .await;
    handle.shutdown().await;

    let st = client.stats::<charge>().await.unwrap();
    assert_eq!(
        (st.retried, st.buried, st.discarded, st.succeeded),
        (3, 2, 1, 1),
        "{st:?}"
    );
    let t = client.topic("retry_fn.charge").unwrap();
    // 503: retried after 20 ms, then 40 ms, then dead on the third attempt (of four)
    let declined = t.job("declined").await.unwrap().unwrap();
    assert_eq!((declined.state, declined.attempts), (dq::JobState::Dead, 3));
    let at: Vec<u64> = declined.history.iter().map(|a| a.at_ms).collect();
    let runs = log.of("declined");
    assert_eq!(runs.len(), 3);
    for (i, wait) in [(1, 20), (2, 40)] {
        assert!(
            runs[i].started_ms >= at[i - 1] + wait,
            "attempt {} started {} ms after the failure, before its {wait} ms",
            i + 1,
            runs[i].started_ms - at[i - 1]
        );
    }
    assert_eq!(declined.history[2].error, "declined with 503");
    // 410: discarded on its first attempt, gone
    assert!(t.job("gone").await.unwrap().is_none());
    assert_eq!(log.of("gone").len(), 1);
    // a panic: retried at once, then succeeded
    assert_eq!(log.of("panics").len(), 2);
    // permanent: dead without asking the function (which would have discarded a 410)
    let permanent = t.job("permanent").await.unwrap().unwrap();
    assert_eq!(
        (permanent.state, permanent.attempts),
        (dq::JobState::Dead, 1)
    );
}
