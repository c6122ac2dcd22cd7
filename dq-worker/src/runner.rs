//! A runner is responsible for one delivered job:
//!
//! 1. decode the payload (undecodable → dead at once, never retried);
//! 2. call the handler on its own task, under the topic's timeout;
//! 3. catch a panic (a failed attempt, like a timeout);
//! 4. stop waiting if the lease is lost or the worker's hard stop fires (the result would be
//!    rejected anyway; someone else owns the job now);
//! 5. turn the result into an outcome — ack, retry at the policy's delay, defer, or bury — and
//!    hand it to the completer. The pool permit is returned as soon as the handler is done.

use std::sync::Arc;
use std::time::Duration;

use dq_core::{Delivery, ErrorKind, FailAction, JobContext, JobError, RetryPolicy, SharedData};
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::completer::{Completion, CompletionSender, Outcome};
use crate::in_flight::{InFlight, Lease};
use crate::registry::TopicRuntime;

/// How long a cancelled handler may take to notice and return before it is aborted.
const CANCEL_GRACE: Duration = Duration::from_secs(1);

/// What every runner of a worker shares.
pub(crate) struct RunnerShared {
    pub data: Arc<SharedData>,
    pub in_flight: InFlight,
    pub completer: CompletionSender,
    /// Fired when the shutdown deadline passes: handlers still running are told to stop.
    pub hard_stop: CancellationToken,
}

/// Runs one job to its outcome.
pub(crate) async fn run(
    delivery: Delivery,
    fetched_at: tokio::time::Instant,
    lease_length: Duration,
    permit: OwnedSemaphorePermit,
    topic: Arc<TopicRuntime>,
    shared: Arc<RunnerShared>,
) {
    let cancel = shared.hard_stop.child_token();
    let lease = Lease {
        queue: delivery.queue.clone(),
        key: delivery.key.clone(),
        token: delivery.token,
        attempt: delivery.attempt,
        cancel: cancel.clone(),
        finished: Default::default(),
        expires: Arc::new(std::sync::Mutex::new(fetched_at + lease_length)),
    };
    shared.in_flight.insert(lease.clone());
    let late = Duration::from_millis(delivery.leased_ms.saturating_sub(delivery.due_ms));
    let span = tracing::info_span!(
        "job",
        topic = topic.descriptor.topic,
        key = %delivery.key,
        attempt = delivery.attempt,
        token = delivery.token,
    );
    let outcome = async {
        tracing::debug!(late_ms = late.as_millis() as u64, "started");
        let ctx = JobContext::new(
            topic.descriptor.topic,
            delivery.key.clone(),
            delivery.attempt,
            topic.policy.max_attempts(),
            delivery.due_ms,
            late,
            delivery.token,
            cancel.clone(),
            shared.data.clone(),
        );
        let handler = match (topic.descriptor.run)(&delivery.payload, ctx) {
            Ok(f) => f,
            Err(e) => {
                return Some(Outcome::Failed {
                    action: FailAction::Bury,
                    error: format!("undecodable payload: {e}"),
                });
            }
        };
        let mut task = tokio::spawn(handler.in_current_span());
        let timeout = async {
            match topic.timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        let result = tokio::select! {
            joined = &mut task => match joined {
                Ok(result) => result,
                Err(e) if e.is_panic() => Err(JobError::retry(format!(
                    "handler panicked: {}",
                    panic_message(e.into_panic())
                ))),
                Err(e) => Err(JobError::retry(format!("handler task failed: {e}"))),
            },
            () = timeout => {
                task.abort();
                Err(JobError::retry(format!(
                    "timed out after {:?}",
                    topic.timeout.unwrap_or_default()
                )))
            }
            () = cancel.cancelled() => {
                // Lease lost or hard stop: another delivery owns the job, or shutdown
                // releases it. Either way this result must not be written. The handler
                // sees `ctx.cancelled()` and gets a moment to wind down before it is aborted;
                // its pool permit stays taken until then.
                if tokio::time::timeout(CANCEL_GRACE, &mut task).await.is_err() {
                    task.abort();
                }
                return None;
            }
        };
        Some(match result {
            Ok(()) => Outcome::Succeeded,
            Err(e) => {
                let action = decide(&topic.policy, delivery.attempt, e.kind());
                Outcome::Failed {
                    action,
                    error: e.to_string(),
                }
            }
        })
    }
    .instrument(span.clone())
    .await;
    // The handler is done: free the slot before the outcome is written. A cancelled run is
    // not "finished": shutdown releases it (or the lease keeper has already let it go).
    drop(permit);
    if let Some(outcome) = outcome {
        lease.finish();
        shared
            .completer
            .send(Completion {
                lease,
                outcome,
                span,
            })
            .await;
    }
}

/// The store action for a failed attempt.
pub(crate) fn decide(policy: &RetryPolicy, attempt: u32, kind: ErrorKind) -> FailAction {
    match kind {
        ErrorKind::Permanent => FailAction::Bury,
        ErrorKind::Defer(d) => FailAction::Defer(d),
        ErrorKind::Retry => policy
            .delay_after(attempt)
            .map_or(FailAction::Bury, FailAction::Retry),
        ErrorKind::RetryAfter(d) if attempt < policy.max_attempts() => FailAction::Retry(d),
        ErrorKind::RetryAfter(_) => FailAction::Bury,
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_follow_the_policy() {
        let p = RetryPolicy::fixed(Duration::from_secs(1), 2).unwrap();
        let s = Duration::from_secs(1);
        assert_eq!(decide(&p, 1, ErrorKind::Retry), FailAction::Retry(s));
        assert_eq!(decide(&p, 2, ErrorKind::Retry), FailAction::Retry(s));
        assert_eq!(decide(&p, 3, ErrorKind::Retry), FailAction::Bury);
        assert_eq!(decide(&p, 1, ErrorKind::Permanent), FailAction::Bury);
        let d = Duration::from_millis(5);
        assert_eq!(
            decide(&p, 1, ErrorKind::RetryAfter(d)),
            FailAction::Retry(d)
        );
        assert_eq!(decide(&p, 3, ErrorKind::RetryAfter(d)), FailAction::Bury);
        assert_eq!(decide(&p, 3, ErrorKind::Defer(d)), FailAction::Defer(d));
    }
}
