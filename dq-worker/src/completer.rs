//! A completer is responsible for writing job outcomes back to the store:
//!
//! 1. successes are acknowledged in batches — whatever has finished while the previous batch
//!    was being written goes in the next one, so a busy worker spends one round trip per batch;
//! 2. failures (retry, defer, bury) are batched the same way, one `fail_many` call per
//!    partition for whatever failed meanwhile, written beside the acks (not behind them);
//! 3. every write is retried on connection trouble with capped backoff: ack and fail are
//!    idempotent under their token, so a repeat after an ambiguous error does nothing twice;
//! 4. a buried job is reported to the dead letters (log and `on_dead` hook), once, by the
//!    worker that buried it.
//!
//! If a write still cannot be made, nothing is lost: the lease expires and the job is retried.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use dq_core::{
    AckOutcome, Error, FailAction, FailOutcome, FailedAttempt, Queue, Store, StoredResult, Success,
};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::dead::{DeadJob, DeadLetters};
use crate::in_flight::{InFlight, Lease};
use crate::registry::TopicRuntime;

/// How a handler run ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The handler returned `Ok`: when its lease began (store ms) and its value, kept when
    /// the topic keeps succeeded jobs.
    Succeeded {
        started_ms: u64,
        result: StoredResult,
    },
    Failed {
        action: FailAction,
        error: String,
    },
}

/// One outcome to write.
pub(crate) struct Completion {
    pub lease: Lease,
    pub outcome: Outcome,
    pub span: tracing::Span,
}

/// The runners' side of the completer's queue.
#[derive(Clone)]
pub(crate) struct CompletionSender(mpsc::Sender<Completion>);

impl CompletionSender {
    pub async fn send(&self, completion: Completion) {
        // The completer outlives every runner (shutdown drops it last); a closed channel means
        // the worker was dropped without shutdown, and the lease will expire instead.
        let _ = self.0.send(completion).await;
    }
}

const MAX_BATCH: usize = 1000;

/// Retries store writes through connection trouble: at least 30 s in all, then the lease
/// decides. The pause between tries stays short (250 ms at most, plus up to as much jitter)
/// because the completer writes one round at a time: what handlers finish while a write waits
/// out its pause is written only after it, so once the store is back those jobs must not wait
/// for a long pause to end, or their leases (a second, say) run out and the jobs run again.
fn persist() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(20))
        .with_max_delay(Duration::from_millis(250))
        .with_max_times(120)
        .with_jitter()
}

pub(crate) struct Completer {
    rx: mpsc::Receiver<Completion>,
    store: Arc<dyn Store>,
    in_flight: InFlight,
    topics: Arc<HashMap<String, Arc<TopicRuntime>>>,
    dead: DeadLetters,
    /// The worker's id, kept with the jobs it ran to success when their topic keeps them.
    worker_id: Arc<str>,
}

impl Completer {
    pub fn new(
        store: Arc<dyn Store>,
        in_flight: InFlight,
        topics: Arc<HashMap<String, Arc<TopicRuntime>>>,
        dead: DeadLetters,
        worker_id: Arc<str>,
    ) -> (Completer, CompletionSender) {
        let (tx, rx) = mpsc::channel(4 * MAX_BATCH);
        (
            Completer {
                rx,
                store,
                in_flight,
                topics,
                dead,
                worker_id,
            },
            CompletionSender(tx),
        )
    }

    /// Runs until every sender is dropped and the queue is drained.
    pub async fn run(mut self) {
        let mut failures = JoinSet::new();
        while let Some(first) = self.rx.recv().await {
            let mut acks: HashMap<Queue, Vec<Completion>> = HashMap::new();
            let mut fails: HashMap<Queue, Vec<Completion>> = HashMap::new();
            let mut next = Some(first);
            let mut taken = 0;
            while let Some(c) = next.take() {
                taken += 1;
                match c.outcome {
                    Outcome::Succeeded { .. } => {
                        acks.entry(c.lease.queue.clone()).or_default().push(c);
                    }
                    Outcome::Failed { .. } => {
                        fails.entry(c.lease.queue.clone()).or_default().push(c);
                    }
                }
                if taken < MAX_BATCH {
                    next = self.rx.try_recv().ok();
                }
            }
            // Acks and failures are written side by side, each partition's in one call; what
            // ends meanwhile waits in the channel and makes the next round's batches. Only
            // the reporting of failures (which may throttle other partitions) runs apart.
            let write_acks = async {
                for (queue, batch) in acks {
                    self.ack(&queue, batch).await;
                }
            };
            let write_fails = async {
                let mut written = Vec::new();
                for (queue, batch) in fails {
                    let result = self.fail(&queue, &batch).await;
                    written.push((batch, result));
                }
                written
            };
            let ((), written) = tokio::join!(write_acks, write_fails);
            for (batch, result) in written {
                let store = self.store.clone();
                let topics = self.topics.clone();
                let dead = self.dead.clone();
                failures.spawn(report_all(store, topics, dead, batch, result));
            }
            while failures.try_join_next().is_some() {}
        }
        while failures.join_next().await.is_some() {}
    }

    async fn ack(&self, queue: &Queue, batch: Vec<Completion>) {
        let done: Vec<Success> = batch
            .iter()
            .map(|c| {
                let mut s = Success::new(c.lease.key.clone(), c.lease.token);
                if let Outcome::Succeeded { started_ms, result } = &c.outcome {
                    s.started_ms = *started_ms;
                    s.result = result.clone();
                }
                s
            })
            .collect();
        let store = &self.store;
        let worker = &*self.worker_id;
        let result = (|| async { store.ack(queue, worker, &done).await })
            .retry(persist())
            .when(Error::is_retryable)
            .notify(|e, d| tracing::warn!(error = %e, retry_in = ?d, "ack failed; retrying"))
            .await;
        match result {
            Ok(outcomes) => {
                for (c, outcome) in batch.iter().zip(outcomes) {
                    let _enter = c.span.enter();
                    match outcome {
                        AckOutcome::Acked => tracing::debug!("succeeded"),
                        AckOutcome::Gone => tracing::debug!("already acknowledged"),
                        AckOutcome::Stale => tracing::warn!(
                            "succeeded, but the lease was lost first: another delivery owns the job"
                        ),
                    }
                }
            }
            Err(e) => tracing::error!(
                error = %e,
                jobs = batch.len(),
                "could not acknowledge; the jobs will run again after their leases expire"
            ),
        }
        for c in &batch {
            self.in_flight.remove(&c.lease.queue, c.lease.token);
        }
    }
}

impl Completer {
    /// Writes one partition's failures in one `fail_many` call, retried as a whole through
    /// connection trouble (a failure already written is refused by its token).
    async fn fail(
        &self,
        queue: &Queue,
        batch: &[Completion],
    ) -> dq_core::Result<Vec<dq_core::Result<FailOutcome>>> {
        let limits = self
            .topics
            .get(queue.topic.as_str())
            .map(|t| t.dead_limits)
            .unwrap_or_default();
        let attempts: Vec<FailedAttempt> = batch
            .iter()
            .filter_map(|c| match &c.outcome {
                Outcome::Failed { action, error } => Some(FailedAttempt {
                    key: c.lease.key.clone(),
                    token: c.lease.token,
                    action: action.clone(),
                    error: error.clone(),
                }),
                Outcome::Succeeded { .. } => None,
            })
            .collect();
        let store = &self.store;
        let result = (|| async { store.fail_many(queue, &attempts, limits).await })
            .retry(persist())
            .when(Error::is_retryable)
            .notify(|e, d| tracing::warn!(error = %e, retry_in = ?d, "fail failed; retrying"))
            .await;
        for c in batch {
            self.in_flight.remove(&c.lease.queue, c.lease.token);
        }
        result
    }
}

/// Runs `call` on each of the topic's partitions but `queue`'s, retried through connection
/// trouble: what a handler's throttle, done by `fail` in its own partition, asks of the others.
/// Best effort: a partition that cannot be reached is logged (as `what`) and left as it is.
async fn on_other_partitions<T, Fut>(
    queue: &Queue,
    partitions: u16,
    what: &str,
    call: impl Fn(Queue) -> Fut,
) where
    Fut: std::future::Future<Output = dq_core::Result<T>>,
{
    for p in (0..partitions).filter(|p| *p != queue.partition) {
        let other = Queue::new(queue.topic.clone(), p);
        let result = (|| call(other.clone()))
            .retry(persist())
            .when(Error::is_retryable)
            .await;
        if let Err(e) = result {
            tracing::warn!(partition = p, error = %e, "could not {what}");
        }
    }
}

/// A handler's throttle holds its own partition (`fail` did that); the topic's other
/// partitions get the same pause, so no worker leases another job of the topic before then.
async fn throttle_other_partitions(
    store: &Arc<dyn Store>,
    queue: &Queue,
    partitions: u16,
    delay: Duration,
) {
    let change = dq_core::ControlChange {
        throttle: Some(delay),
        ..dq_core::ControlChange::default()
    };
    on_other_partitions(queue, partitions, "throttle a partition", |q| {
        let (store, change) = (store.clone(), change);
        async move { store.control(&q, &change).await }
    })
    .await;
}

/// A grouped job's throttle holds its group in its own partition (`fail` did that); the
/// topic's other partitions hold the group too.
async fn hold_group_elsewhere(
    store: &Arc<dyn Store>,
    queue: &Queue,
    partitions: u16,
    group: &dq_core::GroupName,
    delay: Duration,
) {
    let change = dq_core::GroupChange {
        group: Some(group.clone()),
        limits: None,
        hold: Some(delay),
    };
    on_other_partitions(queue, partitions, "hold a group in a partition", |q| {
        let (store, change) = (store.clone(), change.clone());
        async move { store.group(&q, &change).await }
    })
    .await;
}

/// Reports each written failure of a batch (see [`report`]), or the batch's error.
async fn report_all(
    store: Arc<dyn Store>,
    topics: Arc<HashMap<String, Arc<TopicRuntime>>>,
    dead: DeadLetters,
    batch: Vec<Completion>,
    result: dq_core::Result<Vec<dq_core::Result<FailOutcome>>>,
) {
    match result {
        Ok(outcomes) => {
            for (c, outcome) in batch.iter().zip(outcomes) {
                report(&store, &topics, &dead, c, outcome).await;
            }
        }
        Err(e) => {
            for c in &batch {
                let _enter = c.span.enter();
                tracing::error!(
                    error = %e,
                    "could not record the failure; the job will run again after its lease expires"
                );
            }
        }
    }
}

/// Logs what `fail` did with one job, throttles the topic's other partitions for a
/// throttle, and reports a buried job to the dead letters.
async fn report(
    store: &Arc<dyn Store>,
    topics: &Arc<HashMap<String, Arc<TopicRuntime>>>,
    dead: &DeadLetters,
    c: &Completion,
    result: dq_core::Result<FailOutcome>,
) {
    let Outcome::Failed { action, error } = &c.outcome else {
        return;
    };
    let lease = &c.lease;
    let _enter = c.span.enter();
    match result {
        Ok(FailOutcome::Retrying { at_ms }) => match action {
            FailAction::Defer(_) => tracing::info!(at_ms, "deferred"),
            FailAction::Throttle(d) => {
                let partitions = topics
                    .get(lease.queue.topic.as_str())
                    .map_or(1, |t| t.partitions);
                if let Some(group) = &lease.group {
                    tracing::info!(
                        at_ms,
                        %group,
                        "rate-limited by a partner: group held until then"
                    );
                    hold_group_elsewhere(store, &lease.queue, partitions, group, *d).await;
                } else {
                    tracing::info!(
                        at_ms,
                        "rate-limited by a partner: topic throttled until then"
                    );
                    throttle_other_partitions(store, &lease.queue, partitions, *d).await;
                }
            }
            _ => tracing::warn!(error = %error, retry_at_ms = at_ms, "failed; will retry"),
        },
        Ok(FailOutcome::Buried { trimmed }) => {
            if trimmed > 0 {
                tracing::warn!(
                    trimmed,
                    "dead queue over its cap or retention: oldest removed"
                );
            }
            dead.report(DeadJob {
                topic: lease.queue.topic.to_string(),
                key: lease.key.clone(),
                attempts: lease.attempt,
                error: error.clone(),
            });
        }
        Ok(FailOutcome::Gone) => tracing::debug!("job already gone; failure not recorded"),
        Ok(FailOutcome::Cancelled) => tracing::info!("cancelled while running; not retried"),
        Ok(FailOutcome::Discarded) => {
            tracing::warn!(error = %error, "failed; discarded by the handler's retry function");
        }
        Err(Error::StaleToken { .. }) => {
            tracing::warn!(error = %error, "failed, but the lease was lost first: not recorded");
        }
        Err(e) => tracing::error!(
            error = %e,
            "could not record the failure; the job will run again after its lease expires"
        ),
    }
}
