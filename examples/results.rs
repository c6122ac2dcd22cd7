//! A handler that returns a value, and a producer that waits for it: an order service asks
//! for an invoice PDF to be rendered and waits (up to 10 s) for its address, while a worker
//! in the same process renders it. The topic keeps succeeded jobs for an hour
//! (`keep_succeeded`), so the result can be read again later — from any process — with
//! `client.result`, and `dq job` / `dq list --state succeeded` show it with its timings.
//!
//! Run: `cargo run --example results` (embedded store), or with `REDIS_URL=redis://…`.

mod common;

use std::time::Duration;

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Invoice {
    order_id: u64,
}

/// What the handler returns: kept with the succeeded job.
#[derive(Debug, Serialize, Deserialize)]
struct Rendered {
    url: String,
    pages: u32,
}

/// Renders an invoice; order 0 has no invoice (a permanent failure: dead at once).
#[dq::delayed_job(topic = "invoices.render", keep_succeeded = "1h", retry = "none")]
async fn render_invoice(invoice: Invoice) -> Result<Rendered, dq::JobError> {
    if invoice.order_id == 0 {
        return Err(dq::JobError::permanent("order 0 has no invoice"));
    }
    tokio::time::sleep(Duration::from_millis(200)).await; // rendering
    Ok(Rendered {
        url: format!("https://files.example/invoices/{}.pdf", invoice.order_id),
        pages: 2,
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::init_logs();
    let client = common::connect("results").await;
    let worker = dq::Worker::builder(client.clone())
        .topics(["invoices.render"])
        .build()?
        .start()
        .await?;

    for order_id in [42, 0] {
        let key = format!("invoice-{order_id}");
        client
            .enqueue::<render_invoice>(Invoice { order_id })
            .key(&key)
            .await?;
        match client
            .wait::<render_invoice>(&key, Duration::from_secs(10))
            .await?
        {
            dq::WaitOutcome::Succeeded { result, job } => println!(
                "{key}: {} ({} pages), rendered in {:?} by worker {}",
                result.url,
                result.pages,
                job.run_time().unwrap_or_default(),
                job.worker.as_deref().unwrap_or("?")
            ),
            dq::WaitOutcome::Dead(info) => println!(
                "{key}: failed for good: {}",
                info.history.last().map_or("", |a| a.error.as_str())
            ),
            other => println!("{key}: {other:?}"),
        }
    }
    // Later, from anywhere: the kept result.
    let again = client.result::<render_invoice>("invoice-42").await?;
    println!("invoice-42 again: {again:?}");
    worker.shutdown().await;
    Ok(())
}
