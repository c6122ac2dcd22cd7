//! Conformance bodies: a job whose lease expired is retried after the delay its topic's retry
//! policy gives that attempt, drawn for that job, as after a handler's error.

use super::*;

/// The delay each job of `keys` got at its last lease expiry: its next due time minus the
/// time the expiry was recorded.
async fn expiry_delays(t: &TopicClient, keys: &[&str]) -> Vec<u64> {
    let mut delays = Vec::new();
    for k in keys {
        let i = info(t, k).await;
        assert_eq!(i.state, JobState::Retry, "{k}");
        let last = i.history.last().expect("a recorded expiry");
        assert_eq!(last.outcome, AttemptOutcome::LeaseExpired, "{k}");
        delays.push(i.due_ms - last.at_ms);
    }
    delays
}

/// Leases every job of `keys` under a 100 ms lease, lets the leases run out, and recovers
/// them one per fetch call (so that each expiry is a call of its own).
async fn expire_one_by_one<H: Harness>(h: &H, q: &Queue, policy: &RetryPolicy, keys: &[&str]) {
    let lease = FetchRequest {
        lease: ms(100),
        retry_policy: policy.clone(),
        ..req()
    };
    let jobs = fetch(h, q, &lease).await.jobs;
    assert_eq!(jobs.len(), keys.len());
    let deadline = jobs.iter().map(|d| d.lease_deadline_ms).max().unwrap();
    until_store_time(h, deadline).await;
    let one = FetchRequest {
        recover_batch: 1,
        ..lease
    };
    for _ in keys {
        let reply = fetch(h, q, &one).await;
        assert!(
            reply.jobs.is_empty() && reply.buried.is_empty(),
            "{reply:?}"
        );
    }
}

/// Under a jittered policy every lease expiry draws its own delay (the same topic, the same
/// attempt, separate fetch calls), each within [delay, delay + pct].
pub async fn lease_expiry_retries_draw_their_own_jitter<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("lease.jitter").unwrap();
    let q = queue("lease.jitter");
    let policy = RetryPolicy::fixed(HOUR, 1)
        .unwrap()
        .with_jitter(dq::Jitter::UpTo(50))
        .unwrap();
    let keys = ["a", "b", "c", "d"];
    for k in keys {
        t.enqueue(raw(1)).key(k).await.unwrap();
    }
    expire_one_by_one(h, &q, &policy, &keys).await;
    let delays = expiry_delays(&t, &keys).await;
    let (base, top) = (3_600_000, 5_400_000);
    assert!(
        delays.iter().all(|d| (base..=top).contains(d)),
        "{delays:?} outside [1 h, 1.5 h]"
    );
    // Drawn from 1.8 million ms: four equal draws (a schedule sampled once) would be no luck.
    let distinct: HashSet<_> = delays.iter().collect();
    assert_eq!(distinct.len(), keys.len(), "repeated delays {delays:?}");
}

/// Without jitter a lease expiry waits exactly the delay the policy gives its attempt.
pub async fn lease_expiry_retries_without_jitter_are_exact<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("lease.exact").unwrap();
    let q = queue("lease.exact");
    // The first expiry retries at once, the second waits exactly an hour.
    let policy = RetryPolicy::tiered([ms(0), HOUR]).unwrap();
    assert_eq!(policy.jitter(), Some(dq::Jitter::None));
    let keys = ["a", "b"];
    for k in keys {
        t.enqueue(raw(1)).key(k).await.unwrap();
    }
    let lease = FetchRequest {
        lease: ms(100),
        retry_policy: policy.clone(),
        ..req()
    };
    let first = fetch(h, &q, &lease).await.jobs;
    assert_eq!(first.len(), 2);
    until_store_time(h, first.iter().map(|d| d.lease_deadline_ms).max().unwrap()).await;
    // Recovered after attempt 1 (delay 0), then due at once: leased again, attempt 2.
    let again = dq_testkit::eventually_some("both jobs are leased again", WAIT, || async {
        let reply = fetch(h, &q, &lease).await;
        (reply.jobs.len() == 2).then_some(reply.jobs)
    })
    .await;
    assert!(again.iter().all(|d| d.attempt == 2), "{again:?}");
    let deadline = again.iter().map(|d| d.lease_deadline_ms).max().unwrap();
    until_store_time(h, deadline).await;
    let reply = fetch(h, &q, &lease).await;
    assert!(
        reply.jobs.is_empty() && reply.buried.is_empty(),
        "{reply:?}"
    );
    assert_eq!(expiry_delays(&t, &keys).await, [3_600_000, 3_600_000]);
    let st = t.stats().await.unwrap();
    assert_eq!((st.expired, st.retried, st.retry), (4, 4, 2), "{st:?}");
}
