//! One partition in memory, the counterpart of one Redis hash tag: its records, the ordered
//! structures that index them (the sorted sets and the `ready` list), its counters, control
//! settings and receipts, and the moves every role shares (place a waiting job, bury, trim the
//! dead queue, wake a fetcher).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use tokio::sync::Notify;

use super::kept::Kept;
use super::outbox::Outbox;
use super::receipts::{FetchReceipts, Receipts};
use crate::batch::BatchId;
use crate::control::Rate;
use crate::error::{Error, Result};
use crate::finished::Retention;
use crate::format::NEWEST_FORMAT;
use crate::group::GroupName;
use crate::job::{
    AttemptOutcome, AttemptRecord, JobInfo, JobState, MAX_HISTORY, Priority, Queue, truncate_error,
};
use crate::names::JobKey;
use crate::progress::JobProgress;
use crate::store::lease::Delivery;

/// Most dead jobs removed by one trim (the Lua scripts' bound).
pub(super) const TRIM_LIMIT: usize = 100;
/// Attempts are one byte in the Redis record.
pub(super) const MAX_ATTEMPTS: u32 = 255;

/// Where a job is; its state follows from it. Each variant holds the job's sort key in the
/// structure that holds it, so it can be removed in O(log n).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Place {
    /// In `scheduled` under `(due, seq)`.
    Scheduled(u64),
    /// In `retry` under `(due, seq)`.
    Retry(u64),
    /// In the due queue: in the band of its priority (`Priority::MAX - priority`: 0 is the
    /// highest, [`NORMAL_BAND`] the `ready` list's), at this position (smaller is nearer the
    /// front).
    Ready(u8, i64),
    /// In `active` with this lease deadline.
    Active(u64),
    /// In `dead`, died at this ms.
    Dead(u64),
}

/// One job: the Redis record's header fields, its payload and its attempt history.
pub(super) struct Record {
    /// The record format it was written in (kept when it moves between states). One above
    /// what this dq reads (planted by a test, standing for a newer dq's job) is never leased,
    /// moved or deleted: the same rule as the scripts' (`lib.lua` `is_newer`).
    pub(super) format: u8,
    pub(super) place: Place,
    pub(super) attempts: u32,
    /// For retry: the next attempt; for dead: unchanged from the last wait.
    pub(super) due_ms: u64,
    pub(super) created_ms: u64,
    /// Token of the current or last lease (0 before the first).
    pub(super) token: u64,
    /// The job's expiry (Unix ms; 0: none): past it, it is never leased again.
    pub(super) expires_ms: u64,
    /// The job's priority, 0..=9 (normal before format 5).
    pub(super) priority: u8,
    /// The job's group (none before format 6).
    pub(super) group: Option<GroupName>,
    /// The batch it is a member of (none before format 7): the call that ends it notes its
    /// end in the partition's outbox.
    pub(super) batch: Option<BatchId>,
    pub(super) payload: Vec<u8>,
    pub(super) history: Vec<AttemptRecord>,
}

impl Record {
    /// The delivery of a record just leased at `now` until `deadline` (its token and attempts
    /// already set).
    pub(super) fn delivery(&self, queue: &Queue, key: JobKey, now: u64, deadline: u64) -> Delivery {
        Delivery {
            queue: queue.clone(),
            key,
            token: self.token,
            attempt: self.attempts,
            due_ms: self.due_ms,
            created_ms: self.created_ms,
            leased_ms: now,
            lease_deadline_ms: deadline,
            group: self.group.clone(),
            batch: self.batch.clone(),
            payload: self.payload.clone(),
        }
    }
}

impl Record {
    /// Whether a newer dq wrote it, in a format this one does not read. (The embedded store
    /// is one process: it reads every format this dq knows.)
    pub(super) fn is_newer(&self) -> bool {
        self.format > NEWEST_FORMAT
    }

    /// Whether the lease under `token` holds it: running, with that token, and of a format
    /// this dq reads (a newer record is never this process's lease: "not yours").
    pub(super) fn is_leased_by(&self, token: u64) -> bool {
        !self.is_newer() && self.state() == JobState::Active && self.token == token
    }

    /// Whether its expiry has come by `now`: a waiting job is never started after it.
    pub(super) fn is_expired(&self, now: u64) -> bool {
        self.expires_ms > 0 && self.expires_ms <= now
    }

    pub(super) fn state(&self) -> JobState {
        match self.place {
            Place::Scheduled(_) => JobState::Scheduled,
            Place::Retry(_) => JobState::Retry,
            Place::Ready(..) => JobState::Ready,
            Place::Active(_) => JobState::Active,
            Place::Dead(_) => JobState::Dead,
        }
    }

    pub(super) fn info(&self, key: &JobKey) -> JobInfo {
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
            expires_ms: (self.expires_ms > 0).then_some(self.expires_ms),
            priority: Priority::new(self.priority).unwrap_or_default(),
            group: self.group.clone(),
            batch: self.batch.clone(),
            history: self.history.clone(),
            progress: None,
            payload: self.payload.clone(),
        }
    }

    /// Appends one attempt to the bounded history (Lua `add_history`).
    pub(super) fn add_history(&mut self, at_ms: u64, outcome: AttemptOutcome, error: &str) {
        self.history.push(AttemptRecord {
            attempt: self.attempts,
            at_ms,
            outcome,
            error: truncate_error(error).into_owned(),
        });
        if self.history.len() > MAX_HISTORY {
            let excess = self.history.len() - MAX_HISTORY;
            self.history.drain(..excess);
        }
    }
}

/// Which sorted set a waiting job joins when it is not due yet.
#[derive(Clone, Copy)]
pub(super) enum Later {
    Scheduled,
    Retry,
}

/// The ordered structures of one partition: the exact counterparts of the Redis sorted sets and
/// the `ready` list.
#[derive(Default)]
pub(super) struct Sets {
    /// `(due, seq) → key`: seq grows with every insert, so same-ms jobs keep arrival order.
    pub(super) scheduled: BTreeMap<(u64, u64), JobKey>,
    /// Like `scheduled`, for next attempts.
    pub(super) retry: BTreeMap<(u64, u64), JobKey>,
    /// The due queue, `(band, position) → key`: the highest priority's band first, FIFO
    /// within a band from the smallest position (Lua's `ready` list is the normal band, its
    /// `pready` sorted set the others: lib.lua `push_ready`).
    pub(super) ready: BTreeMap<(u8, i64), JobKey>,
    /// Next position at the front (decreasing) and at the back (increasing).
    pub(super) ready_front: i64,
    pub(super) ready_back: i64,
    /// `(lease deadline, key)`: ties by key, as Redis orders equal scores.
    pub(super) active: BTreeSet<(u64, JobKey)>,
    /// `(died ms, key)`.
    pub(super) dead: BTreeSet<(u64, JobKey)>,
    pub(super) seq: u64,
    /// The group settings and state (`gctl`, `groups`, `gwait`, `gactive`, `gready`): a due
    /// grouped job waits in its group's queue there, not in `ready`.
    pub(super) groups: super::groups::Groups,
}

impl Sets {
    /// Removes a job from the structure that holds it (a ready job of `group` from its
    /// group's queue).
    pub(super) fn unlink(
        &mut self,
        key: &JobKey,
        place: Place,
        due_ms: u64,
        group: Option<&GroupName>,
    ) {
        match place {
            Place::Scheduled(seq) => {
                self.scheduled.remove(&(due_ms, seq));
            }
            Place::Retry(seq) => {
                self.retry.remove(&(due_ms, seq));
            }
            Place::Ready(band, pos) => match group {
                Some(g) => self.groups.unlink(g, band, pos),
                None => {
                    self.ready.remove(&(band, pos));
                }
            },
            Place::Active(deadline) => {
                self.active.remove(&(deadline, key.clone()));
            }
            Place::Dead(died) => {
                self.dead.remove(&(died, key.clone()));
            }
        }
    }

    /// Queues a job of `priority` at the back of its band (of its group's queue, for a job
    /// of `group`: lib.lua `push_ready`).
    pub(super) fn push_ready_back(
        &mut self,
        key: &JobKey,
        priority: u8,
        group: Option<&GroupName>,
    ) -> Place {
        let pos = self.next_place();
        self.push_at(key, priority, group, pos)
    }

    /// Queues a job of `priority` at the front of its band (a release), of its group's queue
    /// for a job of `group`.
    pub(super) fn push_ready_front(
        &mut self,
        key: &JobKey,
        priority: u8,
        group: Option<&GroupName>,
    ) -> Place {
        self.ready_front -= 1;
        let pos = self.ready_front;
        self.push_at(key, priority, group, pos)
    }

    /// The next place at the back (lib.lua `places`): also a group's turn at the back of the
    /// rotation.
    pub(super) fn next_place(&mut self) -> i64 {
        self.ready_back += 1;
        self.ready_back
    }

    fn push_at(
        &mut self,
        key: &JobKey,
        priority: u8,
        group: Option<&GroupName>,
        pos: i64,
    ) -> Place {
        let band = band_of(priority);
        match group {
            Some(g) => self.groups.push(g, band, pos, key),
            None => {
                self.ready.insert((band, pos), key.clone());
            }
        }
        Place::Ready(band, pos)
    }

    /// A running job of `group` left `active` (lib.lua `group_done`); whether its group got
    /// its turn back (the caller wakes a fetcher).
    pub(super) fn group_done(&mut self, group: Option<&GroupName>, key: &JobKey) -> bool {
        let Some(g) = group else { return false };
        let turn = self.ready_back + 1;
        let back = self.groups.done(g, key, turn);
        if back {
            self.ready_back = turn;
        }
        back
    }

    /// The key at the front of the due queue, if its band is at most `last_band`.
    pub(super) fn ready_front_within(&self, last_band: u8) -> Option<&JobKey> {
        self.ready
            .first_key_value()
            .filter(|((band, _), _)| *band <= last_band)
            .map(|(_, key)| key)
    }

    /// Adds a job not yet due to `later`'s set, after every job already there for that ms.
    pub(super) fn insert_later(&mut self, later: Later, key: &JobKey, due: u64) -> Place {
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
    pub(super) fn place(
        &mut self,
        later: Later,
        key: &JobKey,
        due: u64,
        now: u64,
        priority: u8,
        group: Option<&GroupName>,
    ) -> (Place, bool) {
        if due <= now {
            return (self.push_ready_back(key, priority, group), true);
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

/// The due queue's band of `priority`: 0 for the highest.
pub(super) fn band_of(priority: u8) -> u8 {
    Priority::MAX.saturating_sub(priority)
}

/// The band of normal priority: the Redis `ready` list's.
pub(super) const NORMAL_BAND: u8 = Priority::MAX - 5;

/// The counters of the Redis `stats` hash.
#[derive(Default)]
pub(super) struct Counters {
    pub(super) enqueued: u64,
    pub(super) succeeded: u64,
    pub(super) retried: u64,
    pub(super) buried: u64,
    pub(super) expired: u64,
    pub(super) expired_before_start: u64,
    pub(super) cancelled: u64,
    pub(super) succeeded_after_cancel_request: u64,
    pub(super) trimmed: u64,
    pub(super) throttles: u64,
    pub(super) kept_trimmed: u64,
    pub(super) discarded: u64,
    /// The last delivery token handed out.
    pub(super) token: u64,
}

/// Moves a job already taken out of `active` to the dead queue at `now` (Lua `bury`): state
/// dead, attempts and due time unchanged.
pub(super) fn bury(
    sets: &mut Sets,
    counters: &mut Counters,
    rec: &mut Record,
    key: &JobKey,
    now: u64,
) {
    rec.place = Place::Dead(now);
    sets.dead.insert((now, key.clone()));
    counters.buried += 1;
}

/// One partition of a topic: the counterpart of one Redis hash tag.
#[derive(Default)]
pub(super) struct Partition {
    pub(super) jobs: HashMap<JobKey, Record>,
    pub(super) sets: Sets,
    pub(super) counters: Counters,
    pub(super) wake: Arc<Notify>,
    pub(super) receipts: Receipts,
    pub(super) fetch_receipts: FetchReceipts,
    pub(super) control: Control,
    pub(super) kept: Kept,
    /// What running jobs reported (the `progress` hash): cleared at every end of a run.
    pub(super) progress: HashMap<JobKey, JobProgress>,
    /// The partition's events (the `events` stream), when it records them.
    pub(super) events: super::events::EventLog,
    /// The key windows (`uniq`, `uniq_at`).
    pub(super) windows: super::uniq::Windows,
    /// The ends of batch members, for the relay (the `outbox` stream).
    pub(super) outbox: Outbox,
}

impl Partition {
    /// Refuses, before any write, an operation on a job whose record is of a newer format
    /// (the scripts' `newer_error`).
    pub(super) fn check_not_newer<'a>(
        &self,
        keys: impl IntoIterator<Item = &'a JobKey>,
    ) -> Result<()> {
        for key in keys {
            if let Some(rec) = self.jobs.get(key).filter(|r| r.is_newer()) {
                return Err(Error::NewerFormat {
                    format: rec.format,
                    reads: NEWEST_FORMAT,
                });
            }
        }
        Ok(())
    }
}

/// The partition's control settings (the Redis `control` hash).
#[derive(Default)]
pub(super) struct Control {
    pub(super) paused: bool,
    /// This partition's share: n jobs per ms.
    pub(super) rate: Option<Rate>,
    /// GCRA theoretical arrival time (ms).
    pub(super) tat: f64,
    pub(super) conc: Option<u32>,
    pub(super) until: Option<u64>,
    /// Running jobs whose cancel was requested → the token at the time.
    pub(super) cancels: HashMap<JobKey, u64>,
    /// Which finished jobs the partition keeps (`max_kept`: its share).
    pub(super) retention: Option<Retention>,
    /// Whether the partition records events (`max_kept`: its share).
    pub(super) events: Option<crate::events::EventsPolicy>,
    /// The furthest from now a due time may be (ms; `max_delay`).
    pub(super) max_delay: Option<u64>,
}

impl Control {
    pub(super) fn exists(&self) -> bool {
        self.paused
            || self.rate.is_some()
            || self.conc.is_some()
            || self.until.is_some()
            || self.retention.is_some()
            || self.events.is_some()
            || self.max_delay.is_some()
    }

    /// The rate's emission interval and burst tolerance (ms), as `fetch.lua` computes them.
    pub(super) fn gcra(rate: Rate) -> (f64, f64) {
        let t = rate.per_ms() as f64 / f64::from(rate.count);
        (t, (50.0 - t).max(0.0))
    }
}

impl Partition {
    /// Pushes one wake-up token; at most one is ever stored (like the Redis `wake` list).
    pub(super) fn wake(&self) {
        self.wake.notify_one();
    }

    /// Removes at most `limit` dead jobs older than the retention or beyond the cap, counting
    /// them in `trimmed` (Lua `trim_dead`).
    pub(super) fn trim_dead(&mut self, now: u64, cap: u64, retention_ms: u64, limit: usize) -> u64 {
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
}
