//! The producer's call in memory: `enqueue`, the mirror of `enqueue.lua`.

use async_trait::async_trait;

use super::clock::{bound_due, ms};
use super::partition::{Later, Partition, Record};
use super::store::MemoryStore;
use crate::error::Result;
use crate::job::{Due, JobState, Queue, unix_ms};
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
        let mut need_wake = false;
        let mut created = 0;
        let mut out = Vec::with_capacity(jobs.len());
        for job in jobs {
            let outcome = match self.jobs.get(&job.key) {
                None => EnqueueOutcome::Created,
                Some(old) if job.replace && old.state() != JobState::Active => {
                    self.sets.unlink(&job.key, old.place, old.due_ms);
                    EnqueueOutcome::Replaced
                }
                Some(old) => EnqueueOutcome::Exists(old.state()),
            };
            if matches!(outcome, EnqueueOutcome::Created | EnqueueOutcome::Replaced) {
                let due = match job.due {
                    Due::Now => i128::from(now),
                    Due::After(d) => i128::from(now) + i128::from(ms(d)),
                    Due::At(t) => i128::from(unix_ms(t)),
                };
                let due = bound_due(due, now);
                let (place, wake) = self.sets.place(Later::Scheduled, &job.key, due, now);
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
                        payload: job.payload.clone(),
                        history: Vec::new(),
                    },
                );
                created += 1;
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
