//! `MemoryStore`: the embedded store's state — its partitions, the topic registry, the live
//! workers and the schedules, each behind its own lock — and the one way every call reaches a
//! partition (`write` creates it, `read` never does). The role files implement the calls.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::SystemTime;

use super::clock::Clock;
use super::partition::Partition;
use crate::job::Queue;
use crate::names::Topic;
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
                        c.succeeded_after_cancel_request,
                        c.trimmed,
                        c.throttles,
                        c.token,
                    ]
                    .iter()
                    .all(|n| *n == 0)
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
