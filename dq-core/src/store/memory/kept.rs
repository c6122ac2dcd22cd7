//! Kept finished jobs in memory: the counterpart of the `kept` hash and its `kept_at` index
//! (`lua/lib.lua` `keep_jobs`, `trim_kept`; `kept.lua`; `list.lua`'s kept mode).

use std::collections::{BTreeSet, HashMap};

use super::events::Detail;
use super::partition::{Partition, Record};
use crate::events::EventKind;
use crate::finished::{FinishedAs, FinishedChunk, FinishedJob, StoredResult};
use crate::inspect::{ListFrom, ListPos};
use crate::names::JobKey;

/// Most kept jobs one trim removes beyond those a call kept (the scripts' `+ 16`), and on an
/// idle fetch.
pub(super) const KEPT_TRIM_SLACK: usize = 16;

/// The partition's kept jobs.
#[derive(Default)]
pub(super) struct Kept {
    jobs: HashMap<JobKey, FinishedJob>,
    /// `(kept until, key)`: Redis orders equal scores by member bytes, as this does.
    order: BTreeSet<(u64, JobKey)>,
}

impl Kept {
    /// How many jobs are kept.
    pub(super) fn len(&self) -> usize {
        self.jobs.len()
    }

    fn insert(&mut self, job: FinishedJob) {
        if let Some(old) = self.jobs.remove(&job.key) {
            self.order.remove(&(old.kept_until_ms, old.key));
        }
        self.order.insert((job.kept_until_ms, job.key.clone()));
        self.jobs.insert(job.key.clone(), job);
    }

    fn pop_first(&mut self) -> Option<FinishedJob> {
        let (_, key) = self.order.pop_first()?;
        self.jobs.remove(&key)
    }
}

impl Partition {
    /// Keeps `rec` (just taken out of the partition) as finished with `outcome` at `now`,
    /// when the partition's retention keeps that outcome; then trims. `started_ms` and
    /// `worker` are a succeeded run's, `result` its handler's value.
    pub(super) fn keep(
        &mut self,
        key: &JobKey,
        rec: Record,
        outcome: FinishedAs,
        now: u64,
        run: Option<(u64, &str, StoredResult)>,
    ) {
        // the run's reports end with it, kept or not
        let progress = self.progress.remove(key);
        self.windows.ended(key, now);
        let (kind, attempt) = match outcome {
            FinishedAs::Succeeded => (EventKind::Succeeded, Some(rec.attempts)),
            FinishedAs::Cancelled => (EventKind::Cancelled, Some(rec.attempts)),
            FinishedAs::Expired => (EventKind::Expired, None),
        };
        let detail = Detail {
            attempt,
            worker: run.as_ref().map(|(_, worker, _)| (*worker).to_owned()),
            ..Detail::default()
        };
        self.events
            .emit(self.control.events, now, kind, key, detail);
        let Some(policy) = self.control.retention else {
            return;
        };
        let Some(keep_for) = policy.keep_for(outcome) else {
            return;
        };
        let (started_ms, worker, result) = match run {
            Some((started, worker, result)) => (
                (started > 0).then_some(started),
                (!worker.is_empty()).then(|| worker.to_owned()),
                result,
            ),
            None => (None, None, StoredResult::None),
        };
        self.kept.insert(FinishedJob {
            key: key.clone(),
            outcome,
            due_ms: rec.due_ms,
            created_ms: rec.created_ms,
            started_ms,
            finished_ms: now,
            kept_until_ms: now + keep_for.as_millis().max(1) as u64,
            attempts: rec.attempts,
            worker,
            result,
            history: rec.history,
            progress,
            payload: rec.payload,
        });
        self.trim_kept(now, 1 + KEPT_TRIM_SLACK);
    }

    /// Removes at most `limit` kept jobs whose time has come, then beyond the retention's
    /// cap (counted in `kept_trimmed`): Lua `trim_kept`.
    pub(super) fn trim_kept(&mut self, now: u64, limit: usize) {
        let mut removed = 0;
        while removed < limit
            && self
                .kept
                .order
                .first()
                .is_some_and(|(until, _)| *until <= now)
        {
            self.kept.pop_first();
            removed += 1;
        }
        let Some(policy) = self.control.retention else {
            return;
        };
        while removed < limit && self.kept.len() as u64 > policy.max_kept {
            self.kept.pop_first();
            self.counters.kept_trimmed += 1;
            removed += 1;
        }
    }

    /// The kept job of `key` (`kept.lua`).
    pub(super) fn finished(&self, key: &JobKey) -> Option<FinishedJob> {
        self.kept.jobs.get(key).cloned()
    }

    /// A page of kept jobs of `outcome` (`list.lua`, kept mode): `limit` entries of the index
    /// from `from`, those of other outcomes skipped.
    pub(super) fn list_finished(
        &self,
        outcome: FinishedAs,
        from: &ListFrom,
        limit: usize,
        now: u64,
    ) -> FinishedChunk {
        let start = match from {
            ListFrom::After(pos) => Some((f64::from_bits(pos.order.0) as u64, pos.key.clone())),
            _ => None,
        };
        let mut page = self
            .kept
            .order
            .iter()
            .filter(|e| start.as_ref().is_none_or(|s| *e > s));
        let mut jobs = Vec::new();
        let mut read = 0;
        let mut read_to = None;
        for (until, key) in page.by_ref().take(limit) {
            read += 1;
            read_to = Some(ListPos {
                order: ((*until as f64).to_bits(), 0),
                key: key.clone(),
            });
            let job = &self.kept.jobs[key];
            if job.outcome == outcome && *until > now {
                let pos = ListPos {
                    order: ((*until as f64).to_bits(), 0),
                    key: key.clone(),
                };
                jobs.push((pos, job.clone()));
            }
        }
        let more = read == limit && page.next().is_some();
        FinishedChunk {
            jobs,
            more,
            read_to,
        }
    }
}
