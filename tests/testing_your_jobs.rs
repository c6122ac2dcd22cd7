//! The "Testing your jobs" section of the README, as a test that runs: virtual time on the
//! embedded store. The README shows this file's code between the markers; a test below keeps
//! the two identical.

// README-BEGIN
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dq::testing::TestQueue;
use dq::{JobContext, JobError, JobState};

/// The application's orders: id → paid?
#[derive(Clone, Default)]
struct Orders(Arc<Mutex<HashMap<u64, &'static str>>>);

#[dq::delayed_job(topic = "test.orders.close", retry = "none")]
async fn close_order(order_id: u64, ctx: JobContext) -> Result<(), JobError> {
    let orders = ctx.data::<Orders>()?;
    let mut orders = orders.0.lock().unwrap();
    if orders.get(&order_id) == Some(&"awaiting payment") {
        orders.insert(order_id, "closed");
    }
    Ok(())
}

/// Always fails: walks the default tiered schedule (15s, 3m, 10m, 30m, 30m, 1h, 2h, 6h, 15h).
#[dq::delayed_job(topic = "test.webhook")]
async fn call_partner(_event: String) -> Result<(), JobError> {
    Err(JobError::retry("partner answered 503"))
}

const THIRTY_MINUTES: Duration = Duration::from_secs(30 * 60);

#[tokio::test(start_paused = true)]
async fn an_unpaid_order_is_closed_after_exactly_30_minutes() {
    let orders = Orders::default();
    let queue = TestQueue::start(|w| w.topics(["test.orders.close"]).data(orders.clone())).unwrap();
    orders.0.lock().unwrap().insert(7, "awaiting payment");
    queue
        .client()
        .enqueue::<close_order>(7)
        .key("order-7")
        .delay(THIRTY_MINUTES)
        .await
        .unwrap();

    queue
        .advance(THIRTY_MINUTES - Duration::from_millis(1))
        .await;
    assert_eq!(
        orders.0.lock().unwrap()[&7],
        "awaiting payment",
        "not a millisecond early"
    );

    queue.advance(Duration::from_millis(1)).await;
    assert_eq!(orders.0.lock().unwrap()[&7], "closed");
    assert_eq!(
        queue.state::<close_order>("order-7").await,
        None,
        "succeeded and deleted"
    );
}

#[tokio::test(start_paused = true)]
async fn a_paid_order_keeps_its_order_open() {
    let orders = Orders::default();
    let queue = TestQueue::start(|w| w.topics(["test.orders.close"]).data(orders.clone())).unwrap();
    orders.0.lock().unwrap().insert(8, "awaiting payment");
    queue
        .client()
        .enqueue::<close_order>(8)
        .key("order-8")
        .delay(THIRTY_MINUTES)
        .await
        .unwrap();

    queue.advance(Duration::from_secs(10 * 60)).await;
    orders.0.lock().unwrap().insert(8, "paid");
    let outcome = queue
        .client()
        .cancel::<close_order>("order-8")
        .await
        .unwrap();
    assert_eq!(outcome, dq::CancelOutcome::Cancelled);

    queue.advance(THIRTY_MINUTES).await;
    assert_eq!(orders.0.lock().unwrap()[&8], "paid");
    assert_eq!(
        queue
            .client()
            .stats::<close_order>()
            .await
            .unwrap()
            .succeeded,
        0
    );
}

#[tokio::test(start_paused = true)]
async fn a_failing_webhook_walks_the_tiered_schedule_to_the_dead_queue() {
    let wall = std::time::Instant::now();
    let queue = TestQueue::start(|w| w.topics(["test.webhook"])).unwrap();
    let start = queue.now_ms().await;
    queue
        .client()
        .enqueue::<call_partner>("order.paid".into())
        .key("hook-1")
        .await
        .unwrap();

    queue.run_until_idle().await; // about 25 hours of virtual time

    let dead = queue.dead::<call_partner>().await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].state, JobState::Dead);
    assert_eq!(dead[0].attempts, 10);
    // Each attempt ran exactly when the schedule says, to the millisecond.
    let tiers_s = [0, 15, 180, 600, 1800, 1800, 3600, 7200, 21600, 54000];
    let mut expected = start;
    for (attempt, tier) in dead[0].history.iter().zip(tiers_s) {
        expected += tier * 1000;
        assert_eq!(attempt.at_ms, expected, "attempt {}", attempt.attempt);
        assert_eq!(attempt.error, "partner answered 503");
    }
    let virtual_hours = (queue.now_ms().await - start) as f64 / 3_600_000.0;
    println!(
        "{virtual_hours:.1} h of virtual time in {:?} of wall time",
        wall.elapsed()
    );
}
// README-END

#[test]
fn the_readme_shows_this_code() {
    let this = include_str!("testing_your_jobs.rs");
    let begin = this.find("// README-BEGIN\n").unwrap() + "// README-BEGIN\n".len();
    let end = this.find("// README-END").unwrap();
    let readme = include_str!("../README.md");
    assert!(
        readme.contains(&this[begin..end]),
        "README.md's 'Testing your jobs' must show tests/testing_your_jobs.rs between the markers"
    );
}
