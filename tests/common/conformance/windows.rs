//! Conformance bodies: the key windows of an enqueue (`unique_for`, `debounce`, `throttle`)
//! and a topic's `max_delay`, all by the store's clock (docs/UNIQUE.md).

use super::*;

/// The outcome of enqueueing `n` under `key` with `window` applied to the call.
async fn put(
    t: &TopicClient,
    key: &str,
    n: u64,
    window: impl FnOnce(dq::Enqueue) -> dq::Enqueue,
) -> dq::Result<EnqueueOutcome> {
    window(t.enqueue(raw(n)).key(key)).await.map(|e| e.outcome)
}

/// Expects a window's refusal and returns when it ends.
fn refused(outcome: EnqueueOutcome) -> u64 {
    match outcome {
        EnqueueOutcome::Refused { until_ms } => until_ms,
        other => panic!("expected a window's refusal, got {other:?}"),
    }
}

/// Enqueues `key` (no window) until the store accepts it; fails the test after [`WAIT`].
async fn until_accepted(t: &TopicClient, key: &str) -> EnqueueOutcome {
    dq_testkit::eventually_some(&format!("{key} is accepted again"), WAIT, || async {
        let outcome = put(t, key, 9, |e| e).await.expect("enqueue");
        (!matches!(outcome, EnqueueOutcome::Refused { .. })).then_some(outcome)
    })
    .await
}

/// `unique_for(d)`: while the job exists its key reports `Exists`; once it finished (acked,
/// buried, cancelled) every enqueue of the key, `replace` too, is refused with the window's
/// end (its end + d by the store's clock), in bulk too; after the window the key is free.
pub async fn unique_for_refuses_the_key_after_its_job_finished<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic(close_order::TOPIC).unwrap();
    let q = queue(close_order::TOPIC);
    let window = Duration::from_secs(600);
    assert_eq!(
        put(&t, "u", 1, |e| e.unique_for(window)).await.unwrap(),
        EnqueueOutcome::Created
    );
    assert_eq!(
        put(&t, "u", 2, |e| e.unique_for(window)).await.unwrap(),
        EnqueueOutcome::Exists(JobState::Ready)
    );
    // Succeeded: refused for the window from the ack.
    let d = fetch_one(h, &q, &req()).await;
    let before = now(h).await;
    ack_all(h, &q, &[d]).await;
    let after = now(h).await;
    let until = refused(put(&t, "u", 3, |e| e).await.unwrap());
    assert!(
        (before + 600_000..=after + 600_000).contains(&until),
        "{before} {until} {after}"
    );
    assert_eq!(
        refused(put(&t, "u", 4, dq::Enqueue::replace).await.unwrap()),
        until
    );
    assert!(t.job("u").await.unwrap().is_none(), "nothing written");
    let bulk = t
        .enqueue_bulk(vec![
            JobSpec::new(raw(5)).key("u"),
            JobSpec::new(raw(6)).key("u2").unique_for(window),
        ])
        .await
        .unwrap();
    assert_eq!(bulk[0].outcome, EnqueueOutcome::Refused { until_ms: until });
    assert_eq!(bulk[1].outcome, EnqueueOutcome::Created);

    // Dead: refused from the burial (the dead job is still there: the window comes first).
    let d = fetch_one(h, &q, &req()).await;
    assert_eq!(d.key.as_str(), "u2");
    let before = now(h).await;
    fail(h, &d, FailAction::Bury, "boom").await.unwrap();
    let until = refused(put(&t, "u2", 7, |e| e).await.unwrap());
    assert!(until >= before + 600_000, "{before} {until}");
    assert_eq!(info(&t, "u2").await.state, JobState::Dead);

    // Cancelled while waiting: refused too.
    put(&t, "u3", 8, |e| e.delay(HOUR).unique_for(window))
        .await
        .unwrap();
    assert_eq!(t.cancel("u3").await.unwrap(), CancelOutcome::Cancelled);
    refused(put(&t, "u3", 9, |e| e).await.unwrap());

    // A short window ends, and the key is free again.
    put(&t, "v", 1, |e| e.unique_for(ms(300))).await.unwrap();
    let d = fetch_one(h, &q, &req()).await;
    ack_all(h, &q, &[d]).await;
    assert_eq!(until_accepted(&t, "v").await, EnqueueOutcome::Created);
    // (a job enqueued without a window leaves none when it ends)
    let d = fetch_one(h, &q, &req()).await;
    ack_all(h, &q, &[d]).await;
    assert_eq!(
        put(&t, "v", 2, |e| e).await.unwrap(),
        EnqueueOutcome::Created
    );
    let d = fetch_one(h, &q, &req()).await;
    ack_all(h, &q, &[d]).await;
}

/// `debounce(d)`: last wins. An enqueue while the job waits replaces its payload and makes it
/// due d from now; while it runs, nothing is written (`Exists(Active)`); with `delay` or `at`
/// it is refused before any write; in a bulk the last of a key wins.
pub async fn debounce_runs_the_last_payload_after_the_last_enqueue<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic(close_order::TOPIC).unwrap();
    let q = queue(close_order::TOPIC);
    let before = now(h).await;
    assert_eq!(
        put(&t, "d", 1, |e| e.debounce(HOUR)).await.unwrap(),
        EnqueueOutcome::Created
    );
    let first = info(&t, "d").await;
    assert!(first.due_ms >= before + 3_600_000, "{first:?}");
    assert_eq!(
        put(&t, "d", 2, |e| e.debounce(HOUR)).await.unwrap(),
        EnqueueOutcome::Replaced
    );
    let second = info(&t, "d").await;
    assert_eq!(unraw(&second.payload), 2);
    assert_eq!(second.state, JobState::Scheduled);
    assert!(second.due_ms >= first.due_ms, "{first:?} {second:?}");
    assert!(matches!(
        put(&t, "d", 3, |e| e.debounce(HOUR).delay(ms(5))).await,
        Err(Error::InvalidWindow(_))
    ));
    assert!(matches!(
        put(&t, "d0", 3, |e| e.debounce(Duration::ZERO)).await,
        Err(Error::InvalidWindow(_))
    ));
    assert!(t.job("d0").await.unwrap().is_none());
    assert_eq!(unraw(&info(&t, "d").await.payload), 2, "nothing written");
    let bulk = t
        .enqueue_bulk(vec![
            JobSpec::new(raw(4)).key("b").debounce(HOUR),
            JobSpec::new(raw(5)).key("b").debounce(HOUR),
        ])
        .await
        .unwrap();
    assert_eq!(
        (bulk[0].outcome, bulk[1].outcome),
        (EnqueueOutcome::Created, EnqueueOutcome::Replaced)
    );
    assert_eq!(unraw(&info(&t, "b").await.payload), 5);
    assert_eq!(t.stats().await.unwrap().scheduled, 2);

    // Running: the debounce writes nothing.
    put(&t, "r", 1, |e| e.debounce(ms(50))).await.unwrap();
    let d = fetch_one(h, &q, &req()).await;
    assert_eq!(d.key.as_str(), "r");
    assert_eq!(
        put(&t, "r", 2, |e| e.debounce(ms(50))).await.unwrap(),
        EnqueueOutcome::Exists(JobState::Active)
    );
    ack_all(h, &q, &[d]).await;
    assert_eq!(t.cancel("d").await.unwrap(), CancelOutcome::Cancelled);
    assert_eq!(t.cancel("b").await.unwrap(), CancelOutcome::Cancelled);
}

/// `throttle(d)`: first wins. For d after an accepted enqueue, every later enqueue of the key
/// is refused with the window's end, even once the first job has run; in a bulk the first of
/// a key wins; after the window the key is free.
pub async fn throttle_drops_enqueues_inside_its_window<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic(close_order::TOPIC).unwrap();
    let q = queue(close_order::TOPIC);
    let before = now(h).await;
    assert_eq!(
        put(&t, "t", 1, |e| e.throttle(HOUR)).await.unwrap(),
        EnqueueOutcome::Created
    );
    let after = now(h).await;
    let until = refused(put(&t, "t", 2, |e| e.throttle(HOUR)).await.unwrap());
    assert!(
        (before + 3_600_000..=after + 3_600_000).contains(&until),
        "{before} {until} {after}"
    );
    let d = fetch_one(h, &q, &req()).await;
    assert_eq!(unraw(&d.payload), 1);
    ack_all(h, &q, &[d]).await;
    assert_eq!(refused(put(&t, "t", 3, |e| e).await.unwrap()), until);
    assert!(t.job("t").await.unwrap().is_none(), "nothing written");

    let bulk = t
        .enqueue_bulk(vec![
            JobSpec::new(raw(4)).key("tb").throttle(HOUR),
            JobSpec::new(raw(5)).key("tb").throttle(HOUR),
        ])
        .await
        .unwrap();
    assert_eq!(bulk[0].outcome, EnqueueOutcome::Created);
    refused(bulk[1].outcome);
    assert_eq!(unraw(&info(&t, "tb").await.payload), 4);
    assert_eq!(t.cancel("tb").await.unwrap(), CancelOutcome::Cancelled);

    put(&t, "s", 1, |e| e.throttle(ms(300))).await.unwrap();
    let d = fetch_one(h, &q, &req()).await;
    ack_all(h, &q, &[d]).await;
    assert_eq!(until_accepted(&t, "s").await, EnqueueOutcome::Created);
    let d = fetch_one(h, &q, &req()).await;
    ack_all(h, &q, &[d]).await;
}

/// A topic's `max_delay`: an enqueue (single, bulk, `at`, a debounce) or a reschedule whose
/// due time is beyond the store's now + max_delay is refused with `DelayTooLong` before any
/// write; removing it lifts the limit; a zero is refused.
pub async fn max_delay_refuses_far_due_times<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic(close_order::TOPIC).unwrap();
    assert!(matches!(
        t.set_max_delay(Some(Duration::ZERO)).await,
        Err(Error::InvalidConfig(_))
    ));
    let ctl = t.set_max_delay(Some(HOUR)).await.unwrap();
    assert_eq!(ctl.max_delay, Some(HOUR));
    assert_eq!(t.control().await.unwrap().max_delay, Some(HOUR));

    let far = 2 * HOUR;
    match put(&t, "far", 1, |e| e.delay(far)).await {
        Err(Error::DelayTooLong {
            delay_ms,
            max_delay_ms,
            job,
        }) => {
            assert_eq!((delay_ms, max_delay_ms, job), (7_200_000, 3_600_000, 1));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        put(&t, "far", 1, |e| e.at(std::time::SystemTime::now() + far)).await,
        Err(Error::DelayTooLong { .. })
    ));
    assert!(matches!(
        put(&t, "far", 1, |e| e.debounce(far)).await,
        Err(Error::DelayTooLong { .. })
    ));
    assert!(t.job("far").await.unwrap().is_none(), "nothing written");
    // A bulk with one job too far writes none of them.
    let r = t
        .enqueue_bulk(vec![
            JobSpec::new(raw(1)).key("near1").delay(ms(1000)),
            JobSpec::new(raw(2)).key("far2").delay(far),
        ])
        .await;
    assert!(
        matches!(r, Err(Error::DelayTooLong { job: 2, .. })),
        "{r:?}"
    );
    assert!(t.job("near1").await.unwrap().is_none(), "nothing written");

    assert_eq!(
        put(&t, "near", 1, |e| e.delay(HOUR / 2)).await.unwrap(),
        EnqueueOutcome::Created
    );
    let due = info(&t, "near").await.due_ms;
    assert!(matches!(
        t.reschedule("near", NewDue::After(far)).await,
        Err(Error::DelayTooLong { .. })
    ));
    assert_eq!(info(&t, "near").await.due_ms, due, "not moved");
    assert!(matches!(
        t.reschedule("near", NewDue::After(HOUR / 4)).await,
        Ok(RescheduleOutcome::Rescheduled { .. })
    ));

    let ctl = t.set_max_delay(None).await.unwrap();
    assert_eq!(ctl.max_delay, None);
    assert_eq!(
        put(&t, "far", 1, |e| e.delay(far)).await.unwrap(),
        EnqueueOutcome::Created
    );
    assert_eq!(t.cancel("far").await.unwrap(), CancelOutcome::Cancelled);
    assert_eq!(t.cancel("near").await.unwrap(), CancelOutcome::Cancelled);
}

/// `unique_for` also starts its window when fetch ends the job: a lease that expires with no
/// attempt left (dead), and an expiry that comes before the job started.
pub async fn unique_for_starts_when_fetch_ends_the_job<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("uniq.fetch").unwrap();
    let q = queue("uniq.fetch");
    let window = Duration::from_secs(600);
    let r = FetchRequest {
        lease: ms(100),
        retry_policy: RetryPolicy::none(),
        ..req()
    };
    put(&t, "lost", 1, |e| e.unique_for(window)).await.unwrap();
    let d = fetch_one(h, &q, &r).await;
    until_store_time(h, d.lease_deadline_ms).await;
    // the next fetch recovers the lease: no retry left, dead
    dq_testkit::eventually("the lease is recovered", WAIT, || async {
        fetch(h, &q, &r).await;
        info(&t, "lost").await.state == JobState::Dead
    })
    .await;
    let until = refused(put(&t, "lost", 2, |e| e).await.unwrap());
    assert!(until >= d.lease_deadline_ms + 600_000, "{d:?} {until}");

    put(&t, "late", 3, |e| {
        e.expires_after(ms(50)).unique_for(window)
    })
    .await
    .unwrap();
    let expires = info(&t, "late").await.expires_ms.unwrap();
    until_store_time(h, expires).await;
    assert!(drain_due(h, &q).await.is_empty());
    assert!(t.job("late").await.unwrap().is_none(), "expired");
    let until = refused(put(&t, "late", 4, |e| e).await.unwrap());
    assert!(until > expires + 600_000 - 1, "{expires} {until}");
}
