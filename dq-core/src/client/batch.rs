//! Batches on the client: open one ([`BatchBuilder`]), add members, close it, read its
//! progress and members, cancel it ([`BatchHandle`]); and [`settle`], the one step that
//! enqueues a complete batch's callback and marks it done, shared by the client and the
//! workers' relay (ARCHITECTURE.md §16).

use std::time::Duration;

use crate::Job;
use crate::batch::{
    BatchId, BatchInfo, BatchSpec, BatchThen, DEFAULT_BATCH_RETENTION, FailurePolicy, IndexEntry,
    MemberId, MemberPage, MemberState,
};
use crate::client::{Client, JobSpec, TopicClient};
use crate::error::{Error, Result};
use crate::names::{JobKey, Topic};
use crate::payload;
use crate::store::operate::NewDue;
use crate::store::produce::{EnqueueOutcome, Enqueued};

/// A batch about to be opened: its id, what happens once it is complete, its policy and
/// retention. From [`Client::new_batch`].
#[must_use = "a batch is stored by `open`"]
pub struct BatchBuilder {
    client: Client,
    id: Option<String>,
    then: Result<BatchThen>,
    policy: FailurePolicy,
    retention: Duration,
}

impl BatchBuilder {
    /// Its id (default: a generated one). Opening an id already stored returns that batch.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Enqueue a job of `J` with `payload` once the batch is complete, due now, under the key
    /// `batch:<id>` ([`BatchId::callback_key`]); its handler reads the batch with
    /// [`Client::batch`] and [`BatchId::from_callback_key`].
    pub fn on_complete<J: Job>(mut self, payload: &J::Payload) -> Self {
        let max = self.client.config.max_payload;
        self.then = Topic::new(J::TOPIC).and_then(|topic| {
            Ok(BatchThen::Callback {
                topic,
                payload: payload::encode(payload, max)?,
            })
        });
        self
    }

    /// As [`on_complete`](BatchBuilder::on_complete), with a raw MessagePack payload for a
    /// job of `topic`.
    pub fn on_complete_raw(mut self, topic: &str, payload: Vec<u8>) -> Self {
        let max = self.client.config.max_payload;
        self.then = Topic::new(topic).and_then(|topic| {
            payload::check_size(&payload, max)?;
            Ok(BatchThen::Callback { topic, payload })
        });
        self
    }

    /// When the batch is complete (default [`FailurePolicy::WaitAll`]).
    pub fn policy(mut self, policy: FailurePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// How long it is kept once done (default [`DEFAULT_BATCH_RETENTION`], 7 days; at least a
    /// second).
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention.max(Duration::from_secs(1));
        self
    }

    /// Stores the batch (open: members may be added) and returns its handle.
    pub async fn open(self) -> Result<BatchHandle> {
        check_batch_format(&self.client)?;
        let id = match self.id {
            Some(id) => BatchId::new(id)?,
            None => BatchId::generate(),
        };
        let spec = BatchSpec {
            then: self.then?,
            policy: self.policy,
            retention: self.retention,
        };
        self.client.store.batch_open(&id, &spec).await?;
        Ok(BatchHandle {
            client: self.client,
            id,
        })
    }
}

/// A batch: add members, close, read, cancel. From [`BatchBuilder::open`] or
/// [`Client::batch`].
#[derive(Clone)]
pub struct BatchHandle {
    client: Client,
    id: BatchId,
}

impl std::fmt::Debug for BatchHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchHandle").field("id", &self.id).finish()
    }
}

impl Client {
    /// Starts a new batch; [`BatchBuilder::open`] stores it.
    ///
    /// ```no_run
    /// # async fn demo(client: dq_core::Client) -> dq_core::Result<()> {
    /// # struct release_item; struct close_order;
    /// # impl dq_core::Job for release_item { type Payload = u64; const TOPIC: &'static str = "items.release"; }
    /// # impl dq_core::Job for close_order { type Payload = u64; const TOPIC: &'static str = "orders.close"; }
    /// use dq_core::JobSpec;
    /// let batch = client.new_batch().id("order-17").on_complete::<close_order>(&17).open().await?;
    /// batch.add::<release_item>((1..=3).map(|item| JobSpec::new(item).key(format!("17-{item}")))).await?;
    /// batch.close().await?; // close_order runs once all three items have ended
    /// # Ok(()) }
    /// ```
    pub fn new_batch(&self) -> BatchBuilder {
        BatchBuilder {
            client: self.clone(),
            id: None,
            then: Ok(BatchThen::Nothing),
            policy: FailurePolicy::default(),
            retention: DEFAULT_BATCH_RETENTION,
        }
    }

    /// A handle on batch `id` (not looked up: [`BatchHandle::info`] says whether it exists).
    pub fn batch(&self, id: &str) -> Result<BatchHandle> {
        Ok(BatchHandle {
            client: self.clone(),
            id: BatchId::new(id)?,
        })
    }
}

impl BatchHandle {
    /// The batch's id.
    pub fn id(&self) -> &BatchId {
        &self.id
    }

    /// Adds jobs of `J` as members: each is reserved in the batch, then enqueued with the
    /// batch's id in its record (keys are generated for jobs without one, before anything is
    /// written). Adding a member again (an add repeated after an error, or a flow stored
    /// again) never enqueues it twice: a member already enqueued is reported as
    /// [`EnqueueOutcome::Exists`] (or [`EnqueueOutcome::Ended`] once its job is gone), one
    /// that ended as `Ended`; only a member still reserved (its enqueue not known to have
    /// happened) is enqueued again, which its key makes harmless while its job exists. A job
    /// whose key is taken by a job outside the batch (or refused by its window) is reported
    /// as its enqueue was and ends in the batch as [`MemberState::Refused`]. Members are
    /// reserved, enqueued and noted [`ADD_CHUNK`] at a time. Refused before anything is
    /// written: a closed batch ([`Error::BatchClosed`]), `replace` or `debounce` on a member
    /// ([`Error::InvalidConfig`]). Under [`FailurePolicy::FailFast`] a member that fails while
    /// a long add goes on completes the batch, which closes it: the chunks after it are
    /// refused with `BatchClosed` (the members added before it stay).
    pub async fn add<J: Job>(
        &self,
        jobs: impl IntoIterator<Item = JobSpec<J::Payload>>,
    ) -> Result<Vec<Enqueued>> {
        let raw = super::typed::typed_specs::<J>(jobs, self.client.config.max_payload)?;
        self.add_raw(J::TOPIC, raw).await
    }

    /// As [`add`](BatchHandle::add), with raw MessagePack payloads for jobs of `topic`.
    pub async fn add_raw(&self, topic: &str, jobs: Vec<JobSpec<Vec<u8>>>) -> Result<Vec<Enqueued>> {
        let t = self.client.topic(topic)?;
        let mut specs = Vec::with_capacity(jobs.len());
        let mut members = Vec::with_capacity(jobs.len());
        for mut job in jobs {
            if job.replace || matches!(job.window, Some(crate::KeyWindow::Debounce(_))) {
                return Err(Error::InvalidConfig(
                    "a batch's member cannot replace a job (replace, debounce): its key must be \
                     its own"
                        .into(),
                ));
            }
            let key = match job.key.take() {
                Some(k) => JobKey::new(k)?,
                None => JobKey::generate(),
            };
            members.push(MemberId::new(t.topic().clone(), key.clone()));
            job.key = Some(key.as_str().to_owned());
            job.batch = Some(self.id.clone());
            specs.push(job);
        }
        if specs.is_empty() {
            return Ok(Vec::new());
        }
        check_batch_format(&self.client)?;
        let mut outcomes = Vec::with_capacity(specs.len());
        let mut specs = specs.into_iter();
        for members in members.chunks(ADD_CHUNK) {
            let chunk: Vec<_> = specs.by_ref().take(members.len()).collect();
            outcomes.extend(self.add_chunk(&t, chunk, members).await?);
        }
        Ok(outcomes)
    }

    /// One chunk of an add: reserve, enqueue what is new or still reserved, note what each
    /// became.
    async fn add_chunk(
        &self,
        t: &TopicClient,
        specs: Vec<JobSpec<Vec<u8>>>,
        members: &[MemberId],
    ) -> Result<Vec<Enqueued>> {
        // 1. reserved in the batch (refused if closed: nothing enqueued); each member's state
        // before, so one enqueued or ended before is not enqueued again (its key may be free)
        let reserved = self.client.store.batch_reserve(&self.id, members).await?;
        let mut notes = Vec::new();
        let before = self
            .recheck_reserved(t, members, reserved.before, &mut notes)
            .await?;
        let mut outcomes: Vec<Option<Enqueued>> = Vec::with_capacity(specs.len());
        let mut fresh = Vec::new();
        for (spec, (m, before)) in specs.into_iter().zip(members.iter().zip(&before)) {
            match before {
                None | Some(MemberState::Reserved) => {
                    outcomes.push(None);
                    fresh.push(spec);
                }
                Some(state) => outcomes.push(Some(Enqueued {
                    key: m.key.clone(),
                    outcome: self.outcome_of_added(t, &m.key, *state).await?,
                })),
            }
        }
        // 2. enqueued in their partitions, the batch's id in their records
        let mut enqueued = if fresh.is_empty() {
            Vec::new()
        } else {
            t.enqueue_bulk(fresh).await?
        }
        .into_iter();
        // 3. what each became, as far as this producer knows (the relay carries the ends)
        for (slot, m) in outcomes.iter_mut().zip(members) {
            if slot.is_some() {
                continue;
            }
            let e = enqueued
                .next()
                .ok_or_else(|| Error::Protocol("fewer outcomes than jobs enqueued".into()))?;
            if let Some(state) = self.state_after_add(t, &e.key, e.outcome).await? {
                notes.push((m.clone(), state));
            }
            *slot = Some(e);
        }
        if let Some(info) = self.client.store.batch_apply(&self.id, &notes).await? {
            settle(&self.client, &info).await?;
        }
        Ok(outcomes.into_iter().flatten().collect())
    }

    /// Makes sure of the members an earlier add left reserved (`before` says `Reserved`): such
    /// a member's job may have run and ended since — its key free, its end noted in its
    /// partition's outbox but not relayed yet — and enqueueing it again would run it twice.
    /// One whose job holds its key now is enqueued (noted so in `notes`). For the others,
    /// whose job was gone at this look, their partitions' outboxes are relayed through (an end
    /// before the look was noted before the relay reads) and their states read again: only
    /// those still reserved are enqueued. Fails if this batch's notes could not be applied.
    async fn recheck_reserved(
        &self,
        t: &TopicClient,
        members: &[MemberId],
        mut before: Vec<Option<MemberState>>,
        notes: &mut Vec<(MemberId, MemberState)>,
    ) -> Result<Vec<Option<MemberState>>> {
        let mut absent = Vec::new();
        for (i, m) in members.iter().enumerate() {
            if before.get(i).copied().flatten() != Some(MemberState::Reserved) {
                continue;
            }
            if self.holds_member(m).await?.1 {
                before[i] = Some(MemberState::Enqueued);
                notes.push((m.clone(), MemberState::Enqueued));
            } else {
                absent.push(i);
            }
        }
        if absent.is_empty() {
            return Ok(before);
        }
        let partitions = t.ensure().await?;
        let queues: std::collections::HashSet<_> = absent
            .iter()
            .map(|&i| t.queue_of(&members[i].key, partitions))
            .collect();
        for q in &queues {
            let failed = relay_through(&self.client, q, RELAY_THROUGH_PASSES).await?;
            if let Some(e) = failed.into_iter().find(|(id, _)| id == &self.id) {
                return Err(e.1);
            }
        }
        let again: Vec<MemberId> = absent.iter().map(|&i| members[i].clone()).collect();
        let now = self.client.store.batch_reserve(&self.id, &again).await?;
        for (&i, state) in absent.iter().zip(now.before) {
            before[i] = state;
        }
        Ok(before)
    }

    /// What adding a member again reports, for one already enqueued or ended (`before`):
    /// its job's state while the job holding its key is this member, else
    /// [`EnqueueOutcome::Ended`].
    async fn outcome_of_added(
        &self,
        t: &TopicClient,
        key: &JobKey,
        before: MemberState,
    ) -> Result<EnqueueOutcome> {
        if before.is_end() {
            return Ok(EnqueueOutcome::Ended);
        }
        Ok(match t.job(key.as_str()).await? {
            Some(info) if info.batch.as_ref() == Some(&self.id) => {
                EnqueueOutcome::Exists(info.state)
            }
            _ => EnqueueOutcome::Ended,
        })
    }

    async fn state_after_add(
        &self,
        t: &TopicClient,
        key: &JobKey,
        outcome: EnqueueOutcome,
    ) -> Result<Option<MemberState>> {
        Ok(match outcome {
            EnqueueOutcome::Created | EnqueueOutcome::Replaced | EnqueueOutcome::Ended => {
                Some(MemberState::Enqueued)
            }
            // ours if its record names this batch (an add repeated after its enqueue)
            EnqueueOutcome::Exists(_) => match t.job(key.as_str()).await? {
                Some(info) if info.batch.as_ref() == Some(&self.id) => Some(MemberState::Enqueued),
                Some(_) => Some(MemberState::Refused),
                // gone since: left reserved — its note moves it on if it was ours, else the
                // sweep ends it as never enqueued (never `a` with no job to note its end)
                None => None,
            },
            EnqueueOutcome::Refused { .. } => Some(MemberState::Refused),
        })
    }

    /// Closes the batch to new members; once every member has ended its callback is
    /// enqueued (at once, if they all have already). Closing twice changes nothing.
    pub async fn close(&self) -> Result<BatchInfo> {
        let info = self.client.store.batch_close(&self.id).await?;
        settle(&self.client, &info).await
    }

    /// The batch as stored: counts, status, settings; `None` for an unknown id (or one kept
    /// past its retention).
    pub async fn info(&self) -> Result<Option<BatchInfo>> {
        self.client.store.batch(&self.id).await
    }

    /// About `limit` members from `cursor` (0: the start), each with its state.
    pub async fn members(&self, cursor: u64, limit: usize) -> Result<MemberPage> {
        self.client
            .store
            .batch_members(&self.id, cursor, limit)
            .await
    }

    /// Every member whose state passes `keep`, all pages read (bounded by the batch's size:
    /// `HSCAN` lists a member a few times at most, so four times its pages of 500, and more;
    /// an error, never a partial list, past that).
    async fn members_where(&self, keep: impl Fn(MemberState) -> bool) -> Result<Vec<MemberId>> {
        let total = self.info().await?.map_or(0, |b| b.counts.total());
        let pages = (total / 500 + 1).saturating_mul(4).saturating_add(16);
        let (mut cursor, mut out) = (0, Vec::new());
        for _ in 0..pages {
            let page = self.members(cursor, 500).await?;
            out.extend(
                page.members
                    .into_iter()
                    .filter(|(_, s)| keep(*s))
                    .map(|(m, _)| m),
            );
            match page.next {
                Some(next) => cursor = next,
                None => return Ok(out),
            }
        }
        Err(Error::Protocol(format!(
            "batch {}: its members were not all listed in {pages} pages",
            self.id
        )))
    }

    /// The member's topic, and whether the job now holding its key is this batch's member
    /// (its record names the batch).
    async fn holds_member(&self, m: &MemberId) -> Result<(TopicClient, bool)> {
        let t = self.client.topic(m.topic.as_str())?;
        let ours = t
            .job(m.key.as_str())
            .await?
            .is_some_and(|j| j.batch.as_ref() == Some(&self.id));
        Ok((t, ours))
    }

    /// Cancels the whole batch: closes it, then cancels every member that has not ended (a
    /// running one is asked to stop, as [`TopicClient::cancel`] does). Each cancelled member
    /// ends as cancelled; the callback follows once all have ended. The ends of the members
    /// cancelled while they waited (and of those that ended before, their ends not relayed
    /// yet) are carried to the batch by this call, so a topic no worker serves does not hold
    /// the batch open; a running member's end reaches it through its worker's relay, and a
    /// note this call cannot apply (its batch's record damaged) is left for the workers'
    /// relay. Returns the batch as it is after.
    pub async fn cancel(&self) -> Result<BatchInfo> {
        self.client.store.batch_close(&self.id).await?;
        let mut queues = std::collections::HashSet::new();
        for m in self.members_where(|s| !s.is_end()).await? {
            // only the job of this key that is this batch's member (the key may be held by
            // another job once the member ended, its note not relayed yet)
            let (t, ours) = self.holds_member(&m).await?;
            if ours {
                t.cancel(m.key.as_str()).await?;
            }
            // (its partition is relayed either way: a member that ended before, its note
            // not relayed yet, reaches the batch too)
            let partitions = t.ensure().await?;
            queues.insert(t.queue_of(&m.key, partitions));
        }
        for q in &queues {
            // (the cancels are done; a note kept here is left for a worker's relay)
            match relay_through(&self.client, q, RELAY_THROUGH_PASSES).await {
                Ok(failed) => {
                    for (id, e) in failed {
                        tracing::warn!(batch = %id, error = %e, "batch cancel: notes left for the relay");
                    }
                }
                Err(e) => {
                    tracing::warn!(batch = %self.id, error = %e, "batch cancel: ends left for the relay");
                }
            }
        }
        let info = self
            .info()
            .await?
            .ok_or_else(|| Error::BatchNotFound(self.id.to_string()))?;
        settle(&self.client, &info).await
    }
}

impl BatchId {
    /// The batch whose callback has key `key` (`batch:<id>`), if it is such a key.
    pub fn from_callback_key(key: &str) -> Option<BatchId> {
        key.strip_prefix("batch:")
            .and_then(|id| BatchId::new(id).ok())
    }
}

/// Refuses batches while the namespace writes a record format below 7 (a live process reads
/// no newer: it would end a member without noting its end), before anything is written.
pub(crate) fn check_batch_format(client: &Client) -> Result<()> {
    let level = client.store.formats().write();
    if level < crate::format::BATCH_FORMAT {
        return Err(Error::NeedsFormat {
            feature: "a batch",
            needs: crate::format::BATCH_FORMAT,
            level,
        });
    }
    Ok(())
}

/// Settles a batch that is complete and not done: enqueues its callback (under
/// [`BatchId::callback_key`] with a `unique_for` window as long as its retention: a second
/// try finds the key taken and writes nothing) or releases its flow's parent (under
/// [`FailurePolicy::FailFast`] with a failed child: buries the parent, which never runs),
/// then marks it done. Nothing for a batch not complete or already done. Returns the batch as it is after.
///
/// Safe to run many times and from many processes at once: the client after its own add or
/// close, every worker's relay after applying notes, the relay's sweep for a producer that
/// died between its close and this step.
pub async fn settle(client: &Client, info: &BatchInfo) -> Result<BatchInfo> {
    if info.done || !info.is_complete() {
        return Ok(info.clone());
    }
    match &info.then {
        BatchThen::Nothing => {}
        BatchThen::Callback { topic, payload } => {
            let t = client.topic(topic.as_str())?;
            // (the key's window is at least an hour, however short the retention: a settle
            // repeated after a callback that ran at once still finds it)
            let mut enqueue = t
                .enqueue(payload.clone())
                .key(info.id.callback_key().as_str())
                .unique_for(info.retention.max(CALLBACK_WINDOW_FLOOR));
            // the topic's handler, where this process has it, gives the callback its expiry
            // and priority (as a periodic tick's)
            let handler = crate::handler::registered_jobs().find(|d| d.topic == topic.as_str());
            if let Some(ms) = handler.and_then(|d| d.expires_after_ms) {
                enqueue = enqueue.expires_after(Duration::from_millis(ms));
            }
            if let Some(p) = handler
                .and_then(|d| d.priority)
                .and_then(|n| crate::job::Priority::new(n).ok())
            {
                enqueue = enqueue.priority(p);
            }
            let outcome = enqueue.await?;
            tracing::debug!(batch = %info.id, ?outcome, "batch callback enqueued");
        }
        BatchThen::Release { topic, key } => {
            // only a parent still waiting for its children (a second settle finds it released)
            let t = client.topic(topic.as_str())?;
            let waiting = t.job(key.as_str()).await?.is_some_and(|j| {
                j.state == crate::job::JobState::Scheduled && j.due_ms == super::flow::FLOW_WAIT_MS
            });
            if waiting && info.policy == FailurePolicy::FailFast && info.counts.failures() > 0 {
                // fail fast: the parent is failed at its first failed child, never run
                let reason = format!(
                    "a child failed ({} of the {} children of flow {} so far); the parent \
                     was not run",
                    info.counts.failures(),
                    info.counts.total(),
                    info.id
                );
                let outcome = t.bury(key.as_str(), &reason).await?;
                tracing::debug!(batch = %info.id, ?outcome, "flow parent buried: a child failed");
            } else if waiting {
                let outcome = t
                    .reschedule(key.as_str(), NewDue::After(Duration::ZERO))
                    .await?;
                tracing::debug!(batch = %info.id, ?outcome, "flow parent released");
            }
        }
    }
    client.store.batch_mark_done(&info.id).await
}

/// A batch's notes in one relay pass: the members' ends, and the notes' ids.
type NotesOf = (Vec<(MemberId, MemberState)>, Vec<String>);

/// The shortest `unique_for` window a callback's key gets ([`settle`]).
pub const CALLBACK_WINDOW_FLOOR: Duration = Duration::from_secs(3600);

/// Most members an add reserves, enqueues and notes at once ([`BatchHandle::add`]): each
/// chunk's enqueue follows its own reservation, well within the
/// [`RESERVATION_TIMEOUT`](crate::batch::RESERVATION_TIMEOUT) the sweep gives it however long
/// the whole add takes.
pub const ADD_CHUNK: usize = 1_000;

/// Most passes a batch's cancel or a repeated add relays a partition with
/// ([`relay_through`]): 512,000 notes.
const RELAY_THROUGH_PASSES: usize = 1_000;

/// Most notes one relay pass reads from an outbox.
pub const RELAY_NOTES: usize = 512;

/// What one relay pass over a partition's outbox did ([`relay_pass`]).
#[derive(Debug, Default)]
pub struct RelayPass {
    /// Notes read.
    pub read: usize,
    /// Notes applied (and deleted).
    pub applied: usize,
    /// Notes kept for a later pass: their batch's apply or settle failed.
    pub kept: usize,
    /// The last note read: the next pass starts after it while the outbox has more
    /// ([`RelayPass::next`]).
    pub last: Option<String>,
    /// The batches whose notes were kept, each with its error.
    pub failed: Vec<(BatchId, Error)>,
}

impl RelayPass {
    /// Where the next pass over the same outbox starts, for a pass that started at `after`:
    /// past this one's notes while the outbox has more to read and this pass kept some or
    /// did not start at the first note (so notes kept for a failing batch never hold the
    /// others back), else at the first note again (the kept notes are tried again there).
    pub fn next(&self, after: Option<&str>) -> Option<String> {
        if self.read < RELAY_NOTES || (self.kept == 0 && after.is_none()) {
            None
        } else {
            self.last.clone()
        }
    }
}

/// The relay's step for one partition (ARCHITECTURE.md §16), from its first note: as
/// [`relay_pass`] from the start, returning how many notes it applied, or the error of a
/// pass that applied none and kept some.
pub async fn relay_outbox(client: &Client, queue: &crate::job::Queue) -> Result<usize> {
    let pass = relay_pass(client, queue, None).await?;
    match pass.failed.into_iter().next() {
        Some((_, e)) if pass.applied == 0 => Err(e),
        _ => Ok(pass.applied),
    }
}

/// Relays `queue`'s outbox from its first note through to its end, pass after pass
/// ([`relay_pass`], each going on past the notes the one before kept for a failing batch), at
/// most `passes` passes of [`RELAY_NOTES`]; returns the batches whose notes were kept, with
/// their errors. An error reading or deleting notes is returned. A worker's relay runs it
/// every tick; a batch's cancel and a repeated add run it for their members' partitions.
pub async fn relay_through(
    client: &Client,
    queue: &crate::job::Queue,
    passes: usize,
) -> Result<Vec<(BatchId, Error)>> {
    let (mut from, mut failed) = (None::<String>, Vec::new());
    for _ in 0..passes {
        let pass = relay_pass(client, queue, from.as_deref()).await?;
        let more = pass.read >= RELAY_NOTES;
        from = pass.next(from.as_deref());
        failed.extend(pass.failed);
        if !more {
            break;
        }
    }
    Ok(failed)
}

/// One relay pass over a partition's outbox: reads up to [`RELAY_NOTES`] notes of `queue`'s
/// outbox after the note `after` (`None`: from the first), applies them batch by batch
/// ([`Batches::batch_apply`]: each member counted once), settles every batch they complete
/// ([`settle`]), then deletes the notes applied — after the apply and the callback, so a
/// relay killed anywhere leaves its notes for the next one, which changes nothing twice. A
/// batch whose apply or settle fails keeps its notes for a later pass
/// ([`RelayPass::kept`]); the others' are deleted all the same. An error reading or deleting
/// notes is returned as is.
///
/// [`Batches::batch_apply`]: crate::store::Batches::batch_apply
pub async fn relay_pass(
    client: &Client,
    queue: &crate::job::Queue,
    after: Option<&str>,
) -> Result<RelayPass> {
    let notes = client.store.outbox(queue, after, RELAY_NOTES).await?;
    let mut pass = RelayPass {
        read: notes.len(),
        last: notes.last().map(|n| n.id.clone()),
        ..RelayPass::default()
    };
    if notes.is_empty() {
        return Ok(pass);
    }
    let mut by_batch: std::collections::BTreeMap<BatchId, NotesOf> =
        std::collections::BTreeMap::new();
    for n in notes {
        let entry = by_batch.entry(n.batch).or_default();
        entry
            .0
            .push((MemberId::new(queue.topic.clone(), n.key), n.outcome));
        entry.1.push(n.id);
    }
    let mut applied = Vec::new();
    for (id, (pairs, ids)) in by_batch {
        let result = async {
            if let Some(info) = client.store.batch_apply(&id, &pairs).await? {
                settle(client, &info).await?;
            }
            Ok::<_, Error>(())
        }
        .await;
        match result {
            Ok(()) => applied.extend(ids),
            Err(e) => {
                tracing::warn!(batch = %id, error = %e, "batch relay: notes kept for a later pass");
                pass.kept += ids.len();
                pass.failed.push((id, e));
            }
        }
    }
    pass.applied = applied.len();
    if pass.kept == 0 && after.is_none() {
        // every note read was applied: they are the outbox's prefix up to the last one
        if let Some(last) = &pass.last {
            client.store.outbox_trim(queue, last).await?;
        }
    } else {
        client.store.outbox_done(queue, &applied).await?;
    }
    Ok(pass)
}

/// What one sweep of the batches not done did ([`sweep_batches`]).
#[derive(Debug, Default)]
pub struct SweepPass {
    /// Batches it settled (their callback enqueued, or their flow's parent released).
    pub settled: usize,
    /// Where the next sweep starts (`None`: the index was read to its end; the next sweep
    /// starts from the first again).
    pub next: Option<IndexEntry>,
    /// The batches it could not sweep, each with its error (the sweep went on past them).
    pub failed: Vec<(BatchId, Error)>,
}

/// The relay's sweep of the namespace's batches not done (ARCHITECTURE.md §16): up to
/// `limit` batches after `after` (`None`: from the oldest), in the index's order. It settles
/// a complete one whose producer died between its close and its callback, ends as
/// [`MemberState::NeverEnqueued`] the members reserved longer than `reservation_timeout`
/// whose job does not exist, and takes out of the index the batches done or gone. A batch
/// that fails is reported in [`SweepPass::failed`] and the sweep goes on; a relay calls it
/// again with [`SweepPass::next`] to walk the whole index a page per sweep.
/// `reservation_timeout` is how long a reservation is given: the relay passes
/// [`RESERVATION_TIMEOUT`](crate::batch::RESERVATION_TIMEOUT). Fails only when the store's
/// clock or the index cannot be read.
pub async fn sweep_batches(
    client: &Client,
    after: Option<&IndexEntry>,
    limit: usize,
    reservation_timeout: Duration,
) -> Result<SweepPass> {
    // (the store's clock: reservations are stamped by it; virtual time on the embedded store)
    let now = client.store.now_ms().await?;
    let timeout = u64::try_from(reservation_timeout.as_millis()).unwrap_or(u64::MAX);
    let entries = client.store.open_batches(after, limit).await?;
    let mut pass = SweepPass {
        next: if entries.len() < limit.max(1) {
            None
        } else {
            entries.last().cloned()
        },
        ..SweepPass::default()
    };
    for entry in entries {
        match sweep_one(client, &entry.id, now, timeout).await {
            Ok(settled) => pass.settled += usize::from(settled),
            Err(e) => {
                tracing::warn!(batch = %entry.id, error = %e, "batch sweep: left for the next sweep");
                pass.failed.push((entry.id, e));
            }
        }
    }
    Ok(pass)
}

/// Sweeps batch `id` (see [`sweep_batches`]); true when it settled it.
async fn sweep_one(client: &Client, id: &BatchId, now: u64, timeout: u64) -> Result<bool> {
    let Some(mut info) = client.store.batch(id).await? else {
        client.store.forget_batch(id).await?;
        return Ok(false);
    };
    if info.done {
        client.store.forget_batch(id).await?;
        return Ok(false);
    }
    if info.counts.reserved > 0 && now.saturating_sub(info.reserved_ms) >= timeout {
        let handle = client.batch(id.as_str())?;
        let mut notes = Vec::new();
        for m in handle.members_where(|s| s == MemberState::Reserved).await? {
            let state = if handle.holds_member(&m).await?.1 {
                MemberState::Enqueued
            } else {
                MemberState::NeverEnqueued
            };
            notes.push((m, state));
        }
        if let Some(after) = client.store.batch_apply(id, &notes).await? {
            info = after;
        }
    }
    if info.is_complete() {
        settle(client, &info).await?;
        return Ok(true);
    }
    Ok(false)
}
