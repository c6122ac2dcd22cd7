//! Conformance bodies: bad input: refused with a typed error before anything is written.

use super::*;

fn assert_invalid_topic<T: std::fmt::Debug>(r: dq::Result<T>, name: &str) {
    match r {
        Err(Error::InvalidTopic { name: n, .. }) => assert_eq!(n, name),
        other => panic!("expected InvalidTopic for {name:?}, got {other:?}"),
    }
}

fn assert_invalid_key<T: std::fmt::Debug>(r: dq::Result<T>, key: &str) {
    match r {
        Err(Error::InvalidKey { key: k, .. }) => assert_eq!(k, key),
        other => panic!("expected InvalidKey for {key:?}, got {other:?}"),
    }
}

/// Invalid topic names and job keys are typed errors, raised before anything is written.
pub async fn invalid_topics_and_keys_write_nothing<H: Harness>(h: &H) {
    let c = h.client().await;
    let long_topic = "t".repeat(129);
    for name in [
        "",
        "a:b",
        "{a}",
        "a}",
        "a b",
        "a\n",
        "é",
        "orders\u{200b}.close",
        "a#0",
        "*",
        &long_topic,
    ] {
        assert_invalid_topic(c.topic(name), name);
        assert_invalid_topic(h.client_with(|b| b.partitions(name, 2)).await, name);
        assert_invalid_topic(
            h.client_with(|b| b.dead_limits(name, DeadLimits::default()))
                .await,
            name,
        );
    }
    let bad = bad_topic::TOPIC;
    assert_invalid_topic(c.enqueue::<bad_topic>(1).key("k").await, bad);
    assert_invalid_topic(
        c.enqueue_bulk::<bad_topic>([JobSpec::new(1), JobSpec::new(2)])
            .await,
        bad,
    );
    assert_invalid_topic(c.cancel::<bad_topic>("k").await, bad);
    assert_invalid_topic(c.reschedule::<bad_topic>("k", NewDue::Shift(1)).await, bad);
    assert_invalid_topic(c.job::<bad_topic>("k").await, bad);
    assert_invalid_topic(c.stats::<bad_topic>().await, bad);

    let t = c.topic("bad.keys").unwrap();
    let long_key = "k".repeat(257);
    for key in [
        "",
        " ",
        "a b",
        "a\tb",
        "a\nb",
        "a\0b",
        "\u{7f}",
        "a\u{2028}b",
        // Invisible: each looks like "order7" (or "order-7") in every tool.
        "order\u{200b}7",
        "\u{feff}order-7",
        "order\u{200c}-7",
        "order\u{200d}-7",
        "order-7\u{2060}",
        "order\u{ad}7",
        "order\u{202e}7",
        &long_key,
    ] {
        assert_invalid_key(t.enqueue(raw(1)).key(key).await, key);
        assert_invalid_key(c.enqueue::<close_order>(order(1)).key(key).await, key);
        assert_invalid_key(t.cancel(key).await, key);
        assert_invalid_key(t.reschedule(key, NewDue::After(ms(1))).await, key);
        assert_invalid_key(t.job(key).await, key);
        assert_invalid_key(t.requeue_dead(&[key]).await, key);
        assert_invalid_key(t.purge_dead(&["ok", key]).await, key);
    }
    // Not even a namespace check or a counter was written.
    h.assert_untouched().await;
    // The limits themselves are accepted.
    let ok = "k".repeat(256);
    let e = t.enqueue(raw(1)).key(&ok).delay(HOUR).await.unwrap();
    assert_eq!(e.outcome, EnqueueOutcome::Created);
    c.topic(&"t".repeat(128)).unwrap();
}

/// A payload over the limit is `PayloadTooLarge`, raw or typed, single or bulk; nothing is
/// written. A payload exactly at the limit is accepted.
pub async fn oversized_payloads_are_refused<H: Harness>(h: &H) {
    let c = h.client_with(|b| b.max_payload(64)).await.unwrap();
    let t = c.topic("payload.size").unwrap();
    match t.enqueue(vec![0xc0; 65]).key("raw").await {
        Err(Error::PayloadTooLarge {
            size: 65,
            limit: 64,
        }) => {}
        other => panic!("{other:?}"),
    }
    let big = Order {
        id: 1,
        note: "x".repeat(100),
    };
    match c.enqueue::<close_order>(big.clone()).key("typed").await {
        Err(Error::PayloadTooLarge { size, limit: 64 }) => assert!(size > 100),
        other => panic!("{other:?}"),
    }
    match c
        .enqueue_bulk::<close_order>([JobSpec::new(order(1)), JobSpec::new(big)])
        .await
    {
        Err(Error::BulkItem {
            index: 1, source, ..
        }) if matches!(*source, Error::PayloadTooLarge { limit: 64, .. }) => {}
        other => panic!("{other:?}"),
    }
    h.assert_untouched().await;
    let e = t.enqueue(vec![0xc0; 64]).key("at-limit").await.unwrap();
    assert_eq!(e.outcome, EnqueueOutcome::Created);
    assert_eq!(info(&t, "at-limit").await.payload.len(), 64);
}

/// A bulk enqueue with one bad item — a bad key, an oversized payload — writes nothing, even
/// when its good items span partitions and chunks, and its error names the item (index, key).
pub async fn bulk_with_one_bad_item_writes_nothing<H: Harness>(h: &H) {
    let c = h
        .client_with(|b| b.partitions("bulk.bad", 4).bulk_chunk(3).max_payload(64))
        .await
        .unwrap();
    let t = c.topic("bulk.bad").unwrap();
    let good = || -> Vec<JobSpec<Vec<u8>>> {
        (0..20)
            .map(|i| JobSpec::new(raw(i)).key(format!("job-{i}")))
            .collect()
    };
    let mut bulk = good();
    bulk[13] = JobSpec::new(raw(13)).key("job 13");
    match t.enqueue_bulk(bulk).await {
        Err(Error::BulkItem { index, key, source }) => {
            assert_eq!((index, key.as_deref()), (13, Some("job 13")));
            assert_invalid_key::<()>(Err(*source), "job 13");
        }
        other => panic!("{other:?}"),
    }
    let mut bulk = good();
    bulk[17] = JobSpec::new(vec![0xc0; 65]).key("job-17");
    let err = t.enqueue_bulk(bulk).await.unwrap_err();
    assert!(
        matches!(
            &err,
            Error::BulkItem { index: 17, key: Some(k), source }
                if k == "job-17" && matches!(**source, Error::PayloadTooLarge { size: 65, .. })
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "bulk item 17 (key \"job-17\"): payload of 65 bytes exceeds the limit of 64 bytes"
    );
    let mut typed: Vec<_> = (0..20).map(|i| JobSpec::new(order(i))).collect();
    typed[19].payload.note = "y".repeat(100);
    match c.enqueue_bulk::<close_order>(typed).await {
        Err(Error::BulkItem {
            index: 19,
            key: None,
            source,
        }) => assert!(
            matches!(*source, Error::PayloadTooLarge { .. }),
            "{source:?}"
        ),
        other => panic!("{other:?}"),
    }
    h.assert_untouched().await;

    let out = t.enqueue_bulk(good()).await.unwrap();
    assert_eq!(out.len(), 20);
    for (i, e) in out.iter().enumerate() {
        assert_eq!(
            (e.key.as_str(), e.outcome),
            (format!("job-{i}").as_str(), EnqueueOutcome::Created)
        );
    }
    let partitions: HashSet<u16> = out.iter().map(|e| e.key.partition(4)).collect();
    assert!(partitions.len() > 1, "the bulk should span partitions");
    let st = t.stats().await.unwrap();
    assert_eq!((st.ready, st.enqueued), (20, 20), "{st:?}");
}

fn topic_is_valid(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn key_is_valid(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 256
        && !s
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || dq_core::names::is_format(c))
}

/// One hostile topic name: accepted exactly when it follows the documented rule, and then
/// usable; otherwise `InvalidTopic` naming it, from every entry point.
pub async fn hostile_topic<H: Harness>(h: &H, name: &str) {
    let c = h.client().await;
    let valid = topic_is_valid(name);
    match c.topic(name) {
        Ok(t) => {
            assert!(valid, "accepted invalid topic {name:?}");
            assert_eq!(t.topic().as_str(), name);
            let e = t.enqueue(raw(1)).key("k").delay(HOUR).await.unwrap();
            assert_eq!(e.outcome, EnqueueOutcome::Created);
            assert_eq!(t.cancel("k").await.unwrap(), CancelOutcome::Cancelled);
        }
        Err(Error::InvalidTopic { name: n, .. }) => {
            assert!(!valid, "refused valid topic {name:?}");
            assert_eq!(n, name);
            assert_invalid_topic(h.client_with(|b| b.partitions(name, 2)).await, name);
        }
        Err(e) => panic!("topic {name:?}: unexpected error {e}"),
    }
}

/// One hostile job key: accepted exactly when it follows the documented rule, and then it
/// survives every operation unchanged; otherwise `InvalidKey` naming it, from every entry point.
pub async fn hostile_key<H: Harness>(h: &H, key: &str) {
    let c = h.client().await;
    let t = c.topic("hostile.keys").unwrap();
    let q = queue("hostile.keys");
    let valid = key_is_valid(key);
    match t.enqueue(raw(1)).key(key).delay(HOUR).await {
        Ok(e) => {
            assert!(valid, "accepted invalid key {key:?}");
            assert_eq!((e.key.as_str(), e.outcome), (key, EnqueueOutcome::Created));
            let i = info(&t, key).await;
            assert_eq!((i.key.as_str(), i.state), (key, JobState::Scheduled));
            assert!(matches!(
                t.reschedule(key, NewDue::After(HOUR)).await.unwrap(),
                RescheduleOutcome::Rescheduled { .. }
            ));
            let e = t.enqueue(raw(2)).key(key).replace().await.unwrap();
            assert_eq!(e.outcome, EnqueueOutcome::Replaced);
            let jobs = fetch(h, &q, &req()).await.jobs;
            assert_eq!(keys_of(&jobs), [key]);
            assert_eq!(unraw(&jobs[0].payload), 2);
            ack_all(h, &q, &jobs).await;
            assert_eq!(t.cancel(key).await.unwrap(), CancelOutcome::NotFound);
            assert!(t.job(key).await.unwrap().is_none());
        }
        Err(Error::InvalidKey { key: k, .. }) => {
            assert!(!valid, "refused valid key {key:?}");
            assert_eq!(k, key);
            assert_invalid_key(t.cancel(key).await, key);
            assert_invalid_key(t.job(key).await, key);
            assert_invalid_key(t.reschedule(key, NewDue::Shift(1)).await, key);
            match t.enqueue_bulk(vec![JobSpec::new(raw(1)).key(key)]).await {
                Err(Error::BulkItem {
                    index: 0,
                    key: Some(k),
                    source,
                }) if k == key => assert_invalid_key::<()>(Err(*source), key),
                other => panic!("expected BulkItem 0 for {key:?}, got {other:?}"),
            }
        }
        Err(e) => panic!("key {key:?}: unexpected error {e}"),
    }
}
