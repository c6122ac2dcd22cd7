//! Inspection: a job as an operator reads it, and listing the jobs of one state page by page.
//!
//! [`JobView`] is [`JobInfo`] with the payload decoded and the times as [`SystemTime`]s; the
//! typed client calls return it. [`Page`], [`Cursor`] and [`JobPage`] page through the jobs of
//! one state across every partition of a topic, merged in one order
//! ([`TopicClient::list`](crate::client::TopicClient::list)). [`ListFrom`] and [`ListChunk`]
//! are the store's side of that: one partition, one bounded step.

use std::time::SystemTime;

use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::finished::FinishedAs;
use crate::job::{AttemptOutcome, AttemptRecord, JobInfo, JobState, from_unix_ms};
use crate::names::JobKey;

/// Most jobs one page may hold ([`Page::first`]): one page is one bounded call per partition.
pub const MAX_PAGE: usize = 1000;

/// Everything known about one job, decoded: the typed view of [`JobInfo`].
///
/// Times are wall-clock times on the store's clock (Redis `TIME` for Redis). A payload that
/// does not decode as `P` (the job was enqueued by other code, or its type changed since)
/// does not fail the call that read it: [`JobView::payload`] holds the decoding error and
/// [`JobView::raw_payload`] the bytes, so such a job can still be inspected, purged or
/// replaced.
#[derive(Debug)]
pub struct JobView<P> {
    /// Its key.
    pub key: JobKey,
    /// Its state.
    pub state: JobState,
    /// When it is (or was) due; for a job in `retry`, its next attempt.
    pub due: SystemTime,
    /// When it was enqueued (or last replaced).
    pub created: SystemTime,
    /// Attempts started so far.
    pub attempts: u32,
    /// For a running job: when its lease runs out unless the worker extends it.
    pub lease_deadline: Option<SystemTime>,
    /// For a dead job: when it went to the dead queue.
    pub died: Option<SystemTime>,
    /// When it is dropped unless it has started ([`Expiry`](crate::Expiry)); `None`: never.
    pub expires: Option<SystemTime>,
    /// Its priority among the due jobs of its partition.
    pub priority: crate::job::Priority,
    /// Its group, if it has one ([`crate::group`]).
    pub group: Option<crate::group::GroupName>,
    /// Its failed (or deferred) attempts, oldest first (at most
    /// [`MAX_HISTORY`](crate::job::MAX_HISTORY)).
    pub history: Vec<AttemptView>,
    /// For a running job: what its handler reported in this run (`ctx.progress`, `ctx.log`).
    pub progress: Option<crate::progress::JobProgress>,
    /// The payload, or why it does not decode as `P` ([`Error::Decode`]).
    pub payload: std::result::Result<P, Error>,
    /// The payload as stored (MessagePack), decodable or not.
    pub raw_payload: Vec<u8>,
}

/// One entry of a job's attempt history, with its time as a [`SystemTime`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptView {
    /// Which attempt (from 1).
    pub attempt: u32,
    /// When it ended.
    pub at: SystemTime,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// The error text (at most [`MAX_ERROR_LEN`](crate::job::MAX_ERROR_LEN) bytes).
    pub error: String,
}

impl From<AttemptRecord> for AttemptView {
    fn from(a: AttemptRecord) -> Self {
        AttemptView {
            attempt: a.attempt,
            at: from_unix_ms(a.at_ms),
            outcome: a.outcome,
            error: a.error,
        }
    }
}

impl JobInfo {
    /// This job with its payload decoded as `P` and its times as [`SystemTime`]s. Never fails:
    /// a payload that does not decode is kept as the error in [`JobView::payload`].
    pub fn decode<P: DeserializeOwned>(self) -> JobView<P> {
        JobView {
            payload: crate::payload::decode::<P>(&self.payload),
            key: self.key,
            state: self.state,
            due: from_unix_ms(self.due_ms),
            created: from_unix_ms(self.created_ms),
            attempts: self.attempts,
            lease_deadline: self.lease_deadline_ms.map(from_unix_ms),
            died: self.died_ms.map(from_unix_ms),
            expires: self.expires_ms.map(from_unix_ms),
            priority: self.priority,
            group: self.group.clone(),
            history: self.history.into_iter().map(AttemptView::from).collect(),
            progress: self.progress,
            raw_payload: self.payload,
        }
    }
}

/// Which page of a listing to read: the first, or the one after a [`Cursor`], of at most
/// `limit` jobs (1 to [`MAX_PAGE`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    /// Where the page starts: `None` for the first page.
    pub after: Option<Cursor>,
    /// Most jobs on the page.
    pub limit: usize,
}

impl Page {
    /// The first page, of at most `limit` jobs.
    pub fn first(limit: usize) -> Page {
        Page { after: None, limit }
    }

    /// The page after `cursor` (a previous page's [`JobPage::next`]), of at most `limit` jobs.
    pub fn after(cursor: Cursor, limit: usize) -> Page {
        Page {
            after: Some(cursor),
            limit,
        }
    }

    /// Refuses a limit of 0 or above [`MAX_PAGE`], and a cursor of another state's listing.
    pub(crate) fn check(&self, state: JobState) -> Result<()> {
        self.check_listing(Some(state), state.as_str())
    }

    /// [`Page::check`] for a listing of kept jobs.
    pub(crate) fn check_finished(&self, outcome: FinishedAs) -> Result<()> {
        self.check_listing(None, outcome.as_str())?;
        match &self.after {
            Some(c) if c.finished() != Some(outcome) => Err(Error::InvalidConfig(format!(
                "a cursor of the {} listing cannot page the {outcome} listing",
                c.listing()
            ))),
            _ => Ok(()),
        }
    }

    fn check_listing(&self, state: Option<JobState>, name: &str) -> Result<()> {
        if self.limit == 0 || self.limit > MAX_PAGE {
            return Err(Error::InvalidConfig(format!(
                "page limit {} is not within 1..={MAX_PAGE}",
                self.limit
            )));
        }
        if let Some(c) = &self.after
            && state.is_some()
            && c.state() != state
        {
            return Err(Error::InvalidConfig(format!(
                "a cursor of the {} listing cannot page the {name} listing",
                c.listing()
            )));
        }
        Ok(())
    }
}

/// One page of a listing, and where the next one starts.
#[derive(Debug)]
pub struct JobPage<T> {
    /// The jobs, in the listing's order.
    pub jobs: Vec<T>,
    /// Where the next page starts, for [`Page::after`]; `None` when this was the last page.
    /// A page may hold fewer than `limit` jobs and still have a next one (the `ready` listing
    /// bounds how many stale entries one call skips): stop when `next` is `None`.
    pub next: Option<Cursor>,
}

/// Where a listing stopped: the position after the last job of a page. Opaque; it prints as
/// text and parses back ([`std::str::FromStr`]), so a tool can carry it in a URL.
///
/// A cursor of a state ordered by time (everything but `ready`) is the last job's place in
/// that order (its time, then its key): the next page starts right after it, however the
/// queue changed in between — no job is listed twice, and no job that stayed in its place is
/// skipped. A `ready` cursor is how far the listing got into each partition's queue: as
/// workers take jobs from the front, the queue moves up, and jobs that moved past the cursor
/// in between are not listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor(CursorAt);

#[derive(Clone, Debug, PartialEq, Eq)]
enum CursorAt {
    /// After this job in a time-ordered listing.
    Sorted { state: JobState, pos: ListPos },
    /// From these positions in each partition's `ready` queue.
    Ready { next: Vec<u64> },
    /// After this job in a listing of kept (finished) jobs.
    Kept { outcome: FinishedAs, pos: ListPos },
}

impl Cursor {
    /// The state whose listing this cursor pages (`None` for a listing of kept jobs).
    pub fn state(&self) -> Option<JobState> {
        match &self.0 {
            CursorAt::Sorted { state, .. } => Some(*state),
            CursorAt::Ready { .. } => Some(JobState::Ready),
            CursorAt::Kept { .. } => None,
        }
    }

    /// The outcome whose kept jobs this cursor pages (`None` for a listing of a state).
    pub fn finished(&self) -> Option<FinishedAs> {
        match &self.0 {
            CursorAt::Kept { outcome, .. } => Some(*outcome),
            _ => None,
        }
    }

    /// What the cursor pages, for errors.
    fn listing(&self) -> &'static str {
        match &self.0 {
            CursorAt::Sorted { state, .. } => state.as_str(),
            CursorAt::Ready { .. } => JobState::Ready.as_str(),
            CursorAt::Kept { outcome, .. } => outcome.as_str(),
        }
    }

    pub(crate) fn kept(outcome: FinishedAs, pos: ListPos) -> Cursor {
        Cursor(CursorAt::Kept { outcome, pos })
    }

    pub(crate) fn sorted(state: JobState, pos: ListPos) -> Cursor {
        Cursor(CursorAt::Sorted { state, pos })
    }

    pub(crate) fn ready(next: Vec<u64>) -> Cursor {
        Cursor(CursorAt::Ready { next })
    }

    /// Where partition `partition` (of `partitions`) resumes.
    pub(crate) fn start_of(&self, partition: u16, partitions: u16) -> Result<ListFrom> {
        match &self.0 {
            CursorAt::Sorted { pos, .. } | CursorAt::Kept { pos, .. } => {
                Ok(ListFrom::After(pos.clone()))
            }
            CursorAt::Ready { next } if next.len() == usize::from(partitions) => {
                Ok(ListFrom::Index(next[usize::from(partition)]))
            }
            CursorAt::Ready { next } => Err(Error::InvalidConfig(format!(
                "a ready cursor of {} partitions cannot page a topic of {partitions}",
                next.len()
            ))),
        }
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            CursorAt::Sorted { state, pos } => {
                write!(f, "{state}:{}:{}:{}", pos.order.0, pos.order.1, pos.key)
            }
            CursorAt::Kept { outcome, pos } => {
                write!(f, "{outcome}:{}:{}:{}", pos.order.0, pos.order.1, pos.key)
            }
            CursorAt::Ready { next } => {
                let next: Vec<String> = next.iter().map(u64::to_string).collect();
                write!(f, "ready:{}", next.join(","))
            }
        }
    }
}

impl std::str::FromStr for Cursor {
    type Err = Error;

    fn from_str(s: &str) -> Result<Cursor> {
        let bad = || Error::InvalidConfig(format!("not a listing cursor: {s:?}"));
        let (state, rest) = s.split_once(':').ok_or_else(bad)?;
        let num = |t: &str| t.parse::<u64>().map_err(|_| bad());
        if state == "ready" {
            let next = rest.split(',').map(num).collect::<Result<Vec<_>>>()?;
            return Ok(Cursor::ready(next));
        }
        let mut parts = rest.splitn(3, ':');
        let (Some(a), Some(b), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad());
        };
        let key = JobKey::stored(key).map_err(|_| bad())?;
        let pos = ListPos {
            order: (num(a)?, num(b)?),
            key,
        };
        if let Some(outcome) = FinishedAs::parse(state) {
            return Ok(Cursor::kept(outcome, pos));
        }
        let state = [
            JobState::Scheduled,
            JobState::Retry,
            JobState::Active,
            JobState::Dead,
        ]
        .into_iter()
        .find(|st| st.as_str() == state)
        .ok_or_else(bad)?;
        Ok(Cursor::sorted(state, pos))
    }
}

/// A job's place in its partition's listing order: `order`, then `key` (byte order). Within
/// one store, the places of jobs of different partitions compare the same way, which is how
/// a listing merges partitions. What `order` holds is the store's own: Redis, the bits of the
/// sorted-set score; the embedded store, the time and its insertion sequence; for `ready`, the
/// position in the queue.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ListPos {
    /// The store's order value.
    pub order: (u64, u64),
    /// The job's key: the tie-breaker.
    pub key: JobKey,
}

/// Where one partition's part of a listing starts
/// ([`Operate::list`](crate::store::Operate::list)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListFrom {
    /// From the beginning.
    Start,
    /// Right after this place (states ordered by time).
    After(ListPos),
    /// From this position of the `ready` queue (stale entries included in the count).
    Index(u64),
}

/// What to do to dead jobs in bulk ([`Operate::act_on_dead`](crate::store::Operate::act_on_dead),
/// [`DeadSweep`](crate::client::DeadSweep)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeadAction {
    /// Back to `ready` with attempts reset, history kept (as `requeue_dead`).
    Requeue,
    /// Deleted, record and history (as `purge_dead`).
    Purge,
}

/// One partition's part of a listing.
#[derive(Clone, Debug, Default)]
pub struct ListChunk {
    /// The jobs, in the partition's order, each with its place.
    pub jobs: Vec<(ListPos, JobInfo)>,
    /// For `ready`: the queue position where this call stopped reading.
    pub next_index: u64,
    /// Whether the partition holds more after what was returned.
    pub more: bool,
}
