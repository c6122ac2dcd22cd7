//! The lease protocol in memory: the mirrors of `fetch.lua`, `ack.lua`, `fail.lua`,
//! `extend.lua` and `release.lua`, and the wake-up listener (a [`Notify`] per partition, whose
//! one stored permit is the Redis `wake` list's token).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;

use super::clock::{bound_due, ms};
use super::events::Detail;
use super::groups::GroupPass;
use super::partition::{
    Control, Counters, Later, MAX_ATTEMPTS, NORMAL_BAND, Partition, Place, TRIM_LIMIT, bury,
};
use super::receipts::FetchReceipt;
use super::store::MemoryStore;
use crate::batch::MemberState;
use crate::error::{Error, Result};
use crate::events::EventKind;
use crate::finished::FinishedAs;
use crate::job::{AttemptOutcome, Priority, Queue};
use crate::names::JobKey;
use crate::progress::{LogLine, MAX_LOG_LINES, Report};
use crate::retry::RetryDecision;
use crate::store::lease::{
    AckOutcome, DeadLimits, Delivery, Extended, FailAction, FailOutcome, FailedAttempt, FetchCall,
    FetchReply, FetchRequest, Lease, NEWER_RECORD_WAIT, NewerRecord, Success, WakeListener,
};

/// A due job found by a fetch: its due ms, its set (0 scheduled, 1 retry) and its place there.
type DueSlot = (u64, u8, (u64, u64));

impl Partition {
    /// Deletes and counts the waiting job under `key` if its expiry has come (fetch.lua's
    /// expired jobs): it is never started. A running job is left alone.
    pub(super) fn drop_if_expired(&mut self, key: &JobKey, now: u64) -> bool {
        let expired = self
            .jobs
            .get(key)
            .is_some_and(|r| r.is_expired(now) && !matches!(r.place, Place::Active(_)));
        if expired {
            if let Some(rec) = self.jobs.remove(key) {
                self.outbox
                    .note(now, rec.batch.as_ref(), key, MemberState::Expired);
                self.keep(key, rec, FinishedAs::Expired, now, None);
            }
            self.counters.expired_before_start += 1;
        }
        expired
    }

    /// Deletes the job under `key` (already out of its place) with its history, counts it
    /// and records the event: a retry function's `Discard` (fail.lua's 'x', fetch.lua's
    /// recovery). Never kept.
    fn discard(&mut self, key: &JobKey, attempts: u32, error: &str, now: u64) {
        if let Some(rec) = self.jobs.remove(key) {
            self.outbox
                .note(now, rec.batch.as_ref(), key, MemberState::Discarded);
        }
        self.progress.remove(key);
        self.counters.discarded += 1;
        let detail = Detail {
            attempt: Some(attempts),
            error: Some(error.to_owned()),
            ..Detail::default()
        };
        self.events
            .emit(self.control.events, now, EventKind::Discarded, key, detail);
    }

    /// Leases the job under `key` (a record this dq reads) with `token` until `deadline`.
    pub(super) fn lease_now(
        &mut self,
        queue: &Queue,
        key: JobKey,
        token: u64,
        now: u64,
        deadline: u64,
    ) -> Option<crate::store::lease::Delivery> {
        // a receipt's job, leased already, is leased again whatever its expiry says
        if self.drop_if_expired(&key, now) {
            return None;
        }
        let rec = self.jobs.get_mut(&key)?;
        rec.place = Place::Active(deadline);
        rec.attempts = (rec.attempts + 1).min(MAX_ATTEMPTS);
        rec.token = token;
        self.sets.active.insert((deadline, key.clone()));
        if let Some(g) = &rec.group {
            self.sets.groups.started(g, &key);
        }
        let delivery = rec.delivery(queue, key.clone(), now, deadline);
        let attempt = Some(rec.attempts);
        self.events.emit(
            self.control.events,
            now,
            EventKind::Started,
            &key,
            Detail {
                attempt,
                ..Detail::default()
            },
        );
        Some(delivery)
    }

    /// Leases the due queue's jobs from its front while room is left and their band is at most
    /// `last_band` (fetch.lua's ready list and pready passes); stops at a newer record.
    #[allow(clippy::too_many_arguments)]
    fn lease_ready(
        &mut self,
        queue: &Queue,
        jobs: &mut Vec<Delivery>,
        newer: &mut Vec<NewerRecord>,
        stopped: &mut bool,
        next_token: &mut dyn FnMut(&mut Counters) -> u64,
        max_jobs: usize,
        now: u64,
        deadline: u64,
        last_band: u8,
    ) {
        while !*stopped && jobs.len() < max_jobs {
            let Some(key) = self.sets.ready_front_within(last_band) else {
                break;
            };
            if let Some(rec) = self.jobs.get(key).filter(|r| r.is_newer()) {
                // left at the front with every job behind it; not work this dq can do
                newer.push(NewerRecord {
                    key: key.clone(),
                    format: rec.format,
                });
                *stopped = true;
                break;
            }
            let Some((_, key)) = self.sets.ready.pop_first() else {
                break;
            };
            if !self.jobs.contains_key(&key) {
                continue;
            }
            let next = next_token(&mut self.counters);
            jobs.extend(self.lease_now(queue, key, next, now, deadline));
        }
    }

    /// Mirrors `fetch.lua`: recover expired leases, promote due jobs, lease ready ones. A
    /// newer dq's record ends the pass over the structure that holds it, as in the script.
    fn fetch(&mut self, queue: &Queue, request: &FetchRequest, now: u64) -> FetchReply {
        let lease_ms = ms(request.lease).max(1);
        let cap = request.dead_limits.cap.max(1);
        let retention_ms = ms(request.dead_limits.retention);
        let mut trimmed = 0;
        let mut buried = Vec::new();
        // newer records met; where they stopped a pass: ready, scheduled, retry, active
        let mut newer = Vec::new();
        let (mut stopped_ready, mut stopped_sets, mut stopped_active) = (false, [false; 2], false);
        let call = request.call;
        let mut jobs = Vec::new();
        let mut token: Option<u64> = None;
        // One counter bump for the whole call; tokens are base+1 .. base+max_jobs.
        let mut next_token = |counters: &mut Counters| {
            let next = match token {
                Some(t) => t + 1,
                None => {
                    let base = counters.token;
                    counters.token = base.saturating_add(request.max_jobs as u64);
                    base + 1
                }
            };
            token = Some(next);
            next
        };

        // 0. this call's receipt: a stale try does nothing; a retry leases the jobs still
        //    held under the recorded tokens again, spending no attempt
        self.fetch_receipts.prune(now);
        if let Some(receipt) = self.fetch_receipts.get(call.id, now) {
            if receipt.try_no > call.retry {
                return FetchReply {
                    next_in: Some(Duration::ZERO),
                    ..FetchReply::default()
                };
            }
            if call.is_retry() {
                let deadline = now + lease_ms;
                for (key, old) in receipt.leases.iter().take(request.max_jobs) {
                    let Some(rec) = self.jobs.get_mut(key) else {
                        continue;
                    };
                    let Place::Active(was) = rec.place else {
                        continue;
                    };
                    if rec.token != *old {
                        continue;
                    }
                    self.sets.active.remove(&(was, key.clone()));
                    let next = next_token(&mut self.counters);
                    rec.place = Place::Active(deadline);
                    rec.token = next;
                    self.sets.active.insert((deadline, key.clone()));
                    jobs.push(rec.delivery(queue, key.clone(), now, deadline));
                }
            }
        }

        // 1. expired leases: deadline < now
        let expired: Vec<(u64, JobKey)> = self
            .sets
            .active
            .iter()
            .take_while(|(deadline, _)| *deadline < now)
            .take(request.recover_batch)
            .cloned()
            .collect();
        for (deadline, key) in expired {
            if let Some(rec) = self.jobs.get(&key).filter(|r| r.is_newer()) {
                newer.push(NewerRecord {
                    key,
                    format: rec.format,
                });
                stopped_active = true;
                break;
            }
            self.sets.active.remove(&(deadline, key.clone()));
            let group = self.jobs.get(&key).and_then(|r| r.group.clone());
            self.sets.group_done(group.as_ref(), &key);
            if self.control.cancels.remove(&key).is_some() {
                // its cancel was requested while it ran: it ends as cancelled
                if let Some(rec) = self.jobs.remove(&key) {
                    self.outbox
                        .note(now, rec.batch.as_ref(), &key, MemberState::Cancelled);
                    self.keep(&key, rec, FinishedAs::Cancelled, now, None);
                }
                self.counters.cancelled += 1;
                continue;
            }
            self.progress.remove(&key);
            let Some(rec) = self.jobs.get_mut(&key) else {
                continue;
            };
            self.counters.expired += 1;
            rec.add_history(now, AttemptOutcome::LeaseExpired, "lease expired");
            match request.retry_policy.decision_after(rec.attempts) {
                RetryDecision::Discard => {
                    let attempts = rec.attempts;
                    self.discard(&key, attempts, "lease expired", now);
                }
                RetryDecision::After(delay) => {
                    let at = bound_due(i128::from(now) + i128::from(ms(delay)), now);
                    rec.due_ms = at;
                    rec.place = self.sets.insert_later(Later::Retry, &key, at);
                    self.counters.retried += 1;
                    let detail = Detail {
                        attempt: Some(rec.attempts),
                        error: Some("lease expired".into()),
                        due_ms: Some(at),
                        ..Detail::default()
                    };
                    self.events
                        .emit(self.control.events, now, EventKind::Failed, &key, detail);
                }
                RetryDecision::Dead => {
                    bury(&mut self.sets, &mut self.counters, rec, &key, now);
                    self.outbox
                        .note(now, rec.batch.as_ref(), &key, MemberState::Dead);
                    self.windows.ended(&key, now);
                    let detail = Detail {
                        attempt: Some(rec.attempts),
                        error: Some("lease expired".into()),
                        ..Detail::default()
                    };
                    self.events
                        .emit(self.control.events, now, EventKind::Dead, &key, detail);
                    buried.push(key);
                }
            }
        }
        if !buried.is_empty() {
            trimmed += self.trim_dead(now, cap, retention_ms, TRIM_LIMIT);
        }

        // limits, as fetch.lua applies them
        let from_receipt = jobs.len();
        let mut max_jobs = request.max_jobs.max(from_receipt);
        let mut limited = false;
        let mut limit_wait: i64 = -1;
        let mut gcra = None;
        if self.control.exists() {
            let c = &self.control;
            let mut allowed = max_jobs - from_receipt;
            if c.paused {
                allowed = 0;
            } else if let Some(until) = c.until.filter(|u| *u > now) {
                allowed = 0;
                limit_wait = (until - now) as i64;
            }
            if let Some(conc) = c.conc
                && allowed > 0
            {
                let room = (conc as usize).saturating_sub(self.sets.active.len());
                allowed = allowed.min(room);
            }
            if let Some(rate) = c.rate
                && allowed > 0
            {
                let (t, tau) = Control::gcra(rate);
                let tat = c.tat.max(now as f64);
                let budget = (((now as f64 + tau - tat) / t).floor() + 1.0).max(0.0) as usize;
                if budget < allowed {
                    allowed = budget;
                    limit_wait = -2;
                }
                gcra = Some((t, tau, tat));
            }
            if from_receipt + allowed < max_jobs {
                limited = true;
                max_jobs = from_receipt + allowed;
            }
        }

        // 2. lease the due queue's jobs above normal priority, highest first, FIFO within a
        //    priority; 3. then the due jobs found in both sets, band by band with the due
        //    queue's — the order fetch.lua leases in
        let mut promoted = 0;
        let deadline = now + lease_ms;
        // 2g. grouped jobs: the whole room, or half of it while jobs of no group are queued
        //     (the other half for them; a room of one goes to either, by the clock's parity);
        //     3g below gives them the room left
        let mut groups = GroupPass::new(&self.sets.groups);
        let mut first = max_jobs - jobs.len();
        if !self.sets.ready.is_empty() {
            if first > 1 {
                first /= 2;
            } else if now % 2 == 1 {
                first = 0;
            }
        }
        self.take_groups(
            &mut groups,
            first,
            queue,
            &mut jobs,
            &mut newer,
            &mut next_token,
            max_jobs,
            now,
            deadline,
        );
        // 2. the due queue's jobs above normal priority
        self.lease_ready(
            queue,
            &mut jobs,
            &mut newer,
            &mut stopped_ready,
            &mut next_token,
            max_jobs,
            now,
            deadline,
            NORMAL_BAND - 1,
        );
        // 3. the due jobs of both sets, merged by due ms (scheduled first on a tie), at most
        //    room + promote_batch of them, taken band by band (below) and each leased while
        //    room is left, else queued, at most promote_batch of them (the others wait in
        //    their set)
        let limit = max_jobs - jobs.len() + request.promote_batch;
        let mut due: Vec<DueSlot> = Vec::new();
        for (rank, set) in [(0u8, &self.sets.scheduled), (1u8, &self.sets.retry)] {
            due.extend(
                set.keys()
                    .take_while(|(due, _)| *due <= now)
                    .take(limit)
                    .map(|slot| (slot.0, rank, *slot)),
            );
        }
        due.sort();
        due.truncate(limit);
        let mut promote_more = limit > 0 && due.len() == limit;
        // (stable: due order within a priority)
        let priority_of = |slot: &DueSlot| {
            let set = if slot.1 == 0 {
                &self.sets.scheduled
            } else {
                &self.sets.retry
            };
            set.get(&slot.2)
                .and_then(|key| self.jobs.get(key))
                .map_or(Priority::NORMAL.level(), |r| r.priority)
        };
        let mut due: Vec<(u8, DueSlot)> = due.into_iter().map(|d| (priority_of(&d), d)).collect();
        due.sort_by_key(|(priority, _)| std::cmp::Reverse(*priority));
        let mut rest = due.into_iter().peekable();
        let mut queued = 0;
        // due grouped jobs found: queued after the group passes (as fetch.lua's writes)
        let mut grouped_due = Vec::new();
        // band by band: the found jobs above normal; the due queue's normal ones (due before
        // the found ones), the found normal ones; the due queue's below normal, the found ones
        // below normal
        let normal = Priority::NORMAL.level();
        for (queued_band, least) in [
            (None, normal + 1),
            (Some(NORMAL_BAND), normal),
            (Some(u8::MAX), 0),
        ] {
            if let Some(band) = queued_band {
                self.lease_ready(
                    queue,
                    &mut jobs,
                    &mut newer,
                    &mut stopped_ready,
                    &mut next_token,
                    max_jobs,
                    now,
                    deadline,
                    band,
                );
            }
            while let Some((_, (_, rank, slot))) = rest.next_if(|(p, _)| *p >= least) {
                if jobs.len() >= max_jobs && queued >= request.promote_batch {
                    promote_more = true; // left in its set
                    break;
                }
                let r = usize::from(rank);
                if stopped_sets[r] {
                    continue; // behind a newer record of this set: left where it is
                }
                let set = if rank == 0 {
                    &mut self.sets.scheduled
                } else {
                    &mut self.sets.retry
                };
                let Some(key) = set.get(&slot).cloned() else {
                    continue;
                };
                if let Some(rec) = self.jobs.get(&key).filter(|r| r.is_newer()) {
                    newer.push(NewerRecord {
                        key,
                        format: rec.format,
                    });
                    stopped_sets[r] = true;
                    continue;
                }
                set.remove(&slot);
                if self.drop_if_expired(&key, now) {
                    continue; // not leased nor promoted (as fetch.lua)
                }
                let grouped = self.jobs.get(&key).is_some_and(|r| r.group.is_some());
                if grouped {
                    // a grouped one waits for its group's turn: queued with the writes
                    grouped_due.push(key);
                    queued += 1;
                } else if jobs.len() < max_jobs && self.jobs.contains_key(&key) {
                    let next = next_token(&mut self.counters);
                    jobs.extend(self.lease_now(queue, key, next, now, deadline));
                } else if let Some(rec) = self.jobs.get_mut(&key) {
                    rec.place = self.sets.push_ready_back(&key, rec.priority, None);
                    promoted += 1;
                    queued += 1;
                }
            }
        }
        // 3g. grouped jobs again, with the room left
        self.take_groups(
            &mut groups,
            max_jobs - jobs.len(),
            queue,
            &mut jobs,
            &mut newer,
            &mut next_token,
            max_jobs,
            now,
            deadline,
        );
        let grouped_promoted = grouped_due.len();
        for key in grouped_due {
            if let Some(rec) = self.jobs.get_mut(&key) {
                rec.place = self
                    .sets
                    .push_ready_back(&key, rec.priority, rec.group.as_ref());
            }
        }
        let groups_left = self.write_groups(&mut groups);
        if stopped_sets.contains(&true) {
            promote_more = false;
        }
        // work left in ready for this dq (one stopped at a newer record has only what this
        // call put behind it)
        let ready_left = groups_left
            || grouped_promoted > 0
            || if stopped_ready {
                promoted > 0
            } else {
                !self.sets.ready.is_empty()
            };
        // an index stopped at a newer record is looked at again no sooner than this
        let newer_wait = ms(NEWER_RECORD_WAIT);
        let floor = |stopped: bool, at: u64| {
            if stopped {
                at.max(now + newer_wait)
            } else {
                at
            }
        };

        if let Some((t, _, tat)) = &mut gcra
            && jobs.len() > from_receipt
        {
            *tat += (jobs.len() - from_receipt) as f64 * *t;
            self.control.tat = *tat;
        }

        // 4. what next
        let next_in = if limited && (ready_left || promote_more) {
            // a limit holds due work back: no chained wake-up
            if limit_wait == -2
                && let Some((t, tau, tat)) = gcra
            {
                let k = (tau / t / 2.0).floor().max(1.0);
                limit_wait = ((tat - tau + (k - 1.0) * t - now as f64).ceil() as i64).max(1);
            }
            let head = self.sets.active.first().map(|(deadline, _)| {
                floor(stopped_active, deadline + 1).saturating_sub(now) as i64
            });
            match (limit_wait, head) {
                (w, Some(h)) if w < 0 || h < w => Some(h as u64),
                (w, _) if w >= 0 => Some(w as u64),
                _ => None,
            }
        } else if ready_left || promote_more {
            if !jobs.is_empty() {
                self.wake();
            }
            Some(0)
        } else {
            let heads = [
                self.sets
                    .scheduled
                    .first_key_value()
                    .map(|((due, _), _)| floor(stopped_sets[0], *due)),
                self.sets
                    .retry
                    .first_key_value()
                    .map(|((due, _), _)| floor(stopped_sets[1], *due)),
                // a lease expires once now > deadline
                self.sets
                    .active
                    .first()
                    .map(|(deadline, _)| floor(stopped_active, deadline + 1)),
                // a waiting group looked at again
                self.sets.groups.waiting.first().map(|(at, _)| *at),
            ];
            let next = heads.into_iter().flatten().min();
            if jobs.is_empty() && retention_ms > 0 {
                trimmed += self.trim_dead(now, cap, retention_ms, TRIM_LIMIT);
            }
            if jobs.is_empty() {
                self.trim_kept(now, TRIM_LIMIT);
            }
            next.map(|at| at.saturating_sub(now))
        };

        // 6. the receipt, for a call that leased something (or any retry)
        if !jobs.is_empty() || call.is_retry() {
            let leases = jobs.iter().map(|d| (d.key.clone(), d.token)).collect();
            let life = ms(FetchCall::receipt_life(request.lease)).max(1);
            let receipt = FetchReceipt {
                try_no: call.retry,
                leases,
                until: now + life,
            };
            self.fetch_receipts.insert(call.id, receipt);
        }

        FetchReply {
            jobs,
            next_in: next_in.map(Duration::from_millis),
            buried,
            trimmed,
            newer,
        }
    }

    /// Mirrors `ack.lua`.
    fn ack(&mut self, worker: &str, done: &[Success], now: u64) -> Vec<AckOutcome> {
        let mut out = Vec::with_capacity(done.len());
        let mut woke = false;
        for d in done {
            let (key, token) = (&d.key, &d.token);
            let outcome = match self.jobs.get(key) {
                None => AckOutcome::Gone,
                Some(rec) if !rec.is_leased_by(*token) => AckOutcome::Stale,
                Some(rec) => {
                    self.sets
                        .unlink(key, rec.place, rec.due_ms, rec.group.as_ref());
                    woke |= self.sets.group_done(rec.group.as_ref(), key);
                    if let Some(rec) = self.jobs.remove(key) {
                        self.outbox
                            .note(now, rec.batch.as_ref(), key, MemberState::Succeeded);
                        let run = (d.started_ms, worker, d.result.clone());
                        self.keep(key, rec, FinishedAs::Succeeded, now, Some(run));
                    }
                    if self.control.cancels.remove(key).is_some() {
                        self.counters.succeeded_after_cancel_request += 1;
                    }
                    self.counters.succeeded += 1;
                    AckOutcome::Acked
                }
            };
            out.push(outcome);
        }
        if woke || (self.control.conc.is_some() && out.contains(&AckOutcome::Acked)) {
            self.wake();
        }
        out
    }

    /// Buries job `key`, already out of the set that held it, as `fail.lua` and `bury.lua`
    /// do: the reason in its history, to the dead set, its end noted for its batch, its
    /// `unique_for` window started, a `dead` event, then the dead queue trimmed. Returns how
    /// many dead jobs the trim removed.
    pub(super) fn bury_now(
        &mut self,
        key: &JobKey,
        reason: &str,
        limits: DeadLimits,
        now: u64,
    ) -> u64 {
        if let Some(rec) = self.jobs.get_mut(key) {
            rec.add_history(now, AttemptOutcome::Buried, reason);
            bury(&mut self.sets, &mut self.counters, rec, key, now);
            self.outbox
                .note(now, rec.batch.as_ref(), key, MemberState::Dead);
            self.windows.ended(key, now);
            let detail = Detail {
                attempt: Some(rec.attempts),
                error: Some(reason.to_owned()),
                ..Detail::default()
            };
            self.events
                .emit(self.control.events, now, EventKind::Dead, key, detail);
        }
        self.trim_dead(now, limits.cap.max(1), ms(limits.retention), TRIM_LIMIT)
    }

    /// Mirrors `fail.lua`; `Err` only for a stale token.
    fn fail(
        &mut self,
        key: &JobKey,
        token: u64,
        action: &FailAction,
        error: &str,
        dead_limits: DeadLimits,
        now: u64,
    ) -> Result<FailOutcome> {
        let Some(rec) = self.jobs.get_mut(key) else {
            return Ok(FailOutcome::Gone);
        };
        if !rec.is_leased_by(token) {
            return Err(Error::StaleToken {
                key: key.to_string(),
            });
        }
        let capped = self.control.conc.is_some();
        // a grouped job frees its group's slot, whatever the action (fail.lua `groups_done`)
        let group = rec.group.clone();
        if matches!(action, FailAction::Cancel) || self.control.cancels.contains_key(key) {
            self.sets
                .unlink(key, rec.place, rec.due_ms, rec.group.as_ref());
            let woke = self.sets.group_done(group.as_ref(), key);
            if let Some(rec) = self.jobs.remove(key) {
                self.outbox
                    .note(now, rec.batch.as_ref(), key, MemberState::Cancelled);
                self.keep(key, rec, FinishedAs::Cancelled, now, None);
            }
            self.control.cancels.remove(key);
            self.counters.cancelled += 1;
            if capped || woke {
                self.wake();
            }
            return Ok(FailOutcome::Cancelled);
        }
        self.sets
            .unlink(key, rec.place, rec.due_ms, rec.group.as_ref());
        self.progress.remove(key);
        let woke = self.sets.group_done(group.as_ref(), key);
        if capped || woke {
            // a slot of the concurrency share (or of its group's cap) is free
            self.wake.notify_one();
        }
        let mut hold = None;
        let (delay, outcome, later) = match action {
            FailAction::Cancel => unreachable!("handled above"),
            FailAction::Discard => {
                let attempts = rec.attempts;
                self.discard(key, attempts, error, now);
                return Ok(FailOutcome::Discarded);
            }
            FailAction::Throttle(d) => {
                let at = bound_due(i128::from(now) + i128::from(ms(*d)), now);
                if group.is_some() {
                    // only its group is held (once the job is placed, as fail.lua)
                    hold = Some(at);
                } else if self.control.until.is_none_or(|u| at > u) {
                    self.control.until = Some(at);
                }
                self.counters.throttles += 1;
                (d, AttemptOutcome::Deferred, Later::Scheduled)
            }
            FailAction::Bury => {
                let trimmed = self.bury_now(key, error, dead_limits, now);
                return Ok(FailOutcome::Buried { trimmed });
            }
            FailAction::Defer(d) => (d, AttemptOutcome::Deferred, Later::Scheduled),
            FailAction::Retry(d) => (d, AttemptOutcome::Failed, Later::Retry),
        };
        let at = bound_due(i128::from(now) + i128::from(ms(*delay)), now);
        rec.add_history(now, outcome, error);
        let event = Detail {
            attempt: Some(rec.attempts),
            error: Some(error.to_owned()),
            due_ms: Some(at),
            ..Detail::default()
        };
        if matches!(later, Later::Scheduled) {
            // "not yet": the attempt is given back and the job waits like a scheduled one
            rec.attempts = rec.attempts.saturating_sub(1);
        } else {
            self.counters.retried += 1;
        }
        let (place, wake) = self
            .sets
            .place(later, key, at, now, rec.priority, rec.group.as_ref());
        rec.place = place;
        rec.due_ms = at;
        if let (Some(g), Some(until)) = (&group, hold) {
            self.sets.groups.hold(g, until);
        }
        let kind = match later {
            Later::Scheduled => EventKind::Deferred,
            Later::Retry => EventKind::Failed,
        };
        self.events.emit(self.control.events, now, kind, key, event);
        if wake {
            self.wake();
        }
        Ok(FailOutcome::Retrying { at_ms: at })
    }

    /// Mirrors `extend.lua`.
    fn extend(&mut self, leases: &[(JobKey, u64)], lease: Duration, now: u64) -> Vec<Extended> {
        let deadline = now + ms(lease).max(1);
        leases
            .iter()
            .map(|(key, token)| match self.jobs.get_mut(key) {
                Some(rec) if rec.is_leased_by(*token) => {
                    self.sets
                        .unlink(key, rec.place, rec.due_ms, rec.group.as_ref());
                    rec.place = Place::Active(deadline);
                    self.sets.active.insert((deadline, key.clone()));
                    if self.control.cancels.contains_key(key) {
                        Extended::CancelRequested
                    } else {
                        Extended::Held
                    }
                }
                _ => Extended::Lost,
            })
            .collect()
    }

    /// Mirrors `release.lua`: back to the front of `ready`, the attempt given back.
    fn release(&mut self, leases: &[(JobKey, u64)], now: u64) -> Vec<bool> {
        let mut released = false;
        // Backwards, so the jobs end at the front of ready in the order given.
        let mut out = Vec::with_capacity(leases.len());
        for (key, token) in leases.iter().rev() {
            let cancel = self.control.cancels.contains_key(key);
            let ok = match self.jobs.get_mut(key) {
                Some(rec) if rec.is_leased_by(*token) && cancel => {
                    // its cancel was requested: it ends as cancelled, never runs again
                    self.sets
                        .unlink(key, rec.place, rec.due_ms, rec.group.as_ref());
                    released |= self.sets.group_done(rec.group.as_ref(), key);
                    if let Some(rec) = self.jobs.remove(key) {
                        self.outbox
                            .note(now, rec.batch.as_ref(), key, MemberState::Cancelled);
                        self.keep(key, rec, FinishedAs::Cancelled, now, None);
                    }
                    self.control.cancels.remove(key);
                    self.counters.cancelled += 1;
                    true
                }
                Some(rec) if rec.is_leased_by(*token) => {
                    self.sets
                        .unlink(key, rec.place, rec.due_ms, rec.group.as_ref());
                    self.sets.group_done(rec.group.as_ref(), key);
                    self.progress.remove(key);
                    let attempt = Some(rec.attempts);
                    rec.attempts = rec.attempts.saturating_sub(1);
                    rec.place = self
                        .sets
                        .push_ready_front(key, rec.priority, rec.group.as_ref());
                    released = true;
                    self.events.emit(
                        self.control.events,
                        now,
                        EventKind::Released,
                        key,
                        Detail {
                            attempt,
                            ..Detail::default()
                        },
                    );
                    true
                }
                _ => false,
            };
            out.push(ok);
        }
        out.reverse();
        if released {
            self.wake();
        }
        out
    }
}

/// Logs a trim of the dead queue that removed jobs, as the Redis store does.
pub(super) fn warn_trimmed(queue: &Queue, trimmed: u64) {
    if trimmed > 0 {
        tracing::warn!(topic = %queue.topic, partition = queue.partition, trimmed, "dead queue trimmed (cap or retention)");
    }
}

#[async_trait]
impl Lease for MemoryStore {
    async fn fetch(&self, queue: &Queue, request: &FetchRequest) -> Result<FetchReply> {
        request.validate()?;
        let reply = self.write(queue, |p, now| p.fetch(queue, request, now));
        warn_trimmed(queue, reply.trimmed);
        Ok(reply)
    }

    async fn report(
        &self,
        queue: &Queue,
        key: &JobKey,
        token: u64,
        report: &Report,
    ) -> Result<bool> {
        let report = crate::progress::checked(report)?;
        Ok(self.write(queue, |p, now| {
            if !p.jobs.get(key).is_some_and(|r| r.is_leased_by(token)) {
                return false;
            }
            let entry = p.progress.entry(key.clone()).or_default();
            match report {
                Report::Progress(v) => entry.value = Some(v),
                Report::Log(text) => {
                    entry.log.push(LogLine { at_ms: now, text });
                    if entry.log.len() > MAX_LOG_LINES {
                        let over = entry.log.len() - MAX_LOG_LINES;
                        entry.log.drain(..over);
                        entry.dropped_lines += over as u64;
                    }
                }
            }
            true
        }))
    }

    async fn ack(&self, queue: &Queue, worker: &str, done: &[Success]) -> Result<Vec<AckOutcome>> {
        if done.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self.write(queue, |p, now| p.ack(worker, done, now)))
    }

    async fn fail_many(
        &self,
        queue: &Queue,
        failures: &[FailedAttempt],
        dead_limits: DeadLimits,
    ) -> Result<Vec<Result<FailOutcome>>> {
        if failures.is_empty() {
            return Ok(Vec::new());
        }
        // One step at one time, as `fail.lua` takes the whole batch.
        let out: Vec<Result<FailOutcome>> = self.write(queue, |p, now| {
            failures
                .iter()
                .map(|f| p.fail(&f.key, f.token, &f.action, &f.error, dead_limits, now))
                .collect()
        });
        for outcome in &out {
            if let Ok(FailOutcome::Buried { trimmed }) = outcome {
                warn_trimmed(queue, *trimmed);
            }
        }
        Ok(out)
    }

    async fn extend(
        &self,
        queue: &Queue,
        leases: &[(JobKey, u64)],
        lease: Duration,
    ) -> Result<Vec<Extended>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self.write(queue, |p, now| p.extend(leases, lease, now)))
    }

    async fn release(&self, queue: &Queue, leases: &[(JobKey, u64)]) -> Result<Vec<bool>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self.write(queue, |p, now| p.release(leases, now)))
    }

    async fn wake_listener(&self, queue: &Queue) -> Result<Box<dyn WakeListener>> {
        let wake = self.write(queue, |p, _| p.wake.clone());
        Ok(Box::new(MemoryWakeListener { wake }))
    }
}

/// Waits on the partition's [`Notify`]: a stored permit is the Redis `wake` list's one token.
struct MemoryWakeListener {
    wake: Arc<Notify>,
}

#[async_trait]
impl WakeListener for MemoryWakeListener {
    async fn wait(&mut self, max_wait: Duration) -> Result<bool> {
        Ok(tokio::time::timeout(max_wait, self.wake.notified())
            .await
            .is_ok())
    }
}
