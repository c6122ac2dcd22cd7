//! Order timeout — the main dq demo.
//!
//! Orders are created with a "close if unpaid" timer (30 minutes in real life, 2 seconds
//! here). Some customers pay: their timer is cancelled by order id. The unpaid orders are
//! closed on time by the worker running inside this process.
//!
//! Run: `cargo run --example order_timeout` (embedded store), or with `REDIS_URL` naming a
//! Redis: `redis://…`, a cluster (`redis+cluster://…`) or Sentinel (`redis+sentinel://…`).
//! `tests/order_timeout_everywhere.rs` runs [`run`] on a Redis Cluster and through Sentinel.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How long an order may stay unpaid (30 min in production; scaled down for the demo).
const PAY_WITHIN: Duration = Duration::from_secs(2);

#[derive(Serialize, Deserialize)]
struct CloseOrder {
    order_id: u64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum OrderState {
    AwaitingPayment,
    Paid,
    Closed,
}

/// The application's order table (a database in real life).
#[derive(Clone, Default)]
struct Orders(Arc<Mutex<HashMap<u64, OrderState>>>);

impl Orders {
    fn set(&self, id: u64, state: OrderState) {
        self.0.lock().unwrap().insert(id, state);
    }
    fn get(&self, id: u64) -> Option<OrderState> {
        self.0.lock().unwrap().get(&id).copied()
    }
    fn count(&self, state: OrderState) -> usize {
        self.0
            .lock()
            .unwrap()
            .values()
            .filter(|s| **s == state)
            .count()
    }
}

/// Closes an order that was not paid in time.
#[dq::delayed_job(
    topic = "orders.close",
    retry = "1s, 2s",
    timeout = "10s",
    concurrency = 16
)]
async fn close_order(job: CloseOrder, ctx: dq::JobContext) -> Result<(), dq::JobError> {
    let orders = ctx.data::<Orders>()?;
    let timeline = ctx.data::<common::Timeline>()?;
    match orders.get(job.order_id) {
        Some(OrderState::AwaitingPayment) => {
            orders.set(job.order_id, OrderState::Closed);
            timeline.say(format!(
                "order {} closed: unpaid after {PAY_WITHIN:?} (started {} ms after due)",
                job.order_id,
                ctx.late.as_millis()
            ));
        }
        // Paid between the timer firing and now: nothing to do. Handlers must be idempotent.
        other => timeline.say(format!(
            "order {} is {other:?}; nothing to close",
            job.order_id
        )),
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::init_logs();
    let client = common::connect("order_timeout").await;
    let summary = run(client).await?;
    assert_eq!(summary.closed, 7, "every unpaid order is closed");
    Ok(())
}

/// What a run of the demo ended with.
#[derive(Debug, PartialEq)]
pub struct Summary {
    /// Orders paid in time (their timers were cancelled).
    pub paid: usize,
    /// Orders the worker closed.
    pub closed: usize,
    /// Timers that fired and succeeded.
    pub fired: u64,
    /// Timers cancelled by a payment.
    pub cancelled: u64,
    /// Timers still waiting or running at the end.
    pub pending: u64,
}

/// The demo on any store: creates ten orders, pays three, lets the worker close the rest,
/// prints the timeline and returns the summary.
pub async fn run(client: dq::Client) -> Result<Summary, Box<dyn std::error::Error>> {
    let timeline = common::Timeline::start();
    let orders = Orders::default();

    let worker = dq::Worker::builder(client.clone())
        .topics(["orders.close"])
        .data(orders.clone())
        .data(timeline)
        .build()?
        .start()
        .await?;

    for id in 1..=10u64 {
        orders.set(id, OrderState::AwaitingPayment);
        client
            .enqueue::<close_order>(CloseOrder { order_id: id })
            .key(format!("order-{id}"))
            .delay(PAY_WITHIN)
            .await?;
        timeline.say(format!(
            "order {id} created; closes in {PAY_WITHIN:?} unless paid"
        ));
    }

    // Customers 2, 5 and 7 pay after half a second: cancel their timers by order id.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for id in [2u64, 5, 7] {
        orders.set(id, OrderState::Paid);
        let outcome = client.cancel::<close_order>(&format!("order-{id}")).await?;
        timeline.say(format!("order {id} paid; timer cancelled: {outcome:?}"));
    }

    // Wait (bounded) until every unpaid order is closed.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while orders.count(OrderState::Closed) < 7 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.shutdown().await;

    let stats = client.stats::<close_order>().await?;
    let summary = Summary {
        paid: orders.count(OrderState::Paid),
        closed: orders.count(OrderState::Closed),
        fired: stats.succeeded,
        cancelled: stats.cancelled,
        pending: stats.scheduled + stats.ready + stats.retry + stats.active,
    };
    println!(
        "summary: 10 orders, {} paid, {} closed on time; {} timers fired, {} cancelled, {} still pending",
        summary.paid, summary.closed, summary.fired, summary.cancelled, summary.pending,
    );
    Ok(summary)
}
