//! Redis Cluster faults under load, on real processes: a master SIGKILLed in the middle of a
//! drain (its replica is promoted), and a partition's slot migrated to another master in the
//! middle of a drain (slowly, key by key, so that `TRYAGAIN`, `ASK` and `MOVED` are all hit).
//!
//! Each scenario starts a private 3-master, 3-replica cluster (`dq_testkit::RedisCluster`, with
//! a 1 s `cluster-node-timeout`), a topic of 6 partitions spread over the masters, producers
//! enqueueing one job at a time from this process, and two `fault-worker` processes draining.
//! Neither producers nor workers are restarted. At the end every job whose enqueue answered
//! `Ok` must have run or still be stored — except, after a failover, jobs lost in the
//! asynchronous-replication window (acknowledged by the old master, not yet on its replica),
//! which are counted and printed (`cargo test -p dq-faults --test cluster_faults --
//! --nocapture`). Duplicates are allowed only among runs in flight at the fault.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dq::Client;
use dq_faults::ledger::{self, Kind, now_ms};
use dq_faults::{
    Expected, Fault, FaultPayload, Reconciliation, Snapshot, WORK_TOPIC, WorkJob, WorkerProcess,
    WorkerSpec,
};
use dq_testkit::{ClusterOptions, RedisCluster, RedisServer, eventually, eventually_some};

const BIN: &str = env!("CARGO_BIN_EXE_fault-worker");
/// Partitions of the topic: 6 over 3 masters, so every master holds some.
const PARTITIONS: u16 = 6;
/// Work time of every job.
const JOB_MS: u64 = 20;
/// Pause between two enqueues of one producer.
const PACE: Duration = Duration::from_millis(8);

/// One scenario at a time in this binary: each runs six Redis nodes and two workers.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A running cluster scenario.
struct ClusterScenario {
    name: &'static str,
    cluster: Arc<RedisCluster>,
    ns: String,
    dir: tempfile::TempDir,
    client: Client,
    workers: Vec<WorkerProcess>,
    started: Instant,
}

impl ClusterScenario {
    async fn start(name: &'static str, lease: Duration) -> ClusterScenario {
        let cluster = tokio::task::spawn_blocking(|| {
            RedisCluster::start_with(ClusterOptions {
                node_timeout_ms: 1000,
                ..ClusterOptions::default()
            })
        })
        .await
        .expect("cluster start");
        let cluster = Arc::new(cluster);
        let ns = dq_testkit::namespace("cluster-faults");
        let client = Client::builder()
            .namespace(&ns)
            .partitions(WORK_TOPIC, PARTITIONS)
            .connect(&cluster.url())
            .await
            .unwrap_or_else(|e| panic!("{name}: connect: {e}"));
        client
            .check_topic(WORK_TOPIC)
            .await
            .expect("register topic");
        let mut dir = tempfile::Builder::new()
            .prefix(&format!("dq-faults-{name}-"))
            .tempdir()
            .expect("tempdir");
        if std::env::var_os("DQ_FAULTS_KEEP").is_some() {
            dir.disable_cleanup(true);
            eprintln!("{name}: ledgers and logs kept in {}", dir.path().display());
        }
        let mut spec = WorkerSpec::new(cluster.url(), &ns);
        spec.concurrency = 8;
        spec.lease = lease;
        spec.partitions = Some(PARTITIONS);
        spec.idle_wait = Some(Duration::from_millis(300));
        spec.response_timeout = Some(Duration::from_secs(2));
        let workers: Vec<WorkerProcess> = (1..=2)
            .map(|i| {
                let mut w =
                    WorkerProcess::spawn(Path::new(BIN), &spec, dir.path(), &format!("w{i}"));
                w.wait_ready(dq_faults::READY_TIMEOUT);
                w
            })
            .collect();
        ClusterScenario {
            name,
            cluster,
            ns,
            dir,
            client,
            workers,
            started: Instant::now(),
        }
    }

    /// The slot of partition `p`'s hash tag.
    fn slot_of(&self, p: u16) -> u16 {
        let tag = format!("{{{WORK_TOPIC}#{p}}}");
        self.cluster.cmd::<u16>(&["CLUSTER", "KEYSLOT", &tag])
    }

    /// Partition → (slot, port of its master now).
    async fn placement(&self) -> BTreeMap<u16, (u16, u16)> {
        let cluster = self.cluster.clone();
        let slots: Vec<(u16, u16)> = (0..PARTITIONS).map(|p| (p, self.slot_of(p))).collect();
        tokio::task::spawn_blocking(move || {
            slots
                .into_iter()
                .map(|(p, slot)| {
                    let port = cluster.master_of_slot(slot).map_or(0, RedisServer::port);
                    (p, (slot, port))
                })
                .collect()
        })
        .await
        .expect("placement")
    }

    /// Finished runs in the ledgers so far.
    fn finished(&self) -> usize {
        ledger::read_dir(self.dir.path())
            .0
            .iter()
            .filter(|e| e.kind == Kind::Finish)
            .count()
    }

    /// Waits until `n` runs have finished.
    async fn wait_finished(&self, n: usize, what: &str) {
        eventually(what, Duration::from_secs(40), || {
            let done = self.finished() >= n;
            async move { done }
        })
        .await;
    }

    /// Waits until the topic has nothing waiting or running.
    async fn wait_settled(&self) {
        let topic = self.client.topic(WORK_TOPIC).expect("topic");
        let last = Arc::new(std::sync::Mutex::new(String::new()));
        let deadline = Instant::now() + Duration::from_secs(45);
        loop {
            match topic.stats().await {
                Ok(s) if s.scheduled + s.ready + s.active + s.retry == 0 => return,
                Ok(s) => *last.lock().unwrap() = format!("{s:?}"),
                Err(e) => *last.lock().unwrap() = format!("stats failed: {e}"),
            }
            if Instant::now() >= deadline {
                panic!(
                    "{}: not settled in time; last stats {}\n{}",
                    self.name,
                    last.lock().unwrap(),
                    self.logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn stop_workers(&mut self) {
        for w in &mut self.workers {
            let status = w.terminate(Duration::from_secs(20));
            assert!(
                status.success(),
                "worker {} exited with {status:?}; log:\n{}",
                w.name(),
                w.log_tail(20)
            );
        }
    }

    fn logs(&self) -> String {
        self.workers
            .iter()
            .map(|w| format!("--- {} (pid {}) ---\n{}", w.name(), w.pid(), w.log_tail(15)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    async fn reconcile(&self, expected: &Expected, faults: &[Fault]) -> Reconciliation {
        let options = dq::store::RedisOptions {
            namespace: self.ns.clone(),
            ..dq::store::RedisOptions::default()
        };
        let store = dq::store::RedisStore::connect(&self.cluster.url(), options)
            .await
            .unwrap_or_else(|e| panic!("{}: connecting to read the store: {e}", self.name));
        let snapshot = Snapshot::read(&store)
            .await
            .unwrap_or_else(|e| panic!("{}: reading the store: {e}", self.name));
        let (entries, torn) = ledger::read_dir(self.dir.path());
        Reconciliation::compute(expected, &snapshot, &entries, torn, faults)
    }
}

/// Producers enqueueing one job at a time, keys `{prefix}-{n}`, until stopped.
struct Producers {
    stop: Arc<AtomicBool>,
    /// Enqueues answered `Ok` so far (all producers).
    ok: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<Expected>>,
}

impl Producers {
    fn start(client: &Client, prefixes: &[&str]) -> Producers {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicU64::new(0));
        let tasks = prefixes
            .iter()
            .map(|prefix| {
                let (client, stop, ok, prefix) =
                    (client.clone(), stop.clone(), ok.clone(), prefix.to_string());
                tokio::spawn(async move {
                    let mut expected = Expected::default();
                    // Bounded: stopped by the test long before this.
                    for n in 0..200_000u64 {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let key = format!("{prefix}-{n}");
                        let started = now_ms();
                        let result = client
                            .enqueue::<WorkJob>(FaultPayload::new(n, JOB_MS))
                            .key(&key)
                            .await;
                        expected.call_started.insert(key.clone(), started);
                        match result {
                            Ok(_) => {
                                expected.ok.insert(key, now_ms());
                                ok.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => {
                                eprintln!("enqueue {key} failed: {e}");
                                expected.ambiguous.insert(key);
                            }
                        }
                        tokio::time::sleep(PACE).await;
                    }
                    expected
                })
            })
            .collect();
        Producers { stop, ok, tasks }
    }

    fn ok(&self) -> u64 {
        self.ok.load(Ordering::Relaxed)
    }

    /// Waits until `more` further enqueues have been answered `Ok`.
    async fn wait_more(&self, more: u64, what: &str) {
        let target = self.ok() + more;
        eventually(what, Duration::from_secs(40), || {
            let done = self.ok() >= target;
            async move { done }
        })
        .await;
    }

    async fn stop(self) -> Expected {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Expected::default();
        for t in self.tasks {
            let e = t.await.expect("producer task");
            all.ok.extend(e.ok);
            all.ambiguous.extend(e.ambiguous);
            all.call_started.extend(e.call_started);
        }
        all
    }
}

/// A master holding some of the topic's partitions is SIGKILLed while producers enqueue and
/// workers drain. Its replica is promoted; producers and workers carry on without a restart.
/// Every job acknowledged by enqueue ran or is still stored, except jobs lost in the
/// asynchronous-replication window (acknowledged before the promotion) — counted and printed;
/// duplicates only among runs in flight at the failover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_killed_mid_drain_replica_takes_over() {
    let _serial = SERIAL.lock().await;
    let mut s = ClusterScenario::start("cluster-master-kill", Duration::from_secs(1)).await;
    let placement = s.placement().await;
    // The victim: the master holding partition 0 (and maybe others).
    let (victim_slot, victim_port) = placement[&0];
    let victim_parts: Vec<u16> = placement
        .iter()
        .filter(|(_, (_, port))| *port == victim_port)
        .map(|(p, _)| *p)
        .collect();
    let masters_used: std::collections::BTreeSet<u16> =
        placement.values().map(|(_, port)| *port).collect();
    println!(
        "SCENARIO {}: partitions → (slot, master) {placement:?}; killing 127.0.0.1:{victim_port} \
         (partitions {victim_parts:?})",
        s.name
    );
    assert!(
        masters_used.len() >= 2,
        "partitions must spread: {placement:?}"
    );

    let producers = Producers::start(&s.client, &["a", "b"]);
    s.wait_finished(300, "300 jobs ran before the fault").await;

    let victim = s
        .cluster
        .nodes()
        .iter()
        .position(|n| n.port() == victim_port)
        .expect("the victim is one of the cluster's nodes");
    let kill_ms = now_ms();
    let ok_at_kill = producers.ok();
    {
        let cluster = s.cluster.clone();
        tokio::task::spawn_blocking(move || cluster.nodes()[victim].kill())
            .await
            .expect("kill");
    }
    // Its replica is promoted: another node serves the slot and the cluster says ok again.
    let new_port = eventually_some(
        "a replica takes over the killed master's slot",
        Duration::from_secs(30),
        || {
            let cluster = s.cluster.clone();
            async move {
                tokio::task::spawn_blocking(move || {
                    let port = cluster.master_of_slot(victim_slot)?.port();
                    let ok = cluster.nodes().iter().filter(|n| n.is_running()).all(|n| {
                        n.try_cmd::<String>(&["CLUSTER", "INFO"])
                            .is_ok_and(|i| i.contains("cluster_state:ok"))
                    });
                    (port != victim_port && ok).then_some(port)
                })
                .await
                .ok()
                .flatten()
            }
        },
    )
    .await;
    let promoted_ms = now_ms();
    println!(
        "SCENARIO {}: 127.0.0.1:{new_port} promoted {} ms after the kill",
        s.name,
        promoted_ms - kill_ms
    );
    let fault = Fault {
        what: format!("SIGKILL master 127.0.0.1:{victim_port}, failover to {new_port}"),
        pid: None,
        start_ms: kill_ms,
        end_ms: promoted_ms,
    };

    // Producers and workers carry on: more enqueues are acknowledged and run, on every partition.
    producers
        .wait_more(600, "600 more enqueues after the failover")
        .await;
    let expected = producers.stop().await;
    s.wait_settled().await;
    s.stop_workers();
    let faults = [fault];
    let r = s.reconcile(&expected, &faults).await;

    // Jobs lost to the replication window: acknowledged before the promotion, never ran, gone.
    let late_losses: Vec<&String> = r
        .lost
        .iter()
        .filter(|k| expected.ok.get(*k).is_none_or(|ok| *ok > promoted_ms))
        .collect();
    let after_failover: Vec<&String> = expected
        .ok
        .iter()
        .filter(|(_, ok)| **ok > promoted_ms)
        .map(|(k, _)| k)
        .collect();
    println!(
        "SCENARIO {}: {} faults=1 elapsed={:.1}s",
        s.name,
        r.summary(),
        s.started.elapsed().as_secs_f64()
    );
    println!(
        "SCENARIO {}: acknowledged before the kill {ok_at_kill}, after the promotion {}; \
         lost in the replication window {} {:?}; duplicates {} (all in flight at the failover: {})",
        s.name,
        after_failover.len(),
        r.lost.len(),
        r.lost.iter().take(10).collect::<Vec<_>>(),
        r.duplicates,
        r.unexplained.is_empty()
    );
    let problems: Vec<String> = r
        .problems()
        .into_iter()
        .filter(|p| !p.contains(" lost: "))
        .collect();
    assert!(
        problems.is_empty() && late_losses.is_empty() && r.dead.is_empty(),
        "{}: {}\nproblems:\n  {}\nlost after the promotion: {late_losses:?}\ndead: {:?}\n{}",
        s.name,
        r.summary(),
        problems.join("\n  "),
        r.dead,
        s.logs()
    );
    assert!(
        after_failover.len() >= 600,
        "producers carried on after the failover"
    );
}
