//! Flows on a real Redis with a real worker (issue 24, ARCHITECTURE.md §16): a parent runs
//! only after its children have ended, at every level of a flow of depth 3; it reads its
//! children's counts; the failure policies; a flow stored twice is one flow; a flow too deep
//! or with a parent of its own due time is refused before anything is written.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dq::{
    Client, Error, FLOW_WAIT_MS, FailurePolicy, JobContext, JobError, JobSpec, JobState, Worker,
};
use dq_testkit::eventually;

const WAIT: Duration = Duration::from_secs(30);

/// One run: topic, key, when it ended, and for a parent its children's (succeeded, failed).
type Run = (String, String, Instant, Option<(u64, u64)>);

/// Every run, and the client the parents read their children with.
#[derive(Clone)]
struct Seen(Arc<Mutex<Vec<Run>>>, Client);

impl Seen {
    fn record(&self, ctx: &JobContext, children: Option<(u64, u64)>) {
        self.0.lock().unwrap().push((
            ctx.topic.to_string(),
            ctx.key.to_string(),
            Instant::now(),
            children,
        ));
    }

    fn ended(&self, key: &str) -> Option<Instant> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .find(|r| r.1 == key)
            .map(|r| r.2)
    }
}

/// A leaf: fails for good when its number is 13.
#[dq::delayed_job(topic = "flows.leaf", data(Seen))]
async fn leaf(n: u32, ctx: JobContext) -> Result<(), JobError> {
    tokio::time::sleep(Duration::from_millis(20)).await;
    ctx.data::<Seen>()?.record(&ctx, None);
    if n == 13 {
        return Err(JobError::permanent("unlucky"));
    }
    Ok(())
}

/// A parent (at any level): reads its children's counts.
#[dq::delayed_job(topic = "flows.parent", data(Seen))]
async fn parent(_n: u32, ctx: JobContext) -> Result<(), JobError> {
    let seen = ctx.data::<Seen>()?;
    let info = seen
        .1
        .batch(ctx.children().as_str())?
        .info()
        .await?
        .expect("the children's batch is kept");
    assert!(info.is_complete(), "{info:?}");
    seen.record(&ctx, Some((info.counts.succeeded, info.failed())));
    Ok(())
}

async fn client(ns: &str) -> Client {
    Client::builder()
        .namespace(dq_testkit::namespace(ns))
        .partitions("flows.leaf", 3)
        .partitions("flows.parent", 2)
        .connect(&dq_testkit::shared().url())
        .await
        .expect("connect")
}

async fn worker(client: &Client, seen: &Seen) -> dq::WorkerHandle {
    Worker::builder(client.clone())
        .topics(["flows.leaf", "flows.parent"])
        .concurrency("flows.leaf", 8)
        .data(seen.clone())
        .idle_wait(Duration::from_millis(50))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap()
}

fn leaves(from: u32, n: u32) -> impl Iterator<Item = JobSpec<u32>> {
    (from..from + n).map(|i| JobSpec::new(i).key(format!("leaf-{i}")))
}

#[tokio::test]
async fn every_parent_of_a_depth_3_flow_runs_after_its_children_have_ended() {
    let client = client("flows-depth").await;
    let seen = Seen(Arc::default(), client.clone());
    // top ← (mid-a ← (low-a ← 3 leaves), 2 leaves), (mid-b ← 2 leaves)
    let low_a = client
        .new_flow::<parent>(JobSpec::new(3).key("low-a"))
        .children::<leaf>(leaves(0, 3));
    let mid_a = client
        .new_flow::<parent>(JobSpec::new(2).key("mid-a"))
        .child_flow(low_a)
        .children::<leaf>(leaves(10, 2));
    let mid_b = client
        .new_flow::<parent>(JobSpec::new(2).key("mid-b"))
        .children::<leaf>(leaves(20, 2));
    let flow = client
        .new_flow::<parent>(JobSpec::new(1).key("top"))
        .child_flow(mid_a)
        .child_flow(mid_b)
        .children::<leaf>(leaves(30, 1))
        .enqueue()
        .await
        .unwrap();
    assert_eq!(flow.key.as_str(), "top");
    // the parents wait for their children, at the far due time, before any worker runs
    let parents = client.topic("flows.parent").unwrap();
    for key in ["top", "mid-a", "mid-b", "low-a"] {
        let job = parents.job(key).await.unwrap().expect(key);
        assert_eq!(job.state, JobState::Scheduled, "{key}");
        assert_eq!(job.due_ms, FLOW_WAIT_MS, "{key}");
    }
    let handle = worker(&client, &seen).await;
    eventually("the top parent ran", WAIT, || async {
        seen.ended("top").is_some()
    })
    .await;
    handle.shutdown().await;
    let last_of = |keys: &[&str]| keys.iter().map(|k| seen.ended(k).expect(k)).max().unwrap();
    assert!(seen.ended("low-a").unwrap() > last_of(&["leaf-0", "leaf-1", "leaf-2"]));
    assert!(seen.ended("mid-a").unwrap() > last_of(&["low-a", "leaf-10", "leaf-11"]));
    assert!(seen.ended("mid-b").unwrap() > last_of(&["leaf-20", "leaf-21"]));
    assert!(seen.ended("top").unwrap() > last_of(&["mid-a", "mid-b", "leaf-30"]));
    let runs = seen.0.lock().unwrap().clone();
    assert_eq!(runs.len(), 4 + 8, "each job ran once: {runs:?}");
    let top = runs.iter().find(|r| r.1 == "top").unwrap();
    assert_eq!(top.3, Some((3, 0)), "top's children: mid-a, mid-b, leaf-30");
}

#[tokio::test]
async fn the_failure_policies_decide_when_a_parent_is_released() {
    let client = client("flows-policy").await;
    let seen = Seen(Arc::default(), client.clone());
    // waits for all: released once every child has ended, the failure counted
    client
        .new_flow::<parent>(JobSpec::new(1).key("wait-all"))
        .children::<leaf>(leaves(12, 2)) // 12 succeeds, 13 dies
        .enqueue()
        .await
        .unwrap();
    // fail fast: the parent is failed (buried, never run) at the first dead child, while
    // another still waits an hour; it is itself the child of a flow that waits for all
    let fail_fast = client
        .new_flow::<parent>(JobSpec::new(1).key("fail-fast"))
        .policy(FailurePolicy::FailFast)
        .children::<leaf>([JobSpec::new(13).key("ff-13")])
        .children::<leaf>([JobSpec::new(40)
            .key("ff-later")
            .delay(Duration::from_secs(3600))]);
    client
        .new_flow::<parent>(JobSpec::new(1).key("above-fail-fast"))
        .child_flow(fail_fast)
        .enqueue()
        .await
        .unwrap();
    // ignore: released once every child has ended, failures not held against it
    client
        .new_flow::<parent>(JobSpec::new(1).key("ignore"))
        .policy(FailurePolicy::Ignore)
        .children::<leaf>([JobSpec::new(13).key("ig-13")])
        .enqueue()
        .await
        .unwrap();
    let handle = worker(&client, &seen).await;
    eventually("the parents ran", WAIT, || async {
        ["wait-all", "above-fail-fast", "ignore"]
            .iter()
            .all(|k| seen.ended(k).is_some())
    })
    .await;
    handle.shutdown().await;
    let runs = seen.0.lock().unwrap().clone();
    let children_of = |k: &str| runs.iter().find(|r| r.1 == k).unwrap().3;
    assert_eq!(children_of("wait-all"), Some((1, 1)));
    assert_eq!(children_of("ignore"), Some((0, 0)));
    // fail fast: the parent never ran; it is dead, saying why, while a child still waits
    assert!(seen.ended("fail-fast").is_none(), "{runs:?}");
    let parents = client.topic("flows.parent").unwrap();
    let buried = parents.job("fail-fast").await.unwrap().expect("kept dead");
    assert_eq!(buried.state, JobState::Dead);
    let why = buried.history.last().expect("a reason").error.clone();
    assert!(why.contains("a child failed"), "{why}");
    assert!(seen.ended("ff-later").is_none());
    // the flow above counts it dead, and runs
    assert_eq!(children_of("above-fail-fast"), Some((0, 1)));
}

#[tokio::test]
async fn a_flow_stored_twice_is_one_flow_and_a_bad_flow_writes_nothing() {
    let client = client("flows-twice").await;
    let seen = Seen(Arc::default(), client.clone());
    for _ in 0..2 {
        client
            .new_flow::<parent>(JobSpec::new(1).key("again"))
            .children::<leaf>(leaves(50, 3))
            .enqueue()
            .await
            .unwrap();
    }
    let info = client
        .batch("flow.flows.parent.again")
        .unwrap()
        .info()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(info.counts.total(), 3, "{info:?}");
    // too deep: 9 levels
    let mut flow = client.new_flow::<parent>(JobSpec::new(9).key("deep-9"));
    for level in (1..9).rev() {
        flow = client
            .new_flow::<parent>(JobSpec::new(level).key(format!("deep-{level}")))
            .child_flow(flow);
    }
    let err = flow.enqueue().await.unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)), "{err}");
    // a parent with a due time of its own
    let err = client
        .new_flow::<parent>(JobSpec::new(1).key("own-due").delay(Duration::from_secs(1)))
        .children::<leaf>(leaves(60, 1))
        .enqueue()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)), "{err}");
    let parents = client.topic("flows.parent").unwrap();
    for key in ["deep-1", "deep-9", "own-due"] {
        assert!(parents.job(key).await.unwrap().is_none(), "{key}");
    }
    assert!(
        client
            .topic("flows.leaf")
            .unwrap()
            .job("leaf-60")
            .await
            .unwrap()
            .is_none()
    );
    let handle = worker(&client, &seen).await;
    eventually("the parent ran", WAIT, || async {
        seen.ended("again").is_some()
    })
    .await;
    handle.shutdown().await;
    assert_eq!(seen.0.lock().unwrap().len(), 4);
}

#[tokio::test]
async fn under_durable_enqueue_a_parent_is_not_marked_released_until_a_replica_has_it() {
    // one node, no replica: a durable client's writes are never confirmed
    let ns = dq_testkit::namespace("flows-durable");
    let client = Client::builder()
        .namespace(ns.clone())
        .connect(&dq_testkit::shared().url())
        .await
        .unwrap();
    let durable = Client::builder()
        .namespace(ns)
        .durable_enqueue(1, Duration::from_millis(50))
        .connect(&dq_testkit::shared().url())
        .await
        .unwrap();
    let flow = client
        .new_flow::<parent>(JobSpec::new(1).key("durable-parent"))
        .children::<leaf>(leaves(70, 1))
        .enqueue()
        .await
        .unwrap();
    client
        .topic("flows.leaf")
        .unwrap()
        .cancel("leaf-70")
        .await
        .unwrap();
    let id = flow.children.id().clone();
    let ends = [(
        dq::MemberId::new(
            dq::Topic::new("flows.leaf").unwrap(),
            dq::JobKey::new("leaf-70").unwrap(),
        ),
        dq::MemberState::Cancelled,
    )];
    let info = client
        .store()
        .batch_apply(&id, &ends)
        .await
        .unwrap()
        .unwrap();
    assert!(info.is_complete() && !info.done, "{info:?}");
    // the release is not confirmed by a replica: the batch is not marked done, so a later
    // settle (the relay's next pass) releases the parent again
    let err = dq::batch::settle(&durable, &info).await.unwrap_err();
    assert!(matches!(err, Error::NotReplicated { .. }), "{err}");
    assert!(!client.store().batch(&id).await.unwrap().unwrap().done);
    let info = dq::batch::settle(&client, &info).await.unwrap();
    assert!(info.done);
    let job = client
        .topic("flows.parent")
        .unwrap()
        .job("durable-parent")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(job.state, JobState::Ready);
}

/// A fail-fast flow whose first child fails while the flow is being stored (its key taken by
/// a job outside the flow: refused) is failed at once: its parent is buried, and the rest of
/// its children — more than one add's chunk — are not stored; `enqueue` succeeds.
#[tokio::test]
async fn a_fail_fast_flow_failed_while_it_is_stored_stops_there() {
    let client = client("flows-ff-store").await;
    client
        .enqueue::<leaf>(99)
        .key("leaf-0")
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    let n = dq::batch::ADD_CHUNK as u32 + 500;
    client
        .new_flow::<parent>(JobSpec::new(1).key("ff-store"))
        .policy(FailurePolicy::FailFast)
        .children::<leaf>(leaves(0, n).map(|s| s.delay(Duration::from_secs(3600))))
        .enqueue()
        .await
        .expect("a flow failed while stored is stored as far as it needed");
    let parents = client.topic("flows.parent").unwrap();
    let job = parents.job("ff-store").await.unwrap().expect("kept dead");
    assert_eq!(job.state, JobState::Dead);
    let info = client
        .batch("flow.flows.parent.ff-store")
        .unwrap()
        .info()
        .await
        .unwrap()
        .unwrap();
    assert!(info.done, "{info:?}");
    assert_eq!(info.counts.refused, 1);
    assert_eq!(
        info.counts.total(),
        u64::from(dq::batch::ADD_CHUNK as u32),
        "only the first chunk was stored: {info:?}"
    );
    let leaves_enqueued = client
        .topic("flows.leaf")
        .unwrap()
        .stats()
        .await
        .unwrap()
        .enqueued;
    assert_eq!(
        leaves_enqueued,
        dq::batch::ADD_CHUNK as u64,
        "the outside job and 999 children"
    );
}
