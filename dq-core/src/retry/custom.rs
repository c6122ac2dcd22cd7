//! Custom retry functions: a function of the attempt and the error that decides what follows a
//! failed attempt — retry after a delay of its choosing, bury, or discard (Sidekiq's
//! `sidekiq_retry_in`, asynq's `RetryDelayFunc`). Declared with
//! `#[delayed_job(retry_fn = path::to_fn)]` instead of `retry = "…"` (docs/RETRY_FN.md).
//!
//! # Who asks it
//!
//! - **A handler's error** (a panic and a timeout too): the worker calls it in Rust with the
//!   attempt and a [`RetryError`] (the message, the [`FailureKind`], and the handler's own
//!   error to downcast). [`JobError::permanent`](crate::JobError::permanent) still buries
//!   without asking it, and [`JobError::retry_after`](crate::JobError::retry_after) still
//!   names its own delay (it wins over the function; on the last attempt the job is dead);
//!   a deferral, a rate limit or missing shared data spends no attempt and never asks it.
//! - **An expired lease** is recovered inside the store's fetch (`fetch.lua` on Redis), which
//!   cannot call Rust. So the worker asks the function ahead of time, once per attempt number
//!   `1..=max_attempts`, with [`FailureKind::LeaseExpired`] and the message `lease expired`
//!   when it starts ([`RetryFn::lease_expiry_policy`]), and sends the answers with every
//!   fetch as a table. A function whose answer depends on anything else than (attempt,
//!   failure kind) — the time, a counter, randomness — gets one frozen answer per attempt for
//!   expiries: do not rely on it there.
//!
//! # Bounds
//!
//! The function never lets a job run more than [`RetryFn::max_attempts`] attempts (default 10,
//! at most 101: attempts are a byte in job records): after the last one, `After(_)` is `Dead`.
//! A delay above 365 days (dq's longest delay) is clamped to 365 days, with a warning. A
//! function that panics is taken to have said [`RetryDecision::Dead`], logged at ERROR.

use std::fmt;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::retry_syntax;

/// What follows a failed attempt, as a retry function decides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryDecision {
    /// Retry after this delay; the attempt counts. Above 365 days it is clamped to 365 days;
    /// after the last attempt ([`RetryFn::max_attempts`]) it is [`Dead`](Self::Dead).
    After(Duration),
    /// To the dead queue now, with its history (a requeue runs it again).
    Dead,
    /// Deleted now with its history, counted in
    /// [`TopicStats::discarded`](crate::TopicStats::discarded) (and an event `discarded`);
    /// never kept, whatever the topic's retention.
    Discard,
}

/// How an attempt failed, as a retry function sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureKind {
    /// The handler returned an error ([`RetryError::downcast_ref`] finds its own type).
    Error,
    /// The handler panicked (the message says with what).
    Panic,
    /// The handler ran past its timeout.
    Timeout,
    /// The job's lease ran out (its worker died or hung). Asked once per attempt number when
    /// the worker starts, never at the expiry itself (see the module docs).
    LeaseExpired,
}

/// A failed attempt, as a retry function sees it.
pub struct RetryError<'a> {
    attempt: u32,
    max_attempts: u32,
    failure: FailureKind,
    message: &'a str,
    source: Option<&'a (dyn std::error::Error + Send + Sync + 'static)>,
}

impl<'a> RetryError<'a> {
    /// A failed attempt `attempt` (from 1) of at most `max_attempts`: how it failed, its
    /// message, and the handler's error if there is one. (The worker builds these; a test of
    /// a retry function may too.)
    pub fn new(
        attempt: u32,
        max_attempts: u32,
        failure: FailureKind,
        message: &'a str,
        source: Option<&'a (dyn std::error::Error + Send + Sync + 'static)>,
    ) -> Self {
        RetryError {
            attempt,
            max_attempts,
            failure,
            message,
            source,
        }
    }

    /// The attempt that failed, from 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The most attempts the job gets ([`RetryFn::max_attempts`]).
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// True when no attempt is left: `After(_)` is taken as `Dead`.
    pub fn is_last_attempt(&self) -> bool {
        self.attempt >= self.max_attempts
    }

    /// How the attempt failed.
    pub fn failure(&self) -> FailureKind {
        self.failure
    }

    /// The error's text, as the job's history keeps it (`lease expired` for an expiry).
    pub fn message(&self) -> &str {
        self.message
    }

    /// The handler's error (`None` for an expired lease).
    pub fn source(&self) -> Option<&'a (dyn std::error::Error + Send + Sync + 'static)> {
        self.source
    }

    /// The handler's error as `T`, if it is one: match your own error type.
    pub fn downcast_ref<T: std::error::Error + 'static>(&self) -> Option<&'a T> {
        self.source?.downcast_ref::<T>()
    }
}

impl fmt::Debug for RetryError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryError")
            .field("attempt", &self.attempt)
            .field("max_attempts", &self.max_attempts)
            .field("failure", &self.failure)
            .field("message", &self.message)
            .finish()
    }
}

/// The signature of a retry function: the attempt that failed (from 1) and the failure.
pub type RetryFnPtr = fn(u32, &RetryError<'_>) -> RetryDecision;

/// The most attempts a retry function may allow: one plus dq's most retries.
pub const MAX_FN_ATTEMPTS: u32 = retry_syntax::MAX_RETRIES + 1;

/// The attempts a retry function allows unless told otherwise: as many as the default policy.
pub const DEFAULT_FN_ATTEMPTS: u32 = 10;

/// A custom retry function and the most attempts it allows (see the module docs).
#[derive(Clone, Copy)]
pub struct RetryFn {
    decide: RetryFnPtr,
    max_attempts: u32,
    name: &'static str,
}

impl RetryFn {
    /// The function `decide`, allowing [`DEFAULT_FN_ATTEMPTS`] attempts.
    pub const fn new(decide: RetryFnPtr) -> Self {
        RetryFn {
            decide,
            max_attempts: DEFAULT_FN_ATTEMPTS,
            name: "",
        }
    }

    /// What `#[delayed_job(retry_fn = …, max_attempts = N)]` registers (the macro has
    /// checked `max_attempts`).
    #[doc(hidden)]
    pub const fn declared(decide: RetryFnPtr, max_attempts: u32, name: &'static str) -> Self {
        RetryFn {
            decide,
            max_attempts,
            name,
        }
    }

    /// The same function allowing `n` attempts (1 to [`MAX_FN_ATTEMPTS`]); anything else is
    /// [`Error::InvalidConfig`].
    pub fn with_max_attempts(self, n: u32) -> Result<Self> {
        if n == 0 || n > MAX_FN_ATTEMPTS {
            return Err(Error::InvalidConfig(format!(
                "a retry function allows 1 to {MAX_FN_ATTEMPTS} attempts, not {n}"
            )));
        }
        Ok(RetryFn {
            max_attempts: n,
            ..self
        })
    }

    /// The most attempts a job gets.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The function's path as declared (empty when built with [`RetryFn::new`]).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The decision for this failure, within the bounds: the function's answer, `Dead` for
    /// `After(_)` on the last attempt, delays clamped to 365 days, `Dead` if it panics.
    pub fn decide(&self, error: &RetryError<'_>) -> RetryDecision {
        let attempt = error.attempt();
        let asked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            (self.decide)(attempt, error)
        }));
        match asked {
            Err(_) => {
                tracing::error!(
                    retry_fn = self.name,
                    attempt,
                    "the retry function panicked: the job is dead"
                );
                RetryDecision::Dead
            }
            Ok(RetryDecision::After(_)) if attempt >= self.max_attempts => RetryDecision::Dead,
            Ok(RetryDecision::After(d)) => {
                let max = Duration::from_millis(retry_syntax::MAX_DELAY_MS);
                if d > max {
                    tracing::warn!(
                        retry_fn = self.name,
                        attempt,
                        asked = ?d,
                        "the retry function asked for a delay above 365 days: clamped to 365 days"
                    );
                    RetryDecision::After(max)
                } else {
                    RetryDecision::After(d)
                }
            }
            Ok(other) => other,
        }
    }

    /// The decisions for a lease that expired after each attempt `1..=max_attempts`, asked
    /// now ([`FailureKind::LeaseExpired`], message `lease expired`), as a policy the store
    /// applies on its own (`RetryPolicy::script_args` kind 4, `fetch.lua` step 1).
    pub fn lease_expiry_policy(&self) -> super::RetryPolicy {
        let decisions = (1..=self.max_attempts).map(|attempt| {
            self.decide(&RetryError::new(
                attempt,
                self.max_attempts,
                FailureKind::LeaseExpired,
                "lease expired",
                None,
            ))
        });
        super::RetryPolicy::table(decisions.collect())
    }
}

impl fmt::Debug for RetryFn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryFn")
            .field("name", &self.name)
            .field("max_attempts", &self.max_attempts)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::RetryPolicy;

    #[derive(Debug)]
    struct Partner(u16);
    impl fmt::Display for Partner {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "partner said {}", self.0)
        }
    }
    impl std::error::Error for Partner {}

    fn by_error(attempt: u32, e: &RetryError<'_>) -> RetryDecision {
        match (e.failure(), e.downcast_ref::<Partner>()) {
            (_, Some(Partner(410))) => RetryDecision::Discard,
            (_, Some(Partner(_))) => RetryDecision::After(Duration::from_secs(u64::from(attempt))),
            (FailureKind::LeaseExpired, _) if attempt == 2 => RetryDecision::Discard,
            (FailureKind::LeaseExpired, _) => RetryDecision::After(Duration::from_millis(7)),
            _ => RetryDecision::Dead,
        }
    }

    #[test]
    fn the_function_sees_the_attempt_and_the_error_within_bounds() {
        let f = RetryFn::new(by_error).with_max_attempts(3).unwrap();
        let gone = Partner(410);
        let busy = Partner(503);
        let e = |attempt, src: &'static Partner| {
            f.decide(&RetryError::new(
                attempt,
                3,
                FailureKind::Error,
                "x",
                Some(src as &(dyn std::error::Error + Send + Sync)),
            ))
        };
        let gone: &'static Partner = Box::leak(Box::new(gone));
        let busy: &'static Partner = Box::leak(Box::new(busy));
        assert_eq!(e(1, gone), RetryDecision::Discard);
        assert_eq!(e(2, busy), RetryDecision::After(Duration::from_secs(2)));
        assert_eq!(e(3, busy), RetryDecision::Dead, "no attempt left");
        let plain = f.decide(&RetryError::new(1, 3, FailureKind::Panic, "boom", None));
        assert_eq!(plain, RetryDecision::Dead);

        fn far(_: u32, _: &RetryError<'_>) -> RetryDecision {
            RetryDecision::After(Duration::from_secs(400 * 86400))
        }
        let d = RetryFn::new(far).decide(&RetryError::new(1, 10, FailureKind::Error, "", None));
        assert_eq!(
            d,
            RetryDecision::After(Duration::from_millis(retry_syntax::MAX_DELAY_MS))
        );

        fn panics(_: u32, _: &RetryError<'_>) -> RetryDecision {
            panic!("oops")
        }
        let d = RetryFn::new(panics).decide(&RetryError::new(1, 10, FailureKind::Error, "", None));
        assert_eq!(d, RetryDecision::Dead);

        assert!(RetryFn::new(by_error).with_max_attempts(0).is_err());
        assert!(RetryFn::new(by_error).with_max_attempts(102).is_err());
        assert_eq!(RetryFn::new(by_error).max_attempts(), 10);
    }

    /// The table a fetch gets: one decision per attempt, asked with `LeaseExpired`, the last
    /// `After` turned into `Dead`; as script args, kind 4 and a (verdict, ms) pair each.
    #[test]
    fn lease_expiries_are_tabulated_once_per_attempt() {
        let f = RetryFn::new(by_error).with_max_attempts(4).unwrap();
        let p = f.lease_expiry_policy();
        assert_eq!(p.max_attempts(), 4);
        assert_eq!(p.retries(), 3);
        let ms = Duration::from_millis;
        assert_eq!(p.decision_with(1, 0.3), RetryDecision::After(ms(7)));
        assert_eq!(p.decision_with(2, 0.3), RetryDecision::Discard);
        assert_eq!(p.decision_with(3, 0.3), RetryDecision::After(ms(7)));
        assert_eq!(p.decision_with(4, 0.3), RetryDecision::Dead, "the last");
        assert_eq!(p.decision_with(5, 0.3), RetryDecision::Dead, "beyond");
        assert_eq!(p.delay_with(1, 0.0), Some(ms(7)));
        assert_eq!(p.delay_with(2, 0.0), None);
        assert_eq!(
            p.script_args(),
            vec![4, 0, 0, 7, 2, 0, 0, 7, 1, 0],
            "kind 4, no jitter, (verdict, ms) per attempt"
        );
        assert_eq!(p.jitter(), None);
        assert!(p.clone().with_jitter(crate::Jitter::UpTo(10)).is_err());
        assert_ne!(p, RetryPolicy::none());

        // The asked attempts: exactly 1..=max, each once.
        use std::sync::atomic::{AtomicU32, Ordering};
        static ASKED: AtomicU32 = AtomicU32::new(0);
        fn counting(attempt: u32, e: &RetryError<'_>) -> RetryDecision {
            assert_eq!(e.failure(), FailureKind::LeaseExpired);
            assert_eq!(e.message(), "lease expired");
            assert!(e.source().is_none());
            ASKED.fetch_or(1 << attempt, Ordering::SeqCst);
            RetryDecision::After(Duration::from_secs(1))
        }
        let p = RetryFn::new(counting)
            .with_max_attempts(5)
            .unwrap()
            .lease_expiry_policy();
        assert_eq!(ASKED.load(Ordering::SeqCst), 0b111110);
        assert_eq!(p.decision_with(5, 0.0), RetryDecision::Dead);
    }
}
