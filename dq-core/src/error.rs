//! The one error type of dq-core, and the mapping of script return codes to it.

use std::time::Duration;

/// Everything that can go wrong in dq-core.
///
/// Input errors (`InvalidTopic`, `InvalidKey`, `PayloadTooLarge`, …) are always raised *before*
/// anything is written to the store, so a rejected call leaves no trace.
///
/// `Clone`, so that one failed store call can be reported to each of the callers it served
/// (group commit) with the variant they match on.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A topic name is empty, too long, or uses a character outside `[A-Za-z0-9._-]`.
    #[error("invalid topic name {name:?}: {reason}")]
    InvalidTopic {
        /// The rejected name.
        name: String,
        /// Why it was rejected, naming the first character at fault and its byte position.
        reason: String,
    },
    /// A job key is empty, too long, or contains a forbidden character (whitespace, a control
    /// character, an invisible format character such as a zero-width space or a byte-order
    /// mark).
    #[error("invalid job key {key:?}: {reason}")]
    InvalidKey {
        /// The rejected key.
        key: String,
        /// Why it was rejected, naming the first character at fault and its byte position.
        reason: String,
    },
    /// An encoded payload is larger than the configured limit.
    #[error("payload of {size} bytes exceeds the limit of {limit} bytes")]
    PayloadTooLarge {
        /// Encoded size in bytes.
        size: usize,
        /// The configured limit in bytes.
        limit: usize,
    },
    /// A payload could not be encoded to MessagePack.
    #[error("payload could not be encoded: {0}")]
    Encode(String),
    /// A payload could not be decoded into the handler's type.
    #[error("payload could not be decoded: {0}")]
    Decode(String),
    /// A value given to a builder or policy is out of range.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// The Redis user dq connects as may not run a command dq needs, or not on the keys it
    /// names (`NOPERM`): give it the rule of
    /// [`acl_rule`](crate::store::redis::acl_rule) for the namespace (README "Secured
    /// Redis"). Refused by Redis, so nothing of the refused command was applied.
    #[error(
        "the Redis user may not do what dq needs ({0}); give it the ACL rule of \
         dq::store::redis::acl_rule(namespace) (README \"Secured Redis\")"
    )]
    NoPermission(String),
    /// A job's expiry that cannot be kept: not after its due time, or an `AfterDue` of zero
    /// (see [`Expiry`](crate::Expiry)). Nothing was written.
    #[error("invalid expiry: {0}")]
    InvalidExpiry(String),
    /// A priority above [`Priority::MAX`](crate::Priority::MAX) (9). Nothing was written.
    #[error("invalid priority {0}: a priority is 0 (lowest) to 9 (highest)")]
    InvalidPriority(u8),
    /// A group name is empty, longer than 64 bytes, or holds whitespace, a control or an
    /// invisible format character ([`GroupName`](crate::GroupName)). Nothing was written.
    #[error("invalid group name {name:?}: {reason}")]
    InvalidGroup {
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A batch id is empty, longer than 128 bytes, or holds a character other than ASCII
    /// letters, digits and `.`, `_`, `:`, `-` ([`BatchId`](crate::batch::BatchId)). Nothing
    /// was written.
    #[error("invalid batch id {id:?}: {reason}")]
    InvalidBatch {
        /// The rejected id.
        id: String,
        /// Why it was rejected.
        reason: String,
    },
    /// No batch of this id is stored (never opened, or kept past its retention).
    #[error("no batch {0:?}")]
    BatchNotFound(String),
    /// The batch is closed: it takes no more members. Nothing was written.
    #[error("batch {0:?} is closed: it takes no more members")]
    BatchClosed(String),
    /// A key window (`unique_for`, `debounce`, `throttle`: [`KeyWindow`](crate::KeyWindow))
    /// that cannot be kept: zero, past what dq can store, or a debounce with a due time of
    /// its own. Nothing was written.
    #[error("invalid key window: {0}")]
    InvalidWindow(String),
    /// A due time further from now than the topic's `max_delay` allows (by the store's clock;
    /// [`TopicClient::set_max_delay`](crate::TopicClient::set_max_delay)). Nothing was
    /// written.
    #[error(
        "a due time {delay_ms} ms from now is beyond the topic's max_delay of {max_delay_ms} ms          (job {job} of the call)"
    )]
    DelayTooLong {
        /// How far from the store's now the refused due time was (ms).
        delay_ms: u64,
        /// The topic's limit (ms).
        max_delay_ms: u64,
        /// Which job of the call (1-based) was refused.
        job: usize,
    },
    /// The job needs a record format the namespace does not write yet: some live process
    /// reads only older formats (`dq formats` lists them). Nothing was written; once every
    /// process runs a dq that reads `needs`, the level rises and the call succeeds.
    #[error(
        "{feature} needs record format {needs}, but the namespace writes format {level} while \
         processes that read no newer are live (see `dq formats`, docs/UPGRADING.md)"
    )]
    NeedsFormat {
        /// What needs the format (e.g. "a job's expiry").
        feature: &'static str,
        /// The format it needs.
        needs: u8,
        /// The format the namespace writes now.
        level: u8,
    },
    /// A handler's value that was not stored with its succeeded job (over the worker's
    /// payload limit, or its serialization failed): the job's success counted all the same.
    #[error("the result of job {key} was not stored: {reason}")]
    ResultNotStored {
        /// The job.
        key: String,
        /// Why.
        reason: String,
    },
    /// [`Client::wait`](crate::Client::wait) found the job gone on a topic that keeps no
    /// succeeded jobs, so how it ended cannot be told.
    #[error(
        "topic {topic} keeps no succeeded jobs, so how a job ended cannot be told once it is \
         gone: declare `keep_succeeded = \"…\"` on its handler or call set_retention"
    )]
    NotKept {
        /// The topic.
        topic: String,
    },
    /// A periodic schedule that cannot be used: a bad cron expression, an unknown time zone,
    /// an interval out of range, a bad schedule name, or an expression that never fires.
    /// Nothing was written.
    #[error("invalid schedule: {0}")]
    InvalidSchedule(String),
    /// A delay or due time past the latest dq can store ([`MAX_DUE_MS`](crate::job::MAX_DUE_MS),
    /// in the year 10889), or a shift larger than that whole range.
    #[error("due time {requested_ms} ms after 1970 is past the latest dq can store ({max_ms})")]
    DueOutOfRange {
        /// The requested due time (or shift), in ms.
        requested_ms: u128,
        /// The latest due time dq can store, in Unix ms.
        max_ms: u64,
    },
    /// A partition index outside `0..partitions` of its topic.
    #[error("partition {partition} out of range for topic {topic:?} with {partitions} partitions")]
    InvalidPartition {
        /// The topic.
        topic: String,
        /// The requested partition.
        partition: u16,
        /// How many partitions the topic has.
        partitions: u16,
    },
    /// The topic's partition count recorded in the store (by the first producer or worker
    /// that used it) is not the one this client is configured with. Nothing was written:
    /// producers and workers that disagree on it would store jobs where no fetcher looks.
    /// Configure `.partitions(topic, stored)` on this client, or change the topic's count as
    /// [`Client::reset_topic`](crate::client::Client::reset_topic) describes.
    #[error(
        "topic {topic:?} has {stored} partition(s) in the store, but this client is configured \
         with {configured}: configure .partitions({topic:?}, {stored}) (to change a topic's \
         partition count, see Client::reset_topic)"
    )]
    TopicMismatch {
        /// The topic.
        topic: String,
        /// The partition count recorded in the store.
        stored: u16,
        /// The partition count this client is configured with.
        configured: u16,
    },
    /// [`Client::reset_topic`](crate::client::Client::reset_topic) was refused: the topic
    /// still holds jobs (in any state, dead ones included). Nothing was changed.
    #[error("topic {topic:?} still holds {jobs} job(s): drain it (and purge its dead queue) first")]
    TopicNotEmpty {
        /// The topic.
        topic: String,
        /// How many jobs it holds.
        jobs: u64,
    },
    /// The Redis server is not fit to hold jobs (too old, or an evicting `maxmemory-policy`).
    #[error("redis server rejected: {0}")]
    UnsuitableServer(String),
    /// Redis refused a write because it reached `maxmemory` (policy `noeviction`).
    #[error("redis is out of memory; the job was not stored")]
    OutOfMemory,
    /// The delivery token no longer owns the job: its lease expired or it was delivered again.
    #[error("stale delivery token for job {key:?}: the lease was lost")]
    StaleToken {
        /// The job key.
        key: String,
    },
    /// A reschedule or requeue asked for a job that is not in a state allowing it.
    #[error("job {key:?} is {state}, which does not allow this operation")]
    WrongState {
        /// The job key.
        key: String,
        /// The state the job was found in.
        state: String,
    },
    /// A call to the store did not finish within its deadline; it may or may not have applied.
    #[error("store call timed out after {0:?}")]
    Timeout(Duration),
    /// A script returned something this version of dq does not understand.
    #[error("unexpected reply from the store: {0}")]
    Protocol(String),
    /// One item of a bulk enqueue was refused (bad key, payload too large, …); nothing of the
    /// bulk was written. `source` is the item's own error.
    #[error("bulk item {index}{}: {source}", key.as_deref().map(|k| format!(" (key {k:?})")).unwrap_or_default())]
    BulkItem {
        /// The item's position in the bulk, from 0.
        index: usize,
        /// The item's key as given (`None`: a key was to be generated).
        key: Option<String>,
        /// Why the item was refused.
        #[source]
        source: Box<Error>,
    },
    /// A bulk enqueue failed part-way: some of its script calls (chunks) were stored, then
    /// one failed (`source`, e.g. [`Error::OutOfMemory`]) and the rest were not sent. Each
    /// chunk is atomic; the bulk is not. See
    /// [`TopicClient::enqueue_bulk`](crate::client::TopicClient::enqueue_bulk) for how to resume.
    #[error(
        "bulk enqueue stored {} of {} jobs, then failed: {source}",
        outcomes.stored(),
        outcomes.len()
    )]
    BulkPartial {
        /// One entry per job of the call, in the order given: `Some` (its key, generated keys
        /// too, and its outcome) for a job whose chunk was stored, `None` for one that was
        /// not. With one partition the `Some`s are a prefix. Read them with
        /// [`BulkStored::outcomes`].
        outcomes: BulkStored,
        /// The indices of the jobs of the chunk that failed. If `source` is retryable (a
        /// timeout or lost connection that outlasted dq's own retries) that chunk may have
        /// been stored all the same; otherwise (e.g. `OutOfMemory`) it was not.
        failed: Vec<usize>,
        /// Why the chunk failed.
        #[source]
        source: Box<Error>,
    },
    /// A durable enqueue ([`ClientBuilder::durable_enqueue`](crate::connect::ClientBuilder::durable_enqueue))
    /// was stored on the master, but fewer replicas than wanted confirmed it within the
    /// timeout. The job **may still be stored** (and may also be lost if the master fails
    /// now): enqueue is idempotent by key, so retry the same enqueue (same key) until it
    /// answers Ok — a retry that finds the job answers `Exists`/`Created` and waits again.
    #[error("the enqueue reached {acked} of {wanted} replica(s) in time; retry it (same key)")]
    NotReplicated {
        /// Replicas that confirmed the write.
        acked: usize,
        /// Replicas asked for.
        wanted: usize,
    },
    /// A TLS connection to Redis failed on the certificates: the server's is not signed by a
    /// CA this client trusts (give it the CA:
    /// [`TlsConfig::ca_file`](crate::store::redis::TlsConfig::ca_file), the `dq` command
    /// line's `--tls-ca`), does not name the host, or has expired; or the server refused the
    /// client's certificate. Says which, in words and in rustls's; never quotes the URL.
    /// Not retryable: retrying does not change a certificate.
    #[error("TLS: {0}")]
    Tls(String),
    /// A Redis connection or command error.
    #[error("redis error: {0}")]
    Redis(#[from] redis::RedisError),
    /// The namespace already writes a record format newer than this dq reads (its format
    /// level, docs/UPGRADING.md): this process could not read the jobs written there, so it
    /// is refused before it writes anything. Deploy a dq that reads the namespace's format
    /// (`dq formats` shows it); a namespace's level never goes back.
    #[error(
        "the namespace writes job records in format {level}, but this dq reads formats up to \
         {reads} only: deploy a dq that reads format {level} (see `dq formats` and \
         docs/UPGRADING.md); the level never goes back"
    )]
    FormatTooOld {
        /// The format the namespace writes new records in.
        level: u8,
        /// The newest format this process reads.
        reads: u8,
    },
    /// The job's record was written by a newer dq, in a record format this one does not read
    /// (ARCHITECTURE.md §4). Nothing was written: the record is left as it is for a dq that
    /// reads it. Upgrade this process.
    #[error(
        "a record of format {format} is newer than this dq reads (formats up to {reads}): \
         upgrade dq"
    )]
    NewerFormat {
        /// The format the record says it was written in.
        format: u8,
        /// The newest format this process reads.
        reads: u8,
    },
    /// An enqueue hook ([`ClientBuilder::enqueue_hook`](crate::connect::ClientBuilder::enqueue_hook))
    /// refused the job: nothing was written. `source` is the hook's own error
    /// ([`Error::refused_with`] gets it back as its type).
    #[error("enqueue of {topic}/{key} refused: {source}")]
    EnqueueRefused {
        /// The job's topic.
        topic: String,
        /// The job's key (a generated key too).
        key: String,
        /// The hook's error.
        #[source]
        source: std::sync::Arc<dyn std::error::Error + Send + Sync>,
    },
}

impl Error {
    /// The error an enqueue hook refused the job with, as `E` (also inside a bulk's
    /// [`Error::BulkItem`]); `None` for any other error, or a refusal of another type.
    pub fn refused_with<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            Error::EnqueueRefused { source, .. } => source.downcast_ref::<E>(),
            Error::BulkItem { source, .. } => source.refused_with(),
            _ => None,
        }
    }

    /// The error of a bulk item as [`Error::BulkItem`], naming its index and key.
    pub(crate) fn in_bulk_item(self, index: usize, key: Option<&str>) -> Error {
        Error::BulkItem {
            index,
            key: key.map(str::to_owned),
            source: Box::new(self),
        }
    }

    /// True for errors after which the same call may be retried as is: connection trouble,
    /// timeouts, a server still loading its data, a cluster redirecting or failing over. Input and state errors are not retryable.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Timeout(_) => true,
            Error::Redis(e) => {
                e.is_io_error()
                    || e.is_timeout()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || matches!(
                        e.kind(),
                        redis::ErrorKind::Server(redis::ServerErrorKind::BusyLoading)
                            | redis::ErrorKind::Server(redis::ServerErrorKind::TryAgain)
                            | redis::ErrorKind::Server(redis::ServerErrorKind::MasterDown)
                            | redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
                            // A cluster moving slots or failing over: refused, not applied.
                            | redis::ErrorKind::Server(redis::ServerErrorKind::Moved)
                            | redis::ErrorKind::Server(redis::ServerErrorKind::Ask)
                            | redis::ErrorKind::Server(redis::ServerErrorKind::ClusterDown)
                            | redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
                            | redis::ErrorKind::ClusterConnectionNotFound
                    )
            }
            _ => false,
        }
    }
}

impl Error {
    /// For a retryable error: whether the call may have been applied all the same (its reply
    /// was lost: a timeout, a connection dropped after sending). `false` where the store
    /// surely did nothing: the connection was refused, or the server answered with an error.
    pub(crate) fn may_have_applied(&self) -> bool {
        match self {
            Error::Timeout(_) => true,
            Error::Redis(e) => {
                !e.is_connection_refusal()
                    && (e.is_io_error() || e.is_timeout() || e.is_connection_dropped())
            }
            _ => false,
        }
    }
}

/// Converts a Redis error, recognising the ones dq gives their own meaning.
pub(crate) fn from_redis(e: redis::RedisError) -> Error {
    if e.code() == Some("OOM") {
        Error::OutOfMemory
    } else if let Some(denied) = permission_denied(&e) {
        denied
    } else if let Some(why) = crate::store::redis::tls_failure(&e) {
        Error::Tls(why)
    } else {
        Error::Redis(e)
    }
}

/// An ACL refusal as [`Error::NoPermission`], with Redis's own words (they name the command
/// or say it was a key, when Redis says which): `NOPERM` of a command or key, or a call a
/// script made that the ACL refused (Redis 7.0: "can't run this command"; 7.2 on: "ACL
/// failure in script").
pub(crate) fn permission_denied(e: &redis::RedisError) -> Option<Error> {
    let text = e.to_string();
    let denied = e.code() == Some("NOPERM")
        || text.contains("can't run this command or subcommand")
        || text.contains("ACL failure in script");
    denied.then(|| Error::NoPermission(text))
}

/// dq-core's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a bulk enqueue that failed part-way had stored ([`Error::BulkPartial`]): one entry per
/// job, in the order given. [`BulkStored::outcomes`] gives them as `Option<Enqueued>`.
///
/// (The entries are held behind `Any` so that this file, the bottom of dq-core, names no type
/// of the job model above it; the accessor lives with the client that builds them.)
#[derive(Clone)]
pub struct BulkStored {
    pub(crate) entries: std::sync::Arc<dyn std::any::Any + Send + Sync>,
    pub(crate) stored: usize,
    pub(crate) len: usize,
}

impl BulkStored {
    /// How many jobs were stored.
    pub fn stored(&self) -> usize {
        self.stored
    }

    /// How many jobs the bulk had.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the bulk had no jobs (never, for an error: kept for symmetry with `len`).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl std::fmt::Debug for BulkStored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BulkStored")
            .field("stored", &self.stored)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}
