//! What the conformance bodies share: time limits, typed jobs, payloads, fetch requests, and
//! the small steps (fetch, ack, fail, wait for the store's clock) the bodies are written in.

use super::*;

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
        retry_policy: RetryPolicy::none(),
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
    let out = h
        .store()
        .ack(q, "", &dq::store::Success::of(&leases))
        .await
        .expect("ack");
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
    fail_with(h, d, action, error, DeadLimits::default()).await
}

/// Fails a delivery with `action` and `error` under `limits`.
pub async fn fail_with<H: Harness>(
    h: &H,
    d: &Delivery,
    action: FailAction,
    error: &str,
    limits: DeadLimits,
) -> dq::Result<FailOutcome> {
    h.store()
        .fail_one(&d.queue, &d.key, d.token, &action, error, limits)
        .await
}

/// One failed attempt on any store, as a `fail_many` of one: what a test that fails a single
/// delivery calls.
#[async_trait::async_trait]
pub trait FailOne: dq::store::Lease {
    /// Records one failed attempt of `key` under `token`; its outcome, or `StaleToken`.
    async fn fail_one(
        &self,
        q: &Queue,
        key: &JobKey,
        token: u64,
        action: &FailAction,
        error: &str,
        limits: DeadLimits,
    ) -> dq::Result<FailOutcome> {
        let failure = dq::store::FailedAttempt {
            key: key.clone(),
            token,
            action: action.clone(),
            error: error.to_owned(),
        };
        let mut out = self.fail_many(q, &[failure], limits).await?;
        assert_eq!(out.len(), 1, "one outcome per failure");
        out.remove(0)
    }
}

impl<S: dq::store::Lease + ?Sized> FailOne for S {}

/// A page of `q`'s dead queue, oldest death first: `limit` jobs after skipping `offset`, read
/// through the store's `list` of `dead`.
pub async fn dead_page<H: Harness>(h: &H, q: &Queue, offset: usize, limit: usize) -> Vec<JobInfo> {
    let chunk = h
        .store()
        .list(
            q,
            JobState::Dead,
            &dq::store::ListFrom::Start,
            offset + limit,
        )
        .await
        .unwrap();
    chunk
        .jobs
        .into_iter()
        .skip(offset)
        .map(|(_, j)| j)
        .collect()
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
