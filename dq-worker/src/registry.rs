//! Which handlers this worker runs, resolved once at start: each topic's descriptor, retry
//! policy, timeout, pool size and partitions. Two handlers for one topic are an error naming
//! both source locations, and so is a handler whose declared shared data (`data(…)`) the
//! worker was not given; every registered handler is logged.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use dq_core::{ClientConfig, DeadLimits, JobDescriptor, RetryFn, RetryPolicy, SharedData, Topic};
use tokio::sync::Semaphore;

use crate::error::WorkerError;

/// A topic as this worker runs it.
#[derive(Debug)]
pub(crate) struct TopicRuntime {
    pub descriptor: &'static JobDescriptor,
    pub topic: Topic,
    /// The topic's retry policy: asked after a handler's error, and sent with every fetch so
    /// that the store asks it for jobs whose lease expired. With a retry function, its
    /// decisions for expired leases, asked once at start (`RetryFn::lease_expiry_policy`).
    pub policy: RetryPolicy,
    /// The handler's retry function, asked after a handler's error instead of `policy`.
    pub retry_fn: Option<RetryFn>,
    pub timeout: Option<Duration>,
    pub concurrency: usize,
    /// The topic's partition count: the client's until [`crate::Worker::start`] reads the
    /// store's record, then the recorded one.
    pub partitions: u16,
    /// Dead-queue limits of one partition (set again with the recorded count at start).
    pub dead_limits: DeadLimits,
    /// The pool: one permit per job that may run at once.
    pub permits: Arc<Semaphore>,
    /// The topic's metric handles.
    pub metrics: crate::metrics::TopicMetrics,
}

pub(crate) struct Selection<'a> {
    pub extra: &'a [&'static JobDescriptor],
    pub only: Option<&'a HashSet<String>>,
    pub concurrency: &'a HashMap<String, usize>,
    pub default_concurrency: usize,
    /// What `.data(…)` gave: checked against each selected handler's declared needs.
    pub data: &'a SharedData,
}

pub(crate) fn resolve(
    registered: impl Iterator<Item = &'static JobDescriptor>,
    selection: Selection<'_>,
    config: &ClientConfig,
) -> Result<Vec<Arc<TopicRuntime>>, WorkerError> {
    let mut by_topic: HashMap<&'static str, &'static JobDescriptor> = HashMap::new();
    for d in registered.chain(selection.extra.iter().copied()) {
        if let Some(first) = by_topic.get(d.topic) {
            if std::ptr::eq(*first, d) {
                continue;
            }
            return Err(WorkerError::DuplicateTopic {
                topic: d.topic.to_string(),
                first: format!("{} at {}", first.name, first.location()),
                second: format!("{} at {}", d.name, d.location()),
            });
        }
        by_topic.insert(d.topic, d);
    }
    if let Some(only) = selection.only {
        for name in only {
            if !by_topic.contains_key(name.as_str()) {
                return Err(WorkerError::UnknownTopic(name.clone()));
            }
        }
        by_topic.retain(|topic, _| only.contains(*topic));
    }
    for name in selection.concurrency.keys() {
        if !by_topic.contains_key(name.as_str()) {
            return Err(WorkerError::UnknownTopic(name.clone()));
        }
    }
    if by_topic.is_empty() {
        return Err(WorkerError::NoJobs);
    }
    let mut topics: Vec<_> = by_topic.into_values().collect();
    topics.sort_by_key(|d| d.topic);
    topics
        .into_iter()
        .map(|d| {
            let invalid = |reason: String| WorkerError::InvalidJob {
                name: d.name.to_string(),
                reason,
            };
            let topic = Topic::new(d.topic).map_err(|e| invalid(e.to_string()))?;
            let policy = d.retry_policy().map_err(|e| invalid(e.to_string()))?;
            let concurrency = selection
                .concurrency
                .get(d.topic)
                .copied()
                .or(d.concurrency.map(|c| c as usize))
                .unwrap_or(selection.default_concurrency);
            if concurrency == 0 {
                return Err(invalid("concurrency must be at least 1".into()));
            }
            // Only the handlers this worker runs: one left out with `.topics(…)` needs nothing.
            if let Some(need) = d.data.iter().find(|n| !selection.data.provides(n)) {
                return Err(WorkerError::MissingData {
                    job: d.name.to_string(),
                    topic: d.topic.to_string(),
                    at: d.location(),
                    type_name: need.type_name().to_string(),
                });
            }
            let partitions = config.partitions_of(d.topic);
            tracing::info!(
                topic = d.topic,
                handler = d.name,
                at = %d.location(),
                concurrency,
                partitions,
                retry = d.retry,
                "registered job"
            );
            if let Some(f) = &d.retry_fn {
                tracing::info!(
                    topic = d.topic,
                    retry_fn = f.name(),
                    max_attempts = f.max_attempts(),
                    "retries decided by a retry function (expired leases: decided now, once per \
                     attempt)"
                );
            }
            Ok(Arc::new(TopicRuntime {
                descriptor: d,
                policy,
                retry_fn: d.retry_fn,
                timeout: d.timeout_ms.map(Duration::from_millis),
                concurrency,
                partitions,
                dead_limits: config.partition_dead_limits(d.topic, partitions),
                permits: Arc::new(Semaphore::new(concurrency)),
                metrics: crate::metrics::TopicMetrics::new(d.topic),
                topic,
            }))
        })
        .collect()
}
