//! No token is ever logged: everything logged at TRACE while a read-write, a read-only and
//! a wrong token are used holds none of them. A test binary of its own: tracing caches which
//! call sites are enabled, and other tests' threads (logging nowhere) would race this one's
//! capture.

mod common;

use common::{READ_TOKEN, TOKEN, TOPIC, serve};
use dq_http::HttpConfig;
use serde_json::json;

/// Sends `POST url` with `token` and `body`.
async fn post(url: &str, token: &str, body: &serde_json::Value) -> u16 {
    reqwest::Client::new()
        .post(url)
        .header("Authorization", format!("Bearer {token}"))
        .header("Content-Type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("send")
        .status()
        .as_u16()
}

#[tokio::test]
async fn no_token_is_ever_logged() {
    // current-thread runtime: the server's and the worker's tasks log on this thread
    let (log, _guard) =
        dq_testkit::CapturedLog::install(tracing_subscriber::filter::LevelFilter::TRACE);
    let s = serve("http-log", HttpConfig::default()).await;
    let jobs = format!("{}/v1/topics/{TOPIC}/jobs", s.url);
    let body = json!({"key": "l1", "payload": {"order_id": 1, "note": "x"}});
    assert_eq!(post(&jobs, TOKEN, &body).await, 201);
    assert_eq!(post(&jobs, READ_TOKEN, &body).await, 403);
    assert_eq!(post(&jobs, "a-wrong-secret-token", &body).await, 401);
    s.stop().await;
    let text = log.text();
    assert!(
        text.contains("dq HTTP API listening"),
        "nothing captured: {text}"
    );
    for secret in [TOKEN, READ_TOKEN, "a-wrong-secret-token"] {
        assert!(!text.contains(secret), "{secret} is in the log:\n{text}");
    }
}
