//! Conformance bodies: a handler's retry function (`dq::RetryFn`). The worker asks it after a
//! failed attempt and writes its decision (retry after its own delay, bury, or discard:
//! `FailAction::Discard`); an expired lease follows the decisions it gave, once per attempt,
//! when the worker started (`RetryFn::lease_expiry_policy`, sent with every fetch).

use super::*;
use dq::{EventId, EventKind, EventsPolicy, FailureKind, RetryDecision, RetryError, RetryFn};

/// 60 ms after the first failure, 120 ms after the second, then dead (of five attempts).
fn two_tries(attempt: u32, _: &RetryError<'_>) -> RetryDecision {
    match attempt {
        1 => RetryDecision::After(ms(60)),
        2 => RetryDecision::After(ms(120)),
        _ => RetryDecision::Dead,
    }
}

/// The store action for the function's decision, as the worker's runner makes it.
fn action(d: RetryDecision) -> FailAction {
    match d {
        RetryDecision::After(d) => FailAction::Retry(d),
        RetryDecision::Dead => FailAction::Bury,
        RetryDecision::Discard => FailAction::Discard,
    }
}

/// A function that retries with its own delays and then buries: each retry waits its delay,
/// the job is dead before its attempts run out, with every error in its history, and a requeue
/// runs it again.
pub async fn a_retry_function_retries_then_buries<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("retry_fn.own").unwrap();
    let q = queue("retry_fn.own");
    let f = RetryFn::new(two_tries).with_max_attempts(5).unwrap();
    t.enqueue(raw(1)).key("w").await.unwrap();
    let mut retry_at = 0;
    for attempt in 1..=3 {
        let d = fetch_one(h, &q, &req()).await;
        assert_eq!((d.key.as_str(), d.attempt), ("w", attempt));
        assert!(d.leased_ms >= retry_at, "retried before its retry time");
        let error = format!("partner answered 50{attempt}");
        let decision = f.decide(&RetryError::new(
            attempt,
            f.max_attempts(),
            FailureKind::Error,
            &error,
            None,
        ));
        let before = now(h).await;
        let out = fail(h, &d, action(decision), &error).await.unwrap();
        match decision {
            RetryDecision::After(delay) => {
                let FailOutcome::Retrying { at_ms } = out else {
                    panic!("{out:?}")
                };
                let delay = delay.as_millis() as u64;
                assert!(at_ms >= before + delay, "{at_ms} < {before} + {delay}");
                let i = info(&t, "w").await;
                assert_eq!((i.state, i.due_ms), (JobState::Retry, at_ms));
                retry_at = at_ms;
            }
            other => {
                assert_eq!((attempt, other), (3, RetryDecision::Dead));
                assert_eq!(out, FailOutcome::Buried { trimmed: 0 });
            }
        }
    }
    let i = info(&t, "w").await;
    assert_eq!((i.state, i.attempts), (JobState::Dead, 3));
    let history: Vec<_> = i.history.iter().map(|a| (a.attempt, a.outcome)).collect();
    assert_eq!(
        history,
        [
            (1, AttemptOutcome::Failed),
            (2, AttemptOutcome::Failed),
            (3, AttemptOutcome::Buried)
        ]
    );
    let st = t.stats().await.unwrap();
    assert_eq!((st.retried, st.buried, st.discarded), (2, 1, 0), "{st:?}");
    assert_eq!(t.requeue_dead(&["w"]).await.unwrap(), 1);
    let d = fetch_one(h, &q, &req()).await;
    assert_eq!(
        (d.key.as_str(), d.attempt),
        ("w", 1),
        "requeued: attempts reset"
    );
}

/// A discarded job is deleted with its history (never kept, whatever the retention), counted
/// in `discarded`, and recorded as a `discarded` event with its attempt and error; a cancel
/// requested while it ran still wins.
pub async fn a_discarded_job_is_deleted_and_counted<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("retry_fn.discard").unwrap();
    let q = queue("retry_fn.discard");
    t.set_events(Some(EventsPolicy::keep(100).unwrap()))
        .await
        .unwrap();
    let keep_all = dq::Retention::default()
        .succeeded(HOUR)
        .cancelled(HOUR)
        .expired(HOUR);
    t.set_retention(Some(keep_all)).await.unwrap();
    for k in ["a", "b"] {
        t.enqueue(raw(1)).key(k).await.unwrap();
    }
    let jobs = fetch_some(h, &q, &req_max(2)).await;
    assert_eq!(jobs.len(), 2);
    let (a, b) = if jobs[0].key.as_str() == "a" {
        (&jobs[0], &jobs[1])
    } else {
        (&jobs[1], &jobs[0])
    };
    // b's cancel is requested while it runs: the cancel wins over the discard.
    assert_eq!(t.cancel("b").await.unwrap(), CancelOutcome::CancelRequested);
    let failures: Vec<_> = [a, b]
        .iter()
        .map(|d| dq::store::FailedAttempt {
            key: d.key.clone(),
            token: d.token,
            action: FailAction::Discard,
            error: "the order is gone".into(),
        })
        .collect();
    let out = h
        .store()
        .fail_many(&q, &failures, DeadLimits::default())
        .await
        .unwrap();
    assert_eq!(
        out.into_iter().map(Result::unwrap).collect::<Vec<_>>(),
        [FailOutcome::Discarded, FailOutcome::Cancelled]
    );
    assert!(t.job("a").await.unwrap().is_none(), "deleted");
    // a repeated failure finds nothing
    let again = fail(h, a, FailAction::Discard, "again").await.unwrap();
    assert_eq!(again, FailOutcome::Gone);
    let st = t.stats().await.unwrap();
    assert_eq!(
        (
            st.discarded,
            st.cancelled,
            st.dead,
            st.retry,
            st.active,
            st.kept
        ),
        (1, 1, 0, 0, 0, 1),
        "{st:?}"
    );
    let events = h
        .store()
        .read_events(&q, EventId::ZERO, 1000)
        .await
        .unwrap();
    let gone: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventKind::Discarded)
        .collect();
    assert_eq!(gone.len(), 1, "{events:?}");
    assert_eq!(
        (
            gone[0].key.as_str(),
            gone[0].attempt,
            gone[0].error.as_deref()
        ),
        ("a", Some(1), Some("the order is gone"))
    );
}

/// Lease expiries: after attempt 1 at once, then discard.
fn expiry_then_discard(attempt: u32, e: &RetryError<'_>) -> RetryDecision {
    assert_eq!(e.failure(), FailureKind::LeaseExpired);
    match attempt {
        1 => RetryDecision::After(ms(0)),
        _ => RetryDecision::Discard,
    }
}

/// Lease expiries: always an hour (dead on the last attempt, whatever it says).
fn an_hour(_: u32, _: &RetryError<'_>) -> RetryDecision {
    RetryDecision::After(HOUR)
}

/// Fetches under `lease` until one call leases `n` jobs, and waits until their leases have
/// run out by the store's clock.
async fn expire<H: Harness>(h: &H, q: &Queue, lease: &FetchRequest, n: usize) -> Vec<Delivery> {
    let jobs = dq_testkit::eventually_some("the jobs are leased", WAIT, || async {
        let reply = fetch(h, q, lease).await;
        (reply.jobs.len() == n).then_some(reply.jobs)
    })
    .await;
    until_store_time(h, jobs.iter().map(|d| d.lease_deadline_ms).max().unwrap()).await;
    jobs
}

/// A lease that expires follows the retry function's decision for its attempt: retried after
/// its delay, discarded (deleted, counted, an event), or dead — on every store, the Redis
/// one deciding inside its fetch script from the table the worker sent.
pub async fn a_lease_expiry_follows_the_retry_function<H: Harness>(h: &H) {
    let c = h.client().await;

    // retry at once, then discard
    let t = c.topic("retry_fn.lease").unwrap();
    let q = queue("retry_fn.lease");
    t.set_events(Some(EventsPolicy::keep(100).unwrap()))
        .await
        .unwrap();
    let policy = RetryFn::new(expiry_then_discard)
        .with_max_attempts(3)
        .unwrap()
        .lease_expiry_policy();
    let lease = FetchRequest {
        lease: ms(100),
        retry_policy: policy,
        ..req()
    };
    t.enqueue(raw(1)).key("a").await.unwrap();
    let first = expire(h, &q, &lease, 1).await;
    assert_eq!(first[0].attempt, 1);
    // recovered after attempt 1 (delay 0) and due at once: leased again, attempt 2
    let again = expire(h, &q, &lease, 1).await;
    assert_eq!(again[0].attempt, 2);
    dq_testkit::eventually("the second expiry discards the job", WAIT, || async {
        let reply = fetch(h, &q, &lease).await;
        assert!(
            reply.jobs.is_empty() && reply.buried.is_empty(),
            "{reply:?}"
        );
        t.job("a").await.unwrap().is_none()
    })
    .await;
    let st = t.stats().await.unwrap();
    assert_eq!(
        (st.expired, st.retried, st.discarded, st.dead, st.retry),
        (2, 1, 1, 0, 0),
        "{st:?}"
    );
    let events = h
        .store()
        .read_events(&q, EventId::ZERO, 1000)
        .await
        .unwrap();
    let last = events.last().expect("events");
    assert_eq!(
        (&last.kind, last.attempt, last.error.as_deref()),
        (&EventKind::Discarded, Some(2), Some("lease expired"))
    );

    // an hour after the first expiry, exactly; dead after the last attempt
    let t = c.topic("retry_fn.hour").unwrap();
    let q = queue("retry_fn.hour");
    let two = FetchRequest {
        lease: ms(100),
        retry_policy: RetryFn::new(an_hour)
            .with_max_attempts(2)
            .unwrap()
            .lease_expiry_policy(),
        ..req()
    };
    let one = FetchRequest {
        retry_policy: RetryFn::new(an_hour)
            .with_max_attempts(1)
            .unwrap()
            .lease_expiry_policy(),
        ..two.clone()
    };
    t.enqueue(raw(1)).key("later").await.unwrap();
    expire(h, &q, &two, 1).await;
    dq_testkit::eventually("the expiry is recovered", WAIT, || async {
        fetch(h, &q, &two).await;
        info(&t, "later").await.state == JobState::Retry
    })
    .await;
    let i = info(&t, "later").await;
    let last = i.history.last().unwrap();
    assert_eq!(last.outcome, AttemptOutcome::LeaseExpired);
    assert_eq!(i.due_ms - last.at_ms, 3_600_000);

    t.enqueue(raw(1)).key("dead").await.unwrap();
    expire(h, &q, &one, 1).await;
    let buried = dq_testkit::eventually_some("the expiry buries the job", WAIT, || async {
        let reply = fetch(h, &q, &one).await;
        (!reply.buried.is_empty()).then_some(reply.buried)
    })
    .await;
    assert_eq!(buried, [jk("dead")]);
    assert_eq!(info(&t, "dead").await.state, JobState::Dead);
    assert_eq!(t.stats().await.unwrap().discarded, 0);
}
