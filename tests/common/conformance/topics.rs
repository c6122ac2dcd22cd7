//! Conformance bodies: topic metadata, the single source of truth for a topic's partition
//! count: the first user records it, a client configured otherwise gets a typed error before
//! anything is written, `topics()` lists what is recorded, and a reset is refused while the
//! topic holds a job.

use super::*;

fn assert_mismatch<T: std::fmt::Debug>(
    r: dq::Result<T>,
    topic: &str,
    stored: u16,
    configured: u16,
) {
    match r {
        Err(Error::TopicMismatch {
            topic: t,
            stored: s,
            configured: c,
        }) => assert_eq!((t.as_str(), s, c), (topic, stored, configured)),
        other => panic!("expected TopicMismatch({topic}, {stored}, {configured}), got {other:?}"),
    }
}

/// Sum of `enqueued` over partitions `0..n` of `topic`, read below the client (no check).
async fn enqueued_in<H: Harness>(h: &H, topic: &str, n: u16) -> u64 {
    let mut total = 0;
    for p in 0..n {
        let q = Queue::new(Topic::new(topic).unwrap(), p);
        total += h.store().stats(&q).await.unwrap().enqueued;
    }
    total
}

/// The first client to use a topic records its partition count, with the store's time;
/// clients configured alike read it back, and `topics()` lists it.
pub async fn first_use_records_the_partition_count<H: Harness>(h: &H) {
    let c = h
        .client_with(|b| b.partitions("meta.first", 3))
        .await
        .unwrap();
    assert!(c.topics().await.unwrap().is_empty(), "nothing recorded yet");
    let before = now(h).await;
    c.topic("meta.first")
        .unwrap()
        .enqueue(raw(1))
        .key("a")
        .await
        .unwrap();
    let after = now(h).await;
    let listed = c.topics().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    let meta = &listed[0];
    assert_eq!((meta.topic.as_str(), meta.partitions), ("meta.first", 3));
    assert!(
        (before..=after).contains(&meta.created_ms),
        "{meta:?} not in {before}..{after}"
    );

    // Another client configured alike: the same record, nothing rewritten.
    let other = h
        .client_with(|b| b.partitions("meta.first", 3))
        .await
        .unwrap();
    assert_eq!(&other.check_topic("meta.first").await.unwrap(), meta);
    other
        .topic("meta.first")
        .unwrap()
        .enqueue(raw(2))
        .key("b")
        .await
        .unwrap();
    assert_eq!(&h.store().topics().await.unwrap()[0], meta);

    // A bad name is refused before anything is recorded.
    assert!(matches!(
        c.check_topic("bad topic").await,
        Err(Error::InvalidTopic { .. })
    ));
    assert_eq!(c.topics().await.unwrap().len(), 1);

    let t = c.topic("meta.first").unwrap();
    for key in ["a", "b"] {
        assert_eq!(t.cancel(key).await.unwrap(), CancelOutcome::Cancelled);
    }
}

/// A producer with 4 partitions and a client configured with 1 for the same topic
/// (`.partitions(topic, 1)`: an explicit disagreement). Whichever comes second gets
/// `TopicMismatch` from every call, before anything is written — nothing lands where no
/// fetcher looks.
pub async fn mismatch_is_a_typed_error_before_any_write<H: Harness>(h: &H) {
    let producer = h
        .client_with(|b| b.partitions("meta.split", 4))
        .await
        .unwrap();
    let p = producer.topic("meta.split").unwrap();
    for i in 0..8 {
        p.enqueue(raw(i)).key(format!("job-{i}")).await.unwrap();
    }
    assert_eq!(enqueued_in(h, "meta.split", 4).await, 8);

    let default = h
        .client_with(|b| b.partitions("meta.split", 1))
        .await
        .unwrap();
    let t = default.topic("meta.split").unwrap();
    assert_eq!(t.partitions(), 1);
    assert_mismatch(default.check_topic("meta.split").await, "meta.split", 4, 1);
    assert_mismatch(t.enqueue(raw(9)).key("job-9").await, "meta.split", 4, 1);
    assert_mismatch(
        t.enqueue_bulk(vec![JobSpec::new(raw(10)), JobSpec::new(raw(11))])
            .await,
        "meta.split",
        4,
        1,
    );
    assert_mismatch(t.cancel("job-0").await, "meta.split", 4, 1);
    assert_mismatch(
        t.reschedule("job-0", NewDue::After(HOUR)).await,
        "meta.split",
        4,
        1,
    );
    assert_mismatch(t.job("job-0").await, "meta.split", 4, 1);
    assert_mismatch(t.stats().await, "meta.split", 4, 1);
    assert_mismatch(
        t.list(JobState::Ready, dq::Page::first(10)).await,
        "meta.split",
        4,
        1,
    );
    assert_mismatch(
        t.list(JobState::Dead, dq::Page::first(10)).await,
        "meta.split",
        4,
        1,
    );
    assert_mismatch(t.requeue_dead(&["job-0"]).await, "meta.split", 4, 1);
    assert_mismatch(t.purge_dead(&["job-0"]).await, "meta.split", 4, 1);
    assert_mismatch(t.purge_all_dead().await, "meta.split", 4, 1);
    // Bad input is still bad input first.
    assert!(matches!(
        t.enqueue(raw(1)).key("a b").await,
        Err(Error::InvalidKey { .. })
    ));

    // Nothing was written: not in partition 0 (where the 1-partition client would have put
    // everything), not anywhere; every job still where the producer put it.
    assert_eq!(enqueued_in(h, "meta.split", 4).await, 8);
    let st = p.stats().await.unwrap();
    assert_eq!((st.ready, st.enqueued, st.cancelled), (8, 8, 0), "{st:?}");
    assert!(p.job("job-9").await.unwrap().is_none());
    assert_eq!(default.topics().await.unwrap()[0].partitions, 4);

    // The other order: the first user has 1 partition (its fallback), a later one 4.
    let first = h.client().await;
    first
        .topic("meta.split2")
        .unwrap()
        .enqueue(raw(1))
        .key("x")
        .await
        .unwrap();
    let wide = h
        .client_with(|b| b.partitions("meta.split2", 4))
        .await
        .unwrap();
    let w = wide.topic("meta.split2").unwrap();
    assert_mismatch(w.enqueue(raw(2)).key("y").await, "meta.split2", 1, 4);
    assert_eq!(enqueued_in(h, "meta.split2", 4).await, 1);

    // Clean up through the clients that agree.
    for i in 0..8 {
        assert_eq!(
            p.cancel(&format!("job-{i}")).await.unwrap(),
            CancelOutcome::Cancelled
        );
    }
    let t1 = first.topic("meta.split2").unwrap();
    assert_eq!(t1.cancel("x").await.unwrap(), CancelOutcome::Cancelled);
}

/// `topics()` lists every recorded topic by name with its count, on every client of the
/// store; a topic nobody used is not listed.
pub async fn topics_lists_every_recorded_topic<H: Harness>(h: &H) {
    let c = h
        .client_with(|b| b.partitions("meta.b", 2).partitions("meta.c", 7))
        .await
        .unwrap();
    for name in ["meta.c", "meta.a", "meta.b"] {
        let meta = c.check_topic(name).await.unwrap();
        assert_eq!(meta.topic.as_str(), name);
    }
    c.topic("meta.unused").unwrap(); // building a topic client records nothing
    let listed: Vec<(String, u16)> = h
        .client()
        .await
        .topics()
        .await
        .unwrap()
        .into_iter()
        .map(|m| (m.topic.to_string(), m.partitions))
        .collect();
    assert_eq!(
        listed,
        [
            ("meta.a".to_string(), 1),
            ("meta.b".to_string(), 2),
            ("meta.c".to_string(), 7)
        ]
    );
}

/// A reset is refused while the topic holds any job — waiting, running or dead — and changes
/// nothing then; once the topic is empty it deletes the record, the next user records its
/// own count, and a client still configured with the old one gets `TopicMismatch`.
pub async fn reset_refuses_while_jobs_exist<H: Harness>(h: &H) {
    let old = h
        .client_with(|b| b.partitions("meta.reset", 2))
        .await
        .unwrap();
    assert_eq!(
        old.reset_topic("meta.reset").await.unwrap(),
        None,
        "nothing recorded"
    );
    let t = old.topic("meta.reset").unwrap();
    t.enqueue(raw(1)).key("later").delay(HOUR).await.unwrap();
    t.enqueue(raw(2)).key("now").await.unwrap();
    let recorded = old.check_topic("meta.reset").await.unwrap();

    let refused = |r: dq::Result<Option<dq::TopicMeta>>, jobs: u64| match r {
        Err(Error::TopicNotEmpty { topic, jobs: n }) => {
            assert_eq!((topic.as_str(), n), ("meta.reset", jobs));
        }
        other => panic!("expected TopicNotEmpty({jobs}), got {other:?}"),
    };
    refused(old.reset_topic("meta.reset").await, 2);
    // Running, then dead: still jobs.
    t.cancel("later").await.unwrap();
    let q = Queue::new(Topic::new("meta.reset").unwrap(), jk("now").partition(2));
    let d = fetch_one(h, &q, &req()).await;
    refused(old.reset_topic("meta.reset").await, 1);
    fail(h, &d, FailAction::Bury, "dead").await.unwrap();
    refused(old.reset_topic("meta.reset").await, 1);
    assert_eq!(
        h.store().topics().await.unwrap(),
        std::slice::from_ref(&recorded)
    );
    assert_eq!(t.purge_all_dead().await.unwrap(), 1);

    // Empty: the record goes.
    assert_eq!(old.reset_topic("meta.reset").await.unwrap(), Some(recorded));
    assert!(old.topics().await.unwrap().is_empty());
    // The next user records its own count.
    let new = h
        .client_with(|b| b.partitions("meta.reset", 5))
        .await
        .unwrap();
    let n = new.topic("meta.reset").unwrap();
    n.enqueue(raw(3)).key("again").await.unwrap();
    assert_eq!(new.topics().await.unwrap()[0].partitions, 5);
    // The old count is refused now, also by the client that reset (it forgot its copy).
    assert_mismatch(t.enqueue(raw(4)).key("stale").await, "meta.reset", 5, 2);
    assert_eq!(n.cancel("again").await.unwrap(), CancelOutcome::Cancelled);
}

/// Issue 27: a client that did not configure a topic's count (the default, or
/// `default_partitions`) adopts the recorded count, and every call routes with it: it finds,
/// cancels, lists and counts the jobs a 4-partition producer stored, and its own enqueues go
/// where a 4-partition worker fetches.
pub async fn an_unconfigured_client_adopts_the_recorded_count<H: Harness>(h: &H) {
    let producer = h
        .client_with(|b| b.partitions("meta.adopt", 4))
        .await
        .unwrap();
    let p = producer.topic("meta.adopt").unwrap();
    for i in 0..8 {
        p.enqueue(raw(i)).key(format!("job-{i}")).await.unwrap();
    }
    for fallback in [None, Some(2)] {
        let c = match fallback {
            None => h.client().await,
            Some(n) => h.client_with(|b| b.default_partitions(n)).await.unwrap(),
        };
        let t = c.topic("meta.adopt").unwrap();
        assert!(!t.count().is_configured());
        assert_eq!(c.check_topic("meta.adopt").await.unwrap().partitions, 4);
        for i in 0..8 {
            let key = format!("job-{i}");
            let job = t.job(&key).await.unwrap();
            assert!(job.is_some(), "{key} not found with fallback {fallback:?}");
        }
        let page = t.list(JobState::Ready, dq::Page::first(100)).await.unwrap();
        assert_eq!(page.jobs.len(), 8, "fallback {fallback:?}");
    }
    let c = h.client().await;
    let t = c.topic("meta.adopt").unwrap();
    assert_eq!(t.stats().await.unwrap().ready, 8);
    // Its enqueues land in the partition the producer's routing names.
    t.enqueue(raw(8)).key("job-8").await.unwrap();
    t.enqueue_bulk(vec![JobSpec::new(raw(9)).key("job-9")])
        .await
        .unwrap();
    assert!(p.job("job-8").await.unwrap().is_some());
    assert!(p.job("job-9").await.unwrap().is_some());
    assert_eq!(t.cancel("job-3").await.unwrap(), CancelOutcome::Cancelled);
    assert!(p.job("job-3").await.unwrap().is_none());
    assert_eq!(t.requeue_dead(&["job-1"]).await.unwrap(), 0);
    assert_eq!(enqueued_in(h, "meta.adopt", 4).await, 10);
    assert_eq!(p.stats().await.unwrap().ready, 9);
    assert_eq!(c.topics().await.unwrap()[0].partitions, 4);
}
