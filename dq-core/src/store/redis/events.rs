//! Reading a partition's event stream (`events`, a Redis stream the scripts append one entry
//! per call to: see `lua/lib.lua` `flush_events` and [`crate::events`]). The `events` script
//! reads a page after an event number; nothing here writes.

use super::store::RedisStore;
use crate::error::{Error, Result, from_redis};
use crate::events::{Event, EventId, EventKind};
use crate::job::Queue;

/// One stream entry as Redis answers it: the id, then field/value pairs.
type Entry = (String, Vec<(String, Vec<u8>)>);

impl RedisStore {
    /// About `limit` events of `queue` after `after`, oldest first (whole entries: a page may
    /// go beyond `limit`, by up to `limit` entries read directly). Entries dq cannot read (a newer event format, a
    /// damaged entry) are skipped with a warning.
    pub(super) async fn read_events_of(
        &self,
        queue: &Queue,
        after: EventId,
        limit: usize,
    ) -> Result<Vec<Event>> {
        let k = self.keys(queue);
        let limit = limit.max(1);
        // The common case, a reader that has handed out whole entries: the next entry starts
        // right after `after`, and one plain XRANGE reads on from it (no script: Redis answers
        // from the stream itself). Otherwise (nothing new, or `after` inside an entry: a
        // cursor saved mid-entry) the `events` script finds the entry holding the next event.
        let from = format!("{}-0", after.0 + 1);
        let direct: Vec<Entry> = self
            .conn
            .call(async |conn| {
                redis::cmd("XRANGE")
                    .arg(&k.events)
                    .arg(&from)
                    .arg("+")
                    .arg("COUNT")
                    .arg(limit)
                    .query_async(conn)
                    .await
            })
            .await
            .map_err(from_redis)?;
        let entries = match direct.first() {
            Some((id, _)) if first_of(id) == Some(after.0 + 1) => direct,
            _ => {
                let s = &self.scripts().events;
                let reply = self
                    .run(s, &k, &[], |inv| {
                        inv.arg(after.0).arg(limit);
                    })
                    .await?;
                redis::from_redis_value::<Vec<Entry>>(reply).map_err(|e| {
                    Error::Protocol(format!("script {}: unexpected reply: {e}", s.name))
                })?
            }
        };
        // (every event of the entries read: a page cut inside an entry would be read again)
        let mut out = Vec::new();
        for (id, fields) in entries {
            out.extend(
                decode(queue, &id, &fields)
                    .into_iter()
                    .filter(|e| e.id > after),
            );
        }
        Ok(out)
    }

    /// The number of `queue`'s newest event, or `None`.
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
        Ok(entries.first().and_then(|(id, fields)| {
            let first = first_of(id)?;
            let n: u64 = fields
                .iter()
                .find(|(f, _)| f == "n")
                .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse().ok())
                .unwrap_or(1);
            Some(EventId(first + n.max(1) - 1))
        }))
    }
}

/// The number of an entry's first event: its id's first part (`<n>-0`).
fn first_of(id: &str) -> Option<u64> {
    id.split('-').next()?.parse().ok()
}

/// One entry's events. An entry this dq cannot read (a newer event format, a damaged one) is
/// reported once, with a warning, as that many events of kind `?` ([`EventKind::Other`]) with
/// no key and the reason as their error: a reader moves past it instead of stopping there.
fn decode(queue: &Queue, id: &str, fields: &[(String, Vec<u8>)]) -> Vec<Event> {
    let Some(first) = first_of(id) else {
        tracing::warn!(%queue.topic, partition = queue.partition, id, "an event entry whose id is not <number>-0: skipped");
        return Vec::new();
    };
    Event::decode_entry(queue, first, fields).unwrap_or_else(|why| {
        tracing::warn!(%queue.topic, partition = queue.partition, id, why, "an event entry this dq cannot read: handed out as events of kind `?`");
        let n: u64 = fields
            .iter()
            .find(|(f, _)| f == "n")
            .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse().ok())
            .unwrap_or(1);
        (0..n.clamp(1, 100_000))
            .map(|i| Event {
                topic: queue.topic.as_str().to_owned(),
                partition: queue.partition,
                id: EventId(first + i),
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
