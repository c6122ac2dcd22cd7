//! The memory mirror of a partition's event stream (`lua/lib.lua` `emit`): the same events at
//! the same changes, numbered the same way, bounded by the partition's share of the topic's
//! bound (exactly, where Redis trims by whole nodes of entries).

use std::collections::VecDeque;

use super::partition::Partition;
use crate::events::{Event, EventId, EventKind, EventsPolicy};
use crate::job::{Queue, truncate_error};
use crate::names::JobKey;

/// A partition's events, oldest first, and the last id given.
#[derive(Default)]
pub(super) struct EventLog {
    entries: VecDeque<Event>,
    last: EventId,
}

/// What an event carries beyond its kind and key.
#[derive(Default)]
pub(super) struct Detail {
    pub(super) attempt: Option<u32>,
    pub(super) worker: Option<String>,
    pub(super) error: Option<String>,
    pub(super) due_ms: Option<u64>,
}

impl EventLog {
    /// Appends one event at `now` when `policy` says the partition records events (Lua
    /// `emit`). A method of the log, not of the partition, so that a caller holding one of
    /// the partition's records can emit.
    pub(super) fn emit(
        &mut self,
        policy: Option<EventsPolicy>,
        now: u64,
        kind: EventKind,
        key: &JobKey,
        detail: Detail,
    ) {
        let Some(policy) = policy else {
            return;
        };
        self.last = EventId(self.last.0 + 1);
        self.entries.push_back(Event {
            topic: String::new(),
            partition: 0,
            id: self.last,
            kind,
            key: key.to_string(),
            at_ms: now,
            // (0: none, as the scripts write it: a job cancelled before it ever ran)
            attempt: detail.attempt.filter(|a| *a > 0),
            worker: detail.worker,
            error: detail.error.map(|e| truncate_error(&e).into_owned()),
            due_ms: detail.due_ms,
        });
        let cap = usize::try_from(policy.max_kept).unwrap_or(usize::MAX);
        while self.entries.len() > cap {
            self.entries.pop_front();
        }
    }
}

impl Partition {
    /// Up to `limit` events after `after`, named as `queue`'s.
    pub(super) fn read_events(&self, queue: &Queue, after: EventId, limit: usize) -> Vec<Event> {
        let from = self.events.entries.partition_point(|e| e.id <= after);
        self.events
            .entries
            .iter()
            .skip(from)
            .take(limit.max(1))
            .map(|e| Event {
                topic: queue.topic.as_str().to_owned(),
                partition: queue.partition,
                ..e.clone()
            })
            .collect()
    }

    /// The newest event's id.
    pub(super) fn last_event(&self) -> Option<EventId> {
        self.events.entries.back().map(|e| e.id)
    }
}
