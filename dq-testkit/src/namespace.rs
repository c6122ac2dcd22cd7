//! Unique key namespaces, and listing the keys left in one.

use std::collections::BTreeSet;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::server::RedisServer;

/// Returns a fresh namespace such as `orders-4711-3-k2x9qa`, for tests that share a server.
///
/// The result is `prefix`, the process id, a per-process counter and six random base-36
/// characters, joined by `-`: distinct for every call in this process and, in practice, across
/// processes. It contains only `[A-Za-z0-9._-]`; any other character of `prefix` becomes `_`,
/// and an empty `prefix` becomes `ns`.
pub fn namespace(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);

    let prefix: String = if prefix.is_empty() {
        "ns".to_owned()
    } else {
        prefix
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };

    // `RandomState` is seeded randomly per process; mixing in the time and counter gives a
    // different suffix per call without a dependency on a random-number crate.
    let mut hasher = RandomState::new().build_hasher();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(nanos);
    hasher.write_u64(n);
    let mut bits = hasher.finish();
    let mut suffix = String::with_capacity(6);
    for _ in 0..6 {
        const ALPHABET: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
        suffix.push(char::from(ALPHABET[(bits % 36) as usize]));
        bits /= 36;
    }

    format!("{prefix}-{}-{n}-{suffix}", std::process::id())
}

/// Lists the keys matching `{ns}:*` on `server`, sorted, using `SCAN` (never `KEYS`).
///
/// Meant for "nothing left behind" checks at the end of a test. Glob characters in `ns` are
/// escaped, so they match only themselves. Panics if the scan fails or does not finish within
/// 30 seconds.
pub fn keys_in_namespace(server: &RedisServer, ns: &str) -> Vec<String> {
    const MAX_ROUNDS: usize = 1_000_000;
    const TIME_LIMIT: Duration = Duration::from_secs(30);

    let mut pattern = String::with_capacity(ns.len() + 2);
    for c in ns.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push_str(":*");

    let mut conn = server.connection();
    let deadline = Instant::now() + TIME_LIMIT;
    // SCAN may return a key more than once; the set removes duplicates and sorts.
    let mut keys = BTreeSet::new();
    let mut cursor: u64 = 0;
    for _ in 0..MAX_ROUNDS {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query(&mut conn)
            .unwrap_or_else(|e| panic!("SCAN for {pattern:?} failed: {e}"));
        keys.extend(batch);
        if next == 0 {
            return keys.into_iter().collect();
        }
        cursor = next;
        assert!(
            Instant::now() < deadline,
            "SCAN for {pattern:?} did not finish within {TIME_LIMIT:?}"
        );
    }
    panic!("SCAN for {pattern:?} did not finish within {MAX_ROUNDS} rounds");
}
