//! Batches under faults on a Redis Cluster (issue 24's "done when"), on real processes: a
//! batch of 10,000 members over 6 partitions of a 3-master, 3-replica cluster, drained by three
//! `fault-worker` processes that are SIGKILLed and restarted one after another every few
//! seconds, while the master holding the batch's hash (and some member partitions, and the
//! callback's partition) is SIGKILLed mid-batch and its replica takes over.
//!
//! Members end three ways, by their payload id (`dq_faults::member_fate`): most succeed,
//! one in ten fails its first attempt and succeeds on a retry, one in ten fails permanently
//! (dead). The callback (`fault.callback`) records each of its runs: a ledger start and finish,
//! and in a `.callbacks` file what it read — the batch's counts and its own job's `created_ms`.
//!
//! What "the callback ran exactly once" means here, precisely: the callback **job** is
//! enqueued once — every recorded run reads the same `created_ms` for the key `batch:<id>` (a
//! second enqueue would be a second job, created later) — and it has one finished run, or more
//! only where delivery is at least once: a run in flight when a worker was SIGKILLed or the
//! master failed over (the same rule as every fault test: `dq_faults::check`). The batch's
//! final counts are what the members' handlers did: succeeded + dead = 10,000, dead = the
//! members made to die, nothing else; each member's state in the batch is its fate; the
//! callback read exactly those counts, and started after every succeeding member had finished
//! a run. Every member ran or is dead (nothing lost or stuck), and the store's invariants hold.
//!
//! **Durable mode.** A failover loses the writes the old master had not yet sent to its
//! replica; for a batch the dangerous one is an `apply` whose notes the relay then deleted
//! (ARCHITECTURE.md §16, "Failover"). So producer and workers run with
//! `durable_enqueue(1, 500 ms)`: each enqueue (members, the callback) and each batch apply
//! waits for a replica, and notes are deleted only after their apply was replicated. The
//! promoted replica has no replica of its own until the killed node is restarted (it rejoins
//! as the new master's replica and syncs); until then applies on that master answer
//! `NotReplicated` and their notes wait — the test restarts the node, as an operator would.
//! Without durable mode the test would have to allow an apply lost in the window, as
//! `cluster_faults::master_killed_mid_drain_replica_takes_over` allows lost enqueues.
//!
//! `cargo test -p dq-faults --test batch_faults -- --nocapture` prints the figures
//! (`DQ_FAULTS_KEEP=1` keeps the ledgers and logs).
//!
//! **The flow** (`a_depth_3_flow_survives_…`), on the same [`Harness`]: a depth-3 flow (a top
//! parent ← 3 mid parents ← 9 low parents ← 2,740 leaves, a tenth of them dying for good) under
//! the same worker kills, the master holding the top parent's partition, the top's children
//! batch and three low batches SIGKILLed mid-flow. The parents (`fault.parent`) record what
//! they read of their children's batch as the callback does; each is one job, released and
//! run only after its children ended, having read their final counts.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dq::{BatchStatus, Client, JobSpec, MemberState};
use dq_faults::ledger::{self, Kind, now_ms};
use dq_faults::{
    CALLBACK_TOPIC, CallbackJob, Expected, Fate, Fault, FaultPayload, MEMBER_TOPIC, MemberJob,
    PARENT_TOPIC, ParentJob, Reconciliation, Snapshot, WorkerProcess, WorkerSpec, member_fate,
};
use dq_testkit::{ClusterOptions, RedisCluster, RedisServer, eventually, eventually_some};

const BIN: &str = env!("CARGO_BIN_EXE_fault-worker");
/// Partitions of the member topic (and of the callback and parent topics): 6 over 3 masters.
const PARTITIONS: u16 = 6;
/// Members of the batch.
const MEMBERS: u64 = 10_000;
/// Members added per `add` call.
const ADD_CHUNK: usize = 500;
/// Work time of a member that succeeds. With 3 workers × 8 slots the drain lasts at least
/// `MEMBERS × MEMBER_MS / 24` (≈ 17 s): long enough for several worker kills and a failover
/// in the middle, short enough for CI.
const MEMBER_MS: u64 = 40;
/// Worker processes (each runs every topic).
const WORKERS: usize = 3;
/// Slots per topic per worker.
const CONCURRENCY: usize = 8;
/// The workers' lease: a killed worker's jobs run again after it.
const LEASE: Duration = Duration::from_secs(2);
/// One worker is SIGKILLed (and restarted at once) this often.
const KILL_EVERY: Duration = Duration::from_millis(2500);
/// `durable_enqueue` of the producer and the workers: one replica, waited for this long.
const DURABLE: (usize, Duration) = (1, Duration::from_millis(500));
/// The master is killed once this many members have ended in the batch.
const KILL_MASTER_AFTER: u64 = 2_500;
/// Generous deadlines for a loaded 2-core machine.
const DRAIN_DEADLINE: Duration = Duration::from_secs(240);
const FAILOVER_DEADLINE: Duration = Duration::from_secs(60);

/// A cluster, a namespace with the member, callback and parent topics registered, a durable client,
/// a directory for ledgers and logs.
struct Harness {
    name: &'static str,
    cluster: Arc<RedisCluster>,
    ns: String,
    dir: tempfile::TempDir,
    client: Client,
    spec: WorkerSpec,
    started: Instant,
    /// Held for the harness's life, so that the tests of this file run one at a time (a
    /// cluster and three workers each: two at once on 2 cores starve leases); declared last,
    /// released after the cluster is gone.
    _serial: tokio::sync::OwnedMutexGuard<()>,
}

/// One [`Harness`] at a time in this binary.
static SERIAL: std::sync::LazyLock<Arc<tokio::sync::Mutex<()>>> =
    std::sync::LazyLock::new(Default::default);

impl Harness {
    async fn start(name: &'static str) -> Harness {
        let serial = SERIAL.clone().lock_owned().await;
        let cluster = tokio::task::spawn_blocking(|| {
            RedisCluster::start_with(ClusterOptions {
                node_timeout_ms: 1000,
                ..ClusterOptions::default()
            })
        })
        .await
        .expect("cluster start");
        let cluster = Arc::new(cluster);
        let ns = dq_testkit::namespace("batch-faults");
        let client = Client::builder()
            .namespace(&ns)
            .partitions(MEMBER_TOPIC, PARTITIONS)
            .partitions(CALLBACK_TOPIC, PARTITIONS)
            .partitions(PARENT_TOPIC, PARTITIONS)
            .durable_enqueue(DURABLE.0, DURABLE.1)
            .connect(&cluster.url())
            .await
            .unwrap_or_else(|e| panic!("{name}: connect: {e}"));
        for topic in [MEMBER_TOPIC, CALLBACK_TOPIC, PARENT_TOPIC] {
            client.check_topic(topic).await.expect("register topic");
        }
        let mut dir = tempfile::Builder::new()
            .prefix(&format!("dq-faults-{name}-"))
            .tempdir()
            .expect("tempdir");
        if std::env::var_os("DQ_FAULTS_KEEP").is_some() {
            dir.disable_cleanup(true);
            eprintln!("{name}: ledgers and logs kept in {}", dir.path().display());
        }
        let mut spec = WorkerSpec::new(cluster.url(), &ns);
        spec.topics = vec![
            MEMBER_TOPIC.into(),
            CALLBACK_TOPIC.into(),
            PARENT_TOPIC.into(),
        ];
        spec.concurrency = CONCURRENCY;
        spec.lease = LEASE;
        spec.partitions = Some(PARTITIONS);
        spec.idle_wait = Some(Duration::from_millis(300));
        spec.response_timeout = Some(Duration::from_secs(2));
        spec.durable = Some(DURABLE);
        Harness {
            name,
            cluster,
            ns,
            dir,
            client,
            spec,
            started: Instant::now(),
            _serial: serial,
        }
    }

    /// The slot of a hash tag (`CLUSTER KEYSLOT "{tag}"`, asked of any node that answers).
    async fn slot_of(&self, tag: String) -> u16 {
        let cluster = self.cluster.clone();
        tokio::task::spawn_blocking(move || {
            let key = format!("{{{tag}}}");
            cluster
                .nodes()
                .iter()
                .find_map(|n| n.try_cmd::<u16>(&["CLUSTER", "KEYSLOT", &key]).ok())
                .expect("a node answers CLUSTER KEYSLOT")
        })
        .await
        .expect("keyslot")
    }

    /// The port of the master serving `slot` now.
    async fn master_of(&self, slot: u16) -> u16 {
        let cluster = self.cluster.clone();
        tokio::task::spawn_blocking(move || cluster.master_of_slot(slot).map(RedisServer::port))
            .await
            .expect("master_of_slot")
            .expect("the slot has a master")
    }

    /// Partition `p` of `topic` → (slot, port of its master now).
    async fn placement(&self, topic: &str) -> BTreeMap<u16, (u16, u16)> {
        let mut out = BTreeMap::new();
        for p in 0..PARTITIONS {
            let slot = self.slot_of(format!("{topic}#{p}")).await;
            out.insert(p, (slot, self.master_of(slot).await));
        }
        out
    }

    /// Starts `WORKERS` workers (waiting for each to be ready) and a thread that SIGKILLs one
    /// every `KILL_EVERY`, round robin, and starts a new one in its place at once.
    fn chaos(&self) -> Chaos {
        let bin = PathBuf::from(BIN);
        let workers: Vec<WorkerProcess> = (0..WORKERS)
            .map(|i| {
                let name = format!("w{:03}", i + 1);
                start_worker(&bin, &self.spec, self.dir.path(), &name)
            })
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (stop, spec, dir) = (stop.clone(), self.spec.clone(), self.dir.path().to_owned());
            std::thread::spawn(move || chaos_loop(&bin, &spec, &dir, workers, &stop))
        };
        Chaos { stop, thread }
    }

    /// SIGKILLs master `port`; waits until every slot in `slots` is served by another node and
    /// the cluster is ok; then restarts the killed node (it rejoins as the new master's
    /// replica) and waits until it is in sync, so durable `WAIT`s are answered again. Returns
    /// the fault (from the kill to the promotion) and the new master's port.
    async fn kill_master(&self, port: u16, slots: &[u16]) -> (Fault, u16) {
        let victim = self
            .cluster
            .nodes()
            .iter()
            .position(|n| n.port() == port)
            .expect("the victim is one of the cluster's nodes");
        let kill_ms = now_ms();
        {
            let cluster = self.cluster.clone();
            tokio::task::spawn_blocking(move || cluster.nodes()[victim].kill())
                .await
                .expect("kill");
        }
        let new_port = eventually_some(
            "a replica takes over the killed master's slots",
            FAILOVER_DEADLINE,
            || {
                let (cluster, slots) = (self.cluster.clone(), slots.to_vec());
                async move {
                    tokio::task::spawn_blocking(move || {
                        let owners: BTreeSet<u16> = slots
                            .iter()
                            .map(|s| cluster.master_of_slot(*s).map_or(0, RedisServer::port))
                            .collect();
                        let ok = cluster.nodes().iter().filter(|n| n.is_running()).all(|n| {
                            n.try_cmd::<String>(&["CLUSTER", "INFO"])
                                .is_ok_and(|i| i.contains("cluster_state:ok"))
                        });
                        let new = owners.first().copied().filter(|p| *p != port && *p != 0);
                        (ok && owners.len() == 1).then_some(new).flatten()
                    })
                    .await
                    .ok()
                    .flatten()
                }
            },
        )
        .await;
        let promoted_ms = now_ms();
        {
            let cluster = self.cluster.clone();
            tokio::task::spawn_blocking(move || cluster.nodes()[victim].restart())
                .await
                .expect("restart");
        }
        eventually(
            "the restarted node is the new master's replica, in sync",
            FAILOVER_DEADLINE,
            || {
                let cluster = self.cluster.clone();
                async move {
                    tokio::task::spawn_blocking(move || {
                        cluster.nodes()[victim]
                            .try_cmd::<String>(&["INFO", "replication"])
                            .is_ok_and(|i| {
                                i.contains("role:slave")
                                    && i.contains(&format!("master_port:{new_port}"))
                                    && i.contains("master_link_status:up")
                            })
                    })
                    .await
                    .unwrap_or(false)
                }
            },
        )
        .await;
        println!(
            "SCENARIO {}: master 127.0.0.1:{port} SIGKILLed; 127.0.0.1:{new_port} promoted {} ms \
             later; the old node back as its replica, in sync, {} ms after the kill",
            self.name,
            promoted_ms - kill_ms,
            now_ms() - kill_ms
        );
        let fault = Fault {
            what: format!("SIGKILL master 127.0.0.1:{port}, failover to {new_port}"),
            pid: None,
            start_ms: kill_ms,
            end_ms: promoted_ms,
        };
        (fault, new_port)
    }

    /// Waits until `topic` has nothing scheduled, ready, running or in retry.
    async fn wait_settled(&self, topic: &str, workers: &[WorkerProcess]) {
        let t = self.client.topic(topic).expect("topic");
        let deadline = Instant::now() + DRAIN_DEADLINE;
        // (bounded by the deadline)
        loop {
            let last = match t.stats().await {
                Ok(s) if s.scheduled + s.ready + s.active + s.retry == 0 => return,
                Ok(s) => format!("{s:?}"),
                Err(e) => format!("stats failed: {e}"),
            };
            assert!(
                Instant::now() < deadline,
                "{}: {topic} not settled in time; last stats {last}\n{}",
                self.name,
                logs(workers)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until `batch` is done; panics after `DRAIN_DEADLINE` with its last counts and
    /// the tails of the newest workers' logs.
    async fn wait_done(&self, batch: &dq::BatchHandle) -> dq::BatchInfo {
        let deadline = Instant::now() + DRAIN_DEADLINE;
        // (bounded by the deadline)
        loop {
            let last = match batch.info().await {
                Ok(Some(info)) if info.done => return info,
                Ok(Some(info)) => format!("{} {:?}", info.status(), info.counts),
                Ok(None) => "not stored".to_string(),
                Err(e) => format!("info failed: {e}"),
            };
            if Instant::now() >= deadline {
                panic!(
                    "{}: the batch is not done after {DRAIN_DEADLINE:?}; last: {last}\n{}",
                    self.name,
                    newest_logs(self.dir.path(), WORKERS)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Reads the store and the ledgers and reconciles them with `expected`.
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

/// Starts a worker and waits for its `ready`. A worker that exits before it is ready (its
/// start met the cluster mid-failover) is started again, a few times at most.
fn start_worker(bin: &Path, spec: &WorkerSpec, dir: &Path, name: &str) -> WorkerProcess {
    let mut failures = Vec::new();
    for attempt in 0..5 {
        let mut w = WorkerProcess::spawn(bin, spec, dir, &format!("{name}-{attempt}"));
        let deadline = Instant::now() + dq_faults::READY_TIMEOUT;
        // (bounded by the deadline)
        loop {
            if w.poll_ready() {
                return w;
            }
            if let Some(status) = w.exited() {
                failures.push(format!("{status:?}: {}", w.log_tail(5)));
                break;
            }
            assert!(
                Instant::now() < deadline,
                "worker {name} not ready after {:?}; log:\n{}",
                dq_faults::READY_TIMEOUT,
                w.log_tail(40)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("worker {name} exited before ready five times:\n{failures:#?}");
}

/// The worker processes, killed and restarted by a thread until stopped.
struct Chaos {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(Vec<WorkerProcess>, Vec<Fault>)>,
}

impl Chaos {
    /// Stops the kills; returns the live workers and the kills made.
    fn stop(self) -> (Vec<WorkerProcess>, Vec<Fault>) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("the chaos thread panicked")
    }
}

/// Every `KILL_EVERY` (the fault's pace, not a synchronisation), SIGKILLs the next worker and
/// starts a new one in its place, until `stop`.
fn chaos_loop(
    bin: &Path,
    spec: &WorkerSpec,
    dir: &Path,
    mut workers: Vec<WorkerProcess>,
    stop: &AtomicBool,
) -> (Vec<WorkerProcess>, Vec<Fault>) {
    let mut faults = Vec::new();
    let mut next_kill = Instant::now() + KILL_EVERY;
    let mut victim = 0;
    // Bounded: the test stops it long before (about 1,000 kills).
    for _ in 0..(3_600_000 / 50) {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if Instant::now() < next_kill {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        let w = &mut workers[victim];
        let pid = w.pid();
        let at = w.kill();
        faults.push(Fault {
            what: format!("SIGKILL {} (pid {pid})", w.name()),
            pid: Some(pid),
            start_ms: at,
            end_ms: at,
        });
        let name = format!("w{:03}", faults.len() + WORKERS);
        workers[victim] = start_worker(bin, spec, dir, &name);
        victim = (victim + 1) % workers.len();
        next_kill = Instant::now() + KILL_EVERY;
    }
    (workers, faults)
}

/// The last lines of every worker's log.
fn logs(workers: &[WorkerProcess]) -> String {
    workers
        .iter()
        .map(|w| format!("--- {} (pid {}) ---\n{}", w.name(), w.pid(), w.log_tail(15)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The last lines of the `n` newest `*.log` files of `dir` (the workers started last: their
/// names are numbered in start order).
fn newest_logs(dir: &Path, n: usize) -> String {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "log"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
        .iter()
        .rev()
        .take(n)
        .map(|p| {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            format!(
                "--- {} ---\n{}",
                p.display(),
                lines[lines.len().saturating_sub(15)..].join("\n")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The key of member `i`.
fn member_key(i: u64) -> String {
    format!("m-{i}")
}

/// The batch: 10,000 members over 6 partitions, drained by three workers SIGKILLed in turn
/// every 2.5 s, the master of the batch's hash SIGKILLed mid-batch (its replica promoted, the
/// node restarted as a replica). The callback job is enqueued once and finishes once (more
/// only for runs in flight at a fault), having read the final counts; the counts are what
/// the members' handlers did; nothing is lost or stuck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_10000_survives_worker_kills_and_a_master_failover_with_one_callback() {
    let h = Harness::start("batch-chaos").await;

    // Where things live: the victim is partition 0's master; the batch id is picked so that
    // the batch's hash and the callback's partition are on it too.
    let members = h.placement(MEMBER_TOPIC).await;
    let (_, victim) = members[&0];
    let masters: BTreeSet<u16> = members.values().map(|(_, port)| *port).collect();
    assert!(masters.len() >= 2, "partitions must spread: {members:?}");
    let mut picked = None;
    for n in 0..200u32 {
        let id = format!("chaos-{n}");
        let batch_slot = h.slot_of(format!("batch:{id}")).await;
        let callback_part = dq::JobKey::new(format!("batch:{id}"))
            .expect("key")
            .partition(PARTITIONS);
        let callback_slot = h.slot_of(format!("{CALLBACK_TOPIC}#{callback_part}")).await;
        if h.master_of(batch_slot).await == victim && h.master_of(callback_slot).await == victim {
            picked = Some((id, batch_slot, callback_slot));
            break;
        }
    }
    let (id, batch_slot, callback_slot) =
        picked.expect("an id whose batch and callback live on the victim");
    let victim_slots: Vec<u16> = members
        .values()
        .filter(|(_, port)| *port == victim)
        .map(|(slot, _)| *slot)
        .chain([batch_slot, callback_slot])
        .collect();
    println!(
        "SCENARIO {}: member partitions → (slot, master) {members:?}; batch {id:?} in slot \
         {batch_slot}, its callback in slot {callback_slot}; the master to kill: 127.0.0.1:{victim}",
        h.name
    );

    let chaos = h.chaos();
    let callback_key = format!("batch:{id}");
    let batch = h
        .client
        .new_batch()
        .id(&id)
        .on_complete::<CallbackJob>(&FaultPayload::new(0, 0))
        .open()
        .await
        .expect("open the batch");
    let mut expected = Expected::default();
    let ids: Vec<u64> = (0..MEMBERS).collect();
    for chunk in ids.chunks(ADD_CHUNK) {
        let specs = chunk
            .iter()
            .map(|i| JobSpec::new(FaultPayload::new(*i, MEMBER_MS)).key(member_key(*i)));
        let added = batch.add::<MemberJob>(specs).await.expect("add members");
        let at = now_ms();
        assert_eq!(added.len(), chunk.len());
        for e in added {
            expected.ok.insert(e.key.to_string(), at);
        }
    }
    let closed = batch.close().await.expect("close the batch");
    assert_eq!(closed.counts.total(), MEMBERS);
    println!(
        "SCENARIO {}: {MEMBERS} members added and the batch closed after {:.1}s ({} ended by then)",
        h.name,
        h.started.elapsed().as_secs_f64(),
        MEMBERS - closed.counts.pending()
    );

    // Mid-batch: the master of the batch, of the callback's partition and of member partitions.
    let ended_at_kill = eventually_some(
        "members end in the batch before the master is killed",
        DRAIN_DEADLINE,
        || {
            let batch = batch.clone();
            async move {
                let info = batch.info().await.ok().flatten()?;
                let ended = info.counts.total() - info.counts.pending();
                (ended >= KILL_MASTER_AFTER).then_some(info)
            }
        },
    )
    .await;
    assert!(
        !ended_at_kill.is_complete(),
        "the batch must still have members running when the master is killed: {:?}",
        ended_at_kill.counts
    );
    let (master_fault, new_master) = h.kill_master(victim, &victim_slots).await;

    // Every member ends, then the callback runs.
    let done = h.wait_done(&batch).await;
    eventually("the callback finished a run", DRAIN_DEADLINE, || {
        let finished = ledger::read_dir(h.dir.path())
            .0
            .iter()
            .any(|e| e.kind == Kind::Finish && e.key == callback_key);
        async move { finished }
    })
    .await;
    let (mut workers, mut faults) = chaos.stop();
    let kills = faults.len();
    h.wait_settled(MEMBER_TOPIC, &workers).await;
    h.wait_settled(CALLBACK_TOPIC, &workers).await;
    for w in &mut workers {
        let status = w.terminate(Duration::from_secs(20));
        assert!(
            status.success(),
            "worker {} exited with {status:?}; log:\n{}",
            w.name(),
            w.log_tail(20)
        );
    }
    faults.push(master_fault);

    // The batch's counts are what the handlers did.
    let fates: BTreeMap<String, Fate> = (0..MEMBERS)
        .map(|i| (member_key(i), member_fate(i)))
        .collect();
    let doomed: BTreeSet<String> = fates
        .iter()
        .filter(|(_, f)| **f == Fate::Dies)
        .map(|(k, _)| k.clone())
        .collect();
    let made_to_succeed = MEMBERS - doomed.len() as u64;
    let info = batch
        .info()
        .await
        .expect("info")
        .expect("the batch is kept");
    println!(
        "SCENARIO {}: batch {} counts {:?}, done {} ms after it was closed",
        h.name,
        info.status(),
        info.counts,
        info.done_ms.saturating_sub(info.closed_ms)
    );
    assert_eq!(info.status(), BatchStatus::Done);
    assert_eq!(
        done.counts, info.counts,
        "the counts moved after the batch was done"
    );
    let want = dq::BatchCounts {
        succeeded: made_to_succeed,
        dead: doomed.len() as u64,
        ..dq::BatchCounts::default()
    };
    assert_eq!(info.counts, want, "counts other than what the handlers did");
    assert_eq!(info.counts.succeeded + info.counts.dead, MEMBERS);

    // Each member's state in the batch is its fate.
    let mut states: BTreeMap<String, MemberState> = BTreeMap::new();
    let mut cursor = 0;
    for _ in 0..10_000 {
        let page = batch.members(cursor, 500).await.expect("members");
        for (m, state) in page.members {
            assert_eq!(m.topic.as_str(), MEMBER_TOPIC);
            states.insert(m.key.as_str().to_owned(), state);
        }
        match page.next {
            Some(next) => cursor = next,
            None => break,
        }
    }
    let wrong: Vec<(&String, &Fate, Option<&MemberState>)> = fates
        .iter()
        .filter_map(|(k, fate)| {
            let want = match fate {
                Fate::Dies => MemberState::Dead,
                Fate::Succeeds | Fate::FailsFirst => MemberState::Succeeded,
            };
            let got = states.get(k);
            (got != Some(&want)).then_some((k, fate, got))
        })
        .collect();
    assert!(
        wrong.is_empty() && states.len() == fates.len(),
        "{} members in a state other than their fate (of {} listed): {:?}",
        wrong.len(),
        states.len(),
        &wrong[..wrong.len().min(10)]
    );

    // The callback: one job (one created_ms), every run read the final counts, and it started
    // after every succeeding member had finished a run.
    let (callback_runs, torn) = dq_faults::callbacks::read_dir(h.dir.path());
    assert_eq!(torn, 0, "torn callback lines");
    let runs_of_key: Vec<_> = callback_runs
        .iter()
        .filter(|r| r.key == callback_key)
        .collect();
    assert_eq!(
        runs_of_key.len(),
        callback_runs.len(),
        "callback runs for another key: {callback_runs:?}"
    );
    let created: BTreeSet<u64> = runs_of_key.iter().map(|r| r.created_ms).collect();
    assert_eq!(
        created.len(),
        1,
        "the callback was enqueued more than once (jobs created at {created:?}): {runs_of_key:?}"
    );
    for r in &runs_of_key {
        assert!(
            r.closed
                && r.reserved + r.enqueued == 0
                && r.succeeded == made_to_succeed
                && r.dead == doomed.len() as u64
                && r.total == MEMBERS,
            "a callback run read counts other than the final ones: {r:?}"
        );
    }
    let entries = ledger::read_dir(h.dir.path()).0;
    let callback_started = entries
        .iter()
        .filter(|e| e.kind == Kind::Start && e.key == callback_key)
        .map(|e| e.ms)
        .min()
        .expect("the callback started");
    let callback_finished = entries
        .iter()
        .filter(|e| e.kind == Kind::Finish && e.key == callback_key)
        .count();
    let mut first_finish: BTreeMap<&str, u64> = BTreeMap::new();
    for e in entries.iter().filter(|e| e.kind == Kind::Finish) {
        let t = first_finish.entry(e.key.as_str()).or_insert(e.ms);
        *t = (*t).min(e.ms);
    }
    let late: Vec<(&String, Option<&u64>)> = fates
        .iter()
        .filter(|(_, f)| **f != Fate::Dies)
        .map(|(k, _)| (k, first_finish.get(k.as_str())))
        .filter(|(_, t)| t.is_none_or(|t| *t > callback_started))
        .collect();
    assert!(
        late.is_empty(),
        "{} succeeding members had not finished a run when the callback started: {:?}",
        late.len(),
        &late[..late.len().min(10)]
    );

    // Nothing lost or stuck; re-runs only of runs in flight at a fault; dead only the doomed.
    expected.ok.insert(callback_key.clone(), now_ms());
    let r = h.reconcile(&expected, &faults).await;
    println!(
        "SCENARIO {}: {} faults={} ({kills} worker kills, the master failover to \
         127.0.0.1:{new_master}) elapsed={:.1}s",
        h.name,
        r.summary(),
        faults.len(),
        h.started.elapsed().as_secs_f64()
    );
    println!(
        "SCENARIO {}: callback {callback_key}: one job (created at {created:?}), {} runs \
         recorded, {callback_finished} finished; members ended {} when the master was killed",
        h.name,
        runs_of_key.len(),
        ended_at_kill.counts.total() - ended_at_kill.counts.pending()
    );
    let mut problems = r.problems();
    let dead: BTreeSet<String> = r.dead.iter().cloned().collect();
    if dead != doomed {
        problems.push(format!(
            "dead jobs other than the doomed members: {:?} unexpected, {:?} missing",
            dead.difference(&doomed).take(10).collect::<Vec<_>>(),
            doomed.difference(&dead).take(10).collect::<Vec<_>>()
        ));
    }
    assert!(
        problems.is_empty(),
        "{}: {}\nproblems:\n  {}\nfaults: {faults:?}\n{}",
        h.name,
        r.summary(),
        problems.join("\n  "),
        logs(&workers)
    );
    assert!(callback_finished >= 1);
    assert!(kills >= 3, "only {kills} worker kills happened");
}

/// The flow's shape: the top parent ← `MIDS` mid parents ← `LOWS_PER_MID` low parents each ←
/// `LEAVES_PER_LOW` leaves each; `DIRECT_LEAVES` leaves also hang straight under each mid and
/// under the top (so every level has a dead child: leaves die by `member_fate`).
const MIDS: u64 = 3;
const LOWS_PER_MID: u64 = 3;
const LEAVES_PER_LOW: u64 = 300;
const DIRECT_LEAVES: u64 = 10;
/// Work time of a leaf that succeeds: 2,740 leaves on 24 slots drain in ≥ 11 s, long enough
/// for several worker kills and the failover.
const LEAF_MS: u64 = 100;
/// The master is killed once this many of the low parents' leaves have ended.
const KILL_MASTER_AFTER_LEAVES: u64 = 900;

/// One parent of the flow: its level, the leaves right under it, the parents right under it.
#[derive(Debug)]
struct Parent {
    level: &'static str,
    leaves: std::ops::Range<u64>,
    parents: Vec<String>,
}

impl Parent {
    /// The counts its children's batch must end with.
    fn want(&self) -> dq::BatchCounts {
        let dead = self
            .leaves
            .clone()
            .filter(|i| member_fate(*i) == Fate::Dies)
            .count() as u64;
        dq::BatchCounts {
            succeeded: self.parents.len() as u64 + (self.leaves.end - self.leaves.start) - dead,
            dead,
            ..dq::BatchCounts::default()
        }
    }
}

/// The id of the children's batch of parent `key` (`BatchId::of_flow`).
fn flow_batch(key: &str) -> String {
    format!("flow.{PARENT_TOPIC}.{key}")
}

/// A depth-3 flow — 1 top, 3 mid and 9 low parents over 2,740 leaves, the parents spread
/// over the 6 partitions of `fault.parent` — drained by three workers SIGKILLed in turn every
/// 2.5 s, with the master holding the top parent's partition, the top's children batch and
/// three low parents' batches SIGKILLed mid-flow (its replica promoted, the node restarted as
/// a replica), durable mode on. Every parent is one job (one `created_ms`), released once its
/// children had all ended: its first run started after every child's first end record, and
/// every run read its children's final counts (succeeded and dead as the leaves' fates make
/// them); every batch of the flow is done with those counts; nothing is lost or stuck; only
/// the doomed leaves are dead; the invariants hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_depth_3_flow_survives_worker_kills_and_a_master_failover_releasing_each_parent_once() {
    let h = Harness::start("flow-chaos").await;

    // The victim is member partition 0's master; the top parent's partition and its batch,
    // and the first low batch under each mid, are picked to live on it.
    let members = h.placement(MEMBER_TOPIC).await;
    let parts = h.placement(PARENT_TOPIC).await;
    let (_, victim) = members[&0];
    let on_victim = async |key: String| {
        let batch_slot = h.slot_of(format!("batch:{}", flow_batch(&key))).await;
        let part = dq::JobKey::new(key.clone())
            .expect("key")
            .partition(PARTITIONS);
        let (part_slot, part_master) = parts[&part];
        (h.master_of(batch_slot).await == victim).then_some((batch_slot, part_slot, part_master))
    };
    let mut top = None;
    for n in 0..200 {
        let key = format!("top-{n}");
        if let Some((batch_slot, _, port)) = on_victim(key.clone()).await
            && port == victim
        {
            top = Some((key, batch_slot));
            break;
        }
    }
    let (top_key, top_slot) = top.expect("a top key whose batch and partition are on the victim");
    let mut victim_slots: Vec<u16> = members
        .values()
        .chain(parts.values())
        .filter(|(_, port)| *port == victim)
        .map(|(slot, _)| *slot)
        .chain([top_slot])
        .collect();
    let mut low_keys: Vec<Vec<String>> = Vec::new();
    for m in 0..MIDS {
        let mut keys = Vec::new();
        for l in 0..LOWS_PER_MID {
            let mut key = format!("low-{m}-{l}");
            if l == 0 {
                for n in 0..200 {
                    let candidate = format!("low-{m}-{l}-{n}");
                    if let Some((slot, _, _)) = on_victim(candidate.clone()).await {
                        victim_slots.push(slot);
                        key = candidate;
                        break;
                    }
                }
                assert_ne!(key, format!("low-{m}-{l}"), "no low key on the victim");
            }
            keys.push(key);
        }
        low_keys.push(keys);
    }
    println!(
        "SCENARIO {}: parent partitions → (slot, master) {parts:?}; top {top_key:?} (batch in \
         slot {top_slot}); low batches on the victim: {:?}; the master to kill: 127.0.0.1:{victim}",
        h.name,
        low_keys.iter().map(|k| &k[0]).collect::<Vec<_>>()
    );

    // The flow, stored while the workers are already being killed.
    let chaos = h.chaos();
    let leaf_specs = |r: std::ops::Range<u64>| {
        r.map(|i| JobSpec::new(FaultPayload::new(i, LEAF_MS)).key(member_key(i)))
    };
    let parent_spec = |key: &str| JobSpec::new(FaultPayload::new(0, 0)).key(key);
    let mut parents: BTreeMap<String, Parent> = BTreeMap::new();
    let mut next = 0u64;
    let mut top_flow = h
        .client
        .new_flow::<ParentJob>(parent_spec(&top_key))
        .policy(dq::FailurePolicy::WaitAll);
    for (m, lows) in low_keys.iter().enumerate() {
        let mid_key = format!("mid-{m}");
        let mut mid_flow = h.client.new_flow::<ParentJob>(parent_spec(&mid_key));
        for low_key in lows {
            let leaves = next..next + LEAVES_PER_LOW;
            next = leaves.end;
            mid_flow = mid_flow.child_flow(
                h.client
                    .new_flow::<ParentJob>(parent_spec(low_key))
                    .children::<MemberJob>(leaf_specs(leaves.clone())),
            );
            parents.insert(
                low_key.clone(),
                Parent {
                    level: "low",
                    leaves,
                    parents: Vec::new(),
                },
            );
        }
        let direct = next..next + DIRECT_LEAVES;
        next = direct.end;
        top_flow = top_flow.child_flow(mid_flow.children::<MemberJob>(leaf_specs(direct.clone())));
        parents.insert(
            mid_key,
            Parent {
                level: "mid",
                leaves: direct,
                parents: lows.clone(),
            },
        );
    }
    let direct = next..next + DIRECT_LEAVES;
    let leaves = direct.end;
    top_flow = top_flow.children::<MemberJob>(leaf_specs(direct.clone()));
    parents.insert(
        top_key.clone(),
        Parent {
            level: "top",
            leaves: direct,
            parents: (0..MIDS).map(|m| format!("mid-{m}")).collect(),
        },
    );
    let flow = top_flow.enqueue().await.expect("enqueue the flow");
    assert_eq!(flow.key.as_str(), top_key);
    let at = now_ms();
    let mut expected = Expected::default();
    for k in (0..leaves).map(member_key).chain(parents.keys().cloned()) {
        expected.ok.insert(k, at);
    }
    println!(
        "SCENARIO {}: a flow of {} parents over {leaves} leaves stored after {:.1}s",
        h.name,
        parents.len(),
        h.started.elapsed().as_secs_f64()
    );

    // Mid-flow: the master of the top's partition and batch, of low batches and member
    // partitions.
    let low_batches: Vec<dq::BatchHandle> = parents
        .iter()
        .filter(|(_, p)| p.level == "low")
        .map(|(k, _)| h.client.batch(&flow_batch(k)).expect("batch id"))
        .collect();
    let ended_at_kill = eventually_some(
        "leaves end before the master is killed",
        DRAIN_DEADLINE,
        || {
            let low_batches = low_batches.clone();
            async move {
                let mut ended = 0;
                for b in &low_batches {
                    let c = b.info().await.ok().flatten()?.counts;
                    ended += c.total() - c.pending();
                }
                (ended >= KILL_MASTER_AFTER_LEAVES).then_some(ended)
            }
        },
    )
    .await;
    let low_leaves = MIDS * LOWS_PER_MID * LEAVES_PER_LOW;
    assert!(
        ended_at_kill < low_leaves,
        "leaves must still be running when the master is killed: {ended_at_kill} ended"
    );
    let (master_fault, new_master) = h.kill_master(victim, &victim_slots).await;

    // The top parent finishes a run last.
    eventually("the top parent finished a run", DRAIN_DEADLINE, || {
        let finished = ledger::read_dir(h.dir.path())
            .0
            .iter()
            .any(|e| e.kind == Kind::Finish && e.key == top_key);
        async move { finished }
    })
    .await;
    let (mut workers, mut faults) = chaos.stop();
    let kills = faults.len();
    for topic in [MEMBER_TOPIC, PARENT_TOPIC] {
        h.wait_settled(topic, &workers).await;
    }
    for w in &mut workers {
        let status = w.terminate(Duration::from_secs(20));
        assert!(
            status.success(),
            "worker {} exited with {status:?}; log:\n{}",
            w.name(),
            w.log_tail(20)
        );
    }
    faults.push(master_fault);

    // Every level's batch is done with the counts its children's fates make.
    for (key, p) in &parents {
        let batch = h.client.batch(&flow_batch(key)).expect("batch id");
        let info = h.wait_done(&batch).await;
        assert_eq!(
            info.counts,
            p.want(),
            "{} parent {key}: its children's batch ended with other counts",
            p.level
        );
    }

    // Each parent: one job (one created_ms), every run read its children's final counts.
    let (runs, torn) = dq_faults::callbacks::read_dir(h.dir.path());
    assert_eq!(torn, 0, "torn callback lines");
    let strangers: Vec<_> = runs
        .iter()
        .filter(|r| !parents.contains_key(&r.key))
        .collect();
    assert!(strangers.is_empty(), "runs of no parent: {strangers:?}");
    for (key, p) in &parents {
        let of_key: Vec<_> = runs.iter().filter(|r| &r.key == key).collect();
        let created: BTreeSet<u64> = of_key.iter().map(|r| r.created_ms).collect();
        assert_eq!(
            created.len(),
            1,
            "{} parent {key}: not one job (created at {created:?}): {of_key:?}",
            p.level
        );
        let want = p.want();
        for r in &of_key {
            assert!(
                r.closed
                    && r.reserved + r.enqueued + r.cancelled == 0
                    && r.succeeded == want.succeeded
                    && r.dead == want.dead
                    && r.total == want.total(),
                "{} parent {key}: a run read counts other than the final {want:?}: {r:?}",
                p.level
            );
        }
    }

    // Each parent started only after every child had an end record: a leaf its first finish
    // (or, for a doomed one, its first permanent failure), a parent its first finish.
    let entries = ledger::read_dir(h.dir.path()).0;
    let mut first: std::collections::HashMap<(Kind, &str), u64> = Default::default();
    for e in &entries {
        let t = first.entry((e.kind, e.key.as_str())).or_insert(e.ms);
        *t = (*t).min(e.ms);
    }
    let mut early = Vec::new();
    for (key, p) in &parents {
        let started = first[&(Kind::Start, key.as_str())];
        let ends = p
            .leaves
            .clone()
            .map(|i| {
                let kind = match member_fate(i) {
                    Fate::Dies => Kind::Failed,
                    _ => Kind::Finish,
                };
                (
                    member_key(i),
                    first.get(&(kind, member_key(i).as_str())).copied(),
                )
            })
            .chain(
                p.parents
                    .iter()
                    .map(|k| (k.clone(), first.get(&(Kind::Finish, k.as_str())).copied())),
            );
        for (child, end) in ends {
            if end.is_none_or(|end| end > started) {
                early.push(format!(
                    "{} parent {key} started at {started}, child {child} ended at {end:?}",
                    p.level
                ));
            }
        }
    }
    assert!(
        early.is_empty(),
        "{} parents started before a child had ended: {:?}",
        early.len(),
        &early[..early.len().min(10)]
    );

    // Nothing lost or stuck; re-runs only of runs in flight at a fault; dead only the doomed.
    let doomed: BTreeSet<String> = (0..leaves)
        .filter(|i| member_fate(*i) == Fate::Dies)
        .map(member_key)
        .collect();
    let r = h.reconcile(&expected, &faults).await;
    let finishes = |k: &str| {
        entries
            .iter()
            .filter(|e| e.kind == Kind::Finish && e.key == k)
            .count()
    };
    println!(
        "SCENARIO {}: {} faults={} ({kills} worker kills, the master failover to \
         127.0.0.1:{new_master}; {ended_at_kill} low leaves had ended) elapsed={:.1}s",
        h.name,
        r.summary(),
        faults.len(),
        h.started.elapsed().as_secs_f64()
    );
    println!(
        "SCENARIO {}: parent runs recorded (finished): {}",
        h.name,
        parents
            .keys()
            .map(|k| format!(
                "{k} {} ({})",
                runs.iter().filter(|r| &r.key == k).count(),
                finishes(k)
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut problems = r.problems();
    let dead: BTreeSet<String> = r.dead.iter().cloned().collect();
    if dead != doomed {
        problems.push(format!(
            "dead jobs other than the doomed leaves: {:?} unexpected, {:?} missing",
            dead.difference(&doomed).take(10).collect::<Vec<_>>(),
            doomed.difference(&dead).take(10).collect::<Vec<_>>()
        ));
    }
    assert!(
        problems.is_empty(),
        "{}: {}\nproblems:\n  {}\nfaults: {faults:?}\n{}",
        h.name,
        r.summary(),
        problems.join("\n  "),
        logs(&workers)
    );
    assert!(parents.keys().all(|k| finishes(k) >= 1));
    assert!(kills >= 3, "only {kills} worker kills happened");
}
