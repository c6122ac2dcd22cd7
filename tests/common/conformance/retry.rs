//! Conformance bodies: failed attempts: retry until dead, and defer.

use super::*;

/// fail → retry at now + delay → ready → … → dead after the last tier, every error in history.
pub async fn retry_schedule_until_dead<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("webhook").unwrap();
    let q = queue("webhook");
    let policy = RetryPolicy::tiered([ms(60), ms(120), ms(180)]).unwrap();
    t.enqueue(raw(1)).key("w").await.unwrap();
    let mut retry_at = 0;
    for attempt in 1..=policy.max_attempts() {
        let d = fetch_one(h, &q, &req()).await;
        assert_eq!((d.key.as_str(), d.attempt), ("w", attempt));
        assert!(d.leased_ms >= retry_at, "retried before its retry time");
        let error = format!("partner answered 50{attempt}");
        match policy.delay_after(attempt) {
            Some(delay) => {
                let before = now(h).await;
                let out = fail(h, &d, FailAction::Retry(delay), &error).await.unwrap();
                let after = now(h).await;
                let FailOutcome::Retrying { at_ms } = out else {
                    panic!("{out:?}")
                };
                let delay = delay.as_millis() as u64;
                assert!((before + delay..=after + delay).contains(&at_ms), "{at_ms}");
                let i = info(&t, "w").await;
                assert_eq!(
                    (i.state, i.due_ms, i.attempts),
                    (JobState::Retry, at_ms, attempt)
                );
                assert_eq!(t.stats().await.unwrap().retry, 1);
                retry_at = at_ms;
            }
            None => {
                let out = fail(h, &d, FailAction::Bury, &error).await.unwrap();
                assert_eq!(out, FailOutcome::Buried { trimmed: 0 });
            }
        }
    }
    let i = info(&t, "w").await;
    assert_eq!((i.state, i.attempts), (JobState::Dead, 4));
    let history: Vec<_> = i
        .history
        .iter()
        .map(|a| (a.attempt, a.outcome, a.error.clone()))
        .collect();
    assert_eq!(
        history,
        [
            (
                1,
                AttemptOutcome::Failed,
                "partner answered 501".to_string()
            ),
            (
                2,
                AttemptOutcome::Failed,
                "partner answered 502".to_string()
            ),
            (
                3,
                AttemptOutcome::Failed,
                "partner answered 503".to_string()
            ),
            (
                4,
                AttemptOutcome::Buried,
                "partner answered 504".to_string()
            ),
        ]
    );
    assert!(i.history.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
    let dead = t.dead_jobs(0, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].history.len(), 4);
    let st = t.stats().await.unwrap();
    assert_eq!(
        (st.retried, st.buried, st.dead, st.retry),
        (3, 1, 1, 0),
        "{st:?}"
    );
}

/// `FailAction::Defer` runs the job again later without spending an attempt.
pub async fn defer_spends_no_attempt<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("defer").unwrap();
    let q = queue("defer");
    t.enqueue(raw(1)).key("g").await.unwrap();
    let d1 = fetch_one(h, &q, &req()).await;
    assert_eq!(d1.attempt, 1);
    let at = match fail(h, &d1, FailAction::Defer(ms(150)), "not yet")
        .await
        .unwrap()
    {
        FailOutcome::Retrying { at_ms } => at_ms,
        other => panic!("{other:?}"),
    };
    let i = info(&t, "g").await;
    assert_eq!(
        (i.state, i.attempts, i.due_ms),
        (JobState::Scheduled, 0, at)
    );
    assert_eq!(i.history.len(), 1);
    assert_eq!(i.history[0].outcome, AttemptOutcome::Deferred);
    assert_eq!(i.history[0].error, "not yet");
    let st = t.stats().await.unwrap();
    assert_eq!((st.retried, st.scheduled, st.retry), (0, 1, 0), "{st:?}");

    let d2 = fetch_one(h, &q, &req()).await;
    assert!(d2.leased_ms >= at);
    assert_eq!(d2.attempt, 1, "a deferral spends no attempt");
    // Deferred by zero: ready at once, still no attempt spent.
    fail(h, &d2, FailAction::Defer(ms(0)), "not yet")
        .await
        .unwrap();
    assert_eq!(info(&t, "g").await.state, JobState::Ready);
    let d3 = fetch_one(h, &q, &req()).await;
    assert_eq!(d3.attempt, 1);
    // A real failure counts.
    fail(h, &d3, FailAction::Retry(ms(0)), "boom")
        .await
        .unwrap();
    let d4 = fetch_one(h, &q, &req()).await;
    assert_eq!(d4.attempt, 2);
    ack_all(h, &q, &[d4]).await;
}
