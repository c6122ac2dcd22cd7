//! Conformance bodies: record formats (ARCHITECTURE.md §4, docs/UPGRADING.md). Jobs of both
//! record formats live a whole life; a record of a newer format than this dq reads is left byte
//! for byte as it is by every call and reported by fetch; records written before stay readable
//! while new ones are written in the newer format. The registry: a store of this release writes
//! the newest format once every live process reads it — at once on the embedded store (one
//! process) and on a fresh Redis namespace whose only process is the harness's client — and
//! refuses a process that reads less, by the typed error.

use std::time::Duration;

use super::*;
use dq::DeadAction;
use dq::store::{LEGACY_FORMAT, ListFrom, NEWEST_FORMAT, ProcessInfo, ProcessRole};

/// The level is the newest format, new records are written in it, a process reading less is
/// refused with `FormatTooOld` (and not listed), one reading it is accepted.
pub async fn a_process_reading_less_than_the_level_is_refused<H: Harness>(h: &H) {
    let store = h.store();
    let registry = store.format_registry().await.unwrap();
    assert_eq!(registry.level.level, NEWEST_FORMAT);
    assert_eq!(registry.level.hold, None);
    assert_eq!(store.formats().write(), NEWEST_FORMAT);

    let old = ProcessInfo::new(ProcessRole::Producer, LEGACY_FORMAT);
    match store
        .beat_process(&old, Duration::from_secs(60), NEWEST_FORMAT)
        .await
    {
        Err(Error::FormatTooOld { level, reads }) => {
            assert_eq!((level, reads), (NEWEST_FORMAT, LEGACY_FORMAT));
        }
        other => panic!("a process reading format 1 only is refused: {other:?}"),
    }
    let new = ProcessInfo::new(ProcessRole::Worker, NEWEST_FORMAT);
    let level = store
        .beat_process(&new, Duration::from_secs(60), NEWEST_FORMAT)
        .await
        .unwrap();
    assert_eq!(level.level, NEWEST_FORMAT);
    let listed = store.format_registry().await.unwrap().processes;
    assert!(listed.iter().all(|p| p.id != old.id), "{listed:?}");
    store.remove_process(&new.id).await.unwrap();
}

/// Whether `r` is the refusal of a record of `format`, newer than this dq reads.
fn newer_refused<T>(format: u8, r: dq::Result<T>) -> bool {
    matches!(r, Err(Error::NewerFormat { format: f, reads }) if f == format && reads == NEWEST_FORMAT)
}

/// A fetch request whose jobs get one retry, at once.
fn one_retry() -> FetchRequest {
    FetchRequest {
        retry_policy: RetryPolicy::fixed(ms(0), 1).unwrap(),
        ..req()
    }
}

/// Writes new records in `format` from now on (the store's write format).
fn write_in<H: Harness>(h: &H, format: u8) {
    assert_eq!(h.store().formats().set_write(format), format);
}

/// A job of every format (1, 2 and the lean format 3) goes through enqueue → fetch → fail →
/// retry → ack, enqueue → fetch → dead → requeue → ack, and enqueue → fetch → extend →
/// cancel requested → release (deleted as cancelled), and one through fetch → release →
/// fetch → ack, keeping its format at every step; the running job reads as active with its
/// attempt counted, whatever format keeps its lease.
pub async fn both_formats_live_a_whole_job_life<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("formats.life").unwrap();
    let q = queue("formats.life");
    let r = one_retry();
    for format in LEGACY_FORMAT..=NEWEST_FORMAT {
        write_in(h, format);
        let n = u64::from(format);
        let key = format!("life-{format}");
        t.enqueue(raw(n)).key(&key).await.unwrap();
        assert_eq!(h.record_format(&q, &key).await, Some(format));
        let d = fetch_one(h, &q, &r).await;
        assert_eq!(
            (d.key.as_str(), d.attempt, unraw(&d.payload)),
            (&*key, 1, n)
        );
        assert_eq!(h.record_format(&q, &key).await, Some(format), "leased");
        fail(h, &d, FailAction::Retry(ms(0)), "first try")
            .await
            .unwrap();
        assert_eq!(h.record_format(&q, &key).await, Some(format), "retrying");
        let d = fetch_one(h, &q, &r).await;
        assert_eq!(
            (d.key.as_str(), d.attempt, unraw(&d.payload)),
            (&*key, 2, n)
        );
        let i = info(&t, &key).await;
        assert_eq!((i.state, i.history.len()), (JobState::Active, 1));
        ack_all(h, &q, std::slice::from_ref(&d)).await;
        assert_eq!(h.record_format(&q, &key).await, None, "acked");

        let dead = format!("dead-{format}");
        t.enqueue(raw(n + 10)).key(&dead).await.unwrap();
        let d = fetch_one(h, &q, &r).await;
        fail(h, &d, FailAction::Bury, "to the dead queue")
            .await
            .unwrap();
        assert_eq!(info(&t, &dead).await.state, JobState::Dead);
        assert_eq!(h.record_format(&q, &dead).await, Some(format), "dead");
        assert_eq!(dead_page(h, &q, 0, 10).await.len(), 1);
        assert_eq!(
            h.store().requeue_dead(&q, &[jk(&dead)]).await.unwrap(),
            [true]
        );
        assert_eq!(h.record_format(&q, &dead).await, Some(format), "requeued");
        let d = fetch_one(h, &q, &r).await;
        assert_eq!(
            (d.key.as_str(), d.attempt, unraw(&d.payload)),
            (&*dead, 1, n + 10)
        );
        ack_all(h, &q, std::slice::from_ref(&d)).await;

        // the lease calls of a running job, and a cancel of it
        let run = format!("run-{format}");
        t.enqueue(raw(n + 20)).key(&run).await.unwrap();
        let d = fetch_one(h, &q, &r).await;
        let lease = (d.key.clone(), d.token);
        let i = info(&t, &run).await;
        assert_eq!((i.state, i.attempts), (JobState::Active, 1), "running");
        assert_eq!(
            h.store()
                .extend(&q, std::slice::from_ref(&lease), LONG_LEASE)
                .await
                .unwrap(),
            [Extended::Held]
        );
        assert_eq!(
            h.store()
                .extend(&q, &[(d.key.clone(), d.token + 1)], LONG_LEASE)
                .await
                .unwrap(),
            [Extended::Lost],
            "another token"
        );
        assert_eq!(
            h.store().cancel(&q, &jk(&run)).await.unwrap(),
            CancelOutcome::CancelRequested
        );
        assert_eq!(
            h.store()
                .extend(&q, std::slice::from_ref(&lease), LONG_LEASE)
                .await
                .unwrap(),
            [Extended::CancelRequested]
        );
        assert_eq!(
            h.store()
                .release(&q, std::slice::from_ref(&lease))
                .await
                .unwrap(),
            [true]
        );
        assert_eq!(h.record_format(&q, &run).await, None, "cancelled");

        // a release gives the attempt back; the next lease is attempt 1 again
        let back = format!("back-{format}");
        t.enqueue(raw(n + 30)).key(&back).await.unwrap();
        let d = fetch_one(h, &q, &r).await;
        assert_eq!(
            h.store()
                .release(&q, &[(d.key.clone(), d.token)])
                .await
                .unwrap(),
            [true]
        );
        assert_eq!(info(&t, &back).await.state, JobState::Ready);
        assert_eq!(h.record_format(&q, &back).await, Some(format), "released");
        let again = fetch_one(h, &q, &r).await;
        assert_eq!((again.key.as_str(), again.attempt), (&*back, 1));
        assert_ne!(again.token, d.token);
        assert_eq!(
            h.store()
                .ack(&q, "", &dq::store::Success::of(&[(d.key.clone(), d.token)]))
                .await
                .unwrap(),
            [AckOutcome::Stale],
            "the released lease"
        );
        ack_all(h, &q, std::slice::from_ref(&again)).await;
    }
    h.assert_no_leftovers().await;
}

/// The newer records planted by [`a_newer_record_is_left_untouched_and_reported`]: one in
/// each structure a fetch passes over, one dead.
const NEWER: [(&str, JobState); 5] = [
    ("n-ready", JobState::Ready),
    ("n-scheduled", JobState::Scheduled),
    ("n-retry", JobState::Retry),
    ("n-active", JobState::Active),
    ("n-dead", JobState::Dead),
];

/// A record of a format newer than this dq reads, in any state, stays exactly as it is
/// through fetch (which reports it and does not poll on it), cancel, reschedule, enqueue of
/// the same key (with or without replace), requeue and purge of the dead queue, and the
/// lease calls of a token that matches its bytes; `job` and the producer and operator calls
/// answer `NewerFormat`; listings skip it.
pub async fn a_newer_record_is_left_untouched_and_reported<H: Harness>(h: &H) {
    let store = h.store();
    let q = queue("formats.newer");
    let format = NEWEST_FORMAT + 1;
    let now = now(h).await;
    let past = now - 1_000;
    for (key, state) in NEWER {
        let at = if state == JobState::Ready { now } else { past };
        h.plant_record(&q, key, (format, state), at, b"a newer payload")
            .await;
    }
    let mut before = Vec::new();
    for (key, _) in NEWER {
        before.push(h.describe_record(&q, key).await.expect("planted"));
    }

    // fetch leaves them and reports them: at least those in its way (Redis's idle audit may
    // report the dead one too), never twice the same structure's
    for _ in 0..3 {
        let reply = fetch(h, &q, &one_retry()).await;
        assert!(
            reply.jobs.is_empty() && reply.buried.is_empty(),
            "{reply:?}"
        );
        let reported: HashSet<&str> = reply.newer.iter().map(|n| n.key.as_str()).collect();
        for key in ["n-ready", "n-scheduled", "n-retry", "n-active"] {
            assert!(reported.contains(key), "{key} not reported: {reply:?}");
        }
        assert!(reply.newer.iter().all(|n| n.format == format), "{reply:?}");
        // nothing here this dq can do: the worker is not told to come back at once
        assert!(
            reply.next_in.is_none_or(|d| d >= ms(500)),
            "a fetch would poll on newer records: {reply:?}"
        );
    }

    // producer and operator calls refuse before any write
    for replace in [false, true] {
        let job = NewJob {
            key: jk("n-ready"),
            payload: raw(1),
            due: Due::Now,
            replace,
            expires: None,
            priority: Default::default(),
            window: None,
            group: None,
            batch: None,
        };
        let other = NewJob {
            key: jk("fresh"),
            ..job.clone()
        };
        assert!(newer_refused(
            format,
            store.enqueue(&q, &[other, job], EnqueueCall::new()).await
        ));
    }
    assert!(newer_refused(
        format,
        store.cancel(&q, &jk("n-scheduled")).await
    ));
    assert!(newer_refused(
        format,
        store.cancel(&q, &jk("n-active")).await
    ));
    assert!(newer_refused(
        format,
        store
            .reschedule(&q, &jk("n-retry"), NewDue::After(HOUR))
            .await
    ));
    for k in ["n-scheduled", "n-retry", "n-ready"] {
        assert!(newer_refused(
            format,
            store.bury(&q, &jk(k), "no", DeadLimits::default()).await
        ));
    }
    assert!(newer_refused(format, store.job(&q, &jk("n-ready")).await));
    assert!(newer_refused(
        format,
        store.requeue_dead(&q, &[jk("n-dead")]).await
    ));
    assert!(newer_refused(
        format,
        store.purge_dead(&q, &[jk("n-dead")], 10).await
    ));
    assert!(newer_refused(format, store.purge_dead(&q, &[], 10).await));
    assert!(newer_refused(
        format,
        store
            .act_on_dead(&q, DeadAction::Purge, &[(jk("n-dead"), past)])
            .await
    ));
    assert!(newer_refused(
        format,
        store
            .act_on_dead(&q, DeadAction::Requeue, &[(jk("n-dead"), past)])
            .await
    ));
    assert!(
        store.job(&q, &jk("fresh")).await.unwrap().is_none(),
        "nothing written"
    );

    // a lease whose token matches the planted bytes is still not this process's
    let lease = (jk("n-active"), 1);
    assert_eq!(
        store
            .ack(
                &q,
                "",
                &dq::store::Success::of(std::slice::from_ref(&lease))
            )
            .await
            .unwrap(),
        [AckOutcome::Stale]
    );
    assert_eq!(
        store
            .extend(&q, std::slice::from_ref(&lease), LONG_LEASE)
            .await
            .unwrap(),
        [Extended::Lost]
    );
    assert_eq!(
        store
            .release(&q, std::slice::from_ref(&lease))
            .await
            .unwrap(),
        [false]
    );
    assert!(matches!(
        store
            .fail_one(
                &q,
                &lease.0,
                1,
                &FailAction::Bury,
                "not mine",
                DeadLimits::default()
            )
            .await,
        Err(Error::StaleToken { .. })
    ));

    // listings skip them
    for state in [
        JobState::Ready,
        JobState::Scheduled,
        JobState::Retry,
        JobState::Active,
        JobState::Dead,
    ] {
        let from = if state == JobState::Ready {
            ListFrom::Index(0)
        } else {
            ListFrom::Start
        };
        let chunk = store.list(&q, state, &from, 100).await.unwrap();
        assert!(chunk.jobs.is_empty(), "{state}: {:?}", chunk.jobs);
    }

    for ((key, _), was) in NEWER.iter().zip(&before) {
        assert_eq!(
            h.describe_record(&q, key).await.as_ref(),
            Some(was),
            "{key} was changed"
        );
    }
}

/// Format-1 records written before stay readable, movable and runnable while new records are
/// written in format 2; a replaced job is written anew in the format written now.
pub async fn older_records_stay_readable_as_newer_ones_are_written<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("formats.mixed").unwrap();
    let q = queue("formats.mixed");
    write_in(h, LEGACY_FORMAT);
    t.enqueue(raw(1)).key("old-ready").await.unwrap();
    t.enqueue(raw(2))
        .key("old-later")
        .delay(HOUR)
        .await
        .unwrap();
    t.enqueue(raw(3))
        .key("old-replaced")
        .delay(HOUR)
        .await
        .unwrap();
    write_in(h, NEWEST_FORMAT);
    t.enqueue(raw(4)).key("new-ready").await.unwrap();
    t.enqueue(raw(5))
        .key("new-later")
        .delay(HOUR)
        .await
        .unwrap();
    let formats = [
        ("old-ready", LEGACY_FORMAT),
        ("old-later", LEGACY_FORMAT),
        ("old-replaced", LEGACY_FORMAT),
        ("new-ready", NEWEST_FORMAT),
        ("new-later", NEWEST_FORMAT),
    ];
    for (key, format) in formats {
        assert_eq!(h.record_format(&q, key).await, Some(format), "{key}");
        assert_eq!(info(&t, key).await.key.as_str(), key);
    }
    let ready = h
        .store()
        .list(&q, JobState::Ready, &ListFrom::Index(0), 10)
        .await
        .unwrap();
    assert_eq!(ready.jobs.len(), 2, "{:?}", ready.jobs);
    // moves keep each record's format; a replace writes the format written now
    assert_eq!(
        h.store()
            .reschedule(&q, &jk("old-later"), NewDue::After(ms(0)))
            .await
            .unwrap(),
        RescheduleOutcome::Rescheduled {
            due_ms: info(&t, "old-later").await.due_ms
        }
    );
    assert_eq!(h.record_format(&q, "old-later").await, Some(LEGACY_FORMAT));
    assert_eq!(
        t.enqueue(raw(6))
            .key("old-replaced")
            .replace()
            .await
            .unwrap()
            .outcome,
        EnqueueOutcome::Replaced
    );
    assert_eq!(
        h.record_format(&q, "old-replaced").await,
        Some(NEWEST_FORMAT)
    );
    t.reschedule("new-later", NewDue::After(ms(0)))
        .await
        .unwrap();
    t.reschedule("old-replaced", NewDue::After(ms(0)))
        .await
        .unwrap();
    // all five are due now: fetch until each was delivered (bounded in count and time)
    let mut got = HashMap::new();
    let deadline = Instant::now() + WAIT;
    for _ in 0..10_000 {
        for d in fetch(h, &q, &req()).await.jobs {
            let format = h.record_format(&q, d.key.as_str()).await;
            got.insert(d.key.to_string(), (unraw(&d.payload), format));
            ack_all(h, &q, std::slice::from_ref(&d)).await;
        }
        if got.len() == 5 || Instant::now() > deadline {
            break;
        }
    }
    let want: HashMap<String, (u64, Option<u8>)> = [
        ("old-ready", 1, LEGACY_FORMAT),
        ("old-later", 2, LEGACY_FORMAT),
        ("old-replaced", 6, NEWEST_FORMAT),
        ("new-ready", 4, NEWEST_FORMAT),
        ("new-later", 5, NEWEST_FORMAT),
    ]
    .into_iter()
    .map(|(k, n, f)| (k.to_string(), (n, Some(f))))
    .collect();
    assert_eq!(got, want);
    h.assert_no_leftovers().await;
}
