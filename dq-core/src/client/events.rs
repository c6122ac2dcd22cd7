//! Reading events from any process: [`Client::events`] and [`EventStream`] (see
//! [`crate::events`] for what is recorded).
//!
//! A stream follows the namespace's topics (all, or those named), reading each partition's
//! events from its own position in rounds: one read per partition, all at once (on a Redis
//! Cluster each goes to the node of its slot), merged by time. A round that found nothing
//! waits [`EventsOptions::poll`] before the next. A partition whose read fails waits its own
//! backoff (100 ms doubling to 5 s) while the others go on, keeping its position, so a Redis
//! restart or failover loses no event the server kept; errors other than connection trouble
//! are also handed to the reader as `Err` items, and the stream goes on.

use std::collections::HashMap;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use tokio::sync::mpsc;

use super::handle::Client;
use crate::error::{Error, Result};
use crate::events::{Event, EventCursor, EventId, EventsFrom};
use crate::job::Queue;
use crate::names::Topic;
use crate::store::Store;

/// How often a stream that found nothing looks again, by default: 100 ms.
pub const DEFAULT_EVENTS_POLL: Duration = Duration::from_millis(100);

/// How often a stream looks for new topics (and new partitions of a topic reset since).
const TOPICS_REFRESH: Duration = Duration::from_secs(5);

/// Most events read from one partition per round, by default.
const DEFAULT_EVENTS_BATCH: usize = 500;

/// What a stream reads, from where, and how often.
#[derive(Clone, Debug)]
pub struct EventsOptions {
    /// The topics to follow; `None` (the default): every topic of the namespace, including
    /// topics recorded after the stream starts.
    pub topics: Option<Vec<String>>,
    /// Where to start ([`EventsFrom::Now`] by default).
    pub from: EventsFrom,
    /// How long a round that found nothing waits before the next (default
    /// [`DEFAULT_EVENTS_POLL`]; at least 1 ms): the latency of an idle stream.
    pub poll: Duration,
    /// Most events read from one partition per round (default 500, 1 to 10 000).
    pub batch: usize,
}

impl Default for EventsOptions {
    fn default() -> Self {
        EventsOptions {
            topics: None,
            from: EventsFrom::Now,
            poll: DEFAULT_EVENTS_POLL,
            batch: DEFAULT_EVENTS_BATCH,
        }
    }
}

impl EventsOptions {
    /// Follows only `topics` (checked names).
    pub fn topics<I: IntoIterator<Item = S>, S: Into<String>>(mut self, topics: I) -> Self {
        self.topics = Some(topics.into_iter().map(Into::into).collect());
        self
    }

    /// Starts from `from`.
    pub fn from(mut self, from: EventsFrom) -> Self {
        self.from = from;
        self
    }

    /// Waits `poll` after a round that found nothing.
    pub fn poll(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }
}

impl Client {
    /// Events of every topic of the namespace that records them, from `from`, as an async
    /// stream ([`EventStream`]); the same as [`Client::events_with`] with default options.
    ///
    /// ```no_run
    /// # async fn f(client: dq_core::Client) -> dq_core::Result<()> {
    /// use dq_core::EventsFrom;
    /// let mut events = client.events(EventsFrom::Now).await?;
    /// while let Some(event) = events.next().await {
    ///     let event = event?;
    ///     println!("{} {} {}", event.topic, event.key, event.kind);
    ///     // save events.cursor().to_string() to resume from here after a restart
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn events(&self, from: EventsFrom) -> Result<EventStream> {
        self.events_with(EventsOptions::default().from(from)).await
    }

    /// Events as `options` say. With [`EventsFrom::Now`] the position of every partition
    /// known at the call is read before it returns, so an event written after it returns is
    /// never missed. Refused with [`Error::InvalidConfig`] for a bad topic name, batch or
    /// poll; an error reading the topics or the start positions is returned as is.
    pub async fn events_with(&self, options: EventsOptions) -> Result<EventStream> {
        let topics = match &options.topics {
            None => None,
            Some(names) => Some(names.iter().map(Topic::new).collect::<Result<Vec<_>>>()?),
        };
        if options.batch == 0 || options.batch > 10_000 {
            return Err(Error::InvalidConfig(format!(
                "an event batch of {} must be 1 to 10000",
                options.batch
            )));
        }
        let poll = options.poll.max(Duration::from_millis(1));
        let mut reader = Reader {
            store: self.store.clone(),
            topics,
            from: options.from.clone(),
            batch: options.batch,
            positions: HashMap::new(),
            read_at: HashMap::new(),
            queues: Vec::new(),
        };
        // the start: every partition known now, at its position
        let queues = reader.current_queues().await?;
        reader.add(queues, true).await?;
        let mut cursor = EventCursor::default();
        for q in &reader.queues {
            cursor.set(q, reader.positions[q]);
        }
        let (tx, rx) = mpsc::channel(options.batch.max(64));
        let task = tokio::spawn(reader.run(tx, poll));
        Ok(EventStream {
            rx,
            cursor,
            task: task.abort_handle(),
        })
    }
}

/// Most events [`TopicClient::recent_events`](crate::TopicClient::recent_events) and
/// [`TopicClient::job_events`](crate::TopicClient::job_events) return.
pub const MAX_RECENT_EVENTS: usize = 1000;

/// How many of a partition's last events `TopicClient::job_events` looks through.
const JOB_EVENTS_SCAN: u64 = 1000;

impl super::handle::TopicClient {
    /// The topic's last `limit` events (at most [`MAX_RECENT_EVENTS`]), newest first, over
    /// every partition: what a page of recent activity shows. Empty for a topic that records
    /// no events.
    pub async fn recent_events(&self, limit: usize) -> Result<Vec<Event>> {
        let limit = limit.clamp(1, MAX_RECENT_EVENTS);
        let partitions = self.ensure().await?;
        let mut all = Vec::new();
        for queue in self.queues(partitions) {
            all.extend(self.last_events_of(&queue, limit as u64).await?);
        }
        all.sort_by_key(|e| std::cmp::Reverse((e.at_ms, e.partition, e.id)));
        all.truncate(limit);
        Ok(all)
    }

    /// The events of job `key` among the last 1000 of its partition, oldest first: its recent
    /// history (enqueued, started, failed, …) for a job page. Empty for a topic that records
    /// no events.
    pub async fn job_events(&self, key: &str) -> Result<Vec<Event>> {
        let key = crate::names::JobKey::new(key)?;
        let partitions = self.ensure().await?;
        let queue = self.queue_of(&key, partitions);
        let mut found: Vec<Event> = self
            .last_events_of(&queue, JOB_EVENTS_SCAN)
            .await?
            .into_iter()
            .filter(|e| e.key == key.as_str())
            .collect();
        found.truncate(MAX_RECENT_EVENTS);
        Ok(found)
    }

    /// The last `n` events of `queue` kept (or fewer), oldest first.
    async fn last_events_of(&self, queue: &Queue, n: u64) -> Result<Vec<Event>> {
        let store = &self.client.store;
        let Some(last) = store.last_event(queue).await? else {
            return Ok(Vec::new());
        };
        let after = EventId(last.0.saturating_sub(n));
        let mut events = store.read_events(queue, after, n as usize).await?;
        events.retain(|e| e.id > after && e.id <= last);
        Ok(events)
    }
}

/// An async stream of events (`futures_core::Stream<Item = Result<Event>>`, or call
/// [`EventStream::next`]), read by a task of its own that ends when the stream is dropped.
/// Within a partition events come in order, each once; across partitions, by time.
#[derive(Debug)]
pub struct EventStream {
    rx: mpsc::Receiver<Result<Event>>,
    cursor: EventCursor,
    task: tokio::task::AbortHandle,
}

impl EventStream {
    /// The next event (or an error the stream met and went on from); waits for one. `None`
    /// only if the reading task stopped (a panic; never otherwise).
    pub async fn next(&mut self) -> Option<Result<Event>> {
        let item = self.rx.recv().await;
        if let Some(Ok(event)) = &item {
            self.cursor.record(event);
        }
        item
    }

    /// Where this stream is: after the last event it handed out in each partition (and, for
    /// partitions without one yet, where it started). Store its text and give it back as
    /// [`EventsFrom::Cursor`] to resume after a restart with no event missed or repeated.
    pub fn cursor(&self) -> EventCursor {
        self.cursor.clone()
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl futures_core::Stream for EventStream {
    type Item = Result<Event>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let polled = this.rx.poll_recv(cx);
        if let Poll::Ready(Some(Ok(event))) = &polled {
            this.cursor.record(event);
        }
        polled
    }
}

/// The reading task's state.
struct Reader {
    store: std::sync::Arc<dyn Store>,
    topics: Option<Vec<Topic>>,
    from: EventsFrom,
    batch: usize,
    positions: HashMap<Queue, EventId>,
    /// The store time of the last event read in each partition (to find where to go on from
    /// after the store lost events: [`Reader::rewind_rolled_back`]).
    read_at: HashMap<Queue, u64>,
    queues: Vec<Queue>,
}

impl Reader {
    /// The partitions of the followed topics recorded now.
    async fn current_queues(&self) -> Result<Vec<Queue>> {
        let metas = self.store.topics().await?;
        Ok(metas
            .into_iter()
            .filter(|m| {
                self.topics
                    .as_ref()
                    .is_none_or(|names| names.contains(&m.topic))
            })
            .flat_map(|m| (0..m.partitions).map(move |p| Queue::new(m.topic.clone(), p)))
            .collect())
    }

    /// Starts following the partitions of `queues` not followed yet: from the cursor's
    /// position, the oldest event, or (`at_start` and [`EventsFrom::Now`]) the newest.
    async fn add(&mut self, queues: Vec<Queue>, at_start: bool) -> Result<()> {
        for q in queues {
            if self.positions.contains_key(&q) {
                continue;
            }
            let start = match &self.from {
                EventsFrom::Now if at_start => self.store.last_event(&q).await?.unwrap_or_default(),
                EventsFrom::Cursor(c) => c.get(&q).unwrap_or_default(),
                _ => EventId::ZERO,
            };
            self.positions.insert(q.clone(), start);
            self.queues.push(q);
        }
        Ok(())
    }

    /// A partition whose newest event is older than this reader's position lost events it had
    /// (Redis restarted from an older save, or failed over to a replica that lagged): its new
    /// events reuse those numbers. The reader goes back to before the first event written in
    /// or after the millisecond of the last one it read (by the store's clock), with a
    /// warning, and reads on from there: the events written since the loss, and of those it
    /// read before at most the ones of that millisecond again.
    async fn rewind_rolled_back(&mut self) -> Result<()> {
        for q in self.queues.clone() {
            let at = self.positions[&q];
            if at == EventId::ZERO {
                continue;
            }
            let last = self.store.last_event(&q).await?.unwrap_or_default();
            if last >= at {
                continue;
            }
            let seen_at = self.read_at.get(&q).copied().unwrap_or(0);
            let mut back = EventId::ZERO;
            // (bounded: the partition keeps at most its share of the bound)
            for _ in 0..10_000 {
                let page = self.store.read_events(&q, back, self.batch).await?;
                let Some(end) = page.last().map(|e| e.id) else {
                    break;
                };
                // (the same millisecond too: rather an event again than one missed)
                match page.iter().find(|e| e.at_ms >= seen_at) {
                    Some(newer) => {
                        back = EventId(newer.id.0.saturating_sub(1));
                        break;
                    }
                    None => back = end,
                }
            }
            tracing::warn!(topic = %q.topic, partition = q.partition, position = %at, newest = %last, from = %back, "event stream: the partition's newest event is older than this reader's position (Redis lost events in a restart or failover); reading on after the last event written before the one it read last");
            self.positions.insert(q, back);
        }
        Ok(())
    }

    /// Reads round after round until the stream is dropped.
    async fn run(mut self, tx: mpsc::Sender<Result<Event>>, poll: Duration) {
        let backoff = || {
            ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(100))
                .with_max_delay(Duration::from_secs(5))
                .without_max_times()
                .build()
        };
        // A partition whose read failed waits its own backoff; the others go on.
        let mut held: HashMap<Queue, (tokio::time::Instant, backon::ExponentialBackoff)> =
            HashMap::new();
        let mut refresh_delays = backoff();
        let mut refresh_at = tokio::time::Instant::now() + TOPICS_REFRESH;
        loop {
            let mut errors: Vec<Error> = Vec::new();
            let now = tokio::time::Instant::now();
            if now >= refresh_at {
                let refreshed = match self.current_queues().await {
                    Ok(queues) => match self.add(queues, false).await {
                        Ok(()) => self.rewind_rolled_back().await,
                        Err(e) => Err(e),
                    },
                    Err(e) => Err(e),
                };
                refresh_at = match refreshed {
                    Ok(()) => {
                        refresh_delays = backoff();
                        now + TOPICS_REFRESH
                    }
                    Err(e) => {
                        errors.push(e);
                        now + refresh_delays.next().unwrap_or(TOPICS_REFRESH)
                    }
                };
            }
            let (store, batch) = (&self.store, self.batch);
            let due: Vec<&Queue> = self
                .queues
                .iter()
                .filter(|q| held.get(*q).is_none_or(|(until, _)| *until <= now))
                .collect();
            let reads = futures_util::future::join_all(due.into_iter().map(|q| {
                let at = self.positions[q];
                async move { (q.clone(), store.read_events(q, at, batch).await) }
            }))
            .await;
            let mut events = Vec::new();
            let mut full = false;
            for (queue, read) in reads {
                match read {
                    Ok(found) => {
                        held.remove(&queue);
                        full |= found.len() >= self.batch;
                        if let Some(last) = found.last() {
                            self.positions.insert(queue.clone(), last.id);
                            self.read_at.insert(queue, last.at_ms);
                        }
                        // each with the latest time of its partition so far: a clock that
                        // stepped back never reorders a partition's events below
                        let mut latest = 0;
                        events.extend(found.into_iter().map(|e| {
                            latest = latest.max(e.at_ms);
                            (latest, e)
                        }));
                    }
                    Err(e) => {
                        let (until, delays) = held.entry(queue).or_insert_with(|| (now, backoff()));
                        *until = now + delays.next().unwrap_or(Duration::from_secs(5));
                        errors.push(e);
                    }
                }
            }
            // by time across partitions; within one, in order
            events.sort_by(|(ta, a), (tb, b)| {
                (ta, &a.topic, a.partition, a.id).cmp(&(tb, &b.topic, b.partition, b.id))
            });
            for (_, event) in events {
                if tx.send(Ok(event)).await.is_err() {
                    return; // the stream was dropped
                }
            }
            for e in errors {
                if e.is_retryable() {
                    tracing::debug!(error = %e, "event stream: store unreachable; retrying");
                } else {
                    tracing::warn!(error = %e, "event stream: a read failed");
                    if tx.send(Err(e)).await.is_err() {
                        return;
                    }
                }
            }
            if !full {
                tokio::time::sleep(poll).await;
            }
            if tx.is_closed() {
                return;
            }
        }
    }
}
