//! Periodic schedules: a cron expression in a time zone, or a fixed interval, and what to do
//! with ticks nobody was there to run. Shared by `#[delayed_job(cron = …, tz = …)]` (checked
//! at compile time) and `dq::Schedule` (at run time), so both accept exactly the same text.
//!
//! ```text
//! cron   := [second] minute hour day-of-month month day-of-week     5 or 6 fields (croner,
//!                                                                   Vixie/OCPS syntax; no year)
//! tz     := an IANA time zone name ("Europe/Berlin", "UTC"), from the system's tz database,
//!           else the copy compiled into jiff
//! missed := "once" | "skip"
//! ```
//!
//! Ticks are whole seconds for cron (at most one per second) and multiples of the interval
//! since the Unix epoch for `every`. Daylight saving time follows croner: a fixed-time
//! expression (single second, minute and hour, e.g. `0 30 2 * * *`) whose wall-clock time
//! falls into a spring-forward gap runs once, at the first instant after the gap (03:00 in
//! Berlin); in a fall-back overlap it runs once, at the earlier of the two instants. An
//! interval or wildcard expression (`0 */5 * * * *`) skips the wall-clock times the gap
//! removes and runs at both instants of a repeated hour (it follows real time).

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::Timestamp;
use jiff::tz::TimeZone;

/// Shortest interval of an `every` schedule, in ms.
pub const MIN_EVERY_MS: u64 = 1_000;

/// Parses a cron expression of 5 fields (minute precision, second 0) or 6 (with seconds
/// first). Returns why it is refused.
pub fn parse_cron(expr: &str) -> Result<Cron, String> {
    let parser = CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build();
    parser
        .parse(expr)
        .map_err(|e| format!("invalid cron expression `{expr}`: {e}"))
}

/// Looks up an IANA time zone name. Returns why it is refused.
pub fn parse_tz(name: &str) -> Result<TimeZone, String> {
    TimeZone::get(name).map_err(|e| format!("unknown time zone `{name}`: {e}"))
}

/// Checks an `every` interval: at least [`MIN_EVERY_MS`], at most 365 days.
pub fn check_every_ms(ms: u64) -> Result<u64, String> {
    if ms < MIN_EVERY_MS {
        return Err(format!(
            "an interval of {ms} ms is shorter than the minimum of {MIN_EVERY_MS} ms"
        ));
    }
    if ms > crate::MAX_DELAY_MS {
        return Err(format!("an interval of {ms} ms is longer than 365 days"));
    }
    Ok(ms)
}

/// What the scheduler does with ticks whose time passed while no worker ran the schedule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MissedSpec {
    /// The latest of the missed ticks runs once, as soon as a worker is back; the others
    /// are dropped. The default.
    #[default]
    RunOnce,
    /// Missed ticks are dropped; the schedule goes on with the next tick.
    Skip,
}

impl MissedSpec {
    /// The text form: `once` or `skip`.
    pub fn as_str(self) -> &'static str {
        match self {
            MissedSpec::RunOnce => "once",
            MissedSpec::Skip => "skip",
        }
    }
}

/// Parses `once` or `skip`.
pub fn parse_missed(text: &str) -> Result<MissedSpec, String> {
    match text.trim() {
        "once" => Ok(MissedSpec::RunOnce),
        "skip" => Ok(MissedSpec::Skip),
        other => Err(format!(
            "unknown missed-tick policy `{other}`: expected \"once\" or \"skip\""
        )),
    }
}

/// When a schedule ticks, ready to compute ticks.
#[derive(Clone, Debug)]
pub enum Ticks {
    /// A cron expression in a time zone.
    Cron {
        /// The parsed expression.
        cron: Box<Cron>,
        /// The time zone its wall-clock fields are read in.
        tz: TimeZone,
    },
    /// Every `ms` milliseconds since the Unix epoch.
    Every {
        /// The interval, at least [`MIN_EVERY_MS`].
        ms: u64,
    },
}

impl Ticks {
    /// A cron schedule; `tz` is `None` for UTC.
    pub fn cron(expr: &str, tz: Option<&str>) -> Result<Ticks, String> {
        let cron = parse_cron(expr)?;
        let tz = match tz {
            Some(name) => parse_tz(name)?,
            None => TimeZone::UTC,
        };
        Ok(Ticks::Cron {
            cron: Box::new(cron),
            tz,
        })
    }

    /// An interval schedule.
    pub fn every(ms: u64) -> Result<Ticks, String> {
        Ok(Ticks::Every {
            ms: check_every_ms(ms)?,
        })
    }

    /// The first tick strictly after `ms` (Unix ms), or `None` if there is none (an
    /// expression that never matches again, or a time out of range).
    pub fn next_after(&self, ms: u64) -> Option<u64> {
        match self {
            Ticks::Every { ms: every } => (ms / every).checked_add(1)?.checked_mul(*every),
            Ticks::Cron { cron, tz } => {
                // Ticks are whole seconds: searching after the second `ms` falls in finds the
                // first tick after `ms` itself.
                let start = Timestamp::from_second(i64::try_from(ms / 1000).ok()?).ok()?;
                let next = cron
                    .find_next_occurrence(&start.to_zoned(tz.clone()), false)
                    .ok()?;
                u64::try_from(next.timestamp().as_millisecond()).ok()
            }
        }
    }

    /// The last tick at or before `ms` (Unix ms), or `None` if there is none.
    pub fn last_at_or_before(&self, ms: u64) -> Option<u64> {
        match self {
            Ticks::Every { ms: every } => Some(ms / every * every),
            Ticks::Cron { cron, tz } => {
                let start = Timestamp::from_second(i64::try_from(ms / 1000).ok()?).ok()?;
                let last = cron
                    .find_previous_occurrence(&start.to_zoned(tz.clone()), true)
                    .ok()?;
                u64::try_from(last.timestamp().as_millisecond()).ok()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(text: &str) -> u64 {
        text.parse::<Timestamp>().unwrap().as_millisecond() as u64
    }

    #[test]
    fn bad_input_is_refused_with_a_reason() {
        assert!(parse_cron("0 */5 * * * *").is_ok());
        assert!(parse_cron("*/5 * * * *").is_ok());
        for bad in [
            "",
            "61 * * * * *",
            "* * *",
            "0 0 0 * * * 2030",
            "every 5 minutes",
        ] {
            let e = parse_cron(bad).unwrap_err();
            assert!(e.contains("invalid cron expression"), "{bad}: {e}");
        }
        assert!(parse_tz("Europe/Berlin").is_ok());
        assert!(
            parse_tz("Mars/Olympus")
                .unwrap_err()
                .contains("unknown time zone")
        );
        assert_eq!(parse_missed("skip"), Ok(MissedSpec::Skip));
        assert!(parse_missed("twice").is_err());
        assert!(check_every_ms(999).is_err());
        assert!(check_every_ms(1000).is_ok());
    }

    #[test]
    fn every_ticks_on_multiples_of_the_interval() {
        let t = Ticks::every(300_000).unwrap();
        assert_eq!(t.next_after(0), Some(300_000));
        assert_eq!(t.next_after(299_999), Some(300_000));
        assert_eq!(t.next_after(300_000), Some(600_000));
        assert_eq!(t.last_at_or_before(599_999), Some(300_000));
    }

    #[test]
    fn cron_ticks_in_its_time_zone() {
        let t = Ticks::cron("0 30 2 * * *", Some("Europe/Berlin")).unwrap();
        // 2026-07-01 02:30 CEST = 00:30 UTC.
        let first = t.next_after(ms("2026-06-30T12:00:00Z")).unwrap();
        assert_eq!(first, ms("2026-07-01T00:30:00Z"));
        assert_eq!(t.last_at_or_before(first), Some(first));
        assert_eq!(t.last_at_or_before(first - 1), Some(first - 86_400_000));
        // Mid-second starts find the tick after the start itself.
        assert_eq!(t.next_after(first - 500), Some(first));
        assert_eq!(t.next_after(first + 500), Some(ms("2026-07-02T00:30:00Z")));
    }

    /// 02:30 every day in Berlin: on spring-forward day (2026-03-29, 02:00 → 03:00) it runs
    /// once, at 03:00 CEST (croner's fixed-time rule); on fall-back day (2026-10-25, 03:00 →
    /// 02:00) it runs once, at the first 02:30 (CEST), not again at 02:30 CET.
    #[test]
    fn a_daily_0230_runs_once_on_both_dst_days() {
        let t = Ticks::cron("0 30 2 * * *", Some("Europe/Berlin")).unwrap();
        let spring = t.next_after(ms("2026-03-28T12:00:00Z")).unwrap();
        assert_eq!(spring, ms("2026-03-29T01:00:00Z"), "03:00 CEST");
        assert_eq!(
            t.next_after(spring),
            Some(ms("2026-03-30T00:30:00Z")),
            "then 02:30 CEST"
        );
        let fall = t.next_after(ms("2026-10-24T12:00:00Z")).unwrap();
        assert_eq!(fall, ms("2026-10-25T00:30:00Z"), "02:30 CEST, the earlier");
        assert_eq!(
            t.next_after(fall),
            Some(ms("2026-10-26T01:30:00Z")),
            "next day 02:30 CET: not 01:30Z on the 25th"
        );
    }
}
