//! The batches role in memory: the mirror of `batch.lua` (one record per batch: its settings,
//! when it was opened, closed, last reserved into and marked done, its members by state and
//! their counts), of the namespace's index of batches not done (the `<ns>:batches` sorted
//! set: by when each was opened, then by id) and of the relay's reads and deletes of a
//! partition's outbox (`outbox.rs`, written by the calls that end members).
//!
//! A member moves forward only (reserved → enqueued → its first end), each move counted once.
//! A batch marked done is kept for its retention by the store's clock, then it is gone (the
//! Redis key's `PEXPIRE`): every call treats it as never stored from then on.

use std::collections::{BTreeSet, HashMap};

use async_trait::async_trait;

use super::MemoryStore;
use super::clock::ms;
use crate::batch::{
    BatchCounts, BatchId, BatchInfo, BatchSpec, IndexEntry, MemberId, MemberPage, MemberState,
    OutboxNote, Reservation,
};
use crate::error::{Error, Result};
use crate::job::Queue;
use crate::store::batches::Batches;

/// How far a state is: a member moves only to a state further on (`batch.lua`'s `RANK`).
fn rank(state: MemberState) -> u8 {
    match state {
        MemberState::Reserved => 0,
        MemberState::Enqueued => 1,
        _ => 2,
    }
}

/// One batch's record (the `<ns>:{batch:<id>}` hash).
struct Batch {
    spec: BatchSpec,
    /// The retention as stored: whole ms, at least 1.
    retention_ms: u64,
    created_ms: u64,
    closed_ms: Option<u64>,
    done_ms: Option<u64>,
    reserved_ms: u64,
    counts: BatchCounts,
    /// The members in the order they were first written (a listing's cursor is a position
    /// here: members are never removed, so a page skips none).
    members: Vec<(MemberId, MemberState)>,
    at: HashMap<MemberId, usize>,
}

impl Batch {
    fn info(&self, id: &BatchId) -> BatchInfo {
        BatchInfo {
            id: id.clone(),
            closed: self.closed_ms.is_some(),
            done: self.done_ms.is_some(),
            created_ms: self.created_ms,
            closed_ms: self.closed_ms.unwrap_or(0),
            done_ms: self.done_ms.unwrap_or(0),
            reserved_ms: self.reserved_ms,
            then: self.spec.then.clone(),
            policy: self.spec.policy,
            retention: std::time::Duration::from_millis(self.retention_ms),
            counts: self.counts,
        }
    }

    /// Writes `member` in `state` (a new one, or over its old state), counting the move.
    fn set(&mut self, member: &MemberId, state: MemberState) {
        match self.at.get(member) {
            Some(&i) => {
                let old = self.members[i].1;
                self.counts.set(old, self.counts.get(old) - 1);
                self.members[i].1 = state;
            }
            None => {
                self.at.insert(member.clone(), self.members.len());
                self.members.push((member.clone(), state));
            }
        }
        self.counts.set(state, self.counts.get(state) + 1);
    }

    fn state_of(&self, member: &MemberId) -> Option<MemberState> {
        self.at.get(member).map(|&i| self.members[i].1)
    }
}

/// The store's batches: their records, and the index of those not done.
#[derive(Default)]
pub(super) struct Book {
    batches: HashMap<BatchId, Batch>,
    /// `(opened ms, id)`: equal times by id, as Redis orders equal scores.
    index: BTreeSet<(u64, BatchId)>,
    /// Each indexed id's time in `index`.
    indexed: HashMap<BatchId, u64>,
}

impl Book {
    /// Whether no batch was ever stored nor indexed (or all are gone).
    pub(super) fn is_empty(&self) -> bool {
        self.batches.is_empty() && self.index.is_empty()
    }

    /// Batch `id` as stored at `now`: one done past its retention is dropped first.
    fn live(&mut self, id: &BatchId, now: u64) -> Option<&mut Batch> {
        let gone = self.batches.get(id).is_some_and(|b| {
            b.done_ms
                .is_some_and(|d| now > d.saturating_add(b.retention_ms))
        });
        if gone {
            self.batches.remove(id);
        }
        self.batches.get_mut(id)
    }

    /// Like [`Book::live`], for the calls that refuse an unknown batch.
    fn must(&mut self, id: &BatchId, now: u64) -> Result<&mut Batch> {
        self.live(id, now)
            .ok_or_else(|| Error::BatchNotFound(id.to_string()))
    }

    /// Lists `id` opened at `at` among the batches not done, unless it is listed (`ZADD NX`).
    fn index(&mut self, id: &BatchId, at: u64) {
        if !self.indexed.contains_key(id) {
            self.indexed.insert(id.clone(), at);
            self.index.insert((at, id.clone()));
        }
    }

    /// Takes `id` out of the index (`ZREM`).
    fn forget(&mut self, id: &BatchId) {
        if let Some(at) = self.indexed.remove(id) {
            self.index.remove(&(at, id.clone()));
        }
    }

    /// `batch.lua open` and the index's `ZADD NX`.
    fn open(&mut self, id: &BatchId, spec: &BatchSpec, now: u64) -> (bool, BatchInfo) {
        let (created, info) = match self.live(id, now) {
            Some(b) => (false, b.info(id)),
            None => {
                let b = Batch {
                    spec: spec.clone(),
                    retention_ms: ms(spec.retention).max(1),
                    created_ms: now,
                    closed_ms: None,
                    done_ms: None,
                    reserved_ms: now,
                    counts: BatchCounts::default(),
                    members: Vec::new(),
                    at: HashMap::new(),
                };
                let info = b.info(id);
                self.batches.insert(id.clone(), b);
                (true, info)
            }
        };
        if !info.done {
            self.index(id, info.created_ms);
        }
        (created, info)
    }

    /// `batch_grow.lua reserve`: each member not there yet is written reserved; each one's
    /// state before (a member named twice: `None` both times).
    fn reserve(&mut self, id: &BatchId, members: &[MemberId], now: u64) -> Result<Reservation> {
        let b = self.must(id, now)?;
        if b.closed_ms.is_some() {
            return Err(Error::BatchClosed(id.to_string()));
        }
        let before: Vec<_> = members.iter().map(|m| b.state_of(m)).collect();
        for (m, was) in members.iter().zip(&before) {
            if was.is_none() && b.state_of(m).is_none() {
                b.set(m, MemberState::Reserved);
            }
        }
        b.reserved_ms = now;
        Ok(Reservation {
            info: b.info(id),
            before,
        })
    }

    /// `batch.lua apply`: members move forward only; one not there is added.
    fn apply(
        &mut self,
        id: &BatchId,
        notes: &[(MemberId, MemberState)],
        now: u64,
    ) -> Option<BatchInfo> {
        let b = self.live(id, now)?;
        for (m, state) in notes {
            if b.state_of(m).is_none_or(|old| rank(*state) > rank(old)) {
                b.set(m, *state);
            }
        }
        Some(b.info(id))
    }

    /// `batch.lua close` (`done`: `batch.lua done`, which closes too and starts the
    /// retention, then the index's `ZREM`).
    fn close(&mut self, id: &BatchId, done: bool, now: u64) -> Result<BatchInfo> {
        let b = self.must(id, now)?;
        if done {
            if b.done_ms.is_none() {
                b.done_ms = Some(now);
                b.closed_ms.get_or_insert(now);
            }
        } else {
            b.closed_ms.get_or_insert(now);
        }
        let info = b.info(id);
        if done {
            self.forget(id);
        }
        Ok(info)
    }

    /// `batch.lua members`: up to `limit` members from position `cursor`.
    fn members(&mut self, id: &BatchId, cursor: u64, limit: usize, now: u64) -> MemberPage {
        let Some(b) = self.live(id, now) else {
            return MemberPage {
                members: Vec::new(),
                next: None,
            };
        };
        let from = usize::try_from(cursor).unwrap_or(usize::MAX);
        let members: Vec<_> = b
            .members
            .iter()
            .skip(from)
            .take(limit.max(1))
            .cloned()
            .collect();
        let end = from.saturating_add(members.len());
        MemberPage {
            members,
            next: (end < b.members.len()).then_some(end as u64),
        }
    }

    /// The index strictly after `after` (listed or not), oldest first.
    fn open_batches(&self, after: Option<&IndexEntry>, limit: usize) -> Vec<IndexEntry> {
        let from = match after {
            Some(a) => std::ops::Bound::Excluded((a.opened_ms, a.id.clone())),
            None => std::ops::Bound::Unbounded,
        };
        self.index
            .range((from, std::ops::Bound::Unbounded))
            .take(limit.max(1))
            .map(|(ms, id)| IndexEntry {
                opened_ms: *ms,
                id: id.clone(),
            })
            .collect()
    }

    /// Every broken invariant of the batches (for the store's audit): a count that is not
    /// its members', a member listed twice.
    pub(super) fn violations(&self, report: &mut dyn FnMut(String)) {
        for (id, b) in &self.batches {
            let mut tally = BatchCounts::default();
            for (_, s) in &b.members {
                tally.set(*s, tally.get(*s) + 1);
            }
            if tally != b.counts {
                report(format!(
                    "batch {id}: counts {:?}, members {tally:?}",
                    b.counts
                ));
            }
            if b.at.len() != b.members.len() {
                report(format!("batch {id}: a member listed twice"));
            }
        }
    }
}

#[async_trait]
impl Batches for MemoryStore {
    async fn batch_open(&self, id: &BatchId, spec: &BatchSpec) -> Result<(bool, BatchInfo)> {
        let mut book = self.lock_batches();
        Ok(book.open(id, spec, self.clock.now_ms()))
    }

    async fn batch_reserve(&self, id: &BatchId, members: &[MemberId]) -> Result<Reservation> {
        let mut book = self.lock_batches();
        book.reserve(id, members, self.clock.now_ms())
    }

    async fn batch_apply(
        &self,
        id: &BatchId,
        notes: &[(MemberId, MemberState)],
    ) -> Result<Option<BatchInfo>> {
        let mut book = self.lock_batches();
        Ok(book.apply(id, notes, self.clock.now_ms()))
    }

    async fn batch_close(&self, id: &BatchId) -> Result<BatchInfo> {
        let mut book = self.lock_batches();
        book.close(id, false, self.clock.now_ms())
    }

    async fn batch_mark_done(&self, id: &BatchId) -> Result<BatchInfo> {
        let mut book = self.lock_batches();
        book.close(id, true, self.clock.now_ms())
    }

    async fn batch(&self, id: &BatchId) -> Result<Option<BatchInfo>> {
        let mut book = self.lock_batches();
        let now = self.clock.now_ms();
        Ok(book.live(id, now).map(|b| b.info(id)))
    }

    async fn batch_members(&self, id: &BatchId, cursor: u64, limit: usize) -> Result<MemberPage> {
        let mut book = self.lock_batches();
        Ok(book.members(id, cursor, limit, self.clock.now_ms()))
    }

    async fn open_batches(
        &self,
        after: Option<&IndexEntry>,
        limit: usize,
    ) -> Result<Vec<IndexEntry>> {
        Ok(self.lock_batches().open_batches(after, limit))
    }

    async fn open_batch_count(&self) -> Result<u64> {
        Ok(self.lock_batches().index.len() as u64)
    }

    async fn forget_batch(&self, id: &BatchId) -> Result<()> {
        self.lock_batches().forget(id);
        Ok(())
    }

    async fn outbox(
        &self,
        queue: &Queue,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<OutboxNote>> {
        let after = after.map(super::outbox::parse_id).transpose()?;
        Ok(self.read(queue, |p, _| {
            p.map(|p| p.outbox.read(after, limit)).unwrap_or_default()
        }))
    }

    async fn outbox_trim(&self, queue: &Queue, through: &str) -> Result<()> {
        // (a trim never makes a partition)
        match self.lock().get_mut(queue) {
            Some(p) => p.outbox.trim(through),
            None => super::outbox::check_ids(&[through.to_owned()]),
        }
    }

    async fn outbox_done(&self, queue: &Queue, ids: &[String]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        // (a delete never makes a partition)
        match self.lock().get_mut(queue) {
            Some(p) => p.outbox.delete(ids),
            None => super::outbox::check_ids(ids),
        }
    }
}
