//! The operator's calls in memory: the mirrors of `cancel.lua`, `reschedule.lua`, `bury.lua`,
//! `control.lua`, `job.lua`, `stats.lua`, `list.lua`, and the dead queue's `requeue_dead.lua`,
//! `purge_dead.lua` and `dead_act.lua`.

use async_trait::async_trait;

use super::clock::{bound_due, ms};
use super::partition::{Control, Later, Partition, Place};
use super::store::MemoryStore;
use crate::batch::MemberState;
use crate::control::{ControlChange, ControlState};
use crate::error::{Error, Result};
use crate::events::{Event, EventId};
use crate::finished::{FinishedAs, FinishedChunk, FinishedJob};
use crate::group::{GroupChange, GroupState};
use crate::inspect::{DeadAction, ListChunk, ListFrom, ListPos};
use crate::job::{JobInfo, JobState, Queue, unix_ms};
use crate::names::JobKey;
use crate::store::lease::DeadLimits;
use crate::store::operate::{
    BuryOutcome, CancelOutcome, NewDue, Operate, RescheduleOutcome, TopicStats, UpdateOutcome,
    bury_reason, check_act_len, check_control,
};

impl Partition {
    /// Mirrors `cancel.lua`.
    fn cancel(&mut self, key: &JobKey, now: u64) -> CancelOutcome {
        let Some(rec) = self.jobs.get(key) else {
            return CancelOutcome::NotFound;
        };
        match rec.state() {
            JobState::Active => {
                self.control.cancels.insert(key.clone(), rec.token);
                CancelOutcome::CancelRequested
            }
            JobState::Dead => CancelOutcome::Dead,
            _ => {
                self.sets
                    .unlink(key, rec.place, rec.due_ms, rec.group.as_ref());
                if let Some(rec) = self.jobs.remove(key) {
                    self.outbox
                        .note(now, rec.batch.as_ref(), key, MemberState::Cancelled);
                    self.keep(key, rec, FinishedAs::Cancelled, now, None);
                }
                self.counters.cancelled += 1;
                CancelOutcome::Cancelled
            }
        }
    }

    /// Mirrors `bury.lua`: a waiting job to the dead queue as `fail.lua` buries a running one
    /// (its reason in its history, its end noted for its batch); returns the outcome and how
    /// many dead jobs the trim removed.
    fn bury_waiting(
        &mut self,
        key: &JobKey,
        reason: &str,
        limits: DeadLimits,
        now: u64,
    ) -> (BuryOutcome, u64) {
        let Some(rec) = self.jobs.get_mut(key) else {
            return (BuryOutcome::NotFound, 0);
        };
        match rec.state() {
            JobState::Active => return (BuryOutcome::Running, 0),
            JobState::Dead => return (BuryOutcome::Dead, 0),
            _ => {}
        }
        // (a ready grouped job leaves its group's queue: the group holds nothing for it)
        self.sets
            .unlink(key, rec.place, rec.due_ms, rec.group.as_ref());
        (BuryOutcome::Buried, self.bury_now(key, reason, limits, now))
    }

    /// Mirrors `reschedule.lua`: attempts and history are kept.
    fn reschedule(&mut self, key: &JobKey, due: NewDue, now: u64) -> Result<RescheduleOutcome> {
        let max_delay = self.control.max_delay;
        let Some(rec) = self.jobs.get_mut(key) else {
            return Ok(RescheduleOutcome::NotFound);
        };
        match rec.state() {
            JobState::Active => return Ok(RescheduleOutcome::Running),
            JobState::Dead => return Ok(RescheduleOutcome::Dead),
            _ => {}
        }
        let at = match due {
            NewDue::At(t) => i128::from(unix_ms(t)),
            NewDue::After(d) => i128::from(now) + i128::from(ms(d)),
            NewDue::Shift(delta) => i128::from(rec.due_ms) + i128::from(delta),
        };
        // (reschedule.lua: a due time beyond the topic's max_delay is refused, nothing written)
        if let Some(max) = max_delay
            && at - i128::from(now) > i128::from(max)
        {
            return Err(crate::error::Error::DelayTooLong {
                delay_ms: u64::try_from(at - i128::from(now)).unwrap_or(u64::MAX),
                max_delay_ms: max,
                job: 1,
            });
        }
        let at = bound_due(at, now);
        if at <= now && rec.state() == JobState::Ready {
            // already in ready: keep its place in line
            rec.due_ms = at;
            return Ok(RescheduleOutcome::Rescheduled { due_ms: at });
        }
        self.sets
            .unlink(key, rec.place, rec.due_ms, rec.group.as_ref());
        let (place, wake) = self.sets.place(
            Later::Scheduled,
            key,
            at,
            now,
            rec.priority,
            rec.group.as_ref(),
        );
        rec.place = place;
        rec.due_ms = at;
        if wake {
            self.wake();
        }
        Ok(RescheduleOutcome::Rescheduled { due_ms: at })
    }

    /// Mirrors `stats.lua`.
    fn stats(&self, now: u64) -> TopicStats {
        let mut oldest = 0;
        let heads = [
            self.sets
                .scheduled
                .first_key_value()
                .map(|((due, _), _)| *due),
            self.sets.retry.first_key_value().map(|((due, _), _)| *due),
            // the front of ready is the longest-waiting ready job
            self.sets
                .ready
                .first_key_value()
                .and_then(|(_, key)| self.jobs.get(key))
                .map(|rec| rec.due_ms),
        ];
        for due in heads.into_iter().flatten() {
            oldest = oldest.max(now.saturating_sub(due));
        }
        let overdue = [&self.sets.scheduled, &self.sets.retry]
            .iter()
            .map(|set| set.range(..=(now, u64::MAX)).count() as u64)
            .sum();
        let c = &self.counters;
        TopicStats {
            scheduled: self.sets.scheduled.len() as u64,
            ready: (self.sets.ready.len() + self.sets.groups.queued) as u64,
            active: self.sets.active.len() as u64,
            retry: self.sets.retry.len() as u64,
            dead: self.sets.dead.len() as u64,
            enqueued: c.enqueued,
            succeeded: c.succeeded,
            retried: c.retried,
            buried: c.buried,
            expired: c.expired,
            expired_before_start: c.expired_before_start,
            cancelled: c.cancelled,
            succeeded_after_cancel_request: c.succeeded_after_cancel_request,
            trimmed: c.trimmed,
            discarded: c.discarded,
            oldest_overdue_ms: oldest,
            overdue,
            paused: self.control.paused,
            throttled: self.throttled(now, overdue),
            throttles: c.throttles,
            kept: self.kept.len() as u64,
            kept_trimmed: c.kept_trimmed,
            // (the mirror never fails to write an event)
            events_lost: 0,
        }
    }

    /// Whether a limit holds due work back now (as `stats.lua` tells).
    fn throttled(&self, now: u64, overdue: u64) -> bool {
        let c = &self.control;
        if self.sets.ready.is_empty() && self.sets.groups.queued == 0 && overdue == 0 {
            return false;
        }
        c.until.is_some_and(|u| u > now)
            || c.conc.is_some_and(|n| self.sets.active.len() >= n as usize)
            || c.rate.is_some_and(|r| {
                let (_, tau) = Control::gcra(r);
                c.tat - tau > now as f64
            })
    }

    /// Mirrors `control.lua`.
    fn control(&mut self, change: &ControlChange, now: u64) -> ControlState {
        let c = &mut self.control;
        let mut changed = false;
        if let Some(paused) = change.paused {
            c.paused = paused;
            changed = true;
        }
        if let Some(rate) = change.rate {
            c.rate = rate;
            c.tat = 0.0;
            changed = true;
        }
        if let Some(conc) = change.concurrency {
            c.conc = conc;
            changed = true;
        }
        if let Some(retention) = change.retention {
            c.retention = retention;
        }
        if let Some(events) = change.events {
            c.events = events;
        }
        if let Some(max_delay) = change.max_delay {
            c.max_delay = max_delay.map(|d| ms(d).max(1));
        }
        if let Some(d) = change.throttle {
            let at = now.saturating_add(ms(d));
            if c.until.is_none_or(|u| at > u) {
                c.until = Some(at);
            }
        }
        if c.until.is_some_and(|u| u <= now) {
            c.until = None;
        }
        let state = ControlState {
            retention: c.retention,
            events: c.events,
            paused: c.paused,
            rate: c.rate,
            concurrency: c.conc,
            throttled_until_ms: c.until,
            max_delay: c.max_delay.map(std::time::Duration::from_millis),
        };
        if changed {
            self.wake();
        }
        state
    }

    /// Mirrors `list.lua`. The places are this store's own: `(due, seq)` in `scheduled` and
    /// `retry` (the order they are kept in), `(deadline or died, 0)` then the key in `active`
    /// and `dead`, the rank in `ready` (exact here: no stale entries to skip).
    fn list(&self, state: JobState, from: &ListFrom, limit: usize) -> Result<ListChunk> {
        let after = match (state, from) {
            (JobState::Ready, ListFrom::Start | ListFrom::Index(_)) => {
                let start = match from {
                    ListFrom::Index(i) => usize::try_from(*i).unwrap_or(usize::MAX),
                    _ => 0,
                };
                // the grouped ready jobs after the others, group by group (list.lua)
                let grouped = self.sets.groups.queues.values().flat_map(|q| q.values());
                let total = self.sets.ready.len() + self.sets.groups.queued;
                let jobs: Vec<_> = self
                    .sets
                    .ready
                    .values()
                    .chain(grouped)
                    .skip(start)
                    .take(limit)
                    .enumerate()
                    .filter_map(|(n, key)| {
                        let pos = ListPos {
                            order: ((start + n) as u64, 0),
                            key: key.clone(),
                        };
                        // a newer dq's record is skipped, as list.lua skips it
                        let rec = self.jobs.get(key).filter(|r| !r.is_newer())?;
                        Some((pos, rec.info(key)))
                    })
                    .collect();
                let next = start.saturating_add(jobs.len());
                return Ok(ListChunk {
                    jobs,
                    next_index: next as u64,
                    more: next < total,
                });
            }
            (_, ListFrom::Start) => None,
            (JobState::Ready, _) | (_, ListFrom::Index(_)) => {
                return Err(Error::InvalidConfig(format!(
                    "the {state} listing cannot start from {from:?}"
                )));
            }
            (_, ListFrom::After(pos)) => Some(pos),
        };
        let after_pos = |pos: &ListPos| after.is_none_or(|a| pos > a);
        let places: Box<dyn Iterator<Item = ListPos> + '_> = match state {
            JobState::Scheduled | JobState::Retry => {
                let set = if state == JobState::Scheduled {
                    &self.sets.scheduled
                } else {
                    &self.sets.retry
                };
                let start = after.map_or((0, 0), |a| a.order);
                Box::new(set.range(start..).map(|(order, key)| ListPos {
                    order: *order,
                    key: key.clone(),
                }))
            }
            JobState::Active | JobState::Dead => {
                let set = if state == JobState::Active {
                    &self.sets.active
                } else {
                    &self.sets.dead
                };
                let entries: Box<dyn Iterator<Item = &(u64, JobKey)>> = match after {
                    Some(a) => Box::new(set.range((a.order.0, a.key.clone())..)),
                    None => Box::new(set.iter()),
                };
                Box::new(entries.map(|(at, key)| ListPos {
                    order: (*at, 0),
                    key: key.clone(),
                }))
            }
            JobState::Ready => unreachable!("handled above"),
        };
        let mut places = places.filter(after_pos);
        let jobs: Vec<_> = places
            .by_ref()
            .take(limit)
            .filter_map(|pos| {
                let rec = self.jobs.get(&pos.key).filter(|r| !r.is_newer())?;
                let info = rec.info(&pos.key);
                Some((pos, info))
            })
            .collect();
        Ok(ListChunk {
            jobs,
            next_index: 0,
            more: places.next().is_some(),
        })
    }

    /// Mirrors `requeue_dead.lua`: attempts reset, history kept, to the back of `ready`.
    fn requeue_dead(&mut self, keys: &[JobKey], now: u64) -> Vec<bool> {
        let mut moved = false;
        let out = keys
            .iter()
            .map(|key| match self.jobs.get_mut(key) {
                Some(rec) if rec.state() == JobState::Dead => {
                    self.sets
                        .unlink(key, rec.place, rec.due_ms, rec.group.as_ref());
                    rec.attempts = 0;
                    rec.due_ms = now;
                    rec.expires_ms = 0; // an operator's requeue runs it
                    rec.place = self
                        .sets
                        .push_ready_back(key, rec.priority, rec.group.as_ref());
                    moved = true;
                    true
                }
                _ => false,
            })
            .collect();
        if moved {
            self.wake();
        }
        out
    }

    /// Mirrors `dead_act.lua`: each job only if it is still dead with the listed time of
    /// death; requeued as `requeue_dead`, deleted as `purge_dead`.
    fn act_on_dead(&mut self, action: DeadAction, seen: &[(JobKey, u64)], now: u64) -> Vec<bool> {
        let mut out = Vec::with_capacity(seen.len());
        let mut moved = false;
        for (key, died) in seen {
            let Some(rec) = self.jobs.get_mut(key) else {
                out.push(false);
                continue;
            };
            if rec.place != Place::Dead(*died) {
                out.push(false);
                continue;
            }
            self.sets
                .unlink(key, rec.place, rec.due_ms, rec.group.as_ref());
            match action {
                DeadAction::Requeue => {
                    rec.attempts = 0;
                    rec.due_ms = now;
                    rec.expires_ms = 0; // an operator's requeue runs it
                    rec.place = self
                        .sets
                        .push_ready_back(key, rec.priority, rec.group.as_ref());
                    moved = true;
                }
                DeadAction::Purge => {
                    self.jobs.remove(key);
                }
            }
            out.push(true);
        }
        if moved {
            self.wake();
        }
        out
    }

    /// Mirrors `purge_dead.lua`: the named dead jobs (a name repeated still takes a slot of
    /// `limit`, but is deleted and counted once), or the oldest `limit`.
    /// A job it would delete whose record is newer refuses the call before any delete.
    fn purge_dead(&mut self, keys: &[JobKey], limit: usize) -> Result<u64> {
        let chosen: Vec<JobKey> = if keys.is_empty() {
            self.sets
                .dead
                .iter()
                .take(limit)
                .map(|(_, k)| k.clone())
                .collect()
        } else {
            keys.iter()
                .filter(|k| {
                    self.jobs
                        .get(*k)
                        .is_some_and(|r| r.state() == JobState::Dead)
                })
                .take(limit)
                .cloned()
                .collect()
        };
        self.check_not_newer(&chosen)?;
        let mut deleted = 0;
        for key in chosen {
            if let Some(rec) = self.jobs.get(&key)
                && rec.state() == JobState::Dead
            {
                self.sets
                    .unlink(&key, rec.place, rec.due_ms, rec.group.as_ref());
                self.jobs.remove(&key);
                deleted += 1;
            }
        }
        Ok(deleted)
    }
}

#[async_trait]
impl Operate for MemoryStore {
    async fn cancel(&self, queue: &Queue, key: &JobKey) -> Result<CancelOutcome> {
        self.write(queue, |p, now| {
            p.check_not_newer([key])?;
            Ok(p.cancel(key, now))
        })
    }

    async fn bury(
        &self,
        queue: &Queue,
        key: &JobKey,
        reason: &str,
        dead_limits: DeadLimits,
    ) -> Result<BuryOutcome> {
        let reason = bury_reason(reason);
        let (outcome, trimmed) = self.write(queue, |p, now| {
            p.check_not_newer([key])?;
            Ok::<_, Error>(p.bury_waiting(key, &reason, dead_limits, now))
        })?;
        super::lease::warn_trimmed(queue, trimmed);
        Ok(outcome)
    }

    async fn reschedule(
        &self,
        queue: &Queue,
        key: &JobKey,
        due: NewDue,
    ) -> Result<RescheduleOutcome> {
        self.write(queue, |p, now| {
            p.check_not_newer([key])?;
            p.reschedule(key, due, now)
        })
    }

    async fn update_payload(
        &self,
        queue: &Queue,
        key: &JobKey,
        payload: &[u8],
    ) -> Result<UpdateOutcome> {
        self.write(queue, |p, _| {
            p.check_not_newer([key])?;
            let Some(rec) = p.jobs.get_mut(key) else {
                return Ok(UpdateOutcome::NotFound);
            };
            Ok(match rec.state() {
                JobState::Active => UpdateOutcome::Running,
                JobState::Dead => UpdateOutcome::Dead,
                state => {
                    rec.payload = payload.to_vec();
                    UpdateOutcome::Updated(state)
                }
            })
        })
    }

    async fn control(&self, queue: &Queue, change: &ControlChange) -> Result<ControlState> {
        check_control(change)?;
        Ok(self.write(queue, |p, now| p.control(change, now)))
    }

    async fn group(&self, queue: &Queue, change: &GroupChange) -> Result<GroupState> {
        crate::group::check_change(change)?;
        Ok(self.write(queue, |p, now| {
            let (state, changed) = p.sets.groups.change(change, now);
            if changed {
                p.wake();
            }
            state
        }))
    }

    async fn job(&self, queue: &Queue, key: &JobKey) -> Result<Option<JobInfo>> {
        self.read(queue, |p, _| {
            let Some(p) = p else { return Ok(None) };
            p.check_not_newer([key])?;
            Ok(p.jobs.get(key).map(|rec| {
                let mut info = rec.info(key);
                if info.state == JobState::Active {
                    info.progress = p.progress.get(key).cloned();
                }
                info
            }))
        })
    }

    async fn finished(&self, queue: &Queue, key: &JobKey) -> Result<Option<FinishedJob>> {
        Ok(self.read(queue, |p, now| {
            p.and_then(|p| p.finished(key))
                .filter(|j| j.kept_until_ms > now)
        }))
    }

    async fn list_finished(
        &self,
        queue: &Queue,
        outcome: FinishedAs,
        from: &ListFrom,
        limit: usize,
    ) -> Result<FinishedChunk> {
        if matches!(from, ListFrom::Index(_)) {
            return Err(Error::InvalidConfig(format!(
                "the {outcome} listing cannot start from {from:?}"
            )));
        }
        Ok(self.read(queue, |p, now| match p {
            Some(p) => p.list_finished(outcome, from, limit, now),
            None => FinishedChunk::default(),
        }))
    }

    async fn stats(&self, queue: &Queue) -> Result<TopicStats> {
        Ok(self.read(queue, |p, now| p.map(|p| p.stats(now)).unwrap_or_default()))
    }

    async fn read_events(&self, queue: &Queue, after: EventId, limit: usize) -> Result<Vec<Event>> {
        Ok(self.read(queue, |p, _| {
            p.map(|p| p.read_events(queue, after, limit))
                .unwrap_or_default()
        }))
    }

    async fn last_event(&self, queue: &Queue) -> Result<Option<EventId>> {
        Ok(self.read(queue, |p, _| {
            p.and_then(super::partition::Partition::last_event)
        }))
    }

    async fn list(
        &self,
        queue: &Queue,
        state: JobState,
        from: &ListFrom,
        limit: usize,
    ) -> Result<ListChunk> {
        self.read(queue, |p, _| match p {
            Some(p) => p.list(state, from, limit),
            None => Partition::default().list(state, from, limit),
        })
    }

    async fn requeue_dead(&self, queue: &Queue, keys: &[JobKey]) -> Result<Vec<bool>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        self.write(queue, |p, now| {
            p.check_not_newer(keys)?;
            Ok(p.requeue_dead(keys, now))
        })
    }

    async fn purge_dead(&self, queue: &Queue, keys: &[JobKey], limit: usize) -> Result<u64> {
        if limit == 0 {
            return Ok(0);
        }
        self.write(queue, |p, _| p.purge_dead(keys, limit))
    }

    async fn act_on_dead(
        &self,
        queue: &Queue,
        action: DeadAction,
        seen: &[(JobKey, u64)],
    ) -> Result<Vec<bool>> {
        if seen.is_empty() {
            return Ok(Vec::new());
        }
        check_act_len(seen)?;
        self.write(queue, |p, now| {
            // (dead_act.lua meets a record only when its time of death is the listed one)
            let listed = seen
                .iter()
                .filter(|(k, died)| p.jobs.get(k).is_some_and(|r| r.place == Place::Dead(*died)));
            p.check_not_newer(listed.map(|(k, _)| k))?;
            Ok(p.act_on_dead(action, seen, now))
        })
    }
}
