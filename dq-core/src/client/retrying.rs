//! How a client retries a store call through connection trouble: for how long
//! ([`ENQUEUE_RETRY_WINDOW`]), how often, and which calls may be repeated at all.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};

use crate::error::Result;

/// How long after its first try an enqueue call is still retried. Shorter than
/// [`ENQUEUE_RECEIPT_LIFE`](crate::store::produce::ENQUEUE_RECEIPT_LIFE) by a margin, so that a retry always
/// finds the receipt of an earlier try that was applied.
pub const ENQUEUE_RETRY_WINDOW: Duration = Duration::from_secs(20);

/// Retries a call that is safe to repeat after connection trouble or a timeout.
pub(super) fn retrying() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(Duration::from_secs(1))
        .with_max_times(3)
        .with_jitter()
}

/// Runs a store call that is harmless to repeat, retrying it (if `repeatable`) through
/// connection trouble for up to [`ENQUEUE_RETRY_WINDOW`]. Also says whether an earlier try
/// that failed may have been applied (its reply lost), which a later outcome may need to
/// account for.
pub(super) async fn retry_harmless<T, Fut>(
    call: impl FnMut() -> Fut,
    repeatable: bool,
) -> Result<(T, bool)>
where
    Fut: Future<Output = Result<T>>,
{
    let started = tokio::time::Instant::now();
    let ambiguous = AtomicBool::new(false);
    let outcome = call
        .retry(retrying())
        .when(|e| repeatable && e.is_retryable() && started.elapsed() < ENQUEUE_RETRY_WINDOW)
        .notify(|e, _| {
            if e.may_have_applied() {
                ambiguous.store(true, Ordering::Relaxed);
            }
        })
        .await?;
    Ok((outcome, ambiguous.load(Ordering::Relaxed)))
}
