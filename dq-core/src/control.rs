//! Pause, rate and concurrency limits of a topic, kept in the store and enforced by the
//! store's `fetch` (ARCHITECTURE.md, "Pause, limits and cancelling a running job").
//!
//! A topic's control settings live in each of its partitions (one `control` hash per
//! partition on Redis, in the partition's hash tag), because `fetch` runs on one partition and
//! may only read that partition's keys. The client writes every partition; a rate or a
//! concurrency cap is split between the partitions so that the shares add up to the topic's
//! limit ([`Rate::share`], [`concurrency_share`]).

use std::str::FromStr;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::events::EventsPolicy;
use crate::finished::Retention;

/// A rate limit: at most `count` jobs started per `per`, across every worker of the topic.
///
/// Written `"100/s"`, `"6000/min"`, `"10/h"` or `"5/250ms"` ([`Rate::from_str`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    /// Jobs per period (1 to [`Rate::MAX_COUNT`]).
    pub count: u32,
    /// The period (1 ms to one day).
    pub per: Duration,
}

impl Rate {
    /// Most jobs one rate may allow per period.
    pub const MAX_COUNT: u32 = dq_syntax::MAX_RATE_COUNT;

    /// A rate of `count` jobs per `per`, checked.
    pub fn new(count: u32, per: Duration) -> Result<Rate> {
        let rate = Rate { count, per };
        rate.check()?;
        Ok(rate)
    }

    /// Refuses a count of 0 or above [`Rate::MAX_COUNT`], or a period outside 1 ms – 1 day.
    pub fn check(&self) -> Result<()> {
        if self.count == 0 || self.count > Self::MAX_COUNT {
            return Err(Error::InvalidConfig(format!(
                "rate count {} must be 1 to {}",
                self.count,
                Self::MAX_COUNT
            )));
        }
        if self.per < Duration::from_millis(1) || self.per > Duration::from_secs(86_400) {
            return Err(Error::InvalidConfig(format!(
                "rate period {:?} must be 1 ms to 1 day",
                self.per
            )));
        }
        Ok(())
    }

    /// One partition's share of this rate when the topic has `partitions` partitions: the
    /// same count over a period `partitions` times as long, so the shares add up exactly.
    pub fn share(&self, partitions: u16) -> Rate {
        Rate {
            count: self.count,
            per: self.per * u32::from(partitions.max(1)),
        }
    }

    /// The period in ms.
    pub fn per_ms(&self) -> u64 {
        u64::try_from(self.per.as_millis()).unwrap_or(u64::MAX)
    }
}

impl FromStr for Rate {
    type Err = Error;

    /// Parses `<count>/<unit>`: unit `s`, `sec`, `min`, `m`, `h`, `hour`, or a duration
    /// such as `250ms` or `10s`.
    fn from_str(s: &str) -> Result<Rate> {
        let (count, per_ms) = dq_syntax::parse_rate(s).map_err(Error::InvalidConfig)?;
        Rate::new(count, Duration::from_millis(per_ms))
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.per_ms() {
            1000 => write!(f, "{}/s", self.count),
            60_000 => write!(f, "{}/min", self.count),
            3_600_000 => write!(f, "{}/h", self.count),
            ms => write!(f, "{}/{ms}ms", self.count),
        }
    }
}

/// Partition `partition`'s share of a global concurrency cap of `cap` jobs over `partitions`
/// partitions: `cap / partitions`, one more for the first `cap % partitions`, so the shares
/// add up to `cap`. Every share is at least 1 because a cap below the partition count is
/// refused ([`check_concurrency`]).
pub fn concurrency_share(cap: u32, partitions: u16, partition: u16) -> u32 {
    let p = u32::from(partitions.max(1));
    cap / p + u32::from(u32::from(partition) < cap % p)
}

/// Refuses a global concurrency cap of 0, or one below the topic's partition count (each
/// partition needs a share of at least one running job).
pub fn check_concurrency(cap: u32, partitions: u16) -> Result<()> {
    if cap == 0 || cap < u32::from(partitions) {
        return Err(Error::InvalidConfig(format!(
            "global concurrency {cap} must be at least 1 and at least the topic's {partitions} \
             partitions (each partition enforces its own share)"
        )));
    }
    Ok(())
}

/// Refuses a `max_delay` of zero or past what dq can store ([`MAX_DUE_MS`](crate::MAX_DUE_MS)).
pub fn check_max_delay(d: Duration) -> Result<()> {
    if d.is_zero() || d.as_millis() > u128::from(crate::job::MAX_DUE_MS) {
        return Err(Error::InvalidConfig(format!(
            "max_delay {d:?} must be more than zero and within what dq can store"
        )));
    }
    Ok(())
}

/// A change to one partition's control settings; `None` leaves a setting as it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ControlChange {
    /// Pause (`Some(true)`) or resume (`Some(false)`) leasing.
    pub paused: Option<bool>,
    /// Set (`Some(Some(rate))`, this partition's share) or remove (`Some(None)`) the rate.
    pub rate: Option<Option<Rate>>,
    /// Set (this partition's share) or remove the concurrency cap.
    pub concurrency: Option<Option<u32>>,
    /// Lease nothing for this long from now (the store's clock) — a handler's
    /// [`JobError::rate_limited`](crate::JobError::rate_limited), carried by its worker to the
    /// topic's other partitions. Never shortens a throttle already in place.
    pub throttle: Option<Duration>,
    /// Set (`Some(Some(retention))`, with this partition's share of the cap as `max_kept`) or
    /// remove (`Some(None)`) which finished jobs the partition keeps.
    pub retention: Option<Option<Retention>>,
    /// Record events (`Some(Some(policy))`, with this partition's share of the bound) or
    /// stop (`Some(None)`).
    pub events: Option<Option<EventsPolicy>>,
    /// Set (`Some(Some(d))`) or remove (`Some(None)`) the furthest from now a due time may be
    /// ([`check_max_delay`]).
    pub max_delay: Option<Option<Duration>>,
}

/// One partition's control settings as stored, read by [`Operate::control`](crate::store::Operate::control).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ControlState {
    /// Which finished jobs the partition keeps (`max_kept`: its share of the cap).
    pub retention: Option<Retention>,
    /// Whether the partition records events, and its share of the bound.
    pub events: Option<EventsPolicy>,
    /// Leasing is paused.
    pub paused: bool,
    /// The partition's share of the rate limit.
    pub rate: Option<Rate>,
    /// The partition's share of the global concurrency cap.
    pub concurrency: Option<u32>,
    /// A handler asked to slow the topic down ([`JobError::rate_limited`](crate::JobError::rate_limited)):
    /// nothing is leased before this store time (ms).
    pub throttled_until_ms: Option<u64>,
    /// The furthest from now a due time may be (enqueue and reschedule refuse one beyond
    /// it with [`Error::DelayTooLong`]).
    pub max_delay: Option<Duration>,
}

/// A topic's control settings, as the client reports them ([`TopicClient::control`](crate::TopicClient::control)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TopicControl {
    /// Leasing is paused (in any partition: a pause or resume interrupted half-way shows as
    /// paused until repeated).
    pub paused: bool,
    /// The topic's rate limit.
    pub rate: Option<Rate>,
    /// The topic's global concurrency cap.
    pub concurrency: Option<u32>,
    /// The latest throttle time a handler asked for, if still in the future when read.
    pub throttled_until_ms: Option<u64>,
    /// Which finished jobs the topic keeps, and how many at most (partition 0's policy, the
    /// caps of all partitions summed).
    pub retention: Option<Retention>,
    /// Whether the topic records events ([`crate::events`]), with the bounds of all
    /// partitions summed.
    pub events: Option<EventsPolicy>,
    /// The furthest from now a due time may be (partition 0's setting;
    /// [`TopicClient::set_max_delay`](crate::TopicClient::set_max_delay)).
    pub max_delay: Option<Duration>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse() {
        let r: Rate = "100/s".parse().unwrap();
        assert_eq!((r.count, r.per), (100, Duration::from_secs(1)));
        let r: Rate = "6000/min".parse().unwrap();
        assert_eq!((r.count, r.per), (6000, Duration::from_secs(60)));
        let r: Rate = "5/250ms".parse().unwrap();
        assert_eq!((r.count, r.per), (5, Duration::from_millis(250)));
        assert_eq!(r.to_string(), "5/250ms");
        assert_eq!("100/s".parse::<Rate>().unwrap().to_string(), "100/s");
        for bad in [
            "",
            "100",
            "0/s",
            "x/s",
            "10/parsec",
            "10/0ms",
            "2000000/s",
            "-1/s",
        ] {
            assert!(
                matches!(bad.parse::<Rate>(), Err(Error::InvalidConfig(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn shares_add_up() {
        for (cap, p) in [(10, 3), (3, 3), (7, 1), (100, 16)] {
            let sum: u32 = (0..p).map(|i| concurrency_share(cap, p, i)).sum();
            assert_eq!(sum, cap);
            assert!((0..p).all(|i| concurrency_share(cap, p, i) >= 1));
        }
        assert!(check_concurrency(2, 3).is_err());
        assert!(check_concurrency(0, 1).is_err());
        assert!(check_concurrency(3, 3).is_ok());
        let r = Rate::new(100, Duration::from_secs(1)).unwrap().share(4);
        assert_eq!(r.per, Duration::from_secs(4));
    }
}
