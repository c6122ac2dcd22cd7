//! The API over a real Redis with a Rust worker behind it, from Rust (reqwest): safe retries
//! (a job key, an `Idempotency-Key`, a retry after the job ran), bulk checks, the body limit,
//! untyped and unknown topics, read-only tokens, the error codes, the operator calls (pause,
//! limits, groups, the dead queue, schedules) and the served OpenAPI document. (That no token
//! is logged: tests/logging.rs.)

mod common;

use common::{READ_TOKEN, TOKEN, TOPIC, WAIT, ran, serve, serve_with};
use dq_http::HttpConfig;
use dq_testkit::eventually;
use serde_json::{Value, json};

/// Sends `method url` with `token` and a body (`Value` as JSON, a `&str` as is): the status
/// and the JSON answer (`null` for none).
async fn call(
    method: reqwest::Method,
    url: &str,
    token: Option<&str>,
    body: Option<String>,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let mut r = reqwest::Client::new().request(method, url);
    if let Some(t) = token {
        r = r.header("Authorization", format!("Bearer {t}"));
    }
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    if let Some(b) = body {
        r = r.header("Content-Type", "application/json").body(b);
    }
    let response = r.send().await.expect("send");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    let value = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    };
    (status, value)
}

fn post(url: &str, body: Value) -> (String, Option<String>) {
    (url.to_owned(), Some(body.to_string()))
}

/// `POST` with the read-write token.
async fn post_rw(url: &str, body: Value, headers: &[(&str, &str)]) -> (u16, Value) {
    let (url, body) = post(url, body);
    call(reqwest::Method::POST, &url, Some(TOKEN), body, headers).await
}

/// `GET` with the read-write token.
async fn get_rw(url: &str) -> (u16, Value) {
    call(reqwest::Method::GET, url, Some(TOKEN), None, &[]).await
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("<none>")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_naming_its_key_repeated_gets_the_same_answer_and_makes_one_job() {
    let s = serve("http-key", HttpConfig::default()).await;
    let jobs = format!("{}/v1/topics/{TOPIC}/jobs", s.url);
    let body = json!({"key": "k1", "payload": {"order_id": 1, "note": "a"}, "delay": "1h"});
    let first = post_rw(&jobs, body.clone(), &[]).await;
    let again = post_rw(&jobs, body, &[]).await;
    assert_eq!(first.0, 201, "{first:?}");
    assert_eq!(first, again);
    // another request with the same key: the job is left alone
    let other = json!({"key": "k1", "payload": {"order_id": 2, "note": "b"}});
    let (status, v) = post_rw(&jobs, other, &[]).await;
    assert_eq!(
        (status, &v["outcome"], &v["state"]),
        (200, &json!("exists"), &json!("scheduled"))
    );
    let t = s.client.admin().topic_with(TOPIC, 1).unwrap();
    assert_eq!(t.stats().await.unwrap().enqueued, 1);
    // with replace: replaced
    let replace = json!({"key": "k1", "payload": {"order_id": 3, "note": "c"}, "delay": "2h", "replace": true});
    let (status, v) = post_rw(&jobs, replace, &[]).await;
    assert_eq!((status, &v["outcome"]), (200, &json!("replaced")), "{v}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_gives_the_same_answer_even_after_the_job_ran() {
    let s = serve("http-idem", HttpConfig::default()).await;
    let jobs = format!("{}/v1/topics/{TOPIC}/jobs", s.url);
    let body = json!({"payload": {"order_id": 9, "note": "now"}});
    let idem = [("Idempotency-Key", "order-9-close")];
    let sent = std::time::Instant::now();
    let first = post_rw(&jobs, body.clone(), &idem).await;
    assert_eq!(first.0, 201, "{first:?}");
    let key = first.1["key"].as_str().unwrap().to_owned();
    assert!(key.starts_with("idem-"), "{key}");
    let ns = s.ns.clone();
    let k = key.clone();
    eventually("the worker runs the job", WAIT, || {
        let (ns, k) = (ns.clone(), k.clone());
        async move { ran(&ns, &k).is_some() }
    })
    .await;
    let t = s.client.admin().topic_with(TOPIC, 1).unwrap();
    eventually("the job is acked", WAIT, || {
        let t = t.clone();
        async move { t.stats().await.unwrap().succeeded == 1 }
    })
    .await;
    // the retry of a request whose job has run: the same answer, nothing enqueued again —
    // within the receipt's life (30 s), which a machine too loaded to run one job in 25 s
    // would leave: the promise is then not the one under test
    let again = post_rw(&jobs, body, &idem).await;
    if sent.elapsed() > dq::store::ENQUEUE_RECEIPT_LIFE - std::time::Duration::from_secs(5) {
        eprintln!(
            "the job took {:?} to run: the receipt may be gone; not checked",
            sent.elapsed()
        );
        s.stop().await;
        return;
    }
    assert_eq!(first, again);
    let stats = t.stats().await.unwrap();
    assert_eq!(
        (stats.enqueued, stats.ready, stats.scheduled),
        (1, 0, 0),
        "{stats:?}"
    );
    // a bad Idempotency-Key is refused
    let (status, v) = post_rw(
        &jobs,
        json!({"payload": {"order_id": 1, "note": ""}}),
        &[("Idempotency-Key", "")],
    )
    .await;
    assert_eq!((status, code(&v)), (400, "invalid_request"), "{v}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_checks_every_job_before_writing_any() {
    let s = serve("http-bulk", HttpConfig::default()).await;
    let bulk = format!("{}/v1/topics/{TOPIC}/jobs/bulk", s.url);
    let job = |n: u64| json!({"key": format!("b{n}"), "payload": {"order_id": n, "note": "x"}, "delay": "1h"});
    let bad = json!({"jobs": [job(1), job(2), {"payload": {"order_id": 3}}]});
    let (status, v) = post_rw(&bulk, bad, &[]).await;
    assert_eq!((status, code(&v)), (422, "payload_mismatch"), "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("job 2:") && message.contains("note"),
        "{message}"
    );
    let t = s.client.admin().topic_with(TOPIC, 1).unwrap();
    assert_eq!(t.stats().await.unwrap().enqueued, 0);
    let good = json!({"jobs": [job(1), job(2), job(3)]});
    let (status, v) = post_rw(&bulk, good.clone(), &[]).await;
    assert_eq!(status, 200, "{v}");
    let outcomes: Vec<&str> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["created", "created", "created"]);
    // repeated: no job twice
    let (_, v) = post_rw(&bulk, good, &[]).await;
    assert!(
        v["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|j| j["outcome"] == "exists"),
        "{v}"
    );
    assert_eq!(t.stats().await.unwrap().enqueued, 3);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_is_refused() {
    let s = serve("http-limit", HttpConfig::default().max_body(1024)).await;
    let jobs = format!("{}/v1/topics/{TOPIC}/jobs", s.url);
    let big = json!({"key": "big", "payload": {"order_id": 1, "note": "x".repeat(4096)}});
    let (status, v) = post_rw(&jobs, big, &[]).await;
    assert_eq!((status, code(&v)), (413, "body_too_large"), "{v}");
    let t = s.client.admin().topic_with(TOPIC, 1).unwrap();
    assert!(t.job("big").await.unwrap().is_none());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untyped_topic_stores_json_by_field_name_and_an_unknown_one_is_refused() {
    let s = serve("http-untyped", HttpConfig::default()).await;
    s.client.topic("http.free").unwrap().check().await.unwrap();
    let free = format!("{}/v1/topics/http.free/jobs", s.url);
    let (status, v) = post_rw(
        &free,
        json!({"key": "f1", "payload": {"a": 1, "b": ["x"]}, "delay": "1h"}),
        &[],
    )
    .await;
    assert_eq!(status, 201, "{v}");
    let (status, v) = get_rw(&format!("{free}/f1")).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["payload"], json!({"a": 1, "b": ["x"]}));
    assert_eq!(v["state"], "scheduled");
    let stored = s
        .client
        .topic("http.free")
        .unwrap()
        .job("f1")
        .await
        .unwrap()
        .unwrap();
    #[derive(serde::Deserialize, PartialEq, Debug)]
    struct Free {
        b: Vec<String>,
        a: u8,
    }
    assert_eq!(
        dq::payload::decode::<Free>(&stored.payload).unwrap(),
        Free {
            a: 1,
            b: vec!["x".into()]
        }
    );
    // a topic no one has used: nothing recorded
    let (status, v) = post_rw(
        &format!("{}/v1/topics/http.nobody/jobs", s.url),
        json!({"payload": {}}),
        &[],
    )
    .await;
    assert_eq!((status, code(&v)), (404, "unknown_topic"), "{v}");
    let topics: Vec<String> = s
        .client
        .topics()
        .await
        .unwrap()
        .iter()
        .map(|m| m.topic.to_string())
        .collect();
    assert!(!topics.iter().any(|t| t == "http.nobody"), "{topics:?}");
    s.stop().await;

    let s = serve("http-typed-only", HttpConfig::default().typed_only(true)).await;
    s.client.topic("http.free").unwrap().check().await.unwrap();
    let free = format!("{}/v1/topics/http.free/jobs", s.url);
    let (status, v) = post_rw(&free, json!({"payload": {"a": 1}}), &[]).await;
    assert_eq!((status, code(&v)), (404, "unknown_topic"), "{v}");
    s.stop().await;
}

/// `dq serve` alone knows no payload type: the shape the worker published at start is what a
/// JSON payload is checked against. A misfit is 422 naming the field, single, bulk (naming
/// the job) or schedule, and writes nothing; a fitting one runs; a topic without a published
/// shape takes any JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_type_a_payload_is_checked_against_the_shape_its_worker_published() {
    let s = serve_with("http-shape", HttpConfig::default()).await;
    let jobs = format!("{}/v1/topics/{TOPIC}/jobs", s.url);
    let t = s.client.admin().topic_with(TOPIC, 1).unwrap();
    for (payload, field, why) in [
        (
            json!({"order_id": "seven", "note": "a"}),
            "order_id",
            "expected an unsigned integer, found a string",
        ),
        (json!({"order_id": 7}), "note", "missing required field"),
        (json!({"order_id": -1, "note": "a"}), "order_id", "found -1"),
    ] {
        let (status, v) = post_rw(&jobs, json!({"key": "bad", "payload": payload}), &[]).await;
        assert_eq!((status, code(&v)), (422, "payload_mismatch"), "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("{field}: ")) && message.contains(why),
            "{message}"
        );
    }
    let bulk = format!("{jobs}/bulk");
    let (status, v) = post_rw(
        &bulk,
        json!({"jobs": [{"payload": {"order_id": 1, "note": "a"}}, {"payload": {"order_id": 1.5, "note": "b"}}]}),
        &[],
    )
    .await;
    assert_eq!((status, code(&v)), (422, "payload_mismatch"), "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("job 1:") && message.contains("order_id"),
        "{message}"
    );
    let (status, v) = call(
        reqwest::Method::PUT,
        &format!("{}/v1/schedules/shape-sched", s.url),
        Some(TOKEN),
        Some(
            json!({"topic": TOPIC, "every": "1h", "payload": {"order_id": "x", "note": "n"}})
                .to_string(),
        ),
        &[],
    )
    .await;
    assert_eq!((status, code(&v)), (422, "payload_mismatch"), "{v}");
    let stats = t.stats().await.unwrap();
    assert_eq!(stats.enqueued, 0, "nothing written: {stats:?}");
    assert!(t.job("bad").await.unwrap().is_none());
    assert!(s.client.schedules().await.unwrap().is_empty());
    // a payload that fits runs; a field the type does not have is taken (serde skips it)
    let (status, v) = post_rw(
        &jobs,
        json!({"key": "good", "payload": {"order_id": 7, "note": "fits", "extra": true}}),
        &[],
    )
    .await;
    assert_eq!(status, 201, "{v}");
    let ns = s.ns.clone();
    eventually("the worker runs the job", WAIT, || {
        let ns = ns.clone();
        async move { ran(&ns, "good").is_some() }
    })
    .await;
    assert_eq!(ran(&s.ns, "good").as_deref(), Some("7:fits"));
    // a topic no worker published a shape for takes any JSON
    s.client.topic("http.free").unwrap().check().await.unwrap();
    let (status, v) = post_rw(
        &format!("{}/v1/topics/http.free/jobs", s.url),
        json!({"payload": {"order_id": "seven"}, "delay": "1h"}),
        &[],
    )
    .await;
    assert_eq!(status, 201, "{v}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_token_reads_and_changes_nothing() {
    let s = serve("http-ro", HttpConfig::default()).await;
    let jobs = format!("{}/v1/topics/{TOPIC}/jobs", s.url);
    post_rw(
        &jobs,
        json!({"key": "r1", "payload": {"order_id": 1, "note": "x"}, "delay": "1h"}),
        &[],
    )
    .await;
    let ro = Some(READ_TOKEN);
    let (status, v) = call(reqwest::Method::GET, &format!("{jobs}/r1"), ro, None, &[]).await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = call(
        reqwest::Method::GET,
        &format!("{jobs}?state=scheduled"),
        ro,
        None,
        &[],
    )
    .await;
    assert_eq!(
        (status, v["jobs"].as_array().map(Vec::len)),
        (200, Some(1)),
        "{v}"
    );
    for (method, url, body) in [
        (reqwest::Method::DELETE, format!("{jobs}/r1"), None),
        (
            reqwest::Method::POST,
            format!("{jobs}/r1/reschedule"),
            Some(json!({"delay": "0s"}).to_string()),
        ),
        (
            reqwest::Method::POST,
            format!("{}/v1/topics/{TOPIC}/pause", s.url),
            None,
        ),
        (
            reqwest::Method::PUT,
            format!("{}/v1/topics/{TOPIC}/limits", s.url),
            Some(json!({"concurrency": 1}).to_string()),
        ),
    ] {
        let (status, v) = call(method.clone(), &url, ro, body, &[]).await;
        assert_eq!(
            (status, code(&v)),
            (403, "forbidden"),
            "{method} {url}: {v}"
        );
    }
    let t = s.client.admin().topic_with(TOPIC, 1).unwrap();
    let job = t.job("r1").await.unwrap().unwrap();
    assert_eq!(job.state, dq::JobState::Scheduled);
    let control = t.control().await.unwrap();
    assert!(
        !control.paused && control.concurrency.is_none(),
        "{control:?}"
    );
    // no token, a wrong one: 401 with a WWW-Authenticate challenge
    let r = reqwest::get(format!("{}/v1/topics", s.url)).await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    assert!(r.headers().contains_key("www-authenticate"));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_json_with_stable_codes() {
    let s = serve("http-errors", HttpConfig::default()).await;
    let jobs = format!("{}/v1/topics/{TOPIC}/jobs", s.url);
    let cases: Vec<(reqwest::Method, String, Option<String>, u16, &str)> = vec![
        (reqwest::Method::GET, format!("{}/v2/nothing", s.url), None, 404, "not_found"),
        (reqwest::Method::PATCH, jobs.clone(), None, 405, "method_not_allowed"),
        (reqwest::Method::POST, jobs.clone(), Some(r#"{"payload": {}, "colour": "red"}"#.into()), 400, "invalid_json"),
        (reqwest::Method::POST, jobs.clone(), Some(r#"[1, 2]"#.into()), 400, "invalid_json"),
        (reqwest::Method::POST, jobs.clone(), Some(json!({"payload": {"order_id": 1, "note": ""}, "delay": "1h", "at": "2030-01-01T00:00:00Z"}).to_string()), 400, "invalid_request"),
        (reqwest::Method::POST, jobs.clone(), Some(json!({"payload": {"order_id": 1, "note": ""}, "delay": "soon"}).to_string()), 400, "invalid_request"),
        (reqwest::Method::POST, jobs.clone(), Some(json!({"key": "k".repeat(300), "payload": {"order_id": 1, "note": ""}}).to_string()), 400, "invalid_request"),
        (reqwest::Method::POST, jobs.clone(), Some(json!({"payload": {"order_id": 1, "note": ""}, "expires_after": "0s"}).to_string()), 400, "invalid_request"),
        (reqwest::Method::GET, format!("{jobs}?state=sleeping"), None, 400, "invalid_request"),
        (reqwest::Method::GET, format!("{jobs}?state=scheduled&limit=0"), None, 400, "invalid_request"),
        (reqwest::Method::GET, format!("{jobs}/nope"), None, 404, "not_found"),
        (reqwest::Method::DELETE, format!("{jobs}/nope"), None, 404, "not_found"),
        (reqwest::Method::POST, format!("{jobs}/nope/reschedule"), Some(json!({"delay": "1m"}).to_string()), 404, "not_found"),
        (reqwest::Method::POST, format!("{jobs}/nope/reschedule"), Some(json!({}).to_string()), 400, "invalid_request"),
        (reqwest::Method::GET, format!("{}/v1/topics/bad topic/stats", s.url), None, 400, "invalid_request"),
        (reqwest::Method::DELETE, format!("{}/v1/schedules/nope", s.url), None, 404, "not_found"),
    ];
    for (method, url, body, status, want) in cases {
        let (got, v) = call(method.clone(), &url, Some(TOKEN), body.clone(), &[]).await;
        assert_eq!(
            (got, code(&v)),
            (status, want),
            "{method} {url} {body:?}: {v}"
        );
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{v}"
        );
    }
    let t = s.client.admin().topic_with(TOPIC, 1).unwrap();
    assert_eq!(t.stats().await.unwrap().enqueued, 0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_buries_a_waiting_job_with_its_reason() {
    let s = serve("http-bury", HttpConfig::default()).await;
    let jobs = format!("{}/v1/topics/{TOPIC}/jobs", s.url);
    for key in ["b1", "b2", "b3"] {
        let (status, v) = post_rw(
            &jobs,
            json!({"key": key, "payload": {"order_id": 1, "note": "x"}, "delay": "1h"}),
            &[],
        )
        .await;
        assert_eq!(status, 201, "{v}");
    }
    let bury = |key: &str| format!("{jobs}/{key}/bury");

    let (status, v) = post_rw(&bury("b1"), json!({"reason": "order withdrawn"}), &[]).await;
    assert_eq!(
        (status, v),
        (200, json!({"key": "b1", "outcome": "buried"}))
    );
    let (status, v) = get_rw(&format!("{jobs}/b1")).await;
    assert_eq!((status, &v["state"]), (200, &json!("dead")), "{v}");
    let last = v["history"].as_array().unwrap().last().unwrap();
    assert_eq!(
        (&last["outcome"], &last["error"]),
        (&json!("buried"), &json!("order withdrawn")),
        "{v}"
    );

    // no body: the default reason
    let (status, v) = call(reqwest::Method::POST, &bury("b2"), Some(TOKEN), None, &[]).await;
    assert_eq!(
        (status, v),
        (200, json!({"key": "b2", "outcome": "buried"}))
    );
    let t = s.client.admin().topic_with(TOPIC, 1).unwrap();
    let info = t.job("b2").await.unwrap().unwrap();
    assert_eq!(info.state, dq::JobState::Dead);
    assert_eq!(info.history.last().unwrap().error, "buried by an operator");

    // bad input, a read-only token: refused, nothing written
    let (status, v) = post_rw(&bury("b3"), json!({"reason": "x", "colour": "red"}), &[]).await;
    assert_eq!((status, code(&v)), (400, "invalid_json"), "{v}");
    let (url, body) = post(&bury("b3"), json!({}));
    let (status, v) = call(reqwest::Method::POST, &url, Some(READ_TOKEN), body, &[]).await;
    assert_eq!((status, code(&v)), (403, "forbidden"), "{v}");
    assert_eq!(
        t.job("b3").await.unwrap().unwrap().state,
        dq::JobState::Scheduled
    );

    // dead already, no such job, an unknown topic
    let (status, v) = post_rw(&bury("b1"), json!({}), &[]).await;
    assert_eq!((status, code(&v)), (409, "conflict"), "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("dead queue"),
        "{v}"
    );
    assert_eq!(t.job("b1").await.unwrap().unwrap().history.len(), 1);
    let (status, v) = post_rw(&bury("nope"), json!({}), &[]).await;
    assert_eq!((status, code(&v)), (404, "not_found"), "{v}");
    let (status, v) = post_rw(
        &format!("{}/v1/topics/http.nowhere/jobs/b1/bury", s.url),
        json!({}),
        &[],
    )
    .await;
    assert_eq!((status, code(&v)), (404, "unknown_topic"), "{v}");

    // running (leased here, on a topic no worker serves): 409, the job untouched
    let idle = s.client.topic("http.idle").unwrap();
    idle.enqueue(vec![0xc0]).key("r1").await.unwrap();
    let store = s.client.store();
    let request = dq_core::FetchRequest {
        max_jobs: 10,
        lease: std::time::Duration::from_secs(300),
        promote_batch: 1000,
        recover_batch: 100,
        retry_policy: dq_core::RetryPolicy::none(),
        dead_limits: dq_core::DeadLimits::default(),
        call: dq_core::FetchCall::new(),
    };
    let mut leased = false;
    for p in 0..idle.partitions() {
        let q = dq_core::Queue::new(dq_core::Topic::new("http.idle").unwrap(), p);
        let reply = store.fetch(&q, &request).await.unwrap();
        leased |= reply.jobs.iter().any(|d| d.key.as_str() == "r1");
    }
    assert!(leased, "r1 was not leased");
    let (status, v) = post_rw(
        &format!("{}/v1/topics/http.idle/jobs/r1/bury", s.url),
        json!({"reason": "stop"}),
        &[],
    )
    .await;
    assert_eq!((status, code(&v)), (409, "conflict"), "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("cancel"),
        "{v}"
    );
    assert_eq!(
        idle.job("r1").await.unwrap().unwrap().state,
        dq::JobState::Active
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_pause_limit_and_work_the_dead_queue() {
    let s = serve("http-ops", HttpConfig::default()).await;
    let topic = format!("{}/v1/topics/{TOPIC}", s.url);
    let (status, v) = post_rw(&format!("{topic}/pause"), Value::Null, &[]).await;
    assert_eq!((status, &v["paused"]), (200, &json!(true)), "{v}");
    let (url, body) = post(
        &format!("{topic}/limits"),
        json!({"rate": "10/s", "concurrency": 3}),
    );
    let (status, v) = call(reqwest::Method::PUT, &url, Some(TOKEN), body, &[]).await;
    assert_eq!(
        (status, &v["rate"], &v["concurrency"]),
        (200, &json!("10/s"), &json!(3)),
        "{v}"
    );
    let (url, body) = post(&format!("{topic}/limits"), json!({"rate": null}));
    let (_, v) = call(reqwest::Method::PUT, &url, Some(TOKEN), body, &[]).await;
    assert_eq!(
        (&v["rate"], &v["concurrency"]),
        (&Value::Null, &json!(3)),
        "{v}"
    );
    let (url, body) = post(&format!("{topic}/limits"), json!({"rate": "fast"}));
    let (status, v) = call(reqwest::Method::PUT, &url, Some(TOKEN), body, &[]).await;
    assert_eq!((status, code(&v)), (400, "invalid_request"), "{v}");
    let (_, v) = post_rw(&format!("{topic}/resume"), Value::Null, &[]).await;
    assert_eq!(v["paused"], json!(false));
    // a job that fails permanently goes to the dead queue
    post_rw(
        &format!("{topic}/jobs"),
        json!({"key": "d1", "payload": {"order_id": 1, "note": "fail"}}),
        &[],
    )
    .await;
    let dead = format!("{topic}/dead");
    let d = dead.clone();
    eventually("d1 is dead", WAIT, || {
        let d = d.clone();
        async move {
            get_rw(&d).await.1["jobs"]
                .as_array()
                .is_some_and(|j| j.len() == 1)
        }
    })
    .await;
    let (_, v) = get_rw(&format!("{dead}?error_contains=cannot%20be%20closed")).await;
    assert_eq!(v["jobs"][0]["key"], "d1", "{v}");
    assert_eq!(
        v["jobs"][0]["history"][0]["error"], "the order cannot be closed",
        "{v}"
    );
    let (_, v) = get_rw(&format!("{}/v1/stats", s.url)).await;
    assert_eq!(v[0]["dead"], 1, "{v}");
    let (status, v) = post_rw(
        &format!("{dead}/requeue"),
        json!({"keys": ["d1", "nope"]}),
        &[],
    )
    .await;
    assert_eq!(
        (status, &v["done"], &v["not_dead"]),
        (200, &json!(1), &json!(["nope"])),
        "{v}"
    );
    let d = dead.clone();
    eventually("d1 is dead again", WAIT, || {
        let d = d.clone();
        async move {
            get_rw(&d).await.1["jobs"]
                .as_array()
                .is_some_and(|j| j.len() == 1)
        }
    })
    .await;
    let (status, v) = post_rw(&format!("{dead}/purge"), json!({}), &[]).await;
    assert_eq!((status, code(&v)), (400, "invalid_request"), "{v}");
    let (status, v) = post_rw(&format!("{dead}/purge"), json!({"all": true}), &[]).await;
    assert_eq!((status, &v["done"]), (200, &json!(1)), "{v}");
    let (_, v) = get_rw(&format!("{topic}/stats")).await;
    assert_eq!((&v["dead"], &v["buried"]), (&json!(0), &json!(2)), "{v}");
    // periodic schedules: stored, unchanged when repeated, listed, checked, removed
    let (_, v) = get_rw(&format!("{}/v1/schedules", s.url)).await;
    assert_eq!(v, json!([]));
    let hourly = format!("{}/v1/schedules/hourly-close", s.url);
    let def = json!({"topic": TOPIC, "every": "1h", "payload": {"order_id": 5, "note": "tick"}});
    for want in ["created", "unchanged"] {
        let (url, body) = post(&hourly, def.clone());
        let (status, v) = call(reqwest::Method::PUT, &url, Some(TOKEN), body, &[]).await;
        assert_eq!((status, &v["outcome"]), (200, &json!(want)), "{v}");
    }
    let (_, v) = get_rw(&format!("{}/v1/schedules", s.url)).await;
    assert_eq!(
        (&v[0]["name"], &v[0]["every_ms"]),
        (&json!("hourly-close"), &json!(3_600_000)),
        "{v}"
    );
    for (body, status, want) in [
        (
            json!({"topic": TOPIC, "every": "1h", "payload": {"order_id": "x", "note": ""}}),
            422,
            "payload_mismatch",
        ),
        (
            json!({"topic": TOPIC, "every": "1h", "cron": "0 * * * *", "payload": {}}),
            400,
            "invalid_request",
        ),
        (
            json!({"topic": TOPIC, "cron": "not cron", "payload": {"order_id": 1, "note": ""}}),
            400,
            "invalid_request",
        ),
        (
            json!({"topic": "http.nobody", "every": "1h", "payload": {}}),
            404,
            "unknown_topic",
        ),
    ] {
        let (url, body) = post(&format!("{}/v1/schedules/other", s.url), body);
        let (got, v) = call(reqwest::Method::PUT, &url, Some(TOKEN), body, &[]).await;
        assert_eq!((got, code(&v)), (status, want), "{v}");
    }
    let (status, _) = call(reqwest::Method::DELETE, &hourly, Some(TOKEN), None, &[]).await;
    assert_eq!(status, 204);
    assert!(s.client.schedules().await.unwrap().is_empty());
    let (_, v) = get_rw(&format!("{}/v1/topics", s.url)).await;
    assert_eq!(v[0]["topic"], TOPIC, "{v}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_is_served_without_a_token() {
    let s = serve("http-doc", HttpConfig::default()).await;
    let r = reqwest::get(format!("{}/openapi.json", s.url))
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.text().await.unwrap(), dq_http::openapi_json());
    s.stop().await;
}

/// A due time beyond the topic's `max_delay` is 422 `delay_too_long`, single and bulk, and
/// nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_time_beyond_max_delay_is_422() {
    let s = serve("http-maxdelay", HttpConfig::default()).await;
    let jobs = format!("{}/v1/topics/{TOPIC}/jobs", s.url);
    let t = s.client.admin().topic_with(TOPIC, 1).unwrap();
    t.set_max_delay(Some(std::time::Duration::from_secs(3600)))
        .await
        .unwrap();
    let far = json!({"key": "far", "payload": {"order_id": 1, "note": ""}, "delay": "2h"});
    let (status, v) = post_rw(&jobs, far.clone(), &[]).await;
    assert_eq!((status, code(&v)), (422, "delay_too_long"), "{v}");
    let (status, v) = post_rw(&format!("{jobs}/bulk"), json!({"jobs": [far]}), &[]).await;
    assert_eq!((status, code(&v)), (422, "delay_too_long"), "{v}");
    assert_eq!(t.stats().await.unwrap().enqueued, 0);
    s.stop().await;
}

/// `unique_for`, `debounce` and `throttle` in a request open a window on the key: a refused
/// enqueue answers 200 `refused` with `until_ms`; two windows at once are 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_on_the_key_refuses_and_says_until_when() {
    let s = serve("http-windows", HttpConfig::default()).await;
    let jobs = format!("{}/v1/topics/{TOPIC}/jobs", s.url);
    let first = json!({"key": "w1", "payload": {"order_id": 1, "note": ""}, "delay": "1h", "throttle": "1h"});
    let (status, v) = post_rw(&jobs, first, &[]).await;
    assert_eq!((status, &v["outcome"]), (201, &json!("created")), "{v}");
    let again = json!({"key": "w1", "payload": {"order_id": 2, "note": ""}});
    let (status, v) = post_rw(&jobs, again, &[]).await;
    assert_eq!((status, &v["outcome"]), (200, &json!("refused")), "{v}");
    assert!(v["until_ms"].as_u64().is_some(), "{v}");
    let both = json!({"key": "w2", "payload": {"order_id": 3, "note": ""}, "unique_for": "1h", "throttle": "1m"});
    let (status, v) = post_rw(&jobs, both, &[]).await;
    assert_eq!((status, code(&v)), (400, "invalid_request"), "{v}");
    let zero = json!({"key": "w2", "payload": {"order_id": 3, "note": ""}, "debounce": "0s"});
    let (status, v) = post_rw(&jobs, zero, &[]).await;
    assert_eq!((status, code(&v)), (400, "invalid_request"), "{v}");
    s.stop().await;
}

/// `priority` in a request is stored (the job view says it, single and bulk); one outside
/// 0..=9 is 400 `invalid_request` naming the range, single and bulk, and nothing is written;
/// a priority that is not a whole number is 400 `invalid_json`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priority_is_stored_and_one_out_of_range_is_refused_before_any_write() {
    let s = serve("http-priority", HttpConfig::default()).await;
    // the client and the worker alone in the namespace raise its format to the newest
    let client = s.client.clone();
    eventually("the namespace writes the newest format", WAIT, || {
        let client = client.clone();
        async move { client.store().formats().write() == dq_core::format::NEWEST_FORMAT }
    })
    .await;
    let jobs = format!("{}/v1/topics/{TOPIC}/jobs", s.url);
    let t = s.client.admin().topic_with(TOPIC, 1).unwrap();
    let payload = json!({"order_id": 1, "note": ""});
    for bad in [json!(10), json!(-1), json!(300)] {
        let one = json!({"key": "bad", "payload": payload, "delay": "1h", "priority": bad});
        let (status, v) = post_rw(&jobs, one.clone(), &[]).await;
        assert_eq!((status, code(&v)), (400, "invalid_request"), "{bad}: {v}");
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("0 (lowest) to 9 (highest)"), "{v}");
        let (status, v) = post_rw(&format!("{jobs}/bulk"), json!({"jobs": [one]}), &[]).await;
        assert_eq!((status, code(&v)), (400, "invalid_request"), "{bad}: {v}");
    }
    let fraction = json!({"key": "bad", "payload": payload, "priority": 2.5});
    let (status, v) = post_rw(&jobs, fraction, &[]).await;
    assert_eq!((status, code(&v)), (400, "invalid_json"), "{v}");
    assert_eq!(t.stats().await.unwrap().enqueued, 0);

    let urgent = json!({"key": "urgent", "payload": payload, "delay": "1h", "priority": 8});
    let (status, v) = post_rw(&jobs, urgent, &[]).await;
    assert_eq!(status, 201, "{v}");
    let bulk = json!({"jobs": [
        {"key": "low", "payload": payload, "delay": "1h", "priority": 0},
        {"key": "plain", "payload": payload, "delay": "1h"},
    ]});
    let (status, v) = post_rw(&format!("{jobs}/bulk"), bulk, &[]).await;
    assert_eq!(status, 200, "{v}");
    // no key and no Idempotency-Key: the plain path (group commit when on)
    let keyless = json!({"payload": payload, "delay": "1h", "priority": 9});
    let (status, v) = post_rw(&jobs, keyless, &[]).await;
    assert_eq!(status, 201, "{v}");
    let generated = v["key"].as_str().unwrap().to_owned();
    for (key, level) in [
        ("urgent", 8),
        ("low", 0),
        ("plain", 5),
        (generated.as_str(), 9),
    ] {
        let (status, v) = get_rw(&format!("{jobs}/{key}")).await;
        assert_eq!((status, &v["priority"]), (200, &json!(level)), "{key}: {v}");
        assert_eq!(t.job(key).await.unwrap().unwrap().priority.level(), level);
    }
    s.stop().await;
}

/// `group` in a request is stored (the job view says it, single, bulk and keyless); a bad
/// name is 400 `invalid_request` before any write. A group's limits are read, set over those
/// that apply now (`null` removes one) and removed; so are the default ones; a group is held;
/// bad limits, names and holds are 400 before any write; a read-only token reads them only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_are_stored_shown_limited_and_held() {
    let s = serve("http-group", HttpConfig::default()).await;
    let client = s.client.clone();
    eventually("the namespace writes the newest format", WAIT, || {
        let client = client.clone();
        async move { client.store().formats().write() == dq_core::format::NEWEST_FORMAT }
    })
    .await;
    let topic = format!("{}/v1/topics/{TOPIC}", s.url);
    let jobs = format!("{topic}/jobs");
    let t = s.client.admin().topic_with(TOPIC, 1).unwrap();
    let payload = json!({"order_id": 1, "note": ""});
    for bad in ["a b", "", "x\u{200b}"] {
        let one = json!({"key": "bad", "payload": payload, "delay": "1h", "group": bad});
        let (status, v) = post_rw(&jobs, one.clone(), &[]).await;
        assert_eq!((status, code(&v)), (400, "invalid_request"), "{bad:?}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("invalid group name"),
            "{v}"
        );
        let (status, v) = post_rw(&format!("{jobs}/bulk"), json!({"jobs": [one]}), &[]).await;
        assert_eq!((status, code(&v)), (400, "invalid_request"), "{bad:?}: {v}");
        let keyless = json!({"payload": payload, "delay": "1h", "group": bad});
        let (status, _) = post_rw(&jobs, keyless, &[]).await;
        assert_eq!(status, 400);
    }
    assert_eq!(t.stats().await.unwrap().enqueued, 0);

    let one = json!({"key": "g1", "payload": payload, "delay": "1h", "group": "tenant-7"});
    let (status, v) = post_rw(&jobs, one, &[]).await;
    assert_eq!(status, 201, "{v}");
    let bulk = json!({"jobs": [
        {"key": "g2", "payload": payload, "delay": "1h", "group": "tenant-8"},
        {"key": "plain", "payload": payload, "delay": "1h"},
    ]});
    let (status, v) = post_rw(&format!("{jobs}/bulk"), bulk, &[]).await;
    assert_eq!(status, 200, "{v}");
    let keyless = json!({"payload": payload, "delay": "1h", "group": "tenant-9"});
    let (status, v) = post_rw(&jobs, keyless, &[]).await;
    assert_eq!(status, 201, "{v}");
    let generated = v["key"].as_str().unwrap().to_owned();
    for (key, group) in [
        ("g1", json!("tenant-7")),
        ("g2", json!("tenant-8")),
        ("plain", Value::Null),
        (generated.as_str(), json!("tenant-9")),
    ] {
        let (status, v) = get_rw(&format!("{jobs}/{key}")).await;
        assert_eq!((status, &v["group"]), (200, &group), "{key}: {v}");
        let stored = t.job(key).await.unwrap().unwrap().group;
        assert_eq!(
            stored.as_ref().map(|g| json!(g.as_str())),
            group.as_str().map(|g| json!(g))
        );
    }
    let (_, v) = get_rw(&format!("{jobs}?state=scheduled")).await;
    assert!(
        v["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|j| j["group"] == "tenant-7"),
        "{v}"
    );

    let put = |url: String, body: Value| async move {
        call(
            reqwest::Method::PUT,
            &url,
            Some(TOKEN),
            Some(body.to_string()),
            &[],
        )
        .await
    };
    let delete = |url: String| async move {
        call(reqwest::Method::DELETE, &url, Some(TOKEN), None, &[]).await
    };
    let groups = format!("{topic}/groups");
    let (status, v) = get_rw(&groups).await;
    assert_eq!(
        (status, &v["group"], &v["default_limits"], &v["running"]),
        (200, &Value::Null, &Value::Null, &json!(0)),
        "{v}"
    );
    let (status, v) = put(groups.clone(), json!({"concurrency": 4, "rate": "10/s"})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["default_limits"],
        json!({"concurrency": 4, "rate": "10/s", "weight": 1}),
        "{v}"
    );
    let one = format!("{groups}/tenant-7");
    let (status, v) = put(one.clone(), json!({"weight": 3, "rate": null})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (&v["group"], &v["limits"]),
        (
            &json!("tenant-7"),
            &json!({"concurrency": 4, "rate": null, "weight": 3})
        ),
        "{v}"
    );
    let own = t
        .group_state(Some("tenant-7"))
        .await
        .unwrap()
        .limits
        .unwrap();
    assert_eq!((own.concurrency, own.rate, own.weight), (Some(4), None, 3));

    // bad input: 400, nothing changed
    let before = t.group_state(Some("tenant-7")).await.unwrap();
    for body in [
        json!({"weight": 0}),
        json!({"weight": 1001}),
        json!({"concurrency": 0}),
        json!({"rate": "fast"}),
    ] {
        let (status, v) = put(one.clone(), body.clone()).await;
        assert_eq!((status, code(&v)), (400, "invalid_request"), "{body}: {v}");
    }
    let (status, v) = put(one.clone(), json!({"colour": "red"})).await;
    assert_eq!((status, code(&v)), (400, "invalid_json"), "{v}");
    let (status, v) = put(format!("{groups}/a%20b"), json!({"weight": 2})).await;
    assert_eq!((status, code(&v)), (400, "invalid_request"), "{v}");
    for body in [json!({"duration": "0s"}), json!({"duration": "soon"})] {
        let (status, v) = post_rw(&format!("{one}/hold"), body.clone(), &[]).await;
        assert_eq!((status, code(&v)), (400, "invalid_request"), "{body}: {v}");
    }
    assert_eq!(t.group_state(Some("tenant-7")).await.unwrap(), before);

    // a read-only token reads and changes nothing
    let ro = Some(READ_TOKEN);
    let (status, v) = call(reqwest::Method::GET, &one, ro, None, &[]).await;
    assert_eq!((status, &v["limits"]["weight"]), (200, &json!(3)), "{v}");
    let (status, _) = call(
        reqwest::Method::PUT,
        &one,
        ro,
        Some(json!({"weight": 1}).to_string()),
        &[],
    )
    .await;
    assert_eq!(status, 403);
    let (status, _) = call(reqwest::Method::DELETE, &groups, ro, None, &[]).await;
    assert_eq!(status, 403);

    // a hold, then the group's own limits removed, then the default ones
    let (status, v) = post_rw(&format!("{one}/hold"), json!({"duration": "10m"}), &[]).await;
    assert_eq!(status, 200, "{v}");
    assert!(v["held_until"].is_string(), "{v}");
    assert!(
        t.group_state(Some("tenant-7"))
            .await
            .unwrap()
            .held_until_ms
            .is_some()
    );
    let (status, v) = delete(one.clone()).await;
    assert_eq!((status, &v["limits"]), (200, &Value::Null), "{v}");
    assert!(v["default_limits"].is_object(), "{v}");
    let (status, v) = delete(groups.clone()).await;
    assert_eq!((status, &v["default_limits"]), (200, &Value::Null), "{v}");
    let state = t.group_state(None).await.unwrap();
    assert_eq!(state.default_limits, None);
    s.stop().await;
}
