//! The topic check at start-up: each topic's partition count against the store's record,
//! before any fetcher runs, so that a worker that could not serve a topic fails to start
//! instead of looking up while it runs nothing.

use dq_core::{Client, Topic};

use crate::error::WorkerError;
use crate::fetcher::is_permanent;

/// Checks `topic` once: its recorded partition count (the one its fetchers must cover), or
/// `None` when the fetchers are to check it themselves — the store could not be reached (they
/// retry until it is back), or the topic was refused and `skip_refused` keeps the worker
/// going without it (its fetchers then log the refusal at ERROR and show it in the health).
/// A refused topic without `skip_refused` is the error naming it.
pub(crate) async fn at_start(
    client: &Client,
    topic: &Topic,
    skip_refused: bool,
) -> Result<Option<u16>, WorkerError> {
    match client.check_topic_once(topic.as_str()).await {
        Ok(meta) => Ok(Some(meta.partitions)),
        Err(_) if skip_refused => Ok(None),
        Err(dq_core::Error::TopicMismatch {
            topic,
            stored,
            configured,
        }) => Err(WorkerError::TopicMismatch {
            topic,
            stored,
            configured,
        }),
        Err(e) if is_permanent(&e) => Err(WorkerError::TopicCheck {
            topic: topic.to_string(),
            source: e,
        }),
        Err(e) => {
            tracing::warn!(
                topic = %topic,
                error = %e,
                "topic check failed at start; its fetchers retry it until the store answers"
            );
            Ok(None)
        }
    }
}
