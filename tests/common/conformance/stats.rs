//! Conformance bodies: stats, wake-ups, and what a workload leaves behind.

use super::*;

/// Counts per state and every counter after a mixed workload.
pub async fn stats_count_states_and_counters<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("stats.mixed").unwrap();
    let q = queue("stats.mixed");
    assert_eq!(t.stats().await.unwrap(), dq::TopicStats::default());

    for k in ["a1", "a2", "a3", "a4"] {
        t.enqueue(raw(1)).key(k).await.unwrap();
    }
    let jobs = fetch(h, &q, &req_max(4)).await.jobs;
    assert_eq!(jobs.len(), 4);
    ack_all(h, &q, &jobs[..1]).await;
    fail(h, &jobs[1], FailAction::Retry(HOUR), "later")
        .await
        .unwrap();
    fail(h, &jobs[2], FailAction::Bury, "never").await.unwrap();
    // jobs[3] stays active.

    // One lease expires and goes to retry.
    t.enqueue(raw(1)).key("e1").await.unwrap();
    let r = FetchRequest {
        lease: ms(50),
        retry_policy: RetryPolicy::fixed(HOUR, 1).unwrap(),
        ..req()
    };
    let e = fetch_one(h, &q, &r).await;
    until_store_time(h, e.lease_deadline_ms + 1).await;
    let reply = fetch(h, &q, &FetchRequest { max_jobs: 0, ..r }).await;
    assert!(reply.jobs.is_empty() && reply.buried.is_empty());
    assert_eq!(info(&t, "e1").await.state, JobState::Retry);

    for k in ["s1", "s2", "c1"] {
        t.enqueue(raw(1)).key(k).delay(HOUR).await.unwrap();
    }
    t.cancel("c1").await.unwrap();
    for k in ["r1", "r2", "r3"] {
        t.enqueue(raw(1)).key(k).await.unwrap();
    }
    t.enqueue(raw(2))
        .key("s2")
        .replace()
        .delay(HOUR)
        .await
        .unwrap();

    let st = t.stats().await.unwrap();
    let want = dq::TopicStats {
        scheduled: 2,
        ready: 3,
        active: 1,
        retry: 2,
        dead: 1,
        enqueued: 12,
        succeeded: 1,
        retried: 2,
        buried: 1,
        expired: 1,
        expired_before_start: 0,
        cancelled: 1,
        succeeded_after_cancel_request: 0,
        discarded: 0,
        trimmed: 0,
        oldest_overdue_ms: st.oldest_overdue_ms,
        overdue: 0,
        paused: false,
        throttled: false,
        throttles: 0,
        kept: 0,
        kept_trimmed: 0,
        events_lost: 0,
    };
    assert_eq!(st, want);
    let c_stats = c.stats::<close_order>().await.unwrap();
    assert_eq!(c_stats, dq::TopicStats::default(), "topics are separate");
}

/// `oldest_overdue_ms` is how long the most overdue waiting job has been due: a ready job,
/// or a due job not yet promoted (which `overdue` counts); zero when nothing is overdue.
pub async fn stats_oldest_overdue<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("stats.overdue").unwrap();
    let q = queue("stats.overdue");
    t.enqueue(raw(1)).key("later").delay(HOUR).await.unwrap();
    assert_eq!(t.stats().await.unwrap().oldest_overdue_ms, 0);

    // Due but never promoted (no fetch).
    t.enqueue(raw(1)).key("due").delay(ms(20)).await.unwrap();
    let due = info(&t, "due").await.due_ms;
    until_store_time(h, due + 60).await;
    let before = now(h).await;
    let st = t.stats().await.unwrap();
    let after = now(h).await;
    assert!(
        (before - due..=after - due).contains(&st.oldest_overdue_ms),
        "{st:?} due {due} now {before}..{after}"
    );
    assert_eq!((st.overdue, st.scheduled, st.ready), (1, 2, 0), "{st:?}");

    // Promoted to ready, still not started: the same job, still counted.
    let reply = fetch(h, &q, &req_max(0)).await;
    assert!(reply.jobs.is_empty());
    assert_eq!(info(&t, "due").await.state, JobState::Ready);
    let before = now(h).await;
    let st = t.stats().await.unwrap();
    let after = now(h).await;
    assert!(
        (before - due..=after - due).contains(&st.oldest_overdue_ms),
        "{st:?}"
    );
    assert_eq!((st.overdue, st.scheduled, st.ready), (0, 1, 1), "{st:?}");

    // Started: nothing is overdue any more.
    let jobs = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&jobs), ["due"]);
    let st = t.stats().await.unwrap();
    assert_eq!((st.oldest_overdue_ms, st.overdue), (0, 0), "{st:?}");
    ack_all(h, &q, &jobs).await;
}

/// A wake-up token is left for a job due now and for a job that became the earliest; not for
/// one queued behind an earlier job.
pub async fn wake_tokens_for_due_and_earliest_jobs<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("wake").unwrap();
    let q = queue("wake");
    let mut listener = h.store().wake_listener(&q).await.unwrap();
    t.enqueue(raw(1)).key("later").delay(HOUR).await.unwrap();
    assert!(listener.wait(ms(1000)).await.unwrap(), "new earliest job");
    t.enqueue(raw(1))
        .key("even-later")
        .delay(2 * HOUR)
        .await
        .unwrap();
    assert!(!listener.wait(ms(20)).await.unwrap(), "not the earliest");
    t.enqueue(raw(1)).key("now").await.unwrap();
    assert!(listener.wait(ms(1000)).await.unwrap(), "due now");
    let jobs = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&jobs), ["now"]);
    ack_all(h, &q, &jobs).await;
}

/// After a mixed workload over two partitions in which every job ends — acked, cancelled, or
/// dead and purged — no job data is left.
pub async fn no_leftovers_after_mixed_workload<H: Harness>(h: &H) {
    let c = h.client_with(|b| b.partitions("mixed", 2)).await.unwrap();
    let t = c.topic("mixed").unwrap();
    let queues = [
        Queue::new(Topic::new("mixed").unwrap(), 0),
        Queue::new(Topic::new("mixed").unwrap(), 1),
    ];
    let jobs: Vec<_> = (0..40)
        .map(|i| {
            let j = JobSpec::new(raw(i)).key(format!("m{i}"));
            if i.is_multiple_of(3) {
                j.delay(ms(100))
            } else {
                j
            }
        })
        .collect();
    t.enqueue_bulk(jobs).await.unwrap();
    // Cancel some ready and some scheduled ones (ready ones leave stale hints behind), replace
    // and reschedule others.
    for i in [1, 2, 3, 6, 10] {
        assert_eq!(
            t.cancel(&format!("m{i}")).await.unwrap(),
            CancelOutcome::Cancelled
        );
    }
    t.enqueue(raw(99))
        .key("m4")
        .replace()
        .delay(ms(50))
        .await
        .unwrap();
    t.reschedule("m5", NewDue::After(ms(80))).await.unwrap();
    t.reschedule("m9", NewDue::Shift(-100)).await.unwrap();

    let mut acked = 0;
    let mut buried = 0;
    let lease_expiry = FetchRequest {
        lease: ms(50),
        retry_policy: RetryPolicy::fixed(ms(0), 1).unwrap(),
        ..req()
    };
    let deadline = Instant::now() + WAIT;
    for q in &queues {
        // Drive the partition until every job has ended: every 7th buried, every 5th fails
        // once, one lease left to expire twice (then dead), the rest acked.
        loop {
            assert!(Instant::now() < deadline, "workload did not finish");
            let reply = fetch(h, q, &lease_expiry).await;
            buried += reply.buried.len();
            for d in &reply.jobs {
                let n = unraw(&d.payload);
                if n == 8 {
                    continue; // its lease expires, twice
                }
                if n.is_multiple_of(7) {
                    fail(h, d, FailAction::Bury, "fatal").await.unwrap();
                    buried += 1;
                } else if n.is_multiple_of(5) && d.attempt == 1 {
                    fail(h, d, FailAction::Retry(ms(30)), "flaky")
                        .await
                        .unwrap();
                } else {
                    let out = h
                        .store()
                        .ack(q, "", &dq::store::Success::of(&[dq::store::lease_of(d)]))
                        .await
                        .unwrap();
                    assert_eq!(out, [AckOutcome::Acked], "{d:?}");
                    acked += 1;
                }
            }
            if reply.jobs.is_empty() && reply.next_in.is_none() {
                break;
            }
            if reply.jobs.is_empty() {
                let wait = reply.next_in.unwrap().min(ms(20));
                let target = now(h).await + wait.as_millis() as u64;
                until_store_time(h, target.saturating_sub(1)).await;
            }
        }
    }
    // Requeue one dead job and finish it; purge the rest.
    let dead = t
        .list(JobState::Dead, dq::Page::first(100))
        .await
        .unwrap()
        .jobs;
    assert_eq!(dead.len(), buried);
    let revived = dead[0].key.to_string();
    assert_eq!(t.requeue_dead(&[revived.as_str()]).await.unwrap(), 1);
    for q in &queues {
        acked += drain_due(h, q).await.len();
    }
    assert_eq!(t.purge_all_dead().await.unwrap() as usize, buried - 1);

    let st = t.stats().await.unwrap();
    assert_eq!(
        (st.scheduled, st.ready, st.active, st.retry, st.dead),
        (0, 0, 0, 0, 0),
        "{st:?}"
    );
    assert_eq!(st.cancelled, 5);
    assert_eq!(st.succeeded as usize, acked);
    assert_eq!(acked + buried - 1 + 5, 40, "every job ended exactly once");
    h.assert_no_leftovers().await;
}

/// Counters mean what happened: a running job whose cancel was requested but whose handler
/// succeeded anyway (it finished before it saw the request, or ignored it) did its work, so
/// it counts as succeeded, and in `succeeded_after_cancel_request`, never as cancelled; one
/// stopped after the request counts as cancelled. The request goes with the job.
pub async fn success_after_a_cancel_request_counts_as_succeeded<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("stats.cancel").unwrap();
    let q = queue("stats.cancel");
    for k in ["finished", "stopped", "plain"] {
        t.enqueue(raw(1)).key(k).await.unwrap();
    }
    let jobs = fetch(h, &q, &req_max(3)).await.jobs;
    assert_eq!(keys_of(&jobs), ["finished", "stopped", "plain"]);
    for d in &jobs[..2] {
        assert_eq!(
            t.cancel(d.key.as_str()).await.unwrap(),
            CancelOutcome::CancelRequested
        );
    }
    // Its handler finished anyway, and the plain one too: two successes.
    ack_all(h, &q, &[jobs[0].clone(), jobs[2].clone()]).await;
    // Its handler stopped: cancelled.
    assert_eq!(
        fail(h, &jobs[1], FailAction::Cancel, "cancelled while running")
            .await
            .unwrap(),
        FailOutcome::Cancelled
    );
    let st = t.stats().await.unwrap();
    assert_eq!(
        (
            st.succeeded,
            st.succeeded_after_cancel_request,
            st.cancelled
        ),
        (2, 1, 1),
        "{st:?}"
    );
    // A new job under the same key carries no old request.
    t.enqueue(raw(2)).key("finished").await.unwrap();
    let again = fetch(h, &q, &req_max(1)).await.jobs;
    assert_eq!(keys_of(&again), ["finished"]);
    ack_all(h, &q, &again).await;
    let st = t.stats().await.unwrap();
    assert_eq!(
        (
            st.succeeded,
            st.succeeded_after_cancel_request,
            st.cancelled
        ),
        (3, 1, 1),
        "{st:?}"
    );
}
