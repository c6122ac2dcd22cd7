//! The producer's call in memory: `enqueue`, the mirror of `enqueue.lua`.

use async_trait::async_trait;

use super::clock::{bound_due, ms};
use super::partition::{Later, Partition, Record};
use super::store::MemoryStore;
use crate::error::{Error, Result};
use crate::format::{EXPIRING_FORMAT, PRIORITY_FORMAT};
use crate::job::{Due, Expiry, JobState, MAX_DUE_MS, Queue, unix_ms};
use crate::store::produce::{EnqueueCall, EnqueueOutcome, NewJob, Produce};

impl Partition {
    /// Mirrors `enqueue.lua`.
    /// New records are written in `format` (the store's `formats().write()`).
    fn enqueue(
        &mut self,
        jobs: &[NewJob],
        call: EnqueueCall,
        format: u8,
        now: u64,
    ) -> Result<Vec<EnqueueOutcome>> {
        // a newer dq's record can be neither read nor replaced: refused before any write
        self.check_not_newer(jobs.iter().map(|j| &j.key))?;
        self.receipts.prune(now);
        if let Some((applied, then)) = self.receipts.get(call.id).filter(|_| call.retry) {
            // An earlier try of this call was applied: report, write nothing. A job it created
            // or replaced that is still there (its time, this payload) is reported so again.
            return Ok(jobs
                .iter()
                .enumerate()
                .map(|(i, job)| {
                    let then = then.map_or(EnqueueOutcome::Created, |o| o[i]);
                    match self.jobs.get(&job.key) {
                        None => EnqueueOutcome::Ended,
                        Some(r)
                            if matches!(
                                then,
                                EnqueueOutcome::Created | EnqueueOutcome::Replaced
                            ) && r.created_ms == applied
                                && r.payload == job.payload =>
                        {
                            then
                        }
                        Some(r) => EnqueueOutcome::Exists(r.state()),
                    }
                })
                .collect());
        }
        // a priority needs format 5 (enqueue.lua refuses it below)
        if format < PRIORITY_FORMAT && jobs.iter().any(|j| !j.priority.is_normal()) {
            return Err(Error::NeedsFormat {
                feature: "a job's priority",
                needs: PRIORITY_FORMAT,
                level: format,
            });
        }
        // every job's expiry, checked before any write (enqueue.lua's decide step)
        let mut expiries = Vec::with_capacity(jobs.len());
        for (i, job) in jobs.iter().enumerate() {
            let Some(expiry) = job.expires else {
                expiries.push(0);
                continue;
            };
            if format < EXPIRING_FORMAT {
                return Err(Error::NeedsFormat {
                    feature: "a job's expiry",
                    needs: EXPIRING_FORMAT,
                    level: format,
                });
            }
            let asked = asked_due(job.due, now);
            let due = bound_due(asked, now);
            // an expiry after due counts from the due time asked for (enqueue.lua)
            let expires = match expiry {
                Expiry::AfterDue(d) => u64::try_from(asked.max(0))
                    .unwrap_or(u64::MAX)
                    .saturating_add(ms(d).max(1)),
                Expiry::At(t) => unix_ms(t),
            };
            if expires <= due {
                return Err(Error::InvalidExpiry(format!(
                    "the expiry is not after the due time by the store's clock (job {})",
                    i + 1
                )));
            }
            expiries.push(expires.min(MAX_DUE_MS));
        }
        let mut need_wake = false;
        let mut created = 0;
        let mut out = Vec::with_capacity(jobs.len());
        for (job, &expires_ms) in jobs.iter().zip(&expiries) {
            let outcome = match self.jobs.get(&job.key) {
                None => EnqueueOutcome::Created,
                Some(old) if job.replace && old.state() != JobState::Active => {
                    self.sets.unlink(&job.key, old.place, old.due_ms);
                    EnqueueOutcome::Replaced
                }
                Some(old) => EnqueueOutcome::Exists(old.state()),
            };
            if matches!(outcome, EnqueueOutcome::Created | EnqueueOutcome::Replaced) {
                let due = due_of(job.due, now);
                let priority = job.priority.level();
                let (place, wake) = self
                    .sets
                    .place(Later::Scheduled, &job.key, due, now, priority);
                need_wake |= wake;
                self.jobs.insert(
                    job.key.clone(),
                    Record {
                        format,
                        place,
                        attempts: 0,
                        due_ms: due,
                        created_ms: now,
                        token: 0,
                        expires_ms,
                        priority,
                        payload: job.payload.clone(),
                        history: Vec::new(),
                    },
                );
                created += 1;
                let detail = super::events::Detail {
                    due_ms: Some(due.max(now)),
                    ..Default::default()
                };
                self.events.emit(
                    self.control.events,
                    now,
                    crate::events::EventKind::Enqueued,
                    &job.key,
                    detail,
                );
            }
            out.push(outcome);
        }
        self.counters.enqueued += created;
        if created > 0 {
            self.receipts.insert(call.id, now, &out);
        }
        if need_wake {
            self.wake();
        }
        Ok(out)
    }
}

/// A job's due time as asked, by the store's clock `now` (before enqueue.lua's `bound_due`).
fn asked_due(due: Due, now: u64) -> i128 {
    match due {
        Due::Now => i128::from(now),
        Due::After(d) => i128::from(now) + i128::from(ms(d)),
        Due::At(t) => i128::from(unix_ms(t)),
    }
}

/// A job's due time by the store's clock `now` (enqueue.lua's `bound_due`).
fn due_of(due: Due, now: u64) -> u64 {
    bound_due(asked_due(due, now), now)
}

#[async_trait]
impl Produce for MemoryStore {
    async fn enqueue(
        &self,
        queue: &Queue,
        jobs: &[NewJob],
        call: EnqueueCall,
    ) -> Result<Vec<EnqueueOutcome>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let format = self.formats.write();
        self.write(queue, |p, now| p.enqueue(jobs, call, format, now))
    }
}
