//! Shared pieces of the worker tests: an event log handlers write to, and a store wrapper
//! that injects faults into chosen calls (Redis still does all the work).

#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use dq::store::{
    AckOutcome, Catalog, EnqueueCall, FailOutcome, FailedAttempt, FetchReply, FetchRequest, Lease,
    NewJob, Operate, Produce, Queue, Store, WakeListener,
};
use dq::{
    CancelOutcome, DeadLimits, EnqueueOutcome, JobInfo, JobKey, NewDue, RescheduleOutcome, Topic,
    TopicMeta, TopicStats,
};

/// One handler run, as seen from inside the handler.
#[derive(Clone, Debug)]
pub struct Run {
    pub key: String,
    pub attempt: u32,
    pub due_ms: u64,
    /// Redis TIME when the handler started.
    pub started_ms: u64,
    pub started: std::time::Instant,
    pub note: &'static str,
}

/// What handlers record; shared with them through the worker's `.data(…)`.
#[derive(Clone, Default)]
pub struct Log {
    pub runs: Arc<Mutex<Vec<Run>>>,
    pub finish_long_jobs: bool,
}

impl Log {
    pub fn push(&self, run: Run) {
        self.runs.lock().unwrap().push(run);
    }

    pub fn runs(&self) -> Vec<Run> {
        self.runs.lock().unwrap().clone()
    }

    pub fn count(&self, note: &str) -> usize {
        self.runs
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.note == note)
            .count()
    }

    pub fn of(&self, key: &str) -> Vec<Run> {
        self.runs
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.key == key)
            .cloned()
            .collect()
    }
}

/// Records a run of the job `ctx` describes.
pub async fn record(ctx: &dq::JobContext, note: &'static str) -> Result<(), dq::JobError> {
    let log = ctx.data::<Log>()?;
    let client = ctx.data::<dq::Client>()?;
    let started_ms = client.store().now_ms().await?;
    log.push(Run {
        key: ctx.key.to_string(),
        attempt: ctx.attempt,
        due_ms: ctx.due_ms,
        started_ms,
        started: std::time::Instant::now(),
        note,
    });
    Ok(())
}

pub const WAIT: Duration = Duration::from_secs(30);

/// A store whose `extend` calls fail as if the network dropped them.
pub struct NoExtend(pub Arc<dyn Store>);

#[async_trait]
impl Produce for NoExtend {
    async fn enqueue(
        &self,
        q: &Queue,
        jobs: &[NewJob],
        call: EnqueueCall,
    ) -> dq::Result<Vec<EnqueueOutcome>> {
        self.0.enqueue(q, jobs, call).await
    }
}

#[async_trait]
impl Lease for NoExtend {
    async fn fetch(&self, q: &Queue, r: &FetchRequest) -> dq::Result<FetchReply> {
        self.0.fetch(q, r).await
    }
    async fn ack(
        &self,
        q: &Queue,
        worker: &str,
        done: &[dq::store::Success],
    ) -> dq::Result<Vec<AckOutcome>> {
        self.0.ack(q, worker, done).await
    }
    async fn fail_many(
        &self,
        q: &Queue,
        failures: &[FailedAttempt],
        limits: DeadLimits,
    ) -> dq::Result<Vec<dq::Result<FailOutcome>>> {
        self.0.fail_many(q, failures, limits).await
    }
    async fn extend(
        &self,
        _: &Queue,
        _: &[(JobKey, u64)],
        _: Duration,
    ) -> dq::Result<Vec<dq::store::Extended>> {
        Err(dq::Error::Timeout(Duration::from_millis(1)))
    }
    async fn release(&self, q: &Queue, leases: &[(JobKey, u64)]) -> dq::Result<Vec<bool>> {
        self.0.release(q, leases).await
    }
    async fn report(
        &self,
        q: &Queue,
        key: &JobKey,
        token: u64,
        report: &dq::Report,
    ) -> dq::Result<bool> {
        self.0.report(q, key, token, report).await
    }
    async fn wake_listener(&self, q: &Queue) -> dq::Result<Box<dyn WakeListener>> {
        self.0.wake_listener(q).await
    }
}

#[async_trait]
impl Operate for NoExtend {
    async fn cancel(&self, q: &Queue, key: &JobKey) -> dq::Result<CancelOutcome> {
        self.0.cancel(q, key).await
    }
    async fn reschedule(
        &self,
        q: &Queue,
        key: &JobKey,
        due: NewDue,
    ) -> dq::Result<RescheduleOutcome> {
        self.0.reschedule(q, key, due).await
    }
    async fn bury(
        &self,
        q: &Queue,
        key: &JobKey,
        reason: &str,
        limits: dq::DeadLimits,
    ) -> dq::Result<dq::BuryOutcome> {
        self.0.bury(q, key, reason, limits).await
    }
    async fn update_payload(
        &self,
        q: &Queue,
        key: &JobKey,
        payload: &[u8],
    ) -> dq::Result<dq::UpdateOutcome> {
        self.0.update_payload(q, key, payload).await
    }
    async fn control(
        &self,
        q: &Queue,
        change: &dq::store::ControlChange,
    ) -> dq::Result<dq::store::ControlState> {
        self.0.control(q, change).await
    }
    async fn group(
        &self,
        q: &Queue,
        change: &dq::store::GroupChange,
    ) -> dq::Result<dq::GroupState> {
        self.0.group(q, change).await
    }
    async fn job(&self, q: &Queue, key: &JobKey) -> dq::Result<Option<JobInfo>> {
        self.0.job(q, key).await
    }
    async fn finished(&self, q: &Queue, key: &JobKey) -> dq::Result<Option<dq::FinishedJob>> {
        self.0.finished(q, key).await
    }
    async fn list_finished(
        &self,
        q: &Queue,
        outcome: dq::FinishedAs,
        from: &dq::store::ListFrom,
        limit: usize,
    ) -> dq::Result<dq::store::FinishedChunk> {
        self.0.list_finished(q, outcome, from, limit).await
    }
    async fn stats(&self, q: &Queue) -> dq::Result<TopicStats> {
        self.0.stats(q).await
    }
    async fn read_events(
        &self,
        q: &Queue,
        after: dq::EventId,
        limit: usize,
    ) -> dq::Result<Vec<dq::Event>> {
        self.0.read_events(q, after, limit).await
    }
    async fn last_event(&self, q: &Queue) -> dq::Result<Option<dq::EventId>> {
        self.0.last_event(q).await
    }
    async fn list(
        &self,
        q: &Queue,
        state: dq::JobState,
        from: &dq::store::ListFrom,
        limit: usize,
    ) -> dq::Result<dq::store::ListChunk> {
        self.0.list(q, state, from, limit).await
    }
    async fn requeue_dead(&self, q: &Queue, keys: &[JobKey]) -> dq::Result<Vec<bool>> {
        self.0.requeue_dead(q, keys).await
    }
    async fn purge_dead(&self, q: &Queue, keys: &[JobKey], limit: usize) -> dq::Result<u64> {
        self.0.purge_dead(q, keys, limit).await
    }
    async fn act_on_dead(
        &self,
        q: &Queue,
        action: dq::DeadAction,
        seen: &[(JobKey, u64)],
    ) -> dq::Result<Vec<bool>> {
        self.0.act_on_dead(q, action, seen).await
    }
}

/// Keeps no schedules (the trait's defaults), as before.
#[async_trait]
impl Catalog for NoExtend {
    async fn register_topic(&self, topic: &Topic, partitions: u16) -> dq::Result<TopicMeta> {
        self.0.register_topic(topic, partitions).await
    }
    async fn topics(&self) -> dq::Result<Vec<TopicMeta>> {
        self.0.topics().await
    }
    async fn reset_topic(&self, topic: &Topic) -> dq::Result<Option<TopicMeta>> {
        self.0.reset_topic(topic).await
    }
    async fn beat_worker(&self, w: &dq::WorkerInfo, ttl: Duration) -> dq::Result<u64> {
        self.0.beat_worker(w, ttl).await
    }
    async fn workers(&self) -> dq::Result<Vec<dq::WorkerInfo>> {
        self.0.workers().await
    }
    async fn remove_worker(&self, id: &str) -> dq::Result<bool> {
        self.0.remove_worker(id).await
    }
    async fn now_ms(&self) -> dq::Result<u64> {
        self.0.now_ms().await
    }
    fn formats(&self) -> &dq::store::Formats {
        self.0.formats()
    }
}

/// Batches as the wrapped store keeps them.
#[async_trait]
impl dq::store::Batches for NoExtend {
    async fn batch_open(
        &self,
        id: &dq::BatchId,
        spec: &dq::batch::BatchSpec,
    ) -> dq::Result<(bool, dq::BatchInfo)> {
        self.0.batch_open(id, spec).await
    }
    async fn batch_reserve(
        &self,
        id: &dq::BatchId,
        members: &[dq::MemberId],
    ) -> dq::Result<dq::batch::Reservation> {
        self.0.batch_reserve(id, members).await
    }
    async fn batch_apply(
        &self,
        id: &dq::BatchId,
        notes: &[(dq::MemberId, dq::MemberState)],
    ) -> dq::Result<Option<dq::BatchInfo>> {
        self.0.batch_apply(id, notes).await
    }
    async fn batch_close(&self, id: &dq::BatchId) -> dq::Result<dq::BatchInfo> {
        self.0.batch_close(id).await
    }
    async fn batch_mark_done(&self, id: &dq::BatchId) -> dq::Result<dq::BatchInfo> {
        self.0.batch_mark_done(id).await
    }
    async fn batch(&self, id: &dq::BatchId) -> dq::Result<Option<dq::BatchInfo>> {
        self.0.batch(id).await
    }
    async fn batch_members(
        &self,
        id: &dq::BatchId,
        cursor: u64,
        limit: usize,
    ) -> dq::Result<dq::MemberPage> {
        self.0.batch_members(id, cursor, limit).await
    }
    async fn open_batches(
        &self,
        after: Option<&dq::batch::IndexEntry>,
        limit: usize,
    ) -> dq::Result<Vec<dq::batch::IndexEntry>> {
        self.0.open_batches(after, limit).await
    }
    async fn open_batch_count(&self) -> dq::Result<u64> {
        self.0.open_batch_count().await
    }
    async fn forget_batch(&self, id: &dq::BatchId) -> dq::Result<()> {
        self.0.forget_batch(id).await
    }
    async fn outbox(
        &self,
        q: &Queue,
        after: Option<&str>,
        limit: usize,
    ) -> dq::Result<Vec<dq::batch::OutboxNote>> {
        self.0.outbox(q, after, limit).await
    }
    async fn outbox_trim(&self, q: &Queue, through: &str) -> dq::Result<()> {
        self.0.outbox_trim(q, through).await
    }
    async fn outbox_done(&self, q: &Queue, ids: &[String]) -> dq::Result<()> {
        self.0.outbox_done(q, ids).await
    }
}
