//! Conformance bodies: a job's expiry ([`dq::Expiry`]). A job whose expiry comes before it
//! starts is never started — waiting to be due, ready, or waiting for a retry — but deleted
//! and counted (`expired_before_start`); a job that starts in time runs as any other; an
//! expiry that cannot be kept is refused before any write; a namespace that does not write
//! record format 4 yet refuses an expiring job with the typed error.

use super::*;
use dq::Expiry;
use dq::store::EXPIRING_FORMAT;

/// Jobs due now, due later, and one whose expiry is far: the two whose expiry passes before
/// any fetch are never delivered, only deleted and counted; the third runs with its expiry
/// shown on its info.
pub async fn an_expired_job_is_never_started<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("expiry.never").unwrap();
    let q = queue("expiry.never");
    t.enqueue(raw(1))
        .key("now")
        .expires_after(ms(150))
        .await
        .unwrap();
    t.enqueue(raw(2))
        .key("later")
        .delay(ms(50))
        .expires_after(ms(100))
        .await
        .unwrap();
    t.enqueue(raw(3))
        .key("far")
        .expires_after(Duration::from_secs(3600))
        .await
        .unwrap();
    let now_i = info(&t, "now").await;
    assert_eq!(now_i.expires_ms, Some(now_i.due_ms + 150), "{now_i:?}");
    let later = info(&t, "later").await;
    assert_eq!(later.expires_ms, Some(later.due_ms + 100), "{later:?}");
    let far = info(&t, "far").await;
    assert_eq!(far.expires_ms, Some(far.due_ms + 3_600_000));

    until_store_time(h, later.expires_ms.unwrap().max(now_i.expires_ms.unwrap())).await;
    let delivered = drain_due(h, &q).await;
    assert_eq!(keys_of(&delivered), vec!["far".to_string()]);
    for key in ["now", "later"] {
        assert!(t.job(key).await.unwrap().is_none(), "{key} is deleted");
    }
    let st = t.stats().await.unwrap();
    assert_eq!(st.expired_before_start, 2, "{st:?}");
    assert_eq!(
        (st.scheduled, st.ready, st.active, st.retry, st.dead),
        (0, 0, 0, 0, 0)
    );
    assert_eq!(st.succeeded, 1);
}

/// A job that failed and waits for a retry due after its expiry is dropped when the retry
/// comes due, never started again; one whose retry comes before its expiry runs again.
pub async fn a_job_waiting_for_a_retry_expires<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("expiry.retry").unwrap();
    let q = queue("expiry.retry");
    t.enqueue(raw(1))
        .key("late-retry")
        .expires_after(ms(200))
        .await
        .unwrap();
    t.enqueue(raw(2))
        .key("early-retry")
        .expires_after(Duration::from_secs(3600))
        .await
        .unwrap();
    let first = drain_due_unacked(h, &q, 2).await;
    for d in &first {
        assert_eq!(d.attempt, 1);
        let delay = if d.key.as_str() == "late-retry" {
            ms(400)
        } else {
            ms(50)
        };
        let out = fail(h, d, FailAction::Retry(delay), "boom").await.unwrap();
        assert!(matches!(out, FailOutcome::Retrying { .. }), "{out:?}");
    }
    let late = info(&t, "late-retry").await;
    assert_eq!(late.state, JobState::Retry);
    assert!(late.due_ms > late.expires_ms.unwrap(), "{late:?}");
    until_store_time(h, late.due_ms).await;
    let again = drain_due(h, &q).await;
    assert_eq!(keys_of(&again), vec!["early-retry".to_string()]);
    assert_eq!(again[0].attempt, 2);
    assert!(t.job("late-retry").await.unwrap().is_none());
    let st = t.stats().await.unwrap();
    assert_eq!((st.expired_before_start, st.retry, st.succeeded), (1, 0, 1));
}

/// A running job is never dropped by its expiry: a second ready hint of it (left by a
/// replace), met after the expiry while the job runs, leaves it running, and its ack succeeds.
pub async fn a_running_job_is_not_dropped_by_its_expiry<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("expiry.running").unwrap();
    let q = queue("expiry.running");
    t.enqueue(raw(1))
        .key("k")
        .expires_after(ms(200))
        .await
        .unwrap();
    t.enqueue(raw(2))
        .key("k")
        .replace()
        .expires_after(ms(200))
        .await
        .unwrap();
    let d = fetch_one(h, &q, &req()).await;
    let running = info(&t, "k").await;
    assert_eq!(running.state, JobState::Active);
    until_store_time(h, running.expires_ms.unwrap()).await;
    let reply = fetch(h, &q, &req()).await;
    assert!(reply.jobs.is_empty(), "{reply:?}");
    assert_eq!(info(&t, "k").await.state, JobState::Active);
    ack_all(h, &q, &[d]).await;
    let st = t.stats().await.unwrap();
    assert_eq!((st.expired_before_start, st.succeeded), (0, 1), "{st:?}");
}

/// A dead job requeued after its expiry runs: the requeue clears the expiry.
pub async fn a_requeued_dead_job_runs_after_its_expiry<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("expiry.requeue").unwrap();
    let q = queue("expiry.requeue");
    t.enqueue(raw(1))
        .key("d")
        .expires_after(ms(150))
        .await
        .unwrap();
    let d = fetch_one(h, &q, &req()).await;
    fail(h, &d, FailAction::Bury, "broken").await.unwrap();
    let dead = info(&t, "d").await;
    until_store_time(h, dead.expires_ms.unwrap()).await;
    assert_eq!(t.requeue_dead(&["d"]).await.unwrap(), 1);
    assert_eq!(info(&t, "d").await.expires_ms, None);
    let again = fetch_one(h, &q, &req()).await;
    assert_eq!(again.key.as_str(), "d");
    ack_all(h, &q, &[again]).await;
    assert_eq!(t.stats().await.unwrap().expired_before_start, 0);
}

/// Leases `n` due jobs without acking them (fails after [`WAIT`]).
async fn drain_due_unacked<H: Harness>(h: &H, q: &Queue, n: usize) -> Vec<Delivery> {
    let mut all: Vec<Delivery> = Vec::new();
    let deadline = Instant::now() + WAIT;
    for _ in 0..100_000 {
        if all.len() >= n {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {} of {n} jobs leased",
            all.len()
        );
        all.extend(fetch(h, q, &req_max(n - all.len())).await.jobs);
    }
    assert_eq!(all.len(), n);
    all
}

/// Expiries that cannot be kept are refused with `InvalidExpiry` before any write, single
/// and in bulk (naming the item); nothing is enqueued.
pub async fn an_expiry_that_cannot_be_kept_is_refused<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("expiry.bad").unwrap();
    let past = std::time::SystemTime::now() - Duration::from_secs(60);
    let soon = std::time::SystemTime::now() + Duration::from_secs(60);
    let an_hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    let cases = [
        t.enqueue(raw(1)).key("zero").expires_after(ms(0)).await,
        // counted from the due time asked for: an hour ago + 10 min has passed
        t.enqueue(raw(1))
            .key("late")
            .at(an_hour_ago)
            .expires_after(Duration::from_secs(600))
            .await,
        t.enqueue(raw(1)).key("past").expires_at(past).await,
        t.enqueue(raw(1))
            .key("before-due")
            .delay(Duration::from_secs(3600))
            .expires_at(soon)
            .await,
        t.enqueue(raw(1))
            .key("at-due")
            .at(soon)
            .expires_at(soon)
            .await,
    ];
    for r in cases {
        assert!(matches!(r, Err(Error::InvalidExpiry(_))), "{r:?}");
    }
    let bulk = t
        .enqueue_bulk(vec![
            JobSpec::new(raw(1)).key("ok"),
            JobSpec::new(raw(2)).key("bad").at(soon).expires_at(soon),
        ])
        .await;
    match bulk {
        Err(Error::BulkItem { index, key, source }) => {
            assert_eq!((index, key.as_deref()), (1, Some("bad")));
            assert!(matches!(*source, Error::InvalidExpiry(_)), "{source:?}");
        }
        other => panic!("a bad expiry in a bulk is its item's error: {other:?}"),
    }
    let st = t.stats().await.unwrap();
    assert_eq!((st.enqueued, st.scheduled, st.ready), (0, 0, 0), "{st:?}");
}

/// A namespace that writes format 3 (an older dq is live) refuses an expiring job with
/// `NeedsFormat`, writing nothing; jobs without expiry are stored as before; once the level
/// is 4, the same call succeeds.
pub async fn an_expiry_needs_format_4<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("expiry.level").unwrap();
    assert_eq!(h.store().formats().set_write(3), 3);
    let r = t.enqueue(raw(1)).key("e").expires_after(ms(1000)).await;
    match r {
        Err(Error::NeedsFormat { needs, level, .. }) => {
            assert_eq!((needs, level), (EXPIRING_FORMAT, 3));
        }
        other => panic!("an expiry at level 3 is refused: {other:?}"),
    }
    assert!(t.job("e").await.unwrap().is_none());
    t.enqueue(raw(2)).key("plain").await.unwrap();
    assert_eq!(info(&t, "plain").await.expires_ms, None);
    assert_eq!(
        h.store().formats().set_write(EXPIRING_FORMAT),
        EXPIRING_FORMAT
    );
    t.enqueue(raw(1))
        .key("e")
        .expires_after(ms(1000))
        .await
        .unwrap();
    let e = info(&t, "e").await;
    assert_eq!(e.expires_ms, Some(e.due_ms + 1000));
    // and what a store is given directly is refused the same way
    assert_eq!(h.store().formats().set_write(3), 3);
    let job = NewJob {
        key: jk("direct"),
        payload: raw(3),
        due: Due::Now,
        replace: false,
        expires: Some(Expiry::AfterDue(ms(10))),
        priority: Default::default(),
        window: None,
        group: None,
        batch: None,
    };
    let r = h
        .store()
        .enqueue(&queue("expiry.level"), &[job], EnqueueCall::new())
        .await;
    assert!(matches!(r, Err(Error::NeedsFormat { .. })), "{r:?}");
}
