//! Tiered webhook retry.
//!
//! A callback to a partner fails; dq retries it on a tiered schedule (15s, 3m, 10m, … in
//! production — here 200ms, 400ms, 800ms, 1.6s), keeps every error, and when the schedule
//! runs out moves the job to the dead queue and fires the `on_dead` alert. A "410 Gone"
//! answer is permanent: no retry, dead at once.
//!
//! Run: `cargo run --example webhook_retry` (embedded store), or with `REDIS_URL=redis://…`.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Callback {
    partner: String,
    event: String,
}

/// A fake partner endpoint: how it answers the n-th call.
fn partner_answers(partner: &str, attempt: u32) -> Result<u16, u16> {
    match partner {
        "steady" => Ok(200),
        "flaky" if attempt < 3 => Err(503), // down twice, then recovers
        "flaky" => Ok(200),
        "gone" => Err(410), // the endpoint no longer exists
        _ => Err(500),      // "broken": never recovers
    }
}

/// Delivers one webhook; transient failures are retried on the tiered schedule.
#[dq::delayed_job(topic = "webhooks.deliver", retry = "200ms, 400ms, 800ms, 1600ms")]
async fn deliver(cb: Callback, ctx: dq::JobContext) -> Result<(), dq::JobError> {
    let timeline = ctx.data::<common::Timeline>()?;
    match partner_answers(&cb.partner, ctx.attempt) {
        Ok(status) => {
            timeline.say(format!(
                "{} {}: attempt {} → {status}, delivered",
                cb.partner, cb.event, ctx.attempt
            ));
            Ok(())
        }
        Err(410) => {
            timeline.say(format!(
                "{} {}: attempt {} → 410 Gone, giving up",
                cb.partner, cb.event, ctx.attempt
            ));
            Err(dq::JobError::permanent("partner answered 410 Gone"))
        }
        Err(status) => {
            let next = if ctx.is_last_attempt() {
                "no attempts left"
            } else {
                "will retry"
            };
            timeline.say(format!(
                "{} {}: attempt {}/{} → {status}, {next}",
                cb.partner, cb.event, ctx.attempt, ctx.max_attempts
            ));
            Err(dq::JobError::retry(format!("partner answered {status}")))
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::init_logs();
    let timeline = common::Timeline::start();
    let client = common::connect("webhook_retry").await;
    let alerts = Arc::new(AtomicUsize::new(0));
    let alert_count = alerts.clone();

    let worker = dq::Worker::builder(client.clone())
        .topics(["webhooks.deliver"])
        .data(timeline)
        .on_dead(move |dead: dq::DeadJob| {
            let alerts = alert_count.clone();
            async move {
                timeline.say(format!(
                    "ALERT on_dead: {} after {} attempt(s): {}",
                    dead.key, dead.attempts, dead.error
                ));
                alerts.fetch_add(1, Ordering::SeqCst);
            }
        })
        .build()?
        .start()
        .await?;

    for partner in ["steady", "flaky", "gone", "broken"] {
        client
            .enqueue::<deliver>(Callback {
                partner: partner.into(),
                event: "order.paid".into(),
            })
            .key(format!("{partner}-order.paid"))
            .await?;
    }

    // Bounded wait: two jobs succeed, two end in the dead queue (one at once, one after 5 tries).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while alerts.load(Ordering::SeqCst) < 2 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.shutdown().await;

    let topic = client.topic("webhooks.deliver")?;
    for dead in topic
        .list(dq::JobState::Dead, dq::Page::first(10))
        .await?
        .jobs
    {
        println!("dead: {} after {} attempt(s)", dead.key, dead.attempts);
        for h in &dead.history {
            println!("      attempt {}: {:?} {}", h.attempt, h.outcome, h.error);
        }
    }
    let stats = topic.stats().await?;
    println!(
        "summary: {} delivered, {} retries, {} dead, {} alerts",
        stats.succeeded,
        stats.retried,
        stats.dead,
        alerts.load(Ordering::SeqCst)
    );
    assert_eq!((stats.succeeded, stats.dead), (2, 2));
    Ok(())
}
