//! Conformance bodies: groups. A grouped job, once due, waits for its group's turn: fetches
//! serve the groups in turns (one job per turn, or the group's weight), never start a job of
//! a group over its concurrency cap or rate, or while a handler's throttle holds the group
//! (and only that group); a job keeps its group through every move; a group needs record
//! format 6 and a valid name.

use super::*;
use dq::store::{GROUP_FORMAT, GroupChange, PRIORITY_FORMAT};
use dq::{GroupLimits, Rate};

/// Enqueues `key` due now in `group`.
async fn put(t: &TopicClient, group: &str, key: &str) {
    let out = t.enqueue(raw(0)).key(key).group(group).await.unwrap();
    assert_eq!(out.outcome, EnqueueOutcome::Created, "{key}");
}

/// Enqueues `n` jobs `<group><i>` (i from 1) in each group, group after group.
async fn put_groups(t: &TopicClient, groups: &[&str], n: usize) {
    for g in groups {
        for i in 1..=n {
            put(t, g, &format!("{g}{i}")).await;
        }
    }
}

/// The group of each delivery, in order.
fn groups_of(jobs: &[Delivery]) -> Vec<String> {
    jobs.iter()
        .map(|d| {
            d.group
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default()
        })
        .collect()
}

/// Groups take turns: jobs enqueued group after group are leased one group after the other,
/// whether one fetch takes them all or each takes one; a job reports its group.
pub async fn groups_take_turns<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("groups.turns").unwrap();
    let q = queue("groups.turns");
    put_groups(&t, &["a", "b", "c"], 3).await;
    assert_eq!(
        info(&t, "b2").await.group.map(|g| g.to_string()),
        Some("b".into())
    );
    // one fetch with room for all: each group's share, in its own order
    let one_fetch = fetch(h, &q, &req()).await;
    assert_eq!(
        keys_of(&one_fetch.jobs),
        ["a1", "a2", "a3", "b1", "b2", "b3", "c1", "c2", "c3"]
    );
    assert_eq!(groups_of(&one_fetch.jobs)[..1], ["a"]);
    ack_all(h, &q, &one_fetch.jobs).await;
    // room for fewer than the groups' jobs: a turn each, then again
    put_groups(&t, &["a", "b", "c"], 3).await;
    let short = fetch(h, &q, &req_max(5)).await.jobs;
    assert_eq!(keys_of(&short), ["a1", "b1", "c1", "a2", "b2"]);
    ack_all(h, &q, &short).await;
    let rest = fetch(h, &q, &req_max(3)).await.jobs;
    assert_eq!(keys_of(&rest), ["c2", "a3", "b3"]);
    ack_all(h, &q, &rest).await;
    let last = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&last), ["c3"]);
    ack_all(h, &q, &last).await;

    put_groups(&t, &["a", "b", "c"], 2).await;
    let mut keys = Vec::new();
    for _ in 0..6 {
        let d = fetch_one(h, &q, &req()).await;
        keys.push(d.key.to_string());
    }
    assert_eq!(keys, ["a1", "b1", "c1", "a2", "b2", "c2"]);
    let st = t.group_state(None).await.unwrap();
    assert_eq!((st.running, st.waiting), (6, 0), "{st:?}");
}

/// With more groups than a fetch looks at, every group gets its turn before any gets a
/// second one; a fetch leases no more than its room.
pub async fn every_group_gets_a_turn_before_any_gets_two<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("groups.many").unwrap();
    let q = queue("groups.many");
    let names: Vec<String> = (0..80).map(|i| format!("g{i:02}")).collect();
    let specs: Vec<JobSpec<Vec<u8>>> = names
        .iter()
        .flat_map(|g| {
            (1..=2).map(move |i| {
                JobSpec::new(raw(0))
                    .key(format!("{g}-{i}"))
                    .group(g.clone())
            })
        })
        .collect();
    t.enqueue_bulk(specs).await.unwrap();
    let mut first_round = Vec::new();
    for _ in 0..8 {
        let jobs = fetch(h, &q, &req_max(10)).await.jobs;
        assert_eq!(jobs.len(), 10);
        first_round.extend(groups_of(&jobs));
        ack_all(h, &q, &jobs).await;
    }
    let mut distinct = first_round.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 80, "the first 80 leases: one per group");
    let rest = drain_due(h, &q).await;
    assert_eq!(rest.len(), 80);
}

/// A group's weight is how many jobs it starts per turn.
pub async fn a_weight_is_jobs_per_turn<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("groups.weight").unwrap();
    let q = queue("groups.weight");
    t.set_group_limits(Some("a"), Some(GroupLimits::new().weight(3)))
        .await
        .unwrap();
    put_groups(&t, &["a", "b"], 6).await;
    let jobs = fetch(h, &q, &req_max(4)).await.jobs;
    assert_eq!(keys_of(&jobs), ["a1", "a2", "a3", "b1"]);
    ack_all(h, &q, &jobs).await;
    let jobs = fetch(h, &q, &req_max(4)).await.jobs;
    assert_eq!(keys_of(&jobs), ["a4", "a5", "a6", "b2"]);
    ack_all(h, &q, &jobs).await;
}

/// No group runs more jobs at once than its cap (the default one, or its own); an end of one
/// of its jobs lets the next start; the others are not held up.
pub async fn a_group_never_runs_over_its_cap<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("groups.cap").unwrap();
    let q = queue("groups.cap");
    let st = t
        .set_group_limits(None, Some(GroupLimits::new().concurrency(2)))
        .await
        .unwrap();
    assert_eq!(st.default_limits.and_then(|l| l.concurrency), Some(2));
    t.set_group_limits(Some("solo"), Some(GroupLimits::new().concurrency(1)))
        .await
        .unwrap();
    put_groups(&t, &["a", "b", "solo"], 4).await;
    let jobs = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&jobs), ["a1", "a2", "b1", "b2", "solo1"]);
    let again = fetch(h, &q, &req()).await;
    assert!(again.jobs.is_empty(), "{again:?}");
    assert!(
        again
            .next_in
            .is_some_and(|d| d > Duration::ZERO && d <= dq::CAP_RECHECK),
        "{again:?}"
    );
    let a = t.group_state(Some("a")).await.unwrap();
    assert_eq!((a.running, a.waiting), (2, 2), "{a:?}");
    // one of a's jobs ends: a's next starts, and only that one
    ack_all(h, &q, &jobs[..1]).await;
    let next = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&next), ["a3"]);
    // a failure ends a run too
    let b1 = &jobs[2];
    fail(h, b1, FailAction::Retry(HOUR), "boom").await.unwrap();
    assert_eq!(keys_of(&fetch(h, &q, &req()).await.jobs), ["b3"]);
    // a raised cap applies from the next fetch
    t.set_group_limits(Some("solo"), Some(GroupLimits::new().concurrency(3)))
        .await
        .unwrap();
    let more = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&more), ["solo2", "solo3"]);
}

/// A group's rate holds only that group: its jobs start at the rate, the others' at once.
pub async fn a_group_rate_holds_only_that_group<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("groups.rate").unwrap();
    let q = queue("groups.rate");
    let rate = Rate::new(2, Duration::from_secs(1)).unwrap();
    t.set_group_limits(Some("slow"), Some(GroupLimits::new().rate(rate)))
        .await
        .unwrap();
    put_groups(&t, &["slow", "fast"], 3).await;
    let start = now(h).await;
    let jobs = fetch(h, &q, &req()).await.jobs;
    let slow = groups_of(&jobs).iter().filter(|g| *g == "slow").count();
    assert_eq!(slow, 1, "{:?}", keys_of(&jobs));
    assert_eq!(jobs.len(), 4, "{:?}", keys_of(&jobs));
    let again = fetch(h, &q, &req()).await;
    if now(h).await < start + 400 {
        assert!(again.jobs.is_empty(), "{again:?}");
        assert!(again.next_in.is_some_and(|d| d <= ms(500)), "{again:?}");
    }
    // the next one of `slow` half a second later
    until_store_time(h, start + 500).await;
    let mut later = again.jobs;
    later.extend(fetch_some(h, &q, &req()).await);
    assert_eq!(keys_of(&later)[0], "slow2");
}

/// A handler's throttle on a grouped job holds its group only: the job waits, the group's
/// other jobs wait until then, other groups and the topic go on.
pub async fn a_throttle_holds_only_its_group<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("groups.throttle").unwrap();
    let q = queue("groups.throttle");
    put(&t, "partner", "p1").await;
    let p1 = fetch_one(h, &q, &req()).await;
    put(&t, "partner", "p2").await;
    put(&t, "other", "o1").await;
    t.enqueue(raw(0)).key("plain").await.unwrap();
    let at = match fail(h, &p1, FailAction::Throttle(ms(300)), "429").await {
        Ok(FailOutcome::Retrying { at_ms }) => at_ms,
        other => panic!("{other:?}"),
    };
    let job = info(&t, "p1").await;
    assert_eq!((job.state, job.attempts), (JobState::Scheduled, 0));
    let jobs = fetch(h, &q, &req()).await.jobs;
    if now(h).await < at {
        let mut keys = keys_of(&jobs);
        keys.sort();
        assert_eq!(keys, ["o1", "plain"]);
        let st = t.group_state(Some("partner")).await.unwrap();
        assert_eq!(st.held_until_ms, Some(at), "{st:?}");
    }
    assert_eq!(t.stats().await.unwrap().throttles, 1);
    assert!(t.control().await.unwrap().throttled_until_ms.is_none());
    ack_all(h, &q, &jobs).await;
    until_store_time(h, at).await;
    let mut rest = keys_of(&drain_due(h, &q).await);
    rest.extend(keys_of(&jobs));
    rest.sort();
    assert_eq!(rest, ["o1", "p1", "p2", "plain"]);
}

/// A grouped job keeps its group through a retry, a release (to the front of its group), a
/// reschedule and a requeue from the dead queue; within a group, higher priority first.
pub async fn a_job_keeps_its_group_through_every_move<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("groups.moves").unwrap();
    let q = queue("groups.moves");
    put(&t, "g", "g1").await;
    put(&t, "g", "g2").await;
    t.enqueue(raw(0))
        .key("urgent")
        .group("g")
        .priority(dq::Priority::HIGH)
        .await
        .unwrap();
    let first = fetch_one(h, &q, &req()).await;
    assert_eq!(first.key.as_str(), "urgent");
    // released: back to the front of its group
    h.store()
        .release(&q, &[(first.key.clone(), first.token)])
        .await
        .unwrap();
    let again = fetch_one(h, &q, &req()).await;
    assert_eq!(again.key.as_str(), "urgent");
    // a retry due at once comes back in its group
    fail(h, &again, FailAction::Retry(Duration::ZERO), "once")
        .await
        .unwrap();
    assert_eq!(
        info(&t, "urgent").await.group.map(|g| g.to_string()),
        Some("g".into())
    );
    let back = fetch_one(h, &q, &req()).await;
    assert_eq!(back.key.as_str(), "urgent");
    assert_eq!(back.group.as_ref().map(dq::GroupName::as_str), Some("g"));
    // buried, then requeued
    fail(h, &back, FailAction::Bury, "dead").await.unwrap();
    assert_eq!(t.requeue_dead(&["urgent"]).await.unwrap(), 1);
    // rescheduled later, then to now
    t.reschedule("g2", NewDue::After(HOUR)).await.unwrap();
    assert_eq!(info(&t, "g2").await.state, JobState::Scheduled);
    t.reschedule("g2", NewDue::After(Duration::ZERO))
        .await
        .unwrap();
    let mut keys = keys_of(&drain_due(h, &q).await);
    keys.sort();
    assert_eq!(keys, ["g1", "g2", "urgent"]);
}

/// A group name is checked, and a limit too, before anything is written; a group needs record
/// format 6 (while a process reading only 5 lives, it is refused and jobs without one go on).
pub async fn a_group_is_checked_and_needs_format_6<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("groups.level").unwrap();
    for bad in ["", "a b", "tab\t", "nul\0", &"x".repeat(65)] {
        let out = t.enqueue(raw(0)).key("k").group(bad).await;
        assert!(
            matches!(out, Err(Error::InvalidGroup { .. })),
            "{bad:?}: {out:?}"
        );
    }
    assert!(t.job("k").await.unwrap().is_none());
    assert!(matches!(
        t.set_group_limits(Some("g"), Some(GroupLimits::new().weight(0)))
            .await,
        Err(Error::InvalidConfig(_))
    ));
    assert!(matches!(
        t.set_group_limits(Some("g"), Some(GroupLimits::new().concurrency(0)))
            .await,
        Err(Error::InvalidConfig(_))
    ));
    let store_hold = h
        .store()
        .group(
            &queue("groups.level"),
            &GroupChange {
                group: None,
                limits: None,
                hold: Some(ms(10)),
            },
        )
        .await;
    assert!(matches!(store_hold, Err(Error::InvalidConfig(_))));
    assert_eq!(
        h.store().formats().set_write(PRIORITY_FORMAT),
        PRIORITY_FORMAT
    );
    match t.enqueue(raw(1)).key("g1").group("g").await {
        Err(Error::NeedsFormat { needs, level, .. }) => {
            assert_eq!((needs, level), (GROUP_FORMAT, PRIORITY_FORMAT));
        }
        other => panic!("a group at level 5 is refused: {other:?}"),
    }
    assert!(t.job("g1").await.unwrap().is_none());
    t.enqueue(raw(2)).key("plain").await.unwrap();
    h.store().formats().set_write(GROUP_FORMAT);
    t.enqueue(raw(1)).key("g1").group("g").await.unwrap();
    let q = queue("groups.level");
    let mut keys = keys_of(&drain_due(h, &q).await);
    keys.sort();
    assert_eq!(keys, ["g1", "plain"]);
}

/// A group a fetch empties while the same fetch queues a due job of it keeps a turn: the
/// next fetch leases that job.
pub async fn a_group_emptied_and_refilled_by_one_fetch_keeps_its_turn<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("groups.refill").unwrap();
    let q = queue("groups.refill");
    put(&t, "g", "now").await;
    let start = now(h).await;
    t.enqueue(raw(0))
        .key("soon")
        .group("g")
        .delay(ms(200))
        .await
        .unwrap();
    until_store_time(h, start + 250).await;
    // (room for two: the group's queue holds one, so this fetch empties it, then finds
    // `soon` due and queues it)
    let first = fetch(h, &q, &req_max(2)).await;
    assert_eq!(keys_of(&first.jobs), ["now"]);
    assert_eq!(first.next_in, Some(Duration::ZERO), "{first:?}");
    let st = t.group_state(Some("g")).await.unwrap();
    assert_eq!((st.running, st.waiting), (1, 1), "{st:?}");
    let second = fetch(h, &q, &req()).await;
    assert_eq!(keys_of(&second.jobs), ["soon"]);
    ack_all(h, &q, &first.jobs).await;
    ack_all(h, &q, &second.jobs).await;
}

/// A waiting job replaced by one of a group runs only within that group's limits, whatever
/// entry its earlier self left in the due queue of jobs of no group (the ready list, or
/// `pready` for another priority than normal).
pub async fn a_job_replaced_into_a_group_keeps_its_limits<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("groups.replace").unwrap();
    let q = queue("groups.replace");
    t.set_group_limits(Some("g"), Some(GroupLimits::new().concurrency(1)))
        .await
        .unwrap();
    put(&t, "g", "running").await;
    let running = fetch_one(h, &q, &req()).await;
    assert_eq!(running.key.as_str(), "running");
    t.enqueue(raw(0)).key("plain").await.unwrap();
    t.enqueue(raw(0))
        .key("urgent")
        .priority(dq::Priority::HIGH)
        .await
        .unwrap();
    for key in ["plain", "urgent"] {
        let out = t
            .enqueue(raw(1))
            .key(key)
            .group("g")
            .replace()
            .await
            .unwrap();
        assert_eq!(out.outcome, EnqueueOutcome::Replaced, "{key}");
    }
    // g is at its cap: neither runs
    let held = fetch(h, &q, &req()).await;
    assert!(held.jobs.is_empty(), "{held:?}");
    assert_eq!(t.group_state(Some("g")).await.unwrap().waiting, 2);
    // g's one job ends: one of them, then the other
    ack_all(h, &q, &[running]).await;
    let first = fetch(h, &q, &req()).await.jobs;
    assert_eq!(first.len(), 1, "{:?}", keys_of(&first));
    ack_all(h, &q, &first).await;
    let second = fetch(h, &q, &req()).await.jobs;
    assert_eq!(second.len(), 1, "{:?}", keys_of(&second));
    let mut keys = keys_of(&first);
    keys.extend(keys_of(&second));
    keys.sort();
    assert_eq!(keys, ["plain", "urgent"]);
    ack_all(h, &q, &second).await;
}
