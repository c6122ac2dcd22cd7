//! Failover faults through Redis Sentinel: the master is `SIGKILL`ed while producers enqueue,
//! its replicas lagging behind it; the sentinels promote one of them. What did the enqueues
//! answered Ok become?
//!
//! Replication is asynchronous: the master answers an enqueue before its replicas have it. On
//! one machine the replicas trail by microseconds, so a lag is made on purpose, without any
//! timing: the master's `default` user loses `SYNC`/`PSYNC` and its replica links are cut, so
//! the replicas cannot catch up while the master keeps answering enqueues; then the master
//! is killed. Without durable enqueue, the enqueues answered Ok in that window are lost with
//! it (the test prints how many, and asserts there were some: the window is real). With
//! `durable_enqueue(1, …)` none answered Ok is lost: those enqueues answer
//! `Error::NotReplicated` instead. In both, a worker keeps running jobs after the failover,
//! and the producers keep enqueueing, without a restart.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dq::{Client, Error, JobError, Worker};
use dq_testkit::{RedisSentinelSet, eventually};

/// Producers enqueueing at once.
const PRODUCERS: usize = 4;

/// What the producers saw.
#[derive(Default)]
struct Seen {
    /// Keys whose enqueue answered Ok.
    ok: BTreeSet<String>,
    /// Enqueues that answered an error, by kind.
    not_replicated: usize,
    other_errors: usize,
}

impl Seen {
    fn attempts(&self) -> usize {
        self.ok.len() + self.not_replicated + self.other_errors
    }
}

/// Jobs run by the worker of each scenario (the two tests run at once, on topics of their own).
static PLAIN_RAN: AtomicUsize = AtomicUsize::new(0);
static DURABLE_RAN: AtomicUsize = AtomicUsize::new(0);

#[dq::delayed_job(topic = "live.plain", retry = "none")]
async fn live_plain(_n: u64) -> Result<(), JobError> {
    PLAIN_RAN.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[dq::delayed_job(topic = "live.durable", retry = "none")]
async fn live_durable(_n: u64) -> Result<(), JobError> {
    DURABLE_RAN.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// What one run found.
struct Outcome {
    /// Enqueues answered Ok, in all.
    ok: usize,
    /// Of those, how many are not in the store after the failover.
    lost: usize,
    /// Enqueues answered `NotReplicated`.
    not_replicated: usize,
}

/// Runs the scenario; `durable`: with `durable_enqueue(1, 200 ms)`.
async fn scenario(durable: bool) -> Outcome {
    let (live, ran) = if durable {
        ("live.durable", &DURABLE_RAN)
    } else {
        ("live.plain", &PLAIN_RAN)
    };
    let set = RedisSentinelSet::start();
    let mut builder = Client::builder().namespace(dq_testkit::namespace("failover"));
    if durable {
        builder = builder.durable_enqueue(1, Duration::from_millis(200));
    }
    let client = builder.connect(&set.url()).await.unwrap();
    let worker = Worker::builder(client.clone())
        .topics([live])
        .idle_wait(Duration::from_secs(60))
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");

    // Producers: jobs due in an hour (nothing consumes them), so every key answered Ok must
    // still be in the store at the end.
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (client, seen, stopped) = (client.clone(), seen.clone(), stopped.clone());
            tokio::spawn(async move {
                let t = client.topic("stream").unwrap();
                for i in 0..100_000u64 {
                    if *stopped.borrow() {
                        break;
                    }
                    let key = format!("s{p}-{i}");
                    let r = t
                        .enqueue(i.to_le_bytes().to_vec())
                        .key(&key)
                        .delay(Duration::from_secs(3600))
                        .await;
                    let failed = r.is_err();
                    {
                        let mut s = seen.lock().unwrap();
                        match r {
                            Ok(_) => {
                                s.ok.insert(key);
                            }
                            Err(Error::NotReplicated { .. }) => s.not_replicated += 1,
                            Err(_) => s.other_errors += 1,
                        }
                    }
                    if failed {
                        // A failover in progress: do not spin.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            })
        })
        .collect();
    let attempts = || seen.lock().unwrap().attempts();
    let oks = || seen.lock().unwrap().ok.len();
    eventually(
        "100 enqueues answered Ok",
        Duration::from_secs(20),
        || async { oks() >= 100 },
    )
    .await;

    // Make the replicas lag: they may no longer sync, and their links are cut.
    let master = set.master().expect("a master");
    master.cmd::<()>(&["ACL", "SETUSER", "default", "-sync", "-psync"]);
    let cut: i64 = master.cmd(&["CLIENT", "KILL", "TYPE", "replica"]);
    assert!(cut >= 1, "the replicas' links were cut");
    let before = attempts();
    eventually(
        "40 more enqueues answered while the replicas lag",
        Duration::from_secs(20),
        || async { attempts() >= before + 40 },
    )
    .await;

    let old = set.kill_master();
    let new = set.wait_for_failover(old, Duration::from_secs(30));
    assert_ne!(old, new);

    // The producers go on against the new master without a restart.
    let after = oks();
    eventually(
        "20 enqueues answered Ok after the failover",
        Duration::from_secs(40),
        || async { oks() >= after + 20 },
    )
    .await;
    stop.send(true).unwrap();
    for p in producers {
        p.await.unwrap();
    }

    // So does the worker: jobs enqueued now run (its listener blocks on the new master).
    let l = client.topic(live).unwrap();
    for n in 0..5u64 {
        l.enqueue(dq::payload::encode(&n, 1024).unwrap())
            .key(format!("live{n}"))
            .await
            .unwrap();
    }
    eventually(
        "the worker ran the jobs enqueued after the failover",
        Duration::from_secs(30),
        || async { ran.load(Ordering::SeqCst) == 5 },
    )
    .await;
    worker.shutdown().await;

    let seen = std::mem::take(&mut *seen.lock().unwrap());
    let t = client.topic("stream").unwrap();
    let mut lost = 0;
    for key in &seen.ok {
        if t.job(key).await.unwrap().is_none() {
            lost += 1;
        }
    }
    let outcome = Outcome {
        ok: seen.ok.len(),
        lost,
        not_replicated: seen.not_replicated,
    };
    println!(
        "failover (durable_enqueue: {durable}): {} enqueues answered Ok, {} of them lost; \
         {} answered NotReplicated, {} other errors",
        outcome.ok, outcome.lost, outcome.not_replicated, seen.other_errors
    );
    outcome
}

/// Without durable enqueue, the enqueues the old master answered Ok while its replicas lagged
/// are lost with it (printed; there are some, since the lag is made on purpose), and the
/// producers and the worker carry on through the new master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_durable_enqueue_a_failover_loses_what_the_replicas_lacked() {
    let o = scenario(false).await;
    assert!(
        o.lost > 0,
        "the lag window should lose some acknowledged enqueues"
    );
    assert!(o.lost < o.ok);
    assert_eq!(o.not_replicated, 0);
}

/// With `durable_enqueue(1, 200 ms)`, no enqueue answered Ok is lost across the failover:
/// those the replicas could not confirm answered `NotReplicated` instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_durable_enqueue_no_acknowledged_enqueue_is_lost() {
    let o = scenario(true).await;
    assert_eq!(
        o.lost, 0,
        "{} of {} acknowledged enqueues lost",
        o.lost, o.ok
    );
    assert!(
        o.not_replicated > 0,
        "the lagging replicas made some enqueues answer NotReplicated"
    );
}
