//! Conformance bodies: group commit of concurrent single enqueues. It lives in the client,
//! above the `Store` trait, so every store must give the same answers with it.

use super::*;

/// Single enqueues from many tasks at once, all due at one millisecond: every job is stored
/// once, each task's jobs keep its order (same-ms FIFO, whatever batches they went in), and a
/// bad call in the burst gets its own typed error without touching the others.
pub async fn concurrent_single_enqueues_keep_their_order<H: Harness>(h: &H) {
    const TASKS: usize = 32;
    const EACH: usize = 8;
    let c = h.client().await;
    let t = c.topic(close_order::TOPIC).unwrap();
    // One millisecond a day ahead, by the store's clock.
    let at =
        std::time::SystemTime::UNIX_EPOCH + Duration::from_millis(now(h).await + 24 * 3_600_000);
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(TASKS + 1));
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let (t, start) = (t.clone(), start.clone());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            for j in 0..EACH {
                let e = t
                    .enqueue(raw(j as u64))
                    .key(format!("gc-{i:02}-{j:02}"))
                    .at(at)
                    .await
                    .unwrap();
                assert_eq!(e.outcome, EnqueueOutcome::Created, "gc-{i:02}-{j:02}");
            }
        }));
    }
    let bad = {
        let (t, start) = (t.clone(), start.clone());
        tokio::spawn(async move {
            start.wait().await;
            t.enqueue(raw(0)).key("").at(at).await
        })
    };
    for task in tasks {
        task.await.unwrap();
    }
    assert!(
        matches!(bad.await.unwrap(), Err(Error::InvalidKey { .. })),
        "the bad key is refused on its own"
    );
    assert_eq!(c.enqueues_waiting(), 0, "no caller is left queued");

    let mut keys = Vec::new();
    let mut page = dq::Page::first(dq::MAX_PAGE);
    for _ in 0..TASKS * EACH {
        let got = t.list(JobState::Scheduled, page).await.unwrap();
        keys.extend(got.jobs.iter().map(|j| j.key.as_str().to_owned()));
        let Some(next) = got.next else { break };
        page = dq::Page::after(next, dq::MAX_PAGE);
    }
    assert_eq!(keys.len(), TASKS * EACH);
    assert_eq!(keys.iter().collect::<HashSet<_>>().len(), TASKS * EACH);
    for i in 0..TASKS {
        let mine: Vec<&String> = keys
            .iter()
            .filter(|k| k.starts_with(&format!("gc-{i:02}-")))
            .collect();
        let mut sorted = mine.clone();
        sorted.sort();
        assert_eq!(mine, sorted, "task {i}'s jobs out of order in {keys:?}");
    }
}
