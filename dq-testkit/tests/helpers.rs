//! Namespaces, key listing and the `eventually*` helpers.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use dq_testkit::{
    eventually, eventually_blocking, eventually_some, keys_in_namespace, namespace, shared,
};

fn valid(ns: &str) -> bool {
    !ns.is_empty()
        && ns
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

#[test]
fn namespaces_are_unique_and_well_formed() {
    let threads: Vec<_> = (0..8)
        .map(|_| std::thread::spawn(|| (0..2_000).map(|_| namespace("t")).collect::<Vec<_>>()))
        .collect();
    let mut seen = HashSet::new();
    for thread in threads {
        for ns in thread.join().unwrap() {
            assert!(valid(&ns), "{ns:?}");
            assert!(ns.starts_with("t-"), "{ns:?}");
            assert!(seen.insert(ns.clone()), "duplicate {ns:?}");
        }
    }
    assert_eq!(seen.len(), 16_000);
}

#[test]
fn namespace_prefixes_are_sanitized() {
    let ns = namespace("a:b c{d}*");
    assert!(ns.starts_with("a_b_c_d__-"), "{ns:?}");
    assert!(valid(&ns), "{ns:?}");
    assert!(namespace("").starts_with("ns-"));
    assert!(namespace("ok.name_x-1").starts_with("ok.name_x-1-"));
}

#[test]
fn keys_in_namespace_sees_only_its_own_keys() {
    let server = shared();
    let ns = namespace("scan");
    let other = namespace("scan");
    let mut conn = server.connection();
    // More keys than one SCAN round returns, plus neighbours that must not match.
    let mut expected: Vec<String> = (0..2_500).map(|i| format!("{ns}:k{i}")).collect();
    expected.push(format!("{ns}:{{tag}}:x"));
    for key in &expected {
        redis::cmd("SET").arg(key).arg(1).exec(&mut conn).unwrap();
    }
    for key in [format!("{other}:k1"), format!("{ns}x:k1"), ns.clone()] {
        redis::cmd("SET").arg(key).arg(1).exec(&mut conn).unwrap();
    }
    expected.sort();
    assert_eq!(keys_in_namespace(server, &ns), expected);
    assert_eq!(keys_in_namespace(server, &other).len(), 1);
    assert!(keys_in_namespace(server, &namespace("empty")).is_empty());
    // Glob characters in the namespace match only themselves.
    assert!(keys_in_namespace(server, "scan*").is_empty());
}

#[tokio::test]
async fn eventually_waits_for_the_condition() {
    let calls = Arc::new(AtomicU32::new(0));
    let started = Instant::now();
    eventually("three calls", Duration::from_secs(5), || {
        let calls = calls.clone();
        async move { calls.fetch_add(1, Ordering::SeqCst) + 1 >= 3 }
    })
    .await;
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    // Polled often, not once a second or at the deadline.
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn eventually_some_returns_the_value() {
    let server = shared();
    let ns = namespace("ev");
    let key = format!("{ns}:later");
    let url = server.url();
    let writer = {
        let key = key.clone();
        tokio::spawn(async move {
            let client = redis::Client::open(url).unwrap();
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            redis::cmd("SET")
                .arg(&key)
                .arg("hello")
                .exec_async(&mut conn)
                .await
                .unwrap();
        })
    };
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let value: String = eventually_some("the key is written", Duration::from_secs(5), || {
        let mut conn = conn.clone();
        let key = key.clone();
        async move {
            redis::cmd("GET")
                .arg(&key)
                .query_async::<Option<String>>(&mut conn)
                .await
                .unwrap()
        }
    })
    .await;
    assert_eq!(value, "hello");
    writer.await.unwrap();
    redis::cmd("DEL")
        .arg(&key)
        .exec_async(&mut conn)
        .await
        .unwrap();
    assert!(keys_in_namespace(server, &ns).is_empty());
}

#[tokio::test]
#[should_panic(expected = "timed out after 50ms")]
async fn eventually_panics_at_the_deadline() {
    eventually("never", Duration::from_millis(50), || async { false }).await;
}

#[tokio::test]
#[should_panic(expected = "timed out after 50ms")]
async fn eventually_abandons_a_hanging_condition() {
    eventually("hangs", Duration::from_millis(50), || {
        std::future::pending::<bool>()
    })
    .await;
}

#[test]
#[should_panic(expected = "timed out after 20ms: never")]
fn eventually_blocking_panics_at_the_deadline() {
    eventually_blocking("never", Duration::from_millis(20), || false);
}
