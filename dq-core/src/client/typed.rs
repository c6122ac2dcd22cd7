//! [`Client`]'s typed API: every call takes a job type `J` (`client.enqueue::<close_order>(…)`),
//! so the payload is checked against the handler at compile time, and goes to the untyped
//! [`TopicClient`] of `J::TOPIC`.

use super::enqueue::{Enqueue, JobSpec};
use super::handle::{Client, TopicClient};
use crate::control::{Rate, TopicControl};
use crate::error::Result;
use crate::inspect::{JobPage, JobView, Page};
use crate::job::{Expiry, Job, JobInfo, JobState};
use crate::payload;
use crate::store::operate::{CancelOutcome, NewDue, RescheduleOutcome, TopicStats, UpdateOutcome};
use crate::store::produce::Enqueued;

impl Client {
    fn typed<J: Job>(&self) -> Result<TopicClient> {
        self.topic(J::TOPIC)
    }

    /// Enqueues a job of type `J`. Await the returned builder; before that, set
    /// `.key(…)`, `.delay(…)` or `.at(…)`, `.replace()`, `.expires_after(…)` or
    /// `.expires_at(…)` (the handler's `expires_after` is the default).
    ///
    /// ```no_run
    /// # async fn demo(client: dq_core::Client) -> dq_core::Result<()> {
    /// # struct close_order;
    /// # impl dq_core::Job for close_order { type Payload = u64; const TOPIC: &'static str = "orders.close"; }
    /// use std::time::Duration;
    /// let done = client
    ///     .enqueue::<close_order>(7)
    ///     .key("order-7")
    ///     .delay(Duration::from_secs(1800))
    ///     .await?;
    /// println!("{} {:?}", done.key, done.outcome);
    /// # Ok(()) }
    /// ```
    pub fn enqueue<J: Job>(&self, payload: J::Payload) -> Enqueue {
        let encoded = payload::encode(&payload, self.config.max_payload);
        Enqueue::new(self.typed::<J>(), encoded)
            .default_expiry(J::EXPIRES_AFTER)
            .default_priority(Some(J::PRIORITY))
            .default_window(J::WINDOW)
            .default_group(J::group(&payload))
    }

    /// Enqueues many jobs of type `J` with one script call per partition and chunk of
    /// [`ClientConfig::bulk_chunk`](crate::ClientConfig::bulk_chunk). Every job is validated before any is written; a bad one
    /// is refused as [`Error::BulkItem`](crate::Error::BulkItem), which names its index and key. See
    /// [`TopicClient::enqueue_bulk`] for what an error after that means.
    pub async fn enqueue_bulk<J: Job>(
        &self,
        jobs: impl IntoIterator<Item = JobSpec<J::Payload>>,
    ) -> Result<Vec<Enqueued>> {
        let raw = typed_specs::<J>(jobs, self.config.max_payload)?;
        self.typed::<J>()?.enqueue_bulk(raw).await
    }

    /// Cancels a job of type `J` that has not started; the outcome says what happened.
    /// Retried inside through connection trouble: see [`TopicClient::cancel`].
    pub async fn cancel<J: Job>(&self, key: &str) -> Result<CancelOutcome> {
        self.typed::<J>()?.cancel(key).await
    }

    /// Gives a waiting job of type `J` a new due time: [`NewDue::At`] a time,
    /// [`NewDue::After`] a delay from now, or [`NewDue::Shift`] by ± ms from its current due
    /// time. `At` and `After` are retried inside through connection trouble, `Shift` is
    /// not: see [`TopicClient::reschedule`].
    pub async fn reschedule<J: Job>(&self, key: &str, due: NewDue) -> Result<RescheduleOutcome> {
        self.typed::<J>()?.reschedule(key, due).await
    }

    /// Gives a waiting job of type `J` a new payload, keeping its due time, attempts and
    /// history: see [`TopicClient::update_payload`].
    pub async fn update_payload<J: Job>(
        &self,
        key: &str,
        payload: &J::Payload,
    ) -> Result<UpdateOutcome> {
        let bytes = payload::encode(payload, self.config.max_payload)?;
        self.typed::<J>()?.update_payload(key, bytes).await
    }

    /// Everything known about a job of type `J`, decoded, or `None` if no such job exists.
    ///
    /// The payload is decoded as `J::Payload`; one that does not decode does not fail the call
    /// (see [`JobView::payload`]). [`TopicClient::job`] gives the undecoded [`JobInfo`].
    pub async fn job<J: Job>(&self, key: &str) -> Result<Option<JobView<J::Payload>>> {
        Ok(self.typed::<J>()?.job(key).await?.map(JobInfo::decode))
    }

    /// One page of `J`'s jobs in `state`, decoded, across all partitions of its topic: see
    /// [`TopicClient::list`] for the order and the paging.
    ///
    /// ```no_run
    /// # async fn demo(client: dq_core::Client) -> dq_core::Result<()> {
    /// # struct close_order;
    /// # impl dq_core::Job for close_order { type Payload = u64; const TOPIC: &'static str = "orders.close"; }
    /// use dq_core::{JobState, Page};
    /// let mut page = Page::first(100);
    /// loop {
    ///     let jobs = client.list::<close_order>(JobState::Scheduled, page).await?;
    ///     for job in &jobs.jobs {
    ///         println!("{} due {:?}: {:?}", job.key, job.due, job.payload);
    ///     }
    ///     let Some(next) = jobs.next else { break };
    ///     page = Page::after(next, 100);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list<J: Job>(
        &self,
        state: JobState,
        page: Page,
    ) -> Result<JobPage<JobView<J::Payload>>> {
        let page = self.typed::<J>()?.list(state, page).await?;
        Ok(JobPage {
            jobs: page.jobs.into_iter().map(JobInfo::decode).collect(),
            next: page.next,
        })
    }

    /// One page of `J`'s dead queue, decoded, oldest death first: `list(JobState::Dead, page)`.
    pub async fn dead<J: Job>(&self, page: Page) -> Result<JobPage<JobView<J::Payload>>> {
        self.list::<J>(JobState::Dead, page).await
    }

    /// Moves the named dead jobs of `J` back to `ready`, attempts reset and history kept;
    /// returns how many moved (a key that is not dead, or not there, is skipped). Every key
    /// is validated before anything moves.
    pub async fn requeue_dead<J: Job>(&self, keys: &[&str]) -> Result<u64> {
        self.typed::<J>()?.requeue_dead(keys).await
    }

    /// Deletes the named dead jobs of `J`; returns how many were deleted (a key that is not
    /// dead, or not there, is skipped). Every key is validated before anything is deleted.
    pub async fn purge_dead<J: Job>(&self, keys: &[&str]) -> Result<u64> {
        self.typed::<J>()?.purge_dead(keys).await
    }

    /// Deletes every dead job of `J`, in bounded batches; returns how many.
    pub async fn purge_all_dead<J: Job>(&self) -> Result<u64> {
        self.typed::<J>()?.purge_all_dead().await
    }

    /// Depths and counters of `J`'s topic.
    pub async fn stats<J: Job>(&self) -> Result<TopicStats> {
        self.typed::<J>()?.stats().await
    }

    /// Pauses `J`'s topic: see [`TopicClient::pause`].
    pub async fn pause<J: Job>(&self) -> Result<TopicControl> {
        self.typed::<J>()?.pause().await
    }

    /// Resumes `J`'s topic: see [`TopicClient::resume`].
    pub async fn resume<J: Job>(&self) -> Result<TopicControl> {
        self.typed::<J>()?.resume().await
    }

    /// Sets or removes the rate limit of `J`'s topic: see [`TopicClient::set_rate`].
    pub async fn set_rate<J: Job>(&self, rate: Option<Rate>) -> Result<TopicControl> {
        self.typed::<J>()?.set_rate(rate).await
    }

    /// Sets or removes the global concurrency cap of `J`'s topic: see
    /// [`TopicClient::set_concurrency`].
    pub async fn set_concurrency<J: Job>(&self, cap: Option<u32>) -> Result<TopicControl> {
        self.typed::<J>()?.set_concurrency(cap).await
    }
}

/// Typed jobs as the typed client sends them: each payload encoded (a bad one is
/// [`Error::BulkItem`](crate::Error::BulkItem) with its index and key), with the handler's
/// defaults (expiry, priority, key window, group from the payload) where the job gives none.
pub(crate) fn typed_specs<J: Job>(
    jobs: impl IntoIterator<Item = JobSpec<J::Payload>>,
    max_payload: usize,
) -> Result<Vec<JobSpec<Vec<u8>>>> {
    jobs.into_iter()
        .enumerate()
        .map(|(i, j)| {
            let group = j.group.or_else(|| J::group(&j.payload));
            Ok(JobSpec {
                payload: payload::encode(&j.payload, max_payload)
                    .map_err(|e| e.in_bulk_item(i, j.key.as_deref()))?,
                key: j.key,
                due: j.due,
                replace: j.replace,
                expires: j.expires.or(J::EXPIRES_AFTER.map(Expiry::AfterDue)),
                priority: j.priority.or(Some(J::PRIORITY)),
                window: j.window.or(J::WINDOW),
                group,
                batch: j.batch,
            })
        })
        .collect()
}
