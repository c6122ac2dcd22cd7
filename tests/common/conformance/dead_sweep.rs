//! Conformance bodies: the dead queue by filter — listing the jobs a filter takes page by page,
//! and requeueing or purging them in bounded chunks (`DeadFilter`, `DeadSweep`).

use dq::{DeadAction, DeadFilter, MAX_SWEEP_CHUNK, Page};

/// The partition of `t` that holds `key`.
fn queue_of(t: &TopicClient, key: &JobKey) -> Queue {
    Queue::new(Topic::new(TOPIC).unwrap(), key.partition(t.partitions()))
}

use super::*;

const TOPIC: &str = "dead.sweep";

/// A client whose topic has 3 partitions, so that every listing merges partitions.
async fn client3<H: Harness>(h: &H) -> (dq::Client, TopicClient) {
    let c = h
        .client_with(|b| b.partitions(TOPIC, 3))
        .await
        .expect("client");
    let t = c.topic(TOPIC).unwrap();
    (c, t)
}

/// Enqueues `jobs` (key, error) due now, fetches them from every partition and buries each
/// with its error.
async fn bury<H: Harness>(h: &H, t: &TopicClient, jobs: &[(String, String)]) {
    for (k, _) in jobs {
        t.enqueue(raw(1)).key(k.as_str()).await.unwrap();
    }
    let mut left: HashMap<String, String> = jobs.iter().cloned().collect();
    for p in 0..t.partitions() {
        let q = Queue::new(Topic::new(TOPIC).unwrap(), p);
        for _ in 0..100 {
            let got = fetch(h, &q, &req_max(1000)).await.jobs;
            if got.is_empty() {
                break;
            }
            for d in got {
                let err = left.remove(d.key.as_str()).expect("a job of this test");
                fail(h, &d, FailAction::Bury, &err).await.unwrap();
            }
        }
    }
    assert!(left.is_empty(), "not buried: {left:?}");
}

fn named(prefix: &str, n: usize, error: &str) -> Vec<(String, String)> {
    (0..n)
        .map(|i| (format!("{prefix}{i:02}"), format!("{error} (#{i})")))
        .collect()
}

async fn dead_keys(t: &TopicClient) -> HashSet<String> {
    let mut out = HashSet::new();
    let mut page = Page::first(1000);
    for _ in 0..100 {
        let got = t.list(JobState::Dead, page).await.unwrap();
        out.extend(got.jobs.iter().map(|j| j.key.to_string()));
        match got.next {
            Some(c) => page = Page::after(c, 1000),
            None => return out,
        }
    }
    panic!("the dead listing did not end");
}

/// A requeue sweep by error text moves exactly the dead jobs whose last error contains it,
/// chunk by chunk (no step reads more than its chunk), and reports its progress; a purge
/// sweep by age deletes only the jobs that died longer ago than the age.
pub async fn sweep_requeues_and_purges_by_filter<H: Harness>(h: &H) {
    let (_c, t) = client3(h).await;
    let partner = named("p", 7, "partner API: 503 Service Unavailable");
    let data = named("d", 5, "bad data: no such customer");
    bury(h, &t, &[partner.clone(), data.clone()].concat()).await;

    let mut sweep = t
        .sweep_dead(DeadAction::Requeue, DeadFilter::all().error_contains("503"))
        .await
        .unwrap()
        .chunk(3)
        .unwrap();
    let mut steps = 0;
    let mut last = sweep.progress();
    while !sweep.is_finished() {
        let p = sweep.step().await.unwrap();
        assert!(
            p.scanned - last.scanned <= 3,
            "a step read {p:?} after {last:?}"
        );
        last = p;
        steps += 1;
        assert!(steps <= 20, "the sweep did not finish");
    }
    assert!(
        steps >= 4,
        "12 jobs in chunks of 3 take at least 4 steps, took {steps}"
    );
    assert_eq!((last.scanned, last.matched, last.done), (12, 7, 7));
    for (k, _) in &partner {
        let i = info(&t, k).await;
        assert_eq!(
            (i.state, i.attempts, i.history.len()),
            (JobState::Ready, 0, 1)
        );
    }
    let dead = dead_keys(&t).await;
    let want: HashSet<String> = data.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(dead, want);

    // A finished sweep does nothing more.
    assert_eq!(sweep.step().await.unwrap(), last);
    // The requeued jobs run and succeed.
    drain_all(h, &t).await;

    // Purge by age: only the jobs that died before the cut.
    let cut = now(h).await;
    until_store_time(h, cut + 50).await;
    let young = named("y", 3, "bad data: no such customer");
    bury(h, &t, &young).await;
    let age = Duration::from_millis(now(h).await - cut - 10);
    let purged = t
        .purge_dead_where(DeadFilter::all().older_than(age))
        .await
        .unwrap();
    assert_eq!(purged, 5);
    let dead = dead_keys(&t).await;
    let want: HashSet<String> = young.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(dead, want);
    for (k, _) in &data {
        assert!(t.job(k).await.unwrap().is_none(), "{k} was purged");
    }

    // Both filters at once, and a filter that takes nothing.
    assert_eq!(
        t.requeue_dead_where(DeadFilter::all().error_contains("partner"))
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        t.purge_dead_where(DeadFilter::all().error_contains("customer"))
            .await
            .unwrap(),
        3
    );
    assert!(dead_keys(&t).await.is_empty());
    drain_all(h, &t).await;
}

/// Acks everything ready in every partition, so the harness's leftover checks pass.
async fn drain_all<H: Harness>(h: &H, t: &TopicClient) {
    for p in 0..t.partitions() {
        drain_due(h, &Queue::new(Topic::new(TOPIC).unwrap(), p)).await;
    }
}

/// A sweep covers the jobs dead when it started: jobs it requeued that die again are not
/// swept a second time, so a requeue sweep always ends.
pub async fn sweep_does_not_revisit_jobs_that_die_again<H: Harness>(h: &H) {
    let (_c, t) = client3(h).await;
    let jobs = named("j", 6, "timeout");
    bury(h, &t, &jobs).await;
    let mut sweep = t
        .sweep_dead(DeadAction::Requeue, DeadFilter::all())
        .await
        .unwrap()
        .chunk(2)
        .unwrap();
    let first = sweep.step().await.unwrap();
    assert_eq!((first.scanned, first.done), (2, 2));
    // The two requeued jobs fail again, after the sweep started.
    until_store_time(h, now(h).await + 2).await;
    let mut again = Vec::new();
    for p in 0..t.partitions() {
        let q = Queue::new(Topic::new(TOPIC).unwrap(), p);
        let got = fetch(h, &q, &req_max(100)).await.jobs;
        for d in got {
            fail(h, &d, FailAction::Bury, "timeout again")
                .await
                .unwrap();
            again.push(d.key.to_string());
        }
    }
    assert_eq!(again.len(), 2);
    let mut steps = 0;
    while !sweep.is_finished() {
        sweep.step().await.unwrap();
        steps += 1;
        assert!(steps <= 10, "the sweep did not finish");
    }
    let p = sweep.progress();
    assert_eq!((p.scanned, p.matched, p.done), (6, 6, 6));
    let dead = dead_keys(&t).await;
    assert_eq!(dead, again.into_iter().collect::<HashSet<_>>());
    t.purge_all_dead().await.unwrap();
    drain_all(h, &t).await;
}

/// `list_dead` pages through the dead jobs a filter takes, oldest death first, across
/// partitions: every match once, in order, none that does not match.
pub async fn list_dead_pages_by_filter<H: Harness>(h: &H) {
    let (_c, t) = client3(h).await;
    let a = named("a", 9, "partner API: 503");
    let b = named("b", 8, "bad data");
    // Interleaved deaths: a0 b0 a1 b1 …
    let mut all = Vec::new();
    for i in 0..9 {
        all.push(a[i].clone());
        if i < 8 {
            all.push(b[i].clone());
        }
    }
    bury(h, &t, &all).await;

    let filter = DeadFilter::all().error_contains("503");
    let mut listed = Vec::new();
    let mut page = Page::first(2);
    let mut pages = 0;
    loop {
        let got = t.list_dead(&filter, page).await.unwrap();
        assert!(got.jobs.len() <= 2);
        for j in &got.jobs {
            assert_eq!(j.state, JobState::Dead);
            assert!(j.history.last().unwrap().error.contains("503"));
        }
        listed.extend(got.jobs);
        pages += 1;
        assert!(pages <= 20, "the filtered listing did not end");
        match got.next {
            Some(c) => page = Page::after(c, 2),
            None => break,
        }
    }
    let keys: Vec<String> = listed.iter().map(|j| j.key.to_string()).collect();
    let mut want: Vec<String> = a.iter().map(|(k, _)| k.clone()).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    want.sort();
    assert_eq!(sorted, want, "every match exactly once");
    let died: Vec<(u64, String)> = listed
        .iter()
        .map(|j| (j.died_ms.unwrap(), j.key.to_string()))
        .collect();
    assert!(
        died.windows(2).all(|w| w[0] <= w[1]),
        "oldest death first: {died:?}"
    );

    // No filter: the plain dead listing.
    let every = t
        .list_dead(&DeadFilter::all(), Page::first(1000))
        .await
        .unwrap();
    assert_eq!((every.jobs.len(), every.next.is_none()), (17, true));
    t.purge_all_dead().await.unwrap();
}

/// Filters and chunks that cannot mean what was asked are refused before anything is read
/// or written.
pub async fn bad_dead_filters_are_refused<H: Harness>(h: &H) {
    let (_c, t) = client3(h).await;
    bury(h, &t, &named("k", 2, "boom")).await;
    let bad = |r: dq::Result<_>| matches!(r, Err(Error::InvalidConfig(_)));
    assert!(bad(t
        .sweep_dead(DeadAction::Purge, DeadFilter::all().error_contains(""))
        .await
        .map(|_| ())));
    assert!(bad(t
        .sweep_dead(
            DeadAction::Purge,
            DeadFilter::all().error_contains("x".repeat(2000))
        )
        .await
        .map(|_| ())));
    assert!(bad(t
        .purge_dead_where(DeadFilter::all().older_than(Duration::MAX))
        .await
        .map(|_| ())));
    for chunk in [0, MAX_SWEEP_CHUNK + 1] {
        let sweep = t
            .sweep_dead(DeadAction::Purge, DeadFilter::all())
            .await
            .unwrap();
        assert!(bad(sweep.chunk(chunk).map(|_| ())));
    }
    assert!(bad(t
        .list_dead(&DeadFilter::all().error_contains(""), Page::first(10))
        .await
        .map(|_| ())));
    assert!(bad(t
        .list_dead(&DeadFilter::all(), Page::first(0))
        .await
        .map(|_| ())));
    assert_eq!(dead_keys(&t).await.len(), 2, "nothing was written");
    t.purge_all_dead().await.unwrap();
}

/// `act_on_dead` acts on a dead job only while it is dead with the time of death listed: a
/// job requeued and buried again since (another error, a later death) is left alone, as is
/// one gone or named twice; with the current time of death it acts.
pub async fn act_on_dead_only_as_listed<H: Harness>(h: &H) {
    let (_c, t) = client3(h).await;
    bury(h, &t, &named("k", 3, "first error")).await;
    let listed = t.list(JobState::Dead, Page::first(10)).await.unwrap().jobs;
    let seen: Vec<(JobKey, u64)> = listed
        .iter()
        .map(|j| (j.key.clone(), j.died_ms.unwrap()))
        .collect();
    let k0 = seen[0].clone();
    let q0 = queue_of(&t, &k0.0);

    // k00 is requeued and dies again, later, with another error.
    assert_eq!(t.requeue_dead(&[k0.0.as_str()]).await.unwrap(), 1);
    until_store_time(h, k0.1 + 1).await;
    let d = fetch_one(h, &q0, &req()).await;
    assert_eq!(d.key, k0.0);
    fail(h, &d, FailAction::Bury, "second error").await.unwrap();
    let again = info(&t, k0.0.as_str()).await;
    assert!(again.died_ms.unwrap() > k0.1);

    for action in [DeadAction::Purge, DeadAction::Requeue] {
        let out = h
            .store()
            .act_on_dead(&q0, action, std::slice::from_ref(&k0))
            .await
            .unwrap();
        assert_eq!(out, [false], "{action:?} of a job that died again since");
    }
    let now_dead = info(&t, k0.0.as_str()).await;
    assert_eq!(
        (
            now_dead.state,
            now_dead.history.last().unwrap().error.as_str()
        ),
        (JobState::Dead, "second error")
    );
    assert_eq!(
        h.store()
            .act_on_dead(&q0, DeadAction::Purge, &[(jk("missing"), k0.1)])
            .await
            .unwrap(),
        [false]
    );

    // As listed now: acted on, once even if named twice.
    let current = (k0.0.clone(), again.died_ms.unwrap());
    let out = h
        .store()
        .act_on_dead(&q0, DeadAction::Requeue, &[current.clone(), current])
        .await
        .unwrap();
    assert_eq!(out, [true, false]);
    let i = info(&t, k0.0.as_str()).await;
    assert_eq!(
        (i.state, i.attempts, i.history.len()),
        (JobState::Ready, 0, 2)
    );

    // The others, each in its own partition, purged as listed.
    for (key, died) in &seen[1..] {
        let q = queue_of(&t, key);
        let out = h
            .store()
            .act_on_dead(&q, DeadAction::Purge, &[(key.clone(), *died)])
            .await
            .unwrap();
        assert_eq!(out, [true]);
        assert!(t.job(key.as_str()).await.unwrap().is_none());
    }
    drain_all(h, &t).await;
}
