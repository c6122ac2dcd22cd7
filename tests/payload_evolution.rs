//! Payloads that outlive a deploy, on a real Redis: a job waiting in Redis, enqueued with one
//! version of its payload type, is run by a handler of the next version. Reordered, added
//! (with a default), removed and renamed (with an alias or a rename) fields decode by name; an
//! incompatible change is never mis-decoded: the job goes dead at its first attempt with an
//! error naming the type and the field, and once a fixed handler runs, requeueing it runs it.
//! A payload stored positionally (structs as arrays, as dq wrote them before field names)
//! still decodes.
//!
//! Each case has its own topic; handlers of two versions of one topic are registered by
//! `#[delayed_job]` and a worker is given exactly one of them
//! (`without_registered_jobs().job(…)`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use dq::handler::JobDescriptor;
use dq::{Client, DeadFilter, JobContext, JobError, JobState, Worker, WorkerHandle};
use serde::{Deserialize, Serialize};

const WAIT: Duration = Duration::from_secs(30);

/// The payload as the version that enqueued the jobs knew it.
#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct CloseOrder {
    order_id: u64,
    user_id: u64,
    note: String,
}

fn v1() -> CloseOrder {
    CloseOrder {
        order_id: 7,
        user_id: 42,
        note: "late".into(),
    }
}

/// What each handler received, by topic, as `Debug` text.
static SEEN: Mutex<BTreeMap<&'static str, Vec<String>>> = Mutex::new(BTreeMap::new());

fn saw(ctx: &JobContext, payload: &impl std::fmt::Debug) {
    SEEN.lock()
        .unwrap()
        .entry(ctx.topic)
        .or_default()
        .push(format!("{payload:?}"));
}

fn seen(topic: &str) -> Vec<String> {
    SEEN.lock().unwrap().get(topic).cloned().unwrap_or_default()
}

// (a) The fields in another order.
#[derive(Serialize, Deserialize, Debug)]
struct Reordered {
    note: String,
    user_id: u64,
    order_id: u64,
}

#[dq::delayed_job(topic = "evo.reordered")]
async fn reordered(p: Reordered, ctx: JobContext) -> Result<(), JobError> {
    saw(&ctx, &p);
    Ok(())
}

// (b) Fields added with a default, and an optional one.
fn normal() -> u8 {
    5
}

#[derive(Serialize, Deserialize, Debug)]
struct Added {
    order_id: u64,
    #[serde(default = "normal")]
    priority: u8,
    user_id: u64,
    note: String,
    #[serde(default)]
    reason: String,
    refund: Option<u64>,
}

#[dq::delayed_job(topic = "evo.added")]
async fn added(p: Added, ctx: JobContext) -> Result<(), JobError> {
    saw(&ctx, &p);
    Ok(())
}

// (c) A field removed.
#[derive(Serialize, Deserialize, Debug)]
struct Removed {
    order_id: u64,
    note: String,
}

#[dq::delayed_job(topic = "evo.removed")]
async fn removed(p: Removed, ctx: JobContext) -> Result<(), JobError> {
    saw(&ctx, &p);
    Ok(())
}

// (d) Fields renamed, keeping the stored name as an alias or as the serde name.
#[derive(Serialize, Deserialize, Debug)]
struct Renamed {
    order_id: u64,
    #[serde(alias = "user_id")]
    customer_id: u64,
    #[serde(rename = "note")]
    memo: String,
}

#[dq::delayed_job(topic = "evo.renamed")]
async fn renamed(p: Renamed, ctx: JobContext) -> Result<(), JobError> {
    saw(&ctx, &p);
    Ok(())
}

// (e) Incompatible changes, then their fixes, on one topic each. Retries are allowed: an
// undecodable payload must not use them.
#[derive(Serialize, Deserialize, Debug)]
struct NewFieldBroken {
    order_id: u64,
    user_id: u64,
    note: String,
    currency: String,
}

#[dq::delayed_job(topic = "evo.new_field", retry = "fixed(100ms, 5)")]
async fn new_field_broken(p: NewFieldBroken, ctx: JobContext) -> Result<(), JobError> {
    saw(&ctx, &p);
    Ok(())
}

fn euro() -> String {
    "EUR".into()
}

#[derive(Serialize, Deserialize, Debug)]
struct NewFieldFixed {
    order_id: u64,
    user_id: u64,
    note: String,
    #[serde(default = "euro")]
    currency: String,
}

#[dq::delayed_job(topic = "evo.new_field", retry = "fixed(100ms, 5)")]
async fn new_field_fixed(p: NewFieldFixed, ctx: JobContext) -> Result<(), JobError> {
    saw(&ctx, &p);
    Ok(())
}

#[derive(Serialize, Deserialize, Debug)]
struct RetypedBroken {
    order_id: String,
    user_id: u64,
}

#[dq::delayed_job(topic = "evo.retyped", retry = "fixed(100ms, 5)")]
async fn retyped_broken(p: RetypedBroken, ctx: JobContext) -> Result<(), JobError> {
    saw(&ctx, &p);
    Ok(())
}

/// The fix of a type change: accept the stored number (and the new text form).
#[derive(Serialize, Deserialize, Debug)]
#[serde(untagged)]
enum OrderId {
    Number(u64),
    Text(String),
}

#[derive(Serialize, Deserialize, Debug)]
struct RetypedFixed {
    order_id: OrderId,
    user_id: u64,
}

#[dq::delayed_job(topic = "evo.retyped", retry = "fixed(100ms, 5)")]
async fn retyped_fixed(p: RetypedFixed, ctx: JobContext) -> Result<(), JobError> {
    saw(&ctx, &p);
    Ok(())
}

// (f) The very type of the positional payload.
#[dq::delayed_job(topic = "evo.positional")]
async fn positional(p: CloseOrder, ctx: JobContext) -> Result<(), JobError> {
    saw(&ctx, &p);
    Ok(())
}

/// The descriptor `#[delayed_job]` registered for the handler fn `name`.
fn handler(name: &str) -> &'static JobDescriptor {
    let full = format!("payload_evolution::{name}");
    dq::handler::registered_jobs()
        .find(|d| d.name == full)
        .unwrap_or_else(|| panic!("{full} is not registered"))
}

async fn client() -> Client {
    Client::builder()
        .namespace(dq_testkit::namespace("evo"))
        .connect(&dq_testkit::shared().url())
        .await
        .expect("connect")
}

/// A worker running only the handler fn `name`.
async fn worker_with(client: &Client, name: &str) -> WorkerHandle {
    Worker::builder(client.clone())
        .without_registered_jobs()
        .job(handler(name))
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts")
}

/// Enqueues raw payload bytes as job `key` of `topic` (the untyped API: what an older
/// producer stored).
async fn enqueue_raw(client: &Client, topic: &str, key: &str, bytes: Vec<u8>) {
    client
        .topic(topic)
        .unwrap()
        .enqueue(bytes)
        .key(key)
        .await
        .unwrap();
}

/// Stores a V1 job (fields by name), starts a worker with the V2 handler `name`, and returns
/// what that handler received.
async fn v2_receives(topic: &'static str, name: &str) -> String {
    let client = client().await;
    enqueue_raw(
        &client,
        topic,
        "k",
        dq::payload::encode(&v1(), 1 << 20).unwrap(),
    )
    .await;
    let worker = worker_with(&client, name).await;
    let got = dq_testkit::eventually_some(&format!("{name} ran"), WAIT, || async {
        seen(topic).first().cloned()
    })
    .await;
    worker.shutdown().await;
    let stats = client.topic(topic).unwrap().stats().await.unwrap();
    assert_eq!((stats.succeeded, stats.dead), (1, 0), "{name}");
    got
}

#[tokio::test]
async fn reordered_fields_decode_by_name() {
    assert_eq!(
        v2_receives("evo.reordered", "reordered").await,
        r#"Reordered { note: "late", user_id: 42, order_id: 7 }"#
    );
}

#[tokio::test]
async fn added_fields_with_defaults_decode() {
    assert_eq!(
        v2_receives("evo.added", "added").await,
        r#"Added { order_id: 7, priority: 5, user_id: 42, note: "late", reason: "", refund: None }"#
    );
}

#[tokio::test]
async fn removed_fields_are_skipped() {
    assert_eq!(
        v2_receives("evo.removed", "removed").await,
        r#"Removed { order_id: 7, note: "late" }"#
    );
}

#[tokio::test]
async fn renamed_fields_decode_through_alias_and_rename() {
    assert_eq!(
        v2_receives("evo.renamed", "renamed").await,
        r#"Renamed { order_id: 7, customer_id: 42, memo: "late" }"#
    );
}

/// Stores a V1 job and runs it on the handler `broken`: it must go dead at its first attempt
/// (retries are allowed, and not used) without the handler being called. Returns the error in
/// its history.
async fn dead_with_error(client: &Client, topic: &'static str, broken: &str) -> String {
    let tc = client.topic(topic).unwrap();
    enqueue_raw(
        client,
        topic,
        "k",
        dq::payload::encode(&v1(), 1 << 20).unwrap(),
    )
    .await;
    let worker = worker_with(client, broken).await;
    let dead = dq_testkit::eventually_some(&format!("{topic}: k dead"), WAIT, || async {
        let job = tc.job("k").await.unwrap()?;
        (job.state == JobState::Dead).then_some(job)
    })
    .await;
    worker.shutdown().await;
    assert_eq!(dead.attempts, 1, "{topic}: never retried");
    assert!(
        seen(topic).is_empty(),
        "{topic}: the handler was not called"
    );
    dead.history.last().unwrap().error.clone()
}

/// Starts a worker with the handler `fixed` and requeues the dead jobs whose error is
/// `error` (what `dq dead requeue TOPIC --all --error-contains …` does): the job runs, and
/// its history keeps the error.
async fn requeue_after_the_fix(client: &Client, topic: &'static str, fixed: &str, error: &str) {
    let tc = client.topic(topic).unwrap();
    let worker = worker_with(client, fixed).await;
    let moved = tc
        .requeue_dead_where(DeadFilter::all().error_contains(error))
        .await
        .unwrap();
    assert_eq!(moved, 1, "{topic}");
    dq_testkit::eventually(&format!("{topic}: k ran after the fix"), WAIT, || async {
        tc.stats().await.unwrap().succeeded == 1
    })
    .await;
    worker.shutdown().await;
    let job = tc.job("k").await.unwrap();
    assert!(
        job.is_none(),
        "{topic}: a succeeded job leaves no record: {job:?}"
    );
}

#[tokio::test]
async fn a_field_added_without_a_default_goes_dead_naming_it_and_requeues_after_the_fix() {
    let client = client().await;
    let topic = "evo.new_field";
    let error = dead_with_error(&client, topic, "new_field_broken").await;
    assert_eq!(
        error,
        "undecodable payload: does not fit payload_evolution::NewFieldBroken: \
         missing field `currency`"
    );
    requeue_after_the_fix(&client, topic, "new_field_fixed", &error).await;
    assert_eq!(
        seen(topic),
        [r#"NewFieldFixed { order_id: 7, user_id: 42, note: "late", currency: "EUR" }"#]
    );
}

#[tokio::test]
async fn a_changed_field_type_goes_dead_naming_it_and_requeues_after_the_fix() {
    let client = client().await;
    let topic = "evo.retyped";
    let error = dead_with_error(&client, topic, "retyped_broken").await;
    assert!(
        error.starts_with("undecodable payload: does not fit payload_evolution::RetypedBroken: ")
            && error.contains("invalid type"),
        "{error}"
    );
    requeue_after_the_fix(&client, topic, "retyped_fixed", &error).await;
    assert_eq!(
        seen(topic),
        ["RetypedFixed { order_id: Number(7), user_id: 42 }"]
    );
}

/// A payload as dq stored it before field names (`rmp_serde::to_vec`: the struct as an
/// array) still decodes into the type that wrote it.
#[tokio::test]
async fn a_positional_payload_stored_before_still_decodes() {
    let client = client().await;
    let topic = "evo.positional";
    let old = rmp_serde::to_vec(&v1()).unwrap();
    assert_ne!(old, dq::payload::encode(&v1(), 1 << 20).unwrap());
    enqueue_raw(&client, topic, "k", old).await;
    let worker = worker_with(&client, "positional").await;
    let got = dq_testkit::eventually_some("the positional job ran", WAIT, || async {
        seen(topic).first().cloned()
    })
    .await;
    worker.shutdown().await;
    assert_eq!(got, format!("{:?}", v1()));
}

/// The payload of a periodic job.
#[derive(Serialize, Deserialize, Debug, Clone)]
struct Report {
    kind: String,
    days: u8,
}

#[dq::delayed_job(topic = "evo.report")]
async fn report(p: Report, ctx: JobContext) -> Result<(), JobError> {
    saw(&ctx, &p);
    Ok(())
}

/// A periodic schedule stored by an earlier dq holds its payload positionally; the new dq
/// declaring the same schedule with the same payload (now by name) rewrites the payload and
/// keeps the cursor: a tick missed while the workers were down for the deploy is still caught
/// up (a reset cursor would start again from now and skip it).
#[tokio::test]
async fn a_schedule_stored_with_a_positional_payload_keeps_its_cursor_when_declared_again() {
    let client = client().await;
    let hourly = dq::Schedule::every(Duration::from_secs(3600)).unwrap();
    let payload = Report {
        kind: "nightly".into(),
        days: 7,
    };
    let stored = |client: Client| async move {
        let all = client.schedules().await.unwrap();
        all.into_iter().find(|s| s.name == "evo-report").unwrap()
    };
    // As an earlier dq stored it.
    let outcome = client
        .schedule_raw(
            "evo-report",
            "evo.report",
            hourly.clone(),
            rmp_serde::to_vec(&payload).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(outcome, dq::ScheduleOutcome::Created);
    // The workers were down through a tick: the cursor is an hour in the past.
    let next = stored(client.clone()).await.next_ms.unwrap();
    let missed = next - 3_600_000;
    assert!(
        client
            .store()
            .advance_schedule("evo-report", next, missed)
            .await
            .unwrap()
    );
    // The new dq declares it at start-up.
    let outcome = client
        .schedule::<report>("evo-report", hourly.clone(), payload.clone())
        .await
        .unwrap();
    assert_eq!(
        outcome,
        dq::ScheduleOutcome::Updated,
        "the payload is rewritten"
    );
    let now = stored(client.clone()).await;
    assert_eq!(now.next_ms, Some(missed), "the cursor is kept");
    assert_eq!(now.payload, dq::payload::encode(&payload, 1 << 20).unwrap());
    // From then on it is the same schedule.
    let outcome = client
        .schedule::<report>("evo-report", hourly.clone(), payload.clone())
        .await
        .unwrap();
    assert_eq!(outcome, dq::ScheduleOutcome::Unchanged);
    // Another value is another schedule, whatever its encoding: the cursor starts again.
    let changed = Report {
        days: 8,
        ..payload.clone()
    };
    client
        .schedule_raw(
            "evo-report",
            "evo.report",
            hourly.clone(),
            rmp_serde::to_vec(&payload).unwrap(),
        )
        .await
        .unwrap();
    let next = stored(client.clone()).await.next_ms.unwrap();
    client
        .store()
        .advance_schedule("evo-report", next, missed)
        .await
        .unwrap();
    client
        .schedule::<report>("evo-report", hourly, changed)
        .await
        .unwrap();
    assert_eq!(stored(client.clone()).await.next_ms, Some(next));
}
