//! The Redis [`Harness`]: a fresh namespace on the shared test server, and the invariant
//! check that reads the namespace's keys directly.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use dq::{Client, ClientBuilder, JobKey, JobState, Queue, Store, Topic};
use dq_testkit::{RedisServer, keys_in_namespace};

use super::Harness;

/// Every key name a partition may have (`<ns>:{<topic>#<p>}:<name>`), with its Redis type.
pub const KEY_NAMES: [(&str, &str); 10] = [
    ("scheduled", "zset"),
    ("retry", "zset"),
    ("ready", "list"),
    ("active", "zset"),
    ("dead", "zset"),
    ("pool", "hash"),
    ("hist", "hash"),
    ("stats", "hash"),
    ("wake", "list"),
    ("calls", "zset"),
];

/// Fields the `stats` hash may hold: the counters, the token counter, the idle audit's cursor,
/// and the ordering counter older versions kept.
const STATS_FIELDS: [&str; 11] = [
    "enqueued",
    "succeeded",
    "retried",
    "buried",
    "expired",
    "cancelled",
    "trimmed",
    "token",
    "repaired",
    "audit_cursor",
    "seq",
];

/// Record header length: state, attempts, due (u48), created (u48), token (u48).
const HEADER_LEN: usize = 20;

/// How many records per partition the check also reads through `Store::job` (which decodes
/// the record and its history).
const DECODE_SAMPLE: usize = 200;

/// A fresh namespace on the shared test server.
pub struct RedisHarness {
    server: &'static RedisServer,
    ns: String,
    client: Client,
}

impl RedisHarness {
    /// A harness with its own namespace on [`dq_testkit::shared`].
    pub async fn new() -> Self {
        let server = dq_testkit::shared();
        let ns = dq_testkit::namespace("store");
        let client = Client::builder()
            .namespace(&ns)
            .connect(&server.url())
            .await
            .expect("connect to the test redis");
        RedisHarness { server, ns, client }
    }

    /// The namespace (key prefix) of this harness.
    pub fn namespace(&self) -> &str {
        &self.ns
    }

    /// The server.
    pub fn server(&self) -> &'static RedisServer {
        self.server
    }

    /// Every key in the namespace, sorted.
    pub fn keys(&self) -> Vec<String> {
        keys_in_namespace(self.server, &self.ns)
    }

    /// The invariant violations found right now (empty when all is well).
    pub async fn violations(&self) -> Vec<String> {
        violations(self.server, &self.ns, Some(self.client.store().as_ref())).await
    }
}

impl Harness for RedisHarness {
    async fn client(&self) -> Client {
        self.client.clone()
    }

    async fn client_with(
        &self,
        configure: impl FnOnce(ClientBuilder) -> ClientBuilder,
    ) -> dq::Result<Client> {
        configure(Client::builder())
            .namespace(&self.ns)
            .connect(&self.server.url())
            .await
    }

    fn store(&self) -> Arc<dyn Store> {
        self.client.store().clone()
    }

    async fn check_invariants(&self) {
        let v = self.violations().await;
        assert!(
            v.is_empty(),
            "store invariants violated in namespace {}:\n  {}",
            self.ns,
            v.join("\n  ")
        );
    }

    async fn assert_no_leftovers(&self) {
        let keys = self.keys();
        let left: Vec<String> = keys
            .iter()
            .filter(|k| {
                !matches!(
                    parse_key(&self.ns, k),
                    Some((_, _, "stats" | "wake" | "calls"))
                ) && !parse_key(&self.ns, k).is_some_and(|(_, _, n)| n.starts_with("fetch:"))
            })
            .map(|k| describe(self.server, k))
            .collect();
        assert!(
            left.is_empty(),
            "job data left in namespace {} (only `stats`, `wake` and the enqueue and fetch \
             receipts, which expire, may remain):\n  {}",
            self.ns,
            left.join("\n  ")
        );
    }

    async fn assert_untouched(&self) {
        let keys = self.keys();
        assert!(
            keys.is_empty(),
            "expected no key in namespace {}, found:\n  {}",
            self.ns,
            keys.iter()
                .map(|k| describe(self.server, k))
                .collect::<Vec<_>>()
                .join("\n  ")
        );
    }
}

/// Splits `<ns>:{<topic>#<p>}:<name>` into topic, partition and name.
pub fn parse_key<'a>(ns: &str, key: &'a str) -> Option<(&'a str, u16, &'a str)> {
    let rest = key.strip_prefix(ns)?.strip_prefix(":{")?;
    let close = rest.find('}')?;
    let (tag, name) = (&rest[..close], rest[close + 1..].strip_prefix(':')?);
    let (topic, p) = tag.rsplit_once('#')?;
    Some((topic, p.parse().ok()?, name))
}

/// One line about a key: its name, type and size.
fn describe(server: &RedisServer, key: &str) -> String {
    let ty: String = server.cmd(&["TYPE", key]);
    let len: i64 = match ty.as_str() {
        "hash" => server.cmd(&["HLEN", key]),
        "zset" => server.cmd(&["ZCARD", key]),
        "list" => server.cmd(&["LLEN", key]),
        _ => -1,
    };
    let sample: Vec<String> = match ty.as_str() {
        "hash" => server.cmd(&["HKEYS", key]),
        "zset" => server.cmd(&["ZRANGE", key, "0", "4"]),
        "list" => server.cmd(&["LRANGE", key, "0", "4"]),
        _ => Vec::new(),
    };
    format!("{key} ({ty}, {len} entries, e.g. {sample:?})")
}

/// A decoded record header.
#[derive(Debug)]
struct Header {
    state: u8,
    attempts: u8,
    due: u64,
    created: u64,
    token: u64,
}

fn u48(b: &[u8]) -> u64 {
    b.iter().fold(0, |acc, &x| (acc << 8) | u64::from(x))
}

fn header(rec: &[u8]) -> Option<Header> {
    (rec.len() >= HEADER_LEN).then(|| Header {
        state: rec[0],
        attempts: rec[1],
        due: u48(&rec[2..8]),
        created: u48(&rec[8..14]),
        token: u48(&rec[14..20]),
    })
}

fn redis_now(server: &RedisServer) -> u64 {
    let (secs, micros): (u64, u64) = server.cmd(&["TIME"]);
    secs * 1000 + micros / 1000
}

fn zset(server: &RedisServer, key: &str) -> Vec<(String, f64)> {
    let flat: Vec<String> = server.cmd(&["ZRANGE", key, "0", "-1", "WITHSCORES"]);
    flat.chunks(2)
        .map(|p| (p[0].clone(), p[1].parse().expect("zset score")))
        .collect()
}

/// Checks every partition under namespace `ns` and returns what is wrong, one line each.
///
/// Call it when the namespace is quiescent (no store call in flight). The rules:
/// - every key is `<ns>:{<topic>#<p>}:<name>` with a known name and that name's type, or
///   `<ns>:{<topic>#<p>}:fetch:<call id>`, a fetch receipt: a string that expires;
/// - every record in `pool` has a valid header and sits in exactly the structure its state
///   byte names: S → `scheduled` only, F → `retry` only, A → `active` only, D → `dead` only,
///   R → none of the sorted sets and at least one hint in `ready`;
/// - scheduled and retry scores are `due + fraction` (fraction below 0.5) of their record;
///   an R record is due; an active or retried record has a token and an attempt;
/// - every sorted-set member has a record in the matching state (nothing dangles);
/// - every `hist` field belongs to a record;
/// - `wake` holds at most one token, `stats` only known non-negative counters;
/// - with `store`, up to [`DECODE_SAMPLE`] records per partition read back through
///   `Store::job` (record and history decode) in the same state.
pub async fn violations(server: &RedisServer, ns: &str, store: Option<&dyn Store>) -> Vec<String> {
    let mut v = Vec::new();
    let types: HashMap<&str, &str> = KEY_NAMES.into_iter().collect();
    let mut partitions: BTreeMap<(String, u16), ()> = BTreeMap::new();
    for key in keys_in_namespace(server, ns) {
        let Some((topic, p, name)) = parse_key(ns, &key) else {
            v.push(format!(
                "key {key:?} does not follow <ns>:{{<topic>#<p>}}:<name>"
            ));
            continue;
        };
        if Topic::new(topic).is_err() {
            v.push(format!("key {key:?} holds an invalid topic name {topic:?}"));
        }
        if let Some(id) = name.strip_prefix("fetch:") {
            // A fetch receipt: a string that goes by itself within the longest receipt life.
            if id.parse::<u64>().is_err() {
                v.push(format!("fetch receipt {key:?} is not named by a call id"));
            }
            let ty: String = server.cmd(&["TYPE", &key]);
            if ty != "string" && ty != "none" {
                v.push(format!("{key:?} is a {ty}, expected a string"));
            }
            let ttl: i64 = server.cmd(&["PTTL", &key]);
            let life = dq::FETCH_RECEIPT_LIFE.as_millis() as i64;
            if ttl != -2 && !(0..=life).contains(&ttl) {
                v.push(format!("{key:?} expires in {ttl} ms, not within {life}"));
            }
            partitions.insert((topic.to_string(), p), ());
            continue;
        }
        match types.get(name) {
            None => v.push(format!("unknown key name {name:?} in {key:?}")),
            Some(want) => {
                let ty: String = server.cmd(&["TYPE", &key]);
                // ("none": the receipts expired since the key was listed.)
                if ty != *want && !(name == "calls" && ty == "none") {
                    v.push(format!("{key:?} is a {ty}, expected a {want}"));
                }
                if name == "calls" {
                    // Receipts of enqueue calls: they must go by themselves (-2: gone already).
                    let ttl: i64 = server.cmd(&["PTTL", &key]);
                    let life = 2 * dq::ENQUEUE_RECEIPT_LIFE.as_millis() as i64;
                    if ttl != -2 && !(0..=life).contains(&ttl) {
                        v.push(format!("{key:?} expires in {ttl} ms, not within {life}"));
                    }
                }
            }
        }
        partitions.insert((topic.to_string(), p), ());
    }
    for (topic, p) in partitions.into_keys() {
        check_partition(server, ns, &topic, p, store, &mut v).await;
    }
    v
}

async fn check_partition(
    server: &RedisServer,
    ns: &str,
    topic: &str,
    p: u16,
    store: Option<&dyn Store>,
    v: &mut Vec<String>,
) {
    let prefix = format!("{ns}:{{{topic}#{p}}}:");
    let key = |name: &str| format!("{prefix}{name}");
    let at = |what: String| format!("{topic}#{p}: {what}");

    let pool_flat: Vec<Vec<u8>> = server.cmd(&["HGETALL", &key("pool")]);
    let sets: HashMap<&str, Vec<(String, f64)>> = ["scheduled", "retry", "active", "dead"]
        .into_iter()
        .map(|n| (n, zset(server, &key(n))))
        .collect();
    let ready: Vec<String> = server.cmd(&["LRANGE", &key("ready"), "0", "-1"]);
    let hist: Vec<String> = server.cmd(&["HKEYS", &key("hist")]);
    let wake: Vec<String> = server.cmd(&["LRANGE", &key("wake"), "0", "-1"]);
    let stats: Vec<String> = server.cmd(&["HGETALL", &key("stats")]);
    let now_after = redis_now(server);

    let mut pool: HashMap<String, Header> = HashMap::new();
    for pair in pool_flat.chunks(2) {
        let Ok(job) = String::from_utf8(pair[0].clone()) else {
            v.push(at(format!("pool field {:?} is not UTF-8", pair[0])));
            continue;
        };
        if JobKey::new(job.clone()).is_err() {
            v.push(at(format!("pool holds an invalid job key {job:?}")));
        }
        match header(&pair[1]) {
            Some(h) if JobState::from_code(h.state).is_some() => {
                pool.insert(job, h);
            }
            Some(h) => v.push(at(format!(
                "record of {job:?} has unknown state byte {:#x}",
                h.state
            ))),
            None => v.push(at(format!(
                "record of {job:?} is {} bytes, shorter than its header",
                pair[1].len()
            ))),
        }
    }

    let member_of: HashMap<&str, HashMap<&str, f64>> = sets
        .iter()
        .map(|(name, members)| {
            (
                *name,
                members.iter().map(|(m, s)| (m.as_str(), *s)).collect(),
            )
        })
        .collect();
    let hints: HashSet<&str> = ready.iter().map(String::as_str).collect();
    let home = |state: u8| match state {
        b'S' => Some("scheduled"),
        b'F' => Some("retry"),
        b'A' => Some("active"),
        b'D' => Some("dead"),
        _ => None,
    };

    for (job, h) in &pool {
        let state = h.state as char;
        let want = home(h.state);
        for (name, members) in &member_of {
            let inside = members.contains_key(job.as_str());
            if inside && Some(*name) != want {
                v.push(at(format!("{job:?} in state {state} is also in `{name}`")));
            }
            if !inside && Some(*name) == want {
                v.push(at(format!(
                    "{job:?} in state {state} is missing from `{name}`"
                )));
            }
        }
        match h.state {
            b'R' => {
                if !hints.contains(job.as_str()) {
                    v.push(at(format!("ready job {job:?} has no hint in `ready`")));
                }
                if h.due > now_after {
                    v.push(at(format!(
                        "ready job {job:?} is due at {} (now {now_after})",
                        h.due
                    )));
                }
            }
            b'S' | b'F' => {
                let name = want.expect("S and F have a set");
                if let Some(score) = member_of[name].get(job.as_str()) {
                    let frac = score - score.floor();
                    if score.floor() as u64 != h.due || frac >= 0.5 {
                        v.push(at(format!(
                            "{job:?}: `{name}` score {score} does not match due {}",
                            h.due
                        )));
                    }
                }
                if h.due < h.created {
                    v.push(at(format!(
                        "{job:?} is due at {} before it was created at {}",
                        h.due, h.created
                    )));
                }
                if h.state == b'F' && (h.token == 0 || h.attempts == 0) {
                    v.push(at(format!("retrying job {job:?} has never run: {h:?}")));
                }
            }
            b'A' if h.token == 0 || h.attempts == 0 => {
                v.push(at(format!(
                    "active job {job:?} has no token or attempt: {h:?}"
                )));
            }
            _ => {}
        }
    }
    for (name, members) in &sets {
        let code = match *name {
            "scheduled" => b'S',
            "retry" => b'F',
            "active" => b'A',
            _ => b'D',
        };
        for (m, _) in members {
            match pool.get(m) {
                None => v.push(at(format!("`{name}` member {m:?} has no record"))),
                Some(h) if h.state != code => v.push(at(format!(
                    "`{name}` member {m:?} has a record in state {}",
                    h.state as char
                ))),
                Some(_) => {}
            }
        }
    }
    for job in &hist {
        if !pool.contains_key(job) {
            v.push(at(format!("`hist` entry {job:?} has no record")));
        }
    }
    if wake.len() > 1 || wake.iter().any(|t| t != "1") {
        v.push(at(format!(
            "`wake` should hold at most one token, holds {wake:?}"
        )));
    }
    for pair in stats.chunks(2) {
        if !STATS_FIELDS.contains(&pair[0].as_str()) {
            v.push(at(format!("unknown `stats` field {:?}", pair[0])));
        }
        if pair[1].parse::<u64>().is_err() {
            v.push(at(format!(
                "`stats` field {:?} = {:?} is not a count",
                pair[0], pair[1]
            )));
        }
    }

    if let Some(store) = store {
        let queue = Queue::new(Topic::new(topic).expect("checked above"), p);
        for (job, h) in pool.iter().take(DECODE_SAMPLE) {
            let Ok(k) = JobKey::new(job.clone()) else {
                continue;
            };
            match store.job(&queue, &k).await {
                Ok(Some(info)) if info.state.code() == h.state => {}
                Ok(Some(info)) => v.push(at(format!(
                    "Store::job({job:?}) says {}, record says {}",
                    info.state, h.state as char
                ))),
                Ok(None) => v.push(at(format!("Store::job({job:?}) finds nothing"))),
                Err(e) => v.push(at(format!("Store::job({job:?}) fails: {e}"))),
            }
        }
    }
}
