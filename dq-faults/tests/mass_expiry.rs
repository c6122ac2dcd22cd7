//! A mass expiry: many jobs due in the same millisecond (its own test binary, so that no other
//! scenario competes for the two cores while the slow log is measured).

use std::time::{Duration, Instant, SystemTime};

use dq::store::redis::layout::{script_keys, script_of_function};
use dq::{Client, JobSpec};
use dq_faults::ledger::now_ms;
use dq_faults::{FaultPayload, Scenario, WORK_TOPIC, WorkJob};
use dq_testkit::ServerOptions;
use tokio::task::block_in_place;

const BIN: &str = env!("CARGO_BIN_EXE_fault-worker");

/// Scenario 14: a mass expiry — many jobs due in the same millisecond. With the slow log at
/// 10 ms, no script call may take 50 ms or more, and every job is delivered exactly once.
///
/// 200,000 jobs by default (about 30 s); set `DQ_FAULTS_MASS_JOBS=1000000` for the full
/// million (about 2 min 15 s in a debug build on two cores; `--release` is faster).
///
/// The jobs are enqueued 250 per script call. The first 20,000 go through a client with dq's
/// default bulk chunk (1,000 per call) and their slowest enqueue call is only reported: on two
/// shared cores it takes 20-50 ms (see the report).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mass_expiry_has_no_slow_script_and_delivers_everything() {
    let jobs: u64 = std::env::var("DQ_FAULTS_MASS_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let mut s = Scenario::start("mass-expiry", BIN, ServerOptions::default()).await;
    s.server
        .cmd::<()>(&["CONFIG", "SET", "slowlog-log-slower-than", "10000"]);
    s.server
        .cmd::<()>(&["CONFIG", "SET", "slowlog-max-len", "100000"]);
    s.server.cmd::<()>(&["SLOWLOG", "RESET"]);
    prioritise(s.server.pid());

    // Everything is due at one instant, far enough ahead for the enqueue to finish first.
    let started = Instant::now();
    // (Debug builds enqueue about 30,000 jobs a second here, 33 µs a job; 100 µs a job leaves
    // room for a machine busy with other work.)
    let due = SystemTime::now() + Duration::from_millis(5_000 + jobs * 100 / 1_000);
    let default_chunk = s.client.clone();
    let small_chunk = Client::builder()
        .namespace(&s.ns)
        .bulk_chunk(250)
        .connect(&s.server.url())
        .await
        .unwrap();
    let first = jobs.min(20_000);
    let mut measured_from = schedstat(s.server.pid());
    let mut from = 0;
    while from < jobs {
        let to = (from + 10_000).min(jobs);
        let batch: Vec<JobSpec<FaultPayload>> = (from..to)
            .map(|i| {
                JobSpec::new(FaultPayload::new(i, 0))
                    .key(format!("m-{i}"))
                    .at(due)
            })
            .collect();
        let client = if from < first {
            &default_chunk
        } else {
            &small_chunk
        };
        let done = client.enqueue_bulk::<WorkJob>(batch).await.unwrap();
        let at = now_ms();
        for d in done {
            s.expected.ok.insert(d.key.to_string(), at);
        }
        from = to;
        if from == first {
            let default_worst = slow_log(&s).worst;
            println!(
                "mass expiry: enqueue with the default bulk chunk (1000 jobs per call): \
                 slowest call {} µs ({} µs of it stalled)",
                default_worst.micros, default_worst.stalled
            );
            s.server.cmd::<()>(&["SLOWLOG", "RESET"]);
            measured_from = schedstat(s.server.pid());
        }
    }
    let enqueued_in = started.elapsed();
    let st = s.stats(WORK_TOPIC).await.unwrap();
    assert_eq!(
        st.scheduled, jobs,
        "all scheduled before they come due: {st:?}"
    );
    assert!(
        SystemTime::now() < due,
        "the enqueue took {enqueued_in:?}, past the due time"
    );

    let mut w = s.spec();
    w.concurrency = 64;
    w.lease = Duration::from_secs(5);
    w.sleep = Some(Duration::ZERO);
    // The slow log measures wall time: a script preempted by a busy worker process looks slow.
    // Two cores are shared by Redis, two busy workers and this test, so the workers run at a
    // lower priority and Redis keeps a core when it has work.
    w.nice = Some(10);
    s.spawn(&w);
    s.spawn(&w);
    let due_at = Instant::now() + due.duration_since(SystemTime::now()).unwrap_or_default();
    s.wait_settled(WORK_TOPIC, Duration::from_secs(300)).await;
    let drained_in = Instant::now().saturating_duration_since(due_at);

    // A known slow command, so that a slow log that records nothing cannot pass unnoticed.
    s.server.cmd::<()>(&["DEBUG", "SLEEP", "0.02"]);
    let contention = Contention::since(measured_from, schedstat(s.server.pid()));
    let log = block_in_place(|| slow_log(&s));
    assert!(
        log.by_command.get("DEBUG").is_some_and(|d| d.1 >= 20_000),
        "the slow log missed DEBUG SLEEP: {:?}",
        log.by_command
    );
    println!(
        "mass expiry: {jobs} jobs enqueued in {enqueued_in:?}, drained {drained_in:?} after \
         their due time; {} commands over 10 ms (command: (count, max µs) {:?}); slowest \
         script {} µs ({}), {} µs of it in stalled O(1) commands",
        log.entries, log.by_command, log.worst.micros, log.worst.command, log.worst.stalled
    );
    println!("mass expiry: {contention}");
    log.assert_bounded(&contention);
    let rec = s.reconcile().await;
    s.assert_clean(&rec, &[]);
    assert_eq!(rec.succeeded as u64, jobs);
    assert_eq!(rec.duplicates, 0);
    s.stop_workers();
}

/// One script call in the slow log.
#[derive(Clone, Debug, Default)]
struct ScriptCall {
    /// Wall time of the call, µs.
    micros: i64,
    /// Which script.
    command: String,
    /// Wall time spent in O(1) commands inside it that themselves took 10 ms or more: a
    /// single `ZADD` or `HGET` cannot take that long, so the process was not running (the two
    /// cores are shared with the workers, this test and whatever else runs on the machine).
    stalled: i64,
}

impl ScriptCall {
    /// The call's time without its stalls.
    fn own(&self) -> i64 {
        self.micros - self.stalled
    }
}

/// What the slow log holds (Redis 7 also logs the commands a script calls, from the client
/// `?:0`, right before the script's own entry).
struct SlowLog {
    entries: usize,
    by_command: std::collections::BTreeMap<String, (usize, i64)>,
    scripts: Vec<ScriptCall>,
    worst: ScriptCall,
    /// The longest single O(1) command (10 ms or more: the process was descheduled).
    longest_trivial: i64,
}

/// Commands that do O(1) (or O(log n)) work for one element as dq's scripts call them.
const TRIVIAL: [&str; 12] = [
    "ZADD", "HSET", "HGET", "RPUSH", "LPUSH", "HINCRBY", "HDEL", "ZSCORE", "LLEN", "TIME", "ZCARD",
    "HLEN",
];

impl SlowLog {
    /// Asserts the README's bounded-work promise: no script call does 50 ms of work (never 200 ms, in any
    /// case). The slow log measures wall time, so a call during which Redis was waiting for a
    /// CPU looks longer than its work: a call's stalls (see [`ScriptCall::stalled`]) are
    /// subtracted, and where Redis spent more than 15% of its runnable time waiting for a CPU
    /// (other processes on the two cores), the 50 ms bound is only reported, not asserted.
    /// `DQ_FAULTS_STRICT_SLOWLOG=1` asserts it regardless.
    fn assert_bounded(&self, contention: &Contention) {
        assert!(
            self.worst.micros < 200_000,
            "a script call took {} µs: {:?}",
            self.worst.micros,
            self.worst
        );
        let over: Vec<&ScriptCall> = self.scripts.iter().filter(|c| c.own() >= 50_000).collect();
        let strict = std::env::var_os("DQ_FAULTS_STRICT_SLOWLOG").is_some();
        if !over.is_empty() && contention.overloaded() && !strict {
            println!(
                "mass expiry: WARNING: {} script call(s) over 50 ms while Redis waited for a CPU \
                 ({contention}); not judged: {over:?}",
                over.len(),
            );
            return;
        }
        assert!(
            over.is_empty(),
            "script calls of 50 ms or more ({contention}; longest O(1) command {} µs): {over:?}",
            self.longest_trivial
        );
    }
}

/// The Redis main thread's scheduler counters (`/proc/<pid>/schedstat`): ns on a CPU, ns
/// waiting for one.
fn schedstat(pid: u32) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
    let mut f = text.split_whitespace().map(|v| v.parse::<u64>().ok());
    Some((f.next()??, f.next()??))
}

/// How much Redis had to wait for a CPU over a period.
struct Contention {
    /// ms on a CPU and ms runnable but waiting, if the kernel reports them.
    ran_waited_ms: Option<(u64, u64)>,
}

impl Contention {
    fn since(from: Option<(u64, u64)>, to: Option<(u64, u64)>) -> Contention {
        Contention {
            ran_waited_ms: from
                .zip(to)
                .map(|((r0, w0), (r1, w1))| ((r1 - r0) / 1_000_000, (w1 - w0) / 1_000_000)),
        }
    }

    /// More than 15% of Redis's runnable time spent waiting for a CPU.
    fn overloaded(&self) -> bool {
        self.ran_waited_ms
            .is_some_and(|(ran, waited)| waited * 100 > (ran + waited) * 15)
    }
}

impl std::fmt::Display for Contention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ran_waited_ms {
            Some((ran, waited)) => write!(
                f,
                "redis ran {ran} ms and waited {waited} ms for a CPU ({}%)",
                waited * 100 / (ran + waited).max(1)
            ),
            None => f.write_str("redis scheduling unknown"),
        }
    }
}

/// Gives Redis a higher CPU priority where allowed (root), so that the measurement shows its
/// work, not the machine's other load; without the right to, changes nothing.
fn prioritise(pid: u32) {
    let _ = std::process::Command::new("renice")
        .args(["-n", "-5", "-p", &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// Reads the slow log.
fn slow_log(s: &Scenario) -> SlowLog {
    let slow: Vec<redis::Value> = s.server.cmd(&["SLOWLOG", "GET", "100000"]);
    let mut parsed: Vec<(i64, i64, String, bool)> = Vec::new();
    for entry in &slow {
        let redis::Value::Array(fields) = entry else {
            continue;
        };
        let (Some(redis::Value::Int(id)), Some(redis::Value::Int(micros))) =
            (fields.first(), fields.get(2))
        else {
            continue;
        };
        let command = match fields.get(3) {
            Some(redis::Value::Array(args)) => describe(args),
            _ => String::new(),
        };
        let inner =
            matches!(fields.get(4), Some(redis::Value::BulkString(b)) if b.as_slice() == b"?:0");
        parsed.push((*id, *micros, command, inner));
    }
    parsed.sort_by_key(|e| e.0);
    let mut log = SlowLog {
        entries: parsed.len(),
        by_command: Default::default(),
        scripts: Vec::new(),
        worst: ScriptCall::default(),
        longest_trivial: 0,
    };
    let mut stalled = 0;
    for (_, micros, command, inner) in parsed {
        let e = log.by_command.entry(command.clone()).or_insert((0, 0));
        e.0 += 1;
        e.1 = e.1.max(micros);
        if TRIVIAL.contains(&command.as_str()) {
            log.longest_trivial = log.longest_trivial.max(micros);
        }
        if inner {
            if TRIVIAL.contains(&command.as_str()) {
                stalled += micros;
            }
            continue;
        }
        if is_script(&command) {
            let call = ScriptCall {
                micros,
                command,
                stalled,
            };
            if call.micros > log.worst.micros {
                log.worst = call.clone();
            }
            log.scripts.push(call);
        }
        stalled = 0;
    }
    log
}

fn is_script(command: &str) -> bool {
    command == "other script" || script_keys(command).is_some()
}

/// Names a slow-log entry's command: the command, and for a dq script call (`FCALL
/// dq_<hash>_<script>`) the script's name.
fn describe(args: &[redis::Value]) -> String {
    let text: Vec<String> = args
        .iter()
        .take(2)
        .map(|a| match a {
            redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            other => format!("{other:?}"),
        })
        .collect();
    match text.first().map(String::as_str) {
        Some(f) if f.eq_ignore_ascii_case("FCALL") || f.eq_ignore_ascii_case("FCALL_RO") => text
            .get(1)
            .and_then(|function| script_of_function(function))
            .unwrap_or("other script")
            .to_string(),
        Some(e) if e.eq_ignore_ascii_case("EVALSHA") || e.eq_ignore_ascii_case("EVAL") => {
            "other script".to_string()
        }
        Some(cmd) => cmd.to_string(),
        None => String::new(),
    }
}

/// A dq script call in the slow log is named by its function's script; other scripts and
/// commands keep their names.
#[test]
fn slow_log_entries_name_their_script() {
    let args = |a: &[&str]| -> Vec<redis::Value> {
        a.iter()
            .map(|s| redis::Value::BulkString(s.as_bytes().to_vec()))
            .collect()
    };
    let fetch = format!(
        "{}0123456789ab_fetch",
        dq::store::redis::layout::LIBRARY_PREFIX
    );
    assert_eq!(describe(&args(&["FCALL", &fetch, "1", "k"])), "fetch");
    assert!(is_script(&describe(&args(&["FCALL", &fetch, "1", "k"]))));
    assert_eq!(describe(&args(&["FCALL", "other", "0"])), "other script");
    assert_eq!(describe(&args(&["EVALSHA", "abc", "0"])), "other script");
    assert_eq!(describe(&args(&["ZADD", "k", "1", "m"])), "ZADD");
    assert!(!is_script("ZADD"));
}
