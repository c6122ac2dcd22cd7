//! Unit tests of the embedded store: its own details (clock, receipts, wake-ups, audit) that
//! the conformance suite, which runs against both stores, does not reach.

use std::time::Duration;

use async_trait::async_trait;
use tokio::time::advance;

use super::MemoryStore;
use super::clock::{MAX_DUE, ms};
use crate::job::{MAX_HISTORY, from_unix_ms};
use crate::retry::RetryPolicy;
use crate::store::prelude::*;
use crate::store::{Lease, Operate};
use crate::*;

/// One failed attempt, through `fail_many` (what the retired single `fail` did).
#[async_trait]
trait FailOne: Lease {
    async fn fail_one(
        &self,
        q: &Queue,
        key: &JobKey,
        token: u64,
        action: &FailAction,
        error: &str,
        limits: DeadLimits,
    ) -> Result<FailOutcome> {
        let failure = FailedAttempt {
            key: key.clone(),
            token,
            action: action.clone(),
            error: error.to_owned(),
        };
        let mut out = self
            .fail_many(q, std::slice::from_ref(&failure), limits)
            .await?;
        out.pop().expect("one outcome per failure")
    }
}

impl<S: Lease> FailOne for S {}

/// A page of the dead queue by offset, through the `list` of `dead`.
#[async_trait]
trait DeadPage: Operate {
    async fn dead_page(&self, q: &Queue, offset: usize, limit: usize) -> Result<Vec<JobInfo>> {
        let chunk = self
            .list(
                q,
                JobState::Dead,
                &crate::inspect::ListFrom::Start,
                offset + limit,
            )
            .await?;
        Ok(chunk
            .jobs
            .into_iter()
            .skip(offset)
            .map(|(_, j)| j)
            .collect())
    }
}

impl<S: Operate> DeadPage for S {}

const SEC: Duration = Duration::from_secs(1);

fn queue() -> Queue {
    Queue::new(Topic::new("t").unwrap(), 0)
}

fn key(k: &str) -> JobKey {
    JobKey::new(k).unwrap()
}

fn new_job(k: &str, due: Due) -> NewJob {
    NewJob {
        key: key(k),
        payload: k.as_bytes().to_vec(),
        due,
        replace: false,
        expires: None,
        priority: Default::default(),
        window: None,
        group: None,
        batch: None,
    }
}

async fn put(store: &MemoryStore, k: &str, due: Due) -> EnqueueOutcome {
    store
        .enqueue(&queue(), &[new_job(k, due)], EnqueueCall::new())
        .await
        .unwrap()[0]
}

async fn replace(store: &MemoryStore, k: &str, due: Due) -> EnqueueOutcome {
    let job = NewJob {
        replace: true,
        expires: None,
        ..new_job(k, due)
    };
    store
        .enqueue(&queue(), &[job], EnqueueCall::new())
        .await
        .unwrap()[0]
}

fn take(max_jobs: usize) -> FetchRequest {
    FetchRequest {
        max_jobs,
        ..FetchRequest::default()
    }
}

async fn fetch(store: &MemoryStore, max_jobs: usize) -> FetchReply {
    store.fetch(&queue(), &take(max_jobs)).await.unwrap()
}

async fn fetch_one(store: &MemoryStore) -> Delivery {
    let mut reply = fetch(store, 1).await;
    assert_eq!(reply.jobs.len(), 1, "{reply:?}");
    reply.jobs.remove(0)
}

fn keys(reply: &FetchReply) -> Vec<&str> {
    reply.jobs.iter().map(|d| d.key.as_str()).collect()
}

async fn fail(store: &MemoryStore, d: &Delivery, action: FailAction) -> Result<FailOutcome> {
    store
        .fail_one(
            &queue(),
            &d.key,
            d.token,
            &action,
            "boom",
            DeadLimits::default(),
        )
        .await
}

async fn info(store: &MemoryStore, k: &str) -> JobInfo {
    store.job(&queue(), &key(k)).await.unwrap().unwrap()
}

async fn now(store: &MemoryStore) -> u64 {
    store.now_ms().await.unwrap()
}

/// Panics unless every internal invariant holds.
fn assert_sound(store: &MemoryStore) {
    let v = store.violations();
    assert!(v.is_empty(), "invariants violated:\n  {}", v.join("\n  "));
}

/// A receipt is kept at least `ENQUEUE_RECEIPT_LIFE` and at most twice that; a retry
/// after it is gone is taken for a first try (the client stops retrying long before).
#[tokio::test(start_paused = true)]
async fn enqueue_receipts_expire() {
    let store = MemoryStore::new();
    let life = ENQUEUE_RECEIPT_LIFE;
    let call = EnqueueCall::new();
    let job = [new_job("r", Due::After(3 * life))];
    let q = queue();
    let put = |call| store.enqueue(&q, &job, call);
    assert_eq!(put(call).await.unwrap(), [EnqueueOutcome::Created]);
    store.cancel(&queue(), &key("r")).await.unwrap();
    advance(life).await;
    assert_eq!(put(call.retried()).await.unwrap(), [EnqueueOutcome::Ended]);
    advance(life + Duration::from_millis(1)).await;
    assert_eq!(
        put(call.retried()).await.unwrap(),
        [EnqueueOutcome::Created]
    );
    let receipts = store.write(&queue(), |p, _| p.receipts.until.len());
    assert_eq!(receipts, 1, "expired receipts are pruned");
}

#[tokio::test(start_paused = true)]
async fn not_delivered_before_due() {
    let store = MemoryStore::new();
    let t0 = now(&store).await;
    assert_eq!(
        put(&store, "late", Due::After(Duration::from_secs(1800))).await,
        EnqueueOutcome::Created
    );
    let at = from_unix_ms(t0 + 5_000);
    put(&store, "at", Due::At(at)).await;

    let r = fetch(&store, 10).await;
    assert!(r.jobs.is_empty());
    assert_eq!(r.next_in, Some(Duration::from_secs(5)));

    advance(Duration::from_millis(4_999)).await;
    let r = fetch(&store, 10).await;
    assert!(r.jobs.is_empty());
    assert_eq!(r.next_in, Some(Duration::from_millis(1)));
    advance(Duration::from_millis(1)).await;
    let d = fetch_one(&store).await;
    assert_eq!(
        (d.key.as_str(), d.due_ms, d.leased_ms),
        ("at", t0 + 5_000, t0 + 5_000)
    );
    store
        .ack(
            &queue(),
            "",
            &crate::store::Success::of(&[(d.key, d.token)]),
        )
        .await
        .unwrap();

    advance(Duration::from_secs(1800) - Duration::from_millis(5_001)).await;
    let r = fetch(&store, 10).await;
    assert!(r.jobs.is_empty());
    assert_eq!(r.next_in, Some(Duration::from_millis(1)));
    advance(Duration::from_millis(1)).await;
    let d = fetch_one(&store).await;
    assert_eq!(d.key.as_str(), "late");
    assert_eq!(
        (d.due_ms, d.leased_ms, d.attempt),
        (t0 + 1_800_000, t0 + 1_800_000, 1)
    );
    assert_eq!(d.created_ms, t0);
    assert_eq!(d.lease_deadline_ms, t0 + 1_800_000 + 30_000);
    // Nothing else pending but the lease: next is just past its deadline.
    let r = fetch(&store, 10).await;
    assert_eq!(r.next_in, Some(Duration::from_millis(30_001)));
    store
        .ack(
            &queue(),
            "",
            &crate::store::Success::of(&[(d.key, d.token)]),
        )
        .await
        .unwrap();
    assert_eq!(fetch(&store, 10).await.next_in, None);
    assert_sound(&store);
}

#[tokio::test(start_paused = true)]
async fn same_ms_jobs_keep_enqueue_order() {
    let store = MemoryStore::new();
    let t0 = now(&store).await;
    let ten = Due::After(Duration::from_millis(10));
    put(&store, "b", ten).await;
    put(&store, "c", ten).await;
    put(&store, "d", Due::After(Duration::from_millis(5))).await;
    put(&store, "a", Due::At(from_unix_ms(t0 + 10))).await;
    // a bulk call keeps its order too
    let bulk = [new_job("y", ten), new_job("x", ten)];
    store
        .enqueue(&queue(), &bulk, EnqueueCall::new())
        .await
        .unwrap();
    put(&store, "r2", Due::Now).await;
    put(&store, "r1", Due::Now).await;
    // a due time in the past is due now, queued behind the ready ones
    put(&store, "past", Due::At(from_unix_ms(t0 - 60_000))).await;

    let r = fetch(&store, 10).await;
    assert_eq!(keys(&r), ["r2", "r1", "past"]);
    assert_eq!(r.next_in, Some(Duration::from_millis(5)));
    advance(Duration::from_millis(10)).await;
    let r = fetch(&store, 10).await;
    assert_eq!(keys(&r), ["d", "b", "c", "a", "y", "x"]);
    let tokens: Vec<u64> = r.jobs.iter().map(|d| d.token).collect();
    assert!(tokens.windows(2).all(|w| w[1] == w[0] + 1), "{tokens:?}");
    assert_sound(&store);
}

#[tokio::test(start_paused = true)]
async fn promotion_is_bounded_and_says_more_is_due() {
    let store = MemoryStore::new();
    for i in 0..5 {
        put(&store, &format!("j{i}"), Due::After(SEC)).await;
    }
    advance(SEC).await;
    let request = FetchRequest {
        max_jobs: 0,
        promote_batch: 2,
        ..FetchRequest::default()
    };
    let r = store.fetch(&queue(), &request).await.unwrap();
    assert_eq!((r.jobs.len(), r.next_in), (0, Some(Duration::ZERO)));
    let s = store.stats(&queue()).await.unwrap();
    assert_eq!((s.ready, s.scheduled), (2, 3));
    let r = fetch(&store, 10).await;
    assert_eq!(keys(&r), ["j0", "j1", "j2", "j3", "j4"]);
    assert_sound(&store);
}

#[tokio::test(start_paused = true)]
async fn expired_leases_retry_then_go_dead() {
    let store = MemoryStore::new();
    put(&store, "k", Due::Now).await;
    let request = FetchRequest {
        max_jobs: 1,
        lease: Duration::from_secs(30),
        retry_policy: RetryPolicy::tiered([SEC, 2 * SEC]).unwrap(),
        ..FetchRequest::default()
    };
    let mut tokens = Vec::new();
    for attempt in 1..=3u32 {
        let r = store.fetch(&queue(), &request).await.unwrap();
        assert_eq!(r.jobs.len(), 1, "attempt {attempt}: {r:?}");
        assert_eq!(r.jobs[0].attempt, attempt);
        tokens.push(r.jobs[0].token);
        // deadline == now is not expired yet
        advance(Duration::from_secs(30)).await;
        let r = store.fetch(&queue(), &request).await.unwrap();
        assert!(r.jobs.is_empty());
        assert_eq!(r.next_in, Some(Duration::from_millis(1)));
        advance(Duration::from_millis(1)).await;
        let r = store.fetch(&queue(), &request).await.unwrap();
        assert!(r.jobs.is_empty(), "{r:?}");
        if attempt < 3 {
            assert!(r.buried.is_empty());
            assert_eq!(info(&store, "k").await.state, JobState::Retry);
            assert_eq!(r.next_in, Some(attempt * SEC));
            advance(attempt * SEC).await;
        } else {
            assert_eq!(r.buried, [key("k")]);
            assert_eq!(r.next_in, None);
        }
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]));
    let job = info(&store, "k").await;
    assert_eq!((job.state, job.attempts), (JobState::Dead, 3));
    assert_eq!(job.history.len(), 3);
    assert!(
        job.history
            .iter()
            .all(|h| h.outcome == AttemptOutcome::LeaseExpired && h.error == "lease expired")
    );
    assert_eq!(
        job.history.iter().map(|h| h.attempt).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(job.died_ms, Some(job.history[2].at_ms));
    let s = store.stats(&queue()).await.unwrap();
    assert_eq!((s.expired, s.retried, s.buried, s.dead), (3, 2, 1, 1));
    let dead = store.dead_page(&queue(), 0, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].key, key("k"));
    assert_sound(&store);
}

#[tokio::test(start_paused = true)]
async fn default_tiered_schedule_runs_in_virtual_time() {
    let store = MemoryStore::new();
    let policy = RetryPolicy::default();
    let schedule = policy.schedule();
    assert_eq!(schedule.len(), 9);
    put(&store, "hook", Due::Now).await;
    let t0 = now(&store).await;

    let mut expected = vec![t0];
    for delay in &schedule {
        expected.push(expected.last().unwrap() + ms(*delay));
    }
    let mut started = Vec::new();
    let mut d = fetch_one(&store).await;
    started.push(d.leased_ms);
    for (i, delay) in schedule.iter().enumerate() {
        let out = fail(&store, &d, FailAction::Retry(*delay)).await.unwrap();
        let at = d.leased_ms + ms(*delay);
        assert_eq!(out, FailOutcome::Retrying { at_ms: at });
        let job = info(&store, "hook").await;
        assert_eq!((job.state, job.due_ms), (JobState::Retry, at));

        advance(*delay - Duration::from_millis(1)).await;
        let r = fetch(&store, 1).await;
        assert!(r.jobs.is_empty(), "early retry {i}");
        assert_eq!(r.next_in, Some(Duration::from_millis(1)));
        advance(Duration::from_millis(1)).await;
        d = fetch_one(&store).await;
        assert_eq!(d.attempt as usize, i + 2);
        assert_eq!((d.due_ms, d.leased_ms), (at, at));
        started.push(d.leased_ms);
    }
    assert_eq!(started, expected);
    assert_eq!(policy.delay_after(d.attempt), None);
    let out = fail(&store, &d, FailAction::Bury).await.unwrap();
    assert_eq!(out, FailOutcome::Buried { trimmed: 0 });

    let job = info(&store, "hook").await;
    assert_eq!((job.state, job.attempts), (JobState::Dead, 10));
    let at: Vec<u64> = job.history.iter().map(|h| h.at_ms).collect();
    assert_eq!(at, expected);
    assert!(
        job.history[..9]
            .iter()
            .all(|h| h.outcome == AttemptOutcome::Failed)
    );
    assert_eq!(job.history[9].outcome, AttemptOutcome::Buried);
    assert_eq!(job.died_ms, Some(expected[9]));
    let s = store.stats(&queue()).await.unwrap();
    assert_eq!((s.retried, s.buried, s.dead, s.enqueued), (9, 1, 1, 1));
    assert_sound(&store);
}

/// Puts one job in each state: S, R, F, A, D.
async fn one_in_each_state(store: &MemoryStore) {
    put(store, "a", Due::Now).await;
    let a = fetch_one(store).await;
    put(store, "f", Due::Now).await;
    let f = fetch_one(store).await;
    fail(store, &f, FailAction::Retry(Duration::from_secs(60)))
        .await
        .unwrap();
    put(store, "d", Due::Now).await;
    let d = fetch_one(store).await;
    fail(store, &d, FailAction::Bury).await.unwrap();
    put(store, "s", Due::After(Duration::from_secs(60))).await;
    put(store, "r", Due::Now).await;
    for (k, state) in [
        ("s", JobState::Scheduled),
        ("r", JobState::Ready),
        ("f", JobState::Retry),
        ("a", JobState::Active),
        ("d", JobState::Dead),
    ] {
        assert_eq!(info(store, k).await.state, state, "{k}");
    }
    assert_eq!(
        info(store, "a").await.lease_deadline_ms,
        Some(a.lease_deadline_ms)
    );
}

#[tokio::test(start_paused = true)]
async fn cancel_from_every_state() {
    let store = MemoryStore::new();
    one_in_each_state(&store).await;
    let q = queue();
    for (k, outcome) in [
        ("s", CancelOutcome::Cancelled),
        ("r", CancelOutcome::Cancelled),
        ("f", CancelOutcome::Cancelled),
        ("a", CancelOutcome::CancelRequested),
        ("d", CancelOutcome::Dead),
        ("nope", CancelOutcome::NotFound),
    ] {
        assert_eq!(store.cancel(&q, &key(k)).await.unwrap(), outcome, "{k}");
    }
    // repeated: nothing is done twice
    assert_eq!(
        store.cancel(&q, &key("s")).await.unwrap(),
        CancelOutcome::NotFound
    );
    assert!(store.job(&q, &key("r")).await.unwrap().is_none());
    let s = store.stats(&q).await.unwrap();
    assert_eq!((s.cancelled, s.scheduled, s.ready, s.retry), (3, 0, 0, 0));
    assert_eq!((s.active, s.dead), (1, 1));
    // the cancelled ready job is never delivered; nothing is left but the lease
    let r = fetch(&store, 10).await;
    assert!(r.jobs.is_empty());
    assert_eq!(r.next_in, Some(Duration::from_millis(30_001)));
    assert_sound(&store);
}

#[tokio::test(start_paused = true)]
async fn reschedule_from_every_state() {
    let store = MemoryStore::new();
    one_in_each_state(&store).await;
    let q = queue();
    let t = now(&store).await;
    let re = |k: &'static str, due: NewDue| {
        let store = &store;
        let q = q.clone();
        async move { store.reschedule(&q, &key(k), due).await.unwrap() }
    };
    assert_eq!(
        re("a", NewDue::After(SEC)).await,
        RescheduleOutcome::Running
    );
    assert_eq!(re("d", NewDue::After(SEC)).await, RescheduleOutcome::Dead);
    assert_eq!(
        re("nope", NewDue::After(SEC)).await,
        RescheduleOutcome::NotFound
    );

    // scheduled: shift by -30s from t+60s; at a time; after a delay
    let due = |ms| RescheduleOutcome::Rescheduled { due_ms: ms };
    assert_eq!(re("s", NewDue::Shift(-30_000)).await, due(t + 30_000));
    assert_eq!(info(&store, "s").await.state, JobState::Scheduled);
    assert_eq!(
        re("s", NewDue::At(from_unix_ms(t + 7_000))).await,
        due(t + 7_000)
    );
    assert_eq!(re("s", NewDue::After(2 * SEC)).await, due(t + 2_000));
    // retry → scheduled, attempts and history kept
    assert_eq!(re("f", NewDue::After(3 * SEC)).await, due(t + 3_000));
    let f = info(&store, "f").await;
    assert_eq!(
        (f.state, f.attempts, f.history.len()),
        (JobState::Scheduled, 1, 1)
    );
    // clamped to now: a past time or a large negative shift makes it ready
    assert_eq!(re("f", NewDue::Shift(-3_600_000)).await, due(t));
    assert_eq!(info(&store, "f").await.state, JobState::Ready);
    assert_eq!(re("s", NewDue::At(from_unix_ms(t - 1))).await, due(t));
    // ready → ready keeps its place: r is still first, before f and s
    assert_eq!(re("r", NewDue::Shift(-10)).await, due(t));
    let r = fetch(&store, 10).await;
    assert_eq!(keys(&r), ["r", "f", "s"]);

    // ready → scheduled leaves the ready line
    put(&store, "x", Due::Now).await;
    put(&store, "y", Due::Now).await;
    assert_eq!(re("x", NewDue::After(SEC)).await, due(t + 1_000));
    assert_eq!(keys(&fetch(&store, 10).await), ["y"]);
    advance(SEC).await;
    assert_eq!(keys(&fetch(&store, 10).await), ["x"]);
    assert_sound(&store);
}

#[tokio::test(start_paused = true)]
async fn stale_tokens_are_refused() {
    let store = MemoryStore::new();
    let q = queue();
    put(&store, "k", Due::Now).await;
    let request = FetchRequest {
        max_jobs: 1,
        lease: SEC,
        retry_policy: RetryPolicy::fixed(Duration::ZERO, 1).unwrap(),
        ..FetchRequest::default()
    };
    let first = store.fetch(&q, &request).await.unwrap().jobs.remove(0);
    advance(SEC + Duration::from_millis(1)).await;
    // recovered, retried at once, promoted and leased again in the same call
    let second = store.fetch(&q, &request).await.unwrap().jobs.remove(0);
    assert_eq!(second.attempt, 2);
    assert_ne!(first.token, second.token);
    let old = (first.key.clone(), first.token);

    assert_eq!(
        store
            .ack(
                &q,
                "",
                &crate::store::Success::of(std::slice::from_ref(&old))
            )
            .await
            .unwrap(),
        [AckOutcome::Stale]
    );
    assert!(matches!(
        fail(&store, &first, FailAction::Bury).await,
        Err(Error::StaleToken { .. })
    ));
    assert_eq!(
        store
            .extend(&q, std::slice::from_ref(&old), SEC)
            .await
            .unwrap(),
        [Extended::Lost]
    );
    assert_eq!(
        store.release(&q, std::slice::from_ref(&old)).await.unwrap(),
        [false]
    );
    let job = info(&store, "k").await;
    assert_eq!((job.state, job.attempts), (JobState::Active, 2));

    let new = (second.key.clone(), second.token);
    assert_eq!(
        store
            .extend(&q, std::slice::from_ref(&new), 10 * SEC)
            .await
            .unwrap(),
        [Extended::Held]
    );
    let deadline = now(&store).await + 10_000;
    assert_eq!(info(&store, "k").await.lease_deadline_ms, Some(deadline));
    assert_eq!(
        store
            .ack(
                &q,
                "",
                &crate::store::Success::of(&[new.clone(), new.clone()])
            )
            .await
            .unwrap(),
        [AckOutcome::Acked, AckOutcome::Gone]
    );
    assert_eq!(
        fail(&store, &second, FailAction::Bury).await.unwrap(),
        FailOutcome::Gone
    );
    let s = store.stats(&q).await.unwrap();
    assert_eq!((s.succeeded, s.expired, s.retried, s.active), (1, 1, 1, 0));
    assert_sound(&store);
}

#[tokio::test(start_paused = true)]
async fn keys_dedup_and_replace() {
    let store = MemoryStore::new();
    assert_eq!(put(&store, "k", Due::Now).await, EnqueueOutcome::Created);
    assert_eq!(
        put(&store, "k", Due::Now).await,
        EnqueueOutcome::Exists(JobState::Ready)
    );
    assert_eq!(
        replace(&store, "k", Due::After(SEC)).await,
        EnqueueOutcome::Replaced
    );
    assert_eq!(info(&store, "k").await.state, JobState::Scheduled);
    let s = store.stats(&queue()).await.unwrap();
    assert_eq!((s.enqueued, s.ready, s.scheduled), (2, 0, 1));
    advance(SEC).await;
    let d = fetch_one(&store).await;
    assert_eq!(
        replace(&store, "k", Due::Now).await,
        EnqueueOutcome::Exists(JobState::Active)
    );
    fail(&store, &d, FailAction::Retry(SEC)).await.unwrap();
    assert_eq!(
        put(&store, "k", Due::Now).await,
        EnqueueOutcome::Exists(JobState::Retry)
    );
    assert_eq!(
        replace(&store, "k", Due::Now).await,
        EnqueueOutcome::Replaced
    );
    let job = info(&store, "k").await;
    assert_eq!(
        (job.state, job.attempts, job.history.len()),
        (JobState::Ready, 0, 0)
    );
    let d = fetch_one(&store).await;
    assert_eq!(d.attempt, 1);
    fail(&store, &d, FailAction::Bury).await.unwrap();
    assert_eq!(
        put(&store, "k", Due::Now).await,
        EnqueueOutcome::Exists(JobState::Dead)
    );
    assert_eq!(
        replace(&store, "k", Due::Now).await,
        EnqueueOutcome::Replaced
    );
    let s = store.stats(&queue()).await.unwrap();
    assert_eq!((s.dead, s.ready, s.retry, s.enqueued), (0, 1, 0, 4));
    // the retry entry was replaced: advancing past it delivers nothing twice
    advance(2 * SEC).await;
    assert_eq!(fetch(&store, 10).await.jobs.len(), 1);
    assert!(fetch(&store, 10).await.jobs.is_empty());
    assert_sound(&store);
}

#[tokio::test(start_paused = true)]
async fn fail_retry_defer_and_bounded_history() {
    let store = MemoryStore::new();
    put(&store, "k", Due::Now).await;
    // defer: the attempt is given back and the job waits as scheduled
    let d = fetch_one(&store).await;
    let out = fail(&store, &d, FailAction::Defer(SEC)).await.unwrap();
    assert_eq!(
        out,
        FailOutcome::Retrying {
            at_ms: d.leased_ms + 1_000
        }
    );
    let job = info(&store, "k").await;
    assert_eq!((job.state, job.attempts), (JobState::Scheduled, 0));
    assert_eq!(job.history[0].outcome, AttemptOutcome::Deferred);
    assert_eq!(job.history[0].attempt, 1);
    advance(SEC).await;
    let d = fetch_one(&store).await;
    assert_eq!(d.attempt, 1);
    // a zero delay goes straight back to ready
    let long = "é".repeat(1000);
    let out = store
        .fail_one(
            &queue(),
            &d.key,
            d.token,
            &FailAction::Retry(Duration::ZERO),
            &long,
            DeadLimits::default(),
        )
        .await
        .unwrap();
    assert_eq!(out, FailOutcome::Retrying { at_ms: d.leased_ms });
    let job = info(&store, "k").await;
    assert_eq!(job.state, JobState::Ready);
    let kept = &job.history[1].error;
    assert!(
        kept.len() <= 1024 && kept.ends_with("… [cut from 2000 bytes]"),
        "{kept}"
    );
    for _ in 0..40 {
        let d = fetch_one(&store).await;
        fail(&store, &d, FailAction::Retry(Duration::ZERO))
            .await
            .unwrap();
    }
    let job = info(&store, "k").await;
    assert_eq!(job.history.len(), MAX_HISTORY);
    assert_eq!(job.attempts, 41);
    assert_eq!(job.history.last().unwrap().attempt, 41);
    assert_eq!(job.history[0].attempt, 10);
    let s = store.stats(&queue()).await.unwrap();
    assert_eq!(s.retried, 41);
    assert_sound(&store);
}

#[tokio::test(start_paused = true)]
async fn release_requeue_purge_and_dead_trim() {
    let store = MemoryStore::new();
    let q = queue();
    for k in ["a", "b", "c"] {
        put(&store, k, Due::Now).await;
    }
    let r = fetch(&store, 2).await;
    assert_eq!(r.next_in, Some(Duration::ZERO));
    let leases: Vec<_> = r.jobs.iter().map(crate::store::lease_of).collect();
    assert_eq!(store.release(&q, &leases).await.unwrap(), [true, true]);
    assert_eq!(info(&store, "a").await.attempts, 0);
    // released to the front, in the order given
    let r = fetch(&store, 3).await;
    assert_eq!(keys(&r), ["a", "b", "c"]);
    assert!(r.jobs.iter().all(|d| d.attempt == 1));

    let limits = DeadLimits {
        cap: 2,
        retention: Duration::from_secs(3600),
    };
    let mut trimmed = Vec::new();
    for d in &r.jobs {
        advance(Duration::from_millis(1)).await;
        let out = store
            .fail_one(&q, &d.key, d.token, &FailAction::Bury, "x", limits)
            .await
            .unwrap();
        trimmed.push(out);
    }
    assert_eq!(
        trimmed,
        [0, 0, 1].map(|trimmed| FailOutcome::Buried { trimmed })
    );
    // oldest death first: a died first and was trimmed
    let dead = store.dead_page(&q, 0, 10).await.unwrap();
    assert_eq!(
        dead.iter().map(|j| j.key.as_str()).collect::<Vec<_>>(),
        ["b", "c"]
    );
    assert!(dead[0].died_ms < dead[1].died_ms);
    assert_eq!(store.dead_page(&q, 1, 10).await.unwrap().len(), 1);
    assert_eq!(store.stats(&q).await.unwrap().trimmed, 1);

    put(&store, "z", Due::Now).await;
    let moved = store
        .requeue_dead(&q, &[key("c"), key("z"), key("c")])
        .await
        .unwrap();
    assert_eq!(moved, [true, false, false]);
    let c = info(&store, "c").await;
    assert_eq!(
        (c.state, c.attempts, c.history.len()),
        (JobState::Ready, 0, 1)
    );
    assert_eq!(c.due_ms, now(&store).await);
    assert_eq!(keys(&fetch(&store, 5).await), ["z", "c"]);

    assert_eq!(
        store
            .purge_dead(&q, &[key("b"), key("b")], 5)
            .await
            .unwrap(),
        1
    );
    assert_eq!(store.purge_dead(&q, &[], 5).await.unwrap(), 0);
    assert!(store.job(&q, &key("a")).await.unwrap().is_none());

    // retention: an idle fetch trims dead jobs older than it
    put(&store, "old", Due::Now).await;
    let d = fetch_one(&store).await;
    store
        .fail_one(&q, &d.key, d.token, &FailAction::Bury, "x", limits)
        .await
        .unwrap();
    advance(Duration::from_secs(3600)).await;
    let request = FetchRequest {
        dead_limits: limits,
        ..take(0)
    };
    assert_eq!(store.fetch(&q, &request).await.unwrap().trimmed, 0);
    advance(Duration::from_millis(1)).await;
    assert_eq!(store.fetch(&q, &request).await.unwrap().trimmed, 1);
    assert_eq!(store.stats(&q).await.unwrap().trimmed, 2);
    assert_sound(&store);
}

#[tokio::test(start_paused = true)]
async fn stats_count_and_measure_overdue() {
    let store = MemoryStore::new();
    let q = queue();
    assert_eq!(store.stats(&q).await.unwrap(), TopicStats::default());
    put(&store, "r", Due::Now).await;
    put(&store, "s", Due::After(SEC)).await;
    advance(3 * SEC).await;
    let s = store.stats(&q).await.unwrap();
    assert_eq!((s.ready, s.scheduled, s.enqueued), (1, 1, 2));
    assert_eq!(s.oldest_overdue_ms, 3_000);
    assert_sound(&store);
}

#[tokio::test(start_paused = true)]
async fn wake_ups_follow_the_lua_wake_calls() {
    let store = MemoryStore::new();
    let q = queue();
    let mut wake = store.wake_listener(&q).await.unwrap();
    assert!(!wake.wait(SEC).await.unwrap(), "no token yet");

    put(&store, "later", Due::After(Duration::from_secs(60))).await;
    assert!(wake.wait(SEC).await.unwrap(), "new earliest");
    put(&store, "even-later", Due::After(Duration::from_secs(120))).await;
    assert!(!wake.wait(SEC).await.unwrap(), "not the earliest");

    // a waiting listener is woken by a ready job
    let waiter = tokio::spawn(async move { wake.wait(Duration::from_secs(30)).await });
    tokio::task::yield_now().await;
    put(&store, "now", Due::Now).await;
    assert!(waiter.await.unwrap().unwrap());
    // tokens do not pile up: many enqueues leave one
    let mut wake = store.wake_listener(&q).await.unwrap();
    put(&store, "n1", Due::Now).await;
    put(&store, "n2", Due::Now).await;
    assert!(wake.wait(SEC).await.unwrap());
    assert!(!wake.wait(SEC).await.unwrap());
    // a fetch leaving ready work behind passes a token on
    fetch(&store, 1).await;
    assert!(wake.wait(SEC).await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn in_memory_client_round_trip() {
    #[allow(non_camel_case_types)]
    struct ping;
    impl crate::Job for ping {
        type Payload = u64;
        const TOPIC: &'static str = "t";
    }
    let client = crate::Client::in_memory();
    let e = client
        .enqueue::<ping>(7)
        .key("k")
        .delay(Duration::from_secs(1800))
        .await
        .unwrap();
    assert_eq!(e.outcome, EnqueueOutcome::Created);
    let job = client.job::<ping>("k").await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Scheduled);
    assert_eq!(
        client.cancel::<ping>("k").await.unwrap(),
        CancelOutcome::Cancelled
    );
    assert_eq!(client.stats::<ping>().await.unwrap().cancelled, 1);
}

#[tokio::test(start_paused = true)]
async fn far_future_due_times_are_capped_like_redis() {
    let store = MemoryStore::new();
    put(&store, "delay", Due::After(Duration::from_secs(1 << 40))).await;
    put(&store, "at", Due::At(from_unix_ms(1 << 50))).await;
    for k in ["delay", "at"] {
        assert_eq!(info(&store, k).await.due_ms, MAX_DUE, "{k}");
    }
    let q = queue();
    let out = store.reschedule(&q, &key("at"), NewDue::Shift(-1000)).await;
    assert_eq!(
        out.unwrap(),
        RescheduleOutcome::Rescheduled {
            due_ms: MAX_DUE - 1000
        }
    );
    let out = store
        .reschedule(&q, &key("delay"), NewDue::After(Duration::MAX))
        .await;
    assert_eq!(
        out.unwrap(),
        RescheduleOutcome::Rescheduled { due_ms: MAX_DUE }
    );
    assert!(fetch(&store, 10).await.jobs.is_empty());
    assert_sound(&store);
}

#[tokio::test]
async fn fetch_rejects_zero_limits() {
    let store = MemoryStore::new();
    let request = FetchRequest {
        lease: Duration::ZERO,
        ..FetchRequest::default()
    };
    assert!(matches!(
        store.fetch(&queue(), &request).await,
        Err(Error::InvalidConfig(_))
    ));
}

// ---- groups ----

fn group(g: &str) -> GroupName {
    GroupName::new(g).unwrap()
}

/// A job `k` of group `g`, due now, of `priority`.
async fn put_in(store: &MemoryStore, g: &str, k: &str, priority: Priority) {
    let job = NewJob {
        group: Some(group(g)),
        batch: None,
        priority,
        ..new_job(k, Due::Now)
    };
    let out = store
        .enqueue(&queue(), &[job], EnqueueCall::new())
        .await
        .unwrap();
    assert_eq!(out[0], EnqueueOutcome::Created, "{k}");
}

/// `n` jobs `<g><i>` (i from 1) in each group, group after group.
async fn put_groups(store: &MemoryStore, groups: &[&str], n: usize) {
    for g in groups {
        for i in 1..=n {
            put_in(store, g, &format!("{g}{i}"), Priority::NORMAL).await;
        }
    }
}

async fn set_limits(store: &MemoryStore, g: &str, limits: GroupLimits) -> GroupState {
    let change = GroupChange {
        group: Some(group(g)),
        limits: Some(Some(limits)),
        hold: None,
    };
    store.group(&queue(), &change).await.unwrap()
}

async fn group_state(store: &MemoryStore, g: Option<&str>) -> GroupState {
    let change = GroupChange {
        group: g.map(group),
        ..GroupChange::default()
    };
    store.group(&queue(), &change).await.unwrap()
}

async fn ack(store: &MemoryStore, d: &Delivery) {
    let out = store
        .ack(&queue(), "w", &[Success::new(d.key.clone(), d.token)])
        .await
        .unwrap();
    assert_eq!(out, [AckOutcome::Acked]);
}

/// Takes every wake-up token stored (at most one, bounded anyway).
async fn drain_wakes(l: &mut Box<dyn WakeListener>) {
    for _ in 0..4 {
        if !l.wait(Duration::ZERO).await.unwrap() {
            return;
        }
    }
}

/// Groups take turns, one job each, whether one fetch takes them all or each takes one;
/// the group queues and counts stay exact.
#[tokio::test(start_paused = true)]
async fn groups_take_turns_round_robin() {
    let store = MemoryStore::new();
    put_groups(&store, &["a", "b", "c"], 3).await;
    assert_eq!(info(&store, "b2").await.group, Some(group("b")));
    let st = group_state(&store, None).await;
    assert_eq!((st.running, st.waiting), (0, 9));
    assert_sound(&store);
    // room for all: each group takes its share in one read, in turn
    let reply = fetch(&store, 100).await;
    assert_eq!(
        keys(&reply),
        ["a1", "a2", "a3", "b1", "b2", "b3", "c1", "c2", "c3"]
    );
    assert_eq!(reply.jobs[3].group, Some(group("b")));
    let st = group_state(&store, Some("a")).await;
    assert_eq!((st.running, st.waiting), (3, 0));
    assert_sound(&store);
    for d in &reply.jobs {
        ack(&store, d).await;
    }
    assert_eq!(group_state(&store, None).await.running, 0);

    // room for fewer: a turn each, then again; the last served get the last turns
    put_groups(&store, &["a", "b", "c"], 3).await;
    let short = fetch(&store, 5).await;
    assert_eq!(keys(&short), ["a1", "b1", "c1", "a2", "b2"]);
    let rest = fetch(&store, 3).await;
    assert_eq!(keys(&rest), ["c2", "a3", "b3"]);
    assert_eq!(keys(&fetch(&store, 100).await), ["c3"]);
    assert_sound(&store);
    for d in short.jobs.iter().chain(&rest.jobs) {
        ack(&store, d).await;
    }

    put_groups(&store, &["a", "b", "c"], 2).await;
    let mut order = Vec::new();
    for _ in 0..6 {
        order.push(fetch_one(&store).await.key.to_string());
        assert_sound(&store);
    }
    assert_eq!(order, ["a1", "b1", "c1", "a2", "b2", "c2"]);
    let reply = fetch(&store, 10).await;
    assert!(reply.jobs.is_empty());
}

/// A group's weight is how many jobs it starts per turn.
#[tokio::test(start_paused = true)]
async fn a_weight_is_jobs_per_turn() {
    let store = MemoryStore::new();
    set_limits(&store, "a", GroupLimits::new().weight(3)).await;
    put_groups(&store, &["a", "b"], 6).await;
    assert_eq!(keys(&fetch(&store, 4).await), ["a1", "a2", "a3", "b1"]);
    assert_eq!(keys(&fetch(&store, 4).await), ["a4", "a5", "a6", "b2"]);
    assert_eq!(keys(&fetch(&store, 10).await), ["b3", "b4", "b5", "b6"]);
    assert_sound(&store);
}

/// A group at its cap waits; the end of one of its jobs gives it its turn back at once
/// (and wakes a fetcher), other groups are not held up; without an end it is looked at
/// again after `CAP_RECHECK`.
#[tokio::test(start_paused = true)]
async fn a_cap_holds_its_group_until_a_job_ends() {
    let store = MemoryStore::new();
    set_limits(&store, "a", GroupLimits::new().concurrency(1)).await;
    put_groups(&store, &["a", "b"], 3).await;
    let reply = fetch(&store, 10).await;
    assert_eq!(keys(&reply), ["a1", "b1", "b2", "b3"]);
    let a1 = reply.jobs[0].clone();
    let st = group_state(&store, Some("a")).await;
    assert_eq!((st.running, st.waiting), (1, 2));
    let reply = fetch(&store, 10).await;
    assert!(reply.jobs.is_empty());
    // (a waits until the recheck; the running jobs' leases are later)
    assert_eq!(reply.next_in, Some(crate::group::CAP_RECHECK));
    assert_sound(&store);

    let mut l = store.wake_listener(&queue()).await.unwrap();
    drain_wakes(&mut l).await;
    ack(&store, &a1).await;
    assert!(
        l.wait(Duration::ZERO).await.unwrap(),
        "an end wakes a fetcher"
    );
    let reply = fetch(&store, 10).await;
    assert_eq!(keys(&reply), ["a2"]);
    let a2 = reply.jobs[0].clone();
    assert_sound(&store);

    // no end: the cap is looked at again after the recheck (a2 still runs: a waits again)
    advance(crate::group::CAP_RECHECK).await;
    assert!(fetch(&store, 10).await.jobs.is_empty());
    assert_sound(&store);
    // a failure frees the slot too: a3 (queued before a2's retry) goes next
    drain_wakes(&mut l).await;
    fail(&store, &a2, FailAction::Retry(Duration::ZERO))
        .await
        .unwrap();
    assert!(
        l.wait(Duration::ZERO).await.unwrap(),
        "a failure wakes a fetcher"
    );
    assert_eq!(keys(&fetch(&store, 10).await), ["a3"]);
    assert_sound(&store);
}

/// A group's rate: GCRA as the topic's, with paused time; other groups run meanwhile.
#[tokio::test(start_paused = true)]
async fn a_group_rate_spaces_its_jobs() {
    let store = MemoryStore::new();
    let rate = Rate::new(2, SEC).unwrap(); // one job per 500 ms, no burst
    set_limits(&store, "a", GroupLimits::new().rate(rate)).await;
    put_groups(&store, &["a"], 3).await;
    put_groups(&store, &["b"], 2).await;
    let reply = fetch(&store, 10).await;
    assert_eq!(keys(&reply), ["a1", "b1", "b2"]);
    let reply = fetch(&store, 10).await;
    assert!(reply.jobs.is_empty());
    assert_eq!(reply.next_in, Some(Duration::from_millis(500)));
    advance(Duration::from_millis(499)).await;
    assert!(fetch(&store, 10).await.jobs.is_empty());
    advance(Duration::from_millis(1)).await;
    assert_eq!(keys(&fetch(&store, 10).await), ["a2"]);
    advance(Duration::from_millis(500)).await;
    assert_eq!(keys(&fetch(&store, 10).await), ["a3"]);
    // a4 waits for a's next turn; new limits start a fresh budget and give a its turn back
    put_in(&store, "a", "a4", Priority::NORMAL).await;
    assert!(fetch(&store, 10).await.jobs.is_empty());
    set_limits(&store, "a", GroupLimits::new().rate(rate)).await;
    assert_eq!(keys(&fetch(&store, 10).await), ["a4"]);
    assert_sound(&store);
}

/// A handler's throttle of a grouped job holds its group only (the topic is not
/// throttled, the throttle is counted); the group is looked at again when the hold ends.
#[tokio::test(start_paused = true)]
async fn a_throttle_holds_only_its_group() {
    let store = MemoryStore::new();
    put_groups(&store, &["a", "b"], 2).await;
    let a1 = fetch_one(&store).await;
    assert_eq!(a1.key.as_str(), "a1");
    let start = now(&store).await;
    fail(&store, &a1, FailAction::Throttle(10 * SEC))
        .await
        .unwrap();
    let st = group_state(&store, Some("a")).await;
    assert_eq!(st.held_until_ms, Some(start + 10_000));
    assert_eq!((st.running, st.waiting), (0, 1));
    let reply = fetch(&store, 10).await;
    assert_eq!(keys(&reply), ["b1", "b2"]);
    let stats = store.stats(&queue()).await.unwrap();
    assert_eq!(stats.throttles, 1);
    let reply = fetch(&store, 10).await;
    assert!(reply.jobs.is_empty());
    assert_eq!(reply.next_in, Some(10 * SEC));
    assert_sound(&store);
    advance(10 * SEC).await;
    // a2 is queued; a1, due again now, joins the queue behind it (never leased directly)
    let reply = fetch(&store, 10).await;
    assert_eq!(keys(&reply), ["a2"]);
    assert_eq!(reply.next_in, Some(Duration::ZERO));
    assert_sound(&store);
    assert_eq!(keys(&fetch(&store, 10).await), ["a1"]);
    assert_eq!(group_state(&store, Some("a")).await.held_until_ms, None);
    assert_sound(&store);
}

/// A hold set through `Operate::group` (a worker's hold in other partitions) keeps the
/// later end; new limits give a waiting group its turn back first.
#[tokio::test(start_paused = true)]
async fn a_hold_keeps_the_later_end() {
    let store = MemoryStore::new();
    put_groups(&store, &["a", "b"], 1).await;
    let start = now(&store).await;
    let hold = |d| GroupChange {
        group: Some(group("a")),
        limits: None,
        hold: Some(d),
    };
    let st = store.group(&queue(), &hold(5 * SEC)).await.unwrap();
    assert_eq!(st.held_until_ms, Some(start + 5_000));
    let st = store.group(&queue(), &hold(SEC)).await.unwrap();
    assert_eq!(st.held_until_ms, Some(start + 5_000));
    assert_eq!(keys(&fetch(&store, 10).await), ["b1"]);
    advance(5 * SEC).await;
    assert_eq!(keys(&fetch(&store, 10).await), ["a1"]);
    assert_sound(&store);
}

/// A released grouped job goes back to the front of its group's queue.
#[tokio::test(start_paused = true)]
async fn a_release_goes_to_the_front_of_its_group() {
    let store = MemoryStore::new();
    put_groups(&store, &["a"], 3).await;
    let a1 = fetch_one(&store).await;
    assert_eq!(a1.key.as_str(), "a1");
    let out = store
        .release(&queue(), &[(a1.key.clone(), a1.token)])
        .await
        .unwrap();
    assert_eq!(out, [true]);
    assert_eq!(group_state(&store, Some("a")).await.running, 0);
    assert_sound(&store);
    assert_eq!(keys(&fetch(&store, 10).await), ["a1", "a2", "a3"]);
    assert_sound(&store);
}

/// Within a group, the highest priority first, FIFO within a priority.
#[tokio::test(start_paused = true)]
async fn priority_orders_a_group_queue() {
    let store = MemoryStore::new();
    put_in(&store, "a", "low", Priority::LOW).await;
    put_in(&store, "a", "n1", Priority::NORMAL).await;
    put_in(&store, "a", "high", Priority::HIGHEST).await;
    put_in(&store, "a", "n2", Priority::NORMAL).await;
    assert_eq!(keys(&fetch(&store, 10).await), ["high", "n1", "n2", "low"]);
    assert_sound(&store);
}

/// Grouped ready jobs are listed after the others and counted as ready; a cancel, a
/// reschedule or a replace takes one out of its group's queue; a grouped job due later is
/// queued by the fetch that finds it due, and leased by the next; an expired lease frees
/// its group's slot.
#[tokio::test(start_paused = true)]
async fn grouped_jobs_move_like_the_others() {
    let store = MemoryStore::new();
    set_limits(&store, "a", GroupLimits::new().concurrency(1)).await;
    put(&store, "plain", Due::Now).await;
    put_groups(&store, &["a"], 3).await;
    let chunk = store
        .list(
            &queue(),
            JobState::Ready,
            &crate::inspect::ListFrom::Start,
            10,
        )
        .await
        .unwrap();
    let listed: Vec<_> = chunk.jobs.iter().map(|(_, j)| j.key.to_string()).collect();
    assert_eq!(listed, ["plain", "a1", "a2", "a3"]);
    assert!(!chunk.more);
    assert_eq!(store.stats(&queue()).await.unwrap().ready, 4);

    assert_eq!(
        store.cancel(&queue(), &key("a2")).await.unwrap(),
        CancelOutcome::Cancelled
    );
    let out = store
        .reschedule(&queue(), &key("a1"), NewDue::After(SEC))
        .await
        .unwrap();
    assert!(matches!(out, RescheduleOutcome::Rescheduled { .. }));
    let again = NewJob {
        replace: true,
        group: Some(group("a")),
        batch: None,
        ..new_job("a3", Due::After(SEC))
    };
    let out = store
        .enqueue(&queue(), &[again], EnqueueCall::new())
        .await
        .unwrap();
    assert_eq!(out, [EnqueueOutcome::Replaced]);
    assert_eq!(group_state(&store, Some("a")).await.waiting, 0);
    assert_sound(&store);
    assert_eq!(keys(&fetch(&store, 10).await), ["plain"]);

    // due later: queued by one fetch, leased by the next
    advance(SEC).await;
    let reply = fetch(&store, 10).await;
    assert!(reply.jobs.is_empty());
    assert_eq!(reply.next_in, Some(Duration::ZERO));
    assert_eq!(group_state(&store, Some("a")).await.waiting, 2);
    assert_sound(&store);
    let request = FetchRequest {
        max_jobs: 10,
        lease: SEC,
        ..FetchRequest::default()
    };
    let reply = store.fetch(&queue(), &request).await.unwrap();
    assert_eq!(keys(&reply), ["a1"]);
    assert_sound(&store);
    // its lease runs out: recovered (to retry), and a's slot is free for a3
    advance(SEC + Duration::from_millis(1)).await;
    let reply = store.fetch(&queue(), &request).await.unwrap();
    assert_eq!(keys(&reply), ["a3"]);
    assert_eq!(group_state(&store, Some("a")).await.running, 1);
    assert_sound(&store);
}

/// A group whose queue runs out in a fetch that also finds a due job of it keeps a turn:
/// the job is not left queued with its group neither in the rotation nor waiting.
#[tokio::test(start_paused = true)]
async fn a_group_emptied_and_refilled_by_one_fetch_keeps_its_turn() {
    let store = MemoryStore::new();
    put_in(&store, "a", "a1", Priority::NORMAL).await;
    let later = NewJob {
        group: Some(group("a")),
        batch: None,
        ..new_job("a2", Due::After(SEC))
    };
    store
        .enqueue(&queue(), &[later], EnqueueCall::new())
        .await
        .unwrap();
    advance(SEC).await;
    let reply = fetch(&store, 10).await;
    assert_eq!(keys(&reply), ["a1"]);
    assert_eq!(reply.next_in, Some(Duration::ZERO));
    assert_sound(&store);
    assert_eq!(keys(&fetch(&store, 10).await), ["a2"]);
    assert_sound(&store);
}

/// A job of batch `batch` under `k`, due now.
fn member_job(k: &str, batch: &str) -> NewJob {
    NewJob {
        batch: Some(crate::batch::BatchId::new(batch).unwrap()),
        ..new_job(k, Due::Now)
    }
}

/// Acks every delivery of one fetch of up to `max_jobs`.
async fn run_all(store: &MemoryStore, max_jobs: usize) {
    let leases: Vec<_> = fetch(store, max_jobs)
        .await
        .jobs
        .iter()
        .map(crate::store::lease_of)
        .collect();
    let out = store
        .ack(&queue(), "", &crate::store::Success::of(&leases))
        .await
        .unwrap();
    assert!(out.iter().all(|o| *o == AckOutcome::Acked), "{out:?}");
}

/// Notes of one ms take the next sequence, in the order their jobs ended; an id deleted is
/// never given again; a malformed id refuses a delete before anything is deleted.
#[tokio::test(start_paused = true)]
async fn outbox_ids_follow_each_other_and_are_never_given_twice() {
    let store = MemoryStore::new();
    let q = queue();
    let jobs = ["a", "b", "c"].map(|k| member_job(k, "b1"));
    store.enqueue(&q, &jobs, EnqueueCall::new()).await.unwrap();
    let t0 = now(&store).await;
    run_all(&store, 3).await;
    let notes = store.outbox(&q, None, 10).await.unwrap();
    let seen: Vec<_> = notes
        .iter()
        .map(|n| (n.id.clone(), n.key.to_string(), n.outcome))
        .collect();
    let ok = crate::batch::MemberState::Succeeded;
    assert_eq!(
        seen,
        [
            (format!("{t0}-0"), "a".to_owned(), ok),
            (format!("{t0}-1"), "b".to_owned(), ok),
            (format!("{t0}-2"), "c".to_owned(), ok),
        ]
    );
    let ids: Vec<String> = notes.iter().map(|n| n.id.clone()).collect();
    let bad = [ids[0].clone(), "x-1".to_owned()];
    assert!(matches!(
        store.outbox_done(&q, &bad).await,
        Err(Error::Protocol(_))
    ));
    assert_eq!(store.outbox(&q, None, 10).await.unwrap().len(), 3);
    store.outbox_done(&q, &ids).await.unwrap();
    assert!(store.outbox(&q, None, 10).await.unwrap().is_empty());
    // the same ms: after the last id given, though its note is gone
    store
        .enqueue(&q, &[member_job("d", "b1")], EnqueueCall::new())
        .await
        .unwrap();
    run_all(&store, 1).await;
    advance(Duration::from_millis(5)).await;
    store
        .enqueue(&q, &[member_job("e", "b1")], EnqueueCall::new())
        .await
        .unwrap();
    run_all(&store, 1).await;
    let ids: Vec<String> = store
        .outbox(&q, None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.id)
        .collect();
    assert_eq!(ids, [format!("{t0}-3"), format!("{}-0", t0 + 5)]);
    // a partition never written: a malformed id is refused, and no partition is made
    let other = Queue::new(Topic::new("elsewhere").unwrap(), 0);
    assert!(store.outbox_done(&other, &bad).await.is_err());
    assert!(store.outbox(&other, None, 10).await.unwrap().is_empty());
    assert!(store.job(&other, &key("a")).await.unwrap().is_none());
    assert_sound(&store);
}

/// A batch marked done is kept for its retention, to the ms, by the store's clock; then it
/// is gone, and its id opens a new batch.
#[tokio::test(start_paused = true)]
async fn a_done_batch_is_kept_for_its_retention_then_gone() {
    use crate::batch::{BatchSpec, BatchThen, FailurePolicy};
    let store = MemoryStore::new();
    assert!(store.is_untouched());
    let id = crate::batch::BatchId::new("kept").unwrap();
    let hour = Duration::from_secs(3600);
    let spec = BatchSpec {
        then: BatchThen::Nothing,
        policy: FailurePolicy::WaitAll,
        retention: hour,
    };
    store.batch_open(&id, &spec).await.unwrap();
    assert!(!store.is_untouched());
    advance(SEC).await;
    let done = store.batch_mark_done(&id).await.unwrap();
    assert!(done.done && done.closed);
    advance(hour).await;
    assert!(store.batch(&id).await.unwrap().is_some(), "its last ms");
    advance(Duration::from_millis(1)).await;
    assert!(store.batch(&id).await.unwrap().is_none());
    assert!(matches!(
        store.batch_close(&id).await,
        Err(Error::BatchNotFound(_))
    ));
    let (created, fresh) = store.batch_open(&id, &spec).await.unwrap();
    assert!(created && !fresh.done);
    assert_eq!(fresh.created_ms, done.done_ms + ms(hour) + 1);
    let listed: Vec<_> = store
        .open_batches(None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(listed, [id]);
    assert_sound(&store);
}
