//! Conformance bodies: the dead queue: list, requeue, purge, cap and retention.

use super::*;

/// Enqueues `keys` due now, fetches them, and buries them one after the other with `limits`;
/// returns each burial's outcome.
async fn bury_all<H: Harness>(
    h: &H,
    t: &TopicClient,
    q: &Queue,
    keys: &[&str],
    limits: DeadLimits,
) -> Vec<FailOutcome> {
    for k in keys {
        t.enqueue(raw(1)).key(*k).await.unwrap();
    }
    let jobs = fetch(h, q, &req_max(keys.len())).await.jobs;
    assert_eq!(keys_of(&jobs), keys);
    let mut out = Vec::new();
    for (i, d) in jobs.iter().enumerate() {
        out.push(
            fail_with(h, d, FailAction::Bury, &format!("fatal {i}"), limits)
                .await
                .unwrap(),
        );
    }
    out
}

/// The dead queue lists oldest first (paged), requeues with attempts reset (history kept),
/// and purges by name, by age and all at once.
pub async fn dead_queue_list_requeue_purge<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("dead.ops").unwrap();
    let q = queue("dead.ops");
    let keys = ["k0", "k1", "k2", "k3", "k4"];
    bury_all(h, &t, &q, &keys, DeadLimits::default()).await;

    let dead = dead_page(h, &q, 0, 10).await;
    assert_eq!(
        dead.iter().map(|j| j.key.to_string()).collect::<Vec<_>>(),
        keys
    );
    for (i, j) in dead.iter().enumerate() {
        assert_eq!((j.state, j.attempts), (JobState::Dead, 1));
        assert_eq!(j.history.len(), 1);
        assert_eq!(j.history[0].error, format!("fatal {i}"));
        assert_eq!(j.history[0].outcome, AttemptOutcome::Buried);
        assert!(j.died_ms.is_some());
    }
    let died: Vec<u64> = dead.iter().map(|j| j.died_ms.unwrap()).collect();
    assert!(died.windows(2).all(|w| w[0] <= w[1]));
    let page = dead_page(h, &q, 1, 2).await;
    assert_eq!(
        page.iter().map(|j| j.key.as_str()).collect::<Vec<_>>(),
        ["k1", "k2"]
    );
    let first = t.list(JobState::Dead, dq::Page::first(3)).await.unwrap();
    let page = t
        .list(JobState::Dead, dq::Page::after(first.next.unwrap(), 10))
        .await
        .unwrap()
        .jobs;
    assert_eq!(
        page.iter().map(|j| j.key.as_str()).collect::<Vec<_>>(),
        ["k3", "k4"]
    );
    assert!(dead_page(h, &q, 5, 10).await.is_empty());

    // Requeue: back to ready, attempts reset, history kept; only dead jobs move.
    assert_eq!(t.requeue_dead(&["k1", "k3", "missing"]).await.unwrap(), 2);
    assert_eq!(t.requeue_dead(&["k1"]).await.unwrap(), 0);
    let i = info(&t, "k1").await;
    assert_eq!(
        (i.state, i.attempts, i.history.len()),
        (JobState::Ready, 0, 1)
    );
    let st = t.stats().await.unwrap();
    assert_eq!((st.dead, st.ready), (3, 2), "{st:?}");
    let jobs = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&jobs), ["k1", "k3"]);
    assert!(jobs.iter().all(|d| d.attempt == 1));
    ack_all(h, &q, &jobs).await;

    // Purge by name: only dead jobs, each counted once however often it is named.
    assert_eq!(t.purge_dead(&["k0", "k0", "k1", "nope"]).await.unwrap(), 1);
    assert!(t.job("k0").await.unwrap().is_none());
    assert_eq!(t.purge_all_dead().await.unwrap(), 2);
    assert_eq!(t.stats().await.unwrap().dead, 0);
    for k in keys {
        assert!(t.job(k).await.unwrap().is_none(), "{k}");
    }

    // Purge the oldest N.
    bury_all(h, &t, &q, &["m0", "m1", "m2"], DeadLimits::default()).await;
    assert_eq!(h.store().purge_dead(&q, &[], 2).await.unwrap(), 2);
    let left = dead_page(h, &q, 0, 10).await;
    assert_eq!(
        left.iter().map(|j| j.key.as_str()).collect::<Vec<_>>(),
        ["m2"]
    );
    assert_eq!(h.store().purge_dead(&q, &[], 10).await.unwrap(), 1);
    assert_eq!(h.store().purge_dead(&q, &[], 10).await.unwrap(), 0);
    let st = t.stats().await.unwrap();
    assert_eq!(
        (st.buried, st.trimmed),
        (8, 0),
        "a purge is not a trim: {st:?}"
    );
}

/// The dead queue's cap trims the oldest jobs, and counts them in `trimmed`.
pub async fn dead_queue_cap_trims_oldest<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("dead.cap").unwrap();
    let q = queue("dead.cap");
    let limits = DeadLimits {
        cap: 3,
        retention: HOUR,
    };
    let keys = ["j0", "j1", "j2", "j3", "j4", "j5"];
    let out = bury_all(h, &t, &q, &keys, limits).await;
    assert_eq!(
        out,
        [0, 0, 0, 1, 1, 1].map(|trimmed| FailOutcome::Buried { trimmed })
    );
    let dead = dead_page(h, &q, 0, 10).await;
    assert_eq!(
        dead.iter().map(|j| j.key.as_str()).collect::<Vec<_>>(),
        ["j3", "j4", "j5"]
    );
    for k in ["j0", "j1", "j2"] {
        assert!(t.job(k).await.unwrap().is_none(), "{k} kept past the cap");
    }
    let st = t.stats().await.unwrap();
    assert_eq!((st.dead, st.buried, st.trimmed), (3, 6, 3), "{st:?}");

    // A lease-expiry burial respects the cap too.
    t.enqueue(raw(1)).key("late").await.unwrap();
    let r = FetchRequest {
        lease: ms(50),
        dead_limits: limits,
        ..req()
    };
    fetch_one(h, &q, &r).await;
    let reply = dq_testkit::eventually_some("the lease expires", WAIT, || async {
        let reply = fetch(h, &q, &r).await;
        (!reply.buried.is_empty()).then_some(reply)
    })
    .await;
    assert_eq!((reply.buried.len(), reply.trimmed), (1, 1));
    let st = t.stats().await.unwrap();
    assert_eq!((st.dead, st.trimmed), (3, 4), "{st:?}");
    assert!(t.job("j3").await.unwrap().is_none());
}

/// Dead jobs older than the retention are trimmed (on the next burial or an idle fetch), and
/// counted in `trimmed`.
pub async fn dead_queue_retention_trims_old<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("dead.retention").unwrap();
    let q = queue("dead.retention");
    let limits = DeadLimits {
        cap: 1000,
        retention: ms(150),
    };
    bury_all(h, &t, &q, &["old"], limits).await;
    let died = info(&t, "old").await.died_ms.unwrap();
    until_store_time(h, died + 150 + 1).await;
    let out = bury_all(h, &t, &q, &["new"], limits).await;
    assert_eq!(out, [FailOutcome::Buried { trimmed: 1 }]);
    assert!(t.job("old").await.unwrap().is_none());
    assert_eq!(info(&t, "new").await.state, JobState::Dead);
    assert_eq!(t.stats().await.unwrap().trimmed, 1);

    // An idle fetch trims as well.
    let died = info(&t, "new").await.died_ms.unwrap();
    until_store_time(h, died + 150 + 1).await;
    let reply = fetch(
        h,
        &q,
        &FetchRequest {
            dead_limits: limits,
            ..req()
        },
    )
    .await;
    assert!(reply.jobs.is_empty());
    assert_eq!(reply.trimmed, 1);
    let st = t.stats().await.unwrap();
    assert_eq!((st.dead, st.trimmed, st.buried), (0, 2, 2), "{st:?}");
    h.assert_no_leftovers().await;
}
