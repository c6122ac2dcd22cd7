//! Conformance bodies: priorities. Among the due jobs of a partition, a fetch leases every job
//! of a higher priority before any of a lower one, FIFO within a priority; a job keeps its
//! priority through a retry, a deferral, a release, a reschedule and a requeue from the dead
//! queue; below-normal jobs wait for every due job of normal priority; a priority needs record
//! format 5.

use super::*;
use dq::Priority;
use dq::store::{EXPIRING_FORMAT, PRIORITY_FORMAT};

fn p(level: u8) -> Priority {
    Priority::new(level).unwrap()
}

/// Enqueues `key` due now with `priority` (raw payload = its index).
async fn put(t: &TopicClient, key: &str, priority: Priority) {
    let outcome = t.enqueue(raw(0)).key(key).priority(priority).await.unwrap();
    assert_eq!(outcome.outcome, EnqueueOutcome::Created, "{key}");
}

/// Fetches one job at a time until `n` were leased; their keys in lease order.
async fn lease_one_by_one<H: Harness>(h: &H, q: &Queue, n: usize) -> Vec<String> {
    let mut keys = Vec::new();
    for _ in 0..n {
        let d = fetch_one(h, q, &req()).await;
        keys.push(d.key.as_str().to_owned());
    }
    keys
}

/// Due jobs come out highest priority first, FIFO within one, whether one fetch takes them
/// all or each takes one; the job reports its priority.
pub async fn due_jobs_are_leased_highest_priority_first<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("prio.order").unwrap();
    let q = queue("prio.order");
    let order = [
        ("n1", Priority::NORMAL),
        ("low1", Priority::LOW),
        ("high1", Priority::HIGH),
        ("n2", Priority::NORMAL),
        ("top", Priority::HIGHEST),
        ("high2", Priority::HIGH),
        ("lowest", Priority::LOWEST),
        ("low2", Priority::LOW),
    ];
    for (key, priority) in order {
        put(&t, key, priority).await;
    }
    assert_eq!(info(&t, "high1").await.priority, Priority::HIGH);
    assert_eq!(info(&t, "n1").await.priority, Priority::NORMAL);
    let expected = [
        "top", "high1", "high2", "n1", "n2", "low1", "low2", "lowest",
    ];
    // the ready listing shows the due queue in the order a fetch takes it
    let page = t.list(JobState::Ready, dq::Page::first(100)).await.unwrap();
    let listed: Vec<&str> = page.jobs.iter().map(|j| j.key.as_str()).collect();
    assert_eq!(listed, expected);
    let one_fetch = fetch(h, &q, &req()).await;
    assert_eq!(keys_of(&one_fetch.jobs), expected);
    ack_all(h, &q, &one_fetch.jobs).await;

    for (key, priority) in order {
        put(&t, key, priority).await;
    }
    assert_eq!(lease_one_by_one(h, &q, expected.len()).await, expected);
    assert_eq!(t.stats().await.unwrap().active, expected.len() as u64);
}

/// Jobs that become due together are leased by priority: a high-priority job enqueued after
/// many normal ones due at the same moment comes first, and a low one waits until every due
/// job of normal priority has gone.
pub async fn jobs_due_together_are_leased_by_priority<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("prio.delayed").unwrap();
    let q = queue("prio.delayed");
    let at = dq::store::from_unix_ms(now(h).await + 300);
    let mut specs: Vec<JobSpec<Vec<u8>>> = Vec::new();
    specs.push(
        JobSpec::new(raw(0))
            .key("low")
            .at(at)
            .priority(Priority::LOW),
    );
    for i in 0..20 {
        specs.push(JobSpec::new(raw(i)).key(format!("bulk-{i:02}")).at(at));
    }
    specs.push(
        JobSpec::new(raw(0))
            .key("urgent")
            .at(at)
            .priority(Priority::HIGHEST),
    );
    t.enqueue_bulk(specs).await.unwrap();
    until_store_time(h, now(h).await + 300).await;
    let first = fetch_some(h, &q, &req_max(5)).await;
    let keys = keys_of(&first);
    assert_eq!(keys[0], "urgent", "{keys:?}");
    assert_eq!(&keys[1..], ["bulk-00", "bulk-01", "bulk-02", "bulk-03"]);
    let mut rest = Vec::new();
    for _ in 0..40 {
        let got = fetch(h, &q, &req_max(3)).await.jobs;
        if got.is_empty() && rest.len() == 17 {
            break;
        }
        rest.extend(keys_of(&got));
    }
    assert_eq!(rest.len(), 17, "{rest:?}");
    assert_eq!(rest.last().map(String::as_str), Some("low"), "{rest:?}");
    let bulk: Vec<String> = (4..20).map(|i| format!("bulk-{i:02}")).collect();
    assert_eq!(&rest[..16], bulk.as_slice());
}

/// A job keeps its priority when it fails and waits for its retry, when it is deferred, when
/// it is released at shutdown (to the front of its priority), when it is rescheduled to now
/// and when it is requeued from the dead queue.
pub async fn a_job_keeps_its_priority_through_every_move<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("prio.moves").unwrap();
    let q = queue("prio.moves");
    put(&t, "h", Priority::HIGH).await;
    // retry: due at once again, ahead of normal jobs queued since
    let d = fetch_one(h, &q, &req()).await;
    fail(h, &d, FailAction::Retry(ms(1)), "boom").await.unwrap();
    put(&t, "n1", Priority::NORMAL).await;
    until_store_time(h, now(h).await + 2).await;
    let d = fetch_one(h, &q, &req()).await;
    assert_eq!(d.key.as_str(), "h");
    assert_eq!(info(&t, "h").await.priority, Priority::HIGH);
    // deferred at once: ahead of the normal one again
    fail(h, &d, FailAction::Defer(ms(0)), "not yet")
        .await
        .unwrap();
    let d = fetch_one(h, &q, &req()).await;
    assert_eq!(d.key.as_str(), "h");
    // released: to the front of its priority, before one queued since
    put(&t, "h2", Priority::HIGH).await;
    let released = h
        .store()
        .release(&q, &[(d.key.clone(), d.token)])
        .await
        .unwrap();
    assert_eq!(released, vec![true]);
    assert_eq!(lease_one_by_one(h, &q, 3).await, ["h", "h2", "n1"]);
    // rescheduled to now and requeued from the dead queue: still high
    t.enqueue(raw(0))
        .key("later")
        .delay(Duration::from_secs(3600))
        .priority(Priority::HIGHEST)
        .await
        .unwrap();
    put(&t, "n2", Priority::NORMAL).await;
    t.reschedule("later", NewDue::After(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(fetch_one(h, &q, &req()).await.key.as_str(), "later");
    put(&t, "doomed", Priority::LOWEST).await;
    let d = fetch_one(h, &q, &req()).await;
    assert_eq!(d.key.as_str(), "n2", "normal before lowest");
    let d2 = fetch_one(h, &q, &req()).await;
    assert_eq!(d2.key.as_str(), "doomed");
    fail(h, &d2, FailAction::Bury, "bad").await.unwrap();
    put(&t, "n3", Priority::NORMAL).await;
    assert_eq!(t.requeue_dead(&["doomed"]).await.unwrap(), 1);
    assert_eq!(info(&t, "doomed").await.priority, Priority::LOWEST);
    assert_eq!(lease_one_by_one(h, &q, 2).await, ["n3", "doomed"]);
    ack_all(h, &q, &[d]).await;
}

/// A priority above 9 is refused before any write; a namespace that writes format 4 (an
/// older dq is live) refuses a job of another priority than normal with `NeedsFormat`,
/// writing nothing, and stores normal ones as before; at level 5 the same call succeeds.
pub async fn a_priority_is_checked_and_needs_format_5<H: Harness>(h: &H) {
    assert!(matches!(Priority::new(10), Err(Error::InvalidPriority(10))));
    assert_eq!(p(9), Priority::HIGHEST);
    let c = h.client().await;
    let t = c.topic("prio.level").unwrap();
    assert_eq!(
        h.store().formats().set_write(EXPIRING_FORMAT),
        EXPIRING_FORMAT
    );
    match t.enqueue(raw(1)).key("hi").priority(p(8)).await {
        Err(Error::NeedsFormat { needs, level, .. }) => {
            assert_eq!((needs, level), (PRIORITY_FORMAT, EXPIRING_FORMAT));
        }
        other => panic!("a priority at level 4 is refused: {other:?}"),
    }
    assert!(t.job("hi").await.unwrap().is_none());
    let bulk = t
        .enqueue_bulk(vec![
            JobSpec::new(raw(2)).key("a"),
            JobSpec::new(raw(3)).key("b").priority(p(1)),
        ])
        .await;
    assert!(bulk.is_err(), "{bulk:?}");
    assert!(
        t.job("a").await.unwrap().is_none(),
        "nothing of the bulk written"
    );
    t.enqueue(raw(4))
        .key("plain")
        .priority(Priority::NORMAL)
        .await
        .unwrap();
    assert_eq!(
        h.store().formats().set_write(PRIORITY_FORMAT),
        PRIORITY_FORMAT
    );
    t.enqueue(raw(1)).key("hi").priority(p(8)).await.unwrap();
    assert_eq!(info(&t, "hi").await.priority, p(8));
    let q = queue("prio.level");
    let jobs = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&jobs), ["hi", "plain"]);
    ack_all(h, &q, &jobs).await;
}

/// A job below normal priority is leased by any fetch with room left once the jobs of normal
/// priority are taken, also by one that finds other jobs due (a steady trickle of due jobs
/// never starves it), and a low job found due is leased at once when room is left.
pub async fn a_low_job_is_leased_whenever_room_is_left<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("prio.low").unwrap();
    let q = queue("prio.low");
    put(&t, "low-ready", Priority::LOWEST).await;
    let at = dq::store::from_unix_ms(now(h).await + 50);
    t.enqueue(raw(0)).key("normal-due").at(at).await.unwrap();
    t.enqueue(raw(0))
        .key("low-due")
        .at(at)
        .priority(Priority::LOW)
        .await
        .unwrap();
    until_store_time(h, now(h).await + 50).await;
    let jobs = fetch(h, &q, &req_max(5)).await.jobs;
    assert_eq!(keys_of(&jobs), ["normal-due", "low-ready", "low-due"]);
    ack_all(h, &q, &jobs).await;
}
