//! Faults in the data: Redis at `maxmemory` (`noeviction`), and records corrupted by hand.

use std::time::Duration;

use dq::store::redis::layout::{PartitionKeys, RecordHeader};
use dq::store::{LEGACY_FORMAT, NEWEST_FORMAT};
use dq::{AttemptOutcome, CancelOutcome, Error, JobSpec, JobState};
use dq_faults::check::runs;
use dq_faults::ledger::{Kind, now_ms};
use dq_faults::{FaultPayload, Scenario, WORK_TOPIC, WorkJob, WorkerSpec};
use dq_testkit::{ServerOptions, eventually};

const BIN: &str = env!("CARGO_BIN_EXE_fault-worker");

fn spec(s: &Scenario, concurrency: usize, lease_ms: u64) -> WorkerSpec {
    let mut spec = s.spec();
    spec.concurrency = concurrency;
    spec.lease = Duration::from_millis(lease_ms);
    spec
}

/// The keys of the work topic's only partition.
fn keys(s: &Scenario) -> PartitionKeys {
    let topic = dq::Topic::new(WORK_TOPIC).expect("a valid topic");
    PartitionKeys::new(&s.ns, &dq::store::Queue::new(topic, 0))
}

fn info_field(server: &dq_testkit::RedisServer, section: &str, field: &str) -> u64 {
    let info: String = server.cmd(&["INFO", section]);
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO {section} has no {field}"))
}

/// Sets `maxmemory` to what Redis uses now plus `headroom` bytes.
fn cap_memory(s: &Scenario, headroom: u64) {
    let used = info_field(&s.server, "memory", "used_memory");
    s.server
        .cmd::<()>(&["CONFIG", "SET", "maxmemory", &(used + headroom).to_string()]);
}

/// Bulk-enqueues padded jobs `{prefix}-{n}` (due after `delay`) in chunks of 100 until Redis
/// refuses one, then lowers `maxmemory` 512 KiB below what is used, so that Redis stays at its
/// limit for small commands too (a refused chunk frees its own query buffer, which would
/// otherwise let the next small write through). Returns the refusal. Accepted jobs are
/// recorded as expected.
async fn fill(s: &mut Scenario, prefix: &str, delay: Duration) -> Error {
    let pad = "x".repeat(500);
    for chunk in 0..10_000u64 {
        let jobs: Vec<JobSpec<FaultPayload>> = (0..100)
            .map(|i| {
                let id = chunk * 100 + i;
                let mut p = FaultPayload::new(id, 0);
                p.pad = pad.clone();
                let job = JobSpec::new(p).key(format!("{prefix}-{id}"));
                if delay.is_zero() {
                    job
                } else {
                    job.delay(delay)
                }
            })
            .collect();
        match s.client.enqueue_bulk::<WorkJob>(jobs).await {
            Ok(done) => {
                let at = now_ms();
                for d in done {
                    s.expected.ok.insert(d.key.to_string(), at);
                }
            }
            Err(e) => {
                // Well below what is used: the refused chunk's query buffer (tens of KiB) is
                // counted now but freed later, and must not bring Redis back under its limit.
                let used = info_field(&s.server, "memory", "used_memory");
                s.server.cmd::<()>(&[
                    "CONFIG",
                    "SET",
                    "maxmemory",
                    &(used - (512 << 10)).to_string(),
                ]);
                return e;
            }
        }
    }
    panic!("maxmemory was never reached");
}

fn records_len(s: &Scenario) -> u64 {
    s.server.cmd(&["HLEN", &keys(s).jobs])
}

/// Scenario 12: Redis at `maxmemory` with `noeviction`. Enqueue fails with
/// `Error::OutOfMemory` and writes nothing; nothing is evicted; cancel (a delete) works; the
/// worker still fetches and acks due jobs, which frees memory, after which enqueue works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maxmemory_refuses_enqueue_but_acks_and_deletes_work() {
    let mut s = Scenario::start("maxmemory", BIN, ServerOptions::default()).await;
    for i in 0..20u64 {
        let k = format!("later-{i}");
        s.client
            .enqueue::<WorkJob>(FaultPayload::new(i, 0))
            .key(&k)
            .delay(Duration::from_secs(3600))
            .await
            .unwrap();
        s.expected.ok.insert(k, now_ms());
    }
    cap_memory(&s, 2 << 20);
    let err = fill(&mut s, "fill", Duration::ZERO).await;
    assert!(matches!(err, Error::OutOfMemory), "{err:?}");
    let accepted = s.expected.ok.len() as u64;
    assert_eq!(
        records_len(&s),
        accepted,
        "nothing evicted, nothing half-written"
    );
    // A single enqueue is refused the same way.
    let one = s
        .client
        .enqueue::<WorkJob>(FaultPayload::new(0, 0))
        .key("refused")
        .await;
    assert!(matches!(one, Err(Error::OutOfMemory)), "{one:?}");
    assert_eq!(records_len(&s), accepted);

    // Deletes work at maxmemory.
    for i in 0..20 {
        let outcome = s
            .client
            .cancel::<WorkJob>(&format!("later-{i}"))
            .await
            .unwrap();
        assert_eq!(outcome, CancelOutcome::Cancelled);
        s.expected.cancelled.insert(format!("later-{i}"));
    }
    // Fetch and ack work at maxmemory: the worker drains every ready job.
    let mut w = spec(&s, 16, 1000);
    w.sleep = Some(Duration::ZERO);
    s.spawn(&w);
    s.wait_settled(WORK_TOPIC, Duration::from_secs(60)).await;
    assert_eq!(info_field(&s.server, "stats", "evicted_keys"), 0);
    // Memory is free again: enqueue works.
    s.enqueue_one::<WorkJob>("after", FaultPayload::new(1, 0))
        .await
        .unwrap();
    s.wait_settled(WORK_TOPIC, Duration::from_secs(10)).await;

    let rec = s.reconcile().await;
    s.assert_clean(&rec, &[]);
    println!("maxmemory: {accepted} jobs accepted before OutOfMemory; all drained");
    s.stop_workers();
}

/// FINDING: at `maxmemory`, `extend` is refused (`OutOfMemory`) — its first write is a
/// `ZADD … XX`, which Redis denies in a script that has not written yet — so every job longer
/// than a lease is cancelled and re-run until it is dead. Extending a lease does not grow
/// memory; it should work at `maxmemory` like ack and fail do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_extension_works_at_maxmemory() {
    let mut s = Scenario::start("maxmemory-extend", BIN, ServerOptions::default()).await;
    // A job of three leases: it finishes only if its lease is extended at maxmemory.
    s.spawn(&spec(&s, 1, 2000));
    s.enqueue_one::<WorkJob>("long", FaultPayload::new(1, 6000))
        .await
        .unwrap();
    eventually("the long job started", Duration::from_secs(10), || {
        let started = s.ledger().iter().any(|e| e.kind == Kind::Start);
        async move { started }
    })
    .await;
    cap_memory(&s, 1 << 20);
    let err = fill(&mut s, "later", Duration::from_secs(3600)).await;
    assert!(matches!(err, Error::OutOfMemory), "{err:?}");
    eventually(
        "the long job finished or was cancelled",
        Duration::from_secs(20),
        || {
            let r = runs(&s.ledger());
            let over = r["long"]
                .iter()
                .any(|r| r.finished.is_some() || r.cancelled);
            async move { over }
        },
    )
    .await;
    let r = &runs(&s.ledger())["long"];
    let log = s.workers[0].log_text();
    println!("extend at maxmemory: runs {r:?}");
    assert!(
        r[0].finished.is_some() && !r[0].cancelled,
        "the first run was cancelled: its lease could not be extended\n{}",
        s.workers[0].log_tail(10)
    );
    // (An extend that timed out on a loaded machine is not this finding: only OOM counts.)
    assert!(
        !log.lines()
            .any(|l| l.contains("could not extend leases") && l.contains("out of memory")),
        "{log}"
    );
}

/// Scenario 12b: at `maxmemory`, delayed jobs that come due are still delivered, so the worker
/// drains the partition and frees memory. (Redis refuses a script's first `denyoom` write,
/// such as `HSET`, while over `maxmemory`; `fetch` gets through because its first write is the
/// `LPOP` of `ready` — a write, but not `denyoom` — even when `ready` is empty. An earlier
/// `fetch` that promoted before popping failed as a whole here, and the partition stalled.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_jobs_coming_due_at_maxmemory_are_delivered() {
    let mut s = Scenario::start("maxmemory-promote", BIN, ServerOptions::default()).await;
    cap_memory(&s, 1 << 20);
    let err = fill(&mut s, "soon", Duration::from_secs(2)).await;
    assert!(matches!(err, Error::OutOfMemory), "{err:?}");
    let refused = s
        .client
        .enqueue::<WorkJob>(FaultPayload::new(0, 0))
        .key("refused")
        .await;
    assert!(matches!(refused, Err(Error::OutOfMemory)), "{refused:?}");
    let mut w = spec(&s, 16, 1000);
    w.sleep = Some(Duration::ZERO);
    s.spawn(&w);
    s.wait_settled(WORK_TOPIC, Duration::from_secs(30)).await;
    let failures = s.workers[0]
        .log_text()
        .lines()
        .filter(|l| l.contains("fetch failed"))
        .count();
    assert_eq!(failures, 0, "{}", s.workers[0].log_tail(5));
    let rec = s.reconcile().await;
    s.assert_clean(&rec, &[]);
    s.stop_workers();
}

/// Raw record bytes of a job never run, created when it is due: the layout's header in record
/// format `format` and a payload.
fn record(format: u8, state: JobState, due_ms: u64, payload: &[u8]) -> Vec<u8> {
    RecordHeader {
        format,
        state,
        attempts: 0,
        due_ms,
        created_ms: due_ms,
        token: 0,
        expires_ms: 0,
        priority: 5,
        group_len: 0,
        batch_len: 0,
    }
    .encode(payload)
}

fn hset(s: &Scenario, field: &str, value: &[u8]) {
    let mut conn = s.server.connection();
    let _: i64 = redis::cmd("HSET")
        .arg(keys(s).jobs)
        .arg(field)
        .arg(value)
        .query(&mut conn)
        .unwrap();
}

/// Scenario 13: data corrupted by hand. A record whose payload is garbage goes to the dead
/// queue with "undecodable payload"; a ready hint whose record is gone is skipped; the jobs
/// queued before and after them run. A record whose state is `S` but which is missing from
/// `scheduled` is *not* repaired today: it is checked to stay invisible to workers (see the
/// ignored finding test below), and removed before the final checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_records_are_dead_lettered_or_skipped_and_the_rest_proceeds() {
    let mut s = Scenario::start("corrupt-data", BIN, ServerOptions::default()).await;
    s.enqueue_bulk::<WorkJob>("before", 0..20, 5).await;
    let now = now_ms();
    hset(
        &s,
        "garbage",
        &record(NEWEST_FORMAT, JobState::Ready, now, b"\xc1\xc1 not msgpack"),
    );
    s.server.cmd::<()>(&["RPUSH", &keys(&s).ready, "garbage"]);
    s.expected.ok.insert("garbage".into(), now);
    s.server.cmd::<()>(&["RPUSH", &keys(&s).ready, "ghost"]);
    let valid = rmp_payload(&FaultPayload::new(7, 5));
    hset(
        &s,
        "orphan",
        &record(LEGACY_FORMAT, JobState::Scheduled, now - 1000, &valid),
    );
    s.expected.ok.insert("orphan".into(), now);
    s.enqueue_bulk::<WorkJob>("after", 0..30, 5).await;

    s.spawn(&spec(&s, 8, 1000));
    eventually("the well-formed jobs ran", Duration::from_secs(20), || {
        let n = s.ledger().iter().filter(|e| e.kind == Kind::Finish).count();
        async move { n >= 50 }
    })
    .await;
    let garbage = dq_testkit::eventually_some(
        "the garbage job is dead",
        Duration::from_secs(10),
        || async {
            s.client
                .job::<WorkJob>("garbage")
                .await
                .ok()
                .flatten()
                .filter(|j| j.state == JobState::Dead)
        },
    )
    .await;
    assert_eq!(garbage.history.len(), 1, "{:?}", garbage.history);
    assert_eq!(garbage.history[0].outcome, AttemptOutcome::Buried);
    assert!(
        garbage.history[0].error.contains("undecodable payload"),
        "{:?}",
        garbage.history
    );
    // The orphan (a record with no sorted-set entry) is found by the idle audit, re-linked
    // and run like any other job.
    eventually("the orphan ran", Duration::from_secs(10), || {
        let ran = runs(&s.ledger()).contains_key("orphan");
        async move { ran }
    })
    .await;
    s.wait_settled(WORK_TOPIC, Duration::from_secs(10)).await;
    let rec = s.reconcile().await;
    s.assert_clean(&rec, &["garbage"]);
    assert_eq!(rec.succeeded, 51);
    s.stop_workers();
}

fn rmp_payload(p: &FaultPayload) -> Vec<u8> {
    // The same MessagePack dq writes: serialise through the client's own encoder by enqueueing
    // would need a store; the encoding is rmp-serde's default (struct as array).
    dq::payload::encode(p, 1 << 20).expect("encodable")
}

/// FINDING: a record whose state says `S` (or `F`, `A`) but which is missing from its sorted
/// set is never delivered, repaired or dead-lettered: it sits in `jobs` for ever, counted as
/// "ready" by `stats`. It should be found (e.g. by a bounded background audit) and repaired or
/// moved to the dead queue with a reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphaned_record_is_repaired_or_dead_lettered() {
    let mut s = Scenario::start("corrupt-orphan", BIN, ServerOptions::default()).await;
    let now = now_ms();
    let valid = rmp_payload(&FaultPayload::new(7, 5));
    hset(
        &s,
        "orphan",
        &record(NEWEST_FORMAT, JobState::Scheduled, now - 1000, &valid),
    );
    s.expected.ok.insert("orphan".into(), now);
    s.spawn(&spec(&s, 8, 1000));
    s.enqueue_bulk::<WorkJob>("other", 0..10, 5).await;
    let ended = async {
        for _ in 0..200 {
            match s.client.job::<WorkJob>("orphan").await.unwrap() {
                None => return true,
                Some(j) if j.state == JobState::Dead => return true,
                Some(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        false
    };
    assert!(ended.await, "the orphan is still stuck after 10 s");
}

/// FINDING: a record shorter than its 20-byte header (or otherwise unreadable) makes `fetch`
/// raise a Lua error *after* it popped a batch of hints: Redis keeps the writes made so far,
/// so the jobs leased before the bad one wait for their lease to expire, and the jobs popped
/// after it lose their only hint and are never delivered. `fetch` should check a record
/// before unpacking it and bury a corrupt one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_record_does_not_strand_its_batch() {
    let mut s = Scenario::start("corrupt-truncated", BIN, ServerOptions::default()).await;
    s.enqueue_bulk::<WorkJob>("before", 0..4, 5).await;
    hset(&s, "short", b"R\x00\x01");
    s.server.cmd::<()>(&["RPUSH", &keys(&s).ready, "short"]);
    // and one of the versioned format, cut inside its header
    hset(&s, "short2", b"\x02R\x00\x01");
    s.server.cmd::<()>(&["RPUSH", &keys(&s).ready, "short2"]);
    s.enqueue_bulk::<WorkJob>("after", 0..4, 5).await;
    s.spawn(&spec(&s, 16, 1000));
    let done = async {
        for _ in 0..100 {
            let n = s.ledger().iter().filter(|e| e.kind == Kind::Finish).count();
            if n == 8 {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    };
    let all_ran = done.await;
    let violations = s.snapshot().await.violations();
    println!(
        "truncated record: all 8 good jobs ran: {all_ran}; invariants: {violations:?}; log: {}",
        s.workers[0].log_tail(3)
    );
    assert!(all_ran, "good jobs stranded behind a corrupt record");
}

/// Issue 9, edge 12: at `maxmemory`, every call that only reads works: a job's info, the
/// stats, the dead queue, the store's clock, and the wake listener's `BLPOP`. (`job` and the
/// dead-queue page were `MULTI` transactions, which Redis refuses whole at `maxmemory`; they
/// are now scripts declared `no-writes`, like `stats`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_calls_work_at_maxmemory() {
    let mut s = Scenario::start("maxmemory-reads", BIN, ServerOptions::default()).await;
    s.enqueue_one::<WorkJob>("waiting", FaultPayload::new(1, 0))
        .await
        .unwrap();
    s.enqueue_one::<WorkJob>("doomed", FaultPayload::new(2, 0))
        .await
        .unwrap();
    // One dead job, buried through the store (no worker runs in this test).
    let store = s.client.store().clone();
    let queue = dq::store::Queue::new(dq::Topic::new(WORK_TOPIC).unwrap(), 0);
    let req = dq::store::FetchRequest {
        max_jobs: 1,
        lease: Duration::from_secs(60),
        promote_batch: 10,
        recover_batch: 10,
        retry_policy: dq::RetryPolicy::none(),
        dead_limits: dq::DeadLimits::default(),
        call: dq::store::FetchCall::new(),
    };
    let d = store.fetch(&queue, &req).await.unwrap().jobs.remove(0);
    let failure = dq::store::FailedAttempt {
        key: d.key.clone(),
        token: d.token,
        action: dq::store::FailAction::Bury,
        error: "buried by the test".into(),
    };
    let mut out = store
        .fail_many(&queue, &[failure], dq::DeadLimits::default())
        .await
        .unwrap();
    out.remove(0).unwrap();
    cap_memory(&s, 1 << 20);
    let err = fill(&mut s, "fill", Duration::from_secs(3600)).await;
    assert!(matches!(err, Error::OutOfMemory), "{err:?}");

    let topic = s.client.topic(WORK_TOPIC).unwrap();
    let job = topic.job(d.key.as_str()).await.expect("job() at maxmemory");
    assert_eq!(job.map(|j| j.state), Some(JobState::Dead));
    let other = if d.key.as_str() == "waiting" {
        "doomed"
    } else {
        "waiting"
    };
    let job = topic.job(other).await.expect("job() at maxmemory");
    assert_eq!(job.map(|j| j.state), Some(JobState::Ready));
    let stats = topic.stats().await.expect("stats() at maxmemory");
    assert_eq!(stats.dead, 1, "{stats:?}");
    let dead = topic
        .list(JobState::Dead, dq::Page::first(10))
        .await
        .expect("dead jobs at maxmemory")
        .jobs;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].history.len(), 1, "{dead:?}");
    store.now_ms().await.expect("now_ms() at maxmemory");
    let mut listener = store.wake_listener(&queue).await.unwrap();
    listener
        .wait(Duration::from_millis(100))
        .await
        .expect("BLPOP at maxmemory");
    // Still full: an enqueue is refused.
    let refused = s
        .client
        .enqueue::<WorkJob>(FaultPayload::new(0, 0))
        .key("refused")
        .await;
    assert!(matches!(refused, Err(Error::OutOfMemory)), "{refused:?}");
}
