//! The handler shapes `#[delayed_job]` accepts: each compiles, and each registers its topic.

use dq::{JobContext, JobError};
use serde::{Deserialize, Serialize};

/// A payload type.
#[derive(Serialize, Deserialize)]
pub struct CloseOrder {
    /// The order to close.
    pub order_id: u64,
}

#[dq::delayed_job(
    topic = "orders.close",
    retry = "15s, 3m, 10m",
    timeout = "30s",
    concurrency = 16
)]
async fn close_order(order: CloseOrder, ctx: JobContext) -> Result<(), JobError> {
    let _ = (order.order_id, ctx.attempt);
    Ok(())
}

#[dq::delayed_job]
async fn no_context(_n: u64) -> Result<(), JobError> {
    Ok(())
}

#[dq::delayed_job(retry = "none")]
async fn io_error(_path: String) -> Result<(), std::io::Error> {
    Ok(())
}

#[dq::delayed_job(retry = "fixed(1s, 5)")]
async fn io_result(_path: String) -> std::io::Result<()> {
    Ok(())
}

#[dq::delayed_job(retry = "exponential(1s, 1h, 10)")]
async fn string_error(_text: String, _: JobContext) -> Result<(), String> {
    Ok(())
}

#[dq::delayed_job(retry = "exponential(1s, 1h, 10, jitter = 0%)")]
async fn exact_backoff(_n: u64) -> Result<(), JobError> {
    Ok(())
}

#[dq::delayed_job(retry = "15s, 3m, 10m; jitter = 10%")]
async fn spread_tiers(_n: u64) -> Result<(), JobError> {
    Ok(())
}

#[dq::delayed_job]
async fn str_error(_: Vec<u8>) -> Result<(), &'static str> {
    Err("always")
}

#[dq::delayed_job]
async fn boxed_error(
    CloseOrder { order_id }: CloseOrder,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let _ = order_id;
    Ok(())
}

/// A blocking handler runs on tokio's blocking pool.
#[dq::delayed_job(timeout = "500ms")]
fn blocking(_n: (u32, String), _ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

/// Raw identifiers lose their `r#` in the topic.
#[dq::delayed_job]
async fn r#match(_n: u64) -> Result<(), JobError> {
    Ok(())
}

/// A public handler in a public module.
pub mod jobs {
    use super::CloseOrder;

    /// Visibility is kept: the companion type is as public as the fn.
    #[dq::delayed_job(topic = "orders.remind")]
    pub async fn remind(_order: CloseOrder) -> Result<(), dq::JobError> {
        Ok(())
    }
}

/// Code generated inside another crate names dq through its own path.
mod reexport {
    pub use ::dq as engine;
}

#[dq::delayed_job(crate = "crate::reexport::engine", topic = "via.reexport")]
async fn via_reexport(_n: u64) -> Result<(), JobError> {
    Ok(())
}

#[test]
fn every_accepted_shape_registers_its_topic() {
    // Handlers may be declared inside a function body too.
    #[dq::delayed_job(topic = "local")]
    async fn local(_n: u64) -> Result<(), JobError> {
        Ok(())
    }

    fn topic<J: dq::Job>(_payload: J::Payload) -> &'static str {
        J::TOPIC
    }
    assert_eq!(
        topic::<close_order>(CloseOrder { order_id: 7 }),
        "orders.close"
    );
    assert_eq!(
        topic::<jobs::remind>(CloseOrder { order_id: 7 }),
        "orders.remind"
    );
    assert_eq!(topic::<r#match>(1), "match");
    assert_eq!(topic::<local>(1), "local");
    assert_eq!(topic::<via_reexport>(1), "via.reexport");
    let _ = (
        no_context,
        io_error,
        io_result,
        string_error,
        str_error,
        boxed_error,
        blocking,
        exact_backoff,
        spread_tiers,
    );

    // A chosen jitter reaches the runtime policy; the default is left out of the text.
    let retry_of = |topic: &str| {
        let d = dq::handler::registered_jobs()
            .find(|d| d.topic == topic)
            .unwrap();
        dq::RetryPolicy::parse(d.retry).unwrap()
    };
    assert_eq!(retry_of("exact_backoff").jitter(), Some(dq::Jitter::None));
    assert_eq!(
        retry_of("spread_tiers").jitter(),
        Some(dq::Jitter::UpTo(10))
    );
    assert_eq!(retry_of("io_result").jitter(), Some(dq::Jitter::None));
    assert_eq!(retry_of("io_error").jitter(), None);
    assert_eq!(
        retry_of("string_error").jitter(),
        Some(dq::Jitter::UpTo(100))
    );

    let mut topics: Vec<_> = dq::handler::registered_jobs().map(|d| d.topic).collect();
    topics.sort();
    assert_eq!(
        topics,
        [
            "blocking",
            "boxed_error",
            "exact_backoff",
            "io_error",
            "io_result",
            "local",
            "match",
            "no_context",
            "orders.close",
            "orders.remind",
            "retry_fn.default",
            "retry_fn.most",
            "spread_tiers",
            "str_error",
            "string_error",
            "via.reexport",
        ]
    );
}

/// A retry function, named by its path.
fn give_up(_attempt: u32, _error: &dq::RetryError<'_>) -> dq::RetryDecision {
    dq::RetryDecision::Dead
}

mod policies {
    /// A retry function in another module, named by its path.
    pub fn discard(_attempt: u32, _error: &dq::RetryError<'_>) -> dq::RetryDecision {
        dq::RetryDecision::Discard
    }
}

#[dq::delayed_job(topic = "retry_fn.default", retry_fn = give_up)]
async fn with_retry_fn(_n: u64) -> Result<(), JobError> {
    Ok(())
}

#[dq::delayed_job(topic = "retry_fn.most", retry_fn = policies::discard, max_attempts = 101)]
async fn with_most_attempts(_n: u64) -> Result<(), JobError> {
    Ok(())
}

/// `retry_fn` registers the function with its bound: the default is dq-core's
/// `DEFAULT_FN_ATTEMPTS`, the largest accepted `max_attempts` its `MAX_FN_ATTEMPTS` (the
/// macro's own constants, tied here).
#[test]
fn a_retry_function_is_registered_with_its_bound() {
    let find = |topic: &str| {
        dq::handler::registered_jobs()
            .find(|d| d.topic == topic)
            .and_then(|d| d.retry_fn)
            .unwrap()
    };
    let f = find("retry_fn.default");
    assert_eq!(
        (f.name(), f.max_attempts()),
        ("give_up", dq::handler::DEFAULT_FN_ATTEMPTS)
    );
    let f = find("retry_fn.most");
    assert_eq!(
        (f.name(), f.max_attempts()),
        ("policies::discard", dq::handler::MAX_FN_ATTEMPTS)
    );
    let e = dq::RetryError::new(1, 101, dq::FailureKind::Error, "x", None);
    assert_eq!(f.decide(&e), dq::RetryDecision::Discard);
    assert!(
        dq::handler::registered_jobs()
            .find(|d| d.topic == "orders.close")
            .unwrap()
            .retry_fn
            .is_none()
    );
}
