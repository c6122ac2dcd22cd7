//! Group commit of concurrent single enqueues (issue 15), on real Redis servers: ordering and
//! coalescing, per-caller errors, a failing batch, a queued caller cancelled, and a batch
//! whose reply is lost (through the TCP fault proxy).
//!
//! Each test that counts script calls (`INFO commandstats`) has a private `redis-server`, so
//! that no other test's calls are counted.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use dq::store::redis::layout::PartitionKeys;
use dq::store::{Queue, unix_ms};
use dq::{Client, EnqueueOutcome, Error, GroupCommit, JobState, Page, Topic, TopicClient};
use dq_testkit::{FaultProxy, RedisServer, eventually, keys_in_namespace};
use tokio::sync::Barrier;

const TOPIC: &str = "gc.jobs";
const HOUR: Duration = Duration::from_secs(3600);
/// Bound of every wait for a condition.
const WAIT: Duration = Duration::from_secs(20);
/// The proxied clients' response timeout: long, so that only a cut ends a held try.
const TIMEOUT: Duration = Duration::from_secs(30);
/// A reply delay that outlasts every test: the reply is lost until the fault is lifted.
const HELD: Duration = Duration::from_secs(3600);

/// `FCALL` calls the server has run so far (every dq script call is one).
fn script_calls(server: &RedisServer) -> u64 {
    let info: String = server.cmd(&["INFO", "commandstats"]);
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_fcall:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().expect("a call count"))
}

/// A client of `ns` on `url`, configured by `configure`, that has checked the topic and run
/// the enqueue script once (so that later calls are plain `FCALL`s of the call under test).
async fn client_on(
    url: &str,
    ns: &str,
    configure: impl FnOnce(dq::ClientBuilder) -> dq::ClientBuilder,
) -> (Client, TopicClient) {
    let client = configure(Client::builder().namespace(ns).response_timeout(TIMEOUT))
        .connect(url)
        .await
        .expect("connect");
    client.check_topic(TOPIC).await.expect("topic check");
    let warm_up = client
        .topic("gc.warm-up")
        .unwrap()
        .enqueue(vec![0])
        .delay(HOUR)
        .await;
    // (Stored on the master either way: with durable enqueue and no replica, not confirmed.)
    assert!(
        matches!(warm_up, Ok(_) | Err(Error::NotReplicated { .. })),
        "warm-up enqueue: {warm_up:?}"
    );
    let topic = client.topic(TOPIC).unwrap();
    (client, topic)
}

/// A millisecond a day ahead.
fn far() -> SystemTime {
    let ms = unix_ms(SystemTime::now() + 24 * HOUR);
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
}

/// Every scheduled key of the topic, in the store's order (due time, then same-ms order).
async fn scheduled_keys(t: &TopicClient) -> Vec<String> {
    let mut keys = Vec::new();
    let mut page = Page::first(dq::MAX_PAGE);
    for _ in 0..1000 {
        let got = t.list(JobState::Scheduled, page).await.unwrap();
        keys.extend(got.jobs.iter().map(|j| j.key.as_str().to_owned()));
        let Some(next) = got.next else { break };
        page = Page::after(next, dq::MAX_PAGE);
    }
    keys
}

/// `tasks` tasks, started together, each enqueueing `each` jobs one after the other (key
/// `t<task>-<n>`, all due at `at`); returns the script calls the burst took.
async fn burst(server: &RedisServer, t: &TopicClient, tasks: usize, each: usize) -> u64 {
    let at = far();
    let start = Arc::new(Barrier::new(tasks));
    let before = script_calls(server);
    let mut handles = Vec::new();
    for i in 0..tasks {
        let (t, start) = (t.clone(), start.clone());
        handles.push(tokio::spawn(async move {
            start.wait().await;
            for n in 0..each {
                let key = format!("t{i:02}-{n:03}");
                let e = t.enqueue(vec![0x90]).key(&key).at(at).await.unwrap();
                assert_eq!(e.outcome, EnqueueOutcome::Created, "{key}");
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    script_calls(server) - before
}

/// 64 tasks enqueueing 20 jobs each, all due at one millisecond: every job is created once,
/// each task's jobs keep its order, and the 1,280 jobs took far fewer script calls than jobs
/// (the same burst without group commit takes one call per job).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_enqueues_are_coalesced_and_keep_their_order() {
    const TASKS: usize = 64;
    const EACH: usize = 20;
    let jobs = (TASKS * EACH) as u64;
    let server = RedisServer::start();

    let (_c, t) = client_on(&server.url(), &dq_testkit::namespace("gc-on"), |b| b).await;
    let calls = burst(&server, &t, TASKS, EACH).await;
    eprintln!("group commit on: {jobs} jobs from {TASKS} tasks in {calls} script calls");
    assert!(
        calls >= 1 && calls * 4 <= jobs,
        "{calls} script calls for {jobs} jobs: not coalesced"
    );
    let keys = scheduled_keys(&t).await;
    assert_eq!(keys.len() as u64, jobs, "each job created once");
    for i in 0..TASKS {
        let mine: Vec<&String> = keys
            .iter()
            .filter(|k| k.starts_with(&format!("t{i:02}-")))
            .collect();
        assert_eq!(mine.len(), EACH);
        assert!(
            mine.windows(2).all(|w| w[0] < w[1]),
            "task {i}'s jobs are out of order: {mine:?}"
        );
    }

    // The measure itself: without group commit, one call per job.
    let (_c, off) = client_on(&server.url(), &dq_testkit::namespace("gc-off"), |b| {
        b.no_group_commit()
    })
    .await;
    let calls = burst(&server, &off, TASKS, EACH).await;
    eprintln!("group commit off: {jobs} jobs from {TASKS} tasks in {calls} script calls");
    assert_eq!(calls, jobs);
}

/// In one burst: a bad key and a payload over the limit are refused on their own (typed,
/// before joining anyone); a key that exists answers `Exists` and a key named by two callers
/// is created once, while every other caller of the same batch gets `Created`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_caller_gets_its_own_outcome_and_error() {
    let server = RedisServer::start();
    let ns = dq_testkit::namespace("gc-errors");
    // The 13 callers that reach the lane fill one batch; the linger only bounds the wait.
    let gc = GroupCommit {
        max_batch: 13,
        linger: Duration::from_secs(1),
    };
    let (_c, t) = client_on(&server.url(), &ns, |b| b.max_payload(64).group_commit(gc)).await;
    let existing = t
        .enqueue(vec![1])
        .key("existing")
        .delay(HOUR)
        .await
        .unwrap();
    assert_eq!(existing.outcome, EnqueueOutcome::Created);

    let mut calls: Vec<(&str, Vec<u8>)> = (0..10).map(|_| ("", vec![2])).collect();
    calls.extend([
        ("existing", vec![3]),
        ("twice", vec![4]),
        ("twice", vec![5]),
        ("bad key", vec![6]),
        ("too-big", vec![7; 100]),
    ]);
    let start = Arc::new(Barrier::new(calls.len()));
    let before = script_calls(&server);
    let mut handles = Vec::new();
    for (i, (key, payload)) in calls.into_iter().enumerate() {
        let (t, start) = (t.clone(), start.clone());
        let key = if key.is_empty() {
            format!("new-{i}")
        } else {
            key.to_owned()
        };
        handles.push(tokio::spawn(async move {
            start.wait().await;
            let outcome = t.enqueue(payload).key(&key).delay(HOUR).await;
            (key, outcome)
        }));
    }
    let mut twice = Vec::new();
    for h in handles {
        let (key, outcome) = h.await.unwrap();
        match key.as_str() {
            "bad key" => assert!(
                matches!(outcome, Err(Error::InvalidKey { .. })),
                "{outcome:?}"
            ),
            "too-big" => assert!(
                matches!(
                    outcome,
                    Err(Error::PayloadTooLarge {
                        size: 100,
                        limit: 64
                    })
                ),
                "{outcome:?}"
            ),
            "existing" => assert_eq!(
                outcome.unwrap().outcome,
                EnqueueOutcome::Exists(JobState::Scheduled)
            ),
            "twice" => twice.push(outcome.unwrap().outcome),
            _ => assert_eq!(outcome.unwrap().outcome, EnqueueOutcome::Created, "{key}"),
        }
    }
    twice.sort_by_key(|o| format!("{o:?}"));
    assert_eq!(
        twice,
        [
            EnqueueOutcome::Created,
            EnqueueOutcome::Exists(JobState::Scheduled)
        ]
    );
    let calls = script_calls(&server) - before;
    assert!(
        calls < 13,
        "{calls} calls for 13 callers: they were not batched"
    );
    // 1 existing + 10 new + 1 twice.
    assert_eq!(t.stats().await.unwrap().scheduled, 12);
    assert!(t.job("too-big").await.unwrap().is_none());
    assert_eq!(t.job("existing").await.unwrap().unwrap().payload, [1]);
}

/// A batch whose call fails (the partition's `jobs` key damaged: `WRONGTYPE`) gives every
/// caller of the batch the error, and writes nothing; once the key is repaired, the same
/// calls succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_batch_fails_every_caller_and_writes_nothing() {
    const CALLERS: usize = 8;
    let server = RedisServer::start();
    let ns = dq_testkit::namespace("gc-fail");
    let gc = GroupCommit {
        max_batch: CALLERS,
        linger: Duration::from_secs(1),
    };
    let (c, t) = client_on(&server.url(), &ns, |b| b.group_commit(gc)).await;
    let keys = PartitionKeys::new(&ns, &Queue::new(Topic::new(TOPIC).unwrap(), 0));
    let _: () = server.cmd(&["SET", &keys.jobs, "damaged"]);

    let run = || async {
        let start = Arc::new(Barrier::new(CALLERS));
        let mut handles = Vec::new();
        for i in 0..CALLERS {
            let (t, start) = (t.clone(), start.clone());
            handles.push(tokio::spawn(async move {
                start.wait().await;
                t.enqueue(vec![0x90])
                    .key(format!("job-{i}"))
                    .delay(HOUR)
                    .await
            }));
        }
        let mut out = Vec::new();
        for h in handles {
            out.push(h.await.unwrap());
        }
        out
    };
    let before = script_calls(&server);
    for outcome in run().await {
        match outcome {
            Err(Error::Redis(e)) => {
                assert!(e.to_string().contains("WRONGTYPE"), "{e}");
            }
            other => panic!("every caller gets the batch's error: {other:?}"),
        }
    }
    let calls = script_calls(&server) - before;
    assert!(calls < CALLERS as u64, "{calls} calls: not batched");
    let partition: Vec<String> = keys_in_namespace(&server, &ns)
        .into_iter()
        .filter(|k| k.contains(&format!("{{{TOPIC}#0}}")))
        .collect();
    assert_eq!(
        partition,
        std::slice::from_ref(&keys.jobs),
        "nothing was written"
    );
    assert_eq!(c.enqueues_waiting(), 0);

    let _: () = server.cmd(&["DEL", &keys.jobs]);
    for outcome in run().await {
        assert_eq!(outcome.unwrap().outcome, EnqueueOutcome::Created);
    }
    assert_eq!(t.stats().await.unwrap().scheduled, CALLERS as u64);
}

/// With durable enqueue on a server without replicas, a batch's `WAIT` confirms nothing:
/// every caller of the batch gets `NotReplicated`, the variant it matches on (the jobs are
/// stored on the master, as the error says they may be).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_not_replicated_is_not_replicated_for_every_caller() {
    const CALLERS: usize = 4;
    let server = RedisServer::start();
    let ns = dq_testkit::namespace("gc-durable");
    let gc = GroupCommit {
        max_batch: CALLERS,
        linger: Duration::from_secs(1),
    };
    let (_c, t) = client_on(&server.url(), &ns, |b| {
        b.group_commit(gc)
            .durable_enqueue(1, Duration::from_millis(100))
    })
    .await;
    let start = Arc::new(Barrier::new(CALLERS));
    let before = script_calls(&server);
    let mut handles = Vec::new();
    for i in 0..CALLERS {
        let (t, start) = (t.clone(), start.clone());
        handles.push(tokio::spawn(async move {
            start.wait().await;
            t.enqueue(vec![0x90]).key(format!("d{i}")).delay(HOUR).await
        }));
    }
    for h in handles {
        let outcome = h.await.unwrap();
        assert!(
            matches!(
                outcome,
                Err(Error::NotReplicated {
                    acked: 0,
                    wanted: 1
                })
            ),
            "{outcome:?}"
        );
    }
    let calls = script_calls(&server) - before;
    assert!(calls < CALLERS as u64, "{calls} calls: not batched");
}

/// A proxied client and a direct one (for looking) on a private server.
async fn proxied(
    configure: impl FnOnce(dq::ClientBuilder) -> dq::ClientBuilder,
) -> (RedisServer, FaultProxy, String, Client, TopicClient) {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let ns = dq_testkit::namespace("gc-proxy");
    let (client, _) = client_on(&proxy.url(), &ns, configure).await;
    let (direct, _) = client_on(&server.url(), &ns, |b| b).await;
    let look = direct.topic(TOPIC).unwrap();
    (server, proxy, ns, client, look)
}

type Caller = tokio::task::JoinHandle<dq::Result<dq::Enqueued>>;

/// Holds the replies, starts a leader (key `lead`) and waits until Redis applied its call,
/// then queues `n` callers (keys `w0`…) behind it and waits until all are queued.
async fn hold_a_leader_and_queue(
    proxy: &FaultProxy,
    client: &Client,
    t: &TopicClient,
    look: &TopicClient,
    n: usize,
) -> (Caller, Vec<Caller>) {
    proxy.set_reply_delay(HELD);
    let lead = {
        let t = t.clone();
        tokio::spawn(async move { t.enqueue(vec![0x90]).key("lead").delay(HOUR).await })
    };
    eventually("Redis applied the leader's call", WAIT, || async {
        look.job("lead").await.unwrap().is_some()
    })
    .await;
    let mut waiting = Vec::new();
    for i in 0..n {
        let t = t.clone();
        waiting.push(tokio::spawn(async move {
            t.enqueue(vec![0x90]).key(format!("w{i}")).delay(HOUR).await
        }));
    }
    eventually(&format!("{n} callers queued"), WAIT, || async {
        client.enqueues_waiting() == n
    })
    .await;
    (lead, waiting)
}

/// Ends a held-reply fault: replies flow again, and the connection holding one is closed
/// (its call is retried with the same call id).
fn lift(proxy: &FaultProxy) {
    proxy.set_reply_delay(Duration::ZERO);
    proxy.cut();
}

/// While a call is in flight (its reply held), five callers queue; one of them is cancelled
/// (its task aborted). After the fault is lifted, the four others are sent and created once
/// each, the cancelled one's job is never sent, and the lane keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_waiting_caller_is_not_sent() {
    let (_server, proxy, _ns, client, look) = proxied(|b| b).await;
    let t = client.topic(TOPIC).unwrap();
    let (lead, mut waiting) = hold_a_leader_and_queue(&proxy, &client, &t, &look, 5).await;
    let cancelled = waiting.remove(2);
    cancelled.abort();
    assert!(cancelled.await.unwrap_err().is_cancelled());

    lift(&proxy);
    assert_eq!(
        lead.await.unwrap().unwrap().outcome,
        EnqueueOutcome::Created
    );
    for w in waiting {
        assert_eq!(w.await.unwrap().unwrap().outcome, EnqueueOutcome::Created);
    }
    assert!(
        look.job("w2").await.unwrap().is_none(),
        "the cancelled caller's job was sent"
    );
    for key in ["lead", "w0", "w1", "w3", "w4"] {
        assert!(look.job(key).await.unwrap().is_some(), "{key}");
    }
    assert_eq!(look.stats().await.unwrap().scheduled, 5);
    assert_eq!(client.enqueues_waiting(), 0);

    // The lane keeps working.
    let after = t
        .enqueue(vec![0x90])
        .key("after")
        .delay(HOUR)
        .await
        .unwrap();
    assert_eq!(after.outcome, EnqueueOutcome::Created);
}

/// The leader is cancelled (its task aborted) while its call is in flight and three callers
/// are queued behind it: the lane is handed over, and the three are sent and created all
/// the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_leader_hands_its_lane_over() {
    let (_server, proxy, _ns, client, look) = proxied(|b| b).await;
    let t = client.topic(TOPIC).unwrap();
    let (lead, waiting) = hold_a_leader_and_queue(&proxy, &client, &t, &look, 3).await;
    lead.abort();
    assert!(lead.await.unwrap_err().is_cancelled());
    eventually("the queued batch was sent", WAIT, || async {
        look.job("w2").await.unwrap().is_some()
    })
    .await;

    lift(&proxy);
    for w in waiting {
        assert_eq!(w.await.unwrap().unwrap().outcome, EnqueueOutcome::Created);
    }
    assert_eq!(look.stats().await.unwrap().scheduled, 4);
    assert_eq!(client.enqueues_waiting(), 0);
}

/// A batch of six callers is applied by Redis and its reply is lost (held, then the
/// connection cut): the batch is retried with its call id, finds its receipt, and every
/// caller gets `Created`; each job exists once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_reply_is_lost_finds_its_receipt() {
    const CALLERS: usize = 6;
    let gc = GroupCommit {
        max_batch: CALLERS,
        linger: Duration::from_secs(1),
    };
    let (_server, proxy, _ns, client, look) = proxied(|b| b.group_commit(gc)).await;
    let t = client.topic(TOPIC).unwrap();
    proxy.set_reply_delay(HELD);
    let start = Arc::new(Barrier::new(CALLERS));
    let mut handles = Vec::new();
    for i in 0..CALLERS {
        let (t, start) = (t.clone(), start.clone());
        handles.push(tokio::spawn(async move {
            start.wait().await;
            t.enqueue(vec![0x90]).key(format!("b{i}")).delay(HOUR).await
        }));
    }
    let stored = || async {
        let mut n = 0;
        for i in 0..CALLERS {
            n += usize::from(look.job(&format!("b{i}")).await.unwrap().is_some());
        }
        n
    };
    eventually("Redis applied the batch", WAIT, || async {
        stored().await > 0
    })
    .await;
    let applied = stored().await;
    assert!(
        applied >= 2,
        "the held call carried {applied} job(s), not a batch"
    );

    lift(&proxy);
    for h in handles {
        assert_eq!(h.await.unwrap().unwrap().outcome, EnqueueOutcome::Created);
    }
    let stats = look.stats().await.unwrap();
    assert_eq!((stats.scheduled, stats.enqueued), (6, 6), "{stats:?}");
}

/// Settings that cannot work are refused when the client is built.
#[test]
fn bad_settings_are_refused_at_build() {
    let build = |gc: GroupCommit| {
        Client::builder()
            .group_commit(gc)
            .build_with_store(Arc::new(dq::store::MemoryStore::new()))
    };
    let zero = build(GroupCommit {
        max_batch: 0,
        ..GroupCommit::default()
    });
    assert!(matches!(zero, Err(Error::InvalidConfig(_))), "{zero:?}");
    let long = build(GroupCommit {
        linger: dq::MAX_GROUP_LINGER + Duration::from_millis(1),
        ..GroupCommit::default()
    });
    assert!(matches!(long, Err(Error::InvalidConfig(_))), "{long:?}");
    assert!(
        build(GroupCommit {
            max_batch: 1,
            linger: dq::MAX_GROUP_LINGER,
        })
        .is_ok()
    );
    let default = Client::builder().build_with_store(Arc::new(dq::store::MemoryStore::new()));
    assert_eq!(
        default.unwrap().config().group_commit,
        Some(GroupCommit {
            max_batch: dq::DEFAULT_GROUP_BATCH,
            linger: Duration::ZERO
        })
    );
}

/// Callers on a runtime that shuts down (their tasks dropped mid-call and while queued) free
/// their lane: the client, used from another runtime, enqueues to the same partition at once.
#[test]
fn a_runtime_shutting_down_frees_its_lanes() {
    let main = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (_server, proxy, _ns, client, look) = main.block_on(proxied(|b| b));
    let t = client.topic(TOPIC).unwrap();
    proxy.set_reply_delay(HELD);
    let other = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let spawn = |key: &'static str| {
        let t = t.clone();
        other.spawn(async move { t.enqueue(vec![0x90]).key(key).delay(HOUR).await })
    };
    let _lead = spawn("lead");
    main.block_on(eventually(
        "Redis applied the leader's call",
        WAIT,
        || async { look.job("lead").await.unwrap().is_some() },
    ));
    let _waiting = [spawn("w0"), spawn("w1"), spawn("w2")];
    main.block_on(eventually("three callers queued", WAIT, || async {
        client.enqueues_waiting() == 3
    }));
    other.shutdown_timeout(WAIT);
    assert_eq!(client.enqueues_waiting(), 0, "the lane was freed");

    lift(&proxy);
    let after = main
        .block_on(async {
            tokio::time::timeout(WAIT, t.enqueue(vec![0x90]).key("after").delay(HOUR)).await
        })
        .expect("the partition's lane is free")
        .unwrap();
    assert_eq!(after.outcome, EnqueueOutcome::Created);
}
