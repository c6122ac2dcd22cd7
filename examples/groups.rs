//! Groups: three tenants share one topic, each served in turn and within its own limits.
//!
//! `acme` enqueues 6 report jobs first, then `globex` and `initech` 2 each. Without groups
//! `acme`'s backlog would run first; with `group = tenant` the tenants take turns, each runs
//! at most one report at a time (`group_concurrency = 1`, declared on the handler and written
//! by the worker at start), and `acme` pays for two at a time (its own limits). The timeline
//! shows the turns; the run ends once every report is done.
//!
//! Run: `cargo run --example groups` (embedded store), or with `REDIS_URL=redis://…`.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dq::GroupLimits;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Report {
    tenant: String,
    n: u32,
}

/// Reports running per tenant now, and the most at once.
#[derive(Clone, Default)]
struct Running(Arc<Mutex<HashMap<String, (u32, u32)>>>);

/// Builds one tenant's report: its tenant is its group.
#[dq::delayed_job(topic = "reports.build", group = tenant, group_concurrency = 1,
                  data(common::Timeline, Running))]
async fn build_report(report: Report, ctx: dq::JobContext) -> Result<(), dq::JobError> {
    let (timeline, running) = (ctx.data::<common::Timeline>()?, ctx.data::<Running>()?);
    {
        let mut r = running.0.lock().unwrap();
        let e = r.entry(report.tenant.clone()).or_default();
        e.0 += 1;
        e.1 = e.1.max(e.0);
    }
    timeline.say(format!("{} report {} starts", report.tenant, report.n));
    tokio::time::sleep(Duration::from_millis(100)).await; // the work
    running.0.lock().unwrap().get_mut(&report.tenant).unwrap().0 -= 1;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::init_logs();
    let timeline = common::Timeline::start();
    let running = Running::default();
    let client = common::connect("groups").await;
    let topic = client.topic("reports.build")?;

    for (tenant, n) in [("acme", 6), ("globex", 2), ("initech", 2)] {
        for i in 1..=n {
            client
                .enqueue::<build_report>(Report {
                    tenant: tenant.into(),
                    n: i,
                })
                .await?;
        }
    }
    timeline.say("10 reports enqueued: acme's 6 first");

    let worker = dq::Worker::builder(client.clone())
        .topics(["reports.build"])
        .concurrency("reports.build", 8)
        .data(timeline)
        .data(running.clone())
        .build()?
        .start()
        .await?;
    // acme's own limits replace the default the worker just wrote
    topic
        .set_group_limits(Some("acme"), Some(GroupLimits::new().concurrency(2)))
        .await?;
    for _ in 0..600 {
        if client.stats::<build_report>().await?.succeeded == 10 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.shutdown().await;

    let most = running.0.lock().unwrap().clone();
    for (tenant, (_, at_once)) in &most {
        println!("{tenant}: at most {at_once} at once");
    }
    let done = client.stats::<build_report>().await?.succeeded;
    println!("summary: {done} reports built");
    assert_eq!(done, 10, "every report ran");
    assert!(
        most.iter()
            .all(|(t, (_, m))| *m <= if t == "acme" { 2 } else { 1 }),
        "no tenant over its cap: {most:?}"
    );
    Ok(())
}
