//! The event stream: what happened to each job of a topic that records events, in order per
//! partition, readable from any process ([`Client::events`](crate::Client::events)).
//!
//! A topic records events only when asked ([`EventsPolicy`], `#[delayed_job(events)]`,
//! [`TopicClient::set_events`](crate::TopicClient::set_events) or `dq limits --events`): each
//! partition then numbers its events 1, 2, 3… ([`EventId`]) and keeps about its last ones (a
//! Redis stream, `events`, in the partition's hash tag). The script that changes a job
//! records its event in the same call, and writes all the events of the call as one stream
//! entry (one `XADD` per call, not per event), so an event is never written for a change that
//! did not happen, nor lost for one that did (short of the bound: a reader further behind than
//! the events kept misses the oldest). Each entry carries its format number (event format 1,
//! [`EVENT_FORMAT`]); readers skip fields they do not know and report kinds they do not know
//! as [`EventKind::Other`].
//!
//! Reading: [`EventStream`](crate::EventStream) reads every partition of the topics it follows
//! from its position ([`EventCursor`]) in rounds, one `XRANGE` per partition (an entry's id is
//! the number of its last event, so the entry holding the next one is found by id); on a Redis
//! Cluster each partition's read goes to the node holding its slot, so events of many slots
//! are read in parallel with no cross-slot command. Within a partition events come in the
//! order they happened; across partitions a round returns them by time.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::job::Queue;
use crate::names::Topic;

/// The format of the events dq writes (the `v` field of every event).
pub const EVENT_FORMAT: u8 = 1;

/// The default number of events a topic keeps when events are turned on without a bound:
/// 10 000 (each partition keeps its share).
pub const DEFAULT_EVENTS_KEPT: u64 = 10_000;

/// The most events a topic may keep: 10 million.
pub const MAX_EVENTS_KEPT: u64 = 10_000_000;

/// The largest event number a cursor may name: 2^53, the largest integer the scripts count
/// exactly (far beyond what a partition writes: a million events a second for 285 years).
pub const MAX_EVENT_NUMBER: u64 = 1 << 53;

/// Most bytes of an error text an event carries (the rest is cut, marked).
pub const MAX_EVENT_ERROR_LEN: usize = 1024;

/// Whether a topic records events, and how many of its last events it keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventsPolicy {
    /// The most events kept (over all partitions: each keeps its share, at least one). The
    /// bound is approximate: Redis trims a stream by whole nodes of entries (each entry the
    /// events of one call), so somewhat more is usually kept, and an entry straddling the
    /// bound may go with the older ones; the newest call's events are always kept.
    pub max_kept: u64,
}

impl Default for EventsPolicy {
    fn default() -> Self {
        EventsPolicy {
            max_kept: DEFAULT_EVENTS_KEPT,
        }
    }
}

impl EventsPolicy {
    /// A policy keeping the last `max_kept` events, checked.
    pub fn keep(max_kept: u64) -> Result<EventsPolicy> {
        let p = EventsPolicy { max_kept };
        p.check()?;
        Ok(p)
    }

    /// Refuses a bound of 0 or above [`MAX_EVENTS_KEPT`].
    pub fn check(&self) -> Result<()> {
        if self.max_kept == 0 || self.max_kept > MAX_EVENTS_KEPT {
            return Err(Error::InvalidConfig(format!(
                "events kept {} must be 1 to {MAX_EVENTS_KEPT}",
                self.max_kept
            )));
        }
        Ok(())
    }

    /// Partition `partition`'s share of the bound over `partitions` partitions (at least 1;
    /// the shares add up to the bound when it is at least the partition count).
    pub fn share(&self, partitions: u16, partition: u16) -> EventsPolicy {
        let p = u64::from(partitions.max(1));
        let share = self.max_kept / p + u64::from(u64::from(partition) < self.max_kept % p);
        EventsPolicy {
            max_kept: share.max(1),
        }
    }
}

/// What happened to a job.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventKind {
    /// Stored (created, or replaced with `replace`), waiting for its due time
    /// ([`Event::due_ms`]).
    Enqueued,
    /// Leased by a worker: attempt [`Event::attempt`] started.
    Started,
    /// Its handler succeeded; the job is finished.
    Succeeded,
    /// An attempt failed ([`Event::error`]; a lease that ran out says `lease expired`); the
    /// job waits in retry until [`Event::due_ms`].
    Failed,
    /// Its handler asked to run it later (a deferral or a throttle): not a failure; it waits
    /// until [`Event::due_ms`].
    Deferred,
    /// Handed back unfinished by a worker that stopped: ready again, its attempt given back.
    Released,
    /// Moved to the dead queue ([`Event::error`]: the last failure).
    Dead,
    /// Cancelled: gone, never run again.
    Cancelled,
    /// Its expiry came before it started: dropped, never run.
    Expired,
    /// Its handler's retry function discarded it after a failed attempt ([`Event::error`]; an
    /// expired lease says `lease expired`): deleted, never run again.
    Discarded,
    /// A kind this dq does not know (written by a newer one), by its code; `?` for the events
    /// of an entry it cannot read at all (a newer event format: [`Event::error`] says why),
    /// handed out so that a reader moves past them.
    Other(String),
}

impl EventKind {
    /// The one-letter code the store writes (the `e` field).
    pub fn code(&self) -> &str {
        match self {
            EventKind::Enqueued => "q",
            EventKind::Started => "s",
            EventKind::Succeeded => "k",
            EventKind::Failed => "f",
            EventKind::Deferred => "l",
            EventKind::Released => "r",
            EventKind::Dead => "d",
            EventKind::Cancelled => "c",
            EventKind::Expired => "x",
            EventKind::Discarded => "g",
            EventKind::Other(code) => code,
        }
    }

    /// The kind written as `code`.
    pub fn from_code(code: &str) -> EventKind {
        match code {
            "q" => EventKind::Enqueued,
            "s" => EventKind::Started,
            "k" => EventKind::Succeeded,
            "f" => EventKind::Failed,
            "l" => EventKind::Deferred,
            "r" => EventKind::Released,
            "d" => EventKind::Dead,
            "c" => EventKind::Cancelled,
            "x" => EventKind::Expired,
            "g" => EventKind::Discarded,
            other => EventKind::Other(other.to_owned()),
        }
    }

    /// The kind's name, as shown by the CLI and the HTTP API (`succeeded`, …).
    pub fn as_str(&self) -> &str {
        match self {
            EventKind::Enqueued => "enqueued",
            EventKind::Started => "started",
            EventKind::Succeeded => "succeeded",
            EventKind::Failed => "failed",
            EventKind::Deferred => "deferred",
            EventKind::Released => "released",
            EventKind::Dead => "dead",
            EventKind::Cancelled => "cancelled",
            EventKind::Expired => "expired",
            EventKind::Discarded => "discarded",
            EventKind::Other(code) => code,
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// An event's number in its partition: 1 for the first event the partition recorded, one more
/// for each after it. Ordered; [`EventId::ZERO`] is before every event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventId(pub u64);

impl EventId {
    /// Before every event: a reader from here reads all that is kept.
    pub const ZERO: EventId = EventId(0);
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for EventId {
    type Err = Error;

    fn from_str(s: &str) -> Result<EventId> {
        match s.parse::<u64>() {
            Ok(n) if n <= MAX_EVENT_NUMBER => Ok(EventId(n)),
            _ => Err(Error::InvalidConfig(format!(
                "event number {s:?} is not a number from 0 to {MAX_EVENT_NUMBER}"
            ))),
        }
    }
}

/// One event: what happened to which job, when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The job's topic.
    pub topic: String,
    /// The job's partition.
    pub partition: u16,
    /// Its number in its partition.
    #[serde(with = "id_text")]
    pub id: EventId,
    /// What happened.
    pub kind: EventKind,
    /// The job's key.
    pub key: String,
    /// When, by the store's clock (ms).
    pub at_ms: u64,
    /// The attempt it concerns (started, succeeded, failed, dead, cancelled while running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// The worker's id (succeeded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// The error (failed, dead), at most [`MAX_EVENT_ERROR_LEN`] bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When it is due next (enqueued, failed, deferred), ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_ms: Option<u64>,
}

mod id_text {
    use super::EventId;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(id: &EventId, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(id)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<EventId, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// One event as an entry's `b` field packs it: kind, job key, attempt (0: none), error (empty:
/// none), due ms (0: none).
type Packed = (String, String, u32, String, u64);

impl Event {
    /// Decodes one stream entry of `queue` (the number of its first event — its id is the
    /// number of its last, and its `n` field their count — and its field/value pairs, as the
    /// store returns them) into its events, in order. Unknown fields are skipped. `Err` with a reason when the entry is not one dq can read (a
    /// format newer than [`EVENT_FORMAT`], or damaged): the caller skips it.
    pub fn decode_entry(
        queue: &Queue,
        first: u64,
        fields: &[(String, Vec<u8>)],
    ) -> std::result::Result<Vec<Event>, String> {
        let get = |name: &str| fields.iter().find(|(f, _)| f == name).map(|(_, v)| v);
        let text = |name: &str| get(name).map(|v| String::from_utf8_lossy(v).into_owned());
        let version: u8 = text("v")
            .and_then(|v| v.parse().ok())
            .ok_or("no event format")?;
        if version == 0 || version > EVENT_FORMAT {
            return Err(format!(
                "event format {version} (this dq reads 1 to {EVENT_FORMAT})"
            ));
        }
        let at_ms: u64 = text("t").and_then(|t| t.parse().ok()).unwrap_or(0);
        let worker = text("w");
        let body = get("b").ok_or("no events")?;
        let packed: Vec<Packed> =
            rmp_serde::from_slice(body).map_err(|e| format!("events that do not decode: {e}"))?;
        Ok(packed
            .into_iter()
            .enumerate()
            .map(|(i, (kind, key, attempt, error, due))| {
                let kind = EventKind::from_code(&kind);
                Event {
                    topic: queue.topic.as_str().to_owned(),
                    partition: queue.partition,
                    id: EventId(first + i as u64),
                    worker: (kind == EventKind::Succeeded)
                        .then(|| worker.clone())
                        .flatten(),
                    kind,
                    key,
                    at_ms,
                    attempt: (attempt > 0).then_some(attempt),
                    error: (!error.is_empty()).then_some(error),
                    due_ms: (due > 0).then_some(due),
                }
            })
            .collect())
    }
}

/// Where a reader is: the last event it has seen in each partition. Written as text
/// (`orders.close#0=1042,orders.close#1=0`) to be stored by the caller and given
/// back to [`EventsFrom::Cursor`] after a restart; partitions it does not name are read from
/// the reader's default start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventCursor {
    positions: BTreeMap<(String, u16), EventId>,
}

impl EventCursor {
    /// The last event seen in `queue`, if any.
    pub fn get(&self, queue: &Queue) -> Option<EventId> {
        self.positions
            .get(&(queue.topic.as_str().to_owned(), queue.partition))
            .copied()
    }

    /// Records `event` as seen (a position only moves forward).
    pub fn advance(&mut self, event: &Event) {
        let slot = self
            .positions
            .entry((event.topic.clone(), event.partition))
            .or_insert(EventId::ZERO);
        if event.id > *slot {
            *slot = event.id;
        }
    }

    /// Records `event` as the last one handed out in its partition, wherever it is (a stream
    /// that went back after the store lost events goes back with it).
    pub(crate) fn record(&mut self, event: &Event) {
        self.positions
            .insert((event.topic.clone(), event.partition), event.id);
    }

    /// Sets `queue`'s position.
    pub fn set(&mut self, queue: &Queue, id: EventId) {
        self.positions
            .insert((queue.topic.as_str().to_owned(), queue.partition), id);
    }

    /// Whether it names no partition.
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }
}

impl fmt::Display for EventCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, ((topic, partition), id)) in self.positions.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{topic}#{partition}={id}")?;
        }
        Ok(())
    }
}

impl FromStr for EventCursor {
    type Err = Error;

    fn from_str(s: &str) -> Result<EventCursor> {
        let mut cursor = EventCursor::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || {
                Error::InvalidConfig(format!(
                    "event cursor part {part:?} is not <topic>#<partition>=<event number>"
                ))
            };
            let (place, id) = part.split_once('=').ok_or_else(bad)?;
            let (topic, partition) = place.rsplit_once('#').ok_or_else(bad)?;
            let topic = Topic::new(topic)?;
            let partition: u16 = partition.parse().map_err(|_| bad())?;
            cursor
                .positions
                .insert((topic.as_str().to_owned(), partition), id.parse()?);
        }
        Ok(cursor)
    }
}

/// Where a new reader starts, in partitions its cursor does not name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum EventsFrom {
    /// From events written after it starts (the default).
    #[default]
    Now,
    /// From the oldest event kept: replays what the streams hold.
    Start,
    /// From a cursor saved earlier ([`EventStream::cursor`](crate::EventStream::cursor));
    /// partitions it does not name start from the oldest event kept.
    Cursor(EventCursor),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_cursors_round_trip() {
        let id: EventId = "1042".parse().unwrap();
        assert_eq!(id, EventId(1042));
        assert_eq!(id.to_string(), "1042");
        assert!("12-3".parse::<EventId>().is_err());
        assert!(
            "9007199254740993".parse::<EventId>().is_err(),
            "beyond 2^53"
        );
        assert!(EventId(5) > EventId(4));

        let text = "orders.close#0=1042,orders.close#1=0";
        let cursor: EventCursor = text.parse().unwrap();
        assert_eq!(cursor.to_string(), text);
        let q = Queue::new(Topic::new("orders.close").unwrap(), 0);
        assert_eq!(cursor.get(&q), Some(id));
        assert!("orders#x=1".parse::<EventCursor>().is_err());
        assert!("bad topic!#0=1".parse::<EventCursor>().is_err());
        assert!("".parse::<EventCursor>().unwrap().is_empty());
    }

    #[test]
    fn kinds_round_trip_and_unknown_kinds_are_kept() {
        for kind in [
            EventKind::Enqueued,
            EventKind::Started,
            EventKind::Succeeded,
            EventKind::Failed,
            EventKind::Deferred,
            EventKind::Released,
            EventKind::Dead,
            EventKind::Cancelled,
            EventKind::Expired,
            EventKind::Discarded,
        ] {
            assert_eq!(EventKind::from_code(kind.code()), kind);
        }
        assert_eq!(EventKind::from_code("z"), EventKind::Other("z".into()));
    }

    #[test]
    fn policies_are_checked_and_shared() {
        assert!(EventsPolicy::keep(0).is_err());
        assert!(EventsPolicy::keep(MAX_EVENTS_KEPT + 1).is_err());
        let p = EventsPolicy::keep(10).unwrap();
        let sum: u64 = (0..3).map(|i| p.share(3, i).max_kept).sum();
        assert_eq!(sum, 10);
        assert_eq!(EventsPolicy::keep(1).unwrap().share(4, 3).max_kept, 1);
    }

    #[test]
    fn entries_decode_into_numbered_events_and_newer_formats_are_refused() {
        let q = Queue::new(Topic::new("t").unwrap(), 2);
        let body = rmp_serde::to_vec(&vec![
            ("k", "job-1", 2u32, "", 0u64),
            ("f", "job-2", 1, "boom", 99),
        ])
        .unwrap();
        let f = |pairs: &[(&str, &[u8])]| -> Vec<(String, Vec<u8>)> {
            pairs
                .iter()
                .map(|(a, b)| ((*a).to_owned(), b.to_vec()))
                .collect()
        };
        let entry = f(&[
            ("v", b"1"),
            ("n", b"2"),
            ("t", b"7"),
            ("w", b"w-1"),
            ("b", &body),
            ("zz", b"?"),
        ]);
        let events = Event::decode_entry(&q, 41, &entry).unwrap();
        assert_eq!(events.len(), 2);
        let (a, b) = (&events[0], &events[1]);
        assert_eq!(
            (a.id, a.kind.clone(), a.attempt),
            (EventId(41), EventKind::Succeeded, Some(2))
        );
        assert_eq!(
            (a.worker.as_deref(), a.error.as_deref(), a.due_ms),
            (Some("w-1"), None, None)
        );
        assert_eq!(
            (b.id, b.kind.clone(), b.worker.as_deref()),
            (EventId(42), EventKind::Failed, None)
        );
        assert_eq!(
            (b.error.as_deref(), b.due_ms, b.at_ms),
            (Some("boom"), Some(99), 7)
        );
        assert_eq!((b.topic.as_str(), b.partition), ("t", 2));
        assert!(Event::decode_entry(&q, 1, &f(&[("v", b"2"), ("b", &body)])).is_err());
        assert!(Event::decode_entry(&q, 1, &f(&[("v", b"1"), ("b", b"x")])).is_err());
    }
}
