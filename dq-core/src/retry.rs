//! Retry policies: after a failed attempt, how long until the next one — or give up.
//!
//! A policy is a small value, validated when it is built. The default is the tiered schedule
//! 15s, 3m, 10m, 30m, 30m, 1h, 2h, 6h, 15h: nine retries, ten attempts in all.
//!
//! # A job's life
//!
//! A job is `scheduled` (due later) or `ready` (due now); a fetch leases it (`active`),
//! counting one attempt and giving it a token and a lease deadline. Its attempt then ends in
//! one of three ways:
//!
//! - the handler succeeds: the job is acked and gone;
//! - the handler fails: the worker asks the topic's policy,
//!   [`RetryPolicy::delay_after`]`(attempt)`, and the job waits in `retry` for that delay, or
//!   is `dead` when the policy says `None`. (A permanent error buries at once; an error that
//!   names its own delay keeps it while attempts are left; a deferral or a rate limit spends
//!   no attempt.)
//! - the lease runs out (the worker died or hung): the next fetch of the partition recovers
//!   the job as a failed attempt ("lease expired") and asks **the same policy**, sent along
//!   with the fetch, for the same answer: retry after `delay_after(attempt)`, or dead.
//!
//! A handler may declare a retry function instead ([`RetryFn`], `retry_fn = …`): it decides
//! both kinds of failure — a handler's error when it happens, an expired lease from the
//! answers it gave per attempt when the worker started ([`RetryFn::lease_expiry_policy`]) —
//! and may also discard the job ([`RetryDecision::Discard`]).
//!
//! A job in `retry` is leased again when due, like a scheduled one, for its next attempt; a
//! dead job stays in the dead queue until it is requeued (attempts reset), purged or trimmed.
//!
//! So every retry delay, whoever notices the failure, comes from one function,
//! [`RetryPolicy::delay_with`]: a pure function of the policy, the attempt and one random
//! draw. The worker and the embedded store call it in Rust with a fresh draw per failure;
//! Redis recovers expired leases inside `fetch.lua`, which runs its Lua mirror (`retry_delay`
//! in `lib.lua`) on the policy's parameters ([`RetryPolicy::script_args`]) with a draw of
//! Redis's `math.random`, seeded afresh by every fetch call, for every job. A test holds the
//! two to the same answers over many (policy, attempt, draw) triples.
//!
//! # Jitter
//!
//! A policy with jitter `pct` adds to each delay `base` a random share of itself:
//! `base + floor(base × pct × u / 100)` ms for a draw `u` in [0, 1), computed in `f64` in that
//! order (the same IEEE operations in Rust and in Lua give the same result); exponential
//! delays are then capped at `max`. Jitter is dq's own formula, not a library's; `backon`
//! only paces the client's own retries of store calls.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use dq_syntax::{self as retry_syntax, RetrySpec};

mod custom;
pub use custom::{
    DEFAULT_FN_ATTEMPTS, FailureKind, MAX_FN_ATTEMPTS, RetryDecision, RetryError, RetryFn,
    RetryFnPtr,
};

/// The default tiered schedule, in seconds.
pub const DEFAULT_TIERS_SECS: [u64; 9] = [15, 180, 600, 1800, 1800, 3600, 7200, 21600, 54000];

/// The random extra delay of a retry policy (see [`RetryPolicy::with_jitter`]).
///
/// Jitter spreads the retries of jobs that failed together (an outage) so that they do not
/// all come back at the same instant. Exponential policies have `UpTo(100)` unless told
/// otherwise; tiered and fixed ones have none unless asked (`"15s, 3m, 10m; jitter = 10%"`).
/// Turn it off where the delays must be exact (tests, schedules a user can read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jitter {
    /// Every delay exactly as given (for exponential: `initial`, `2 × initial`, … up to `max`).
    None,
    /// Every delay plus a random 0 to this many percent of itself (0–100); for exponential,
    /// never above `max`. The default of exponential policies is `UpTo(100)`.
    UpTo(u32),
}

impl Default for Jitter {
    /// `UpTo(100)`: each delay plus 0–100 % (the behaviour before jitter was configurable).
    fn default() -> Self {
        Jitter::UpTo(retry_syntax::DEFAULT_JITTER_PCT)
    }
}

/// How a job is retried after a failed attempt.
///
/// The second field, when set, is a retry function's decisions for an expired lease, one per
/// attempt from 1 ([`RetryFn::lease_expiry_policy`]): it then stands for the whole policy
/// (the first is `RetrySpec::None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy(RetrySpec, Option<Arc<[RetryDecision]>>);

impl Default for RetryPolicy {
    /// The tiered schedule 15s, 3m, 10m, 30m, 30m, 1h, 2h, 6h, 15h.
    fn default() -> Self {
        RetryPolicy(
            RetrySpec::Tiered {
                delays_ms: DEFAULT_TIERS_SECS.iter().map(|s| s * 1000).collect(),
                jitter_pct: retry_syntax::DEFAULT_EXACT_JITTER_PCT,
            },
            None,
        )
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

/// `base_ms` plus its jitter share for the draw `unit` (see the module docs): exactly
/// `base_ms` for 0 %. `lib.lua`'s `jittered` is the same expression.
fn jittered(base_ms: u64, pct: u32, unit: f64) -> u64 {
    if pct == 0 {
        return base_ms;
    }
    let extra = (base_ms as f64 * f64::from(pct) * unit / 100.0).floor();
    base_ms.saturating_add(extra as u64)
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
        Ok(RetryPolicy(
            RetrySpec::Tiered {
                delays_ms: delays,
                jitter_pct: retry_syntax::DEFAULT_EXACT_JITTER_PCT,
            },
            None,
        ))
    }

    /// `retries` retries, each `delay` after the failure.
    pub fn fixed(delay: Duration, retries: u32) -> Result<Self> {
        Ok(RetryPolicy(
            RetrySpec::Fixed {
                delay_ms: ms(delay)?,
                retries: count(retries)?,
                jitter_pct: retry_syntax::DEFAULT_EXACT_JITTER_PCT,
            },
            None,
        ))
    }

    /// `retries` retries, the delay doubling from `initial` up to `max`, each plus a random
    /// 0–100 % of itself (never above `max`); change or remove the jitter with
    /// [`with_jitter`](Self::with_jitter).
    pub fn exponential(initial: Duration, max: Duration, retries: u32) -> Result<Self> {
        let (initial_ms, max_ms) = (ms(initial)?, ms(max)?);
        if initial_ms == 0 || max_ms < initial_ms {
            return Err(Error::InvalidConfig(
                "exponential retry needs 0 < initial <= max".into(),
            ));
        }
        Ok(RetryPolicy(
            RetrySpec::Exponential {
                initial_ms,
                max_ms,
                retries: count(retries)?,
                jitter_pct: retry_syntax::DEFAULT_JITTER_PCT,
            },
            None,
        ))
    }

    /// The same policy with another jitter: [`Jitter::None`] for exact delays,
    /// [`Jitter::UpTo`]`(pct)` for a random extra 0–`pct` % of each delay (`pct` at most 100).
    /// The text forms are `"15s, 3m, 10m; jitter = 10%"`, `"fixed(1s, 5); jitter = 10%"` and
    /// `"exponential(1s, 1h, 10, jitter = 20%)"` (or `…; jitter = 20%`).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use dq_core::{Jitter, RetryPolicy};
    /// let exact = RetryPolicy::exponential(Duration::from_secs(1), Duration::from_secs(60), 5)?
    ///     .with_jitter(Jitter::None)?;
    /// assert_eq!(exact.delay_after(3), Some(Duration::from_secs(4)));
    /// # Ok::<(), dq_core::Error>(())
    /// ```
    ///
    /// Fails with [`Error::InvalidConfig`] for a percentage above 100, and for
    /// [`RetryPolicy::none`], which has no delays.
    pub fn with_jitter(self, jitter: Jitter) -> Result<Self> {
        let pct = match jitter {
            Jitter::None => 0,
            Jitter::UpTo(pct) => {
                retry_syntax::check_jitter_pct(pct).map_err(Error::InvalidConfig)?
            }
        };
        if self.1.is_some() {
            return Err(Error::InvalidConfig(
                "a retry function's decisions take no jitter".into(),
            ));
        }
        let mut spec = self.0;
        match &mut spec {
            RetrySpec::None => {
                return Err(Error::InvalidConfig(
                    "a policy without retries has no delays to add jitter to".into(),
                ));
            }
            RetrySpec::Tiered { jitter_pct, .. }
            | RetrySpec::Fixed { jitter_pct, .. }
            | RetrySpec::Exponential { jitter_pct, .. } => *jitter_pct = pct,
        }
        Ok(RetryPolicy(spec, None))
    }

    /// The policy's jitter; `None` for [`RetryPolicy::none`], which has no delays, and for a
    /// retry function's decisions.
    pub fn jitter(&self) -> Option<Jitter> {
        if self.1.is_some() {
            return None;
        }
        match self.0 {
            RetrySpec::None => None,
            RetrySpec::Tiered { jitter_pct, .. }
            | RetrySpec::Fixed { jitter_pct, .. }
            | RetrySpec::Exponential { jitter_pct, .. } => Some(if jitter_pct == 0 {
                Jitter::None
            } else {
                Jitter::UpTo(jitter_pct)
            }),
        }
    }

    /// No retries: the first failure is final.
    pub fn none() -> Self {
        RetryPolicy(RetrySpec::None, None)
    }

    /// A retry function's decisions, one per attempt from 1 (at least one, at most
    /// [`MAX_FN_ATTEMPTS`], delays within 365 days: [`RetryFn::decide`] makes them so).
    pub(crate) fn table(decisions: Vec<RetryDecision>) -> Self {
        debug_assert!(!decisions.is_empty() && decisions.len() <= MAX_FN_ATTEMPTS as usize);
        RetryPolicy(RetrySpec::None, Some(decisions.into()))
    }

    /// Parses the text form used by `#[delayed_job(retry = "…")]`: `"15s, 3m, 10m"`, `"none"`,
    /// `"fixed(1s, 5)"` or `"exponential(1s, 1h, 10)"`.
    pub fn parse(text: &str) -> Result<Self> {
        retry_syntax::parse_retry(text)
            .map(|spec| RetryPolicy(spec, None))
            .map_err(Error::InvalidConfig)
    }

    /// How many retries follow the first attempt.
    pub fn retries(&self) -> u32 {
        if let Some(table) = &self.1 {
            return table.len() as u32 - 1;
        }
        match &self.0 {
            RetrySpec::None => 0,
            RetrySpec::Tiered { delays_ms, .. } => delays_ms.len() as u32,
            RetrySpec::Fixed { retries, .. } | RetrySpec::Exponential { retries, .. } => *retries,
        }
    }

    /// Most attempts a job gets: the first plus its retries.
    pub fn max_attempts(&self) -> u32 {
        self.retries() + 1
    }

    /// The delay before the next attempt after attempt `attempt` (from 1) failed, or `None` when
    /// the job is out of attempts: [`delay_with`](Self::delay_with) with a fresh random draw.
    /// Both kinds of failure ask it: a handler's error (the worker) and an expired lease (the
    /// store, see the module docs).
    pub fn delay_after(&self, attempt: u32) -> Option<Duration> {
        self.delay_with(attempt, rand::random::<f64>())
    }

    /// The delay after attempt `attempt` failed, for the random draw `unit` in [0, 1): the
    /// deterministic core of [`delay_after`](Self::delay_after), `None` when the job is out of
    /// attempts. Without jitter `unit` does not matter. `lib.lua`'s `retry_delay` computes
    /// the same function in Redis (a test holds them together).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use dq_core::RetryPolicy;
    /// let p = RetryPolicy::parse("fixed(10s, 2); jitter = 50%")?;
    /// assert_eq!(p.delay_with(1, 0.0), Some(Duration::from_secs(10)));
    /// assert_eq!(p.delay_with(2, 0.5), Some(Duration::from_millis(12_500)));
    /// assert_eq!(p.delay_with(3, 0.5), None);
    /// # Ok::<(), dq_core::Error>(())
    /// ```
    pub fn delay_with(&self, attempt: u32, unit: f64) -> Option<Duration> {
        if attempt == 0 || attempt > self.retries() {
            return None;
        }
        if self.1.is_some() {
            return match self.decision_with(attempt, unit) {
                RetryDecision::After(d) => Some(d),
                RetryDecision::Dead | RetryDecision::Discard => None,
            };
        }
        let unit = unit.clamp(0.0, 1.0);
        let i = (attempt - 1) as usize;
        let ms = match &self.0 {
            RetrySpec::None => return None,
            RetrySpec::Tiered {
                delays_ms,
                jitter_pct,
            } => jittered(delays_ms[i], *jitter_pct, unit),
            RetrySpec::Fixed {
                delay_ms,
                jitter_pct,
                ..
            } => jittered(*delay_ms, *jitter_pct, unit),
            RetrySpec::Exponential {
                initial_ms,
                max_ms,
                jitter_pct,
                ..
            } => {
                // Whole ms, exactly doubling, so that a policy without jitter has exactly the
                // delays it names.
                let doubling = 1u64.checked_shl(i as u32).unwrap_or(u64::MAX);
                let base = initial_ms.saturating_mul(doubling).min(*max_ms);
                jittered(base, *jitter_pct, unit).min(*max_ms)
            }
        };
        Some(Duration::from_millis(ms))
    }

    /// What follows a failed attempt `attempt` for the draw `unit` (see
    /// [`delay_with`](Self::delay_with)): `After` the delay, or `Dead` when the job is out of
    /// attempts — or, for a retry function's decisions ([`RetryFn::lease_expiry_policy`]),
    /// that attempt's decision (`Dead` beyond them). `lib.lua`'s `retry_delay` mirrors it.
    pub fn decision_with(&self, attempt: u32, unit: f64) -> RetryDecision {
        if let Some(table) = &self.1 {
            let last = table.len() as u32;
            return match attempt.checked_sub(1).and_then(|i| table.get(i as usize)) {
                Some(RetryDecision::After(d)) if attempt < last => RetryDecision::After(*d),
                Some(RetryDecision::Discard) => RetryDecision::Discard,
                _ => RetryDecision::Dead,
            };
        }
        self.delay_with(attempt, unit)
            .map_or(RetryDecision::Dead, RetryDecision::After)
    }

    /// [`decision_with`](Self::decision_with) with a fresh random draw: what the embedded
    /// store does with a job whose lease expired after attempt `attempt`.
    pub fn decision_after(&self, attempt: u32) -> RetryDecision {
        self.decision_with(attempt, rand::random::<f64>())
    }

    /// The policy as the store's scripts take it (`lib.lua`'s `read_retry_policy`): a kind,
    /// the jitter percentage, then the kind's numbers: none `[0, 0]`; tiered
    /// `[1, pct, delay ms…]`; fixed `[2, pct, delay ms, retries]`; exponential
    /// `[3, pct, initial ms, max ms, retries]`; a retry function's decisions
    /// `[4, 0, (verdict, ms) per attempt…]` with verdict 0 retry after ms, 1 dead, 2 discard.
    pub fn script_args(&self) -> Vec<u64> {
        if let Some(table) = &self.1 {
            let mut args = vec![4, 0];
            for d in table.iter() {
                let (verdict, ms) = match d {
                    RetryDecision::After(d) => (0, d.as_millis() as u64),
                    RetryDecision::Dead => (1, 0),
                    RetryDecision::Discard => (2, 0),
                };
                args.push(verdict);
                args.push(ms);
            }
            return args;
        }
        match &self.0 {
            RetrySpec::None => vec![0, 0],
            RetrySpec::Tiered {
                delays_ms,
                jitter_pct,
            } => [1, u64::from(*jitter_pct)]
                .into_iter()
                .chain(delays_ms.iter().copied())
                .collect(),
            RetrySpec::Fixed {
                delay_ms,
                retries,
                jitter_pct,
            } => vec![2, u64::from(*jitter_pct), *delay_ms, u64::from(*retries)],
            RetrySpec::Exponential {
                initial_ms,
                max_ms,
                retries,
                jitter_pct,
            } => vec![
                3,
                u64::from(*jitter_pct),
                *initial_ms,
                *max_ms,
                u64::from(*retries),
            ],
        }
    }

    /// One draw of every retry delay in order (each jittered afresh): the policy as a reader
    /// sees it. Neither the worker nor a store uses it; each failure draws its own delay.
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
    fn jitter_is_configurable_and_can_be_off() {
        let exp = || {
            RetryPolicy::exponential(Duration::from_millis(100), Duration::from_secs(1), 6).unwrap()
        };
        assert_eq!(exp().jitter(), Some(Jitter::UpTo(100)), "default unchanged");
        let exact = exp().with_jitter(Jitter::None).unwrap();
        assert_eq!(exact.jitter(), Some(Jitter::None));
        let ms = |v: &[u64]| {
            v.iter()
                .map(|m| Duration::from_millis(*m))
                .collect::<Vec<_>>()
        };
        // Exactly doubling, capped at max, every time.
        for _ in 0..20 {
            assert_eq!(exact.schedule(), ms(&[100, 200, 400, 800, 1000, 1000]));
        }
        assert_eq!(
            exact,
            RetryPolicy::parse("exponential(100ms, 1s, 6, jitter = 0%)").unwrap()
        );
        assert_eq!(exp().with_jitter(Jitter::UpTo(0)).unwrap(), exact);

        // Up to 10 %: each delay within [base, base × 1.1], never above max; over many
        // samples some delay is above its base (the chance that none of 100 is: 0).
        let some = exp().with_jitter(Jitter::UpTo(10)).unwrap();
        assert_eq!(
            some,
            RetryPolicy::parse("exponential(100ms, 1s, 6, jitter = 10%)").unwrap()
        );
        let base = ms(&[100, 200, 400, 800, 1000, 1000]);
        let mut above = false;
        for _ in 0..100 {
            for (d, b) in some.schedule().iter().zip(&base) {
                assert!(*d >= *b && *d <= b.mul_f64(1.1) && *d <= Duration::from_secs(1));
                above |= d > b;
            }
        }
        assert!(above, "10 % jitter never added anything");

        assert!(exp().with_jitter(Jitter::UpTo(101)).is_err());
        assert!(RetryPolicy::parse("exponential(100ms, 1s, 6, jitter = 101%)").is_err());
        assert!(RetryPolicy::none().with_jitter(Jitter::UpTo(10)).is_err());
        assert_eq!(RetryPolicy::none().jitter(), None);
    }

    /// Tiered and fixed policies are exact unless asked for jitter; with it, a thousand jobs
    /// that failed together come back spread over the delay's window, never before the delay
    /// nor after delay + pct.
    #[test]
    fn tiered_and_fixed_jitter_is_opt_in_and_spreads_retries() {
        let tiered = RetryPolicy::parse("15s, 3m, 10m").unwrap();
        assert_eq!(tiered.jitter(), Some(Jitter::None), "exact by default");
        assert_eq!(RetryPolicy::default().jitter(), Some(Jitter::None));
        assert_eq!(tiered.delay_after(2), Some(Duration::from_secs(180)));
        let fixed = RetryPolicy::fixed(Duration::from_secs(1), 2).unwrap();
        assert_eq!(fixed.jitter(), Some(Jitter::None));

        let jittered = RetryPolicy::parse("15s, 3m, 10m; jitter = 10%").unwrap();
        assert_eq!(
            tiered.clone().with_jitter(Jitter::UpTo(10)).unwrap(),
            jittered,
            "the text form and the builder agree"
        );
        assert_eq!(jittered.max_attempts(), 4);
        for (attempt, base) in [(1, 15_000u64), (2, 180_000), (3, 600_000)] {
            let delays: Vec<u64> = (0..1000)
                .map(|_| jittered.delay_after(attempt).unwrap().as_millis() as u64)
                .collect();
            let (lo, hi) = (*delays.iter().min().unwrap(), *delays.iter().max().unwrap());
            assert!(
                lo >= base && hi <= base + base / 10,
                "{attempt}: {lo}..{hi}"
            );
            // Spread: a thousand draws over a 10 % window never land on a handful of values.
            let distinct: std::collections::HashSet<_> = delays.iter().collect();
            assert!(
                distinct.len() > 100,
                "{attempt}: only {} values",
                distinct.len()
            );
        }
        assert_eq!(jittered.delay_after(4), None);

        let fixed = RetryPolicy::parse("fixed(1s, 2); jitter = 50%").unwrap();
        assert_eq!(fixed.jitter(), Some(Jitter::UpTo(50)));
        let d = fixed.delay_after(2).unwrap();
        assert!(
            d >= Duration::from_secs(1) && d <= Duration::from_millis(1500),
            "{d:?}"
        );
        assert_eq!(
            fixed.with_jitter(Jitter::None).unwrap(),
            RetryPolicy::fixed(Duration::from_secs(1), 2).unwrap()
        );
    }

    /// `delay_with` is the documented formula: `base + floor(base × pct × u / 100)`, the
    /// exponential base doubling and everything capped at `max`; `delay_after` stays within it.
    #[test]
    fn delay_with_is_the_jitter_formula() {
        let d = |ms: u64| Some(Duration::from_millis(ms));
        let fixed = RetryPolicy::parse("fixed(1s, 3); jitter = 10%").unwrap();
        assert_eq!(fixed.delay_with(1, 0.0), d(1000));
        assert_eq!(fixed.delay_with(2, 0.5), d(1050));
        assert_eq!(fixed.delay_with(3, 0.99999), d(1099));
        assert_eq!(fixed.delay_with(4, 0.5), None);
        assert_eq!(fixed.delay_with(0, 0.5), None);

        let exp = RetryPolicy::parse("exponential(100ms, 1s, 5, jitter = 50%)").unwrap();
        let at = |u: f64| (1..=5).map(|a| exp.delay_with(a, u)).collect::<Vec<_>>();
        assert_eq!(at(0.0), [d(100), d(200), d(400), d(800), d(1000)]);
        assert_eq!(at(0.5), [d(125), d(250), d(500), d(1000), d(1000)]);

        // Without jitter the draw does not matter.
        let exact = RetryPolicy::parse("15s, 3m").unwrap();
        for u in [0.0, 0.3, 0.999] {
            assert_eq!(exact.delay_with(2, u), d(180_000));
        }
        for _ in 0..100 {
            let got = fixed.delay_after(1).unwrap();
            assert!(
                (d(1000).unwrap()..=d(1100).unwrap()).contains(&got),
                "{got:?}"
            );
        }
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
