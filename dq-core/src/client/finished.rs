//! Finished jobs a topic keeps, and handlers' results: [`TopicClient::finished`],
//! [`TopicClient::list_finished`], and the typed [`Client::result`] and [`Client::wait`].

use std::time::Duration;

use serde::de::DeserializeOwned;

use super::handle::{Client, TopicClient};
use crate::error::{Error, Result};
use crate::finished::{FinishedAs, FinishedJob, StoredResult};
use crate::inspect::{Cursor, JobPage, ListPos, Page};
use crate::job::{JobInfo, JobOutput, JobState};
use crate::names::JobKey;
use crate::payload;

/// One page of kept jobs ([`TopicClient::list_finished`]).
pub type FinishedPage = JobPage<FinishedJob>;

/// How a job that [`Client::wait`] waited for ended.
#[derive(Debug)]
pub enum WaitOutcome<T> {
    /// It succeeded: its handler's value, and the kept job (timings, attempts, worker).
    Succeeded {
        /// What the handler returned.
        result: T,
        /// The job as its topic keeps it.
        job: FinishedJob,
    },
    /// It is in the dead queue; its attempts' errors are in `history`.
    Dead(JobInfo),
    /// It was cancelled (kept because its topic keeps cancelled jobs).
    Cancelled(FinishedJob),
    /// Its expiry came before it started (kept because its topic keeps expired jobs).
    Expired(FinishedJob),
    /// It had not finished when the wait's time was up (it may still run).
    TimedOut,
    /// No job has this key, live or kept: it was never enqueued, or it ended in a way its
    /// topic does not keep (or longer ago than the topic keeps it).
    Unknown,
}

/// The first pause of [`Client::wait`] between two looks at the job; each pause doubles, up
/// to [`WAIT_MAX_PAUSE`].
pub const WAIT_FIRST_PAUSE: Duration = Duration::from_millis(5);

/// The longest pause of [`Client::wait`] between two looks at the job: how late, at most, a
/// wait learns that the job finished.
pub const WAIT_MAX_PAUSE: Duration = Duration::from_millis(200);

impl TopicClient {
    /// The finished job of this key that the topic keeps ([`Retention`](crate::Retention)),
    /// or `None` (never kept, or its time is up). A key enqueued again after it finished has
    /// both its live job ([`TopicClient::job`]) and its last kept run.
    pub async fn finished(&self, key: &str) -> Result<Option<FinishedJob>> {
        let key = JobKey::new(key)?;
        let partitions = self.ensure().await?;
        self.client
            .store
            .finished(&self.queue_of(&key, partitions), &key)
            .await
    }

    /// One page of the kept jobs that ended as `outcome`, in the order their keeping ends
    /// (for one outcome, the order they finished in), merged over the partitions. Page on
    /// with [`Page::after`] of `next` until it is `None`.
    pub async fn list_finished(&self, outcome: FinishedAs, page: Page) -> Result<FinishedPage> {
        page.check_finished(outcome)?;
        let partitions = self.ensure().await?;
        let mut all: Vec<(ListPos, FinishedJob)> = Vec::new();
        // the least place a partition with more stopped at: nothing past it is listed yet,
        // or that partition's jobs before it would be skipped
        let mut bound: Option<ListPos> = None;
        for queue in self.queues(partitions) {
            let from = match &page.after {
                Some(cursor) => cursor.start_of(queue.partition, partitions)?,
                None => crate::inspect::ListFrom::Start,
            };
            let chunk = self
                .client
                .store
                .list_finished(&queue, outcome, &from, page.limit)
                .await?;
            if chunk.more {
                let to = chunk.read_to.ok_or_else(|| {
                    Error::Protocol("a listing of kept jobs has more but read nothing".into())
                })?;
                bound = Some(bound.map_or(to.clone(), |b| b.min(to)));
            }
            all.extend(chunk.jobs);
        }
        all.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some(b) = &bound {
            all.retain(|(pos, _)| pos <= b);
        }
        let left_over = all.len() > page.limit;
        all.truncate(page.limit);
        let next = match (all.last(), bound) {
            (Some((pos, _)), _) if left_over => Some(Cursor::kept(outcome, pos.clone())),
            (_, Some(b)) => Some(Cursor::kept(outcome, b)),
            _ => None,
        };
        Ok(JobPage {
            jobs: all.into_iter().map(|(_, job)| job).collect(),
            next,
        })
    }
}

impl TopicClient {
    /// The retention of the partition of `key` (one call, where [`TopicClient::control`]
    /// reads every partition).
    async fn retention_at(&self, key: &str) -> Result<Option<crate::finished::Retention>> {
        let key = JobKey::new(key)?;
        let partitions = self.ensure().await?;
        let queue = self.queue_of(&key, partitions);
        let state = self
            .client
            .store
            .control(&queue, &crate::control::ControlChange::default())
            .await?;
        Ok(state.retention)
    }
}

impl Client {
    /// The value `J`'s handler returned for the job of this key, if the job succeeded and its
    /// topic keeps succeeded jobs (`#[delayed_job(keep_succeeded = "1h")]`): `Ok(None)` when
    /// no succeeded run of the key is kept.
    ///
    /// Errors: [`Error::ResultNotStored`] when the handler's value was not stored (over the
    /// worker's payload limit, or its serialization failed: the job's success counted all the
    /// same); [`Error::Decode`] when the stored value does not decode as `J::Output`.
    pub async fn result<J: JobOutput>(&self, key: &str) -> Result<Option<J::Output>>
    where
        J::Output: DeserializeOwned,
    {
        match self.topic(J::TOPIC)?.finished(key).await? {
            Some(job) if job.outcome == FinishedAs::Succeeded => decode_result(&job).map(Some),
            _ => Ok(None),
        }
    }

    /// Waits until the job of this key has finished, from any process, for at most
    /// `timeout`, and says how it ended ([`WaitOutcome`]): succeeded with its handler's value,
    /// dead with its errors, cancelled, expired, or still running when the time was up.
    ///
    /// It looks at the job, then again after a pause that doubles from
    /// [`WAIT_FIRST_PAUSE`] to [`WAIT_MAX_PAUSE`], each look one or two reads (a job gone and
    /// not kept also reads the topic's retention). A job seen finished is reported only if
    /// its topic keeps that outcome: waiting on a topic that keeps no succeeded jobs is
    /// refused with [`Error::NotKept`] once the job is gone; a succeeded job whose value was
    /// not stored is [`Error::ResultNotStored`].
    ///
    /// ```no_run
    /// # async fn demo(client: dq_core::Client) -> dq_core::Result<()> {
    /// # struct resize;
    /// # impl dq_core::Job for resize { type Payload = u64; const TOPIC: &'static str = "images.resize"; }
    /// # impl dq_core::JobOutput for resize { type Output = String; }
    /// use std::time::Duration;
    /// client.enqueue::<resize>(7).key("image-7").await?;
    /// match client.wait::<resize>("image-7", Duration::from_secs(30)).await? {
    ///     dq_core::WaitOutcome::Succeeded { result, .. } => println!("stored at {result}"),
    ///     other => println!("not done: {other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn wait<J: JobOutput>(
        &self,
        key: &str,
        timeout: Duration,
    ) -> Result<WaitOutcome<J::Output>>
    where
        J::Output: DeserializeOwned,
    {
        let topic = self.topic(J::TOPIC)?;
        let deadline = tokio::time::Instant::now() + timeout;
        let mut pause = WAIT_FIRST_PAUSE;
        // bounded: every pass but the last sleeps at least WAIT_FIRST_PAUSE before `deadline`
        loop {
            if let Some(outcome) = look::<J>(&topic, key).await? {
                return Ok(outcome);
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(WaitOutcome::TimedOut);
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(WAIT_MAX_PAUSE);
        }
    }
}

/// One look at the job: `None` while it is live and not dead.
async fn look<J: JobOutput>(
    topic: &TopicClient,
    key: &str,
) -> Result<Option<WaitOutcome<J::Output>>>
where
    J::Output: DeserializeOwned,
{
    if let Some(info) = topic.job(key).await? {
        return Ok((info.state == JobState::Dead).then_some(WaitOutcome::Dead(info)));
    }
    // Gone from the live structures: its end was kept in the same step, if it is kept.
    let Some(job) = topic.finished(key).await? else {
        // every partition holds the same times: the job's own partition says it
        if topic
            .retention_at(key)
            .await?
            .is_none_or(|r| r.succeeded.is_none())
        {
            return Err(Error::NotKept {
                topic: topic.topic().to_string(),
            });
        }
        return Ok(Some(WaitOutcome::Unknown));
    };
    Ok(Some(match job.outcome {
        FinishedAs::Succeeded => WaitOutcome::Succeeded {
            result: decode_result::<J::Output>(&job)?,
            job,
        },
        FinishedAs::Cancelled => WaitOutcome::Cancelled(job),
        FinishedAs::Expired => WaitOutcome::Expired(job),
    }))
}

/// A kept job's result, decoded (nothing stored decodes as MessagePack nil: `()`, `None`).
fn decode_result<T: DeserializeOwned>(job: &FinishedJob) -> Result<T> {
    match &job.result {
        StoredResult::Value(bytes) => payload::decode(bytes),
        StoredResult::None => payload::decode(&[0xc0]),
        StoredResult::NotStored(why) => Err(Error::ResultNotStored {
            key: job.key.to_string(),
            reason: why.clone(),
        }),
    }
}
