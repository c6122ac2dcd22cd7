//! Batches: many jobs (any topics, any due times) that end as one, with a callback job
//! enqueued exactly once when every member has ended (ARCHITECTURE.md §16).
//!
//! A batch is kept in a slot of its own (`<ns>:{batch:<id>}`, one hash: its settings, its
//! counts, one field per member). A member's job carries the batch's id in its record (format
//! 7, [`BATCH_FORMAT`](crate::format::BATCH_FORMAT)); the script that ends it notes the end in
//! its partition's outbox, and the workers' relay applies the notes to the batch — each
//! member counted once, the callback enqueued once under the key [`BatchId::callback_key`]
//! — before it deletes them. The client's side is [`crate::client::BatchHandle`].

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::names::{JobKey, Topic};

/// Longest batch id, in bytes.
pub const MAX_BATCH_ID_LEN: usize = 128;

/// How long a finished batch (its counts and members) is kept after its callback was
/// enqueued, by default; also the window in which its callback's key refuses a second job.
pub const DEFAULT_BATCH_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// How long a member may stay reserved (its add reserved it; its job was never seen) before
/// the relay looks its job up and, finding none, ends it as [`MemberState::NeverEnqueued`].
pub const RESERVATION_TIMEOUT: Duration = Duration::from_secs(600);

/// How deep flows may nest: a parent whose children are parents, to this many levels.
pub const MAX_FLOW_DEPTH: usize = 8;

/// A validated batch id: 1 to [`MAX_BATCH_ID_LEN`] bytes of ASCII letters, digits and
/// `.`, `_`, `:`, `-` (it is part of a Redis key's hash tag and of the callback's key).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct BatchId(String);

impl BatchId {
    /// Validates `id`; [`Error::InvalidBatch`] says why one is refused.
    pub fn new(id: impl Into<String>) -> Result<BatchId> {
        let id = id.into();
        let reason = if id.is_empty() {
            Some("must not be empty".to_owned())
        } else if id.len() > MAX_BATCH_ID_LEN {
            Some(format!("longer than {MAX_BATCH_ID_LEN} bytes"))
        } else {
            id.char_indices()
                .find(|(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')))
                .map(|(at, c)| {
                    format!(
                        "only ASCII letters, digits and . _ : - are allowed; found {c:?} at byte {at}"
                    )
                })
        };
        match reason {
            Some(reason) => Err(Error::InvalidBatch { id, reason }),
            None => Ok(BatchId(id)),
        }
    }

    /// A fresh, unique id that sorts by creation time.
    pub fn generate() -> BatchId {
        BatchId(JobKey::generate().as_str().to_owned())
    }

    /// An id read back from the store (checked when it was stored).
    pub(crate) fn stored(id: String) -> BatchId {
        BatchId(id)
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key of the batch's callback job in its topic: `batch:<id>`. The relay enqueues the
    /// callback under it with a `unique_for` window as long as the batch's retention, so a
    /// relay that repeats its work finds the key taken and writes no second callback.
    pub fn callback_key(&self) -> JobKey {
        JobKey::stored(format!("batch:{}", self.0)).expect("a batch id makes a valid key")
    }

    /// The id of the batch of a flow parent's children: `flow.<topic>.<parent key>`, or, for
    /// a key with other characters than a batch id takes (or too long), `flow.<topic>.` and a
    /// 64-bit hash of the key in hex (`flow.` and a hash of both, for a long topic).
    pub fn of_flow(topic: &Topic, key: &JobKey) -> BatchId {
        let plain = format!("flow.{}.{}", topic.as_str(), key.as_str());
        if let Ok(id) = BatchId::new(plain) {
            return id;
        }
        let fnv = |s: &str| {
            s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            })
        };
        BatchId::new(format!(
            "flow.{}.{:016x}",
            topic.as_str(),
            fnv(key.as_str())
        ))
        .unwrap_or_else(|_| {
            BatchId(format!(
                "flow.{:016x}",
                fnv(&format!("{topic}#{}", key.as_str()))
            ))
        })
    }
}

impl fmt::Display for BatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for BatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// One member of a batch: a job, by topic and key. Written `<topic>#<key>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberId {
    /// The member's topic.
    pub topic: Topic,
    /// Its key in that topic.
    pub key: JobKey,
}

impl MemberId {
    /// The member `key` of `topic`.
    pub fn new(topic: Topic, key: JobKey) -> MemberId {
        MemberId { topic, key }
    }

    /// The id as stored: `<topic>#<key>` (a topic name holds no `#`).
    pub fn wire(&self) -> String {
        format!("{}#{}", self.topic.as_str(), self.key.as_str())
    }

    /// Reads a stored id back.
    pub fn from_wire(s: &str) -> Result<MemberId> {
        let (topic, key) = s
            .split_once('#')
            .ok_or_else(|| Error::Protocol(format!("batch member {s:?}: no '#'")))?;
        Ok(MemberId {
            topic: Topic::new(topic)?,
            key: JobKey::stored(key)?,
        })
    }
}

impl Serialize for MemberId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.wire())
    }
}

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.topic.as_str(), self.key.as_str())
    }
}

/// Where a member is: reserved, enqueued, or how it ended. A member only moves forward
/// (reserved → enqueued → an end), and its first end is the one counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum MemberState {
    /// Its add reserved it; its job has not been seen yet.
    Reserved,
    /// Its job was stored.
    Enqueued,
    /// Its job succeeded.
    Succeeded,
    /// Its job died (retries spent, a permanent error, a lease expired past its retries).
    Dead,
    /// Its job was cancelled.
    Cancelled,
    /// Its job expired before it started.
    Expired,
    /// A retry function discarded its job.
    Discarded,
    /// Its key was taken by a job outside the batch (or refused by the key's window): no
    /// job of the batch was stored.
    Refused,
    /// Reserved longer than [`RESERVATION_TIMEOUT`] with no job: its producer died before
    /// storing it.
    NeverEnqueued,
}

impl MemberState {
    /// Every state, in the order counts are listed.
    pub const ALL: [MemberState; 9] = [
        MemberState::Reserved,
        MemberState::Enqueued,
        MemberState::Succeeded,
        MemberState::Dead,
        MemberState::Cancelled,
        MemberState::Expired,
        MemberState::Discarded,
        MemberState::Refused,
        MemberState::NeverEnqueued,
    ];

    /// The letter it is stored as (an outbox note's outcome, a member's field value).
    pub fn code(self) -> u8 {
        match self {
            MemberState::Reserved => b'p',
            MemberState::Enqueued => b'a',
            MemberState::Succeeded => b's',
            MemberState::Dead => b'd',
            MemberState::Cancelled => b'c',
            MemberState::Expired => b'e',
            MemberState::Discarded => b'x',
            MemberState::Refused => b'r',
            MemberState::NeverEnqueued => b'n',
        }
    }

    /// The state of a stored letter.
    pub fn from_code(code: u8) -> Option<MemberState> {
        MemberState::ALL.into_iter().find(|s| s.code() == code)
    }

    /// Whether the member has ended (every state but reserved and enqueued).
    pub fn is_end(self) -> bool {
        !matches!(self, MemberState::Reserved | MemberState::Enqueued)
    }

    /// Whether it ended other than by succeeding.
    pub fn is_failure(self) -> bool {
        self.is_end() && self != MemberState::Succeeded
    }

    /// The state's name (`succeeded`, `never_enqueued`, …).
    pub fn name(self) -> &'static str {
        match self {
            MemberState::Reserved => "reserved",
            MemberState::Enqueued => "enqueued",
            MemberState::Succeeded => "succeeded",
            MemberState::Dead => "dead",
            MemberState::Cancelled => "cancelled",
            MemberState::Expired => "expired",
            MemberState::Discarded => "discarded",
            MemberState::Refused => "refused",
            MemberState::NeverEnqueued => "never_enqueued",
        }
    }
}

impl fmt::Display for MemberState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// When a batch is complete, given how its members end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Complete once every member has ended, whatever the outcomes (the default). For a flow:
    /// the parent runs then and reads its children's outcomes.
    #[default]
    WaitAll,
    /// Complete at the first member that ends other than by succeeding (dead, cancelled,
    /// expired, discarded, refused, never enqueued), or once all succeeded. For a flow: the
    /// parent is failed at the first failed child — moved to the dead queue without running,
    /// the reason in its history (requeue it from there to run it after all) — while the
    /// other children go on; a flow above it counts it dead.
    FailFast,
    /// Complete once every member has ended; members that failed are not held against the
    /// batch. For a flow: the parent runs, as with `WaitAll`; the difference is what
    /// [`BatchInfo::failed`] reports (0).
    Ignore,
}

impl FailurePolicy {
    /// The letter it is stored as.
    pub fn code(self) -> u8 {
        match self {
            FailurePolicy::WaitAll => b'w',
            FailurePolicy::FailFast => b'f',
            FailurePolicy::Ignore => b'i',
        }
    }

    /// The policy of a stored letter.
    pub fn from_code(code: u8) -> Option<FailurePolicy> {
        [
            FailurePolicy::WaitAll,
            FailurePolicy::FailFast,
            FailurePolicy::Ignore,
        ]
        .into_iter()
        .find(|p| p.code() == code)
    }
}

/// What happens once a batch is complete.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BatchThen {
    /// Nothing: the batch only reports its progress.
    Nothing,
    /// Enqueue this job, due now, under the key [`BatchId::callback_key`].
    Callback {
        /// The callback's topic.
        topic: Topic,
        /// Its payload (MessagePack).
        payload: Vec<u8>,
    },
    /// Release the parent of a flow: the job `key` of `topic`, waiting for its children, is
    /// made due now (or buried, under [`FailurePolicy::FailFast`] with a child failed).
    Release {
        /// The parent's topic.
        topic: Topic,
        /// The parent's key.
        key: JobKey,
    },
}

/// A new batch, as stored by [`Batches::batch_open`](crate::store::batches::Batches::batch_open).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchSpec {
    /// What happens once it is complete.
    pub then: BatchThen,
    /// When it is complete.
    pub policy: FailurePolicy,
    /// How long it is kept once done (also its callback key's window).
    pub retention: Duration,
}

/// How far a batch is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BatchStatus {
    /// Members may be added.
    Open,
    /// Closed to new members; some have not ended.
    Closed,
    /// Complete ([`BatchInfo::is_complete`]); its callback is not enqueued yet.
    Complete,
    /// Complete and its callback enqueued (or its parent released): nothing more happens.
    Done,
}

impl fmt::Display for BatchStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BatchStatus::Open => "open",
            BatchStatus::Closed => "closed",
            BatchStatus::Complete => "complete",
            BatchStatus::Done => "done",
        })
    }
}

/// How many members are in each state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BatchCounts {
    /// Reserved, not seen enqueued yet.
    pub reserved: u64,
    /// Enqueued, not ended.
    pub enqueued: u64,
    /// Succeeded.
    pub succeeded: u64,
    /// Dead.
    pub dead: u64,
    /// Cancelled.
    pub cancelled: u64,
    /// Expired before they started.
    pub expired: u64,
    /// Discarded by a retry function.
    pub discarded: u64,
    /// Refused at their add (key taken by another job, or refused by its window).
    pub refused: u64,
    /// Never enqueued (their producer died after reserving them).
    pub never_enqueued: u64,
}

impl BatchCounts {
    /// The count of `state`.
    pub fn get(&self, state: MemberState) -> u64 {
        match state {
            MemberState::Reserved => self.reserved,
            MemberState::Enqueued => self.enqueued,
            MemberState::Succeeded => self.succeeded,
            MemberState::Dead => self.dead,
            MemberState::Cancelled => self.cancelled,
            MemberState::Expired => self.expired,
            MemberState::Discarded => self.discarded,
            MemberState::Refused => self.refused,
            MemberState::NeverEnqueued => self.never_enqueued,
        }
    }

    /// Sets the count of `state`.
    pub fn set(&mut self, state: MemberState, n: u64) {
        let slot = match state {
            MemberState::Reserved => &mut self.reserved,
            MemberState::Enqueued => &mut self.enqueued,
            MemberState::Succeeded => &mut self.succeeded,
            MemberState::Dead => &mut self.dead,
            MemberState::Cancelled => &mut self.cancelled,
            MemberState::Expired => &mut self.expired,
            MemberState::Discarded => &mut self.discarded,
            MemberState::Refused => &mut self.refused,
            MemberState::NeverEnqueued => &mut self.never_enqueued,
        };
        *slot = n;
    }

    /// Every member.
    pub fn total(&self) -> u64 {
        MemberState::ALL.iter().map(|s| self.get(*s)).sum()
    }

    /// Members that have not ended.
    pub fn pending(&self) -> u64 {
        self.reserved + self.enqueued
    }

    /// Members that ended other than by succeeding.
    pub fn failures(&self) -> u64 {
        self.total() - self.pending() - self.succeeded
    }
}

/// A batch as stored: its settings, progress and counts.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchInfo {
    /// Its id.
    pub id: BatchId,
    /// Whether members may still be added.
    pub closed: bool,
    /// Whether its callback was enqueued (or its parent released).
    pub done: bool,
    /// When it was opened (store ms).
    pub created_ms: u64,
    /// When it was closed (store ms; 0 while open).
    pub closed_ms: u64,
    /// When it was marked done (store ms; 0 before).
    pub done_ms: u64,
    /// When a member was last reserved (store ms).
    pub reserved_ms: u64,
    /// What happens once it is complete.
    pub then: BatchThen,
    /// When it is complete.
    pub policy: FailurePolicy,
    /// How long it is kept once done.
    pub retention: Duration,
    /// Its members by state.
    pub counts: BatchCounts,
}

impl BatchInfo {
    /// Whether it is complete: closed with every member ended, or (under
    /// [`FailurePolicy::FailFast`]) a member failed. Once complete it stays so (members only
    /// move forward, and a closed batch takes none).
    pub fn is_complete(&self) -> bool {
        if self.policy == FailurePolicy::FailFast && self.counts.failures() > 0 {
            return true;
        }
        self.closed && self.counts.pending() == 0
    }

    /// How far it is.
    pub fn status(&self) -> BatchStatus {
        if self.done {
            BatchStatus::Done
        } else if self.is_complete() {
            BatchStatus::Complete
        } else if self.closed {
            BatchStatus::Closed
        } else {
            BatchStatus::Open
        }
    }

    /// Members that ended other than by succeeding, as the policy counts them (0 under
    /// [`FailurePolicy::Ignore`]).
    pub fn failed(&self) -> u64 {
        match self.policy {
            FailurePolicy::Ignore => 0,
            _ => self.counts.failures(),
        }
    }
}

/// A page of a batch's members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberPage {
    /// The members read, each with its state.
    pub members: Vec<(MemberId, MemberState)>,
    /// Where the next page starts; `None` once every member was listed.
    pub next: Option<u64>,
}

/// A batch's place in the namespace's index of batches not done: when it was opened, then its
/// id (the index's order). A listing resumes strictly after an entry, whether or not that
/// batch is still listed.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IndexEntry {
    /// When the batch was opened (Unix ms, by the store's clock).
    pub opened_ms: u64,
    /// The batch.
    pub id: BatchId,
}

/// What a reservation found and left: the batch after it, and each member's state before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// The batch as it is after the reservation.
    pub info: BatchInfo,
    /// Each member named, in order: its state before this reservation (`None`: it was not
    /// in the batch, and is now reserved). An add enqueues only the members that were not
    /// there or still reserved: one already enqueued or ended is never enqueued again.
    pub before: Vec<Option<MemberState>>,
}

/// One end noted in a partition's outbox, for the relay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboxNote {
    /// The note's id in the outbox (deleted with it once applied).
    pub id: String,
    /// The batch the member is in.
    pub batch: BatchId,
    /// The member's key (its topic is the outbox's).
    pub key: JobKey,
    /// How it ended.
    pub outcome: MemberState,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked() {
        assert!(BatchId::new("order-17:items.v2_x").is_ok());
        for bad in ["", "a b", "a{b}", "a#b", "ü", &"x".repeat(129)] {
            assert!(
                matches!(BatchId::new(bad), Err(Error::InvalidBatch { .. })),
                "{bad:?}"
            );
        }
        let g = BatchId::generate();
        assert!(BatchId::new(g.as_str()).is_ok());
        assert_eq!(
            BatchId::new("o-1").unwrap().callback_key().as_str(),
            "batch:o-1"
        );
    }

    #[test]
    fn states_round_trip_and_complete_by_policy() {
        for s in MemberState::ALL {
            assert_eq!(MemberState::from_code(s.code()), Some(s));
        }
        let mut info = BatchInfo {
            id: BatchId::new("b").unwrap(),
            closed: false,
            done: false,
            created_ms: 1,
            closed_ms: 0,
            done_ms: 0,
            reserved_ms: 1,
            then: BatchThen::Nothing,
            policy: FailurePolicy::WaitAll,
            retention: DEFAULT_BATCH_RETENTION,
            counts: BatchCounts {
                enqueued: 1,
                dead: 1,
                ..BatchCounts::default()
            },
        };
        assert_eq!(info.status(), BatchStatus::Open);
        info.closed = true;
        assert_eq!(info.status(), BatchStatus::Closed);
        info.policy = FailurePolicy::FailFast;
        assert_eq!(info.status(), BatchStatus::Complete);
        info.policy = FailurePolicy::WaitAll;
        info.counts.enqueued = 0;
        info.counts.succeeded = 1;
        assert!(info.is_complete());
        assert_eq!(info.failed(), 1);
        info.policy = FailurePolicy::Ignore;
        assert_eq!(info.failed(), 0);
    }
}
