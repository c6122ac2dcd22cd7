//! What a handler sees and returns: [`JobContext`], [`JobError`], and the [`JobDescriptor`]
//! that `#[delayed_job]` registers for each handler.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::finished::Returned;
use crate::names::JobKey;
use crate::retry::RetryPolicy;

/// A boxed error from a handler.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What the handler asks for when it fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Retry on the job's retry policy (the default for any error).
    Retry,
    /// Retry after this delay, spending an attempt; dead if no attempts are left.
    RetryAfter(Duration),
    /// Never retry: to the dead queue now.
    Permanent,
    /// Not a failure: run again after this delay without spending an attempt.
    Defer(Duration),
    /// The handler asked for shared data of this type ([`JobContext::data`]) and the worker
    /// was not given any: a deployment error, not the job's. The worker defers the job without
    /// spending an attempt (so it is never buried for it) and reports the type in its health.
    MissingData(&'static str),
    /// A partner is rate-limiting the handler ([`JobError::rate_limited`]): the job runs again
    /// after this delay without spending an attempt, and the whole topic leases nothing
    /// before then, on every worker (the job's partition at once, the others as soon as its
    /// worker has told them).
    RateLimited(Duration),
}

/// A handler's error: any error converts into it with `?` (and is retried on the policy);
/// the constructors ask for something else.
pub struct JobError {
    kind: ErrorKind,
    source: BoxError,
}

impl JobError {
    /// Retried on the job's retry policy.
    pub fn retry(error: impl Into<BoxError>) -> Self {
        JobError {
            kind: ErrorKind::Retry,
            source: error.into(),
        }
    }

    /// Retried after `delay` (overriding the policy's delay); spends an attempt.
    pub fn retry_after(delay: Duration, error: impl Into<BoxError>) -> Self {
        JobError {
            kind: ErrorKind::RetryAfter(delay),
            source: error.into(),
        }
    }

    /// Never retried: the job goes to the dead queue now.
    pub fn permanent(error: impl Into<BoxError>) -> Self {
        JobError {
            kind: ErrorKind::Permanent,
            source: error.into(),
        }
    }

    /// "Not yet": run the job again after `delay`, without spending an attempt.
    pub fn defer(delay: Duration) -> Self {
        JobError {
            kind: ErrorKind::Defer(delay),
            source: "deferred".into(),
        }
    }

    /// "The partner is rate-limiting us" (BullMQ's `RateLimitError`): the job goes back
    /// without spending an attempt and runs again after `delay`, and the topic is slowed
    /// down: no worker leases another of its jobs before then.
    pub fn rate_limited(delay: Duration) -> Self {
        JobError {
            kind: ErrorKind::RateLimited(delay),
            source: "rate limited".into(),
        }
    }

    /// The error of [`JobContext::data`] when the worker has no value of type `T`.
    fn missing_data<T: 'static>() -> Self {
        let type_name = std::any::type_name::<T>();
        JobError {
            kind: ErrorKind::MissingData(type_name),
            source: format!(
                "no shared data of type {type_name} was given to the worker: add \
                 .data(…) of that type to the worker, or declare it with \
                 #[delayed_job(data({type_name}))] so that build() checks it"
            )
            .into(),
        }
    }

    /// What the handler asked for.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The underlying error.
    pub fn source_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.source
    }
}

impl<E: Into<BoxError>> From<E> for JobError {
    fn from(error: E) -> Self {
        JobError::retry(error)
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.source, f)
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobError")
            .field("kind", &self.kind)
            .field("source", &self.source)
            .finish()
    }
}

/// Values shared with every handler, by type (`ctx.data::<Db>()`).
#[derive(Clone, Default)]
pub struct SharedData(HashMap<TypeId, Arc<dyn Any + Send + Sync>>);

impl SharedData {
    /// Adds a value; a second value of the same type replaces the first.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        self.0.insert(TypeId::of::<T>(), Arc::new(value));
    }

    /// The value of type `T`, if one was added.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.0.get(&TypeId::of::<T>())?.downcast_ref()
    }

    /// Whether a value of the type a handler declared was added.
    pub fn provides(&self, need: &DataNeed) -> bool {
        self.0.contains_key(&(need.type_id)())
    }
}

/// A type of shared data a handler declares it needs (`#[delayed_job(data(Db))]`), so that the
/// worker's `build()` fails, naming the handler and the type, when `.data(…)` did not give one.
///
/// Held as functions because neither `TypeId::of` nor `type_name` can be called in the
/// `static` that registers the handler.
#[derive(Clone, Copy)]
pub struct DataNeed {
    type_id: fn() -> TypeId,
    type_name: fn() -> &'static str,
}

impl DataNeed {
    /// The need for a value of type `T`. Only types that can be shared data qualify.
    pub const fn of<T: Send + Sync + 'static>() -> Self {
        DataNeed {
            type_id: TypeId::of::<T>,
            type_name: std::any::type_name::<T>,
        }
    }

    /// The type's Rust name, for errors and logs.
    pub fn type_name(&self) -> &'static str {
        (self.type_name)()
    }

    /// The type's id.
    pub fn type_id(&self) -> TypeId {
        (self.type_id)()
    }
}

impl fmt::Debug for DataNeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("DataNeed").field(&self.type_name()).finish()
    }
}

impl fmt::Debug for SharedData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedData({} values)", self.0.len())
    }
}

/// The local deadline of a job's lease: by the worker process's clock, when the lease surely
/// ends unless it is extended. The worker measures it from *before* the call that granted the
/// lease (so it errs early) and moves it when an extension is granted; a [`JobContext`] that
/// holds it reads as cancelled once it has passed, with no round trip to the store.
///
/// Clones share one deadline.
#[derive(Clone, Debug)]
pub struct LeaseDeadline(Arc<Mutex<tokio::time::Instant>>);

impl LeaseDeadline {
    /// A deadline at `at`.
    pub fn new(at: tokio::time::Instant) -> Self {
        LeaseDeadline(Arc::new(Mutex::new(at)))
    }

    /// When the lease surely ends, as things stand.
    pub fn get(&self) -> tokio::time::Instant {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Moves the deadline (an extension was granted, or the lease was lost: `now`).
    pub fn set(&self, at: tokio::time::Instant) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = at;
    }

    /// Moves the deadline to `at` (an extension was granted) unless it has already passed:
    /// a lease that surely ran out is never revived. Returns whether it moved.
    pub fn extend(&self, at: tokio::time::Instant) -> bool {
        let mut current = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if tokio::time::Instant::now() >= *current {
            return false;
        }
        *current = at;
        true
    }

    /// Whether the deadline has passed by this process's clock.
    pub fn has_passed(&self) -> bool {
        tokio::time::Instant::now() >= self.get()
    }

    /// Completes once the deadline has passed (following it as it moves).
    pub async fn passed(&self) {
        loop {
            let at = self.get();
            tokio::time::sleep_until(at).await;
            if self.has_passed() {
                return;
            }
        }
    }
}

/// The reporter of a [`JobContext`], if any (its own type for `Debug`).
#[derive(Clone)]
struct Reporting(Option<Arc<dyn crate::progress::Reporter>>);

impl fmt::Debug for Reporting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Reporting"
        } else {
            "None"
        })
    }
}

/// What a running job knows about itself.
#[derive(Clone, Debug)]
pub struct JobContext {
    /// Its topic.
    pub topic: &'static str,
    /// Its key.
    pub key: JobKey,
    /// Which attempt this is, from 1.
    pub attempt: u32,
    /// Most attempts it gets under its retry policy.
    pub max_attempts: u32,
    /// When it was due (store ms).
    pub due_ms: u64,
    /// How late it started: lease time minus due time.
    pub late: Duration,
    /// The delivery's fencing token.
    pub token: u64,
    cancel: CancellationToken,
    deadline: Option<LeaseDeadline>,
    data: Arc<SharedData>,
    /// Where `progress` and `log` write (the worker binds it to the job's lease).
    reporter: Reporting,
    /// The first type [`JobContext::data`] did not find, shared by clones: the worker reads it
    /// after a failed run, so the deferral holds whatever error the handler made of it.
    missing: Arc<OnceLock<&'static str>>,
    /// The job's group, if it has one.
    group: Option<crate::group::GroupName>,
    /// The batch the job is a member of, if any.
    batch: Option<crate::batch::BatchId>,
}

impl JobContext {
    /// Builds a context (the worker does this; tests of handlers may too).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        topic: &'static str,
        key: JobKey,
        attempt: u32,
        max_attempts: u32,
        due_ms: u64,
        late: Duration,
        token: u64,
        cancel: CancellationToken,
        data: Arc<SharedData>,
    ) -> Self {
        JobContext {
            topic,
            key,
            attempt,
            max_attempts,
            due_ms,
            late,
            token,
            cancel,
            deadline: None,
            data,
            reporter: Reporting(None),
            missing: Arc::default(),
            group: None,
            batch: None,
        }
    }

    /// The context of a job in `group` (the worker sets the delivery's group).
    pub fn with_group(mut self, group: Option<crate::group::GroupName>) -> Self {
        self.group = group;
        self
    }

    /// The job's group ([`crate::group`]), if it has one.
    pub fn group(&self) -> Option<&crate::group::GroupName> {
        self.group.as_ref()
    }

    /// The context of a member of `batch` (the worker sets the delivery's batch).
    pub fn with_batch(mut self, batch: Option<crate::batch::BatchId>) -> Self {
        self.batch = batch;
        self
    }

    /// The batch this job is a member of ([`crate::batch`]), if any.
    pub fn batch(&self) -> Option<&crate::batch::BatchId> {
        self.batch.as_ref()
    }

    /// For a flow's parent: the batch of its children ([`crate::client::FlowBuilder`]), to read
    /// with [`Client::batch`](crate::Client::batch): their counts, their members (and through
    /// the members' keys, their kept results).
    pub fn children(&self) -> crate::batch::BatchId {
        match crate::names::Topic::new(self.topic) {
            Ok(topic) => crate::batch::BatchId::of_flow(&topic, &self.key),
            Err(_) => crate::batch::BatchId::stored(format!("flow.{}", self.topic)),
        }
    }

    /// For a batch's callback (its key is `batch:<id>`): the batch it completes, to read with
    /// [`Client::batch`](crate::Client::batch) (its counts, its members).
    pub fn completed_batch(&self) -> Option<crate::batch::BatchId> {
        crate::batch::BatchId::from_callback_key(self.key.as_str())
    }

    /// Sends [`JobContext::progress`] and [`JobContext::log`] to `reporter` (the worker binds
    /// one to each job's lease; a context without one drops reports).
    pub fn with_reporter(mut self, reporter: Arc<dyn crate::progress::Reporter>) -> Self {
        self.reporter = Reporting(Some(reporter));
        self
    }

    /// Reports the job's progress: `value` (any serializable value, at most 64 KiB encoded)
    /// replaces the last one, visible while the job runs (`dq job`, the dashboard,
    /// [`JobInfo::progress`](crate::JobInfo::progress)) and kept with the finished job when
    /// its topic keeps it. One store call; written only while this run holds its lease (after
    /// the lease is lost it is dropped, and `Ok`). A value that cannot be encoded or is too
    /// large is an error (a failed attempt if the handler returns it with `?`).
    ///
    /// ```no_run
    /// # async fn import(rows: Vec<String>, ctx: dq_core::JobContext) -> Result<(), dq_core::JobError> {
    /// for (i, row) in rows.iter().enumerate() {
    ///     // … import the row …
    ///     if i % 1000 == 0 {
    ///         ctx.progress(&(i * 100 / rows.len())).await?; // percent done
    ///         ctx.log(format!("{i} rows imported")).await?;
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn progress<T: serde::Serialize + ?Sized>(&self, value: &T) -> Result<()> {
        let bytes = crate::payload::encode(value, crate::progress::MAX_PROGRESS_LEN)?;
        self.send(crate::progress::Report::Progress(bytes)).await
    }

    /// Appends a log line to the job's run (the last 100 are kept, each cut at 1 KiB), shown
    /// with its progress. One store call.
    pub async fn log(&self, line: impl Into<String>) -> Result<()> {
        self.send(crate::progress::Report::Log(line.into())).await
    }

    async fn send(&self, report: crate::progress::Report) -> Result<()> {
        if let Some(r) = &self.reporter.0 {
            r.report(report).await?;
        }
        Ok(())
    }

    /// Ties the context to its lease's local deadline: from the moment it passes, the context
    /// reads as cancelled (and stays so), whichever task notices first. The worker does this
    /// for every job it runs; a context built without it is cancelled by its token only.
    pub fn with_lease_deadline(mut self, deadline: LeaseDeadline) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// The shared value of type `T` given to the worker with `WorkerBuilder::data`.
    ///
    /// Declare what a handler needs with `#[delayed_job(data(T, …))]`: then a worker built
    /// without it fails at `build()` (`WorkerError::MissingData`), before it takes any job.
    ///
    /// A value that is missing all the same is a deployment error, not the job's: the error
    /// returned here is [`ErrorKind::MissingData`], and when the run fails after it — whatever
    /// error the handler returns — the worker does not spend the attempt. It defers the job
    /// (by 30 s by default, `WorkerBuilder::missing_data_delay`) for a worker that has the
    /// value, logs the fix at ERROR once per topic and type, and lists the type in
    /// `WorkerHealth::missing_data`. The job is never buried for it. For a value a handler can
    /// do without, use [`JobContext::try_data`].
    pub fn data<T: Send + Sync + 'static>(&self) -> Result<&T, JobError> {
        self.data.get::<T>().ok_or_else(|| {
            let _ = self.missing.set(std::any::type_name::<T>());
            JobError::missing_data::<T>()
        })
    }

    /// The shared value of type `T`, if the worker was given one: for optional values. Unlike
    /// [`JobContext::data`], a missing value is no error and the worker takes no note of it.
    pub fn try_data<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.data.get::<T>()
    }

    /// The first type [`JobContext::data`] asked for in this run and did not find (shared by
    /// this context's clones).
    pub fn missing_data(&self) -> Option<&'static str> {
        self.missing.get().copied()
    }

    /// True once the job should stop: its lease was lost or has surely run out by this
    /// process's clock (another worker may run it), or the worker's shutdown deadline passed.
    /// A result returned after that is not trusted: it is discarded, except that a success at
    /// shutdown is still acknowledged if the lease holds.
    ///
    /// The lease's deadline is read from the clock on every call, so after the process was
    /// paused (`SIGSTOP`, a VM freeze) this is true at once, before any timer has fired. Check
    /// it right before an external side effect. Once true, it stays true.
    pub fn is_cancelled(&self) -> bool {
        if self.cancel.is_cancelled() {
            return true;
        }
        if self
            .deadline
            .as_ref()
            .is_some_and(LeaseDeadline::has_passed)
        {
            // Sticky: a late extension must not make a stopped job look alive again.
            self.cancel.cancel();
            return true;
        }
        false
    }

    /// Completes when the job should stop (see [`JobContext::is_cancelled`]); for `select!`.
    pub async fn cancelled(&self) {
        match &self.deadline {
            None => self.cancel.cancelled().await,
            Some(deadline) => {
                tokio::select! {
                    () = self.cancel.cancelled() => {}
                    () = deadline.passed() => self.cancel.cancel(),
                }
            }
        }
    }

    /// True if this is the last attempt its retry policy allows.
    pub fn is_last_attempt(&self) -> bool {
        self.attempt >= self.max_attempts
    }
}

/// A handler call, boxed: on success, what the handler returned, encoded for keeping
/// ([`Returned`]).
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Returned, JobError>> + Send>>;

/// Decodes a payload and starts the handler; a decode failure is reported, never retried.
pub type HandlerFn =
    fn(payload: &[u8], ctx: JobContext) -> Result<HandlerFuture, crate::error::Error>;

/// A handler registered by `#[delayed_job]`: its topic, policies and entry point.
#[derive(Debug)]
pub struct JobDescriptor {
    /// The topic it handles.
    pub topic: &'static str,
    /// Retry policy in text form (checked at compile time by the macro); not used when
    /// `retry_fn` is set.
    pub retry: &'static str,
    /// The handler's retry function (`#[delayed_job(retry_fn = …)]`), which then decides
    /// instead of `retry` (see [`crate::retry::RetryFn`]).
    pub retry_fn: Option<crate::retry::RetryFn>,
    /// Handler timeout in ms, if any.
    pub timeout_ms: Option<u64>,
    /// The handler's `expires_after` in ms, if any: the default expiry of its jobs (the
    /// typed client's, and the periodic ticks' its workers enqueue).
    pub expires_after_ms: Option<u64>,
    /// Which finished jobs its topic keeps (`keep_succeeded = "1h"`, …): every worker that
    /// runs the topic writes it when it starts.
    pub keep: Option<KeepDecl>,
    /// The most events its topic keeps when the handler declares `events` (or `events =
    /// N`): every worker that runs the topic turns its events on when it starts.
    pub events_kept: Option<u64>,
    /// The furthest from now a due time of its topic may be, in ms (`max_delay = "90d"`):
    /// every worker that runs the topic writes it when it starts
    /// ([`TopicClient::set_max_delay`](crate::TopicClient::set_max_delay)).
    pub max_delay_ms: Option<u64>,
    /// The priority of its jobs when none is given (`priority = 7`, 0..=9): the typed client's
    /// default and its periodic ticks'.
    pub priority: Option<u8>,
    /// The default limits of its topic's groups (`group_concurrency`, `group_rate`).
    pub group_limits: Option<GroupLimitsDecl>,
    /// Most jobs of this topic running at once in one worker.
    pub concurrency: Option<u32>,
    /// The handler's Rust path, for logs.
    pub name: &'static str,
    /// Where it is declared.
    pub file: &'static str,
    /// Where it is declared.
    pub line: u32,
    /// The shared data it declares it needs (`#[delayed_job(data(…))]`): the worker's
    /// `build()` fails if one of them was not given with `.data(…)`.
    pub data: &'static [DataNeed],
    /// The periodic schedule it declares (`#[delayed_job(cron = "…", tz = "…")]` or
    /// `every = "…"`): every worker that runs the topic stores it (named after the topic)
    /// when it starts.
    pub schedule: Option<ScheduleDecl>,
    /// The JSON shape of its payload type ([`crate::shape::of`]), or `None` where it cannot
    /// be known for sure: every worker that runs the topic publishes it when it starts, for
    /// the HTTP API to check payloads against.
    pub shape: fn() -> Option<crate::shape::PayloadShape>,
    /// Decodes a payload and calls the handler.
    pub run: HandlerFn,
}

/// The default limits of its topic's groups a handler declares
/// (`#[delayed_job(group_concurrency = 2, group_rate = "10/s")]`), checked at compile time by
/// the macro and written by every worker at start
/// ([`TopicClient::set_group_limits`](crate::TopicClient::set_group_limits) with no group).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupLimitsDecl {
    /// `group_concurrency = N`.
    pub concurrency: Option<u32>,
    /// `group_rate = "…"`: the count and the period in ms.
    pub rate: Option<(u32, u64)>,
}

impl GroupLimitsDecl {
    /// The limits it declares (weight 1).
    pub fn limits(&self) -> crate::group::GroupLimits {
        crate::group::GroupLimits {
            concurrency: self.concurrency,
            rate: self.rate.map(|(count, per_ms)| crate::control::Rate {
                count,
                per: std::time::Duration::from_millis(per_ms),
            }),
            weight: 1,
        }
    }
}

/// The retention declared on a handler (`#[delayed_job(keep_succeeded = "1h", keep_max =
/// 50000)]`), checked at compile time by the macro.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeepDecl {
    /// `keep_succeeded`, in ms.
    pub succeeded_ms: Option<u64>,
    /// `keep_cancelled`, in ms.
    pub cancelled_ms: Option<u64>,
    /// `keep_expired`, in ms.
    pub expired_ms: Option<u64>,
    /// `keep_max` (`None`: [`DEFAULT_MAX_KEPT`](crate::finished::DEFAULT_MAX_KEPT)).
    pub max_kept: Option<u64>,
}

impl KeepDecl {
    /// The retention it declares.
    pub fn retention(&self) -> crate::finished::Retention {
        let d = |ms: Option<u64>| ms.map(Duration::from_millis);
        crate::finished::Retention {
            succeeded: d(self.succeeded_ms),
            cancelled: d(self.cancelled_ms),
            expired: d(self.expired_ms),
            max_kept: self.max_kept.unwrap_or(crate::finished::DEFAULT_MAX_KEPT),
        }
    }
}

/// A periodic schedule declared on a handler, checked at compile time by the macro.
#[derive(Clone, Copy, Debug)]
pub struct ScheduleDecl {
    /// The cron expression, or `None` for an interval.
    pub cron: Option<&'static str>,
    /// The cron expression's time zone (`None`: UTC).
    pub tz: Option<&'static str>,
    /// The interval in ms, for `every`.
    pub every_ms: Option<u64>,
    /// `once` or `skip`.
    pub missed: &'static str,
    /// The payload each tick carries: the payload type's `Default`, encoded.
    pub payload: fn() -> Result<Vec<u8>>,
}

impl ScheduleDecl {
    /// The schedule, parsed again by the runtime's parser (the macro's, so it cannot fail
    /// unless the time zone database of this machine lacks the zone).
    pub fn schedule(&self) -> Result<crate::schedule::Schedule> {
        use crate::schedule::Schedule;
        let schedule = match (self.cron, self.every_ms) {
            (Some(cron), _) => {
                let s = Schedule::cron(cron)?;
                match self.tz {
                    Some(tz) => s.tz(tz)?,
                    None => s,
                }
            }
            (None, Some(ms)) => Schedule::every(std::time::Duration::from_millis(ms))?,
            (None, None) => {
                return Err(Error::InvalidSchedule("neither cron nor every".into()));
            }
        };
        let missed =
            dq_syntax::schedule::parse_missed(self.missed).map_err(Error::InvalidSchedule)?;
        Ok(schedule.missed(missed))
    }
}

impl JobDescriptor {
    /// The parsed retry policy; with a retry function, its decisions for expired leases
    /// ([`RetryFn::lease_expiry_policy`](crate::retry::RetryFn::lease_expiry_policy), asking
    /// the function once per attempt now).
    pub fn retry_policy(&self) -> Result<RetryPolicy> {
        match &self.retry_fn {
            Some(f) => Ok(f.lease_expiry_policy()),
            None => RetryPolicy::parse(self.retry),
        }
    }

    /// Where the handler is declared, as `file:line`.
    pub fn location(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

inventory::collect!(JobDescriptor);

/// Every handler registered in this binary by `#[delayed_job]`.
pub fn registered_jobs() -> impl Iterator<Item = &'static JobDescriptor> {
    inventory::iter::<JobDescriptor>.into_iter()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_convert_and_keep_their_kind() {
        fn io() -> Result<(), JobError> {
            Err(std::io::Error::other("disk"))?;
            Ok(())
        }
        let e = io().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Retry);
        assert_eq!(e.to_string(), "disk");
        let e: JobError = "boom".into();
        assert_eq!(e.kind(), ErrorKind::Retry);
        assert_eq!(JobError::permanent("bad").kind(), ErrorKind::Permanent);
        assert_eq!(
            JobError::defer(Duration::from_secs(1)).kind(),
            ErrorKind::Defer(Duration::from_secs(1))
        );
    }

    #[test]
    fn shared_data_by_type() {
        let mut d = SharedData::default();
        d.insert(5u32);
        d.insert(String::from("db"));
        assert_eq!(d.get::<u32>(), Some(&5));
        assert_eq!(d.get::<String>().map(String::as_str), Some("db"));
        assert!(d.get::<u64>().is_none());
        assert!(d.provides(&DataNeed::of::<u32>()));
        assert!(!d.provides(&DataNeed::of::<u64>()));
        assert_eq!(DataNeed::of::<u64>().type_name(), "u64");
    }

    #[test]
    fn missing_data_is_its_own_kind_and_noted_on_the_context() {
        let ctx = JobContext::new(
            "t",
            JobKey::new("k").unwrap(),
            1,
            1,
            0,
            Duration::ZERO,
            1,
            CancellationToken::new(),
            Arc::new(SharedData::default()),
        );
        assert!(ctx.try_data::<u64>().is_none());
        assert_eq!(ctx.missing_data(), None, "try_data takes no note");
        let e = ctx.data::<u64>().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::MissingData("u64"));
        assert!(e.to_string().contains(".data("), "{e}");
        assert_eq!(ctx.clone().missing_data(), Some("u64"));
    }
}
