//! `dq serve` and `dq dashboard --api` as processes: the built binary serves the HTTP API
//! with the environment's tokens (a job enqueued over HTTP is in the store), refuses a payload
//! that does not fit the shape a worker published for the topic, and refuses to listen beyond
//! loopback with no token.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use dq_core::{Client, JobState};
use dq_testkit::{eventually, eventually_some};

const WAIT: Duration = Duration::from_secs(60);

/// A `dq` process, killed (by its pid) when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn dq(url: &str, ns: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dq"));
    cmd.args(["--url", url, "--namespace", ns])
        .args(args)
        .stdin(Stdio::null())
        .env_remove("REDIS_URL")
        .env_remove("DQ_NAMESPACE")
        .env_remove("DQ_API_READ_TOKENS");
    cmd
}

/// Sends `POST base/v1/topics/cli.http/jobs` with `token`: the status and body.
async fn enqueue(base: &str, token: &str, key: &str) -> (u16, String) {
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/topics/cli.http/jobs"))
        .header("Authorization", format!("Bearer {token}"))
        .body(format!(
            r#"{{"key": "{key}", "payload": {{"n": 1}}, "delay": "1h"}}"#
        ))
        .send()
        .await
        .expect("send");
    (r.status().as_u16(), r.text().await.unwrap_or_default())
}

async fn world() -> (String, String, Client) {
    let url = dq_testkit::shared().url();
    let ns = dq_testkit::namespace("cli-serve");
    let client = Client::builder()
        .namespace(&ns)
        .connect(&url)
        .await
        .expect("connect");
    client
        .topic("cli.http")
        .unwrap()
        .check()
        .await
        .expect("record the topic");
    (url, ns, client)
}

/// Waits until `base/openapi.json` answers.
async fn answers(base: &str) {
    let doc = format!("{base}/openapi.json");
    eventually("the API answers", WAIT, || {
        let doc = doc.clone();
        async move { matches!(reqwest::get(&doc).await, Ok(r) if r.status().is_success()) }
    })
    .await;
}

#[tokio::test]
async fn dq_serve_enqueues_with_a_token_and_refuses_without() {
    let (url, ns, client) = world().await;
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let _serving = Running(
        dq(&url, &ns, &["serve", "--listen", &listen])
            .env("DQ_API_TOKENS", "tok-1,tok-2")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start dq serve"),
    );
    let base = format!("http://{listen}");
    answers(&base).await;
    let (status, body) = enqueue(&base, "tok-2", "k1").await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = enqueue(&base, "wrong", "k2").await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("\"unauthorized\""), "{body}");
    let t = client.topic("cli.http").unwrap();
    let job = eventually_some("k1 is stored", WAIT, || {
        let t = t.clone();
        async move { t.job("k1").await.ok().flatten() }
    })
    .await;
    assert_eq!(job.state, JobState::Scheduled);
    assert!(t.job("k2").await.unwrap().is_none());
}

/// `dq serve` knows no payload type: it checks a payload against the shape the topic's worker
/// published (here written as a worker writes it at start), reading it from the store.
#[tokio::test]
async fn dq_serve_refuses_a_payload_that_does_not_fit_the_published_shape() {
    #[derive(serde::Serialize, serde::Deserialize)]
    #[allow(dead_code)]
    struct Payload {
        n: u64,
    }
    let (url, ns, client) = world().await;
    let topic = dq_core::Topic::new("cli.http").unwrap();
    let shape = dq_core::shape::PayloadShape::of::<Payload>().expect("a shape");
    client
        .store()
        .put_payload_shape(&topic, Some(&shape))
        .await
        .expect("publish the shape");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let _serving = Running(
        dq(&url, &ns, &["serve", "--listen", &listen])
            .env("DQ_API_TOKENS", "tok")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start dq serve"),
    );
    let base = format!("http://{listen}");
    answers(&base).await;
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/topics/cli.http/jobs"))
        .header("Authorization", "Bearer tok")
        .body(r#"{"key": "misfit", "payload": {"n": "seven"}, "delay": "1h"}"#)
        .send()
        .await
        .expect("send");
    let (status, body) = (r.status().as_u16(), r.text().await.unwrap_or_default());
    assert_eq!(status, 422, "{body}");
    assert!(
        body.contains("\"payload_mismatch\"")
            && body.contains("n: expected an unsigned integer, found a string"),
        "{body}"
    );
    let t = client.topic("cli.http").unwrap();
    assert!(t.job("misfit").await.unwrap().is_none());
    let (status, body) = enqueue(&base, "tok", "fits").await;
    assert_eq!(status, 201, "{body}");
}

#[tokio::test]
async fn dq_serve_refuses_to_listen_beyond_loopback_without_a_token() {
    let (url, ns, _client) = world().await;
    let out = dq(&url, &ns, &["serve", "--listen", "0.0.0.0:0"])
        .env_remove("DQ_API_TOKENS")
        .output()
        .expect("run dq serve");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("DQ_API_TOKENS"), "{stderr}");
}

#[tokio::test]
async fn dq_dashboard_serves_the_api_under_api() {
    let (url, ns, client) = world().await;
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let _serving = Running(
        dq(&url, &ns, &["dashboard", "--api", "--listen", &listen])
            .env("DQ_API_TOKENS", "tok")
            .env_remove("DQ_DASHBOARD_TOKEN")
            .env_remove("DQ_DASHBOARD_PASSWORD")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start dq dashboard --api"),
    );
    let base = format!("http://{listen}/api");
    answers(&base).await;
    let (status, body) = enqueue(&base, "tok", "d1").await;
    assert_eq!(status, 201, "{body}");
    assert!(
        client
            .topic("cli.http")
            .unwrap()
            .job("d1")
            .await
            .unwrap()
            .is_some()
    );
}
