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
    /// A worker setting is invalid.
    #[error("invalid worker setting: {0}")]
    InvalidSetting(String),
}
