//! `MemoryStore`: the embedded store's state — its partitions, the topic registry, the live
//! workers and the schedules, each behind its own lock — and the one way every call reaches a
//! partition (`write` creates it, `read` never does). The role files implement the calls.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::SystemTime;

use super::batches::Book;
use super::clock::Clock;
use super::partition::{Later, Partition, Place, Record};
use crate::job::{JobState, Priority, Queue};
use crate::names::{JobKey, Topic};
use crate::topic::TopicMeta;
use crate::workers::WorkerInfo;

/// The in-process implementation of [`Store`](crate::store::Store), on tokio's clock.
///
/// Build one with [`MemoryStore::new`], or get a client on a fresh one with
/// `Client::in_memory`. Jobs live as long as the store; nothing is persisted.
pub struct MemoryStore {
    pub(super) clock: Clock,
    state: Mutex<HashMap<Queue, Partition>>,
    /// The topic registry (Redis: `<ns>:topics`), per store instance.
    topics: Mutex<BTreeMap<Topic, TopicMeta>>,
    /// Live workers' heartbeats (Redis: `<ns>:workers`), by id; each expires by the clock.
    workers: Mutex<BTreeMap<String, WorkerInfo>>,
    /// Periodic schedules (Redis: `<ns>:schedules`), name → (cursor, definition).
    schedules: Mutex<BTreeMap<String, (u64, Vec<u8>)>>,
    /// Payload shapes (Redis: `<ns>:shapes`), topic → stored form.
    shapes: Mutex<BTreeMap<Topic, Vec<u8>>>,
    /// The batches' records and the index of those not done (Redis: `<ns>:{batch:<id>}`,
    /// `<ns>:batches`); never locked together with the partitions.
    batches: Mutex<Book>,
    /// The schedules generation heartbeats return (Redis: a field of `<ns>:workers`).
    pub(super) schedules_generation: std::sync::atomic::AtomicU64,
    /// The record formats it reads and writes: one process, so always the newest it reads.
    pub(super) formats: crate::format::Formats,
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
            schedules_generation: std::sync::atomic::AtomicU64::new(0),
            formats: crate::format::Formats::single_process(crate::format::NEWEST_FORMAT),
            schedules: Mutex::new(BTreeMap::new()),
            shapes: Mutex::new(BTreeMap::new()),
            batches: Mutex::new(Book::default()),
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
            && self.lock_batches().is_empty()
            && self.lock().values().all(|p| {
                let c = &p.counters;
                p.jobs.is_empty()
                    && p.outbox.len() == 0
                    && [
                        c.enqueued,
                        c.succeeded,
                        c.retried,
                        c.buried,
                        c.expired,
                        c.cancelled,
                        c.succeeded_after_cancel_request,
                        c.trimmed,
                        c.throttles,
                        c.token,
                    ]
                    .iter()
                    .all(|n| *n == 0)
            })
    }

    /// Plants a job record of record format `format` in `state` (due, lease deadline or time
    /// of death `at_ms`), placed where its state says, as a dq writing that format would have
    /// left it: for tests of the version rules (a format above the newest this dq reads stands
    /// for a newer dq's job, which this store must leave untouched). Replaces any job of
    /// that key.
    #[doc(hidden)]
    pub fn plant_record(
        &self,
        queue: &Queue,
        key: &JobKey,
        (format, state): (u8, JobState),
        at_ms: u64,
        payload: &[u8],
    ) {
        let mut all = self.lock();
        let p = all.entry(queue.clone()).or_default();
        if let Some(old) = p.jobs.remove(key) {
            p.sets
                .unlink(key, old.place, old.due_ms, old.group.as_ref());
        }
        let place = match state {
            JobState::Scheduled => p.sets.insert_later(Later::Scheduled, key, at_ms),
            JobState::Retry => p.sets.insert_later(Later::Retry, key, at_ms),
            JobState::Ready => p.sets.push_ready_back(key, Priority::NORMAL.level(), None),
            JobState::Active => {
                p.sets.active.insert((at_ms, key.clone()));
                Place::Active(at_ms)
            }
            JobState::Dead => {
                p.sets.dead.insert((at_ms, key.clone()));
                Place::Dead(at_ms)
            }
        };
        let ran = !matches!(state, JobState::Scheduled | JobState::Ready);
        // its token was handed out by the counter, as by a store that leased it
        p.counters.token = p.counters.token.max(u64::from(ran));
        p.jobs.insert(
            key.clone(),
            Record {
                priority: Priority::NORMAL.level(),
                group: None,
                batch: None,
                format,
                place,
                attempts: u32::from(ran),
                due_ms: at_ms,
                created_ms: at_ms,
                token: u64::from(ran),
                expires_ms: 0,
                payload: payload.to_vec(),
                history: Vec::new(),
            },
        );
    }

    /// The record format of the job under `key`, if there is one (for tests).
    #[doc(hidden)]
    pub fn record_format(&self, queue: &Queue, key: &JobKey) -> Option<u8> {
        self.read(queue, |p, _| p?.jobs.get(key).map(|r| r.format))
    }

    /// Everything stored about the job under `key` (its fields and where it is), as text, to
    /// compare before and after an operation that must leave it untouched (for tests).
    #[doc(hidden)]
    pub fn describe_record(&self, queue: &Queue, key: &JobKey) -> Option<String> {
        self.read(queue, |p, _| {
            let p = p?;
            let r = p.jobs.get(key)?;
            let ready_at = p
                .sets
                .ready
                .iter()
                .find(|(_, k)| *k == key)
                .map(|(i, _)| *i);
            Some(format!(
                "format {} {:?} attempts {} due {} created {} token {} payload {:?} \
                 history {} ready at {ready_at:?} cancel {:?}",
                r.format,
                r.place,
                r.attempts,
                r.due_ms,
                r.created_ms,
                r.token,
                r.payload,
                r.history.len(),
                p.control.cancels.get(key),
            ))
        })
    }

    /// The topic registry, locked (before the partitions, if both are taken).
    pub(super) fn lock_topics(&self) -> MutexGuard<'_, BTreeMap<Topic, TopicMeta>> {
        self.topics
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The live workers, locked.
    pub(super) fn lock_workers(&self) -> MutexGuard<'_, BTreeMap<String, WorkerInfo>> {
        self.workers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The schedules, locked.
    pub(super) fn lock_schedules(&self) -> MutexGuard<'_, BTreeMap<String, (u64, Vec<u8>)>> {
        self.schedules
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The payload shapes' stored forms, locked.
    pub(crate) fn lock_shapes(&self) -> MutexGuard<'_, BTreeMap<Topic, Vec<u8>>> {
        self.shapes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The batches, locked (never while the partitions are).
    pub(super) fn lock_batches(&self) -> MutexGuard<'_, Book> {
        self.batches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every partition, locked.
    pub(super) fn lock(&self) -> MutexGuard<'_, HashMap<Queue, Partition>> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `f` on the partition, creating it if it does not exist yet (for writes).
    pub(super) fn write<T>(&self, queue: &Queue, f: impl FnOnce(&mut Partition, u64) -> T) -> T {
        let mut state = self.lock();
        let now = self.clock.now_ms();
        f(state.entry(queue.clone()).or_default(), now)
    }

    /// Runs `f` on the partition if it exists (for reads, which never create one).
    pub(super) fn read<T>(&self, queue: &Queue, f: impl FnOnce(Option<&Partition>, u64) -> T) -> T {
        let state = self.lock();
        let now = self.clock.now_ms();
        f(state.get(queue), now)
    }
}
