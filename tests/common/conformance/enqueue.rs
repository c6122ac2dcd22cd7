//! Conformance bodies: enqueue by key, and replace.

use super::*;

/// Enqueueing an existing key creates no second job, whatever its state; retrying a keyed
/// bulk creates nothing new; a key may be reused once its job has ended.
pub async fn enqueue_by_key_is_idempotent<H: Harness>(h: &H) {
    let c = h.client().await;
    let q = queue(close_order::TOPIC);

    let first = c
        .enqueue::<close_order>(order(1))
        .key("order-1")
        .delay(HOUR)
        .await
        .unwrap();
    assert_eq!(first.outcome, EnqueueOutcome::Created);
    assert_eq!(first.key.as_str(), "order-1");
    for id in [1, 2, 3] {
        let again = c
            .enqueue::<close_order>(order(id))
            .key("order-1")
            .await
            .unwrap();
        assert_eq!(again.outcome, EnqueueOutcome::Exists(JobState::Scheduled));
    }
    let i = c.job::<close_order>("order-1").await.unwrap().unwrap();
    assert_eq!(*i.payload.as_ref().unwrap(), order(1));
    assert_eq!(i.state, JobState::Scheduled);

    // Due now: retries see it ready, and exactly one job is delivered.
    for _ in 0..3 {
        c.enqueue::<close_order>(order(2))
            .key("order-2")
            .await
            .unwrap();
    }
    let st = c.stats::<close_order>().await.unwrap();
    assert_eq!((st.scheduled, st.ready, st.enqueued), (1, 1, 2), "{st:?}");
    let jobs = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&jobs), ["order-2"]);
    // While it runs, the key still answers "exists".
    let running = c
        .enqueue::<close_order>(order(2))
        .key("order-2")
        .await
        .unwrap();
    assert_eq!(running.outcome, EnqueueOutcome::Exists(JobState::Active));
    ack_all(h, &q, &jobs).await;
    // Ended: the key makes a new job.
    let reused = c
        .enqueue::<close_order>(order(2))
        .key("order-2")
        .delay(HOUR)
        .await
        .unwrap();
    assert_eq!(reused.outcome, EnqueueOutcome::Created);

    // A keyed bulk, retried as a whole (as after an ambiguous error), and a bulk naming one
    // key twice.
    let t = c.topic(close_order::TOPIC).unwrap();
    let bulk = || {
        (0..10)
            .map(|i| JobSpec::new(raw(i)).key(format!("bulk-{i}")).delay(HOUR))
            .collect::<Vec<_>>()
    };
    let out = t.enqueue_bulk(bulk()).await.unwrap();
    assert!(out.iter().all(|e| e.outcome == EnqueueOutcome::Created));
    let out = t.enqueue_bulk(bulk()).await.unwrap();
    assert!(
        out.iter()
            .all(|e| e.outcome == EnqueueOutcome::Exists(JobState::Scheduled)),
        "{out:?}"
    );
    let twice = t
        .enqueue_bulk(vec![
            JobSpec::new(raw(1)).key("twice"),
            JobSpec::new(raw(2)).key("twice"),
        ])
        .await
        .unwrap();
    assert_eq!(
        twice.iter().map(|e| e.outcome).collect::<Vec<_>>(),
        [
            EnqueueOutcome::Created,
            EnqueueOutcome::Exists(JobState::Ready)
        ]
    );
    assert_eq!(unraw(&info(&t, "twice").await.payload), 1);
    let st = t.stats().await.unwrap();
    assert_eq!(
        (st.scheduled, st.ready, st.enqueued, st.succeeded),
        (12, 1, 14, 1),
        "{st:?}"
    );
}

/// `.replace()` swaps payload and due time of a scheduled, ready or retrying job in one step:
/// attempts and history start again, the old due time and any old ready hint are void, and
/// the job is delivered once, with the new payload, at the new time.
pub async fn replace_swaps_pending_jobs<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("replace.pending").unwrap();
    let q = queue("replace.pending");

    // Retry first: the only fetch that can deliver something before the others exist.
    t.enqueue(raw(1)).key("f").await.unwrap();
    let d = fetch_one(h, &q, &req()).await;
    let out = fail(h, &d, FailAction::Retry(HOUR), "partner down").await;
    assert!(matches!(out, Ok(FailOutcome::Retrying { .. })), "{out:?}");
    assert_eq!(info(&t, "f").await.state, JobState::Retry);

    // Scheduled, due in an hour → due in 200 ms with a new payload.
    t.enqueue(raw(1)).key("s").delay(HOUR).await.unwrap();
    // Ready now → scheduled in 300 ms: the ready hint it leaves behind must not deliver it.
    t.enqueue(raw(1)).key("r").await.unwrap();

    let before = now(h).await;
    let s = t
        .enqueue(raw(2))
        .key("s")
        .delay(ms(200))
        .replace()
        .await
        .unwrap();
    let r = t
        .enqueue(raw(3))
        .key("r")
        .delay(ms(300))
        .replace()
        .await
        .unwrap();
    let f = t.enqueue(raw(4)).key("f").replace().await.unwrap();
    let after = now(h).await;
    for e in [&s, &r, &f] {
        assert_eq!(e.outcome, EnqueueOutcome::Replaced, "{e:?}");
    }

    let si = info(&t, "s").await;
    assert_eq!((si.state, unraw(&si.payload)), (JobState::Scheduled, 2));
    assert!((before + 200..=after + 200).contains(&si.due_ms), "{si:?}");
    assert_eq!(
        si.due_ms,
        si.created_ms + 200,
        "a replaced job starts afresh"
    );
    let ri = info(&t, "r").await;
    assert_eq!((ri.state, unraw(&ri.payload)), (JobState::Scheduled, 3));
    assert!((before + 300..=after + 300).contains(&ri.due_ms), "{ri:?}");
    let fi = info(&t, "f").await;
    assert_eq!((fi.state, unraw(&fi.payload)), (JobState::Ready, 4));
    assert_eq!(fi.attempts, 0);
    assert!(fi.history.is_empty(), "history starts again: {fi:?}");

    let st = t.stats().await.unwrap();
    assert_eq!(
        (st.scheduled, st.ready, st.retry, st.enqueued),
        (2, 1, 0, 6),
        "{st:?}"
    );

    let mut seen: HashMap<String, Delivery> = HashMap::new();
    let deadline = Instant::now() + WAIT;
    while seen.len() < 3 {
        assert!(
            Instant::now() < deadline,
            "delivered only {:?}",
            seen.keys()
        );
        let reply = fetch(h, &q, &req()).await;
        for d in &reply.jobs {
            assert_not_early(d);
            assert_eq!(d.attempt, 1, "{d:?}");
            let prev = seen.insert(d.key.to_string(), d.clone());
            assert!(prev.is_none(), "{} delivered twice", d.key);
        }
        ack_all(h, &q, &reply.jobs).await;
    }
    assert_eq!(unraw(&seen["s"].payload), 2);
    assert_eq!(seen["s"].due_ms, si.due_ms);
    assert_eq!(unraw(&seen["r"].payload), 3);
    assert_eq!(seen["r"].due_ms, ri.due_ms);
    assert_eq!(unraw(&seen["f"].payload), 4);
    assert!(drain_due(h, &q).await.is_empty());
}

/// A running job is never replaced: `Exists(Active)`, and its delivery still owns it.
pub async fn replace_is_refused_while_running<H: Harness>(h: &H) {
    let c = h.client().await;
    let q = queue(close_order::TOPIC);
    c.enqueue::<close_order>(order(1))
        .key("order-7")
        .await
        .unwrap();
    let d = fetch_one(h, &q, &req()).await;
    let again = c
        .enqueue::<close_order>(order(2))
        .key("order-7")
        .delay(ms(100))
        .replace()
        .await
        .unwrap();
    assert_eq!(again.outcome, EnqueueOutcome::Exists(JobState::Active));
    let i = c.job::<close_order>("order-7").await.unwrap().unwrap();
    assert_eq!(i.state, JobState::Active);
    assert_eq!(i.attempts, 1);
    assert_eq!(*i.payload.as_ref().unwrap(), order(1));
    assert_eq!(
        i.lease_deadline,
        Some(dq::store::from_unix_ms(d.lease_deadline_ms))
    );
    assert_eq!(c.stats::<close_order>().await.unwrap().enqueued, 1);
    ack_all(h, &q, &[d]).await;
}

/// A dead job is replaced: it leaves the dead queue and runs again from attempt 1.
pub async fn replace_revives_a_dead_job<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("replace.dead").unwrap();
    let q = queue("replace.dead");
    t.enqueue(raw(1)).key("x").await.unwrap();
    let d = fetch_one(h, &q, &req()).await;
    assert!(matches!(
        fail(h, &d, FailAction::Bury, "fatal").await,
        Ok(FailOutcome::Buried { trimmed: 0 })
    ));
    assert_eq!(info(&t, "x").await.state, JobState::Dead);

    let e = t.enqueue(raw(5)).key("x").replace().await.unwrap();
    assert_eq!(e.outcome, EnqueueOutcome::Replaced);
    let i = info(&t, "x").await;
    assert_eq!(
        (i.state, i.attempts, unraw(&i.payload)),
        (JobState::Ready, 0, 5)
    );
    assert!(i.history.is_empty());
    assert!(
        t.list(JobState::Dead, dq::Page::first(10))
            .await
            .unwrap()
            .jobs
            .is_empty()
    );
    assert_eq!(t.stats().await.unwrap().dead, 0);

    let d = fetch_one(h, &q, &req()).await;
    assert_eq!((d.key.as_str(), d.attempt, unraw(&d.payload)), ("x", 1, 5));
    ack_all(h, &q, &[d]).await;
}
