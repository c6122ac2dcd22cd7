//! A periodic job: a sensor is polled every second, exactly once per tick however many
//! workers run, and a nightly report is declared in Berlin time.
//!
//! The schedules live in the store (`client.schedules()` lists them with their next tick), so
//! they survive restarts; every worker of the topic runs the scheduler, and each tick's job is
//! enqueued by the key `<schedule>@<tick ms>`, so two workers never run a tick twice. Here two
//! workers share the schedule; the demo stops after four ticks.
//!
//! Run: `cargo run --example periodic` (embedded store), or with `REDIS_URL=redis://…`.

mod common;

use std::time::Duration;

use dq::{Missed, Schedule};

/// Reads the sensor; one job per tick.
#[dq::delayed_job(topic = "sensors.poll")]
async fn poll_sensor(sensor: String, ctx: dq::JobContext) -> Result<(), dq::JobError> {
    let timeline = ctx.data::<common::Timeline>()?;
    timeline.say(format!(
        "tick {}: polled {sensor} ({} ms after the tick)",
        ctx.key,
        ctx.late.as_millis()
    ));
    ctx.data::<tokio::sync::mpsc::Sender<String>>()?
        .send(ctx.key.to_string())
        .await
        .ok();
    Ok(())
}

/// Builds the nightly report (never reached in this short demo).
#[dq::delayed_job(topic = "reports.nightly")]
async fn nightly_report(_day: String) -> Result<(), dq::JobError> {
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::init_logs();
    let timeline = common::Timeline::start();
    let client = common::connect("periodic").await;
    let (ticks_tx, mut ticks) = tokio::sync::mpsc::channel::<String>(16);
    // Two workers on the same store, as two processes would be.
    let mut workers = Vec::new();
    for _ in 0..2 {
        let worker = dq::Worker::builder(client.clone())
            .topics(["sensors.poll", "reports.nightly"])
            .data(timeline)
            .data(ticks_tx.clone())
            .build()?;
        workers.push(worker.start().await?);
    }

    let every_second = Schedule::every(Duration::from_secs(1))?;
    let outcome = client
        .schedule::<poll_sensor>("sensor-7", every_second, "sensor 7".into())
        .await?;
    timeline.say(format!("schedule sensor-7, every second: {outcome:?}"));
    let nightly = Schedule::cron("0 30 2 * * *")?
        .tz("Europe/Berlin")?
        .missed(Missed::Skip);
    client
        .schedule::<nightly_report>("nightly", nightly, "yesterday".into())
        .await?;
    for s in client.schedules().await? {
        timeline.say(format!(
            "stored: {} (topic {}) next tick at {} ms",
            s.name,
            s.topic,
            s.next_ms.unwrap_or_default()
        ));
    }

    let mut seen = Vec::new();
    while seen.len() < 4 {
        let key = tokio::time::timeout(Duration::from_secs(30), ticks.recv())
            .await?
            .ok_or("workers stopped")?;
        seen.push(key);
    }
    client.unschedule("sensor-7").await?;
    client.unschedule("nightly").await?;
    for worker in workers {
        worker.shutdown().await;
    }
    let distinct: std::collections::BTreeSet<_> = seen.iter().collect();
    println!(
        "summary: {} ticks by 2 workers, {} distinct (each tick once); schedules removed",
        seen.len(),
        distinct.len()
    );
    assert_eq!(distinct.len(), seen.len());
    Ok(())
}
