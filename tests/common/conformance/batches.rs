//! Conformance bodies: batches (ARCHITECTURE.md §16). Every call that ends a member of a batch
//! notes its end in the partition's outbox, once, with its outcome (a job in no batch notes
//! nothing); the relay applies the notes to the batch once however often it runs, and the
//! callback is enqueued once; a batch's record moves its members forward only, counts each
//! once, refuses members once closed, and is kept for its retention once done; a member keeps
//! its batch through every move and every replace; batches need record format 7.

use super::*;
use dq::batch::{BatchSpec, BatchThen, IndexEntry, OutboxNote, relay_outbox, settle};
use dq::store::{BATCH_FORMAT, GROUP_FORMAT};
use dq::{
    BatchHandle, BatchId, BatchStatus, Client, FailurePolicy, MemberId, MemberState, RetryDecision,
    RetryError, RetryFn,
};

/// Opens batch `id` (nothing happens on completion).
async fn open(c: &Client, id: &str) -> BatchHandle {
    c.new_batch().id(id).open().await.unwrap()
}

/// Adds raw jobs `keys` (due now) of `topic` to `batch`; each is stored.
async fn add(batch: &BatchHandle, topic: &str, keys: &[&str]) {
    let specs = keys.iter().map(|k| JobSpec::new(raw(1)).key(*k)).collect();
    add_specs(batch, topic, specs).await;
}

/// Adds `specs` of `topic` to `batch`; each is stored.
async fn add_specs(batch: &BatchHandle, topic: &str, specs: Vec<JobSpec<Vec<u8>>>) {
    let out = batch.add_raw(topic, specs).await.unwrap();
    assert!(
        out.iter().all(|e| e.outcome == EnqueueOutcome::Created),
        "{out:?}"
    );
}

/// `q`'s outbox as (batch, key, outcome), sorted; each note's id is its own.
async fn notes<H: Harness>(h: &H, q: &Queue) -> Vec<(String, String, MemberState)> {
    let all: Vec<OutboxNote> = h.store().outbox(q, None, 10_000).await.unwrap();
    let ids: HashSet<&str> = all.iter().map(|n| n.id.as_str()).collect();
    assert_eq!(ids.len(), all.len(), "ids repeat: {all:?}");
    let mut out: Vec<_> = all
        .iter()
        .map(|n| (n.batch.to_string(), n.key.to_string(), n.outcome))
        .collect();
    out.sort_by(|a, b| (&a.0, &a.1, a.2.code()).cmp(&(&b.0, &b.1, b.2.code())));
    out
}

/// Makes `t` keep every outcome for an hour and record events.
async fn keep_everything(t: &TopicClient) {
    let all = dq::Retention::default()
        .succeeded(HOUR)
        .cancelled(HOUR)
        .expired(HOUR);
    t.set_retention(Some(all)).await.unwrap();
    t.set_events(Some(dq::EventsPolicy::keep(1000).unwrap()))
        .await
        .unwrap();
}

/// One expected note.
fn note(batch: &str, key: &str, outcome: MemberState) -> (String, String, MemberState) {
    (batch.to_owned(), key.to_owned(), outcome)
}

/// The deliveries of one fetch of `q` that leases all `n` due jobs, by key.
async fn lease_all<H: Harness>(
    h: &H,
    q: &Queue,
    r: &FetchRequest,
    n: usize,
) -> HashMap<String, Delivery> {
    let jobs = dq_testkit::eventually_some("every due job is leased", WAIT, || async {
        let reply = fetch(h, q, r).await;
        assert!(reply.jobs.is_empty() || reply.jobs.len() == n, "{reply:?}");
        (reply.jobs.len() == n).then_some(reply.jobs)
    })
    .await;
    jobs.into_iter().map(|d| (d.key.to_string(), d)).collect()
}

/// Member `key` of `topic`.
fn member(topic: &str, key: &str) -> MemberId {
    MemberId::new(Topic::new(topic).unwrap(), jk(key))
}

/// A batch id.
fn bid(id: &str) -> BatchId {
    BatchId::new(id).unwrap()
}

/// Every end a handler or an operator gives a member is noted once, with its outcome:
/// succeeded (ack, also after its cancel was requested), dead (buried after a retry, or at
/// once: a permanent failure), discarded (a retry function's decision), cancelled while
/// waiting, cancelled by a failure or a release after its cancel was requested while it ran.
/// A retry notes nothing; the same ends of jobs in no batch note nothing. All of it in a plain
/// topic and in one that keeps its finished jobs and records events.
pub async fn each_end_of_a_member_is_noted_once_with_its_outcome<H: Harness>(h: &H) {
    ends_are_noted(h, "batches.ends", false).await;
    ends_are_noted(h, "batches.kept-ends", true).await;
}

/// The body of [`each_end_of_a_member_is_noted_once_with_its_outcome`] in `topic`, which
/// keeps every outcome and records events if `keeping`.
async fn ends_are_noted<H: Harness>(h: &H, topic: &str, keeping: bool) {
    let c = h.client().await;
    let t = c.topic(topic).unwrap();
    let q = queue(topic);
    if keeping {
        keep_everything(&t).await;
    }
    let batch = open(&c, "ends").await;
    add(
        &batch,
        topic,
        &[
            "ok",
            "retried-dead",
            "buried",
            "discarded",
            "cancel-failed",
            "cancel-released",
            "cancel-acked",
        ],
    )
    .await;
    add_specs(
        &batch,
        topic,
        vec![JobSpec::new(raw(1)).key("waiting").delay(HOUR)],
    )
    .await;
    for k in ["plain-ok", "plain-buried", "plain-discarded"] {
        t.enqueue(raw(1)).key(k).await.unwrap();
    }
    t.enqueue(raw(1))
        .key("plain-waiting")
        .delay(HOUR)
        .await
        .unwrap();
    assert!(notes(h, &q).await.is_empty(), "an enqueue notes nothing");

    for k in ["waiting", "plain-waiting"] {
        assert_eq!(t.cancel(k).await.unwrap(), CancelOutcome::Cancelled);
    }
    let d = lease_all(h, &q, &req(), 10).await;
    assert_eq!(
        d["ok"].batch.as_ref().map(BatchId::as_str),
        Some("ends"),
        "a delivery names its batch"
    );
    assert_eq!(d["plain-ok"].batch, None);
    ack_all(h, &q, &[d["ok"].clone(), d["plain-ok"].clone()]).await;
    let out = fail(h, &d["retried-dead"], FailAction::Retry(ms(0)), "once")
        .await
        .unwrap();
    assert!(matches!(out, FailOutcome::Retrying { .. }), "{out:?}");
    for k in ["buried", "plain-buried"] {
        let out = fail(h, &d[k], FailAction::Bury, "for good").await.unwrap();
        assert!(matches!(out, FailOutcome::Buried { .. }), "{out:?}");
    }
    for k in ["discarded", "plain-discarded"] {
        let out = fail(h, &d[k], FailAction::Discard, "gone").await.unwrap();
        assert_eq!(out, FailOutcome::Discarded);
    }
    for k in ["cancel-failed", "cancel-released", "cancel-acked"] {
        assert_eq!(t.cancel(k).await.unwrap(), CancelOutcome::CancelRequested);
    }
    ack_all(h, &q, &[d["cancel-acked"].clone()]).await;
    let out = fail(h, &d["cancel-failed"], FailAction::Retry(ms(0)), "stop")
        .await
        .unwrap();
    assert_eq!(out, FailOutcome::Cancelled);
    let released = h
        .store()
        .release(&q, &[dq::store::lease_of(&d["cancel-released"])])
        .await
        .unwrap();
    assert_eq!(released, [true]);
    assert!(t.job("cancel-released").await.unwrap().is_none());
    // the retried member has not ended: nothing noted for it yet
    assert!(
        !notes(h, &q).await.iter().any(|n| n.1 == "retried-dead"),
        "a retry is no end"
    );
    let again = fetch_one(h, &q, &req()).await;
    assert_eq!(again.key.as_str(), "retried-dead");
    let out = fail(h, &again, FailAction::Bury, "twice").await.unwrap();
    assert!(matches!(out, FailOutcome::Buried { .. }), "{out:?}");

    assert_eq!(
        notes(h, &q).await,
        [
            note("ends", "buried", MemberState::Dead),
            note("ends", "cancel-acked", MemberState::Succeeded),
            note("ends", "cancel-failed", MemberState::Cancelled),
            note("ends", "cancel-released", MemberState::Cancelled),
            note("ends", "discarded", MemberState::Discarded),
            note("ends", "ok", MemberState::Succeeded),
            note("ends", "retried-dead", MemberState::Dead),
            note("ends", "waiting", MemberState::Cancelled),
        ]
    );
}

/// Expiries note their members' ends too: a member expired before it started (`expired`),
/// a lease that expires past its retries (`dead`), one whose retry function discards the job
/// (`discarded`), one whose cancel was requested while it ran (`cancelled`); the same expiries
/// of jobs in no batch note nothing. All of it in plain topics and in topics that keep their
/// finished jobs and record events.
pub async fn expiries_and_lost_leases_of_members_are_noted<H: Harness>(h: &H) {
    expiries_are_noted(h, "", false).await;
    expiries_are_noted(h, "-kept", true).await;
}

/// The body of [`expiries_and_lost_leases_of_members_are_noted`] in topics whose names end
/// with `suffix`, which keep every outcome and record events if `keeping`.
async fn expiries_are_noted<H: Harness>(h: &H, suffix: &str, keeping: bool) {
    let c = h.client().await;
    let batch = open(&c, "lost").await;
    let name = |base: &str| format!("{base}{suffix}");

    // expired before it started
    let t = c.topic(&name("batches.expire")).unwrap();
    let q = queue(&name("batches.expire"));
    if keeping {
        keep_everything(&t).await;
    }
    add_specs(
        &batch,
        &name("batches.expire"),
        vec![JobSpec::new(raw(1)).key("expired").expires_after(ms(100))],
    )
    .await;
    t.enqueue(raw(1))
        .key("plain-expired")
        .expires_after(ms(100))
        .await
        .unwrap();
    let until = info(&t, "expired").await.expires_ms.unwrap();
    let until = until.max(info(&t, "plain-expired").await.expires_ms.unwrap());
    until_store_time(h, until).await;
    let reply = fetch(h, &q, &req()).await;
    assert!(reply.jobs.is_empty(), "{reply:?}");
    assert_eq!(t.stats().await.unwrap().expired_before_start, 2);
    assert_eq!(
        notes(h, &q).await,
        [note("lost", "expired", MemberState::Expired)]
    );

    // leases lost: dead past the retries, cancelled once asked
    let t = c.topic(&name("batches.lost")).unwrap();
    let q = queue(&name("batches.lost"));
    if keeping {
        keep_everything(&t).await;
    }
    add(
        &batch,
        &name("batches.lost"),
        &["lost-dead", "lost-cancelled"],
    )
    .await;
    t.enqueue(raw(1)).key("plain-lost").await.unwrap();
    let short = FetchRequest {
        lease: ms(100),
        ..req()
    };
    let d = lease_all(h, &q, &short, 3).await;
    assert_eq!(
        t.cancel("lost-cancelled").await.unwrap(),
        CancelOutcome::CancelRequested
    );
    until_store_time(h, d.values().map(|d| d.lease_deadline_ms).max().unwrap()).await;
    let reply = fetch(h, &q, &req()).await;
    let mut buried = reply
        .buried
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>();
    buried.sort();
    assert_eq!(buried, ["lost-dead", "plain-lost"]);
    assert!(t.job("lost-cancelled").await.unwrap().is_none());
    assert_eq!(
        notes(h, &q).await,
        [
            note("lost", "lost-cancelled", MemberState::Cancelled),
            note("lost", "lost-dead", MemberState::Dead),
        ]
    );

    // a lease lost that the retry function discards
    fn discard(_: u32, _: &RetryError<'_>) -> RetryDecision {
        RetryDecision::Discard
    }
    let t = c.topic(&name("batches.lostx")).unwrap();
    let q = queue(&name("batches.lostx"));
    if keeping {
        keep_everything(&t).await;
    }
    add(&batch, &name("batches.lostx"), &["lost-discarded"]).await;
    t.enqueue(raw(1)).key("plain-discarded").await.unwrap();
    let discarding = FetchRequest {
        lease: ms(100),
        retry_policy: RetryFn::new(discard)
            .with_max_attempts(3)
            .unwrap()
            .lease_expiry_policy(),
        ..req()
    };
    let d = lease_all(h, &q, &discarding, 2).await;
    until_store_time(h, d.values().map(|d| d.lease_deadline_ms).max().unwrap()).await;
    let reply = fetch(h, &q, &discarding).await;
    assert!(
        reply.jobs.is_empty() && reply.buried.is_empty(),
        "{reply:?}"
    );
    assert_eq!(t.stats().await.unwrap().discarded, 2);
    assert_eq!(
        notes(h, &q).await,
        [note("lost", "lost-discarded", MemberState::Discarded)]
    );
}

/// An ack, a failure or a release tried again for the same lease (its reply was lost) finds
/// the job ended and notes nothing more: one note per end.
pub async fn a_retried_ack_or_fail_of_one_lease_notes_nothing_more<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("batches.again").unwrap();
    let q = queue("batches.again");
    let batch = open(&c, "again").await;
    add(
        &batch,
        "batches.again",
        &["acked", "buried", "discarded", "cancelled", "released"],
    )
    .await;
    let d = lease_all(h, &q, &req(), 5).await;
    for k in ["cancelled", "released"] {
        assert_eq!(t.cancel(k).await.unwrap(), CancelOutcome::CancelRequested);
    }
    let acked = [dq::store::lease_of(&d["acked"])];
    let success = dq::store::Success::of(&acked);
    for expected in [AckOutcome::Acked, AckOutcome::Gone] {
        assert_eq!(h.store().ack(&q, "", &success).await.unwrap(), [expected]);
    }
    let first = fail(h, &d["buried"], FailAction::Bury, "x").await.unwrap();
    assert!(matches!(first, FailOutcome::Buried { .. }), "{first:?}");
    let again = fail(h, &d["buried"], FailAction::Bury, "x").await;
    assert!(
        matches!(again, Err(Error::StaleToken { .. }) | Ok(FailOutcome::Gone)),
        "{again:?}"
    );
    for (k, action, outcome) in [
        ("discarded", FailAction::Discard, FailOutcome::Discarded),
        (
            "cancelled",
            FailAction::Retry(ms(0)),
            FailOutcome::Cancelled,
        ),
    ] {
        assert_eq!(fail(h, &d[k], action.clone(), "x").await.unwrap(), outcome);
        assert_eq!(
            fail(h, &d[k], action, "x").await.unwrap(),
            FailOutcome::Gone
        );
    }
    let lease = [dq::store::lease_of(&d["released"])];
    assert_eq!(h.store().release(&q, &lease).await.unwrap(), [true]);
    assert_eq!(h.store().release(&q, &lease).await.unwrap(), [false]);
    assert_eq!(
        notes(h, &q).await,
        [
            note("again", "acked", MemberState::Succeeded),
            note("again", "buried", MemberState::Dead),
            note("again", "cancelled", MemberState::Cancelled),
            note("again", "discarded", MemberState::Discarded),
            note("again", "released", MemberState::Cancelled),
        ]
    );
}

/// The relay applies an outbox's notes to their batch and deletes them; run again after a
/// relay that applied and settled but never deleted (killed), or by two relays at once, it
/// counts each member once and the callback is enqueued once (its key `batch:<id>` holds
/// one job, and a settle repeated after it ran writes none).
pub async fn the_relay_applies_each_note_once_and_calls_back_once<H: Harness>(h: &H) {
    let c = h.client().await;
    let other = h.client_with(|b| b).await.unwrap();
    let batch = c
        .new_batch()
        .id("relayed")
        .on_complete_raw("batches.callback", raw(7))
        .open()
        .await
        .unwrap();
    let (qa, qb) = (queue("batches.relay-a"), queue("batches.relay-b"));
    add(&batch, "batches.relay-a", &["a1", "a2", "a3"]).await;
    add(&batch, "batches.relay-b", &["b1"]).await;
    let info = batch.close().await.unwrap();
    assert_eq!(
        (info.status(), info.counts.enqueued),
        (BatchStatus::Closed, 4)
    );
    drain_due(h, &qa).await;
    drain_due(h, &qb).await;

    // a relay killed after its apply and settle, before its delete: the notes stay
    let left = h.store().outbox(&qa, None, 100).await.unwrap();
    assert_eq!(left.len(), 3);
    let pairs: Vec<_> = left
        .iter()
        .map(|n| (MemberId::new(qa.topic.clone(), n.key.clone()), n.outcome))
        .collect();
    let info = h.store().batch_apply(batch.id(), &pairs).await.unwrap();
    settle(&c, &info.unwrap()).await.unwrap();
    assert_eq!(relay_outbox(&c, &qa).await.unwrap(), 3);
    let info = batch.info().await.unwrap().unwrap();
    assert_eq!((info.counts.succeeded, info.counts.enqueued), (3, 1));
    assert!(!info.done);
    // two relays of the same outbox at once
    let (one, two) = tokio::join!(relay_outbox(&c, &qb), relay_outbox(&other, &qb));
    assert!(one.unwrap() + two.unwrap() >= 1);
    for q in [&qa, &qb] {
        assert_eq!(
            relay_outbox(&c, q).await.unwrap(),
            0,
            "the notes are deleted"
        );
        assert!(h.store().outbox(q, None, 100).await.unwrap().is_empty());
    }
    let info = batch.info().await.unwrap().unwrap();
    assert_eq!(info.status(), BatchStatus::Done);
    assert_eq!((info.counts.succeeded, info.counts.total()), (4, 4));
    assert!(h.store().open_batches(None, 100).await.unwrap().is_empty());

    // the callback: one job under `batch:relayed`, with the batch's payload
    let cb = c.topic("batches.callback").unwrap();
    let job = info_of(&cb, "batch:relayed").await;
    assert_eq!(job.payload, raw(7));
    let mut forced = info.clone();
    forced.done = false;
    settle(&c, &forced).await.unwrap();
    assert_eq!(cb.stats().await.unwrap().enqueued, 1);
    // once it ran, a settle repeated finds its key's window and writes nothing
    let ran = drain_due(h, &queue("batches.callback")).await;
    assert_eq!(keys_of(&ran), ["batch:relayed"]);
    settle(&c, &forced).await.unwrap();
    let st = cb.stats().await.unwrap();
    assert_eq!((st.enqueued, st.ready, st.succeeded), (1, 0, 1), "{st:?}");
}

/// Job `key` of `cb`, which must exist and be the only job `cb` ever got.
async fn info_of(cb: &TopicClient, key: &str) -> JobInfo {
    let job = info(cb, key).await;
    assert_eq!(cb.stats().await.unwrap().enqueued, 1);
    job
}

/// A batch's record: opening twice keeps the first; a reservation repeated reserves nothing
/// twice; members move forward only (reserved → enqueued → an end; the first end stays), each
/// move counted once, a member not reserved is added; a closed batch refuses reservations
/// (`BatchClosed`) but still takes ends; an unknown batch is `BatchNotFound` (`None` to an
/// apply); the member pages cover every member.
pub async fn a_batch_record_moves_members_forward_only_and_counts_each_once<H: Harness>(h: &H) {
    let s = h.store();
    let id = bid("record");
    let spec = BatchSpec {
        then: BatchThen::Nothing,
        policy: FailurePolicy::WaitAll,
        retention: HOUR,
    };
    let (created, first) = s.batch_open(&id, &spec).await.unwrap();
    assert!(created);
    assert!(!first.closed && !first.done && first.created_ms > 0);
    assert_eq!((first.closed_ms, first.done_ms), (0, 0));
    assert_eq!((first.retention, first.counts.total()), (HOUR, 0));
    let other = BatchSpec {
        policy: FailurePolicy::FailFast,
        ..spec.clone()
    };
    let (created, again) = s.batch_open(&id, &other).await.unwrap();
    assert!(!created);
    assert_eq!(again, first, "an open of a stored id leaves it as it is");

    let m = |k: &str| member("batches.record", k);
    let r = s.batch_reserve(&id, &[m("m1"), m("m2")]).await.unwrap();
    assert_eq!(r.info.counts.reserved, 2);
    assert!(r.info.reserved_ms >= first.reserved_ms);
    assert_eq!(r.before, vec![None, None]);
    // each member's state before: a member named twice in one call is reserved once
    let r = s
        .batch_reserve(&id, &[m("m1"), m("m3"), m("m3")])
        .await
        .unwrap();
    assert_eq!((r.info.counts.reserved, r.info.counts.total()), (3, 3));
    assert_eq!(r.before, vec![Some(MemberState::Reserved), None, None]);

    use MemberState::*;
    let info = s
        .batch_apply(
            &id,
            &[(m("m1"), Enqueued), (m("m2"), Succeeded), (m("m4"), Dead)],
        )
        .await
        .unwrap()
        .unwrap();
    let expected = dq::BatchCounts {
        reserved: 1,
        enqueued: 1,
        succeeded: 1,
        dead: 1,
        ..Default::default()
    };
    assert_eq!(info.counts, expected);
    // backwards, sideways from an end, and the same ends again: nothing moves
    let info = s
        .batch_apply(
            &id,
            &[
                (m("m1"), Reserved),
                (m("m2"), Enqueued),
                (m("m2"), Dead),
                (m("m4"), Succeeded),
                (m("m2"), Succeeded),
            ],
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(info.counts, expected);
    // one call moving a member twice counts it once, where it ends
    let info = s
        .batch_apply(&id, &[(m("m3"), Enqueued), (m("m3"), Cancelled)])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            info.counts.reserved,
            info.counts.cancelled,
            info.counts.total()
        ),
        (0, 1, 4)
    );
    // a reservation answers each member's state as it is (enqueued, ended), changing none
    let r = s
        .batch_reserve(&id, &[m("m1"), m("m2"), m("m3")])
        .await
        .unwrap();
    assert_eq!(
        r.before,
        vec![Some(Enqueued), Some(Succeeded), Some(Cancelled)]
    );
    assert_eq!(r.info.counts.total(), 4);

    let closed = s.batch_close(&id).await.unwrap();
    assert!(closed.closed && closed.closed_ms >= closed.created_ms);
    assert_eq!(closed.status(), BatchStatus::Closed);
    assert_eq!(s.batch_close(&id).await.unwrap(), closed, "closing twice");
    for members in [vec![m("m5")], vec![m("m1")], vec![]] {
        match s.batch_reserve(&id, &members).await {
            Err(Error::BatchClosed(b)) => assert_eq!(b, "record"),
            other => panic!("a closed batch reserves nothing: {other:?}"),
        }
    }
    let info = s
        .batch_apply(&id, &[(m("m1"), Expired), (m("m5"), Refused)])
        .await
        .unwrap()
        .unwrap();
    assert_eq!((info.counts.expired, info.counts.refused), (1, 1));
    assert_eq!(info.status(), BatchStatus::Complete);
    assert_eq!(s.batch(&id).await.unwrap(), Some(info.clone()));

    // the pages list every member with its state
    let mut seen = HashMap::new();
    let mut cursor = 0;
    for _ in 0..100 {
        let page = s.batch_members(&id, cursor, 2).await.unwrap();
        for (mem, state) in page.members {
            assert_eq!(mem.topic.as_str(), "batches.record");
            seen.insert(mem.key.to_string(), state);
        }
        match page.next {
            Some(next) => cursor = next,
            None => break,
        }
    }
    let expected: HashMap<String, MemberState> = [
        ("m1", Expired),
        ("m2", Succeeded),
        ("m3", Cancelled),
        ("m4", Dead),
        ("m5", Refused),
    ]
    .into_iter()
    .map(|(k, s)| (k.to_owned(), s))
    .collect();
    assert_eq!(seen, expected);

    // an unknown batch
    let unknown = bid("never-opened");
    assert_eq!(s.batch(&unknown).await.unwrap(), None);
    assert_eq!(
        s.batch_apply(&unknown, &[(m("x"), Succeeded)])
            .await
            .unwrap(),
        None
    );
    assert!(matches!(
        s.batch_reserve(&unknown, &[m("x")]).await,
        Err(Error::BatchNotFound(b)) if b == "never-opened"
    ));
    assert!(matches!(
        s.batch_close(&unknown).await,
        Err(Error::BatchNotFound(_))
    ));
    assert!(matches!(
        s.batch_mark_done(&unknown).await,
        Err(Error::BatchNotFound(_))
    ));
    let page = s.batch_members(&unknown, 0, 10).await.unwrap();
    assert!(page.members.is_empty() && page.next.is_none());
    assert_eq!(
        s.batch(&unknown).await.unwrap(),
        None,
        "nothing was written"
    );
}

/// The index of batches not done lists them by when each was opened, then by id, and resumes
/// strictly past an entry, listed or not, and counts them; `forget_batch` takes one out (its record stays); marking a batch done
/// closes it and takes it out, and it is kept for its retention by the store's clock, then
/// gone (an open of its id then stores a new batch).
pub async fn the_index_lists_open_batches_and_a_done_batch_is_kept_for_its_retention<H: Harness>(
    h: &H,
) {
    let s = h.store();
    let spec = BatchSpec {
        then: BatchThen::Nothing,
        policy: FailurePolicy::WaitAll,
        retention: HOUR,
    };
    let mut opened = Vec::new();
    for id in ["idx-c", "idx-a", "idx-b"] {
        let (_, info) = s.batch_open(&bid(id), &spec).await.unwrap();
        opened.push((info.created_ms, id.to_owned()));
    }
    opened.sort();
    let order: Vec<String> = opened.iter().map(|(_, id)| id.clone()).collect();
    let entry = |i: usize| IndexEntry {
        opened_ms: opened[i].0,
        id: bid(&opened[i].1),
    };
    let listed = |ids: Vec<IndexEntry>| {
        ids.into_iter()
            .map(|i| i.id.to_string())
            .collect::<Vec<_>>()
    };
    let all = s.open_batches(None, 100).await.unwrap();
    assert_eq!(
        all,
        (0..3).map(entry).collect::<Vec<_>>(),
        "with when opened"
    );
    assert_eq!(s.open_batch_count().await.unwrap(), 3);
    assert_eq!(
        listed(s.open_batches(Some(&entry(0)), 1).await.unwrap()),
        [order[1].clone()]
    );
    assert_eq!(
        listed(s.open_batches(Some(&entry(2)), 10).await.unwrap()),
        Vec::<String>::new()
    );
    s.forget_batch(&bid(&order[1])).await.unwrap();
    assert_eq!(
        listed(s.open_batches(None, 100).await.unwrap()),
        [order[0].clone(), order[2].clone()]
    );
    assert_eq!(s.open_batch_count().await.unwrap(), 2);
    assert_eq!(
        listed(s.open_batches(Some(&entry(1)), 10).await.unwrap()),
        [order[2].clone()],
        "resumes past an entry no longer listed, not from the first"
    );
    let unknown = IndexEntry {
        opened_ms: 0,
        id: bid("not-listed"),
    };
    assert_eq!(
        listed(s.open_batches(Some(&unknown), 10).await.unwrap()),
        [order[0].clone(), order[2].clone()],
        "past an entry before every one: all"
    );
    assert!(s.batch(&bid(&order[1])).await.unwrap().is_some());

    let done = s.batch_mark_done(&bid(&order[0])).await.unwrap();
    assert!(done.done && done.closed && done.done_ms >= done.created_ms);
    assert_eq!(done.status(), BatchStatus::Done);
    assert_eq!(done.closed_ms, done.done_ms, "closed when marked done");
    assert_eq!(
        s.batch_mark_done(&bid(&order[0])).await.unwrap().done_ms,
        done.done_ms,
        "marking twice"
    );
    assert_eq!(
        listed(s.open_batches(None, 100).await.unwrap()),
        [order[2].clone()]
    );
    let (created, reopened) = s.batch_open(&bid(&order[0]), &spec).await.unwrap();
    assert!(!created && reopened.done);
    assert_eq!(
        listed(s.open_batches(None, 100).await.unwrap()),
        [order[2].clone()],
        "a done batch is not listed again"
    );

    // kept for its retention, then gone
    let brief = BatchSpec {
        retention: ms(200),
        ..spec
    };
    let id = bid("idx-brief");
    s.batch_open(&id, &brief).await.unwrap();
    let done = s.batch_mark_done(&id).await.unwrap();
    assert!(s.batch(&id).await.unwrap().is_some_and(|b| b.done));
    until_store_time(h, done.done_ms + 200).await;
    dq_testkit::eventually("the done batch is gone", WAIT, || async {
        s.batch(&id).await.unwrap().is_none()
    })
    .await;
    assert_eq!(s.batch_apply(&id, &[]).await.unwrap(), None);
    let (created, fresh) = s.batch_open(&id, &brief).await.unwrap();
    assert!(created && !fresh.done);
}

/// A member keeps its batch through every move — released, retried, buried and requeued,
/// rescheduled, its payload updated — as its record, its deliveries and the listings say; a
/// member requeued from the dead queue ends again and notes again.
pub async fn a_member_keeps_its_batch_through_every_move<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("batches.moves").unwrap();
    let q = queue("batches.moves");
    let batch = open(&c, "moves").await;
    add_specs(
        &batch,
        "batches.moves",
        vec![
            JobSpec::new(raw(1)).key("m"),
            JobSpec::new(raw(2)).key("later").delay(HOUR),
        ],
    )
    .await;
    let of = |d: &Delivery| d.batch.as_ref().map(ToString::to_string);
    let in_batch = Some("moves".to_owned());
    let job_batch = |j: JobInfo| j.batch.as_ref().map(ToString::to_string);
    assert_eq!(job_batch(info(&t, "m").await), in_batch);

    let d = fetch_one(h, &q, &req()).await;
    assert_eq!(of(&d), in_batch);
    let lease = [dq::store::lease_of(&d)];
    assert_eq!(h.store().release(&q, &lease).await.unwrap(), [true]);
    assert_eq!(job_batch(info(&t, "m").await), in_batch);
    let d = fetch_one(h, &q, &req()).await;
    assert_eq!(of(&d), in_batch);
    fail(h, &d, FailAction::Retry(HOUR), "later").await.unwrap();
    assert_eq!(job_batch(info(&t, "m").await), in_batch);
    t.reschedule("m", NewDue::After(Duration::ZERO))
        .await
        .unwrap();
    let d = fetch_one(h, &q, &req()).await;
    assert_eq!(of(&d), in_batch);
    fail(h, &d, FailAction::Bury, "dead").await.unwrap();
    let dead = dead_page(h, &q, 0, 10).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(job_batch(dead[0].clone()), in_batch);
    assert_eq!(t.requeue_dead(&["m"]).await.unwrap(), 1);
    assert_eq!(job_batch(info(&t, "m").await), in_batch);

    t.update_payload("later", raw(3)).await.unwrap();
    t.reschedule("later", NewDue::After(HOUR * 2))
        .await
        .unwrap();
    let listed = h
        .store()
        .list(&q, JobState::Scheduled, &dq::store::ListFrom::Start, 10)
        .await
        .unwrap();
    assert_eq!(listed.jobs.len(), 1);
    assert_eq!(job_batch(listed.jobs[0].1.clone()), in_batch);
    t.reschedule("later", NewDue::After(Duration::ZERO))
        .await
        .unwrap();
    let ran = drain_due(h, &q).await;
    assert_eq!(ran.len(), 2);
    assert!(ran.iter().all(|d| of(d) == in_batch), "{ran:?}");
    assert_eq!(
        notes(h, &q).await,
        [
            note("moves", "later", MemberState::Succeeded),
            note("moves", "m", MemberState::Dead),
            note("moves", "m", MemberState::Succeeded),
        ]
    );
}

/// A job that replaces a member without naming a batch stays its member (a waiting one and a
/// dead one, and one stored by the same call), and its end is noted; a replace that names
/// another batch moves it there.
pub async fn a_job_replacing_a_member_stays_in_its_batch<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("batches.replace").unwrap();
    let q = queue("batches.replace");
    let batch = open(&c, "kept").await;
    add_specs(
        &batch,
        "batches.replace",
        vec![
            JobSpec::new(raw(1)).key("waiting").delay(HOUR),
            JobSpec::new(raw(1)).key("dead"),
        ],
    )
    .await;
    let d = fetch_one(h, &q, &req()).await;
    assert_eq!(d.key.as_str(), "dead");
    fail(h, &d, FailAction::Bury, "dead").await.unwrap();
    for k in ["waiting", "dead"] {
        let out = t.enqueue(raw(2)).key(k).replace().await.unwrap();
        assert_eq!(out.outcome, EnqueueOutcome::Replaced, "{k}");
        let job = info(&t, k).await;
        assert_eq!(job.payload, raw(2));
        assert_eq!(
            job.batch.as_ref().map(ToString::to_string).as_deref(),
            Some("kept")
        );
    }
    // a replace naming a batch (the store's call) takes that batch
    let job = new_job("waiting", Some("elsewhere"), true);
    let out = h
        .store()
        .enqueue(&q, &[job], EnqueueCall::new())
        .await
        .unwrap();
    assert_eq!(out, [EnqueueOutcome::Replaced]);
    let job = info(&t, "waiting").await;
    assert_eq!(
        job.batch.as_ref().map(ToString::to_string).as_deref(),
        Some("elsewhere")
    );
    // a key named twice in one call behaves as in two calls: the replace stays a member
    let twice = [
        new_job("twice", Some("kept"), false),
        new_job("twice", None, true),
    ];
    let out = h
        .store()
        .enqueue(&q, &twice, EnqueueCall::new())
        .await
        .unwrap();
    assert_eq!(out, [EnqueueOutcome::Created, EnqueueOutcome::Replaced]);
    let job = info(&t, "twice").await;
    assert_eq!(
        job.batch.as_ref().map(ToString::to_string).as_deref(),
        Some("kept")
    );
    let ran = drain_due(h, &q).await;
    assert_eq!(ran.len(), 3);
    assert_eq!(
        notes(h, &q).await,
        [
            note("elsewhere", "waiting", MemberState::Succeeded),
            note("kept", "dead", MemberState::Dead),
            note("kept", "dead", MemberState::Succeeded),
            note("kept", "twice", MemberState::Succeeded),
        ]
    );
}

/// A job for the store's `enqueue`: `key`, due now, in `batch`, replacing if `replace`.
fn new_job(key: &str, batch: Option<&str>, replace: bool) -> NewJob {
    NewJob {
        key: jk(key),
        payload: raw(3),
        due: Due::Now,
        replace,
        expires: None,
        priority: Default::default(),
        window: None,
        group: None,
        batch: batch.map(bid),
    }
}

/// Batches need record format 7: while the namespace writes format 6, opening a batch and
/// enqueueing a job of a batch are refused with `NeedsFormat` before anything is written; jobs
/// in no batch go on.
pub async fn batches_need_format_7_and_nothing_is_written_below_it<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("batches.level").unwrap();
    let q = queue("batches.level");
    assert_eq!(h.store().formats().set_write(GROUP_FORMAT), GROUP_FORMAT);
    let needs_7 = |e: Error| match e {
        Error::NeedsFormat { needs, level, .. } => (needs, level) == (BATCH_FORMAT, GROUP_FORMAT),
        _ => false,
    };
    let err = c.new_batch().id("low").open().await.unwrap_err();
    assert!(needs_7(err));
    let job = new_job("member", Some("low"), false);
    let err = h
        .store()
        .enqueue(&q, &[job], EnqueueCall::new())
        .await
        .unwrap_err();
    assert!(needs_7(err));
    assert!(t.job("member").await.unwrap().is_none());
    assert_eq!(h.store().batch(&bid("low")).await.unwrap(), None);
    t.enqueue(raw(1)).key("plain").await.unwrap();
    h.store().formats().set_write(BATCH_FORMAT);
    let batch = open(&c, "low").await;
    add(&batch, "batches.level", &["member"]).await;
    assert_eq!(keys_of(&drain_due(h, &q).await).len(), 2);
    assert_eq!(
        notes(h, &q).await,
        [note("low", "member", MemberState::Succeeded)]
    );
}

/// An add reserves each member, enqueues it and applies what it saw: a key taken by a job in
/// no batch is `refused` (that job's end notes nothing), an add repeated after its enqueue
/// finds its own job (its record names the batch) and counts nothing twice.
pub async fn an_add_refuses_a_taken_key_and_counts_a_repeated_one_once<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("batches.adds").unwrap();
    let q = queue("batches.adds");
    t.enqueue(raw(0)).key("taken").await.unwrap();
    let batch = open(&c, "adds").await;
    let specs = |keys: &[&str]| keys.iter().map(|k| JobSpec::new(raw(1)).key(*k)).collect();
    let out = batch
        .add_raw("batches.adds", specs(&["taken", "fresh"]))
        .await
        .unwrap();
    assert_eq!(
        out.iter().map(|e| e.outcome).collect::<Vec<_>>(),
        [
            EnqueueOutcome::Exists(JobState::Ready),
            EnqueueOutcome::Created
        ]
    );
    assert_eq!(info(&t, "taken").await.batch, None);
    let out = batch
        .add_raw("batches.adds", specs(&["fresh"]))
        .await
        .unwrap();
    assert_eq!(out[0].outcome, EnqueueOutcome::Exists(JobState::Ready));
    let info = batch.info().await.unwrap().unwrap();
    assert_eq!(
        (
            info.counts.refused,
            info.counts.enqueued,
            info.counts.total()
        ),
        (1, 1, 2),
        "{info:?}"
    );
    assert_eq!(keys_of(&drain_due(h, &q).await).len(), 2);
    assert_eq!(
        notes(h, &q).await,
        [note("adds", "fresh", MemberState::Succeeded)]
    );
    assert_eq!(relay_outbox(&c, &q).await.unwrap(), 1);
    let info = batch.close().await.unwrap();
    assert_eq!(info.status(), BatchStatus::Done);
    assert_eq!(
        (info.counts.succeeded, info.counts.refused, info.failed()),
        (1, 1, 1)
    );
}

/// A batch cancelled while its members wait and run: it is closed, each waiting member is
/// cancelled (noted, and carried to the batch by the cancel: no worker needed), a running one
/// is asked to stop and noted when its run ends; the relay then completes the batch and its
/// callback is enqueued.
pub async fn a_cancelled_batch_ends_every_member_cancelled<H: Harness>(h: &H) {
    let c = h.client().await;
    let q = queue("batches.cancel");
    let batch = c
        .new_batch()
        .id("called-off")
        .on_complete_raw("batches.cancel-cb", raw(9))
        .open()
        .await
        .unwrap();
    add_specs(
        &batch,
        "batches.cancel",
        vec![
            JobSpec::new(raw(1)).key("running"),
            JobSpec::new(raw(1)).key("w1").delay(HOUR),
            JobSpec::new(raw(1)).key("w2").delay(HOUR),
        ],
    )
    .await;
    let running = fetch_one(h, &q, &req()).await;
    assert_eq!(running.key.as_str(), "running");
    let info = batch.cancel().await.unwrap();
    assert!(info.closed && !info.done, "{info:?}");
    // the waiting members' ends are carried by the cancel itself (no worker needed)
    assert_eq!(
        (info.counts.cancelled, info.counts.enqueued),
        (2, 1),
        "{info:?}"
    );
    assert!(notes(h, &q).await.is_empty());
    let ext = h
        .store()
        .extend(&q, &[dq::store::lease_of(&running)], LONG_LEASE)
        .await
        .unwrap();
    assert_eq!(ext, [Extended::CancelRequested]);
    let out = fail(h, &running, FailAction::Retry(ms(0)), "stopped")
        .await
        .unwrap();
    assert_eq!(out, FailOutcome::Cancelled);
    assert_eq!(
        notes(h, &q).await,
        [note("called-off", "running", MemberState::Cancelled)]
    );
    assert_eq!(relay_outbox(&c, &q).await.unwrap(), 1);
    let info = batch.info().await.unwrap().unwrap();
    assert_eq!(info.status(), BatchStatus::Done);
    assert_eq!((info.counts.cancelled, info.counts.total()), (3, 3));
    let cb = c.topic("batches.cancel-cb").unwrap();
    assert_eq!(info_of(&cb, "batch:called-off").await.payload, raw(9));
}

/// An add repeated after its members moved on (a producer retrying after an error, a flow
/// stored again) enqueues none of them again, though their keys are free: a member that ended
/// (its end relayed, or only noted) is `Ended`, one still waiting is its job's state; the
/// batch counts each member once and completes with the runs that happened.
pub async fn an_add_repeated_after_its_members_ended_enqueues_none_again<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("batches.again").unwrap();
    let q = queue("batches.again");
    let batch = open(&c, "again").await;
    let specs = || {
        vec![
            JobSpec::new(raw(1)).key("ran"),
            JobSpec::new(raw(1)).key("ran-unrelayed"),
            JobSpec::new(raw(1)).key("waits").delay(HOUR),
        ]
    };
    add_specs(&batch, "batches.again", specs()).await;
    // both due members run; only the first one's end reaches the batch before the repeat
    let ran = drain_due(h, &q).await;
    assert_eq!(keys_of(&ran).len(), 2);
    let first = h.store().outbox(&q, None, 10).await.unwrap();
    assert_eq!(first.len(), 2);
    let ran_note = first.iter().find(|n| n.key.as_str() == "ran").unwrap();
    let applied = h
        .store()
        .batch_apply(
            batch.id(),
            &[(member("batches.again", "ran"), ran_note.outcome)],
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(applied.counts.succeeded, 1);

    let out = batch.add_raw("batches.again", specs()).await.unwrap();
    assert_eq!(
        out.iter().map(|e| e.outcome).collect::<Vec<_>>(),
        [
            EnqueueOutcome::Ended,
            EnqueueOutcome::Ended,
            EnqueueOutcome::Exists(JobState::Scheduled)
        ]
    );
    let st = t.stats().await.unwrap();
    assert_eq!(
        (st.enqueued, st.ready),
        (3, 0),
        "nothing enqueued again: {st:?}"
    );
    assert!(drain_due(h, &q).await.is_empty(), "no second run");

    relay_outbox(&c, &q).await.unwrap();
    t.cancel("waits").await.unwrap();
    relay_outbox(&c, &q).await.unwrap();
    let info = batch.close().await.unwrap();
    assert_eq!(info.status(), BatchStatus::Done, "{info:?}");
    assert_eq!(
        (
            info.counts.succeeded,
            info.counts.cancelled,
            info.counts.total()
        ),
        (2, 1, 3)
    );
}

/// A producer that died between its enqueue and its apply left its member reserved; the
/// member's job then ran and ended, its end noted but not relayed. Adding it again does not
/// enqueue it a second time (its key is free): the add relays the member's partition, finds
/// the end, and reports `Ended`; a member reserved whose job still waits is `Exists` and
/// moves to enqueued; one whose job never came is enqueued now.
pub async fn an_add_repeated_after_a_producer_died_mid_add_runs_no_member_twice<H: Harness>(h: &H) {
    let c = h.client().await;
    let t = c.topic("batches.mid-add").unwrap();
    let q = queue("batches.mid-add");
    let batch = open(&c, "mid-add").await;
    let m = |k: &str| member("batches.mid-add", k);
    // the dead producer's steps 1 and 2 (no 3): reserved, two of three enqueued
    h.store()
        .batch_reserve(batch.id(), &[m("ran"), m("waits"), m("never")])
        .await
        .unwrap();
    let mut waits = new_job("waits", Some("mid-add"), false);
    waits.due = Due::At(dq::store::from_unix_ms(4_000_000_000_000));
    h.store()
        .enqueue(
            &q,
            &[new_job("ran", Some("mid-add"), false), waits],
            EnqueueCall::new(),
        )
        .await
        .unwrap();
    assert_eq!(keys_of(&drain_due(h, &q).await), ["ran"]);
    assert_eq!(notes(h, &q).await.len(), 1, "its end noted, not relayed");

    let specs = ["ran", "waits", "never"]
        .iter()
        .map(|k| JobSpec::new(raw(1)).key(*k))
        .collect();
    let out = batch.add_raw("batches.mid-add", specs).await.unwrap();
    assert_eq!(
        out.iter().map(|e| e.outcome).collect::<Vec<_>>(),
        [
            EnqueueOutcome::Ended,
            EnqueueOutcome::Exists(JobState::Scheduled),
            EnqueueOutcome::Created
        ]
    );
    assert_eq!(
        t.stats().await.unwrap().enqueued,
        3,
        "ran is not enqueued again"
    );
    let info = batch.info().await.unwrap().unwrap();
    assert_eq!(
        (
            info.counts.succeeded,
            info.counts.enqueued,
            info.counts.reserved
        ),
        (1, 2, 0),
        "{info:?}"
    );
    assert_eq!(keys_of(&drain_due(h, &q).await), ["never"]);
}
