//! Periodic jobs: a [`Schedule`] (a cron expression in a time zone, or a fixed interval) that
//! enqueues a job of a topic at every tick, stored in the store so that it survives restarts
//! and tools can list it ([`Client::schedule`](crate::Client::schedule),
//! [`Client::schedules`](crate::Client::schedules)).
//!
//! **Exactly once per tick, without a leader.** Every worker of the schedule's topic runs a
//! scheduler (`dq-worker`); each one, for a tick that is due within [`SCHEDULE_LOOKAHEAD`],
//! enqueues the tick's job *by key* — `<schedule name>@<tick unix ms>`, due at the tick — and
//! then moves the schedule's cursor (its next tick) forward with a compare-and-set
//! ([`Catalog::advance_schedule`](crate::store::Catalog::advance_schedule)). Two workers that race
//! enqueue the same key (the second gets `Exists`) and only one of them moves the cursor; a
//! worker that dies between the two steps leaves the cursor where it was, and the next
//! scheduler enqueues the same key again, which finds the job (or the enqueue call's receipt:
//! the call id is derived from the key too). ARCHITECTURE.md §13.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
pub use dq_syntax::schedule::MissedSpec as Missed;
use dq_syntax::schedule::Ticks;

/// How far ahead of a tick a scheduler enqueues its job (due at the tick, so it still starts
/// on time to the millisecond).
pub const SCHEDULE_LOOKAHEAD: Duration = Duration::from_secs(5);

/// How late a scheduler may find a tick and still run it as on time: a tick whose time had
/// passed by more than this when a scheduler first saw it was *missed* (no worker ran the
/// schedule then), and the schedule's [`Missed`] policy decides.
pub const MISSED_GRACE: Duration = Duration::from_secs(10);

/// Most ticks of one schedule a scheduler enqueues in one pass (a 1 s interval with the 5 s
/// look-ahead needs a few; more wait for the next pass).
pub const MAX_TICKS_PER_PASS: usize = 100;

/// The cursor of a schedule that has no further tick (a cron expression that never matches
/// again).
pub const NO_MORE_TICKS: u64 = u64::MAX;

/// When a periodic job runs: `Schedule::cron("0 */5 * * * *")?.tz("Europe/Berlin")?` or
/// `Schedule::every(Duration::from_secs(300))?`, with a policy for missed ticks
/// (`.missed(Missed::Skip)`; default [`Missed::RunOnce`]).
///
/// A cron expression has 5 fields (minute, hour, day of month, month, day of week; second 0)
/// or 6 (a second first), in the time zone given (default UTC). Daylight saving time: a
/// fixed-time expression (one second, minute and hour, e.g. `0 30 2 * * *`) whose time a
/// spring-forward gap removes runs once, at the first instant after the gap (03:00 in
/// Berlin); one whose time a fall-back repeats runs once, at the earlier instant. Interval
/// and wildcard expressions (`0 */5 * * * *`) follow real time: none in the gap, both in a
/// repeated hour. `every(d)` ticks at every multiple of `d` since the Unix epoch (so every 5
/// minutes is at :00, :05, …), at least 1 s.
#[derive(Clone, Debug)]
pub struct Schedule {
    spec: Spec,
    missed: Missed,
    ticks: Ticks,
}

/// A schedule's definition as text: what is stored and compared.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Spec {
    Cron { expr: String, tz: Option<String> },
    Every { ms: u64 },
}

impl Schedule {
    /// A cron schedule in UTC (set another zone with [`Schedule::tz`]). An expression croner
    /// refuses is [`Error::InvalidSchedule`].
    pub fn cron(expr: &str) -> Result<Schedule> {
        let ticks = Ticks::cron(expr, None).map_err(Error::InvalidSchedule)?;
        Ok(Schedule {
            spec: Spec::Cron {
                expr: expr.trim().to_string(),
                tz: None,
            },
            missed: Missed::default(),
            ticks,
        })
    }

    /// The IANA time zone a cron schedule's fields are read in (`"Europe/Berlin"`); an
    /// unknown zone, or a zone on an interval schedule, is [`Error::InvalidSchedule`].
    pub fn tz(self, zone: &str) -> Result<Schedule> {
        let Spec::Cron { expr, .. } = self.spec else {
            return Err(Error::InvalidSchedule(
                "a time zone applies to cron schedules only".into(),
            ));
        };
        let ticks = Ticks::cron(&expr, Some(zone)).map_err(Error::InvalidSchedule)?;
        Ok(Schedule {
            spec: Spec::Cron {
                expr,
                tz: Some(zone.to_string()),
            },
            ticks,
            ..self
        })
    }

    /// A tick every `interval` (whole ms, at least 1 s, at most 365 days), at the multiples
    /// of `interval` since the Unix epoch.
    pub fn every(interval: Duration) -> Result<Schedule> {
        let ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
        if u128::from(ms) * 1_000_000 != interval.as_nanos() {
            return Err(Error::InvalidSchedule(format!(
                "an interval must be whole milliseconds, not {interval:?}"
            )));
        }
        let ticks = Ticks::every(ms).map_err(Error::InvalidSchedule)?;
        Ok(Schedule {
            spec: Spec::Every { ms },
            missed: Missed::default(),
            ticks,
        })
    }

    /// What happens to ticks missed while no worker ran the schedule (all workers down):
    /// [`Missed::RunOnce`] (the default) runs the latest of them once, as soon as a worker is
    /// back; [`Missed::Skip`] drops them. A tick found up to [`MISSED_GRACE`] late is not
    /// missed.
    pub fn missed(mut self, policy: Missed) -> Schedule {
        self.missed = policy;
        self
    }

    /// The missed-tick policy.
    pub fn missed_policy(&self) -> Missed {
        self.missed
    }

    /// The cron expression, or `None` for an interval schedule.
    pub fn cron_expr(&self) -> Option<&str> {
        match &self.spec {
            Spec::Cron { expr, .. } => Some(expr),
            Spec::Every { .. } => None,
        }
    }

    /// The time zone of a cron schedule (`None`: UTC, or an interval schedule).
    pub fn time_zone(&self) -> Option<&str> {
        match &self.spec {
            Spec::Cron { tz, .. } => tz.as_deref(),
            Spec::Every { .. } => None,
        }
    }

    /// The interval of an `every` schedule.
    pub fn interval(&self) -> Option<Duration> {
        match self.spec {
            Spec::Every { ms } => Some(Duration::from_millis(ms)),
            Spec::Cron { .. } => None,
        }
    }

    /// The first tick strictly after `unix_ms`, in Unix ms; `None` if it never ticks again.
    pub fn next_after(&self, unix_ms: u64) -> Option<u64> {
        self.ticks.next_after(unix_ms)
    }

    /// The last tick at or before `unix_ms`, in Unix ms.
    pub fn last_at_or_before(&self, unix_ms: u64) -> Option<u64> {
        self.ticks.last_at_or_before(unix_ms)
    }

    /// What a scheduler does with a schedule whose cursor (next tick) is `cursor`, at store
    /// time `now` (both Unix ms): `None` while the cursor is more than [`SCHEDULE_LOOKAHEAD`]
    /// away; else which tick to enqueue (if any) and the cursor to move to.
    pub fn plan(&self, cursor: u64, now: u64) -> Option<TickPlan> {
        let lookahead = ms(SCHEDULE_LOOKAHEAD);
        let grace = ms(MISSED_GRACE);
        if cursor == NO_MORE_TICKS || cursor > now.saturating_add(lookahead) {
            return None;
        }
        let after = |tick: u64| self.next_after(tick).unwrap_or(NO_MORE_TICKS);
        if cursor.saturating_add(grace) >= now {
            return Some(TickPlan {
                enqueue: Some(cursor),
                next: after(cursor),
            });
        }
        // Missed: the ticks from `cursor` to `now` passed with no scheduler running.
        let last = self
            .last_at_or_before(now)
            .filter(|last| *last >= cursor)
            .unwrap_or(cursor);
        let on_time = last.saturating_add(grace) >= now;
        let enqueue = match self.missed {
            _ if on_time => Some(last),
            Missed::RunOnce => Some(last),
            Missed::Skip => None,
        };
        Some(TickPlan {
            enqueue,
            next: after(last),
        })
    }

    /// The definition as stored (MessagePack), with the topic and payload.
    pub(crate) fn encode(&self, topic: &str, payload: &[u8]) -> Result<Vec<u8>> {
        let def = Definition {
            v: 1,
            topic: topic.to_string(),
            spec: self.spec.clone(),
            missed: self.missed.as_str().to_string(),
            payload: payload.to_vec(),
        };
        rmp_serde::to_vec_named(&def).map_err(|e| Error::Encode(e.to_string()))
    }
}

/// What [`Schedule::plan`] decided for one step of a schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TickPlan {
    /// The tick whose job to enqueue (Unix ms), or `None` (missed ticks, skipped).
    pub enqueue: Option<u64>,
    /// The schedule's next cursor ([`NO_MORE_TICKS`] when it has none).
    pub next: u64,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A schedule as stored: the definition (topic, schedule, missed policy, payload) and the
/// cursor. The format is versioned (`v`), fields by name.
#[derive(Serialize, Deserialize)]
struct Definition {
    v: u32,
    topic: String,
    spec: Spec,
    missed: String,
    payload: Vec<u8>,
}

/// One stored schedule as a store keeps it: its name, its cursor (the next tick to run, Unix
/// ms by the store's clock; [`NO_MORE_TICKS`] when none) and its definition (opaque bytes to
/// the store; [`ScheduleRecord::decode`] reads them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleRecord {
    /// The schedule's name, unique in the store (for Redis: the namespace).
    pub name: String,
    /// The next tick, Unix ms.
    pub next_ms: u64,
    /// The encoded definition.
    pub definition: Vec<u8>,
}

/// Largest stored definition (a payload up to the default 1 MiB limit, and the rest).
pub const MAX_SCHEDULE_DEFINITION: usize = 2 * 1024 * 1024;

impl ScheduleRecord {
    /// Checks what a store is asked to keep: a valid name and a definition of 1 to
    /// [`MAX_SCHEDULE_DEFINITION`] bytes.
    pub(crate) fn validate(&self) -> Result<()> {
        check_schedule_name(&self.name)?;
        if self.definition.is_empty() || self.definition.len() > MAX_SCHEDULE_DEFINITION {
            return Err(Error::InvalidSchedule(format!(
                "schedule {:?}: a definition of {} bytes (1 to {MAX_SCHEDULE_DEFINITION})",
                self.name,
                self.definition.len()
            )));
        }
        Ok(())
    }

    /// Reads the definition.
    pub fn decode(&self) -> Result<ScheduleInfo> {
        let def: Definition = rmp_serde::from_slice(&self.definition)
            .map_err(|e| Error::Protocol(format!("unreadable schedule {:?}: {e}", self.name)))?;
        let missed = dq_syntax::schedule::parse_missed(&def.missed)
            .map_err(|e| Error::Protocol(format!("schedule {:?}: {e}", self.name)))?;
        let ticks = match &def.spec {
            Spec::Cron { expr, tz } => Ticks::cron(expr, tz.as_deref()),
            Spec::Every { ms } => Ticks::every(*ms),
        }
        .map_err(|e| Error::InvalidSchedule(format!("schedule {:?}: {e}", self.name)))?;
        Ok(ScheduleInfo {
            name: self.name.clone(),
            topic: def.topic,
            schedule: Schedule {
                spec: def.spec,
                missed,
                ticks,
            },
            next_ms: (self.next_ms != NO_MORE_TICKS).then_some(self.next_ms),
            payload: def.payload,
        })
    }
}

/// A stored schedule, as [`Client::schedules`](crate::Client::schedules) lists it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ScheduleInfo {
    /// Its name.
    pub name: String,
    /// The topic whose job it enqueues at each tick.
    pub topic: String,
    /// When it ticks.
    pub schedule: Schedule,
    /// Its next tick (Unix ms, the store's clock), or `None` if it never ticks again.
    pub next_ms: Option<u64>,
    /// The payload each tick's job carries (MessagePack).
    pub payload: Vec<u8>,
}

impl ScheduleInfo {
    /// Its next tick as a time.
    pub fn next(&self) -> Option<SystemTime> {
        self.next_ms.map(crate::job::from_unix_ms)
    }
}

/// What [`Client::schedule`](crate::Client::schedule) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScheduleOutcome {
    /// A new schedule was stored.
    Created,
    /// A schedule of that name with another definition was replaced; its cursor starts
    /// again from now.
    Updated,
    /// A schedule of that name with the same definition exists: it is kept as it is, cursor
    /// included (so a process that declares its schedules at every start neither skips nor
    /// repeats a tick).
    Unchanged,
}

/// Checks a schedule name: like a topic name, 1–128 characters of `[A-Za-z0-9._-]` (it is
/// the first part of each tick's job key, `<name>@<tick ms>`).
pub fn check_schedule_name(name: &str) -> Result<()> {
    dq_syntax::check_topic(name)
        .map_err(|reason| Error::InvalidSchedule(format!("schedule name {name:?}: {reason}")))
}

/// The key of the job a schedule enqueues for one tick.
pub fn tick_key(name: &str, tick_ms: u64) -> String {
    format!("{name}@{tick_ms}")
}

/// The enqueue call id of a tick's job: the same in every worker, so that a scheduler that
/// repeats another's enqueue finds that call's receipt even when the job has already run.
pub(crate) fn tick_call_id(key: &str, tick_ms: u64) -> u64 {
    (u64::from(crc32fast::hash(key.as_bytes())) << 32) | (tick_ms & 0xFFFF_FFFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_schedules_are_typed_errors() {
        assert!(matches!(
            Schedule::cron("61 * * * *"),
            Err(Error::InvalidSchedule(_))
        ));
        assert!(matches!(
            Schedule::cron("* * * * *").unwrap().tz("Nowhere/Else"),
            Err(Error::InvalidSchedule(_))
        ));
        assert!(matches!(
            Schedule::every(Duration::from_millis(10)),
            Err(Error::InvalidSchedule(_))
        ));
        assert!(matches!(
            Schedule::every(Duration::from_secs(60)).unwrap().tz("UTC"),
            Err(Error::InvalidSchedule(_))
        ));
        assert!(check_schedule_name("nightly.report").is_ok());
        assert!(check_schedule_name("has space").is_err());
    }

    #[test]
    fn plan_runs_on_time_ticks_and_applies_the_missed_policy() {
        let every = Schedule::every(Duration::from_secs(60)).unwrap();
        // Far ahead: nothing yet.
        assert_eq!(every.plan(600_000, 500_000), None);
        // Within the look-ahead: enqueue the tick, move on one.
        assert_eq!(
            every.plan(600_000, 596_000),
            Some(TickPlan {
                enqueue: Some(600_000),
                next: 660_000
            })
        );
        // A few seconds late: still on time.
        assert_eq!(every.plan(600_000, 605_000).unwrap().enqueue, Some(600_000));
        // An hour of ticks missed: the last one, once.
        let now = 600_000 + 3_600_000 + 30_000;
        assert_eq!(
            every.plan(600_000, now),
            Some(TickPlan {
                enqueue: Some(4_200_000),
                next: 4_260_000
            })
        );
        let skip = every.clone().missed(Missed::Skip);
        assert_eq!(
            skip.plan(600_000, now),
            Some(TickPlan {
                enqueue: None,
                next: 4_260_000
            })
        );
        // Skip still runs a last tick that is itself on time.
        assert_eq!(
            skip.plan(600_000, 4_201_000).unwrap().enqueue,
            Some(4_200_000)
        );
    }

    #[test]
    fn definitions_round_trip() {
        let s = Schedule::cron("0 */5 * * * *")
            .unwrap()
            .tz("Europe/Berlin")
            .unwrap()
            .missed(Missed::Skip);
        let record = ScheduleRecord {
            name: "n".into(),
            next_ms: 7,
            definition: s.encode("t", &[1, 2]).unwrap(),
        };
        let info = record.decode().unwrap();
        assert_eq!(info.topic, "t");
        assert_eq!(info.payload, vec![1, 2]);
        assert_eq!(info.schedule.cron_expr(), Some("0 */5 * * * *"));
        assert_eq!(info.schedule.time_zone(), Some("Europe/Berlin"));
        assert_eq!(info.schedule.missed_policy(), Missed::Skip);
        assert_eq!(info.next_ms, Some(7));
    }
}
