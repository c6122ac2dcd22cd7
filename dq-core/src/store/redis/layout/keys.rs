//! Every Redis key dq uses, in one place: their names, their types, how they are built and how
//! they are read back. Nobody else formats a key string.
//!
//! All keys of one partition share the hash tag `{<topic>#<partition>}`, so every script
//! touches a single slot and runs unchanged on Redis Cluster:
//! `<ns>:{orders.close#0}:scheduled`.
//!
//! One key is namespace-wide, outside every partition: the topic registry `<ns>:topics`
//! ([`topics_key`]); so are the live workers ([`workers_key`]), the periodic schedules
//! ([`schedules_key`]), the record-format registry ([`formats_key`]) and the payload shapes
//! ([`shapes_key`]). On a cluster it lives in a slot of its own, so it is only ever read or
//! written by a call of its own, never inside a partition's script.

use crate::job::Queue;

/// The name of one key of a partition: the part after `<ns>:{<topic>#<p>}:`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyName {
    /// ZSET job key → due score: jobs waiting for their due time.
    Scheduled,
    /// ZSET job key → next-attempt score: failed jobs waiting to be retried.
    Retry,
    /// LIST of job keys due now, FIFO; hints only: the record decides.
    Ready,
    /// ZSET job key → lease deadline (ms): running jobs.
    Active,
    /// HASH job key → delivery token (decimal): the leases of running jobs whose record is
    /// of format 3 or later (a lean lease leaves the record as it is; see `lua/lib.lua`).
    /// A job of format 1 or 2 keeps its token in its record instead.
    Leases,
    /// ZSET job key → time of death (ms): the dead queue.
    Dead,
    /// HASH job key → record ([`RecordHeader`](super::RecordHeader) + payload).
    Jobs,
    /// HASH job key → attempt history (only jobs that failed at least once).
    Hist,
    /// HASH of counters, the token counter and the idle audit's cursor.
    Stats,
    /// LIST of wake-up tokens for idle fetchers.
    Wake,
    /// ZSET the outcomes of applied enqueue calls that did not create every one of their jobs
    /// (`o<call id, hex>:<one char per job>` → applied ms; rare), kept `2 ×
    /// ENQUEUE_RECEIPT_LIFE` at least, past the receipts they complete; the set expires by
    /// itself once no call writes to it. (Before receipts moved to [`KeyName::Receipts`] it
    /// held every receipt; a namespace written by an older version may still hold some.)
    Calls,
    /// STRING `receipts:<bucket>`: the current generation of enqueue receipts of one bucket
    /// (the low byte of the call id, two hex digits; see [`receipt_bucket`]): fixed-size
    /// entries of [`RECEIPT_ENTRY_LEN`] bytes, the call id (8 bytes, big-endian) then the ms it
    /// was applied at (6 bytes, big-endian), appended in order. It becomes
    /// [`KeyName::OldReceipts`] (by `RENAME`) once its first entry is `ENQUEUE_RECEIPT_LIFE`
    /// old, so every entry is kept at least that long; it expires `2 × ENQUEUE_RECEIPT_LIFE`
    /// after its first entry. 256 keys per partition at most, each written only by `enqueue`.
    Receipts,
    /// STRING `receipts:<bucket>:old`: the generation of enqueue receipts before
    /// [`KeyName::Receipts`] of the same bucket, read by retries only; replaced by the next
    /// rotation, or gone with the expiry it was given as the current generation.
    OldReceipts,
    /// HASH of the partition's control settings, read by every fetch: `paused`, the rate
    /// share (`rate_n` jobs per `rate_ms`), its GCRA state `tat`, the concurrency share
    /// `conc`, the throttle time `until` (ms), and one field `x:<job key>` → token per
    /// running job whose cancel was requested. Absent for a topic without any.
    Control,
    /// HASH job key → the progress and log lines of a running job (cmsgpack `{v, l, d}`, see
    /// `lua/lib.lua`), written under its lease by `progress.lua`; every end of the run deletes
    /// it (a kept job keeps it). Absent while no running job has reported.
    Progress,
    /// HASH job key → kept job: a finished job (succeeded, cancelled or expired) that the
    /// topic's retention keeps, in its own format (`lua/lib.lua` `pack_kept`, read by
    /// `store/redis/kept.rs`): outcome, finished and started times, attempts, the handler's
    /// result, the worker's id, the history, then the job's record as it was. Absent for a
    /// topic that keeps nothing.
    Kept,
    /// ZSET job key → when its keeping ends (ms): the index of [`KeyName::Kept`], trimmed as
    /// times come and beyond the retention's cap.
    KeptAt,
    /// STREAM of the partition's events (`crate::events`), one entry per script call that
    /// changed jobs while the partition's control hash has `events` (the most kept): event
    /// format 1, id `<number of the entry's last event>-0`, fields `v`, `n` (events), `t`
    /// (ms), `w` (worker id, acks), `b` (cmsgpack, per event: kind, key, attempt, error, due);
    /// trimmed with `XADD MINID ~`. Absent for a topic that records no events.
    Events,
    /// ZSET job key → `2^44 × (9 − priority) + the ms it was queued` (0 for a release): the
    /// due queue of the jobs whose priority is not normal ([`crate::Priority`]), highest
    /// first; hints, like [`KeyName::Ready`]'s (record format 5). Absent while no such job
    /// is due.
    Pready,
    /// HASH job key → the `unique_for` window (ms, decimal) of a live job enqueued with one
    /// (`KeyWindow::UniqueFor`); the script that ends the job (ack, fail to dead, cancel,
    /// bury, fetch's expiry and lease recovery) moves it to [`KeyName::UniqAt`]. Absent for a
    /// topic without unique jobs.
    Uniq,
    /// ZSET job key → when the key's window ends (ms): a finished `unique_for` job's (its end
    /// plus the window) or a `throttle` enqueue's (its acceptance plus the window); an enqueue
    /// of the key before then is refused. Trimmed as times pass (bounded per call). Absent
    /// for a topic without windows.
    UniqAt,
    /// ZSET, every score 0, members `<group> NUL <9 − priority, one digit> <place, 16 hex
    /// digits> <job key>`: the due queue of the grouped jobs (record format 6,
    /// [`crate::group`]), read one group at a time in lease order with `ZRANGEBYLEX`; hints,
    /// like [`KeyName::Ready`]'s. Absent while no grouped job is due.
    Gready,
    /// ZSET group → its turn (a place from the same counter as [`KeyName::Gready`]'s): the
    /// groups that may have due jobs and may start one, lowest turn first; a fetch serves the
    /// first few and gives them a turn at the back. Absent while no group has work.
    Groups,
    /// ZSET group → when to look at it again (ms): the groups with due jobs that may not start
    /// one now (at their cap: until a job of theirs ends, or a few seconds; over their rate or
    /// held: until then). Absent while no group waits.
    Gwait,
    /// ZSET, every score 0, members `<group> NUL <job key>`: the grouped jobs running now,
    /// counted per group with `ZLEXCOUNT` (a group's cap). Absent while none runs.
    Gactive,
    /// HASH of the group settings and state: `*` → the default limits of every group,
    /// `l:<group>` → a group's own limits (`conc/count/per_ms/weight`, see
    /// [`crate::GroupLimits`]), `t:<group>` → its rate's GCRA state, `h:<group>` → the ms
    /// before which none of its jobs start (a handler's `rate_limited`). Absent for a topic
    /// without group settings.
    Gctl,
    /// STREAM `outbox`: one note per end of a batch's member in this partition (fields `b`
    /// batch id, `m` job key, `o` outcome), written by the script that ends it, read and
    /// deleted by the workers' relay once applied to the batch (ARCHITECTURE.md §16). Absent
    /// for a partition that never held a member.
    Outbox,
    /// STRING `fetch:<call id>`: what one fetch call leased, for a retry of that call; it
    /// expires after `FetchCall::receipt_life`. One key per call.
    FetchReceipt,
    /// HASH topic → metadata record (see [`TopicRecord`](super::TopicRecord)): the registry
    /// of the namespace's topics, `<ns>:topics`, one per namespace (not a partition key).
    Topics,
    /// HASH worker id → heartbeat (`<expires_ms>|<beat_ms>|<record>`): the namespace's live
    /// workers, `<ns>:workers` (not a partition key; see `workers.lua`). Expires when no
    /// worker beats.
    Workers,
    /// HASH schedule name → `<cursor_ms>|<definition>`: the namespace's periodic schedules,
    /// `<ns>:schedules` (not a partition key; see `schedules.lua`). Never expires.
    Schedules,
    /// HASH, the namespace's record-format registry, `<ns>:formats` (not a partition key; see
    /// `formats.lua` and [`formats_key`]): `level`, `hold`, and `p:<id>` →
    /// `<expires_ms>|<beat_ms>|<reads>|<record>` per live process. Never expires.
    Formats,
    /// HASH topic → payload shape (`<format>|<shape>`, [`crate::shape::PayloadShape`]): the
    /// JSON shape of each topic's payload as its newest started worker published it, read by
    /// the HTTP API to refuse a payload that does not fit; `<ns>:shapes` (not a partition
    /// key; plain `HSET`/`HGET`, no script; see [`shapes_key`]). Never expires.
    Shapes,
    /// HASH `{batch:<id>}` (namespace-wide, a slot of its own per batch): one batch's record —
    /// its settings, counts by state and one field per member (`batch.lua`; ARCHITECTURE.md
    /// §16). Kept for its retention once done.
    Batch,
    /// ZSET `batches` (namespace-wide): the ids of the batches not done → when each was
    /// opened (ms); read by the relay's sweep, the CLI and the dashboard.
    BatchIndex,
}

impl KeyName {
    /// Every key a partition has once, in the order of ARCHITECTURE.md §4 (fetch receipts,
    /// one per call, are not in it).
    pub const PARTITION: [KeyName; 25] = [
        KeyName::Jobs,
        KeyName::Scheduled,
        KeyName::Retry,
        KeyName::Ready,
        KeyName::Active,
        KeyName::Leases,
        KeyName::Dead,
        KeyName::Hist,
        KeyName::Stats,
        KeyName::Wake,
        KeyName::Calls,
        KeyName::Control,
        KeyName::Kept,
        KeyName::KeptAt,
        KeyName::Progress,
        KeyName::Events,
        KeyName::Pready,
        KeyName::Uniq,
        KeyName::UniqAt,
        KeyName::Gready,
        KeyName::Groups,
        KeyName::Gwait,
        KeyName::Gactive,
        KeyName::Gctl,
        KeyName::Outbox,
    ];

    /// The name as the key ends with it and as the scripts' headers name it (`receipt` for a
    /// fetch receipt, whose key ends with `fetch:<call id>`).
    pub fn as_str(self) -> &'static str {
        match self {
            KeyName::Scheduled => "scheduled",
            KeyName::Retry => "retry",
            KeyName::Ready => "ready",
            KeyName::Active => "active",
            KeyName::Leases => "leases",
            KeyName::Dead => "dead",
            KeyName::Jobs => "jobs",
            KeyName::Hist => "hist",
            KeyName::Stats => "stats",
            KeyName::Wake => "wake",
            KeyName::Calls => "calls",
            KeyName::Receipts => "receipts",
            KeyName::OldReceipts => "old_receipts",
            KeyName::Control => "control",
            KeyName::Kept => "kept",
            KeyName::Progress => "progress",
            KeyName::KeptAt => "kept_at",
            KeyName::Events => "events",
            KeyName::Pready => "pready",
            KeyName::Uniq => "uniq",
            KeyName::UniqAt => "uniq_at",
            KeyName::Gready => "gready",
            KeyName::Groups => "groups",
            KeyName::Gwait => "gwait",
            KeyName::Gactive => "gactive",
            KeyName::Gctl => "gctl",
            KeyName::Outbox => "outbox",
            KeyName::FetchReceipt => "receipt",
            KeyName::Topics => "topics",
            KeyName::Workers => "workers",
            KeyName::Schedules => "schedules",
            KeyName::Formats => "formats",
            KeyName::Shapes => "shapes",
            KeyName::Batch => "batch",
            KeyName::BatchIndex => "batches",
        }
    }

    /// The Redis type of the key (as `TYPE` reports it).
    pub fn redis_type(self) -> &'static str {
        match self {
            KeyName::Scheduled
            | KeyName::Retry
            | KeyName::Active
            | KeyName::Dead
            | KeyName::KeptAt
            | KeyName::Pready
            | KeyName::UniqAt
            | KeyName::Gready
            | KeyName::Groups
            | KeyName::Gwait
            | KeyName::Gactive
            | KeyName::Calls
            | KeyName::BatchIndex => "zset",
            KeyName::Ready | KeyName::Wake => "list",
            KeyName::Events | KeyName::Outbox => "stream",
            KeyName::Jobs
            | KeyName::Leases
            | KeyName::Hist
            | KeyName::Stats
            | KeyName::Control
            | KeyName::Gctl
            | KeyName::Kept
            | KeyName::Progress
            | KeyName::Uniq
            | KeyName::Topics
            | KeyName::Workers
            | KeyName::Schedules
            | KeyName::Formats
            | KeyName::Shapes
            | KeyName::Batch => "hash",
            KeyName::FetchReceipt | KeyName::Receipts | KeyName::OldReceipts => "string",
        }
    }

    /// The name a key ends with (`scheduled`, `fetch:17`, `receipts:3f`, `receipts:3f:old`,
    /// …), or `None` for a name dq does not use.
    pub fn from_suffix(suffix: &str) -> Option<KeyName> {
        if let Some(id) = suffix.strip_prefix(FETCH_RECEIPT) {
            return id.parse::<u64>().is_ok().then_some(KeyName::FetchReceipt);
        }
        if let Some(rest) = suffix.strip_prefix(RECEIPTS) {
            let (bucket, name) = match rest.strip_suffix(OLD) {
                Some(bucket) => (bucket, KeyName::OldReceipts),
                None => (rest, KeyName::Receipts),
            };
            let hex = bucket.len() == 2
                && bucket
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
            return hex.then_some(name);
        }
        KeyName::PARTITION
            .into_iter()
            .find(|name| name.as_str() == suffix)
    }
}

impl std::fmt::Display for KeyName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a fetch receipt's name starts; the call id follows.
const FETCH_RECEIPT: &str = "fetch:";

/// How an enqueue receipt generation's name starts; the bucket follows (then [`OLD`] for the
/// older generation).
const RECEIPTS: &str = "receipts:";

/// How the older generation of an enqueue receipt bucket ends.
const OLD: &str = ":old";

/// The size of one entry of an enqueue receipt generation ([`KeyName::Receipts`]): the call
/// id, 8 bytes big-endian, then the ms the call was applied at, 6 bytes big-endian.
pub const RECEIPT_ENTRY_LEN: usize = 14;

/// The receipt bucket of enqueue call `call`: its low byte. A retry reads the two generations
/// of its bucket only, about 1/256 of the partition's receipts.
pub fn receipt_bucket(call: u64) -> u8 {
    (call & 0xff) as u8
}

/// One entry of an enqueue receipt generation, as `enqueue.lua` appends it: call `call`,
/// applied at `applied_ms` (the low 48 bits).
pub fn receipt_entry(call: u64, applied_ms: u64) -> [u8; RECEIPT_ENTRY_LEN] {
    let mut e = [0u8; RECEIPT_ENTRY_LEN];
    e[..8].copy_from_slice(&call.to_be_bytes());
    e[8..].copy_from_slice(&applied_ms.to_be_bytes()[2..]);
    e
}

/// The keys of one partition.
#[derive(Clone, Debug)]
pub struct PartitionKeys {
    /// See [`KeyName::Scheduled`].
    pub scheduled: String,
    /// See [`KeyName::Retry`].
    pub retry: String,
    /// See [`KeyName::Ready`].
    pub ready: String,
    /// See [`KeyName::Active`].
    pub active: String,
    /// See [`KeyName::Leases`].
    pub leases: String,
    /// See [`KeyName::Dead`].
    pub dead: String,
    /// See [`KeyName::Jobs`].
    pub jobs: String,
    /// See [`KeyName::Hist`].
    pub hist: String,
    /// See [`KeyName::Stats`].
    pub stats: String,
    /// See [`KeyName::Wake`].
    pub wake: String,
    /// See [`KeyName::Calls`].
    pub calls: String,
    /// See [`KeyName::Control`].
    pub control: String,
    /// See [`KeyName::Kept`].
    pub kept: String,
    /// See [`KeyName::Progress`].
    pub progress: String,
    /// See [`KeyName::KeptAt`].
    pub kept_at: String,
    /// See [`KeyName::Events`].
    pub events: String,
    /// See [`KeyName::Pready`].
    pub pready: String,
    /// See [`KeyName::Uniq`].
    pub uniq: String,
    /// See [`KeyName::UniqAt`].
    pub uniq_at: String,
    /// See [`KeyName::Gready`].
    pub gready: String,
    /// See [`KeyName::Groups`].
    pub groups: String,
    /// See [`KeyName::Gwait`].
    pub gwait: String,
    /// See [`KeyName::Gactive`].
    pub gactive: String,
    /// See [`KeyName::Gctl`].
    pub gctl: String,
    /// See [`KeyName::Outbox`].
    pub outbox: String,
    /// `<prefix>fetch:`, the start of every fetch receipt's key (see [`Self::fetch_receipt`]).
    fetch_receipt_prefix: String,
    /// `<prefix>receipts:`, the start of every enqueue receipt key (see
    /// [`Self::enqueue_receipts`]).
    receipts_prefix: String,
}

impl PartitionKeys {
    /// The keys of partition `queue` under `namespace`.
    pub fn new(namespace: &str, queue: &Queue) -> Self {
        let prefix = format!("{namespace}:{{{}#{}}}:", queue.topic, queue.partition);
        let key = |name: KeyName| format!("{prefix}{name}");
        PartitionKeys {
            scheduled: key(KeyName::Scheduled),
            retry: key(KeyName::Retry),
            ready: key(KeyName::Ready),
            active: key(KeyName::Active),
            leases: key(KeyName::Leases),
            dead: key(KeyName::Dead),
            jobs: key(KeyName::Jobs),
            hist: key(KeyName::Hist),
            stats: key(KeyName::Stats),
            wake: key(KeyName::Wake),
            calls: key(KeyName::Calls),
            control: key(KeyName::Control),
            kept: key(KeyName::Kept),
            progress: key(KeyName::Progress),
            kept_at: key(KeyName::KeptAt),
            events: key(KeyName::Events),
            pready: key(KeyName::Pready),
            uniq: key(KeyName::Uniq),
            uniq_at: key(KeyName::UniqAt),
            gready: key(KeyName::Gready),
            groups: key(KeyName::Groups),
            gwait: key(KeyName::Gwait),
            gactive: key(KeyName::Gactive),
            gctl: key(KeyName::Gctl),
            outbox: key(KeyName::Outbox),
            fetch_receipt_prefix: format!("{prefix}{FETCH_RECEIPT}"),
            receipts_prefix: format!("{prefix}{RECEIPTS}"),
        }
    }

    /// The key of `name`, or `None` for [`KeyName::FetchReceipt`] (one key per call: see
    /// [`Self::fetch_receipt`]), the enqueue receipts (one pair per bucket: see
    /// [`Self::enqueue_receipts`]) and [`KeyName::Topics`] (namespace-wide: see [`topics_key`]).
    pub fn get(&self, name: KeyName) -> Option<&str> {
        Some(match name {
            KeyName::Scheduled => &self.scheduled,
            KeyName::Retry => &self.retry,
            KeyName::Ready => &self.ready,
            KeyName::Active => &self.active,
            KeyName::Leases => &self.leases,
            KeyName::Dead => &self.dead,
            KeyName::Jobs => &self.jobs,
            KeyName::Hist => &self.hist,
            KeyName::Stats => &self.stats,
            KeyName::Wake => &self.wake,
            KeyName::Calls => &self.calls,
            KeyName::Control => &self.control,
            KeyName::Kept => &self.kept,
            KeyName::Progress => &self.progress,
            KeyName::KeptAt => &self.kept_at,
            KeyName::Events => &self.events,
            KeyName::Pready => &self.pready,
            KeyName::Uniq => &self.uniq,
            KeyName::UniqAt => &self.uniq_at,
            KeyName::Gready => &self.gready,
            KeyName::Groups => &self.groups,
            KeyName::Gwait => &self.gwait,
            KeyName::Gactive => &self.gactive,
            KeyName::Gctl => &self.gctl,
            KeyName::Outbox => &self.outbox,
            KeyName::FetchReceipt
            | KeyName::Receipts
            | KeyName::OldReceipts
            | KeyName::Topics
            | KeyName::Workers
            | KeyName::Schedules
            | KeyName::Formats
            | KeyName::Shapes
            | KeyName::Batch
            | KeyName::BatchIndex => {
                return None;
            }
        })
    }

    /// STRING, the receipt of fetch call `call` (what it leased, for a retry of the same call
    /// to find); it expires after `FetchCall::receipt_life`. One key per call, in the
    /// partition's hash tag like every other key, so fetch stays a one-slot script.
    pub fn fetch_receipt(&self, call: u64) -> String {
        format!("{}{call}", self.fetch_receipt_prefix)
    }

    /// STRINGs, the two generations of enqueue receipts that hold the receipt of enqueue call
    /// `call`: [`KeyName::Receipts`] then [`KeyName::OldReceipts`] of its
    /// [`receipt_bucket`]. `enqueue.lua` takes both, so it stays a one-slot script.
    pub fn enqueue_receipts(&self, call: u64) -> [String; 2] {
        let current = format!("{}{:02x}", self.receipts_prefix, receipt_bucket(call));
        let old = format!("{current}{OLD}");
        [current, old]
    }
}

/// HASH, the namespace's topic registry: topic → its metadata record. Namespace-wide (no
/// partition's hash tag), so it is written by a call of its own (`topic.lua`).
pub fn topics_key(namespace: &str) -> String {
    format!("{namespace}:{}", KeyName::Topics)
}

/// HASH, the namespace's live workers: worker id → heartbeat. Namespace-wide (no
/// partition's hash tag), so it is written by calls of its own (`workers.lua`).
pub fn workers_key(namespace: &str) -> String {
    format!("{namespace}:{}", KeyName::Workers)
}

/// HASH, the namespace's periodic schedules: name → `<cursor_ms>|<definition>`.
/// Namespace-wide (no partition's hash tag), so it is written by calls of its own
/// (`schedules.lua`).
pub fn schedules_key(namespace: &str) -> String {
    format!("{namespace}:{}", KeyName::Schedules)
}

/// HASH, the namespace's record-format registry: the format new records are written in
/// (`level`), an operator's `hold`, and one field per live process saying which formats it
/// reads (`p:<id>`). Namespace-wide (no partition's hash tag: a slot of its own on a
/// cluster), written by calls of its own (`formats.lua`); no TTL, so the level outlives every
/// process.
pub fn formats_key(namespace: &str) -> String {
    format!("{namespace}:{}", KeyName::Formats)
}

/// HASH, one batch's record (`<ns>:{batch:<id>}`): its own hash tag, so on a cluster each
/// batch is in a slot of its own, written by `batch.lua` (ARCHITECTURE.md §16).
pub fn batch_key(namespace: &str, id: &str) -> String {
    format!("{namespace}:{{batch:{id}}}")
}

/// ZSET, the namespace's batches not done: id → when it was opened (ms). Namespace-wide, a
/// slot of its own on a cluster; written by plain `ZADD`/`ZREM`.
pub fn batch_index_key(namespace: &str) -> String {
    format!("{namespace}:{}", KeyName::BatchIndex)
}

/// HASH, the namespace's payload shapes: topic → `<format>|<shape>`
/// ([`crate::shape::PayloadShape::encode`]), written by each worker at start for the topics it
/// handles (last writer wins) and read by the HTTP API. Namespace-wide (no partition's hash
/// tag: a slot of its own on a cluster), written and read by plain `HSET`/`HGET`; no TTL.
pub fn shapes_key(namespace: &str) -> String {
    format!("{namespace}:{}", KeyName::Shapes)
}

/// A key of the store read back by [`parse_key`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParsedKey<'a> {
    /// The topic in the key's hash tag (not checked to be a valid topic name).
    pub topic: &'a str,
    /// The partition in the key's hash tag.
    pub partition: u16,
    /// Everything after the hash tag and its `:` (`scheduled`, `fetch:17`, …).
    pub suffix: &'a str,
    /// What `suffix` names, or `None` for a name dq does not use.
    pub name: Option<KeyName>,
}

/// Splits `<namespace>:{<topic>#<p>}:<name>` into its parts, or `None` for a key that does not
/// have that shape.
pub fn parse_key<'a>(namespace: &str, key: &'a str) -> Option<ParsedKey<'a>> {
    let rest = key.strip_prefix(namespace)?.strip_prefix(":{")?;
    let close = rest.find('}')?;
    let (tag, suffix) = (&rest[..close], rest[close + 1..].strip_prefix(':')?);
    let (topic, p) = tag.rsplit_once('#')?;
    Some(ParsedKey {
        topic,
        partition: p.parse().ok()?,
        suffix,
        name: KeyName::from_suffix(suffix),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::Topic;

    #[test]
    fn receipt_entries_are_id_then_ms() {
        let e = receipt_entry(0x0102_0304_0506_0708, 0x0a0b_0c0d_0e0f);
        assert_eq!(
            e,
            [1, 2, 3, 4, 5, 6, 7, 8, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f]
        );
        assert_eq!(receipt_bucket(0x0102_0304_0506_0708), 8);
    }

    #[test]
    fn keys_share_one_hash_tag() {
        let k = PartitionKeys::new("dq", &Queue::new(Topic::new("orders.close").unwrap(), 3));
        assert_eq!(k.scheduled, "dq:{orders.close#3}:scheduled");
        assert_eq!(k.fetch_receipt(7), "dq:{orders.close#3}:fetch:7");
        for name in KeyName::PARTITION {
            let key = k.get(name).unwrap();
            assert!(key.starts_with("dq:{orders.close#3}:"), "{key}");
        }
        assert!(k.fetch_receipt(42).starts_with("dq:{orders.close#3}:"));
        for key in k.enqueue_receipts(7) {
            assert!(key.starts_with("dq:{orders.close#3}:receipts:07"), "{key}");
        }
        assert_eq!(k.get(KeyName::Topics), None);
        assert_eq!(topics_key("dq"), "dq:topics");
        assert_eq!(schedules_key("dq"), "dq:schedules");
        assert_eq!(formats_key("dq"), "dq:formats");
        assert_eq!(shapes_key("dq"), "dq:shapes");
        assert_eq!(
            parse_key("dq", &shapes_key("dq")),
            None,
            "not a partition key"
        );
        assert_eq!(k.get(KeyName::Shapes), None);
        assert_eq!(
            parse_key("dq", &formats_key("dq")),
            None,
            "not a partition key"
        );
        assert_eq!(k.get(KeyName::Schedules), None);
        assert_eq!(
            parse_key("dq", &topics_key("dq")),
            None,
            "not a partition key"
        );
    }

    /// Every key built is read back as what it is.
    #[test]
    fn keys_parse_back() {
        let k = PartitionKeys::new("ns.1", &Queue::new(Topic::new("a.b").unwrap(), 12));
        for name in KeyName::PARTITION {
            let p = parse_key("ns.1", k.get(name).unwrap()).unwrap();
            assert_eq!((p.topic, p.partition, p.name), ("a.b", 12, Some(name)));
            assert_eq!(p.suffix, name.as_str());
        }
        let receipt = k.fetch_receipt(99);
        let p = parse_key("ns.1", &receipt).unwrap();
        assert_eq!(
            (p.name, p.suffix),
            (Some(KeyName::FetchReceipt), "fetch:99")
        );
        let p = parse_key("ns.1", "ns.1:{t#0}:bogus").unwrap();
        assert_eq!(p.name, None);
        assert_eq!(parse_key("ns.1", "ns.1:{t#0}:fetch:x").unwrap().name, None);
        let [current, old] = k.enqueue_receipts(0x1234_5678_9abc_def0);
        assert_eq!(current, "ns.1:{a.b#12}:receipts:f0");
        assert_eq!(old, "ns.1:{a.b#12}:receipts:f0:old");
        assert_eq!(
            parse_key("ns.1", &current).unwrap().name,
            Some(KeyName::Receipts)
        );
        assert_eq!(
            parse_key("ns.1", &old).unwrap().name,
            Some(KeyName::OldReceipts)
        );
        for bad in [
            "receipts:",
            "receipts:f",
            "receipts:F0",
            "receipts:f0:",
            "receipts:f0:x",
        ] {
            assert_eq!(KeyName::from_suffix(bad), None, "{bad}");
        }
        assert_eq!(parse_key("ns.1", "ns.1:t:scheduled"), None);
        assert_eq!(parse_key("ns.1", "other:{t#0}:scheduled"), None);
        assert_eq!(parse_key("ns.1", "ns.1:{t#x}:scheduled"), None);
    }
}
