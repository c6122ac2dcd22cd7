//! Upgrade fixtures: a namespace written by an older dq (`tests/fixtures/format-N/dump.txt`)
//! is loaded into a fresh `redis-server` and drained by this dq, as an upgrade finds it. Every
//! waiting job runs exactly once with the payload it was stored with; jobs far in the future
//! stay scheduled until rescheduled by key; dead jobs stay dead until requeued; the schedule
//! ticks; the recorded enqueue and fetch calls still find their receipts; the paused topic
//! stays paused; the counters are kept; the invariants hold. Each stored-format change adds
//! its predecessor's fixture and one test line here (see `tests/fixtures/README.md`).

#[path = "common/fixture.rs"]
mod fixture;
#[path = "fixtures/payloads.rs"]
mod payloads;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use dq::store::redis::layout;
use dq::store::{AckOutcome, EnqueueCall, FetchCall, FetchRequest, NewJob, Queue, from_unix_ms};
use dq::{
    CancelOutcome, Client, DeadLimits, Due, EnqueueOutcome, JobContext, JobError, JobInfo, JobKey,
    JobState, NewDue, Page, RescheduleOutcome, RetryPolicy, Topic, TopicClient, TopicStats, Worker,
};
use dq_testkit::{RedisServer, eventually};
use payloads::{CloseOrder, ORDERS, PARCELS, REPORTS, Report, ShipParcel, TICKS, Tick};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Generous for a loaded 2-core machine: the whole drain takes a few seconds.
const WAIT: Duration = Duration::from_secs(60);
/// A scheduled job due more than this after its fixture was generated is "far in the future":
/// it must stay scheduled (unless the fixture reschedules it by key).
const FAR: u64 = 365 * 24 * 3600 * 1000;
/// The drain's retry policy: an expired lease is retried after a second.
const DRAIN_RETRY: &str = "fixed(1s, 5)";

#[tokio::test]
async fn format_1_fixture_drains_completely() {
    drain(&fixture_dir("format-1")).await;
}

/// The dump format reads back exactly what it wrote: binary bytes, quotes, backslashes,
/// spaces, fractional scores, empty items, TTLs.
#[test]
fn a_dump_reads_back_as_written() {
    use fixture::{DumpedKey, Value as V};
    let keys = vec![
        DumpedKey {
            key: "ns:{t#0}:jobs".into(),
            ttl_ms: None,
            value: V::Hash(
                [(b"k 1".to_vec(), b"S\x00\x01\"\\\xff end".to_vec())]
                    .into_iter()
                    .collect(),
            ),
        },
        DumpedKey {
            key: "ns:{t#0}:scheduled".into(),
            ttl_ms: Some(1234),
            value: V::Zset(vec![("1.000244140625".into(), b"k 1".to_vec())]),
        },
        DumpedKey {
            key: "ns:{t#0}:ready".into(),
            ttl_ms: None,
            value: V::List(vec![b"a".to_vec(), Vec::new()]),
        },
        DumpedKey {
            key: "ns:{t#0}:fetch:1".into(),
            ttl_ms: Some(9),
            value: V::String(b"\x00\x01".to_vec()),
        },
    ];
    assert_eq!(
        fixture::parse(&fixture::to_text(&["a comment"], &keys)),
        keys
    );
}

fn fixture_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// What a fixture's generator saw when it wrote the dump (`expect.json`).
#[derive(Deserialize)]
struct Expect {
    namespace: String,
    generated_ms: u64,
    topics: Vec<TopicExpect>,
    jobs: Vec<JobExpect>,
    schedules: Vec<ScheduleExpect>,
    enqueue_receipts: Vec<EnqueueReceipt>,
    fetch_receipt: FetchReceipt,
    cancel_requested: Vec<TopicKey>,
    reschedule_now: Vec<TopicKey>,
    cancel_by_key: Vec<TopicKey>,
}

#[derive(Deserialize)]
struct TopicExpect {
    name: String,
    paused: bool,
    concurrency: Option<u32>,
    counters: Counters,
}

/// The counters a topic's stats keep for ever (not the gauges: those change with time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
struct Counters {
    enqueued: u64,
    succeeded: u64,
    retried: u64,
    buried: u64,
    expired: u64,
    cancelled: u64,
    succeeded_after_cancel_request: u64,
    trimmed: u64,
}

impl From<TopicStats> for Counters {
    fn from(s: TopicStats) -> Self {
        Counters {
            enqueued: s.enqueued,
            succeeded: s.succeeded,
            retried: s.retried,
            buried: s.buried,
            expired: s.expired,
            cancelled: s.cancelled,
            succeeded_after_cancel_request: s.succeeded_after_cancel_request,
            trimmed: s.trimmed,
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
struct JobExpect {
    topic: String,
    key: String,
    state: String,
    attempts: u32,
    due_ms: u64,
    payload: Value,
    history: Vec<String>,
}

#[derive(Deserialize)]
struct ScheduleExpect {
    name: String,
    topic: String,
}

/// An enqueue call made under a known id, and what its retry must answer.
#[derive(Deserialize)]
struct EnqueueReceipt {
    /// `Created` or `Ended`.
    outcome: String,
    call: RecordedEnqueue,
}

#[derive(Deserialize)]
struct RecordedEnqueue {
    topic: String,
    partition: u16,
    call_id: u64,
    key: String,
    payload_hex: String,
    due_ms: u64,
}

/// A fetch call made under a known id, and the jobs it leased.
#[derive(Deserialize)]
struct FetchReceipt {
    topic: String,
    partition: u16,
    call_id: u64,
    keys: Vec<String>,
}

#[derive(Clone, Debug, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
struct TopicKey {
    topic: String,
    key: String,
}

/// One handler run: topic, key, attempt, payload as JSON.
type Run = (String, String, u32, Value);

/// Every handler run of the drain, shared with the handlers as worker data.
#[derive(Clone, Default)]
struct Runs(Arc<Mutex<Vec<Run>>>);

impl Runs {
    fn all(&self) -> Vec<Run> {
        self.0.lock().unwrap().clone()
    }

    fn of(&self, topic: &str) -> Vec<Run> {
        self.all().into_iter().filter(|r| r.0 == topic).collect()
    }
}

fn record<T: serde::Serialize>(ctx: &JobContext, payload: &T) -> Result<(), JobError> {
    let payload = serde_json::to_value(payload).expect("a payload is JSON");
    ctx.data::<Runs>()?.0.lock().unwrap().push((
        ctx.topic.to_owned(),
        ctx.key.to_string(),
        ctx.attempt,
        payload,
    ));
    Ok(())
}

#[dq::delayed_job(topic = "fixture.orders", retry = "fixed(1s, 5)")]
async fn close_order(order: CloseOrder, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, &order)
}

#[dq::delayed_job(topic = "fixture.parcels", retry = "fixed(1s, 5)")]
async fn ship_parcel(parcel: ShipParcel, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, &parcel)
}

#[dq::delayed_job(topic = "fixture.reports", retry = "fixed(1s, 5)")]
async fn build_report(report: Report, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, &report)
}

#[dq::delayed_job(topic = "fixture.ticks", retry = "fixed(1s, 5)")]
async fn tick(tick: Tick, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, &tick)
}

/// A stored payload of `topic` decoded by its handler's type, as JSON.
fn payload_json(topic: &str, bytes: &[u8]) -> Value {
    fn json<T: DeserializeOwned + serde::Serialize>(bytes: &[u8]) -> Value {
        let value: T = dq::payload::decode(bytes).expect("the stored payload decodes");
        serde_json::to_value(value).expect("a payload is JSON")
    }
    match topic {
        ORDERS => json::<CloseOrder>(bytes),
        PARCELS => json::<ShipParcel>(bytes),
        REPORTS => json::<Report>(bytes),
        TICKS => json::<Tick>(bytes),
        other => panic!("no payload type for topic {other}"),
    }
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

fn queue(topic: &str, partition: u16) -> Queue {
    Queue::new(Topic::new(topic).expect("a fixture topic"), partition)
}

/// Every job of `topic`, listed in every state.
async fn listed(topic: &TopicClient) -> Vec<JobInfo> {
    let mut out = Vec::new();
    for state in [
        JobState::Scheduled,
        JobState::Ready,
        JobState::Active,
        JobState::Retry,
        JobState::Dead,
    ] {
        let mut page = Page::first(100);
        for _ in 0..1_000 {
            let got = topic.list(state, page).await.expect("list");
            out.extend(got.jobs);
            match got.next {
                Some(next) => page = Page::after(next, 100),
                None => break,
            }
        }
    }
    out
}

/// The keys and values (not the TTLs, which run down) of partition `partition` of `topic`.
fn partition_contents(
    server: &RedisServer,
    ns: &str,
    topic: &str,
    partition: u16,
) -> Vec<(String, fixture::Value)> {
    fixture::read_namespace(server, ns)
        .into_iter()
        .filter(|k| {
            layout::parse_key(ns, &k.key)
                .is_some_and(|p| p.topic == topic && p.partition == partition)
        })
        .map(|k| (k.key, k.value))
        .collect()
}

/// Loads the fixture in `dir` into a fresh server and drains it (see the file's docs).
async fn drain(dir: &Path) {
    let text = std::fs::read_to_string(dir.join("expect.json")).expect("read expect.json");
    let expect: Expect = serde_json::from_str(&text).expect("parse expect.json");
    let ns = expect.namespace.as_str();
    let server = RedisServer::start();
    fixture::load_file(&server, &dir.join("dump.txt"));
    // Dead jobs must outlive any retention: the fixture's times are those of its generation.
    let keep_dead = DeadLimits {
        retention: Duration::from_secs(200 * 365 * 24 * 3600),
        ..DeadLimits::default()
    };
    let mut builder = Client::builder().namespace(ns);
    for t in &expect.topics {
        builder = builder.dead_limits(t.name.as_str(), keep_dead);
    }
    let client = builder.connect(&server.url()).await.expect("connect");
    let topic = |name: &str| client.topic(name).expect("a fixture topic");
    let store = client.store().clone();
    let jobs_of =
        |t: &str| -> Vec<&JobExpect> { expect.jobs.iter().filter(|j| j.topic == t).collect() };
    let job_named = |tk: &TopicKey| {
        expect
            .jobs
            .iter()
            .find(|j| j.topic == tk.topic && j.key == tk.key)
            .unwrap_or_else(|| panic!("{tk:?} is not in expect.json"))
    };

    // As loaded: the counters, controls, schedules and every job as the generator saw them.
    for t in &expect.topics {
        let tc = topic(&t.name);
        let stats = Counters::from(tc.stats().await.expect("stats"));
        assert_eq!(stats, t.counters, "{}: counters as loaded", t.name);
        let control = tc.control().await.expect("control");
        assert_eq!(
            (control.paused, control.concurrency),
            (t.paused, t.concurrency),
            "{}: pause and concurrency cap as loaded",
            t.name
        );
        let mut found: Vec<String> = listed(&tc)
            .await
            .iter()
            .map(|j| j.key.to_string())
            .collect();
        let mut want: Vec<String> = jobs_of(&t.name)
            .into_iter()
            .map(|j| j.key.clone())
            .collect();
        found.sort();
        want.sort();
        assert_eq!(found, want, "{}: the jobs listed as loaded", t.name);
    }
    for j in &expect.jobs {
        let info = topic(&j.topic)
            .job(&j.key)
            .await
            .expect("job")
            .unwrap_or_else(|| panic!("{}/{} is missing", j.topic, j.key));
        let history: Vec<&str> = info.history.iter().map(|h| h.error.as_str()).collect();
        assert_eq!(
            (info.state.as_str(), info.attempts, info.due_ms, history),
            (
                j.state.as_str(),
                j.attempts,
                j.due_ms,
                j.history.iter().map(String::as_str).collect()
            ),
            "{}/{}: state, attempts, due time and history as loaded",
            j.topic,
            j.key
        );
        assert_eq!(
            payload_json(&j.topic, &info.payload),
            j.payload,
            "{}/{}: payload",
            j.topic,
            j.key
        );
    }
    let mut schedules: Vec<(String, String)> = client
        .schedules()
        .await
        .expect("schedules")
        .into_iter()
        .map(|s| (s.name, s.topic))
        .collect();
    schedules.sort();
    let mut want: Vec<(String, String)> = expect
        .schedules
        .iter()
        .map(|s| (s.name.clone(), s.topic.clone()))
        .collect();
    want.sort();
    assert_eq!(schedules, want, "schedules as loaded");

    // The recorded fetch call, retried, gets its jobs back under fresh tokens with no attempt
    // spent (its receipt lives seconds: this comes first); this test acks them as their run.
    let runs = Runs::default();
    let fr = &expect.fetch_receipt;
    let request = FetchRequest {
        max_jobs: fr.keys.len(),
        lease: Duration::from_secs(30),
        promote_batch: 100,
        recover_batch: 100,
        retry_policy: RetryPolicy::parse(DRAIN_RETRY).expect("a policy"),
        dead_limits: keep_dead,
        call: FetchCall {
            id: fr.call_id,
            retry: 1,
        },
    };
    let fq = queue(&fr.topic, fr.partition);
    let reply = store.fetch(&fq, &request).await.expect("the retried fetch");
    let got: Vec<String> = reply.jobs.iter().map(|d| d.key.to_string()).collect();
    assert_eq!(got, fr.keys, "the retried fetch call finds its receipt");
    for d in &reply.jobs {
        let j = job_named(&TopicKey {
            topic: fr.topic.clone(),
            key: d.key.to_string(),
        });
        assert_eq!(d.attempt, j.attempts, "{}: no attempt spent", j.key);
        let payload = payload_json(&fr.topic, &d.payload);
        assert_eq!(payload, j.payload, "{}: payload", j.key);
        runs.0
            .lock()
            .unwrap()
            .push((fr.topic.clone(), j.key.clone(), d.attempt, payload));
    }
    let leases: Vec<(JobKey, u64)> = reply.jobs.iter().map(dq::store::lease_of).collect();
    let acked = store.ack(&fq, &leases).await.expect("ack");
    assert!(acked.iter().all(|a| *a == AckOutcome::Acked), "{acked:?}");

    // The recorded enqueue calls, retried, answer what they did then and write nothing.
    for r in &expect.enqueue_receipts {
        let c = &r.call;
        let before = partition_contents(&server, ns, &c.topic, c.partition);
        let job = NewJob {
            key: JobKey::new(c.key.as_str()).expect("a key"),
            payload: unhex(&c.payload_hex),
            due: Due::At(from_unix_ms(c.due_ms)),
            replace: false,
        };
        let call = EnqueueCall {
            id: c.call_id,
            retry: true,
        };
        let out = store
            .enqueue(&queue(&c.topic, c.partition), &[job], call)
            .await
            .expect("the retried enqueue");
        let want = match r.outcome.as_str() {
            "Created" => EnqueueOutcome::Created,
            "Ended" => EnqueueOutcome::Ended,
            other => panic!("unknown recorded outcome {other}"),
        };
        assert_eq!(
            out,
            [want],
            "the retried enqueue of {} finds its receipt",
            c.key
        );
        assert!(
            before == partition_contents(&server, ns, &c.topic, c.partition),
            "the retried enqueue of {} found its receipt and still wrote something",
            c.key
        );
    }

    // By key: a far-future job is rescheduled to now, another is cancelled.
    for tk in &expect.reschedule_now {
        let out = topic(&tk.topic)
            .reschedule(&tk.key, NewDue::At(SystemTime::now()))
            .await
            .expect("reschedule");
        assert!(
            matches!(out, RescheduleOutcome::Rescheduled { .. }),
            "{tk:?}: {out:?}"
        );
    }
    for tk in &expect.cancel_by_key {
        let out = topic(&tk.topic).cancel(&tk.key).await.expect("cancel");
        assert_eq!(out, CancelOutcome::Cancelled, "{tk:?}");
    }

    // What the worker must run, at which attempt: everything waiting, once.
    let paused: BTreeSet<&str> = expect
        .topics
        .iter()
        .filter(|t| t.paused)
        .map(|t| t.name.as_str())
        .collect();
    let tk = |j: &JobExpect| TopicKey {
        topic: j.topic.clone(),
        key: j.key.clone(),
    };
    let far = |j: &JobExpect| j.state == "scheduled" && j.due_ms > expect.generated_ms + FAR;
    let skip: BTreeSet<TopicKey> = expect
        .cancel_requested
        .iter()
        .chain(&expect.cancel_by_key)
        .cloned()
        .chain(fr.keys.iter().map(|k| TopicKey {
            topic: fr.topic.clone(),
            key: k.clone(),
        }))
        .collect();
    let stays: BTreeSet<TopicKey> = expect
        .jobs
        .iter()
        .filter(|j| far(j) && !expect.reschedule_now.contains(&tk(j)) && !skip.contains(&tk(j)))
        .map(tk)
        .collect();
    let mut to_run: BTreeMap<TopicKey, u32> = BTreeMap::new();
    for j in &expect.jobs {
        let key = tk(j);
        let waiting = matches!(j.state.as_str(), "scheduled" | "ready" | "retry" | "active");
        if !waiting
            || skip.contains(&key)
            || stays.contains(&key)
            || paused.contains(j.topic.as_str())
        {
            continue;
        }
        // A lease that ran out was an attempt; a retry is the attempt after the last.
        let attempt = if j.state == "scheduled" || j.state == "ready" {
            1
        } else {
            j.attempts + 1
        };
        to_run.insert(key, attempt);
    }
    let busy: Vec<&str> = expect
        .topics
        .iter()
        .map(|t| t.name.as_str())
        .filter(|t| !paused.contains(t) && *t != TICKS)
        .collect();
    let stays_on = |t: &str| stays.iter().filter(|s| s.topic == t).count() as u64;

    let worker = Worker::builder(client.clone())
        .topics([ORDERS, PARCELS, REPORTS, TICKS])
        .data(runs.clone())
        .lease(Duration::from_secs(30))
        .build()
        .expect("build the worker")
        .start()
        .await
        .expect("start the worker");
    eventually(
        "every waiting job ran and the busy topics are quiet",
        WAIT,
        || async {
            let ran: BTreeSet<TopicKey> = runs
                .all()
                .into_iter()
                .map(|r| TopicKey {
                    topic: r.0,
                    key: r.1,
                })
                .collect();
            if !to_run.keys().all(|k| ran.contains(k)) {
                return false;
            }
            for t in &busy {
                let s = topic(t).stats().await.expect("stats");
                if s.ready + s.active + s.retry > 0 || s.scheduled != stays_on(t) {
                    return false;
                }
            }
            true
        },
    )
    .await;
    for t in &busy {
        let mut ran: Vec<(String, u32, Value)> = runs
            .of(t)
            .into_iter()
            .filter(|r| !fr.keys.contains(&r.1) || fr.topic != *t)
            .map(|r| (r.1, r.2, r.3))
            .collect();
        ran.sort_by(|a, b| a.0.cmp(&b.0));
        let mut want: Vec<(String, u32, Value)> = to_run
            .iter()
            .filter(|(k, _)| k.topic == *t)
            .map(|(k, attempt)| (k.key.clone(), *attempt, job_named(k).payload.clone()))
            .collect();
        want.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            ran, want,
            "{t}: each waiting job ran once, at its attempt, with its payload"
        );
    }
    for k in &stays {
        let info = topic(&k.topic)
            .job(&k.key)
            .await
            .expect("job")
            .expect("still there");
        assert_eq!(
            (info.state, info.due_ms),
            (JobState::Scheduled, job_named(k).due_ms),
            "{k:?} stays scheduled"
        );
    }

    // The schedule keeps ticking.
    eventually("a tick of the schedule ran", WAIT, || async {
        expect.schedules.is_empty() || !runs.of(TICKS).is_empty()
    })
    .await;

    // A paused topic stays paused, and runs once resumed.
    for t in &paused {
        assert!(runs.of(t).is_empty(), "{t} ran while paused");
        for j in jobs_of(t) {
            let info = topic(t)
                .job(&j.key)
                .await
                .expect("job")
                .expect("still there");
            assert_eq!(
                info.state.as_str(),
                j.state,
                "{t}/{}: untouched while paused",
                j.key
            );
        }
        assert!(!topic(t).resume().await.expect("resume").paused);
    }
    eventually("the resumed topics ran", WAIT, || async {
        paused.iter().all(|t| runs.of(t).len() == jobs_of(t).len())
    })
    .await;
    for t in &paused {
        let mut ran: Vec<(String, Value)> = runs.of(t).into_iter().map(|r| (r.1, r.3)).collect();
        ran.sort_by(|a, b| a.0.cmp(&b.0));
        let mut want: Vec<(String, Value)> = jobs_of(t)
            .into_iter()
            .map(|j| (j.key.clone(), j.payload.clone()))
            .collect();
        want.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(ran, want, "{t}: each job ran once after the resume");
    }

    // Dead jobs stayed dead, with their history; requeued, each runs once.
    let runs_before_requeue = runs.all().len();
    let mut requeued = Vec::new();
    for t in &expect.topics {
        let dead: Vec<&JobExpect> = jobs_of(&t.name)
            .into_iter()
            .filter(|j| j.state == "dead")
            .collect();
        if dead.is_empty() {
            continue;
        }
        let mut listed: Vec<String> = topic(&t.name)
            .list(JobState::Dead, Page::first(1_000))
            .await
            .expect("list dead")
            .jobs
            .iter()
            .map(|j| j.key.to_string())
            .collect();
        listed.sort();
        let mut want: Vec<String> = dead.iter().map(|j| j.key.clone()).collect();
        want.sort();
        assert_eq!(listed, want, "{}: the dead stay dead", t.name);
        let keys: Vec<&str> = want.iter().map(String::as_str).collect();
        let moved = topic(&t.name).requeue_dead(&keys).await.expect("requeue");
        assert_eq!(
            moved,
            keys.len() as u64,
            "{}: every dead job requeued",
            t.name
        );
        requeued.extend(dead.into_iter().cloned());
    }
    eventually("the requeued jobs ran", WAIT, || async {
        let all = runs.all();
        requeued.iter().all(|j| {
            all[runs_before_requeue..]
                .iter()
                .any(|r| r.0 == j.topic && r.1 == j.key)
        })
    })
    .await;
    let all = runs.all();
    for j in &requeued {
        let again: Vec<&Run> = all
            .iter()
            .filter(|r| r.0 == j.topic && r.1 == j.key)
            .collect();
        assert_eq!(
            again.len(),
            1,
            "{}/{}: runs once after the requeue",
            j.topic,
            j.key
        );
        assert_eq!(
            (again[0].2, &again[0].3),
            (1, &j.payload),
            "{}/{}",
            j.topic,
            j.key
        );
    }

    // The counters went on from where they were.
    worker.shutdown().await;
    for t in &expect.topics {
        if t.name == TICKS {
            continue;
        }
        let now = Counters::from(topic(&t.name).stats().await.expect("stats"));
        let ran = runs.of(&t.name).len() as u64;
        let cancelled = skip
            .iter()
            .filter(|k| k.topic == t.name && !fr.keys.contains(&k.key))
            .count() as u64;
        assert_eq!(
            (now.enqueued, now.succeeded, now.cancelled),
            (
                t.counters.enqueued,
                t.counters.succeeded + ran,
                t.counters.cancelled + cancelled
            ),
            "{}: counters go on from the fixture's",
            t.name
        );
    }
    let v = fixture::violations(&server.url(), ns).await;
    assert!(v.is_empty(), "invariants after the drain: {v:?}");
}
