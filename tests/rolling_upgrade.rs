//! Rolling upgrades on a real Redis (docs/UPGRADING.md): processes of different format levels
//! share a topic through the namespace's registry of record formats (`<ns>:formats`).
//!
//! The old process is a second OS process: this test binary started again with
//! `DQ_ROLLING_CHILD` set, running only [`rolling_child`], which acts as a dq that reads
//! formats up to 1 or up to 2 only (`ClientBuilder::format_level`): the dq before versioned
//! records, or the one before the lean lease (format 3). It reports on stdout (`rolling: …`
//! lines) and takes orders on stdin; every job run, by either process, appends a line to a
//! ledger file: key, payload, and the format level of the process that ran it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use dq::store::redis::layout::{self, PartitionKeys};
use dq::store::{LEGACY_FORMAT, NEWEST_FORMAT, Queue, RedisOptions, RedisStore};
use dq::{Client, Error, JobContext, JobError, JobState, NewDue, Topic, Worker, WorkerHandle};
use dq_testkit::{RedisServer, eventually, eventually_some, namespace};
use serde::{Deserialize, Serialize};

const TOPIC: &str = "rolling.orders";
const PARTITIONS: u16 = 2;
/// Generous: the machine is shared and loaded.
const WAIT: Duration = Duration::from_secs(60);
/// A short format beat, so an exited process stops holding the level within a second or so.
const BEAT: Duration = Duration::from_millis(200);
/// Set in a child process: `<mode> <redis url> <namespace> <ledger path> <old level>`.
const CHILD: &str = "DQ_ROLLING_CHILD";
/// How a child's report lines start on its stdout (the test harness prints its own lines).
const SAYS: &str = "rolling: ";

/// The payload: a handler that got the fields swapped would record a wrong pair.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Order {
    order_id: u64,
    user_id: u64,
}

fn order(id: u64) -> Order {
    Order {
        order_id: id,
        user_id: id * 10 + 7,
    }
}

fn key(id: u64) -> String {
    format!("order-{id}")
}

/// Where runs are written down, and the format level of the process that runs them.
struct Ledger {
    path: PathBuf,
    reads: u8,
}

impl Ledger {
    /// Appends `<key> <order_id> <user_id> <reads>` (one write: lines of two processes never
    /// interleave).
    fn record(&self, key: &str, order: &Order) -> std::io::Result<()> {
        let line = format!(
            "{key} {} {} {}\n",
            order.order_id, order.user_id, self.reads
        );
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?
            .write_all(line.as_bytes())
    }
}

#[dq::delayed_job(topic = "rolling.orders", retry = "fixed(50ms, 20)")]
async fn close_order(order: Order, ctx: JobContext) -> Result<(), JobError> {
    let ledger = ctx.data::<Arc<Ledger>>()?;
    ledger
        .record(ctx.key.as_str(), &order)
        .map_err(JobError::retry)
}

/// A client acting as a dq that reads formats up to `level`.
async fn connect(url: &str, ns: &str, level: u8) -> dq::Result<Client> {
    Client::builder()
        .namespace(ns)
        .partitions(TOPIC, PARTITIONS)
        .format_level(level)
        .format_beat(BEAT)
        .connect_timeout(Duration::from_secs(20))
        .connect(url)
        .await
}

async fn start_worker(client: &Client, ledger: Ledger) -> WorkerHandle {
    Worker::builder(client.clone())
        .topics([TOPIC])
        .data(Arc::new(ledger))
        .heartbeat(Duration::from_millis(100))
        .idle_wait(Duration::from_millis(200))
        .build()
        .expect("worker settings")
        .start()
        .await
        .expect("the worker starts")
}

async fn enqueue(client: &Client, ids: impl IntoIterator<Item = u64>, delay: Duration) {
    for id in ids {
        client
            .enqueue::<close_order>(order(id))
            .key(key(id))
            .delay(delay)
            .await
            .expect("enqueue");
    }
}

/// The first byte of job `id`'s record, from whichever partition holds it.
fn first_byte(server: &RedisServer, ns: &str, id: u64) -> u8 {
    let mut conn = server.connection();
    for p in 0..PARTITIONS {
        let keys = PartitionKeys::new(ns, &Queue::new(Topic::new(TOPIC).unwrap(), p));
        let record: Option<Vec<u8>> = dq_testkit::redis::cmd("HGET")
            .arg(&keys.jobs)
            .arg(key(id))
            .query(&mut conn)
            .expect("HGET");
        if let Some(record) = record {
            return record[0];
        }
    }
    panic!("no record of {}", key(id));
}

/// A record whose first byte is a state letter is format 1 (docs/UPGRADING.md).
fn is_format_1(byte: u8) -> bool {
    JobState::from_code(byte).is_some()
}

/// Every ledger line, by key: the payloads recorded and the levels that ran them.
fn read_ledger(path: &Path) -> BTreeMap<String, Vec<(Order, u8)>> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut runs: BTreeMap<String, Vec<(Order, u8)>> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let [key, order_id, user_id, reads] = f[..] else {
            panic!("ledger line {line:?}");
        };
        let o = Order {
            order_id: order_id.parse().unwrap(),
            user_id: user_id.parse().unwrap(),
        };
        runs.entry(key.to_string())
            .or_default()
            .push((o, reads.parse().unwrap()));
    }
    runs
}

/// A child process of this test binary, killed (by its pid) if the test ends without.
struct ChildProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
}

impl ChildProcess {
    fn spawn(mode: &str, url: &str, ns: &str, ledger: &Path, level: u8) -> ChildProcess {
        let mut child = Command::new(std::env::current_exe().expect("the test binary"))
            .args(["rolling_child", "--exact", "--ignored", "--nocapture"])
            .env(
                CHILD,
                format!("{mode} {url} {ns} {} {level}", ledger.display()),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the child process");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if let Some(said) = line.strip_prefix(SAYS)
                    && tx.send(said.to_string()).is_err()
                {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        ChildProcess {
            child,
            stdin,
            lines,
        }
    }

    /// The next report line of the child.
    async fn says(&mut self) -> String {
        tokio::time::timeout(WAIT, self.lines.recv())
            .await
            .expect("the child reports in time")
            .expect("the child is still reporting")
    }

    fn tell(&mut self, order: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{order}").expect("tell the child");
        stdin.flush().unwrap();
    }

    /// Kills it by its pid (SIGKILL: nothing runs after) and reaps it.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What a child process does; returns at once in an ordinary test run.
#[tokio::test]
#[ignore = "a child process of the rolling-upgrade tests, started by them with DQ_ROLLING_CHILD"]
async fn rolling_child() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let f: Vec<&str> = spec.split(' ').collect();
    let [mode, url, ns, ledger, level] = f[..] else {
        panic!("{CHILD}={spec:?}");
    };
    let level: u8 = level.parse().expect("the old level");
    let say = |what: &str| {
        println!("{SAYS}{what}");
        std::io::stdout().flush().unwrap();
    };
    match mode {
        // The old process: a dq that reads formats up to `level` only, producer and worker.
        "old" => {
            let client = connect(url, ns, level).await.expect("connect");
            say(&format!("writes {}", client.store().formats().write()));
            let worker = start_worker(
                &client,
                Ledger {
                    path: ledger.into(),
                    reads: level,
                },
            )
            .await;
            enqueue(&client, 1..=10, Duration::ZERO).await;
            enqueue(&client, 11..=20, Duration::from_secs(2)).await;
            say("ready");
            // Orders on stdin (read by a thread: stdin blocks): "stop" stops the worker;
            // the end of stdin (the test is gone) ends the process.
            let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
            std::thread::spawn(move || {
                let mut stop_tx = Some(stop_tx);
                for line in std::io::stdin().lock().lines() {
                    match line.as_deref() {
                        Ok("stop") => {
                            if let Some(tx) = stop_tx.take() {
                                let _ = tx.send(());
                            }
                        }
                        Ok(_) => {}
                        Err(_) => break,
                    }
                }
                std::process::exit(0);
            });
            let _ = stop_rx.await;
            // Graceful: the jobs it runs finish, so each runs once; the client stays
            // registered until the process is killed, and its registration then expires.
            worker.shutdown().await;
            say("stopped");
            std::future::pending::<()>().await;
        }
        // A dq that reads formats up to `level` only, started once the namespace writes the
        // newest.
        "late" => match connect(url, ns, level).await {
            Err(Error::FormatTooOld { level, reads }) => {
                say(&format!("refused level={level} reads={reads}"));
            }
            Err(e) => say(&format!("failed {e}")),
            Ok(_) => say("connected"),
        },
        other => panic!("unknown child mode {other:?}"),
    }
}

/// An old process (format level 1: producer and worker) and a new one (the newest level)
/// share a topic. While the old lives the namespace stays at level 1 and the new process
/// writes format 1; once the old exits (killed by its pid) its registration expires, the level
/// rises to the newest and the new process writes it; a level-1 process started then is
/// refused at connect and writes nothing. Every job, enqueued by either, runs exactly once
/// with its own payload, and nothing is stranded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_and_new_processes_share_a_topic_through_a_rolling_upgrade() {
    rolling_upgrade_from(LEGACY_FORMAT).await;
}

/// The same from the dq before the lean lease (format level 2: records with a version byte
/// and the token in them) to this one (format 3): while the old process lives both write and
/// lease format 2; then the level rises to 3 and format-2 and format-3 jobs drain side by side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_2_dq_and_a_format_3_dq_share_a_topic_through_a_rolling_upgrade() {
    rolling_upgrade_from(2).await;
}

/// The record format an old process at `level` writes, by its first byte.
fn written_by(level: u8, byte: u8) -> bool {
    if level == LEGACY_FORMAT {
        is_format_1(byte)
    } else {
        byte == level
    }
}

async fn rolling_upgrade_from(old_level: u8) {
    let server = RedisServer::start();
    let url = server.url();
    let ns = namespace("rolling");
    let ledger = server.dir().join("rolling.ledger");

    // 1. The old process connects, starts its worker and enqueues 20 jobs.
    let mut old = ChildProcess::spawn("old", &url, &ns, &ledger, old_level);
    assert_eq!(old.says().await, format!("writes {old_level}"));
    assert_eq!(old.says().await, "ready");

    // 2. The new process: the old one is live, so the level stays at the old one's and it
    //    writes that format.
    let new = connect(&url, &ns, NEWEST_FORMAT).await.expect("connect");
    let formats = new.store().formats();
    assert_eq!(
        (formats.reads(), formats.write()),
        (NEWEST_FORMAT, old_level)
    );
    let registry = new.admin().formats().await.unwrap();
    assert_eq!(registry.level.level, old_level);
    let reads: BTreeSet<u8> = registry.processes.iter().map(|p| p.reads).collect();
    assert_eq!(reads, BTreeSet::from([old_level, NEWEST_FORMAT]));
    let worker = start_worker(
        &new,
        Ledger {
            path: ledger.clone(),
            reads: NEWEST_FORMAT,
        },
    )
    .await;
    enqueue(&new, 101..=110, Duration::ZERO).await;
    enqueue(&new, 111..=120, Duration::from_secs(1)).await;
    enqueue(&new, [500], Duration::from_secs(3600)).await;
    let byte = first_byte(&server, &ns, 500);
    assert!(
        written_by(old_level, byte),
        "written at level {old_level}: format {old_level}, got {byte:#x}"
    );

    // Several beats of both processes later, the old one still holds the level.
    let old_beat = |r: &dq::store::FormatRegistry| {
        r.processes
            .iter()
            .find(|p| p.reads == old_level)
            .map(|p| p.beat_ms)
    };
    let first = old_beat(&registry).expect("the old process is registered");
    eventually("the old process beats again", WAIT, || {
        let new = new.clone();
        async move {
            let r = new.admin().formats().await.unwrap();
            old_beat(&r).is_some_and(|b| b > first + 3 * BEAT.as_millis() as u64)
        }
    })
    .await;
    assert_eq!(new.admin().formats().await.unwrap().level.level, old_level);
    assert_eq!(new.store().formats().write(), old_level);

    // 3. The old process stops its worker, then is killed: its registration expires and
    //    the level rises to the newest within a few beats; the new process writes it.
    old.tell("stop");
    assert_eq!(old.says().await, "stopped");
    old.kill();
    eventually(
        "the level rises to the newest and the new process writes it",
        WAIT,
        || {
            let new = new.clone();
            async move {
                new.admin().formats().await.unwrap().level.level == NEWEST_FORMAT
                    && new.store().formats().write() == NEWEST_FORMAT
            }
        },
    )
    .await;
    enqueue(&new, [501], Duration::from_secs(3600)).await;
    let byte = first_byte(&server, &ns, 501);
    // The newest format: the record starts with its version byte.
    assert_eq!(
        byte, NEWEST_FORMAT,
        "written at the newest level: {byte:#x}"
    );

    // 4. An old-level process started now is refused at connect and writes nothing.
    let enqueued = new.stats::<close_order>().await.unwrap().enqueued;
    let mut late = ChildProcess::spawn("late", &url, &ns, &ledger, old_level);
    assert_eq!(
        late.says().await,
        format!("refused level={NEWEST_FORMAT} reads={old_level}")
    );
    late.kill();
    assert_eq!(new.stats::<close_order>().await.unwrap().enqueued, enqueued);
    let registry = new.admin().formats().await.unwrap();
    let ids: Vec<&str> = registry.processes.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, [new.registered_process().unwrap().id.as_str()]);

    // 5. More jobs, and the two far-off probes made due: every job runs exactly once with
    //    its own payload, and nothing is left anywhere.
    enqueue(&new, 201..=210, Duration::ZERO).await;
    for id in [500, 501] {
        new.reschedule::<close_order>(&key(id), NewDue::After(Duration::ZERO))
            .await
            .unwrap();
    }
    let expected: BTreeSet<String> = (1..=20)
        .chain(101..=120)
        .chain(201..=210)
        .chain([500, 501])
        .map(key)
        .collect();
    eventually_some("every job ran and the topic is empty", WAIT, || {
        let (new, ledger, expected) = (new.clone(), ledger.clone(), expected.clone());
        async move {
            let s = new.stats::<close_order>().await.ok()?;
            let empty = s.scheduled + s.ready + s.active + s.retry + s.dead == 0;
            let ran: BTreeSet<String> = read_ledger(&ledger).into_keys().collect();
            (empty && ran == expected).then_some(())
        }
    })
    .await;
    worker.shutdown().await;
    for (key, runs) in read_ledger(&ledger) {
        assert_eq!(runs.len(), 1, "{key} ran {} times: {runs:?}", runs.len());
        let id: u64 = key.trim_start_matches("order-").parse().unwrap();
        assert_eq!(
            runs[0].0,
            order(id),
            "{key} was decoded with another payload"
        );
    }
    let stats = new.stats::<close_order>().await.unwrap();
    assert_eq!((stats.buried, stats.retried), (0, 0), "{stats:?}");
    let store = RedisStore::connect(
        &url,
        RedisOptions {
            namespace: ns.clone(),
            ..RedisOptions::default()
        },
    )
    .await
    .unwrap();
    let violations = layout::check_invariants(&store).await.unwrap();
    assert!(violations.is_empty(), "{violations:?}");
}

/// A worker of a dq from before the registry registers only in `<ns>:workers`, with no
/// `reads_format` in its record: it reads format 1, so a new process keeps the level at 1 and
/// writes format 1 while that worker is live, and raises it once the worker is gone.
#[tokio::test]
async fn a_worker_of_the_dq_before_versioned_formats_holds_the_level_at_1() {
    /// `WorkerInfo` as the dq before versioned formats wrote it: no `reads_format`.
    #[derive(Serialize)]
    struct WorkerInfoBefore {
        id: String,
        host: String,
        pid: u32,
        topics: Vec<String>,
        concurrency: usize,
        started_ms: u64,
        running: usize,
        version: String,
        beat_ms: u64,
        expires_ms: u64,
    }
    let server = RedisServer::start();
    let ns = namespace("rolling");
    let record = rmp_serde::to_vec_named(&WorkerInfoBefore {
        id: "old-host-1-0000".into(),
        host: "old-host".into(),
        pid: 1,
        topics: vec![TOPIC.into()],
        concurrency: 4,
        started_ms: 0,
        running: 0,
        version: "0.1.0".into(),
        beat_ms: 0,
        expires_ms: 0,
    })
    .unwrap();
    // Its heartbeat as `workers.lua` stores it, `<expires_ms>|<beat_ms>|<record>`, live for
    // ten minutes by the server's clock.
    let mut conn = server.connection();
    let (secs, _): (u64, u64) = dq_testkit::redis::cmd("TIME").query(&mut conn).unwrap();
    let now_ms = secs * 1000;
    let mut value = format!("{}|{now_ms}|", now_ms + 600_000).into_bytes();
    value.extend_from_slice(&record);
    let _: () = dq_testkit::redis::cmd("HSET")
        .arg(layout::workers_key(&ns))
        .arg("old-host-1-0000")
        .arg(value)
        .query(&mut conn)
        .unwrap();

    let new = connect(&server.url(), &ns, NEWEST_FORMAT)
        .await
        .expect("connect");
    let workers = new.workers().await.unwrap();
    assert_eq!(workers.len(), 1);
    assert_eq!(workers[0].reads_format, LEGACY_FORMAT);
    assert_eq!(
        new.admin().formats().await.unwrap().level.level,
        LEGACY_FORMAT
    );
    assert_eq!(new.store().formats().write(), LEGACY_FORMAT);
    // Several beats later, still 1.
    let me = new.registered_process().unwrap().id;
    let since = new.admin().formats().await.unwrap().processes[0].beat_ms;
    eventually("the new process beats again", WAIT, || {
        let (new, me) = (new.clone(), me.clone());
        async move {
            let r = new.admin().formats().await.unwrap();
            r.processes
                .iter()
                .any(|p| p.id == me && p.beat_ms > since + 3 * BEAT.as_millis() as u64)
        }
    })
    .await;
    assert_eq!(
        new.admin().formats().await.unwrap().level.level,
        LEGACY_FORMAT
    );
    assert_eq!(new.store().formats().write(), LEGACY_FORMAT);

    // The old worker gone, the level rises.
    let _: () = dq_testkit::redis::cmd("HDEL")
        .arg(layout::workers_key(&ns))
        .arg("old-host-1-0000")
        .query(&mut conn)
        .unwrap();
    eventually("the level rises to 2", WAIT, || {
        let new = new.clone();
        async move {
            new.admin().formats().await.unwrap().level.level == NEWEST_FORMAT
                && new.store().formats().write() == NEWEST_FORMAT
        }
    })
    .await;
}

/// The registry's rules on Redis: a hold stops the level below the newest format and cannot
/// lower it; a release lets it rise at the next beat; the level never goes back, and a
/// process reading less than it is refused, by the typed error, and left unregistered.
#[tokio::test]
async fn a_hold_keeps_the_level_and_the_level_never_goes_back() {
    let server = RedisServer::start();
    let ns = namespace("rolling");
    let url = server.url();
    let tool = Client::builder()
        .namespace(&ns)
        .unregistered()
        .connect(&url)
        .await
        .unwrap();
    assert_eq!(
        tool.admin().formats().await.unwrap().level.level,
        LEGACY_FORMAT,
        "a fresh namespace is at level 1"
    );
    assert!(tool.registered_process().is_none());
    tool.admin().hold_format(LEGACY_FORMAT).await.unwrap();

    let new = connect(&url, &ns, NEWEST_FORMAT).await.unwrap();
    let r = new.admin().formats().await.unwrap();
    assert_eq!(
        (r.level.level, r.level.hold),
        (LEGACY_FORMAT, Some(LEGACY_FORMAT))
    );
    assert_eq!(new.store().formats().write(), LEGACY_FORMAT);
    // An old process (a producer: no worker) may still join while the hold keeps the level
    // at 1, and once released, its registration alone holds the level at 1.
    let old = connect(&url, &ns, LEGACY_FORMAT).await.unwrap();
    tool.admin().release_format().await.unwrap();
    let me = new.registered_process().unwrap().id;
    let since = new.admin().formats().await.unwrap();
    let since = since.processes.iter().find(|p| p.id == me).unwrap().beat_ms;
    eventually("the new process beats again", WAIT, || {
        let (new, me) = (new.clone(), me.clone());
        async move {
            let r = new.admin().formats().await.unwrap();
            r.processes
                .iter()
                .any(|p| p.id == me && p.beat_ms > since + 3 * BEAT.as_millis() as u64)
        }
    })
    .await;
    assert_eq!(new.store().formats().write(), LEGACY_FORMAT);
    assert_eq!(
        new.admin().formats().await.unwrap().level.level,
        LEGACY_FORMAT
    );
    drop(old);
    eventually(
        "released and the old process gone, the level rises at a beat",
        WAIT,
        || {
            let new = new.clone();
            async move { new.store().formats().write() == NEWEST_FORMAT }
        },
    )
    .await;
    let r = new.admin().formats().await.unwrap();
    assert_eq!((r.level.level, r.level.hold), (NEWEST_FORMAT, None));
    match tool.admin().hold_format(LEGACY_FORMAT).await {
        Err(Error::InvalidConfig(msg)) => assert!(msg.contains("cannot lower"), "{msg}"),
        other => panic!("a hold below the level is refused: {other:?}"),
    }
    match tool.admin().hold_format(0).await {
        Err(Error::InvalidConfig(_)) => {}
        other => panic!("format 0 is no format: {other:?}"),
    }
    match connect(&url, &ns, LEGACY_FORMAT).await {
        Err(Error::FormatTooOld { level, reads }) => {
            assert_eq!((level, reads), (NEWEST_FORMAT, LEGACY_FORMAT));
        }
        other => panic!("a level-1 process is refused: {other:?}"),
    }
    match Client::builder()
        .namespace(&ns)
        .unregistered()
        .format_level(LEGACY_FORMAT)
        .connect(&url)
        .await
    {
        Err(Error::FormatTooOld { .. }) => {}
        other => panic!("an unregistered level-1 tool is refused too: {other:?}"),
    }
    let r = new.admin().formats().await.unwrap();
    assert!(
        r.processes.iter().all(|p| p.reads == NEWEST_FORMAT),
        "{r:?}"
    );
    // Dropping the client removes its registration (best effort, soon).
    drop(new);
    eventually("a dropped client leaves the registry", WAIT, || {
        let (tool, me) = (tool.clone(), me.clone());
        async move {
            let r = tool.admin().formats().await.unwrap();
            r.processes.iter().all(|p| p.id != me)
        }
    })
    .await;
}
