//! The client's own retries of cancel and reschedule, through the TCP fault proxy
//! (`dq_testkit::proxy::FaultProxy`): Redis applies the call, its reply is held, and the
//! connection is cut, so the first try fails although it took effect. A call harmless to
//! repeat (cancel, reschedule `At` / `After`) is retried inside the client and reports what
//! holds; a relative one (`Shift`) is not retried, and shifts once.

use std::future::IntoFuture;
use std::time::{Duration, SystemTime};

use dq::store::unix_ms;
use dq::{CancelOutcome, Client, ENQUEUE_RETRY_WINDOW, NewDue, RescheduleOutcome};
use dq_faults::{FaultPayload, Scenario, WORK_TOPIC, WorkJob};
use dq_testkit::proxy::FaultProxy;
use dq_testkit::{ServerOptions, eventually, eventually_some};

const BIN: &str = env!("CARGO_BIN_EXE_fault-worker");

/// The client's response timeout: long, so that only the cut ends the first try.
const TIMEOUT: Duration = Duration::from_secs(30);
/// The reply delay while the fault is on: the reply never arrives while the test runs (see
/// network_faults.rs: a merely late reply races the client's timer on a loaded machine).
const HELD: Duration = Duration::from_secs(3600);
const HOUR: Duration = Duration::from_secs(3600);

/// Ends the fault: replies flow again, and every connection holding a late reply is closed.
fn lift(proxy: &FaultProxy) {
    proxy.set_reply_delay(Duration::ZERO);
    proxy.cut();
}

/// A Redis, a proxy in front of it, a client through the proxy, and one job `key` due in an
/// hour. Every script used below has run once directly, so that the held try is the real
/// call and not a NOSCRIPT round.
async fn setup(name: &'static str, key: &str) -> (Scenario, FaultProxy, Client) {
    let s = Scenario::start(name, BIN, ServerOptions::default()).await;
    let proxy = FaultProxy::start(s.server.port());
    let via_proxy = Client::builder()
        .namespace(&s.ns)
        .response_timeout(TIMEOUT)
        .connect(&proxy.url())
        .await
        .expect("connect through the proxy");
    // The proxied client checks the topic's partition count on its first call; do that
    // while replies still flow, so the held reply is the call under test.
    via_proxy
        .check_topic(WORK_TOPIC)
        .await
        .expect("topic check through the proxy");
    let c = &s.client;
    assert_eq!(
        c.cancel::<WorkJob>("warm-up").await.unwrap(),
        CancelOutcome::NotFound
    );
    assert_eq!(
        c.reschedule::<WorkJob>("warm-up", NewDue::Shift(1))
            .await
            .unwrap(),
        RescheduleOutcome::NotFound
    );
    c.enqueue::<WorkJob>(FaultPayload::new(1, 0))
        .key(key)
        .delay(HOUR)
        .await
        .unwrap();
    (s, proxy, via_proxy)
}

/// The job's due time, read directly (not through the proxy); `None` once it is gone.
async fn due_of(s: &Scenario, key: &str) -> Option<u64> {
    s.client
        .job::<WorkJob>(key)
        .await
        .unwrap()
        .map(|j| dq::store::unix_ms(j.due))
}

/// A cancel applied by a try whose reply is lost: the client retries, finds no job, and
/// reports `Gone` (it may be what cancelled it) instead of an error; the job is cancelled
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_cancel_is_retried_and_reported_gone() {
    let (s, proxy, c) = setup("ambiguous-cancel", "amb-cancel").await;
    proxy.set_reply_delay(HELD);
    let call = tokio::spawn(async move { c.cancel::<WorkJob>("amb-cancel").await });
    eventually(
        "Redis applied the cancel",
        Duration::from_secs(10),
        || async { due_of(&s, "amb-cancel").await.is_none() },
    )
    .await;
    lift(&proxy);
    let outcome = call.await.unwrap();
    assert_eq!(outcome.expect("the retry succeeds"), CancelOutcome::Gone);
    let stats = s.stats(WORK_TOPIC).await.unwrap();
    assert_eq!((stats.cancelled, stats.scheduled), (1, 0), "{stats:?}");
}

/// A reschedule `At` applied by a try whose reply is lost: the retry sets the same time
/// again and reports it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_reschedule_at_is_retried() {
    let (s, proxy, c) = setup("ambiguous-reschedule-at", "amb-at").await;
    let at = SystemTime::now() + 2 * HOUR;
    let want = unix_ms(at);
    proxy.set_reply_delay(HELD);
    let call = tokio::spawn(async move {
        c.reschedule::<WorkJob>("amb-at", NewDue::At(at))
            .into_future()
            .await
    });
    eventually(
        "Redis applied the reschedule",
        Duration::from_secs(10),
        || async { due_of(&s, "amb-at").await == Some(want) },
    )
    .await;
    lift(&proxy);
    let outcome = call.await.unwrap();
    assert_eq!(
        outcome.expect("the retry succeeds"),
        RescheduleOutcome::Rescheduled { due_ms: want }
    );
    assert_eq!(due_of(&s, "amb-at").await, Some(want));
}

/// A reschedule `After` applied by a try whose reply is lost: the retry sets the delay again,
/// from its own "now" — later than the first try's time by at most the retry window — and
/// reports the due time stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_reschedule_after_is_retried() {
    let (s, proxy, c) = setup("ambiguous-reschedule-after", "amb-after").await;
    let before = due_of(&s, "amb-after").await.unwrap();
    proxy.set_reply_delay(HELD);
    let call = tokio::spawn(async move {
        c.reschedule::<WorkJob>("amb-after", NewDue::After(2 * HOUR))
            .await
    });
    let first = eventually_some(
        "Redis applied the reschedule",
        Duration::from_secs(10),
        || {
            let s = &s;
            async move { due_of(s, "amb-after").await.filter(|d| *d != before) }
        },
    )
    .await;
    lift(&proxy);
    let outcome = call.await.unwrap().expect("the retry succeeds");
    let RescheduleOutcome::Rescheduled { due_ms } = outcome else {
        panic!("{outcome:?}")
    };
    assert!(
        due_ms >= first && due_ms <= first + ENQUEUE_RETRY_WINDOW.as_millis() as u64,
        "first try set {first}, the retry {due_ms}"
    );
    assert_eq!(due_of(&s, "amb-after").await, Some(due_ms));
}

/// A `Shift` is relative: repeating it would shift twice. A shift applied by a try whose
/// reply is lost is not retried: the error is returned, and the job moved exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_shift_is_not_retried() {
    let (s, proxy, c) = setup("ambiguous-shift", "amb-shift").await;
    let before = due_of(&s, "amb-shift").await.unwrap();
    proxy.set_reply_delay(HELD);
    let call = tokio::spawn(async move {
        c.reschedule::<WorkJob>("amb-shift", NewDue::Shift(60_000))
            .await
    });
    eventually(
        "Redis applied the shift",
        Duration::from_secs(10),
        || async { due_of(&s, "amb-shift").await != Some(before) },
    )
    .await;
    lift(&proxy);
    let outcome = call.await.unwrap();
    assert!(
        matches!(&outcome, Err(e) if e.is_retryable()),
        "the ambiguous error is returned: {outcome:?}"
    );
    assert_eq!(due_of(&s, "amb-shift").await, Some(before + 60_000));
}
