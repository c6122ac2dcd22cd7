//! Groups: fair turns and limits per group of a topic's jobs (a tenant, a customer, an API
//! key), README "Groups" and ARCHITECTURE.md §2 ("Groups").
//!
//! A job enqueued with [`Enqueue::group`](crate::Enqueue::group) waits, once due, in its
//! group's queue instead of the topic's. A fetch serves the groups of its partition in turns
//! (round robin; a group's [`GroupLimits::weight`] is how many jobs it may start per turn), and
//! never starts a job of a group at its concurrency cap, over its rate, or held by a handler's
//! [`JobError::rate_limited`](crate::JobError::rate_limited). A fetch looks at a bounded number
//! of groups (those whose turn it is), whatever the number of groups with work.
//!
//! Limits are set at run time, as the topic's are: one default for every group of the topic,
//! and overrides for single groups ([`TopicClient::set_group_limits`](crate::TopicClient::set_group_limits)).
//! As with the topic's limits each partition enforces its share: a group's concurrency cap is
//! split between the partitions (so it must be at least the partition count) and its rate too.

use std::time::Duration;

use crate::control::Rate;
use crate::error::{Error, Result};
use crate::names::is_format;

/// The most bytes a group name may have.
pub const MAX_GROUP_LEN: usize = 64;

/// The most jobs a group may start per turn ([`GroupLimits::weight`]).
pub const MAX_GROUP_WEIGHT: u32 = 1000;

/// A validated group name: 1–64 bytes of visible text (no whitespace, no control or invisible
/// format characters), as a job key is.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupName(String);

impl GroupName {
    /// Validates `name` as a group name; [`Error::InvalidGroup`] says why one is refused.
    pub fn new(name: impl Into<String>) -> Result<Self> {
        let name = name.into();
        let reason = if name.is_empty() {
            Some("must not be empty".to_owned())
        } else if name.len() > MAX_GROUP_LEN {
            Some(format!("longer than {MAX_GROUP_LEN} bytes"))
        } else {
            name.char_indices()
                .find(|(_, c)| c.is_whitespace() || c.is_control() || is_format(*c))
                .map(|(at, c)| {
                    format!(
                        "whitespace, control and invisible format characters are not allowed; \
                         found U+{:04X} at byte {at}",
                        u32::from(c)
                    )
                })
        };
        match reason {
            Some(reason) => Err(Error::InvalidGroup { name, reason }),
            None => Ok(GroupName(name)),
        }
    }

    /// A name read back from a stored record (not checked again: it was when stored).
    pub(crate) fn stored(name: String) -> Self {
        GroupName(name)
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for GroupName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::fmt::Debug for GroupName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

impl AsRef<str> for GroupName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// The limits of a group: how many of its jobs may run at once across the topic, how many may
/// start per period, and how many it may start per turn when groups share a fetch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupLimits {
    /// At most this many of the group's jobs run at once (none: no cap). Split between the
    /// partitions like the topic's cap, so at least the partition count.
    pub concurrency: Option<u32>,
    /// At most this many of the group's jobs start per period (none: no rate).
    pub rate: Option<Rate>,
    /// Jobs the group may start per turn (1 to [`MAX_GROUP_WEIGHT`]; default 1): a group of
    /// weight 3 gets three times the share of a group of weight 1 while both have work.
    pub weight: u32,
}

impl Default for GroupLimits {
    fn default() -> Self {
        GroupLimits {
            concurrency: None,
            rate: None,
            weight: 1,
        }
    }
}

impl GroupLimits {
    /// No cap, no rate, weight 1.
    pub fn new() -> Self {
        GroupLimits::default()
    }

    /// With a cap of `n` jobs running at once.
    pub fn concurrency(mut self, n: u32) -> Self {
        self.concurrency = Some(n);
        self
    }

    /// With a rate limit.
    pub fn rate(mut self, rate: Rate) -> Self {
        self.rate = Some(rate);
        self
    }

    /// With a weight (jobs per turn).
    pub fn weight(mut self, weight: u32) -> Self {
        self.weight = weight;
        self
    }

    /// Refuses a cap of zero or below the partition count, a bad rate, or a weight outside
    /// 1 to [`MAX_GROUP_WEIGHT`] ([`Error::InvalidConfig`]), before anything is written.
    pub fn check(&self, partitions: u16) -> Result<()> {
        if let Some(cap) = self.concurrency {
            crate::control::check_concurrency(cap, partitions)?;
        }
        if let Some(rate) = &self.rate {
            rate.check()?;
        }
        if self.weight == 0 || self.weight > MAX_GROUP_WEIGHT {
            return Err(Error::InvalidConfig(format!(
                "group weight {} must be 1 to {MAX_GROUP_WEIGHT}",
                self.weight
            )));
        }
        Ok(())
    }

    /// Partition `partition`'s share of these limits in a topic of `partitions` partitions.
    pub fn share(&self, partitions: u16, partition: u16) -> GroupLimits {
        GroupLimits {
            concurrency: self
                .concurrency
                .map(|c| crate::control::concurrency_share(c, partitions, partition)),
            rate: self.rate.map(|r| r.share(partitions)),
            weight: self.weight,
        }
    }

    /// The limits as the store keeps them: `conc/count/per_ms/weight`, each of the first
    /// three empty when unset.
    pub(crate) fn encode(&self) -> String {
        let conc = self.concurrency.map(|c| c.to_string()).unwrap_or_default();
        let (n, per) = match &self.rate {
            Some(r) => (r.count.to_string(), r.per_ms().to_string()),
            None => (String::new(), String::new()),
        };
        format!("{conc}/{n}/{per}/{}", self.weight)
    }

    /// Reads [`GroupLimits::encode`]'s text back; `None` for anything else.
    pub(crate) fn decode(s: &str) -> Option<GroupLimits> {
        let mut parts = s.split('/');
        let conc = parts.next()?;
        let n = parts.next()?;
        let per = parts.next()?;
        let weight = parts.next()?.parse().ok()?;
        if parts.next().is_some() {
            return None;
        }
        let concurrency = if conc.is_empty() {
            None
        } else {
            Some(conc.parse().ok()?)
        };
        let rate = if n.is_empty() {
            None
        } else {
            Some(Rate {
                count: n.parse().ok()?,
                per: Duration::from_millis(per.parse().ok()?),
            })
        };
        Some(GroupLimits {
            concurrency,
            rate,
            weight,
        })
    }
}

/// A change to the group settings of one partition; `None` leaves a setting as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupChange {
    /// The group (`None`: the default every group without its own limits follows).
    pub group: Option<GroupName>,
    /// Set (`Some(Some(limits))`, this partition's share) or remove (`Some(None)`) the limits.
    pub limits: Option<Option<GroupLimits>>,
    /// Start none of the group's jobs for this long from now (the store's clock): a handler's
    /// [`JobError::rate_limited`](crate::JobError::rate_limited) on one of its jobs, carried by
    /// its worker to the topic's other partitions. Never shortens a hold in place. Only with
    /// a group.
    pub hold: Option<Duration>,
}

/// A group's settings and state in one partition, or summed over a topic's partitions
/// ([`TopicClient::group_state`](crate::TopicClient::group_state)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupState {
    /// Its own limits, if set (the partition's share; the topic's whole limits from
    /// [`TopicClient::group_state`](crate::TopicClient::group_state)).
    pub limits: Option<GroupLimits>,
    /// The default limits of the topic's groups, if set (same shares as `limits`).
    pub default_limits: Option<GroupLimits>,
    /// None of its jobs start before this store time (ms), if later than now.
    pub held_until_ms: Option<u64>,
    /// Its jobs running now.
    pub running: u64,
    /// Its jobs due and waiting for their turn.
    pub waiting: u64,
}

/// Refuses a change the store cannot apply: a hold without a group, or one of zero or past
/// what dq can store ([`Error::InvalidConfig`]), before anything is written.
pub fn check_change(change: &GroupChange) -> Result<()> {
    if let Some(hold) = change.hold {
        if change.group.is_none() {
            return Err(Error::InvalidConfig(
                "a hold names a group (the topic's throttle holds every job)".into(),
            ));
        }
        if hold.is_zero() || hold.as_millis() > u128::from(crate::job::MAX_DUE_MS) {
            return Err(Error::InvalidConfig(format!(
                "a group hold of {hold:?} must be more than zero and within what dq can store"
            )));
        }
    }
    Ok(())
}

/// How long a fetch leaves a group at its cap before it looks at it again if none of its
/// jobs ended meanwhile (an end gives the group its turn back at once): a bound on what a
/// missed wake-up costs.
pub const CAP_RECHECK: Duration = Duration::from_secs(2);

/// How many groups one fetch looks at, at most (those whose turn it is, and those whose wait
/// ended): the bound on a fetch's cost whatever the number of groups with work.
pub const GROUP_SCAN: usize = 32;

/// How many groups a fetch looks at beyond its room left (at most [`GROUP_SCAN`] in all): a
/// fetch for a few jobs reads a few groups' settings, with some spare for groups that turn
/// out to have nothing due.
pub const GROUP_SPARE: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(GroupName::new("tenant-7").is_ok());
        assert!(matches!(
            GroupName::new(""),
            Err(Error::InvalidGroup { .. })
        ));
        assert!(matches!(
            GroupName::new("a".repeat(65)),
            Err(Error::InvalidGroup { .. })
        ));
        assert!(matches!(
            GroupName::new("a\0b"),
            Err(Error::InvalidGroup { .. })
        ));
        assert!(matches!(
            GroupName::new("a b"),
            Err(Error::InvalidGroup { .. })
        ));
        assert!(matches!(
            GroupName::new("a\u{200b}"),
            Err(Error::InvalidGroup { .. })
        ));
    }

    #[test]
    fn limits_round_trip_and_are_checked() {
        let l = GroupLimits::new()
            .concurrency(2)
            .rate(Rate::new(10, Duration::from_secs(1)).unwrap())
            .weight(3);
        assert_eq!(GroupLimits::decode(&l.encode()), Some(l));
        assert_eq!(
            GroupLimits::decode(&GroupLimits::new().encode()),
            Some(GroupLimits::new())
        );
        assert!(GroupLimits::decode("x").is_none());
        assert!(l.check(2).is_ok());
        assert!(l.check(3).is_err());
        assert!(GroupLimits::new().weight(0).check(1).is_err());
        assert!(GroupLimits::new().weight(1001).check(1).is_err());
        let s = l.share(2, 1);
        assert_eq!(s.concurrency, Some(1));
        assert_eq!(s.rate.unwrap().per, Duration::from_secs(2));
    }
}
