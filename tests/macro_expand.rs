//! `#[delayed_job]` end to end without Redis: what it registers, and that the registered entry
//! point decodes a payload and runs the handler.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dq::handler::{JobDescriptor, SharedData};
use dq::{ErrorKind, Job, JobContext, JobError, JobKey, delayed_job};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct CloseOrder {
    order_id: u64,
}

/// What the handlers saw, keyed by handler, so tests running in parallel don't interfere.
static CLOSED: AtomicU64 = AtomicU64::new(0);
static WITHOUT_CTX: AtomicU64 = AtomicU64::new(0);
static BLOCKING: AtomicU64 = AtomicU64::new(0);

#[delayed_job(
    topic = "orders.close",
    retry = "15s,3m , 10m",
    timeout = "30s",
    expires_after = "10m",
    priority = 8,
    concurrency = 16
)]
async fn close_order(order: CloseOrder, ctx: JobContext) -> Result<(), JobError> {
    if order.order_id == 0 {
        return Err(JobError::permanent("order 0 does not exist"));
    }
    CLOSED.store(
        order.order_id * 1000 + u64::from(ctx.attempt),
        Ordering::SeqCst,
    );
    Ok(())
}

/// No `JobContext`, the default topic (the fn's name) and the default retry policy.
#[delayed_job]
async fn without_ctx(n: u64) -> Result<(), String> {
    if n == 13 {
        return Err("unlucky".to_owned());
    }
    WITHOUT_CTX.store(n, Ordering::SeqCst);
    Ok(())
}

/// A blocking handler: runs on tokio's blocking pool.
#[delayed_job(retry = "fixed(1s, 5)")]
fn blocking(n: u64, ctx: JobContext) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    assert!(n != 99, "boom at {n}");
    std::thread::sleep(Duration::from_millis(5));
    BLOCKING.store(n + u64::from(ctx.attempt), Ordering::SeqCst);
    Ok(())
}

#[delayed_job(topic = "files.sync", retry = "none")]
async fn io_errors(path: String) -> Result<(), std::io::Error> {
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        format!("{path} is missing"),
    ))
}

/// A key window and a max_delay (issue 25).
#[delayed_job(topic = "invoices.send", unique_for = "1h", max_delay = "90d")]
async fn send_invoice(_n: u64) -> Result<(), JobError> {
    Ok(())
}

#[delayed_job(topic = "search.reindex", debounce = "5s")]
async fn reindex(_n: u64) -> Result<(), JobError> {
    Ok(())
}

#[delayed_job(retry = "exponential(1000ms, 1h, 10)", timeout = "1500ms")]
pub(crate) async fn exponential(_payload: Vec<String>, _ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn descriptor(topic: &str) -> &'static JobDescriptor {
    let mut found = dq::handler::registered_jobs().filter(|d| d.topic == topic);
    let descriptor = found
        .next()
        .unwrap_or_else(|| panic!("{topic} is not registered"));
    assert!(found.next().is_none(), "{topic} is registered twice");
    descriptor
}

/// The line of this file that starts with `text` (the registered line is the fn's, not the
/// attribute's, whatever rustfmt does to the attribute).
fn line_of(text: &str) -> u32 {
    let index = include_str!("macro_expand.rs")
        .lines()
        .position(|line| line.starts_with(text))
        .unwrap();
    index as u32 + 1
}

fn context(topic: &'static str, attempt: u32) -> JobContext {
    JobContext::new(
        topic,
        JobKey::new("k1").unwrap(),
        attempt,
        4,
        0,
        Duration::ZERO,
        1,
        dq::handler::CancellationToken::new(),
        Arc::new(SharedData::default()),
    )
}

fn encode<T: Serialize>(payload: &T) -> Vec<u8> {
    dq::payload::encode(payload, dq::payload::DEFAULT_MAX_PAYLOAD).unwrap()
}

async fn run(descriptor: &JobDescriptor, payload: &[u8], attempt: u32) -> Result<(), JobError> {
    (descriptor.run)(payload, context(descriptor.topic, attempt))
        .expect("the payload decodes")
        .await
        .map(|returned| {
            assert_eq!(
                returned,
                dq::__private::Returned::Nothing,
                "() returns nothing"
            );
        })
}

#[test]
fn descriptors_carry_the_arguments() {
    let d = descriptor("orders.close");
    assert_eq!(d.retry, "15s, 3m, 10m");
    assert_eq!(d.timeout_ms, Some(30_000));
    assert_eq!(d.concurrency, Some(16));
    assert_eq!(d.name, "macro_expand::close_order");
    assert_eq!(d.file, file!());
    assert_eq!(d.line, line_of("async fn close_order("));
    assert_eq!(
        d.retry_policy().unwrap().schedule(),
        [15, 180, 600].map(Duration::from_secs)
    );

    let d = descriptor("without_ctx");
    assert_eq!(d.retry, "15s, 3m, 10m, 30m, 30m, 1h, 2h, 6h, 15h");
    assert_eq!(d.retry_policy().unwrap(), dq::RetryPolicy::default());
    assert_eq!((d.timeout_ms, d.concurrency), (None, None));

    let d = descriptor("blocking");
    assert_eq!(d.retry, "fixed(1s, 5)");
    assert_eq!(d.retry_policy().unwrap().max_attempts(), 6);

    assert_eq!(descriptor("files.sync").retry, "none");

    let d = descriptor("exponential");
    assert_eq!(d.retry, "exponential(1s, 1h, 10)");
    assert_eq!(d.timeout_ms, Some(1500));
    assert_eq!(d.retry_policy().unwrap().retries(), 10);
    assert_eq!(d.max_delay_ms, None);

    assert_eq!(
        descriptor("invoices.send").max_delay_ms,
        Some(90 * 86_400_000)
    );
}

#[test]
fn key_windows_are_the_typed_clients_defaults() {
    assert_eq!(
        <send_invoice as Job>::WINDOW,
        Some(dq::KeyWindow::UniqueFor(Duration::from_secs(3600)))
    );
    assert_eq!(
        <reindex as Job>::WINDOW,
        Some(dq::KeyWindow::Debounce(Duration::from_secs(5)))
    );
    assert_eq!(<without_ctx as Job>::WINDOW, None);
}

#[test]
fn companion_types_name_the_jobs() {
    fn payload_of<J: Job>(payload: J::Payload) -> J::Payload {
        payload
    }
    assert_eq!(<close_order as Job>::TOPIC, "orders.close");
    assert_eq!(
        <close_order as Job>::EXPIRES_AFTER,
        Some(Duration::from_secs(600))
    );
    assert_eq!(<without_ctx as Job>::EXPIRES_AFTER, None);
    // the handler's priority is the typed client's default (and its descriptor's)
    assert_eq!(
        <close_order as Job>::PRIORITY,
        dq::Priority::new(8).unwrap()
    );
    assert_eq!(<without_ctx as Job>::PRIORITY, dq::Priority::NORMAL);
    assert_eq!(descriptor("orders.close").priority, Some(8));
    assert_eq!(dq::Priority::MAX, 9, "dq-macros' MAX_PRIORITY");
    assert_eq!(<without_ctx as Job>::TOPIC, "without_ctx");
    assert_eq!(<io_errors as Job>::TOPIC, "files.sync");
    assert_eq!(
        payload_of::<close_order>(CloseOrder { order_id: 1 }),
        CloseOrder { order_id: 1 }
    );
    assert_eq!(payload_of::<exponential>(vec!["a".into()]), ["a"]);
    // The fn is still there, callable as written.
    let _: fn(u64, JobContext) -> _ = blocking;
}

#[tokio::test]
async fn run_decodes_and_calls_the_handler() {
    let d = descriptor("orders.close");
    run(d, &encode(&CloseOrder { order_id: 7 }), 3)
        .await
        .unwrap();
    assert_eq!(CLOSED.load(Ordering::SeqCst), 7003);
    let e = run(d, &encode(&CloseOrder { order_id: 0 }), 1)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Permanent);

    let d = descriptor("without_ctx");
    run(d, &encode(&42u64), 1).await.unwrap();
    assert_eq!(WITHOUT_CTX.load(Ordering::SeqCst), 42);
    let e = run(d, &encode(&13u64), 1).await.unwrap_err();
    assert_eq!(
        (e.kind(), e.to_string()),
        (ErrorKind::Retry, "unlucky".into())
    );

    let e = run(descriptor("files.sync"), &encode(&"/etc/x"), 1)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Retry);
    assert_eq!(e.to_string(), "/etc/x is missing");
    let io = e.source_error().downcast_ref::<std::io::Error>().unwrap();
    assert_eq!(io.kind(), std::io::ErrorKind::NotFound);

    run(descriptor("exponential"), &encode(&vec!["a", "b"]), 1)
        .await
        .unwrap();
}

#[tokio::test]
async fn blocking_handlers_run_on_the_blocking_pool() {
    let d = descriptor("blocking");
    run(d, &encode(&5u64), 2).await.unwrap();
    assert_eq!(BLOCKING.load(Ordering::SeqCst), 7);
    let e = run(d, &encode(&99u64), 1).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Retry);
    assert_eq!(e.to_string(), "handler panicked: boom at 99");
}

#[tokio::test]
async fn undecodable_payloads_are_reported_not_run() {
    for d in dq::handler::registered_jobs() {
        let result = (d.run)(b"\xc1 not msgpack", context(d.topic, 1));
        assert!(
            matches!(result, Err(dq::Error::Decode(_))),
            "{}: {:?}",
            d.topic,
            result.map(|_| ())
        );
    }
    // Well-formed MessagePack of the wrong shape is undecodable too.
    let result = (descriptor("orders.close").run)(&encode(&"text"), context("orders.close", 1));
    assert!(matches!(result, Err(dq::Error::Decode(_))));
}
