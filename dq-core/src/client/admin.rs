//! The operator API ([`Admin`], from [`Client::admin`]): what the CLI, the dashboard, the
//! metrics collector and `TestQueue` read and do across topics, so that no tool rebuilds it
//! from private parts.
//!
//! 1. A [`TopicClient`] for every registered topic, with the partition count recorded for it
//!    and the client's own settings ([`Admin::topic`], [`Admin::topic_clients`]).
//! 2. Stats of every topic and their totals ([`Admin::stats`]; [`TopicStats`] adds up with
//!    `+=` and [`Iterator::sum`]).
//! 3. The live workers ([`Admin::workers`]) and the namespace's registry of record formats
//!    ([`Admin::formats`], [`Admin::hold_format`], [`Admin::release_format`]).
//! 4. The batches not done, page by page ([`Admin::batches`], [`Admin::open_batch_count`]),
//!    a batch's members in one state ([`Admin::batch_members`]), and the job its completion
//!    enqueues or releases, as it is now ([`Admin::batch_follow_up`]).
//! 5. The queue-depth collector of [`crate::metrics`] ([`spawn_stats_collector`]).
//!
//! Per-topic work — the dead-queue sweep ([`TopicClient::sweep_dead`]), the filtered dead
//! listing ([`TopicClient::list_dead`]), pause and limits — is on the [`TopicClient`] this API
//! hands out.

use std::iter::Sum;
use std::ops::AddAssign;
use std::time::Duration;

use super::handle::{Client, TopicClient};
use crate::batch::{BatchId, BatchInfo, BatchThen, IndexEntry, MemberPage, MemberState};
use crate::error::{Error, Result};
use crate::finished::FinishedJob;
use crate::format::{FormatLevel, FormatRegistry};
use crate::job::{JobInfo, JobState};
use crate::metrics::{BATCHES_OPEN, QUEUE_JOBS, QUEUE_OLDEST_OVERDUE, QUEUE_STATES, WORKERS_LIVE};
use crate::names::{JobKey, Topic};
use crate::store::operate::TopicStats;
use crate::topic::TopicMeta;
use crate::workers::WorkerInfo;

impl AddAssign for TopicStats {
    /// Adds another partition's or topic's stats: depths and counters add up, the oldest
    /// overdue is the larger, and `paused` / `throttled` hold if either holds.
    fn add_assign(&mut self, s: TopicStats) {
        self.scheduled += s.scheduled;
        self.ready += s.ready;
        self.active += s.active;
        self.retry += s.retry;
        self.dead += s.dead;
        self.enqueued += s.enqueued;
        self.succeeded += s.succeeded;
        self.retried += s.retried;
        self.buried += s.buried;
        self.expired += s.expired;
        self.expired_before_start += s.expired_before_start;
        self.cancelled += s.cancelled;
        self.succeeded_after_cancel_request += s.succeeded_after_cancel_request;
        self.trimmed += s.trimmed;
        self.discarded += s.discarded;
        self.oldest_overdue_ms = self.oldest_overdue_ms.max(s.oldest_overdue_ms);
        self.overdue += s.overdue;
        self.paused |= s.paused;
        self.throttled |= s.throttled;
        self.throttles += s.throttles;
        self.kept += s.kept;
        self.kept_trimmed += s.kept_trimmed;
        self.events_lost += s.events_lost;
    }
}

impl Sum for TopicStats {
    /// The totals of several partitions or topics (see the `+=` of [`TopicStats`]).
    fn sum<I: Iterator<Item = TopicStats>>(iter: I) -> TopicStats {
        let mut total = TopicStats::default();
        for s in iter {
            total += s;
        }
        total
    }
}

impl<'a> Sum<&'a TopicStats> for TopicStats {
    /// The totals of several partitions or topics, by reference.
    fn sum<I: Iterator<Item = &'a TopicStats>>(iter: I) -> TopicStats {
        iter.cloned().sum()
    }
}

/// The operator API of a client's store (for Redis: of its namespace): every registered
/// topic, their stats and totals, the live workers. Cheap to clone; get it with
/// [`Client::admin`].
#[derive(Clone, Debug)]
pub struct Admin {
    client: Client,
}

impl Client {
    /// The operator API on this client's store: see [`Admin`].
    pub fn admin(&self) -> Admin {
        Admin {
            client: self.clone(),
        }
    }
}

impl Admin {
    /// The client this API reads with.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Every topic recorded in the store, by name, with its metadata: the topics some
    /// producer or worker has used ([`Client::topics`]).
    pub async fn topics(&self) -> Result<Vec<TopicMeta>> {
        self.client.topics().await
    }

    /// The untyped API of a registered topic, with the partition count recorded for it
    /// (whatever the client is configured with) and the client's other settings (payload
    /// limit, bulk chunk, group commit). Its calls check that count against the record
    /// as every call does; a topic reset in between is [`Error::TopicMismatch`].
    pub fn topic(&self, meta: &TopicMeta) -> TopicClient {
        self.client.topic_with(meta.topic.clone(), meta.partitions)
    }

    /// The untyped API of topic `name` with `partitions` partitions and the client's other
    /// settings: for a tool that writes to a topic not recorded yet (the first call records
    /// the count).
    pub fn topic_with(&self, name: &str, partitions: u16) -> Result<TopicClient> {
        Ok(self.client.topic_with(Topic::new(name)?, partitions))
    }

    /// The registered topic `name` and its client ([`Admin::topic`]), or `None` if no
    /// producer or worker has used it: nothing is recorded by looking.
    pub async fn find(&self, name: &str) -> Result<Option<(TopicMeta, TopicClient)>> {
        let topics = self.client.topics().await?;
        Ok(topics
            .into_iter()
            .find(|m| m.topic.as_ref() == name)
            .map(|meta| {
                let client = self.topic(&meta);
                (meta, client)
            }))
    }

    /// A client for every registered topic ([`Admin::topic`]), by name.
    pub async fn topic_clients(&self) -> Result<Vec<TopicClient>> {
        let topics = self.client.topics().await?;
        Ok(topics.iter().map(|meta| self.topic(meta)).collect())
    }

    /// The stats of every registered topic, by name, each summed over its partitions (one
    /// `stats` call per partition). Their totals are `.iter().map(|(_, s)| s).sum()`.
    pub async fn stats(&self) -> Result<Vec<(TopicMeta, TopicStats)>> {
        let topics = self.client.topics().await?;
        let mut rows = Vec::with_capacity(topics.len());
        for meta in topics {
            let stats = self.topic(&meta).stats().await?;
            rows.push((meta, stats));
        }
        Ok(rows)
    }

    /// The stats of the named topics, summed: each topic as this client is configured for
    /// it ([`Client::topic`]; recorded if new).
    pub async fn stats_total<S: AsRef<str>>(
        &self,
        topics: impl IntoIterator<Item = S>,
    ) -> Result<TopicStats> {
        let mut total = TopicStats::default();
        for name in topics {
            total += self.client.topic(name.as_ref())?.stats().await?;
        }
        Ok(total)
    }

    /// The live workers, by id ([`Client::workers`]).
    pub async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        self.client.workers().await
    }

    /// The namespace's registry of record formats: the level new records are written in, the
    /// hold, and the live processes with the formats they read (docs/UPGRADING.md).
    pub async fn formats(&self) -> Result<FormatRegistry> {
        self.client.store.format_registry().await
    }

    /// Holds the namespace's format level at `level` (at least the level now): it rises no
    /// further until [`Admin::release_format`], which keeps a rollback to a dq that reads
    /// `level` open.
    pub async fn hold_format(&self, level: u8) -> Result<FormatLevel> {
        self.client.store.hold_format(level).await
    }

    /// Removes the hold: the level rises at the next registration once every live process
    /// reads a newer format.
    pub async fn release_format(&self) -> Result<FormatLevel> {
        self.client.store.release_format().await
    }
}

/// Most batches on one page of [`Admin::batches`], and most members on one page of
/// [`Admin::batch_members`].
pub const MAX_BATCH_PAGE: usize = 1000;

/// Most batch ids one [`Admin::batches`] page reads past the batches done since the index was
/// read (it skips them).
pub const MAX_BATCHES_COUNTED: u64 = 1_000_000;

/// One page of the batches not done ([`Admin::batches`]).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct BatchList {
    /// The batches as stored now, oldest first.
    pub batches: Vec<BatchInfo>,
    /// The id to list after for the next page; `None` on the last page.
    pub next: Option<BatchId>,
}

/// What a batch's completion does to a job: enqueue it (a callback), or release it (a flow's
/// parent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FollowUpKind {
    /// The callback, enqueued once the batch is complete under the key `batch:<id>`.
    Callback,
    /// The flow's parent, waiting for its children until the batch is complete.
    Parent,
}

impl FollowUpKind {
    /// Its name in the tools: `callback` or `parent`.
    pub fn as_str(self) -> &'static str {
        match self {
            FollowUpKind::Callback => "callback",
            FollowUpKind::Parent => "parent",
        }
    }
}

/// Where a batch's follow-up job is now.
#[derive(Clone, Debug)]
pub enum FollowUpJob {
    /// Stored and not finished (waiting, running, retrying or dead).
    Live(Box<JobInfo>),
    /// Finished, and kept by its topic ([`FinishedJob`]).
    Finished(Box<FinishedJob>),
    /// Not found: a callback not enqueued yet, or one that ran and that its topic does not
    /// keep (or no longer keeps); a parent gone the same way.
    NotFound,
}

impl FollowUpJob {
    /// Its state's name (`scheduled`, `active`, `dead`, `succeeded`, …), or `None` when not
    /// found.
    pub fn state(&self) -> Option<&'static str> {
        match self {
            FollowUpJob::Live(j) => Some(j.state.as_str()),
            FollowUpJob::Finished(f) => Some(f.outcome.as_str()),
            FollowUpJob::NotFound => None,
        }
    }
}

/// What happens once a batch is complete, and that job as it is now ([`Admin::batch_follow_up`]).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct BatchFollowUp {
    /// A callback or a flow's parent.
    pub kind: FollowUpKind,
    /// The job's topic.
    pub topic: Topic,
    /// Its key (a callback's is [`BatchId::callback_key`]).
    pub key: JobKey,
    /// Where it is now.
    pub job: FollowUpJob,
}

impl BatchFollowUp {
    /// Whether it is a flow's parent still waiting for its children (scheduled at
    /// [`FLOW_WAIT_MS`](crate::client::FLOW_WAIT_MS)).
    pub fn waiting_for_children(&self) -> bool {
        self.kind == FollowUpKind::Parent
            && matches!(&self.job, FollowUpJob::Live(j)
                if j.state == JobState::Scheduled && j.due_ms == super::flow::FLOW_WAIT_MS)
    }
}

impl Admin {
    /// Up to `limit` (1 to [`MAX_BATCH_PAGE`]) batches not done — open, closed, or complete
    /// with their callback not enqueued yet — oldest first, after batch `after` (`None`: from
    /// the first; else the [`BatchList::next`] of the page before). A batch done while the
    /// pages are read is left out; a page after a batch done meanwhile resumes where it was,
    /// by when that batch was opened (after one no longer stored at all — kept past its
    /// retention — it starts again from the first). Bad input (an `after` that is no batch
    /// id, a limit out of range) is an error before anything is read.
    pub async fn batches(&self, after: Option<&str>, limit: usize) -> Result<BatchList> {
        check_page(limit)?;
        let after = after.map(BatchId::new).transpose()?;
        let store = &self.client.store;
        // where the listing resumes, by the index's order (when opened, then id)
        let mut cursor = match &after {
            Some(id) => store.batch(id).await?.map(|b| IndexEntry {
                opened_ms: b.created_ms,
                id: b.id,
            }),
            None => None,
        };
        let mut batches = Vec::new();
        // (bounded: MAX_BATCHES_COUNTED / MAX_BATCH_PAGE pages of ids)
        let pages = MAX_BATCHES_COUNTED / MAX_BATCH_PAGE as u64;
        for _ in 0..pages {
            let entries = store.open_batches(cursor.as_ref(), limit).await?;
            let last_page = entries.len() < limit;
            for entry in entries {
                let info = store.batch(&entry.id).await?;
                cursor = Some(entry);
                // (one done since the index was read is left out)
                let Some(info) = info.filter(|i| !i.done) else {
                    continue;
                };
                batches.push(info);
                if batches.len() == limit {
                    return Ok(BatchList {
                        batches,
                        next: cursor.map(|c| c.id),
                    });
                }
            }
            if last_page {
                break;
            }
        }
        Ok(BatchList {
            batches,
            next: None,
        })
    }

    /// How many batches are not done (the size of the index of batches not done).
    pub async fn open_batch_count(&self) -> Result<u64> {
        self.client.store.open_batch_count().await
    }

    /// About `limit` (1 to [`MAX_BATCH_PAGE`]) members of batch `id` from `cursor` (0: the
    /// start), each with its state; with `state`, only the members in that state, read on
    /// until about `limit` are found or every member was read. The page's `next` is where
    /// the next one starts (`None`: every member was read). A member that moves while the
    /// members are read may be listed twice or missed by a filter. An unknown batch is
    /// [`Error::BatchNotFound`]; a bad id or limit an error before anything is read.
    pub async fn batch_members(
        &self,
        id: &str,
        state: Option<MemberState>,
        cursor: u64,
        limit: usize,
    ) -> Result<MemberPage> {
        check_page(limit)?;
        let handle = self.client.batch(id)?;
        if handle.info().await?.is_none() {
            return Err(Error::BatchNotFound(id.to_owned()));
        }
        let mut members = Vec::new();
        let mut cursor = cursor;
        // (bounded: HSCAN visits each member a few times at most; 100,000 pages)
        for _ in 0..100_000 {
            let want = limit.saturating_sub(members.len()).max(1);
            let page = handle.members(cursor, want).await?;
            members.extend(
                page.members
                    .into_iter()
                    .filter(|(_, s)| state.is_none_or(|want| *s == want)),
            );
            match page.next {
                Some(next) if members.len() < limit => cursor = next,
                next => return Ok(MemberPage { members, next }),
            }
        }
        Ok(MemberPage {
            members,
            next: Some(cursor),
        })
    }

    /// What happens once batch `info` is complete — its callback is enqueued, or its flow's
    /// parent released — and that job as it is now, looked up by its key in its topic (a live
    /// job, else a finished one its topic keeps); `None` for a batch that only reports its
    /// progress. A topic no producer or worker has used is not recorded by looking.
    pub async fn batch_follow_up(&self, info: &BatchInfo) -> Result<Option<BatchFollowUp>> {
        let (kind, topic, key) = match &info.then {
            BatchThen::Nothing => return Ok(None),
            BatchThen::Callback { topic, .. } => {
                (FollowUpKind::Callback, topic, info.id.callback_key())
            }
            BatchThen::Release { topic, key } => (FollowUpKind::Parent, topic, key.clone()),
        };
        let job = match self.find(topic.as_str()).await? {
            None => FollowUpJob::NotFound,
            Some((_, t)) => match t.job(key.as_str()).await? {
                Some(job) => FollowUpJob::Live(Box::new(job)),
                None => match t.finished(key.as_str()).await? {
                    Some(f) => FollowUpJob::Finished(Box::new(f)),
                    None => FollowUpJob::NotFound,
                },
            },
        };
        Ok(Some(BatchFollowUp {
            kind,
            topic: topic.clone(),
            key,
            job,
        }))
    }
}

/// A page size of 1 to [`MAX_BATCH_PAGE`], else [`Error::InvalidConfig`].
fn check_page(limit: usize) -> Result<()> {
    if limit == 0 || limit > MAX_BATCH_PAGE {
        return Err(Error::InvalidConfig(format!(
            "a page holds 1 to {MAX_BATCH_PAGE} batches or members, not {limit}"
        )));
    }
    Ok(())
}

/// Starts the optional queue-depth collector on the current tokio runtime: every `every`, it
/// reads the stats of every topic registered in the store (one `stats` call per partition)
/// and sets `dq_queue_jobs{topic,state}` and `dq_queue_oldest_overdue_seconds{topic}`,
/// counts the live workers (`dq_workers_live`) and the batches not done
/// (`dq_batches_open`). One
/// per deployment is enough (the figures are the store's, not the process's); abort the
/// returned handle to stop it. A failed read is logged at WARN and tried again next time.
pub fn spawn_stats_collector(client: Client, every: Duration) -> tokio::task::JoinHandle<()> {
    let every = every.max(Duration::from_millis(10));
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            if let Err(e) = collect_once(&client).await {
                tracing::warn!(error = %e, "stats collector: could not read the queues");
            }
        }
    })
}

/// One round of the stats collector: sets the queue gauges of every registered topic, the
/// live workers and the batches not done. A topic whose stats cannot be read is logged at
/// WARN and skipped (its gauges keep their last values); only a failure to list the workers,
/// the batches or the topics is an error.
pub async fn collect_once(client: &Client) -> Result<()> {
    let admin = client.admin();
    metrics::gauge!(WORKERS_LIVE).set(admin.workers().await?.len() as f64);
    metrics::gauge!(BATCHES_OPEN).set(admin.open_batch_count().await? as f64);
    for meta in admin.topics().await? {
        let stats = match admin.topic(&meta).stats().await {
            Ok(stats) => stats,
            Err(e) => {
                tracing::warn!(
                    topic = %meta.topic,
                    error = %e,
                    "stats collector: could not read the topic"
                );
                continue;
            }
        };
        let topic = meta.topic.to_string();
        for (state, n) in QUEUE_STATES.into_iter().zip([
            stats.scheduled,
            stats.ready,
            stats.active,
            stats.retry,
            stats.dead,
        ]) {
            metrics::gauge!(QUEUE_JOBS, "topic" => topic.clone(), "state" => state).set(n as f64);
        }
        metrics::gauge!(QUEUE_OLDEST_OVERDUE, "topic" => topic)
            .set(stats.oldest_overdue_ms as f64 / 1000.0);
    }
    Ok(())
}
