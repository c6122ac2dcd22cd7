//! Conformance bodies: pause and resume, the global concurrency cap, the rate limit, a
//! handler's throttle, and cancelling a running job — all enforced by the store.

use super::*;

use dq::Rate;

/// Pausing a topic stops `fetch` from leasing (jobs keep their due times, enqueue still
/// works, stats say paused); resuming leases them at once.
pub async fn pause_stops_leasing_until_resumed<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic(close_order::TOPIC).unwrap();
    let q = queue(close_order::TOPIC);
    t.enqueue(raw(1)).key("a").await.unwrap();
    let due_a = info(&t, "a").await.due_ms;

    let ctl = t.pause().await.unwrap();
    assert!(ctl.paused, "{ctl:?}");
    assert!(t.stats().await.unwrap().paused);
    // Enqueue works while paused; nothing is leased, whatever is due.
    let out = t.enqueue(raw(2)).key("b").await.unwrap();
    assert_eq!(out.outcome, EnqueueOutcome::Created);
    for _ in 0..3 {
        let reply = fetch(h, &q, &req()).await;
        assert!(reply.jobs.is_empty(), "leased while paused: {reply:?}");
        assert_ne!(reply.next_in, Some(Duration::ZERO), "{reply:?}");
    }
    // Due times are untouched.
    assert_eq!(info(&t, "a").await.due_ms, due_a);
    assert_eq!(info(&t, "a").await.state, JobState::Ready);
    assert_eq!(t.stats().await.unwrap().ready, 2);

    let ctl = t.resume().await.unwrap();
    assert!(!ctl.paused, "{ctl:?}");
    assert!(!t.stats().await.unwrap().paused);
    let reply = fetch(h, &q, &req()).await;
    assert_eq!(keys_of(&reply.jobs), ["a", "b"]);
    ack_all(h, &q, &reply.jobs).await;
}

/// With a global concurrency cap of N, `fetch` leases only while fewer than N jobs are
/// active, whoever asks; a finished job frees a slot; stats say throttled while the cap holds
/// due work back. Bad caps are refused before any write.
pub async fn concurrency_cap_bounds_running_jobs<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic(close_order::TOPIC).unwrap();
    let q = queue(close_order::TOPIC);
    assert!(matches!(
        t.set_concurrency(Some(0)).await,
        Err(Error::InvalidConfig(_))
    ));
    let ctl = t.set_concurrency(Some(2)).await.unwrap();
    assert_eq!(ctl.concurrency, Some(2));
    for i in 0..5 {
        t.enqueue(raw(i)).key(format!("k{i}")).await.unwrap();
    }
    // Two "workers" asking for 10 each get 2 in all.
    let first = fetch(h, &q, &req_max(10)).await;
    let second = fetch(h, &q, &req_max(10)).await;
    assert_eq!(
        first.jobs.len() + second.jobs.len(),
        2,
        "{first:?} {second:?}"
    );
    assert_ne!(second.next_in, Some(Duration::ZERO), "{second:?}");
    let st = t.stats().await.unwrap();
    assert_eq!((st.active, st.throttled), (2, true), "{st:?}");
    // One finishes: one more may start.
    let mut running: Vec<Delivery> = first.jobs.into_iter().chain(second.jobs).collect();
    ack_all(h, &q, &running[..1]).await;
    running.remove(0);
    let more = fetch(h, &q, &req_max(10)).await;
    assert_eq!(more.jobs.len(), 1, "{more:?}");
    running.extend(more.jobs);
    // A failure frees a slot too.
    fail(h, &running[0], FailAction::Retry(HOUR), "e")
        .await
        .unwrap();
    running.remove(0);
    let more = fetch(h, &q, &req_max(10)).await;
    assert_eq!(more.jobs.len(), 1, "{more:?}");
    running.extend(more.jobs);
    assert_eq!(t.stats().await.unwrap().active, 2);
    // Removing the cap leases the rest.
    t.set_concurrency(None).await.unwrap();
    let rest = fetch(h, &q, &req_max(10)).await;
    assert_eq!(rest.jobs.len(), 1, "{rest:?}");
    running.extend(rest.jobs);
    ack_all(h, &q, &running).await;
}

/// A rate limit caps how many jobs are leased per period, across fetchers, and `fetch` says
/// when to come back; lifting it leases the rest. Bad rates are refused.
pub async fn rate_limit_caps_leases<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic(close_order::TOPIC).unwrap();
    let q = queue(close_order::TOPIC);
    assert!("0/s".parse::<Rate>().is_err());
    assert!(matches!(
        t.set_rate(Some(Rate {
            count: 0,
            per: Duration::from_secs(1)
        }))
        .await,
        Err(Error::InvalidConfig(_))
    ));
    // One a minute: the first fetch gets one, the next nothing, told to come back later.
    let ctl = t.set_rate(Some("1/min".parse().unwrap())).await.unwrap();
    assert_eq!(ctl.rate, Some("1/min".parse().unwrap()));
    for i in 0..4 {
        t.enqueue(raw(i)).key(format!("k{i}")).await.unwrap();
    }
    let first = fetch(h, &q, &req_max(10)).await;
    assert_eq!(first.jobs.len(), 1, "{first:?}");
    let second = fetch(h, &q, &req_max(10)).await;
    assert!(second.jobs.is_empty(), "{second:?}");
    let back = second.next_in.expect("a time to come back");
    assert!(
        back > Duration::ZERO && back <= Duration::from_secs(61),
        "{second:?}"
    );
    assert!(t.stats().await.unwrap().throttled);
    ack_all(h, &q, &first.jobs).await;

    // Ten a second (no burst beyond one): the next job comes once the store says so.
    t.set_rate(Some("10/s".parse().unwrap())).await.unwrap();
    let one = fetch(h, &q, &req_max(10)).await;
    assert_eq!(one.jobs.len(), 1, "{one:?}");
    let again = fetch(h, &q, &req_max(10)).await;
    let wait = again.next_in.expect("a time to come back");
    ack_all(h, &q, &one.jobs).await;
    ack_all(h, &q, &again.jobs).await;
    if again.jobs.is_empty() {
        until_store_time(h, now(h).await + wait.as_millis() as u64).await;
        let later = fetch(h, &q, &req_max(10)).await;
        assert!(!later.jobs.is_empty(), "{later:?}");
        ack_all(h, &q, &later.jobs).await;
    }
    // Lifted: the rest at once.
    t.set_rate(None).await.unwrap();
    drain_due(h, &q).await;
    assert!(!t.stats().await.unwrap().throttled);
    assert_eq!(t.stats().await.unwrap().succeeded, 4);
}

/// A handler's "the partner is rate-limiting us" sends the job back without spending its
/// attempt and holds the whole partition back until then; then everything runs.
pub async fn handler_throttle_slows_the_topic<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic(close_order::TOPIC).unwrap();
    let q = queue(close_order::TOPIC);
    t.enqueue(raw(1)).key("a").await.unwrap();
    let a = fetch_one(h, &q, &req()).await;
    t.enqueue(raw(2)).key("b").await.unwrap();
    let at = match fail(h, &a, FailAction::Throttle(ms(300)), "rate limited").await {
        Ok(FailOutcome::Retrying { at_ms }) => at_ms,
        other => panic!("{other:?}"),
    };
    let job = info(&t, "a").await;
    assert_eq!(
        (job.state, job.attempts),
        (JobState::Scheduled, 0),
        "{job:?}"
    );
    // b is due, but the topic is throttled.
    let reply = fetch(h, &q, &req()).await;
    if now(h).await < at {
        assert!(reply.jobs.is_empty(), "leased while throttled: {reply:?}");
        let st = t.stats().await.unwrap();
        assert!(now(h).await >= at || st.throttled, "{st:?}");
    }
    assert_eq!(t.stats().await.unwrap().throttles, 1);
    let ctl = t.control().await.unwrap();
    assert!(
        ctl.throttled_until_ms.is_none_or(|u| u == at),
        "{ctl:?} {at}"
    );
    until_store_time(h, at).await;
    let all = drain_due(h, &q).await;
    let mut keys = keys_of(&all);
    keys.extend(keys_of(&reply.jobs));
    keys.sort();
    assert_eq!(keys, ["a", "b"]);
    ack_all(h, &q, &reply.jobs).await;
}

/// Cancelling a running job records a request: `extend` reports it, and the job ends as
/// cancelled however its delivery ends — the worker's cancel, a failure (not retried), a
/// release at shutdown, or its lease expiring; a success first wins.
pub async fn cancel_of_a_running_job<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic(close_order::TOPIC).unwrap();
    let q = queue(close_order::TOPIC);
    for k in ["w", "f", "r", "x", "ok"] {
        t.enqueue(raw(0)).key(k).await.unwrap();
    }
    let short = FetchRequest {
        lease: ms(200),
        ..req_max(1)
    };
    let jobs = fetch(h, &q, &req_max(4)).await.jobs;
    assert_eq!(keys_of(&jobs), ["w", "f", "r", "x"]);
    let (w, f, r) = (&jobs[0], &jobs[1], &jobs[2]);
    for d in &jobs[..3] {
        assert_eq!(
            t.cancel(d.key.as_str()).await.unwrap(),
            CancelOutcome::CancelRequested
        );
    }
    // Asked twice: the same request.
    assert_eq!(t.cancel("w").await.unwrap(), CancelOutcome::CancelRequested);
    let leases: Vec<_> = jobs.iter().map(dq::store::lease_of).collect();
    assert_eq!(
        h.store().extend(&q, &leases, LONG_LEASE).await.unwrap(),
        [
            Extended::CancelRequested,
            Extended::CancelRequested,
            Extended::CancelRequested,
            Extended::Held
        ]
    );
    // The worker ends it as cancelled.
    assert_eq!(
        fail(h, w, FailAction::Cancel, "cancelled").await.unwrap(),
        FailOutcome::Cancelled
    );
    // A failure after the request is not retried.
    assert_eq!(
        fail(h, f, FailAction::Retry(ms(0)), "boom").await.unwrap(),
        FailOutcome::Cancelled
    );
    // Released at shutdown: it does not go back to ready.
    assert_eq!(
        h.store()
            .release(&q, &[dq::store::lease_of(r)])
            .await
            .unwrap(),
        [true]
    );
    for k in ["w", "f", "r"] {
        assert!(t.job(k).await.unwrap().is_none(), "{k} still exists");
    }
    // A success first wins; the request is dropped with the job.
    ack_all(h, &q, &jobs[3..]).await;

    // A crashed worker's job whose cancel was requested is not retried when its lease expires.
    let ok = fetch_one(h, &q, &short).await;
    assert_eq!(
        t.cancel("ok").await.unwrap(),
        CancelOutcome::CancelRequested
    );
    until_store_time(h, ok.lease_deadline_ms + 5).await;
    let reply = fetch(h, &q, &req()).await;
    assert!(
        reply.jobs.is_empty() && reply.buried.is_empty(),
        "{reply:?}"
    );
    assert!(t.job("ok").await.unwrap().is_none());
    let st = t.stats().await.unwrap();
    assert_eq!(
        (
            st.cancelled,
            st.retried,
            st.buried,
            st.succeeded,
            st.expired
        ),
        (4, 0, 0, 1, 0),
        "{st:?}"
    );
}

/// A topic of several partitions: a cap is split so the shares add up (a cap below the
/// partition count is refused), the rate reads back as set, and a pause holds every
/// partition.
pub async fn limits_are_split_over_partitions<H: Harness>(h: &H) {
    let c = h
        .client_with(|b| b.partitions("limits.split", 3))
        .await
        .unwrap();
    let t = c.topic("limits.split").unwrap();
    assert!(matches!(
        t.set_concurrency(Some(2)).await,
        Err(Error::InvalidConfig(_))
    ));
    assert_eq!(
        t.control().await.unwrap().concurrency,
        None,
        "nothing written"
    );
    let ctl = t.set_concurrency(Some(7)).await.unwrap();
    assert_eq!(ctl.concurrency, Some(7));
    let ctl = t.set_rate(Some("90/s".parse().unwrap())).await.unwrap();
    assert_eq!(ctl.rate, Some("90/s".parse().unwrap()));
    let shares: Vec<_> = (0..3)
        .map(|p| Queue::new(Topic::new("limits.split").unwrap(), p))
        .collect();
    let mut caps = Vec::new();
    for q in &shares {
        let st = h.store().control(q, &Default::default()).await.unwrap();
        caps.push(st.concurrency.unwrap());
        assert_eq!(st.rate.unwrap().per, Duration::from_secs(3), "{st:?}");
    }
    assert_eq!(caps, [3, 2, 2]);
    t.pause().await.unwrap();
    for i in 0..9 {
        t.enqueue(raw(i)).key(format!("k{i}")).await.unwrap();
    }
    for q in &shares {
        assert!(
            fetch(h, q, &req()).await.jobs.is_empty(),
            "{q:?} leased while paused"
        );
    }
    t.resume().await.unwrap();
    t.set_rate(None).await.unwrap();
    t.set_concurrency(None).await.unwrap();
    let mut n = 0;
    for q in &shares {
        n += drain_due(h, q).await.len();
    }
    assert_eq!(n, 9);
}
