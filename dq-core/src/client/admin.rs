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
//! 4. The queue-depth collector of [`crate::metrics`] ([`spawn_stats_collector`]).
//!
//! Per-topic work — the dead-queue sweep ([`TopicClient::sweep_dead`]), the filtered dead
//! listing ([`TopicClient::list_dead`]), pause and limits — is on the [`TopicClient`] this API
//! hands out.

use std::iter::Sum;
use std::ops::AddAssign;
use std::time::Duration;

use super::handle::{Client, TopicClient};
use crate::error::Result;
use crate::format::{FormatLevel, FormatRegistry};
use crate::metrics::{QUEUE_JOBS, QUEUE_OLDEST_OVERDUE, QUEUE_STATES, WORKERS_LIVE};
use crate::names::Topic;
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
    /// as every call does; a topic reset in between is [`Error::TopicMismatch`](crate::Error::TopicMismatch).
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

/// Starts the optional queue-depth collector on the current tokio runtime: every `every`, it
/// reads the stats of every topic registered in the store (one `stats` call per partition)
/// and sets `dq_queue_jobs{topic,state}` and `dq_queue_oldest_overdue_seconds{topic}`, and
/// counts the live workers (`dq_workers_live`). One
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

/// One round of the stats collector: sets the queue gauges of every registered topic. A
/// topic whose stats cannot be read is logged at WARN and skipped (its gauges keep their
/// last values); only a failure to list the topics is an error.
pub async fn collect_once(client: &Client) -> Result<()> {
    let admin = client.admin();
    metrics::gauge!(WORKERS_LIVE).set(admin.workers().await?.len() as f64);
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
