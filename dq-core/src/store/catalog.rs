//! The namespace's records: the topic registry (§3), the live workers' heartbeats, the periodic
//! schedules (§13), the registry of record formats (§4, docs/UPGRADING.md), the topics' payload
//! shapes ([`crate::shape`]), and the store's clock. Each is namespace-wide, outside every partition
//! (on a Redis Cluster, a slot of its own), so these calls take no [`Queue`](crate::job::Queue).

use std::time::Duration;

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::format::{FormatLevel, FormatRegistry, Formats, ProcessInfo};
use crate::names::Topic;
use crate::schedule::{ScheduleOutcome, ScheduleRecord};
use crate::shape::PayloadShape;
use crate::topic::TopicMeta;
use crate::workers::WorkerInfo;

/// What a store keeps for the whole namespace, beside its partitions.
#[async_trait]
pub trait Catalog: Send + Sync + 'static {
    /// Records `partitions` as `topic`'s partition count if the topic has no metadata yet —
    /// the first caller wins, atomically — and returns the metadata stored (the first
    /// caller's). The client compares it with its own configuration
    /// ([`Error::TopicMismatch`]).
    async fn register_topic(&self, topic: &Topic, partitions: u16) -> Result<TopicMeta>;

    /// Every topic with metadata in this store (for Redis: this namespace), by name.
    async fn topics(&self) -> Result<Vec<TopicMeta>>;

    /// Deletes `topic`'s metadata, so that the next client to use it records its own count.
    /// Refused with [`Error::TopicNotEmpty`] while any partition of the recorded count holds
    /// a job (in any state); returns the metadata deleted, or `None` if there was none. Not
    /// atomic with the clients using the topic: stop its producers and workers first.
    async fn reset_topic(&self, topic: &Topic) -> Result<Option<TopicMeta>>;

    /// Records or renews a live worker's heartbeat (`worker.id` names it): it lasts `ttl`
    /// from now (the store's clock) unless renewed. Namespace-wide. Returns the schedules
    /// generation ([`Catalog::touch_schedules`]): a worker's scheduler looks at the schedules
    /// again when it changes, so a change made by another process is seen within one beat.
    async fn beat_worker(&self, worker: &WorkerInfo, ttl: Duration) -> Result<u64>;

    /// The workers whose heartbeat has not expired, by id, with the store's beat and expiry
    /// times; expired heartbeats are removed on the way.
    async fn workers(&self) -> Result<Vec<WorkerInfo>>;

    /// Removes a worker's heartbeat at once (a worker that stopped cleanly); `true` if there
    /// was one.
    async fn remove_worker(&self, id: &str) -> Result<bool>;

    /// Stores a periodic schedule (namespace-wide, by `record.name`): a new name is
    /// [`ScheduleOutcome::Created`]; a name whose stored definition is byte for byte
    /// `record.definition` is left as it is, cursor included ([`ScheduleOutcome::Unchanged`]);
    /// another definition is replaced, cursor and all ([`ScheduleOutcome::Updated`]).
    ///
    /// The default refuses: a store that keeps no schedules.
    async fn put_schedule(&self, record: &ScheduleRecord) -> Result<ScheduleOutcome> {
        let _ = record;
        Err(no_schedules())
    }

    /// Tells every worker that the schedules changed: bumps the schedules generation each
    /// heartbeat returns ([`Catalog::beat_worker`]). Called after every `put_schedule` and
    /// `remove_schedule` through the client; harmless to repeat (a spare scheduler pass).
    ///
    /// The default does nothing: a store whose heartbeats carry no generation.
    async fn touch_schedules(&self) -> Result<()> {
        Ok(())
    }

    /// Deletes a schedule by name; `true` if there was one.
    async fn remove_schedule(&self, name: &str) -> Result<bool> {
        let _ = name;
        Err(no_schedules())
    }

    /// Every stored schedule, by name.
    async fn schedules(&self) -> Result<Vec<ScheduleRecord>> {
        Err(no_schedules())
    }

    /// Moves schedule `name`'s cursor from `from_ms` to `to_ms`, only if it is still
    /// `from_ms` (compare-and-set: of schedulers that race, one wins); `true` if moved.
    /// `false` also for a schedule that no longer exists.
    async fn advance_schedule(&self, name: &str, from_ms: u64, to_ms: u64) -> Result<bool> {
        let _ = (name, from_ms, to_ms);
        Err(no_schedules())
    }

    /// Records the JSON shape of `topic`'s payload, replacing the one stored (last writer
    /// wins); `None` deletes it (a payload type whose shape cannot be known: nothing is
    /// checked). Every worker writes its handlers' when it starts. Namespace-wide.
    ///
    /// The default keeps none (nothing is checked against it).
    async fn put_payload_shape(&self, topic: &Topic, shape: Option<&PayloadShape>) -> Result<()> {
        let _ = (topic, shape);
        Ok(())
    }

    /// The JSON shape of `topic`'s payload, as last written; `None` when none was, or when
    /// the stored one is of a format this dq does not read (a newer dq's: logged as a
    /// warning, never an error, so that nothing is refused for it).
    ///
    /// The default keeps none.
    async fn payload_shape(&self, topic: &Topic) -> Result<Option<PayloadShape>> {
        let _ = topic;
        Ok(None)
    }

    /// The store's clock, in ms (Redis `TIME` for Redis).
    async fn now_ms(&self) -> Result<u64>;

    /// The record formats this store reads, and the one it writes new records in now
    /// ([`crate::format`]).
    fn formats(&self) -> &Formats;

    /// Registers or renews a live process in the namespace's format registry for `ttl` (the
    /// store's clock), and raises the level new records are written in to the lowest format
    /// every live process reads — never past `workers_read` (the lowest format the caller
    /// saw a live worker read in the workers' registry: workers of a dq before the registry
    /// only register there) nor the hold; it never lowers. Returns the level and the hold.
    ///
    /// A process reading less than the level is refused with [`Error::FormatTooOld`] (and
    /// unregistered): it could not read the namespace's jobs.
    ///
    /// The default is a store no other process shares (the embedded one): its level is what
    /// it reads, nothing is kept.
    async fn beat_process(
        &self,
        process: &ProcessInfo,
        ttl: Duration,
        workers_read: u8,
    ) -> Result<FormatLevel> {
        let _ = (ttl, workers_read);
        process.validate()?;
        let level = self.formats().reads();
        if process.reads < level {
            return Err(Error::FormatTooOld {
                level,
                reads: process.reads,
            });
        }
        Ok(FormatLevel::new(level, None))
    }

    /// The registry as it is now: level, hold and the live processes by id (expired
    /// registrations are removed on the way).
    ///
    /// The default (one process): the level is what the store reads, no process listed.
    async fn format_registry(&self) -> Result<FormatRegistry> {
        Ok(FormatRegistry::new(
            FormatLevel::new(self.formats().reads(), None),
            Vec::new(),
        ))
    }

    /// Removes a process's registration at once (a client dropped cleanly); `true` if there
    /// was one. The default keeps none.
    async fn remove_process(&self, id: &str) -> Result<bool> {
        let _ = id;
        Ok(false)
    }

    /// Holds the level: it never rises past `level` until [`Catalog::release_format`]. Keeps
    /// a rollback to a dq that reads `level` open during an upgrade. Refused with
    /// [`Error::InvalidConfig`] below the level (which never lowers).
    ///
    /// The default refuses: one process has nothing to hold.
    async fn hold_format(&self, level: u8) -> Result<FormatLevel> {
        let _ = level;
        Err(Error::InvalidConfig(
            "this store is one process: its format is what it reads; there is nothing to hold"
                .into(),
        ))
    }

    /// Removes the hold: the level rises again with the next registration once every live
    /// process reads a newer format. The default has no hold.
    async fn release_format(&self) -> Result<FormatLevel> {
        Ok(FormatLevel::new(self.formats().reads(), None))
    }
}

/// A stored shape as read: `None`, with a warning, for one this dq does not read.
pub(crate) fn read_shape(topic: &Topic, bytes: &[u8]) -> Option<PayloadShape> {
    match PayloadShape::decode(bytes) {
        Ok(shape) => Some(shape),
        Err(e) => {
            tracing::warn!(topic = %topic, error = %e, "payload shape not read: payloads to this topic are not checked");
            None
        }
    }
}

/// The error of a store that keeps no schedules (the trait's default methods).
fn no_schedules() -> Error {
    Error::InvalidConfig("this store does not keep periodic schedules".into())
}
