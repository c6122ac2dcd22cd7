//! Why a worker could not start: the one error type of the worker's start-up checks.

/// Why a worker could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// Two handlers are registered for one topic.
    #[error("topic {topic:?} has two handlers: {first} and {second}")]
    DuplicateTopic {
        /// The topic.
        topic: String,
        /// The first handler and where it is declared.
        first: String,
        /// The second handler and where it is declared.
        second: String,
    },
    /// A topic was named (in `.topics` or `.concurrency`) that no handler is registered for.
    #[error("no handler is registered for topic {0:?}")]
    UnknownTopic(String),
    /// No handler is registered (or none is left after `.topics(…)`).
    #[error("no jobs to run: annotate handlers with #[delayed_job] (or check .topics(…))")]
    NoJobs,
    /// A handler's settings are invalid.
    #[error("job {name}: {reason}")]
    InvalidJob {
        /// The handler.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A handler declares shared data (`#[delayed_job(data(T))]`) that the worker was not
    /// given with `WorkerBuilder::data`: every job it runs would fail, so the worker does not
    /// start. Add `.data(value)` of that type, or leave the topic out with `.topics(…)`.
    #[error(
        "job {job} (topic {topic:?}, at {at}) needs shared data of type {type_name}: \
         add .data(…) of that type to the worker"
    )]
    MissingData {
        /// The handler's Rust path.
        job: String,
        /// Its topic.
        topic: String,
        /// Where it is declared, as `file:line`.
        at: String,
        /// The missing type's Rust name.
        type_name: String,
    },
    /// A topic's partition count is configured on this worker's client
    /// (`ClientBuilder::partitions`) and is not the count recorded in the store: its fetchers
    /// would miss the partitions its producers use (or read ones they do not), so the worker
    /// does not start. Configure the recorded count, leave the topic's count unconfigured to
    /// adopt it, or change the topic's count as `Client::reset_topic` describes.
    #[error(
        "topic {topic:?} has {stored} partition(s) in the store, but this worker's client is \
         configured with {configured}: configure .partitions({topic:?}, {stored}) or leave it \
         out to adopt the recorded count (to change it, see Client::reset_topic)"
    )]
    TopicMismatch {
        /// The topic.
        topic: String,
        /// The partition count recorded in the store.
        stored: u16,
        /// The partition count this worker's client is configured with.
        configured: u16,
    },
    /// A topic's check at start-up failed with an error retrying cannot fix (e.g. a Redis user
    /// not allowed to run scripts): the topic's jobs could not run, so the worker does not
    /// start.
    #[error("topic {topic:?} cannot run: {source}")]
    TopicCheck {
        /// The topic.
        topic: String,
        /// The store's error.
        #[source]
        source: dq_core::Error,
    },
    /// A worker setting is invalid.
    #[error("invalid worker setting: {0}")]
    InvalidSetting(String),
}
