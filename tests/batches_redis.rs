//! Batches on a real Redis with a real worker (issue 24, ARCHITECTURE.md §16): members in
//! two topics and several partitions end in every way, the callback is enqueued once with
//! counts that match; the relay's steps repeated (as after a relay killed between them)
//! change nothing twice; a cancelled batch completes with every member cancelled; a closed
//! batch takes no member; a member's batch is in its record.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dq::{BatchStatus, Client, Error, JobContext, JobError, JobSpec, MemberState, Worker};
use dq_testkit::eventually;

const WAIT: Duration = Duration::from_secs(30);

/// The callbacks that ran: the batch id each found in its key, and the counts it read; and
/// the client they read with.
#[derive(Clone)]
struct Seen(Arc<Mutex<Vec<(String, u64, u64)>>>, Client);

/// An order's item: released; items whose number ends in 7 fail for good (dead).
#[dq::delayed_job(topic = "batches.items", retry = "fixed(10ms, 1)")]
async fn release_item(n: u32, _ctx: JobContext) -> Result<(), JobError> {
    if n % 10 == 7 {
        return Err(JobError::permanent("the warehouse lost it"));
    }
    Ok(())
}

/// Another topic's member.
#[dq::delayed_job(topic = "batches.notes")]
async fn send_note(_n: u32, _ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

/// The callback: reads its batch's counts.
#[dq::delayed_job(topic = "batches.close", data(Seen))]
async fn close_order(order: u32, ctx: JobContext) -> Result<(), JobError> {
    let id = ctx
        .completed_batch()
        .expect("a callback's key names its batch");
    let info = ctx
        .data::<Seen>()?
        .1
        .batch(id.as_str())?
        .info()
        .await?
        .expect("the batch is kept");
    assert_eq!(order, 17);
    ctx.data::<Seen>()?.0.lock().unwrap().push((
        id.to_string(),
        info.counts.succeeded,
        info.counts.dead,
    ));
    Ok(())
}

/// The layout's invariants hold in `client`'s namespace (the batch keys among them).
async fn assert_invariants(namespace: &str) {
    let store = dq::store::RedisStore::connect(
        &dq_testkit::shared().url(),
        dq::store::RedisOptions {
            namespace: namespace.to_string(),
            ..dq::store::RedisOptions::default()
        },
    )
    .await
    .unwrap();
    let violations = dq::store::redis::layout::check_invariants(&store)
        .await
        .unwrap();
    assert!(violations.is_empty(), "{violations:?}");
}

async fn client(ns: &str) -> Client {
    client_in(&dq_testkit::namespace(ns)).await
}

async fn client_in(namespace: &str) -> Client {
    Client::builder()
        .namespace(namespace)
        .partitions("batches.items", 3)
        .connect(&dq_testkit::shared().url())
        .await
        .expect("connect")
}

async fn worker(client: &Client, seen: &Seen) -> dq::WorkerHandle {
    Worker::builder(client.clone())
        .topics(["batches.items", "batches.notes", "batches.close"])
        .data(seen.clone())
        .idle_wait(Duration::from_millis(50))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap()
}

/// The ends of members `<prefix>-0` to `<prefix>-<n - 1>` of `batches.notes`, all succeeded.
fn succeeded(prefix: &str, n: u32) -> Vec<(dq::MemberId, MemberState)> {
    let topic = dq::Topic::new("batches.notes").unwrap();
    (0..n)
        .map(|i| {
            let key = dq::JobKey::new(format!("{prefix}-{i}")).unwrap();
            (
                dq::MemberId::new(topic.clone(), key),
                MemberState::Succeeded,
            )
        })
        .collect()
}

/// One sweep of every batch not done (100 at most), which must fail on none.
async fn sweep(client: &Client, reservation_timeout: Duration) {
    let pass = dq::batch::sweep_batches(client, None, 100, reservation_timeout)
        .await
        .unwrap();
    assert!(pass.failed.is_empty(), "{:?}", pass.failed);
}

#[tokio::test]
async fn the_callback_runs_once_when_every_member_has_ended_with_matching_counts() {
    let ns = dq_testkit::namespace("batches-once");
    let client = client_in(&ns).await;
    let seen = Seen(Arc::default(), client.clone());
    let batch = client
        .new_batch()
        .id("order-17")
        .on_complete::<close_order>(&17)
        .open()
        .await
        .unwrap();
    // members in two topics, some due later; the batch is open while the worker runs
    let handle = worker(&client, &seen).await;
    let items = (0..30).map(|n| {
        let spec = JobSpec::new(n).key(format!("17-{n}"));
        if n % 3 == 0 {
            spec.delay(Duration::from_millis(300))
        } else {
            spec
        }
    });
    batch.add::<release_item>(items).await.unwrap();
    batch
        .add::<send_note>((0..5).map(|n| JobSpec::new(n).key(format!("note-{n}"))))
        .await
        .unwrap();
    // a member's record names its batch
    let job = client
        .topic("batches.items")
        .unwrap()
        .job("17-3")
        .await
        .unwrap();
    if let Some(job) = job {
        assert_eq!(
            job.batch.as_ref().map(dq::BatchId::as_str),
            Some("order-17")
        );
    }
    // repeating an add of the same keys reserves nothing twice
    batch
        .add::<send_note>((0..5).map(|n| JobSpec::new(n).key(format!("note-{n}"))))
        .await
        .unwrap();
    // not complete while open, however many members ended
    eventually("every member ended", WAIT, || async {
        batch.info().await.unwrap().unwrap().counts.pending() == 0
    })
    .await;
    assert!(seen.0.lock().unwrap().is_empty(), "a callback before close");
    let info = batch.close().await.unwrap();
    eventually("the callback ran", WAIT, || async {
        !seen.0.lock().unwrap().is_empty()
    })
    .await;
    eventually("the batch is done", WAIT, || async {
        batch.info().await.unwrap().unwrap().status() == BatchStatus::Done
    })
    .await;
    let info = batch.info().await.unwrap().unwrap_or(info);
    assert_eq!(info.counts.total(), 35);
    assert_eq!(info.counts.dead, 3, "{info:?}");
    assert_eq!(info.counts.succeeded, 32, "{info:?}");
    // settling again (a relay that repeats its step) enqueues nothing: the key's window
    dq::batch::settle(&client, &info).await.unwrap();
    let mut forced = info.clone();
    forced.done = false;
    dq::batch::settle(&client, &forced).await.unwrap();
    let close = client.topic("batches.close").unwrap();
    eventually("the callback's topic is quiet", WAIT, || async {
        let s = close.stats().await.unwrap();
        s.ready + s.scheduled + s.active == 0
    })
    .await;
    handle.shutdown().await;
    let seen = seen.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "callbacks: {seen:?}");
    assert_eq!(seen[0], ("order-17".to_string(), 32, 3));
    assert_eq!(close.stats().await.unwrap().succeeded, 1);
    // a done batch is out of the index of batches not done
    assert!(
        client
            .store()
            .open_batches(None, 100)
            .await
            .unwrap()
            .is_empty()
    );
    assert_invariants(&ns).await;
}

#[tokio::test]
async fn notes_applied_twice_count_once_and_a_closed_batch_takes_no_member() {
    let client = client("batches-twice").await;
    let batch = client
        .new_batch()
        .on_complete::<close_order>(&17)
        .open()
        .await
        .unwrap();
    batch
        .add::<release_item>((0..4).map(|n| JobSpec::new(n).key(format!("k{n}"))))
        .await
        .unwrap();
    let store = client.store();
    let members: Vec<dq::MemberId> = batch
        .members(0, 100)
        .await
        .unwrap()
        .members
        .into_iter()
        .map(|(m, s)| {
            assert_eq!(s, MemberState::Enqueued);
            m
        })
        .collect();
    assert_eq!(members.len(), 4);
    // the same ends applied twice (a relay killed before it deleted its notes), and an end
    // that comes after another end (a member requeued from the dead queue ends again)
    let ends: Vec<_> = members
        .iter()
        .map(|m| (m.clone(), MemberState::Succeeded))
        .collect();
    store.batch_apply(batch.id(), &ends).await.unwrap();
    store.batch_apply(batch.id(), &ends).await.unwrap();
    let later = [(members[0].clone(), MemberState::Dead)];
    let info = store
        .batch_apply(batch.id(), &later)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(info.counts.succeeded, 4, "{info:?}");
    assert_eq!(info.counts.total(), 4);
    let info = batch.close().await.unwrap();
    assert_eq!(info.status(), BatchStatus::Done);
    let err = batch
        .add::<release_item>([JobSpec::new(9).key("late")])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::BatchClosed(_)), "{err}");
    // nothing was enqueued for the refused add
    assert!(client.job::<release_item>("late").await.unwrap().is_none());
    // the callback was enqueued once: its key holds one job
    let close = client.topic("batches.close").unwrap();
    assert_eq!(close.stats().await.unwrap().ready, 1);
    dq::batch::settle(&client, &info).await.unwrap();
    assert_eq!(close.stats().await.unwrap().ready, 1);
    // a bad id is refused before anything is written
    assert!(matches!(
        client.batch("no spaces"),
        Err(Error::InvalidBatch { .. })
    ));
}

#[tokio::test]
async fn a_cancelled_batch_ends_every_member_cancelled_then_calls_back() {
    let ns = dq_testkit::namespace("batches-cancel");
    let client = client_in(&ns).await;
    let seen = Seen(Arc::default(), client.clone());
    let batch = client
        .new_batch()
        .on_complete::<close_order>(&17)
        .open()
        .await
        .unwrap();
    batch
        .add::<release_item>((0..6).map(|n| {
            JobSpec::new(n)
                .key(format!("c{n}"))
                .delay(Duration::from_secs(3600))
        }))
        .await
        .unwrap();
    let handle = worker(&client, &seen).await;
    let info = batch.cancel().await.unwrap();
    assert!(info.closed);
    eventually("the callback ran", WAIT, || async {
        !seen.0.lock().unwrap().is_empty()
    })
    .await;
    handle.shutdown().await;
    let info = batch.info().await.unwrap().unwrap();
    assert_eq!(info.counts.cancelled, 6, "{info:?}");
    assert_eq!(info.status(), BatchStatus::Done);
    assert_eq!(seen.0.lock().unwrap().len(), 1);
    assert_invariants(&ns).await;
}

#[tokio::test]
async fn a_producer_killed_between_reserve_and_enqueue_leaves_no_batch_waiting_for_ever() {
    let client = client("batches-killed").await;
    let store = client.store();
    let batch = client
        .new_batch()
        .on_complete::<close_order>(&17)
        .open()
        .await
        .unwrap();
    batch
        .add::<release_item>([JobSpec::new(1).key("real")])
        .await
        .unwrap();
    // the producer's step 1 for two more members, then it dies: no job, no apply
    let ghost = |k: &str| {
        dq::MemberId::new(
            dq::Topic::new("batches.items").unwrap(),
            dq::JobKey::new(k).unwrap(),
        )
    };
    store
        .batch_reserve(batch.id(), &[ghost("ghost-1"), ghost("ghost-2")])
        .await
        .unwrap();
    let info = batch.close().await.unwrap();
    assert_eq!(info.counts.reserved, 2);
    assert!(!info.is_complete());
    // the sweep within the timeout leaves them; past it, the jobs that never came end
    let long = Duration::from_secs(3600);
    sweep(&client, long).await;
    assert_eq!(batch.info().await.unwrap().unwrap().counts.reserved, 2);
    sweep(&client, Duration::ZERO).await;
    let info = batch.info().await.unwrap().unwrap();
    assert_eq!(info.counts.never_enqueued, 2, "{info:?}");
    // the real member was enqueued (its job exists): still waited for
    assert_eq!(info.counts.enqueued, 1, "{info:?}");
    assert!(!info.done);
    // a batch its producer never closed stays open: the sweep never closes one (storing the
    // flow again, or the producer's close, completes it)
    let flow_batch = client.new_batch().id("half-stored").open().await.unwrap();
    assert!(!flow_batch.info().await.unwrap().unwrap().closed);
    sweep(&client, Duration::ZERO).await;
    assert!(!flow_batch.info().await.unwrap().unwrap().closed);
    let id = dq::BatchId::new("flow.batches.close.dead-producer").unwrap();
    let spec = dq::batch::BatchSpec {
        then: dq::batch::BatchThen::Release {
            topic: dq::Topic::new("batches.close").unwrap(),
            key: dq::JobKey::new("dead-producer").unwrap(),
        },
        policy: dq::FailurePolicy::WaitAll,
        retention: Duration::from_secs(60),
    };
    store.batch_open(&id, &spec).await.unwrap();
    sweep(&client, long).await;
    assert!(!store.batch(&id).await.unwrap().unwrap().closed);
    sweep(&client, Duration::ZERO).await;
    let info = store.batch(&id).await.unwrap().unwrap();
    assert!(!info.closed && !info.done, "{info:?}");
}

#[tokio::test]
async fn batches_need_format_7_and_are_refused_before_any_write_below_it() {
    let client = client("batches-format").await;
    client.store().formats().set_write(dq::store::GROUP_FORMAT);
    let err = client.new_batch().id("too-early").open().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::NeedsFormat {
                needs: 7,
                level: 6,
                ..
            }
        ),
        "{err}"
    );
    let err = client
        .new_flow::<close_order>(JobSpec::new(17).key("too-early"))
        .children::<release_item>([JobSpec::new(1).key("too-early-1")])
        .enqueue()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NeedsFormat { .. }), "{err}");
    client.store().formats().set_write(dq::store::BATCH_FORMAT);
    assert!(
        client
            .batch("too-early")
            .unwrap()
            .info()
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        client
            .store()
            .batch(&dq::BatchId::new("flow.batches.close.too-early").unwrap())
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        client
            .topic("batches.items")
            .unwrap()
            .job("too-early-1")
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn ten_thousand_members_are_added_in_chunks_and_applied_in_one_call() {
    let client = client("batches-big").await;
    let batch = client.new_batch().open().await.unwrap();
    let n = 10_000u32;
    batch
        .add::<send_note>((0..n).map(|i| JobSpec::new(i).key(format!("big-{i}"))))
        .await
        .unwrap();
    let info = batch.info().await.unwrap().unwrap();
    assert_eq!(info.counts.enqueued, u64::from(n), "{info:?}");
    let ends = succeeded("big", n);
    let info = client
        .store()
        .batch_apply(batch.id(), &ends)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(info.counts.succeeded, u64::from(n), "{info:?}");
    let mut listed = 0;
    let mut cursor = 0;
    for _ in 0..1_000 {
        let page = batch.members(cursor, 1_000).await.unwrap();
        listed += page.members.len();
        match page.next {
            Some(c) => cursor = c,
            None => break,
        }
    }
    assert!(listed >= n as usize, "{listed}");
}

/// At `maxmemory` a batch does not grow: opening one and adding members are refused with
/// `OutOfMemory` before anything is written (as an enqueue is), while the calls that carry
/// members' ends, close and read it still run, so no end is held behind a full server.
#[tokio::test]
async fn at_maxmemory_a_batch_takes_no_member_but_its_ends_still_apply() {
    let server = dq_testkit::RedisServer::start_with(dq_testkit::ServerOptions::default());
    let ns = dq_testkit::namespace("batches-oom");
    let client = Client::builder()
        .namespace(&ns)
        .connect(&server.url())
        .await
        .unwrap();
    let batch = client.new_batch().id("full").open().await.unwrap();
    batch
        .add::<send_note>((0..2).map(|i| JobSpec::new(i).key(format!("oom-{i}"))))
        .await
        .unwrap();
    let before = batch.info().await.unwrap().unwrap();
    assert_eq!(before.counts.enqueued, 2);

    // far below what is used: every write that grows is refused from now on
    server.cmd::<()>(&["CONFIG", "SET", "maxmemory", "1"]);
    let opened = client.new_batch().id("never").open().await;
    assert!(matches!(opened, Err(Error::OutOfMemory)), "{opened:?}");
    let added = batch.add::<send_note>([JobSpec::new(9).key("oom-9")]).await;
    assert!(matches!(added, Err(Error::OutOfMemory)), "{added:?}");
    assert_eq!(
        batch.info().await.unwrap().unwrap(),
        before,
        "nothing written"
    );
    let ends = succeeded("oom", 2);
    let info = client
        .store()
        .batch_apply(batch.id(), &ends)
        .await
        .expect("ends apply at maxmemory")
        .unwrap();
    assert_eq!(info.counts.succeeded, 2);
    let info = batch.close().await.expect("a close at maxmemory");
    assert_eq!(info.status(), BatchStatus::Done);
    server.cmd::<()>(&["CONFIG", "SET", "maxmemory", "0"]);
    assert!(
        client
            .batch("never")
            .unwrap()
            .info()
            .await
            .unwrap()
            .is_none(),
        "the refused open wrote nothing"
    );
}

/// The sweep walks the whole index a page at a time, each sweep from where the last one
/// stopped, and goes on past a batch it cannot sweep (its key holds another type): every
/// complete batch whose producer died before its callback is settled, the bad one reported.
#[tokio::test]
async fn the_sweep_walks_every_batch_a_page_at_a_time_and_past_a_failing_one() {
    let ns = dq_testkit::namespace("batches-sweep-walk");
    let client = client_in(&ns).await;
    let store = client.store().clone();
    let server = dq_testkit::shared();
    // a batch id listed first whose record is not a hash: every read of it fails
    let bad = dq::store::redis::layout::batch_key(&ns, "bad");
    server.cmd::<()>(&["SET", &bad, "not a batch"]);
    let index = dq::store::redis::layout::batch_index_key(&ns);
    server.cmd::<()>(&["ZADD", &index, "0", "bad"]);
    // five batches closed by a producer that died before its callback
    for i in 0..5 {
        let b = client
            .new_batch()
            .id(format!("walk-{i}"))
            .on_complete::<close_order>(&17)
            .open()
            .await
            .unwrap();
        let closed = store.batch_close(b.id()).await.unwrap();
        assert!(closed.is_complete() && !closed.done);
    }
    let mut from = None;
    let (mut settled, mut failed, mut sweeps) = (0, Vec::new(), 0);
    for _ in 0..10 {
        let pass = dq::batch::sweep_batches(&client, from.as_ref(), 2, Duration::from_secs(600))
            .await
            .unwrap();
        sweeps += 1;
        settled += pass.settled;
        failed.extend(pass.failed.into_iter().map(|(id, _)| id.to_string()));
        from = pass.next;
        if from.is_none() {
            break;
        }
    }
    assert_eq!(
        (settled, sweeps),
        (5, 4),
        "three pages of two, then an empty one"
    );
    assert_eq!(failed, ["bad"]);
    for i in 0..5 {
        let info = client
            .batch(&format!("walk-{i}"))
            .unwrap()
            .info()
            .await
            .unwrap();
        assert!(info.unwrap().done);
    }
    let cb = client.topic("batches.close").unwrap();
    assert_eq!(cb.stats().await.unwrap().enqueued, 5, "one callback each");
    server.cmd::<()>(&["DEL", &bad]);
    server.cmd::<()>(&["ZREM", &index, "bad"]);
}

/// A partition's outbox whose first notes belong to a batch that cannot be applied (more of
/// them than a relay pass reads) does not hold back the notes after them: a worker's relay
/// reads past the notes it keeps, and the batch behind them completes and calls back.
#[tokio::test]
async fn notes_kept_for_a_failing_batch_do_not_hold_back_the_others() {
    let ns = dq_testkit::namespace("batches-head-of-line");
    let client = client_in(&ns).await;
    let server = dq_testkit::shared();
    let bad = dq::store::redis::layout::batch_key(&ns, "stuck");
    server.cmd::<()>(&["SET", &bad, "not a batch"]);
    // the member below goes to partition 0 of batches.notes (one partition)
    let q = dq::store::Queue::new(dq::Topic::new("batches.notes").unwrap(), 0);
    let outbox = dq::store::redis::layout::PartitionKeys::new(&ns, &q).outbox;
    let stuck = dq::batch::RELAY_NOTES + 100;
    for i in 0..stuck {
        let key = format!("stuck-{i}");
        server.cmd::<String>(&["XADD", &outbox, "*", "b", "stuck", "m", &key, "o", "s"]);
    }
    let seen = Seen(Arc::new(Mutex::new(Vec::new())), client.clone());
    let batch = client
        .new_batch()
        .id("behind")
        .on_complete::<close_order>(&17)
        .open()
        .await
        .unwrap();
    batch
        .add::<send_note>([JobSpec::new(1).key("behind-1")])
        .await
        .unwrap();
    batch.close().await.unwrap();
    let w = worker(&client, &seen).await;
    eventually(
        "the batch behind the stuck notes calls back",
        WAIT,
        || async { seen.0.lock().unwrap().iter().any(|(id, ..)| id == "behind") },
    )
    .await;
    w.shutdown().await;
    let left: usize = server.cmd(&["XLEN", &outbox]);
    assert_eq!(left, stuck, "only the failing batch's notes are kept");
    server.cmd::<()>(&["DEL", &bad, &outbox]);
}
