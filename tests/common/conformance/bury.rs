//! Conformance bodies: burying a waiting job (`TopicClient::bury`, `Operate::bury`). A
//! scheduled, retry or ready job (of any priority, of a group) goes to the dead queue without
//! running, as a failed attempt's burial takes it there: attempts kept, the reason in its
//! history, counted, a `dead` event, its `unique_for` window started, requeued from there like
//! any dead job; a member of a batch ends there as dead. A running, dead or unknown job is not
//! touched.

use super::*;
use dq::batch::{OutboxNote, relay_outbox};
use dq::{BatchStatus, BuryOutcome, EventId, EventKind, EventsPolicy, GroupLimits, MemberState};

/// The last entry of `key`'s history, as (outcome, error).
async fn last_entry(t: &TopicClient, key: &str) -> (AttemptOutcome, String) {
    let job = info(t, key).await;
    let last = job.history.last().expect("a history entry");
    (last.outcome, last.error.clone())
}

/// Scheduled, retry, ready (normal and high priority) jobs are buried: dead, never delivered,
/// attempts kept, the reason last in their history, counted as buried, each a `dead` event
/// with its reason; a running job answers `Running`, a dead one `Dead` (a second bury too), an
/// unknown key `NotFound`, none touched. An empty reason is kept as "buried", a long one cut.
/// A buried job is listed dead and is requeued from there and runs.
pub async fn bury_takes_a_waiting_job_from_every_state<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("bury.states").unwrap();
    let q = queue("bury.states");
    t.set_events(Some(EventsPolicy::keep(1000).unwrap()))
        .await
        .unwrap();
    for k in ["f", "a", "d"] {
        t.enqueue(raw(0)).key(k).await.unwrap();
    }
    let jobs = fetch(h, &q, &req_max(3)).await.jobs;
    assert_eq!(keys_of(&jobs), ["f", "a", "d"]);
    fail(h, &jobs[0], FailAction::Retry(HOUR), "first try")
        .await
        .unwrap();
    fail(h, &jobs[2], FailAction::Bury, "died").await.unwrap();
    t.enqueue(raw(0)).key("s").delay(HOUR).await.unwrap();
    t.enqueue(raw(0)).key("r").await.unwrap();
    t.enqueue(raw(0))
        .key("p")
        .priority(dq::Priority::new(9).unwrap())
        .await
        .unwrap();
    t.enqueue(raw(0)).key("e").delay(HOUR).await.unwrap();
    t.enqueue(raw(0)).key("long").delay(HOUR).await.unwrap();
    let before = t.stats().await.unwrap();
    assert_eq!(
        (before.scheduled, before.ready, before.retry, before.dead),
        (3, 2, 1, 1),
        "{before:?}"
    );

    for k in ["s", "f", "r", "p"] {
        assert_eq!(
            t.bury(k, &format!("{k}: not wanted")).await.unwrap(),
            BuryOutcome::Buried,
            "{k}"
        );
    }
    assert_eq!(t.bury("e", "").await.unwrap(), BuryOutcome::Buried);
    let long = "x".repeat(5000);
    assert_eq!(t.bury("long", &long).await.unwrap(), BuryOutcome::Buried);
    assert_eq!(t.bury("a", "no").await.unwrap(), BuryOutcome::Running);
    assert_eq!(t.bury("d", "no").await.unwrap(), BuryOutcome::Dead);
    assert_eq!(t.bury("s", "again").await.unwrap(), BuryOutcome::Dead);
    assert_eq!(
        t.bury("missing", "no").await.unwrap(),
        BuryOutcome::NotFound
    );

    for k in ["s", "f", "r", "p"] {
        let job = info(&t, k).await;
        assert_eq!(job.state, JobState::Dead, "{k}: {job:?}");
        assert!(job.died_ms.is_some(), "{k}: {job:?}");
        assert_eq!(
            last_entry(&t, k).await,
            (AttemptOutcome::Buried, format!("{k}: not wanted")),
            "{k}"
        );
    }
    // attempts are kept: the retry job's one failed attempt, then its burial
    let f = info(&t, "f").await;
    assert_eq!(f.attempts, 1, "{f:?}");
    assert_eq!(f.history.len(), 2, "{f:?}");
    assert_eq!(f.history[0].outcome, AttemptOutcome::Failed);
    assert_eq!(info(&t, "s").await.attempts, 0);
    assert_eq!(
        last_entry(&t, "e").await,
        (AttemptOutcome::Buried, "buried".into())
    );
    let (_, cut) = last_entry(&t, "long").await;
    assert!(
        cut.len() < long.len() && cut.ends_with("[cut from 5000 bytes]"),
        "{cut}"
    );
    // the running and the dead job are untouched
    assert_eq!(info(&t, "a").await.state, JobState::Active);
    let d = info(&t, "d").await;
    assert_eq!(
        (d.history.len(), d.history[0].error.as_str()),
        (1, "died"),
        "{d:?}"
    );

    let st = t.stats().await.unwrap();
    assert_eq!(
        (
            st.scheduled,
            st.ready,
            st.retry,
            st.active,
            st.dead,
            st.buried
        ),
        (0, 0, 0, 1, 7, 7),
        "{st:?}"
    );
    // listed dead, with the reason
    let dead = dead_page(h, &q, 0, 100).await;
    let mut listed: Vec<&str> = dead.iter().map(|j| j.key.as_str()).collect();
    listed.sort_unstable();
    assert_eq!(listed, ["d", "e", "f", "long", "p", "r", "s"]);
    // one `dead` event per burial, with its reason
    let events = h
        .store()
        .read_events(&q, EventId::ZERO, 10_000)
        .await
        .unwrap();
    for k in ["s", "f", "r", "p", "e"] {
        let dead: Vec<_> = events
            .iter()
            .filter(|e| e.kind == EventKind::Dead && e.key == k)
            .collect();
        assert_eq!(dead.len(), 1, "{k}: {events:?}");
        let want = if k == "e" {
            "buried".to_owned()
        } else {
            format!("{k}: not wanted")
        };
        assert_eq!(dead[0].error.as_deref(), Some(want.as_str()), "{k}");
    }
    assert!(
        !events
            .iter()
            .any(|e| e.kind == EventKind::Dead && (e.key == "a" || e.key == "missing")),
        "{events:?}"
    );

    // nothing buried is delivered
    let reply = fetch(h, &q, &req()).await;
    assert!(reply.jobs.is_empty(), "buried jobs delivered: {reply:?}");
    // requeued from the dead queue, a buried job runs
    assert_eq!(t.requeue_dead(&["s", "p"]).await.unwrap(), 2);
    let ran = drain_due(h, &q).await;
    let mut ran = keys_of(&ran);
    ran.sort();
    assert_eq!(ran, ["p", "s"]);
    ack_all(h, &q, &jobs[1..2]).await;
    t.purge_all_dead().await.unwrap();
}

/// A buried job with a `unique_for` window starts it, as any burial does: its key is refused
/// until the window ends.
pub async fn bury_starts_the_unique_for_window<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("bury.window").unwrap();
    let window = Duration::from_secs(600);
    t.enqueue(raw(1))
        .key("u")
        .delay(HOUR)
        .unique_for(window)
        .await
        .unwrap();
    let before = now(h).await;
    assert_eq!(t.bury("u", "gone").await.unwrap(), BuryOutcome::Buried);
    match t.enqueue(raw(2)).key("u").await.unwrap().outcome {
        EnqueueOutcome::Refused { until_ms } => {
            assert!(until_ms >= before + 600_000, "{before} {until_ms}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(info(&t, "u").await.state, JobState::Dead);
    t.purge_all_dead().await.unwrap();
}

/// A ready job of a group is buried out of its group's queue: the group, at a cap of one,
/// runs its next job, and a fetch leases nothing of the buried one.
pub async fn bury_of_a_grouped_ready_job_leaves_its_group_free<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("bury.groups").unwrap();
    let q = queue("bury.groups");
    t.set_group_limits(Some("g"), Some(GroupLimits::new().concurrency(1)))
        .await
        .unwrap();
    for k in ["g1", "g2"] {
        t.enqueue(raw(1)).key(k).group("g").await.unwrap();
    }
    t.enqueue(raw(1))
        .key("g3")
        .group("g")
        .delay(HOUR)
        .await
        .unwrap();
    assert_eq!(
        t.bury("g1", "not this one").await.unwrap(),
        BuryOutcome::Buried
    );
    assert_eq!(t.bury("g3", "nor this").await.unwrap(), BuryOutcome::Buried);
    let got = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&got), ["g2"]);
    assert_eq!(t.bury("g2", "running").await.unwrap(), BuryOutcome::Running);
    let g = t.group_state(Some("g")).await.unwrap();
    assert_eq!(g.running, 1, "{g:?}");
    ack_all(h, &q, &got).await;
    // the group is free: a new job of it runs at once
    t.enqueue(raw(1)).key("g4").group("g").await.unwrap();
    let next = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&next), ["g4"]);
    ack_all(h, &q, &next).await;
    assert_eq!(
        info(&t, "g1")
            .await
            .group
            .as_ref()
            .map(dq::GroupName::as_str),
        Some("g")
    );
    assert_eq!(t.stats().await.unwrap().dead, 2);
    t.purge_all_dead().await.unwrap();
}

/// A buried member of a batch ends there as dead: its end is noted once in its partition's
/// outbox (a job in no batch notes nothing), the relay applies it, and the batch (closed,
/// its only member dead) is complete with one dead.
pub async fn bury_of_a_batch_member_ends_it_dead_in_its_batch<H: Harness>(h: &H) {
    let c = h.client().await;
    let topic = "bury.batch";
    let t = c.topic(topic).unwrap();
    let q = queue(topic);
    let batch = c.new_batch().id("bury-batch").open().await.unwrap();
    let out = batch
        .add_raw(topic, vec![JobSpec::new(raw(1)).key("m").delay(HOUR)])
        .await
        .unwrap();
    assert_eq!(out[0].outcome, EnqueueOutcome::Created, "{out:?}");
    t.enqueue(raw(1)).key("plain").delay(HOUR).await.unwrap();
    let info0 = batch.close().await.unwrap();
    assert!(!info0.done, "{info0:?}");

    assert_eq!(
        t.bury("plain", "no batch").await.unwrap(),
        BuryOutcome::Buried
    );
    assert!(h.store().outbox(&q, None, 100).await.unwrap().is_empty());
    assert_eq!(
        t.bury("m", "child x dead").await.unwrap(),
        BuryOutcome::Buried
    );
    assert_eq!(t.bury("m", "again").await.unwrap(), BuryOutcome::Dead);
    let notes: Vec<OutboxNote> = h.store().outbox(&q, None, 100).await.unwrap();
    let seen: Vec<_> = notes
        .iter()
        .map(|n| (n.batch.to_string(), n.key.to_string(), n.outcome))
        .collect();
    assert_eq!(
        seen,
        [("bury-batch".to_owned(), "m".to_owned(), MemberState::Dead)]
    );
    assert_eq!(relay_outbox(&c, &q).await.unwrap(), 1);
    let info = batch.info().await.unwrap().unwrap();
    assert_eq!((info.counts.dead, info.counts.total()), (1, 1), "{info:?}");
    assert_eq!(info.status(), BatchStatus::Done, "{info:?}");
    assert!(h.store().outbox(&q, None, 100).await.unwrap().is_empty());
    assert_eq!(
        last_entry(&t, "m").await,
        (AttemptOutcome::Buried, "child x dead".into())
    );
    t.purge_all_dead().await.unwrap();
}
