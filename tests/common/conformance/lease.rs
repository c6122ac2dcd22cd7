//! Conformance bodies: leases and tokens: expiry, extension, stale tokens, release.

use super::*;

/// A lease that expires is recovered by the next fetch as a failed attempt ("lease expired"),
/// retried per the fetch's retry policy, and after the last attempt the job is dead.
pub async fn expired_lease_is_a_failed_attempt<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("lease.expiry").unwrap();
    let q = queue("lease.expiry");
    let r = FetchRequest {
        lease: ms(100),
        retry_policy: RetryPolicy::fixed(ms(0), 2).unwrap(),
        ..req()
    };
    t.enqueue(raw(1)).key("k").await.unwrap();
    let mut prev = fetch_one(h, &q, &r).await;
    assert_eq!(
        (prev.attempt, prev.lease_deadline_ms),
        (1, prev.leased_ms + 100)
    );
    for attempt in 2..=3 {
        let d = fetch_one(h, &q, &r).await;
        assert_eq!((d.key.as_str(), d.attempt), ("k", attempt));
        assert!(
            d.leased_ms > prev.lease_deadline_ms,
            "lease recovered at {} before its deadline {}",
            d.leased_ms,
            prev.lease_deadline_ms
        );
        assert_ne!(d.token, prev.token);
        let i = info(&t, "k").await;
        assert_eq!(i.history.len() as u32, attempt - 1);
        let last = i.history.last().unwrap();
        assert_eq!(
            (last.attempt, last.outcome, last.error.as_str()),
            (attempt - 1, AttemptOutcome::LeaseExpired, "lease expired")
        );
        assert!(last.at_ms > prev.lease_deadline_ms);
        // The old delivery is fenced off.
        let stale = (prev.key.clone(), prev.token);
        assert_eq!(
            h.store()
                .ack(
                    &q,
                    "",
                    &dq::store::Success::of(std::slice::from_ref(&stale))
                )
                .await
                .unwrap(),
            [AckOutcome::Stale]
        );
        assert!(matches!(
            fail(h, &prev, FailAction::Retry(ms(0)), "late").await,
            Err(Error::StaleToken { .. })
        ));
        assert_eq!(
            h.store().extend(&q, &[stale], LONG_LEASE).await.unwrap(),
            [Extended::Lost]
        );
        prev = d;
    }
    let reply = dq_testkit::eventually_some("the last lease expires", WAIT, || async {
        let reply = fetch(h, &q, &r).await;
        assert!(reply.jobs.is_empty(), "{reply:?}");
        (!reply.buried.is_empty()).then_some(reply)
    })
    .await;
    assert_eq!(reply.buried, [jk("k")]);
    let i = info(&t, "k").await;
    assert_eq!((i.state, i.attempts), (JobState::Dead, 3));
    assert!(i.died_ms.unwrap() > prev.lease_deadline_ms);
    let h3: Vec<_> = i
        .history
        .iter()
        .map(|a| (a.attempt, a.outcome, a.error.as_str()))
        .collect();
    assert_eq!(
        h3,
        (1..=3)
            .map(|a| (a, AttemptOutcome::LeaseExpired, "lease expired"))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        h.store()
            .ack(
                &q,
                "",
                &dq::store::Success::of(&[dq::store::lease_of(&prev)])
            )
            .await
            .unwrap(),
        [AckOutcome::Stale]
    );
    let st = t.stats().await.unwrap();
    assert_eq!(
        (st.expired, st.retried, st.buried, st.dead, st.active),
        (3, 2, 1, 1, 0),
        "{st:?}"
    );
}

/// Extending a lease keeps the job past its first deadline; a stale or unknown lease is not
/// extended.
pub async fn extend_keeps_the_lease<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("lease.extend").unwrap();
    let q = queue("lease.extend");
    let r = FetchRequest {
        lease: ms(100),
        ..req()
    };
    t.enqueue(raw(1)).key("k").await.unwrap();
    let d = fetch_one(h, &q, &r).await;
    let before = now(h).await;
    let out = h
        .store()
        .extend(
            &q,
            &[
                dq::store::lease_of(&d),
                (d.key.clone(), d.token + 1),
                (jk("missing"), d.token),
            ],
            LONG_LEASE,
        )
        .await
        .unwrap();
    assert_eq!(out, [Extended::Held, Extended::Lost, Extended::Lost]);
    let deadline = info(&t, "k").await.lease_deadline_ms.unwrap();
    assert!(deadline >= before + 30_000, "{deadline}");

    until_store_time(h, d.lease_deadline_ms + 20).await;
    let reply = fetch(h, &q, &r).await;
    assert!(
        reply.jobs.is_empty() && reply.buried.is_empty(),
        "{reply:?}"
    );
    let i = info(&t, "k").await;
    assert_eq!((i.state, i.attempts), (JobState::Active, 1));
    assert_eq!(t.stats().await.unwrap().expired, 0);
    ack_all(h, &q, &[d]).await;
}

/// Ack, fail, extend and release with a stale token are refused and change nothing; a repeated
/// ack is harmless; a batch ack reports each job on its own.
pub async fn stale_tokens_change_nothing<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("tokens").unwrap();
    let q = queue("tokens");
    t.enqueue(raw(1)).key("k").await.unwrap();
    let d1 = fetch_one(h, &q, &req()).await;
    assert_eq!(
        h.store()
            .release(&q, &[dq::store::lease_of(&d1)])
            .await
            .unwrap(),
        [true]
    );
    let d2 = fetch_one(h, &q, &req()).await;
    assert_eq!((d2.key.as_str(), d2.attempt), ("k", 1));
    assert_ne!(d1.token, d2.token);

    let snapshot = info(&t, "k").await;
    let stale = dq::store::lease_of(&d1);
    assert_eq!(
        h.store()
            .ack(
                &q,
                "",
                &dq::store::Success::of(std::slice::from_ref(&stale))
            )
            .await
            .unwrap(),
        [AckOutcome::Stale]
    );
    for action in [
        FailAction::Retry(ms(0)),
        FailAction::Defer(ms(0)),
        FailAction::Bury,
    ] {
        match fail(h, &d1, action, "stale").await {
            Err(Error::StaleToken { key }) => assert_eq!(key, "k"),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        h.store()
            .extend(&q, std::slice::from_ref(&stale), HOUR)
            .await
            .unwrap(),
        [Extended::Lost]
    );
    assert_eq!(h.store().release(&q, &[stale]).await.unwrap(), [false]);
    let i = info(&t, "k").await;
    assert_eq!(
        (
            i.state,
            i.attempts,
            i.due_ms,
            i.lease_deadline_ms,
            i.died_ms
        ),
        (
            snapshot.state,
            snapshot.attempts,
            snapshot.due_ms,
            snapshot.lease_deadline_ms,
            snapshot.died_ms,
        )
    );
    assert!(i.history.is_empty());
    let st = t.stats().await.unwrap();
    assert_eq!(
        (st.active, st.succeeded, st.retried, st.buried),
        (1, 0, 0, 0),
        "{st:?}"
    );

    // The current delivery still owns it; acking twice is harmless.
    let lease = dq::store::lease_of(&d2);
    assert_eq!(
        h.store()
            .ack(
                &q,
                "",
                &dq::store::Success::of(std::slice::from_ref(&lease))
            )
            .await
            .unwrap(),
        [AckOutcome::Acked]
    );
    assert_eq!(
        h.store()
            .ack(
                &q,
                "",
                &dq::store::Success::of(std::slice::from_ref(&lease))
            )
            .await
            .unwrap(),
        [AckOutcome::Gone]
    );
    assert_eq!(
        fail(h, &d2, FailAction::Retry(ms(0)), "late")
            .await
            .unwrap(),
        FailOutcome::Gone
    );
    assert_eq!(
        h.store()
            .extend(&q, std::slice::from_ref(&lease), HOUR)
            .await
            .unwrap(),
        [Extended::Lost]
    );
    assert_eq!(h.store().release(&q, &[lease]).await.unwrap(), [false]);

    // A batch: acked, stale and gone side by side.
    t.enqueue(raw(1)).key("x").await.unwrap();
    t.enqueue(raw(1)).key("y").await.unwrap();
    let jobs = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&jobs), ["x", "y"]);
    let out = h
        .store()
        .ack(
            &q,
            "",
            &dq::store::Success::of(&[
                dq::store::lease_of(&jobs[0]),
                (jobs[1].key.clone(), jobs[1].token ^ 0xFFFF),
                (jk("never"), 1),
            ]),
        )
        .await
        .unwrap();
    assert_eq!(
        out,
        [AckOutcome::Acked, AckOutcome::Stale, AckOutcome::Gone]
    );
    assert_eq!(info(&t, "y").await.state, JobState::Active);
    ack_all(h, &q, &jobs[1..]).await;
    assert_eq!(t.stats().await.unwrap().succeeded, 3);
}

/// Release gives the attempt back and puts the job at the front of ready.
pub async fn release_gives_the_attempt_back_at_the_front<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("release").unwrap();
    let q = queue("release");
    for k in ["a", "b", "c"] {
        t.enqueue(raw(1)).key(k).await.unwrap();
    }
    let a = fetch_one(h, &q, &req()).await;
    assert_eq!((a.key.as_str(), a.attempt), ("a", 1));
    assert_eq!(
        h.store()
            .release(&q, &[dq::store::lease_of(&a)])
            .await
            .unwrap(),
        [true]
    );
    let i = info(&t, "a").await;
    assert_eq!((i.state, i.attempts), (JobState::Ready, 0));
    assert!(i.history.is_empty(), "a release is not a failure");
    let st = t.stats().await.unwrap();
    assert_eq!((st.ready, st.active, st.retried), (3, 0, 0), "{st:?}");

    let jobs = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&jobs), ["a", "b", "c"], "released job first");
    assert!(jobs.iter().all(|d| d.attempt == 1));

    // After a failed attempt, a release keeps the earlier attempt counted.
    let a = &jobs[0];
    fail(h, a, FailAction::Retry(ms(0)), "once").await.unwrap();
    ack_all(h, &q, &jobs[1..]).await;
    let a2 = fetch_one(h, &q, &req()).await;
    assert_eq!(a2.attempt, 2);
    h.store()
        .release(&q, &[dq::store::lease_of(&a2)])
        .await
        .unwrap();
    assert_eq!(info(&t, "a").await.attempts, 1);
    let a3 = fetch_one(h, &q, &req()).await;
    assert_eq!((a3.key.as_str(), a3.attempt), ("a", 2));
    ack_all(h, &q, &[a3]).await;
}

/// Several jobs released in one call stand at the front of ready in the order given.
pub async fn release_of_many_keeps_their_order<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("release.many").unwrap();
    let q = queue("release.many");
    for k in ["a", "b", "c", "d"] {
        t.enqueue(raw(1)).key(k).await.unwrap();
    }
    let jobs = fetch(h, &q, &req_max(3)).await.jobs;
    assert_eq!(keys_of(&jobs), ["a", "b", "c"]);
    let leases: Vec<_> = jobs.iter().map(dq::store::lease_of).collect();
    assert_eq!(
        h.store().release(&q, &leases).await.unwrap(),
        [true, true, true]
    );
    let again = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&again), ["a", "b", "c", "d"]);
    ack_all(h, &q, &again).await;
}
