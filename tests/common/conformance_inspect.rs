//! The store conformance suite, inspection part: the typed job view, the typed dead-queue
//! calls and listing the jobs of each state page by page, on every store.
//!
//! Registered by [`conformance_inspect_suite!`](crate::conformance_inspect_suite) next to
//! `conformance_suite!` in each store's test file; bodies and helpers as in `conformance`.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use dq::store::from_unix_ms;
use dq::store::{FailAction, Queue};
use dq::{
    AttemptOutcome, CancelOutcome, Cursor, Error, JobInfo, JobPage, JobSpec, JobState, MAX_PAGE,
    Page, Topic, TopicClient,
};

use super::Harness;
use super::conformance::{
    HOUR, LONG_LEASE, close_order, fail, fetch, fetch_one, info, order, raw, req, req_max,
};

/// Generates, for one store, a `#[tokio::test]` per inspection body, each followed by the
/// harness's invariant check.
#[macro_export]
macro_rules! conformance_inspect_suite {
    ($new:expr) => {
        $crate::conformance_inspect_suite!(@bodies $new;
            typed_job_view_decodes_payload_and_times,
            typed_dead_queue_calls,
            list_orders_time_states_across_partitions,
            list_cursor_is_exact_when_jobs_move,
            list_ready_in_queue_order,
            list_refuses_bad_pages,
        );
    };
    (@bodies $new:expr; $($name:ident),* $(,)?) => {$(
        #[tokio::test]
        async fn $name() {
            let h = $new;
            $crate::common::conformance_inspect::$name(&h).await;
            $crate::common::Harness::check_invariants(&h).await;
        }
    )*};
}

/// Every page of `state`'s listing, `limit` jobs at a time, following the cursors (also
/// through their text form) until there is no next page. Checks each page's size.
pub async fn list_all(t: &TopicClient, state: JobState, limit: usize) -> Vec<JobInfo> {
    let mut all = Vec::new();
    let mut page = Page::first(limit);
    for _ in 0..100_000 {
        let JobPage { jobs, next } = t.list(state, page).await.expect("list");
        assert!(
            jobs.len() <= limit,
            "{} jobs on a page of {limit}",
            jobs.len()
        );
        assert!(jobs.iter().all(|j| j.state == state), "{jobs:?}");
        all.extend(jobs);
        let Some(next) = next else { return all };
        let text = next.to_string();
        let parsed: Cursor = text.parse().expect("a cursor parses back");
        assert_eq!(parsed, next, "{text}");
        page = Page::after(parsed, limit);
    }
    panic!("the {state} listing did not end in 100,000 pages");
}

fn keys(jobs: &[JobInfo]) -> Vec<String> {
    jobs.iter().map(|j| j.key.to_string()).collect()
}

/// Panics unless no key is listed twice.
fn assert_unique(jobs: &[JobInfo]) {
    let mut seen = HashSet::new();
    for j in jobs {
        assert!(seen.insert(j.key.clone()), "{} listed twice", j.key);
    }
}

/// `client.job::<J>` decodes the payload and gives times as `SystemTime`s in every state; a
/// payload that does not decode is reported in the view, not as an error of the call.
pub async fn typed_job_view_decodes_payload_and_times<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("orders.close").unwrap();
    let q = Queue::new(Topic::new("orders.close").unwrap(), 0);
    c.enqueue::<close_order>(order(7))
        .key("later")
        .delay(HOUR)
        .await
        .unwrap();
    let v = c.job::<close_order>("later").await.unwrap().unwrap();
    let i = info(&t, "later").await;
    assert_eq!(v.key.as_str(), "later");
    assert_eq!(v.state, JobState::Scheduled);
    assert_eq!(*v.payload.as_ref().unwrap(), order(7));
    assert_eq!(v.raw_payload, i.payload);
    assert_eq!(v.due, from_unix_ms(i.due_ms));
    assert_eq!(v.created, from_unix_ms(i.created_ms));
    assert!(v.due >= v.created + HOUR, "{v:?}");
    assert_eq!((v.lease_deadline, v.died, v.attempts), (None, None, 0));
    assert!(c.job::<close_order>("nobody").await.unwrap().is_none());

    // 0xc1 is never valid MessagePack: the job is still readable, its payload an error.
    t.enqueue(vec![0xc1]).key("garbled").await.unwrap();
    let v = c.job::<close_order>("garbled").await.unwrap().unwrap();
    assert!(matches!(v.payload, Err(Error::Decode(_))), "{v:?}");
    assert_eq!(v.raw_payload, [0xc1]);
    assert_eq!(v.state, JobState::Ready);

    // Running: the lease deadline; in retry: the next attempt and the attempt's time.
    let d = fetch_one(h, &q, &req()).await;
    assert_eq!(d.key.as_str(), "garbled");
    let v = c.job::<close_order>("garbled").await.unwrap().unwrap();
    assert_eq!(v.state, JobState::Active);
    assert_eq!(v.lease_deadline, Some(from_unix_ms(d.lease_deadline_ms)));
    assert_eq!((v.died, v.attempts), (None, 1));
    fail(h, &d, FailAction::Retry(HOUR), "boom").await.unwrap();
    let v = c.job::<close_order>("garbled").await.unwrap().unwrap();
    let i = info(&t, "garbled").await;
    assert_eq!(v.state, JobState::Retry);
    assert_eq!((v.lease_deadline, v.died), (None, None));
    assert_eq!(v.due, from_unix_ms(i.due_ms));
    assert_eq!(v.history.len(), 1);
    assert_eq!(v.history[0].at, from_unix_ms(i.history[0].at_ms));
    assert_eq!(
        (
            v.history[0].attempt,
            v.history[0].outcome,
            v.history[0].error.as_str()
        ),
        (1, AttemptOutcome::Failed, "boom")
    );

    // Dead: when it died.
    c.reschedule::<close_order>("later", dq::NewDue::After(Duration::ZERO))
        .await
        .unwrap();
    let d = fetch_one(h, &q, &req()).await;
    assert_eq!(d.key.as_str(), "later");
    fail(h, &d, FailAction::Bury, "no").await.unwrap();
    let v = c.job::<close_order>("later").await.unwrap().unwrap();
    let i = info(&t, "later").await;
    assert_eq!(v.state, JobState::Dead);
    assert_eq!(v.died, Some(from_unix_ms(i.died_ms.unwrap())));
    assert_eq!(i.lease_deadline_ms, None);
    assert!(v.died.unwrap() >= from_unix_ms(d.leased_ms));
}

/// Fetches the named jobs of `q` (due now) one by one and buries each, oldest death first.
async fn bury_in_order<H: Harness>(h: &H, q: &Queue, n: usize) -> Vec<String> {
    let mut order = Vec::new();
    for _ in 0..n {
        let d = fetch_one(h, q, &req()).await;
        fail(h, &d, FailAction::Bury, "dead").await.unwrap();
        order.push(d.key.to_string());
        // Deaths one store-millisecond apart, so the order by death time is the order here.
        let at = super::conformance::now(h).await;
        super::conformance::until_store_time(h, at).await;
    }
    order
}

/// The typed dead-queue calls: a page of decoded dead jobs oldest death first with a cursor,
/// requeue and purge by key, purge all; a bad key is refused before anything changes.
pub async fn typed_dead_queue_calls<H: Harness>(h: &H) {
    let c = h.client().await;
    let q = Queue::new(Topic::new("orders.close").unwrap(), 0);
    for i in 0..4 {
        c.enqueue::<close_order>(order(i))
            .key(format!("d{i}"))
            .await
            .unwrap();
    }
    let died = bury_in_order(h, &q, 4).await;

    let first = c.dead::<close_order>(Page::first(3)).await.unwrap();
    let got: Vec<String> = first.jobs.iter().map(|j| j.key.to_string()).collect();
    assert_eq!(got, died[..3]);
    for j in &first.jobs {
        assert_eq!(j.state, JobState::Dead);
        assert!(j.died.is_some() && j.payload.is_ok(), "{j:?}");
        assert_eq!(j.history[0].outcome, AttemptOutcome::Buried);
    }
    let rest = c
        .dead::<close_order>(Page::after(first.next.expect("a next page"), 3))
        .await
        .unwrap();
    assert_eq!(rest.jobs.len(), 1);
    assert_eq!(rest.jobs[0].key.as_str(), died[3]);
    assert!(rest.next.is_none());

    let bad = c
        .requeue_dead::<close_order>(&[died[0].as_str(), "bad key"])
        .await;
    assert!(matches!(bad, Err(Error::InvalidKey { .. })), "{bad:?}");
    let bad = c.purge_dead::<close_order>(&[died[0].as_str(), ""]).await;
    assert!(matches!(bad, Err(Error::InvalidKey { .. })), "{bad:?}");
    assert_eq!(c.stats::<close_order>().await.unwrap().dead, 4);

    assert_eq!(
        c.requeue_dead::<close_order>(&[died[0].as_str(), "nobody"])
            .await
            .unwrap(),
        1
    );
    let v = c.job::<close_order>(&died[0]).await.unwrap().unwrap();
    assert_eq!((v.state, v.attempts, v.died), (JobState::Ready, 0, None));
    assert_eq!(v.history.len(), 1, "history kept");
    assert_eq!(c.purge_dead::<close_order>(&[&died[1]]).await.unwrap(), 1);
    assert!(c.job::<close_order>(&died[1]).await.unwrap().is_none());
    assert_eq!(c.purge_all_dead::<close_order>().await.unwrap(), 2);
    let empty = c.dead::<close_order>(Page::first(10)).await.unwrap();
    assert!(empty.jobs.is_empty() && empty.next.is_none());
    assert_eq!(
        c.cancel::<close_order>(&died[0]).await.unwrap(),
        CancelOutcome::Cancelled
    );
}

/// Scheduled and retry jobs are listed by due time, active by lease deadline, dead by time of
/// death, over all partitions merged; pages of any size give the same sequence, and the
/// typed listing decodes each job.
pub async fn list_orders_time_states_across_partitions<H: Harness>(h: &H) {
    let c = h.client_with(|b| b.partitions("list.t", 3)).await.unwrap();
    let t = c.topic("list.t").unwrap();
    let n = 60u64;
    // Due times out of key order, some sharing a millisecond.
    let jobs: Vec<_> = (0..n)
        .map(|i| {
            let delay = HOUR + Duration::from_millis((i * 37) % 23 * 1000);
            JobSpec::new(raw(i)).key(format!("s{i}")).delay(delay)
        })
        .collect();
    t.enqueue_bulk(jobs).await.unwrap();
    let full = list_all(&t, JobState::Scheduled, MAX_PAGE).await;
    assert_eq!(full.len() as u64, n);
    assert_unique(&full);
    assert!(
        full.windows(2).all(|w| w[0].due_ms <= w[1].due_ms),
        "due order"
    );
    for limit in [1, 7, 59, 60] {
        assert_eq!(
            keys(&list_all(&t, JobState::Scheduled, limit).await),
            keys(&full),
            "pages of {limit}"
        );
    }
    // Within a partition, jobs of the same millisecond keep the order they were queued in.
    for p in 0..3 {
        let mine: Vec<&JobInfo> = full.iter().filter(|j| j.key.partition(3) == p).collect();
        for w in mine.windows(2) {
            if w[0].due_ms == w[1].due_ms {
                let id = |j: &JobInfo| j.key.as_str()[1..].parse::<u64>().unwrap();
                assert!(id(w[0]) < id(w[1]), "{:?} before {:?}", w[0].key, w[1].key);
            }
        }
    }
    let typed = c
        .list::<close_order>(JobState::Scheduled, Page::first(5))
        .await
        .unwrap();
    assert!(
        typed.jobs.is_empty() && typed.next.is_none(),
        "another topic"
    );

    // Active, by lease deadline: leases of 50, 40, … s, so the last fetched runs out first.
    let topic = Topic::new("list.t").unwrap();
    let mut active = Vec::new();
    for i in 0..5u64 {
        let key = format!("a{i}");
        t.enqueue(raw(100 + i)).key(&key).await.unwrap();
        let q = Queue::new(topic.clone(), dq::JobKey::new(&key).unwrap().partition(3));
        let lease = LONG_LEASE + Duration::from_secs(20 - 5 * i);
        let d = fetch(
            h,
            &q,
            &dq::store::FetchRequest {
                lease,
                ..req_max(1)
            },
        )
        .await;
        assert_eq!(d.jobs.len(), 1);
        active.push(d.jobs.into_iter().next().unwrap());
    }
    let listed = list_all(&t, JobState::Active, 2).await;
    let mut by_deadline = active.clone();
    by_deadline.sort_by_key(|d| (d.lease_deadline_ms, d.key.clone()));
    assert_eq!(
        keys(&listed),
        by_deadline
            .iter()
            .map(|d| d.key.to_string())
            .collect::<Vec<_>>()
    );
    for (j, d) in listed.iter().zip(&by_deadline) {
        assert_eq!(j.lease_deadline_ms, Some(d.lease_deadline_ms));
        assert_eq!(j.died_ms, None);
    }

    // Retry, by next attempt; dead, by death.
    for (i, d) in active.iter().enumerate() {
        let action = if i % 2 == 0 {
            FailAction::Retry(HOUR - Duration::from_secs(i as u64 * 60))
        } else {
            FailAction::Bury
        };
        fail(h, d, action, "e").await.unwrap();
    }
    let retry = list_all(&t, JobState::Retry, 1).await;
    assert_eq!(keys(&retry), ["a4", "a2", "a0"]);
    assert!(retry.iter().all(|j| j.lease_deadline_ms.is_none()));
    let dead = list_all(&t, JobState::Dead, 1).await;
    assert_eq!(dead.len(), 2);
    assert!(dead.windows(2).all(|w| w[0].died_ms <= w[1].died_ms));
    assert!(dead.iter().all(|j| j.died_ms.is_some()));
    assert_eq!(
        list_all(&t, JobState::Dead, 10).await.len(),
        t.list(JobState::Dead, Page::first(10))
            .await
            .unwrap()
            .jobs
            .len()
    );
    assert_eq!(t.purge_all_dead().await.unwrap(), 2);
}

/// A cursor is a place, not an offset: jobs cancelled or added between pages (the cursor's
/// own job among them) shift nothing; the rest are listed once, in order. 2,100 jobs due in
/// the same millisecond in one partition share scores on Redis, so its places tie and the key
/// decides.
pub async fn list_cursor_is_exact_when_jobs_move<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("list.c").unwrap();
    let at = SystemTime::now() + HOUR;
    let jobs: Vec<_> = (0..2100u64)
        .map(|i| {
            JobSpec::new(raw(i))
                .key(format!("c{:04}", (i * 7919) % 2100))
                .at(at)
        })
        .collect();
    t.enqueue_bulk(jobs).await.unwrap();
    let before = keys(&list_all(&t, JobState::Scheduled, MAX_PAGE).await);
    assert_eq!(before.len(), 2100);

    let mut cancelled = HashSet::new();
    let mut seen = Vec::new();
    let mut page = Page::first(300);
    for round in 0..100 {
        let got = t.list(JobState::Scheduled, page).await.unwrap();
        seen.extend(keys(&got.jobs));
        let Some(next) = got.next else { break };
        // Cancel the page's last job (the cursor's own place) and one further on, and add a
        // job due earlier (before the cursor: not listed) between pages.
        let last = got.jobs.last().unwrap().key.to_string();
        assert_eq!(t.cancel(&last).await.unwrap(), CancelOutcome::Cancelled);
        cancelled.insert(last.clone());
        if let Some(ahead) = before.iter().skip_while(|k| **k != last).nth(5) {
            assert_eq!(t.cancel(ahead).await.unwrap(), CancelOutcome::Cancelled);
            cancelled.insert(ahead.clone());
        }
        t.enqueue(raw(0))
            .key(format!("early{round}"))
            .delay(Duration::from_secs(1800))
            .await
            .unwrap();
        page = Page::after(next, 300);
    }
    let want: Vec<String> = before
        .iter()
        .filter(|k| !cancelled.contains(*k) || seen.contains(k))
        .cloned()
        .collect();
    assert_eq!(seen, want, "each job once, in order, none skipped");
}

/// Ready jobs are listed in the order workers take them within each partition (a released
/// job back at the front), cancelled ones not at all, every job once, over all partitions.
pub async fn list_ready_in_queue_order<H: Harness>(h: &H) {
    let c = h.client_with(|b| b.partitions("list.r", 3)).await.unwrap();
    let t = c.topic("list.r").unwrap();
    let topic = Topic::new("list.r").unwrap();
    let jobs: Vec<_> = (0..90u64)
        .map(|i| JobSpec::new(raw(i)).key(format!("r{i:02}")))
        .collect();
    t.enqueue_bulk(jobs).await.unwrap();
    // Cancelled ones leave stale queue entries behind on Redis: never listed.
    for i in (0..90).step_by(4) {
        assert_eq!(
            t.cancel(&format!("r{i:02}")).await.unwrap(),
            CancelOutcome::Cancelled
        );
    }
    // One job of partition 0 leased and released: at the front of its queue again.
    let q0 = Queue::new(topic.clone(), 0);
    let d = fetch_one(h, &q0, &req()).await;
    let released = d.key.to_string();
    h.store()
        .release(&q0, &[dq::store::lease_of(&d)])
        .await
        .unwrap();

    let full = list_all(&t, JobState::Ready, MAX_PAGE).await;
    assert_unique(&full);
    assert_eq!(full.len(), 90 - 23);
    for limit in [1, 4, 66, 67] {
        assert_eq!(
            keys(&list_all(&t, JobState::Ready, limit).await),
            keys(&full),
            "pages of {limit}"
        );
    }
    for p in 0..3u16 {
        let mine: Vec<String> = full
            .iter()
            .filter(|j| j.key.partition(3) == p)
            .map(|j| j.key.to_string())
            .collect();
        let mut want: Vec<String> = (0..90)
            .filter(|i| i % 4 != 0)
            .map(|i| format!("r{i:02}"))
            .filter(|k| dq::JobKey::new(k.as_str()).unwrap().partition(3) == p)
            .collect();
        if p == 0 {
            want.retain(|k| *k != released);
            want.insert(0, released.clone());
        }
        assert_eq!(mine, want, "partition {p} in queue order");
        // Workers take them in exactly that order.
        let q = Queue::new(topic.clone(), p);
        let taken = fetch(h, &q, &req_max(100)).await.jobs;
        let taken_keys: Vec<String> = taken.iter().map(|d| d.key.to_string()).collect();
        assert_eq!(taken_keys, want, "partition {p} as fetched");
        super::conformance::ack_all(h, &q, &taken).await;
    }
    let empty = t.list(JobState::Ready, Page::first(10)).await.unwrap();
    assert!(empty.jobs.is_empty() && empty.next.is_none());
}

/// A page of 0 or more than `MAX_PAGE` jobs, a cursor of another state, a cursor that does not
/// parse, and a ready cursor of another partition count are refused with `InvalidConfig`.
pub async fn list_refuses_bad_pages<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("list.bad").unwrap();
    for limit in [0, MAX_PAGE + 1] {
        let e = t.list(JobState::Scheduled, Page::first(limit)).await;
        assert!(matches!(e, Err(Error::InvalidConfig(_))), "{limit}: {e:?}");
    }
    for i in 0..3 {
        t.enqueue(raw(i))
            .key(format!("k{i}"))
            .delay(HOUR)
            .await
            .unwrap();
    }
    let first = t.list(JobState::Scheduled, Page::first(1)).await.unwrap();
    let cursor = first.next.expect("more pages");
    assert_eq!(cursor.state(), Some(JobState::Scheduled));
    let e = t
        .list(JobState::Retry, Page::after(cursor.clone(), 1))
        .await;
    assert!(matches!(e, Err(Error::InvalidConfig(_))), "{e:?}");
    for text in [
        "",
        "scheduled",
        "scheduled:1:2",
        "nope:1:2:k",
        "ready:x",
        "dead:1:2:bad key",
    ] {
        let e = text.parse::<Cursor>();
        assert!(matches!(e, Err(Error::InvalidConfig(_))), "{text:?}: {e:?}");
    }
    let e = t
        .list(
            JobState::Ready,
            Page::after("ready:0,0".parse().unwrap(), 1),
        )
        .await;
    assert!(matches!(e, Err(Error::InvalidConfig(_))), "{e:?}");
    let typed = c.list::<close_order>(JobState::Dead, Page::first(0)).await;
    assert!(matches!(typed, Err(Error::InvalidConfig(_))), "{typed:?}");
    let e = c
        .list::<super::conformance::bad_topic>(JobState::Dead, Page::first(1))
        .await;
    assert!(matches!(e, Err(Error::InvalidTopic { .. })), "{e:?}");
    for i in 0..3 {
        t.cancel(&format!("k{i}")).await.unwrap();
    }
}
