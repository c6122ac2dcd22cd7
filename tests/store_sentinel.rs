//! The store test suite through Redis Sentinel (the testkit's shared set: a master, 2
//! replicas, 3 sentinels), connected by `redis+sentinel://…/dqmaster`.
//!
//! Every conformance body of `common::conformance` runs here once, in its own namespace,
//! followed by the invariant check on the master. Below them: what only Sentinel has — bad
//! sentinel URLs refused at connect, and a producer and a worker that keep going across a
//! `SIGKILL` of the master (a private set).

mod common;

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::Harness;
use common::conformance::raw;
use common::redis::RedisHarness;
use dq::{Client, Error, JobError, Worker};
use dq_testkit::{RedisSentinelSet, eventually};

crate::conformance_suite!(RedisHarness::new_sentinel().await);
crate::conformance_inspect_suite!(RedisHarness::new_sentinel().await);

/// A sentinel URL without a master name, without hosts, or with a bad port is refused at
/// connect with `InvalidConfig`, before anything is sent; one naming a master the sentinels
/// do not know fails at once (no waiting for it), with an error naming the cause.
#[tokio::test]
async fn bad_sentinel_urls_fail_at_connect_with_a_typed_error() {
    for url in [
        "redis+sentinel://127.0.0.1:26379",
        "redis+sentinel://127.0.0.1:26379/",
        "redis+sentinel:///dqmaster",
        "redis+sentinel://127.0.0.1/dqmaster",
        "redis+sentinel://127.0.0.1:0/dqmaster",
        "redis+sentinel://127.0.0.1:port/dqmaster",
        "redis+sentinel://u:secret@127.0.0.1:26379/dqmaster/notadb",
    ] {
        match Client::builder().fail_fast().connect(url).await {
            Err(Error::InvalidConfig(msg)) => {
                assert!(msg.contains("Sentinel"), "{url}: {msg}");
                assert!(!msg.contains("secret"), "{url}: the password is not quoted");
            }
            other => panic!("{url}: {:?}", other.map(|_| ())),
        }
    }
    let set = dq_testkit::shared_sentinel();
    let hosts = set
        .sentinel_ports()
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let started = Instant::now();
    let err = Client::connect(&format!("redis+sentinel://{hosts}/nosuchmaster"))
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(
        !err.is_retryable(),
        "an unknown master name is not waited for: {err}"
    );
    assert!(started.elapsed() < Duration::from_secs(20), "{err}");
    assert!(
        format!("{err:?}").contains("MasterNameNotFoundBySentinel"),
        "{err:?}"
    );
}

/// The client talks to the master the sentinels name: what it writes is on that server.
#[tokio::test]
async fn the_client_writes_to_the_master_the_sentinels_name() {
    let set = dq_testkit::shared_sentinel();
    let h = RedisHarness::new_sentinel().await;
    let c = h.client().await;
    c.topic("where")
        .unwrap()
        .enqueue(raw(1))
        .key("k")
        .await
        .unwrap();
    let master = set.master().expect("a master");
    let jobs = h.partition_keys("where", 0).jobs;
    assert_eq!(master.cmd::<i64>(&["HEXISTS", jobs.as_str(), "k"]), 1);
    for r in set.replicas() {
        eventually(
            "the write reached a replica",
            Duration::from_secs(10),
            || async {
                r.try_cmd::<i64>(&["HEXISTS", jobs.as_str(), "k"])
                    .is_ok_and(|n| n == 1)
            },
        )
        .await;
    }
}

static RAN: Mutex<Option<HashSet<u64>>> = Mutex::new(None);

fn ran() -> HashSet<u64> {
    RAN.lock().unwrap().clone().unwrap_or_default()
}

#[dq::delayed_job(topic = "failover", retry = "none")]
async fn failover_job(n: u64) -> Result<(), JobError> {
    RAN.lock()
        .unwrap()
        .get_or_insert_with(HashSet::new)
        .insert(n);
    Ok(())
}

/// Enqueues job `n`, retrying retryable errors (a failover in progress) until it answers Ok;
/// panics after `within`.
async fn enqueue_until_ok(client: &Client, n: u64, within: Duration) {
    let deadline = Instant::now() + within;
    let mut tries = 0u32;
    loop {
        tries += 1;
        match client.enqueue::<failover_job>(n).key(format!("j{n}")).await {
            Ok(_) => return,
            Err(e) if e.is_retryable() && Instant::now() < deadline && tries < 10_000 => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("enqueue j{n} failed after {tries} tries: {e}"),
        }
    }
}

/// A producer and a worker keep going across a `SIGKILL` of the master, without a restart:
/// the sentinels promote a replica, the client's calls follow it, and so does the worker's
/// wake-up listener (the worker polls only once a minute, so the jobs enqueued after the
/// failover run within the test's deadline only if its listener blocks on the new master).
/// Every job enqueued before the kill ran before it; every job enqueued after it (each
/// retried until Ok, which only a master answers) runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_follows_a_failover() {
    let set = RedisSentinelSet::start();
    let client = Client::builder()
        .namespace(dq_testkit::namespace("failover"))
        .connect(&set.url())
        .await
        .unwrap();
    let handle = Worker::builder(client.clone())
        .topics(["failover"])
        .idle_wait(Duration::from_secs(60))
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    for n in 0..20 {
        enqueue_until_ok(&client, n, Duration::from_secs(10)).await;
    }
    eventually("the first 20 jobs ran", Duration::from_secs(20), || async {
        ran().len() == 20
    })
    .await;

    let old = set.kill_master();
    // The producer keeps going while the sentinels fail over.
    for n in 20..40 {
        enqueue_until_ok(&client, n, Duration::from_secs(40)).await;
    }
    let new = set.wait_for_failover(old, Duration::from_secs(30));
    assert_ne!(new, old);
    eventually(
        "the 20 jobs enqueued across the failover ran",
        Duration::from_secs(30),
        || async { ran().len() == 40 },
    )
    .await;
    assert_eq!(ran(), (0..40).collect::<HashSet<u64>>());
    // A handler's run is logged before its ack is written, and on a loaded machine the acks
    // of the last runs may still be on their way: they land well within the 30 s lease (a
    // lost ack would leave its job active until then).
    eventually(
        "every ack reached the new master",
        Duration::from_secs(10),
        || async {
            let stats = client.stats::<failover_job>().await.unwrap();
            (stats.ready, stats.active) == (0, 0)
        },
    )
    .await;
    handle.shutdown().await;
}

/// Durable enqueue answers Ok once the replicas confirmed the write (single and bulk, through
/// Sentinel with 2 replicas); on a node without replicas it answers the typed
/// `NotReplicated { acked: 0, wanted: 1 }`, and the job is stored all the same (a retry by
/// key finds it). Out-of-range settings are refused before connecting.
#[tokio::test]
async fn durable_enqueue_waits_for_replicas_or_says_it_did_not() {
    let h = RedisHarness::new_sentinel().await;
    let c = h
        .client_with(|b| b.durable_enqueue(2, Duration::from_secs(2)))
        .await
        .unwrap();
    let t = c.topic("durable").unwrap();
    t.enqueue(raw(1)).key("one").await.unwrap();
    let bulk = (2..40u64)
        .map(|n| dq::JobSpec::new(raw(n)).key(format!("b{n}")))
        .collect::<Vec<_>>();
    assert_eq!(t.enqueue_bulk(bulk).await.unwrap().len(), 38);
    for r in dq_testkit::shared_sentinel().replicas() {
        let jobs = h.partition_keys("durable", 0).jobs;
        // Confirmed by WAIT: already on every replica, no waiting needed.
        assert_eq!(r.cmd::<i64>(&["HLEN", jobs.as_str()]), 39);
    }

    let single = dq_testkit::shared();
    let c = Client::builder()
        .namespace(dq_testkit::namespace("durable"))
        .durable_enqueue(1, Duration::from_millis(50))
        .connect(&single.url())
        .await
        .unwrap();
    let t = c.topic("durable").unwrap();
    match t.enqueue(raw(1)).key("lonely").await {
        Err(Error::NotReplicated { acked, wanted }) => assert_eq!((acked, wanted), (0, 1)),
        other => panic!("{:?}", other.map(|e| e.outcome)),
    }
    assert!(
        t.job("lonely").await.unwrap().is_some(),
        "stored all the same"
    );

    for b in [
        Client::builder().durable_enqueue(0, Duration::from_secs(1)),
        Client::builder().durable_enqueue(1, Duration::ZERO),
        Client::builder()
            .response_timeout(Duration::from_secs(1))
            .durable_enqueue(1, Duration::from_secs(1)),
    ] {
        match b.connect(&single.url()).await {
            Err(Error::InvalidConfig(msg)) => assert!(msg.contains("durable_enqueue"), "{msg}"),
            other => panic!("{:?}", other.map(|_| ())),
        }
    }
}

/// Under durable enqueue a burial waits for the replicas, as a reschedule does (a flow's
/// parent failed by it must not come back waiting after a failover): once `bury` answers, every
/// replica holds the job dead; on a node without replicas it answers the typed
/// `NotReplicated`, and the job is buried all the same.
#[tokio::test]
async fn durable_bury_waits_for_replicas_or_says_it_did_not() {
    let h = RedisHarness::new_sentinel().await;
    let c = h
        .client_with(|b| b.durable_enqueue(2, Duration::from_secs(2)))
        .await
        .unwrap();
    let t = c.topic("durable.bury").unwrap();
    t.enqueue(raw(1))
        .key("p")
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(
        t.bury("p", "child dead").await.unwrap(),
        dq::BuryOutcome::Buried
    );
    let keys = h.partition_keys("durable.bury", 0);
    for r in dq_testkit::shared_sentinel().replicas() {
        // Confirmed by WAIT: already on every replica, no waiting needed.
        assert_eq!(r.cmd::<i64>(&["ZCARD", keys.dead.as_str()]), 1);
        assert_eq!(r.cmd::<i64>(&["ZCARD", keys.scheduled.as_str()]), 0);
    }

    let single = dq_testkit::shared();
    let c = Client::builder()
        .namespace(dq_testkit::namespace("durable.bury"))
        .durable_enqueue(1, Duration::from_millis(50))
        .connect(&single.url())
        .await
        .unwrap();
    let t = c.topic("durable.bury").unwrap();
    // (the enqueue is refused the same way, and stored all the same)
    let _ = t.enqueue(raw(1)).key("lonely").await;
    match t.bury("lonely", "x").await {
        Err(Error::NotReplicated { acked, wanted }) => assert_eq!((acked, wanted), (0, 1)),
        other => panic!("{other:?}"),
    }
    let job = t.job("lonely").await.unwrap().expect("stored");
    assert_eq!(job.state, dq::JobState::Dead, "buried all the same");
}

/// A switchover (`SENTINEL FAILOVER`): the old master keeps running as a replica (the
/// sentinels close its client connections; reconnected there, writes answer `READONLY`). The
/// client and the worker's wake-up listener move to the new master; jobs enqueued after it
/// run, none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_follows_a_switchover_where_the_old_master_answers_readonly() {
    let set = RedisSentinelSet::start();
    let client = Client::builder()
        .namespace(dq_testkit::namespace("switch"))
        .connect(&set.url())
        .await
        .unwrap();
    let handle = Worker::builder(client.clone())
        .topics(["switch"])
        .idle_wait(Duration::from_secs(60))
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    for n in 0..10 {
        enqueue_switch_until_ok(&client, n).await;
    }
    eventually("the first 10 jobs ran", Duration::from_secs(20), || async {
        switched().len() == 10
    })
    .await;
    let old = set.switch_over();
    let new = set.wait_for_failover(old, Duration::from_secs(30));
    let demoted = set.servers().iter().find(|s| s.port() == old).unwrap();
    assert!(demoted.is_running(), "the old master still runs");
    for n in 10..30 {
        enqueue_switch_until_ok(&client, n).await;
    }
    eventually(
        "the 20 jobs enqueued after the switchover ran",
        Duration::from_secs(30),
        || async { switched().len() == 30 },
    )
    .await;
    assert_eq!(switched(), (0..30).collect::<HashSet<u64>>());
    assert_eq!(SWITCH_RUNS.load(std::sync::atomic::Ordering::SeqCst), 30);
    assert_eq!(set.master_port(), Some(new));
    handle.shutdown().await;
}

static SWITCHED: Mutex<Option<HashSet<u64>>> = Mutex::new(None);
static SWITCH_RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn switched() -> HashSet<u64> {
    SWITCHED.lock().unwrap().clone().unwrap_or_default()
}

#[dq::delayed_job(topic = "switch", retry = "none")]
async fn switch_job(n: u64) -> Result<(), JobError> {
    SWITCH_RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    SWITCHED
        .lock()
        .unwrap()
        .get_or_insert_with(HashSet::new)
        .insert(n);
    Ok(())
}

async fn enqueue_switch_until_ok(client: &Client, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(40);
    for tries in 1..=10_000u32 {
        match client.enqueue::<switch_job>(n).key(format!("s{n}")).await {
            Ok(_) => return,
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("enqueue s{n} failed after {tries} tries: {e}"),
        }
    }
}
