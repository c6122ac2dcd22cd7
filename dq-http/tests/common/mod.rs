//! What the API's tests share: a job type and its Rust handler (which records every job it
//! runs), a client in a fresh namespace of the test binary's Redis with a worker running that
//! handler, and the API served on a free loopback port with a read-write and a read-only
//! token.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use dq::{Client, JobContext, JobError, Worker, WorkerHandle};
use dq_http::{Access, HttpConfig, Token};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

/// The topic the handler runs.
pub const TOPIC: &str = "http.orders";
/// The read-write token.
pub const TOKEN: &str = "rw-token-for-tests";
/// The read-only token.
pub const READ_TOKEN: &str = "ro-token-for-tests";
/// How long a wait for the worker may take: generous, for a loaded 2-core machine.
pub const WAIT: Duration = Duration::from_secs(60);

/// The topic's payload, as the handler reads it.
#[derive(Debug, Serialize, Deserialize)]
pub struct CloseOrder {
    /// Which order.
    pub order_id: u64,
    /// A note.
    pub note: String,
}

/// Jobs the handler ran: `<namespace>/<key>` → the payload it read.
static RAN: Mutex<Option<HashMap<String, String>>> = Mutex::new(None);

/// Closes an order: records that it ran; an order whose note is `fail` fails permanently
/// (to the dead queue).
#[dq::delayed_job(topic = "http.orders", retry = "none")]
async fn close_order(order: CloseOrder, ctx: JobContext) -> Result<(), JobError> {
    if order.note == "fail" {
        return Err(JobError::permanent("the order cannot be closed"));
    }
    let ns = ctx.data::<Namespace>()?.0.clone();
    RAN.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_or_insert_with(HashMap::new)
        .insert(
            format!("{ns}/{}", ctx.key),
            format!("{}:{}", order.order_id, order.note),
        );
    Ok(())
}

/// The namespace a worker runs in, for the handler's record.
#[derive(Clone)]
pub struct Namespace(pub String);

/// The payload the handler read for `key` in namespace `ns`, if it ran it.
pub fn ran(ns: &str, key: &str) -> Option<String> {
    RAN.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .and_then(|m| m.get(&format!("{ns}/{key}")).cloned())
}

/// A running API with a worker behind it; both stop when dropped.
pub struct Served {
    /// Its base URL, e.g. `http://127.0.0.1:41234`.
    pub url: String,
    /// The namespace.
    pub ns: String,
    /// A client of the namespace.
    pub client: Client,
    stop: Option<oneshot::Sender<()>>,
    worker: Option<WorkerHandle>,
}

impl Served {
    /// Stops the worker (cleanly).
    pub async fn stop(mut self) {
        if let Some(w) = self.worker.take() {
            w.shutdown().await;
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A client in a fresh namespace, a worker running [`close_order`] in it (so the topic is
/// recorded), and the API with [`TOKEN`], [`READ_TOKEN`] and `close_order`'s type, on a free
/// loopback port. `group_commit`: the client coalesces concurrent single enqueues.
pub async fn serve(prefix: &str, config: HttpConfig) -> Served {
    serve_with(prefix, config.job::<close_order>()).await
}

/// As [`serve`], but the API knows no payload type (`dq serve` alone): only `config`'s.
pub async fn serve_with(prefix: &str, config: HttpConfig) -> Served {
    let server = dq_testkit::shared();
    let ns = dq_testkit::namespace(prefix);
    let client = Client::builder()
        .namespace(&ns)
        .connect(&server.url())
        .await
        .expect("connect");
    let worker = Worker::builder(client.clone())
        .topics([TOPIC])
        .data(Namespace(ns.clone()))
        .build()
        .expect("worker")
        .start()
        .await
        .expect("start");
    let config = config
        .token(Token::new(TOKEN, Access::ReadWrite))
        .token(Token::new(READ_TOKEN, Access::ReadOnly));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    let api_client = client.clone();
    tokio::spawn(async move {
        dq_http::serve_on(listener, api_client, config, async {
            let _ = stopped.await;
        })
        .await
        .expect("serve");
    });
    Served {
        url,
        ns,
        client,
        stop: Some(stop),
        worker: Some(worker),
    }
}

/// The repository's root.
pub fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate is in the repository")
        .to_path_buf()
}
