//! End-to-end tests of the `dq` binary: each runs the built binary (`std::process::Command`)
//! against this test binary's private redis-server (dq-testkit), in a namespace of its own,
//! sets up jobs with the library, and checks both what `dq` prints and exits with and what
//! the store holds afterwards. A few run against a Redis Cluster (`redis+cluster://`).
//!
//! Standard input is always null (not a terminal): that is how the tests see the refusal of a
//! bulk operation without `--yes`, and why no progress bar is drawn.

use std::collections::HashSet;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime};

use dq_core::{
    Client, DeadLimits, FailAction, FetchCall, FetchRequest, JobState, Queue, Topic, TopicClient,
};
use serde_json::Value;

/// One test's world: a Redis URL, a fresh namespace, and a library client on it.
struct World {
    url: String,
    ns: String,
    client: Client,
}

impl World {
    async fn new() -> World {
        World::on(dq_testkit::shared().url()).await
    }

    async fn cluster() -> World {
        World::on(dq_testkit::shared_cluster().url()).await
    }

    async fn on(url: String) -> World {
        let ns = dq_testkit::namespace("cli");
        let client = Client::builder()
            .namespace(&ns)
            .partitions("multi", 3)
            .connect(&url)
            .await
            .expect("connect");
        World { url, ns, client }
    }

    fn topic(&self, name: &str) -> TopicClient {
        self.client.topic(name).expect("topic")
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

    /// Enqueues `jobs` (key, error) due now on `topic`, then leases and buries each with its
    /// error text.
    async fn bury(&self, topic: &str, jobs: &[(String, String)]) {
        let t = self.topic(topic);
        for (k, _) in jobs {
            t.enqueue(dq_core::payload::encode(&serde_json::json!({"k": k}), 1 << 20).unwrap())
                .key(k.as_str())
                .await
                .unwrap();
        }
        let mut left: std::collections::HashMap<&str, &str> =
            jobs.iter().map(|(k, e)| (k.as_str(), e.as_str())).collect();
        let store = self.client.store();
        for p in 0..t.partitions() {
            let q = Queue::new(Topic::new(topic).unwrap(), p);
            for _ in 0..1000 {
                let reply = store.fetch(&q, &fetch_request()).await.unwrap();
                if reply.jobs.is_empty() {
                    break;
                }
                for d in reply.jobs {
                    let err = left.remove(d.key.as_str()).expect("a job of this test");
                    let failure = dq_core::FailedAttempt {
                        key: d.key.clone(),
                        token: d.token,
                        action: FailAction::Bury,
                        error: err.to_owned(),
                    };
                    let out = store
                        .fail_many(&q, &[failure], DeadLimits::default())
                        .await
                        .unwrap();
                    out[0].as_ref().unwrap();
                }
            }
        }
        assert!(left.is_empty(), "not buried: {left:?}");
    }

    async fn dead_keys(&self, topic: &str) -> HashSet<String> {
        let t = self.topic(topic);
        let page = t
            .list(JobState::Dead, dq_core::Page::first(1000))
            .await
            .unwrap();
        assert!(page.next.is_none(), "more than 1000 dead jobs");
        page.jobs.iter().map(|j| j.key.to_string()).collect()
    }
}

/// The store's clock, in ms.
async fn store_time(client: &Client) -> u64 {
    client.store().now_ms().await.unwrap()
}

/// A client of `topic` with `partitions` partitions on `w`'s connection.
fn topic_n(w: &World, topic: &str, partitions: u16) -> TopicClient {
    Client::from_store(
        w.client.store().clone(),
        dq_core::ClientConfig {
            partitions: [(topic.to_owned(), partitions)].into(),
            ..Default::default()
        },
    )
    .topic(topic)
    .unwrap()
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

fn named(prefix: &str, n: usize, error: &str) -> Vec<(String, String)> {
    (0..n)
        .map(|i| (format!("{prefix}{i:03}"), format!("{error} (#{i})")))
        .collect()
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

    /// Asserts exit code `code`; returns self.
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
        self.code(0)
    }

    #[track_caller]
    fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("dq {}: not JSON ({e}): {}", self.what, self.stdout))
    }
}

const OK: i32 = 0;
const FAILED: i32 = 1;
const BAD_INPUT: i32 = 2;
const NOT_FOUND: i32 = 3;
const CONNECTION: i32 = 4;

#[test]
fn help_reads_well() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_dq"))
            .args(args)
            .output()
            .unwrap();
        Run::from(out, args).ok().stdout
    };
    let help = run(&["--help"]);
    for word in [
        "topics",
        "stats",
        "job",
        "cancel",
        "bury",
        "reschedule",
        "dead",
        "enqueue",
        "schedules",
        "--url",
        "REDIS_URL",
        "--namespace",
        "Exit codes",
        "not found",
        "cannot reach Redis",
        "redis+cluster://",
    ] {
        assert!(help.contains(word), "dq --help lacks {word:?}:\n{help}");
    }
    let dead = run(&["dead", "--help"]);
    for word in ["list", "requeue", "purge"] {
        assert!(
            dead.contains(word),
            "dq dead --help lacks {word:?}:\n{dead}"
        );
    }
    let purge = run(&["dead", "purge", "--help"]);
    for word in ["--all", "--older-than", "--error-contains", "--yes"] {
        assert!(purge.contains(word), "dq dead purge --help lacks {word:?}");
    }
    let reschedule = run(&["reschedule", "--help"]);
    for word in ["--at", "--in", "--now", "RFC 3339"] {
        assert!(
            reschedule.contains(word),
            "dq reschedule --help lacks {word:?}"
        );
    }
}

#[tokio::test]
async fn topics_lists_the_registry() {
    let w = World::new().await;
    w.dq(&["topics"]).ok();
    w.topic("orders.close").enqueue(vec![0x01]).await.unwrap();
    w.topic("multi").enqueue(vec![0x02]).await.unwrap();
    let run = w.dq(&["topics", "--json"]).ok();
    let rows = run.json();
    let got: Vec<(String, u64)> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["topic"].as_str().unwrap().to_owned(),
                r["partitions"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [("multi".to_owned(), 3), ("orders.close".to_owned(), 1)]
    );
    let text = w.dq(&["topics"]).ok().stdout;
    assert!(
        text.contains("orders.close") && text.contains("multi"),
        "{text}"
    );
}

#[tokio::test]
async fn stats_shows_depths_and_counters() {
    let w = World::new().await;
    let t = w.topic("multi");
    w.bury("multi", &named("d", 2, "boom")).await;
    for i in 0..4 {
        t.enqueue(vec![0x01]).key(format!("now{i}")).await.unwrap();
    }
    t.enqueue(vec![0x01])
        .key("later")
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();

    let s = w.dq(&["stats", "multi", "--json"]).ok().json();
    assert_eq!(s["topic"], "multi");
    assert_eq!(s["partitions"], 3);
    assert_eq!(s["ready"], 4);
    assert_eq!(s["active"], 0);
    assert_eq!(s["scheduled"], 1);
    assert_eq!(s["dead"], 2);
    assert_eq!(s["counters"]["enqueued"], 7);
    assert_eq!(s["counters"]["buried"], 2);
    assert_eq!(s["counters"]["throttles"], 0);
    assert_eq!(s["workers"], 0, "no live worker yet");
    // Two live workers serve the topic, a third serves another one.
    for topics in [vec!["multi"], vec!["multi", "other"], vec!["other"]] {
        let info = dq_core::WorkerInfo::new(topics.iter().map(ToString::to_string).collect(), 4, 1);
        w.client
            .store()
            .beat_worker(&info, Duration::from_secs(600))
            .await
            .unwrap();
    }
    let s = w.dq(&["stats", "multi", "--json"]).ok().json();
    assert_eq!(s["workers"], 2);

    let all = w.dq(&["stats", "--json"]).ok().json();
    assert_eq!(all.as_array().unwrap().len(), 1);
    let text = w.dq(&["stats"]).ok().stdout;
    assert!(text.contains("multi") && text.contains("DEAD"), "{text}");
    let detail = w.dq(&["stats", "multi"]).ok().stdout;
    assert!(detail.contains("dead            2"), "{detail}");

    // --watch refreshes: two JSON documents, one per line.
    let watch = w
        .dq(&[
            "stats",
            "multi",
            "--watch",
            "--count",
            "2",
            "--interval",
            "50ms",
            "--json",
        ])
        .ok();
    assert_eq!(watch.stdout.lines().count(), 2, "{}", watch.stdout);

    w.dq(&["stats", "no.such.topic"]).code(NOT_FOUND);
    w.dq(&["stats", "multi", "--interval", "soon", "--watch"])
        .code(BAD_INPUT);
}

#[tokio::test]
async fn job_shows_state_errors_and_payload_as_json() {
    let w = World::new().await;
    w.dq(&[
        "enqueue",
        "orders",
        "--partitions",
        "1",
        "--key",
        "o-7",
        "--json",
        r#"{"order":7,"lines":["a","b"],"rush":true}"#,
        "--in",
        "1h",
    ])
    .ok();
    let j = w.dq(&["job", "orders", "o-7", "--json"]).ok().json();
    assert_eq!(j["state"], "scheduled");
    assert_eq!(j["attempts"], 0);
    assert_eq!(
        j["payload"],
        serde_json::json!({"order": 7, "lines": ["a", "b"], "rush": true})
    );
    let due: jiff::Timestamp = j["due"].as_str().unwrap().parse().unwrap();
    let in_secs = due.as_second() - jiff::Timestamp::now().as_second();
    assert!((3000..=3700).contains(&in_secs), "due in {in_secs}s");

    w.bury(
        "orders",
        &[("o-8".into(), "partner API: 503\nretry later".into())],
    )
    .await;
    let j = w.dq(&["job", "orders", "o-8", "--json"]).ok().json();
    assert_eq!(j["state"], "dead");
    assert_eq!(j["history"][0]["outcome"], "buried");
    assert_eq!(j["history"][0]["error"], "partner API: 503\nretry later");
    assert!(j["died"].is_string());
    let text = w.dq(&["job", "orders", "o-8"]).ok().stdout;
    assert!(text.contains("state     dead"), "{text}");
    assert!(text.contains("buried: partner API: 503"), "{text}");
    assert!(text.contains("\"k\": \"o-8\""), "{text}");

    // A payload that is not MessagePack is shown as such, not an error.
    w.topic("orders")
        .enqueue(vec![0xc1])
        .key("raw")
        .await
        .unwrap();
    let j = w.dq(&["job", "orders", "raw", "--json"]).ok().json();
    assert!(
        j["payload"].is_null() && j["payload_error"].is_string(),
        "{j}"
    );

    // A payload a typed producer stored shows its field names; one stored positionally by an
    // earlier dq (the struct as an array) still shows, as an array.
    #[derive(serde::Serialize)]
    struct CloseOrder {
        order_id: u64,
        user_id: u64,
    }
    let order = CloseOrder {
        order_id: 7,
        user_id: 42,
    };
    for (key, bytes) in [
        ("named", dq_core::payload::encode(&order, 1 << 20).unwrap()),
        ("positional", rmp_serde::to_vec(&order).unwrap()),
    ] {
        w.topic("orders").enqueue(bytes).key(key).await.unwrap();
    }
    let j = w.dq(&["job", "orders", "named", "--json"]).ok().json();
    assert_eq!(
        j["payload"],
        serde_json::json!({"order_id": 7, "user_id": 42})
    );
    let j = w.dq(&["job", "orders", "positional", "--json"]).ok().json();
    assert_eq!(j["payload"], serde_json::json!([7, 42]));

    w.dq(&["job", "orders", "missing"]).code(NOT_FOUND);
    w.dq(&["job", "nowhere", "o-7"]).code(NOT_FOUND);
    w.dq(&["job", "orders", "bad key with spaces\n"])
        .code(BAD_INPUT);
}

#[tokio::test]
async fn cancel_removes_a_waiting_job() {
    let w = World::new().await;
    let t = w.topic("multi");
    t.enqueue(vec![0x01])
        .key("c1")
        .delay(Duration::from_secs(600))
        .await
        .unwrap();
    w.dq(&["cancel", "multi", "c1"]).ok();
    assert!(t.job("c1").await.unwrap().is_none());
    w.dq(&["cancel", "multi", "c1"]).code(NOT_FOUND);
    w.bury("multi", &[("c2".into(), "boom".into())]).await;
    let run = w.dq(&["cancel", "multi", "c2"]).code(FAILED);
    assert!(run.stderr.contains("dead queue"), "{}", run.stderr);
    assert_eq!(t.job("c2").await.unwrap().unwrap().state, JobState::Dead);
}

#[tokio::test]
async fn bury_moves_a_waiting_job_to_the_dead_queue_with_its_reason() {
    let w = World::new().await;
    let t = w.topic("multi");
    for key in ["b1", "b2"] {
        t.enqueue(vec![0x01])
            .key(key)
            .delay(Duration::from_secs(600))
            .await
            .unwrap();
    }

    let run = w
        .dq(&["bury", "multi", "b1", "--reason", "order withdrawn"])
        .ok();
    assert_eq!(run.stdout.trim(), "buried b1");
    let job = w.dq(&["job", "multi", "b1", "--json"]).ok().json();
    assert_eq!(job["state"], "dead");
    let last = job["history"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["outcome"], "buried");
    assert_eq!(last["error"], "order withdrawn");
    let text = w.dq(&["job", "multi", "b1"]).ok();
    assert!(text.stdout.contains("order withdrawn"), "{}", text.stdout);

    // without --reason: the default one; --json
    let j = w.dq(&["bury", "multi", "b2", "--json"]).ok().json();
    assert_eq!(j, serde_json::json!({"key": "b2", "outcome": "buried"}));
    let info = t.job("b2").await.unwrap().unwrap();
    assert_eq!(info.state, JobState::Dead);
    assert_eq!(info.history.last().unwrap().error, "buried by an operator");
    assert_eq!(
        w.dead_keys("multi").await,
        HashSet::from(["b1".to_owned(), "b2".to_owned()])
    );

    // dead already: a refusal, the job untouched
    let run = w.dq(&["bury", "multi", "b1"]).code(FAILED);
    assert!(
        run.stderr.contains("already in the dead queue"),
        "{}",
        run.stderr
    );
    let j = w.dq(&["bury", "multi", "b1", "--json"]).code(FAILED).json();
    assert_eq!(j, serde_json::json!({"key": "b1", "outcome": "dead"}));
    assert_eq!(t.job("b1").await.unwrap().unwrap().history.len(), 1);

    // no such job
    let run = w.dq(&["bury", "multi", "nope"]).code(NOT_FOUND);
    assert!(run.stderr.contains("no job"), "{}", run.stderr);
    let j = w
        .dq(&["bury", "multi", "nope", "--json"])
        .code(NOT_FOUND)
        .json();
    assert_eq!(j["outcome"], "not_found");
    w.dq(&["bury", "multi", "bad key with spaces\n"])
        .code(BAD_INPUT);

    // running: a refusal that says to cancel it, the job still running
    t.enqueue(vec![0x01]).key("b3").await.unwrap();
    let store = w.client.store();
    let mut leased = false;
    for p in 0..t.partitions() {
        let q = Queue::new(Topic::new("multi").unwrap(), p);
        let reply = store.fetch(&q, &fetch_request()).await.unwrap();
        leased |= reply.jobs.iter().any(|d| d.key.as_str() == "b3");
    }
    assert!(leased, "b3 was not leased");
    let run = w.dq(&["bury", "multi", "b3"]).code(FAILED);
    assert!(
        run.stderr.contains("running") && run.stderr.contains("cancel"),
        "{}",
        run.stderr
    );
    let j = w.dq(&["bury", "multi", "b3", "--json"]).code(FAILED).json();
    assert_eq!(j["outcome"], "running");
    assert_eq!(t.job("b3").await.unwrap().unwrap().state, JobState::Active);
}

#[tokio::test]
async fn reschedule_by_time_delay_and_now() {
    let w = World::new().await;
    let t = w.topic("multi");
    t.enqueue(vec![0x01])
        .key("r1")
        .delay(Duration::from_secs(600))
        .await
        .unwrap();
    let before = store_time(&w.client).await;

    w.dq(&["reschedule", "multi", "r1", "--in", "2h"]).ok();
    let due = t.job("r1").await.unwrap().unwrap().due_ms;
    assert!(
        due >= before + 7_200_000 && due < before + 7_300_000,
        "{due}"
    );

    w.dq(&[
        "reschedule",
        "multi",
        "r1",
        "--at",
        "2030-01-02T03:04:05+01:00",
    ])
    .ok();
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_893_549_845);
    assert_eq!(
        t.job("r1").await.unwrap().unwrap().due_ms,
        dq_core::job::unix_ms(at)
    );

    let j = w
        .dq(&["reschedule", "multi", "r1", "--now", "--json"])
        .ok()
        .json();
    assert_eq!(j["outcome"], "rescheduled");
    assert_eq!(t.job("r1").await.unwrap().unwrap().state, JobState::Ready);

    w.dq(&["reschedule", "multi", "r1", "--at", "tomorrow"])
        .code(BAD_INPUT);
    w.dq(&["reschedule", "multi", "r1"]).code(BAD_INPUT);
    w.dq(&["reschedule", "multi", "r1", "--now", "--in", "1m"])
        .code(BAD_INPUT);
    w.dq(&["reschedule", "multi", "nope", "--now"])
        .code(NOT_FOUND);
}

#[tokio::test]
async fn dead_list_filters_and_pages() {
    let w = World::new().await;
    let mut jobs = named("p", 5, "partner API: 503");
    jobs.extend(named("x", 4, "bad data"));
    w.bury("multi", &jobs).await;

    let all = w
        .dq(&["dead", "list", "multi", "--json", "--limit", "100"])
        .ok();
    let all = all.json();
    assert_eq!(all["jobs"].as_array().unwrap().len(), 9);
    assert!(all["next"].is_null());

    // Paged by 2 with the filter: every partner job once, no other.
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..10 {
        let mut args = vec![
            "dead",
            "list",
            "multi",
            "--error-contains",
            "503",
            "--limit",
            "2",
            "--json",
        ];
        if let Some(c) = &after {
            args.push("--after");
            args.push(c);
        }
        let page = w.dq(&args).ok().json();
        for j in page["jobs"].as_array().unwrap() {
            assert!(j["history"][0]["error"].as_str().unwrap().contains("503"));
            seen.push(j["key"].as_str().unwrap().to_owned());
        }
        match page["next"].as_str() {
            Some(c) => after = Some(c.to_owned()),
            None => {
                after = None;
                break;
            }
        }
    }
    assert!(after.is_none(), "the listing did not end");
    seen.sort();
    assert_eq!(seen, ["p000", "p001", "p002", "p003", "p004"]);

    let text = w.dq(&["dead", "list", "multi"]).ok().stdout;
    assert!(
        text.contains("LAST ERROR") && text.contains("bad data (#0)"),
        "{text}"
    );

    w.dq(&["dead", "list", "multi", "--limit", "0"])
        .code(BAD_INPUT);
    w.dq(&["dead", "list", "multi", "--after", "garbage"])
        .code(BAD_INPUT);
    w.dq(&["dead", "list", "multi", "--error-contains", ""])
        .code(BAD_INPUT);
}

#[tokio::test]
async fn dead_requeue_by_key_and_by_filter() {
    let w = World::new().await;
    let mut jobs = named("p", 6, "partner API: 503");
    jobs.extend(named("x", 3, "bad data"));
    w.bury("multi", &jobs).await;
    let t = w.topic("multi");

    let run = w.dq(&["dead", "requeue", "multi", "p000", "p001"]).ok();
    assert!(run.stdout.contains("requeued p000"), "{}", run.stdout);
    assert_eq!(t.job("p000").await.unwrap().unwrap().state, JobState::Ready);
    let run = w
        .dq(&["dead", "requeue", "multi", "p001", "nope"])
        .code(NOT_FOUND);
    assert!(run.stderr.contains("nope"), "{}", run.stderr);

    // A bulk operation without --yes, stdin not a terminal: refused, nothing moved.
    let before = w.dead_keys("multi").await;
    w.dq(&["dead", "requeue", "multi", "--all"]).code(BAD_INPUT);
    w.dq(&["dead", "requeue", "multi"]).code(BAD_INPUT);
    w.dq(&["dead", "requeue", "multi", "p002", "--all"])
        .code(BAD_INPUT);
    assert_eq!(w.dead_keys("multi").await, before);

    let j = w
        .dq(&[
            "dead",
            "requeue",
            "multi",
            "--all",
            "--error-contains",
            "503",
            "--yes",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(
        (j["scanned"].as_u64(), j["done"].as_u64()),
        (Some(7), Some(4))
    );
    let left = w.dead_keys("multi").await;
    let want: HashSet<String> = ["x000", "x001", "x002"].map(String::from).into();
    assert_eq!(left, want);
}

#[tokio::test]
async fn dead_requeue_all_goes_in_chunks() {
    // More dead jobs than one chunk (500): the sweep takes several bounded steps.
    let w = World::new().await;
    w.bury("multi", &named("j", 1200, "timeout")).await;
    let run = w.dq(&["dead", "requeue", "multi", "--all", "--yes"]).ok();
    assert!(
        run.stdout.contains("requeued 1200 dead jobs"),
        "{}",
        run.stdout
    );
    assert!(w.dead_keys("multi").await.is_empty());
    assert_eq!(w.topic("multi").stats().await.unwrap().ready, 1200);
}

#[tokio::test]
async fn dead_purge_by_key_age_and_all() {
    let w = World::new().await;
    w.bury("multi", &named("a", 4, "boom")).await;
    let t = w.topic("multi");

    w.dq(&["dead", "purge", "multi", "a000"]).ok();
    assert!(t.job("a000").await.unwrap().is_none());

    // Nothing is a week old.
    let j = w
        .dq(&[
            "dead",
            "purge",
            "multi",
            "--older-than",
            "7d",
            "--yes",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(j["done"], 0);
    assert_eq!(w.dead_keys("multi").await.len(), 3);

    // Jobs buried 5 s after the first ones; --older-than 2500ms takes the first ones and
    // not these as long as dq starts within 2.5 s (a generous margin on a loaded machine).
    let cut = store_time(&w.client).await;
    dq_testkit::eventually(
        "the store clock moves 5s",
        Duration::from_secs(30),
        || async { store_time(&w.client).await > cut + 5000 },
    )
    .await;
    w.bury("multi", &named("b", 2, "boom")).await;
    w.dq(&["dead", "purge", "multi", "--older-than", "2500ms"])
        .code(BAD_INPUT); // no --yes, stdin not a terminal
    w.dq(&["dead", "purge", "multi", "--older-than", "2500ms", "--yes"])
        .ok();
    let want: HashSet<String> = ["b000", "b001"].map(String::from).into();
    assert_eq!(w.dead_keys("multi").await, want);

    w.dq(&["dead", "purge", "multi", "--older-than", "a while", "--yes"])
        .code(BAD_INPUT);
    let run = w.dq(&["dead", "purge", "multi", "--all", "--yes"]).ok();
    assert!(run.stdout.contains("purged 2"), "{}", run.stdout);
    assert!(w.dead_keys("multi").await.is_empty());
}

#[tokio::test]
async fn enqueue_from_json() {
    let w = World::new().await;
    // An unknown topic is not created by a typo.
    w.dq(&["enqueue", "fresh", "--key", "k", "--json", "{}"])
        .code(NOT_FOUND);
    assert!(w.client.topics().await.unwrap().is_empty());
    w.dq(&[
        "enqueue",
        "fresh",
        "--key",
        "k",
        "--json",
        "{not json",
        "--partitions",
        "2",
    ])
    .code(BAD_INPUT);
    assert!(w.client.topics().await.unwrap().is_empty());

    let run = w
        .dq(&[
            "enqueue",
            "fresh",
            "--key",
            "k",
            "--json",
            r#"{"n":1}"#,
            "--partitions",
            "2",
        ])
        .ok();
    assert!(run.stdout.contains("enqueued k"), "{}", run.stdout);
    let topics = w.client.topics().await.unwrap();
    assert_eq!(topics[0].partitions, 2);
    let t = topic_n(&w, "fresh", 2);
    let info = t.job("k").await.unwrap().unwrap();
    assert_eq!(info.state, JobState::Ready);
    let v: Value = rmp_serde::from_slice(&info.payload).unwrap();
    assert_eq!(v, serde_json::json!({"n": 1}));

    // A key that exists: refused, nothing written; --replace replaces it.
    w.dq(&["enqueue", "fresh", "--key", "k", "--json", r#"{"n":2}"#])
        .code(FAILED);
    w.dq(&[
        "enqueue",
        "fresh",
        "--key",
        "k",
        "--json",
        r#"{"n":2}"#,
        "--replace",
        "--in",
        "5m",
    ])
    .ok();
    let info = t.job("k").await.unwrap().unwrap();
    assert_eq!(info.state, JobState::Scheduled);
    let v: Value = rmp_serde::from_slice(&info.payload).unwrap();
    assert_eq!(v, serde_json::json!({"n": 2}));

    // A partition count that differs from the record: bad input, nothing written.
    w.dq(&[
        "enqueue",
        "fresh",
        "--key",
        "k2",
        "--json",
        "1",
        "--partitions",
        "5",
    ])
    .code(BAD_INPUT);
    assert!(t.job("k2").await.unwrap().is_none());
    w.dq(&[
        "enqueue",
        "fresh",
        "--json",
        "1",
        "--at",
        "2040-01-01T00:00:00Z",
    ])
    .ok();
    assert_eq!(t.stats().await.unwrap().scheduled, 2);

    // An expiry: shown by `dq job`; a zero one is bad input, nothing written.
    w.dq(&[
        "enqueue",
        "fresh",
        "--key",
        "e",
        "--json",
        "1",
        "--in",
        "1h",
        "--expires-after",
        "10m",
    ])
    .ok();
    let info = t.job("e").await.unwrap().unwrap();
    assert_eq!(info.expires_ms, Some(info.due_ms + 600_000));
    let run = w.dq(&["job", "fresh", "e"]).ok();
    assert!(run.stdout.contains("expires"), "{}", run.stdout);
    w.dq(&[
        "enqueue",
        "fresh",
        "--key",
        "e0",
        "--json",
        "1",
        "--expires-after",
        "0s",
    ])
    .code(BAD_INPUT);
    assert!(t.job("e0").await.unwrap().is_none());
}

#[test]
fn unreachable_redis_is_a_connection_error() {
    // A port nothing listens on: bind one, note it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = Command::new(env!("CARGO_BIN_EXE_dq"))
        .args(["--url", &format!("redis://127.0.0.1:{port}/"), "topics"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let run = Run::from(out, &["topics"]).code(CONNECTION);
    assert!(!run.stderr.is_empty());
    let out = Command::new(env!("CARGO_BIN_EXE_dq"))
        .args(["--url", "http://nope", "topics"])
        .output()
        .unwrap();
    Run::from(out, &["topics"]).code(BAD_INPUT);
    let _ = OK;
}

#[tokio::test]
async fn cluster_topics_stats_job_and_dead_queue() {
    let w = World::cluster().await;
    assert!(w.url.starts_with("redis+cluster://"));
    w.bury("multi", &named("c", 30, "partner API: 503")).await;
    w.topic("multi")
        .enqueue(vec![0x01])
        .key("later")
        .delay(Duration::from_secs(600))
        .await
        .unwrap();

    let topics = w.dq(&["topics", "--json"]).ok().json();
    assert_eq!(topics[0]["partitions"], 3);
    let s = w.dq(&["stats", "multi", "--json"]).ok().json();
    assert_eq!(
        (s["dead"].as_u64(), s["scheduled"].as_u64()),
        (Some(30), Some(1))
    );
    let j = w.dq(&["job", "multi", "c007", "--json"]).ok().json();
    assert_eq!(j["state"], "dead");
    let page = w
        .dq(&["dead", "list", "multi", "--limit", "100", "--json"])
        .ok()
        .json();
    assert_eq!(page["jobs"].as_array().unwrap().len(), 30);
    w.dq(&["reschedule", "multi", "later", "--in", "1h"]).ok();
    w.dq(&["cancel", "multi", "later"]).ok();
    let j = w
        .dq(&[
            "dead",
            "requeue",
            "multi",
            "--all",
            "--error-contains",
            "503",
            "--yes",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(j["done"], 30);
    w.dq(&["enqueue", "multi", "--key", "m", "--json", "[1,2]"])
        .ok();
    assert!(w.dead_keys("multi").await.is_empty());
}

/// Runs `dq ARGS` on a pseudo-terminal (util-linux `script`, in every Debian), typing
/// `answer` at it: the path an operator takes, prompt and progress bar included.
fn dq_on_terminal(w: &World, args: &[&str], answer: &str) -> Run {
    use std::io::Write as _;
    let mut line = format!(
        "{} --url {} --namespace {}",
        env!("CARGO_BIN_EXE_dq"),
        w.url,
        w.ns
    );
    for a in args {
        line.push(' ');
        line.push_str(a);
    }
    let mut child = Command::new("script")
        .args(["-q", "-e", "-c", &line, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("REDIS_URL")
        .spawn()
        .expect("run script(1)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(answer.as_bytes())
        .unwrap();
    Run::from(child.wait_with_output().unwrap(), args)
}

#[tokio::test]
async fn bulk_operations_ask_on_a_terminal() {
    let w = World::new().await;
    w.bury("multi", &named("t", 3, "boom")).await;

    let run = dq_on_terminal(&w, &["dead", "purge", "multi", "--all"], "n\n").code(5);
    assert!(run.stdout.contains("[y/N]"), "{}", run.stdout);
    assert_eq!(
        w.dead_keys("multi").await.len(),
        3,
        "declined: nothing purged"
    );

    let run = dq_on_terminal(&w, &["dead", "purge", "multi", "--all"], "y\n").ok();
    assert!(run.stdout.contains("purged 3"), "{}", run.stdout);
    assert!(w.dead_keys("multi").await.is_empty());
}

/// Kills the `dq dashboard` child it holds when the test ends, also on panic.
struct Serving(std::process::Child);

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One HTTP/1.0 request to `addr`; returns the status code and the body.
fn http(addr: &str, method: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the dashboard");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: 0\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).expect("read the reply");
    let status = reply
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {reply:?}"));
    (status, reply)
}

#[tokio::test]
async fn dashboard_serves_the_topics_and_read_only_refuses_changes() {
    use std::io::BufRead;
    let w = World::new().await;
    w.topic("shown")
        .enqueue(vec![0x90])
        .key("a")
        .await
        .expect("enqueue");
    let mut child = Command::new(env!("CARGO_BIN_EXE_dq"))
        .args(["--url", &w.url, "--namespace", &w.ns])
        .args(["dashboard", "--listen", "127.0.0.1:0", "--read-only"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .env_remove("DQ_DASHBOARD_TOKEN")
        .env_remove("DQ_DASHBOARD_PASSWORD")
        .spawn()
        .expect("start dq dashboard");
    let stderr = child.stderr.take().unwrap();
    let serving = Serving(child);
    // The first line names the address the dashboard bound (port 0 → a free port); a line
    // read blocks at most until the child exits, which the guard's kill guarantees.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let line = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("dq dashboard printed where it listens");
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    assert!(line.contains("read-only"), "{line}");
    let (status, page) = tokio::task::spawn_blocking({
        let addr = addr.clone();
        move || http(&addr, "GET", "/")
    })
    .await
    .unwrap();
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("shown"),
        "the overview lists the topic: {page}"
    );
    let (status, reply) = tokio::task::spawn_blocking(move || http(&addr, "POST", "/"))
        .await
        .unwrap();
    assert_eq!(status, 403, "{reply}");
    drop(serving);
}

#[tokio::test]
async fn pause_resume_and_limits_of_a_topic() {
    let w = World::new().await;
    let t = w.topic("multi");
    t.enqueue(vec![0x01]).key("p1").await.unwrap();
    let out = w.dq(&["pause", "multi"]).ok();
    assert!(out.stdout.contains("paused       yes"), "{}", out.stdout);
    assert!(t.stats().await.unwrap().paused);
    let stats = w.dq(&["stats", "multi"]).ok();
    assert!(
        stats.stdout.contains("leasing         paused"),
        "{}",
        stats.stdout
    );
    let all = w.dq(&["stats", "--json"]).ok();
    assert!(all.stdout.contains("\"paused\":true"), "{}", all.stdout);
    w.dq(&["resume", "multi"]).ok();
    assert!(!t.stats().await.unwrap().paused);

    let v = w
        .dq(&[
            "limits",
            "multi",
            "--rate",
            "100/s",
            "--concurrency",
            "8",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(
        (v["rate"].as_str(), v["concurrency"].as_u64()),
        (Some("100/s"), Some(8)),
        "{v}"
    );
    // Three partitions: a cap below three is refused, and so is a bad rate.
    w.dq(&["limits", "multi", "--concurrency", "2"])
        .code(BAD_INPUT);
    w.dq(&["limits", "multi", "--rate", "fast"]).code(BAD_INPUT);
    w.dq(&["limits", "multi", "--rate", "none", "--concurrency", "none"])
        .ok();
    assert_eq!(t.control().await.unwrap(), dq_core::TopicControl::default());
    w.dq(&["pause", "nosuch"]).code(NOT_FOUND);
}

#[tokio::test]
async fn stats_names_one_partition_in_the_singular() {
    let w = World::new().await;
    w.topic("single").enqueue(vec![0x01]).await.unwrap();
    let detail = w.dq(&["stats", "single"]).ok().stdout;
    assert!(detail.contains("single  (1 partition)\n"), "{detail}");
    w.topic("multi").enqueue(vec![0x01]).await.unwrap();
    let detail = w.dq(&["stats", "multi"]).ok().stdout;
    assert!(detail.contains("multi  (3 partitions)\n"), "{detail}");
}

#[tokio::test]
async fn schedules_lists_each_schedule_with_its_ticks() {
    let w = World::new().await;
    let none = w.dq(&["schedules"]).ok();
    assert!(none.stderr.contains("no schedules"), "{}", none.stderr);
    assert_eq!(
        w.dq(&["schedules", "--json"]).ok().json(),
        serde_json::json!([])
    );

    let payload =
        dq_core::payload::encode(&serde_json::json!({"kind": "nightly"}), 1 << 20).unwrap();
    let nightly = dq_core::Schedule::cron("0 30 2 * * *")
        .unwrap()
        .tz("Europe/Berlin")
        .unwrap()
        .missed(dq_core::Missed::Skip);
    w.client
        .schedule_raw("nightly-report", "reports", nightly, payload.clone())
        .await
        .unwrap();
    let every = dq_core::Schedule::every(Duration::from_secs(30)).unwrap();
    w.client
        .schedule_raw("poll", "sensors", every, payload)
        .await
        .unwrap();
    let now = store_time(&w.client).await;

    let rows = w.dq(&["schedules", "--json"]).ok().json();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    let nightly = &rows[0];
    assert_eq!(nightly["name"], "nightly-report");
    assert_eq!(nightly["topic"], "reports");
    assert_eq!(nightly["cron"], "0 30 2 * * *");
    assert_eq!(nightly["time_zone"], "Europe/Berlin");
    assert_eq!(nightly["every_ms"], Value::Null);
    assert_eq!(nightly["missed"], "skip");
    let next = nightly["next_ms"].as_u64().unwrap();
    assert!(next > now && next <= now + 25 * 3_600_000, "{nightly}");
    let last = nightly["last_ms"].as_u64().unwrap();
    // A day apart (23 or 25 hours across a change of summer time).
    let gap = next - last;
    assert!(
        (23 * 3_600_000..=25 * 3_600_000).contains(&gap),
        "{nightly}"
    );
    let poll = &rows[1];
    assert_eq!(poll["name"], "poll");
    assert_eq!(poll["every_ms"], 30_000);
    assert_eq!(poll["cron"], Value::Null);
    assert_eq!(poll["missed"], "once");
    assert_eq!(poll["next_ms"].as_u64().unwrap() % 30_000, 0, "{poll}");
    assert!(poll["next"].as_str().unwrap().ends_with('Z'), "{poll}");

    let text = w.dq(&["schedules"]).ok().stdout;
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("NEXT TICK"),
        "{text}"
    );
    assert!(
        lines[1].starts_with("nightly-report")
            && lines[1].contains("cron 0 30 2 * * * Europe/Berlin"),
        "{text}"
    );
    assert!(
        lines[2].starts_with("poll") && lines[2].contains("every 30s") && lines[2].contains("in "),
        "{text}"
    );
}

/// The CLI as an ACL user with exactly dq's rule for its namespace: it lists and inspects;
/// with a wrong password it fails with an error that never shows the password.
#[tokio::test]
async fn the_cli_runs_as_an_acl_user_and_never_prints_its_password() {
    use std::io::Write;
    let ns = "clisecured";
    let password = "cli-Pa55-word";
    let path = std::env::temp_dir().join(format!("dq-cli-acl-{}.acl", std::process::id()));
    let mut f = std::fs::File::create(&path).unwrap();
    writeln!(f, "user default on nopass ~* &* +@all").unwrap();
    writeln!(
        f,
        "user dq on >{password} {}",
        dq_core::store::redis::acl_rule(ns)
    )
    .unwrap();
    drop(f);
    let server = dq_testkit::RedisServer::start_with(dq_testkit::ServerOptions {
        extra_args: vec!["--aclfile".into(), path.display().to_string()],
        ..Default::default()
    });
    let _ = std::fs::remove_file(&path);
    let url = format!("redis://dq:{password}@127.0.0.1:{}/", server.port());
    let w = World {
        url: url.clone(),
        ns: ns.to_owned(),
        client: Client::builder().namespace(ns).connect(&url).await.unwrap(),
    };
    w.topic("sec")
        .enqueue(rmp_serde::to_vec(&7u32).unwrap())
        .key("k")
        .delay(Duration::from_secs(600))
        .await
        .unwrap();
    let run = w.dq(&["topics"]).ok();
    assert!(run.stdout.contains("sec"), "{}", run.stdout);
    // the rule the user was given is what `dq acl-rule` prints, with no server to reach
    let out = Command::new(env!("CARGO_BIN_EXE_dq"))
        .args([
            "--url",
            "redis://127.0.0.1:1/",
            "--namespace",
            ns,
            "acl-rule",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        dq_core::store::redis::acl_rule(ns)
    );
    w.dq(&["stats", "sec"]).ok();
    let run = w.dq(&["job", "sec", "k"]).ok();
    assert!(run.stdout.contains("scheduled"), "{}", run.stdout);
    let wrong = World {
        url: format!("redis://dq:not-{password}@127.0.0.1:{}/", server.port()),
        ..w
    };
    let out = Command::new(env!("CARGO_BIN_EXE_dq"))
        .args(["--url", &wrong.url, "--namespace", ns, "topics"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.to_lowercase().contains("authentication"), "{stderr}");
    assert!(!stderr.contains(password), "{stderr}");
}
