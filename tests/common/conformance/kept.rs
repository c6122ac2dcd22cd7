//! Conformance bodies: finished jobs a topic keeps ([`dq::Retention`]) and handlers' results.
//! A topic keeps the outcomes its retention names — succeeded (with the handler's value, the
//! start and finish times and the worker), cancelled (waiting or running), expired before they
//! started — for their time and up to its cap, trimmed in order and counted; a topic without a
//! retention deletes on ack as before; a bad retention is refused before any write;
//! `Client::result` and `Client::wait` read a kept job back typed.

use super::*;
use dq::store::Success;
use dq::{FinishedAs, FinishedJob, JobOutput, Page, Retention, StoredResult, WaitOutcome};

/// The test's job type: a `u64` payload, a `String` result.
#[allow(non_camel_case_types)]
struct resize;

impl Job for resize {
    type Payload = u64;
    const TOPIC: &'static str = "kept.typed";
}

impl JobOutput for resize {
    type Output = String;
}

const HOUR: Duration = Duration::from_secs(3600);

/// Acks one delivery as a worker would: with its start time, a result and a worker id.
async fn ack_with<H: Harness>(h: &H, q: &Queue, d: &Delivery, result: StoredResult) {
    let mut s = Success::new(d.key.clone(), d.token);
    s.started_ms = d.leased_ms;
    s.result = result;
    let out = h.store().ack(q, "worker-1", &[s]).await.expect("ack");
    assert_eq!(out, vec![AckOutcome::Acked]);
}

async fn kept(t: &TopicClient, key: &str) -> FinishedJob {
    t.finished(key)
        .await
        .expect("finished")
        .unwrap_or_else(|| panic!("{key} should be kept"))
}

async fn listed(t: &TopicClient, outcome: FinishedAs) -> Vec<String> {
    let mut keys = Vec::new();
    let mut page = Page::first(2);
    for _ in 0..100 {
        let got = t.list_finished(outcome, page.clone()).await.expect("list");
        keys.extend(got.jobs.iter().map(|j| j.key.to_string()));
        match got.next {
            Some(next) => page = Page::after(next, 2),
            None => return keys,
        }
    }
    panic!("the {outcome} listing did not end in 100 pages");
}

/// Succeeded, cancelled (waiting, and running) and expired jobs are kept as the retention
/// says, each with what is known of it; listings page them by outcome.
pub async fn a_topic_keeps_the_outcomes_its_retention_names<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("kept.all").unwrap();
    let q = queue("kept.all");
    let set = t
        .set_retention(Some(
            Retention::default()
                .succeeded(HOUR)
                .cancelled(HOUR)
                .expired(HOUR)
                .max_kept(100),
        ))
        .await
        .unwrap();
    assert_eq!(set.retention.map(|r| r.succeeded), Some(Some(HOUR)));
    for (n, key) in ["ok-1", "ok-2", "running"].iter().enumerate() {
        t.enqueue(raw(n as u64)).key(*key).await.unwrap();
    }
    t.enqueue(raw(9)).key("waiting").delay(HOUR).await.unwrap();
    t.enqueue(raw(8))
        .key("late")
        .delay(ms(20))
        .expires_after(ms(30))
        .await
        .unwrap();
    let leased = fetch_some(h, &q, &req_max(3)).await;
    assert_eq!(leased.len(), 3, "{:?}", keys_of(&leased));
    let by_key = |k: &str| leased.iter().find(|d| d.key.as_str() == k).unwrap();
    // a succeeded run with a value, one without, a running job cancelled
    ack_with(h, &q, by_key("ok-1"), StoredResult::Value(raw(42))).await;
    ack_with(h, &q, by_key("ok-2"), StoredResult::None).await;
    assert_eq!(
        t.cancel("running").await.unwrap(),
        CancelOutcome::CancelRequested
    );
    let out = fail(h, by_key("running"), FailAction::Cancel, "stopped")
        .await
        .unwrap();
    assert!(matches!(out, FailOutcome::Cancelled), "{out:?}");
    assert_eq!(t.cancel("waiting").await.unwrap(), CancelOutcome::Cancelled);
    let late = info(&t, "late").await;
    until_store_time(h, late.expires_ms.unwrap()).await;
    assert!(
        drain_due(h, &q).await.is_empty(),
        "the expired job never runs"
    );

    let ok = kept(&t, "ok-1").await;
    let d = by_key("ok-1");
    assert_eq!(ok.outcome, FinishedAs::Succeeded);
    assert_eq!(ok.result, StoredResult::Value(raw(42)));
    assert_eq!(ok.payload, raw(0));
    assert_eq!(ok.started_ms, Some(d.leased_ms));
    assert!(ok.finished_ms >= d.leased_ms, "{ok:?}");
    assert_eq!(ok.kept_until_ms, ok.finished_ms + 3_600_000);
    assert_eq!(ok.attempts, 1);
    assert_eq!(ok.worker.as_deref(), Some("worker-1"));
    assert_eq!((ok.due_ms, ok.created_ms), (d.due_ms, d.created_ms));
    assert_eq!(kept(&t, "ok-2").await.result, StoredResult::None);
    let running = kept(&t, "running").await;
    assert_eq!(running.outcome, FinishedAs::Cancelled);
    assert_eq!((running.attempts, running.worker), (1, None));
    let waiting = kept(&t, "waiting").await;
    assert_eq!(
        (waiting.outcome, waiting.attempts),
        (FinishedAs::Cancelled, 0)
    );
    assert_eq!(waiting.started_ms, None);
    let expired = kept(&t, "late").await;
    assert_eq!(expired.outcome, FinishedAs::Expired);
    assert_eq!(expired.payload, raw(8));

    assert_eq!(listed(&t, FinishedAs::Succeeded).await, ["ok-1", "ok-2"]);
    let mut cancelled = listed(&t, FinishedAs::Cancelled).await;
    cancelled.sort();
    assert_eq!(cancelled, ["running", "waiting"]);
    assert_eq!(listed(&t, FinishedAs::Expired).await, ["late"]);
    for key in ["ok-1", "running", "waiting", "late"] {
        assert!(t.job(key).await.unwrap().is_none(), "{key} is not live");
    }
    let st = t.stats().await.unwrap();
    assert_eq!((st.kept, st.kept_trimmed), (5, 0), "{st:?}");
    assert_eq!(
        (st.succeeded, st.cancelled, st.expired_before_start),
        (2, 2, 1)
    );
}

/// Without a retention a finished job is deleted as before; with one that names other
/// outcomes, the unnamed ones are deleted.
pub async fn what_a_topic_does_not_keep_is_deleted<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("kept.none").unwrap();
    let q = queue("kept.none");
    t.enqueue(raw(1)).key("a").await.unwrap();
    let d = fetch_one(h, &q, &req()).await;
    ack_with(h, &q, &d, StoredResult::Value(raw(1))).await;
    assert!(t.finished("a").await.unwrap().is_none());
    t.set_retention(Some(Retention::default().cancelled(HOUR)))
        .await
        .unwrap();
    t.enqueue(raw(2)).key("b").await.unwrap();
    let d = fetch_one(h, &q, &req()).await;
    ack_with(h, &q, &d, StoredResult::None).await;
    assert!(
        t.finished("b").await.unwrap().is_none(),
        "succeeded: not kept"
    );
    let st = t.stats().await.unwrap();
    assert_eq!((st.kept, st.succeeded), (0, 2), "{st:?}");
    // removing the retention stops the keeping
    t.enqueue(raw(3)).key("c").delay(HOUR).await.unwrap();
    t.set_retention(None).await.unwrap();
    assert_eq!(t.control().await.unwrap().retention, None);
    t.cancel("c").await.unwrap();
    assert!(t.finished("c").await.unwrap().is_none());
}

/// Kept jobs go when their time comes (no longer seen at once, trimmed by a later fetch), and
/// beyond the cap the soonest to go are trimmed first and counted.
pub async fn kept_jobs_go_by_time_and_beyond_the_cap<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("kept.trim").unwrap();
    let q = queue("kept.trim");
    t.set_retention(Some(Retention::default().succeeded(ms(400)).max_kept(2)))
        .await
        .unwrap();
    for n in 0..3u64 {
        t.enqueue(raw(n)).key(format!("j{n}")).await.unwrap();
        let d = fetch_one(h, &q, &req()).await;
        ack_with(h, &q, &d, StoredResult::None).await;
    }
    assert!(
        t.finished("j0").await.unwrap().is_none(),
        "trimmed: over the cap"
    );
    let j2 = kept(&t, "j2").await;
    let st = t.stats().await.unwrap();
    assert_eq!((st.kept, st.kept_trimmed), (2, 1), "{st:?}");
    until_store_time(h, j2.kept_until_ms).await;
    assert!(t.finished("j2").await.unwrap().is_none(), "its time is up");
    assert!(listed(&t, FinishedAs::Succeeded).await.is_empty());
    fetch(h, &q, &req()).await; // an idle fetch trims what has gone
    let st = t.stats().await.unwrap();
    assert_eq!((st.kept, st.kept_trimmed), (0, 1), "{st:?}");
}

/// A key enqueued again after it finished has both its live job and its last kept run; the
/// next finish replaces the kept one.
pub async fn a_key_enqueued_again_keeps_its_last_run<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("kept.again").unwrap();
    let q = queue("kept.again");
    t.set_retention(Some(Retention::default().succeeded(HOUR).cancelled(HOUR)))
        .await
        .unwrap();
    t.enqueue(raw(1)).key("k").await.unwrap();
    let d = fetch_one(h, &q, &req()).await;
    ack_with(h, &q, &d, StoredResult::Value(raw(1))).await;
    t.enqueue(raw(2)).key("k").delay(HOUR).await.unwrap();
    assert_eq!(info(&t, "k").await.payload, raw(2));
    assert_eq!(kept(&t, "k").await.outcome, FinishedAs::Succeeded);
    t.cancel("k").await.unwrap();
    let again = kept(&t, "k").await;
    assert_eq!(
        (again.outcome, again.payload),
        (FinishedAs::Cancelled, raw(2))
    );
    assert_eq!(
        listed(&t, FinishedAs::Succeeded).await,
        Vec::<String>::new()
    );
    assert_eq!(t.stats().await.unwrap().kept, 1);
}

/// A retention dq cannot honour is refused before any write.
pub async fn a_bad_retention_is_refused<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("kept.bad").unwrap();
    for bad in [
        Retention::default(),
        Retention::default().succeeded(Duration::ZERO),
        Retention::default().succeeded(Duration::from_secs(91 * 24 * 3600)),
        Retention::default().cancelled(HOUR).max_kept(0),
        Retention::default().expired(HOUR).max_kept(10_000_001),
    ] {
        let err = t.set_retention(Some(bad)).await.unwrap_err();
        assert!(matches!(err, Error::InvalidConfig(_)), "{bad:?}: {err}");
    }
    assert_eq!(t.control().await.unwrap().retention, None);
}

/// `Client::result` and `Client::wait` read a kept job back typed: the value, a value that
/// was not stored (a typed error), and a wait that ends in time or times out.
pub async fn results_are_read_back_typed<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic(resize::TOPIC).unwrap();
    let q = queue(resize::TOPIC);
    assert!(
        c.result::<resize>("r1").await.unwrap().is_none(),
        "nothing yet"
    );
    c.enqueue::<resize>(1).key("r1").await.unwrap();
    c.enqueue::<resize>(2).key("r2").await.unwrap();
    let timed_out = c.wait::<resize>("r1", ms(30)).await.unwrap();
    assert!(matches!(timed_out, WaitOutcome::TimedOut), "{timed_out:?}");
    // a topic that keeps no succeeded jobs cannot tell how a gone job ended
    let d1 = fetch_one(h, &q, &req()).await;
    let value = dq::payload::encode(&"stored".to_string(), 1 << 20).unwrap();
    ack_with(h, &q, &d1, StoredResult::Value(value.clone())).await;
    let err = c.wait::<resize>(d1.key.as_str(), ms(30)).await.unwrap_err();
    assert!(matches!(err, Error::NotKept { .. }), "{err}");

    t.set_retention(Some(Retention::default().succeeded(HOUR)))
        .await
        .unwrap();
    let d2 = fetch_one(h, &q, &req()).await;
    let key2 = d2.key.to_string();
    let waiter = {
        let c = c.clone();
        let key2 = key2.clone();
        tokio::spawn(async move { c.wait::<resize>(&key2, Duration::from_secs(30)).await })
    };
    ack_with(h, &q, &d2, StoredResult::Value(value)).await;
    match waiter.await.unwrap().unwrap() {
        WaitOutcome::Succeeded { result, job } => {
            assert_eq!(result, "stored");
            assert_eq!(job.key.as_str(), key2);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        c.result::<resize>(&key2).await.unwrap().as_deref(),
        Some("stored")
    );
    // a value that was not stored is a typed error; the success counted all the same
    c.enqueue::<resize>(3).key("r3").await.unwrap();
    let d3 = fetch_one(h, &q, &req()).await;
    ack_with(h, &q, &d3, StoredResult::NotStored("too large".into())).await;
    let err = c.result::<resize>("r3").await.unwrap_err();
    assert!(matches!(err, Error::ResultNotStored { .. }), "{err}");
    assert!(err.to_string().contains("too large"), "{err}");
    assert_eq!(t.stats().await.unwrap().succeeded, 3);
    // never enqueued: unknown
    let unknown = c.wait::<resize>("never", ms(30)).await.unwrap();
    assert!(matches!(unknown, WaitOutcome::Unknown), "{unknown:?}");
}

/// `Client::wait` reports a job that died with its errors.
pub async fn a_wait_reports_a_dead_job<H: Harness>(h: &H) {
    let c = h.client().await;
    let q = queue(resize::TOPIC);
    c.enqueue::<resize>(1).key("dies").await.unwrap();
    let d = fetch_one(h, &q, &req()).await;
    fail(h, &d, FailAction::Bury, "no such image")
        .await
        .unwrap();
    match c.wait::<resize>("dies", ms(500)).await.unwrap() {
        WaitOutcome::Dead(info) => {
            assert_eq!(info.state, JobState::Dead);
            assert_eq!(info.history.last().unwrap().error, "no such image");
        }
        other => panic!("{other:?}"),
    }
}
