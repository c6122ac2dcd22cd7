//! Reading a partition's event stream (`events`, a Redis stream the scripts append to: see
//! `lua/lib.lua` `emit` and [`crate::events`]). Plain `XRANGE` / `XREVRANGE` reads, routed by
//! the key's slot on a cluster; nothing here writes.

use super::store::RedisStore;
use crate::error::{Result, from_redis};
use crate::events::{Event, EventId};
use crate::job::Queue;

/// One stream entry as Redis answers it: the id, then field/value pairs.
type Entry = (String, Vec<Vec<u8>>);

impl RedisStore {
    /// Up to `limit` events of `queue` after `after`, oldest first. Entries dq cannot read
    /// (a newer event format, a damaged entry) are skipped with a warning.
    pub(super) async fn read_events_of(
        &self,
        queue: &Queue,
        after: EventId,
        limit: usize,
    ) -> Result<Vec<Event>> {
        let key = self.keys(queue).events.clone();
        let from = format!("({after}");
        let count = limit.max(1);
        let entries: Vec<Entry> = self
            .conn
            .call(async |conn| {
                redis::cmd("XRANGE")
                    .arg(&key)
                    .arg(&from)
                    .arg("+")
                    .arg("COUNT")
                    .arg(count)
                    .query_async(conn)
                    .await
            })
            .await
            .map_err(from_redis)?;
        Ok(entries
            .into_iter()
            .filter_map(|entry| decode(queue, entry))
            .collect())
    }

    /// The id of `queue`'s newest event, or `None`.
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
        Ok(entries.first().and_then(|(id, _)| id.parse().ok()))
    }
}

/// One entry as an event, or `None` (skipped, with a warning) when it is not one this dq reads.
fn decode(queue: &Queue, (id, flat): Entry) -> Option<Event> {
    let event_id: EventId = match id.parse() {
        Ok(id) => id,
        Err(_) => {
            tracing::warn!(%queue.topic, partition = queue.partition, id, "event with an id that is not <ms>-<seq>: skipped");
            return None;
        }
    };
    let fields: Vec<(String, String)> = flat
        .chunks_exact(2)
        .map(|pair| {
            (
                String::from_utf8_lossy(&pair[0]).into_owned(),
                String::from_utf8_lossy(&pair[1]).into_owned(),
            )
        })
        .collect();
    let event = Event::decode(queue, event_id, &fields);
    if event.is_none() {
        tracing::warn!(%queue.topic, partition = queue.partition, id, "an event this dq cannot read (a newer format?): skipped");
    }
    event
}
