//! Conformance bodies: due times and the order of delivery.

use super::*;

/// A job is never delivered before its due time by the store's clock; while nothing is due,
/// an empty fetch says how long until the earliest job, never more.
pub async fn due_time_is_never_early<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("due.early").unwrap();
    let q = queue("due.early");
    // Enqueued out of due order on purpose.
    let delays = [300u64, 100, 250, 150, 200, 400];
    let mut due = HashMap::new();
    for d in delays {
        let key = format!("d{d}");
        let before = now(h).await;
        let e = t.enqueue(raw(d)).key(&key).delay(ms(d)).await.unwrap();
        let after = now(h).await;
        assert_eq!(e.outcome, EnqueueOutcome::Created);
        let i = info(&t, &key).await;
        assert_eq!(i.state, JobState::Scheduled, "{i:?}");
        assert_eq!(
            i.due_ms,
            i.created_ms + d,
            "due = enqueue time + delay: {i:?}"
        );
        assert!((before..=after).contains(&i.created_ms), "{i:?}");
        due.insert(key, i.due_ms);
    }

    let mut delivered: Vec<Delivery> = Vec::new();
    let deadline = Instant::now() + WAIT;
    let mut fetches = 0u32;
    while delivered.len() < delays.len() {
        assert!(
            Instant::now() < deadline,
            "only {} of {} jobs delivered after {fetches} fetches",
            delivered.len(),
            delays.len()
        );
        let before = now(h).await;
        let reply = fetch(h, &q, &req()).await;
        fetches += 1;
        for d in &reply.jobs {
            assert_eq!(d.due_ms, due[d.key.as_str()], "{d:?}");
            assert_not_early(d);
            assert!(d.leased_ms >= before && d.lease_deadline_ms == d.leased_ms + 30_000);
            assert_eq!(d.attempt, 1);
            assert_eq!(unraw(&d.payload), d.due_ms - d.created_ms);
        }
        if reply.jobs.is_empty() {
            let earliest = due
                .iter()
                .filter(|(k, _)| !delivered.iter().any(|d| d.key.as_str() == k.as_str()))
                .map(|(_, v)| *v)
                .min()
                .expect("something is pending");
            let next = reply
                .next_in
                .expect("jobs are pending, next_in must say when");
            assert!(
                next.as_millis() as u64 <= earliest.saturating_sub(before),
                "next_in {next:?} overshoots the earliest due time {earliest} (now >= {before})"
            );
        }
        ack_all(h, &q, &reply.jobs).await;
        delivered.extend(reply.jobs);
    }
    let order: Vec<u64> = delivered.iter().map(|d| d.due_ms).collect();
    let mut sorted = order.clone();
    sorted.sort_unstable();
    assert_eq!(order, sorted, "delivered out of due order");
    let reply = fetch(h, &q, &req()).await;
    assert!(
        reply.jobs.is_empty() && reply.next_in.is_none(),
        "{reply:?}"
    );
}

/// Due jobs come out in due-time order; jobs due in the same millisecond come out in the order
/// they were enqueued — within one bulk call (2,000 jobs with the same delay, keys in reverse
/// lexical order so that no tie-break by name can pass), across calls (`.at` the same time),
/// and after the partition has already seen many enqueues.
pub async fn due_jobs_come_out_in_due_order<H: Harness>(h: &H) {
    let c = h.client_with(|b| b.bulk_chunk(2000)).await.unwrap();
    let t = c.topic("due.order").unwrap();
    let q = queue("due.order");

    // Some history first, so that any per-partition counter is well past its start.
    let warm: Vec<_> = (0..1500).map(|i| JobSpec::new(raw(i))).collect();
    t.enqueue_bulk(warm).await.unwrap();
    assert_eq!(drain_due(h, &q).await.len(), 1500);

    // One bulk call: every job gets the same due millisecond. The delay leaves room for the
    // calls below to happen before it, even on a loaded machine.
    let n = 2000u64;
    let bulk: Vec<_> = (0..n)
        .map(|i| {
            JobSpec::new(raw(i))
                .key(format!("same-{:04}", n - i))
                .delay(ms(5000))
        })
        .collect();
    let out = t.enqueue_bulk(bulk).await.unwrap();
    assert!(out.iter().all(|e| e.outcome == EnqueueOutcome::Created));
    let bulk_due = info(&t, "same-2000").await.due_ms;
    assert_eq!(info(&t, "same-0001").await.due_ms, bulk_due);

    // Separate calls due at the bulk's very millisecond (so after all of it), interleaved
    // with jobs of other due times.
    for (i, key) in ["at-5", "at-4", "at-3", "at-2", "at-1"].iter().enumerate() {
        t.enqueue(raw(i as u64))
            .key(*key)
            .at(dq::store::from_unix_ms(bulk_due))
            .await
            .unwrap();
        t.enqueue(raw(i as u64))
            .key(format!("solo-{i}"))
            .delay(ms([3000, 2000, 6000, 2500, 4000][i]))
            .await
            .unwrap();
    }
    let mut last_due = bulk_due;
    for i in 0..5 {
        last_due = last_due.max(info(&t, &format!("solo-{i}")).await.due_ms);
    }
    for key in ["at-5", "at-1"] {
        let i = info(&t, key).await;
        assert_eq!(
            (i.state, i.due_ms),
            (JobState::Scheduled, bulk_due),
            "{key} was enqueued after its due time: the machine is too slow for this test"
        );
    }
    until_store_time(h, last_due).await;

    let reply = fetch(
        h,
        &q,
        &FetchRequest {
            max_jobs: 5000,
            promote_batch: 5000,
            ..req()
        },
    )
    .await;
    let jobs = reply.jobs;
    assert_eq!(jobs.len() as u64, n + 10);
    for d in &jobs {
        assert_not_early(d);
    }
    let dues: Vec<u64> = jobs.iter().map(|d| d.due_ms).collect();
    assert!(
        dues.windows(2).all(|w| w[0] <= w[1]),
        "not in due order: {dues:?}"
    );
    let same: Vec<u64> = jobs
        .iter()
        .filter(|d| d.key.as_str().starts_with("same-"))
        .map(|d| unraw(&d.payload))
        .collect();
    let first_wrong = same.iter().enumerate().find(|(i, v)| *i as u64 != **v);
    assert!(
        first_wrong.is_none(),
        "jobs due in the same ms not in enqueue order: position {first_wrong:?}"
    );
    let same_ms: Vec<String> = keys_of(&jobs)
        .into_iter()
        .filter(|k| k.starts_with("at-") || k == "same-0001")
        .collect();
    assert_eq!(
        same_ms,
        ["same-0001", "at-5", "at-4", "at-3", "at-2", "at-1"],
        "later calls for the same millisecond come after the bulk, in call order"
    );
    ack_all(h, &q, &jobs).await;
    let reply = fetch(h, &q, &req()).await;
    assert!(
        reply.jobs.is_empty() && reply.next_in.is_none(),
        "{reply:?}"
    );
}

/// Due jobs of `scheduled` and `retry` reach ready merged by due time, not set by set.
pub async fn scheduled_and_retry_are_promoted_in_due_order<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("promote.merge").unwrap();
    let q = queue("promote.merge");
    t.enqueue(raw(1)).key("r").await.unwrap();
    let r = fetch_one(h, &q, &req()).await;
    // "r" waits in retry until +100 ms; "s1" is due before it and "s2" after it.
    t.enqueue(raw(1)).key("s1").delay(ms(50)).await.unwrap();
    fail(h, &r, FailAction::Retry(ms(100)), "once")
        .await
        .unwrap();
    t.enqueue(raw(1)).key("s2").delay(ms(150)).await.unwrap();
    let start = now(h).await;
    until_store_time(h, start + 200).await;
    let jobs = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&jobs), ["s1", "r", "s2"]);
    ack_all(h, &q, &jobs).await;
}
