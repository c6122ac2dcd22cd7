//! Conformance bodies: fetch: promotion and recovery batches, concurrent fetchers, a large drain.

use super::*;

/// One fetch moves at most `promote_batch` due jobs from `scheduled` and as many from `retry`
/// to ready, and leases at most `max_jobs`; `next_in` is zero while more is due.
pub async fn fetch_promotes_at_most_its_batch<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("fetch.batch").unwrap();
    let q = queue("fetch.batch");
    let jobs: Vec<_> = (0..45)
        .map(|i| JobSpec::new(raw(i)).delay(ms(100)))
        .collect();
    let out = t.enqueue_bulk(jobs).await.unwrap();
    let last_due = info(&t, out[44].key.as_str()).await.due_ms;
    until_store_time(h, last_due).await;

    let promote_only = FetchRequest {
        max_jobs: 0,
        promote_batch: 10,
        ..req()
    };
    for round in 1..=2u64 {
        let reply = fetch(h, &q, &promote_only).await;
        assert!(reply.jobs.is_empty());
        assert_eq!(reply.next_in, Some(Duration::ZERO), "more is due");
        let st = t.stats().await.unwrap();
        assert_eq!(
            (st.ready, st.scheduled),
            (10 * round, 45 - 10 * round),
            "{st:?}"
        );
    }
    // Leasing 7 promotes 10 more.
    let reply = fetch(
        h,
        &q,
        &FetchRequest {
            max_jobs: 7,
            promote_batch: 10,
            ..req()
        },
    )
    .await;
    assert_eq!(reply.jobs.len(), 7);
    assert_eq!(reply.next_in, Some(Duration::ZERO));
    let st = t.stats().await.unwrap();
    assert_eq!((st.ready, st.scheduled, st.active), (23, 15, 7), "{st:?}");

    // Retry jobs too: at most a batch in all, merged with scheduled by due time.
    let mut retry_at = 0;
    for d in &reply.jobs {
        match fail(h, d, FailAction::Retry(ms(50)), "again")
            .await
            .unwrap()
        {
            FailOutcome::Retrying { at_ms } => retry_at = retry_at.max(at_ms),
            other => panic!("{other:?}"),
        }
    }
    until_store_time(h, retry_at).await;
    let reply = fetch(
        h,
        &q,
        &FetchRequest {
            max_jobs: 0,
            promote_batch: 3,
            ..req()
        },
    )
    .await;
    assert!(reply.jobs.is_empty());
    let st = t.stats().await.unwrap();
    assert_eq!(
        (st.ready, st.scheduled, st.retry),
        (26, 12, 7),
        "3 due jobs in all, earliest first (all scheduled): {st:?}"
    );

    // Everything drains; no call leases more than asked.
    let mut total = 0;
    for _ in 0..100 {
        let reply = fetch(h, &q, &req_max(4)).await;
        assert!(reply.jobs.len() <= 4);
        total += reply.jobs.len();
        ack_all(h, &q, &reply.jobs).await;
        if reply.jobs.is_empty() && reply.next_in != Some(Duration::ZERO) {
            break;
        }
    }
    assert_eq!(total, 45);
    let st = t.stats().await.unwrap();
    assert_eq!((st.succeeded, st.retried), (45, 7), "{st:?}");
}

/// One fetch recovers at most `recover_batch` expired leases.
pub async fn fetch_recovers_at_most_its_batch<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("fetch.recover").unwrap();
    let q = queue("fetch.recover");
    for i in 0..5 {
        t.enqueue(raw(i)).key(format!("k{i}")).await.unwrap();
    }
    let r = FetchRequest {
        lease: ms(50),
        recover_batch: 2,
        retry_policy: RetryPolicy::fixed(HOUR, 1).unwrap(),
        ..req()
    };
    let jobs = fetch(h, &q, &r).await.jobs;
    assert_eq!(jobs.len(), 5);
    let last = jobs.iter().map(|d| d.lease_deadline_ms).max().unwrap();
    until_store_time(h, last + 1).await;
    for (expired, active) in [(2, 3), (4, 1), (5, 0)] {
        let reply = fetch(
            h,
            &q,
            &FetchRequest {
                max_jobs: 0,
                ..r.clone()
            },
        )
        .await;
        assert!(reply.jobs.is_empty() && reply.buried.is_empty());
        let st = t.stats().await.unwrap();
        assert_eq!(
            (st.expired, st.active, st.retry),
            (expired, active, expired),
            "{st:?}"
        );
    }
    for i in 0..5 {
        assert_eq!(
            t.cancel(&format!("k{i}")).await.unwrap(),
            CancelOutcome::Cancelled
        );
    }
}

/// Several fetchers working one partition while a producer adds jobs: every job is delivered
/// exactly once (no lease expires here), and all of them end.
pub async fn concurrent_fetchers_deliver_each_job_once<H: Harness>(h: &H) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let c = h.client().await;
    let t = c.topic("concurrent").unwrap();
    let q = queue("concurrent");
    let produced = AtomicBool::new(false);
    let producer = async {
        for chunk in 0..20u64 {
            let jobs: Vec<_> = (0..100u64)
                .map(|i| JobSpec::new(raw(chunk * 100 + i)).delay(ms(i % 3 * 10)))
                .collect();
            t.enqueue_bulk(jobs).await.unwrap();
            tokio::task::yield_now().await;
        }
        produced.store(true, Ordering::SeqCst);
    };
    let fetcher = || async {
        let mut got: Vec<u64> = Vec::new();
        let deadline = Instant::now() + WAIT;
        loop {
            assert!(Instant::now() < deadline, "fetcher did not finish");
            let done = produced.load(Ordering::SeqCst);
            let reply = fetch(h, &q, &req_max(25)).await;
            for d in &reply.jobs {
                assert_not_early(d);
                assert_eq!(d.attempt, 1);
            }
            ack_all(h, &q, &reply.jobs).await;
            got.extend(reply.jobs.iter().map(|d| unraw(&d.payload)));
            if reply.jobs.is_empty() {
                if done && reply.next_in.is_none() {
                    return got;
                }
                tokio::task::yield_now().await;
            }
        }
    };
    let ((), a, b, c3) = tokio::join!(producer, fetcher(), fetcher(), fetcher());
    let mut all: Vec<u64> = a.into_iter().chain(b).chain(c3).collect();
    all.sort_unstable();
    assert_eq!(all, (0..2000).collect::<Vec<_>>(), "each job exactly once");
    let st = t.stats().await.unwrap();
    assert_eq!((st.enqueued, st.succeeded), (2000, 2000), "{st:?}");
}

/// 200,000 due jobs drain completely through repeated fetches and acks: each delivered once,
/// nothing left. Uses fetch batches of 10,000 (past Lua's `unpack` limit of ~8,000).
pub async fn drain_200k_due_jobs<H: Harness>(h: &H) {
    const N: usize = 200_000;
    const BATCH: usize = 10_000;
    let c = h.client_with(|b| b.bulk_chunk(5000)).await.unwrap();
    let t = c.topic("drain.big").unwrap();
    let q = queue("drain.big");
    let started = Instant::now();
    let payload = raw(7);
    let jobs: Vec<_> = (0..N)
        .map(|_| JobSpec::new(payload.clone()).delay(ms(50)))
        .collect();
    let out = t.enqueue_bulk(jobs).await.unwrap();
    assert!(out.iter().all(|e| e.outcome == EnqueueOutcome::Created));
    let enqueued_in = started.elapsed();
    let last_due = info(&t, out[N - 1].key.as_str()).await.due_ms;
    until_store_time(h, last_due).await;
    let st = t.stats().await.unwrap();
    assert_eq!(st.scheduled as usize, N, "{st:?}");

    let drained = Instant::now();
    let mut seen: HashSet<JobKey> = HashSet::with_capacity(N);
    let request = FetchRequest {
        max_jobs: BATCH,
        promote_batch: BATCH,
        ..req()
    };
    let mut fetches = 0;
    for _ in 0..(N / BATCH) * 4 {
        let reply = fetch(h, &q, &request).await;
        fetches += 1;
        assert!(reply.jobs.len() <= BATCH);
        let leases: Vec<_> = reply.jobs.iter().map(dq::store::lease_of).collect();
        if !leases.is_empty() {
            let acks = h
                .store()
                .ack(&q, "", &dq::store::Success::of(&leases))
                .await
                .unwrap();
            assert!(acks.iter().all(|a| *a == AckOutcome::Acked));
        }
        for d in reply.jobs {
            assert_not_early(&d);
            assert!(seen.insert(d.key.clone()), "{} delivered twice", d.key);
        }
        if reply.next_in.is_none() {
            break;
        }
    }
    eprintln!(
        "drain_200k: enqueued in {enqueued_in:?}, drained in {:?} ({fetches} fetches)",
        drained.elapsed()
    );
    assert_eq!(seen.len(), N, "not every job was delivered");
    let st = t.stats().await.unwrap();
    assert_eq!(
        (st.scheduled, st.ready, st.active, st.enqueued, st.succeeded),
        (0, 0, 0, N as u64, N as u64),
        "{st:?}"
    );
    h.assert_no_leftovers().await;
}
