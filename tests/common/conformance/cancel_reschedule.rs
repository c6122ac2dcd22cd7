//! Conformance bodies: cancel and reschedule, from every state.

use super::*;

/// Cancel from every state: scheduled, ready and retry are cancelled and never delivered;
/// active answers `CancelRequested` (it runs on until its worker learns it), dead `Dead`
/// (untouched); a missing or already cancelled key
/// `NotFound`.
pub async fn cancel_from_every_state<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic(close_order::TOPIC).unwrap();
    let q = queue(close_order::TOPIC);

    for k in ["f", "a", "d"] {
        t.enqueue(raw(0)).key(k).await.unwrap();
    }
    let jobs = fetch(h, &q, &req_max(3)).await.jobs;
    assert_eq!(keys_of(&jobs), ["f", "a", "d"]);
    let retry_at = match fail(h, &jobs[0], FailAction::Retry(ms(150)), "e").await {
        Ok(FailOutcome::Retrying { at_ms }) => at_ms,
        other => panic!("{other:?}"),
    };
    fail(h, &jobs[2], FailAction::Bury, "e").await.unwrap();
    t.enqueue(raw(0)).key("s").delay(ms(200)).await.unwrap();
    t.enqueue(raw(0)).key("r").await.unwrap();
    let s_due = info(&t, "s").await.due_ms;

    assert_eq!(t.cancel("s").await.unwrap(), CancelOutcome::Cancelled);
    assert_eq!(t.cancel("r").await.unwrap(), CancelOutcome::Cancelled);
    assert_eq!(
        c.cancel::<close_order>("f").await.unwrap(),
        CancelOutcome::Cancelled
    );
    assert_eq!(t.cancel("a").await.unwrap(), CancelOutcome::CancelRequested);
    assert_eq!(t.cancel("d").await.unwrap(), CancelOutcome::Dead);
    assert_eq!(t.cancel("missing").await.unwrap(), CancelOutcome::NotFound);
    assert_eq!(t.cancel("s").await.unwrap(), CancelOutcome::NotFound);
    for k in ["s", "r", "f"] {
        assert!(t.job(k).await.unwrap().is_none(), "{k} still exists");
    }
    assert_eq!(info(&t, "a").await.state, JobState::Active);
    assert_eq!(info(&t, "d").await.state, JobState::Dead);
    let st = t.stats().await.unwrap();
    assert_eq!(
        (
            st.scheduled,
            st.ready,
            st.retry,
            st.active,
            st.dead,
            st.cancelled
        ),
        (0, 0, 0, 1, 1, 3),
        "{st:?}"
    );

    // Past every cancelled job's due time, nothing is delivered.
    until_store_time(h, s_due.max(retry_at) + 20).await;
    let reply = fetch(h, &q, &req()).await;
    assert!(reply.jobs.is_empty(), "cancelled jobs delivered: {reply:?}");
    assert!(reply.next_in.is_some_and(|n| n > ms(1000)), "{reply:?}");
    // The running job still owns its lease.
    ack_all(h, &q, &jobs[1..2]).await;
}

/// Reschedule from every state. Scheduled, ready and retry jobs get the new time — `At` a time,
/// `After` a delay, `Shift` by ± ms (not before now) — and are delivered once, at that time,
/// keeping their attempts. Active answers `Running`, dead `Dead`, missing `NotFound`.
pub async fn reschedule_from_every_state<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic(close_order::TOPIC).unwrap();
    let q = queue(close_order::TOPIC);

    for k in ["f", "a", "d"] {
        t.enqueue(raw(0)).key(k).await.unwrap();
    }
    let jobs = fetch(h, &q, &req_max(3)).await.jobs;
    assert_eq!(keys_of(&jobs), ["f", "a", "d"]);
    fail(h, &jobs[0], FailAction::Retry(HOUR), "e")
        .await
        .unwrap();
    fail(h, &jobs[2], FailAction::Bury, "e").await.unwrap();
    for (k, delay) in [
        ("s", HOUR),
        ("t", HOUR),
        ("u", Duration::from_secs(10)),
        ("v", ms(3000)),
        ("w", HOUR),
    ] {
        t.enqueue(raw(0)).key(k).delay(delay).await.unwrap();
    }
    t.enqueue(raw(0)).key("r").await.unwrap();

    let mut want: HashMap<&str, u64> = HashMap::new();
    let expect_due = |out: RescheduleOutcome| match out {
        RescheduleOutcome::Rescheduled { due_ms } => due_ms,
        other => panic!("{other:?}"),
    };

    // After: a delay from now.
    let before = now(h).await;
    let due = expect_due(t.reschedule("s", NewDue::After(ms(200))).await.unwrap());
    let after = now(h).await;
    assert!((before + 200..=after + 200).contains(&due), "{due}");
    want.insert("s", due);
    // At: an absolute time (Unix ms, the store's clock).
    // Far enough ahead that it is still in the future when the call lands on a loaded
    // machine (a due time in the past is moved up to now).
    let target = now(h).await + 3000;
    let due = expect_due(
        c.reschedule::<close_order>("t", NewDue::At(dq::store::from_unix_ms(target)))
            .await
            .unwrap(),
    );
    assert_eq!(due, target);
    want.insert("t", due);
    // Shift earlier (the speed-up card) and later.
    let old = info(&t, "u").await.due_ms;
    let before = now(h).await;
    let due = expect_due(t.reschedule("u", NewDue::Shift(-9_750)).await.unwrap());
    assert!(
        due == old - 9_750 || (old - 9_750 < due && due >= before),
        "{due}"
    );
    want.insert("u", due);
    let old = info(&t, "v").await.due_ms;
    let due = expect_due(t.reschedule("v", NewDue::Shift(300)).await.unwrap());
    assert_eq!(due, old + 300);
    want.insert("v", due);
    // Shift into the past: due now, never before now.
    let before = now(h).await;
    let due = expect_due(
        t.reschedule("w", NewDue::Shift(-2 * 3_600_000))
            .await
            .unwrap(),
    );
    let after = now(h).await;
    assert!((before..=after).contains(&due), "{due}");
    assert_eq!(info(&t, "w").await.state, JobState::Ready);
    want.insert("w", due);
    // Ready → later: its old ready hint must not deliver it early.
    let due = expect_due(t.reschedule("r", NewDue::After(ms(250))).await.unwrap());
    assert_eq!(info(&t, "r").await.state, JobState::Scheduled);
    want.insert("r", due);
    // Retry → now: keeps its attempt count.
    let due = expect_due(
        t.reschedule("f", NewDue::At(dq::store::from_unix_ms(0)))
            .await
            .unwrap(),
    );
    let fi = info(&t, "f").await;
    assert_eq!(
        (fi.state, fi.attempts, fi.due_ms),
        (JobState::Ready, 1, due)
    );
    assert_eq!(fi.history.len(), 1);
    want.insert("f", due);

    assert_eq!(
        t.reschedule("a", NewDue::After(ms(1))).await.unwrap(),
        RescheduleOutcome::Running
    );
    assert_eq!(
        t.reschedule("d", NewDue::After(ms(1))).await.unwrap(),
        RescheduleOutcome::Dead
    );
    assert_eq!(
        t.reschedule("missing", NewDue::Shift(5)).await.unwrap(),
        RescheduleOutcome::NotFound
    );
    for (k, due) in &want {
        assert_eq!(info(&t, k).await.due_ms, *due, "{k}");
    }

    let mut seen: HashMap<String, Delivery> = HashMap::new();
    let deadline = Instant::now() + WAIT;
    while seen.len() < want.len() {
        assert!(
            Instant::now() < deadline,
            "delivered only {:?}",
            seen.keys()
        );
        let reply = fetch(h, &q, &req()).await;
        for d in &reply.jobs {
            assert_not_early(d);
            assert_eq!(d.due_ms, want[d.key.as_str()], "{d:?}");
            let attempt = if d.key.as_str() == "f" { 2 } else { 1 };
            assert_eq!(d.attempt, attempt, "{d:?}");
            assert!(
                seen.insert(d.key.to_string(), d.clone()).is_none(),
                "{d:?} twice"
            );
        }
        ack_all(h, &q, &reply.jobs).await;
    }
    assert!(drain_due(h, &q).await.is_empty());
    assert_eq!(info(&t, "a").await.state, JobState::Active);
    assert_eq!(info(&t, "d").await.state, JobState::Dead);
    ack_all(h, &q, &jobs[1..2]).await;
}
