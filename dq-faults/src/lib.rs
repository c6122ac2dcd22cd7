//! Fault-injection tests for dq (not published).
//!
//! The tests start real worker processes — the `fault-worker` binary of this crate, a dq
//! worker whose handlers append to a [ledger] — against a private `redis-server` each, inject
//! faults (kill, pause or poison a worker; kill, fill, flush or corrupt Redis; cut, delay or
//! black-hole the network with [`dq_testkit::proxy::FaultProxy`]), and then [check] that the
//! promises of docs/GUARANTEES.md held: every accepted job ended exactly once in succeeded, cancelled or dead, nothing is
//! stuck, duplicates only for runs in flight at a fault, and the store's structures agree.
//!
//! This file holds what tests and binary share (the payload, the topics) and [`Scenario`], the
//! harness one test drives.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dq::{Client, Job, JobSpec, TopicStats};
use dq_testkit::{RedisServer, ServerOptions};
use serde::{Deserialize, Serialize};

pub mod callbacks;
pub mod check;
pub mod ledger;
pub mod process;

pub use check::{Expected, Fault, Reconciliation, Snapshot};
pub use process::{WorkerProcess, WorkerSpec};

/// The topic of ordinary jobs: `retry = "fixed(50ms, 20)"`, so a job survives many crashes.
pub const WORK_TOPIC: &str = "fault.work";
/// The topic of the poison-pill test: `retry = "fixed(100ms, 2)"`, three attempts in all.
pub const POISON_TOPIC: &str = "fault.poison";

/// The topic of single-attempt jobs: `retry = "none"`; a failed attempt (the handler returns
/// `Err` when it is cancelled) sends the job to the dead queue at once.
pub const ONCE_TOPIC: &str = "fault.once";

/// The topic of jobs whose first attempt fails on purpose: `retry = "fixed(500ms, 5)"`; the
/// handler returns `Err` on attempt 1 (a `Failed` ledger line) and works normally after that
/// (the retries of `dq-bench soak`).
pub const FLAKY_TOPIC: &str = "fault.flaky";

/// Producers' handle on [`FLAKY_TOPIC`] (the handler lives in `fault-worker`).
#[derive(Debug)]
pub struct FlakyJob;

impl Job for FlakyJob {
    type Payload = FaultPayload;
    const TOPIC: &'static str = FLAKY_TOPIC;
}

/// Producers' handle on [`ONCE_TOPIC`] (the handler lives in `fault-worker`).
#[derive(Debug)]
pub struct OnceJob;

impl Job for OnceJob {
    type Payload = FaultPayload;
    const TOPIC: &'static str = ONCE_TOPIC;
}

/// The payload of every `fault-worker` job.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultPayload {
    /// A number the test chooses (`--abort-on` names these).
    pub id: u64,
    /// How long the handler works, in ms (unless the worker's `--sleep-ms` overrides it).
    pub sleep_ms: u64,
    /// Filler, to make jobs bigger (the `maxmemory` test).
    pub pad: String,
}

impl FaultPayload {
    /// A job `id` that works for `sleep_ms`.
    pub fn new(id: u64, sleep_ms: u64) -> Self {
        FaultPayload {
            id,
            sleep_ms,
            pad: String::new(),
        }
    }
}

/// Producers' handle on [`WORK_TOPIC`] (the handler lives in `fault-worker`).
#[derive(Debug)]
pub struct WorkJob;

impl Job for WorkJob {
    type Payload = FaultPayload;
    const TOPIC: &'static str = WORK_TOPIC;
}

/// Producers' handle on [`POISON_TOPIC`] (the handler lives in `fault-worker`).
#[derive(Debug)]
pub struct PoisonJob;

impl Job for PoisonJob {
    type Payload = FaultPayload;
    const TOPIC: &'static str = POISON_TOPIC;
}

/// The topic of batch members (`batch_faults`): `retry = "fixed(100ms, 10)"`; what each
/// member's handler does is its [`member_fate`].
pub const MEMBER_TOPIC: &str = "fault.member";

/// The topic of batch callbacks (`batch_faults`): `retry = "fixed(200ms, 50)"`; its handler
/// reads the batch its key names and appends what it saw to a [callbacks] file.
pub const CALLBACK_TOPIC: &str = "fault.callback";

/// The topic of flow parents (`batch_faults`'s flow test): `retry = "fixed(200ms, 50)"`; its
/// handler reads its children's batch (`JobContext::children`) and appends what it saw to a
/// [callbacks] file, as a batch's callback does.
pub const PARENT_TOPIC: &str = "fault.parent";

/// Producers' handle on [`PARENT_TOPIC`] (the handler lives in `fault-worker`).
#[derive(Debug)]
pub struct ParentJob;

impl Job for ParentJob {
    type Payload = FaultPayload;
    const TOPIC: &'static str = PARENT_TOPIC;
}

/// Producers' handle on [`MEMBER_TOPIC`] (the handler lives in `fault-worker`).
#[derive(Debug)]
pub struct MemberJob;

impl Job for MemberJob {
    type Payload = FaultPayload;
    const TOPIC: &'static str = MEMBER_TOPIC;
}

/// Producers' handle on [`CALLBACK_TOPIC`] (the handler lives in `fault-worker`).
#[derive(Debug)]
pub struct CallbackJob;

impl Job for CallbackJob {
    type Payload = FaultPayload;
    const TOPIC: &'static str = CALLBACK_TOPIC;
}

/// How a batch member's handler ends, decided by its payload id (shared by the test, which
/// expects it, and `fault-worker`, which does it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fate {
    /// Works `sleep_ms` and succeeds.
    Succeeds,
    /// Its first attempt fails on purpose (a `Failed` ledger line, retried 100 ms later);
    /// later attempts work and succeed.
    FailsFirst,
    /// Fails permanently at every attempt (`JobError::permanent`): dead.
    Dies,
}

/// The fate of member `id`: one in ten dies (`id % 10 == 0`), one in ten fails once first
/// (`id % 10 == 1`), the rest succeed.
pub fn member_fate(id: u64) -> Fate {
    match id % 10 {
        0 => Fate::Dies,
        1 => Fate::FailsFirst,
        _ => Fate::Succeeds,
    }
}

/// How long a worker process may take to print `ready`.
pub const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// One scenario: a private Redis, a namespace, a directory for ledgers and logs, the worker
/// processes, and the record of what was enqueued and which faults were injected.
pub struct Scenario {
    /// The scenario's name, for reports.
    pub name: &'static str,
    /// Its private Redis.
    pub server: RedisServer,
    /// Ledgers and logs live here.
    pub dir: tempfile::TempDir,
    /// The key namespace.
    pub ns: String,
    /// A client straight to Redis (no proxy), for producing and inspecting.
    pub client: Client,
    /// Worker processes, by index (a respawn replaces its slot).
    pub workers: Vec<WorkerProcess>,
    /// Faults injected so far.
    pub faults: Vec<Fault>,
    /// What was enqueued.
    pub expected: Expected,
    binary: PathBuf,
    spawned: usize,
    started: Instant,
    /// Held for the scenario's life, so that the scenarios of one test binary run one at a
    /// time (declared last: released after the workers and Redis are gone).
    _serial: tokio::sync::OwnedMutexGuard<()>,
}

/// One scenario at a time per test binary. Scenarios run several worker processes and a Redis
/// each, with leases of about a second; two at once on a 2-core machine can starve a worker
/// long enough to lose a lease, and a duplicate run no fault explains fails the scenario.
static SERIAL: std::sync::LazyLock<std::sync::Arc<tokio::sync::Mutex<()>>> =
    std::sync::LazyLock::new(Default::default);

impl std::fmt::Debug for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scenario")
            .field("name", &self.name)
            .field("ns", &self.ns)
            .field("workers", &self.workers)
            .finish_non_exhaustive()
    }
}

impl Scenario {
    /// Waits until no other scenario of this binary runs, then starts a Redis with `options`
    /// and connects a client. `binary` is the test's
    /// `env!("CARGO_BIN_EXE_fault-worker")`.
    pub async fn start(name: &'static str, binary: &str, options: ServerOptions) -> Scenario {
        let serial = SERIAL.clone().lock_owned().await;
        let server = RedisServer::start_with(options);
        let ns = dq_testkit::namespace("faults");
        let client = Client::builder()
            .namespace(&ns)
            .connect(&server.url())
            .await
            .unwrap_or_else(|e| panic!("{name}: connect: {e}"));
        let mut dir = tempfile::Builder::new()
            .prefix(&format!("dq-faults-{name}-"))
            .tempdir()
            .unwrap_or_else(|e| panic!("{name}: tempdir: {e}"));
        if std::env::var_os("DQ_FAULTS_KEEP").is_some() {
            dir.disable_cleanup(true);
            eprintln!("{name}: ledgers and logs kept in {}", dir.path().display());
        }
        Scenario {
            name,
            server,
            dir,
            ns,
            client,
            workers: Vec::new(),
            faults: Vec::new(),
            expected: Expected::default(),
            binary: PathBuf::from(binary),
            spawned: 0,
            started: Instant::now(),
            _serial: serial,
        }
    }

    /// A spec for a worker of this scenario's Redis and namespace (topic `fault.work`,
    /// concurrency 8, lease 1 s).
    pub fn spec(&self) -> WorkerSpec {
        WorkerSpec::new(self.server.url(), &self.ns)
    }

    /// Starts a worker and waits for its `ready`; returns its index in `workers`.
    pub fn spawn(&mut self, spec: &WorkerSpec) -> usize {
        let mut w = self.spawn_unready(spec);
        w.wait_ready(READY_TIMEOUT);
        self.workers.push(w);
        self.workers.len() - 1
    }

    /// Starts a worker without waiting for `ready` (e.g. while Redis is down).
    pub fn spawn_unready(&mut self, spec: &WorkerSpec) -> WorkerProcess {
        self.spawned += 1;
        let name = format!("w{:03}", self.spawned);
        WorkerProcess::spawn(&self.binary, spec, self.dir.path(), &name)
    }

    /// Replaces worker `i` (which must have exited) with a fresh one and waits for `ready`.
    pub fn respawn(&mut self, i: usize, spec: &WorkerSpec) {
        let mut w = self.spawn_unready(spec);
        w.wait_ready(READY_TIMEOUT);
        self.workers[i] = w;
    }

    /// `SIGKILL`s worker `i` and records the fault.
    pub fn kill(&mut self, i: usize) {
        let pid = self.workers[i].pid();
        let at = self.workers[i].kill();
        self.faults.push(Fault {
            what: format!("SIGKILL {} (pid {pid})", self.workers[i].name()),
            pid: Some(pid),
            start_ms: at,
            end_ms: at,
        });
    }

    /// Records a fault that hit every process from `start_ms` to now.
    pub fn record_global_fault(&mut self, what: impl Into<String>, start_ms: u64) {
        self.faults.push(Fault {
            what: what.into(),
            pid: None,
            start_ms,
            end_ms: ledger::now_ms(),
        });
    }

    /// Enqueues jobs `ids` of `J` in bulk, keys `{prefix}-{id}`, each working `sleep_ms`,
    /// and records them as accepted. Panics on error.
    pub async fn enqueue_bulk<J: Job<Payload = FaultPayload>>(
        &mut self,
        prefix: &str,
        ids: std::ops::Range<u64>,
        sleep_ms: u64,
    ) {
        let jobs: Vec<JobSpec<FaultPayload>> = ids
            .clone()
            .map(|i| JobSpec::new(FaultPayload::new(i, sleep_ms)).key(format!("{prefix}-{i}")))
            .collect();
        for chunk in jobs.chunks(5_000) {
            let done = self
                .client
                .enqueue_bulk::<J>(chunk.to_vec())
                .await
                .unwrap_or_else(|e| panic!("{}: bulk enqueue: {e}", self.name));
            let at = ledger::now_ms();
            for d in done {
                self.expected.ok.insert(d.key.to_string(), at);
            }
        }
    }

    /// Enqueues one job of `J` with key `key` and records the outcome: `Ok` → accepted,
    /// error → ambiguous. Returns the result.
    pub async fn enqueue_one<J: Job<Payload = FaultPayload>>(
        &mut self,
        key: &str,
        payload: FaultPayload,
    ) -> dq::Result<dq::Enqueued> {
        let started = ledger::now_ms();
        let result = self.client.enqueue::<J>(payload).key(key).await;
        self.expected.call_started.insert(key.to_string(), started);
        match &result {
            Ok(_) => {
                self.expected.ok.insert(key.to_string(), ledger::now_ms());
            }
            Err(_) => {
                self.expected.ambiguous.insert(key.to_string());
            }
        }
        result
    }

    /// The stats of `topic`.
    pub async fn stats(&self, topic: &str) -> dq::Result<TopicStats> {
        self.client.topic(topic)?.stats().await
    }

    /// Waits until `topic` has nothing scheduled, ready, running or in retry; panics after
    /// `timeout`, quoting the stats and the workers' logs.
    pub async fn wait_settled(&self, topic: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let last = match self.stats(topic).await {
                Ok(s) if s.scheduled + s.ready + s.active + s.retry == 0 => return,
                Ok(s) => format!("{s:?}"),
                Err(e) => format!("stats failed: {e}"),
            };
            if Instant::now() >= deadline {
                panic!(
                    "{}: {topic} not settled after {timeout:?}; last stats {last}\n{}",
                    self.name,
                    self.logs(15)
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Reads the store and the ledgers and reconciles them with what was enqueued.
    pub async fn reconcile(&self) -> Reconciliation {
        let snapshot = self.snapshot().await;
        let (entries, torn) = ledger::read_dir(self.dir.path());
        Reconciliation::compute(&self.expected, &snapshot, &entries, torn, &self.faults)
    }

    /// Every ledger entry so far.
    pub fn ledger(&self) -> Vec<ledger::Entry> {
        ledger::read_dir(self.dir.path()).0
    }

    /// The namespace's keys as they are now, read over a connection of its own.
    pub async fn snapshot(&self) -> Snapshot {
        let options = dq::store::RedisOptions {
            namespace: self.ns.clone(),
            // The checks are the scenario's business (it may have filled the server on purpose).
            check_server: false,
            ..dq::store::RedisOptions::default()
        };
        let store = dq::store::RedisStore::connect(&self.server.url(), options)
            .await
            .unwrap_or_else(|e| panic!("{}: connecting to read the store: {e}", self.name));
        Snapshot::read(&store)
            .await
            .unwrap_or_else(|e| panic!("{}: reading the store: {e}", self.name))
    }

    /// Asserts the reconciliation has no problems (and, unless `dead_ok`, no dead job), and
    /// prints the scenario's report line.
    pub fn assert_clean(&self, r: &Reconciliation, dead_ok: &[&str]) {
        println!(
            "SCENARIO {}: {} faults={} elapsed={:.1}s",
            self.name,
            r.summary(),
            self.faults.len(),
            self.started.elapsed().as_secs_f64()
        );
        let mut problems = r.problems();
        let unexpected_dead: Vec<&String> = r
            .dead
            .iter()
            .filter(|k| !dead_ok.contains(&k.as_str()))
            .collect();
        if !unexpected_dead.is_empty() {
            problems.push(format!("unexpected dead jobs: {unexpected_dead:?}"));
        }
        if !r.recreated.is_empty() {
            println!(
                "SCENARIO {}: FINDING reproduced: {} job(s) ran twice because a retried enqueue \
                 re-created them after they had run: {:?}",
                self.name,
                r.recreated.len(),
                r.recreated
            );
        }
        assert!(
            problems.is_empty(),
            "{}: {}\nproblems:\n  {}\nfaults: {:?}\n{}",
            self.name,
            r.summary(),
            problems.join("\n  "),
            self.faults,
            self.logs(15)
        );
    }

    /// Stops every live worker with `SIGTERM` (graceful) and checks each exits in time.
    pub fn stop_workers(&mut self) {
        for w in &mut self.workers {
            if w.exited().is_none() {
                w.signal("CONT");
                let status = w.terminate(Duration::from_secs(20));
                assert!(
                    status.success(),
                    "worker {} exited with {status:?}; log:\n{}",
                    w.name(),
                    w.log_tail(20)
                );
            }
        }
    }

    /// The last `n` lines of every worker's log, for failure messages.
    pub fn logs(&self, n: usize) -> String {
        self.workers
            .iter()
            .map(|w| format!("--- {} (pid {}) ---\n{}", w.name(), w.pid(), w.log_tail(n)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The directory of ledgers and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}
