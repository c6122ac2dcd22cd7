//! A partition's outbox in memory: the counterpart of the `outbox` stream, where the call that
//! ends a member of a batch notes its end in the same step (`lua/lib.lua` `note_end`), for the
//! relay to read ([`Batches::outbox`](crate::store::Batches::outbox)) and delete once applied
//! ([`Batches::outbox_done`](crate::store::Batches::outbox_done)). Ids are the stream's,
//! `<ms>-<seq>`: each note's is after the last one given (the same ms: the next seq), even
//! once every note is deleted.

use std::collections::BTreeMap;

use crate::batch::{BatchId, MemberState, OutboxNote};
use crate::error::{Error, Result};
use crate::names::JobKey;

/// A note's id: the ms it was written at (or the last id's, if later), then a sequence.
pub(super) type NoteId = (u64, u64);

/// One partition's notes, oldest first, and the last id given.
#[derive(Default)]
pub(super) struct Outbox {
    notes: BTreeMap<NoteId, (BatchId, JobKey, MemberState)>,
    last: NoteId,
}

impl Outbox {
    /// Notes that the job `key`, a member of `batch`, ended as `outcome` at `now`; nothing for
    /// a job in no batch. A method of the outbox, not of the partition, so that a caller
    /// holding one of the partition's records can note.
    pub(super) fn note(
        &mut self,
        now: u64,
        batch: Option<&BatchId>,
        key: &JobKey,
        outcome: MemberState,
    ) {
        let Some(batch) = batch else { return };
        let id = if now > self.last.0 {
            (now, 0)
        } else {
            (self.last.0, self.last.1 + 1)
        };
        self.last = id;
        self.notes.insert(id, (batch.clone(), key.clone(), outcome));
    }

    /// Up to `limit` notes, oldest first, after the note `after` (`XRANGE (<after> + COUNT`;
    /// `None`: `XRANGE - + COUNT`).
    pub(super) fn read(&self, after: Option<NoteId>, limit: usize) -> Vec<OutboxNote> {
        let from = match after {
            Some(id) => std::ops::Bound::Excluded(id),
            None => std::ops::Bound::Unbounded,
        };
        self.notes
            .range((from, std::ops::Bound::Unbounded))
            .take(limit.max(1))
            .map(|((ms, seq), (batch, key, outcome))| OutboxNote {
                id: format!("{ms}-{seq}"),
                batch: batch.clone(),
                key: key.clone(),
                outcome: *outcome,
            })
            .collect()
    }

    /// Deletes the notes of `ids` (`XDEL`: an id not there is skipped; a malformed one
    /// refuses the call before any delete).
    pub(super) fn delete(&mut self, ids: &[String]) -> Result<()> {
        let parsed = ids
            .iter()
            .map(|id| parse_id(id))
            .collect::<Result<Vec<_>>>()?;
        for id in parsed {
            self.notes.remove(&id);
        }
        Ok(())
    }

    /// Deletes every note up to and including `through` (`XTRIM MINID` of the next id).
    pub(super) fn trim(&mut self, through: &str) -> Result<()> {
        let through = parse_id(through)?;
        self.notes.retain(|id, _| *id > through);
        Ok(())
    }

    /// How many notes wait.
    pub(super) fn len(&self) -> usize {
        self.notes.len()
    }
}

/// Checks every id of `ids` as [`Outbox::delete`] does, for a call that finds no outbox.
pub(super) fn check_ids(ids: &[String]) -> Result<()> {
    ids.iter().try_for_each(|id| parse_id(id).map(drop))
}

/// A note's id from its text: `<ms>-<seq>`, or `<ms>` (seq 0), as a stream takes it.
pub(super) fn parse_id(id: &str) -> Result<NoteId> {
    let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
    match (ms.parse(), seq.parse()) {
        (Ok(ms), Ok(seq)) => Ok((ms, seq)),
        _ => Err(Error::Protocol(format!(
            "outbox note id {id:?}: not a note's id"
        ))),
    }
}
