//! The store conformance suite: what every `Store` must do, written once against [`Harness`].
//!
//! Each `pub async fn name<H: Harness>(h: &H)` is one test body; [`conformance_suite!`]
//! (crate::conformance_suite) turns the list of them into `#[tokio::test]`s for one store and
//! runs the harness's invariant check after each. The bodies use only the public API (client,
//! `Store` trait) and compare times on the store's clock (`Store::now_ms`, `Delivery::leased_ms`,
//! `JobInfo::due_ms`); they wait for a due time by polling, never by sleeping.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use dq::{
    AckOutcome, AttemptOutcome, CancelOutcome, DeadLimits, Delivery, Due, EnqueueCall,
    EnqueueOutcome, Error, FailAction, FailOutcome, FetchCall, FetchReply, FetchRequest, Job,
    JobInfo, JobKey, JobSpec, JobState, NewDue, NewJob, Queue, RescheduleOutcome, RetryPolicy,
    Topic, TopicClient,
};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

use super::Harness;

/// Generates, for one store, a `#[tokio::test]` per conformance body and the property tests.
///
/// `$new` is an expression (it may `.await`) making a fresh harness; every test gets its own.
#[macro_export]
macro_rules! conformance_suite {
    ($new:expr) => {
        $crate::conformance_suite!(@bodies $new;
            due_time_is_never_early,
            due_jobs_come_out_in_due_order,
            enqueue_by_key_is_idempotent,
            retried_enqueue_finds_its_receipt,
            retried_fetch_finds_its_receipt,
            replace_swaps_pending_jobs,
            replace_is_refused_while_running,
            replace_revives_a_dead_job,
            cancel_from_every_state,
            reschedule_from_every_state,
            fetch_promotes_at_most_its_batch,
            fetch_recovers_at_most_its_batch,
            concurrent_fetchers_deliver_each_job_once,
            drain_200k_due_jobs,
            expired_lease_is_a_failed_attempt,
            extend_keeps_the_lease,
            stale_tokens_change_nothing,
            release_gives_the_attempt_back_at_the_front,
            release_of_many_keeps_their_order,
            scheduled_and_retry_are_promoted_in_due_order,
            retry_schedule_until_dead,
            defer_spends_no_attempt,
            dead_queue_list_requeue_purge,
            dead_queue_cap_trims_oldest,
            dead_queue_retention_trims_old,
            invalid_topics_and_keys_write_nothing,
            oversized_payloads_are_refused,
            bulk_with_one_bad_item_writes_nothing,
            stats_count_states_and_counters,
            stats_oldest_overdue,
            wake_tokens_for_due_and_earliest_jobs,
            no_leftovers_after_mixed_workload,
        );
        $crate::conformance_suite!(@props $new;
            hostile_topic_names => hostile_topic,
            hostile_job_keys => hostile_key,
        );
    };
    (@bodies $new:expr; $($name:ident),* $(,)?) => {$(
        #[tokio::test]
        async fn $name() {
            let h = $new;
            $crate::common::conformance::$name(&h).await;
            $crate::common::Harness::check_invariants(&h).await;
        }
    )*};
    (@props $new:expr; $($test:ident => $body:ident),* $(,)?) => {$(
        #[test]
        fn $test() {
            let rt = $crate::common::conformance::prop_runtime();
            let h = rt.block_on(async { $new });
            let mut runner = $crate::common::conformance::prop_runner();
            let outcome = runner.run(&$crate::common::conformance::hostile_string(), |s| {
                rt.block_on($crate::common::conformance::$body(&h, &s));
                Ok(())
            });
            if let Err(e) = outcome {
                panic!("{}: {e}", stringify!($body));
            }
            rt.block_on(async {
                $crate::common::Harness::check_invariants(&h).await;
                $crate::common::Harness::assert_no_leftovers(&h).await;
            });
        }
    )*};
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// How long any single wait in this suite may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(10);
/// A lease no test outlives unless it means to.
pub const LONG_LEASE: Duration = Duration::from_secs(30);
/// Far enough in the future never to come due during a test.
pub const HOUR: Duration = Duration::from_secs(3600);

/// A typed job, for the parts of the suite that go through the typed client API.
#[allow(non_camel_case_types)]
pub struct close_order;

/// `close_order`'s payload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Order {
    /// The order.
    pub id: u64,
    /// Free text, to make payloads of a chosen size.
    pub note: String,
}

impl Job for close_order {
    type Payload = Order;
    const TOPIC: &'static str = "orders.close";
}

/// A typed job whose topic is invalid: every call must fail before writing.
#[allow(non_camel_case_types)]
pub struct bad_topic;

impl Job for bad_topic {
    type Payload = u64;
    const TOPIC: &'static str = "orders:{close}";
}

/// An order.
pub fn order(id: u64) -> Order {
    Order {
        id,
        note: String::new(),
    }
}

/// Partition 0 of `topic`.
pub fn queue(topic: &str) -> Queue {
    Queue::new(Topic::new(topic).expect("valid topic"), 0)
}

/// A job key.
pub fn jk(key: &str) -> JobKey {
    JobKey::new(key).expect("valid key")
}

/// A MessagePack payload holding `n`.
pub fn raw(n: u64) -> Vec<u8> {
    dq::payload::encode(&n, 1024).expect("encode")
}

/// The number in a payload made by [`raw`].
pub fn unraw(bytes: &[u8]) -> u64 {
    dq::payload::decode(bytes).expect("decode")
}

/// `n` milliseconds.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A fetch request for tests: 100 jobs, a 30 s lease, default batches, no lease-expiry
/// retries (an expired lease buries), default dead-queue limits.
pub fn req() -> FetchRequest {
    FetchRequest {
        max_jobs: 100,
        lease: LONG_LEASE,
        promote_batch: 1000,
        recover_batch: 100,
        lease_expiry_retries: Vec::new(),
        dead_limits: DeadLimits::default(),
        call: FetchCall::new(),
    }
}

/// `req()` leasing at most `n` jobs.
pub fn req_max(n: usize) -> FetchRequest {
    FetchRequest {
        max_jobs: n,
        ..req()
    }
}

/// The store's clock, in ms.
pub async fn now<H: Harness>(h: &H) -> u64 {
    h.store().now_ms().await.expect("now_ms")
}

/// One fetch.
pub async fn fetch<H: Harness>(h: &H, q: &Queue, r: &FetchRequest) -> FetchReply {
    h.store().fetch(q, r).await.expect("fetch")
}

/// Fetches until at least one job is delivered; fails the test after [`WAIT`].
pub async fn fetch_some<H: Harness>(h: &H, q: &Queue, r: &FetchRequest) -> Vec<Delivery> {
    dq_testkit::eventually_some("a fetch delivers a job", WAIT, || async {
        let reply = fetch(h, q, r).await;
        (!reply.jobs.is_empty()).then_some(reply.jobs)
    })
    .await
}

/// Fetches until exactly one job is delivered and returns it.
pub async fn fetch_one<H: Harness>(h: &H, q: &Queue, r: &FetchRequest) -> Delivery {
    let mut jobs = fetch_some(
        h,
        q,
        &FetchRequest {
            max_jobs: 1,
            ..r.clone()
        },
    )
    .await;
    assert_eq!(jobs.len(), 1);
    jobs.pop().expect("one job")
}

/// Waits until the store's clock has passed `t_ms`.
pub async fn until_store_time<H: Harness>(h: &H, t_ms: u64) {
    dq_testkit::eventually(
        &format!("the store clock passes {t_ms}"),
        WAIT,
        || async move { now(h).await > t_ms },
    )
    .await;
}

/// Acks deliveries and expects every ack to succeed.
pub async fn ack_all<H: Harness>(h: &H, q: &Queue, jobs: &[Delivery]) {
    if jobs.is_empty() {
        return;
    }
    let leases: Vec<_> = jobs.iter().map(dq::store::lease_of).collect();
    let out = h.store().ack(q, &leases).await.expect("ack");
    assert!(
        out.iter().all(|o| *o == AckOutcome::Acked),
        "acks of {leases:?}: {out:?}"
    );
}

/// Fetches and acks until nothing is ready or due in `q` any more (jobs scheduled later stay);
/// returns what was delivered. Also consumes stale hints.
pub async fn drain_due<H: Harness>(h: &H, q: &Queue) -> Vec<Delivery> {
    let mut all = Vec::new();
    for _ in 0..10_000 {
        let reply = fetch(h, q, &req_max(1000)).await;
        ack_all(h, q, &reply.jobs).await;
        let more = reply.next_in == Some(Duration::ZERO);
        all.extend(reply.jobs);
        if !more {
            return all;
        }
    }
    panic!("{q:?} did not drain in 10,000 fetches");
}

/// A job's info, which must exist.
pub async fn info(t: &TopicClient, key: &str) -> JobInfo {
    t.job(key)
        .await
        .expect("job")
        .unwrap_or_else(|| panic!("job {key:?} should exist"))
}

/// Keys of deliveries, in order.
pub fn keys_of(jobs: &[Delivery]) -> Vec<String> {
    jobs.iter().map(|d| d.key.to_string()).collect()
}

/// Panics unless the delivery started at or after its due time, on the store's clock.
pub fn assert_not_early(d: &Delivery) {
    assert!(
        d.leased_ms >= d.due_ms,
        "job {} delivered {} ms before its due time",
        d.key,
        d.due_ms - d.leased_ms
    );
}

/// Fails a delivery with `action` and `error`, under the default dead-queue limits.
pub async fn fail<H: Harness>(
    h: &H,
    d: &Delivery,
    action: FailAction,
    error: &str,
) -> dq::Result<FailOutcome> {
    h.store()
        .fail(
            &d.queue,
            &d.key,
            d.token,
            &action,
            error,
            DeadLimits::default(),
        )
        .await
}

/// A runtime for the property tests (which are plain `#[test]`s).
pub fn prop_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// The property-test runner: 128 cases, no regression files.
pub fn prop_runner() -> proptest::test_runner::TestRunner {
    proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases: 128,
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    })
}

/// Hostile strings for topic names and job keys: separators and hash-tag braces, whitespace
/// and control characters, empty, very long, unicode, glob characters, and plain ones.
pub fn hostile_string() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-zA-Z0-9._-]{1,20}",
        "[:{}#*?\\[\\] \t\n\r\u{0}\u{7f}\u{85}\u{a0}\u{200b}\u{2028}a-z0-9._éü中🦀-]{1,24}",
        "[a-z]{0,4}[:{}][a-z]{0,4}[{}:#][a-z0-9]{0,4}",
        "[a-zA-Z0-9._-]{120,136}",
        "[^\u{0}-\u{1f}]{250,262}",
        "\\PC{1,40}",
        ".{1,40}",
    ]
}

fn topic_is_valid(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn key_is_valid(s: &str) -> bool {
    !s.is_empty() && s.len() <= 256 && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

// ---------------------------------------------------------------------------------------------
// Due times and order

/// A job is never delivered before its due time by the store's clock; while nothing is due,
/// an empty fetch says how long until the earliest job, never more.
pub async fn due_time_is_never_early<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("due.early").unwrap();
    let q = queue("due.early");
    // Enqueued out of due order on purpose.
    let delays = [300u64, 100, 250, 150, 200, 400];
    let mut due = HashMap::new();
    for d in delays {
        let key = format!("d{d}");
        let before = now(h).await;
        let e = t.enqueue(raw(d)).key(&key).delay(ms(d)).await.unwrap();
        let after = now(h).await;
        assert_eq!(e.outcome, EnqueueOutcome::Created);
        let i = info(&t, &key).await;
        assert_eq!(i.state, JobState::Scheduled, "{i:?}");
        assert_eq!(
            i.due_ms,
            i.created_ms + d,
            "due = enqueue time + delay: {i:?}"
        );
        assert!((before..=after).contains(&i.created_ms), "{i:?}");
        due.insert(key, i.due_ms);
    }

    let mut delivered: Vec<Delivery> = Vec::new();
    let deadline = Instant::now() + WAIT;
    let mut fetches = 0u32;
    while delivered.len() < delays.len() {
        assert!(
            Instant::now() < deadline,
            "only {} of {} jobs delivered after {fetches} fetches",
            delivered.len(),
            delays.len()
        );
        let before = now(h).await;
        let reply = fetch(h, &q, &req()).await;
        fetches += 1;
        for d in &reply.jobs {
            assert_eq!(d.due_ms, due[d.key.as_str()], "{d:?}");
            assert_not_early(d);
            assert!(d.leased_ms >= before && d.lease_deadline_ms == d.leased_ms + 30_000);
            assert_eq!(d.attempt, 1);
            assert_eq!(unraw(&d.payload), d.due_ms - d.created_ms);
        }
        if reply.jobs.is_empty() {
            let earliest = due
                .iter()
                .filter(|(k, _)| !delivered.iter().any(|d| d.key.as_str() == k.as_str()))
                .map(|(_, v)| *v)
                .min()
                .expect("something is pending");
            let next = reply
                .next_in
                .expect("jobs are pending, next_in must say when");
            assert!(
                next.as_millis() as u64 <= earliest.saturating_sub(before),
                "next_in {next:?} overshoots the earliest due time {earliest} (now >= {before})"
            );
        }
        ack_all(h, &q, &reply.jobs).await;
        delivered.extend(reply.jobs);
    }
    let order: Vec<u64> = delivered.iter().map(|d| d.due_ms).collect();
    let mut sorted = order.clone();
    sorted.sort_unstable();
    assert_eq!(order, sorted, "delivered out of due order");
    let reply = fetch(h, &q, &req()).await;
    assert!(
        reply.jobs.is_empty() && reply.next_in.is_none(),
        "{reply:?}"
    );
}

/// Due jobs come out in due-time order; jobs due in the same millisecond come out in the order
/// they were enqueued — within one bulk call (2,000 jobs with the same delay, keys in reverse
/// lexical order so that no tie-break by name can pass), across calls (`.at` the same time),
/// and after the partition has already seen many enqueues.
pub async fn due_jobs_come_out_in_due_order<H: Harness>(h: &H) {
    let c = h.client_with(|b| b.bulk_chunk(2000)).await.unwrap();
    let t = c.topic("due.order").unwrap();
    let q = queue("due.order");

    // Some history first, so that any per-partition counter is well past its start.
    let warm: Vec<_> = (0..1500).map(|i| JobSpec::new(raw(i))).collect();
    t.enqueue_bulk(warm).await.unwrap();
    assert_eq!(drain_due(h, &q).await.len(), 1500);

    // One bulk call: every job gets the same due millisecond. The delay leaves room for the
    // calls below to happen before it, even on a loaded machine.
    let n = 2000u64;
    let bulk: Vec<_> = (0..n)
        .map(|i| {
            JobSpec::new(raw(i))
                .key(format!("same-{:04}", n - i))
                .delay(ms(5000))
        })
        .collect();
    let out = t.enqueue_bulk(bulk).await.unwrap();
    assert!(out.iter().all(|e| e.outcome == EnqueueOutcome::Created));
    let bulk_due = info(&t, "same-2000").await.due_ms;
    assert_eq!(info(&t, "same-0001").await.due_ms, bulk_due);

    // Separate calls due at the bulk's very millisecond (so after all of it), interleaved
    // with jobs of other due times.
    for (i, key) in ["at-5", "at-4", "at-3", "at-2", "at-1"].iter().enumerate() {
        t.enqueue(raw(i as u64))
            .key(*key)
            .at(dq::job::from_unix_ms(bulk_due))
            .await
            .unwrap();
        t.enqueue(raw(i as u64))
            .key(format!("solo-{i}"))
            .delay(ms([3000, 2000, 6000, 2500, 4000][i]))
            .await
            .unwrap();
    }
    let mut last_due = bulk_due;
    for i in 0..5 {
        last_due = last_due.max(info(&t, &format!("solo-{i}")).await.due_ms);
    }
    for key in ["at-5", "at-1"] {
        let i = info(&t, key).await;
        assert_eq!(
            (i.state, i.due_ms),
            (JobState::Scheduled, bulk_due),
            "{key} was enqueued after its due time: the machine is too slow for this test"
        );
    }
    until_store_time(h, last_due).await;

    let reply = fetch(
        h,
        &q,
        &FetchRequest {
            max_jobs: 5000,
            promote_batch: 5000,
            ..req()
        },
    )
    .await;
    let jobs = reply.jobs;
    assert_eq!(jobs.len() as u64, n + 10);
    for d in &jobs {
        assert_not_early(d);
    }
    let dues: Vec<u64> = jobs.iter().map(|d| d.due_ms).collect();
    assert!(
        dues.windows(2).all(|w| w[0] <= w[1]),
        "not in due order: {dues:?}"
    );
    let same: Vec<u64> = jobs
        .iter()
        .filter(|d| d.key.as_str().starts_with("same-"))
        .map(|d| unraw(&d.payload))
        .collect();
    let first_wrong = same.iter().enumerate().find(|(i, v)| *i as u64 != **v);
    assert!(
        first_wrong.is_none(),
        "jobs due in the same ms not in enqueue order: position {first_wrong:?}"
    );
    let same_ms: Vec<String> = keys_of(&jobs)
        .into_iter()
        .filter(|k| k.starts_with("at-") || k == "same-0001")
        .collect();
    assert_eq!(
        same_ms,
        ["same-0001", "at-5", "at-4", "at-3", "at-2", "at-1"],
        "later calls for the same millisecond come after the bulk, in call order"
    );
    ack_all(h, &q, &jobs).await;
    let reply = fetch(h, &q, &req()).await;
    assert!(
        reply.jobs.is_empty() && reply.next_in.is_none(),
        "{reply:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Enqueue by key, replace

/// Guarantee 6 for enqueue: a retry of a call whose earlier try was applied (its reply lost)
/// writes nothing — even after the job has run and gone, and even with `replace` — while a
/// retry of a call that was never applied stores its jobs. Receipts are per call, not per key:
/// a new call for a key whose job has ended creates it again.
pub async fn retried_enqueue_finds_its_receipt<H: Harness>(h: &H) {
    use EnqueueOutcome::{Created, Ended, Exists, Replaced};
    let store = h.store();
    let q = queue("receipts");
    let job = |k: &str, replace: bool| NewJob {
        key: jk(k),
        payload: raw(1),
        due: Due::Now,
        replace,
    };
    let pair = [job("r-1", false), job("r-2", false)];

    // Applied once; a retry while the jobs wait writes nothing and reports them as this
    // call's: created by it, not someone else's job holding the key.
    let call = EnqueueCall::new();
    let out = store.enqueue(&q, &pair, call).await.unwrap();
    assert_eq!(out, [Created, Created]);
    let out = store.enqueue(&q, &pair, call.retried()).await.unwrap();
    assert_eq!(out, [Created, Created]);

    // The jobs run and are acked; a late retry does not bring them back.
    let jobs = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&jobs), ["r-1", "r-2"]);
    ack_all(h, &q, &jobs).await;
    let out = store.enqueue(&q, &pair, call.retried()).await.unwrap();
    assert_eq!(out, [Ended, Ended]);

    // A replace is not applied twice: the retry leaves the job the first try stored (running
    // now), and reports it as this call's.
    let replace = EnqueueCall::new();
    let r3 = [job("r-3", true)];
    assert_eq!(store.enqueue(&q, &r3, replace).await.unwrap(), [Created]);
    let d = &fetch(h, &q, &req()).await.jobs[0];
    let out = store.enqueue(&q, &r3, replace.retried()).await.unwrap();
    assert_eq!(out, [Created]);
    ack_all(h, &q, std::slice::from_ref(d)).await;

    // A retry of a call whose first try never reached the store stores the job.
    let lost = EnqueueCall::new();
    let r4 = [job("r-4", false)];
    assert_eq!(
        store.enqueue(&q, &r4, lost.retried()).await.unwrap(),
        [Created]
    );
    // A call that stored nothing leaves no receipt: its retry creates a job that has
    // ended since (one effect in all).
    let noop = EnqueueCall::new();
    assert_eq!(
        store.enqueue(&q, &r4, noop).await.unwrap(),
        [Exists(JobState::Ready)]
    );
    let d = fetch(h, &q, &req()).await.jobs;
    ack_all(h, &q, &d).await;
    assert_eq!(
        store.enqueue(&q, &r4, noop.retried()).await.unwrap(),
        [Created]
    );

    // A new call for a key whose job has ended creates it again.
    let again = store
        .enqueue(&q, &pair[..1], EnqueueCall::new())
        .await
        .unwrap();
    assert_eq!(again, [Created]);

    let jobs = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&jobs), ["r-4", "r-1"]);
    ack_all(h, &q, &jobs).await;
    let st = h.store().stats(&q).await.unwrap();
    assert_eq!((st.enqueued, st.succeeded), (6, 6), "{st:?}");

    // A call that stored some of its jobs: the retry tells its own (created, replaced) from
    // the jobs others hold the keys with.
    let q = queue("receipts.mixed");
    let theirs = [job("m-theirs", false), job("m-replaced", false)];
    store
        .enqueue(&q, &theirs, EnqueueCall::new())
        .await
        .unwrap();
    let mixed = [
        job("m-new", false),
        job("m-theirs", false),
        job("m-replaced", true),
    ];
    let call = EnqueueCall::new();
    let first = store.enqueue(&q, &mixed, call).await.unwrap();
    assert_eq!(first, [Created, Exists(JobState::Ready), Replaced]);
    let out = store.enqueue(&q, &mixed, call.retried()).await.unwrap();
    assert_eq!(out, first);
    // Its jobs run and end; others enqueue the keys again: the retry claims none of them,
    // whether stored in the same millisecond (another payload) or later (the same payload).
    let jobs = fetch(h, &q, &req()).await.jobs;
    assert_eq!(jobs.len(), 3);
    ack_all(h, &q, &jobs).await;
    let other = NewJob {
        payload: raw(2),
        ..job("m-new", false)
    };
    store
        .enqueue(&q, &[other], EnqueueCall::new())
        .await
        .unwrap();
    let stored_at = store.now_ms().await.unwrap();
    dq_testkit::eventually("the store's clock moved", WAIT, || async {
        store.now_ms().await.unwrap() > stored_at
    })
    .await;
    store
        .enqueue(&q, &[job("m-replaced", false)], EnqueueCall::new())
        .await
        .unwrap();
    let out = store.enqueue(&q, &mixed, call.retried()).await.unwrap();
    assert_eq!(
        out,
        [Exists(JobState::Ready), Ended, Exists(JobState::Ready)]
    );
}

/// Guarantee for fetch: a fetch whose reply was lost leased its jobs to nobody. A retry of the
/// same call gets them back under fresh tokens and a fresh lease, with no attempt spent, and
/// the lost tokens are fenced off; a job acked since does not come back; room left is filled
/// as by any fetch; a try that arrives after a later try of its call does nothing; a receipt
/// expires with the lease it recorded (then a retry is an ordinary fetch).
pub async fn retried_fetch_finds_its_receipt<H: Harness>(h: &H) {
    let store = h.store();
    let q = queue("fetch.receipts");
    let t = h.client().await.topic("fetch.receipts").unwrap();
    for k in ["f-1", "f-2", "f-3"] {
        t.enqueue(raw(1)).key(k).await.unwrap();
    }
    let r = FetchRequest {
        max_jobs: 2,
        ..req()
    };
    let retry = |r: &FetchRequest| FetchRequest {
        call: r.call.retried(),
        ..r.clone()
    };

    // The first try leases f-1 and f-2; its reply is "lost". The retry gets them back.
    let lost = fetch(h, &q, &r).await.jobs;
    assert_eq!(keys_of(&lost), ["f-1", "f-2"]);
    let r1 = retry(&r);
    let again = fetch(h, &q, &r1).await.jobs;
    assert_eq!(keys_of(&again), ["f-1", "f-2"], "the same jobs, in order");
    for (old, new) in lost.iter().zip(&again) {
        assert_ne!(old.token, new.token, "a fresh token");
        assert_eq!(new.attempt, 1, "no attempt spent on a lost reply");
        assert!(new.lease_deadline_ms >= old.lease_deadline_ms);
        assert_eq!(new.payload, old.payload);
        let i = info(&t, new.key.as_str()).await;
        assert_eq!((i.state, i.attempts), (JobState::Active, 1));
        assert!(i.history.is_empty(), "{:?}", i.history);
    }
    // The lost tokens own nothing any more.
    let stale: Vec<_> = lost.iter().map(dq::store::lease_of).collect();
    assert_eq!(
        store.extend(&q, &stale, LONG_LEASE).await.unwrap(),
        [false, false]
    );
    assert_eq!(
        store.ack(&q, &stale).await.unwrap(),
        [AckOutcome::Stale, AckOutcome::Stale]
    );
    // The first try arriving late (held up on an old connection) does nothing.
    let late = fetch(h, &q, &r).await;
    assert!(late.jobs.is_empty(), "a stale try leased {:?}", late.jobs);
    assert_eq!(info(&t, "f-3").await.state, JobState::Ready);

    // The retry's reply may be lost too: the next retry finds the newest receipt.
    let r2 = retry(&r1);
    let third = fetch(h, &q, &r2).await.jobs;
    assert_eq!(keys_of(&third), ["f-1", "f-2"]);
    assert!(third.iter().all(|d| d.attempt == 1));
    assert!(third.iter().zip(&again).all(|(a, b)| a.token != b.token));

    // f-1 is acked; a later retry gets f-2 back and fills its room with f-3, a new lease.
    ack_all(h, &q, &third[..1]).await;
    let fourth = fetch(h, &q, &retry(&r2)).await.jobs;
    assert_eq!(keys_of(&fourth), ["f-2", "f-3"]);
    assert_eq!((fourth[0].attempt, fourth[1].attempt), (1, 1));
    ack_all(h, &q, &fourth).await;
    // A retry after every job of the receipt is done gets none of them.
    assert!(fetch(h, &q, &retry(&retry(&r2))).await.jobs.is_empty());

    // A retry of a call that never reached the store (no receipt) is an ordinary fetch.
    t.enqueue(raw(1)).key("f-4").await.unwrap();
    let fresh = FetchRequest {
        call: FetchCall::new().retried(),
        ..r.clone()
    };
    let got = fetch(h, &q, &fresh).await.jobs;
    assert_eq!(
        (keys_of(&got), got[0].attempt),
        (vec!["f-4".to_string()], 1)
    );
    ack_all(h, &q, &got).await;

    // A receipt lives as long as the lease it recorded: once both have run out, a retry is an
    // ordinary fetch, and the lost lease was an attempt (recovered as "lease expired").
    t.enqueue(raw(1)).key("f-5").await.unwrap();
    let short = FetchRequest {
        lease: ms(150),
        lease_expiry_retries: vec![ms(0)],
        call: FetchCall::new(),
        ..r.clone()
    };
    assert_eq!(
        FetchCall::receipt_life(short.lease),
        short.lease,
        "a receipt outlives no lease"
    );
    let gone = fetch(h, &q, &short).await.jobs;
    assert_eq!(keys_of(&gone), ["f-5"]);
    until_store_time(h, gone[0].lease_deadline_ms + 1).await;
    let late = fetch(h, &q, &retry(&short)).await.jobs;
    assert_eq!(keys_of(&late), ["f-5"]);
    assert_eq!(late[0].attempt, 2, "the receipt had expired");
    let i = info(&t, "f-5").await;
    assert_eq!(i.history.len(), 1);
    assert_eq!(i.history[0].outcome, AttemptOutcome::LeaseExpired);
    ack_all(h, &q, &late).await;

    let st = store.stats(&q).await.unwrap();
    assert_eq!(
        (st.succeeded, st.expired, st.active, st.ready),
        (5, 1, 0, 0),
        "{st:?}"
    );
}

/// Enqueueing an existing key creates no second job, whatever its state; retrying a keyed
/// bulk creates nothing new; a key may be reused once its job has ended.
pub async fn enqueue_by_key_is_idempotent<H: Harness>(h: &H) {
    let c = h.client().await;
    let q = queue(close_order::TOPIC);

    let first = c
        .enqueue::<close_order>(order(1))
        .key("order-1")
        .delay(HOUR)
        .await
        .unwrap();
    assert_eq!(first.outcome, EnqueueOutcome::Created);
    assert_eq!(first.key.as_str(), "order-1");
    for id in [1, 2, 3] {
        let again = c
            .enqueue::<close_order>(order(id))
            .key("order-1")
            .await
            .unwrap();
        assert_eq!(again.outcome, EnqueueOutcome::Exists(JobState::Scheduled));
    }
    let i = c.job::<close_order>("order-1").await.unwrap().unwrap();
    assert_eq!(*i.payload.as_ref().unwrap(), order(1));
    assert_eq!(i.state, JobState::Scheduled);

    // Due now: retries see it ready, and exactly one job is delivered.
    for _ in 0..3 {
        c.enqueue::<close_order>(order(2))
            .key("order-2")
            .await
            .unwrap();
    }
    let st = c.stats::<close_order>().await.unwrap();
    assert_eq!((st.scheduled, st.ready, st.enqueued), (1, 1, 2), "{st:?}");
    let jobs = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&jobs), ["order-2"]);
    // While it runs, the key still answers "exists".
    let running = c
        .enqueue::<close_order>(order(2))
        .key("order-2")
        .await
        .unwrap();
    assert_eq!(running.outcome, EnqueueOutcome::Exists(JobState::Active));
    ack_all(h, &q, &jobs).await;
    // Ended: the key makes a new job.
    let reused = c
        .enqueue::<close_order>(order(2))
        .key("order-2")
        .delay(HOUR)
        .await
        .unwrap();
    assert_eq!(reused.outcome, EnqueueOutcome::Created);

    // A keyed bulk, retried as a whole (as after an ambiguous error), and a bulk naming one
    // key twice.
    let t = c.topic(close_order::TOPIC).unwrap();
    let bulk = || {
        (0..10)
            .map(|i| JobSpec::new(raw(i)).key(format!("bulk-{i}")).delay(HOUR))
            .collect::<Vec<_>>()
    };
    let out = t.enqueue_bulk(bulk()).await.unwrap();
    assert!(out.iter().all(|e| e.outcome == EnqueueOutcome::Created));
    let out = t.enqueue_bulk(bulk()).await.unwrap();
    assert!(
        out.iter()
            .all(|e| e.outcome == EnqueueOutcome::Exists(JobState::Scheduled)),
        "{out:?}"
    );
    let twice = t
        .enqueue_bulk(vec![
            JobSpec::new(raw(1)).key("twice"),
            JobSpec::new(raw(2)).key("twice"),
        ])
        .await
        .unwrap();
    assert_eq!(
        twice.iter().map(|e| e.outcome).collect::<Vec<_>>(),
        [
            EnqueueOutcome::Created,
            EnqueueOutcome::Exists(JobState::Ready)
        ]
    );
    assert_eq!(unraw(&info(&t, "twice").await.payload), 1);
    let st = t.stats().await.unwrap();
    assert_eq!(
        (st.scheduled, st.ready, st.enqueued, st.succeeded),
        (12, 1, 14, 1),
        "{st:?}"
    );
}

/// `.replace()` swaps payload and due time of a scheduled, ready or retrying job in one step:
/// attempts and history start again, the old due time and any old ready hint are void, and
/// the job is delivered once, with the new payload, at the new time.
pub async fn replace_swaps_pending_jobs<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("replace.pending").unwrap();
    let q = queue("replace.pending");

    // Retry first: the only fetch that can deliver something before the others exist.
    t.enqueue(raw(1)).key("f").await.unwrap();
    let d = fetch_one(h, &q, &req()).await;
    let out = fail(h, &d, FailAction::Retry(HOUR), "partner down").await;
    assert!(matches!(out, Ok(FailOutcome::Retrying { .. })), "{out:?}");
    assert_eq!(info(&t, "f").await.state, JobState::Retry);

    // Scheduled, due in an hour → due in 200 ms with a new payload.
    t.enqueue(raw(1)).key("s").delay(HOUR).await.unwrap();
    // Ready now → scheduled in 300 ms: the ready hint it leaves behind must not deliver it.
    t.enqueue(raw(1)).key("r").await.unwrap();

    let before = now(h).await;
    let s = t
        .enqueue(raw(2))
        .key("s")
        .delay(ms(200))
        .replace()
        .await
        .unwrap();
    let r = t
        .enqueue(raw(3))
        .key("r")
        .delay(ms(300))
        .replace()
        .await
        .unwrap();
    let f = t.enqueue(raw(4)).key("f").replace().await.unwrap();
    let after = now(h).await;
    for e in [&s, &r, &f] {
        assert_eq!(e.outcome, EnqueueOutcome::Replaced, "{e:?}");
    }

    let si = info(&t, "s").await;
    assert_eq!((si.state, unraw(&si.payload)), (JobState::Scheduled, 2));
    assert!((before + 200..=after + 200).contains(&si.due_ms), "{si:?}");
    assert_eq!(
        si.due_ms,
        si.created_ms + 200,
        "a replaced job starts afresh"
    );
    let ri = info(&t, "r").await;
    assert_eq!((ri.state, unraw(&ri.payload)), (JobState::Scheduled, 3));
    assert!((before + 300..=after + 300).contains(&ri.due_ms), "{ri:?}");
    let fi = info(&t, "f").await;
    assert_eq!((fi.state, unraw(&fi.payload)), (JobState::Ready, 4));
    assert_eq!(fi.attempts, 0);
    assert!(fi.history.is_empty(), "history starts again: {fi:?}");

    let st = t.stats().await.unwrap();
    assert_eq!(
        (st.scheduled, st.ready, st.retry, st.enqueued),
        (2, 1, 0, 6),
        "{st:?}"
    );

    let mut seen: HashMap<String, Delivery> = HashMap::new();
    let deadline = Instant::now() + WAIT;
    while seen.len() < 3 {
        assert!(
            Instant::now() < deadline,
            "delivered only {:?}",
            seen.keys()
        );
        let reply = fetch(h, &q, &req()).await;
        for d in &reply.jobs {
            assert_not_early(d);
            assert_eq!(d.attempt, 1, "{d:?}");
            let prev = seen.insert(d.key.to_string(), d.clone());
            assert!(prev.is_none(), "{} delivered twice", d.key);
        }
        ack_all(h, &q, &reply.jobs).await;
    }
    assert_eq!(unraw(&seen["s"].payload), 2);
    assert_eq!(seen["s"].due_ms, si.due_ms);
    assert_eq!(unraw(&seen["r"].payload), 3);
    assert_eq!(seen["r"].due_ms, ri.due_ms);
    assert_eq!(unraw(&seen["f"].payload), 4);
    assert!(drain_due(h, &q).await.is_empty());
}

/// A running job is never replaced: `Exists(Active)`, and its delivery still owns it.
pub async fn replace_is_refused_while_running<H: Harness>(h: &H) {
    let c = h.client().await;
    let q = queue(close_order::TOPIC);
    c.enqueue::<close_order>(order(1))
        .key("order-7")
        .await
        .unwrap();
    let d = fetch_one(h, &q, &req()).await;
    let again = c
        .enqueue::<close_order>(order(2))
        .key("order-7")
        .delay(ms(100))
        .replace()
        .await
        .unwrap();
    assert_eq!(again.outcome, EnqueueOutcome::Exists(JobState::Active));
    let i = c.job::<close_order>("order-7").await.unwrap().unwrap();
    assert_eq!(i.state, JobState::Active);
    assert_eq!(i.attempts, 1);
    assert_eq!(*i.payload.as_ref().unwrap(), order(1));
    assert_eq!(
        i.lease_deadline,
        Some(dq::job::from_unix_ms(d.lease_deadline_ms))
    );
    assert_eq!(c.stats::<close_order>().await.unwrap().enqueued, 1);
    ack_all(h, &q, &[d]).await;
}

/// A dead job is replaced: it leaves the dead queue and runs again from attempt 1.
pub async fn replace_revives_a_dead_job<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("replace.dead").unwrap();
    let q = queue("replace.dead");
    t.enqueue(raw(1)).key("x").await.unwrap();
    let d = fetch_one(h, &q, &req()).await;
    assert!(matches!(
        fail(h, &d, FailAction::Bury, "fatal").await,
        Ok(FailOutcome::Buried { trimmed: 0 })
    ));
    assert_eq!(info(&t, "x").await.state, JobState::Dead);

    let e = t.enqueue(raw(5)).key("x").replace().await.unwrap();
    assert_eq!(e.outcome, EnqueueOutcome::Replaced);
    let i = info(&t, "x").await;
    assert_eq!(
        (i.state, i.attempts, unraw(&i.payload)),
        (JobState::Ready, 0, 5)
    );
    assert!(i.history.is_empty());
    assert!(t.dead_jobs(0, 10).await.unwrap().is_empty());
    assert_eq!(t.stats().await.unwrap().dead, 0);

    let d = fetch_one(h, &q, &req()).await;
    assert_eq!((d.key.as_str(), d.attempt, unraw(&d.payload)), ("x", 1, 5));
    ack_all(h, &q, &[d]).await;
}

// ---------------------------------------------------------------------------------------------
// Cancel and reschedule

/// Cancel from every state: scheduled, ready and retry are cancelled and never delivered;
/// active answers `Running`, dead `Dead` (both untouched); a missing or already cancelled key
/// `NotFound`.
pub async fn cancel_from_every_state<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic(close_order::TOPIC).unwrap();
    let q = queue(close_order::TOPIC);

    for k in ["f", "a", "d"] {
        t.enqueue(raw(0)).key(k).await.unwrap();
    }
    let jobs = fetch(h, &q, &req_max(3)).await.jobs;
    assert_eq!(keys_of(&jobs), ["f", "a", "d"]);
    let retry_at = match fail(h, &jobs[0], FailAction::Retry(ms(150)), "e").await {
        Ok(FailOutcome::Retrying { at_ms }) => at_ms,
        other => panic!("{other:?}"),
    };
    fail(h, &jobs[2], FailAction::Bury, "e").await.unwrap();
    t.enqueue(raw(0)).key("s").delay(ms(200)).await.unwrap();
    t.enqueue(raw(0)).key("r").await.unwrap();
    let s_due = info(&t, "s").await.due_ms;

    assert_eq!(t.cancel("s").await.unwrap(), CancelOutcome::Cancelled);
    assert_eq!(t.cancel("r").await.unwrap(), CancelOutcome::Cancelled);
    assert_eq!(
        c.cancel::<close_order>("f").await.unwrap(),
        CancelOutcome::Cancelled
    );
    assert_eq!(t.cancel("a").await.unwrap(), CancelOutcome::Running);
    assert_eq!(t.cancel("d").await.unwrap(), CancelOutcome::Dead);
    assert_eq!(t.cancel("missing").await.unwrap(), CancelOutcome::NotFound);
    assert_eq!(t.cancel("s").await.unwrap(), CancelOutcome::NotFound);
    for k in ["s", "r", "f"] {
        assert!(t.job(k).await.unwrap().is_none(), "{k} still exists");
    }
    assert_eq!(info(&t, "a").await.state, JobState::Active);
    assert_eq!(info(&t, "d").await.state, JobState::Dead);
    let st = t.stats().await.unwrap();
    assert_eq!(
        (
            st.scheduled,
            st.ready,
            st.retry,
            st.active,
            st.dead,
            st.cancelled
        ),
        (0, 0, 0, 1, 1, 3),
        "{st:?}"
    );

    // Past every cancelled job's due time, nothing is delivered.
    until_store_time(h, s_due.max(retry_at) + 20).await;
    let reply = fetch(h, &q, &req()).await;
    assert!(reply.jobs.is_empty(), "cancelled jobs delivered: {reply:?}");
    assert!(reply.next_in.is_some_and(|n| n > ms(1000)), "{reply:?}");
    // The running job still owns its lease.
    ack_all(h, &q, &jobs[1..2]).await;
}

/// Reschedule from every state. Scheduled, ready and retry jobs get the new time — `At` a time,
/// `After` a delay, `Shift` by ± ms (not before now) — and are delivered once, at that time,
/// keeping their attempts. Active answers `Running`, dead `Dead`, missing `NotFound`.
pub async fn reschedule_from_every_state<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic(close_order::TOPIC).unwrap();
    let q = queue(close_order::TOPIC);

    for k in ["f", "a", "d"] {
        t.enqueue(raw(0)).key(k).await.unwrap();
    }
    let jobs = fetch(h, &q, &req_max(3)).await.jobs;
    assert_eq!(keys_of(&jobs), ["f", "a", "d"]);
    fail(h, &jobs[0], FailAction::Retry(HOUR), "e")
        .await
        .unwrap();
    fail(h, &jobs[2], FailAction::Bury, "e").await.unwrap();
    for (k, delay) in [
        ("s", HOUR),
        ("t", HOUR),
        ("u", Duration::from_secs(10)),
        ("v", ms(3000)),
        ("w", HOUR),
    ] {
        t.enqueue(raw(0)).key(k).delay(delay).await.unwrap();
    }
    t.enqueue(raw(0)).key("r").await.unwrap();

    let mut want: HashMap<&str, u64> = HashMap::new();
    let expect_due = |out: RescheduleOutcome| match out {
        RescheduleOutcome::Rescheduled { due_ms } => due_ms,
        other => panic!("{other:?}"),
    };

    // After: a delay from now.
    let before = now(h).await;
    let due = expect_due(t.reschedule("s", NewDue::After(ms(200))).await.unwrap());
    let after = now(h).await;
    assert!((before + 200..=after + 200).contains(&due), "{due}");
    want.insert("s", due);
    // At: an absolute time (Unix ms, the store's clock).
    // Far enough ahead that it is still in the future when the call lands on a loaded
    // machine (a due time in the past is moved up to now).
    let target = now(h).await + 3000;
    let due = expect_due(
        c.reschedule::<close_order>("t", NewDue::At(dq::job::from_unix_ms(target)))
            .await
            .unwrap(),
    );
    assert_eq!(due, target);
    want.insert("t", due);
    // Shift earlier (the speed-up card) and later.
    let old = info(&t, "u").await.due_ms;
    let before = now(h).await;
    let due = expect_due(t.reschedule("u", NewDue::Shift(-9_750)).await.unwrap());
    assert!(
        due == old - 9_750 || (old - 9_750 < due && due >= before),
        "{due}"
    );
    want.insert("u", due);
    let old = info(&t, "v").await.due_ms;
    let due = expect_due(t.reschedule("v", NewDue::Shift(300)).await.unwrap());
    assert_eq!(due, old + 300);
    want.insert("v", due);
    // Shift into the past: due now, never before now.
    let before = now(h).await;
    let due = expect_due(
        t.reschedule("w", NewDue::Shift(-2 * 3_600_000))
            .await
            .unwrap(),
    );
    let after = now(h).await;
    assert!((before..=after).contains(&due), "{due}");
    assert_eq!(info(&t, "w").await.state, JobState::Ready);
    want.insert("w", due);
    // Ready → later: its old ready hint must not deliver it early.
    let due = expect_due(t.reschedule("r", NewDue::After(ms(250))).await.unwrap());
    assert_eq!(info(&t, "r").await.state, JobState::Scheduled);
    want.insert("r", due);
    // Retry → now: keeps its attempt count.
    let due = expect_due(
        t.reschedule("f", NewDue::At(dq::job::from_unix_ms(0)))
            .await
            .unwrap(),
    );
    let fi = info(&t, "f").await;
    assert_eq!(
        (fi.state, fi.attempts, fi.due_ms),
        (JobState::Ready, 1, due)
    );
    assert_eq!(fi.history.len(), 1);
    want.insert("f", due);

    assert_eq!(
        t.reschedule("a", NewDue::After(ms(1))).await.unwrap(),
        RescheduleOutcome::Running
    );
    assert_eq!(
        t.reschedule("d", NewDue::After(ms(1))).await.unwrap(),
        RescheduleOutcome::Dead
    );
    assert_eq!(
        t.reschedule("missing", NewDue::Shift(5)).await.unwrap(),
        RescheduleOutcome::NotFound
    );
    for (k, due) in &want {
        assert_eq!(info(&t, k).await.due_ms, *due, "{k}");
    }

    let mut seen: HashMap<String, Delivery> = HashMap::new();
    let deadline = Instant::now() + WAIT;
    while seen.len() < want.len() {
        assert!(
            Instant::now() < deadline,
            "delivered only {:?}",
            seen.keys()
        );
        let reply = fetch(h, &q, &req()).await;
        for d in &reply.jobs {
            assert_not_early(d);
            assert_eq!(d.due_ms, want[d.key.as_str()], "{d:?}");
            let attempt = if d.key.as_str() == "f" { 2 } else { 1 };
            assert_eq!(d.attempt, attempt, "{d:?}");
            assert!(
                seen.insert(d.key.to_string(), d.clone()).is_none(),
                "{d:?} twice"
            );
        }
        ack_all(h, &q, &reply.jobs).await;
    }
    assert!(drain_due(h, &q).await.is_empty());
    assert_eq!(info(&t, "a").await.state, JobState::Active);
    assert_eq!(info(&t, "d").await.state, JobState::Dead);
    ack_all(h, &q, &jobs[1..2]).await;
}

// ---------------------------------------------------------------------------------------------
// Fetch

/// One fetch moves at most `promote_batch` due jobs from `scheduled` and as many from `retry`
/// to ready, and leases at most `max_jobs`; `next_in` is zero while more is due.
pub async fn fetch_promotes_at_most_its_batch<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("fetch.batch").unwrap();
    let q = queue("fetch.batch");
    let jobs: Vec<_> = (0..45)
        .map(|i| JobSpec::new(raw(i)).delay(ms(100)))
        .collect();
    let out = t.enqueue_bulk(jobs).await.unwrap();
    let last_due = info(&t, out[44].key.as_str()).await.due_ms;
    until_store_time(h, last_due).await;

    let promote_only = FetchRequest {
        max_jobs: 0,
        promote_batch: 10,
        ..req()
    };
    for round in 1..=2u64 {
        let reply = fetch(h, &q, &promote_only).await;
        assert!(reply.jobs.is_empty());
        assert_eq!(reply.next_in, Some(Duration::ZERO), "more is due");
        let st = t.stats().await.unwrap();
        assert_eq!(
            (st.ready, st.scheduled),
            (10 * round, 45 - 10 * round),
            "{st:?}"
        );
    }
    // Leasing 7 promotes 10 more.
    let reply = fetch(
        h,
        &q,
        &FetchRequest {
            max_jobs: 7,
            promote_batch: 10,
            ..req()
        },
    )
    .await;
    assert_eq!(reply.jobs.len(), 7);
    assert_eq!(reply.next_in, Some(Duration::ZERO));
    let st = t.stats().await.unwrap();
    assert_eq!((st.ready, st.scheduled, st.active), (23, 15, 7), "{st:?}");

    // Retry jobs too: at most a batch in all, merged with scheduled by due time.
    let mut retry_at = 0;
    for d in &reply.jobs {
        match fail(h, d, FailAction::Retry(ms(50)), "again")
            .await
            .unwrap()
        {
            FailOutcome::Retrying { at_ms } => retry_at = retry_at.max(at_ms),
            other => panic!("{other:?}"),
        }
    }
    until_store_time(h, retry_at).await;
    let reply = fetch(
        h,
        &q,
        &FetchRequest {
            max_jobs: 0,
            promote_batch: 3,
            ..req()
        },
    )
    .await;
    assert!(reply.jobs.is_empty());
    let st = t.stats().await.unwrap();
    assert_eq!(
        (st.ready, st.scheduled, st.retry),
        (26, 12, 7),
        "3 due jobs in all, earliest first (all scheduled): {st:?}"
    );

    // Everything drains; no call leases more than asked.
    let mut total = 0;
    for _ in 0..100 {
        let reply = fetch(h, &q, &req_max(4)).await;
        assert!(reply.jobs.len() <= 4);
        total += reply.jobs.len();
        ack_all(h, &q, &reply.jobs).await;
        if reply.jobs.is_empty() && reply.next_in != Some(Duration::ZERO) {
            break;
        }
    }
    assert_eq!(total, 45);
    let st = t.stats().await.unwrap();
    assert_eq!((st.succeeded, st.retried), (45, 7), "{st:?}");
}

/// One fetch recovers at most `recover_batch` expired leases.
pub async fn fetch_recovers_at_most_its_batch<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("fetch.recover").unwrap();
    let q = queue("fetch.recover");
    for i in 0..5 {
        t.enqueue(raw(i)).key(format!("k{i}")).await.unwrap();
    }
    let r = FetchRequest {
        lease: ms(50),
        recover_batch: 2,
        lease_expiry_retries: vec![HOUR],
        ..req()
    };
    let jobs = fetch(h, &q, &r).await.jobs;
    assert_eq!(jobs.len(), 5);
    let last = jobs.iter().map(|d| d.lease_deadline_ms).max().unwrap();
    until_store_time(h, last + 1).await;
    for (expired, active) in [(2, 3), (4, 1), (5, 0)] {
        let reply = fetch(
            h,
            &q,
            &FetchRequest {
                max_jobs: 0,
                ..r.clone()
            },
        )
        .await;
        assert!(reply.jobs.is_empty() && reply.buried.is_empty());
        let st = t.stats().await.unwrap();
        assert_eq!(
            (st.expired, st.active, st.retry),
            (expired, active, expired),
            "{st:?}"
        );
    }
    for i in 0..5 {
        assert_eq!(
            t.cancel(&format!("k{i}")).await.unwrap(),
            CancelOutcome::Cancelled
        );
    }
}

/// Several fetchers working one partition while a producer adds jobs: every job is delivered
/// exactly once (no lease expires here), and all of them end.
pub async fn concurrent_fetchers_deliver_each_job_once<H: Harness>(h: &H) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let c = h.client().await;
    let t = c.topic("concurrent").unwrap();
    let q = queue("concurrent");
    let produced = AtomicBool::new(false);
    let producer = async {
        for chunk in 0..20u64 {
            let jobs: Vec<_> = (0..100u64)
                .map(|i| JobSpec::new(raw(chunk * 100 + i)).delay(ms(i % 3 * 10)))
                .collect();
            t.enqueue_bulk(jobs).await.unwrap();
            tokio::task::yield_now().await;
        }
        produced.store(true, Ordering::SeqCst);
    };
    let fetcher = || async {
        let mut got: Vec<u64> = Vec::new();
        let deadline = Instant::now() + WAIT;
        loop {
            assert!(Instant::now() < deadline, "fetcher did not finish");
            let done = produced.load(Ordering::SeqCst);
            let reply = fetch(h, &q, &req_max(25)).await;
            for d in &reply.jobs {
                assert_not_early(d);
                assert_eq!(d.attempt, 1);
            }
            ack_all(h, &q, &reply.jobs).await;
            got.extend(reply.jobs.iter().map(|d| unraw(&d.payload)));
            if reply.jobs.is_empty() {
                if done && reply.next_in.is_none() {
                    return got;
                }
                tokio::task::yield_now().await;
            }
        }
    };
    let ((), a, b, c3) = tokio::join!(producer, fetcher(), fetcher(), fetcher());
    let mut all: Vec<u64> = a.into_iter().chain(b).chain(c3).collect();
    all.sort_unstable();
    assert_eq!(all, (0..2000).collect::<Vec<_>>(), "each job exactly once");
    let st = t.stats().await.unwrap();
    assert_eq!((st.enqueued, st.succeeded), (2000, 2000), "{st:?}");
}

/// 200,000 due jobs drain completely through repeated fetches and acks: each delivered once,
/// nothing left. Uses fetch batches of 10,000 (past Lua's `unpack` limit of ~8,000).
pub async fn drain_200k_due_jobs<H: Harness>(h: &H) {
    const N: usize = 200_000;
    const BATCH: usize = 10_000;
    let c = h.client_with(|b| b.bulk_chunk(5000)).await.unwrap();
    let t = c.topic("drain.big").unwrap();
    let q = queue("drain.big");
    let started = Instant::now();
    let payload = raw(7);
    let jobs: Vec<_> = (0..N)
        .map(|_| JobSpec::new(payload.clone()).delay(ms(50)))
        .collect();
    let out = t.enqueue_bulk(jobs).await.unwrap();
    assert!(out.iter().all(|e| e.outcome == EnqueueOutcome::Created));
    let enqueued_in = started.elapsed();
    let last_due = info(&t, out[N - 1].key.as_str()).await.due_ms;
    until_store_time(h, last_due).await;
    let st = t.stats().await.unwrap();
    assert_eq!(st.scheduled as usize, N, "{st:?}");

    let drained = Instant::now();
    let mut seen: HashSet<JobKey> = HashSet::with_capacity(N);
    let request = FetchRequest {
        max_jobs: BATCH,
        promote_batch: BATCH,
        ..req()
    };
    let mut fetches = 0;
    for _ in 0..(N / BATCH) * 4 {
        let reply = fetch(h, &q, &request).await;
        fetches += 1;
        assert!(reply.jobs.len() <= BATCH);
        let leases: Vec<_> = reply.jobs.iter().map(dq::store::lease_of).collect();
        if !leases.is_empty() {
            let acks = h.store().ack(&q, &leases).await.unwrap();
            assert!(acks.iter().all(|a| *a == AckOutcome::Acked));
        }
        for d in reply.jobs {
            assert_not_early(&d);
            assert!(seen.insert(d.key.clone()), "{} delivered twice", d.key);
        }
        if reply.next_in.is_none() {
            break;
        }
    }
    eprintln!(
        "drain_200k: enqueued in {enqueued_in:?}, drained in {:?} ({fetches} fetches)",
        drained.elapsed()
    );
    assert_eq!(seen.len(), N, "not every job was delivered");
    let st = t.stats().await.unwrap();
    assert_eq!(
        (st.scheduled, st.ready, st.active, st.enqueued, st.succeeded),
        (0, 0, 0, N as u64, N as u64),
        "{st:?}"
    );
    h.assert_no_leftovers().await;
}

// ---------------------------------------------------------------------------------------------
// Leases and tokens

/// A lease that expires is recovered by the next fetch as a failed attempt ("lease expired"),
/// retried per `lease_expiry_retries`, and after the last attempt the job is dead.
pub async fn expired_lease_is_a_failed_attempt<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("lease.expiry").unwrap();
    let q = queue("lease.expiry");
    let r = FetchRequest {
        lease: ms(100),
        lease_expiry_retries: vec![ms(0), ms(0)],
        ..req()
    };
    t.enqueue(raw(1)).key("k").await.unwrap();
    let mut prev = fetch_one(h, &q, &r).await;
    assert_eq!(
        (prev.attempt, prev.lease_deadline_ms),
        (1, prev.leased_ms + 100)
    );
    for attempt in 2..=3 {
        let d = fetch_one(h, &q, &r).await;
        assert_eq!((d.key.as_str(), d.attempt), ("k", attempt));
        assert!(
            d.leased_ms > prev.lease_deadline_ms,
            "lease recovered at {} before its deadline {}",
            d.leased_ms,
            prev.lease_deadline_ms
        );
        assert_ne!(d.token, prev.token);
        let i = info(&t, "k").await;
        assert_eq!(i.history.len() as u32, attempt - 1);
        let last = i.history.last().unwrap();
        assert_eq!(
            (last.attempt, last.outcome, last.error.as_str()),
            (attempt - 1, AttemptOutcome::LeaseExpired, "lease expired")
        );
        assert!(last.at_ms > prev.lease_deadline_ms);
        // The old delivery is fenced off.
        let stale = (prev.key.clone(), prev.token);
        assert_eq!(
            h.store()
                .ack(&q, std::slice::from_ref(&stale))
                .await
                .unwrap(),
            [AckOutcome::Stale]
        );
        assert!(matches!(
            fail(h, &prev, FailAction::Retry(ms(0)), "late").await,
            Err(Error::StaleToken { .. })
        ));
        assert_eq!(
            h.store().extend(&q, &[stale], LONG_LEASE).await.unwrap(),
            [false]
        );
        prev = d;
    }
    let reply = dq_testkit::eventually_some("the last lease expires", WAIT, || async {
        let reply = fetch(h, &q, &r).await;
        assert!(reply.jobs.is_empty(), "{reply:?}");
        (!reply.buried.is_empty()).then_some(reply)
    })
    .await;
    assert_eq!(reply.buried, [jk("k")]);
    let i = info(&t, "k").await;
    assert_eq!((i.state, i.attempts), (JobState::Dead, 3));
    assert!(i.died_ms.unwrap() > prev.lease_deadline_ms);
    let h3: Vec<_> = i
        .history
        .iter()
        .map(|a| (a.attempt, a.outcome, a.error.as_str()))
        .collect();
    assert_eq!(
        h3,
        (1..=3)
            .map(|a| (a, AttemptOutcome::LeaseExpired, "lease expired"))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        h.store()
            .ack(&q, &[dq::store::lease_of(&prev)])
            .await
            .unwrap(),
        [AckOutcome::Stale]
    );
    let st = t.stats().await.unwrap();
    assert_eq!(
        (st.expired, st.retried, st.buried, st.dead, st.active),
        (3, 2, 1, 1, 0),
        "{st:?}"
    );
}

/// Extending a lease keeps the job past its first deadline; a stale or unknown lease is not
/// extended.
pub async fn extend_keeps_the_lease<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("lease.extend").unwrap();
    let q = queue("lease.extend");
    let r = FetchRequest {
        lease: ms(100),
        ..req()
    };
    t.enqueue(raw(1)).key("k").await.unwrap();
    let d = fetch_one(h, &q, &r).await;
    let before = now(h).await;
    let out = h
        .store()
        .extend(
            &q,
            &[
                dq::store::lease_of(&d),
                (d.key.clone(), d.token + 1),
                (jk("missing"), d.token),
            ],
            LONG_LEASE,
        )
        .await
        .unwrap();
    assert_eq!(out, [true, false, false]);
    let deadline = info(&t, "k").await.lease_deadline_ms.unwrap();
    assert!(deadline >= before + 30_000, "{deadline}");

    until_store_time(h, d.lease_deadline_ms + 20).await;
    let reply = fetch(h, &q, &r).await;
    assert!(
        reply.jobs.is_empty() && reply.buried.is_empty(),
        "{reply:?}"
    );
    let i = info(&t, "k").await;
    assert_eq!((i.state, i.attempts), (JobState::Active, 1));
    assert_eq!(t.stats().await.unwrap().expired, 0);
    ack_all(h, &q, &[d]).await;
}

/// Ack, fail, extend and release with a stale token are refused and change nothing; a repeated
/// ack is harmless; a batch ack reports each job on its own.
pub async fn stale_tokens_change_nothing<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("tokens").unwrap();
    let q = queue("tokens");
    t.enqueue(raw(1)).key("k").await.unwrap();
    let d1 = fetch_one(h, &q, &req()).await;
    assert_eq!(
        h.store()
            .release(&q, &[dq::store::lease_of(&d1)])
            .await
            .unwrap(),
        [true]
    );
    let d2 = fetch_one(h, &q, &req()).await;
    assert_eq!((d2.key.as_str(), d2.attempt), ("k", 1));
    assert_ne!(d1.token, d2.token);

    let snapshot = info(&t, "k").await;
    let stale = dq::store::lease_of(&d1);
    assert_eq!(
        h.store()
            .ack(&q, std::slice::from_ref(&stale))
            .await
            .unwrap(),
        [AckOutcome::Stale]
    );
    for action in [
        FailAction::Retry(ms(0)),
        FailAction::Defer(ms(0)),
        FailAction::Bury,
    ] {
        match fail(h, &d1, action, "stale").await {
            Err(Error::StaleToken { key }) => assert_eq!(key, "k"),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        h.store()
            .extend(&q, std::slice::from_ref(&stale), HOUR)
            .await
            .unwrap(),
        [false]
    );
    assert_eq!(h.store().release(&q, &[stale]).await.unwrap(), [false]);
    let i = info(&t, "k").await;
    assert_eq!(
        (
            i.state,
            i.attempts,
            i.due_ms,
            i.lease_deadline_ms,
            i.died_ms
        ),
        (
            snapshot.state,
            snapshot.attempts,
            snapshot.due_ms,
            snapshot.lease_deadline_ms,
            snapshot.died_ms,
        )
    );
    assert!(i.history.is_empty());
    let st = t.stats().await.unwrap();
    assert_eq!(
        (st.active, st.succeeded, st.retried, st.buried),
        (1, 0, 0, 0),
        "{st:?}"
    );

    // The current delivery still owns it; acking twice is harmless.
    let lease = dq::store::lease_of(&d2);
    assert_eq!(
        h.store()
            .ack(&q, std::slice::from_ref(&lease))
            .await
            .unwrap(),
        [AckOutcome::Acked]
    );
    assert_eq!(
        h.store()
            .ack(&q, std::slice::from_ref(&lease))
            .await
            .unwrap(),
        [AckOutcome::Gone]
    );
    assert_eq!(
        fail(h, &d2, FailAction::Retry(ms(0)), "late")
            .await
            .unwrap(),
        FailOutcome::Gone
    );
    assert_eq!(
        h.store()
            .extend(&q, std::slice::from_ref(&lease), HOUR)
            .await
            .unwrap(),
        [false]
    );
    assert_eq!(h.store().release(&q, &[lease]).await.unwrap(), [false]);

    // A batch: acked, stale and gone side by side.
    t.enqueue(raw(1)).key("x").await.unwrap();
    t.enqueue(raw(1)).key("y").await.unwrap();
    let jobs = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&jobs), ["x", "y"]);
    let out = h
        .store()
        .ack(
            &q,
            &[
                dq::store::lease_of(&jobs[0]),
                (jobs[1].key.clone(), jobs[1].token ^ 0xFFFF),
                (jk("never"), 1),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        out,
        [AckOutcome::Acked, AckOutcome::Stale, AckOutcome::Gone]
    );
    assert_eq!(info(&t, "y").await.state, JobState::Active);
    ack_all(h, &q, &jobs[1..]).await;
    assert_eq!(t.stats().await.unwrap().succeeded, 3);
}

/// Release gives the attempt back and puts the job at the front of ready.
pub async fn release_gives_the_attempt_back_at_the_front<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("release").unwrap();
    let q = queue("release");
    for k in ["a", "b", "c"] {
        t.enqueue(raw(1)).key(k).await.unwrap();
    }
    let a = fetch_one(h, &q, &req()).await;
    assert_eq!((a.key.as_str(), a.attempt), ("a", 1));
    assert_eq!(
        h.store()
            .release(&q, &[dq::store::lease_of(&a)])
            .await
            .unwrap(),
        [true]
    );
    let i = info(&t, "a").await;
    assert_eq!((i.state, i.attempts), (JobState::Ready, 0));
    assert!(i.history.is_empty(), "a release is not a failure");
    let st = t.stats().await.unwrap();
    assert_eq!((st.ready, st.active, st.retried), (3, 0, 0), "{st:?}");

    let jobs = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&jobs), ["a", "b", "c"], "released job first");
    assert!(jobs.iter().all(|d| d.attempt == 1));

    // After a failed attempt, a release keeps the earlier attempt counted.
    let a = &jobs[0];
    fail(h, a, FailAction::Retry(ms(0)), "once").await.unwrap();
    ack_all(h, &q, &jobs[1..]).await;
    let a2 = fetch_one(h, &q, &req()).await;
    assert_eq!(a2.attempt, 2);
    h.store()
        .release(&q, &[dq::store::lease_of(&a2)])
        .await
        .unwrap();
    assert_eq!(info(&t, "a").await.attempts, 1);
    let a3 = fetch_one(h, &q, &req()).await;
    assert_eq!((a3.key.as_str(), a3.attempt), ("a", 2));
    ack_all(h, &q, &[a3]).await;
}

// ---------------------------------------------------------------------------------------------
// Retries, defer, dead queue

/// fail → retry at now + delay → ready → … → dead after the last tier, every error in history.
pub async fn retry_schedule_until_dead<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("webhook").unwrap();
    let q = queue("webhook");
    let policy = RetryPolicy::tiered([ms(60), ms(120), ms(180)]).unwrap();
    t.enqueue(raw(1)).key("w").await.unwrap();
    let mut retry_at = 0;
    for attempt in 1..=policy.max_attempts() {
        let d = fetch_one(h, &q, &req()).await;
        assert_eq!((d.key.as_str(), d.attempt), ("w", attempt));
        assert!(d.leased_ms >= retry_at, "retried before its retry time");
        let error = format!("partner answered 50{attempt}");
        match policy.delay_after(attempt) {
            Some(delay) => {
                let before = now(h).await;
                let out = fail(h, &d, FailAction::Retry(delay), &error).await.unwrap();
                let after = now(h).await;
                let FailOutcome::Retrying { at_ms } = out else {
                    panic!("{out:?}")
                };
                let delay = delay.as_millis() as u64;
                assert!((before + delay..=after + delay).contains(&at_ms), "{at_ms}");
                let i = info(&t, "w").await;
                assert_eq!(
                    (i.state, i.due_ms, i.attempts),
                    (JobState::Retry, at_ms, attempt)
                );
                assert_eq!(t.stats().await.unwrap().retry, 1);
                retry_at = at_ms;
            }
            None => {
                let out = fail(h, &d, FailAction::Bury, &error).await.unwrap();
                assert_eq!(out, FailOutcome::Buried { trimmed: 0 });
            }
        }
    }
    let i = info(&t, "w").await;
    assert_eq!((i.state, i.attempts), (JobState::Dead, 4));
    let history: Vec<_> = i
        .history
        .iter()
        .map(|a| (a.attempt, a.outcome, a.error.clone()))
        .collect();
    assert_eq!(
        history,
        [
            (
                1,
                AttemptOutcome::Failed,
                "partner answered 501".to_string()
            ),
            (
                2,
                AttemptOutcome::Failed,
                "partner answered 502".to_string()
            ),
            (
                3,
                AttemptOutcome::Failed,
                "partner answered 503".to_string()
            ),
            (
                4,
                AttemptOutcome::Buried,
                "partner answered 504".to_string()
            ),
        ]
    );
    assert!(i.history.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
    let dead = t.dead_jobs(0, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].history.len(), 4);
    let st = t.stats().await.unwrap();
    assert_eq!(
        (st.retried, st.buried, st.dead, st.retry),
        (3, 1, 1, 0),
        "{st:?}"
    );
}

/// `FailAction::Defer` runs the job again later without spending an attempt.
pub async fn defer_spends_no_attempt<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("defer").unwrap();
    let q = queue("defer");
    t.enqueue(raw(1)).key("g").await.unwrap();
    let d1 = fetch_one(h, &q, &req()).await;
    assert_eq!(d1.attempt, 1);
    let at = match fail(h, &d1, FailAction::Defer(ms(150)), "not yet")
        .await
        .unwrap()
    {
        FailOutcome::Retrying { at_ms } => at_ms,
        other => panic!("{other:?}"),
    };
    let i = info(&t, "g").await;
    assert_eq!(
        (i.state, i.attempts, i.due_ms),
        (JobState::Scheduled, 0, at)
    );
    assert_eq!(i.history.len(), 1);
    assert_eq!(i.history[0].outcome, AttemptOutcome::Deferred);
    assert_eq!(i.history[0].error, "not yet");
    let st = t.stats().await.unwrap();
    assert_eq!((st.retried, st.scheduled, st.retry), (0, 1, 0), "{st:?}");

    let d2 = fetch_one(h, &q, &req()).await;
    assert!(d2.leased_ms >= at);
    assert_eq!(d2.attempt, 1, "a deferral spends no attempt");
    // Deferred by zero: ready at once, still no attempt spent.
    fail(h, &d2, FailAction::Defer(ms(0)), "not yet")
        .await
        .unwrap();
    assert_eq!(info(&t, "g").await.state, JobState::Ready);
    let d3 = fetch_one(h, &q, &req()).await;
    assert_eq!(d3.attempt, 1);
    // A real failure counts.
    fail(h, &d3, FailAction::Retry(ms(0)), "boom")
        .await
        .unwrap();
    let d4 = fetch_one(h, &q, &req()).await;
    assert_eq!(d4.attempt, 2);
    ack_all(h, &q, &[d4]).await;
}

/// Enqueues `keys` due now, fetches them, and buries them one after the other with `limits`;
/// returns each burial's outcome.
async fn bury_all<H: Harness>(
    h: &H,
    t: &TopicClient,
    q: &Queue,
    keys: &[&str],
    limits: DeadLimits,
) -> Vec<FailOutcome> {
    for k in keys {
        t.enqueue(raw(1)).key(*k).await.unwrap();
    }
    let jobs = fetch(h, q, &req_max(keys.len())).await.jobs;
    assert_eq!(keys_of(&jobs), keys);
    let mut out = Vec::new();
    for (i, d) in jobs.iter().enumerate() {
        out.push(
            h.store()
                .fail(
                    q,
                    &d.key,
                    d.token,
                    &FailAction::Bury,
                    &format!("fatal {i}"),
                    limits,
                )
                .await
                .unwrap(),
        );
    }
    out
}

/// The dead queue lists oldest first (paged), requeues with attempts reset (history kept),
/// and purges by name, by age and all at once.
pub async fn dead_queue_list_requeue_purge<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("dead.ops").unwrap();
    let q = queue("dead.ops");
    let keys = ["k0", "k1", "k2", "k3", "k4"];
    bury_all(h, &t, &q, &keys, DeadLimits::default()).await;

    let dead = h.store().dead(&q, 0, 10).await.unwrap();
    assert_eq!(
        dead.iter().map(|j| j.key.to_string()).collect::<Vec<_>>(),
        keys
    );
    for (i, j) in dead.iter().enumerate() {
        assert_eq!((j.state, j.attempts), (JobState::Dead, 1));
        assert_eq!(j.history.len(), 1);
        assert_eq!(j.history[0].error, format!("fatal {i}"));
        assert_eq!(j.history[0].outcome, AttemptOutcome::Buried);
        assert!(j.died_ms.is_some());
    }
    let died: Vec<u64> = dead.iter().map(|j| j.died_ms.unwrap()).collect();
    assert!(died.windows(2).all(|w| w[0] <= w[1]));
    let page = h.store().dead(&q, 1, 2).await.unwrap();
    assert_eq!(
        page.iter().map(|j| j.key.as_str()).collect::<Vec<_>>(),
        ["k1", "k2"]
    );
    let page = t.dead_jobs(3, 10).await.unwrap();
    assert_eq!(
        page.iter().map(|j| j.key.as_str()).collect::<Vec<_>>(),
        ["k3", "k4"]
    );
    assert!(h.store().dead(&q, 5, 10).await.unwrap().is_empty());

    // Requeue: back to ready, attempts reset, history kept; only dead jobs move.
    assert_eq!(t.requeue_dead(&["k1", "k3", "missing"]).await.unwrap(), 2);
    assert_eq!(t.requeue_dead(&["k1"]).await.unwrap(), 0);
    let i = info(&t, "k1").await;
    assert_eq!(
        (i.state, i.attempts, i.history.len()),
        (JobState::Ready, 0, 1)
    );
    let st = t.stats().await.unwrap();
    assert_eq!((st.dead, st.ready), (3, 2), "{st:?}");
    let jobs = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&jobs), ["k1", "k3"]);
    assert!(jobs.iter().all(|d| d.attempt == 1));
    ack_all(h, &q, &jobs).await;

    // Purge by name: only dead jobs, each counted once however often it is named.
    assert_eq!(t.purge_dead(&["k0", "k0", "k1", "nope"]).await.unwrap(), 1);
    assert!(t.job("k0").await.unwrap().is_none());
    assert_eq!(t.purge_all_dead().await.unwrap(), 2);
    assert_eq!(t.stats().await.unwrap().dead, 0);
    for k in keys {
        assert!(t.job(k).await.unwrap().is_none(), "{k}");
    }

    // Purge the oldest N.
    bury_all(h, &t, &q, &["m0", "m1", "m2"], DeadLimits::default()).await;
    assert_eq!(h.store().purge_dead(&q, &[], 2).await.unwrap(), 2);
    let left = h.store().dead(&q, 0, 10).await.unwrap();
    assert_eq!(
        left.iter().map(|j| j.key.as_str()).collect::<Vec<_>>(),
        ["m2"]
    );
    assert_eq!(h.store().purge_dead(&q, &[], 10).await.unwrap(), 1);
    assert_eq!(h.store().purge_dead(&q, &[], 10).await.unwrap(), 0);
    let st = t.stats().await.unwrap();
    assert_eq!(
        (st.buried, st.trimmed),
        (8, 0),
        "a purge is not a trim: {st:?}"
    );
}

/// The dead queue's cap trims the oldest jobs, and counts them in `trimmed`.
pub async fn dead_queue_cap_trims_oldest<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("dead.cap").unwrap();
    let q = queue("dead.cap");
    let limits = DeadLimits {
        cap: 3,
        retention: HOUR,
    };
    let keys = ["j0", "j1", "j2", "j3", "j4", "j5"];
    let out = bury_all(h, &t, &q, &keys, limits).await;
    assert_eq!(
        out,
        [0, 0, 0, 1, 1, 1].map(|trimmed| FailOutcome::Buried { trimmed })
    );
    let dead = h.store().dead(&q, 0, 10).await.unwrap();
    assert_eq!(
        dead.iter().map(|j| j.key.as_str()).collect::<Vec<_>>(),
        ["j3", "j4", "j5"]
    );
    for k in ["j0", "j1", "j2"] {
        assert!(t.job(k).await.unwrap().is_none(), "{k} kept past the cap");
    }
    let st = t.stats().await.unwrap();
    assert_eq!((st.dead, st.buried, st.trimmed), (3, 6, 3), "{st:?}");

    // A lease-expiry burial respects the cap too.
    t.enqueue(raw(1)).key("late").await.unwrap();
    let r = FetchRequest {
        lease: ms(50),
        dead_limits: limits,
        ..req()
    };
    fetch_one(h, &q, &r).await;
    let reply = dq_testkit::eventually_some("the lease expires", WAIT, || async {
        let reply = fetch(h, &q, &r).await;
        (!reply.buried.is_empty()).then_some(reply)
    })
    .await;
    assert_eq!((reply.buried.len(), reply.trimmed), (1, 1));
    let st = t.stats().await.unwrap();
    assert_eq!((st.dead, st.trimmed), (3, 4), "{st:?}");
    assert!(t.job("j3").await.unwrap().is_none());
}

/// Dead jobs older than the retention are trimmed (on the next burial or an idle fetch), and
/// counted in `trimmed`.
pub async fn dead_queue_retention_trims_old<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("dead.retention").unwrap();
    let q = queue("dead.retention");
    let limits = DeadLimits {
        cap: 1000,
        retention: ms(150),
    };
    bury_all(h, &t, &q, &["old"], limits).await;
    let died = info(&t, "old").await.died_ms.unwrap();
    until_store_time(h, died + 150 + 1).await;
    let out = bury_all(h, &t, &q, &["new"], limits).await;
    assert_eq!(out, [FailOutcome::Buried { trimmed: 1 }]);
    assert!(t.job("old").await.unwrap().is_none());
    assert_eq!(info(&t, "new").await.state, JobState::Dead);
    assert_eq!(t.stats().await.unwrap().trimmed, 1);

    // An idle fetch trims as well.
    let died = info(&t, "new").await.died_ms.unwrap();
    until_store_time(h, died + 150 + 1).await;
    let reply = fetch(
        h,
        &q,
        &FetchRequest {
            dead_limits: limits,
            ..req()
        },
    )
    .await;
    assert!(reply.jobs.is_empty());
    assert_eq!(reply.trimmed, 1);
    let st = t.stats().await.unwrap();
    assert_eq!((st.dead, st.trimmed, st.buried), (0, 2, 2), "{st:?}");
    h.assert_no_leftovers().await;
}

// ---------------------------------------------------------------------------------------------
// Bad input

fn assert_invalid_topic<T: std::fmt::Debug>(r: dq::Result<T>, name: &str) {
    match r {
        Err(Error::InvalidTopic { name: n, .. }) => assert_eq!(n, name),
        other => panic!("expected InvalidTopic for {name:?}, got {other:?}"),
    }
}

fn assert_invalid_key<T: std::fmt::Debug>(r: dq::Result<T>, key: &str) {
    match r {
        Err(Error::InvalidKey { key: k, .. }) => assert_eq!(k, key),
        other => panic!("expected InvalidKey for {key:?}, got {other:?}"),
    }
}

/// Invalid topic names and job keys are typed errors, raised before anything is written.
pub async fn invalid_topics_and_keys_write_nothing<H: Harness>(h: &H) {
    let c = h.client().await;
    let long_topic = "t".repeat(129);
    for name in [
        "",
        "a:b",
        "{a}",
        "a}",
        "a b",
        "a\n",
        "é",
        "a#0",
        "*",
        &long_topic,
    ] {
        assert_invalid_topic(c.topic(name), name);
        assert_invalid_topic(h.client_with(|b| b.partitions(name, 2)).await, name);
        assert_invalid_topic(
            h.client_with(|b| b.dead_limits(name, DeadLimits::default()))
                .await,
            name,
        );
    }
    let bad = bad_topic::TOPIC;
    assert_invalid_topic(c.enqueue::<bad_topic>(1).key("k").await, bad);
    assert_invalid_topic(
        c.enqueue_bulk::<bad_topic>([JobSpec::new(1), JobSpec::new(2)])
            .await,
        bad,
    );
    assert_invalid_topic(c.cancel::<bad_topic>("k").await, bad);
    assert_invalid_topic(c.reschedule::<bad_topic>("k", NewDue::Shift(1)).await, bad);
    assert_invalid_topic(c.job::<bad_topic>("k").await, bad);
    assert_invalid_topic(c.stats::<bad_topic>().await, bad);

    let t = c.topic("bad.keys").unwrap();
    let long_key = "k".repeat(257);
    for key in [
        "",
        " ",
        "a b",
        "a\tb",
        "a\nb",
        "a\0b",
        "\u{7f}",
        "a\u{2028}b",
        &long_key,
    ] {
        assert_invalid_key(t.enqueue(raw(1)).key(key).await, key);
        assert_invalid_key(c.enqueue::<close_order>(order(1)).key(key).await, key);
        assert_invalid_key(t.cancel(key).await, key);
        assert_invalid_key(t.reschedule(key, NewDue::After(ms(1))).await, key);
        assert_invalid_key(t.job(key).await, key);
        assert_invalid_key(t.requeue_dead(&[key]).await, key);
        assert_invalid_key(t.purge_dead(&["ok", key]).await, key);
    }
    // Not even a namespace check or a counter was written.
    h.assert_untouched().await;
    // The limits themselves are accepted.
    let ok = "k".repeat(256);
    let e = t.enqueue(raw(1)).key(&ok).delay(HOUR).await.unwrap();
    assert_eq!(e.outcome, EnqueueOutcome::Created);
    c.topic(&"t".repeat(128)).unwrap();
}

/// A payload over the limit is `PayloadTooLarge`, raw or typed, single or bulk; nothing is
/// written. A payload exactly at the limit is accepted.
pub async fn oversized_payloads_are_refused<H: Harness>(h: &H) {
    let c = h.client_with(|b| b.max_payload(64)).await.unwrap();
    let t = c.topic("payload.size").unwrap();
    match t.enqueue(vec![0xc0; 65]).key("raw").await {
        Err(Error::PayloadTooLarge {
            size: 65,
            limit: 64,
        }) => {}
        other => panic!("{other:?}"),
    }
    let big = Order {
        id: 1,
        note: "x".repeat(100),
    };
    match c.enqueue::<close_order>(big.clone()).key("typed").await {
        Err(Error::PayloadTooLarge { size, limit: 64 }) => assert!(size > 100),
        other => panic!("{other:?}"),
    }
    match c
        .enqueue_bulk::<close_order>([JobSpec::new(order(1)), JobSpec::new(big)])
        .await
    {
        Err(Error::BulkItem {
            index: 1, source, ..
        }) if matches!(*source, Error::PayloadTooLarge { limit: 64, .. }) => {}
        other => panic!("{other:?}"),
    }
    h.assert_untouched().await;
    let e = t.enqueue(vec![0xc0; 64]).key("at-limit").await.unwrap();
    assert_eq!(e.outcome, EnqueueOutcome::Created);
    assert_eq!(info(&t, "at-limit").await.payload.len(), 64);
}

/// A bulk enqueue with one bad item — a bad key, an oversized payload — writes nothing, even
/// when its good items span partitions and chunks, and its error names the item (index, key).
pub async fn bulk_with_one_bad_item_writes_nothing<H: Harness>(h: &H) {
    let c = h
        .client_with(|b| b.partitions("bulk.bad", 4).bulk_chunk(3).max_payload(64))
        .await
        .unwrap();
    let t = c.topic("bulk.bad").unwrap();
    let good = || -> Vec<JobSpec<Vec<u8>>> {
        (0..20)
            .map(|i| JobSpec::new(raw(i)).key(format!("job-{i}")))
            .collect()
    };
    let mut bulk = good();
    bulk[13] = JobSpec::new(raw(13)).key("job 13");
    match t.enqueue_bulk(bulk).await {
        Err(Error::BulkItem { index, key, source }) => {
            assert_eq!((index, key.as_deref()), (13, Some("job 13")));
            assert_invalid_key::<()>(Err(*source), "job 13");
        }
        other => panic!("{other:?}"),
    }
    let mut bulk = good();
    bulk[17] = JobSpec::new(vec![0xc0; 65]).key("job-17");
    let err = t.enqueue_bulk(bulk).await.unwrap_err();
    assert!(
        matches!(
            &err,
            Error::BulkItem { index: 17, key: Some(k), source }
                if k == "job-17" && matches!(**source, Error::PayloadTooLarge { size: 65, .. })
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "bulk item 17 (key \"job-17\"): payload of 65 bytes exceeds the limit of 64 bytes"
    );
    let mut typed: Vec<_> = (0..20).map(|i| JobSpec::new(order(i))).collect();
    typed[19].payload.note = "y".repeat(100);
    match c.enqueue_bulk::<close_order>(typed).await {
        Err(Error::BulkItem {
            index: 19,
            key: None,
            source,
        }) => assert!(
            matches!(*source, Error::PayloadTooLarge { .. }),
            "{source:?}"
        ),
        other => panic!("{other:?}"),
    }
    h.assert_untouched().await;

    let out = t.enqueue_bulk(good()).await.unwrap();
    assert_eq!(out.len(), 20);
    for (i, e) in out.iter().enumerate() {
        assert_eq!(
            (e.key.as_str(), e.outcome),
            (format!("job-{i}").as_str(), EnqueueOutcome::Created)
        );
    }
    let partitions: HashSet<u16> = out.iter().map(|e| e.key.partition(4)).collect();
    assert!(partitions.len() > 1, "the bulk should span partitions");
    let st = t.stats().await.unwrap();
    assert_eq!((st.ready, st.enqueued), (20, 20), "{st:?}");
}

/// One hostile topic name: accepted exactly when it follows the documented rule, and then
/// usable; otherwise `InvalidTopic` naming it, from every entry point.
pub async fn hostile_topic<H: Harness>(h: &H, name: &str) {
    let c = h.client().await;
    let valid = topic_is_valid(name);
    match c.topic(name) {
        Ok(t) => {
            assert!(valid, "accepted invalid topic {name:?}");
            assert_eq!(t.topic().as_str(), name);
            let e = t.enqueue(raw(1)).key("k").delay(HOUR).await.unwrap();
            assert_eq!(e.outcome, EnqueueOutcome::Created);
            assert_eq!(t.cancel("k").await.unwrap(), CancelOutcome::Cancelled);
        }
        Err(Error::InvalidTopic { name: n, .. }) => {
            assert!(!valid, "refused valid topic {name:?}");
            assert_eq!(n, name);
            assert_invalid_topic(h.client_with(|b| b.partitions(name, 2)).await, name);
        }
        Err(e) => panic!("topic {name:?}: unexpected error {e}"),
    }
}

/// One hostile job key: accepted exactly when it follows the documented rule, and then it
/// survives every operation unchanged; otherwise `InvalidKey` naming it, from every entry point.
pub async fn hostile_key<H: Harness>(h: &H, key: &str) {
    let c = h.client().await;
    let t = c.topic("hostile.keys").unwrap();
    let q = queue("hostile.keys");
    let valid = key_is_valid(key);
    match t.enqueue(raw(1)).key(key).delay(HOUR).await {
        Ok(e) => {
            assert!(valid, "accepted invalid key {key:?}");
            assert_eq!((e.key.as_str(), e.outcome), (key, EnqueueOutcome::Created));
            let i = info(&t, key).await;
            assert_eq!((i.key.as_str(), i.state), (key, JobState::Scheduled));
            assert!(matches!(
                t.reschedule(key, NewDue::After(HOUR)).await.unwrap(),
                RescheduleOutcome::Rescheduled { .. }
            ));
            let e = t.enqueue(raw(2)).key(key).replace().await.unwrap();
            assert_eq!(e.outcome, EnqueueOutcome::Replaced);
            let jobs = fetch(h, &q, &req()).await.jobs;
            assert_eq!(keys_of(&jobs), [key]);
            assert_eq!(unraw(&jobs[0].payload), 2);
            ack_all(h, &q, &jobs).await;
            assert_eq!(t.cancel(key).await.unwrap(), CancelOutcome::NotFound);
            assert!(t.job(key).await.unwrap().is_none());
        }
        Err(Error::InvalidKey { key: k, .. }) => {
            assert!(!valid, "refused valid key {key:?}");
            assert_eq!(k, key);
            assert_invalid_key(t.cancel(key).await, key);
            assert_invalid_key(t.job(key).await, key);
            assert_invalid_key(t.reschedule(key, NewDue::Shift(1)).await, key);
            match t.enqueue_bulk(vec![JobSpec::new(raw(1)).key(key)]).await {
                Err(Error::BulkItem {
                    index: 0,
                    key: Some(k),
                    source,
                }) if k == key => assert_invalid_key::<()>(Err(*source), key),
                other => panic!("expected BulkItem 0 for {key:?}, got {other:?}"),
            }
        }
        Err(e) => panic!("key {key:?}: unexpected error {e}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Stats, wake-ups, leftovers

/// Counts per state and every counter after a mixed workload.
pub async fn stats_count_states_and_counters<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("stats.mixed").unwrap();
    let q = queue("stats.mixed");
    assert_eq!(t.stats().await.unwrap(), dq::TopicStats::default());

    for k in ["a1", "a2", "a3", "a4"] {
        t.enqueue(raw(1)).key(k).await.unwrap();
    }
    let jobs = fetch(h, &q, &req_max(4)).await.jobs;
    assert_eq!(jobs.len(), 4);
    ack_all(h, &q, &jobs[..1]).await;
    fail(h, &jobs[1], FailAction::Retry(HOUR), "later")
        .await
        .unwrap();
    fail(h, &jobs[2], FailAction::Bury, "never").await.unwrap();
    // jobs[3] stays active.

    // One lease expires and goes to retry.
    t.enqueue(raw(1)).key("e1").await.unwrap();
    let r = FetchRequest {
        lease: ms(50),
        lease_expiry_retries: vec![HOUR],
        ..req()
    };
    let e = fetch_one(h, &q, &r).await;
    until_store_time(h, e.lease_deadline_ms + 1).await;
    let reply = fetch(h, &q, &FetchRequest { max_jobs: 0, ..r }).await;
    assert!(reply.jobs.is_empty() && reply.buried.is_empty());
    assert_eq!(info(&t, "e1").await.state, JobState::Retry);

    for k in ["s1", "s2", "c1"] {
        t.enqueue(raw(1)).key(k).delay(HOUR).await.unwrap();
    }
    t.cancel("c1").await.unwrap();
    for k in ["r1", "r2", "r3"] {
        t.enqueue(raw(1)).key(k).await.unwrap();
    }
    t.enqueue(raw(2))
        .key("s2")
        .replace()
        .delay(HOUR)
        .await
        .unwrap();

    let st = t.stats().await.unwrap();
    let want = dq::TopicStats {
        scheduled: 2,
        ready: 3,
        active: 1,
        retry: 2,
        dead: 1,
        enqueued: 12,
        succeeded: 1,
        retried: 2,
        buried: 1,
        expired: 1,
        cancelled: 1,
        trimmed: 0,
        oldest_overdue_ms: st.oldest_overdue_ms,
        overdue: 0,
    };
    assert_eq!(st, want);
    let c_stats = c.stats::<close_order>().await.unwrap();
    assert_eq!(c_stats, dq::TopicStats::default(), "topics are separate");
}

/// `oldest_overdue_ms` is how long the most overdue waiting job has been due: a ready job,
/// or a due job not yet promoted (which `overdue` counts); zero when nothing is overdue.
pub async fn stats_oldest_overdue<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("stats.overdue").unwrap();
    let q = queue("stats.overdue");
    t.enqueue(raw(1)).key("later").delay(HOUR).await.unwrap();
    assert_eq!(t.stats().await.unwrap().oldest_overdue_ms, 0);

    // Due but never promoted (no fetch).
    t.enqueue(raw(1)).key("due").delay(ms(20)).await.unwrap();
    let due = info(&t, "due").await.due_ms;
    until_store_time(h, due + 60).await;
    let before = now(h).await;
    let st = t.stats().await.unwrap();
    let after = now(h).await;
    assert!(
        (before - due..=after - due).contains(&st.oldest_overdue_ms),
        "{st:?} due {due} now {before}..{after}"
    );
    assert_eq!((st.overdue, st.scheduled, st.ready), (1, 2, 0), "{st:?}");

    // Promoted to ready, still not started: the same job, still counted.
    let reply = fetch(h, &q, &req_max(0)).await;
    assert!(reply.jobs.is_empty());
    assert_eq!(info(&t, "due").await.state, JobState::Ready);
    let before = now(h).await;
    let st = t.stats().await.unwrap();
    let after = now(h).await;
    assert!(
        (before - due..=after - due).contains(&st.oldest_overdue_ms),
        "{st:?}"
    );
    assert_eq!((st.overdue, st.scheduled, st.ready), (0, 1, 1), "{st:?}");

    // Started: nothing is overdue any more.
    let jobs = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&jobs), ["due"]);
    let st = t.stats().await.unwrap();
    assert_eq!((st.oldest_overdue_ms, st.overdue), (0, 0), "{st:?}");
    ack_all(h, &q, &jobs).await;
}

/// A wake-up token is left for a job due now and for a job that became the earliest; not for
/// one queued behind an earlier job.
pub async fn wake_tokens_for_due_and_earliest_jobs<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("wake").unwrap();
    let q = queue("wake");
    let mut listener = h.store().wake_listener(&q).await.unwrap();
    t.enqueue(raw(1)).key("later").delay(HOUR).await.unwrap();
    assert!(listener.wait(ms(1000)).await.unwrap(), "new earliest job");
    t.enqueue(raw(1))
        .key("even-later")
        .delay(2 * HOUR)
        .await
        .unwrap();
    assert!(!listener.wait(ms(20)).await.unwrap(), "not the earliest");
    t.enqueue(raw(1)).key("now").await.unwrap();
    assert!(listener.wait(ms(1000)).await.unwrap(), "due now");
    let jobs = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&jobs), ["now"]);
    ack_all(h, &q, &jobs).await;
}

/// After a mixed workload over two partitions in which every job ends — acked, cancelled, or
/// dead and purged — no job data is left.
pub async fn no_leftovers_after_mixed_workload<H: Harness>(h: &H) {
    let c = h.client_with(|b| b.partitions("mixed", 2)).await.unwrap();
    let t = c.topic("mixed").unwrap();
    let queues = [
        Queue::new(Topic::new("mixed").unwrap(), 0),
        Queue::new(Topic::new("mixed").unwrap(), 1),
    ];
    let jobs: Vec<_> = (0..40)
        .map(|i| {
            let j = JobSpec::new(raw(i)).key(format!("m{i}"));
            if i.is_multiple_of(3) {
                j.delay(ms(100))
            } else {
                j
            }
        })
        .collect();
    t.enqueue_bulk(jobs).await.unwrap();
    // Cancel some ready and some scheduled ones (ready ones leave stale hints behind), replace
    // and reschedule others.
    for i in [1, 2, 3, 6, 10] {
        assert_eq!(
            t.cancel(&format!("m{i}")).await.unwrap(),
            CancelOutcome::Cancelled
        );
    }
    t.enqueue(raw(99))
        .key("m4")
        .replace()
        .delay(ms(50))
        .await
        .unwrap();
    t.reschedule("m5", NewDue::After(ms(80))).await.unwrap();
    t.reschedule("m9", NewDue::Shift(-100)).await.unwrap();

    let mut acked = 0;
    let mut buried = 0;
    let lease_expiry = FetchRequest {
        lease: ms(50),
        lease_expiry_retries: vec![ms(0)],
        ..req()
    };
    let deadline = Instant::now() + WAIT;
    for q in &queues {
        // Drive the partition until every job has ended: every 7th buried, every 5th fails
        // once, one lease left to expire twice (then dead), the rest acked.
        loop {
            assert!(Instant::now() < deadline, "workload did not finish");
            let reply = fetch(h, q, &lease_expiry).await;
            buried += reply.buried.len();
            for d in &reply.jobs {
                let n = unraw(&d.payload);
                if n == 8 {
                    continue; // its lease expires, twice
                }
                if n.is_multiple_of(7) {
                    fail(h, d, FailAction::Bury, "fatal").await.unwrap();
                    buried += 1;
                } else if n.is_multiple_of(5) && d.attempt == 1 {
                    fail(h, d, FailAction::Retry(ms(30)), "flaky")
                        .await
                        .unwrap();
                } else {
                    let out = h.store().ack(q, &[dq::store::lease_of(d)]).await.unwrap();
                    assert_eq!(out, [AckOutcome::Acked], "{d:?}");
                    acked += 1;
                }
            }
            if reply.jobs.is_empty() && reply.next_in.is_none() {
                break;
            }
            if reply.jobs.is_empty() {
                let wait = reply.next_in.unwrap().min(ms(20));
                let target = now(h).await + wait.as_millis() as u64;
                until_store_time(h, target.saturating_sub(1)).await;
            }
        }
    }
    // Requeue one dead job and finish it; purge the rest.
    let dead = t.dead_jobs(0, 100).await.unwrap();
    assert_eq!(dead.len(), buried);
    let revived = dead[0].key.to_string();
    assert_eq!(t.requeue_dead(&[revived.as_str()]).await.unwrap(), 1);
    for q in &queues {
        acked += drain_due(h, q).await.len();
    }
    assert_eq!(t.purge_all_dead().await.unwrap() as usize, buried - 1);

    let st = t.stats().await.unwrap();
    assert_eq!(
        (st.scheduled, st.ready, st.active, st.retry, st.dead),
        (0, 0, 0, 0, 0),
        "{st:?}"
    );
    assert_eq!(st.cancelled, 5);
    assert_eq!(st.succeeded as usize, acked);
    assert_eq!(acked + buried - 1 + 5, 40, "every job ended exactly once");
    h.assert_no_leftovers().await;
}

/// Several jobs released in one call stand at the front of ready in the order given.
pub async fn release_of_many_keeps_their_order<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("release.many").unwrap();
    let q = queue("release.many");
    for k in ["a", "b", "c", "d"] {
        t.enqueue(raw(1)).key(k).await.unwrap();
    }
    let jobs = fetch(h, &q, &req_max(3)).await.jobs;
    assert_eq!(keys_of(&jobs), ["a", "b", "c"]);
    let leases: Vec<_> = jobs.iter().map(dq::store::lease_of).collect();
    assert_eq!(
        h.store().release(&q, &leases).await.unwrap(),
        [true, true, true]
    );
    let again = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&again), ["a", "b", "c", "d"]);
    ack_all(h, &q, &again).await;
}

/// Due jobs of `scheduled` and `retry` reach ready merged by due time, not set by set.
pub async fn scheduled_and_retry_are_promoted_in_due_order<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("promote.merge").unwrap();
    let q = queue("promote.merge");
    t.enqueue(raw(1)).key("r").await.unwrap();
    let r = fetch_one(h, &q, &req()).await;
    // "r" waits in retry until +100 ms; "s1" is due before it and "s2" after it.
    t.enqueue(raw(1)).key("s1").delay(ms(50)).await.unwrap();
    fail(h, &r, FailAction::Retry(ms(100)), "once")
        .await
        .unwrap();
    t.enqueue(raw(1)).key("s2").delay(ms(150)).await.unwrap();
    let start = now(h).await;
    until_store_time(h, start + 200).await;
    let jobs = fetch(h, &q, &req()).await.jobs;
    assert_eq!(keys_of(&jobs), ["s1", "r", "s2"]);
    ack_all(h, &q, &jobs).await;
}
