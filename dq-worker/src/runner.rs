//! A runner is responsible for one delivered job:
//!
//! 1. decode the payload (a payload that does not fit the handler's type → dead at once,
//!    never retried, the error naming the type and the field);
//! 2. call the handler on its own task, under the topic's timeout;
//! 3. catch a panic (a failed attempt, like a timeout);
//! 4. stop the handler if the lease is lost, or has surely run out by this process's clock
//!    (no round trip needed: after a pause this is noticed before any result is trusted), or
//!    the worker's hard stop fires: cancel, a short grace, abort. A result after the lease
//!    ran out is discarded (someone else may own the job now), and so is a failure after the
//!    hard stop (shutdown releases the job without spending its attempt); a handler is never
//!    started on a lease that has already run out;
//! 5. turn the result into an outcome — ack, retry at the policy's delay, defer, or bury — and
//!    hand it to the completer. The pool permit is returned as soon as the handler is done.
//!    A run that failed after `ctx.data::<T>()` found no `T` is a deployment error, not the
//!    job's: whatever error the handler made of it (a panic from `unwrap` too), the job is
//!    deferred without spending its attempt, logged at ERROR once per topic and type, and
//!    listed in the worker's health.
//!
//! With layers (`middleware.rs`), steps 1 and 2 are the innermost service of the stack, and
//! the whole stack runs on the handler's task, under 2–4.

use std::sync::Arc;
use std::time::Duration;

use dq_core::{
    Delivery, ErrorKind, FailAction, FailureKind, JobContext, JobError, LeaseDeadline,
    RetryDecision, RetryError, RetryFn, RetryPolicy, SharedData,
};
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::completer::{Completion, CompletionSender, Outcome};
use crate::health::MissingDataLog;
use crate::in_flight::{InFlight, Lease};
use crate::metrics::Failure;
use crate::middleware::{self, JobRequest, Stack};
use crate::registry::TopicRuntime;

/// How long a handler whose lease was lost may take to notice and return before it is
/// aborted. (At shutdown the grace is [`RunnerShared::stop_grace`], taken out of the deadline.)
const CANCEL_GRACE: Duration = Duration::from_secs(1);

/// What every runner of a worker shares.
pub(crate) struct RunnerShared {
    pub data: Arc<SharedData>,
    /// Where handlers' progress reports go.
    pub store: Arc<dyn dq_core::Store>,
    /// The largest handler result kept: the client's payload limit.
    pub max_result: usize,
    pub in_flight: InFlight,
    pub completer: CompletionSender,
    /// Fired shortly before the shutdown deadline: handlers still running are told to stop.
    pub hard_stop: CancellationToken,
    /// How long a handler told to stop by the hard stop may take before it is aborted; the
    /// hard stop fires this long before the shutdown deadline.
    pub stop_grace: Duration,
    /// How long a job is deferred when its handler asked for shared data this worker lacks.
    pub missing_data_delay: Duration,
    /// The shared data handlers asked for and did not find, for health and the ERROR log.
    pub missing_data: MissingDataLog,
    /// The worker's layers around every handler (`None`: none added).
    pub middleware: Option<Arc<Stack>>,
    /// Wakes the batch relay (`relay.rs`): a member of a batch was leased.
    pub relay_wake: Arc<tokio::sync::Notify>,
}

/// Runs one job to its outcome.
pub(crate) async fn run(
    mut delivery: Delivery,
    fetched_at: tokio::time::Instant,
    lease_length: Duration,
    permit: OwnedSemaphorePermit,
    topic: Arc<TopicRuntime>,
    shared: Arc<RunnerShared>,
) {
    if delivery.batch.is_some() {
        // a member runs: its end will be noted; the relay polls while a batch is open
        shared.relay_wake.notify_one();
    }
    let cancel = shared.hard_stop.child_token();
    let deadline = LeaseDeadline::new(fetched_at + lease_length);
    let lease = Lease {
        queue: delivery.queue.clone(),
        key: delivery.key.clone(),
        token: delivery.token,
        attempt: delivery.attempt,
        group: delivery.group.clone(),
        cancel: cancel.clone(),
        finished: Default::default(),
        cancel_requested: Default::default(),
        expires: deadline.clone(),
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
    // Continue the producer's trace, if it stored one with the job (see `dq_core::trace`).
    #[cfg(feature = "otel")]
    if let Some(cx) = dq_core::trace::split(&delivery.payload)
        .0
        .and_then(dq_core::trace::context_of)
    {
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        // No OpenTelemetry layer installed: nothing to continue.
        let _ = span.set_parent(cx);
    }
    // The layers' request owns the payload; without layers it is read where it is.
    let payload = match shared.middleware {
        Some(_) => std::mem::take(&mut delivery.payload),
        None => Vec::new(),
    };
    let outcome = async {
        // A delivery whose lease surely ran out before it could start (the process was paused
        // between the fetch and here, say) may already belong to another worker: never start
        // it. Its lease's expiry returns the job.
        if lease.has_expired() {
            tracing::warn!("lease ran out before the handler could start; not started");
            gone(&shared, &lease);
            return None;
        }
        tracing::debug!(late_ms = late.as_millis() as u64, "started");
        // Counts the run as started and running; records its run time however it ends.
        let _running = topic.metrics.started(late);
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
        )
        .with_lease_deadline(deadline.clone())
        .with_group(delivery.group.clone())
        .with_batch(delivery.batch.clone())
        .with_reporter(Arc::new(dq_core::progress::LeaseReporter {
            store: shared.store.clone(),
            queue: delivery.queue.clone(),
            key: delivery.key.clone(),
            token: delivery.token,
        }));
        // Shares the note of missing data with the handler's context, which moves into it.
        let probe = ctx.clone();
        let handler = match &shared.middleware {
            // The layers around the handler (`middleware.rs`): the decode is the innermost
            // service's, a payload that does not fit its permanent error.
            Some(stack) => stack.call(JobRequest::new(topic.descriptor.run, payload, ctx)),
            None => match (topic.descriptor.run)(&delivery.payload, ctx) {
                Ok(f) => f,
                Err(e) => {
                    // Permanent: the same bytes will not fit the same type on another attempt.
                    topic.metrics.failed(Failure::Dead);
                    return Some(Outcome::Failed {
                        action: FailAction::Bury,
                        error: middleware::undecodable(e),
                    });
                }
            },
        };
        let mut task = tokio::spawn(handler.in_current_span());
        let timeout = async {
            match topic.timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        // Lease lost, lease surely run out by our clock, or hard stop.
        let stop = async {
            tokio::select! {
                () = cancel.cancelled() => {}
                () = deadline.passed() => {}
            }
        };
        // Why the run failed, when the handler itself could not say (for the metrics).
        let mut cause = None;
        // Biased, stop first: after a pause every timer is overdue at once, and a result that
        // is ready together with the stop must not be trusted over it.
        let result = tokio::select! {
            biased;
            () = stop => {
                // Another delivery may own the job, or shutdown releases it. The handler sees
                // `ctx.cancelled()` and gets a moment to wind down before it is aborted; its
                // pool permit stays taken until then.
                cancel.cancel();
                let grace = if shared.hard_stop.is_cancelled() {
                    shared.stop_grace
                } else {
                    CANCEL_GRACE
                };
                let cancel_requested = || {
                    lease.is_cancel_requested()
                        && !lease.has_expired()
                        && !shared.hard_stop.is_cancelled()
                };
                let mut joined = tokio::time::timeout(grace, &mut task).await;
                if joined.is_err() {
                    task.abort();
                    // An abort lands at the handler's next `.await`; one that blocks without
                    // yielding may still finish its work and return in the poll it is in.
                    // For a cancel request (the job stays ours), wait one more grace for
                    // that result: a handler that did its work succeeded, and is counted so
                    // (`succeeded_after_cancel_request`), never as cancelled.
                    if cancel_requested() {
                        joined = tokio::time::timeout(grace, &mut task).await;
                    }
                }
                match joined {
                    Ok(Ok(Ok(returned))) => Ok(returned),
                    // A client cancelled the running job: it ends as cancelled, not retried
                    // (unless the lease ran out, or shutdown is releasing it: the store ends
                    // a job whose cancel was requested as cancelled then too).
                    _ if cancel_requested() => {
                        topic.metrics.failed(Failure::Cancelled);
                        return Some(Outcome::Failed {
                            action: FailAction::Cancel,
                            error: "cancelled while running".into(),
                        });
                    }
                    _ => return discard(&shared, &lease),
                }
            }
            joined = &mut task => match joined {
                Ok(result) => result,
                Err(e) if e.is_panic() => {
                    cause = Some(Failure::Panic);
                    Err(JobError::retry(format!(
                        "handler panicked: {}",
                        panic_message(e.into_panic())
                    )))
                }
                Err(e) => Err(JobError::retry(format!("handler task failed: {e}"))),
            },
            () = timeout => {
                task.abort();
                cause = Some(Failure::Timeout);
                Err(JobError::retry(format!(
                    "timed out after {:?}",
                    topic.timeout.unwrap_or_default()
                )))
            }
        };
        // What the handler returned after it was told to stop is not trusted: a result
        // after the lease ran out is discarded (the job may be running elsewhere), and so is
        // a failure at shutdown (the job is released, its attempt not spent). Only a success
        // while the lease still holds is written: the work was done.
        if lease.has_expired() || (cancel.is_cancelled() && result.is_err()) {
            return discard(&shared, &lease);
        }
        Some(match result {
            Ok(returned) => {
                topic.metrics.succeeded();
                Outcome::Succeeded {
                    started_ms: delivery.leased_ms,
                    result: returned.stored(shared.max_result),
                }
            }
            Err(e) => {
                // The note on the context wins: the handler may have turned the missing-data
                // error into another one, or panicked on it.
                let kind = probe
                    .missing_data()
                    .map_or(e.kind(), ErrorKind::MissingData);
                if let ErrorKind::MissingData(type_name) = kind {
                    missing_data(&shared, &topic, type_name);
                }
                let error = describe(&e);
                let failed = Failed {
                    kind,
                    error: &e,
                    message: &error,
                    failure: match cause {
                        Some(Failure::Panic) => FailureKind::Panic,
                        Some(Failure::Timeout) => FailureKind::Timeout,
                        _ => FailureKind::Error,
                    },
                };
                let action = decide(
                    &topic.policy,
                    topic.retry_fn.as_ref(),
                    delivery.attempt,
                    &failed,
                    shared.missing_data_delay,
                );
                topic.metrics.failed(match (&action, cause) {
                    (FailAction::Bury, _) => Failure::Dead,
                    (FailAction::Discard, _) => Failure::Discarded,
                    (FailAction::Throttle(_), _) => Failure::Throttled,
                    (FailAction::Cancel, _) => Failure::Cancelled,
                    (_, Some(cause)) => cause,
                    (FailAction::Defer(_), None) => Failure::Deferred,
                    _ => Failure::Retry,
                });
                Outcome::Failed { action, error }
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

/// A stopped run's result is not written. If the lease ran out, the run is forgotten (the
/// lease's expiry returns the job); otherwise (hard stop) it stays in flight, and shutdown
/// releases the job without spending its attempt.
fn discard(shared: &RunnerShared, lease: &Lease) -> Option<Outcome> {
    if lease.has_expired() {
        gone(shared, lease);
    }
    None
}

/// Forgets a run whose lease has surely run out by this process's clock.
fn gone(shared: &RunnerShared, lease: &Lease) {
    if shared.in_flight.remove(&lease.queue, lease.token).is_some() {
        tracing::warn!(
            "lease ran out by this process's clock: handler stopped, result discarded; \
             another delivery may own the job"
        );
    }
    lease.revoke();
}

/// The error's text for the job's history. A `Display` that panics must not take the runner
/// down with it (the job would stay active, its lease extended for as long as the worker
/// lives): it is caught like a handler's panic.
fn describe(e: &JobError) -> String {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| e.to_string()))
        .unwrap_or_else(|p| format!("error could not be displayed: {}", panic_message(p)))
}

/// Notes a job deferred for shared data the worker lacks; the first time for its topic and
/// type, says at ERROR what is wrong and how to fix it.
fn missing_data(shared: &RunnerShared, topic: &TopicRuntime, type_name: &'static str) {
    if shared.missing_data.note(topic.descriptor.topic, type_name) {
        tracing::error!(
            handler = topic.descriptor.name,
            at = %topic.descriptor.location(),
            missing = type_name,
            "the handler asked for shared data of type {type_name}, which this worker was not \
             given: its jobs are deferred by {:?} without spending an attempt, for a worker \
             that has it (see WorkerHealth::missing_data). Fix: add .data(…) of type \
             {type_name} to the worker, or declare it with #[delayed_job(data({type_name}))] \
             so that build() checks it",
            shared.missing_data_delay
        );
    }
}

/// A failed run as [`decide`] sees it: what the handler asked for, its error and the error's
/// text, and how the run failed.
pub(crate) struct Failed<'a> {
    pub kind: ErrorKind,
    pub error: &'a JobError,
    pub message: &'a str,
    pub failure: FailureKind,
}

/// The store action for a failed attempt. A retry function, when the handler has one, decides
/// an ordinary error (a panic, a timeout); `permanent`, `retry_after`, a deferral, a rate limit
/// and missing data keep their meaning without asking it.
pub(crate) fn decide(
    policy: &RetryPolicy,
    retry_fn: Option<&RetryFn>,
    attempt: u32,
    failed: &Failed<'_>,
    missing_data_delay: Duration,
) -> FailAction {
    match failed.kind {
        ErrorKind::Permanent => FailAction::Bury,
        ErrorKind::Defer(d) => FailAction::Defer(d),
        // The partner's rate limit: never spends the attempt; slows the whole topic.
        ErrorKind::RateLimited(d) => FailAction::Throttle(d),
        // A deployment error: never spends the attempt, never buries.
        ErrorKind::MissingData(_) => FailAction::Defer(missing_data_delay),
        ErrorKind::Retry => match retry_fn {
            Some(f) => match f.decide(&RetryError::new(
                attempt,
                f.max_attempts(),
                failed.failure,
                failed.message,
                Some(failed.error.source_error()),
            )) {
                RetryDecision::After(d) => FailAction::Retry(d),
                RetryDecision::Dead => FailAction::Bury,
                RetryDecision::Discard => FailAction::Discard,
            },
            None => policy
                .delay_after(attempt)
                .map_or(FailAction::Bury, FailAction::Retry),
        },
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
        let m = Duration::from_secs(30);
        let boom = JobError::retry("boom");
        let decide = |p: &RetryPolicy, attempt, kind| {
            let failed = Failed {
                kind,
                error: &boom,
                message: "boom",
                failure: FailureKind::Error,
            };
            decide(p, None, attempt, &failed, m)
        };
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
        // Even on the last attempt, and under "none".
        assert_eq!(
            decide(&p, 3, ErrorKind::MissingData("Db")),
            FailAction::Defer(m)
        );
        let none = RetryPolicy::parse("none").unwrap();
        assert_eq!(
            decide(&none, 1, ErrorKind::MissingData("Db")),
            FailAction::Defer(m)
        );
    }

    #[derive(Debug)]
    struct Gone;
    impl std::fmt::Display for Gone {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("the order is gone")
        }
    }
    impl std::error::Error for Gone {}

    /// The handler's own error discards, a timeout retries after a delay of the function's
    /// own, anything else is dead; `permanent` never asks, `retry_after` wins over it (dead
    /// on the last attempt), a deferral never spends an attempt.
    fn by_error(attempt: u32, e: &RetryError<'_>) -> RetryDecision {
        if e.downcast_ref::<Gone>().is_some() {
            return RetryDecision::Discard;
        }
        match e.failure() {
            FailureKind::Timeout => RetryDecision::After(Duration::from_millis(u64::from(attempt))),
            _ => RetryDecision::Dead,
        }
    }

    #[test]
    fn a_retry_function_decides_ordinary_errors() {
        let f = RetryFn::new(by_error).with_max_attempts(3).unwrap();
        let policy = f.lease_expiry_policy();
        let m = Duration::from_secs(30);
        let run = |attempt, kind, error: &JobError, failure| {
            let message = error.to_string();
            let failed = Failed {
                kind,
                error,
                message: &message,
                failure,
            };
            decide(&policy, Some(&f), attempt, &failed, m)
        };
        let gone = JobError::retry(Gone);
        let other = JobError::retry("boom");
        let ms = Duration::from_millis;
        assert_eq!(
            run(1, ErrorKind::Retry, &gone, FailureKind::Error),
            FailAction::Discard
        );
        assert_eq!(
            run(1, ErrorKind::Retry, &other, FailureKind::Error),
            FailAction::Bury
        );
        assert_eq!(
            run(2, ErrorKind::Retry, &other, FailureKind::Timeout),
            FailAction::Retry(ms(2))
        );
        assert_eq!(
            run(3, ErrorKind::Retry, &other, FailureKind::Timeout),
            FailAction::Bury,
            "the last attempt"
        );
        let permanent = JobError::permanent(Gone);
        assert_eq!(
            run(1, ErrorKind::Permanent, &permanent, FailureKind::Error),
            FailAction::Bury,
            "permanent never asks the function"
        );
        let after = JobError::retry_after(ms(9), Gone);
        assert_eq!(
            run(1, after.kind(), &after, FailureKind::Error),
            FailAction::Retry(ms(9)),
            "retry_after wins over the function"
        );
        assert_eq!(
            run(3, after.kind(), &after, FailureKind::Error),
            FailAction::Bury
        );
        let defer = JobError::defer(ms(5));
        assert_eq!(
            run(3, defer.kind(), &defer, FailureKind::Error),
            FailAction::Defer(ms(5))
        );
    }
}
