//! Workflows: an order whose closing waits for its items, and a batch of shipments whose
//! partner is notified once, when every shipment is confirmed or given up.
//!
//! The flow: `close_order` is the parent, one `release_item` per item its children; the order
//! closes only after every item's reservation was released, and reads how many were. The
//! batch: five `confirm_shipment` jobs (one fails for good), and `notify_partner` enqueued once
//! they have all ended, with the batch's counts.
//!
//! Run: `cargo run --example order_flow` (embedded store), or with `REDIS_URL=redis://…`.

mod common;

use std::time::Duration;

use dq::{JobContext, JobError, JobSpec};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Item {
    order: u32,
    sku: String,
}

/// Releases one item's reservation (the work).
#[dq::delayed_job(topic = "orders.release_item", data(common::Timeline))]
async fn release_item(item: Item, ctx: JobContext) -> Result<(), JobError> {
    tokio::time::sleep(Duration::from_millis(50)).await;
    ctx.data::<common::Timeline>()?
        .say(format!("order {}: {} released", item.order, item.sku));
    Ok(())
}

/// Closes an order: runs once every item of it has ended; reads their counts.
#[dq::delayed_job(topic = "orders.close", data(common::Timeline, dq::Client))]
async fn close_order(order: u32, ctx: JobContext) -> Result<(), JobError> {
    let client = ctx.data::<dq::Client>()?;
    let items = client.batch(ctx.children().as_str())?.info().await?;
    let released = items.map_or(0, |i| i.counts.succeeded);
    ctx.data::<common::Timeline>()?
        .say(format!("order {order} closed: {released} items released"));
    Ok(())
}

/// Confirms one shipment with the carrier; shipment 4 is lost for good.
#[dq::delayed_job(topic = "shipments.confirm", data(common::Timeline))]
async fn confirm_shipment(n: u32, ctx: JobContext) -> Result<(), JobError> {
    if n == 4 {
        return Err(JobError::permanent("the carrier lost shipment 4"));
    }
    ctx.data::<common::Timeline>()?
        .say(format!("shipment {n} confirmed"));
    Ok(())
}

/// Tells the partner how the batch went: enqueued once, when every shipment has ended.
#[dq::delayed_job(topic = "partners.notify", data(common::Timeline, dq::Client))]
async fn notify_partner(partner: String, ctx: JobContext) -> Result<(), JobError> {
    let client = ctx.data::<dq::Client>()?;
    let batch = ctx.completed_batch().expect("a batch's callback");
    let info = client.batch(batch.as_str())?.info().await?;
    let (ok, failed) = info.map_or((0, 0), |i| (i.counts.succeeded, i.failed()));
    ctx.data::<common::Timeline>()?.say(format!(
        "{partner} notified: {ok} shipments confirmed, {failed} given up"
    ));
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::init_logs();
    let timeline = common::Timeline::start();
    let client = common::connect("order_flow").await;

    // The order closes after its three items are released.
    let items = ["book", "lamp", "mug"].map(|sku| {
        JobSpec::new(Item {
            order: 17,
            sku: sku.into(),
        })
        .key(format!("17-{sku}"))
    });
    client
        .new_flow::<close_order>(JobSpec::new(17).key("order-17"))
        .children::<release_item>(items)
        .enqueue()
        .await?;
    timeline.say("order 17 stored: it waits for its 3 items");

    // The partner hears once about its five shipments.
    let shipments = client
        .new_batch()
        .id("acme-2026-11-28")
        .on_complete::<notify_partner>(&"acme".to_string())
        .open()
        .await?;
    shipments
        .add::<confirm_shipment>((1..=5).map(|n| JobSpec::new(n).key(format!("ship-{n}"))))
        .await?;
    shipments.close().await?;
    timeline.say("5 shipments enqueued as one batch");

    let worker = dq::Worker::builder(client.clone())
        .topics([
            "orders.release_item",
            "orders.close",
            "shipments.confirm",
            "partners.notify",
        ])
        .data(timeline)
        .data(client.clone())
        .build()?
        .start()
        .await?;
    let (closed, notified) = (
        client.topic("orders.close")?,
        client.topic("partners.notify")?,
    );
    for _ in 0..500 {
        if closed.stats().await?.succeeded == 1 && notified.stats().await?.succeeded == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.shutdown().await;

    let order = client.batch("flow.orders.close.order-17")?.info().await?;
    let batch = shipments.info().await?;
    println!(
        "summary: order 17 closed {} time(s) after {} items; partner notified {} time(s) of {:?}",
        closed.stats().await?.succeeded,
        order.as_ref().map_or(0, |i| i.counts.succeeded),
        notified.stats().await?.succeeded,
        batch.as_ref().map(|i| (i.counts.succeeded, i.counts.dead)),
    );
    assert_eq!(closed.stats().await?.succeeded, 1, "the order closed once");
    assert_eq!(
        notified.stats().await?.succeeded,
        1,
        "the partner heard once"
    );
    assert_eq!(
        batch.map(|i| (i.counts.succeeded, i.counts.dead)),
        Some((4, 1))
    );
    Ok(())
}
