//! End-to-end tests of `dq batches` and `dq batch` (issue 24): the built binary against this
//! test binary's private redis-server, in a namespace of its own. Batches and a flow are made
//! with the library; members end as a worker would end them (leased with the store's fetch,
//! then acked or buried) and the workers' relay step (`relay_outbox`) carries their ends to
//! the batch. Standard input is null (not a terminal): a cancel without `--yes` is refused.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use dq_core::{
    Client, DeadLimits, FailAction, FetchCall, FetchRequest, JobSpec, JobState, Queue, Topic,
};
use serde_json::Value;

const OK: i32 = 0;
const BAD_INPUT: i32 = 2;
const NOT_FOUND: i32 = 3;

/// The members' topic, the callback's, and a flow's parent's.
const ITEMS: &str = "items.release";
const CLOSE: &str = "orders.close";
const SHIP: &str = "orders.ship";

/// A flow's parent (typed: flows take a job type).
struct ShipOrder;

impl dq_core::Job for ShipOrder {
    type Payload = u32;
    const TOPIC: &'static str = SHIP;
}

/// A flow's child.
struct PackItem;

impl dq_core::Job for PackItem {
    type Payload = u32;
    const TOPIC: &'static str = ITEMS;
}

/// What one run of `dq` did.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
    what: String,
}

impl Run {
    fn from(out: Output, args: &[&str]) -> Run {
        Run {
            code: out.status.code().expect("dq exited by a signal"),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            what: args.join(" "),
        }
    }

    #[track_caller]
    fn code(self, code: i32) -> Run {
        assert_eq!(
            self.code, code,
            "dq {}: exit {} (want {code})\nstdout: {}\nstderr: {}",
            self.what, self.code, self.stdout, self.stderr
        );
        self
    }

    #[track_caller]
    fn ok(self) -> Run {
        self.code(OK)
    }

    #[track_caller]
    fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("dq {}: not JSON ({e}): {}", self.what, self.stdout))
    }
}

/// A Redis URL, a fresh namespace, and a library client on it.
struct World {
    url: String,
    ns: String,
    client: Client,
}

impl World {
    async fn new() -> World {
        let url = dq_testkit::shared().url();
        let ns = dq_testkit::namespace("cli-batches");
        let client = Client::builder()
            .namespace(&ns)
            .partitions(ITEMS, 2)
            .connect(&url)
            .await
            .expect("connect");
        World { url, ns, client }
    }

    /// Runs `dq --url … --namespace … ARGS` with stdin null.
    fn dq(&self, args: &[&str]) -> Run {
        let out = Command::new(env!("CARGO_BIN_EXE_dq"))
            .arg("--url")
            .arg(&self.url)
            .arg("--namespace")
            .arg(&self.ns)
            .args(args)
            .stdin(Stdio::null())
            .env_remove("REDIS_URL")
            .env_remove("DQ_NAMESPACE")
            .output()
            .expect("run dq");
        Run::from(out, args)
    }

    /// Ends the due members of `topic` as a worker would — `dead` buried, the others acked
    /// — then relays every partition's outbox to the batches.
    async fn end_due(&self, topic: &str, dead: &[&str]) {
        let t = self.client.topic(topic).unwrap();
        let store = self.client.store();
        for p in 0..t.check().await.unwrap().partitions {
            let q = Queue::new(Topic::new(topic).unwrap(), p);
            let reply = store.fetch(&q, &fetch_request()).await.unwrap();
            for d in reply.jobs {
                if dead.contains(&d.key.as_str()) {
                    let failure = dq_core::FailedAttempt {
                        key: d.key.clone(),
                        token: d.token,
                        action: FailAction::Bury,
                        error: "the warehouse lost it".into(),
                    };
                    store
                        .fail_many(&q, &[failure], DeadLimits::default())
                        .await
                        .unwrap();
                } else {
                    store
                        .ack(&q, "", &dq_core::Success::of(&[(d.key.clone(), d.token)]))
                        .await
                        .unwrap();
                }
            }
            self.relay(topic).await;
        }
    }

    /// The relay's step on every partition of `topic`.
    async fn relay(&self, topic: &str) {
        let t = self.client.topic(topic).unwrap();
        for p in 0..t.check().await.unwrap().partitions {
            let q = Queue::new(Topic::new(topic).unwrap(), p);
            dq_core::client::relay_outbox(&self.client, &q)
                .await
                .unwrap();
        }
    }
}

fn fetch_request() -> FetchRequest {
    FetchRequest {
        max_jobs: 500,
        lease: Duration::from_secs(300),
        promote_batch: 1000,
        recover_batch: 100,
        retry_policy: dq_core::RetryPolicy::none(),
        dead_limits: DeadLimits::default(),
        call: FetchCall::new(),
    }
}

fn payload(n: u32) -> Vec<u8> {
    dq_core::payload::encode(&n, 1 << 20).unwrap()
}

/// `n` members due now, keys `<prefix>-1` …
fn members(prefix: &str, n: u32) -> Vec<JobSpec<Vec<u8>>> {
    (1..=n)
        .map(|i| JobSpec::new(payload(i)).key(format!("{prefix}-{i}")))
        .collect()
}

#[tokio::test]
async fn batches_are_listed_shown_by_state_and_closed() {
    let w = World::new().await;
    let order = w
        .client
        .new_batch()
        .id("order-17")
        .on_complete_raw(CLOSE, payload(17))
        .open()
        .await
        .unwrap();
    order.add_raw(ITEMS, members("17", 3)).await.unwrap();
    let other = w.client.new_batch().id("order-18").open().await.unwrap();
    other.add_raw(ITEMS, members("18", 1)).await.unwrap();

    // the batches not done, oldest first, page by page
    let run = w.dq(&["batches"]).ok();
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert!(lines[0].starts_with("ID "), "{}", run.stdout);
    assert!(
        lines[1].starts_with("order-17 ") && lines[1].contains(" open "),
        "{}",
        run.stdout
    );
    assert!(lines[2].starts_with("order-18 "), "{}", run.stdout);
    let page = w.dq(&["batches", "--limit", "1", "--json"]).ok().json();
    assert_eq!(page["batches"][0]["id"], "order-17");
    assert_eq!(page["batches"][0]["members"], 3);
    assert_eq!(page["batches"][0]["pending"], 3);
    assert_eq!(page["batches"][0]["status"], "open");
    assert_eq!(page["batches"].as_array().unwrap().len(), 1);
    assert_eq!(page["next"], "order-17");
    let run = w.dq(&["batches", "--limit", "1"]).ok();
    assert!(
        run.stderr.contains("more: dq batches --after 'order-17'"),
        "{}",
        run.stderr
    );
    let page = w
        .dq(&["batches", "--after", "order-17", "--json"])
        .ok()
        .json();
    assert_eq!(page["batches"][0]["id"], "order-18");
    assert_eq!(page["next"], Value::Null);

    // one batch: open, its callback not enqueued yet
    let run = w.dq(&["batch", "order-17"]).ok();
    for want in [
        "status     open",
        "policy     wait_all",
        "callback orders.close batch:order-17: not enqueued yet",
        "members    3 (3 not ended, 0 succeeded, 0 failed)",
        "enqueued        3",
    ] {
        assert!(run.stdout.contains(want), "{want:?} in\n{}", run.stdout);
    }

    // a member's job names its batch
    let job = w.dq(&["job", ITEMS, "18-1", "--json"]).ok().json();
    assert_eq!(job["batch"], "order-18");
    let run = w.dq(&["job", ITEMS, "18-1"]).ok();
    assert!(run.stdout.contains("batch     order-18"), "{}", run.stdout);

    // members end (one dead): counts by state, members by state
    w.end_due(ITEMS, &["17-2"]).await;
    let b = w.dq(&["batch", "order-17", "--json"]).ok().json();
    assert_eq!(b["counts"]["succeeded"], 2, "{b}");
    assert_eq!(b["counts"]["dead"], 1, "{b}");
    assert_eq!((&b["pending"], &b["failed"]), (&json(0), &json(1)));
    assert_eq!(b["then"]["kind"], "callback");
    assert_eq!(b["then"]["state"], Value::Null);
    let dead = w
        .dq(&[
            "batch",
            "order-17",
            "--members",
            "--state",
            "dead",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(
        dead["members"],
        serde_json::json!([{"topic": ITEMS, "key": "17-2", "state": "dead"}])
    );
    let run = w.dq(&["batch", "order-17", "--members"]).ok();
    assert_eq!(run.stdout.lines().count(), 4, "{}", run.stdout);
    assert!(run.stdout.contains("17-2") && run.stdout.contains("dead"));

    // closed: complete at once, its callback enqueued under batch:<id>, out of the listing
    let run = w.dq(&["batch", "order-17", "--close"]).ok();
    assert!(
        run.stdout.starts_with("closed batch order-17\n"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("status     done"), "{}", run.stdout);
    let b = w.dq(&["batch", "order-17", "--json"]).ok().json();
    assert_eq!(b["status"], "done");
    assert!(b["closed"].is_string() && b["done"].is_string(), "{b}");
    let state = b["then"]["state"].as_str().unwrap_or_default();
    assert!(["scheduled", "ready"].contains(&state), "{b}");
    let callback = w
        .client
        .topic(CLOSE)
        .unwrap()
        .job("batch:order-17")
        .await
        .unwrap()
        .expect("the callback");
    assert!(matches!(
        callback.state,
        JobState::Scheduled | JobState::Ready
    ));
    let page = w.dq(&["batches", "--json"]).ok().json();
    let ids: Vec<&str> = page["batches"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["id"].as_str())
        .collect();
    assert_eq!(ids, ["order-18"]);
}

fn json(n: u64) -> Value {
    Value::from(n)
}

#[tokio::test]
async fn a_cancel_asks_first_and_cancels_every_member_not_ended() {
    let w = World::new().await;
    let b = w.client.new_batch().id("sweep-1").open().await.unwrap();
    b.add_raw(ITEMS, members("s", 3)).await.unwrap();

    // off a terminal, without --yes: refused, nothing done
    let run = w.dq(&["batch", "sweep-1", "--cancel"]).code(BAD_INPUT);
    assert!(run.stderr.contains("--yes"), "{}", run.stderr);
    let info = b.info().await.unwrap().unwrap();
    assert!(!info.closed);
    assert_eq!(info.counts.enqueued, 3);

    let run = w.dq(&["batch", "sweep-1", "--cancel", "--yes"]).ok();
    assert!(
        run.stdout.starts_with("cancelled batch sweep-1"),
        "{}",
        run.stdout
    );
    let t = w.client.topic(ITEMS).unwrap();
    for key in ["s-1", "s-2", "s-3"] {
        assert!(t.job(key).await.unwrap().is_none(), "{key} cancelled");
    }
    w.relay(ITEMS).await;
    let b = w.dq(&["batch", "sweep-1", "--json"]).ok().json();
    assert_eq!(b["counts"]["cancelled"], 3, "{b}");
    assert_eq!(b["status"], "done");
    assert_eq!(b["then"], Value::Null);
    let run = w.dq(&["batch", "sweep-1"]).ok();
    assert!(
        run.stdout
            .contains("then       nothing (the batch only reports its progress)"),
        "{}",
        run.stdout
    );
}

#[tokio::test]
async fn a_flow_shows_its_parent_waiting_then_released() {
    let w = World::new().await;
    let flow = w
        .client
        .new_flow::<ShipOrder>(JobSpec::new(9).key("order-9"))
        .children::<PackItem>((1..=2).map(|i| JobSpec::new(i).key(format!("9-{i}"))))
        .enqueue()
        .await
        .unwrap();
    let id = flow.children.id().to_string();
    assert_eq!(id, "flow.orders.ship.order-9");
    let page = w.dq(&["batches", "--json"]).ok().json();
    assert_eq!(page["batches"][0]["id"], id.as_str());
    let run = w.dq(&["batch", &id]).ok();
    assert!(
        run.stdout
            .contains("parent orders.ship order-9: scheduled, waiting for its children"),
        "{}",
        run.stdout
    );
    let b = w.dq(&["batch", &id, "--json"]).ok().json();
    assert_eq!(b["then"]["kind"], "parent");
    assert_eq!(b["then"]["waiting_for_children"], true);
    assert_eq!(b["status"], "closed");

    w.end_due(ITEMS, &[]).await;
    let b = w.dq(&["batch", &id, "--json"]).ok().json();
    assert_eq!(b["status"], "done", "{b}");
    assert_eq!(b["then"]["waiting_for_children"], false, "{b}");
    let state = b["then"]["state"].as_str().unwrap_or_default();
    assert!(["scheduled", "ready"].contains(&state), "{b}");
}

#[tokio::test]
async fn an_unknown_batch_is_not_found_and_a_bad_id_bad_input() {
    let w = World::new().await;
    let run = w.dq(&["batch", "nope"]).code(NOT_FOUND);
    assert!(run.stderr.contains("no batch \"nope\""), "{}", run.stderr);
    w.dq(&["batch", "nope", "--members"]).code(NOT_FOUND);
    w.dq(&["batch", "nope", "--close"]).code(NOT_FOUND);
    w.dq(&["batch", "nope", "--cancel", "--yes"])
        .code(NOT_FOUND);
    let run = w.dq(&["batch", "a b"]).code(BAD_INPUT);
    assert!(run.stderr.contains("invalid batch id"), "{}", run.stderr);
    w.dq(&["batches", "--after", "a{b}"]).code(BAD_INPUT);
    w.dq(&["batches", "--limit", "0"]).code(BAD_INPUT);
    w.dq(&["batch", "x", "--members", "--state", "finished"])
        .code(BAD_INPUT);
    // nothing was recorded by looking
    let run = w.dq(&["batches"]).ok();
    assert!(run.stderr.contains("no batches not done"), "{}", run.stderr);
}
