//! What the dashboard's tests share: a client on the test binary's private Redis in a fresh
//! namespace, a dashboard served on a free loopback port, and jobs in every state made with
//! the client and the store's own calls (a dead job is fetched, then buried); a batch whose
//! members ended that way.
#![allow(dead_code)]

use std::time::Duration;

use dq_core::FetchRequest;
use dq_core::{Client, DeadLimits, FailAction, FetchCall, JobKey, Queue, Topic};
use dq_dashboard::DashboardOptions;
use tokio::sync::oneshot;

/// A running dashboard; stops when dropped.
pub struct Served {
    /// Its base URL, e.g. `http://127.0.0.1:41234`.
    pub url: String,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A client in a fresh namespace of the shared test server.
pub async fn client(prefix: &str) -> Client {
    let server = dq_testkit::shared();
    Client::builder()
        .namespace(dq_testkit::namespace(prefix))
        .connect(&server.url())
        .await
        .expect("connect")
}

/// Serves a dashboard of `client` on a free loopback port.
pub async fn serve(client: Client, opts: DashboardOptions) -> Served {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        dq_dashboard::serve_on(listener, client, opts, async {
            let _ = stopped.await;
        })
        .await
        .expect("serve");
    });
    Served {
        url,
        stop: Some(stop),
    }
}

/// A MessagePack payload for `json`.
pub fn payload(json: serde_json::Value) -> Vec<u8> {
    rmp_serde::to_vec_named(&json).unwrap()
}

/// Enqueues `key` due now, leases it and buries it with `error`: a dead job with one
/// attempt in its history (other ready jobs stay ready). The topic must have one partition.
pub async fn make_dead(client: &Client, topic: &str, key: &str, error: &str) {
    lease_and_fail(client, topic, key, &FailAction::Bury, error).await;
}

/// Enqueues `key` due now, leases it and fails it as a handler that met a partner's rate
/// limit would: the topic is throttled for a minute and counts one throttle. The topic must
/// have one partition.
pub async fn make_throttled(client: &Client, topic: &str, key: &str) {
    let action = FailAction::Throttle(Duration::from_secs(60));
    lease_and_fail(client, topic, key, &action, "rate limited").await;
}

/// Enqueues `key` due now, leases it and fails it with `action` and `error` (other ready
/// jobs stay ready). The topic must have one partition.
async fn lease_and_fail(client: &Client, topic: &str, key: &str, action: &FailAction, error: &str) {
    let tc = client.topic(topic).unwrap();
    assert_eq!(
        tc.partitions(),
        1,
        "make_dead works on one-partition topics"
    );
    tc.enqueue(payload(serde_json::json!({ "key": key })))
        .key(key)
        .await
        .unwrap();
    let queue = Queue::new(Topic::new(topic).unwrap(), 0);
    let store = client.store();
    // Lease every ready job (the new one is among them), bury it, hand the others back
    // untouched (a release charges no attempt).
    let request = FetchRequest {
        max_jobs: 10_000,
        ..fetch_one()
    };
    let reply = store.fetch(&queue, &request).await.unwrap();
    let key = JobKey::new(key).unwrap();
    let d = reply
        .jobs
        .iter()
        .find(|d| d.key == key)
        .expect("the job just enqueued is ready");
    let failure = dq_core::FailedAttempt {
        key: d.key.clone(),
        token: d.token,
        action: action.clone(),
        error: error.to_owned(),
    };
    let out = store
        .fail_many(&queue, &[failure], DeadLimits::default())
        .await
        .unwrap();
    out[0].as_ref().unwrap();
    let others: Vec<(JobKey, u64)> = reply
        .jobs
        .iter()
        .filter(|d| d.key != key)
        .map(|d| (d.key.clone(), d.token))
        .collect();
    if !others.is_empty() {
        store.release(&queue, &others).await.unwrap();
    }
}

/// A fetch of one job with a minute's lease.
pub fn fetch_one() -> FetchRequest {
    FetchRequest {
        max_jobs: 1,
        lease: Duration::from_secs(60),
        promote_batch: 100,
        recover_batch: 100,
        retry_policy: dq_core::RetryPolicy::none(),
        dead_limits: DeadLimits::default(),
        call: FetchCall::new(),
    }
}

/// Enqueues `n` jobs named `{prefix}{i}` due in an hour.
pub async fn make_scheduled(client: &Client, topic: &str, prefix: &str, n: usize) {
    let tc = client.topic(topic).unwrap();
    for i in 0..n {
        tc.enqueue(payload(serde_json::json!({ "i": i })))
            .key(format!("{prefix}{i}"))
            .delay(Duration::from_secs(3600))
            .await
            .unwrap();
    }
}

/// Enqueues `n` jobs named `{prefix}{i}` due now (they wait in `ready`: no worker runs).
pub async fn make_ready(client: &Client, topic: &str, prefix: &str, n: usize) {
    let tc = client.topic(topic).unwrap();
    for i in 0..n {
        tc.enqueue(payload(serde_json::json!({ "i": i })))
            .key(format!("{prefix}{i}"))
            .await
            .unwrap();
    }
}

/// The HTML of the overview row of `topic`.
pub fn row<'a>(html: &'a str, topic: &str) -> Option<&'a str> {
    let row = &html[html.find(&format!("data-topic=\"{topic}\""))?..];
    Some(&row[..row.find("</tr>")?])
}

/// The text of the cell `stat` in the overview row of `topic`.
pub fn cell(html: &str, topic: &str, stat: &str) -> Option<String> {
    let row = row(html, topic)?;
    let at = row.find(&format!("data-stat=\"{stat}\""))?;
    let rest = &row[at..];
    let text = &rest[rest.find('>')? + 1..];
    Some(text[..text.find('<')?].trim().to_owned())
}

/// The value of the hidden `csrf` field of a page.
pub fn csrf_of(html: &str) -> Option<String> {
    let at = html.find("name=\"csrf\" value=\"")? + "name=\"csrf\" value=\"".len();
    Some(html[at..at + html[at..].find('"')?].to_owned())
}

/// Batch `id`, its callback a job of `callback_topic`, with three members of `topic` (a
/// fresh topic of one partition): `<prefix>1` succeeded, `<prefix>2` dead (its error
/// `lost in transit`), `<prefix>3` scheduled in an hour. The members end as a worker ends
/// them (leased, then acked or buried) and the relay's step carries their ends to the batch,
/// which stays open.
pub async fn make_batch(
    client: &Client,
    id: &str,
    topic: &str,
    prefix: &str,
    callback_topic: &str,
) -> dq_core::BatchHandle {
    let batch = client
        .new_batch()
        .id(id)
        .on_complete_raw(callback_topic, payload(serde_json::json!({ "batch": id })))
        .open()
        .await
        .unwrap();
    let member = |i: u32| {
        dq_core::JobSpec::new(payload(serde_json::json!({ "parcel": i })))
            .key(format!("{prefix}{i}"))
    };
    batch
        .add_raw(
            topic,
            vec![
                member(1),
                member(2),
                member(3).delay(Duration::from_secs(3600)),
            ],
        )
        .await
        .unwrap();
    let queue = Queue::new(Topic::new(topic).unwrap(), 0);
    let store = client.store();
    let request = FetchRequest {
        max_jobs: 10,
        ..fetch_one()
    };
    let reply = store.fetch(&queue, &request).await.unwrap();
    assert_eq!(
        reply.jobs.len(),
        2,
        "the two members due now, alone in {topic}"
    );
    for d in &reply.jobs {
        if d.key.as_str().ends_with('1') {
            store
                .ack(
                    &queue,
                    "",
                    &dq_core::Success::of(&[(d.key.clone(), d.token)]),
                )
                .await
                .unwrap();
        } else {
            let failure = dq_core::FailedAttempt {
                key: d.key.clone(),
                token: d.token,
                action: FailAction::Bury,
                error: "lost in transit".into(),
            };
            store
                .fail_many(&queue, &[failure], DeadLimits::default())
                .await
                .unwrap();
        }
    }
    dq_core::client::relay_outbox(client, &queue).await.unwrap();
    batch
}
