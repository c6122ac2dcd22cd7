//! The store test suite against a real 3-master Redis Cluster (the testkit's, shared by this
//! binary; 3 replicas too), connected by `redis+cluster://` seed URL.
//!
//! Every conformance body of `common::conformance` runs here once, in its own namespace,
//! followed by the invariant check, which scans every master. Below them: what only a cluster
//! has — partitions on several masters, server checks on every master, wake-up listeners on
//! the node serving their partition.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::Harness;
use common::conformance::raw;
use common::redis::RedisHarness;
use dq::store::Queue;
use dq::store::redis::layout::PartitionKeys;
use dq::{Client, EnqueueOutcome, Error, JobContext, JobError, Topic, Worker};
use dq_testkit::{CLUSTER_MASTERS, RedisCluster, eventually};

crate::conformance_suite!(RedisHarness::new_cluster().await);
crate::conformance_inspect_suite!(RedisHarness::new_cluster().await);

/// The master serving partition `p` of `topic` (every key of a partition shares its slot).
fn master_port(cluster: &RedisCluster, ns: &str, topic: &str, p: u16) -> u16 {
    let keys = PartitionKeys::new(ns, &Queue::new(Topic::new(topic).unwrap(), p));
    let slot: u16 = cluster.cmd(&["CLUSTER", "KEYSLOT", keys.jobs.as_str()]);
    let receipt = keys.fetch_receipt(7);
    let receipt_slot: u16 = cluster.cmd(&["CLUSTER", "KEYSLOT", receipt.as_str()]);
    assert_eq!(
        slot, receipt_slot,
        "a fetch receipt shares its partition's slot"
    );
    cluster
        .master_of_slot(slot)
        .expect("every slot is served")
        .port()
}

/// A topic's partitions live where their hash tags put them, each wholly on one master, and
/// every call reaches them there: jobs enqueued to 6 partitions are all found, counted and
/// listed through the one client. Prints how the partitions of a 3- and a 6-partition topic
/// spread over the masters with today's tags (`{topic#p}`).
#[tokio::test]
async fn partitions_live_on_their_masters_and_every_call_reaches_them() {
    let cluster = dq_testkit::shared_cluster();
    let h = RedisHarness::new_cluster().await;
    let c = h.client_with(|b| b.partitions("spread", 6)).await.unwrap();
    let t = c.topic("spread").unwrap();
    for i in 0..60u64 {
        let e = t.enqueue(raw(i)).key(format!("k{i}")).await.unwrap();
        assert_eq!(e.outcome, EnqueueOutcome::Created);
    }
    let stats = t.stats().await.unwrap();
    assert_eq!(
        stats.ready, 60,
        "stats add up every partition on every master"
    );
    for i in 0..60u64 {
        assert!(t.job(&format!("k{i}")).await.unwrap().is_some(), "k{i}");
    }
    // Every key of the namespace sits on the master its partition's slot names.
    let mut per_master: BTreeMap<u16, BTreeSet<u16>> = BTreeMap::new();
    let registry = dq::store::redis::layout::topics_key(h.namespace());
    for key in h.keys().into_iter().filter(|k| *k != registry) {
        let parsed = dq::store::redis::layout::parse_key(h.namespace(), &key).unwrap();
        let port = master_port(cluster, h.namespace(), parsed.topic, parsed.partition);
        per_master.entry(port).or_default().insert(parsed.partition);
        let holder = cluster
            .masters()
            .into_iter()
            // A master that does not serve the key's slot answers MOVED.
            .find(|m| {
                m.try_cmd::<i64>(&["EXISTS", key.as_str()])
                    .is_ok_and(|n| n == 1)
            })
            .map(dq_testkit::RedisServer::port);
        assert_eq!(holder, Some(port), "{key}");
    }
    assert_eq!(
        per_master.values().map(BTreeSet::len).sum::<usize>(),
        6,
        "{per_master:?}"
    );

    for (topic, partitions) in [("orders.close", 3u16), ("orders.close", 6), ("spread", 6)] {
        let used: BTreeSet<u16> = (0..partitions)
            .map(|p| master_port(cluster, "dq", topic, p))
            .collect();
        println!(
            "topic {topic:?} with {partitions} partitions: {} of {CLUSTER_MASTERS} masters used",
            used.len()
        );
    }
}

/// A cluster URL whose seeds are all unreachable fails at connect with a connection error,
/// and a malformed one with `InvalidConfig` that does not quote it.
#[tokio::test]
async fn bad_cluster_urls_fail_at_connect() {
    let unreachable = format!(
        "redis+cluster://127.0.0.1:{}",
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    );
    match Client::builder().fail_fast().connect(&unreachable).await {
        Err(e) => assert!(matches!(e, Error::Redis(_)), "{e:?}"),
        Ok(_) => panic!("connected to nothing"),
    }
    match Client::connect("redis+cluster://me:secret@127.0.0.1").await {
        Err(Error::InvalidConfig(msg)) => assert!(!msg.contains("secret"), "{msg}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
}

/// The server checks run on every master: one evicting master is enough to refuse the
/// cluster, and the error names it. (A private cluster: the shared one must stay fit.)
#[tokio::test]
async fn an_evicting_master_is_refused_at_connect() {
    let cluster = RedisCluster::start();
    let masters = cluster.masters();
    let bad = masters.last().expect("masters");
    bad.cmd::<()>(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    match Client::connect(&cluster.url()).await {
        Err(Error::UnsuitableServer(msg)) => {
            assert!(msg.contains("allkeys-lru"), "{msg}");
            assert!(
                msg.contains(&format!(":{}", bad.port())),
                "names the master: {msg}"
            );
        }
        other => panic!("expected UnsuitableServer, got {:?}", other.map(|_| ())),
    }
    bad.cmd::<()>(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    let client = Client::connect(&cluster.url()).await.expect("all fit now");
    assert!(client.store().now_ms().await.unwrap() > 0);
}

static RUNS: AtomicUsize = AtomicUsize::new(0);

#[dq::delayed_job(topic = "cluster.wake", retry = "none")]
async fn wake_job(_n: u64, _ctx: JobContext) -> Result<(), JobError> {
    RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Blocked `BLPOP`s on the masters (every client of every master; only this test runs
/// workers in this binary).
fn blocked_listeners(cluster: &RedisCluster) -> usize {
    cluster
        .masters()
        .iter()
        .map(|m| {
            let list: String = m.cmd(&["CLIENT", "LIST"]);
            list.lines().filter(|l| l.contains("cmd=blpop")).count()
        })
        .sum()
}

/// Each fetcher's wake-up listener blocks on the master serving its partition (a `BLPOP` sent
/// elsewhere would be answered `MOVED` at once, not block), and a job due now wakes its
/// fetcher there: with a 60 s idle wait, jobs enqueued to every partition of an idle worker
/// all run within 20 s only if the wake-ups arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wake_up_listeners_block_on_the_master_of_their_partition() {
    let cluster = dq_testkit::shared_cluster();
    let client = Client::builder()
        .namespace(dq_testkit::namespace("wake"))
        .partitions("cluster.wake", 6)
        .connect(&cluster.url())
        .await
        .unwrap();
    let before = blocked_listeners(cluster);
    let handle = Worker::builder(client.clone())
        .topics(["cluster.wake"])
        .idle_wait(Duration::from_secs(60))
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    eventually(
        "6 wake-up listeners blocked on masters",
        Duration::from_secs(20),
        || async { blocked_listeners(cluster) >= before + 6 },
    )
    .await;
    for i in 0..24u64 {
        client
            .enqueue::<wake_job>(i)
            .key(format!("w{i}"))
            .await
            .unwrap();
    }
    eventually("24 jobs ran", Duration::from_secs(20), || async {
        RUNS.load(Ordering::SeqCst) == 24
    })
    .await;
    handle.shutdown().await;
    let stats = client.stats::<wake_job>().await.unwrap();
    assert_eq!((stats.succeeded, stats.ready, stats.active), (24, 0, 0));
}

/// A missing function is handled on the node that lacks it: with a replica hung (`SIGSTOP`:
/// connected, never answering) and dq's functions flushed on every master (`FUNCTION FLUSH`),
/// calls to every partition load the library on their own master (`FUNCTION LOAD` there
/// alone) and succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_flushed_on_every_master_are_reloaded_while_a_replica_hangs() {
    let cluster = RedisCluster::start();
    let client = Client::builder()
        .namespace(dq_testkit::namespace("noscript"))
        .partitions("noscript", 6)
        .connect(&cluster.url())
        .await
        .unwrap();
    let t = client.topic("noscript").unwrap();
    t.enqueue(raw(0)).key("first").await.unwrap();
    let replica = cluster
        .nodes()
        .iter()
        .find(|n| !cluster.masters().iter().any(|m| m.port() == n.port()))
        .expect("a replica");
    let masters = cluster.masters();
    replica.signal("STOP");
    for m in &masters {
        m.cmd::<()>(&["FUNCTION", "FLUSH"]);
    }
    for i in 0..24u64 {
        let e = t.enqueue(raw(i)).key(format!("k{i}")).await.unwrap();
        assert_eq!(e.outcome, EnqueueOutcome::Created, "k{i}");
    }
    assert_eq!(t.stats().await.unwrap().ready, 25);
    replica.signal("CONT");
}

/// When a partition's slot moves to another master (migrated by hand: `SETSLOT IMPORTING` /
/// `MIGRATING`, `MIGRATE`, `SETSLOT NODE` on every master), its fetcher's wake-up listener
/// follows: its blocked `BLPOP` is answered `MOVED`, it looks the node up again and blocks on
/// the new owner; a job enqueued there runs, and nothing was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_up_listener_follows_its_slot_to_another_master() {
    let cluster = RedisCluster::start();
    let ns = dq_testkit::namespace("follow");
    let client = Client::builder()
        .namespace(&ns)
        .connect(&cluster.url())
        .await
        .unwrap();
    let t = client.topic("follow").unwrap();
    t.enqueue(raw(0))
        .key("later")
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    let keys = PartitionKeys::new(&ns, &Queue::new(Topic::new("follow").unwrap(), 0));
    let slot: u16 = cluster.cmd(&["CLUSTER", "KEYSLOT", keys.wake.as_str()]);
    let source = cluster.master_of_slot(slot).expect("served");
    let target = cluster
        .masters()
        .into_iter()
        .find(|m| m.port() != source.port())
        .expect("another master");
    let blocked = |node: &dq_testkit::RedisServer| {
        let list: String = node.cmd(&["CLIENT", "LIST"]);
        list.lines().filter(|l| l.contains("cmd=blpop")).count()
    };
    let (on_source, on_target) = (blocked(source), blocked(target));

    let handle = Worker::builder(client.clone())
        .topics(["follow"])
        .idle_wait(Duration::from_secs(60))
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    eventually(
        "the listener blocks on the source",
        Duration::from_secs(20),
        || async { blocked(source) == on_source + 1 },
    )
    .await;

    let id = |n: &dq_testkit::RedisServer| -> String { n.cmd(&["CLUSTER", "MYID"]) };
    let (source_id, target_id) = (id(source), id(target));
    let s = slot.to_string();
    target.cmd::<()>(&["CLUSTER", "SETSLOT", &s, "IMPORTING", &source_id]);
    source.cmd::<()>(&["CLUSTER", "SETSLOT", &s, "MIGRATING", &target_id]);
    let in_slot: Vec<String> = source.cmd(&["CLUSTER", "GETKEYSINSLOT", &s, "1000"]);
    assert!(!in_slot.is_empty(), "the partition has keys to move");
    let port = target.port().to_string();
    let mut migrate = vec![
        "MIGRATE",
        "127.0.0.1",
        port.as_str(),
        "",
        "0",
        "5000",
        "KEYS",
    ];
    migrate.extend(in_slot.iter().map(String::as_str));
    source.cmd::<()>(&migrate);
    for m in cluster.masters() {
        m.cmd::<()>(&["CLUSTER", "SETSLOT", &s, "NODE", &target_id]);
    }
    eventually(
        "the listener blocks on the new owner",
        Duration::from_secs(20),
        || async { blocked(target) == on_target + 1 && blocked(source) == on_source },
    )
    .await;

    t.enqueue(raw(1)).key("now").await.unwrap();
    eventually(
        "the job on the moved partition ran",
        Duration::from_secs(20),
        || async { FOLLOWED.load(Ordering::SeqCst) == 1 },
    )
    .await;
    handle.shutdown().await;
    let stats = t.stats().await.unwrap();
    assert_eq!((stats.scheduled, stats.succeeded), (1, 1), "nothing lost");
}

static FOLLOWED: AtomicUsize = AtomicUsize::new(0);

#[dq::delayed_job(topic = "follow", retry = "none")]
async fn follow_job(_n: u64) -> Result<(), JobError> {
    FOLLOWED.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Durable enqueue on a cluster: the `WAIT` goes, in the script's pipeline, to the master that
/// stored the jobs, and each master's replica confirms (jobs on 6 partitions over 3 masters,
/// single and bulk).
#[tokio::test]
async fn durable_enqueue_waits_on_the_master_that_stored_the_job() {
    let h = RedisHarness::new_cluster().await;
    let c = h
        .client_with(|b| {
            b.partitions("durable", 6)
                .durable_enqueue(1, Duration::from_secs(2))
        })
        .await
        .unwrap();
    let t = c.topic("durable").unwrap();
    for i in 0..12u64 {
        t.enqueue(raw(i)).key(format!("k{i}")).await.unwrap();
    }
    let bulk = (12..60u64)
        .map(|n| dq::JobSpec::new(raw(n)).key(format!("k{n}")))
        .collect::<Vec<_>>();
    assert_eq!(t.enqueue_bulk(bulk).await.unwrap().len(), 48);
    assert_eq!(t.stats().await.unwrap().ready, 60);
}
