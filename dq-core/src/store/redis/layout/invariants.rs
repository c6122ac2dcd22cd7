//! The invariants of the Redis layout, and the one checker of them: a [`Snapshot`] of a
//! namespace read from Redis, and [`Snapshot::violations`], a pure function of it.
//!
//! The rules (ARCHITECTURE.md §4):
//! - every key is `<ns>:{<topic>#<p>}:<name>` with a valid topic, a known name and that name's
//!   type; receipts (`calls`, the `receipts:<bucket>` and `receipts:<bucket>:old` strings, and
//!   `fetch:<call id>` strings) carry an expiry within their life;
//! - every record has a valid header and sits in exactly the structure its state names:
//!   S → `scheduled` only, F → `retry` only, A → `active` only, D → `dead` only, R → none of
//!   the sorted sets and at least one hint in `ready` (else no fetch would ever find it); a
//!   lean (format 3) record whose key `leases` holds is active (its state byte keeps the state
//!   it was leased from), and every `leases` field belongs to a lean record;
//! - scheduled and retry scores are `due + fraction` (fraction below 0.5) of their record, and
//!   not before its creation; an R record is due; an active or retried record has a token and
//!   an attempt;
//! - every sorted-set member has a record in the matching state (nothing dangles);
//! - every `hist` field belongs to a record;
//! - `wake` holds at most one token, `stats` only known fields with non-negative counts;
//! - the one namespace-wide key, the topic registry `<ns>:topics`, is a hash of valid topic
//!   names to records that decode ([`TopicRecord`]); no partition at or past its topic's
//!   recorded count holds a record (a job there is one no worker looks for). A topic with no
//!   record is allowed: the `Store` trait may be used without a client.
//!
//! Hints in `ready` whose record is gone or not ready are allowed: fetch skips them by design.
//! Read a snapshot when the namespace is quiet (no call in flight): it is not atomic across
//! keys.

use std::collections::{BTreeMap, BTreeSet};

use super::{
    KeyName, PartitionKeys, RecordHeader, TopicRecord, batch_index_key, formats_key, parse_key,
    schedules_key, shapes_key, topics_key, workers_key,
};
use crate::error::{Result, from_redis};
use crate::format::LEAN_FORMAT;
use crate::job::{JobState, Queue};
use crate::names::{JobKey, Topic};
use crate::store::lease::FETCH_RECEIPT_LIFE;
use crate::store::produce::ENQUEUE_RECEIPT_LIFE;
use crate::store::redis::RedisStore;

/// The fields the `control` hash may hold besides cancel requests (`x:<job key>`).
pub const CONTROL_FIELDS: [&str; 9] = [
    "paused",
    "until",
    "conc",
    "rate_n",
    "rate_ms",
    "tat",
    "events",
    "max_delay",
    "batched",
];

/// Fields the `stats` hash may hold: the counters, the token counter, the due queue's place
/// counters (`pready_back`, `pready_front`), the idle audit's cursor,
/// and the ordering counter older versions kept.
pub const STATS_FIELDS: [&str; 20] = [
    "pready_back",
    "pready_front",
    "kept_trimmed",
    "events_lost",
    "event_seq",
    "enqueued",
    "succeeded",
    "retried",
    "buried",
    "expired",
    "expired_before_start",
    "cancelled",
    "succeeded_after_cancel_request",
    "trimmed",
    "throttles",
    "discarded",
    "token",
    "repaired",
    "audit_cursor",
    "seq",
];

/// Most `SCAN` calls one snapshot makes (1000 keys each): a bound, not a limit met in use.
const MAX_SCAN_ROUNDS: usize = 100_000;

/// One broken rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Where: a key, or a partition as `<topic>#<p>`.
    pub at: String,
    /// What is wrong.
    pub what: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.at, self.what)
    }
}

/// A key of the namespace as the snapshot listed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeySeen {
    /// The key.
    pub key: String,
    /// Its type (`TYPE`; `none` if it went away after it was listed).
    pub redis_type: String,
    /// `PTTL`: ms left, `-1` for no expiry, `-2` if it went away.
    pub ttl_ms: i64,
}

/// One partition's structures, read at one moment.
#[derive(Clone, Debug, Default)]
pub struct PartitionSnapshot {
    /// Job key → record (header + payload).
    pub jobs: BTreeMap<String, Vec<u8>>,
    /// `scheduled` members with their scores.
    pub scheduled: BTreeMap<String, f64>,
    /// `retry` members with their scores.
    pub retry: BTreeMap<String, f64>,
    /// `active` members with their lease deadlines.
    pub active: BTreeMap<String, f64>,
    /// `dead` members with their times of death.
    pub dead: BTreeMap<String, f64>,
    /// `ready` hints, head first.
    pub ready: Vec<String>,
    /// `pready` members (the hints of ready jobs whose priority is not normal) with their
    /// scores.
    pub pready: BTreeMap<String, f64>,
    /// `hist` fields.
    pub hist: BTreeSet<String>,
    /// `wake` tokens.
    pub wake: Vec<String>,
    /// The `stats` hash, as stored.
    pub stats: BTreeMap<String, String>,
    /// The `control` hash (pause, limits, throttle, cancel requests), as stored.
    pub control: BTreeMap<String, String>,
    /// The `leases` hash (job key → token of a running lean record), as stored.
    pub leases: BTreeMap<String, String>,
    /// The `kept` hash (job key → kept finished job), as stored.
    pub kept: BTreeMap<String, Vec<u8>>,
    /// `kept_at` members with the times their keeping ends.
    pub kept_at: BTreeMap<String, f64>,
    /// `uniq`: live job key → its `unique_for` window (ms), as stored.
    pub uniq: BTreeMap<String, String>,
    /// `uniq_at` members with the times their windows end.
    pub uniq_at: BTreeMap<String, f64>,
    /// `progress` fields (running jobs that reported).
    pub progress: BTreeSet<String>,
    /// `gready` members (`<group> NUL <priority digit> <place> <key>`: the hints of ready
    /// grouped jobs).
    pub gready: BTreeMap<String, f64>,
    /// `groups` members (the rotation) with their turns.
    pub groups: BTreeMap<String, f64>,
    /// `gwait` members (the groups waiting) with when they are looked at again.
    pub gwait: BTreeMap<String, f64>,
    /// `gactive` members (`<group> NUL <key>`: the running grouped jobs).
    pub gactive: BTreeMap<String, f64>,
    /// The `gctl` hash (group limits and state), as stored.
    pub gctl: BTreeMap<String, String>,
}

impl PartitionSnapshot {
    /// The sorted set that holds jobs in `state`, if any (a ready job is in none).
    fn set_of(&self, state: JobState) -> Option<(&'static str, &BTreeMap<String, f64>)> {
        match state {
            JobState::Scheduled => Some(("scheduled", &self.scheduled)),
            JobState::Retry => Some(("retry", &self.retry)),
            JobState::Active => Some(("active", &self.active)),
            JobState::Dead => Some(("dead", &self.dead)),
            JobState::Ready => None,
        }
    }

    fn sets(&self) -> [(JobState, &'static str, &BTreeMap<String, f64>); 4] {
        [
            (JobState::Scheduled, "scheduled", &self.scheduled),
            (JobState::Retry, "retry", &self.retry),
            (JobState::Active, "active", &self.active),
            (JobState::Dead, "dead", &self.dead),
        ]
    }

    /// A counter of `stats` (0 when absent or not a count).
    pub fn counter(&self, field: &str) -> u64 {
        self.stats
            .get(field)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
}

/// Every key of a namespace and every partition's structures, read over a store's connection
/// (on a cluster, every master is scanned).
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// The namespace read.
    pub namespace: String,
    /// Every key found under the namespace, sorted.
    pub keys: Vec<KeySeen>,
    /// The partitions found, by `(topic, partition)`.
    pub partitions: BTreeMap<(String, u16), PartitionSnapshot>,
    /// The topic registry (`<ns>:topics`) as stored: topic → record text.
    pub topics: BTreeMap<String, String>,
    /// Redis's clock (Unix ms), read after everything else.
    pub now_ms: u64,
}

/// Reads `store`'s namespace and returns every broken rule (empty when all is well). Call it
/// when the namespace is quiet; see the module docs for the rules.
pub async fn check_invariants(store: &RedisStore) -> Result<Vec<Violation>> {
    Ok(Snapshot::read(store).await?.violations())
}

fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl Snapshot {
    /// Reads every key of `store`'s namespace (`SCAN`, never `KEYS`) and the structures of
    /// every partition found. Keys of the wrong type are listed but not read.
    pub async fn read(store: &RedisStore) -> Result<Snapshot> {
        let namespace = store.namespace().to_string();
        let mut conn = store.conn.get().conn;
        let pattern = format!("{}:*", glob_escape(&namespace));
        // On a cluster every master holds some partitions: scan each of them.
        let masters = conn.masters().await.map_err(from_redis)?;
        let nodes: Vec<Option<(String, u16)>> = if masters.is_empty() {
            vec![None]
        } else {
            masters.into_iter().map(Some).collect()
        };
        let mut names: Vec<String> = Vec::new();
        for node in &nodes {
            let mut cursor: u64 = 0;
            for _ in 0..MAX_SCAN_ROUNDS {
                let mut scan = redis::cmd("SCAN");
                scan.arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000);
                let (next, batch): (u64, Vec<String>) = match node {
                    None => scan.query_async(&mut conn).await.map_err(from_redis)?,
                    Some((host, port)) => {
                        let v = conn.on_node(scan, host, *port).await.map_err(from_redis)?;
                        redis::from_redis_value(v).map_err(|e| {
                            crate::error::Error::Protocol(format!("SCAN reply: {e}"))
                        })?
                    }
                };
                names.extend(batch);
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        names.sort();
        names.dedup();
        let seen: Vec<(String, i64)> = if names.is_empty() {
            Vec::new()
        } else if store.is_cluster() {
            // Keys of many slots: one key (one slot) per call.
            let mut seen = Vec::with_capacity(names.len());
            for key in &names {
                let mut pipe = redis::pipe();
                pipe.cmd("TYPE").arg(key).cmd("PTTL").arg(key);
                let (t, ttl): (String, i64) =
                    pipe.query_async(&mut conn).await.map_err(from_redis)?;
                seen.push((t, ttl));
            }
            seen
        } else {
            let mut pipe = redis::pipe();
            for key in &names {
                pipe.cmd("TYPE").arg(key).cmd("PTTL").arg(key);
            }
            pipe.query_async(&mut conn).await.map_err(from_redis)?
        };
        let keys: Vec<KeySeen> = names
            .into_iter()
            .zip(seen)
            .map(|(key, (redis_type, ttl_ms))| KeySeen {
                key,
                redis_type,
                ttl_ms,
            })
            .collect();

        let mut partitions = BTreeMap::new();
        for seen in &keys {
            if let Some(p) = parse_key(&namespace, &seen.key) {
                partitions.insert((p.topic.to_string(), p.partition), ());
            }
        }
        let has = |key: &str, name: KeyName| {
            keys.iter()
                .any(|k| k.key == key && k.redis_type == name.redis_type())
        };
        let mut snapshot = Snapshot {
            namespace: namespace.clone(),
            ..Snapshot::default()
        };
        for (topic, p) in partitions.into_keys() {
            let mut part = PartitionSnapshot::default();
            // A topic the store would refuse still has its keys listed (and reported), but no
            // structures to read: its keys are not built from a `Queue`.
            if let Ok(t) = Topic::new(&topic) {
                let k = PartitionKeys::new(&namespace, &Queue::new(t, p));
                if has(&k.jobs, KeyName::Jobs) {
                    let v: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("HGETALL")
                        .arg(&k.jobs)
                        .query_async(&mut conn)
                        .await
                        .map_err(from_redis)?;
                    part.jobs = v
                        .into_iter()
                        .map(|(job, rec)| (String::from_utf8_lossy(&job).into_owned(), rec))
                        .collect();
                }
                if has(&k.kept, KeyName::Kept) {
                    let v: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("HGETALL")
                        .arg(&k.kept)
                        .query_async(&mut conn)
                        .await
                        .map_err(from_redis)?;
                    part.kept = v
                        .into_iter()
                        .map(|(job, v)| (String::from_utf8_lossy(&job).into_owned(), v))
                        .collect();
                }
                for (name, key, into) in [
                    (KeyName::Scheduled, &k.scheduled, &mut part.scheduled),
                    (KeyName::Retry, &k.retry, &mut part.retry),
                    (KeyName::Active, &k.active, &mut part.active),
                    (KeyName::Dead, &k.dead, &mut part.dead),
                    (KeyName::KeptAt, &k.kept_at, &mut part.kept_at),
                    (KeyName::Pready, &k.pready, &mut part.pready),
                    (KeyName::UniqAt, &k.uniq_at, &mut part.uniq_at),
                    (KeyName::Gready, &k.gready, &mut part.gready),
                    (KeyName::Groups, &k.groups, &mut part.groups),
                    (KeyName::Gwait, &k.gwait, &mut part.gwait),
                    (KeyName::Gactive, &k.gactive, &mut part.gactive),
                ] {
                    if has(key, name) {
                        let v: Vec<(String, f64)> = redis::cmd("ZRANGE")
                            .arg(key)
                            .arg(0)
                            .arg(-1)
                            .arg("WITHSCORES")
                            .query_async(&mut conn)
                            .await
                            .map_err(from_redis)?;
                        *into = v.into_iter().collect();
                    }
                }
                for (name, key, into) in [
                    (KeyName::Ready, &k.ready, &mut part.ready),
                    (KeyName::Wake, &k.wake, &mut part.wake),
                ] {
                    if has(key, name) {
                        *into = redis::cmd("LRANGE")
                            .arg(key)
                            .arg(0)
                            .arg(-1)
                            .query_async(&mut conn)
                            .await
                            .map_err(from_redis)?;
                    }
                }
                if has(&k.progress, KeyName::Progress) {
                    part.progress = redis::cmd("HKEYS")
                        .arg(&k.progress)
                        .query_async(&mut conn)
                        .await
                        .map_err(from_redis)?;
                }
                if has(&k.hist, KeyName::Hist) {
                    part.hist = redis::cmd("HKEYS")
                        .arg(&k.hist)
                        .query_async(&mut conn)
                        .await
                        .map_err(from_redis)?;
                }
                for (name, key, into) in [
                    (KeyName::Stats, &k.stats, &mut part.stats),
                    (KeyName::Control, &k.control, &mut part.control),
                    (KeyName::Leases, &k.leases, &mut part.leases),
                    (KeyName::Uniq, &k.uniq, &mut part.uniq),
                    (KeyName::Gctl, &k.gctl, &mut part.gctl),
                ] {
                    if has(key, name) {
                        *into = redis::cmd("HGETALL")
                            .arg(key)
                            .query_async(&mut conn)
                            .await
                            .map_err(from_redis)?;
                    }
                }
            }
            snapshot.partitions.insert((topic, p), part);
        }
        let registry = topics_key(&namespace);
        if has(&registry, KeyName::Topics) {
            snapshot.topics = redis::cmd("HGETALL")
                .arg(&registry)
                .query_async(&mut conn)
                .await
                .map_err(from_redis)?;
        }
        let (secs, micros): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut conn)
            .await
            .map_err(from_redis)?;
        snapshot.now_ms = secs * 1000 + micros / 1000;
        snapshot.keys = keys;
        Ok(snapshot)
    }

    /// Every broken rule (empty when all is well); see the module docs for the rules.
    pub fn violations(&self) -> Vec<Violation> {
        let mut v = Vec::new();
        for seen in &self.keys {
            self.check_key(seen, &mut v);
        }
        for ((topic, p), part) in &self.partitions {
            check_partition(&format!("{topic}#{p}"), part, self.now_ms, &mut v);
        }
        self.check_topics(&mut v);
        v
    }

    /// The registry's records, and no job past its topic's recorded partition count.
    fn check_topics(&self, v: &mut Vec<Violation>) {
        let at = topics_key(&self.namespace);
        let mut say = |at: &str, what: String| {
            v.push(Violation {
                at: at.to_string(),
                what,
            });
        };
        for (topic, text) in &self.topics {
            if Topic::new(topic).is_err() {
                say(&at, format!("holds an invalid topic name {topic:?}"));
            }
            let record = match TopicRecord::decode(text) {
                Ok(r) => r,
                Err(e) => {
                    let e = match e {
                        crate::error::Error::Protocol(what) => what,
                        other => other.to_string(),
                    };
                    say(&at, format!("{topic:?}: {e}"));
                    continue;
                }
            };
            for ((t, p), part) in &self.partitions {
                if t == topic && *p >= record.partitions && !part.jobs.is_empty() {
                    say(
                        &format!("{t}#{p}"),
                        format!(
                            "{} job(s) past the topic's {} recorded partition(s): no worker \
                             looks here",
                            part.jobs.len(),
                            record.partitions
                        ),
                    );
                }
            }
        }
    }

    fn check_key(&self, seen: &KeySeen, v: &mut Vec<Violation>) {
        let key = &seen.key;
        let mut say = |what: String| {
            v.push(Violation {
                at: key.clone(),
                what,
            });
        };
        if *key == topics_key(&self.namespace) {
            let ty = seen.redis_type.as_str();
            if ty != KeyName::Topics.redis_type() && ty != "none" {
                say(format!(
                    "is a {ty}, expected a {}",
                    KeyName::Topics.redis_type()
                ));
            }
            if seen.ttl_ms >= 0 {
                say(format!(
                    "expires in {} ms: the registry must not",
                    seen.ttl_ms
                ));
            }
            return;
        }
        if *key == schedules_key(&self.namespace) {
            // Periodic schedules: a hash that never expires.
            let ty = seen.redis_type.as_str();
            if ty != KeyName::Schedules.redis_type() && ty != "none" {
                say(format!(
                    "is a {ty}, expected a {}",
                    KeyName::Schedules.redis_type()
                ));
            }
            if seen.ttl_ms >= 0 {
                say(format!("expires in {} ms: schedules must not", seen.ttl_ms));
            }
            return;
        }
        if *key == formats_key(&self.namespace) {
            // The record-format registry: a hash that never expires (its level outlives
            // every process).
            let ty = seen.redis_type.as_str();
            if ty != KeyName::Formats.redis_type() && ty != "none" {
                say(format!(
                    "is a {ty}, expected a {}",
                    KeyName::Formats.redis_type()
                ));
            }
            if seen.ttl_ms >= 0 {
                say(format!(
                    "expires in {} ms: the format level must not",
                    seen.ttl_ms
                ));
            }
            return;
        }
        if *key == shapes_key(&self.namespace) {
            // Payload shapes: a hash that never expires (each worker rewrites its topics').
            let ty = seen.redis_type.as_str();
            if ty != KeyName::Shapes.redis_type() && ty != "none" {
                say(format!(
                    "is a {ty}, expected a {}",
                    KeyName::Shapes.redis_type()
                ));
            }
            if seen.ttl_ms >= 0 {
                say(format!("expires in {} ms: shapes must not", seen.ttl_ms));
            }
            return;
        }
        if *key == workers_key(&self.namespace) {
            // Live workers' heartbeats: a hash that expires when no worker beats.
            let ty = seen.redis_type.as_str();
            if ty != KeyName::Workers.redis_type() && ty != "none" {
                say(format!(
                    "is a {ty}, expected a {}",
                    KeyName::Workers.redis_type()
                ));
            }
            return;
        }
        if *key == batch_index_key(&self.namespace) {
            // The batches not done: a sorted set that never expires.
            let ty = seen.redis_type.as_str();
            if ty != KeyName::BatchIndex.redis_type() && ty != "none" {
                say(format!(
                    "is a {ty}, expected a {}",
                    KeyName::BatchIndex.redis_type()
                ));
            }
            return;
        }
        if let Some(id) = key
            .strip_prefix(&format!("{}:{{batch:", self.namespace))
            .and_then(|rest| rest.strip_suffix('}'))
        {
            // A batch's record (expires once done, for its retention).
            let ty = seen.redis_type.as_str();
            if ty != KeyName::Batch.redis_type() && ty != "none" {
                say(format!(
                    "is a {ty}, expected a {}",
                    KeyName::Batch.redis_type()
                ));
            }
            if crate::batch::BatchId::new(id).is_err() {
                say(format!("holds an invalid batch id {id:?}"));
            }
            return;
        }
        let Some(parsed) = parse_key(&self.namespace, key) else {
            say("does not follow <ns>:{<topic>#<p>}:<name> (or <ns>:topics)".into());
            return;
        };
        if Topic::new(parsed.topic).is_err() {
            say(format!("holds an invalid topic name {:?}", parsed.topic));
        }
        let Some(name) = parsed.name else {
            say(format!("unknown key name {:?}", parsed.suffix));
            return;
        };
        // ("none": gone since it was listed, e.g. receipts that expired.)
        let ty = seen.redis_type.as_str();
        if ty != name.redis_type() && ty != "none" {
            say(format!("is a {ty}, expected a {}", name.redis_type()));
        }
        let life = match name {
            KeyName::Calls | KeyName::Receipts | KeyName::OldReceipts => {
                Some(2 * ENQUEUE_RECEIPT_LIFE.as_millis() as i64)
            }
            KeyName::FetchReceipt => Some(FETCH_RECEIPT_LIFE.as_millis() as i64),
            _ => None,
        };
        // Receipts go by themselves (-2: gone already).
        if let Some(life) = life
            && seen.ttl_ms != -2
            && !(0..=life).contains(&seen.ttl_ms)
        {
            say(format!("expires in {} ms, not within {life}", seen.ttl_ms));
        }
    }
}

fn check_partition(at: &str, part: &PartitionSnapshot, now_ms: u64, v: &mut Vec<Violation>) {
    let mut say = |what: String| {
        v.push(Violation {
            at: at.to_string(),
            what,
        });
    };
    let hints: BTreeSet<&str> = part.ready.iter().map(String::as_str).collect();
    // `gready`'s hints as (group, job key): `<group> NUL <priority digit> <place, 16 hex> <key>`
    let group_hints: BTreeSet<(&str, &str)> = part
        .gready
        .keys()
        .filter_map(|m| {
            let (g, rest) = m.split_once('\0')?;
            Some((g, rest.get(17..)?))
        })
        .collect();
    let mut states: BTreeMap<&str, JobState> = BTreeMap::new();
    for (job, rec) in &part.jobs {
        if JobKey::stored(job.clone()).is_err() {
            say(format!("`jobs` holds an invalid job key {job:?}"));
        }
        let h = match RecordHeader::decode(rec) {
            // a lean record is running while `leases` holds its key
            Ok(h) if h.format >= LEAN_FORMAT => match part.leases.get(job) {
                None => h,
                Some(token) => match token.parse::<u64>() {
                    Ok(token) if token > 0 => h.leased(token),
                    _ => {
                        say(format!(
                            "`leases` token of {job:?} is {token:?}, not a token"
                        ));
                        h.leased(0)
                    }
                },
            },
            Ok(h) => h,
            // A newer dq's record: its rules are not this dq's to check (it is left as it is).
            Err(crate::error::Error::NewerFormat { .. }) => continue,
            Err(e) => {
                let e = match e {
                    crate::error::Error::Protocol(what) => what,
                    other => other.to_string(),
                };
                say(format!("record of {job:?}: {e}"));
                continue;
            }
        };
        states.insert(job, h.state);
        let state = h.state.code() as char;
        let home = part.set_of(h.state).map(|(name, _)| name);
        for (_, name, members) in part.sets() {
            let inside = members.contains_key(job);
            if inside && Some(name) != home {
                say(format!("{job:?} in state {state} is also in `{name}`"));
            }
            if !inside && Some(name) == home {
                say(format!("{job:?} in state {state} is missing from `{name}`"));
            }
        }
        let group = h.group(rec);
        if let Some(g) = group {
            // a running grouped job counts against its group's cap while it runs
            let running = part.gactive.contains_key(&format!("{g}\0{job}"));
            if (h.state == JobState::Active) != running {
                say(format!(
                    "{job:?} of group {g:?} in state {state} is{} in `gactive`",
                    if running { "" } else { " not" }
                ));
            }
        }
        match h.state {
            JobState::Ready if group.is_some() => {
                // a ready grouped job has its hint in `gready`, and its group a turn or a wait
                let g = group.unwrap_or_default();
                if !group_hints.contains(&(g, job.as_str())) {
                    say(format!(
                        "ready job {job:?} has no hint in `gready` (never delivered)"
                    ));
                }
                if !part.groups.contains_key(g) && !part.gwait.contains_key(g) {
                    say(format!(
                        "group {g:?} has a ready job ({job:?}) but neither a turn nor a wait"
                    ));
                }
            }
            JobState::Ready => {
                // a job of normal priority has its hint in `ready`, any other in `pready`
                if h.priority == crate::job::Priority::NORMAL.level() {
                    if !hints.contains(job.as_str()) {
                        say(format!(
                            "ready job {job:?} has no hint in `ready` (never delivered)"
                        ));
                    }
                } else if !part.pready.contains_key(job) {
                    say(format!(
                        "ready job {job:?} of priority {} has no hint in `pready` (never \
                         delivered)",
                        h.priority
                    ));
                }
                if h.due_ms > now_ms {
                    say(format!(
                        "ready job {job:?} is due at {} (now {now_ms})",
                        h.due_ms
                    ));
                }
            }
            JobState::Scheduled | JobState::Retry => {
                let (name, members) = part.set_of(h.state).expect("S and F have a set");
                if let Some(score) = members.get(job) {
                    let frac = score - score.floor();
                    if score.floor() as u64 != h.due_ms || frac >= 0.5 {
                        say(format!(
                            "{job:?}: `{name}` score {score} does not match due {}",
                            h.due_ms
                        ));
                    }
                }
                if h.due_ms < h.created_ms {
                    say(format!(
                        "{job:?} is due at {} before it was created at {}",
                        h.due_ms, h.created_ms
                    ));
                }
                // (a lean record keeps no token: its attempts say it ran)
                if h.state == JobState::Retry
                    && ((h.token == 0 && h.format < LEAN_FORMAT) || h.attempts == 0)
                {
                    say(format!("retrying job {job:?} has never run: {h:?}"));
                }
            }
            JobState::Active if h.token == 0 || h.attempts == 0 => {
                say(format!("active job {job:?} has no token or attempt: {h:?}"));
            }
            _ => {}
        }
    }
    for (state, name, members) in part.sets() {
        for m in members.keys() {
            if !part.jobs.contains_key(m) {
                say(format!("`{name}` member {m:?} has no record"));
            } else if let Some(s) = states.get(m.as_str())
                && *s != state
            {
                say(format!(
                    "`{name}` member {m:?} has a record in state {}",
                    s.code() as char
                ));
            }
        }
    }
    // a member of gactive names a running job of its group
    for m in part.gactive.keys() {
        let (g, job) = m.split_once('\0').unwrap_or(("", m));
        let owner = part.jobs.get(job).and_then(|r| {
            let h = RecordHeader::decode(r).ok()?;
            Some(h.group(r)? == g)
        });
        if owner != Some(true) || states.get(job) != Some(&JobState::Active) {
            say(format!(
                "`gactive` member {m:?} is no running job of group {g:?}"
            ));
        }
    }
    for job in &part.hist {
        if !part.jobs.contains_key(job) {
            say(format!("`hist` entry {job:?} has no record"));
        }
    }
    for job in part.leases.keys() {
        match part.jobs.get(job).map(|r| RecordHeader::decode(r)) {
            None => say(format!("`leases` entry {job:?} has no record")),
            Some(Ok(h)) if h.format < LEAN_FORMAT => say(format!(
                "`leases` entry {job:?} belongs to a format-{} record (its lease is in it)",
                h.format
            )),
            _ => {}
        }
    }
    if part.wake.len() > 1 || part.wake.iter().any(|t| t != "1") {
        say(format!(
            "`wake` should hold at most one token, holds {:?}",
            part.wake
        ));
    }
    // A cancel request names a running job of the partition: every end of a delivery drops it.
    for (field, value) in &part.control {
        if let Some(job) = field.strip_prefix("x:") {
            let state = part
                .jobs
                .get(job)
                .and_then(|r| RecordHeader::decode(r).ok())
                .map(|h| match part.leases.contains_key(job) {
                    true if h.format >= LEAN_FORMAT => JobState::Active,
                    _ => h.state,
                });
            if state != Some(JobState::Active) {
                say(format!(
                    "`control` holds a cancel request for {job:?}, which is not running ({state:?})"
                ));
            }
        } else if field == "keep" {
            if crate::finished::Retention::decode(value).is_none() {
                say(format!(
                    "`control` field \"keep\" = {value:?} is not a retention"
                ));
            }
        } else if !CONTROL_FIELDS.contains(&field.as_str()) {
            say(format!("unknown `control` field {field:?}"));
        } else if value.parse::<f64>().is_err() {
            say(format!(
                "`control` field {field:?} = {value:?} is not a number"
            ));
        }
    }
    // Progress belongs to a running job: every end of a run deletes it.
    for job in &part.progress {
        let running = part
            .jobs
            .get(job)
            .and_then(|r| RecordHeader::decode(r).ok())
            .is_some_and(|h| match h.format >= LEAN_FORMAT {
                true => part.leases.contains_key(job),
                false => h.state == JobState::Active,
            });
        if !running {
            say(format!("`progress` holds {job:?}, which is not running"));
        }
    }
    // Kept jobs: each in both `kept` and `kept_at`, each of a kept-job format this dq reads.
    for (job, value) in &part.kept {
        match part.kept_at.get(job) {
            None => say(format!("kept job {job:?} is not in `kept_at`")),
            Some(until) => {
                let key = JobKey::stored(job.clone());
                if let Ok(key) = key
                    && let Err(e) = crate::store::redis::kept::decode_kept(
                        key,
                        value,
                        crate::format::NEWEST_FORMAT,
                        *until as u64,
                    )
                {
                    say(format!("kept job {job:?} does not decode: {e}"));
                }
            }
        }
    }
    for job in part.kept_at.keys() {
        if !part.kept.contains_key(job) {
            say(format!("`kept_at` member {job:?} has no kept job"));
        }
    }
    // Key windows: a `uniq` field is a live job's window (every end of a job moves it to
    // `uniq_at`), a positive whole ms.
    for (job, value) in &part.uniq {
        if !part.jobs.contains_key(job) {
            say(format!("`uniq` holds {job:?}, which has no record"));
        }
        if value.parse::<u64>().map_or(true, |ms| ms == 0) {
            say(format!(
                "`uniq` field {job:?} = {value:?} is not a window in ms"
            ));
        }
    }
    for (field, value) in &part.stats {
        if !STATS_FIELDS.contains(&field.as_str()) {
            say(format!("unknown `stats` field {field:?}"));
        }
        if value.parse::<u64>().is_err() {
            say(format!(
                "`stats` field {field:?} = {value:?} is not a count"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(state: JobState, due_ms: u64) -> Vec<u8> {
        RecordHeader {
            format: crate::format::LEGACY_FORMAT,
            state,
            attempts: 1,
            due_ms,
            created_ms: 0,
            token: 1,
            expires_ms: 0,
            priority: 5,
            group_len: 0,
            batch_len: 0,
        }
        .encode(b"payload")
    }

    fn snapshot(part: PartitionSnapshot) -> Snapshot {
        let mut snap = Snapshot {
            namespace: "ns".into(),
            now_ms: 1_000,
            ..Snapshot::default()
        };
        snap.partitions.insert(("t".into(), 0), part);
        snap
    }

    fn key(key: &str, redis_type: &str, ttl_ms: i64) -> KeySeen {
        KeySeen {
            key: key.into(),
            redis_type: redis_type.into(),
            ttl_ms,
        }
    }

    /// Cancel requests name running jobs; other control fields are known numbers.
    #[test]
    fn control_rules() {
        let mut part = PartitionSnapshot::default();
        part.jobs.insert("a".into(), rec(JobState::Active, 500));
        part.active.insert("a".into(), 5_000.0);
        part.control.insert("x:a".into(), "1".into());
        part.control.insert("conc".into(), "3".into());
        part.control.insert("tat".into(), "1234.500".into());
        assert!(
            snapshot(part.clone()).violations().is_empty(),
            "{:?}",
            snapshot(part.clone()).violations()
        );
        part.control.insert("x:gone".into(), "1".into());
        part.control.insert("bogus".into(), "1".into());
        part.control.insert("paused".into(), "yes".into());
        let v: Vec<String> = snapshot(part)
            .violations()
            .iter()
            .map(ToString::to_string)
            .collect();
        let v = v.join("\n");
        for needle in [
            "cancel request for \"gone\", which is not running",
            "unknown `control` field \"bogus\"",
            "`control` field \"paused\" = \"yes\" is not a number",
        ] {
            assert!(v.contains(needle), "missing {needle:?} in:\n{v}");
        }
    }

    #[test]
    fn structural_rules() {
        let mut part = PartitionSnapshot::default();
        part.jobs.insert("s".into(), rec(JobState::Scheduled, 500));
        part.scheduled.insert("s".into(), 500.25);
        part.jobs.insert("r".into(), rec(JobState::Ready, 900));
        part.ready.push("r".into());
        part.ready.push("gone".into()); // a stale hint is fine
        // both formats are records; a newer dq's record is left to it (in any index)
        let mut versioned = RecordHeader::decode(&rec(JobState::Scheduled, 700)).unwrap();
        versioned.format = crate::format::NEWEST_FORMAT;
        part.jobs.insert("s2".into(), versioned.encode(b"payload"));
        part.scheduled.insert("s2".into(), 700.0);
        part.jobs.insert(
            "newer".into(),
            vec![crate::store::redis::layout::MAX_FORMAT, 0xff],
        );
        part.retry.insert("newer".into(), 1.0);
        part.stats.insert("enqueued".into(), "2".into());
        let mut snap = snapshot(part.clone());
        snap.keys = vec![
            key("ns:{t#0}:jobs", "hash", -1),
            key("ns:{t#0}:calls", "zset", 30_000),
            key("ns:{t#0}:receipts:0a", "string", 60_000),
            key("ns:{t#0}:receipts:0a:old", "string", 1),
            key("ns:{t#0}:fetch:17", "string", 1_000),
        ];
        assert!(snap.violations().is_empty(), "{:?}", snap.violations());

        part.jobs
            .insert("orphan".into(), rec(JobState::Scheduled, 5)); // not in scheduled
        part.jobs.insert("unhinted".into(), rec(JobState::Ready, 5));
        part.jobs
            .insert("early".into(), rec(JobState::Ready, 2_000));
        part.ready.push("early".into());
        part.active.insert("dangling".into(), 1.0);
        part.dead.insert("s".into(), 1.0); // in two sets
        part.retry.insert("r".into(), 900.0); // a ready job in a set
        part.hist.insert("nobody".into());
        part.jobs.insert("short".into(), vec![b'R']);
        part.jobs.insert("short2".into(), vec![2, b'R', 0]);
        part.jobs
            .insert("z".into(), format!("Z{}", "\0".repeat(19)).into_bytes());
        part.wake = vec!["1".into(), "1".into()];
        part.stats.insert("bogus".into(), "-1".into());
        let mut snap = snapshot(part);
        snap.keys = vec![
            key("ns:{t#0}:jobs", "string", -1),
            key("ns:{t#0}:calls", "zset", -1),
            key("ns:{t#0}:receipts:0a", "string", -1),
            key("ns:{t#0}:receipts:0b:old", "hash", 5),
            key("ns:{t#0}:bogus", "string", -1),
            key("ns:nope", "string", -1),
            key("ns:{bad topic#0}:ready", "list", -1),
        ];
        let v: Vec<String> = snap.violations().iter().map(ToString::to_string).collect();
        let v = v.join("\n");
        for needle in [
            "\"orphan\" in state S is missing from `scheduled`",
            "ready job \"unhinted\" has no hint",
            "ready job \"early\" is due at 2000",
            "`active` member \"dangling\" has no record",
            "\"s\" in state S is also in `dead`",
            "`dead` member \"s\" has a record in state S",
            "\"r\" in state R is also in `retry`",
            "`hist` entry \"nobody\" has no record",
            "record of \"short\": record of 1 bytes is shorter than its header",
            "record of \"short2\": record of 3 bytes is shorter than its header",
            "record of \"z\": unknown state byte 0x5a",
            "`wake` should hold at most one token",
            "unknown `stats` field \"bogus\"",
            "`stats` field \"bogus\" = \"-1\" is not a count",
            "ns:{t#0}:jobs: is a string, expected a hash",
            "ns:{t#0}:calls: expires in -1 ms",
            "ns:{t#0}:receipts:0a: expires in -1 ms",
            "ns:{t#0}:receipts:0b:old: is a hash, expected a string",
            "ns:{t#0}:bogus: unknown key name \"bogus\"",
            "ns:nope: does not follow",
            "invalid topic name \"bad topic\"",
        ] {
            assert!(v.contains(needle), "{needle} in\n{v}");
        }
    }

    /// The registry is accepted as the one non-partition key; its records must decode, and
    /// no partition at or past a topic's recorded count may hold a job.
    #[test]
    fn topic_registry_rules() {
        let mut part = PartitionSnapshot::default();
        part.jobs.insert("s".into(), rec(JobState::Scheduled, 500));
        part.scheduled.insert("s".into(), 500.25);
        let mut snap = snapshot(part.clone());
        let record = TopicRecord {
            partitions: 1,
            created_ms: 5,
        };
        snap.topics.insert("t".into(), record.encode());
        snap.keys = vec![
            key("ns:topics", "hash", -1),
            key("ns:{t#0}:jobs", "hash", -1),
        ];
        assert!(snap.violations().is_empty(), "{:?}", snap.violations());

        // A job in partition 1 of a topic recorded with 1 partition: nobody fetches it.
        snap.partitions.insert(("t".into(), 1), part);
        snap.topics.insert("u".into(), "v=1;partitions=2".into());
        snap.topics.insert("bad topic".into(), record.encode());
        snap.keys = vec![key("ns:topics", "string", 10)];
        let v: Vec<String> = snap.violations().iter().map(ToString::to_string).collect();
        let v = v.join("\n");
        for needle in [
            "t#1: 1 job(s) past the topic's 1 recorded partition(s)",
            "ns:topics: \"u\": topic record \"v=1;partitions=2\": no created_ms",
            "ns:topics: holds an invalid topic name \"bad topic\"",
            "ns:topics: is a string, expected a hash",
            "ns:topics: expires in 10 ms",
        ] {
            assert!(v.contains(needle), "{needle} in\n{v}");
        }
        assert!(!v.contains("t#0"), "{v}");
    }
}
