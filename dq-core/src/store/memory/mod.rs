//! `MemoryStore`: the [`Store`] in process, for tests and for quick starts without Redis.
//!
//! It implements the same semantics as [`RedisStore`](super::redis::RedisStore), operation by
//! operation: each method mirrors one Lua script in `store/redis/lua/` (due times, ordering,
//! dedup by key, replace, cancel/reschedule outcomes, lease recovery, retry/defer/bury, bounded
//! history, dead-queue cap and retention, counters and wake-ups). The conformance suite, which
//! runs the same tests against both stores, is the proof. Where Redis keeps *hints* (the `ready`
//! list may hold stale keys of cancelled or rescheduled jobs), this store keeps exact structures.
//! The only visible trace of that: a job made ready again while a stale hint of it is still
//! queued takes its new place in line here, where Redis may deliver it at the old hint's place;
//! and `fetch` never answers `next_in = 0` just because stale hints remain.
//!
//! **The clock is tokio's.** "Now" is a Unix-ms base read from [`SystemTime`] once, when the
//! store is built, plus the time elapsed on [`tokio::time::Instant`] since then. Under
//! `tokio::time::pause()` (or `#[tokio::test(start_paused = true)]`) time moves only when the
//! test advances it, so "30 minutes later" or a whole tiered retry schedule runs instantly and
//! every due time, lease deadline and retry time is exact to the millisecond.
//!
//! All partitions live in one [`Mutex`]; every operation takes it once, does its bounded work
//! and releases it, never holding it across an `.await`. Wake-ups are a [`Notify`] per
//! partition, so an idle fetcher waits without polling.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use tokio::sync::Notify;

use super::{Store, WakeListener};
use crate::control::{ControlChange, ControlState, Rate};
use crate::error::{Error, Result};
use crate::inspect::{DeadAction, ListChunk, ListFrom, ListPos};
use crate::job::{
    AckOutcome, AttemptOutcome, AttemptRecord, CancelOutcome, DeadLimits, Delivery, Due,
    ENQUEUE_RECEIPT_LIFE, EnqueueCall, EnqueueOutcome, Extended, FailAction, FailOutcome,
    FetchCall, FetchReply, FetchRequest, JobInfo, JobState, MAX_HISTORY, NewDue, NewJob, Queue,
    RescheduleOutcome, TopicStats, unix_ms,
};
use crate::names::{JobKey, Topic};
use crate::schedule::{ScheduleOutcome, ScheduleRecord, check_schedule_name};
use crate::topic::TopicMeta;
use crate::workers::WorkerInfo;

/// The latest due time the Redis record can hold (48 bits of ms); kept here so both stores
/// clamp alike.
const MAX_DUE: u64 = crate::job::MAX_DUE_MS;
/// Most dead jobs removed by one trim (the Lua scripts' bound).
const TRIM_LIMIT: usize = 100;
/// Attempts are one byte in the Redis record.
const MAX_ATTEMPTS: u32 = 255;

/// The in-process implementation of [`Store`], on tokio's clock.
///
/// Build one with [`MemoryStore::new`], or get a client on a fresh one with
/// `Client::in_memory`. Jobs live as long as the store; nothing is persisted.
pub struct MemoryStore {
    clock: Clock,
    state: Mutex<HashMap<Queue, Partition>>,
    /// The topic registry (Redis: `<ns>:topics`), per store instance.
    topics: Mutex<BTreeMap<Topic, TopicMeta>>,
    /// Live workers' heartbeats (Redis: `<ns>:workers`), by id; each expires by the clock.
    workers: Mutex<BTreeMap<String, WorkerInfo>>,
    /// Periodic schedules (Redis: `<ns>:schedules`), name → (cursor, definition).
    schedules: Mutex<BTreeMap<String, (u64, Vec<u8>)>>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("now_ms", &self.clock.now_ms())
            .finish_non_exhaustive()
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl MemoryStore {
    /// An empty store whose clock starts at the current wall-clock time and then follows
    /// tokio's clock (virtual under `tokio::time::pause()`).
    pub fn new() -> Self {
        MemoryStore::starting_at(SystemTime::now())
    }

    /// An empty store whose clock starts at `start` (any date: a test of a periodic job can
    /// begin the day before a daylight-saving change) and then follows tokio's clock.
    pub fn starting_at(start: SystemTime) -> Self {
        MemoryStore {
            clock: Clock::new(start),
            state: Mutex::new(HashMap::new()),
            topics: Mutex::new(BTreeMap::new()),
            workers: Mutex::new(BTreeMap::new()),
            schedules: Mutex::new(BTreeMap::new()),
        }
    }

    /// How many jobs the store holds, in any state, over all partitions.
    pub fn len(&self) -> usize {
        self.lock().values().map(|p| p.jobs.len()).sum()
    }

    /// Whether the store holds no job at all (counters may be non-zero).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether nothing was ever written: no job and every counter (delivery tokens included)
    /// still zero. For test harnesses, like an empty Redis namespace.
    #[doc(hidden)]
    pub fn is_untouched(&self) -> bool {
        self.lock_topics().is_empty()
            && self.lock().values().all(|p| {
                let c = &p.counters;
                p.jobs.is_empty()
                    && [
                        c.enqueued,
                        c.succeeded,
                        c.retried,
                        c.buried,
                        c.expired,
                        c.cancelled,
                        c.trimmed,
                        c.throttles,
                        c.token,
                    ]
                    .iter()
                    .all(|n| *n == 0)
            })
    }

    /// Every broken internal invariant, one line each (empty when all is well): each job sits
    /// in exactly the structure its state names, nothing dangles, ready jobs are due, leased
    /// and retried jobs have a token and an attempt, histories are bounded, and no partition past
    /// its topic's recorded count holds a job. For test harnesses
    /// (the counterpart of the Redis key-space check).
    #[doc(hidden)]
    pub fn violations(&self) -> Vec<String> {
        // Registry, then partitions: the one order both locks are taken in.
        let topics = self.lock_topics();
        let state = self.lock();
        let now = self.clock.now_ms();
        let mut v = Vec::new();
        for (queue, p) in state.iter() {
            p.violations(now, &mut |what| {
                v.push(format!("{}#{}: {what}", queue.topic, queue.partition));
            });
            // The Redis checker's rule: no job where the topic's recorded count says no
            // worker looks.
            if let Some(meta) = topics.get(&queue.topic)
                && queue.partition >= meta.partitions
                && !p.jobs.is_empty()
            {
                v.push(format!(
                    "{}#{}: {} job(s) beyond the topic's {} recorded partition(s)",
                    queue.topic,
                    queue.partition,
                    p.jobs.len(),
                    meta.partitions
                ));
            }
        }
        v
    }

    fn lock_topics(&self) -> MutexGuard<'_, BTreeMap<Topic, TopicMeta>> {
        self.topics
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lock_workers(&self) -> MutexGuard<'_, BTreeMap<String, WorkerInfo>> {
        self.workers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lock_schedules(&self) -> MutexGuard<'_, BTreeMap<String, (u64, Vec<u8>)>> {
        self.schedules
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Queue, Partition>> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `f` on the partition, creating it if it does not exist yet (for writes).
    fn write<T>(&self, queue: &Queue, f: impl FnOnce(&mut Partition, u64) -> T) -> T {
        let mut state = self.lock();
        let now = self.clock.now_ms();
        f(state.entry(queue.clone()).or_default(), now)
    }

    /// Runs `f` on the partition if it exists (for reads, which never create one).
    fn read<T>(&self, queue: &Queue, f: impl FnOnce(Option<&Partition>, u64) -> T) -> T {
        let state = self.lock();
        let now = self.clock.now_ms();
        f(state.get(queue), now)
    }
}

/// Unix ms from a fixed base plus tokio's elapsed time.
struct Clock {
    base_ms: u64,
    start: tokio::time::Instant,
}

impl Clock {
    fn new(start: SystemTime) -> Self {
        Clock {
            base_ms: unix_ms(start),
            start: tokio::time::Instant::now(),
        }
    }

    fn now_ms(&self) -> u64 {
        let elapsed = tokio::time::Instant::now().saturating_duration_since(self.start);
        self.base_ms.saturating_add(ms(elapsed))
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A due time as stored: not before `now`, not past [`MAX_DUE`] (Lua `bound_due`).
fn bound_due(due: i128, now: u64) -> u64 {
    due.clamp(i128::from(now), i128::from(MAX_DUE.max(now))) as u64
}

/// Where a job is; its state follows from it. Each variant holds the job's sort key in the
/// structure that holds it, so it can be removed in O(log n).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// In `scheduled` under `(due, seq)`.
    Scheduled(u64),
    /// In `retry` under `(due, seq)`.
    Retry(u64),
    /// In `ready` at this position (smaller is nearer the front).
    Ready(i64),
    /// In `active` with this lease deadline.
    Active(u64),
    /// In `dead`, died at this ms.
    Dead(u64),
}

/// One job: the Redis record's header fields, its payload and its attempt history.
struct Record {
    place: Place,
    attempts: u32,
    /// For retry: the next attempt; for dead: unchanged from the last wait.
    due_ms: u64,
    created_ms: u64,
    /// Token of the current or last lease (0 before the first).
    token: u64,
    payload: Vec<u8>,
    history: Vec<AttemptRecord>,
}

impl Record {
    /// The delivery of a record just leased at `now` until `deadline` (its token and attempts
    /// already set).
    fn delivery(&self, queue: &Queue, key: JobKey, now: u64, deadline: u64) -> Delivery {
        Delivery {
            queue: queue.clone(),
            key,
            token: self.token,
            attempt: self.attempts,
            due_ms: self.due_ms,
            created_ms: self.created_ms,
            leased_ms: now,
            lease_deadline_ms: deadline,
            payload: self.payload.clone(),
        }
    }
}

impl Record {
    fn state(&self) -> JobState {
        match self.place {
            Place::Scheduled(_) => JobState::Scheduled,
            Place::Retry(_) => JobState::Retry,
            Place::Ready(_) => JobState::Ready,
            Place::Active(_) => JobState::Active,
            Place::Dead(_) => JobState::Dead,
        }
    }

    fn info(&self, key: &JobKey) -> JobInfo {
        JobInfo {
            key: key.clone(),
            state: self.state(),
            due_ms: self.due_ms,
            created_ms: self.created_ms,
            attempts: self.attempts,
            lease_deadline_ms: match self.place {
                Place::Active(deadline) => Some(deadline),
                _ => None,
            },
            died_ms: match self.place {
                Place::Dead(died) => Some(died),
                _ => None,
            },
            history: self.history.clone(),
            payload: self.payload.clone(),
        }
    }

    /// Appends one attempt to the bounded history (Lua `add_history`).
    fn add_history(&mut self, at_ms: u64, outcome: AttemptOutcome, error: &str) {
        self.history.push(AttemptRecord {
            attempt: self.attempts,
            at_ms,
            outcome,
            error: crate::job::truncate_error(error).to_owned(),
        });
        if self.history.len() > MAX_HISTORY {
            let excess = self.history.len() - MAX_HISTORY;
            self.history.drain(..excess);
        }
    }
}

/// Which sorted set a waiting job joins when it is not due yet.
#[derive(Clone, Copy)]
enum Later {
    Scheduled,
    Retry,
}

/// The ordered structures of one partition: the exact counterparts of the Redis sorted sets and
/// the `ready` list.
#[derive(Default)]
struct Sets {
    /// `(due, seq) → key`: seq grows with every insert, so same-ms jobs keep arrival order.
    scheduled: BTreeMap<(u64, u64), JobKey>,
    /// Like `scheduled`, for next attempts.
    retry: BTreeMap<(u64, u64), JobKey>,
    /// Position → key, FIFO from the smallest position.
    ready: BTreeMap<i64, JobKey>,
    /// Next position at the front (decreasing) and at the back (increasing).
    ready_front: i64,
    ready_back: i64,
    /// `(lease deadline, key)`: ties by key, as Redis orders equal scores.
    active: BTreeSet<(u64, JobKey)>,
    /// `(died ms, key)`.
    dead: BTreeSet<(u64, JobKey)>,
    seq: u64,
}

impl Sets {
    /// Removes a job from the structure that holds it.
    fn unlink(&mut self, key: &JobKey, place: Place, due_ms: u64) {
        match place {
            Place::Scheduled(seq) => {
                self.scheduled.remove(&(due_ms, seq));
            }
            Place::Retry(seq) => {
                self.retry.remove(&(due_ms, seq));
            }
            Place::Ready(pos) => {
                self.ready.remove(&pos);
            }
            Place::Active(deadline) => {
                self.active.remove(&(deadline, key.clone()));
            }
            Place::Dead(died) => {
                self.dead.remove(&(died, key.clone()));
            }
        }
    }

    fn push_ready_back(&mut self, key: &JobKey) -> Place {
        self.ready_back += 1;
        self.ready.insert(self.ready_back, key.clone());
        Place::Ready(self.ready_back)
    }

    fn push_ready_front(&mut self, key: &JobKey) -> Place {
        self.ready_front -= 1;
        self.ready.insert(self.ready_front, key.clone());
        Place::Ready(self.ready_front)
    }

    /// Adds a job not yet due to `later`'s set, after every job already there for that ms.
    fn insert_later(&mut self, later: Later, key: &JobKey, due: u64) -> Place {
        self.seq += 1;
        let (set, place) = match later {
            Later::Scheduled => (&mut self.scheduled, Place::Scheduled(self.seq)),
            Later::Retry => (&mut self.retry, Place::Retry(self.seq)),
        };
        set.insert((due, self.seq), key.clone());
        place
    }

    /// Queues a waiting job (Lua `place`): onto `ready` if due now, else into `later`'s set.
    /// Returns its place and whether a fetcher should be woken: it is ready, or the new
    /// earliest of its set.
    fn place(&mut self, later: Later, key: &JobKey, due: u64, now: u64) -> (Place, bool) {
        if due <= now {
            return (self.push_ready_back(key), true);
        }
        let place = self.insert_later(later, key, due);
        let set = match later {
            Later::Scheduled => &self.scheduled,
            Later::Retry => &self.retry,
        };
        let head = set.first_key_value().map(|(_, k)| k);
        (place, head == Some(key))
    }
}

/// The counters of the Redis `stats` hash.
#[derive(Default)]
struct Counters {
    enqueued: u64,
    succeeded: u64,
    retried: u64,
    buried: u64,
    expired: u64,
    cancelled: u64,
    trimmed: u64,
    throttles: u64,
    /// The last delivery token handed out.
    token: u64,
}

/// Moves a job already taken out of `active` to the dead queue at `now` (Lua `bury`): state
/// dead, attempts and due time unchanged.
fn bury(sets: &mut Sets, counters: &mut Counters, rec: &mut Record, key: &JobKey, now: u64) {
    rec.place = Place::Dead(now);
    sets.dead.insert((now, key.clone()));
    counters.buried += 1;
}

/// Receipts of applied enqueue calls, like the Redis store's `receipts:<b>` strings: each is
/// kept `ENQUEUE_RECEIPT_LIFE`. (Redis keeps each between one and two lives, by generation; a
/// receipt found late is as true as one found early.)
#[derive(Default)]
struct Receipts {
    /// Call id → the last ms it is kept.
    until: HashMap<u64, u64>,
    /// Call id → when it was applied (ms), and its outcomes unless it created every job (as
    /// `enqueue.lua` stores them). Pruned with `until`.
    applied: HashMap<u64, (u64, Option<Vec<EnqueueOutcome>>)>,
    /// (last ms kept, call id), oldest first, for pruning.
    order: VecDeque<(u64, u64)>,
}

impl Receipts {
    fn life_ms() -> u64 {
        ms(ENQUEUE_RECEIPT_LIFE)
    }

    fn prune(&mut self, now: u64) {
        while let Some(&(until, id)) = self.order.front() {
            if until >= now {
                break;
            }
            self.order.pop_front();
            if self.until.get(&id) == Some(&until) {
                self.until.remove(&id);
                self.applied.remove(&id);
            }
        }
    }

    fn insert(&mut self, id: u64, now: u64, outcomes: &[EnqueueOutcome]) {
        let until = now + Self::life_ms();
        self.until.insert(id, until);
        self.order.push_back((until, id));
        let all_created = outcomes.iter().all(|o| *o == EnqueueOutcome::Created);
        self.applied
            .insert(id, (now, (!all_created).then(|| outcomes.to_vec())));
    }

    /// When `id` was applied and its outcomes if stored (`None`: it created every job), if
    /// it has a receipt (call after [`prune`](Self::prune), which drops the stale).
    fn get(&self, id: u64) -> Option<(u64, Option<&[EnqueueOutcome]>)> {
        self.applied
            .get(&id)
            .map(|(at, outcomes)| (*at, outcomes.as_deref()))
    }
}

/// The receipt of one fetch call: what `fetch:<id>` holds in Redis.
struct FetchReceipt {
    /// The try that wrote it.
    try_no: u32,
    /// (key, token) of each job it leased.
    leases: Vec<(JobKey, u64)>,
    /// The last ms it is kept.
    until: u64,
}

/// Receipts of fetch calls, like the `fetch:<id>` keys, each kept
/// [`FetchCall::receipt_life`] of its lease. (Redis also deletes a receipt once its reply has
/// arrived; here no reply is ever lost.)
#[derive(Default)]
struct FetchReceipts {
    by_call: HashMap<u64, FetchReceipt>,
    /// (last ms kept, call id), in the order written, for pruning.
    order: VecDeque<(u64, u64)>,
}

impl FetchReceipts {
    /// Drops receipts past their life while the oldest written is one. (Lives differ with
    /// the lease, so a stale receipt may wait behind a fresh one; `get` never returns it.)
    fn prune(&mut self, now: u64) {
        while let Some(&(until, id)) = self.order.front() {
            if until >= now {
                break;
            }
            self.order.pop_front();
            if self.by_call.get(&id).is_some_and(|r| r.until == until) {
                self.by_call.remove(&id);
            }
        }
    }

    fn get(&self, id: u64, now: u64) -> Option<&FetchReceipt> {
        self.by_call.get(&id).filter(|r| r.until >= now)
    }

    fn insert(&mut self, id: u64, receipt: FetchReceipt) {
        self.order.push_back((receipt.until, id));
        self.by_call.insert(id, receipt);
    }
}

/// One partition of a topic: the counterpart of one Redis hash tag.
#[derive(Default)]
struct Partition {
    jobs: HashMap<JobKey, Record>,
    sets: Sets,
    counters: Counters,
    wake: Arc<Notify>,
    receipts: Receipts,
    fetch_receipts: FetchReceipts,
    control: Control,
}

/// The partition's control settings (the Redis `control` hash).
#[derive(Default)]
struct Control {
    paused: bool,
    /// This partition's share: n jobs per ms.
    rate: Option<Rate>,
    /// GCRA theoretical arrival time (ms).
    tat: f64,
    conc: Option<u32>,
    until: Option<u64>,
    /// Running jobs whose cancel was requested → the token at the time.
    cancels: HashMap<JobKey, u64>,
}

impl Control {
    fn exists(&self) -> bool {
        self.paused || self.rate.is_some() || self.conc.is_some() || self.until.is_some()
    }

    /// The rate's emission interval and burst tolerance (ms), as `fetch.lua` computes them.
    fn gcra(rate: Rate) -> (f64, f64) {
        let t = rate.per_ms() as f64 / f64::from(rate.count);
        (t, (50.0 - t).max(0.0))
    }
}

impl Partition {
    /// Pushes one wake-up token; at most one is ever stored (like the Redis `wake` list).
    fn wake(&self) {
        self.wake.notify_one();
    }

    /// Reports every broken invariant of this partition to `report`.
    fn violations(&self, now: u64, report: &mut dyn FnMut(String)) {
        let s = &self.sets;
        for (key, rec) in &self.jobs {
            let held = match rec.place {
                Place::Scheduled(seq) => s.scheduled.get(&(rec.due_ms, seq)) == Some(key),
                Place::Retry(seq) => s.retry.get(&(rec.due_ms, seq)) == Some(key),
                Place::Ready(pos) => s.ready.get(&pos) == Some(key),
                Place::Active(deadline) => s.active.contains(&(deadline, key.clone())),
                Place::Dead(died) => s.dead.contains(&(died, key.clone())),
            };
            if !held {
                report(format!("{key:?} is {:?} but not held there", rec.place));
            }
            let state = rec.state();
            if state == JobState::Ready && rec.due_ms > now {
                report(format!(
                    "ready job {key:?} is due at {} (now {now})",
                    rec.due_ms
                ));
            }
            if matches!(state, JobState::Scheduled | JobState::Retry) && rec.due_ms < rec.created_ms
            {
                report(format!("{key:?} is due before it was created"));
            }
            if matches!(state, JobState::Retry | JobState::Active)
                && (rec.token == 0 || rec.attempts == 0)
            {
                report(format!("{state} job {key:?} has never run"));
            }
            if rec.history.len() > MAX_HISTORY {
                report(format!(
                    "{key:?} keeps {} history entries",
                    rec.history.len()
                ));
            }
            if rec.token > self.counters.token {
                report(format!("{key:?} has a token never handed out"));
            }
        }
        // A cancel request names a running job: every end of a delivery drops it.
        for key in self.control.cancels.keys() {
            let state = self.jobs.get(key).map(Record::state);
            if state != Some(JobState::Active) {
                report(format!(
                    "a cancel request for {key:?}, which is not running ({state:?})"
                ));
            }
        }
        let mut members = 0;
        let mut check = |key: &JobKey, want: JobState, what: &str| {
            members += 1;
            match self.jobs.get(key) {
                None => report(format!("`{what}` member {key:?} has no record")),
                Some(rec) if rec.state() != want => report(format!(
                    "`{what}` member {key:?} has a record in state {}",
                    rec.state()
                )),
                Some(_) => {}
            }
        };
        s.scheduled
            .values()
            .for_each(|k| check(k, JobState::Scheduled, "scheduled"));
        s.retry
            .values()
            .for_each(|k| check(k, JobState::Retry, "retry"));
        s.ready
            .values()
            .for_each(|k| check(k, JobState::Ready, "ready"));
        s.active
            .iter()
            .for_each(|(_, k)| check(k, JobState::Active, "active"));
        s.dead
            .iter()
            .for_each(|(_, k)| check(k, JobState::Dead, "dead"));
        if members != self.jobs.len() {
            report(format!(
                "{} jobs but {members} entries in the ordered structures",
                self.jobs.len()
            ));
        }
    }

    /// Removes at most `limit` dead jobs older than the retention or beyond the cap, counting
    /// them in `trimmed` (Lua `trim_dead`).
    fn trim_dead(&mut self, now: u64, cap: u64, retention_ms: u64, limit: usize) -> u64 {
        let mut removed = 0usize;
        if let Some(cutoff) = now.checked_sub(retention_ms) {
            let old: Vec<(u64, JobKey)> = self
                .sets
                .dead
                .iter()
                .take_while(|(died, _)| *died < cutoff)
                .take(limit)
                .cloned()
                .collect();
            for entry in old {
                self.sets.dead.remove(&entry);
                self.jobs.remove(&entry.1);
                removed += 1;
            }
        }
        let excess = (self.sets.dead.len() as u64).saturating_sub(cap);
        let excess = usize::try_from(excess)
            .unwrap_or(usize::MAX)
            .min(limit - removed);
        for _ in 0..excess {
            if let Some((_, key)) = self.sets.dead.pop_first() {
                self.jobs.remove(&key);
                removed += 1;
            }
        }
        self.counters.trimmed += removed as u64;
        removed as u64
    }

    /// Mirrors `enqueue.lua`.
    fn enqueue(&mut self, jobs: &[NewJob], call: EnqueueCall, now: u64) -> Vec<EnqueueOutcome> {
        self.receipts.prune(now);
        if let Some((applied, then)) = self.receipts.get(call.id).filter(|_| call.retry) {
            // An earlier try of this call was applied: report, write nothing. A job it created
            // or replaced that is still there (its time, this payload) is reported so again.
            return jobs
                .iter()
                .enumerate()
                .map(|(i, job)| {
                    let then = then.map_or(EnqueueOutcome::Created, |o| o[i]);
                    match self.jobs.get(&job.key) {
                        None => EnqueueOutcome::Ended,
                        Some(r)
                            if matches!(
                                then,
                                EnqueueOutcome::Created | EnqueueOutcome::Replaced
                            ) && r.created_ms == applied
                                && r.payload == job.payload =>
                        {
                            then
                        }
                        Some(r) => EnqueueOutcome::Exists(r.state()),
                    }
                })
                .collect();
        }
        let mut need_wake = false;
        let mut created = 0;
        let mut out = Vec::with_capacity(jobs.len());
        for job in jobs {
            let outcome = match self.jobs.get(&job.key) {
                None => EnqueueOutcome::Created,
                Some(old) if job.replace && old.state() != JobState::Active => {
                    self.sets.unlink(&job.key, old.place, old.due_ms);
                    EnqueueOutcome::Replaced
                }
                Some(old) => EnqueueOutcome::Exists(old.state()),
            };
            if matches!(outcome, EnqueueOutcome::Created | EnqueueOutcome::Replaced) {
                let due = match job.due {
                    Due::Now => i128::from(now),
                    Due::After(d) => i128::from(now) + i128::from(ms(d)),
                    Due::At(t) => i128::from(unix_ms(t)),
                };
                let due = bound_due(due, now);
                let (place, wake) = self.sets.place(Later::Scheduled, &job.key, due, now);
                need_wake |= wake;
                self.jobs.insert(
                    job.key.clone(),
                    Record {
                        place,
                        attempts: 0,
                        due_ms: due,
                        created_ms: now,
                        token: 0,
                        payload: job.payload.clone(),
                        history: Vec::new(),
                    },
                );
                created += 1;
            }
            out.push(outcome);
        }
        self.counters.enqueued += created;
        if created > 0 {
            self.receipts.insert(call.id, now, &out);
        }
        if need_wake {
            self.wake();
        }
        out
    }

    /// Mirrors `fetch.lua`: recover expired leases, promote due jobs, lease ready ones.
    fn fetch(&mut self, queue: &Queue, request: &FetchRequest, now: u64) -> FetchReply {
        let lease_ms = ms(request.lease).max(1);
        let cap = request.dead_limits.cap.max(1);
        let retention_ms = ms(request.dead_limits.retention);
        let mut trimmed = 0;
        let mut buried = Vec::new();
        let call = request.call;
        let mut jobs = Vec::new();
        let mut token: Option<u64> = None;
        // One counter bump for the whole call; tokens are base+1 .. base+max_jobs.
        let mut next_token = |counters: &mut Counters| {
            let next = match token {
                Some(t) => t + 1,
                None => {
                    let base = counters.token;
                    counters.token = base.saturating_add(request.max_jobs as u64);
                    base + 1
                }
            };
            token = Some(next);
            next
        };

        // 0. this call's receipt: a stale try does nothing; a retry leases the jobs still
        //    held under the recorded tokens again, spending no attempt
        self.fetch_receipts.prune(now);
        if let Some(receipt) = self.fetch_receipts.get(call.id, now) {
            if receipt.try_no > call.retry {
                return FetchReply {
                    next_in: Some(Duration::ZERO),
                    ..FetchReply::default()
                };
            }
            if call.is_retry() {
                let deadline = now + lease_ms;
                for (key, old) in receipt.leases.iter().take(request.max_jobs) {
                    let Some(rec) = self.jobs.get_mut(key) else {
                        continue;
                    };
                    let Place::Active(was) = rec.place else {
                        continue;
                    };
                    if rec.token != *old {
                        continue;
                    }
                    self.sets.active.remove(&(was, key.clone()));
                    let next = next_token(&mut self.counters);
                    rec.place = Place::Active(deadline);
                    rec.token = next;
                    self.sets.active.insert((deadline, key.clone()));
                    jobs.push(rec.delivery(queue, key.clone(), now, deadline));
                }
            }
        }

        // 1. expired leases: deadline < now
        let expired: Vec<(u64, JobKey)> = self
            .sets
            .active
            .iter()
            .take_while(|(deadline, _)| *deadline < now)
            .take(request.recover_batch)
            .cloned()
            .collect();
        for (deadline, key) in expired {
            self.sets.active.remove(&(deadline, key.clone()));
            if self.control.cancels.remove(&key).is_some() {
                // its cancel was requested while it ran: it ends as cancelled
                self.jobs.remove(&key);
                self.counters.cancelled += 1;
                continue;
            }
            let Some(rec) = self.jobs.get_mut(&key) else {
                continue;
            };
            self.counters.expired += 1;
            rec.add_history(now, AttemptOutcome::LeaseExpired, "lease expired");
            match request.retry_policy.delay_after(rec.attempts) {
                Some(delay) => {
                    let at = bound_due(i128::from(now) + i128::from(ms(delay)), now);
                    rec.due_ms = at;
                    rec.place = self.sets.insert_later(Later::Retry, &key, at);
                    self.counters.retried += 1;
                }
                None => {
                    bury(&mut self.sets, &mut self.counters, rec, &key, now);
                    buried.push(key);
                }
            }
        }
        if !buried.is_empty() {
            trimmed += self.trim_dead(now, cap, retention_ms, TRIM_LIMIT);
        }

        // limits, as fetch.lua applies them
        let from_receipt = jobs.len();
        let mut max_jobs = request.max_jobs.max(from_receipt);
        let mut limited = false;
        let mut limit_wait: i64 = -1;
        let mut gcra = None;
        if self.control.exists() {
            let c = &self.control;
            let mut allowed = max_jobs - from_receipt;
            if c.paused {
                allowed = 0;
            } else if let Some(until) = c.until.filter(|u| *u > now) {
                allowed = 0;
                limit_wait = (until - now) as i64;
            }
            if let Some(conc) = c.conc
                && allowed > 0
            {
                let room = (conc as usize).saturating_sub(self.sets.active.len());
                allowed = allowed.min(room);
            }
            if let Some(rate) = c.rate
                && allowed > 0
            {
                let (t, tau) = Control::gcra(rate);
                let tat = c.tat.max(now as f64);
                let budget = (((now as f64 + tau - tat) / t).floor() + 1.0).max(0.0) as usize;
                if budget < allowed {
                    allowed = budget;
                    limit_wait = -2;
                }
                gcra = Some((t, tau, tat));
            }
            if from_receipt + allowed < max_jobs {
                limited = true;
                max_jobs = from_receipt + allowed;
            }
        }

        // 2. lease ready jobs, FIFO; 3. then take the due jobs of both sets merged by due
        //    ms (scheduled first on a tie), at most room + promote_batch of them: the first
        //    `room` are leased (ready is empty by then, so they are next in line), the rest
        //    wait in ready — as fetch.lua does
        let mut promote_more = false;
        for pass in 0..2 {
            if pass == 1 {
                let limit = max_jobs - jobs.len() + request.promote_batch;
                let mut due: Vec<(u64, u8, (u64, u64))> = Vec::new();
                for (rank, set) in [(0u8, &self.sets.scheduled), (1u8, &self.sets.retry)] {
                    due.extend(
                        set.keys()
                            .take_while(|(due, _)| *due <= now)
                            .take(limit)
                            .map(|slot| (slot.0, rank, *slot)),
                    );
                }
                due.sort();
                due.truncate(limit);
                promote_more = limit > 0 && due.len() == limit;
                for (_, rank, slot) in due {
                    let set = if rank == 0 {
                        &mut self.sets.scheduled
                    } else {
                        &mut self.sets.retry
                    };
                    let Some(key) = set.remove(&slot) else {
                        continue;
                    };
                    let place = self.sets.push_ready_back(&key);
                    if let Some(rec) = self.jobs.get_mut(&key) {
                        rec.place = place;
                    }
                }
            }
            while jobs.len() < max_jobs {
                let Some((_, key)) = self.sets.ready.pop_first() else {
                    break;
                };
                let Some(rec) = self.jobs.get_mut(&key) else {
                    continue;
                };
                let next = next_token(&mut self.counters);
                let deadline = now + lease_ms;
                rec.place = Place::Active(deadline);
                rec.attempts = (rec.attempts + 1).min(MAX_ATTEMPTS);
                rec.token = next;
                self.sets.active.insert((deadline, key.clone()));
                jobs.push(rec.delivery(queue, key, now, deadline));
            }
        }

        if let Some((t, _, tat)) = &mut gcra
            && jobs.len() > from_receipt
        {
            *tat += (jobs.len() - from_receipt) as f64 * *t;
            self.control.tat = *tat;
        }

        // 4. what next
        let next_in = if limited && (!self.sets.ready.is_empty() || promote_more) {
            // a limit holds due work back: no chained wake-up
            if limit_wait == -2
                && let Some((t, tau, tat)) = gcra
            {
                let k = (tau / t / 2.0).floor().max(1.0);
                limit_wait = ((tat - tau + (k - 1.0) * t - now as f64).ceil() as i64).max(1);
            }
            let head = self
                .sets
                .active
                .first()
                .map(|(deadline, _)| (deadline + 1).saturating_sub(now) as i64);
            match (limit_wait, head) {
                (w, Some(h)) if w < 0 || h < w => Some(h as u64),
                (w, _) if w >= 0 => Some(w as u64),
                _ => None,
            }
        } else if !self.sets.ready.is_empty() || promote_more {
            if !jobs.is_empty() {
                self.wake();
            }
            Some(0)
        } else {
            let heads = [
                self.sets
                    .scheduled
                    .first_key_value()
                    .map(|((due, _), _)| *due),
                self.sets.retry.first_key_value().map(|((due, _), _)| *due),
                // a lease expires once now > deadline
                self.sets.active.first().map(|(deadline, _)| deadline + 1),
            ];
            let next = heads.into_iter().flatten().min();
            if jobs.is_empty() && retention_ms > 0 {
                trimmed += self.trim_dead(now, cap, retention_ms, TRIM_LIMIT);
            }
            next.map(|at| at.saturating_sub(now))
        };

        // 6. the receipt, for a call that leased something (or any retry)
        if !jobs.is_empty() || call.is_retry() {
            let leases = jobs.iter().map(|d| (d.key.clone(), d.token)).collect();
            let life = ms(FetchCall::receipt_life(request.lease)).max(1);
            let receipt = FetchReceipt {
                try_no: call.retry,
                leases,
                until: now + life,
            };
            self.fetch_receipts.insert(call.id, receipt);
        }

        FetchReply {
            jobs,
            next_in: next_in.map(Duration::from_millis),
            buried,
            trimmed,
        }
    }

    /// Mirrors `ack.lua`.
    fn ack(&mut self, done: &[(JobKey, u64)]) -> Vec<AckOutcome> {
        let mut out = Vec::with_capacity(done.len());
        for (key, token) in done {
            let outcome = match self.jobs.get(key) {
                None => AckOutcome::Gone,
                Some(rec) if rec.state() != JobState::Active || rec.token != *token => {
                    AckOutcome::Stale
                }
                Some(rec) => {
                    self.sets.unlink(key, rec.place, rec.due_ms);
                    self.jobs.remove(key);
                    self.control.cancels.remove(key);
                    self.counters.succeeded += 1;
                    AckOutcome::Acked
                }
            };
            out.push(outcome);
        }
        if self.control.conc.is_some() && out.contains(&AckOutcome::Acked) {
            self.wake();
        }
        out
    }

    /// Mirrors `fail.lua`; `Err` only for a stale token.
    fn fail(
        &mut self,
        key: &JobKey,
        token: u64,
        action: &FailAction,
        error: &str,
        dead_limits: DeadLimits,
        now: u64,
    ) -> Result<FailOutcome> {
        let Some(rec) = self.jobs.get_mut(key) else {
            return Ok(FailOutcome::Gone);
        };
        if rec.state() != JobState::Active || rec.token != token {
            return Err(Error::StaleToken {
                key: key.to_string(),
            });
        }
        let capped = self.control.conc.is_some();
        if matches!(action, FailAction::Cancel) || self.control.cancels.contains_key(key) {
            self.sets.unlink(key, rec.place, rec.due_ms);
            self.jobs.remove(key);
            self.control.cancels.remove(key);
            self.counters.cancelled += 1;
            if capped {
                self.wake();
            }
            return Ok(FailOutcome::Cancelled);
        }
        self.sets.unlink(key, rec.place, rec.due_ms);
        if capped {
            // a slot of the concurrency share is free
            self.wake.notify_one();
        }
        let (delay, outcome, later) = match action {
            FailAction::Cancel => unreachable!("handled above"),
            FailAction::Throttle(d) => {
                let at = bound_due(i128::from(now) + i128::from(ms(*d)), now);
                if self.control.until.is_none_or(|u| at > u) {
                    self.control.until = Some(at);
                }
                self.counters.throttles += 1;
                (d, AttemptOutcome::Deferred, Later::Scheduled)
            }
            FailAction::Bury => {
                rec.add_history(now, AttemptOutcome::Buried, error);
                bury(&mut self.sets, &mut self.counters, rec, key, now);
                let trimmed = self.trim_dead(
                    now,
                    dead_limits.cap.max(1),
                    ms(dead_limits.retention),
                    TRIM_LIMIT,
                );
                return Ok(FailOutcome::Buried { trimmed });
            }
            FailAction::Defer(d) => (d, AttemptOutcome::Deferred, Later::Scheduled),
            FailAction::Retry(d) => (d, AttemptOutcome::Failed, Later::Retry),
        };
        let at = bound_due(i128::from(now) + i128::from(ms(*delay)), now);
        rec.add_history(now, outcome, error);
        if matches!(later, Later::Scheduled) {
            // "not yet": the attempt is given back and the job waits like a scheduled one
            rec.attempts = rec.attempts.saturating_sub(1);
        } else {
            self.counters.retried += 1;
        }
        let (place, wake) = self.sets.place(later, key, at, now);
        rec.place = place;
        rec.due_ms = at;
        if wake {
            self.wake();
        }
        Ok(FailOutcome::Retrying { at_ms: at })
    }

    /// Mirrors `extend.lua`.
    fn extend(&mut self, leases: &[(JobKey, u64)], lease: Duration, now: u64) -> Vec<Extended> {
        let deadline = now + ms(lease).max(1);
        leases
            .iter()
            .map(|(key, token)| match self.jobs.get_mut(key) {
                Some(rec) if rec.state() == JobState::Active && rec.token == *token => {
                    self.sets.unlink(key, rec.place, rec.due_ms);
                    rec.place = Place::Active(deadline);
                    self.sets.active.insert((deadline, key.clone()));
                    if self.control.cancels.contains_key(key) {
                        Extended::CancelRequested
                    } else {
                        Extended::Held
                    }
                }
                _ => Extended::Lost,
            })
            .collect()
    }

    /// Mirrors `release.lua`: back to the front of `ready`, the attempt given back.
    fn release(&mut self, leases: &[(JobKey, u64)]) -> Vec<bool> {
        let mut released = false;
        // Backwards, so the jobs end at the front of ready in the order given.
        let mut out: Vec<bool> = leases
            .iter()
            .rev()
            .map(|(key, token)| match self.jobs.get_mut(key) {
                Some(rec)
                    if rec.state() == JobState::Active
                        && rec.token == *token
                        && self.control.cancels.contains_key(key) =>
                {
                    // its cancel was requested: it ends as cancelled, never runs again
                    self.sets.unlink(key, rec.place, rec.due_ms);
                    self.jobs.remove(key);
                    self.control.cancels.remove(key);
                    self.counters.cancelled += 1;
                    true
                }
                Some(rec) if rec.state() == JobState::Active && rec.token == *token => {
                    self.sets.unlink(key, rec.place, rec.due_ms);
                    rec.attempts = rec.attempts.saturating_sub(1);
                    rec.place = self.sets.push_ready_front(key);
                    released = true;
                    true
                }
                _ => false,
            })
            .collect();
        out.reverse();
        if released {
            self.wake();
        }
        out
    }

    /// Mirrors `cancel.lua`.
    fn cancel(&mut self, key: &JobKey) -> CancelOutcome {
        let Some(rec) = self.jobs.get(key) else {
            return CancelOutcome::NotFound;
        };
        match rec.state() {
            JobState::Active => {
                self.control.cancels.insert(key.clone(), rec.token);
                CancelOutcome::CancelRequested
            }
            JobState::Dead => CancelOutcome::Dead,
            _ => {
                self.sets.unlink(key, rec.place, rec.due_ms);
                self.jobs.remove(key);
                self.counters.cancelled += 1;
                CancelOutcome::Cancelled
            }
        }
    }

    /// Mirrors `reschedule.lua`: attempts and history are kept.
    fn reschedule(&mut self, key: &JobKey, due: NewDue, now: u64) -> RescheduleOutcome {
        let Some(rec) = self.jobs.get_mut(key) else {
            return RescheduleOutcome::NotFound;
        };
        match rec.state() {
            JobState::Active => return RescheduleOutcome::Running,
            JobState::Dead => return RescheduleOutcome::Dead,
            _ => {}
        }
        let at = match due {
            NewDue::At(t) => i128::from(unix_ms(t)),
            NewDue::After(d) => i128::from(now) + i128::from(ms(d)),
            NewDue::Shift(delta) => i128::from(rec.due_ms) + i128::from(delta),
        };
        let at = bound_due(at, now);
        if at <= now && rec.state() == JobState::Ready {
            // already in ready: keep its place in line
            rec.due_ms = at;
            return RescheduleOutcome::Rescheduled { due_ms: at };
        }
        self.sets.unlink(key, rec.place, rec.due_ms);
        let (place, wake) = self.sets.place(Later::Scheduled, key, at, now);
        rec.place = place;
        rec.due_ms = at;
        if wake {
            self.wake();
        }
        RescheduleOutcome::Rescheduled { due_ms: at }
    }

    /// Mirrors `stats.lua`.
    fn stats(&self, now: u64) -> TopicStats {
        let mut oldest = 0;
        let heads = [
            self.sets
                .scheduled
                .first_key_value()
                .map(|((due, _), _)| *due),
            self.sets.retry.first_key_value().map(|((due, _), _)| *due),
            // the front of ready is the longest-waiting ready job
            self.sets
                .ready
                .first_key_value()
                .and_then(|(_, key)| self.jobs.get(key))
                .map(|rec| rec.due_ms),
        ];
        for due in heads.into_iter().flatten() {
            oldest = oldest.max(now.saturating_sub(due));
        }
        let overdue = [&self.sets.scheduled, &self.sets.retry]
            .iter()
            .map(|set| set.range(..=(now, u64::MAX)).count() as u64)
            .sum();
        let c = &self.counters;
        TopicStats {
            scheduled: self.sets.scheduled.len() as u64,
            ready: self.sets.ready.len() as u64,
            active: self.sets.active.len() as u64,
            retry: self.sets.retry.len() as u64,
            dead: self.sets.dead.len() as u64,
            enqueued: c.enqueued,
            succeeded: c.succeeded,
            retried: c.retried,
            buried: c.buried,
            expired: c.expired,
            cancelled: c.cancelled,
            trimmed: c.trimmed,
            oldest_overdue_ms: oldest,
            overdue,
            paused: self.control.paused,
            throttled: self.throttled(now, overdue),
            throttles: c.throttles,
        }
    }

    /// Whether a limit holds due work back now (as `stats.lua` tells).
    fn throttled(&self, now: u64, overdue: u64) -> bool {
        let c = &self.control;
        if self.sets.ready.is_empty() && overdue == 0 {
            return false;
        }
        c.until.is_some_and(|u| u > now)
            || c.conc.is_some_and(|n| self.sets.active.len() >= n as usize)
            || c.rate.is_some_and(|r| {
                let (_, tau) = Control::gcra(r);
                c.tat - tau > now as f64
            })
    }

    /// Mirrors `control.lua`.
    fn control(&mut self, change: &ControlChange, now: u64) -> ControlState {
        let c = &mut self.control;
        let mut changed = false;
        if let Some(paused) = change.paused {
            c.paused = paused;
            changed = true;
        }
        if let Some(rate) = change.rate {
            c.rate = rate;
            c.tat = 0.0;
            changed = true;
        }
        if let Some(conc) = change.concurrency {
            c.conc = conc;
            changed = true;
        }
        if let Some(d) = change.throttle {
            let at = now.saturating_add(ms(d));
            if c.until.is_none_or(|u| at > u) {
                c.until = Some(at);
            }
        }
        if c.until.is_some_and(|u| u <= now) {
            c.until = None;
        }
        let state = ControlState {
            paused: c.paused,
            rate: c.rate,
            concurrency: c.conc,
            throttled_until_ms: c.until,
        };
        if changed {
            self.wake();
        }
        state
    }

    /// Mirrors `list.lua`. The places are this store's own: `(due, seq)` in `scheduled` and
    /// `retry` (the order they are kept in), `(deadline or died, 0)` then the key in `active`
    /// and `dead`, the rank in `ready` (exact here: no stale entries to skip).
    fn list(&self, state: JobState, from: &ListFrom, limit: usize) -> Result<ListChunk> {
        let after = match (state, from) {
            (JobState::Ready, ListFrom::Start | ListFrom::Index(_)) => {
                let start = match from {
                    ListFrom::Index(i) => usize::try_from(*i).unwrap_or(usize::MAX),
                    _ => 0,
                };
                let jobs: Vec<_> = self
                    .sets
                    .ready
                    .values()
                    .skip(start)
                    .take(limit)
                    .enumerate()
                    .filter_map(|(n, key)| {
                        let pos = ListPos {
                            order: ((start + n) as u64, 0),
                            key: key.clone(),
                        };
                        self.jobs.get(key).map(|rec| (pos, rec.info(key)))
                    })
                    .collect();
                let next = start.saturating_add(jobs.len());
                return Ok(ListChunk {
                    jobs,
                    next_index: next as u64,
                    more: next < self.sets.ready.len(),
                });
            }
            (_, ListFrom::Start) => None,
            (JobState::Ready, _) | (_, ListFrom::Index(_)) => {
                return Err(Error::InvalidConfig(format!(
                    "the {state} listing cannot start from {from:?}"
                )));
            }
            (_, ListFrom::After(pos)) => Some(pos),
        };
        let after_pos = |pos: &ListPos| after.is_none_or(|a| pos > a);
        let places: Box<dyn Iterator<Item = ListPos> + '_> = match state {
            JobState::Scheduled | JobState::Retry => {
                let set = if state == JobState::Scheduled {
                    &self.sets.scheduled
                } else {
                    &self.sets.retry
                };
                let start = after.map_or((0, 0), |a| a.order);
                Box::new(set.range(start..).map(|(order, key)| ListPos {
                    order: *order,
                    key: key.clone(),
                }))
            }
            JobState::Active | JobState::Dead => {
                let set = if state == JobState::Active {
                    &self.sets.active
                } else {
                    &self.sets.dead
                };
                let entries: Box<dyn Iterator<Item = &(u64, JobKey)>> = match after {
                    Some(a) => Box::new(set.range((a.order.0, a.key.clone())..)),
                    None => Box::new(set.iter()),
                };
                Box::new(entries.map(|(at, key)| ListPos {
                    order: (*at, 0),
                    key: key.clone(),
                }))
            }
            JobState::Ready => unreachable!("handled above"),
        };
        let mut places = places.filter(after_pos);
        let jobs: Vec<_> = places
            .by_ref()
            .take(limit)
            .filter_map(|pos| {
                let info = self.jobs.get(&pos.key).map(|rec| rec.info(&pos.key))?;
                Some((pos, info))
            })
            .collect();
        Ok(ListChunk {
            jobs,
            next_index: 0,
            more: places.next().is_some(),
        })
    }

    /// Dead jobs by death time (ties by key), like `ZRANGE dead`.
    fn dead(&self, offset: usize, limit: usize) -> Vec<JobInfo> {
        self.sets
            .dead
            .iter()
            .skip(offset)
            .take(limit)
            .filter_map(|(_, key)| self.jobs.get(key).map(|rec| rec.info(key)))
            .collect()
    }

    /// Mirrors `requeue_dead.lua`: attempts reset, history kept, to the back of `ready`.
    fn requeue_dead(&mut self, keys: &[JobKey], now: u64) -> Vec<bool> {
        let mut moved = false;
        let out = keys
            .iter()
            .map(|key| match self.jobs.get_mut(key) {
                Some(rec) if rec.state() == JobState::Dead => {
                    self.sets.unlink(key, rec.place, rec.due_ms);
                    rec.attempts = 0;
                    rec.due_ms = now;
                    rec.place = self.sets.push_ready_back(key);
                    moved = true;
                    true
                }
                _ => false,
            })
            .collect();
        if moved {
            self.wake();
        }
        out
    }

    /// Mirrors `dead_act.lua`: each job only if it is still dead with the listed time of
    /// death; requeued as `requeue_dead`, deleted as `purge_dead`.
    fn act_on_dead(&mut self, action: DeadAction, seen: &[(JobKey, u64)], now: u64) -> Vec<bool> {
        let mut out = Vec::with_capacity(seen.len());
        let mut moved = false;
        for (key, died) in seen {
            let Some(rec) = self.jobs.get_mut(key) else {
                out.push(false);
                continue;
            };
            if rec.place != Place::Dead(*died) {
                out.push(false);
                continue;
            }
            self.sets.unlink(key, rec.place, rec.due_ms);
            match action {
                DeadAction::Requeue => {
                    rec.attempts = 0;
                    rec.due_ms = now;
                    rec.place = self.sets.push_ready_back(key);
                    moved = true;
                }
                DeadAction::Purge => {
                    self.jobs.remove(key);
                }
            }
            out.push(true);
        }
        if moved {
            self.wake();
        }
        out
    }

    /// Mirrors `purge_dead.lua`: the named dead jobs (a name repeated still takes a slot of
    /// `limit`, but is deleted and counted once), or the oldest `limit`.
    fn purge_dead(&mut self, keys: &[JobKey], limit: usize) -> u64 {
        let chosen: Vec<JobKey> = if keys.is_empty() {
            self.sets
                .dead
                .iter()
                .take(limit)
                .map(|(_, k)| k.clone())
                .collect()
        } else {
            keys.iter()
                .filter(|k| {
                    self.jobs
                        .get(*k)
                        .is_some_and(|r| r.state() == JobState::Dead)
                })
                .take(limit)
                .cloned()
                .collect()
        };
        let mut deleted = 0;
        for key in chosen {
            if let Some(rec) = self.jobs.get(&key)
                && rec.state() == JobState::Dead
            {
                self.sets.unlink(&key, rec.place, rec.due_ms);
                self.jobs.remove(&key);
                deleted += 1;
            }
        }
        deleted
    }
}

fn warn_trimmed(queue: &Queue, trimmed: u64) {
    if trimmed > 0 {
        tracing::warn!(topic = %queue.topic, partition = queue.partition, trimmed, "dead queue trimmed (cap or retention)");
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn enqueue(
        &self,
        queue: &Queue,
        jobs: &[NewJob],
        call: EnqueueCall,
    ) -> Result<Vec<EnqueueOutcome>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self.write(queue, |p, now| p.enqueue(jobs, call, now)))
    }

    async fn fetch(&self, queue: &Queue, request: &FetchRequest) -> Result<FetchReply> {
        request.validate()?;
        let reply = self.write(queue, |p, now| p.fetch(queue, request, now));
        warn_trimmed(queue, reply.trimmed);
        Ok(reply)
    }

    async fn ack(&self, queue: &Queue, done: &[(JobKey, u64)]) -> Result<Vec<AckOutcome>> {
        if done.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self.write(queue, |p, _| p.ack(done)))
    }

    async fn fail(
        &self,
        queue: &Queue,
        key: &JobKey,
        token: u64,
        action: &FailAction,
        error: &str,
        dead_limits: DeadLimits,
    ) -> Result<FailOutcome> {
        let outcome = self.write(queue, |p, now| {
            p.fail(key, token, action, error, dead_limits, now)
        })?;
        if let FailOutcome::Buried { trimmed } = outcome {
            warn_trimmed(queue, trimmed);
        }
        Ok(outcome)
    }

    async fn extend(
        &self,
        queue: &Queue,
        leases: &[(JobKey, u64)],
        lease: Duration,
    ) -> Result<Vec<Extended>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self.write(queue, |p, now| p.extend(leases, lease, now)))
    }

    async fn release(&self, queue: &Queue, leases: &[(JobKey, u64)]) -> Result<Vec<bool>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self.write(queue, |p, _| p.release(leases)))
    }

    async fn cancel(&self, queue: &Queue, key: &JobKey) -> Result<CancelOutcome> {
        Ok(self.write(queue, |p, _| p.cancel(key)))
    }

    async fn reschedule(
        &self,
        queue: &Queue,
        key: &JobKey,
        due: NewDue,
    ) -> Result<RescheduleOutcome> {
        Ok(self.write(queue, |p, now| p.reschedule(key, due, now)))
    }

    async fn control(&self, queue: &Queue, change: &ControlChange) -> Result<ControlState> {
        if let Some(Some(rate)) = change.rate {
            rate.check()?;
        }
        if change.concurrency == Some(Some(0)) {
            return Err(Error::InvalidConfig(
                "a concurrency share must be at least 1".into(),
            ));
        }
        Ok(self.write(queue, |p, now| p.control(change, now)))
    }

    async fn job(&self, queue: &Queue, key: &JobKey) -> Result<Option<JobInfo>> {
        Ok(self.read(queue, |p, _| {
            p.and_then(|p| p.jobs.get(key)).map(|rec| rec.info(key))
        }))
    }

    async fn stats(&self, queue: &Queue) -> Result<TopicStats> {
        Ok(self.read(queue, |p, now| p.map(|p| p.stats(now)).unwrap_or_default()))
    }

    async fn list(
        &self,
        queue: &Queue,
        state: JobState,
        from: &ListFrom,
        limit: usize,
    ) -> Result<ListChunk> {
        self.read(queue, |p, _| match p {
            Some(p) => p.list(state, from, limit),
            None => Partition::default().list(state, from, limit),
        })
    }

    async fn dead(&self, queue: &Queue, offset: usize, limit: usize) -> Result<Vec<JobInfo>> {
        Ok(self.read(queue, |p, _| {
            p.map(|p| p.dead(offset, limit)).unwrap_or_default()
        }))
    }

    async fn requeue_dead(&self, queue: &Queue, keys: &[JobKey]) -> Result<Vec<bool>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self.write(queue, |p, now| p.requeue_dead(keys, now)))
    }

    async fn purge_dead(&self, queue: &Queue, keys: &[JobKey], limit: usize) -> Result<u64> {
        if limit == 0 {
            return Ok(0);
        }
        Ok(self.write(queue, |p, _| p.purge_dead(keys, limit)))
    }

    async fn act_on_dead(
        &self,
        queue: &Queue,
        action: DeadAction,
        seen: &[(JobKey, u64)],
    ) -> Result<Vec<bool>> {
        if seen.is_empty() {
            return Ok(Vec::new());
        }
        crate::store::check_act_len(seen)?;
        Ok(self.write(queue, |p, now| p.act_on_dead(action, seen, now)))
    }

    async fn register_topic(&self, topic: &Topic, partitions: u16) -> Result<TopicMeta> {
        if partitions == 0 {
            return Err(Error::InvalidConfig(
                "a topic needs at least one partition".into(),
            ));
        }
        let now = self.clock.now_ms();
        Ok(self
            .lock_topics()
            .entry(topic.clone())
            .or_insert_with(|| TopicMeta::new(topic.clone(), partitions, now))
            .clone())
    }

    async fn topics(&self) -> Result<Vec<TopicMeta>> {
        Ok(self.lock_topics().values().cloned().collect())
    }

    async fn reset_topic(&self, topic: &Topic) -> Result<Option<TopicMeta>> {
        // Registry, then partitions: the one order both locks are taken in.
        let mut topics = self.lock_topics();
        let Some(meta) = topics.get(topic) else {
            return Ok(None);
        };
        let state = self.lock();
        let jobs: usize = (0..meta.partitions)
            .filter_map(|p| state.get(&Queue::new(topic.clone(), p)))
            .map(|p| p.jobs.len())
            .sum();
        if jobs > 0 {
            return Err(Error::TopicNotEmpty {
                topic: topic.to_string(),
                jobs: jobs as u64,
            });
        }
        Ok(topics.remove(topic))
    }

    async fn beat_worker(&self, worker: &WorkerInfo, ttl: Duration) -> Result<()> {
        worker.validate(ttl)?;
        let now = self.clock.now_ms();
        let mut info = worker.clone();
        info.beat_ms = now;
        info.expires_ms = now.saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        self.lock_workers().insert(info.id.clone(), info);
        Ok(())
    }

    async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        let now = self.clock.now_ms();
        let mut workers = self.lock_workers();
        workers.retain(|_, w| w.expires_ms > now);
        Ok(workers.values().cloned().collect())
    }

    async fn remove_worker(&self, id: &str) -> Result<bool> {
        Ok(self.lock_workers().remove(id).is_some())
    }

    async fn put_schedule(&self, record: &ScheduleRecord) -> Result<ScheduleOutcome> {
        record.validate()?;
        let mut schedules = self.lock_schedules();
        let outcome = match schedules.get(&record.name) {
            None => ScheduleOutcome::Created,
            Some((_, def)) if *def == record.definition => return Ok(ScheduleOutcome::Unchanged),
            Some(_) => ScheduleOutcome::Updated,
        };
        schedules.insert(
            record.name.clone(),
            (record.next_ms, record.definition.clone()),
        );
        Ok(outcome)
    }

    async fn remove_schedule(&self, name: &str) -> Result<bool> {
        check_schedule_name(name)?;
        Ok(self.lock_schedules().remove(name).is_some())
    }

    async fn schedules(&self) -> Result<Vec<ScheduleRecord>> {
        Ok(self
            .lock_schedules()
            .iter()
            .map(|(name, (next_ms, definition))| ScheduleRecord {
                name: name.clone(),
                next_ms: *next_ms,
                definition: definition.clone(),
            })
            .collect())
    }

    async fn advance_schedule(&self, name: &str, from_ms: u64, to_ms: u64) -> Result<bool> {
        check_schedule_name(name)?;
        match self.lock_schedules().get_mut(name) {
            Some((cursor, _)) if *cursor == from_ms => {
                *cursor = to_ms;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn now_ms(&self) -> Result<u64> {
        Ok(self.clock.now_ms())
    }

    async fn wake_listener(&self, queue: &Queue) -> Result<Box<dyn WakeListener>> {
        let wake = self.write(queue, |p, _| p.wake.clone());
        Ok(Box::new(MemoryWakeListener { wake }))
    }
}

/// Waits on the partition's [`Notify`]: a stored permit is the Redis `wake` list's one token.
struct MemoryWakeListener {
    wake: Arc<Notify>,
}

#[async_trait]
impl WakeListener for MemoryWakeListener {
    async fn wait(&mut self, max_wait: Duration) -> Result<bool> {
        Ok(tokio::time::timeout(max_wait, self.wake.notified())
            .await
            .is_ok())
    }
}

#[cfg(test)]
mod tests;
