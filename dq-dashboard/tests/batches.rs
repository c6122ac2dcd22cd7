//! The batch pages over HTTP against a real Redis (issue 24): the batches not done with
//! their status and counts, a batch's counts by state, its callback's state (not enqueued
//! yet, then waiting once the batch is complete), its members one state at a time, a flow's
//! parent waiting for its children, a member's job page linking to its batch and the
//! callback's to the batch it completes, the nav link, and the errors (404, 400).

mod common;

use common::{make_batch, serve};
use dq_core::JobSpec;
use dq_dashboard::DashboardOptions;
use reqwest::StatusCode;

async fn get(url: &str) -> (StatusCode, String) {
    let r = reqwest::get(url).await.unwrap();
    (r.status(), r.text().await.unwrap())
}

/// The text of the element carrying `data-field="field"` in `html` (from `from` on).
fn field(html: &str, from: &str, field: &str) -> String {
    let html = &html[html
        .find(from)
        .unwrap_or_else(|| panic!("{from} in {html}"))..];
    let at = html
        .find(&format!("data-field=\"{field}\""))
        .unwrap_or_else(|| panic!("{field} in {html}"));
    let rest = &html[at..];
    let end = rest.find("</td>").unwrap_or(rest.len());
    // the cell's text, tags dropped
    let mut text = String::new();
    let mut in_tag = true; // (starts inside the opening tag)
    for c in rest[..end].chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    text.trim().to_owned()
}

/// A flow's parent.
struct Ship;

impl dq_core::Job for Ship {
    type Payload = u32;
    const TOPIC: &'static str = "ship";
}

/// A flow's child.
struct Pack;

impl dq_core::Job for Pack {
    type Payload = u32;
    const TOPIC: &'static str = "pack";
}

#[tokio::test]
async fn batch_pages_show_counts_the_callback_and_members_by_state() {
    let client = common::client("dash-batches").await;
    let batch = make_batch(&client, "order-17", "parcels", "parcel-", "orders.close").await;
    client
        .new_flow::<Ship>(JobSpec::new(9).key("ship-9"))
        .children::<Pack>([JobSpec::new(1).key("pack-1")])
        .enqueue()
        .await
        .unwrap();
    let served = serve(client.clone(), DashboardOptions::default().refresh(None)).await;
    let base = &served.url;

    // the list, from the nav of any page
    let (status, overview) = get(base).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        overview.contains("id=\"batches-link\" href=\"/batches\""),
        "{overview}"
    );
    let (status, list) = get(&format!("{base}/batches")).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let row = "data-batch=\"order-17\"";
    assert_eq!(field(&list, row, "status"), "open");
    assert_eq!(field(&list, row, "members"), "3");
    assert_eq!(field(&list, row, "pending"), "1");
    assert_eq!(field(&list, row, "succeeded"), "1");
    assert_eq!(field(&list, row, "failed"), "1");
    assert!(list.contains("data-batch=\"flow.ship.ship-9\""), "{list}");

    // one batch: counts by state, its callback not enqueued yet, every member
    let (status, page) = get(&format!("{base}/batches/order-17")).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(field(&page, "id=\"batch\"", "status"), "open");
    assert!(
        field(&page, "id=\"batch\"", "then")
            .contains("callback orders.close batch:order-17: not enqueued yet"),
        "{page}"
    );
    for (state, n) in [
        ("succeeded", "1"),
        ("dead", "1"),
        ("enqueued", "1"),
        ("cancelled", "0"),
    ] {
        assert_eq!(
            field(&page, &format!("data-state=\"{state}\""), "count"),
            n,
            "{state}"
        );
    }
    assert_eq!(page.matches("data-member=").count(), 3, "{page}");

    // its dead members only, each linking to its job page, which links back
    let (_, dead) = get(&format!("{base}/batches/order-17?state=dead")).await;
    assert_eq!(dead.matches("data-member=").count(), 1, "{dead}");
    assert!(dead.contains("data-member=\"parcels#parcel-2\""), "{dead}");
    assert!(
        dead.contains("href=\"/topics/parcels/jobs/parcel%2D2\""),
        "{dead}"
    );
    let (status, job) = get(&format!("{base}/topics/parcels/jobs/parcel-2")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(field(&job, "id=\"job\"", "batch"), "order-17");
    assert!(job.contains("href=\"/batches/order%2D17\""), "{job}");

    // its last member cancelled (the relay counts it), then closed: complete, its callback
    // enqueued; the callback's page names its batch
    let parcels = client.topic("parcels").unwrap();
    parcels.cancel("parcel-3").await.unwrap();
    let queue = dq_core::Queue::new(dq_core::Topic::new("parcels").unwrap(), 0);
    dq_core::client::relay_outbox(&client, &queue)
        .await
        .unwrap();
    batch.close().await.unwrap();
    let (_, page) = get(&format!("{base}/batches/order-17")).await;
    assert_eq!(field(&page, "id=\"batch\"", "status"), "done");
    let then = field(&page, "id=\"batch\"", "then-state");
    assert!(
        then.starts_with("ready") || then.starts_with("scheduled"),
        "{then}"
    );
    let (status, callback) = get(&format!("{base}/topics/orders.close/jobs/batch:order-17")).await;
    assert_eq!(status, StatusCode::OK, "{callback}");
    assert_eq!(
        field(&callback, "id=\"job\"", "callback-of"),
        "batch order-17"
    );
    let (_, list) = get(&format!("{base}/batches")).await;
    assert!(!list.contains("data-batch=\"order-17\""), "{list}");

    // a flow's batch: its parent waiting for its children
    let (status, flow) = get(&format!("{base}/batches/flow.ship.ship-9")).await;
    assert_eq!(status, StatusCode::OK, "{flow}");
    assert_eq!(field(&flow, "id=\"batch\"", "status"), "closed");
    assert_eq!(
        field(&flow, "id=\"batch\"", "then-state"),
        "scheduled waiting for its children"
    );

    // errors keep the frame
    let (status, page) = get(&format!("{base}/batches/nope")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        page.contains("no batch \"nope\"") || page.contains("no batch &quot;nope&quot;"),
        "{page}"
    );
    assert!(page.contains("id=\"back\""), "{page}");
    let (status, _) = get(&format!("{base}/batches/a%20b")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = get(&format!("{base}/batches/order-17?state=finished")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = get(&format!("{base}/batches?after=a%7Bb%7D")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}
