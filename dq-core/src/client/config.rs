//! A client's settings: [`ClientConfig`] (partitions, payload and dead-queue limits, bulk
//! chunk) and [`GroupCommit`], how concurrent single enqueues share store calls.

use std::collections::HashMap;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::payload::DEFAULT_MAX_PAYLOAD;
use crate::store::lease::DeadLimits;

/// Largest number of jobs sent in one enqueue script call by bulk enqueue: small enough that
/// one call stays under ~2 ms of Redis time even with a million jobs due within a minute
/// (`dq-bench all`, section `scale-dense`), so Redis never stalls its other clients. A
/// larger chunk saves little: the per-call cost is a few µs against ~7–10 µs per job.
pub const DEFAULT_BULK_CHUNK: usize = 100;

/// Settings shared by a client and the workers built from it.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Partitions per topic, configured: each must match the topic's record in the store.
    /// Topics not listed adopt their recorded count.
    pub partitions: HashMap<String, u16>,
    /// Partitions recorded for a topic not listed in `partitions` when it has no record yet
    /// (default 1); a topic with a record keeps its recorded count.
    pub default_partitions: u16,
    /// Largest encoded payload accepted (default 1 MiB).
    pub max_payload: usize,
    /// Dead-queue limits per topic; topics not listed get [`DeadLimits::default`].
    pub dead_limits: HashMap<String, DeadLimits>,
    /// Jobs per enqueue script call in bulk enqueue (default 100); also the most jobs one
    /// group commit call carries.
    pub bulk_chunk: usize,
    /// Group commit of concurrent single enqueues (default on, [`GroupCommit::default`]);
    /// `None` sends every single enqueue as its own call.
    pub group_commit: Option<GroupCommit>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            partitions: HashMap::new(),
            default_partitions: 1,
            max_payload: DEFAULT_MAX_PAYLOAD,
            dead_limits: HashMap::new(),
            bulk_chunk: DEFAULT_BULK_CHUNK,
            group_commit: Some(GroupCommit::default()),
        }
    }
}

impl ClientConfig {
    /// How many partitions this client has for `topic` before it reads the store's record:
    /// the configured count, else the fallback ([`ClientConfig::count_of`] says which).
    pub fn partitions_of(&self, topic: &str) -> u16 {
        self.count_of(topic).get()
    }

    /// This client's count for `topic`: configured with `partitions`, or the fallback
    /// `default_partitions`, which gives way to the topic's record.
    pub fn count_of(&self, topic: &str) -> TopicCount {
        match self.partitions.get(topic) {
            Some(&n) => TopicCount::Configured(n.max(1)),
            None => TopicCount::Fallback(self.default_partitions.max(1)),
        }
    }

    /// The dead-queue limits of `topic`, for the whole topic.
    pub fn dead_limits_of(&self, topic: &str) -> DeadLimits {
        self.dead_limits.get(topic).copied().unwrap_or_default()
    }

    /// The dead-queue limits of one partition of `topic`, a topic of `partitions`
    /// partitions (its recorded count): the cap is shared evenly.
    pub fn partition_dead_limits(&self, topic: &str, partitions: u16) -> DeadLimits {
        let limits = self.dead_limits_of(topic);
        let p = u64::from(partitions.max(1));
        DeadLimits {
            cap: limits.cap.div_ceil(p).max(1),
            ..limits
        }
    }
}

/// The partition count a client has for a topic, and whether it configured it: a
/// configured count must match the store's record, a fallback only fills a topic with no
/// record yet and otherwise gives way to the recorded count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopicCount {
    /// Set for this topic with
    /// [`ClientBuilder::partitions`](crate::connect::ClientBuilder::partitions) (or given by
    /// a tool that read the record): a different record is [`Error::TopicMismatch`](crate::Error::TopicMismatch).
    Configured(u16),
    /// Not configured for this topic:
    /// [`ClientBuilder::default_partitions`](crate::connect::ClientBuilder::default_partitions),
    /// recorded only if the topic has no record yet; otherwise the recorded count is used.
    Fallback(u16),
}

impl TopicCount {
    /// The count itself (what is recorded for a topic with no record yet).
    pub fn get(self) -> u16 {
        match self {
            TopicCount::Configured(n) | TopicCount::Fallback(n) => n,
        }
    }

    /// Whether this client configured the count for the topic.
    pub fn is_configured(self) -> bool {
        matches!(self, TopicCount::Configured(_))
    }
}

/// Default largest number of queued single enqueues sent in one call ([`GroupCommit::max_batch`]).
pub const DEFAULT_GROUP_BATCH: usize = 128;

/// Longest linger accepted ([`GroupCommit::linger`]): every enqueue may wait that long for
/// company, so a longer one is surely a mistake.
pub const MAX_GROUP_LINGER: Duration = Duration::from_secs(1);

/// How concurrent single enqueues are coalesced
/// ([`ClientBuilder::group_commit`](crate::connect::ClientBuilder::group_commit)); on by
/// default, with [`GroupCommit::default`].
///
/// While an enqueue call to a partition is in flight, later single enqueues to the same
/// partition (from any clone of the client) queue, and go together, in arrival order, as the
/// next call — one script call and one round trip for all of them, each caller still getting
/// its own outcome or error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupCommit {
    /// Most callers sent in one call (default [`DEFAULT_GROUP_BATCH`]; at least 1). A batch
    /// never holds more than the client's [`bulk_chunk`](crate::client::ClientConfig::bulk_chunk)
    /// either: that is the client's one bound on the jobs of one script call, which keeps each
    /// call in the low milliseconds so that Redis never stalls its other clients.
    pub max_batch: usize,
    /// How long each batch waits for more callers before it is sent, unless it is full
    /// (default zero: none, and an enqueue to an idle partition is sent at once by its own
    /// caller). At most [`MAX_GROUP_LINGER`]. A linger adds up to its length to every enqueue;
    /// it only helps when callers arrive faster than round trips return, and even then a
    /// zero linger already coalesces them.
    pub linger: Duration,
}

impl Default for GroupCommit {
    fn default() -> Self {
        GroupCommit {
            max_batch: DEFAULT_GROUP_BATCH,
            linger: Duration::ZERO,
        }
    }
}

impl GroupCommit {
    /// Refuses settings that cannot work: a `max_batch` of 0, or a linger over
    /// [`MAX_GROUP_LINGER`].
    pub fn check(&self) -> Result<()> {
        if self.max_batch == 0 {
            return Err(Error::InvalidConfig(
                "group commit max_batch must be at least 1".into(),
            ));
        }
        if self.linger > MAX_GROUP_LINGER {
            return Err(Error::InvalidConfig(format!(
                "group commit linger {:?} is over the most accepted ({MAX_GROUP_LINGER:?})",
                self.linger
            )));
        }
        Ok(())
    }
}
