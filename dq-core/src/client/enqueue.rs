//! Enqueueing: [`JobSpec`] (a job to enqueue), the [`Enqueue`] builder a single enqueue
//! awaits, and the [`TopicClient`] calls that validate jobs and send them — one at a time
//! (through group commit when it is on), or in bulk by chunks — retried through connection
//! trouble with no double effect.

use std::collections::HashMap;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

use backon::Retryable;

use super::group::{self, BatchSend};
use super::handle::TopicClient;
use super::retrying::{ENQUEUE_RETRY_WINDOW, retrying};
use crate::error::{BulkStored, Error, Result};
use crate::job::{Due, Expiry, MAX_DUE_MS, Priority, Queue, unix_ms};
use crate::names::JobKey;
use crate::payload;
use crate::store::produce::{EnqueueCall, EnqueueOutcome, Enqueued, NewJob};
use crate::unique::KeyWindow;

/// A job to enqueue: its payload, and optionally its key, due time and `replace`. Built like
/// a single enqueue (`JobSpec::new(p).key(k).delay(d)`), and passed in a list to
/// [`Client::enqueue_bulk`](crate::Client::enqueue_bulk):
///
/// ```no_run
/// # async fn demo(client: dq_core::Client) -> dq_core::Result<()> {
/// # struct close_order;
/// # impl dq_core::Job for close_order { type Payload = u64; const TOPIC: &'static str = "orders.close"; }
/// use dq_core::JobSpec;
/// let specs = (1..=3).map(|id| JobSpec::new(id).key(format!("order-{id}")));
/// client.enqueue_bulk::<close_order>(specs).await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct JobSpec<P> {
    /// The payload.
    pub payload: P,
    /// Its key; generated if `None`.
    pub key: Option<String>,
    /// When it is due.
    pub due: Due,
    /// Replace an existing job with the same key.
    pub replace: bool,
    /// When it is dropped if it has not started (default: never; the typed client gives
    /// the handler's `expires_after`).
    pub expires: Option<Expiry>,
    /// Its priority among the due jobs of its partition (default: the handler's `priority`
    /// with the typed client, else [`Priority::NORMAL`]).
    pub priority: Option<Priority>,
    /// The window it opens on its key (default: none): [`KeyWindow`].
    pub window: Option<KeyWindow>,
    /// Its group (default: none): once due it waits for its group's turn, under the group's
    /// limits ([`crate::group`]). Checked by [`GroupName::new`](crate::GroupName::new).
    pub group: Option<String>,
    /// The batch it is a member of: set by [`BatchHandle::add`](crate::client::BatchHandle::add),
    /// which reserves it there first.
    pub(crate) batch: Option<crate::batch::BatchId>,
}

impl<P> JobSpec<P> {
    /// A job due now with a generated key.
    pub fn new(payload: P) -> Self {
        JobSpec {
            payload,
            key: None,
            due: Due::Now,
            replace: false,
            expires: None,
            priority: None,
            window: None,
            group: None,
            batch: None,
        }
    }

    /// Sets the job's key.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Makes the job due `delay` from now.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.due = Due::After(delay);
        self
    }

    /// Makes the job due at `time`.
    pub fn at(mut self, time: SystemTime) -> Self {
        self.due = Due::At(time);
        self
    }

    /// Replaces an existing pending or dead job with the same key.
    pub fn replace(mut self) -> Self {
        self.replace = true;
        self
    }

    /// Drops the job if it has not started `after` its due time ([`Expiry::AfterDue`]).
    pub fn expires_after(mut self, after: Duration) -> Self {
        self.expires = Some(Expiry::AfterDue(after));
        self
    }

    /// Drops the job if it has not started by `time` ([`Expiry::At`]).
    pub fn expires_at(mut self, time: SystemTime) -> Self {
        self.expires = Some(Expiry::At(time));
        self
    }

    /// Sets the job's priority ([`Priority`]).
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = Some(priority);
        self
    }

    /// The key cannot be enqueued again while the job exists and for `d` after it finished
    /// ([`KeyWindow::UniqueFor`]).
    pub fn unique_for(mut self, d: Duration) -> Self {
        self.window = Some(KeyWindow::UniqueFor(d));
        self
    }

    /// Last wins: the job runs `d` after the last enqueue of its key
    /// ([`KeyWindow::Debounce`]).
    pub fn debounce(mut self, d: Duration) -> Self {
        self.window = Some(KeyWindow::Debounce(d));
        self
    }

    /// First wins: later enqueues of the key within `d` are refused
    /// ([`KeyWindow::Throttle`]).
    pub fn throttle(mut self, d: Duration) -> Self {
        self.window = Some(KeyWindow::Throttle(d));
        self
    }

    /// Puts the job in `group`: once due it waits for its group's turn and runs within the
    /// group's limits ([`crate::group`]; README "Groups").
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }
}

/// A pending enqueue; `.await` it to send.
#[must_use = "an enqueue does nothing until awaited"]
pub struct Enqueue {
    topic: Result<TopicClient>,
    /// The job as the builder calls shape it; its payload is the encoding's result.
    spec: JobSpec<Result<Vec<u8>>>,
}

impl Enqueue {
    pub(super) fn new(topic: Result<TopicClient>, payload: Result<Vec<u8>>) -> Self {
        Enqueue {
            topic,
            spec: JobSpec::new(payload),
        }
    }

    /// The job's key (default: a generated, time-sortable key). An existing job with this key
    /// is kept and reported as [`EnqueueOutcome::Exists`] — unless `.replace()` is set.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.spec = self.spec.key(key);
        self
    }

    /// Due `delay` after now (by the store's clock).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.spec = self.spec.delay(delay);
        self
    }

    /// Due at `time` (at once if it has passed).
    pub fn at(mut self, time: SystemTime) -> Self {
        self.spec = self.spec.at(time);
        self
    }

    /// Replace an existing job with the same key: a scheduled, ready, retry or dead job is
    /// replaced atomically (new payload and due time, attempts and history start again).
    /// A running job is never replaced: the outcome is then `Exists(Active)`.
    pub fn replace(mut self) -> Self {
        self.spec = self.spec.replace();
        self
    }

    /// Drops the job, never starting it, if it has not started `after` its due time (by the
    /// store's clock): a reminder due at 9:00 with `expires_after(10 min)` is not sent after
    /// 9:10, even if every worker was down or it waits for a retry. More than zero. Replaces
    /// the handler's `expires_after`. See [`Expiry`].
    ///
    /// ```no_run
    /// # async fn demo(client: dq_core::Client) -> dq_core::Result<()> {
    /// # struct remind;
    /// # impl dq_core::Job for remind { type Payload = u64; const TOPIC: &'static str = "remind"; }
    /// use std::time::Duration;
    /// client
    ///     .enqueue::<remind>(7)
    ///     .delay(Duration::from_secs(3600))
    ///     .expires_after(Duration::from_secs(600))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn expires_after(mut self, after: Duration) -> Self {
        self.spec = self.spec.expires_after(after);
        self
    }

    /// Drops the job, never starting it, if it has not started by `time`, which must be
    /// after its due time ([`Error::InvalidExpiry`] otherwise). See [`Expiry`].
    pub fn expires_at(mut self, time: SystemTime) -> Self {
        self.spec = self.spec.expires_at(time);
        self
    }

    /// Leases the job before every due job of a lower priority in its partition, after every
    /// one of a higher (default: the handler's `priority`, else [`Priority::NORMAL`]). See
    /// [`Priority`] for the order and what it needs.
    ///
    /// ```no_run
    /// # async fn demo(client: dq_core::Client) -> dq_core::Result<()> {
    /// # struct send_mail;
    /// # impl dq_core::Job for send_mail { type Payload = u64; const TOPIC: &'static str = "mail"; }
    /// use dq_core::Priority;
    /// client.enqueue::<send_mail>(7).priority(Priority::HIGH).await?;
    /// # Ok(()) }
    /// ```
    pub fn priority(mut self, priority: Priority) -> Self {
        self.spec = self.spec.priority(priority);
        self
    }

    /// The handler's default priority, unless the job has one of its own.
    pub(super) fn default_priority(mut self, priority: Option<Priority>) -> Self {
        if self.spec.priority.is_none() {
            self.spec.priority = priority;
        }
        self
    }

    /// The key cannot be enqueued again while this job exists, nor for `d` after it
    /// finished (succeeded, dead, cancelled or expired): such an enqueue writes nothing and
    /// reports [`EnqueueOutcome::Refused`] with the time the window ends (while the job
    /// exists: `Exists`, as always). By the store's clock; `d` more than zero. See
    /// [`KeyWindow`].
    ///
    /// ```no_run
    /// # async fn demo(client: dq_core::Client) -> dq_core::Result<()> {
    /// # struct invoice;
    /// # impl dq_core::Job for invoice { type Payload = u64; const TOPIC: &'static str = "invoice"; }
    /// use std::time::Duration;
    /// client
    ///     .enqueue::<invoice>(7)
    ///     .key("invoice-7")
    ///     .unique_for(Duration::from_secs(24 * 3600))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn unique_for(mut self, d: Duration) -> Self {
        self.spec = self.spec.unique_for(d);
        self
    }

    /// Last wins: the job runs `d` after the last enqueue of its key. An enqueue while the
    /// job waits replaces its payload and makes it due `d` from now (`Replaced`); while it
    /// runs, nothing is written (`Exists(Active)`). Not with `delay` or `at`
    /// ([`Error::InvalidWindow`]). See [`KeyWindow::Debounce`].
    pub fn debounce(mut self, d: Duration) -> Self {
        self.spec = self.spec.debounce(d);
        self
    }

    /// First wins: for `d` after this enqueue is accepted, every later enqueue of the key is
    /// refused ([`EnqueueOutcome::Refused`]), even once this job has run. See
    /// [`KeyWindow::Throttle`].
    pub fn throttle(mut self, d: Duration) -> Self {
        self.spec = self.spec.throttle(d);
        self
    }

    /// Puts the job in `group`: once due it waits for its group's turn and runs within the
    /// group's limits (README "Groups", [`crate::group`]). A bad name is
    /// [`Error::InvalidGroup`](crate::Error::InvalidGroup), before anything is written; a group
    /// while a live process reads only formats below 6 is
    /// [`Error::NeedsFormat`](crate::Error::NeedsFormat).
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.spec = self.spec.group(group);
        self
    }

    /// The handler's group (`group = field`), unless the job has one of its own.
    pub(super) fn default_group(mut self, group: Option<String>) -> Self {
        if self.spec.group.is_none() {
            self.spec.group = group;
        }
        self
    }

    /// The handler's default key window, unless the job has one of its own.
    pub(super) fn default_window(mut self, window: Option<KeyWindow>) -> Self {
        if self.spec.window.is_none() {
            self.spec.window = window;
        }
        self
    }

    /// The handler's default expiry, unless the job has one of its own.
    pub(super) fn default_expiry(mut self, after: Option<Duration>) -> Self {
        if self.spec.expires.is_none() {
            self.spec.expires = after.map(Expiry::AfterDue);
        }
        self
    }

    async fn send(self) -> Result<Enqueued> {
        let topic = self.topic?;
        let JobSpec {
            payload,
            key,
            due,
            replace,
            expires,
            priority,
            window,
            group,
            batch,
        } = self.spec;
        let job = topic.new_job(JobSpec {
            payload: payload?,
            key,
            due,
            replace,
            expires,
            priority,
            window,
            group,
            batch,
        })?;
        topic.ask_hooks(&job).await?;
        let key = job.key.clone();
        let outcome = topic.enqueue_one(job).await?;
        Ok(Enqueued { key, outcome })
    }
}

impl IntoFuture for Enqueue {
    type Output = Result<Enqueued>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Enqueued>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}

impl TopicClient {
    /// Enqueues one job with a raw MessagePack payload.
    pub fn enqueue(&self, payload: Vec<u8>) -> Enqueue {
        let checked =
            payload::check_size(&payload, self.client.config.max_payload).map(|()| payload);
        Enqueue::new(Ok(self.clone()), checked)
    }

    /// Enqueues many jobs with raw payloads; every job is validated before any is written, and
    /// a bad one is refused as [`Error::BulkItem`] (its index in `jobs`, its key, and the
    /// item's own error as `source`): nothing is written then.
    ///
    /// Jobs are sent in calls (chunks) of at most `bulk_chunk` jobs per partition, partition
    /// by partition, each in the order given; each call is atomic and is retried inside
    /// through connection trouble with no double effect (keys, generated ones too, and a call
    /// id are fixed before its first try; see [`ENQUEUE_RETRY_WINDOW`]). The bulk as a whole
    /// is not atomic:
    ///
    /// - An error other than [`Error::BulkPartial`] means that no chunk was stored (for a
    ///   retryable error, the first chunk may have been, as for a single enqueue).
    /// - [`Error::BulkPartial`] means that some chunks were stored before one failed (e.g.
    ///   with [`Error::OutOfMemory`] at Redis's `maxmemory`): its `outcomes` has one entry per
    ///   job, `Some` for each job stored (with its key, generated ones too) and `None` for
    ///   each job not stored. To resume, send again exactly the jobs whose entry is `None`:
    ///   every job is then stored once. (If `source` is retryable, the chunk named by
    ///   `failed` may have been stored: resending those jobs with keys creates no second job
    ///   while the first exists; give every job a key where that matters.)
    ///
    /// ```no_run
    /// # async fn demo(t: dq_core::TopicClient, jobs: Vec<dq_core::JobSpec<Vec<u8>>>) -> dq_core::Result<()> {
    /// match t.enqueue_bulk(jobs.clone()).await {
    ///     Err(dq_core::Error::BulkPartial { outcomes, .. }) => {
    ///         // Later (e.g. once memory is free): the jobs not stored, each once.
    ///         let rest = jobs
    ///             .into_iter()
    ///             .zip(outcomes.outcomes())
    ///             .filter(|(_, stored)| stored.is_none())
    ///             .map(|(job, _)| job)
    ///             .collect();
    ///         t.enqueue_bulk(rest).await?;
    ///     }
    ///     other => { other?; }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn enqueue_bulk(&self, jobs: Vec<JobSpec<Vec<u8>>>) -> Result<Vec<Enqueued>> {
        // Validate everything first: nothing is written if any job is bad.
        let n = jobs.len();
        let mut valid = Vec::with_capacity(n);
        for (i, job) in jobs.into_iter().enumerate() {
            let key = job.key.clone();
            valid.push(
                self.new_job(job)
                    .map_err(|e| e.in_bulk_item(i, key.as_deref()))?,
            );
            // The client's enqueue hooks, job by job: a refusal writes nothing either.
            if let Some(job) = valid.last() {
                self.ask_hooks(job)
                    .await
                    .map_err(|e| e.in_bulk_item(i, key.as_deref()))?;
            }
        }
        // Routed with the topic's recorded count, known once the topic is checked.
        let count = self.ensure().await?;
        let mut by_partition: HashMap<u16, (Vec<usize>, Vec<NewJob>)> = HashMap::new();
        for (i, job) in valid.into_iter().enumerate() {
            let (indices, jobs) = by_partition.entry(job.key.partition(count)).or_default();
            indices.push(i);
            jobs.push(job);
        }
        let mut out: Vec<Option<Enqueued>> = vec![None; n];
        let chunk = self.client.config.bulk_chunk.max(1);
        let mut partitions: Vec<_> = by_partition.into_iter().collect();
        partitions.sort_by_key(|(p, _)| *p);
        let mut stored_any = false;
        for (partition, (indices, jobs)) in partitions {
            let queue = Queue::new(self.topic.clone(), partition);
            for (indices, jobs) in indices.chunks(chunk).zip(jobs.chunks(chunk)) {
                let outcomes = match self.send_enqueue(&queue, jobs, EnqueueCall::new()).await {
                    Ok(outcomes) => outcomes,
                    Err(source) if stored_any => {
                        return Err(Error::BulkPartial {
                            outcomes: BulkStored::new(out),
                            failed: indices.to_vec(),
                            source: Box::new(source),
                        });
                    }
                    Err(e) => return Err(e),
                };
                stored_any = true;
                for ((i, job), outcome) in indices.iter().zip(jobs).zip(outcomes) {
                    out[*i] = Some(Enqueued {
                        key: job.key.clone(),
                        outcome,
                    });
                }
            }
        }
        out.into_iter()
            .map(|o| o.ok_or_else(|| Error::Protocol("enqueue lost an outcome".into())))
            .collect()
    }

    /// Validates one job (its partition is found once the topic is checked: see
    /// [`TopicClient::ensure`]).
    fn new_job(&self, job: JobSpec<Vec<u8>>) -> Result<NewJob> {
        payload::check_size(&job.payload, self.client.config.max_payload)?;
        // The producer's trace context travels in front of the payload (not counted in its
        // limit): see `crate::trace`.
        #[cfg(feature = "otel")]
        let job = match crate::trace::current_traceparent() {
            Some(tp) => JobSpec {
                payload: crate::trace::wrap(&tp, job.payload),
                ..job
            },
            None => job,
        };
        job.due.check()?;
        check_expiry(job.due, job.expires)?;
        if let Some(window) = job.window {
            window.check(job.due != Due::Now)?;
        }
        let group = job.group.map(crate::group::GroupName::new).transpose()?;
        let key = match job.key {
            Some(k) => JobKey::new(k)?,
            None => JobKey::generate(),
        };
        Ok(NewJob {
            key,
            payload: job.payload,
            due: job.due,
            replace: job.replace,
            expires: job.expires,
            priority: job.priority.unwrap_or_default(),
            window: job.window,
            group,
            batch: job.batch,
        })
    }

    /// Enqueues one job under a call id of the caller's, every try marked as a retry: a call
    /// repeated with the same `call_id` within
    /// [`ENQUEUE_RECEIPT_LIFE`](crate::store::produce::ENQUEUE_RECEIPT_LIFE) of the one that
    /// was applied finds that call's receipt, writes nothing and reports what it did
    /// (`Created` / `Replaced` again while the job is there, `Ended` once it is gone). For a
    /// producer that repeats whole requests, possibly from another process (the HTTP API's
    /// `Idempotency-Key`): derive `call_id` from what identifies the request. Validated as
    /// [`TopicClient::enqueue`] is; not coalesced by group commit (its call is its own).
    pub async fn enqueue_repeatable(
        &self,
        job: JobSpec<Vec<u8>>,
        call_id: u64,
    ) -> Result<Enqueued> {
        let job = self.new_job(job)?;
        self.ask_hooks(&job).await?;
        let key = job.key.clone();
        let queue = self.queue_of(&job.key, self.ensure().await?);
        let call = EnqueueCall {
            id: call_id,
            retry: true,
        };
        let outcome = self
            .send_enqueue(&queue, std::slice::from_ref(&job), call)
            .await?
            .pop()
            .ok_or_else(|| Error::Protocol("enqueue returned no outcome".into()))?;
        Ok(Enqueued { key, outcome })
    }

    /// One job stored as [`TopicClient::send_enqueue`] stores it, under a given call (a
    /// periodic tick's: an id derived from its key, so that schedulers repeating each other's
    /// call find its receipt), after the topic check.
    pub(crate) async fn enqueue_as(
        &self,
        job: JobSpec<Vec<u8>>,
        call: EnqueueCall,
    ) -> Result<EnqueueOutcome> {
        let job = self.new_job(job)?;
        let queue = self.queue_of(&job.key, self.ensure().await?);
        let mut outcomes = self.send_enqueue(&queue, &[job], call).await?;
        outcomes
            .pop()
            .ok_or_else(|| Error::Protocol("enqueue returned no outcome".into()))
    }

    /// One validated single job, coalesced with concurrent ones to the same partition when
    /// group commit is on ([`GroupCommit`]): the topic is checked for this caller first, so
    /// a mismatch is its own error; the call is then [`TopicClient::send_enqueue`] of one
    /// job, or of a batch of callers.
    async fn enqueue_one(&self, job: NewJob) -> Result<EnqueueOutcome> {
        let partitions = self.ensure().await?;
        let queue = self.queue_of(&job.key, partitions);
        match self.client.config.group_commit {
            Some(gc) => {
                let route = group::Route {
                    lanes: self.client.lanes.clone(),
                    sender: Arc::new(self.clone()),
                    partitions,
                    max_batch: gc.max_batch.min(self.client.config.bulk_chunk),
                    linger: gc.linger,
                };
                group::enqueue(route, queue, job).await
            }
            None => self
                .send_enqueue(&queue, std::slice::from_ref(&job), EnqueueCall::new())
                .await?
                .pop()
                .ok_or_else(|| Error::Protocol("enqueue returned no outcome".into())),
        }
    }

    /// One enqueue call to the store, after the topic check (done by the caller, which
    /// routed the jobs with the recorded count), retried through connection trouble. Keys and
    /// the call id are fixed before the first try (`first`), and every retry says it is one:
    /// a retry after a try that was applied (its reply lost) finds the call's receipt and
    /// writes nothing, even if the job has run and gone in between. Retries stop
    /// [`ENQUEUE_RETRY_WINDOW`] after the first try, well inside the receipt's life. Counts
    /// the jobs stored.
    pub(super) async fn send_enqueue(
        &self,
        queue: &Queue,
        jobs: &[NewJob],
        first: EnqueueCall,
    ) -> Result<Vec<EnqueueOutcome>> {
        let store = &self.client.store;
        let started = tokio::time::Instant::now();
        let tries = &AtomicU32::new(0);
        (move || async move {
            let call = match tries.fetch_add(1, Ordering::Relaxed) {
                0 => first,
                _ => first.retried(),
            };
            store.enqueue(queue, jobs, call).await
        })
        .retry(retrying())
        .when(|e| e.is_retryable() && started.elapsed() < ENQUEUE_RETRY_WINDOW)
        .await
        .inspect(|outcomes| {
            let stored = outcomes
                .iter()
                .filter(|o| matches!(o, EnqueueOutcome::Created | EnqueueOutcome::Replaced))
                .count();
            crate::metrics::enqueued(self.topic.as_str(), stored as u64);
        })
    }
}

impl BulkStored {
    fn new(entries: Vec<Option<Enqueued>>) -> Self {
        BulkStored {
            stored: entries.iter().flatten().count(),
            len: entries.len(),
            entries: Arc::new(entries),
        }
    }

    /// One entry per job of the bulk, in the order given: `Some` (its key, generated keys
    /// too, and its outcome) for a job that was stored, `None` for one that was not.
    pub fn outcomes(&self) -> &[Option<Enqueued>] {
        self.entries
            .downcast_ref::<Vec<Option<Enqueued>>>()
            .map_or(&[], Vec::as_slice)
    }
}

impl BatchSend for TopicClient {
    fn send_batch<'a>(
        &'a self,
        queue: &'a Queue,
        jobs: &'a [NewJob],
    ) -> Pin<Box<dyn Future<Output = Result<Vec<EnqueueOutcome>>> + Send + 'a>> {
        Box::pin(self.send_enqueue(queue, jobs, EnqueueCall::new()))
    }
}

/// Refuses an expiry that cannot be kept, before anything is written, where no clock is
/// needed: an `AfterDue` of zero or past what dq can store, an `At` not after an `At` due
/// time. What depends on "now" (an `At` expiry of a job due now or after a delay, an
/// `AfterDue` of a due time long past) is checked by the store, on its own clock.
fn check_expiry(due: Due, expires: Option<Expiry>) -> Result<()> {
    match expires {
        None => Ok(()),
        Some(Expiry::AfterDue(d)) if d.is_zero() => Err(Error::InvalidExpiry(
            "expires_after must be longer than zero (leave it out for no expiry)".into(),
        )),
        Some(Expiry::AfterDue(d)) if d.as_millis() > u128::from(MAX_DUE_MS) => Err(
            Error::InvalidExpiry(format!("expires_after of {d:?} is past what dq can store")),
        ),
        Some(Expiry::AfterDue(_)) => Ok(()),
        Some(Expiry::At(t)) => {
            let at = unix_ms(t);
            if let Due::At(d) = due
                && at <= unix_ms(d)
            {
                return Err(Error::InvalidExpiry(format!(
                    "expires_at ({at} ms) is not after the job's due time ({} ms)",
                    unix_ms(d)
                )));
            }
            if at > MAX_DUE_MS {
                return Err(Error::InvalidExpiry(format!(
                    "expires_at ({at} ms) is past what dq can store ({MAX_DUE_MS} ms)"
                )));
            }
            Ok(())
        }
    }
}
