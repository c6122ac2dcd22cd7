//! The job model: what a job is, the partition it lives in, the states it moves through, when
//! it is due, and what is known about it (its record and attempt history). What each store
//! call takes and reports lives with the role that makes the call (`store::{produce, lease,
//! operate, catalog}`).
//!
//! Times are milliseconds on the store's clock: Unix time from Redis `TIME` for the Redis store,
//! tokio's (virtual-able) clock for the embedded store. Producer and worker clocks never decide.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Serialize, de::DeserializeOwned};

use crate::names::{JobKey, Topic};

/// A kind of job: a topic and the payload type its handler takes.
///
/// `#[delayed_job]` implements this on a type named like the handler, so that
/// `client.enqueue::<close_order>(payload)` is checked against the handler's payload type.
pub trait Job: Send + Sync + 'static {
    /// The handler's payload; stored as MessagePack.
    type Payload: Serialize + DeserializeOwned + Send + Sync + 'static;
    /// The topic jobs of this kind are queued under.
    const TOPIC: &'static str;
    /// How long after its due time a job of this kind may still start
    /// (`#[delayed_job(expires_after = "10m")]`): a job enqueued through the typed client
    /// without an expiry of its own gets [`Expiry::AfterDue`] of this. `None`: no expiry.
    const EXPIRES_AFTER: Option<Duration> = None;
    /// The priority of a job of this kind enqueued through the typed client without one of
    /// its own (`#[delayed_job(priority = 7)]`); [`Priority::NORMAL`] when not declared.
    const PRIORITY: Priority = Priority::NORMAL;
    /// The window a job of this kind opens on its key when enqueued through the typed client
    /// without one of its own (`#[delayed_job(unique_for = "1h")]`, `debounce`, `throttle`).
    /// `None`: none.
    const WINDOW: Option<crate::unique::KeyWindow> = None;

    /// The group of a job of this kind enqueued through the typed client without one of its
    /// own (`#[delayed_job(group = tenant_id)]`: the payload field's value); `None`: no group.
    fn group(_payload: &Self::Payload) -> Option<String> {
        None
    }
}

/// What a job's handler returns on success, for reading it back typed
/// ([`Client::result`](crate::Client::result), [`Client::wait`](crate::Client::wait)).
///
/// `#[delayed_job]` implements it from the handler's return type: `T` for `Result<T, E>`
/// (`()` for a handler that returns nothing). A handler's value is kept only while its topic
/// keeps succeeded jobs ([`Retention`](crate::Retention)).
pub trait JobOutput: Job {
    /// The handler's `Ok` value.
    type Output;
}

/// The `Ok` type of a handler's `Result<T, E>`: how `#[delayed_job]` names `T` for
/// [`JobOutput::Output`] without parsing the return type.
pub trait HandlerReturn {
    /// `T`.
    type Ok;
}

impl<T, E> HandlerReturn for Result<T, E> {
    type Ok = T;
}

/// One partition of a topic: the unit every store operation works on.
///
/// All keys of a partition share one Redis hash tag, so each script touches one slot.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Queue {
    /// The topic.
    pub topic: Topic,
    /// The partition, `0..partitions`.
    pub partition: u16,
}

impl Queue {
    /// Partition `partition` of `topic`.
    pub fn new(topic: Topic, partition: u16) -> Self {
        Queue { topic, partition }
    }
}

/// Where a job is in its life (docs/ARCHITECTURE.md §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Waiting for its due time.
    Scheduled,
    /// Due; waiting for a worker.
    Ready,
    /// Leased to a worker and running.
    Active,
    /// Failed; waiting for its next attempt.
    Retry,
    /// Out of attempts, failed permanently or undecodable; kept for inspection and requeue.
    Dead,
}

impl JobState {
    /// The state's name as used in logs and errors.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Scheduled => "scheduled",
            JobState::Ready => "ready",
            JobState::Active => "active",
            JobState::Retry => "retry",
            JobState::Dead => "dead",
        }
    }

    /// The one-letter code stored in records and returned by scripts.
    pub fn code(self) -> u8 {
        match self {
            JobState::Scheduled => b'S',
            JobState::Ready => b'R',
            JobState::Active => b'A',
            JobState::Retry => b'F',
            JobState::Dead => b'D',
        }
    }

    /// The state for a one-letter code.
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            b'S' => JobState::Scheduled,
            b'R' => JobState::Ready,
            b'A' => JobState::Active,
            b'F' => JobState::Retry,
            b'D' => JobState::Dead,
            _ => return None,
        })
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The latest due time dq can store, in Unix ms: 2^48 − 1, in the year 10889 (a job record
/// keeps due times in 48 bits). A delay or time past it is refused with
/// [`Error::DueOutOfRange`](crate::error::Error::DueOutOfRange) before anything is written.
pub const MAX_DUE_MS: u64 = (1 << 48) - 1;

/// Refuses a due time past [`MAX_DUE_MS`]: `After(d)` counts from this machine's clock (the
/// store counts from its own, which differs by far less than the thousands of years at stake).
pub(crate) fn check_due_ms(requested_ms: u128) -> crate::error::Result<()> {
    if requested_ms > u128::from(MAX_DUE_MS) {
        return Err(crate::error::Error::DueOutOfRange {
            requested_ms,
            max_ms: MAX_DUE_MS,
        });
    }
    Ok(())
}

/// This machine's clock plus `delay`, in Unix ms (for the range checks of due times).
pub(crate) fn now_plus(delay: Duration) -> u128 {
    u128::from(unix_ms(SystemTime::now())) + delay.as_millis()
}

/// When a job becomes due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due {
    /// Now: straight to `ready`.
    Now,
    /// This long after the store's "now".
    After(Duration),
    /// At this wall-clock time (due at once if it has passed).
    At(SystemTime),
}

/// When a job that has not started is dropped instead: it is never started after that
/// time, whether it waits to be due, in `ready`, or for a retry (docs/GUARANTEES.md).
///
/// An expired job is deleted and counted
/// ([`TopicStats::expired_before_start`](crate::TopicStats::expired_before_start)); a running
/// job is never stopped by its expiry, but one released at shutdown or whose lease ran out
/// keeps it, and is not started again once it has passed. A requeue from the dead queue clears
/// it; a reschedule keeps it.
/// Expiry needs record format 4: a namespace whose live processes do not all read it yet
/// refuses an expiring job with [`Error::NeedsFormat`](crate::Error::NeedsFormat).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// This long after the job's due time as asked (more than zero): for a job due at 9:00
    /// with `AfterDue(10 min)`, nothing starts it after 9:10 — also when it is enqueued late,
    /// at 9:05 (refused as [`Error::InvalidExpiry`](crate::Error::InvalidExpiry) from 9:10).
    AfterDue(Duration),
    /// At this wall-clock time, which must be after the job's due time.
    At(SystemTime),
}

/// How urgent a job is among the due jobs of its partition: 0 (lowest) to 9 (highest),
/// [`Priority::NORMAL`] (5) when not given.
///
/// A fetch leases the due jobs of a partition in a strict order: every due job of a higher
/// priority before any of a lower one, and within one priority in the order they became due
/// (a released job at the front). There is no aging: a steady stream of urgent jobs holds the
/// others back until it stops; use it for the few jobs that must jump the queue, not as a
/// weight. A job keeps its priority through retries, deferrals, releases, reschedules and a
/// requeue from the dead queue. A delayed job joins the due jobs when a fetch first meets
/// it due (at most the fetch's promote batch per call, in due order), so among many jobs that
/// become due in the same moment the priority orders them from the next fetch on.
///
/// A priority other than normal needs record format 5: a namespace whose live processes do not
/// all read it yet refuses such a job with [`Error::NeedsFormat`](crate::Error::NeedsFormat).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Priority(u8);

impl Priority {
    /// The lowest priority (0): leased after every other due job.
    pub const LOWEST: Priority = Priority(0);
    /// A low priority (2), for bulk work that may wait.
    pub const LOW: Priority = Priority(2);
    /// The default (5).
    pub const NORMAL: Priority = Priority(5);
    /// A high priority (7).
    pub const HIGH: Priority = Priority(7);
    /// The highest priority (9): leased before every other due job.
    pub const HIGHEST: Priority = Priority(9);
    /// The largest value a priority may have.
    pub const MAX: u8 = 9;

    /// A priority from 0 (lowest) to 9 (highest); anything above is
    /// [`Error::InvalidPriority`](crate::Error::InvalidPriority).
    pub fn new(level: u8) -> crate::error::Result<Priority> {
        if level > Priority::MAX {
            return Err(crate::error::Error::InvalidPriority(level));
        }
        Ok(Priority(level))
    }

    /// The priority's level, 0 to 9.
    pub fn level(self) -> u8 {
        self.0
    }

    /// A priority `#[delayed_job(priority = N)]` declared (checked at compile time; for the
    /// generated code).
    #[doc(hidden)]
    pub const fn declared(level: u8) -> Priority {
        assert!(level <= Priority::MAX, "a priority is 0 to 9");
        Priority(level)
    }

    /// Whether this is the default, [`Priority::NORMAL`].
    pub fn is_normal(self) -> bool {
        self == Priority::NORMAL
    }
}

impl Default for Priority {
    fn default() -> Priority {
        Priority::NORMAL
    }
}

impl std::fmt::Display for Priority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Due {
    /// Refuses a due time dq cannot store (past [`MAX_DUE_MS`]).
    pub fn check(&self) -> crate::error::Result<()> {
        match *self {
            Due::Now => Ok(()),
            Due::After(d) => check_due_ms(now_plus(d)),
            Due::At(t) => check_due_ms(u128::from(unix_ms(t))),
        }
    }
}

/// How one attempt of a job ended, as kept in its history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// The handler returned an error (or panicked, or timed out).
    Failed,
    /// The worker lost the lease (crashed, stalled, partitioned).
    LeaseExpired,
    /// The handler deferred itself; no attempt was spent.
    Deferred,
    /// The job was buried without retry (permanent error, undecodable payload).
    Buried,
}

impl AttemptOutcome {
    /// Its name in tools' output: `failed`, `lease_expired`, `deferred` or `buried`.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Failed => "failed",
            AttemptOutcome::LeaseExpired => "lease_expired",
            AttemptOutcome::Deferred => "deferred",
            AttemptOutcome::Buried => "buried",
        }
    }

    pub(crate) fn from_code(code: &str) -> Self {
        match code {
            "L" => AttemptOutcome::LeaseExpired,
            "d" => AttemptOutcome::Deferred,
            "B" => AttemptOutcome::Buried,
            _ => AttemptOutcome::Failed,
        }
    }
}

/// One entry of a job's attempt history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptRecord {
    /// Which attempt (from 1).
    pub attempt: u32,
    /// When it ended (store ms).
    pub at_ms: u64,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// The error text (at most 1 KiB; a longer one is cut and marked, see [`truncate_error`]).
    pub error: String,
}

/// Longest error text kept in a job's history, in bytes.
pub const MAX_ERROR_LEN: usize = 1024;

/// An error text as a job's history keeps it: at most [`MAX_ERROR_LEN`] bytes. A longer text
/// is cut on a character boundary (a cut inside a character would make the history
/// undecodable) and ends with a marker saying so and how long it was,
/// `… [cut from 5000 bytes]`, so that a reader never takes a cut text for the whole.
/// `lib.lua`'s `cut_error` does the same in the scripts.
pub fn truncate_error(text: &str) -> std::borrow::Cow<'_, str> {
    if text.len() <= MAX_ERROR_LEN {
        return std::borrow::Cow::Borrowed(text);
    }
    let marker = format!("{CUT_MARK}{} bytes]", text.len());
    let mut end = MAX_ERROR_LEN - marker.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    std::borrow::Cow::Owned(format!("{}{marker}", &text[..end]))
}

/// How a cut error text's marker begins; the original length in bytes and `]` follow.
pub const CUT_MARK: &str = "… [cut from ";

/// How many attempt records a job keeps; older ones are dropped first.
pub const MAX_HISTORY: usize = 32;

/// Everything known about one job, as the store keeps it (times in store ms, the payload as
/// MessagePack); [`JobInfo::decode`] gives the typed [`JobView`](crate::inspect::JobView).
#[derive(Clone, Debug)]
pub struct JobInfo {
    /// Its key.
    pub key: JobKey,
    /// Its state.
    pub state: JobState,
    /// When it is (or was) due (store ms); for `retry`, the next attempt time.
    pub due_ms: u64,
    /// When it was enqueued (store ms).
    pub created_ms: u64,
    /// Attempts started so far.
    pub attempts: u32,
    /// For a running (`active`) job: when its lease runs out unless extended (store ms);
    /// `None` in every other state.
    pub lease_deadline_ms: Option<u64>,
    /// For a dead job: when it went to the dead queue (store ms); `None` in every other state.
    pub died_ms: Option<u64>,
    /// When it expires unless it has started (store ms; see [`Expiry`]); `None`: never.
    pub expires_ms: Option<u64>,
    /// Its priority among the due jobs of its partition ([`Priority`]).
    pub priority: Priority,
    /// Its group, if it has one ([`crate::group`]).
    pub group: Option<crate::group::GroupName>,
    /// The batch it is a member of, if any ([`crate::batch`]).
    pub batch: Option<crate::batch::BatchId>,
    /// Its failed attempts, oldest first (at most [`MAX_HISTORY`]).
    pub history: Vec<AttemptRecord>,
    /// For a running job: the progress and log lines its handler reported in this run
    /// ([`JobContext::progress`](crate::JobContext::progress)); `None` if it reported none.
    pub progress: Option<crate::progress::JobProgress>,
    /// The MessagePack payload.
    pub payload: Vec<u8>,
}

/// Milliseconds since the Unix epoch of a wall-clock time (0 before the epoch).
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The wall-clock time of a Unix-ms value.
pub fn from_unix_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_error_says_it_was_cut_and_stays_within_the_limit() {
        let short = "x".repeat(MAX_ERROR_LEN);
        assert_eq!(
            truncate_error(&short),
            short.as_str(),
            "at the limit: whole"
        );
        for text in [
            "x".repeat(MAX_ERROR_LEN + 1),
            "é".repeat(3000),
            format!("x{}", "🦀".repeat(700)),
        ] {
            let cut = truncate_error(&text);
            assert!(cut.len() <= MAX_ERROR_LEN, "{}", cut.len());
            let marker = format!("{CUT_MARK}{} bytes]", text.len());
            assert!(cut.ends_with(&marker), "{cut}");
            let kept = &cut[..cut.len() - marker.len()];
            assert!(text.starts_with(kept));
            // As much as fits: less than one character short of the limit.
            assert!(cut.len() + 4 > MAX_ERROR_LEN, "{}", cut.len());
        }
    }
}
