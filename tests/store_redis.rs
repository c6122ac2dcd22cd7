//! The store test suite against a real Redis (the testkit's private server, never 6379).
//!
//! Every conformance body of `common::conformance` runs here once, in its own namespace, followed
//! by the Redis invariant check (`common::redis::RedisHarness::violations`, the layout's
//! checker). Below them are the tests that
//! only make sense for Redis: the eviction-policy check at connect, hostile key bytes, the key
//! layout, far-future due times and the invariant check itself.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use common::Harness;
use common::conformance::{
    FailOne, HOUR, ack_all, fetch, info, jk, keys_of, queue, raw, req, unraw,
};
use common::redis::RedisHarness;
use dq::store::redis::layout::{self, KeyName, parse_key};
use dq::store::{FailAction, FetchCall, FetchRequest, Queue, RedisOptions, RedisStore};
use dq::{Client, EnqueueOutcome, Error, JobState, NewDue, RescheduleOutcome, Topic};
use dq_testkit::{RedisServer, ServerOptions, keys_in_namespace};

crate::conformance_suite!(RedisHarness::new().await);
crate::conformance_inspect_suite!(RedisHarness::new().await);

/// A server whose `maxmemory-policy` may evict keys is refused at connect with
/// `UnsuitableServer`, before anything is written; `allow_eviction(true)` accepts it.
#[tokio::test]
async fn evicting_server_is_refused_at_connect() {
    let server = RedisServer::start_with(ServerOptions::default().maxmemory_policy("allkeys-lru"));
    let ns = dq_testkit::namespace("evict");
    for policy in [
        "allkeys-lru",
        "allkeys-lfu",
        "allkeys-random",
        "volatile-lru",
        "volatile-lfu",
        "volatile-random",
        "volatile-ttl",
    ] {
        server.cmd::<()>(&["CONFIG", "SET", "maxmemory-policy", policy]);
        match Client::builder()
            .namespace(&ns)
            .connect(&server.url())
            .await
        {
            Err(Error::UnsuitableServer(msg)) => {
                assert!(msg.contains(policy), "{msg}");
                assert!(msg.contains("noeviction"), "says what to do: {msg}");
            }
            other => panic!("{policy}: expected UnsuitableServer, got {other:?}"),
        }
        assert!(keys_in_namespace(&server, &ns).is_empty());
        assert_eq!(
            server.cmd::<i64>(&["DBSIZE"]),
            0,
            "{policy}: nothing written"
        );
    }

    server.cmd::<()>(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    let store = RedisStore::connect(
        &server.url(),
        RedisOptions {
            namespace: ns.clone(),
            allow_eviction: true,
            ..RedisOptions::default()
        },
    )
    .await
    .expect("allow_eviction(true) accepts an evicting server");
    assert_eq!(store.server().maxmemory_policy, "allkeys-lru");
    assert_eq!(
        server.cmd::<i64>(&["DBSIZE"]),
        0,
        "connecting writes nothing"
    );

    let client = Client::builder()
        .namespace(&ns)
        .allow_eviction(true)
        .connect(&server.url())
        .await
        .unwrap();
    let e = client
        .topic("evict")
        .unwrap()
        .enqueue(raw(1))
        .key("k")
        .await
        .unwrap();
    assert_eq!(e.outcome, EnqueueOutcome::Created);

    server.cmd::<()>(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    Client::builder()
        .namespace(&ns)
        .connect(&server.url())
        .await
        .expect("noeviction is accepted");
}

/// Job keys full of Redis-significant bytes (separators, hash-tag braces, glob characters, the
/// shape of a dq key, unicode) are fields and members only: they never reach a key name and
/// come back byte for byte, on every partition.
#[tokio::test]
async fn hostile_key_bytes_never_reach_key_names() {
    let h = RedisHarness::new().await;
    let c = h.client_with(|b| b.partitions("hostile", 3)).await.unwrap();
    let t = c.topic("hostile").unwrap();
    let long = "}{:".repeat(85);
    let own_shape = h.partition_keys("hostile", 0).jobs;
    let keys: Vec<&str> = vec![
        "a:b",
        "{x}",
        "}{",
        "{",
        "}",
        "#0}:ready",
        &own_shape,
        "*?[]\\",
        "%s%n%d",
        "\"'`$()",
        "ключ",
        "🦀:{🦀}",
        "\u{fffd}",
        "ä\u{301}",
        &long,
    ];
    for (i, k) in keys.iter().enumerate() {
        let job = t.enqueue(raw(i as u64)).key(*k);
        let job = if i % 2 == 0 { job } else { job.delay(HOUR) };
        assert_eq!(job.await.unwrap().outcome, EnqueueOutcome::Created, "{k:?}");
    }
    h.check_invariants().await;

    let mut stored = BTreeSet::new();
    let registry = layout::topics_key(h.namespace());
    assert!(h.keys().contains(&registry), "the topic was recorded");
    for key in h.keys().into_iter().filter(|k| *k != registry) {
        let parsed =
            parse_key(h.namespace(), &key).unwrap_or_else(|| panic!("unexpected key name {key:?}"));
        assert_eq!(parsed.topic, "hostile", "{key:?}");
        let p = parsed.partition;
        assert!(p < 3, "{key:?}");
        if matches!(parsed.name, Some(KeyName::Receipts)) {
            // Enqueue receipts: one generation per bucket of call ids, named by the bucket.
            let bucket = u64::from_str_radix(&parsed.suffix["receipts:".len()..], 16).unwrap();
            assert_eq!(
                key,
                h.partition_keys("hostile", p).enqueue_receipts(bucket)[0],
                "a job key leaked into a key name"
            );
            continue;
        }
        let name = parsed
            .name
            .filter(|n| KeyName::PARTITION.contains(n))
            .unwrap_or_else(|| panic!("unknown key name {key:?}"));
        assert_eq!(
            Some(key.as_str()),
            h.partition_keys("hostile", p).get(name),
            "a job key leaked into a key name"
        );
        if name == KeyName::Jobs {
            stored.extend(h.server().cmd::<Vec<String>>(&["HKEYS", &key]));
        }
    }
    let want: BTreeSet<String> = keys.iter().map(std::string::ToString::to_string).collect();
    assert_eq!(stored, want, "`jobs` fields are the keys, byte for byte");
    for k in &keys {
        let i = info(&t, k).await;
        assert_eq!(i.key.as_str(), *k);
        let p = jk(k).partition(3);
        let records = h.partition_keys("hostile", p).jobs;
        assert_eq!(h.server().cmd::<i64>(&["HEXISTS", &records, k]), 1, "{k:?}");
    }

    // Reschedule the scheduled ones to now, then deliver everything.
    for (i, k) in keys.iter().enumerate() {
        if i % 2 == 1 {
            let out = t
                .reschedule(k, NewDue::Shift(-2 * 3_600_000))
                .await
                .unwrap();
            assert!(
                matches!(out, RescheduleOutcome::Rescheduled { .. }),
                "{k:?}"
            );
        }
    }
    let mut delivered = BTreeSet::new();
    for p in 0..3 {
        let q = Queue::new(Topic::new("hostile").unwrap(), p);
        let jobs = fetch(&h, &q, &req()).await.jobs;
        for d in &jobs {
            assert_eq!(d.key.partition(3), p);
            let i = common::conformance::unraw(&d.payload) as usize;
            assert_eq!(d.key.as_str(), keys[i]);
        }
        delivered.extend(keys_of(&jobs));
        ack_all(&h, &q, &jobs).await;
    }
    assert_eq!(delivered, want);
    h.check_invariants().await;
    h.assert_no_leftovers().await;
}

/// Every key is `<ns>:{<topic>#<p>}:<name>`: one hash tag per partition (one cluster slot),
/// known names with fixed types, and each job's record in the partition its key hashes to.
#[tokio::test]
async fn key_layout_is_one_hash_tag_per_partition() {
    let h = RedisHarness::new().await;
    let c = h
        .client_with(|b| b.partitions("orders.close", 4))
        .await
        .unwrap();
    let t = c.topic("orders.close").unwrap();
    let names: Vec<String> = (0..24).map(|i| format!("order-{i}")).collect();
    for (i, k) in names.iter().enumerate() {
        let e = t.enqueue(raw(i as u64)).key(k);
        let e = if i % 4 == 0 { e.delay(HOUR) } else { e };
        e.await.unwrap();
    }
    // Spread the due-now jobs over active, retry, dead and ready.
    for p in 0..4 {
        let q = Queue::new(Topic::new("orders.close").unwrap(), p);
        let jobs = fetch(&h, &q, &req()).await.jobs;
        for (i, d) in jobs.iter().enumerate() {
            let store = h.store();
            match i % 4 {
                0 => {} // stays active
                1 => {
                    store
                        .fail_one(
                            &q,
                            &d.key,
                            d.token,
                            &FailAction::Retry(HOUR),
                            "e",
                            Default::default(),
                        )
                        .await
                        .unwrap();
                }
                2 => {
                    store
                        .fail_one(
                            &q,
                            &d.key,
                            d.token,
                            &FailAction::Bury,
                            "e",
                            Default::default(),
                        )
                        .await
                        .unwrap();
                }
                _ => {
                    store.release(&q, &[dq::store::lease_of(d)]).await.unwrap();
                }
            }
        }
    }
    h.check_invariants().await;

    let ns = h.namespace();
    let mut seen_names = HashSet::new();
    let mut seen_partitions = HashSet::new();
    // The one key outside the partitions: the namespace's topic registry.
    let registry = layout::topics_key(ns);
    assert_eq!(h.server().cmd::<String>(&["TYPE", &registry]), "hash");
    let record = h
        .server()
        .cmd::<String>(&["HGET", &registry, "orders.close"]);
    assert_eq!(
        layout::TopicRecord::decode(&record).unwrap().partitions,
        4,
        "{record}"
    );
    for key in h.keys().into_iter().filter(|k| *k != registry) {
        let parsed = parse_key(ns, &key).unwrap_or_else(|| panic!("unexpected key name {key:?}"));
        let (topic, p) = (parsed.topic, parsed.partition);
        assert_eq!(topic, "orders.close");
        assert!(p < 4, "{key}");
        let tag = &key[key.find('{').unwrap() + 1..key.find('}').unwrap()];
        assert_eq!(tag, format!("orders.close#{p}"), "{key}");
        // (Fetch receipts are one string per call: `fetch:<call id>`.)
        let name = parsed
            .name
            .unwrap_or_else(|| panic!("unknown key name {key}"));
        assert_eq!(
            h.server().cmd::<String>(&["TYPE", &key]),
            name.redis_type(),
            "{key}"
        );
        seen_names.insert(name);
        seen_partitions.insert(p);
    }
    assert_eq!(
        seen_partitions.len(),
        4,
        "24 keys should reach all 4 partitions"
    );
    // Every key of a partition but the wake-up list (consumed), the receipts (no retried call),
    // the control hash (only a topic paused, limited, throttled or keeping finished jobs has
    // one), the kept jobs (none kept here), the progress hash (no job reported) and the
    // event stream (the topic records no events), the key windows (no job has one), the due
    // queue of other priorities (every job is of normal priority), the group keys (no job has
    // a group), the outbox (no job is a batch's member).
    for name in KeyName::PARTITION {
        if !matches!(
            name,
            KeyName::Outbox
                | KeyName::Gready
                | KeyName::Groups
                | KeyName::Gwait
                | KeyName::Gactive
                | KeyName::Gctl
                | KeyName::Wake
                | KeyName::Calls
                | KeyName::Control
                | KeyName::Kept
                | KeyName::KeptAt
                | KeyName::Progress
                | KeyName::Events
                | KeyName::Uniq
                | KeyName::UniqAt
                | KeyName::Pready
        ) {
            assert!(
                seen_names.contains(&name),
                "no `{name}` key: {seen_names:?}"
            );
        }
    }
    for k in &names {
        let p = jk(k).partition(4);
        let records = h.partition_keys("orders.close", p).jobs;
        assert_eq!(h.server().cmd::<i64>(&["HEXISTS", &records, k]), 1, "{k}");
    }
}

/// Due times past what a record holds (48 bits of ms, year 10889) are capped, never wrapped:
/// the job stays far in the future and a shift earlier does not bring it to the past.
/// The outcomes of calls that did not create every job (kept in `calls`) stay bounded with no
/// call doing much: outcomes past their life are removed, at most 64 by any one such call;
/// the set carries an expiry. Calls that created every job never touch `calls`.
#[tokio::test]
async fn enqueue_outcomes_are_trimmed_a_few_at_a_time() {
    let h = RedisHarness::new().await;
    let c = h.client().await;
    let t = c.topic("receipts.trim").unwrap();
    t.enqueue(raw(0)).key("first").await.unwrap();
    let calls = h.partition_keys("receipts.trim", 0).calls;
    assert_eq!(
        h.server().cmd::<i64>(&["EXISTS", &calls]),
        0,
        "a call that created all its jobs stores no outcomes"
    );
    // 500 outcomes from long ago (score 1 ms), as if left by an earlier burst.
    let mut add = vec!["ZADD".to_string(), calls.clone()];
    for i in 0..500 {
        add.push("1".into());
        add.push(format!("o{i:016x}:+"));
    }
    let add: Vec<&str> = add.iter().map(String::as_str).collect();
    h.server().cmd::<i64>(&add);
    let old = |server: &RedisServer| server.cmd::<i64>(&["ZCOUNT", &calls, "0", "1"]);
    assert_eq!(old(h.server()), 500);

    // Each replacing call (its outcome '~' is stored) removes at most 64 of them; enough
    // calls remove them all.
    let mut last = 500;
    let mut n = 0;
    while last > 0 {
        assert!(n < 100, "{last} stale outcomes left after {n} calls");
        t.enqueue(raw(n)).key("first").replace().await.unwrap();
        let now = old(h.server());
        assert!(last - now <= 64, "one call removed {} outcomes", last - now);
        last = now;
        n += 1;
    }
    let kept: i64 = h.server().cmd(&["ZCARD", &calls]);
    assert_eq!(kept, n as i64, "every fresh outcome is kept");
    let ttl: i64 = h.server().cmd(&["PTTL", &calls]);
    assert!(ttl > 0 && ttl <= 60_000, "{ttl}");
}

/// Sets `key` to the receipt entries given, with an expiry of `ttl_ms`.
fn put_receipts(h: &RedisHarness, key: &str, entries: &[(u64, u64)], ttl_ms: u64) {
    let bytes: Vec<u8> = entries
        .iter()
        .flat_map(|(call, at)| layout::receipt_entry(*call, *at))
        .collect();
    let mut conn = h.server().connection();
    let _: () = dq_testkit::redis::cmd("SET")
        .arg(key)
        .arg(&bytes[..])
        .arg("PX")
        .arg(ttl_ms)
        .query(&mut conn)
        .unwrap();
}

/// The bytes of `key` (empty when absent).
fn get_bytes(h: &RedisHarness, key: &str) -> Vec<u8> {
    let mut conn = h.server().connection();
    let v: Option<Vec<u8>> = dq_testkit::redis::cmd("GET")
        .arg(key)
        .query(&mut conn)
        .unwrap();
    v.unwrap_or_default()
}

/// Issue 15, item 3: an enqueue receipt is one 14-byte entry (call id, applied ms) appended
/// to a string of the call's bucket (`receipts:<low byte of the id>`), which expires by
/// itself; a retry after a lost reply finds it, for one job as for many.
#[tokio::test]
async fn enqueue_receipts_are_14_byte_entries_found_by_retries() {
    use dq::Due;
    use dq::store::{EnqueueCall, NewJob};
    let h = RedisHarness::new().await;
    let store = h.store();
    let q = queue("receipts.compact");
    let keys = h.partition_keys("receipts.compact", 0);
    let job = |k: String| NewJob {
        key: jk(&k),
        payload: raw(7),
        due: Due::After(HOUR),
        replace: false,
        expires: None,
        priority: Default::default(),
        window: None,
        group: None,
        batch: None,
    };
    // Two calls of one bucket (0x2a), one of another.
    let one = EnqueueCall {
        id: 0x1111_0000_0000_002a,
        retry: false,
    };
    let many = EnqueueCall {
        id: 0x2222_0000_0000_002a,
        retry: false,
    };
    let other = EnqueueCall {
        id: 0x3333_0000_0000_0001,
        retry: false,
    };
    assert_eq!(
        store.enqueue(&q, &[job("one".into())], one).await.unwrap(),
        [EnqueueOutcome::Created]
    );
    let bulk: Vec<NewJob> = (0..300).map(|i| job(format!("many-{i}"))).collect();
    let out = store.enqueue(&q, &bulk, many).await.unwrap();
    assert!(out.iter().all(|o| *o == EnqueueOutcome::Created));
    store
        .enqueue(&q, &[job("other".into())], other)
        .await
        .unwrap();

    let [current, old] = keys.enqueue_receipts(one.id);
    assert!(current.ends_with(":receipts:2a"), "{current}");
    let created = info(&h.client().await.topic("receipts.compact").unwrap(), "one")
        .await
        .created_ms;
    let bytes = get_bytes(&h, &current);
    assert_eq!(
        bytes.len(),
        2 * layout::RECEIPT_ENTRY_LEN,
        "one entry per call"
    );
    assert_eq!(bytes[..14], layout::receipt_entry(one.id, created));
    assert_eq!(bytes[14..22], many.id.to_be_bytes());
    assert_eq!(get_bytes(&h, &old), b"", "no older generation yet");
    let ttl: i64 = h.server().cmd(&["PTTL", &current]);
    assert!(ttl > 0 && ttl <= 60_000, "{ttl}");
    assert_eq!(
        get_bytes(&h, &keys.enqueue_receipts(other.id)[0]).len(),
        14,
        "another bucket, another key"
    );
    assert_eq!(h.server().cmd::<i64>(&["EXISTS", &keys.calls]), 0);

    // The replies were "lost": the retries find their receipts and write nothing.
    let before = h.store().stats(&q).await.unwrap().enqueued;
    assert_eq!(
        store
            .enqueue(&q, &[job("one".into())], one.retried())
            .await
            .unwrap(),
        [EnqueueOutcome::Created]
    );
    let out = store.enqueue(&q, &bulk, many.retried()).await.unwrap();
    assert_eq!(out.len(), 300);
    assert!(out.iter().all(|o| *o == EnqueueOutcome::Created), "{out:?}");
    // Gone since: a retry does not bring it back.
    assert!(
        h.client()
            .await
            .topic("receipts.compact")
            .unwrap()
            .cancel("one")
            .await
            .is_ok()
    );
    assert_eq!(
        store
            .enqueue(&q, &[job("one".into())], one.retried())
            .await
            .unwrap(),
        [EnqueueOutcome::Ended]
    );
    assert_eq!(h.store().stats(&q).await.unwrap().enqueued, before);
    assert_eq!(get_bytes(&h, &current).len(), 28, "retries append nothing");
    h.check_invariants().await;
}

/// Issue 15, item 3: a receipt generation is rotated (renamed to `receipts:<b>:old`, dropping
/// the generation before) only once its first entry is ENQUEUE_RECEIPT_LIFE old, so a receipt
/// written in it is still found after the rotation; a younger generation is not rotated, so
/// the older one is kept.
#[tokio::test]
async fn receipt_generations_rotate_only_when_a_receipt_life_old() {
    use dq::Due;
    use dq::store::{EnqueueCall, NewJob};
    let h = RedisHarness::new().await;
    let store = h.store();
    let q = queue("receipts.rotate");
    let keys = h.partition_keys("receipts.rotate", 0);
    let life = dq::store::ENQUEUE_RECEIPT_LIFE.as_millis() as u64;
    let job = |k: &str| NewJob {
        key: jk(k),
        payload: raw(1),
        due: Due::After(HOUR),
        replace: false,
        expires: None,
        priority: Default::default(),
        window: None,
        group: None,
        batch: None,
    };
    let call = |id: u64| EnqueueCall { id, retry: false };
    let now = store.now_ms().await.unwrap();

    // A young current generation (started 10 s ago) holding call A, an older one holding B.
    let (a, b) = (0xaaaa_0000_0000_0005, 0xbbbb_0000_0000_0005);
    let [current, old] = keys.enqueue_receipts(a);
    put_receipts(&h, &current, &[(a, now - 10_000)], 50_000);
    put_receipts(&h, &old, &[(b, now - 40_000)], 20_000);
    store
        .enqueue(&q, &[job("young")], call(0x0001_0000_0000_0005))
        .await
        .unwrap();
    assert_eq!(get_bytes(&h, &current).len(), 28, "appended, not rotated");
    // B's job is gone: its retry finds the receipt in the older generation (nothing written).
    assert_eq!(
        store
            .enqueue(&q, &[job("b")], call(b).retried())
            .await
            .unwrap(),
        [EnqueueOutcome::Ended]
    );

    // The current generation is now a receipt life old (its first entry, A's): the next call
    // of the bucket rotates it. A's receipt moves to the older generation and is still found;
    // B's (in the generation before, older than a receipt life) is dropped.
    put_receipts(
        &h,
        &current,
        &[(a, now - life), (0xcccc_0000_0000_0005, now - 100)],
        50_000,
    );
    store
        .enqueue(&q, &[job("rotating")], call(0x0002_0000_0000_0005))
        .await
        .unwrap();
    let moved = get_bytes(&h, &old);
    assert_eq!(moved.len(), 28, "the whole generation moved");
    assert_eq!(moved[..14], layout::receipt_entry(a, now - life));
    let fresh = get_bytes(&h, &current);
    assert_eq!(
        fresh.len(),
        14,
        "a new generation with the rotating call's receipt"
    );
    assert_eq!(fresh[..8], 0x0002_0000_0000_0005u64.to_be_bytes());
    let ttl: i64 = h.server().cmd(&["PTTL", &current]);
    assert!(
        ttl > 50_000 && ttl <= 60_000,
        "a new generation expires in 2 × life: {ttl}"
    );
    assert_eq!(
        store
            .enqueue(&q, &[job("a")], call(a).retried())
            .await
            .unwrap(),
        [EnqueueOutcome::Ended],
        "A's receipt survived the rotation"
    );
    assert_eq!(
        store
            .enqueue(&q, &[job("b")], call(b).retried())
            .await
            .unwrap(),
        [EnqueueOutcome::Created],
        "B's receipt was older than a receipt life: a retry then stores the job"
    );
    h.check_invariants().await;
}

/// A receipt key of the wrong type (damage, a name clash) fails an enqueue with a typed
/// WRONGTYPE error naming the key, before it writes anything: the current generation on any
/// call, the older one on a retry or when a rotation would overwrite it. A current generation
/// that is a string but not whole entries is started afresh.
#[tokio::test]
async fn a_damaged_receipt_key_fails_enqueue_before_it_writes() {
    use dq::Due;
    use dq::store::{EnqueueCall, NewJob};
    let h = RedisHarness::new().await;
    let store = h.store();
    let q = queue("receipts.damaged");
    let keys = h.partition_keys("receipts.damaged", 0);
    let job = |k: &str| NewJob {
        key: jk(k),
        payload: raw(1),
        due: Due::After(HOUR),
        replace: false,
        expires: None,
        priority: Default::default(),
        window: None,
        group: None,
        batch: None,
    };
    let id = 0x5555_0000_0000_0009;
    let [current, old] = keys.enqueue_receipts(id);
    store
        .enqueue(&q, &[job("before")], EnqueueCall::new())
        .await
        .unwrap();

    let fails = |what: &'static str, key: String, call: EnqueueCall| {
        let store = store.clone();
        let h = &h;
        async move {
            let before = dump_partition(h);
            let err = store.enqueue(&q_of(), &[job("x")], call).await.unwrap_err();
            let text = err.to_string();
            assert!(
                matches!(&err, Error::Redis(e) if e.code() == Some("WRONGTYPE"))
                    && text.contains(&key)
                    && text.contains("nothing written"),
                "{what}: {err:?}"
            );
            assert!(dump_partition(h) == before, "{what}: written");
        }
    };
    fn q_of() -> Queue {
        queue("receipts.damaged")
    }

    h.server().cmd::<()>(&["HSET", &current, "f", "v"]);
    fails(
        "first try",
        current.clone(),
        EnqueueCall { id, retry: false },
    )
    .await;
    fails("retry", current.clone(), EnqueueCall { id, retry: true }).await;
    h.server().cmd::<()>(&["DEL", &current]);

    h.server().cmd::<()>(&["HSET", &old, "f", "v"]);
    fails(
        "retry, older damaged",
        old.clone(),
        EnqueueCall { id, retry: true },
    )
    .await;
    // A first try does not touch the older generation while the current one is young.
    store
        .enqueue(&q, &[job("young")], EnqueueCall { id, retry: false })
        .await
        .unwrap();
    // But a rotation would overwrite it: reported instead.
    let now = store.now_ms().await.unwrap();
    let life = dq::store::ENQUEUE_RECEIPT_LIFE.as_millis() as u64;
    put_receipts(&h, &current, &[(1, now - life - 1)], 10_000);
    fails("rotation", old.clone(), EnqueueCall { id, retry: false }).await;
    h.server().cmd::<()>(&["DEL", &old]);

    // Not whole entries: the generation starts afresh with this call's receipt.
    let mut conn = h.server().connection();
    let _: () = dq_testkit::redis::cmd("SET")
        .arg(&current)
        .arg(&b"garbage"[..])
        .query(&mut conn)
        .unwrap();
    store
        .enqueue(&q, &[job("fresh")], EnqueueCall { id, retry: false })
        .await
        .unwrap();
    let bytes = get_bytes(&h, &current);
    assert_eq!(bytes.len(), 14);
    assert_eq!(bytes[..8], id.to_be_bytes());
    assert_eq!(
        store
            .enqueue(&q, &[job("fresh")], EnqueueCall { id, retry: true })
            .await
            .unwrap(),
        [EnqueueOutcome::Created]
    );
    h.check_invariants().await;
}

/// Issue 15, item 4: with dense due times (several jobs per millisecond, interleaved in one
/// call, and more for the same milliseconds in later calls), jobs due in one millisecond keep
/// their enqueue order in `scheduled`, inside one bulk call and across calls, with one
/// lookup per distinct due millisecond.
#[tokio::test]
async fn dense_due_times_keep_enqueue_order_within_each_millisecond() {
    use dq::Due;
    use dq::store::{EnqueueCall, NewJob};
    let h = RedisHarness::new().await;
    let store = h.store();
    let q = queue("dense.order");
    let keys = h.partition_keys("dense.order", 0);
    let t0 = store.now_ms().await.unwrap() + 3_600_000;
    let at = |ms: u64| Due::At(dq::store::from_unix_ms(ms));
    // Keys in reverse lexical order, so no tie-break by name can pass.
    let job = |i: u64, due: u64| NewJob {
        key: jk(&format!("k-{:05}", 99_999 - i)),
        payload: raw(i),
        due: at(due),
        replace: false,
        expires: None,
        priority: Default::default(),
        window: None,
        group: None,
        batch: None,
    };
    let mut want: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut i = 0;
    for round in 0..3 {
        // One bulk call: 400 jobs over 4 due ms, interleaved; then one single-job call per ms.
        let bulk: Vec<NewJob> = (0..400)
            .map(|j| {
                let n = i + j;
                job(n, t0 + (j % 4))
            })
            .collect();
        for (j, nj) in bulk.iter().enumerate() {
            want.entry(t0 + (j as u64 % 4))
                .or_default()
                .push(nj.key.as_str().to_string());
        }
        i += 400;
        store.enqueue(&q, &bulk, EnqueueCall::new()).await.unwrap();
        for d in 0..4 {
            let solo = job(i, t0 + d);
            want.entry(t0 + d)
                .or_default()
                .push(solo.key.as_str().to_string());
            store
                .enqueue(&q, &[solo], EnqueueCall::new())
                .await
                .unwrap();
            i += 1;
        }
        let _ = round;
    }
    let got: Vec<String> = h.server().cmd(&["ZRANGE", &keys.scheduled, "0", "-1"]);
    let want: Vec<String> = want.into_values().flatten().collect();
    assert_eq!(got.len(), want.len());
    let first_wrong = got.iter().zip(&want).position(|(g, w)| g != w);
    assert!(first_wrong.is_none(), "out of order at {first_wrong:?}");
    h.check_invariants().await;
}

/// A fetch that leased jobs leaves a receipt, in the partition's hash tag, that expires within
/// the receipt life; once its reply has arrived, the partition's next fetch deletes it, so
/// receipts do not pile up at high fetch rates. A fetch that leased nothing leaves none.
#[tokio::test]
async fn fetch_receipts_expire_and_are_deleted_once_their_reply_arrived() {
    let h = RedisHarness::new().await;
    let c = h.client().await;
    let t = c.topic("fetch.receipts").unwrap();
    let q = queue("fetch.receipts");
    let receipts = || -> Vec<String> {
        h.keys()
            .into_iter()
            .filter(|k| {
                parse_key(h.namespace(), k).is_some_and(|p| p.name == Some(KeyName::FetchReceipt))
            })
            .collect()
    };
    for i in 0..3 {
        t.enqueue(raw(i)).key(format!("k-{i}")).await.unwrap();
    }
    let one = FetchRequest {
        max_jobs: 1,
        ..req()
    };
    let first = fetch(&h, &q, &one).await;
    assert_eq!(first.jobs.len(), 1);
    let left = receipts();
    let keys = h.partition_keys("fetch.receipts", 0);
    let want = keys.fetch_receipt(one.call.id);
    assert_eq!(left, std::slice::from_ref(&want));
    let ttl: i64 = h.server().cmd(&["PTTL", &want]);
    let life = FetchCall::receipt_life(one.lease).as_millis() as i64;
    assert!(ttl > 0 && ttl <= life, "{ttl} ms, life {life} ms");

    // The next fetch (a new call) deletes the first receipt and leaves its own.
    let two = FetchRequest {
        call: FetchCall::new(),
        ..one.clone()
    };
    let second = fetch(&h, &q, &two).await.jobs;
    assert_eq!(second.len(), 1);
    assert_eq!(receipts(), [keys.fetch_receipt(two.call.id)]);
    // Many fetches leave one receipt at a time.
    for _ in 0..20 {
        t.enqueue(raw(9)).await.unwrap();
        let r = FetchRequest {
            call: FetchCall::new(),
            ..one.clone()
        };
        let got = fetch(&h, &q, &r).await.jobs;
        ack_all(&h, &q, &got).await;
        assert_eq!(receipts().len(), 1, "{:?}", receipts());
    }
    // A fetch that leases nothing deletes the last one and leaves none.
    let all = fetch(
        &h,
        &q,
        &FetchRequest {
            call: FetchCall::new(),
            ..req()
        },
    )
    .await;
    ack_all(&h, &q, &all.jobs).await;
    let idle = fetch(
        &h,
        &q,
        &FetchRequest {
            call: FetchCall::new(),
            ..req()
        },
    )
    .await;
    assert!(idle.jobs.is_empty());
    assert!(receipts().is_empty(), "{:?}", receipts());
    ack_all(&h, &q, &first.jobs).await;
    ack_all(&h, &q, &second).await;
    h.check_invariants().await;
}

/// A delay or time past what a record can hold is refused before anything is written; a shift
/// within range that would pass the end stops at it.
#[tokio::test]
async fn far_future_due_times_are_refused_or_capped() {
    const MAX_DUE: u64 = dq::MAX_DUE_MS;
    let h = RedisHarness::new().await;
    let c = h.client().await;
    let t = c.topic("far.future").unwrap();
    let refused = |r: Result<(), Error>| {
        assert!(
            matches!(
                r,
                Err(Error::DueOutOfRange {
                    max_ms: MAX_DUE,
                    ..
                })
            ),
            "{r:?}"
        );
    };
    refused(
        t.enqueue(raw(1))
            .key("delay")
            .delay(Duration::from_secs(1 << 40))
            .await
            .map(|_| ()),
    );
    refused(
        t.enqueue(raw(1))
            .key("at")
            .at(dq::store::from_unix_ms(MAX_DUE + 1))
            .await
            .map(|_| ()),
    );
    let bulk = vec![
        dq::JobSpec::new(raw(1)).key("fine"),
        dq::JobSpec::new(raw(1))
            .key("bad")
            .delay(Duration::from_secs(1 << 40)),
    ];
    let err = t.enqueue_bulk(bulk).await.unwrap_err();
    assert!(
        matches!(&err, Error::BulkItem { index: 1, source, .. }
            if matches!(**source, Error::DueOutOfRange { .. })),
        "{err:?}"
    );
    assert!(h.keys().is_empty(), "nothing was written: {:?}", h.keys());

    // The last representable time is accepted; a shift past it stops there.
    t.enqueue(raw(1))
        .key("at")
        .at(dq::store::from_unix_ms(MAX_DUE))
        .await
        .unwrap();
    assert_eq!(info(&t, "at").await.due_ms, MAX_DUE);
    let out = t.reschedule("at", NewDue::Shift(-1000)).await.unwrap();
    assert_eq!(
        out,
        RescheduleOutcome::Rescheduled {
            due_ms: MAX_DUE - 1000
        }
    );
    let out = t.reschedule("at", NewDue::Shift(5000)).await.unwrap();
    assert_eq!(out, RescheduleOutcome::Rescheduled { due_ms: MAX_DUE });
    refused(
        t.reschedule("at", NewDue::After(Duration::MAX))
            .await
            .map(|_| ()),
    );
    refused(
        t.reschedule("at", NewDue::Shift(i64::MIN))
            .await
            .map(|_| ()),
    );
    assert_eq!(
        info(&t, "at").await.due_ms,
        MAX_DUE,
        "refused calls changed nothing"
    );
    let q = queue("far.future");
    let reply = fetch(&h, &q, &req()).await;
    assert!(reply.jobs.is_empty(), "{reply:?}");
    h.check_invariants().await;
}

/// The invariant check itself finds each kind of damage.
#[tokio::test]
async fn invariant_check_finds_damage() {
    let h = RedisHarness::new().await;
    let c = h.client().await;
    let t = c.topic("damage").unwrap();
    t.enqueue(raw(1)).key("s").delay(HOUR).await.unwrap();
    t.enqueue(raw(1)).key("r").await.unwrap();
    assert!(h.violations().await.is_empty());

    let keys = h.partition_keys("damage", 0);
    let (sched, retry, ready, records, hist) =
        (keys.scheduled, keys.retry, keys.ready, keys.jobs, keys.hist);
    let bad_record = format!("Z{}", "\0".repeat(19));
    // A name dq does not use, in the partition's hash tag.
    let bogus = format!("{}bogus", keys.stats.strip_suffix("stats").unwrap());
    let cases: Vec<(Vec<&str>, Vec<&str>, &str)> = vec![
        (
            vec!["ZADD", &sched, "1", "ghost"],
            vec!["ZREM", &sched, "ghost"],
            "has no record",
        ),
        (
            vec!["ZADD", &retry, "1", "s"],
            vec!["ZREM", &retry, "s"],
            "is also in `retry`",
        ),
        (
            vec!["ZREM", &sched, "s"],
            vec!["ZADD", &sched, "0", "s"],
            "missing from `scheduled`",
        ),
        (
            vec!["HSET", &hist, "ghost", "x"],
            vec!["HDEL", &hist, "ghost"],
            "`hist` entry",
        ),
        (
            vec!["LREM", &ready, "0", "r"],
            vec!["RPUSH", &ready, "r"],
            "has no hint",
        ),
        (
            vec!["HSET", &records, "z", &bad_record],
            vec!["HDEL", &records, "z"],
            "unknown state byte",
        ),
        (
            vec!["SET", &bogus, "1"],
            vec!["DEL", &bogus],
            "unknown key name",
        ),
    ];
    for (damage, repair, expect) in cases {
        h.server().cmd::<()>(&damage);
        let v = h.violations().await;
        assert!(
            v.iter().any(|m| m.contains(expect)),
            "{damage:?} should be reported as {expect:?}, got {v:?}"
        );
        h.server().cmd::<()>(&repair);
    }
    // The score of `s` was rewritten to 0 by the repair above; put it back through the API.
    t.reschedule("s", NewDue::After(HOUR)).await.unwrap();
    h.check_invariants().await;
}

/// Every counter of the `stats` hash (and the token counter) at `i64::MAX`.
const STAT_COUNTERS: [&str; 9] = [
    "enqueued",
    "succeeded",
    "retried",
    "buried",
    "expired",
    "cancelled",
    "trimmed",
    "repaired",
    "token",
];

/// Issue 9, violation 6: with the counters of `stats` at `i64::MAX`, `HINCRBY` fails; ack used
/// to delete the job first and then fail (Redis keeps a script's writes). Counters now
/// saturate and the token counter starts again, so every call succeeds and leaves the
/// partition consistent; the counters stay at their maximum.
#[tokio::test]
async fn counters_at_their_maximum_never_fail_a_call() {
    const MAX: &str = "9223372036854775807";
    let h = RedisHarness::new().await;
    let c = h.client().await;
    let t = c.topic("saturated").unwrap();
    let q = queue("saturated");
    let store = h.store();
    let keys = h.partition_keys("saturated", 0);
    let (stats, scheduled) = (keys.stats, keys.scheduled);
    for f in STAT_COUNTERS {
        h.server().cmd::<()>(&["HSET", &stats, f, MAX]);
    }

    for k in ["a", "b", "d", "e"] {
        t.enqueue(raw(1)).key(k).await.expect("enqueue");
    }
    t.enqueue(raw(1)).key("c").delay(HOUR).await.unwrap();
    let jobs = fetch(&h, &q, &common::conformance::req_max(4)).await.jobs;
    assert_eq!(keys_of(&jobs), ["a", "b", "d", "e"]);
    ack_all(&h, &q, &jobs[..1]).await;
    let fail = |i: usize, action: FailAction, cap: u64| {
        let d = &jobs[i];
        let store = store.clone();
        async move {
            let limits = dq::DeadLimits {
                cap,
                ..dq::DeadLimits::default()
            };
            store
                .fail_one(&d.queue, &d.key, d.token, &action, "boom", limits)
                .await
        }
    };
    fail(1, FailAction::Retry(HOUR), 10).await.expect("retry");
    fail(2, FailAction::Bury, 10).await.expect("bury");
    // A cap of one dead job: burying `e` trims `d`.
    let out = fail(3, FailAction::Bury, 1).await.expect("bury and trim");
    assert_eq!(out, dq::store::FailOutcome::Buried { trimmed: 1 });
    assert_eq!(t.requeue_dead(&["e"]).await.expect("requeue"), 1);
    assert_eq!(
        t.cancel("c").await.expect("cancel"),
        dq::CancelOutcome::Cancelled
    );
    // A lease that expires: recovered as a failed attempt (expired, retried).
    let short = dq::store::FetchRequest {
        lease: Duration::from_millis(1),
        retry_policy: dq::RetryPolicy::fixed(HOUR, 1).unwrap(),
        ..req()
    };
    let e = fetch(&h, &q, &short).await.jobs;
    assert_eq!(keys_of(&e), ["e"]);
    common::conformance::until_store_time(&h, e[0].lease_deadline_ms).await;
    assert!(fetch(&h, &q, &short).await.jobs.is_empty());
    assert_eq!(info(&t, "e").await.state, JobState::Retry);
    // A record missing from `scheduled` is re-linked by the idle audit (repaired).
    t.enqueue(raw(1)).key("f").delay(HOUR).await.unwrap();
    h.server().cmd::<()>(&["ZREM", &scheduled, "f"]);
    fetch(&h, &q, &req()).await;
    let in_scheduled: Option<f64> = h.server().cmd(&["ZSCORE", &scheduled, "f"]);
    assert!(in_scheduled.is_some(), "the audit re-linked f");
    // Purge.
    t.enqueue(raw(1)).key("g").await.unwrap();
    let g = fetch(&h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&g), ["g"]);
    store
        .fail_one(
            &q,
            &g[0].key,
            g[0].token,
            &FailAction::Bury,
            "x",
            dq::DeadLimits::default(),
        )
        .await
        .unwrap();
    assert_eq!(t.purge_dead(&["g"]).await.expect("purge"), 1);

    for f in STAT_COUNTERS.iter().filter(|f| **f != "token") {
        let v: String = h.server().cmd(&["HGET", &stats, f]);
        assert_eq!(v, MAX, "{f} saturates");
    }
    let st = t.stats().await.expect("stats");
    assert_eq!(st.succeeded, i64::MAX as u64);
    h.check_invariants().await;
}

/// Every key of one partition with its value, as `DUMP` serialises it.
fn dump_partition(h: &RedisHarness) -> BTreeMap<String, Vec<u8>> {
    h.keys()
        .into_iter()
        .map(|k| {
            let v: Vec<u8> = h.server().cmd(&["DUMP", &k]);
            (k, v)
        })
        .collect()
}

/// Runs `call`; if it fails, asserts that it wrote nothing.
async fn ok_or_unchanged<T>(
    h: &RedisHarness,
    what: &str,
    call: impl std::future::Future<Output = dq::Result<T>>,
) -> Option<T> {
    let before = dump_partition(h);
    match call.await {
        Ok(v) => Some(v),
        Err(e) => {
            assert!(
                dump_partition(h) == before,
                "{what} failed ({e}) after it had written"
            );
            None
        }
    }
}

/// Issue 9, violation 6: a key of the wrong type (damage, or a name clash) met after a script
/// has written would leave half a state move behind. Each script reads before it writes, or
/// checks the type of a key whose first touch follows a write, so every call either works or
/// fails having written nothing, whichever key is damaged, on every path: lease-expiry
/// recovery, an idle fetch, a retry due at once, a reschedule to now, a replacing enqueue.
#[tokio::test]
async fn a_key_of_the_wrong_type_fails_a_call_before_it_writes() {
    // (once with jobs of no group, once with every job in one group: its queue is FIFO)
    for (name, grouped) in KeyName::PARTITION
        .into_iter()
        .flat_map(|n| [(n, false), (n, true)])
    {
        let h = RedisHarness::new().await;
        let c = h.client().await;
        let topic = format!("wrongtype.{name}{}", if grouped { ".g" } else { "" });
        let t = c.topic(&topic).unwrap();
        let q = queue(&topic);
        let store = h.store();
        let ready = ["r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10"];
        for k in ready {
            en(&t, k, grouped).await.unwrap();
        }
        for k in ["s1", "s2"] {
            en(&t, k, grouped).delay(HOUR).await.unwrap();
        }
        let jobs = fetch(&h, &q, &common::conformance::req_max(10)).await.jobs;
        assert_eq!(keys_of(&jobs), ready);
        store
            .fail_one(
                &q,
                &jobs[2].key,
                jobs[2].token,
                &FailAction::Bury,
                "x",
                dq::DeadLimits::default(),
            )
            .await
            .unwrap();
        let keys = h.partition_keys(&topic, 0);
        let damaged = keys.get(name).unwrap().to_string();
        h.server().cmd::<()>(&["DEL", &damaged]);
        h.server()
            .cmd::<()>(&["SET", &damaged, "not what dq expects"]);

        let lease = |i: usize| dq::store::lease_of(&jobs[i]);
        let w = |op: &str| format!("{op} with {name} damaged (grouped: {grouped})");
        // Nothing is ready: leases nothing, audits, and trims the dead queue to nothing (a cap of 0).
        let idle = dq::store::FetchRequest {
            dead_limits: dq::DeadLimits {
                cap: 0,
                ..dq::DeadLimits::default()
            },
            ..common::conformance::req_max(0)
        };
        ok_or_unchanged(&h, &w("idle fetch"), store.fetch(&q, &idle)).await;
        ok_or_unchanged(&h, &w("enqueue"), async { en(&t, "n1", grouped).await }).await;
        ok_or_unchanged(&h, &w("enqueue later"), async {
            en(&t, "n2", grouped).delay(HOUR).await
        })
        .await;
        ok_or_unchanged(&h, &w("enqueue replacing"), async {
            en(&t, "s2", grouped).replace().await
        })
        .await;
        // r6's lease has run out: the next fetch recovers it before it leases.
        if name != KeyName::Active {
            h.server()
                .cmd::<()>(&["ZADD", &keys.active, "XX", "1", "r6"]);
        }
        ok_or_unchanged(
            &h,
            &w("fetch recovering"),
            store.fetch(&q, &common::conformance::req_max(1)),
        )
        .await;
        ok_or_unchanged(&h, &w("extend"), store.extend(&q, &[lease(0)], HOUR)).await;
        ok_or_unchanged(
            &h,
            &w("ack"),
            store.ack(&q, "", &dq::store::Success::of(&[lease(0)])),
        )
        .await;
        ok_or_unchanged(
            &h,
            &w("fail"),
            store.fail_one(
                &q,
                &jobs[1].key,
                jobs[1].token,
                &FailAction::Retry(HOUR),
                "x",
                dq::DeadLimits::default(),
            ),
        )
        .await;
        ok_or_unchanged(
            &h,
            &w("fail, due at once"),
            store.fail_one(
                &q,
                &jobs[3].key,
                jobs[3].token,
                &FailAction::Retry(Duration::ZERO),
                "x",
                dq::DeadLimits::default(),
            ),
        )
        .await;
        // A batch of failures touching every set a failure can go to.
        let failed = |i: usize, action: FailAction| dq::store::FailedAttempt {
            key: jobs[i].key.clone(),
            token: jobs[i].token,
            action,
            error: "x".into(),
        };
        ok_or_unchanged(
            &h,
            &w("fail_many"),
            store.fail_many(
                &q,
                &[
                    failed(7, FailAction::Retry(HOUR)),
                    failed(8, FailAction::Defer(Duration::ZERO)),
                    failed(9, FailAction::Bury),
                ],
                dq::DeadLimits::default(),
            ),
        )
        .await;
        ok_or_unchanged(&h, &w("release"), store.release(&q, &[lease(4)])).await;
        ok_or_unchanged(
            &h,
            &w("bury"),
            store.fail_one(
                &q,
                &jobs[6].key,
                jobs[6].token,
                &FailAction::Bury,
                "x",
                dq::DeadLimits::default(),
            ),
        )
        .await;
        ok_or_unchanged(
            &h,
            &w("reschedule to now"),
            t.reschedule("s2", NewDue::After(Duration::ZERO)),
        )
        .await;
        ok_or_unchanged(
            &h,
            &w("reschedule"),
            t.reschedule("s1", NewDue::After(HOUR)),
        )
        .await;
        ok_or_unchanged(&h, &w("cancel"), t.cancel("s1")).await;
        ok_or_unchanged(&h, &w("bury scheduled"), t.bury("n2", "x")).await;
        ok_or_unchanged(&h, &w("bury ready"), t.bury("n1", "x")).await;
        ok_or_unchanged(&h, &w("bury retry"), t.bury("r2", "x")).await;
        ok_or_unchanged(&h, &w("requeue"), t.requeue_dead(&["r3"])).await;
        let got = ok_or_unchanged(
            &h,
            &w("fetch"),
            store.fetch(&q, &common::conformance::req_max(1)),
        )
        .await;
        if let Some(d) = got.as_ref().and_then(|g| g.jobs.first()) {
            ok_or_unchanged(
                &h,
                &w("bury"),
                store.fail_one(
                    &q,
                    &d.key,
                    d.token,
                    &FailAction::Bury,
                    "x",
                    dq::DeadLimits::default(),
                ),
            )
            .await;
        }
        ok_or_unchanged(&h, &w("purge"), t.purge_all_dead()).await;
    }
}

/// An enqueue of `key` due now, in group "g" when `grouped`.
fn en(t: &dq::TopicClient, key: &str, grouped: bool) -> dq::Enqueue {
    let e = t.enqueue(raw(1)).key(key);
    if grouped { e.group("g") } else { e }
}

/// Issue 9, violation 6: a damaged value met after a script's first write. A history that
/// does not decode is started afresh (fail used to raise after taking the job out of
/// `active`); a `jobs` value that is not a record is left alone by cancel and reschedule (cancel
/// used to delete it and then answer a code the client rejects) and counts as dead.
#[tokio::test]
async fn damaged_history_or_record_fails_nothing_half_way() {
    let h = RedisHarness::new().await;
    let c = h.client().await;
    let t = c.topic("damaged").unwrap();
    let q = queue("damaged");
    let keys = h.partition_keys("damaged", 0);
    t.enqueue(raw(1)).key("x").await.unwrap();
    let d = fetch(&h, &q, &req()).await.jobs;
    h.server()
        .cmd::<()>(&["HSET", &keys.hist, "x", "\u{1}not msgpack"]);
    let out = h
        .store()
        .fail_one(
            &q,
            &d[0].key,
            d[0].token,
            &FailAction::Retry(HOUR),
            "boom",
            dq::DeadLimits::default(),
        )
        .await
        .expect("fail with a damaged history");
    assert!(
        matches!(out, dq::store::FailOutcome::Retrying { .. }),
        "{out:?}"
    );
    let x = info(&t, "x").await;
    assert_eq!((x.state, x.history.len()), (JobState::Retry, 1), "{x:?}");

    h.server().cmd::<()>(&["HSET", &keys.jobs, "junk", "Sab"]);
    assert_eq!(t.cancel("junk").await.unwrap(), dq::CancelOutcome::Dead);
    assert_eq!(t.bury("junk", "x").await.unwrap(), dq::BuryOutcome::Dead);
    assert_eq!(
        t.reschedule("junk", NewDue::After(HOUR)).await.unwrap(),
        RescheduleOutcome::Dead
    );
    let still: Option<String> = h.server().cmd(&["HGET", &keys.jobs, "junk"]);
    assert_eq!(still.as_deref(), Some("Sab"));
    h.server().cmd::<()>(&["HDEL", &keys.jobs, "junk"]);
    h.check_invariants().await;
}

/// `bury.lua` on a member of a batch checks the outbox's type before its first write: with the
/// outbox damaged it fails having written nothing, and buries once the damage is gone; its
/// dead queue is checked the same way.
#[tokio::test]
async fn bury_with_a_damaged_outbox_or_dead_queue_writes_nothing() {
    let h = RedisHarness::new().await;
    let c = h.client().await;
    let t = c.topic("bury.damaged").unwrap();
    let keys = h.partition_keys("bury.damaged", 0);
    let batch = c.new_batch().id("damaged").open().await.unwrap();
    let out = batch
        .add_raw(
            "bury.damaged",
            vec![dq::JobSpec::new(raw(1)).key("m").delay(HOUR)],
        )
        .await
        .unwrap();
    assert_eq!(out[0].outcome, EnqueueOutcome::Created);
    for damaged in [&keys.outbox, &keys.dead] {
        h.server()
            .cmd::<()>(&["SET", damaged, "not what dq expects"]);
        let before = dump_partition(&h);
        let err = t.bury("m", "x").await.unwrap_err();
        assert!(err.to_string().contains("WRONGTYPE"), "{damaged}: {err}");
        assert!(dump_partition(&h) == before, "{damaged}: written");
        h.server().cmd::<()>(&["DEL", damaged]);
    }
    assert_eq!(t.bury("m", "x").await.unwrap(), dq::BuryOutcome::Buried);
    assert_eq!(info(&t, "m").await.state, JobState::Dead);
    h.check_invariants().await;
}

/// Issue 15: a fetch leaves `active` stored as a skiplist (a listpack insert scans and shifts
/// the whole set per lease), through a hint member it adds and removes in the same call: the
/// set holds exactly the leased jobs.
#[tokio::test]
async fn active_is_a_skiplist_holding_only_leased_jobs() {
    let h = RedisHarness::new().await;
    let c = h.client().await;
    let t = c.topic("encoding").unwrap();
    let q = queue("encoding");
    let keys = h.partition_keys("encoding", 0);
    for k in ["a", "b", "c"] {
        t.enqueue(raw(1)).key(k).await.unwrap();
    }
    let d = fetch(&h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&d), ["a", "b", "c"]);
    let encoding: String = h.server().cmd(&["OBJECT", "ENCODING", &keys.active]);
    assert_eq!(encoding, "skiplist");
    let members: Vec<String> = h.server().cmd(&["ZRANGE", &keys.active, "0", "-1"]);
    assert_eq!(members, ["a", "b", "c"]);
    ack_all(&h, &q, &d).await;
    h.check_invariants().await;
}

/// Issue 15: a damaged record in a batch of failures is refused as stale (fetch buries it)
/// and left as it is; the rest of the batch is written.
#[tokio::test]
async fn damaged_record_in_a_failure_batch_fails_only_itself() {
    let h = RedisHarness::new().await;
    let c = h.client().await;
    let t = c.topic("failbatch").unwrap();
    let q = queue("failbatch");
    let keys = h.partition_keys("failbatch", 0);
    for k in ["a", "b", "c"] {
        t.enqueue(raw(1)).key(k).await.unwrap();
    }
    let d = fetch(&h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&d), ["a", "b", "c"]);
    h.server().cmd::<()>(&["HSET", &keys.jobs, "b", "Aab"]);
    let failed = |i: usize, action: FailAction| dq::store::FailedAttempt {
        key: d[i].key.clone(),
        token: d[i].token,
        action,
        error: "boom".into(),
    };
    let out = h
        .store()
        .fail_many(
            &q,
            &[
                failed(0, FailAction::Retry(HOUR)),
                failed(1, FailAction::Retry(HOUR)),
                failed(2, FailAction::Bury),
            ],
            dq::DeadLimits::default(),
        )
        .await
        .expect("fail_many");
    assert!(
        matches!(out[0], Ok(dq::store::FailOutcome::Retrying { .. })),
        "{out:?}"
    );
    assert!(matches!(out[1], Err(Error::StaleToken { .. })), "{out:?}");
    assert_eq!(
        out[2].as_ref().ok(),
        Some(&dq::store::FailOutcome::Buried { trimmed: 0 })
    );
    let still: Option<String> = h.server().cmd(&["HGET", &keys.jobs, "b"]);
    assert_eq!(still.as_deref(), Some("Aab"));
    assert_eq!(info(&t, "a").await.state, JobState::Retry);
    assert_eq!(info(&t, "c").await.state, JobState::Dead);
    h.server().cmd::<()>(&["HDEL", &keys.jobs, "b"]);
    h.server().cmd::<()>(&["ZREM", &keys.active, "b"]);
    // (a lean record's lease is in `leases`: cleared by hand too)
    h.server().cmd::<()>(&["HDEL", &keys.leases, "b"]);
    h.check_invariants().await;
}

/// Listing only reads (`list.lua` is declared `no-writes`), so at `maxmemory` — where Redis
/// refuses every write, and a `MULTI` of reads too — every state lists and pages, typed and
/// untyped, while an enqueue is refused with `OutOfMemory`.
#[tokio::test]
async fn listing_works_at_maxmemory() {
    let server = RedisServer::start_with(ServerOptions::default());
    let ns = dq_testkit::namespace("list-oom");
    let c = Client::builder()
        .namespace(&ns)
        .partitions("orders.close", 2)
        .connect(&server.url())
        .await
        .unwrap();
    let t = c.topic("orders.close").unwrap();
    for i in 0..6u64 {
        let e = t.enqueue(raw(i)).key(format!("k{i}"));
        let e = if i % 2 == 0 { e.delay(HOUR) } else { e };
        e.await.unwrap();
    }
    let store = c.store().clone();
    for p in 0..2 {
        let q = Queue::new(Topic::new("orders.close").unwrap(), p);
        let jobs = fetch_as(&store, &q).await;
        if let Some(d) = jobs.first() {
            store
                .fail_one(
                    &q,
                    &d.key,
                    d.token,
                    &FailAction::Bury,
                    "e",
                    Default::default(),
                )
                .await
                .unwrap();
        }
    }
    // Far below what is used: every write is refused from now on.
    server.cmd::<()>(&["CONFIG", "SET", "maxmemory", "1"]);
    let refused = t.enqueue(raw(9)).key("refused").await;
    assert!(matches!(refused, Err(Error::OutOfMemory)), "{refused:?}");

    let mut listed = 0;
    for state in [
        JobState::Scheduled,
        JobState::Ready,
        JobState::Active,
        JobState::Retry,
        JobState::Dead,
    ] {
        let mut page = dq::Page::first(1);
        for _ in 0..10 {
            let got = t.list(state, page).await.expect("list at maxmemory");
            listed += got.jobs.len();
            let Some(next) = got.next else { break };
            page = dq::Page::after(next, 1);
        }
    }
    assert_eq!(listed, 6, "every job listed once");
    let dead = c
        .dead::<common::conformance::close_order>(dq::Page::first(10))
        .await
        .expect("typed dead page at maxmemory");
    assert_eq!(dead.jobs.len(), 2);
    server.cmd::<()>(&["CONFIG", "SET", "maxmemory", "0"]);
}

/// Fetches whatever is ready in `q` with a 60 s lease.
async fn fetch_as(
    store: &std::sync::Arc<dyn dq::store::Store>,
    q: &Queue,
) -> Vec<dq::store::Delivery> {
    store
        .fetch(
            q,
            &FetchRequest {
                lease: Duration::from_secs(60),
                ..req()
            },
        )
        .await
        .unwrap()
        .jobs
}

/// A process that reads only record format 1 (an older dq: `format_level(1)`, whose scripts
/// treat every later format as newer) and one that reads the newest share a partition: the
/// old one runs the format-1 job ahead of a newest-format one, leaves that record as it is
/// (reported as newer, refused by its operator calls) and never writes it; the new one runs
/// both kinds. Nothing is lost or mis-decoded.
#[tokio::test]
async fn an_older_dq_runs_its_jobs_and_leaves_format_2_ones_to_a_newer_one() {
    use dq::store::prelude::*;
    use dq::store::{EnqueueCall, LEGACY_FORMAT, NEWEST_FORMAT, NewJob};
    let h = RedisHarness::new().await;
    let new = h.client().await;
    let old = RedisStore::connect(
        &dq_testkit::shared().url(),
        RedisOptions {
            namespace: h.namespace().to_string(),
            format_level: LEGACY_FORMAT,
            ..RedisOptions::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(old.formats().set_write(NEWEST_FORMAT), LEGACY_FORMAT);
    let q = queue("formats.rolling");
    let t = new.topic("formats.rolling").unwrap();
    let job = |key: &str, n: u64| NewJob {
        key: jk(key),
        payload: raw(n),
        due: dq::Due::Now,
        replace: false,
        expires: None,
        priority: Default::default(),
        window: None,
        group: None,
        batch: None,
    };
    old.enqueue(&q, &[job("old-1", 1)], EnqueueCall::new())
        .await
        .unwrap();
    t.enqueue(raw(2)).key("new-2").await.unwrap();
    old.enqueue(&q, &[job("old-3", 3)], EnqueueCall::new())
        .await
        .unwrap();
    let bytes = |key: &str| -> Vec<u8> {
        let k = h.partition_keys("formats.rolling", 0);
        h.server().cmd(&["HGET", &k.jobs, key])
    };
    assert_eq!(
        bytes("new-2")[0],
        NEWEST_FORMAT,
        "the new dq writes its newest format"
    );
    assert!(
        JobState::from_code(bytes("old-1")[0]).is_some(),
        "the old dq writes format 1"
    );
    let new_record = bytes("new-2");

    // the old dq leases its job at the front, then stops at the format-2 one
    let reply = old.fetch(&q, &req()).await.unwrap();
    assert_eq!(keys_of(&reply.jobs), ["old-1"]);
    assert_eq!(reply.jobs[0].payload, raw(1));
    assert_eq!(
        reply
            .newer
            .iter()
            .map(|n| (n.key.as_str(), n.format))
            .collect::<Vec<_>>(),
        [("new-2", NEWEST_FORMAT)]
    );
    assert!(
        reply.next_in.is_none_or(|d| d > Duration::ZERO),
        "{reply:?}"
    );
    ack_all(&h, &q, &reply.jobs).await;
    for e in [
        old.cancel(&q, &jk("new-2")).await.err(),
        old.job(&q, &jk("new-2")).await.err(),
        old.enqueue(&q, &[job("new-2", 9)], EnqueueCall::new())
            .await
            .err(),
    ] {
        assert!(
            matches!(
                e,
                Some(Error::NewerFormat {
                    format,
                    reads: 1
                }) if format == NEWEST_FORMAT
            ),
            "{e:?}"
        );
    }
    assert_eq!(bytes("new-2"), new_record, "left as it was");

    // the new dq runs the rest: its own and the old one's behind it
    let rest = fetch(&h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&rest), ["new-2", "old-3"]);
    assert_eq!(
        rest.iter().map(|d| unraw(&d.payload)).collect::<Vec<_>>(),
        [2, 3]
    );
    ack_all(&h, &q, &rest).await;
    h.assert_no_leftovers().await;
}

/// The libraries of dq's Redis Functions on `server` (`FUNCTION LIST`), by name.
fn dq_libraries(server: &RedisServer) -> BTreeSet<String> {
    let listed: Vec<Vec<dq_testkit::redis::Value>> = server.cmd(&["FUNCTION", "LIST"]);
    listed
        .iter()
        .filter_map(|lib| {
            let at = lib.iter().position(|v| {
                matches!(v, dq_testkit::redis::Value::BulkString(b) if b.as_slice() == b"library_name")
            })?;
            match lib.get(at + 1)? {
                dq_testkit::redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
                _ => None,
            }
        })
        .filter(|name| layout::is_library(name))
        .collect()
}

/// After a `FUNCTION FLUSH` (or a restart without persistence) the server has none of dq's
/// functions: the next call of each kind loads the library again and succeeds — a single
/// call, a namespace-wide one (the topic registry), and an enqueue sent with `WAIT` in one
/// pipeline (durable enqueue; this server has no replica, so it stores the job and reports
/// `NotReplicated`, not a missing function).
#[tokio::test]
async fn a_function_flush_is_reloaded_by_the_next_call() {
    let server = RedisServer::start();
    let ns = dq_testkit::namespace("fn-flush");
    let client = Client::builder()
        .namespace(&ns)
        .connect(&server.url())
        .await
        .unwrap();
    let durable = Client::builder()
        .namespace(&ns)
        .durable_enqueue(1, Duration::from_millis(50))
        .connect(&server.url())
        .await
        .unwrap();
    let t = client.topic("fn.flush").unwrap();
    t.enqueue(raw(0)).key("before").await.unwrap();
    assert_eq!(dq_libraries(&server).len(), 1);

    server.cmd::<()>(&["FUNCTION", "FLUSH"]);
    assert!(dq_libraries(&server).is_empty());
    let e = t.enqueue(raw(1)).key("after").await.unwrap();
    assert_eq!(e.outcome, EnqueueOutcome::Created);
    assert_eq!(dq_libraries(&server).len(), 1, "loaded again");

    server.cmd::<()>(&["FUNCTION", "FLUSH"]);
    let other = client.check_topic("fn.other").await.unwrap();
    assert_eq!(other.partitions, 1);

    server.cmd::<()>(&["FUNCTION", "FLUSH"]);
    let d = durable.topic("fn.flush").unwrap();
    let e = d.enqueue(raw(2)).key("durable").await;
    assert!(
        matches!(
            e,
            Err(Error::NotReplicated {
                acked: 0,
                wanted: 1
            })
        ),
        "{e:?}"
    );
    assert_eq!(t.stats().await.unwrap().ready, 3);
}

/// Two record-format levels (a dq acting as format 1 only, and the newest) keep a library
/// each on one server — named by the hash of its text, so neither replaces the other's
/// functions — and both keep working, also after both were flushed.
#[tokio::test]
async fn two_format_levels_keep_their_own_libraries_on_one_server() {
    use dq::store::LEGACY_FORMAT;
    let server = RedisServer::start();
    let ns = dq_testkit::namespace("fn-levels");
    let connect = |level: Option<u8>| {
        let url = server.url();
        let ns = ns.clone();
        async move {
            let b = Client::builder().namespace(&ns);
            let b = match level {
                Some(level) => b.format_level(level),
                None => b,
            };
            b.connect(&url).await.unwrap()
        }
    };
    let old = connect(Some(LEGACY_FORMAT)).await;
    let new = connect(None).await;
    for round in 0..2 {
        for (name, c) in [("old", &old), ("new", &new)] {
            let t = c.topic("fn.levels").unwrap();
            let e = t.enqueue(raw(round)).key(format!("{name}-{round}")).await;
            assert_eq!(
                e.unwrap().outcome,
                EnqueueOutcome::Created,
                "{name} {round}"
            );
            assert!(t.stats().await.is_ok(), "{name} {round}");
        }
        assert_eq!(dq_libraries(&server).len(), 2, "round {round}");
        server.cmd::<()>(&["FUNCTION", "FLUSH"]);
    }
    let t = new.topic("fn.levels").unwrap();
    assert_eq!(t.stats().await.unwrap().ready, 4);
}

/// At `maxmemory` Redis refuses a writing function before it runs, so the topic registry's
/// script is refused there; a topic already recorded is still checked (read with a plain
/// `HGET`), so a client or a worker started at `maxmemory` serves its recorded topics, while
/// recording a new topic fails with `OutOfMemory` like an enqueue.
#[tokio::test]
async fn a_recorded_topic_is_checked_at_maxmemory() {
    let server = RedisServer::start();
    let ns = dq_testkit::namespace("fn-oom");
    let first = Client::builder()
        .namespace(&ns)
        .partitions("fn.recorded", 3)
        .connect(&server.url())
        .await
        .unwrap();
    first.check_topic("fn.recorded").await.unwrap();
    server.cmd::<()>(&["CONFIG", "SET", "maxmemory", "1"]);
    let later = Client::builder()
        .namespace(&ns)
        .connect(&server.url())
        .await
        .unwrap();
    let meta = later.check_topic("fn.recorded").await;
    assert_eq!(meta.map(|m| m.partitions).ok(), Some(3));
    let new = later.check_topic("fn.new").await;
    assert!(matches!(new, Err(Error::OutOfMemory)), "{new:?}");
    server.cmd::<()>(&["CONFIG", "SET", "maxmemory", "0"]);
}

/// A damaged event stream never stops a job's change: an `events` key of another type loses
/// the events (counted in `events_lost`) while the jobs go on; a stats hash deleted by hand
/// (the event counter with it) numbers on after the stream's last event.
#[tokio::test]
async fn a_damaged_event_stream_never_stops_a_job() {
    let h = RedisHarness::new().await;
    let c = h.client().await;
    let t = c.topic("events.damaged").unwrap();
    let q = Queue::new(Topic::new("events.damaged").unwrap(), 0);
    t.set_events(Some(dq::EventsPolicy::default()))
        .await
        .unwrap();
    let k = h.partition_keys("events.damaged", 0);
    t.enqueue(raw(1)).key("a").await.unwrap();
    t.enqueue(raw(2)).key("b").await.unwrap();
    assert_eq!(
        h.store().last_event(&q).await.unwrap(),
        Some(dq::EventId(2))
    );

    // the counter is gone: the next event is still number 3
    let _: i64 = h.server().cmd(&["DEL", &k.stats]);
    t.enqueue(raw(3)).key("c").await.unwrap();
    let events = h
        .store()
        .read_events(&q, dq::EventId::ZERO, 100)
        .await
        .unwrap();
    let numbered: Vec<(u64, &str)> = events.iter().map(|e| (e.id.0, e.key.as_str())).collect();
    assert_eq!(numbered, [(1, "a"), (2, "b"), (3, "c")]);

    // an entry a newer dq wrote (event format 2, two events): handed out as two events of
    // kind `?` so a reader moves past it; the next event is numbered after it
    let _: String = h
        .server()
        .cmd(&["XADD", &k.events, "5-0", "v", "2", "n", "2", "b", "?"]);
    t.enqueue(raw(5)).key("e").await.unwrap();
    let after = h
        .store()
        .read_events(&q, dq::EventId(3), 100)
        .await
        .unwrap();
    let seen: Vec<(u64, String, &str)> = after
        .iter()
        .map(|e| (e.id.0, e.kind.to_string(), e.key.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            (4, "?".to_string(), ""),
            (5, "?".to_string(), ""),
            (6, "enqueued".to_string(), "e")
        ]
    );
    assert!(
        after[0]
            .error
            .as_deref()
            .unwrap()
            .contains("event format 2")
    );

    // a stream key of another type: the events are lost and counted, the jobs are enqueued
    let _: i64 = h.server().cmd(&["DEL", &k.events]);
    let _: String = h.server().cmd(&["SET", &k.events, "not a stream"]);
    t.enqueue(raw(4)).key("d").await.unwrap();
    assert_eq!(info_state(&t, "d").await, JobState::Ready);
    assert_eq!(t.stats().await.unwrap().events_lost, 1);
    let err = h
        .store()
        .read_events(&q, dq::EventId::ZERO, 100)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
}

/// A stream entry as `XRANGE` answers it: the id, then field/value pairs.
type StreamEntry = (String, Vec<(String, Vec<u8>)>);

async fn info_state(t: &dq::TopicClient, key: &str) -> JobState {
    t.job(key).await.unwrap().expect("the job").state
}

/// Event format 1 as this dq writes it, pinned: an entry's id is its first event's number,
/// fields `v` = 1, `n`, `t`, (`w`), `b` = cmsgpack `[kind, key, attempt, error, due]` per
/// event. A frozen entry of format 1 (bytes as a dq of this format wrote them) still reads:
/// a later event format must keep reading it (docs/EVENTS.md).
#[tokio::test]
async fn event_format_1_is_pinned_and_a_frozen_entry_still_reads() {
    let h = RedisHarness::new().await;
    let c = h.client().await;
    let t = c.topic("events.pinned").unwrap();
    t.set_events(Some(dq::EventsPolicy::default()))
        .await
        .unwrap();
    let at = std::time::UNIX_EPOCH + Duration::from_millis(4_102_444_800_000);
    t.enqueue(raw(1)).key("a").at(at).await.unwrap();
    assert_eq!(t.cancel("a").await.unwrap(), dq::CancelOutcome::Cancelled);
    let k = h.partition_keys("events.pinned", 0);
    let entries: Vec<StreamEntry> = h.server().cmd(&["XRANGE", &k.events, "-", "+"]);
    let ids: Vec<&str> = entries.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["1-0", "2-0"]);
    let field = |e: usize, name: &str| -> Vec<u8> {
        entries[e]
            .1
            .iter()
            .find(|(f, _)| f == name)
            .map_or_else(|| panic!("field {name}"), |(_, v)| v.clone())
    };
    let names: Vec<&str> = entries[0].1.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(names, ["v", "n", "t", "b"]);
    assert_eq!(
        (field(0, "v"), field(0, "n")),
        (b"1".to_vec(), b"1".to_vec())
    );
    // cmsgpack: [["q", "a", 0, "", 4102444800000]], then [["c", "a", 0, "", 0]]
    assert_eq!(
        field(0, "b"),
        b"\x91\x95\xa1q\xa1a\x00\xa0\xcf\x00\x00\x03\xbb\x2c\xc3\xd8\x00".to_vec()
    );
    assert_eq!(field(1, "b"), b"\x91\x95\xa1c\xa1a\x00\xa0\x00".to_vec());

    // a frozen entry: an ack of two jobs by worker w-1 at 1764250000000 (events 7 and 8)
    let q = Queue::new(Topic::new("events.pinned").unwrap(), 0);
    let frozen: Vec<(String, Vec<u8>)> = vec![
        ("v".into(), b"1".to_vec()),
        ("n".into(), b"2".to_vec()),
        ("t".into(), b"1764250000000".to_vec()),
        (
            "b".into(),
            b"\x92\x95\xa1k\xa2j1\x01\xa0\x00\x95\xa1k\xa2j2\x03\xa0\x00".to_vec(),
        ),
        ("w".into(), b"w-1".to_vec()),
    ];
    let events = dq::Event::decode_entry(&q, 7, &frozen).unwrap();
    let read: Vec<String> = events
        .iter()
        .map(|e| {
            format!(
                "{} {} {} {:?} {:?}",
                e.id, e.kind, e.key, e.attempt, e.worker
            )
        })
        .collect();
    assert_eq!(
        read,
        [
            r#"7 succeeded j1 Some(1) Some("w-1")"#,
            r#"8 succeeded j2 Some(3) Some("w-1")"#,
        ]
    );
    assert!(events.iter().all(|e| e.at_ms == 1_764_250_000_000));
}

/// A partition that lost events a reader had (here: its stream and counter deleted, as a
/// restore from an older save would leave it) numbers its new events from where it is; the
/// reader notices within a topic refresh (5 s), warns, and reads the new events.
#[tokio::test]
async fn a_reader_goes_back_when_redis_lost_events_it_had() {
    let h = RedisHarness::new().await;
    let c = h.client().await;
    let t = c.topic("events.rollback").unwrap();
    t.set_events(Some(dq::EventsPolicy::default()))
        .await
        .unwrap();
    let mut stream = c
        .events_with(
            dq::EventsOptions::default()
                .topics(["events.rollback"])
                .poll(Duration::from_millis(20)),
        )
        .await
        .unwrap();
    for i in 0..3 {
        t.enqueue(raw(i)).key(format!("before-{i}")).await.unwrap();
    }
    for _ in 0..3 {
        next_event(&mut stream).await;
    }
    let k = h.partition_keys("events.rollback", 0);
    let _: i64 = h.server().cmd(&["DEL", &k.events]);
    let _: i64 = h.server().cmd(&["HDEL", &k.stats, "event_seq"]);
    t.enqueue(raw(9)).key("after").await.unwrap();
    let e = next_event(&mut stream).await;
    assert_eq!((e.key.as_str(), e.id), ("after", dq::EventId(1)));
}

/// The next event of `stream`, within 30 s.
async fn next_event(stream: &mut dq::EventStream) -> dq::Event {
    tokio::time::timeout(Duration::from_secs(30), stream.next())
        .await
        .expect("an event in time")
        .expect("the stream goes on")
        .expect("an event, not an error")
}

/// One partition whose events cannot be read (its key holds another type) holds up no other:
/// the stream hands out the error, backs off that partition alone, and reads the others' events.
#[tokio::test]
async fn a_broken_partition_holds_up_no_other() {
    let h = RedisHarness::new().await;
    let c = h
        .client_with(|b| b.partitions("events.broken", 2))
        .await
        .unwrap();
    let t = c.topic("events.broken").unwrap();
    t.set_events(Some(dq::EventsPolicy::default()))
        .await
        .unwrap();
    let mut stream = c
        .events_with(
            dq::EventsOptions::default()
                .topics(["events.broken"])
                .poll(Duration::from_millis(20)),
        )
        .await
        .unwrap();
    // (broken after the stream started: a start position that cannot be read is an error of
    // `events_with` itself)
    let broken = h.partition_keys("events.broken", 0);
    let _: String = h.server().cmd(&["SET", &broken.events, "not a stream"]);
    let healthy: Vec<String> = (0..40)
        .map(|i| format!("job-{i}"))
        .filter(|k| jk(k).partition(2) == 1)
        .take(3)
        .collect();
    for k in &healthy {
        t.enqueue(raw(1)).key(k).await.unwrap();
    }
    let (mut read, mut errors) = (Vec::new(), 0);
    while read.len() < healthy.len() {
        match tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .expect("in time")
            .expect("the stream goes on")
        {
            Ok(e) => read.push(e.key),
            Err(e) => {
                assert!(e.to_string().contains("WRONGTYPE"), "{e}");
                errors += 1;
            }
        }
    }
    assert_eq!(read, healthy);
    assert!(errors >= 1, "the broken partition's error is handed out");
}
