//! A small application with the dq worker embedded in it, stopped gracefully on Ctrl-C.
//!
//! The "app" signs users up and schedules a welcome e-mail 1 second later; the worker runs
//! in the same process. Press Ctrl-C to stop: the worker stops fetching, lets running jobs
//! finish, and releases any that don't within the shutdown timeout. Stops by itself after
//! 5 seconds so it can run unattended.
//!
//! Run: `cargo run --example embedded` (embedded store), or with `REDIS_URL=redis://…`.

mod common;

use std::time::Duration;

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Welcome {
    user: String,
}

/// Sends the welcome e-mail.
#[dq::delayed_job(topic = "mail.welcome", retry = "1s, 5s, 30s", timeout = "10s")]
async fn send_welcome(mail: Welcome, ctx: dq::JobContext) -> Result<(), dq::JobError> {
    let timeline = ctx.data::<common::Timeline>()?;
    tokio::time::sleep(Duration::from_millis(50)).await; // talking to the mail server
    timeline.say(format!("welcome mail sent to {}", mail.user));
    Ok(())
}

/// The application's own work: a sign-up every 300 ms.
async fn app(client: dq::Client, timeline: common::Timeline) -> Result<(), dq::Error> {
    for n in 1.. {
        let user = format!("user{n}@example.com");
        client
            .enqueue::<send_welcome>(Welcome { user: user.clone() })
            .key(format!("welcome-{user}"))
            .delay(Duration::from_secs(1))
            .await?;
        timeline.say(format!("{user} signed up; welcome mail in 1s"));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::init_logs();
    let timeline = common::Timeline::start();
    let client = common::connect("embedded").await;
    let worker = dq::Worker::builder(client.clone())
        .topics(["mail.welcome"])
        .data(timeline)
        .shutdown_timeout(Duration::from_secs(5))
        .build()?;
    println!("press Ctrl-C to stop (stops by itself after 5 s)");

    let app = tokio::spawn(app(client.clone(), timeline));
    let report = worker
        .run_until(async {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => timeline.say("Ctrl-C: shutting down"),
                () = tokio::time::sleep(Duration::from_secs(5)) => timeline.say("5 s passed: shutting down"),
            }
        })
        .await?;
    app.abort();
    let stats = client.stats::<send_welcome>().await?;
    println!(
        "summary: {} mails sent, {} still scheduled (on Redis they wait for the next start), shutdown {:?}",
        stats.succeeded, stats.scheduled, report
    );
    Ok(())
}
