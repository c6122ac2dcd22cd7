//! The operator's calls on Redis: `cancel.lua`, `reschedule.lua`, `bury.lua`, `control.lua`, `job.lua`,
//! `kept.lua`, `stats.lua`, `list.lua`, and the dead queue's `requeue_dead.lua`, `purge_dead.lua` and
//! `dead_act.lua`. The reads (`job`, `stats`, `list`) are declared `no-writes`, so they work at
//! `maxmemory`.

use std::time::Duration;

use async_trait::async_trait;

use super::kept::decode_kept;
use super::record::{Record, decode_history};
use super::scripts::{Reply, as_int, codes, unexpected};
use super::store::{RedisStore, key_of, ms, per_partition_cap};
use crate::control::{ControlChange, ControlState, Rate};
use crate::error::{Error, Result};
use crate::events::{Event, EventId, EventsPolicy};
use crate::finished::{FinishedAs, FinishedChunk, FinishedJob, Retention};
use crate::group::{GroupChange, GroupLimits, GroupState};
use crate::inspect::{DeadAction, ListChunk, ListFrom, ListPos};
use crate::job::{JobInfo, JobState, Priority, Queue, unix_ms};
use crate::names::JobKey;
use crate::store::lease::DeadLimits;
use crate::store::operate::{
    BuryOutcome, CancelOutcome, NewDue, Operate, RescheduleOutcome, TopicStats, UpdateOutcome,
    bury_reason, check_act_len, check_control,
};

#[async_trait]
impl Operate for RedisStore {
    async fn cancel(&self, queue: &Queue, key: &JobKey) -> Result<CancelOutcome> {
        let k = self.keys(queue);
        let s = &self.scripts().cancel;
        let reply = self
            .run(s, &k, &[], |inv| {
                inv.arg(key.as_str());
            })
            .await?;
        match codes(s.name, reply, 1)?[0] {
            b'S' | b'R' | b'F' => Ok(CancelOutcome::Cancelled),
            b'C' => Ok(CancelOutcome::CancelRequested),
            b'D' => Ok(CancelOutcome::Dead),
            b'N' => Ok(CancelOutcome::NotFound),
            other => Err(Error::Protocol(format!(
                "cancel: unknown code {:?}",
                other as char
            ))),
        }
    }

    async fn reschedule(
        &self,
        queue: &Queue,
        key: &JobKey,
        due: NewDue,
    ) -> Result<RescheduleOutcome> {
        let k = self.keys(queue);
        let s = &self.scripts().reschedule;
        let (mode, value): (&str, i64) = match due {
            // Saturate: a huge time must stay far away, not wrap to a negative "now".
            NewDue::At(t) => ("a", i64::try_from(unix_ms(t)).unwrap_or(i64::MAX)),
            NewDue::After(d) => ("d", i64::try_from(ms(d)).unwrap_or(i64::MAX)),
            NewDue::Shift(delta) => ("s", delta),
        };
        // Under durable enqueue a reschedule waits for the replicas too: a flow's parent
        // released by it must not be lost in a failover once its batch is marked done.
        let durable = self.options.durable_enqueue;
        let (reply, acked) = self
            .run_waiting(
                s,
                &k,
                &[],
                |inv| {
                    inv.arg(key.as_str()).arg(mode).arg(value);
                },
                durable,
            )
            .await?;
        RedisStore::replicated(durable, acked)?;
        let mut r = Reply::new(s.name, reply)?;
        let code = r.string("code")?;
        let due_ms = r.int("due")?;
        match code.as_str() {
            "K" => Ok(RescheduleOutcome::Rescheduled {
                due_ms: due_ms as u64,
            }),
            "A" => Ok(RescheduleOutcome::Running),
            "D" => Ok(RescheduleOutcome::Dead),
            "N" => Ok(RescheduleOutcome::NotFound),
            other => Err(Error::Protocol(format!(
                "reschedule: unknown code {other:?}"
            ))),
        }
    }

    async fn bury(
        &self,
        queue: &Queue,
        key: &JobKey,
        reason: &str,
        dead_limits: DeadLimits,
    ) -> Result<BuryOutcome> {
        let k = self.keys(queue);
        let s = &self.scripts().bury;
        let reason = bury_reason(reason);
        // Under durable enqueue a burial waits for the replicas, as a reschedule does: a
        // flow's parent failed by it, and its end noted for its own batch, must not come back
        // waiting after a failover.
        let durable = self.options.durable_enqueue;
        let (reply, acked) = self
            .run_waiting(
                s,
                &k,
                &[],
                |inv| {
                    inv.arg(key.as_str())
                        .arg(per_partition_cap(dead_limits))
                        .arg(ms(dead_limits.retention))
                        .arg(reason.as_ref());
                },
                durable,
            )
            .await?;
        RedisStore::replicated(durable, acked)?;
        let mut r = Reply::new(s.name, reply)?;
        let code = r.string("code")?;
        let trimmed = r.int("trimmed")?;
        match code.as_str() {
            "S" | "R" | "F" => {
                if trimmed > 0 {
                    tracing::warn!(topic = %queue.topic, partition = queue.partition, trimmed, "dead queue trimmed (cap or retention)");
                }
                Ok(BuryOutcome::Buried)
            }
            "A" => Ok(BuryOutcome::Running),
            "D" => Ok(BuryOutcome::Dead),
            "N" => Ok(BuryOutcome::NotFound),
            other => Err(Error::Protocol(format!("bury: unknown code {other:?}"))),
        }
    }

    async fn update_payload(
        &self,
        queue: &Queue,
        key: &JobKey,
        payload: &[u8],
    ) -> Result<UpdateOutcome> {
        let k = self.keys(queue);
        let s = &self.scripts().update;
        let reply = self
            .run(s, &k, &[], |inv| {
                inv.arg(key.as_str()).arg(payload);
            })
            .await?;
        let code = codes(s.name, reply, 1)?;
        Ok(match code[0] {
            b'A' => UpdateOutcome::Running,
            b'D' => UpdateOutcome::Dead,
            b'N' => UpdateOutcome::NotFound,
            c => {
                UpdateOutcome::Updated(JobState::from_code(c).ok_or_else(|| {
                    Error::Protocol(format!("update: unknown code {:?}", c as char))
                })?)
            }
        })
    }

    async fn control(&self, queue: &Queue, change: &ControlChange) -> Result<ControlState> {
        let k = self.keys(queue);
        let s = &self.scripts().control;
        check_control(change)?;
        let paused = match change.paused {
            None => "",
            Some(true) => "1",
            Some(false) => "0",
        };
        let rate = match change.rate {
            None => String::new(),
            Some(None) => "-".into(),
            Some(Some(r)) => format!("{}/{}", r.count, r.per_ms()),
        };
        let conc = match change.concurrency {
            None => String::new(),
            Some(None) => "-".into(),
            Some(Some(n)) => n.to_string(),
        };
        let throttle = change
            .throttle
            .map(|d| ms(d).to_string())
            .unwrap_or_default();
        let keep = match change.retention {
            None => String::new(),
            Some(None) => "-".into(),
            Some(Some(r)) => r.encode(r.max_kept),
        };
        let events = match change.events {
            None => String::new(),
            Some(None) => "-".into(),
            Some(Some(p)) => p.max_kept.to_string(),
        };
        let max_delay = match change.max_delay {
            None => String::new(),
            Some(None) => "-".into(),
            Some(Some(d)) => ms(d).max(1).to_string(),
        };
        let reply = self
            .run(s, &k, &[], |inv| {
                inv.arg(paused)
                    .arg(&rate)
                    .arg(&conc)
                    .arg(&throttle)
                    .arg(&keep)
                    .arg(&events)
                    .arg(&max_delay);
            })
            .await?;
        let mut r = Reply::new(s.name, reply)?;
        let paused = r.int("paused")? != 0;
        let num = |text: String, what: &str| -> Result<Option<u64>> {
            if text.is_empty() {
                return Ok(None);
            }
            text.parse()
                .map(Some)
                .map_err(|_| Error::Protocol(format!("control: {what} {text:?} is not a number")))
        };
        let rate_n = num(r.string("rate_n")?, "rate_n")?;
        let rate_ms = num(r.string("rate_ms")?, "rate_ms")?;
        let conc = num(r.string("conc")?, "conc")?;
        let until = num(r.string("until")?, "until")?;
        let retention = Retention::decode(&r.string("keep")?);
        let events = num(r.string("events")?, "events")?.map(|max_kept| EventsPolicy { max_kept });
        let max_delay = num(r.string("max_delay")?, "max_delay")?.map(Duration::from_millis);
        Ok(ControlState {
            retention,
            events,
            paused,
            rate: match (rate_n, rate_ms) {
                (Some(n), Some(ms)) => Some(Rate {
                    count: u32::try_from(n).unwrap_or(u32::MAX),
                    per: Duration::from_millis(ms),
                }),
                _ => None,
            },
            concurrency: conc.map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
            throttled_until_ms: until,
            max_delay,
        })
    }

    async fn group(&self, queue: &Queue, change: &GroupChange) -> Result<GroupState> {
        crate::group::check_change(change)?;
        let k = self.keys(queue);
        let s = &self.scripts().group;
        let limits = match &change.limits {
            None => String::new(),
            Some(None) => "-".into(),
            Some(Some(l)) => l.encode(),
        };
        let hold = change
            .hold
            .map(|d| ms(d).max(1).to_string())
            .unwrap_or_default();
        let group = change
            .group
            .as_ref()
            .map_or("", crate::group::GroupName::as_str);
        let reply = self
            .run(s, &k, &[], |inv| {
                inv.arg(group).arg(&limits).arg(&hold);
            })
            .await?;
        let mut r = Reply::new(s.name, reply)?;
        let own = GroupLimits::decode(&r.string("limits")?);
        let default_limits = GroupLimits::decode(&r.string("default limits")?);
        let until = r.string("hold")?;
        let held_until_ms =
            if until.is_empty() {
                None
            } else {
                Some(until.parse().map_err(|_| {
                    Error::Protocol(format!("group: hold {until:?} is not a number"))
                })?)
            };
        Ok(GroupState {
            limits: own,
            default_limits,
            held_until_ms,
            running: r.int("running")?.max(0) as u64,
            waiting: r.int("waiting")?.max(0) as u64,
        })
    }

    async fn job(&self, queue: &Queue, key: &JobKey) -> Result<Option<JobInfo>> {
        let k = self.keys(queue);
        let s = &self.scripts().job;
        let reply = self
            .run(s, &k, &[], |inv| {
                inv.arg(key.as_str());
            })
            .await?;
        type JobReply = (
            Option<Vec<u8>>,
            Option<Vec<u8>>,
            Option<f64>,
            Option<f64>,
            Option<u64>,
            Option<Vec<u8>>,
        );
        let (rec, hist, lease, died, token, progress): JobReply = redis::from_redis_value(reply)
            .map_err(|e| Error::Protocol(format!("script {}: unexpected reply: {e}", s.name)))?;
        let Some(rec) = rec else { return Ok(None) };
        let rec = Record::decode_leased(rec, self.formats.reads(), token)?;
        let history = hist
            .map(|h| decode_history(&h))
            .transpose()?
            .unwrap_or_default();
        Ok(Some(JobInfo {
            key: key.clone(),
            state: rec.state,
            due_ms: rec.due_ms,
            created_ms: rec.created_ms,
            attempts: rec.attempts,
            lease_deadline_ms: lease
                .filter(|_| rec.state == JobState::Active)
                .map(|m| m as u64),
            died_ms: died
                .filter(|_| rec.state == JobState::Dead)
                .map(|m| m as u64),
            expires_ms: rec.expires_ms,
            priority: Priority::new(rec.priority).unwrap_or_default(),
            group: rec.group.clone(),
            batch: rec.batch.clone(),
            history,
            progress: progress
                .filter(|_| rec.state == JobState::Active)
                .map(|p| crate::progress::decode(&p))
                .transpose()?,
            payload: rec.payload,
        }))
    }

    async fn finished(&self, queue: &Queue, key: &JobKey) -> Result<Option<FinishedJob>> {
        let k = self.keys(queue);
        let s = &self.scripts().kept;
        let reply = self
            .run(s, &k, &[], |inv| {
                inv.arg(key.as_str());
            })
            .await?;
        let (value, until): (Option<Vec<u8>>, Option<f64>) = redis::from_redis_value(reply)
            .map_err(|e| Error::Protocol(format!("script {}: unexpected reply: {e}", s.name)))?;
        value
            .map(|v| {
                decode_kept(
                    key.clone(),
                    &v,
                    self.formats.reads(),
                    until.unwrap_or(0.0) as u64,
                )
            })
            .transpose()
    }

    async fn list_finished(
        &self,
        queue: &Queue,
        outcome: FinishedAs,
        from: &ListFrom,
        limit: usize,
    ) -> Result<FinishedChunk> {
        let k = self.keys(queue);
        let s = &self.scripts().list;
        let (after_score, after_key) = match from {
            ListFrom::Start => (String::new(), ""),
            ListFrom::After(pos) => (f64::from_bits(pos.order.0).to_string(), pos.key.as_str()),
            ListFrom::Index(_) => {
                return Err(Error::InvalidConfig(format!(
                    "the {outcome} listing cannot start from {from:?}"
                )));
            }
        };
        if limit == 0 {
            return Ok(FinishedChunk::default());
        }
        let reply = self
            .run(s, &k, &[], |inv| {
                inv.arg("k")
                    .arg(&[outcome.code()][..])
                    .arg(limit)
                    .arg(&after_score)
                    .arg(after_key);
            })
            .await?;
        let mut r = Reply::new(s.name, reply)?;
        let more = r.int("more")? != 0;
        let _ = r.int("next position")?;
        let read_score = r.string("last place read")?;
        let read_key = r.bytes("last key read")?;
        let read_to = if read_score.is_empty() {
            None
        } else {
            let score: f64 = read_score.parse().map_err(|_| {
                Error::Protocol(format!("list: place {read_score:?} is not a number"))
            })?;
            Some(ListPos {
                order: (score.to_bits(), 0),
                key: key_of(read_key)?,
            })
        };
        if r.remaining() % 5 != 0 {
            return Err(Error::Protocol(
                "list: reply is not key, place, record, history, lease groups".into(),
            ));
        }
        let mut jobs = Vec::with_capacity(r.remaining() / 5);
        while r.remaining() > 0 {
            let key = key_of(r.bytes("key")?)?;
            let place = r.string("place")?;
            let score: f64 = place
                .parse()
                .map_err(|_| Error::Protocol(format!("list: place {place:?} is not a number")))?;
            let bytes = r.bytes("kept job")?;
            let _ = r.optional_bytes("history")?;
            let _ = r.optional_int("lease")?;
            // One kept job this dq cannot read (a newer kept-job or record format, damage)
            // is skipped, not the whole page.
            let job = match decode_kept(key.clone(), &bytes, self.formats.reads(), score as u64) {
                Ok(job) => job,
                Err(e) => {
                    tracing::warn!(topic = %queue.topic, %key, error = %e, "kept job skipped in a listing");
                    continue;
                }
            };
            jobs.push((
                ListPos {
                    order: (score.to_bits(), 0),
                    key,
                },
                job,
            ));
        }
        Ok(FinishedChunk {
            jobs,
            more,
            read_to,
        })
    }

    async fn read_events(&self, queue: &Queue, after: EventId, limit: usize) -> Result<Vec<Event>> {
        self.read_events_of(queue, after, limit).await
    }

    async fn last_event(&self, queue: &Queue) -> Result<Option<EventId>> {
        self.last_event_of(queue).await
    }

    async fn stats(&self, queue: &Queue) -> Result<TopicStats> {
        let k = self.keys(queue);
        let s = &self.scripts().stats;
        let reply = self.run(s, &k, &[], |_| {}).await?;
        let mut r = Reply::new(s.name, reply)?;
        let mut st = TopicStats {
            scheduled: r.int("scheduled")? as u64,
            ready: r.int("ready")? as u64,
            active: r.int("active")? as u64,
            retry: r.int("retry")? as u64,
            dead: r.int("dead")? as u64,
            oldest_overdue_ms: r.int("oldest_overdue")?.max(0) as u64,
            overdue: r.int("overdue")?.max(0) as u64,
            ..TopicStats::default()
        };
        while r.remaining() >= 2 {
            let field = r.string("counter")?;
            let value = r.int("counter value")?.max(0) as u64;
            match field.as_str() {
                "enqueued" => st.enqueued = value,
                "succeeded" => st.succeeded = value,
                "retried" => st.retried = value,
                "buried" => st.buried = value,
                "expired" => st.expired = value,
                "expired_before_start" => st.expired_before_start = value,
                "cancelled" => st.cancelled = value,
                "succeeded_after_cancel_request" => st.succeeded_after_cancel_request = value,
                "trimmed" => st.trimmed = value,
                "discarded" => st.discarded = value,
                "throttles" => st.throttles = value,
                "kept_trimmed" => st.kept_trimmed = value,
                "events_lost" => st.events_lost = value,
                "kept" => st.kept = value,
                "paused" => st.paused = value > 0,
                "throttled" => st.throttled = value > 0,
                _ => {}
            }
        }
        Ok(st)
    }

    async fn list(
        &self,
        queue: &Queue,
        state: JobState,
        from: &ListFrom,
        limit: usize,
    ) -> Result<ListChunk> {
        let k = self.keys(queue);
        let s = &self.scripts().list;
        let sorted = state != JobState::Ready;
        let (after_score, after_key, position) = match (sorted, from) {
            (_, ListFrom::Start) => (String::new(), "", 0),
            (true, ListFrom::After(pos)) => (
                // Display prints the shortest text that parses back to the same double.
                f64::from_bits(pos.order.0).to_string(),
                pos.key.as_str(),
                0,
            ),
            (false, ListFrom::Index(i)) => (String::new(), "", *i),
            _ => {
                return Err(Error::InvalidConfig(format!(
                    "the {state} listing cannot start from {from:?}"
                )));
            }
        };
        if limit == 0 {
            return Ok(ListChunk::default());
        }
        let reply = self
            .run(s, &k, &[], |inv| {
                inv.arg(if sorted { "z" } else { "r" })
                    .arg(&[state.code()][..])
                    .arg(limit);
                if sorted {
                    inv.arg(&after_score).arg(after_key);
                } else {
                    inv.arg(position);
                }
            })
            .await?;
        let mut r = Reply::new(s.name, reply)?;
        let more = r.int("more")? != 0;
        let next_index = r.int("next position")?.max(0) as u64;
        if r.remaining() % 5 != 0 {
            return Err(Error::Protocol(
                "list: reply is not key, place, record, history, lease groups".into(),
            ));
        }
        let mut jobs = Vec::with_capacity(r.remaining() / 5);
        while r.remaining() > 0 {
            let key = key_of(r.bytes("key")?)?;
            let place = r.string("place")?;
            let bad_place = || Error::Protocol(format!("list: place {place:?} is not a number"));
            let (order, time) = if sorted {
                let score: f64 = place.parse().map_err(|_| bad_place())?;
                // Scores are never negative, so their bits sort as they do.
                ((score.to_bits(), 0), score as u64)
            } else {
                ((place.parse().map_err(|_| bad_place())?, 0), 0)
            };
            let bytes = r.bytes("record")?;
            let hist = r.optional_bytes("history")?;
            let lease = r.optional_int("lease")?.map(|t| t as u64);
            let rec = Record::decode_leased(bytes, self.formats.reads(), lease)?;
            let info = JobInfo {
                key: key.clone(),
                state: rec.state,
                due_ms: rec.due_ms,
                created_ms: rec.created_ms,
                attempts: rec.attempts,
                lease_deadline_ms: (state == JobState::Active).then_some(time),
                died_ms: (state == JobState::Dead).then_some(time),
                expires_ms: rec.expires_ms,
                priority: Priority::new(rec.priority).unwrap_or_default(),
                group: rec.group.clone(),
                batch: rec.batch.clone(),
                history: hist
                    .map(|h| decode_history(&h))
                    .transpose()?
                    .unwrap_or_default(),
                progress: None,
                payload: rec.payload,
            };
            jobs.push((ListPos { order, key }, info));
        }
        Ok(ListChunk {
            jobs,
            next_index,
            more,
        })
    }

    async fn requeue_dead(&self, queue: &Queue, keys: &[JobKey]) -> Result<Vec<bool>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let k = self.keys(queue);
        let s = &self.scripts().requeue_dead;
        let reply = self
            .run(s, &k, &[], |inv| {
                for key in keys {
                    inv.arg(key.as_str());
                }
            })
            .await?;
        Ok(codes(s.name, reply, keys.len())?
            .into_iter()
            .map(|c| c == b'1')
            .collect())
    }

    async fn purge_dead(&self, queue: &Queue, keys: &[JobKey], limit: usize) -> Result<u64> {
        if limit == 0 {
            return Ok(0);
        }
        let k = self.keys(queue);
        let s = &self.scripts().purge_dead;
        let reply = self
            .run(s, &k, &[], |inv| {
                inv.arg(limit);
                for key in keys {
                    inv.arg(key.as_str());
                }
            })
            .await?;
        as_int(&reply)
            .map(|n| n.max(0) as u64)
            .ok_or_else(|| unexpected(s.name, "count", &reply))
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
        let k = self.keys(queue);
        let s = &self.scripts().dead_act;
        let reply = self
            .run(s, &k, &[], |inv| {
                inv.arg(match action {
                    DeadAction::Requeue => "R",
                    DeadAction::Purge => "P",
                });
                for (key, died) in seen {
                    inv.arg(key.as_str()).arg(*died);
                }
            })
            .await?;
        Ok(codes(s.name, reply, seen.len())?
            .into_iter()
            .map(|c| c == b'1')
            .collect())
    }
}
