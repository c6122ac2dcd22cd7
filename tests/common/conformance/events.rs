//! Conformance bodies: the event stream (`dq_core::events`). A topic that records events gets
//! one event per change of a job, written by the call that makes the change, in order, each
//! naming the job, the attempt and what the kind carries; a topic that does not records none;
//! the stream is bounded; a reader resumes from a cursor with nothing missed or repeated.

use super::*;
use dq::store::Success;
use dq::{EventId, EventKind, EventsFrom, EventsPolicy};

/// Every event of `q` kept, oldest first.
async fn all_events<H: Harness>(h: &H, q: &Queue) -> Vec<dq::Event> {
    h.store()
        .read_events(q, EventId::ZERO, 10_000)
        .await
        .expect("read_events")
}

fn kinds(events: &[dq::Event]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| (e.kind.to_string(), e.key.clone()))
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, key)| ((*k).to_owned(), (*key).to_owned()))
        .collect()
}

/// Each change of a job is one event, in the order the changes were made: enqueued, started,
/// succeeded (with the worker), failed (with the error and the next due time), deferred,
/// released, dead, cancelled, expired; the lease that ran out too.
pub async fn every_change_of_a_job_is_an_event<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("events.all").unwrap();
    let q = queue("events.all");
    let on = t
        .set_events(Some(EventsPolicy::keep(1000).unwrap()))
        .await
        .unwrap();
    assert_eq!(on.events, Some(EventsPolicy { max_kept: 1000 }));
    let start = now(h).await;

    t.enqueue(raw(1)).key("ok").await.unwrap();
    let d = fetch_one(h, &q, &req()).await;
    let out = h
        .store()
        .ack(&q, "worker-7", &[Success::new(d.key.clone(), d.token)])
        .await
        .unwrap();
    assert_eq!(out, vec![AckOutcome::Acked]);

    t.enqueue(raw(2)).key("retry").await.unwrap();
    let d = fetch_one(h, &q, &req()).await;
    fail(h, &d, FailAction::Retry(Duration::from_secs(3600)), "boom")
        .await
        .unwrap();

    t.enqueue(raw(3)).key("later").await.unwrap();
    let d = fetch_one(h, &q, &req()).await;
    fail(
        h,
        &d,
        FailAction::Defer(Duration::from_secs(3600)),
        "not yet",
    )
    .await
    .unwrap();

    t.enqueue(raw(4)).key("back").await.unwrap();
    let d = fetch_one(h, &q, &req()).await;
    assert_eq!(
        h.store()
            .release(&q, &[(d.key.clone(), d.token)])
            .await
            .unwrap(),
        vec![true]
    );
    let d = fetch_one(h, &q, &req()).await; // started again: released jobs go first
    assert_eq!(d.key.as_str(), "back");
    fail(h, &d, FailAction::Bury, "gave up").await.unwrap();

    t.enqueue(raw(5))
        .key("gone")
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(t.cancel("gone").await.unwrap(), CancelOutcome::Cancelled);

    t.enqueue(raw(6))
        .key("late")
        .delay(ms(30))
        .expires_after(ms(60))
        .await
        .unwrap();
    let late = info(&t, "late").await;
    until_store_time(h, late.expires_ms.unwrap()).await;
    let reply = fetch(h, &q, &req()).await;
    assert!(reply.jobs.is_empty(), "an expired job is not leased");

    // a lease that runs out: failed (lease expired), then, with no retry left, dead
    t.enqueue(raw(7)).key("lost").await.unwrap();
    let short = FetchRequest {
        lease: ms(50),
        retry_policy: RetryPolicy::none(),
        ..req()
    };
    let d = fetch_one(h, &q, &short).await;
    until_store_time(h, d.leased_ms + 51).await;
    dq_testkit::eventually("the expired lease is recovered", WAIT, || async {
        fetch(h, &q, &short).await;
        info(&t, "lost").await.state == JobState::Dead
    })
    .await;

    let events = all_events(h, &q).await;
    assert_eq!(
        kinds(&events),
        pairs(&[
            ("enqueued", "ok"),
            ("started", "ok"),
            ("succeeded", "ok"),
            ("enqueued", "retry"),
            ("started", "retry"),
            ("failed", "retry"),
            ("enqueued", "later"),
            ("started", "later"),
            ("deferred", "later"),
            ("enqueued", "back"),
            ("started", "back"),
            ("released", "back"),
            ("started", "back"),
            ("dead", "back"),
            ("enqueued", "gone"),
            ("cancelled", "gone"),
            ("enqueued", "late"),
            ("expired", "late"),
            ("enqueued", "lost"),
            ("started", "lost"),
            ("dead", "lost"),
        ])
    );
    for pair in events.windows(2) {
        assert!(pair[0].id < pair[1].id, "ids grow: {pair:?}");
    }
    for e in &events {
        assert_eq!((e.topic.as_str(), e.partition), ("events.all", 0));
        assert!(e.at_ms >= start, "{e:?}");
    }
    let find = |kind: EventKind, key: &str| {
        events
            .iter()
            .find(|e| e.kind == kind && e.key == key)
            .unwrap_or_else(|| panic!("{kind} {key}"))
            .clone()
    };
    let ok = find(EventKind::Succeeded, "ok");
    assert_eq!(
        (ok.attempt, ok.worker.as_deref()),
        (Some(1), Some("worker-7"))
    );
    assert_eq!(find(EventKind::Started, "ok").attempt, Some(1));
    let failed = find(EventKind::Failed, "retry");
    assert_eq!(
        (failed.attempt, failed.error.as_deref()),
        (Some(1), Some("boom"))
    );
    assert!(
        failed.due_ms.unwrap() >= failed.at_ms + 3_599_000,
        "{failed:?}"
    );
    assert_eq!(
        find(EventKind::Deferred, "later").error.as_deref(),
        Some("not yet")
    );
    let dead = find(EventKind::Dead, "back");
    assert_eq!(
        (dead.attempt, dead.error.as_deref()),
        (Some(1), Some("gave up"))
    );
    let lost = find(EventKind::Dead, "lost");
    assert_eq!(lost.error.as_deref(), Some("lease expired"));
    // a job cancelled before it ever ran names no attempt (the scripts write 0 for none)
    assert_eq!(find(EventKind::Cancelled, "gone").attempt, None);
    let enqueued = find(EventKind::Enqueued, "gone");
    assert!(
        enqueued.due_ms.unwrap() >= enqueued.at_ms + 3_599_000,
        "{enqueued:?}"
    );
    assert_eq!(t.stats().await.unwrap().events_lost, 0);
}

/// A topic records nothing until asked, and nothing more once told to stop (what it recorded
/// stays readable).
pub async fn only_a_topic_that_asks_records_events<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("events.optin").unwrap();
    let q = queue("events.optin");
    t.enqueue(raw(1)).key("before").await.unwrap();
    assert!(all_events(h, &q).await.is_empty());
    assert_eq!(h.store().last_event(&q).await.unwrap(), None);
    assert_eq!(t.control().await.unwrap().events, None);

    t.set_events(Some(EventsPolicy::default())).await.unwrap();
    t.enqueue(raw(2)).key("during").await.unwrap();
    let off = t.set_events(None).await.unwrap();
    assert_eq!(off.events, None);
    t.enqueue(raw(3)).key("after").await.unwrap();
    let events = all_events(h, &q).await;
    assert_eq!(kinds(&events), pairs(&[("enqueued", "during")]));
    assert_eq!(h.store().last_event(&q).await.unwrap(), Some(events[0].id));
}

/// A stream keeps about its bound: at least the last `max_kept` events, never all of many
/// more (Redis trims whole nodes of 100 entries; the embedded store exactly). Events are
/// numbered on: trimmed ones are not renumbered.
pub async fn the_stream_is_bounded<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("events.bound").unwrap();
    let q = queue("events.bound");
    t.set_events(Some(EventsPolicy::keep(5).unwrap()))
        .await
        .unwrap();
    // one call per job: one stream entry each (a bulk call writes its events as one entry)
    for i in 0..300 {
        t.enqueue(raw(i)).key(format!("j{i}")).await.unwrap();
    }
    let events = all_events(h, &q).await;
    assert!(
        (5..=105).contains(&events.len()),
        "{} events kept",
        events.len()
    );
    assert_eq!(events.last().unwrap().key, "j299", "the newest are kept");
    assert_eq!(events.last().unwrap().id, EventId(300));
    assert_eq!(h.store().last_event(&q).await.unwrap(), Some(EventId(300)));
}

/// A bad bound is refused before anything changes.
pub async fn a_bad_events_policy_is_refused<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("events.bad").unwrap();
    for bad in [0, dq_core_max() + 1] {
        let err = t
            .set_events(Some(EventsPolicy { max_kept: bad }))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidConfig(_)), "{err}");
    }
    assert!(EventsPolicy::keep(0).is_err());
    assert_eq!(t.control().await.unwrap().events, None);
}

fn dq_core_max() -> u64 {
    dq::MAX_EVENTS_KEPT
}

/// `Client::events` reads every partition (four here: on a cluster, four slots) from where it
/// starts; a stream started from the cursor of another goes on exactly after the last event
/// that one handed out in each partition.
pub async fn a_reader_resumes_from_its_cursor<H: Harness>(h: &H) {
    let c = h
        .client_with(|b| b.partitions("events.read", 4))
        .await
        .unwrap();
    let t = c.topic("events.read").unwrap();
    t.set_events(Some(EventsPolicy::default())).await.unwrap();
    t.enqueue(raw(0)).key("old").await.unwrap();
    let opts = || {
        dq::EventsOptions::default()
            .topics(["events.read"])
            .poll(ms(5))
    };
    let mut stream = c.events_with(opts()).await.unwrap();
    for i in 1..=4 {
        t.enqueue(raw(i)).key(format!("k{i}")).await.unwrap();
    }
    let mut seen = Vec::new();
    for _ in 0..2 {
        let e = tokio::time::timeout(WAIT, stream.next())
            .await
            .expect("an event in time")
            .unwrap()
            .unwrap();
        seen.push(e.key);
    }
    assert!(
        !seen.contains(&"old".to_string()),
        "from now: the older event is not read"
    );
    let cursor: dq::EventCursor = stream.cursor().to_string().parse().unwrap();
    drop(stream);
    let mut again = c
        .events_with(opts().from(EventsFrom::Cursor(cursor)))
        .await
        .unwrap();
    let mut rest = Vec::new();
    for _ in 0..2 {
        let e = tokio::time::timeout(WAIT, again.next())
            .await
            .expect("an event in time")
            .unwrap()
            .unwrap();
        rest.push(e.key);
    }
    let mut all_keys: Vec<String> = seen.iter().chain(&rest).cloned().collect();
    all_keys.sort();
    assert_eq!(
        all_keys,
        ["k1", "k2", "k3", "k4"],
        "resumed after the last event handed out: {seen:?} then {rest:?}"
    );
    let mut all = c.events_with(opts().from(EventsFrom::Start)).await.unwrap();
    let first = tokio::time::timeout(WAIT, all.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.key, "old", "from the start: every event kept");
}

/// A read may start inside the events of one call (a bulk enqueue writes them together): it
/// returns exactly the events after the number given, in order, and none after the last.
pub async fn a_read_starts_after_any_event_number<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("events.page").unwrap();
    let q = queue("events.page");
    t.set_events(Some(EventsPolicy::default())).await.unwrap();
    let jobs: Vec<_> = (0..5)
        .map(|i| dq::JobSpec::new(raw(i)).key(format!("j{i}")))
        .collect();
    t.enqueue_bulk(jobs).await.unwrap();
    let page = h.store().read_events(&q, EventId(2), 100).await.unwrap();
    let got: Vec<(u64, &str)> = page.iter().map(|e| (e.id.0, e.key.as_str())).collect();
    assert_eq!(got, [(3, "j2"), (4, "j3"), (5, "j4")]);
    assert!(
        h.store()
            .read_events(&q, EventId(5), 100)
            .await
            .unwrap()
            .is_empty()
    );
    let first = h.store().read_events(&q, EventId::ZERO, 2).await.unwrap();
    assert!(first.len() >= 2, "{first:?}");
    assert_eq!((first[0].id, first[1].id), (EventId(1), EventId(2)));
    let recent = t.recent_events(3).await.unwrap();
    let keys: Vec<&str> = recent.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["j4", "j3", "j2"], "newest first");
    let own = t.job_events("j3").await.unwrap();
    assert_eq!(own.len(), 1);
    assert_eq!(
        (own[0].id, own[0].kind.clone()),
        (EventId(4), EventKind::Enqueued)
    );
}
