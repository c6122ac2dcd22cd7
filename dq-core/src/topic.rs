//! Topic metadata: what every producer and worker of a topic must agree on, kept in the store
//! as the single source of truth (ARCHITECTURE.md §3).
//!
//! Today that is the partition count. The first client that uses a topic (an enqueue, a
//! worker starting, a stats call, …) records the count it is configured with; every later
//! client reads the record and refuses to work with a different count
//! ([`Error::TopicMismatch`](crate::error::Error::TopicMismatch)) before it writes anything.
//! Without it, a producer with 4 partitions and a worker with 1 would store 3 jobs in 4
//! where no fetcher ever looks.

use crate::names::Topic;

/// A topic's metadata as the store keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopicMeta {
    /// The topic.
    pub topic: Topic,
    /// Its partition count: every producer and worker of the topic must be configured with it.
    pub partitions: u16,
    /// When the first client recorded it, in store ms (Unix).
    pub created_ms: u64,
}

impl TopicMeta {
    /// Metadata of `topic` with `partitions` partitions, recorded at `created_ms` (for stores).
    pub fn new(topic: Topic, partitions: u16, created_ms: u64) -> Self {
        TopicMeta {
            topic,
            partitions,
            created_ms,
        }
    }
}
