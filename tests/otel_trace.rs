//! Trace context from producer to handler (feature `otel`): a job enqueued under an
//! OpenTelemetry span carries its `traceparent` through Redis, and the handler's `job` span
//! continues that trace — one trace id from "order created" to the handler, whatever time
//! passes between. Without a context nothing is carried.
//!
//! `cargo test --features otel --test otel_trace`
#![cfg(feature = "otel")]

use std::future::IntoFuture;
use std::time::Duration;

use dq::{Client, JobError, Worker};
use dq_testkit::eventually;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

const WAIT: Duration = Duration::from_secs(30);

#[dq::delayed_job(topic = "otel.close", retry = "none")]
async fn close_order(_id: u64) -> Result<(), JobError> {
    tracing::info!("closing the order");
    Ok(())
}

fn span<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

/// Current-thread runtime: the subscriber set for this thread sees the worker's tasks too.
#[tokio::test]
async fn producer_span_job_and_handler_span_share_one_trace() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("dq-test")));
    let _guard = tracing::subscriber::set_default(subscriber);

    let client = Client::builder()
        .namespace(dq_testkit::namespace("otel"))
        .connect(&dq_testkit::shared().url())
        .await
        .unwrap();
    let worker = Worker::builder(client.clone())
        .topics(["otel.close"])
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");

    // Under a span: carried. Due a little later, so the handler runs well after the
    // producer's span has ended.
    client
        .enqueue::<close_order>(1)
        .key("traced")
        .delay(Duration::from_millis(200))
        .into_future()
        .instrument(tracing::info_span!("order created"))
        .await
        .unwrap();
    // Outside any span: nothing carried, the stored payload is the plain one.
    client
        .enqueue::<close_order>(2)
        .key("plain")
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    let plain = client
        .topic("otel.close")
        .unwrap()
        .job("plain")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(dq::trace::split(&plain.payload).0, None);
    assert_eq!(plain.payload, dq::payload::encode(&2u64, 1024).unwrap());
    client.cancel::<close_order>("plain").await.unwrap();

    eventually("the traced job ran", WAIT, || {
        let client = client.clone();
        async move { client.stats::<close_order>().await.unwrap().succeeded == 1 }
    })
    .await;
    worker.shutdown().await;
    provider.force_flush().unwrap();

    let spans = exporter.get_finished_spans().unwrap();
    let producer = span(&spans, "order created");
    let jobs = span(&spans, "job");
    assert_eq!(producer.len(), 1, "{spans:#?}");
    assert_eq!(jobs.len(), 1, "{spans:#?}");
    let (producer, job) = (producer[0], jobs[0]);
    assert_eq!(
        job.span_context.trace_id(),
        producer.span_context.trace_id(),
        "the handler's span continues the producer's trace"
    );
    assert_eq!(job.parent_span_id, producer.span_context.span_id());
    // The handler's own events are in that span.
    assert!(
        job.events.iter().any(|e| e.name == "closing the order"),
        "{job:#?}"
    );
}
