//! Reading a partition's event stream (`events`, a Redis stream the scripts append one entry
//! per call to: see `lua/lib.lua` `flush_events` and [`crate::events`]). An entry's id is the
//! number of its last event (`<n>-0`), so the entry holding the event after `after` is the
//! first whose id is at least `<after + 1>-0`: every read is one plain `XRANGE`, routed to the
//! key's slot on a cluster. Nothing here writes.

use super::store::RedisStore;
use crate::error::{Result, from_redis};
use crate::events::{Event, EventId, EventKind};
use crate::job::Queue;

/// One stream entry as Redis answers it: the id, then field/value pairs.
type Entry = (String, Vec<(String, Vec<u8>)>);

impl RedisStore {
    /// The events of `queue` after `after`, oldest first, from at most `limit` entries (each
    /// the events of one call: a page may go beyond `limit` events). An entry dq cannot read
    /// is handed out as events of kind `?` (see [`decode`]).
    pub(super) async fn read_events_of(
        &self,
        queue: &Queue,
        after: EventId,
        limit: usize,
    ) -> Result<Vec<Event>> {
        let key = self.keys(queue).events.clone();
        let from = format!("{}-0", after.0 + 1);
        let entries: Vec<Entry> = self
            .conn
            .call(async |conn| {
                redis::cmd("XRANGE")
                    .arg(&key)
                    .arg(&from)
                    .arg("+")
                    .arg("COUNT")
                    .arg(limit.max(1))
                    .query_async(conn)
                    .await
            })
            .await
            .map_err(from_redis)?;
        let mut out = Vec::new();
        for (id, fields) in entries {
            // (the first entry may also hold events the reader has)
            out.extend(
                decode(queue, &id, &fields)
                    .into_iter()
                    .filter(|e| e.id > after),
            );
        }
        Ok(out)
    }

    /// The number of `queue`'s newest event (its newest entry's id), or `None`.
    pub(super) async fn last_event_of(&self, queue: &Queue) -> Result<Option<EventId>> {
        let key = self.keys(queue).events.clone();
        let entries: Vec<Entry> = self
            .conn
            .call(async |conn| {
                redis::cmd("XREVRANGE")
                    .arg(&key)
                    .arg("+")
                    .arg("-")
                    .arg("COUNT")
                    .arg(1)
                    .query_async(conn)
                    .await
            })
            .await
            .map_err(from_redis)?;
        Ok(entries.first().and_then(|(id, _)| last_of(id)).map(EventId))
    }
}

/// The number of an entry's last event: its id's first part (`<n>-0`).
fn last_of(id: &str) -> Option<u64> {
    id.split('-').next()?.parse().ok()
}

/// One entry's events, numbered back from its last. An entry this dq cannot read (a newer
/// event format, a damaged one) is reported once, with a warning, as that many events of kind
/// `?` ([`EventKind::Other`]) with no key and the reason as their error: a reader moves past
/// it instead of stopping there.
fn decode(queue: &Queue, id: &str, fields: &[(String, Vec<u8>)]) -> Vec<Event> {
    let Some(last) = last_of(id) else {
        tracing::warn!(%queue.topic, partition = queue.partition, id, "an event entry whose id is not <number>-0: skipped");
        return Vec::new();
    };
    let n: u64 = fields
        .iter()
        .find(|(f, _)| f == "n")
        .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse().ok())
        .unwrap_or(1)
        .clamp(1, last.max(1));
    let first = last + 1 - n;
    Event::decode_entry(queue, first, fields).unwrap_or_else(|why| {
        tracing::warn!(%queue.topic, partition = queue.partition, id, why, "an event entry this dq cannot read: handed out as events of kind `?`");
        (first..=last)
            .map(|i| Event {
                topic: queue.topic.as_str().to_owned(),
                partition: queue.partition,
                id: EventId(i),
                kind: EventKind::Other("?".into()),
                key: String::new(),
                at_ms: 0,
                attempt: None,
                worker: None,
                error: Some(why.clone()),
                due_ms: None,
            })
            .collect()
    })
}
