//! Upgrade fixtures: a namespace written by an older dq (`tests/fixtures/format-N/dump.txt`)
//! is loaded into a fresh `redis-server` and drained by this dq, as an upgrade finds it. Every
//! waiting job runs exactly once with the payload it was stored with; jobs far in the future
//! stay scheduled until rescheduled by key; dead jobs stay dead until requeued; the schedule
//! ticks; the recorded enqueue and fetch calls still find their receipts; the paused topic
//! stays paused; the counters are kept; the invariants hold; from format 4 on, a job whose
//! expiry has passed never runs, kept jobs and recorded events read back; from format 5 on,
//! each job's priority reads back as stored (older records: normal) and a topic drained by a
//! one-slot worker runs its due jobs highest priority first; from format 6 on, each job's
//! group reads back as stored (older records: none), so do the group limits and holds, the
//! grouped jobs run once with their group, each group's due jobs highest priority first, and
//! a held group's jobs stay waiting. Each stored-format change adds its predecessor's fixture
//! and one test line here (see `tests/fixtures/README.md`).

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
    CancelOutcome, Client, DeadLimits, Due, EnqueueOutcome, GroupLimits, GroupState, JobContext,
    JobError, JobInfo, JobKey, JobState, NewDue, Page, Priority, Rate, RescheduleOutcome,
    RetryPolicy, Topic, TopicClient, TopicStats, Worker,
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
/// A group hold recorded in a fixture must end at least this long after the drain starts
/// (its jobs stay waiting through the whole drain).
const HELD_PAST_THE_DRAIN: u64 = 3600 * 1000;

#[tokio::test]
async fn format_1_fixture_drains_completely() {
    drain(&fixture_dir("format-1")).await;
}

/// A namespace written by the dq of issue 21 (format 2: the version byte, payloads by field
/// name).
#[tokio::test]
async fn format_2_fixture_drains_completely() {
    drain(&fixture_dir("format-2")).await;
}

/// A namespace written by the dq of the lean lease (format 3: the 15-byte header without a
/// token, leases in the partition's `leases` hash, attempts finished).
#[tokio::test]
async fn format_3_fixture_drains_completely() {
    drain(&fixture_dir("format-3")).await;
}

/// A namespace written by the dq of expiring jobs (format 4: format 3's header followed by the
/// expiry), with kept finished jobs and event streams, kept for the next format change.
#[tokio::test]
async fn format_4_fixture_drains_completely() {
    drain(&fixture_dir("format-4")).await;
}

/// A namespace written by the dq of priorities (format 5: format 4's header followed by the
/// priority; the due jobs of other priorities in the partition's `pready`), kept for the next
/// format change.
#[tokio::test]
async fn format_5_fixture_drains_completely() {
    drain(&fixture_dir("format-5")).await;
}

/// A namespace written by the dq of groups (format 6: format 5's header followed by the job's
/// group; the due grouped jobs in the partition's `gready`, the groups in `groups`, `gwait`,
/// `gactive` and `gctl`), kept for the next format change.
#[tokio::test]
async fn format_6_fixture_drains_completely() {
    drain(&fixture_dir("format-6")).await;
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
        DumpedKey {
            key: "ns:{t#0}:events".into(),
            ttl_ms: None,
            value: V::Stream(vec![
                ("1-0".into(), vec![(b"v".to_vec(), b"1".to_vec())]),
                (
                    "3-0".into(),
                    vec![
                        (b"n".to_vec(), b"2".to_vec()),
                        (b"b".to_vec(), b"\x92\xa1k \"".to_vec()),
                    ],
                ),
            ]),
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
    /// Waiting jobs whose expiry has passed when the drain starts (format 4 on): never run,
    /// counted in `expired_before_start`.
    #[serde(default)]
    expire_before_start: Vec<TopicKey>,
    /// Finished jobs the fixture's topics keep (fixtures from format 4 on).
    #[serde(default)]
    kept: Vec<KeptExpect>,
    /// Every event the fixture's topics had recorded, by partition and number (fixtures from
    /// format 4 on).
    #[serde(default)]
    events: Vec<dq::Event>,
    /// Topics the drain runs with a one-slot worker, checking that their due jobs run highest
    /// priority first (fixtures from format 5 on; each has one partition).
    #[serde(default)]
    priority_order: Vec<String>,
    /// What `group_state` read of each group of the fixture's jobs, and of each topic with
    /// groups (`group: null`: its default limits and sums) (fixtures from format 6 on).
    #[serde(default)]
    groups: Vec<GroupExpect>,
}

/// A group's limits, hold and jobs as the generator read them ([`TopicClient::group_state`]).
#[derive(Deserialize)]
struct GroupExpect {
    topic: String,
    /// `None`: the topic's default limits and the sums over its groups.
    group: Option<String>,
    limits: Option<LimitsExpect>,
    default_limits: Option<LimitsExpect>,
    held_until_ms: Option<u64>,
    running: u64,
    waiting: u64,
}

impl GroupExpect {
    /// The state this entry records, with `running` and `waiting` as given.
    fn state(&self, running: u64, waiting: u64) -> GroupState {
        GroupState {
            limits: self.limits.as_ref().map(LimitsExpect::limits),
            default_limits: self.default_limits.as_ref().map(LimitsExpect::limits),
            held_until_ms: self.held_until_ms,
            running,
            waiting,
        }
    }
}

#[derive(Deserialize)]
struct LimitsExpect {
    concurrency: Option<u32>,
    rate: Option<RateExpect>,
    weight: u32,
}

impl LimitsExpect {
    fn limits(&self) -> GroupLimits {
        GroupLimits {
            concurrency: self.concurrency,
            rate: self.rate.as_ref().map(|r| Rate {
                count: r.count,
                per: Duration::from_millis(r.per_ms),
            }),
            weight: self.weight,
        }
    }
}

#[derive(Deserialize)]
struct RateExpect {
    count: u32,
    per_ms: u64,
}

#[derive(Deserialize)]
struct TopicExpect {
    name: String,
    paused: bool,
    concurrency: Option<u32>,
    /// How long the topic keeps its succeeded jobs, in ms (absent in fixtures before format 4).
    #[serde(default)]
    keep_succeeded_ms: Option<u64>,
    /// The most events the topic keeps, if it records them (absent before format 4).
    #[serde(default)]
    events_max_kept: Option<u64>,
    counters: Counters,
}

/// A finished job a fixture's topic keeps.
#[derive(Deserialize)]
struct KeptExpect {
    topic: String,
    key: String,
    outcome: String,
    attempts: u32,
    kept_until_ms: u64,
    payload: Value,
}

/// The counters a topic's stats keep for ever (not the gauges: those change with time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
struct Counters {
    enqueued: u64,
    succeeded: u64,
    retried: u64,
    buried: u64,
    expired: u64,
    /// Absent in fixtures before format 4 (their stores read 0).
    #[serde(default)]
    expired_before_start: u64,
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
            expired_before_start: s.expired_before_start,
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
    /// Its expiry (fixtures from format 4 on; absent: none).
    #[serde(default)]
    expires_ms: Option<u64>,
    /// Its priority, 0..=9 (fixtures from format 5 on; absent: older records read as normal).
    #[serde(default)]
    priority: Option<u8>,
    /// Its group (fixtures from format 6 on; absent or null: none).
    #[serde(default)]
    group: Option<String>,
    payload: Value,
    history: Vec<String>,
}

impl JobExpect {
    /// Its priority's level: as stored, or normal for a fixture before format 5.
    fn priority(&self) -> u8 {
        self.priority.unwrap_or(Priority::NORMAL.level())
    }
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

/// One handler run: topic, key, attempt, payload as JSON, group.
type Run = (String, String, u32, Value, Option<String>);

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
        ctx.group().map(ToString::to_string),
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
    let d = Drain::load(dir).await;
    d.check_as_loaded().await;
    // The fetch receipt lives seconds from the load: it comes first after the reads.
    d.retry_the_recorded_fetch().await;
    d.retry_the_recorded_enqueues().await;
    d.act_by_key().await;
    let plan = d.plan();
    let mut builder = Worker::builder(d.client.clone())
        .topics([ORDERS, PARCELS, REPORTS, TICKS])
        .data(d.runs.clone())
        .lease(Duration::from_secs(30));
    for t in &d.expect.priority_order {
        // One slot: each fetch leases one job, so the runs follow the queue's order.
        builder = builder.concurrency(t.as_str(), 1);
    }
    let worker = builder
        .build()
        .expect("build the worker")
        .start()
        .await
        .expect("start the worker");
    let started_ms = dq::store::unix_ms(SystemTime::now());
    d.waiting_jobs_run_once(&plan).await;
    d.due_jobs_ran_by_priority(&plan, started_ms);
    eventually("a tick of the schedule ran", WAIT, || async {
        d.expect.schedules.is_empty() || !d.runs.of(TICKS).is_empty()
    })
    .await;
    d.paused_topics_wait_for_their_resume(&plan).await;
    d.dead_jobs_wait_for_their_requeue().await;
    worker.shutdown().await;
    d.runs_had_their_groups();
    d.groups_after_the_drain(&plan).await;
    d.counters_go_on(&plan).await;
    let v = fixture::violations(&d.server.url(), &d.expect.namespace).await;
    assert!(v.is_empty(), "invariants after the drain: {v:?}");
}

/// One fixture loaded into its own server, and what the drain has seen run.
struct Drain {
    expect: Expect,
    server: RedisServer,
    client: Client,
    /// Every run: the worker's handlers', and the job this test runs by hand (the one the
    /// recorded fetch call gets back).
    runs: Runs,
    /// Dead-queue limits that keep the fixture's dead jobs, whatever their age.
    keep_dead: DeadLimits,
}

/// What the drain expects of the worker, worked out from `expect.json`.
struct Plan {
    /// The waiting jobs of the busy topics, each with the attempt it must run at.
    to_run: BTreeMap<TopicKey, u32>,
    /// Jobs far in the future that must stay scheduled.
    stays: BTreeSet<TopicKey>,
    /// Jobs that must not run: cancelled (by key, or by a request on their running attempt),
    /// or run by this test through the recorded fetch call.
    skip: BTreeSet<TopicKey>,
    /// Waiting jobs whose expiry has passed: never run, deleted and counted by a fetch.
    expire: BTreeSet<TopicKey>,
    /// Waiting jobs of a group held past the drain: they stay waiting (ready), never run.
    held: BTreeSet<TopicKey>,
    /// Topics paused in the fixture.
    paused: BTreeSet<String>,
    /// Topics neither paused nor periodic: they must end quiet.
    busy: Vec<String>,
}

impl Drain {
    async fn load(dir: &Path) -> Drain {
        let text = std::fs::read_to_string(dir.join("expect.json")).expect("read expect.json");
        let expect: Expect = serde_json::from_str(&text).expect("parse expect.json");
        let server = RedisServer::start();
        fixture::load_file(&server, &dir.join("dump.txt"));
        // The fixture's times are those of its generation: no retention may trim its dead.
        let keep_dead = DeadLimits {
            retention: Duration::from_secs(200 * 365 * 24 * 3600),
            ..DeadLimits::default()
        };
        let mut builder = Client::builder().namespace(&expect.namespace);
        for t in &expect.topics {
            builder = builder.dead_limits(t.name.as_str(), keep_dead);
        }
        let client = builder.connect(&server.url()).await.expect("connect");
        Drain {
            expect,
            server,
            client,
            runs: Runs::default(),
            keep_dead,
        }
    }

    fn topic(&self, name: &str) -> TopicClient {
        self.client.topic(name).expect("a fixture topic")
    }

    fn jobs_of(&self, topic: &str) -> Vec<&JobExpect> {
        self.expect
            .jobs
            .iter()
            .filter(|j| j.topic == topic)
            .collect()
    }

    fn job_named(&self, tk: &TopicKey) -> &JobExpect {
        self.expect
            .jobs
            .iter()
            .find(|j| j.topic == tk.topic && j.key == tk.key)
            .unwrap_or_else(|| panic!("{tk:?} is not in expect.json"))
    }

    /// Whether this job is the one the recorded fetch call got back (this test runs it).
    fn fetched_by_hand(&self, topic: &str, key: &str) -> bool {
        let fr = &self.expect.fetch_receipt;
        fr.topic == topic && fr.keys.iter().any(|k| k == key)
    }

    /// The counters, controls, schedules and every job as the generator saw them; the
    /// layout's invariants hold as loaded.
    async fn check_as_loaded(&self) {
        let v = fixture::violations(&self.server.url(), &self.expect.namespace).await;
        assert!(v.is_empty(), "invariants as loaded: {v:?}");
        for t in &self.expect.topics {
            let tc = self.topic(&t.name);
            let stats = Counters::from(tc.stats().await.expect("stats"));
            assert_eq!(stats, t.counters, "{}: counters as loaded", t.name);
            let control = tc.control().await.expect("control");
            assert_eq!(
                (control.paused, control.concurrency),
                (t.paused, t.concurrency),
                "{}: pause and concurrency cap as loaded",
                t.name
            );
            assert_eq!(
                (
                    control
                        .retention
                        .and_then(|r| r.succeeded)
                        .map(|d| d.as_millis() as u64),
                    control.events.map(|e| e.max_kept)
                ),
                (t.keep_succeeded_ms, t.events_max_kept),
                "{}: retention of succeeded jobs and events kept, as loaded",
                t.name
            );
            let mut found: Vec<String> = listed(&tc)
                .await
                .iter()
                .map(|j| j.key.to_string())
                .collect();
            let mut want: Vec<String> = self
                .jobs_of(&t.name)
                .into_iter()
                .map(|j| j.key.clone())
                .collect();
            found.sort();
            want.sort();
            assert_eq!(found, want, "{}: the jobs listed as loaded", t.name);
        }
        for j in &self.expect.jobs {
            let info = self
                .topic(&j.topic)
                .job(&j.key)
                .await
                .expect("job")
                .unwrap_or_else(|| panic!("{}/{} is missing", j.topic, j.key));
            let history: Vec<&str> = info.history.iter().map(|h| h.error.as_str()).collect();
            assert_eq!(
                (
                    info.state.as_str(),
                    info.attempts,
                    info.due_ms,
                    info.expires_ms,
                    info.priority.level(),
                    info.group.as_ref().map(dq::GroupName::as_str),
                    history
                ),
                (
                    j.state.as_str(),
                    j.attempts,
                    j.due_ms,
                    j.expires_ms,
                    j.priority(),
                    j.group.as_deref(),
                    j.history.iter().map(String::as_str).collect()
                ),
                "{}/{}: state, attempts, due time, expiry, priority, group and history as loaded",
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
        let mut schedules: Vec<(String, String)> = self
            .client
            .schedules()
            .await
            .expect("schedules")
            .into_iter()
            .map(|s| (s.name, s.topic))
            .collect();
        schedules.sort();
        let mut want: Vec<(String, String)> = self
            .expect
            .schedules
            .iter()
            .map(|s| (s.name.clone(), s.topic.clone()))
            .collect();
        want.sort();
        assert_eq!(schedules, want, "schedules as loaded");
        self.kept_jobs_as_loaded().await;
        self.events_as_loaded().await;
        self.groups_as_loaded().await;
    }

    /// Each recorded group's limits, the default limits, its hold, its running and due jobs
    /// read back as the generator read them.
    async fn groups_as_loaded(&self) {
        for g in &self.expect.groups {
            let found = self
                .topic(&g.topic)
                .group_state(g.group.as_deref())
                .await
                .expect("group state");
            assert_eq!(
                found,
                g.state(g.running, g.waiting),
                "{}/{:?}: group limits, hold, running and waiting jobs as loaded",
                g.topic,
                g.group
            );
        }
    }

    /// After the drain (its worker stopped): each recorded group has its limits and hold as
    /// loaded, nothing running, and only the jobs of a held group still due.
    async fn groups_after_the_drain(&self, plan: &Plan) {
        for g in &self.expect.groups {
            let held = plan
                .held
                .iter()
                .filter(|k| k.topic == g.topic)
                .filter(|k| g.group.is_none() || self.job_named(k).group == g.group)
                .count() as u64;
            let found = self
                .topic(&g.topic)
                .group_state(g.group.as_deref())
                .await
                .expect("group state");
            assert_eq!(
                found,
                g.state(0, held),
                "{}/{:?}: group limits and hold kept, nothing running, only held jobs due",
                g.topic,
                g.group
            );
        }
    }

    /// Every run had its job's group as stored (none for a job of no group and a tick).
    fn runs_had_their_groups(&self) {
        for r in self.runs.all() {
            let want = self
                .expect
                .jobs
                .iter()
                .find(|j| j.topic == r.0 && j.key == r.1)
                .and_then(|j| j.group.clone());
            assert_eq!(r.4, want, "{}/{}: ran with its group", r.0, r.1);
        }
    }

    /// Each kept job reads back (its outcome, attempts and payload) until its keeping ends;
    /// after that (a drain more than the retention after the generation) it is no more seen.
    async fn kept_jobs_as_loaded(&self) {
        for k in &self.expect.kept {
            let tc = self.topic(&k.topic);
            assert!(
                tc.job(&k.key).await.expect("job").is_none(),
                "{}/{}: a kept job is not live",
                k.topic,
                k.key
            );
            let found = tc.finished(&k.key).await.expect("finished");
            let now = dq::store::unix_ms(SystemTime::now());
            if now >= k.kept_until_ms + 1_000 {
                assert!(
                    found.is_none(),
                    "{}/{}: seen after its keeping ended",
                    k.topic,
                    k.key
                );
                continue;
            }
            if now + 1_000 >= k.kept_until_ms {
                // its keeping ends as this reads: gone, or still seen
                continue;
            }
            let f = found.unwrap_or_else(|| panic!("{}/{}: kept job missing", k.topic, k.key));
            assert_eq!(
                (f.outcome.as_str(), f.attempts, f.kept_until_ms),
                (k.outcome.as_str(), k.attempts, k.kept_until_ms),
                "{}/{}: the kept job as loaded",
                k.topic,
                k.key
            );
            assert_eq!(
                payload_json(&k.topic, &f.payload),
                k.payload,
                "{}/{}: the kept job's payload",
                k.topic,
                k.key
            );
        }
    }

    /// Every recorded event reads back as it was written, in every topic that has some.
    async fn events_as_loaded(&self) {
        let topics: BTreeSet<&str> = self
            .expect
            .events
            .iter()
            .map(|e| e.topic.as_str())
            .collect();
        for t in topics {
            let mut found = self.topic(t).recent_events(1_000).await.expect("events");
            found.sort_by_key(|e| (e.partition, e.id));
            let want: Vec<&dq::Event> =
                self.expect.events.iter().filter(|e| e.topic == t).collect();
            assert_eq!(
                found.iter().collect::<Vec<_>>(),
                want,
                "{t}: the events as loaded"
            );
        }
    }

    /// The last event number of each partition of the fixture's events.
    fn last_event_numbers(&self) -> BTreeMap<(String, u16), u64> {
        let mut last = BTreeMap::new();
        for e in &self.expect.events {
            let n = last.entry((e.topic.clone(), e.partition)).or_insert(0);
            *n = (*n).max(e.id.0);
        }
        last
    }

    /// The recorded fetch call, retried, gets its jobs back under fresh tokens with no
    /// attempt spent; this test runs them (checks their payload) and acks them.
    async fn retry_the_recorded_fetch(&self) {
        let fr = &self.expect.fetch_receipt;
        let request = FetchRequest {
            max_jobs: fr.keys.len(),
            lease: Duration::from_secs(30),
            promote_batch: 100,
            recover_batch: 100,
            retry_policy: RetryPolicy::parse(DRAIN_RETRY).expect("a policy"),
            dead_limits: self.keep_dead,
            call: FetchCall {
                id: fr.call_id,
                retry: 1,
            },
        };
        let store = self.client.store();
        let fq = queue(&fr.topic, fr.partition);
        let reply = store.fetch(&fq, &request).await.expect("the retried fetch");
        let got: Vec<String> = reply.jobs.iter().map(|d| d.key.to_string()).collect();
        assert_eq!(got, fr.keys, "the retried fetch call finds its receipt");
        for d in &reply.jobs {
            let j = self.job_named(&TopicKey {
                topic: fr.topic.clone(),
                key: d.key.to_string(),
            });
            assert_eq!(d.attempt, j.attempts, "{}: no attempt spent", j.key);
            let payload = payload_json(&fr.topic, &d.payload);
            assert_eq!(payload, j.payload, "{}: payload", j.key);
            self.runs.0.lock().unwrap().push((
                fr.topic.clone(),
                j.key.clone(),
                d.attempt,
                payload,
                d.group.as_ref().map(ToString::to_string),
            ));
        }
        let leases: Vec<(JobKey, u64)> = reply.jobs.iter().map(dq::store::lease_of).collect();
        let acked = store
            .ack(&fq, "", &dq::store::Success::of(&leases))
            .await
            .expect("ack");
        assert!(acked.iter().all(|a| *a == AckOutcome::Acked), "{acked:?}");
    }

    /// The recorded enqueue calls, retried, answer what they did then and write nothing.
    async fn retry_the_recorded_enqueues(&self) {
        let ns = &self.expect.namespace;
        for r in &self.expect.enqueue_receipts {
            let c = &r.call;
            let before = partition_contents(&self.server, ns, &c.topic, c.partition);
            let job = NewJob {
                key: JobKey::new(c.key.as_str()).expect("a key"),
                payload: unhex(&c.payload_hex),
                due: Due::At(from_unix_ms(c.due_ms)),
                replace: false,
                expires: None,
                priority: Default::default(),
                window: None,
                group: None,
                batch: None,
            };
            let call = EnqueueCall {
                id: c.call_id,
                retry: true,
            };
            let out = self
                .client
                .store()
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
                before == partition_contents(&self.server, ns, &c.topic, c.partition),
                "the retried enqueue of {} found its receipt and still wrote something",
                c.key
            );
        }
    }

    /// By key: far-future jobs rescheduled to now, others cancelled.
    async fn act_by_key(&self) {
        for tk in &self.expect.reschedule_now {
            let out = self
                .topic(&tk.topic)
                .reschedule(&tk.key, NewDue::At(SystemTime::now()))
                .await
                .expect("reschedule");
            assert!(
                matches!(out, RescheduleOutcome::Rescheduled { .. }),
                "{tk:?}: {out:?}"
            );
        }
        for tk in &self.expect.cancel_by_key {
            let out = self.topic(&tk.topic).cancel(&tk.key).await.expect("cancel");
            assert_eq!(out, CancelOutcome::Cancelled, "{tk:?}");
        }
    }

    fn plan(&self) -> Plan {
        let e = &self.expect;
        let paused: BTreeSet<String> = e
            .topics
            .iter()
            .filter(|t| t.paused)
            .map(|t| t.name.clone())
            .collect();
        let tk = |j: &JobExpect| TopicKey {
            topic: j.topic.clone(),
            key: j.key.clone(),
        };
        let fr = &e.fetch_receipt;
        let skip: BTreeSet<TopicKey> = e
            .cancel_requested
            .iter()
            .chain(&e.cancel_by_key)
            .cloned()
            .chain(fr.keys.iter().map(|k| TopicKey {
                topic: fr.topic.clone(),
                key: k.clone(),
            }))
            .collect();
        let far = |j: &JobExpect| j.state == "scheduled" && j.due_ms > e.generated_ms + FAR;
        let stays: BTreeSet<TopicKey> = e
            .jobs
            .iter()
            .filter(|j| far(j) && !e.reschedule_now.contains(&tk(j)) && !skip.contains(&tk(j)))
            .map(tk)
            .collect();
        let expire: BTreeSet<TopicKey> = e.expire_before_start.iter().cloned().collect();
        let now = dq::store::unix_ms(SystemTime::now());
        for k in &expire {
            let j = self.job_named(k);
            assert!(
                j.expires_ms.is_some_and(|at| at < now),
                "{k:?}: its expiry has passed before the drain (the fixture's promise)"
            );
        }
        let held_groups: BTreeSet<(String, String)> = e
            .groups
            .iter()
            .filter_map(|g| {
                let until = g.held_until_ms?;
                let group = g.group.clone()?;
                assert!(
                    until > now + HELD_PAST_THE_DRAIN,
                    "{}/{group}: held past the drain (the fixture's promise)",
                    g.topic
                );
                Some((g.topic.clone(), group))
            })
            .collect();
        let mut to_run = BTreeMap::new();
        let mut held = BTreeSet::new();
        for j in &e.jobs {
            let key = tk(j);
            let waiting = matches!(j.state.as_str(), "scheduled" | "ready" | "retry" | "active");
            if !waiting
                || skip.contains(&key)
                || stays.contains(&key)
                || expire.contains(&key)
                || paused.contains(&j.topic)
            {
                continue;
            }
            if let Some(g) = &j.group
                && held_groups.contains(&(j.topic.clone(), g.clone()))
            {
                assert_eq!(j.state, "ready", "{key:?}: a held group's job is due");
                held.insert(key);
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
        let busy = e
            .topics
            .iter()
            .map(|t| t.name.clone())
            .filter(|t| !paused.contains(t) && t != TICKS)
            .collect();
        Plan {
            to_run,
            stays,
            skip,
            expire,
            held,
            paused,
            busy,
        }
    }

    /// Every waiting job of the busy topics runs once, at its attempt, with its payload; the
    /// topics end quiet, their far-future jobs still scheduled.
    async fn waiting_jobs_run_once(&self, plan: &Plan) {
        let stays_on = |t: &str| plan.stays.iter().filter(|s| s.topic == t).count() as u64;
        let held_on = |t: &str| plan.held.iter().filter(|h| h.topic == t).count() as u64;
        eventually(
            "every waiting job ran and the busy topics are quiet",
            WAIT,
            || async {
                let ran: BTreeSet<TopicKey> = self
                    .runs
                    .all()
                    .into_iter()
                    .map(|r| TopicKey {
                        topic: r.0,
                        key: r.1,
                    })
                    .collect();
                if !plan.to_run.keys().all(|k| ran.contains(k)) {
                    return false;
                }
                for t in &plan.busy {
                    let s = self.topic(t).stats().await.expect("stats");
                    if s.ready != held_on(t) || s.active + s.retry > 0 || s.scheduled != stays_on(t)
                    {
                        return false;
                    }
                }
                true
            },
        )
        .await;
        for t in &plan.busy {
            let mut ran: Vec<(String, u32, Value)> = self
                .runs
                .of(t)
                .into_iter()
                .filter(|r| !self.fetched_by_hand(&r.0, &r.1))
                .map(|r| (r.1, r.2, r.3))
                .collect();
            ran.sort_by(|a, b| a.0.cmp(&b.0));
            let mut want: Vec<(String, u32, Value)> = plan
                .to_run
                .iter()
                .filter(|(k, _)| k.topic == *t)
                .map(|(k, attempt)| (k.key.clone(), *attempt, self.job_named(k).payload.clone()))
                .collect();
            want.sort_by(|a, b| a.0.cmp(&b.0));
            assert_eq!(
                ran, want,
                "{t}: each waiting job ran once, at its attempt, with its payload"
            );
        }
        for k in &plan.stays {
            let info = self
                .topic(&k.topic)
                .job(&k.key)
                .await
                .expect("job")
                .expect("still there");
            assert_eq!(
                (info.state, info.due_ms),
                (JobState::Scheduled, self.job_named(k).due_ms),
                "{k:?} stays scheduled"
            );
        }
        for k in &plan.held {
            let info = self
                .topic(&k.topic)
                .job(&k.key)
                .await
                .expect("job")
                .expect("still there");
            let j = self.job_named(k);
            assert_eq!(
                (info.state, info.attempts, info.due_ms),
                (JobState::Ready, j.attempts, j.due_ms),
                "{k:?}: its group is held, so it stays waiting"
            );
            assert!(
                !self
                    .runs
                    .all()
                    .iter()
                    .any(|r| r.0 == k.topic && r.1 == k.key),
                "{k:?}: its group is held, yet it ran"
            );
        }
        for k in &plan.expire {
            assert!(
                self.topic(&k.topic)
                    .job(&k.key)
                    .await
                    .expect("job")
                    .is_none(),
                "{k:?}: expired before it started, deleted"
            );
            assert!(
                !self
                    .runs
                    .all()
                    .iter()
                    .any(|r| r.0 == k.topic && r.1 == k.key),
                "{k:?}: expired before it started, yet ran"
            );
        }
        self.events_go_on(plan).await;
    }

    /// In each topic of `priority_order` (one partition, a one-slot worker), the waiting jobs
    /// that were due when the worker started ran highest priority first: the jobs of no group
    /// among themselves, and each group's among themselves (groups take turns, so priorities
    /// are not compared across groups). A job that became due later, such as a lease that ran
    /// out, joins the order when it does and is not compared.
    fn due_jobs_ran_by_priority(&self, plan: &Plan, started_ms: u64) {
        for t in &self.expect.priority_order {
            let ran: Vec<&JobExpect> = self
                .runs
                .of(t)
                .into_iter()
                .map(|r| TopicKey {
                    topic: r.0,
                    key: r.1,
                })
                .filter(|k| plan.to_run.contains_key(k))
                .map(|k| self.job_named(&k))
                .filter(|j| j.state != "active" && j.due_ms <= started_ms)
                .collect();
            assert!(
                ran.iter().any(|j| j.priority() != Priority::NORMAL.level()),
                "{t}: no job of another priority than normal to order: {:?}",
                ran.iter().map(|j| &j.key).collect::<Vec<_>>()
            );
            let mut by_group: BTreeMap<Option<&str>, Vec<(&str, u8)>> = BTreeMap::new();
            for j in ran {
                by_group
                    .entry(j.group.as_deref())
                    .or_default()
                    .push((j.key.as_str(), j.priority()));
            }
            for (group, ran) in by_group {
                assert!(
                    ran.windows(2).all(|w| w[0].1 >= w[1].1),
                    "{t}, group {group:?}: the due jobs ran highest priority first: {ran:?}"
                );
            }
        }
    }

    /// In a topic that recorded events, every job the drain ran has its `succeeded` event,
    /// numbered after the fixture's last in its partition.
    async fn events_go_on(&self, plan: &Plan) {
        let last = self.last_event_numbers();
        let topics: BTreeSet<&String> = last.keys().map(|(t, _)| t).collect();
        for k in plan.to_run.keys().filter(|k| topics.contains(&k.topic)) {
            let events = self
                .topic(&k.topic)
                .job_events(&k.key)
                .await
                .expect("job events");
            let ok = events.iter().any(|e| {
                e.kind == dq::EventKind::Succeeded
                    && e.id.0
                        > last
                            .get(&(e.topic.clone(), e.partition))
                            .copied()
                            .unwrap_or(0)
            });
            assert!(
                ok,
                "{k:?}: a succeeded event numbered after the fixture's: {events:?}"
            );
        }
    }

    /// A paused topic ran nothing and holds its jobs as they were; resumed, each runs once.
    async fn paused_topics_wait_for_their_resume(&self, plan: &Plan) {
        for t in &plan.paused {
            assert!(self.runs.of(t).is_empty(), "{t} ran while paused");
            for j in self.jobs_of(t) {
                let info = self
                    .topic(t)
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
            assert!(!self.topic(t).resume().await.expect("resume").paused);
        }
        eventually("the resumed topics ran", WAIT, || async {
            plan.paused
                .iter()
                .all(|t| self.runs.of(t).len() == self.jobs_of(t).len())
        })
        .await;
        for t in &plan.paused {
            let mut ran: Vec<(String, Value)> =
                self.runs.of(t).into_iter().map(|r| (r.1, r.3)).collect();
            ran.sort_by(|a, b| a.0.cmp(&b.0));
            let mut want: Vec<(String, Value)> = self
                .jobs_of(t)
                .into_iter()
                .map(|j| (j.key.clone(), j.payload.clone()))
                .collect();
            want.sort_by(|a, b| a.0.cmp(&b.0));
            assert_eq!(ran, want, "{t}: each job ran once after the resume");
        }
    }

    /// Dead jobs stayed dead (their history was checked as loaded); requeued, each runs once.
    async fn dead_jobs_wait_for_their_requeue(&self) {
        let mut requeued = Vec::new();
        for t in &self.expect.topics {
            let dead: Vec<&JobExpect> = self
                .jobs_of(&t.name)
                .into_iter()
                .filter(|j| j.state == "dead")
                .collect();
            if dead.is_empty() {
                continue;
            }
            let mut listed: Vec<String> = self
                .topic(&t.name)
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
            assert!(
                self.runs
                    .all()
                    .iter()
                    .all(|r| !dead.iter().any(|j| j.key == r.1 && j.topic == r.0)),
                "{}: a dead job ran before its requeue",
                t.name
            );
            let keys: Vec<&str> = want.iter().map(String::as_str).collect();
            let moved = self
                .topic(&t.name)
                .requeue_dead(&keys)
                .await
                .expect("requeue");
            assert_eq!(
                moved,
                keys.len() as u64,
                "{}: every dead job requeued",
                t.name
            );
            requeued.extend(dead);
        }
        let runs_of = |j: &JobExpect| -> Vec<Run> {
            self.runs
                .all()
                .into_iter()
                .filter(|r| r.0 == j.topic && r.1 == j.key)
                .collect()
        };
        eventually("the requeued jobs ran", WAIT, || async {
            requeued.iter().all(|j| !runs_of(j).is_empty())
        })
        .await;
        for j in &requeued {
            let again = runs_of(j);
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
                "{}/{}: the first attempt again, with its payload",
                j.topic,
                j.key
            );
        }
    }

    /// Counters went on from the fixture's: nothing enqueued, every run a success, every
    /// cancel and every expiry before a start counted.
    async fn counters_go_on(&self, plan: &Plan) {
        for t in self.expect.topics.iter().filter(|t| t.name != TICKS) {
            let now = Counters::from(self.topic(&t.name).stats().await.expect("stats"));
            let ran = self.runs.of(&t.name).len() as u64;
            let cancelled = plan
                .skip
                .iter()
                .filter(|k| k.topic == t.name && !self.fetched_by_hand(&k.topic, &k.key))
                .count() as u64;
            let expired = plan.expire.iter().filter(|k| k.topic == t.name).count() as u64;
            assert_eq!(
                (
                    now.enqueued,
                    now.succeeded,
                    now.cancelled,
                    now.expired_before_start
                ),
                (
                    t.counters.enqueued,
                    t.counters.succeeded + ran,
                    t.counters.cancelled + cancelled,
                    t.counters.expired_before_start + expired
                ),
                "{}: counters go on from the fixture's",
                t.name
            );
        }
    }
}
