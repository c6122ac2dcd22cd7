//! Connecting like a service: a client started before its Redis waits for it (retrying with
//! backoff, bounded by the connect timeout), while `fail_fast` and bad input fail at once.

use std::time::{Duration, Instant};

use dq::{Client, Error};
use dq_testkit::RedisServer;

/// A client started while nothing listens on its Redis's port connects once the server comes
/// up there, and works.
#[tokio::test]
async fn connect_waits_for_redis_to_come_up() {
    let (log, _guard) =
        dq_testkit::CapturedLog::install(tracing_subscriber::filter::LevelFilter::WARN);
    let server = RedisServer::start();
    // The port stays reserved for this server: stopped, it refuses connections.
    server.kill();
    let url = server.url();
    let connecting = tokio::spawn(async move {
        Client::builder()
            .namespace(dq_testkit::namespace("connect-wait"))
            .connect_timeout(Duration::from_secs(60))
            .connect(&url)
            .await
    });
    // The first tries fail (refused) while the server is down: each is logged at WARN, and
    // the client keeps trying.
    dq_testkit::eventually("a failed try logged", Duration::from_secs(30), || {
        let text = log.text();
        async move { text.contains("redis unreachable; retrying") }
    })
    .await;
    assert!(
        !connecting.is_finished(),
        "connect gave up or connected to nothing"
    );
    server.restart();
    let client = tokio::time::timeout(Duration::from_secs(30), connecting)
        .await
        .expect("connect did not finish after redis came up")
        .unwrap()
        .expect("connect failed after redis came up");
    let topics = client.topics().await.unwrap();
    assert!(topics.is_empty(), "{topics:?}");
}

/// `fail_fast` returns the connection error at the first try; a bounded wait gives up with
/// it after the timeout; a malformed URL is a typed error at once, however long the timeout.
#[tokio::test]
async fn fail_fast_and_bad_urls_fail_at_once() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let unreachable = format!("redis://127.0.0.1:{port}/");

    let started = Instant::now();
    match Client::builder().fail_fast().connect(&unreachable).await {
        Err(e @ Error::Redis(_)) => assert!(e.is_retryable(), "{e:?}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
    // One refused try, not a wait: far below the default 30 s timeout.
    assert!(started.elapsed() < Duration::from_secs(10));

    let started = Instant::now();
    match Client::builder()
        .connect_timeout(Duration::from_millis(500))
        .connect(&unreachable)
        .await
    {
        Err(e @ Error::Redis(_)) => assert!(e.is_retryable(), "{e:?}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
    assert!(started.elapsed() >= Duration::from_millis(500));

    let started = Instant::now();
    match Client::builder()
        .connect_timeout(Duration::from_secs(3600))
        .connect("http://nowhere")
        .await
    {
        Err(Error::InvalidConfig(_)) => {}
        other => panic!("{:?}", other.map(|_| ())),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
}
