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
    /// A worker setting is invalid.
    #[error("invalid worker setting: {0}")]
    InvalidSetting(String),
}
