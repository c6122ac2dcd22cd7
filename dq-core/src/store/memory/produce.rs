//! The producer's call in memory: `enqueue`, the mirror of `enqueue.lua`.

use async_trait::async_trait;

use super::clock::{bound_due, ms};
use super::partition::{Later, Partition, Record};
use super::store::MemoryStore;
use crate::error::{Error, Result};
use crate::format::{BATCH_FORMAT, EXPIRING_FORMAT, GROUP_FORMAT, PRIORITY_FORMAT};
use crate::job::{Due, Expiry, JobState, MAX_DUE_MS, Queue, unix_ms};
use crate::store::produce::{EnqueueCall, EnqueueOutcome, NewJob, Produce};
use crate::unique::KeyWindow;

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
                    if let (EnqueueOutcome::Refused { .. }, Some(until_ms)) =
                        (then, self.windows.until.get(&job.key).copied())
                    {
                        return EnqueueOutcome::Refused { until_ms };
                    }
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
        // a group needs format 6 (enqueue.lua refuses it below)
        if format < GROUP_FORMAT && jobs.iter().any(|j| j.group.is_some()) {
            return Err(Error::NeedsFormat {
                feature: "a job's group",
                needs: GROUP_FORMAT,
                level: format,
            });
        }
        // a batch needs format 7 (enqueue.lua refuses it below)
        if format < BATCH_FORMAT && jobs.iter().any(|j| j.batch.is_some()) {
            return Err(Error::NeedsFormat {
                feature: "a batch",
                needs: BATCH_FORMAT,
                level: format,
            });
        }
        // every job's expiry and due time, checked before any write (enqueue.lua's decide step)
        let mut expiries = Vec::with_capacity(jobs.len());
        for (i, job) in jobs.iter().enumerate() {
            let asked = match job.window {
                Some(w @ KeyWindow::Debounce(_)) => i128::from(now) + i128::from(w.ms()),
                _ => asked_due(job.due, now),
            };
            if let Some(max) = self.control.max_delay
                && asked - i128::from(now) > i128::from(max)
            {
                return Err(Error::DelayTooLong {
                    delay_ms: u64::try_from(asked - i128::from(now)).unwrap_or(u64::MAX),
                    max_delay_ms: max,
                    job: i + 1,
                });
            }
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
            let debounce = match job.window {
                Some(w @ KeyWindow::Debounce(_)) => Some(w.ms()),
                _ => None,
            };
            // a job replacing a batch's member without naming a batch stays its member (the
            // batch waits for it), in a format that carries a batch (enqueue.lua)
            let mut batch = job.batch.clone();
            let outcome = match (self.windows.ends(&job.key, now), self.jobs.get(&job.key)) {
                // a key inside a window is refused first, whether a job holds it or not
                (Some(until_ms), _) => EnqueueOutcome::Refused { until_ms },
                (None, None) => EnqueueOutcome::Created,
                (None, Some(old))
                    if (job.replace && old.state() != JobState::Active)
                        || (debounce.is_some()
                            && matches!(
                                old.state(),
                                JobState::Scheduled | JobState::Ready | JobState::Retry
                            )) =>
                {
                    self.sets
                        .unlink(&job.key, old.place, old.due_ms, old.group.as_ref());
                    if format >= BATCH_FORMAT && batch.is_none() {
                        batch = old.batch.clone();
                    }
                    EnqueueOutcome::Replaced
                }
                (None, Some(old)) => EnqueueOutcome::Exists(old.state()),
            };
            if matches!(outcome, EnqueueOutcome::Created | EnqueueOutcome::Replaced) {
                match job.window {
                    Some(w @ KeyWindow::UniqueFor(_)) => {
                        self.windows.live.insert(job.key.clone(), w.ms());
                    }
                    _ => {
                        self.windows.live.remove(&job.key);
                    }
                }
                if let Some(w @ KeyWindow::Throttle(_)) = job.window {
                    self.windows.open(&job.key, now.saturating_add(w.ms()), now);
                }
                let due = match debounce {
                    Some(d) => bound_due(i128::from(now) + i128::from(d), now),
                    None => due_of(job.due, now),
                };
                let priority = job.priority.level();
                let (place, wake) = self.sets.place(
                    Later::Scheduled,
                    &job.key,
                    due,
                    now,
                    priority,
                    job.group.as_ref(),
                );
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
                        group: job.group.clone(),
                        batch,
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
