//! Conformance bodies: `update_payload`. A waiting job (scheduled, ready, retry) gets its new
//! payload and keeps its due time, attempts, history, expiry and place in line; a running or
//! dead job, or a missing one, is not touched; a payload over the limit is refused before any
//! write.

use super::*;
use dq::UpdateOutcome;

/// Scheduled, ready and retry jobs take the new payload and keep everything else; it is what
/// their next run gets.
pub async fn a_waiting_job_gets_its_new_payload_and_keeps_the_rest<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("update.waiting").unwrap();
    let q = queue("update.waiting");
    t.enqueue(raw(1))
        .key("later")
        .delay(Duration::from_secs(3600))
        .expires_after(Duration::from_secs(7200))
        .await
        .unwrap();
    t.enqueue(raw(2)).key("first").await.unwrap();
    t.enqueue(raw(3)).key("second").await.unwrap();
    let before = info(&t, "later").await;
    assert_eq!(
        t.update_payload("later", raw(10)).await.unwrap(),
        UpdateOutcome::Updated(JobState::Scheduled)
    );
    let after = info(&t, "later").await;
    assert_eq!(after.payload, raw(10));
    assert_eq!(
        (
            after.due_ms,
            after.created_ms,
            after.attempts,
            after.expires_ms
        ),
        (
            before.due_ms,
            before.created_ms,
            before.attempts,
            before.expires_ms
        )
    );
    assert_eq!(
        t.update_payload("first", raw(20)).await.unwrap(),
        UpdateOutcome::Updated(JobState::Ready)
    );
    // a failed job waiting for its retry keeps its attempts and history
    let d = fetch_one(h, &q, &req()).await;
    assert_eq!(d.key.as_str(), "first", "its place in line is kept");
    assert_eq!(d.payload, raw(20));
    fail(h, &d, FailAction::Retry(Duration::from_secs(3600)), "boom")
        .await
        .unwrap();
    assert_eq!(
        t.update_payload("first", raw(21)).await.unwrap(),
        UpdateOutcome::Updated(JobState::Retry)
    );
    let retry = info(&t, "first").await;
    assert_eq!((retry.payload, retry.attempts), (raw(21), 1));
    assert_eq!(retry.history.len(), 1);
}

/// A running job, a dead one and a missing key are not touched; a payload over the limit is
/// refused before any write.
pub async fn running_dead_and_missing_jobs_are_not_updated<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("update.refused").unwrap();
    let q = queue("update.refused");
    t.enqueue(raw(1)).key("runs").await.unwrap();
    let d = fetch_one(h, &q, &req()).await;
    assert_eq!(
        t.update_payload("runs", raw(9)).await.unwrap(),
        UpdateOutcome::Running
    );
    fail(h, &d, FailAction::Bury, "no").await.unwrap();
    assert_eq!(
        t.update_payload("runs", raw(9)).await.unwrap(),
        UpdateOutcome::Dead
    );
    assert_eq!(info(&t, "runs").await.payload, raw(1));
    assert_eq!(
        t.update_payload("nobody", raw(9)).await.unwrap(),
        UpdateOutcome::NotFound
    );
    t.enqueue(raw(1)).key("small").await.unwrap();
    let limit = c.config().max_payload;
    let err = t
        .update_payload("small", vec![0; limit + 1])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::PayloadTooLarge { .. }), "{err}");
    assert_eq!(info(&t, "small").await.payload, raw(1));
}
