//! Conformance bodies: retried calls and their receipts: a retry of an applied enqueue or fetch has no second effect.

use super::*;

/// Guarantee 6 for enqueue: a retry of a call whose earlier try was applied (its reply lost)
/// writes nothing — even after the job has run and gone, and even with `replace` — while a
/// retry of a call that was never applied stores its jobs. Receipts are per call, not per key:
/// a new call for a key whose job has ended creates it again.
pub async fn retried_enqueue_finds_its_receipt<H: Harness>(h: &H) {
    use EnqueueOutcome::{Created, Ended, Exists, Replaced};
    let store = h.store();
    let q = queue("receipts");
    let job = |k: &str, replace: bool| NewJob {
        key: jk(k),
        payload: raw(1),
        due: Due::Now,
        replace,
        expires: None,
        priority: Default::default(),
        window: None,
        group: None,
        batch: None,
    };
    let pair = [job("r-1", false), job("r-2", false)];

    // Applied once; a retry while the jobs wait writes nothing and reports them as this
    // call's: created by it, not someone else's job holding the key.
    let call = EnqueueCall::new();
    let out = store.enqueue(&q, &pair, call).await.unwrap();
    assert_eq!(out, [Created, Created]);
    let out = store.enqueue(&q, &pair, call.retried()).await.unwrap();
    assert_eq!(out, [Created, Created]);

    // The jobs run and are acked; a late retry does not bring them back.
    let jobs = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&jobs), ["r-1", "r-2"]);
    ack_all(h, &q, &jobs).await;
    let out = store.enqueue(&q, &pair, call.retried()).await.unwrap();
    assert_eq!(out, [Ended, Ended]);

    // A replace is not applied twice: the retry leaves the job the first try stored (running
    // now), and reports it as this call's.
    let replace = EnqueueCall::new();
    let r3 = [job("r-3", true)];
    assert_eq!(store.enqueue(&q, &r3, replace).await.unwrap(), [Created]);
    let d = &fetch(h, &q, &req()).await.jobs[0];
    let out = store.enqueue(&q, &r3, replace.retried()).await.unwrap();
    assert_eq!(out, [Created]);
    ack_all(h, &q, std::slice::from_ref(d)).await;

    // A retry of a call whose first try never reached the store stores the job.
    let lost = EnqueueCall::new();
    let r4 = [job("r-4", false)];
    assert_eq!(
        store.enqueue(&q, &r4, lost.retried()).await.unwrap(),
        [Created]
    );
    // A call that stored nothing leaves no receipt: its retry creates a job that has
    // ended since (one effect in all).
    let noop = EnqueueCall::new();
    assert_eq!(
        store.enqueue(&q, &r4, noop).await.unwrap(),
        [Exists(JobState::Ready)]
    );
    let d = fetch(h, &q, &req()).await.jobs;
    ack_all(h, &q, &d).await;
    assert_eq!(
        store.enqueue(&q, &r4, noop.retried()).await.unwrap(),
        [Created]
    );

    // A new call for a key whose job has ended creates it again.
    let again = store
        .enqueue(&q, &pair[..1], EnqueueCall::new())
        .await
        .unwrap();
    assert_eq!(again, [Created]);

    let jobs = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&jobs), ["r-4", "r-1"]);
    ack_all(h, &q, &jobs).await;
    let st = h.store().stats(&q).await.unwrap();
    assert_eq!((st.enqueued, st.succeeded), (6, 6), "{st:?}");

    // A call that stored some of its jobs: the retry tells its own (created, replaced) from
    // the jobs others hold the keys with.
    let q = queue("receipts.mixed");
    let theirs = [job("m-theirs", false), job("m-replaced", false)];
    store
        .enqueue(&q, &theirs, EnqueueCall::new())
        .await
        .unwrap();
    let mixed = [
        job("m-new", false),
        job("m-theirs", false),
        job("m-replaced", true),
    ];
    let call = EnqueueCall::new();
    let first = store.enqueue(&q, &mixed, call).await.unwrap();
    assert_eq!(first, [Created, Exists(JobState::Ready), Replaced]);
    let out = store.enqueue(&q, &mixed, call.retried()).await.unwrap();
    assert_eq!(out, first);
    // Its jobs run and end; others enqueue the keys again: the retry claims none of them,
    // whether stored in the same millisecond (another payload) or later (the same payload).
    let jobs = fetch(h, &q, &req()).await.jobs;
    assert_eq!(jobs.len(), 3);
    ack_all(h, &q, &jobs).await;
    let other = NewJob {
        payload: raw(2),
        ..job("m-new", false)
    };
    store
        .enqueue(&q, &[other], EnqueueCall::new())
        .await
        .unwrap();
    let stored_at = store.now_ms().await.unwrap();
    dq_testkit::eventually("the store's clock moved", WAIT, || async {
        store.now_ms().await.unwrap() > stored_at
    })
    .await;
    store
        .enqueue(&q, &[job("m-replaced", false)], EnqueueCall::new())
        .await
        .unwrap();
    let out = store.enqueue(&q, &mixed, call.retried()).await.unwrap();
    assert_eq!(
        out,
        [Exists(JobState::Ready), Ended, Exists(JobState::Ready)]
    );
}

/// Guarantee for fetch: a fetch whose reply was lost leased its jobs to nobody. A retry of the
/// same call gets them back under fresh tokens and a fresh lease, with no attempt spent, and
/// the lost tokens are fenced off; a job acked since does not come back; room left is filled
/// as by any fetch; a try that arrives after a later try of its call does nothing; a receipt
/// expires with the lease it recorded (then a retry is an ordinary fetch).
pub async fn retried_fetch_finds_its_receipt<H: Harness>(h: &H) {
    let store = h.store();
    let q = queue("fetch.receipts");
    let t = h.client().await.topic("fetch.receipts").unwrap();
    for k in ["f-1", "f-2", "f-3"] {
        t.enqueue(raw(1)).key(k).await.unwrap();
    }
    let r = FetchRequest {
        max_jobs: 2,
        ..req()
    };
    let retry = |r: &FetchRequest| FetchRequest {
        call: r.call.retried(),
        ..r.clone()
    };

    // The first try leases f-1 and f-2; its reply is "lost". The retry gets them back.
    let lost = fetch(h, &q, &r).await.jobs;
    assert_eq!(keys_of(&lost), ["f-1", "f-2"]);
    let r1 = retry(&r);
    let again = fetch(h, &q, &r1).await.jobs;
    assert_eq!(keys_of(&again), ["f-1", "f-2"], "the same jobs, in order");
    for (old, new) in lost.iter().zip(&again) {
        assert_ne!(old.token, new.token, "a fresh token");
        assert_eq!(new.attempt, 1, "no attempt spent on a lost reply");
        assert!(new.lease_deadline_ms >= old.lease_deadline_ms);
        assert_eq!(new.payload, old.payload);
        let i = info(&t, new.key.as_str()).await;
        assert_eq!((i.state, i.attempts), (JobState::Active, 1));
        assert!(i.history.is_empty(), "{:?}", i.history);
    }
    // The lost tokens own nothing any more.
    let stale: Vec<_> = lost.iter().map(dq::store::lease_of).collect();
    assert_eq!(
        store.extend(&q, &stale, LONG_LEASE).await.unwrap(),
        [Extended::Lost, Extended::Lost]
    );
    assert_eq!(
        store
            .ack(&q, "", &dq::store::Success::of(&stale))
            .await
            .unwrap(),
        [AckOutcome::Stale, AckOutcome::Stale]
    );
    // The first try arriving late (held up on an old connection) does nothing.
    let late = fetch(h, &q, &r).await;
    assert!(late.jobs.is_empty(), "a stale try leased {:?}", late.jobs);
    assert_eq!(info(&t, "f-3").await.state, JobState::Ready);

    // The retry's reply may be lost too: the next retry finds the newest receipt.
    let r2 = retry(&r1);
    let third = fetch(h, &q, &r2).await.jobs;
    assert_eq!(keys_of(&third), ["f-1", "f-2"]);
    assert!(third.iter().all(|d| d.attempt == 1));
    assert!(third.iter().zip(&again).all(|(a, b)| a.token != b.token));

    // f-1 is acked; a later retry gets f-2 back and fills its room with f-3, a new lease.
    ack_all(h, &q, &third[..1]).await;
    let fourth = fetch(h, &q, &retry(&r2)).await.jobs;
    assert_eq!(keys_of(&fourth), ["f-2", "f-3"]);
    assert_eq!((fourth[0].attempt, fourth[1].attempt), (1, 1));
    ack_all(h, &q, &fourth).await;
    // A retry after every job of the receipt is done gets none of them.
    assert!(fetch(h, &q, &retry(&retry(&r2))).await.jobs.is_empty());

    // A retry of a call that never reached the store (no receipt) is an ordinary fetch.
    t.enqueue(raw(1)).key("f-4").await.unwrap();
    let fresh = FetchRequest {
        call: FetchCall::new().retried(),
        ..r.clone()
    };
    let got = fetch(h, &q, &fresh).await.jobs;
    assert_eq!(
        (keys_of(&got), got[0].attempt),
        (vec!["f-4".to_string()], 1)
    );
    ack_all(h, &q, &got).await;

    // A receipt lives as long as the lease it recorded: once both have run out, a retry is an
    // ordinary fetch, and the lost lease was an attempt (recovered as "lease expired").
    t.enqueue(raw(1)).key("f-5").await.unwrap();
    let short = FetchRequest {
        lease: ms(150),
        retry_policy: RetryPolicy::fixed(ms(0), 1).unwrap(),
        call: FetchCall::new(),
        ..r.clone()
    };
    assert_eq!(
        FetchCall::receipt_life(short.lease),
        short.lease,
        "a receipt outlives no lease"
    );
    let gone = fetch(h, &q, &short).await.jobs;
    assert_eq!(keys_of(&gone), ["f-5"]);
    until_store_time(h, gone[0].lease_deadline_ms + 1).await;
    let late = fetch(h, &q, &retry(&short)).await.jobs;
    assert_eq!(keys_of(&late), ["f-5"]);
    assert_eq!(late[0].attempt, 2, "the receipt had expired");
    let i = info(&t, "f-5").await;
    assert_eq!(i.history.len(), 1);
    assert_eq!(i.history[0].outcome, AttemptOutcome::LeaseExpired);
    ack_all(h, &q, &late).await;

    let st = store.stats(&q).await.unwrap();
    assert_eq!(
        (st.succeeded, st.expired, st.active, st.ready),
        (5, 1, 0, 0),
        "{st:?}"
    );
}
