//! [`TopicClient`]'s calls on jobs already stored: cancel, bury, reschedule, look up, pause and
//! limits, stats, and requeue or purge of named dead jobs. Enqueueing is in `enqueue.rs`,
//! listing in `list.rs`, the dead-queue sweep in `sweep.rs`.

use std::collections::HashMap;

use super::handle::TopicClient;
use super::retrying::retry_harmless;
use crate::control::{ControlChange, Rate, TopicControl};
use crate::error::Result;
use crate::events::EventsPolicy;
use crate::finished::Retention;
use crate::job::{JobInfo, Queue};
use crate::names::JobKey;
use crate::store::operate::{
    BuryOutcome, CancelOutcome, NewDue, RescheduleOutcome, TopicStats, UpdateOutcome,
};

impl TopicClient {
    /// Cancels a job: one that has not started is removed ([`CancelOutcome::Cancelled`]);
    /// for one running now, a cancel request is recorded ([`CancelOutcome::CancelRequested`]):
    /// the worker holding it learns it on its next lease extension (every third of the
    /// lease), its handler's `ctx.cancelled()` fires, and the job ends as cancelled without a
    /// retry — unless the handler succeeds first. A worker that crashed, released the job at
    /// shutdown or had its lease expire ends it as cancelled too.
    ///
    /// Retried inside through connection trouble (as enqueue is; for up to
    /// [`ENQUEUE_RETRY_WINDOW`](crate::ENQUEUE_RETRY_WINDOW)): cancelling is harmless to repeat. A retry after a try whose
    /// reply was lost (it may have cancelled the job) that finds no job reports
    /// [`CancelOutcome::Gone`], not `NotFound`: the job will not run, but whether this call
    /// cancelled it or it ended otherwise in between is not known.
    pub async fn cancel(&self, key: &str) -> Result<CancelOutcome> {
        let key = JobKey::new(key)?;
        let partitions = self.ensure().await?;
        let (queue, store) = (&self.queue_of(&key, partitions), &self.client.store);
        let (outcome, ambiguous) = retry_harmless(|| store.cancel(queue, &key), true).await?;
        if outcome == CancelOutcome::Cancelled {
            crate::metrics::cancelled(self.topic.as_str());
        }
        Ok(match outcome {
            CancelOutcome::NotFound if ambiguous => CancelOutcome::Gone,
            other => other,
        })
    }

    /// Buries a waiting (scheduled, ready or retry) job without running it: it moves to the
    /// dead queue as if its last attempt had failed for good, with `reason` as the last entry
    /// of its history ([`AttemptOutcome::Buried`](crate::AttemptOutcome::Buried)) — an
    /// operator's "kill" of a job that must not run. Its attempts are kept; it is counted in
    /// the topic's [`buried`](TopicStats::buried), gets a `dead` event when the topic records
    /// events, starts its `unique_for` window, and is trimmed with the dead queue (this
    /// client's [`DeadLimits`](crate::DeadLimits) for the topic); a member of a batch ends
    /// there as dead. From the dead queue it can be requeued or purged like any dead job.
    ///
    /// A running job is not touched ([`BuryOutcome::Running`]: cancel it to stop it), nor a
    /// dead one ([`BuryOutcome::Dead`]). A `reason` longer than an error text may be is cut as
    /// one is (with a marker saying so); an empty one is kept as `"buried"`.
    ///
    /// Retried inside through connection trouble (for up to
    /// [`ENQUEUE_RETRY_WINDOW`](crate::ENQUEUE_RETRY_WINDOW)): burying is harmless to repeat.
    /// A retry after a try whose reply was lost may report [`BuryOutcome::Dead`] for the job
    /// that try buried.
    pub async fn bury(&self, key: &str, reason: &str) -> Result<BuryOutcome> {
        let key = JobKey::new(key)?;
        let partitions = self.ensure().await?;
        let (queue, store) = (&self.queue_of(&key, partitions), &self.client.store);
        let limits = self
            .client
            .config
            .partition_dead_limits(self.topic.as_str(), partitions);
        retry_harmless(|| store.bury(queue, &key, reason, limits), true)
            .await
            .map(|(outcome, _)| outcome)
    }

    /// Gives a scheduled, ready or retry job a new due time.
    ///
    /// [`NewDue::At`] and [`NewDue::After`] are retried inside through connection trouble (for
    /// up to [`ENQUEUE_RETRY_WINDOW`](crate::ENQUEUE_RETRY_WINDOW)), as enqueue is: repeating them sets the same time again
    /// — for `After`, counted from the try that was applied last, so at most the retry window
    /// later than from the first try (as if the call had been sent that much later); the
    /// reported `due_ms` is the one stored. Each outcome is the job as the last try found it.
    /// [`NewDue::Shift`] is relative and would shift twice: it is never retried, and an
    /// error after which it may have been applied is returned as is.
    pub async fn reschedule(&self, key: &str, due: NewDue) -> Result<RescheduleOutcome> {
        let key = JobKey::new(key)?;
        due.check()?;
        let partitions = self.ensure().await?;
        let (queue, store) = (&self.queue_of(&key, partitions), &self.client.store);
        let repeatable = !matches!(due, NewDue::Shift(_));
        retry_harmless(|| store.reschedule(queue, &key, due), repeatable)
            .await
            .map(|(outcome, _)| outcome)
    }

    /// Gives a waiting (scheduled, ready or retry) job a new payload, MessagePack bytes,
    /// keeping its due time, attempts, history, expiry and place in line; a running or dead
    /// job is not touched ([`UpdateOutcome`]). A payload over the client's limit is refused
    /// before any write. Harmless to repeat, so retried through connection trouble.
    pub async fn update_payload(&self, key: &str, payload: Vec<u8>) -> Result<UpdateOutcome> {
        let key = JobKey::new(key)?;
        crate::payload::check_size(&payload, self.client.config.max_payload)?;
        let partitions = self.ensure().await?;
        let (queue, store) = (&self.queue_of(&key, partitions), &self.client.store);
        retry_harmless(|| store.update_payload(queue, &key, &payload), true)
            .await
            .map(|(outcome, _)| outcome)
    }

    /// Everything known about a job, or `None`: times in store ms, the payload as MessagePack
    /// ([`JobInfo::decode`] decodes it).
    pub async fn job(&self, key: &str) -> Result<Option<JobInfo>> {
        let key = JobKey::new(key)?;
        let partitions = self.ensure().await?;
        self.client
            .store
            .job(&self.queue_of(&key, partitions), &key)
            .await
    }

    /// Pauses the topic: from the next wake-up of each fetcher (at once, for an idle one) no
    /// worker leases another of its jobs, until [`TopicClient::resume`]. Running jobs go on;
    /// waiting jobs keep their due times; enqueue, cancel and reschedule still work. Stored
    /// in the store, so it holds for every worker, and across their restarts. Returns the
    /// topic's settings as stored.
    pub async fn pause(&self) -> Result<TopicControl> {
        self.change(ControlChange {
            paused: Some(true),
            ..ControlChange::default()
        })
        .await
    }

    /// Resumes a paused topic; its fetchers are woken at once.
    pub async fn resume(&self) -> Result<TopicControl> {
        self.change(ControlChange {
            paused: Some(false),
            ..ControlChange::default()
        })
        .await
    }

    /// Sets (or with `None` removes) a rate limit across every worker of the topic: at most
    /// `rate.count` jobs leased per `rate.per`, enforced by the store's fetch with Redis time.
    /// Each partition holds an equal share (the count over `partitions × per`). Jobs held
    /// back start late; that lateness is not an error.
    pub async fn set_rate(&self, rate: Option<Rate>) -> Result<TopicControl> {
        if let Some(rate) = &rate {
            rate.check()?;
        }
        self.change(ControlChange {
            rate: Some(rate),
            ..ControlChange::default()
        })
        .await
    }

    /// Sets (or with `None` removes) a cap on the jobs of this topic running at once across
    /// every worker. Each partition enforces its own share (the shares add up to `cap`), so
    /// `cap` must be at least the topic's recorded partition count (checked before any change;
    /// reading the count records the topic if it has no record yet, as every call does); with
    /// jobs spread unevenly over partitions fewer than `cap` may run at once, never more.
    pub async fn set_concurrency(&self, cap: Option<u32>) -> Result<TopicControl> {
        if let Some(cap) = cap {
            crate::control::check_concurrency(cap, self.ensure().await?)?;
        }
        self.change(ControlChange {
            concurrency: Some(cap),
            ..ControlChange::default()
        })
        .await
    }

    /// Sets (or with `None` removes) which finished jobs the topic keeps, for how long and how
    /// many at most ([`Retention`]); each partition keeps its share of the cap. A retention
    /// declared on the handler (`#[delayed_job(keep_succeeded = "1h")]`) is written again at
    /// every worker start, replacing one set here. Refused before any change when
    /// [`Retention::check`] refuses it.
    pub async fn set_retention(&self, retention: Option<Retention>) -> Result<TopicControl> {
        if let Some(r) = &retention {
            r.check()?;
            let partitions = self.ensure().await?;
            if r.max_kept < u64::from(partitions) {
                return Err(crate::error::Error::InvalidConfig(format!(
                    "keeping at most {} finished jobs over {partitions} partitions: each \
                     partition keeps its share, so the cap must be at least the partition count",
                    r.max_kept
                )));
            }
        }
        self.change(ControlChange {
            retention: Some(retention),
            ..ControlChange::default()
        })
        .await
    }

    /// Starts (`Some(policy)`) or stops (`None`) recording the topic's events
    /// ([`crate::events`]): from the next change of each of its jobs, the script making it
    /// appends an event to the job's partition's stream, which keeps the last
    /// `policy.max_kept` events of the topic (each partition its share). Stopping keeps the
    /// events already written. Events declared on the handler (`#[delayed_job(events)]`)
    /// are written again at every worker start, replacing what is set here. Refused before
    /// any change when [`EventsPolicy::check`] refuses the policy.
    pub async fn set_events(&self, policy: Option<EventsPolicy>) -> Result<TopicControl> {
        if let Some(p) = &policy {
            p.check()?;
        }
        self.change(ControlChange {
            events: Some(policy),
            ..ControlChange::default()
        })
        .await
    }

    /// Sets (or with `None` removes) the furthest from now a job's due time may be: from the
    /// next call, an enqueue (single or bulk) or a reschedule whose due time is beyond the
    /// store's now + `max_delay` is refused with [`Error::DelayTooLong`](crate::Error::DelayTooLong)
    /// before anything is written (jobs already stored are not touched). A `max_delay` declared
    /// on the handler (`#[delayed_job(max_delay = "90d")]`) is written again at every worker
    /// start. More than zero.
    pub async fn set_max_delay(
        &self,
        max_delay: Option<std::time::Duration>,
    ) -> Result<TopicControl> {
        if let Some(d) = max_delay {
            crate::control::check_max_delay(d)?;
        }
        self.change(ControlChange {
            max_delay: Some(max_delay),
            ..ControlChange::default()
        })
        .await
    }

    /// The topic's pause, limits and throttle, as stored.
    pub async fn control(&self) -> Result<TopicControl> {
        self.change(ControlChange::default()).await
    }

    /// Applies `change` to every partition (each with its share of a limit), in order; each
    /// call is harmless to repeat, so each is retried through connection trouble.
    async fn change(&self, change: ControlChange) -> Result<TopicControl> {
        let partitions = self.ensure().await?;
        let mut out = TopicControl::default();
        let store = &self.client.store;
        for queue in self.queues(partitions) {
            let share = ControlChange {
                paused: change.paused,
                rate: change.rate.map(|r| r.map(|r| r.share(partitions))),
                concurrency: change.concurrency.map(|c| {
                    c.map(|c| crate::control::concurrency_share(c, partitions, queue.partition))
                }),
                throttle: change.throttle,
                retention: change
                    .retention
                    .map(|r| r.map(|r| r.share(partitions, queue.partition))),
                events: change
                    .events
                    .map(|e| e.map(|e| e.share(partitions, queue.partition))),
                max_delay: change.max_delay,
            };
            let (state, _) = retry_harmless(|| store.control(&queue, &share), true).await?;
            out.paused |= state.paused;
            if queue.partition == 0 {
                out.max_delay = state.max_delay;
                out.rate = state.rate.map(|r| Rate {
                    count: r.count,
                    per: r.per / u32::from(partitions.max(1)),
                });
            }
            out.concurrency = match (out.concurrency, state.concurrency) {
                (Some(a), Some(b)) => Some(a + b),
                (a, b) => a.or(b),
            };
            out.throttled_until_ms = out.throttled_until_ms.max(state.throttled_until_ms);
            out.retention = match (out.retention, state.retention) {
                (Some(a), Some(b)) => Some(Retention {
                    max_kept: a.max_kept.saturating_add(b.max_kept),
                    ..a
                }),
                (a, b) => a.or(b),
            };
            out.events = match (out.events, state.events) {
                (Some(a), Some(b)) => Some(EventsPolicy {
                    max_kept: a.max_kept.saturating_add(b.max_kept),
                }),
                (a, b) => a.or(b),
            };
        }
        Ok(out)
    }

    /// Depths and counters, summed over the topic's partitions.
    pub async fn stats(&self) -> Result<TopicStats> {
        let partitions = self.ensure().await?;
        let mut total = TopicStats::default();
        for queue in self.queues(partitions) {
            total += self.client.store.stats(&queue).await?;
        }
        Ok(total)
    }

    /// Moves dead jobs back to ready with their attempts reset; returns how many moved.
    pub async fn requeue_dead(&self, keys: &[&str]) -> Result<u64> {
        let keys = job_keys(keys)?;
        let groups = self.group(keys, self.ensure().await?);
        let mut moved = 0;
        for (queue, keys) in groups {
            moved += self
                .client
                .store
                .requeue_dead(&queue, &keys)
                .await?
                .into_iter()
                .filter(|m| *m)
                .count() as u64;
        }
        Ok(moved)
    }

    /// Deletes the named dead jobs; returns how many were deleted.
    pub async fn purge_dead(&self, keys: &[&str]) -> Result<u64> {
        let keys = job_keys(keys)?;
        let groups = self.group(keys, self.ensure().await?);
        let mut purged = 0;
        for (queue, keys) in groups {
            purged += self
                .client
                .store
                .purge_dead(&queue, &keys, keys.len())
                .await?;
        }
        Ok(purged)
    }

    /// Deletes every dead job of the topic, in bounded batches; returns how many.
    pub async fn purge_all_dead(&self) -> Result<u64> {
        let partitions = self.ensure().await?;
        let mut purged = 0;
        for queue in self.queues(partitions) {
            // Bounded: each round deletes up to 1000; stop when a round deletes nothing.
            for _ in 0..1_000_000 {
                let n = self.client.store.purge_dead(&queue, &[], 1000).await?;
                purged += n;
                if n == 0 {
                    break;
                }
            }
        }
        Ok(purged)
    }

    /// Groups `keys` by their queue in a topic of `partitions` partitions.
    fn group(&self, keys: Vec<JobKey>, partitions: u16) -> Vec<(Queue, Vec<JobKey>)> {
        let mut groups: HashMap<u16, Vec<JobKey>> = HashMap::new();
        for key in keys {
            groups
                .entry(key.partition(partitions))
                .or_default()
                .push(key);
        }
        groups
            .into_iter()
            .map(|(p, keys)| (Queue::new(self.topic.clone(), p), keys))
            .collect()
    }
}

/// Validates every key first: a bad one is refused before any store call.
fn job_keys(keys: &[&str]) -> Result<Vec<JobKey>> {
    keys.iter().map(|k| JobKey::new(*k)).collect()
}
