//! Polling a condition until it holds or a deadline passes.

use std::future::Future;
use std::time::{Duration, Instant};

/// How long the `eventually*` helpers pause between two checks of a condition that did not hold.
pub const POLL_INTERVAL: Duration = Duration::from_millis(5);

/// Waits, in async code, until `cond` resolves to `true`; panics once `timeout` has passed.
///
/// `cond` is called again every [`POLL_INTERVAL`] while it resolves to `false`. A single call
/// that is still pending at the deadline is abandoned, so the wait never outlasts `timeout` by
/// more than one poll. The panic message is `timed out after {timeout:?}: {what}`, so say in
/// `what` what should have happened:
///
/// ```no_run
/// # async fn demo(done: std::sync::Arc<std::sync::atomic::AtomicBool>) {
/// use std::sync::atomic::Ordering;
/// use std::time::Duration;
/// dq_testkit::eventually("the job ran", Duration::from_secs(5), || {
///     let done = done.clone();
///     async move { done.load(Ordering::SeqCst) }
/// })
/// .await;
/// # }
/// ```
///
/// Needs a tokio runtime with its timer enabled (as `#[tokio::test]` provides).
/// Deadlines are wall-clock time. Under a paused tokio clock the pauses between checks are
/// skipped, but the deadline still bounds the wait.
pub async fn eventually<F, Fut>(what: &str, timeout: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    eventually_some(what, timeout, || {
        let check = cond();
        async move { check.await.then_some(()) }
    })
    .await;
}

/// Like [`eventually`], for a condition that yields a value: waits until `cond` resolves to
/// `Some(value)` and returns `value`; panics once `timeout` has passed.
pub async fn eventually_some<T, F, Fut>(what: &str, timeout: Duration, mut cond: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    let mut checks: u64 = 0;
    loop {
        checks += 1;
        let remaining = deadline.saturating_duration_since(Instant::now());
        // `tokio::time::timeout` polls the condition before looking at the clock, so even a
        // zero remaining time gives the condition one chance.
        match tokio::time::timeout(remaining, cond()).await {
            Ok(Some(value)) => return value,
            Ok(None) => {}
            Err(_) => break,
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            break;
        }
        tokio::time::sleep(POLL_INTERVAL.min(remaining)).await;
    }
    panic!("timed out after {timeout:?} ({checks} checks): {what}");
}

/// Like [`eventually`], for plain (non-async) code: blocks the thread until `cond()` returns
/// `true`; panics once `timeout` has passed.
///
/// Do not call this from inside an async runtime's worker thread; use [`eventually`] there.
pub fn eventually_blocking(what: &str, timeout: Duration, cond: impl FnMut() -> bool) {
    if !wait_until(Instant::now() + timeout, cond) {
        panic!("timed out after {timeout:?}: {what}");
    }
}

/// Polls `cond` every [`POLL_INTERVAL`] until it returns `true` (then `true`) or `deadline`
/// passes (then `false`). `cond` is always checked at least once, and once more at the deadline.
pub(crate) fn wait_until(deadline: Instant, mut cond: impl FnMut() -> bool) -> bool {
    loop {
        if cond() {
            return true;
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return false;
        }
        std::thread::sleep(POLL_INTERVAL.min(remaining));
    }
}
