//! Retry policies: after a failed attempt, how long until the next one — or give up.
//!
//! A policy is a small value, validated when it is built. The default is the tiered schedule
//! 15s, 3m, 10m, 30m, 30m, 1h, 2h, 6h, 15h: nine retries, ten attempts in all.

use std::time::Duration;

use backon::BackoffBuilder;

use crate::error::{Error, Result};
use crate::retry_syntax::{self, RetrySpec};

/// The default tiered schedule, in seconds.
pub const DEFAULT_TIERS_SECS: [u64; 9] = [15, 180, 600, 1800, 1800, 3600, 7200, 21600, 54000];

/// How a job is retried after a failed attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy(RetrySpec);

impl Default for RetryPolicy {
    /// The tiered schedule 15s, 3m, 10m, 30m, 30m, 1h, 2h, 6h, 15h.
    fn default() -> Self {
        RetryPolicy(RetrySpec::Tiered(
            DEFAULT_TIERS_SECS.iter().map(|s| s * 1000).collect(),
        ))
    }
}

#[test]
fn default_text_matches_the_default_tiers() {
    assert_eq!(
        RetryPolicy::parse(retry_syntax::DEFAULT_RETRY).unwrap(),
        RetryPolicy::default()
    );
}

fn ms(d: Duration) -> Result<u64> {
    let ms = d.as_millis();
    if ms > u128::from(retry_syntax::MAX_DELAY_MS) {
        return Err(Error::InvalidConfig(format!(
            "retry delay {d:?} is longer than 365 days"
        )));
    }
    Ok(ms as u64)
}

fn count(retries: u32) -> Result<u32> {
    if retries > retry_syntax::MAX_RETRIES {
        return Err(Error::InvalidConfig(format!(
            "{retries} retries is more than the maximum of {}",
            retry_syntax::MAX_RETRIES
        )));
    }
    Ok(retries)
}

impl RetryPolicy {
    /// One retry after each delay in turn, then dead.
    pub fn tiered(delays: impl IntoIterator<Item = Duration>) -> Result<Self> {
        let delays = delays.into_iter().map(ms).collect::<Result<Vec<_>>>()?;
        count(u32::try_from(delays.len()).unwrap_or(u32::MAX))?;
        Ok(RetryPolicy(RetrySpec::Tiered(delays)))
    }

    /// `retries` retries, each `delay` after the failure.
    pub fn fixed(delay: Duration, retries: u32) -> Result<Self> {
        Ok(RetryPolicy(RetrySpec::Fixed {
            delay_ms: ms(delay)?,
            retries: count(retries)?,
        }))
    }

    /// `retries` retries, the delay doubling from `initial` up to `max`, each with random jitter.
    pub fn exponential(initial: Duration, max: Duration, retries: u32) -> Result<Self> {
        let (initial_ms, max_ms) = (ms(initial)?, ms(max)?);
        if initial_ms == 0 || max_ms < initial_ms {
            return Err(Error::InvalidConfig(
                "exponential retry needs 0 < initial <= max".into(),
            ));
        }
        Ok(RetryPolicy(RetrySpec::Exponential {
            initial_ms,
            max_ms,
            retries: count(retries)?,
        }))
    }

    /// No retries: the first failure is final.
    pub fn none() -> Self {
        RetryPolicy(RetrySpec::None)
    }

    /// Parses the text form used by `#[delayed_job(retry = "…")]`: `"15s, 3m, 10m"`, `"none"`,
    /// `"fixed(1s, 5)"` or `"exponential(1s, 1h, 10)"`.
    pub fn parse(text: &str) -> Result<Self> {
        retry_syntax::parse_retry(text)
            .map(RetryPolicy)
            .map_err(Error::InvalidConfig)
    }

    /// How many retries follow the first attempt.
    pub fn retries(&self) -> u32 {
        match &self.0 {
            RetrySpec::None => 0,
            RetrySpec::Tiered(d) => d.len() as u32,
            RetrySpec::Fixed { retries, .. } | RetrySpec::Exponential { retries, .. } => *retries,
        }
    }

    /// Most attempts a job gets: the first plus its retries.
    pub fn max_attempts(&self) -> u32 {
        self.retries() + 1
    }

    /// The delay before the next attempt after attempt `attempt` (from 1) failed, or `None` when
    /// the job is out of attempts.
    pub fn delay_after(&self, attempt: u32) -> Option<Duration> {
        if attempt == 0 || attempt > self.retries() {
            return None;
        }
        let i = (attempt - 1) as usize;
        Some(match &self.0 {
            RetrySpec::None => return None,
            RetrySpec::Tiered(d) => Duration::from_millis(d[i]),
            RetrySpec::Fixed { delay_ms, .. } => Duration::from_millis(*delay_ms),
            RetrySpec::Exponential {
                initial_ms,
                max_ms,
                retries,
            } => backon::ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(*initial_ms))
                .with_max_delay(Duration::from_millis(*max_ms))
                .with_factor(2.0)
                .with_max_times(*retries as usize)
                .with_jitter()
                .build()
                .nth(i)
                .map(|d| d.min(Duration::from_millis(*max_ms)))?,
        })
    }

    /// Every retry delay in order (for exponential, a jittered sample). The store uses it to
    /// retry jobs whose lease expired, since no handler is there to ask.
    pub fn schedule(&self) -> Vec<Duration> {
        (1..=self.retries())
            .map_while(|a| self.delay_after(a))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_the_tiered_schedule() {
        let p = RetryPolicy::default();
        assert_eq!(p.max_attempts(), 10);
        assert_eq!(p.delay_after(1), Some(Duration::from_secs(15)));
        assert_eq!(p.delay_after(9), Some(Duration::from_secs(15 * 3600)));
        assert_eq!(p.delay_after(10), None);
        assert_eq!(p.delay_after(0), None);
        assert_eq!(
            p,
            RetryPolicy::parse("15s, 3m, 10m, 30m, 30m, 1h, 2h, 6h, 15h").unwrap()
        );
    }

    #[test]
    fn exponential_grows_within_bounds() {
        let p = RetryPolicy::exponential(Duration::from_millis(100), Duration::from_secs(1), 6)
            .unwrap();
        let s = p.schedule();
        assert_eq!(s.len(), 6);
        assert!(
            s.iter()
                .all(|d| *d >= Duration::from_millis(100) && *d <= Duration::from_secs(1))
        );
        assert_eq!(p.delay_after(7), None);
    }

    #[test]
    fn construction_validates() {
        assert!(RetryPolicy::fixed(Duration::from_secs(1), 101).is_err());
        assert!(RetryPolicy::exponential(Duration::ZERO, Duration::from_secs(1), 3).is_err());
        assert!(RetryPolicy::tiered([Duration::from_secs(400 * 86400)]).is_err());
        assert_eq!(RetryPolicy::none().delay_after(1), None);
        assert_eq!(
            RetryPolicy::fixed(Duration::from_secs(1), 2)
                .unwrap()
                .schedule()
                .len(),
            2
        );
    }
}
