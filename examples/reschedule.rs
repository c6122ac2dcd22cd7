//! A reschedulable timer, found by business key.
//!
//! A pet finishes eating in 4 hours (4 seconds here). At t+1h the player uses a speed-up card:
//! the timer moves 2 hours earlier. dq finds the job by its key (`pet-42`) — no scan — and
//! shifts its due time; it fires once, at the new time.
//!
//! Run: `cargo run --example reschedule` (embedded store), or with `REDIS_URL=redis://…`.

mod common;

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One "hour" of game time in this demo.
const HOUR: Duration = Duration::from_secs(1);

#[derive(Serialize, Deserialize)]
struct Feeding {
    pet_id: u64,
}

/// The pet has finished eating.
#[dq::delayed_job(topic = "pets.fed")]
async fn finish_feeding(feeding: Feeding, ctx: dq::JobContext) -> Result<(), dq::JobError> {
    let timeline = ctx.data::<common::Timeline>()?;
    timeline.say(format!(
        "pet {} finished eating (timer fired, {} ms after due)",
        feeding.pet_id,
        ctx.late.as_millis()
    ));
    ctx.data::<tokio::sync::mpsc::Sender<()>>()?
        .send(())
        .await
        .ok();
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::init_logs();
    let timeline = common::Timeline::start();
    let client = common::connect("reschedule").await;
    let (fired_tx, mut fired) = tokio::sync::mpsc::channel::<()>(4);
    let worker = dq::Worker::builder(client.clone())
        .topics(["pets.fed"])
        .data(timeline)
        .data(fired_tx)
        .build()?
        .start()
        .await?;

    client
        .enqueue::<finish_feeding>(Feeding { pet_id: 42 })
        .key("pet-42")
        .delay(4 * HOUR)
        .await?;
    let job = client
        .job::<finish_feeding>("pet-42")
        .await?
        .expect("just enqueued");
    timeline.say(format!(
        "pet 42 starts eating; done in 4h (due at store time {} ms)",
        dq::store::unix_ms(job.due)
    ));

    tokio::time::sleep(HOUR).await;
    let outcome = client
        .reschedule::<finish_feeding>(
            "pet-42",
            dq::NewDue::Shift(-((2 * HOUR).as_millis() as i64)),
        )
        .await?;
    timeline.say(format!(
        "speed-up card: timer moved 2h earlier → {outcome:?}"
    ));

    tokio::time::timeout(Duration::from_secs(30), fired.recv()).await?;
    let fired_at = timeline.elapsed();
    worker.shutdown().await;
    println!(
        "summary: fired once at t+{:.2}s (2 'hours' after the start instead of 4)",
        fired_at.as_secs_f64()
    );
    assert!(
        fired_at >= 2 * HOUR && fired_at < 3 * HOUR,
        "fired at {fired_at:?}"
    );
    Ok(())
}
