//! Periodic jobs through the client: storing, removing and listing schedules
//! ([`Client::schedule`], [`Client::unschedule`], [`Client::schedules`]), and one pass of a
//! scheduler ([`Client::run_schedules`], what every worker runs in a loop). See
//! `crate::schedule` for the exactly-once argument and ARCHITECTURE.md §13.

use std::time::Duration;

use super::enqueue::JobSpec;
use super::handle::Client;
use super::retrying::retry_harmless;
use crate::error::{Error, Result};
use crate::job::{Due, Expiry, Job, from_unix_ms};
use crate::names::Topic;
use crate::payload;
use crate::schedule::{
    MAX_TICKS_PER_PASS, NO_MORE_TICKS, SCHEDULE_LOOKAHEAD, Schedule, ScheduleInfo, ScheduleOutcome,
    ScheduleRecord, check_schedule_name, tick_call_id, tick_key,
};
use crate::store::produce::{EnqueueCall, EnqueueOutcome};

/// What one scheduler pass did ([`Client::run_schedules`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchedulerPass {
    /// The ticks whose jobs this pass stored (created), as `(schedule name, tick ms)`.
    pub created: Vec<(String, u64)>,
    /// How long until the next pass has work: the earliest cursor of the schedules seen, less
    /// the look-ahead (zero if this pass left work, e.g. lost a race). `None`: no schedule of
    /// these topics has a next tick.
    pub wait: Option<Duration>,
}

impl Client {
    /// Stores a periodic schedule named `name` that enqueues a job of `J` with `payload` at
    /// every tick of `schedule`, in the store (for Redis: `<ns>:schedules`, one hash for the
    /// namespace), so that it survives restarts and every worker and tool sees it. The workers
    /// of `J`'s topic run it: each tick's job is enqueued once, by key
    /// `<name>@<tick unix ms>`, however many workers run.
    ///
    /// Declaring the same schedule again (same topic, schedule, policy and payload) changes
    /// nothing ([`ScheduleOutcome::Unchanged`]): call it at every start-up. Another
    /// definition under the name replaces it ([`ScheduleOutcome::Updated`]). The first tick
    /// is the first one at least [`SCHEDULE_LOOKAHEAD`] after now (the store's clock).
    ///
    /// A bad name, or a schedule that never fires, is [`Error::InvalidSchedule`] before
    /// anything is written; the topic's partition count is checked as for an enqueue.
    pub async fn schedule<J: Job>(
        &self,
        name: &str,
        schedule: Schedule,
        payload: J::Payload,
    ) -> Result<ScheduleOutcome> {
        let payload = payload::encode(&payload, self.config.max_payload)?;
        self.schedule_raw(name, J::TOPIC, schedule, payload).await
    }

    /// [`Client::schedule`] with a topic name and a raw MessagePack payload.
    pub async fn schedule_raw(
        &self,
        name: &str,
        topic: &str,
        schedule: Schedule,
        payload: Vec<u8>,
    ) -> Result<ScheduleOutcome> {
        check_schedule_name(name)?;
        let topic = Topic::new(topic)?;
        payload::check_size(&payload, self.config.max_payload)?;
        let definition = schedule.encode(topic.as_str(), &payload)?;
        let (now, _) = retry_harmless(|| self.store.now_ms(), true).await?;
        let lookahead = u64::try_from(SCHEDULE_LOOKAHEAD.as_millis()).unwrap_or(u64::MAX);
        let next_ms = schedule
            .next_after(now.saturating_add(lookahead))
            .ok_or_else(|| {
                Error::InvalidSchedule(format!("schedule {name:?} never fires after now"))
            })?;
        self.topic(topic.as_str())?.check().await?;
        let next_ms = self
            .cursor_of_the_same_schedule(name, topic.as_str(), &schedule, &payload)
            .await?
            .unwrap_or(next_ms);
        let record = ScheduleRecord {
            name: name.to_string(),
            next_ms,
            definition,
        };
        // Harmless to repeat: a retry of an applied put finds its own definition.
        let (outcome, _) = retry_harmless(|| self.store.put_schedule(&record), true).await?;
        self.announce_schedules().await?;
        Ok(outcome)
    }

    /// The cursor of schedule `name` if it is stored with this very definition but its payload
    /// in the positional encoding of an earlier dq (`payload::same_value`): the definition is
    /// then rewritten with the payload by name, and the cursor kept, so a deploy neither skips
    /// nor repeats a tick. `None` otherwise (a new or really changed schedule). One more read
    /// per declaration; the rewrite happens once per schedule, at the first declaration by a
    /// dq that writes names.
    async fn cursor_of_the_same_schedule(
        &self,
        name: &str,
        topic: &str,
        schedule: &Schedule,
        payload: &[u8],
    ) -> Result<Option<u64>> {
        let (records, _) = retry_harmless(|| self.store.schedules(), true).await?;
        let Some(stored) = records.into_iter().find(|r| r.name == name) else {
            return Ok(None);
        };
        let Ok(info) = stored.decode() else {
            return Ok(None);
        };
        let same = info.payload != payload
            && payload::same_value(&info.payload, payload)
            && schedule.encode(topic, &info.payload)? == stored.definition;
        Ok(same.then_some(stored.next_ms))
    }

    /// Deletes schedule `name`; `true` if there was one. Jobs of ticks already enqueued
    /// (up to [`SCHEDULE_LOOKAHEAD`] ahead) still run; cancel them by key (`<name>@<ms>`).
    pub async fn unschedule(&self, name: &str) -> Result<bool> {
        check_schedule_name(name)?;
        let (removed, _) = retry_harmless(|| self.store.remove_schedule(name), true).await?;
        self.announce_schedules().await?;
        Ok(removed)
    }

    /// After a schedule was stored or removed (or found unchanged: an earlier call may have
    /// stopped before this step): wakes this client's schedulers at once, and the workers of
    /// other processes at their next heartbeat (the generation it returns moves). An error
    /// here means the schedule is stored but other workers may see it only at their safety
    /// pass: the caller's retry (`Unchanged`) announces it again.
    async fn announce_schedules(&self) -> Result<()> {
        self.schedules_changed_elsewhere();
        retry_harmless(|| self.store.touch_schedules(), true).await?;
        Ok(())
    }

    /// Every stored schedule, by name, with its next tick. One store round trip.
    pub async fn schedules(&self) -> Result<Vec<ScheduleInfo>> {
        let (records, _) = retry_harmless(|| self.store.schedules(), true).await?;
        records.iter().map(ScheduleRecord::decode).collect()
    }

    /// Changes whenever this client (or a clone) stores or removes a schedule, or a worker's
    /// heartbeat on it finds that another process did: a worker's scheduler built on the
    /// same client then looks at the schedules again (and otherwise sleeps until its next tick).
    #[doc(hidden)]
    pub fn schedules_changed(&self) -> tokio::sync::watch::Receiver<u64> {
        self.schedules_changed.subscribe()
    }

    /// Wakes the schedulers built on this client (`schedules_changed`): what a worker's
    /// heartbeat calls when the store's schedules generation moved.
    #[doc(hidden)]
    pub fn schedules_changed_elsewhere(&self) {
        self.schedules_changed
            .send_modify(|n| *n = n.wrapping_add(1));
    }

    /// One pass of a scheduler over the schedules of the topics `runs` accepts: for each
    /// schedule whose next tick is within [`SCHEDULE_LOOKAHEAD`] (or past), enqueues the
    /// tick's job by key (due at the tick) and moves the cursor with a compare-and-set, as
    /// [`Schedule::plan`] says, up to [`MAX_TICKS_PER_PASS`] ticks per schedule. What every
    /// worker runs in a loop; safe to run in any number of processes at once.
    ///
    /// A schedule that cannot run here (an unreadable definition, a payload over this
    /// client's limit, a topic whose partition count differs) is logged at ERROR and left
    /// alone; a store error ends the pass with the error (the caller tries again).
    #[doc(hidden)]
    pub async fn run_schedules(&self, runs: impl Fn(&str) -> bool) -> Result<SchedulerPass> {
        let records = self.store.schedules().await?;
        let now = self.store.now_ms().await?;
        let lookahead = u64::try_from(SCHEDULE_LOOKAHEAD.as_millis()).unwrap_or(u64::MAX);
        let mut pass = SchedulerPass::default();
        let mut earliest: Option<u64> = None;
        let mut again = false;
        for record in records {
            let info = match record.decode() {
                Ok(info) => info,
                Err(e) => {
                    tracing::error!(schedule = %record.name, error = %e, "schedule cannot run");
                    continue;
                }
            };
            if !runs(&info.topic) {
                continue;
            }
            let mut cursor = record.next_ms;
            for _ in 0..MAX_TICKS_PER_PASS {
                let Some(plan) = info.schedule.plan(cursor, now) else {
                    break;
                };
                if let Some(tick) = plan.enqueue {
                    match self.enqueue_tick(&info, tick).await {
                        Ok(true) => pass.created.push((info.name.clone(), tick)),
                        Ok(false) => {}
                        Err(e) if e.is_retryable() => return Err(e),
                        Err(e) => {
                            tracing::error!(schedule = %info.name, error = %e, "schedule cannot run");
                            cursor = NO_MORE_TICKS; // left alone: not counted for the wait
                            break;
                        }
                    }
                }
                if !self
                    .store
                    .advance_schedule(&info.name, cursor, plan.next)
                    .await?
                {
                    // Another scheduler moved it (or it was removed): look again soon.
                    again = true;
                    break;
                }
                cursor = plan.next;
            }
            if info.schedule.plan(cursor, now).is_some() {
                again = true;
            }
            if cursor != NO_MORE_TICKS {
                earliest = Some(earliest.map_or(cursor, |e| e.min(cursor)));
            }
        }
        pass.wait = if again {
            Some(Duration::ZERO)
        } else {
            earliest.map(|e| Duration::from_millis(e.saturating_sub(lookahead).saturating_sub(now)))
        };
        Ok(pass)
    }

    /// Enqueues one tick's job: key `<name>@<tick>`, due at the tick, with a call id derived
    /// from the key and marked as a retry, so that it finds the receipt of another
    /// scheduler's identical call. `true` if this call created the job.
    async fn enqueue_tick(&self, info: &ScheduleInfo, tick: u64) -> Result<bool> {
        let key = tick_key(&info.name, tick);
        let call = EnqueueCall {
            id: tick_call_id(&key, tick),
            retry: true,
        };
        let topic = self.topic(&info.topic)?;
        // the topic's handler, where this process has it, gives each tick its expiry and
        // priority
        let handler = crate::handler::registered_jobs().find(|d| d.topic == info.topic);
        let expires = handler
            .and_then(|d| d.expires_after_ms)
            .map(|ms| Expiry::AfterDue(Duration::from_millis(ms)));
        let priority = handler
            .and_then(|d| d.priority)
            .and_then(|n| crate::job::Priority::new(n).ok());
        let job = JobSpec {
            payload: info.payload.clone(),
            key: Some(key),
            due: Due::At(from_unix_ms(tick)),
            replace: false,
            expires,
            priority,
            window: None,
            group: None,
            batch: None,
        };
        match topic.enqueue_as(job, call).await {
            Ok(outcome) => Ok(outcome == EnqueueOutcome::Created),
            // a tick caught up after its expiry (workers were down): never run, not enqueued
            Err(Error::InvalidExpiry(why)) => {
                tracing::info!(schedule = %info.name, tick, %why, "a missed tick expired before it could run");
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}
