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
    let dead = t
        .list(JobState::Dead, dq::Page::first(10))
        .await
        .unwrap()
        .jobs;
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

/// Issue 15: `fail_many` writes a partition's failures in one call, and each job gets what
/// `fail` alone would give it: retry later, retry at once, defer, bury, a cancel requested
/// while it ran, a stale token, a job already gone, and a key named twice (failed once).
pub async fn fail_many_gives_each_job_its_own_outcome<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("failmany").unwrap();
    let q = queue("failmany");
    let names = [
        "later",
        "now",
        "defer",
        "bury",
        "cancelled",
        "stale",
        "gone",
        "twice",
    ];
    for k in names {
        t.enqueue(raw(1)).key(k).await.unwrap();
    }
    let jobs = fetch(h, &q, &req_max(names.len())).await.jobs;
    assert_eq!(keys_of(&jobs), names);
    let d = |k: &str| jobs.iter().find(|j| j.key.as_str() == k).unwrap().clone();
    assert_eq!(
        t.cancel("cancelled").await.unwrap(),
        CancelOutcome::CancelRequested
    );
    ack_all(h, &q, &[d("gone")]).await;
    let failed = |k: &str, token: u64, action: FailAction| dq::store::FailedAttempt {
        key: jk(k),
        token,
        action,
        error: format!("{k} failed"),
    };
    let batch = [
        failed("later", d("later").token, FailAction::Retry(HOUR)),
        failed("now", d("now").token, FailAction::Retry(ms(0))),
        failed("defer", d("defer").token, FailAction::Defer(HOUR)),
        failed("bury", d("bury").token, FailAction::Bury),
        failed("cancelled", d("cancelled").token, FailAction::Retry(ms(0))),
        failed("stale", d("stale").token + 1_000_000, FailAction::Bury),
        failed("gone", d("gone").token, FailAction::Retry(ms(0))),
        failed("twice", d("twice").token, FailAction::Retry(HOUR)),
        failed("twice", d("twice").token, FailAction::Bury),
    ];
    let before = now(h).await;
    let out = h
        .store()
        .fail_many(&q, &batch, dq::DeadLimits::default())
        .await
        .expect("fail_many");
    let after = now(h).await;
    assert_eq!(out.len(), batch.len());
    let at = |i: usize| match out[i] {
        Ok(FailOutcome::Retrying { at_ms }) => at_ms,
        ref other => panic!("{}: {other:?}", batch[i].key),
    };
    let hour = HOUR.as_millis() as u64;
    assert!((before + hour..=after + hour).contains(&at(0)));
    assert!((before..=after).contains(&at(1)));
    assert!((before + hour..=after + hour).contains(&at(2)));
    assert_eq!(
        out[3].as_ref().ok(),
        Some(&FailOutcome::Buried { trimmed: 0 })
    );
    assert_eq!(out[4].as_ref().ok(), Some(&FailOutcome::Cancelled));
    assert!(
        matches!(out[5], Err(dq::Error::StaleToken { .. })),
        "{:?}",
        out[5]
    );
    assert_eq!(out[6].as_ref().ok(), Some(&FailOutcome::Gone));
    assert!((before + hour..=after + hour).contains(&at(7)));
    assert!(
        matches!(out[8], Err(dq::Error::StaleToken { .. })),
        "the second naming finds the job no longer leased: {:?}",
        out[8]
    );

    let state = |i: JobInfo| (i.state, i.attempts, i.history.len());
    assert_eq!(state(info(&t, "later").await), (JobState::Retry, 1, 1));
    assert_eq!(state(info(&t, "now").await), (JobState::Ready, 1, 1));
    assert_eq!(state(info(&t, "defer").await), (JobState::Scheduled, 0, 1));
    assert_eq!(state(info(&t, "bury").await), (JobState::Dead, 1, 1));
    assert_eq!(state(info(&t, "stale").await), (JobState::Active, 1, 0));
    assert_eq!(state(info(&t, "twice").await), (JobState::Retry, 1, 1));
    assert!(t.job("cancelled").await.unwrap().is_none());
    assert!(t.job("gone").await.unwrap().is_none());
    let later = info(&t, "later").await;
    assert_eq!(later.history[0].error, "later failed");
    assert_eq!(later.history[0].outcome, AttemptOutcome::Failed);
    assert_eq!(
        info(&t, "defer").await.history[0].outcome,
        AttemptOutcome::Deferred
    );
    let st = t.stats().await.unwrap();
    assert_eq!(
        (st.retried, st.buried, st.cancelled, st.active),
        (3, 1, 1, 1),
        "{st:?}"
    );
    // The same batch again (a retry after its reply was lost): nothing is written twice; a
    // job no longer leased under its token is refused as stale, a deleted one is gone.
    let again = h
        .store()
        .fail_many(&q, &batch, dq::DeadLimits::default())
        .await
        .expect("fail_many repeated");
    let gone: Vec<bool> = again
        .iter()
        .map(|o| match o {
            Ok(FailOutcome::Gone) => true,
            Err(dq::Error::StaleToken { .. }) => false,
            other => panic!("a repeat wrote something: {other:?}"),
        })
        .collect();
    assert_eq!(
        gone,
        [false, false, false, false, true, false, true, false, false]
    );
    let counters = |s: dq::TopicStats| {
        (
            (s.scheduled, s.ready, s.active, s.retry, s.dead),
            (s.retried, s.buried, s.cancelled, s.succeeded),
        )
    };
    assert_eq!(
        counters(t.stats().await.unwrap()),
        counters(st.clone()),
        "a repeat changes no counter"
    );
    assert_eq!(state(info(&t, "later").await), (JobState::Retry, 1, 1));
    assert_eq!(state(info(&t, "bury").await), (JobState::Dead, 1, 1));
    // The job due at once is leased again, with its attempt counted; an empty batch is a no-op.
    let again = fetch_one(h, &q, &req()).await;
    assert_eq!((again.key.as_str(), again.attempt), ("now", 2));
    assert!(
        h.store()
            .fail_many(&q, &[], dq::DeadLimits::default())
            .await
            .unwrap()
            .is_empty()
    );
    ack_all(h, &q, &[again, d("stale")]).await;
}

/// An error text longer than a history keeps is cut on a character boundary and says so:
/// it ends with `… [cut from N bytes]` (N its length) and stays within the limit; a text of
/// exactly the limit is kept whole.
pub async fn long_errors_are_cut_with_a_marker<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("errors.long").unwrap();
    let q = queue("errors.long");
    let limit = dq_core::job::MAX_ERROR_LEN;
    // An odd start, so that a cut at a fixed byte lands inside a two-byte character.
    let long = format!("x{}", "é".repeat(3000));
    let whole = "y".repeat(limit);
    for k in ["long", "whole"] {
        t.enqueue(raw(1)).key(k).await.unwrap();
    }
    let jobs = fetch(h, &q, &req_max(2)).await.jobs;
    assert_eq!(keys_of(&jobs), ["long", "whole"]);
    fail(h, &jobs[0], FailAction::Retry(HOUR), &long)
        .await
        .unwrap();
    fail(h, &jobs[1], FailAction::Retry(HOUR), &whole)
        .await
        .unwrap();
    let kept = info(&t, "long").await.history[0].error.clone();
    let marker = format!("… [cut from {} bytes]", long.len());
    assert!(kept.len() <= limit, "{} bytes kept", kept.len());
    let Some(head) = kept.strip_suffix(&marker) else {
        panic!(
            "a cut text does not say it was cut: …{}",
            &kept[kept.len() - 40..]
        );
    };
    assert!(long.starts_with(head) && head.len() + 2 > limit - marker.len());
    assert_eq!(info(&t, "whole").await.history[0].error, whole);
}
