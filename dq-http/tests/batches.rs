//! The batch endpoints over a real Redis with a Rust worker behind them (issue 24): the
//! batches not done page by page, one batch with its counts and its callback's state, its
//! members by state, close (refused to a read-only token) and cancel, a flow's batch with
//! its parent waiting, and the errors (404 unknown batch, 400 bad id or query).

mod common;

use std::time::Duration;

use common::{READ_TOKEN, TOKEN, TOPIC, WAIT, serve};
use dq::JobSpec;
use dq_http::HttpConfig;
use dq_testkit::eventually_some;
use serde_json::{Value, json};

/// The callback's topic (no worker serves it: the callback waits, ready).
const AFTER: &str = "http.after";

/// Sends `method url` with `token`: the status and the JSON answer.
async fn call(method: reqwest::Method, url: &str, token: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .request(method, url)
        .header("Authorization", format!("Bearer {token}"))
        .send()
        .await
        .expect("send");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    let value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (status, value)
}

async fn get(url: &str) -> (u16, Value) {
    call(reqwest::Method::GET, url, TOKEN).await
}

async fn post(url: &str) -> (u16, Value) {
    call(reqwest::Method::POST, url, TOKEN).await
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("<none>")
}

/// A member of [`TOPIC`]: the worker fails one whose note is `fail` (dead).
fn order(key: &str, note: &str, delay: Duration) -> JobSpec<Vec<u8>> {
    let payload = json!({"order_id": 1, "note": note});
    JobSpec::new(dq::payload::encode(&payload, 1 << 20).unwrap())
        .key(key)
        .delay(delay)
}

/// The batch `id` once `done(batch)` holds.
async fn batch_when(url: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    eventually_some(what, WAIT, || async {
        let (status, b) = get(url).await;
        (status == 200 && done(&b)).then_some(b)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_are_listed_shown_closed_and_cancelled() {
    let s = serve("http-batches", HttpConfig::default()).await;
    let v1 = format!("{}/v1", s.url);
    let b = s
        .client
        .new_batch()
        .id("order-5")
        .on_complete_raw(AFTER, dq::payload::encode(&5u32, 1 << 20).unwrap())
        .open()
        .await
        .unwrap();
    let now = Duration::ZERO;
    b.add_raw(
        TOPIC,
        vec![
            order("5-a", "ok", now),
            order("5-b", "fail", now),
            order("5-c", "ok", now),
        ],
    )
    .await
    .unwrap();
    let later = s.client.new_batch().id("order-6").open().await.unwrap();
    let hour = Duration::from_secs(3600);
    later
        .add_raw(
            TOPIC,
            vec![order("6-a", "ok", hour), order("6-b", "ok", hour)],
        )
        .await
        .unwrap();

    // the batches not done, oldest first, page by page; a read-only token reads them
    let (status, page) = call(
        reqwest::Method::GET,
        &format!("{v1}/batches?limit=1"),
        READ_TOKEN,
    )
    .await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["batches"][0]["id"], "order-5");
    assert_eq!(page["batches"][0]["status"], "open");
    assert_eq!(page["batches"][0]["members"], 3);
    assert_eq!(page["next"], "order-5");
    let (_, page) = get(&format!("{v1}/batches?after=order-5")).await;
    assert_eq!(page["batches"][0]["id"], "order-6");
    assert_eq!(page["batches"][0]["counts"]["enqueued"], 2);
    assert_eq!(page["next"], Value::Null);

    // the worker runs the members, its relay counts their ends
    let url = format!("{v1}/batches/order-5");
    let got = batch_when(&url, "order-5's members ended", |b| b["pending"] == 0).await;
    assert_eq!(got["counts"]["succeeded"], 2, "{got}");
    assert_eq!(got["counts"]["dead"], 1, "{got}");
    assert_eq!(got["failed"], 1, "{got}");
    assert_eq!(got["policy"], "wait_all");
    assert_eq!(
        got["then"],
        json!({"kind": "callback", "topic": AFTER, "key": "batch:order-5", "state": null, "waiting_for_children": false})
    );
    let (status, dead) = get(&format!("{url}/members?state=dead")).await;
    assert_eq!(status, 200, "{dead}");
    assert_eq!(
        dead,
        json!({"members": [{"topic": TOPIC, "key": "5-b", "state": "dead"}], "next": null})
    );
    let (_, all) = get(&format!("{url}/members?limit=10")).await;
    assert_eq!(all["members"].as_array().map(Vec::len), Some(3), "{all}");

    // close: refused to a read-only token; then complete at once, its callback enqueued
    let (status, v) = call(reqwest::Method::POST, &format!("{url}/close"), READ_TOKEN).await;
    assert_eq!((status, code(&v)), (403, "forbidden"));
    assert!(!b.info().await.unwrap().unwrap().closed);
    let (status, closed) = post(&format!("{url}/close")).await;
    assert_eq!(status, 200, "{closed}");
    assert_eq!(closed["status"], "done", "{closed}");
    assert!(closed["closed"].is_string() && closed["done"].is_string());
    let state = closed["then"]["state"].as_str().unwrap_or_default();
    assert!(["scheduled", "ready"].contains(&state), "{closed}");
    let (_, page) = get(&format!("{v1}/batches")).await;
    assert_eq!(page["batches"].as_array().map(Vec::len), Some(1), "{page}");

    // cancel: closed, its waiting members cancelled, their ends relayed by the worker
    let url = format!("{v1}/batches/order-6");
    let (status, cancelled) = post(&format!("{url}/cancel")).await;
    assert_eq!(status, 200, "{cancelled}");
    assert!(cancelled["closed"].is_string(), "{cancelled}");
    let t = s.client.admin().topic_with(TOPIC, 1).unwrap();
    assert!(t.job("6-a").await.unwrap().is_none());
    let got = batch_when(&url, "order-6's cancels relayed", |b| b["status"] == "done").await;
    assert_eq!(got["counts"]["cancelled"], 2, "{got}");
    assert_eq!(got["then"], Value::Null);
    let (_, page) = get(&format!("{v1}/batches")).await;
    assert_eq!(page, json!({"batches": [], "next": null}));
    s.stop().await;
}

/// A flow's parent (a job type of a topic no worker serves here).
struct Ship;

impl dq::Job for Ship {
    type Payload = u32;
    const TOPIC: &'static str = "http.ship";
}

/// A flow's child: a job of the served topic.
struct Close;

impl dq::Job for Close {
    type Payload = common::CloseOrder;
    const TOPIC: &'static str = TOPIC;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flows_batch_shows_its_parent_waiting_then_released() {
    let s = serve("http-flow", HttpConfig::default()).await;
    let child = |note: &str| common::CloseOrder {
        order_id: 9,
        note: note.into(),
    };
    let flow = s
        .client
        .new_flow::<Ship>(JobSpec::new(9).key("ship-9"))
        .children::<Close>([JobSpec::new(child("hold"))
            .key("9-a")
            .delay(Duration::from_secs(3600))])
        .enqueue()
        .await
        .unwrap();
    let url = format!("{}/v1/batches/{}", s.url, flow.children.id());
    let (status, b) = get(&url).await;
    assert_eq!(status, 200, "{b}");
    assert_eq!(b["status"], "closed");
    assert_eq!(
        b["then"],
        json!({"kind": "parent", "topic": "http.ship", "key": "ship-9", "state": "scheduled", "waiting_for_children": true})
    );
    // the child made due: the worker runs it, the relay releases the parent
    s.client
        .admin()
        .topic_with(TOPIC, 1)
        .unwrap()
        .reschedule("9-a", dq::NewDue::After(Duration::ZERO))
        .await
        .unwrap();
    let got = batch_when(&url, "the parent released", |b| b["status"] == "done").await;
    assert_eq!(got["then"]["waiting_for_children"], false, "{got}");
    assert_eq!(got["counts"]["succeeded"], 1, "{got}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_batch_is_404_and_a_bad_id_or_query_400() {
    let s = serve("http-batch-errors", HttpConfig::default()).await;
    let v1 = format!("{}/v1", s.url);
    let cases: Vec<(reqwest::Method, String, u16, &str)> = vec![
        (
            reqwest::Method::GET,
            format!("{v1}/batches/nope"),
            404,
            "not_found",
        ),
        (
            reqwest::Method::GET,
            format!("{v1}/batches/nope/members"),
            404,
            "not_found",
        ),
        (
            reqwest::Method::POST,
            format!("{v1}/batches/nope/close"),
            404,
            "not_found",
        ),
        (
            reqwest::Method::POST,
            format!("{v1}/batches/nope/cancel"),
            404,
            "not_found",
        ),
        (
            reqwest::Method::GET,
            format!("{v1}/batches/a%20b"),
            400,
            "invalid_request",
        ),
        (
            reqwest::Method::POST,
            format!("{v1}/batches/a%7Bb%7D/close"),
            400,
            "invalid_request",
        ),
        (
            reqwest::Method::GET,
            format!("{v1}/batches?after=a%7Bb%7D"),
            400,
            "invalid_request",
        ),
        (
            reqwest::Method::GET,
            format!("{v1}/batches?limit=0"),
            400,
            "invalid_request",
        ),
        (
            reqwest::Method::GET,
            format!("{v1}/batches?limit=1001"),
            400,
            "invalid_request",
        ),
        (
            reqwest::Method::GET,
            format!("{v1}/batches?colour=red"),
            400,
            "invalid_request",
        ),
        (
            reqwest::Method::GET,
            format!("{v1}/batches/nope/members?state=finished"),
            400,
            "invalid_request",
        ),
        (
            reqwest::Method::GET,
            format!("{v1}/batches/nope/members?after=x"),
            400,
            "invalid_request",
        ),
        (
            reqwest::Method::DELETE,
            format!("{v1}/batches/nope"),
            405,
            "method_not_allowed",
        ),
    ];
    for (method, url, status, want) in cases {
        let (got, v) = call(method.clone(), &url, TOKEN).await;
        assert_eq!((got, code(&v)), (status, want), "{method} {url}: {v}");
    }
    // nothing was written by any of them
    let (_, page) = get(&format!("{v1}/batches")).await;
    assert_eq!(page, json!({"batches": [], "next": null}));
    s.stop().await;
}
