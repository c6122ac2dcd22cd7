//! The operator API's view of batches (issue 24) on a real Redis, as the CLI, the HTTP API,
//! the dashboard and the stats collector read it: the batches not done page by page (a page
//! after a batch done meanwhile resumes where it was), their count and the `dq_batches_open`
//! gauge, a batch's members by state page by page, and the job a batch's completion enqueues
//! or releases, looked up in its topic (not enqueued yet, waiting, kept once finished; a
//! flow's parent waiting for its children).

use std::collections::BTreeSet;
use std::time::Duration;

use dq::batch::{FollowUpJob, FollowUpKind};
use dq::{Client, Error, JobSpec, MemberState, Retention};
use metrics_util::MetricKind;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

async fn client(prefix: &str) -> Client {
    Client::builder()
        .namespace(dq_testkit::namespace(prefix))
        .connect(&dq_testkit::shared().url())
        .await
        .expect("connect")
}

fn payload(n: u32) -> Vec<u8> {
    dq::payload::encode(&n, 1 << 20).unwrap()
}

/// The relay's step on every partition of `topic` (what a worker serving it does).
async fn relay(client: &Client, topic: &str) {
    let t = client.topic(topic).unwrap();
    for p in 0..t.check().await.unwrap().partitions {
        let q = dq::store::Queue::new(dq::Topic::new(topic).unwrap(), p);
        dq::batch::relay_outbox(client, &q).await.unwrap();
    }
}

fn ids(list: &dq::batch::BatchList) -> Vec<&str> {
    list.batches.iter().map(|b| b.id.as_str()).collect()
}

#[tokio::test]
async fn batches_not_done_are_paged_oldest_first_even_past_one_done_meanwhile() {
    let client = client("ops-batches-list").await;
    let admin = client.admin();
    for id in ["p-1", "p-2", "p-3"] {
        client.new_batch().id(id).open().await.unwrap();
    }
    let first = admin.batches(None, 2).await.unwrap();
    assert_eq!(ids(&first), ["p-1", "p-2"]);
    assert_eq!(first.next.as_ref().map(dq::BatchId::as_str), Some("p-2"));
    // p-2 is done before the next page is read (closed with no member: complete at once)
    let done = client.batch("p-2").unwrap().close().await.unwrap();
    assert!(done.done);
    let second = admin.batches(Some("p-2"), 2).await.unwrap();
    assert_eq!(
        ids(&second),
        ["p-3"],
        "resumed after p-2, not from the first"
    );
    assert!(second.next.is_none());
    let rest = admin.batches(Some("p-1"), 10).await.unwrap();
    assert_eq!(ids(&rest), ["p-3"]);
    assert_eq!(admin.open_batch_count().await.unwrap(), 2);

    // bad input, before anything is read
    assert!(matches!(
        admin.batches(Some("a b"), 1).await,
        Err(Error::InvalidBatch { .. })
    ));
    for limit in [0, dq::batch::MAX_BATCH_PAGE + 1] {
        assert!(matches!(
            admin.batches(None, limit).await,
            Err(Error::InvalidConfig(_))
        ));
    }
}

#[tokio::test]
async fn members_are_read_by_state_page_by_page() {
    let client = client("ops-batches-members").await;
    let admin = client.admin();
    let batch = client.new_batch().id("big").open().await.unwrap();
    let later = Duration::from_secs(3600);
    let specs = (0..300)
        .map(|i| {
            JobSpec::new(payload(i))
                .key(format!("m-{i:03}"))
                .delay(later)
        })
        .collect();
    batch.add_raw("ops.items", specs).await.unwrap();
    // every third member cancelled, its end relayed
    let items = client.topic("ops.items").unwrap();
    let mut cancelled = BTreeSet::new();
    for i in (0..300).step_by(3) {
        let key = format!("m-{i:03}");
        items.cancel(&key).await.unwrap();
        cancelled.insert(key);
    }
    relay(&client, "ops.items").await;
    let info = batch.info().await.unwrap().unwrap();
    assert_eq!((info.counts.cancelled, info.counts.enqueued), (100, 200));

    // page by page, only the cancelled ones: each listed, none other
    let mut seen = BTreeSet::new();
    let mut cursor = 0;
    for _ in 0..1000 {
        let page = admin
            .batch_members("big", Some(MemberState::Cancelled), cursor, 30)
            .await
            .unwrap();
        for (m, state) in page.members {
            assert_eq!(state, MemberState::Cancelled, "{m}");
            assert_eq!(m.topic.as_str(), "ops.items");
            seen.insert(m.key.to_string());
        }
        match page.next {
            Some(next) => cursor = next,
            None => break,
        }
    }
    assert_eq!(seen, cancelled);
    // every state: about the limit asked for, every member once the pages are read
    let page = admin.batch_members("big", None, 0, 1000).await.unwrap();
    let all: BTreeSet<String> = page
        .members
        .iter()
        .map(|(m, _)| m.key.to_string())
        .collect();
    assert_eq!(all.len(), 300);

    assert!(matches!(
        admin.batch_members("nope", None, 0, 10).await,
        Err(Error::BatchNotFound(_))
    ));
    assert!(matches!(
        admin.batch_members("big", None, 0, 0).await,
        Err(Error::InvalidConfig(_))
    ));
}

/// A flow's parent.
struct Ship;

impl dq::Job for Ship {
    type Payload = u32;
    const TOPIC: &'static str = "ops.ship";
}

/// A flow's child.
struct Pack;

impl dq::Job for Pack {
    type Payload = u32;
    const TOPIC: &'static str = "ops.pack";
}

#[tokio::test]
async fn the_follow_up_is_looked_up_by_its_key_in_its_topic() {
    let client = client("ops-batches-then").await;
    let admin = client.admin();

    // a batch that only reports its progress
    let plain = client.new_batch().id("plain").open().await.unwrap();
    let info = plain.info().await.unwrap().unwrap();
    assert!(admin.batch_follow_up(&info).await.unwrap().is_none());

    // a callback: not enqueued yet, and its topic not recorded by looking
    let cb = client
        .new_batch()
        .id("cb")
        .on_complete_raw("ops.close", payload(1))
        .open()
        .await
        .unwrap();
    let info = cb.info().await.unwrap().unwrap();
    let f = admin.batch_follow_up(&info).await.unwrap().unwrap();
    assert_eq!(f.kind, FollowUpKind::Callback);
    assert_eq!(
        (f.topic.as_str(), f.key.as_str()),
        ("ops.close", "batch:cb")
    );
    assert!(matches!(f.job, FollowUpJob::NotFound));
    assert!(f.job.state().is_none());
    let topics = admin.topics().await.unwrap();
    assert!(topics.iter().all(|t| t.topic.as_str() != "ops.close"));

    // closed with no member: done, its callback waiting
    let info = cb.close().await.unwrap();
    assert!(info.done);
    let f = admin.batch_follow_up(&info).await.unwrap().unwrap();
    let FollowUpJob::Live(job) = &f.job else {
        panic!("the callback waits: {f:?}");
    };
    assert_eq!(job.key.as_str(), "batch:cb");
    assert!(!f.waiting_for_children());

    // cancelled, and kept by its topic: found among the finished jobs
    let close = client.topic("ops.close").unwrap();
    close
        .set_retention(Some(Retention {
            cancelled: Some(Duration::from_secs(3600)),
            ..Retention::default()
        }))
        .await
        .unwrap();
    close.cancel("batch:cb").await.unwrap();
    let f = admin.batch_follow_up(&info).await.unwrap().unwrap();
    assert!(matches!(f.job, FollowUpJob::Finished(_)), "{f:?}");
    assert_eq!(f.job.state(), Some("cancelled"));

    // a flow's parent, waiting for its children
    let flow = client
        .new_flow::<Ship>(JobSpec::new(9).key("ship-9"))
        .children::<Pack>([JobSpec::new(1)
            .key("pack-1")
            .delay(Duration::from_secs(3600))])
        .enqueue()
        .await
        .unwrap();
    let info = flow.children.info().await.unwrap().unwrap();
    let f = admin.batch_follow_up(&info).await.unwrap().unwrap();
    assert_eq!(f.kind, FollowUpKind::Parent);
    assert_eq!((f.topic.as_str(), f.key.as_str()), ("ops.ship", "ship-9"));
    assert!(f.waiting_for_children());
    assert_eq!(f.job.state(), Some("scheduled"));
}

/// The value of the gauge `name` (no labels) in `recorder`'s snapshot.
fn gauge(snapshotter: &metrics_util::debugging::Snapshotter, name: &str) -> Option<f64> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .find_map(|(key, _, _, value)| {
            let (kind, key) = key.into_parts();
            match (kind, value) {
                (MetricKind::Gauge, DebugValue::Gauge(g)) if key.name() == name => {
                    Some(g.into_inner())
                }
                _ => None,
            }
        })
}

// (current-thread runtime: the recorder is this thread's, so other tests of this binary
// record nothing into it)
#[tokio::test(flavor = "current_thread")]
async fn the_collector_sets_the_open_batches_gauge() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let client = client("ops-batches-gauge").await;
    for id in ["g-1", "g-2"] {
        let b = client.new_batch().id(id).open().await.unwrap();
        b.add_raw("ops.gauge", vec![JobSpec::new(payload(1)).key(id)])
            .await
            .unwrap();
    }
    dq::metrics::collect_once(&client).await.unwrap();
    assert_eq!(gauge(&snapshotter, dq::metrics::BATCHES_OPEN), Some(2.0));
    // one done (its member cancelled, relayed, then closed)
    client
        .topic("ops.gauge")
        .unwrap()
        .cancel("g-1")
        .await
        .unwrap();
    relay(&client, "ops.gauge").await;
    assert!(client.batch("g-1").unwrap().close().await.unwrap().done);
    dq::metrics::collect_once(&client).await.unwrap();
    assert_eq!(gauge(&snapshotter, dq::metrics::BATCHES_OPEN), Some(1.0));
}
