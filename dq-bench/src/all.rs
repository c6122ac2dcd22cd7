//! `dq-bench all`: the orchestrator.
//!
//! It starts its own `redis-server` (no persistence, loopback, a free port, Redis defaults
//! otherwise) and runs every scenario through this binary's own `enqueue` and `worker`
//! commands, as child processes — the way an orchestrator drives any queue — with `FLUSHALL`
//! before every run and (by default) three repetitions each. It prints a table of
//! median/min/max per figure against dq's targets, with Redis's own ceilings beside them,
//! and writes everything (every run's raw result lines too) to `bench-results/<UTC>.json`.
//!
//! `--quick` is a smoke version (tiny N, one repetition, short windows) for CI; `--big` adds
//! 10,000,000 pending jobs to the scale scenario (one repetition of that size).
//!
//! Every wait is bounded; every child process is killed if it outlives its purpose.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;
use dq_testkit::{RedisServer, ServerOptions};
use redis::Connection;
use serde_json::{Value, json};

use crate::jobs::now_ms;
use crate::redis_admin::{self as admin, CmdStat};
use crate::{Result, Scenario};

/// Slow-log capacity while every command is logged (scripts log their inner commands too:
/// about ten per job).
const SLOWLOG_MAX_LEN: usize = 2_000_000;

/// Arguments of `dq-bench all`.
#[derive(Args, Debug, Clone)]
pub struct AllArgs {
    /// Smoke version: tiny N, one repetition, short windows (well under a minute).
    #[arg(long)]
    pub quick: bool,
    /// Also measure the scale scenario with 10,000,000 pending jobs.
    #[arg(long)]
    pub big: bool,
    /// Repetitions per scenario (default 3; 1 with --quick).
    #[arg(long)]
    pub reps: Option<usize>,
    /// Only these sections, comma-separated: s1, s3, s3c1, s3r, profile, s4, s5, idle, scale,
    /// mass, ceilings (default: all).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Directory of the JSON result (default: bench-results/ at the workspace root).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Sizes and windows of one orchestrated run.
#[derive(Clone, Debug, serde::Serialize)]
struct Plan {
    quick: bool,
    reps: usize,
    conc: usize,
    linger_ms: u64,
    s1_n: u64,
    s3_n: u64,
    s3_delay_ms: u64,
    s3c1_n: u64,
    s4_n: u64,
    s4_lead_ms: u64,
    s4_window_ms: u64,
    s5_n: u64,
    idle_secs: u64,
    scale_sizes: Vec<u64>,
    scale_big: Option<u64>,
    scale_m: u64,
    scale_delay_ms: u64,
    mass_n: u64,
    mass_lead_ms: u64,
    bench_requests: u64,
    zset_members: u64,
    zrem_calls: u64,
}

impl Plan {
    fn new(args: &AllArgs) -> Plan {
        if args.quick {
            Plan {
                quick: true,
                reps: args.reps.unwrap_or(1),
                conc: 50,
                linger_ms: 500,
                s1_n: 2_000,
                s3_n: 2_000,
                s3_delay_ms: 1_000,
                s3c1_n: 300,
                s4_n: 500,
                s4_lead_ms: 1_000,
                s4_window_ms: 2_000,
                s5_n: 500,
                idle_secs: 3,
                scale_sizes: vec![1_000, 20_000],
                scale_big: None,
                scale_m: 1_000,
                scale_delay_ms: 500,
                mass_n: 2_000,
                mass_lead_ms: 1_500,
                bench_requests: 20_000,
                zset_members: 100_000,
                zrem_calls: 200,
            }
        } else {
            Plan {
                quick: false,
                reps: args.reps.unwrap_or(3),
                conc: 50,
                linger_ms: 3_000,
                s1_n: 100_000,
                s3_n: 100_000,
                s3_delay_ms: 5_000,
                s3c1_n: 20_000,
                s4_n: 10_000,
                s4_lead_ms: 5_000,
                s4_window_ms: 30_000,
                s5_n: 10_000,
                idle_secs: 60,
                scale_sizes: vec![10_000, 1_000_000],
                scale_big: args.big.then_some(10_000_000),
                scale_m: 10_000,
                scale_delay_ms: 1_000,
                mass_n: 100_000,
                mass_lead_ms: 5_000,
                bench_requests: 200_000,
                zset_members: 1_000_000,
                zrem_calls: 5_000,
            }
        }
    }
}

/// How a figure is judged against its target.
#[derive(Clone, Copy, Debug)]
enum Check {
    /// The median must be at least this.
    MedianAtLeast(f64),
    /// The median must be at most this.
    MedianAtMost(f64),
    /// Every repetition must be at most this (correctness counts).
    MaxAtMost(f64),
}

/// One reported figure: a value per repetition.
#[derive(Clone, Debug)]
struct Figure {
    key: String,
    label: String,
    unit: &'static str,
    values: Vec<f64>,
    target: Option<(&'static str, Check)>,
}

impl Figure {
    fn sorted(&self) -> Vec<f64> {
        let mut v = self.values.clone();
        v.sort_by(f64::total_cmp);
        v
    }

    fn median(&self) -> Option<f64> {
        let v = self.sorted();
        match v.len() {
            0 => None,
            n if n % 2 == 1 => Some(v[n / 2]),
            n => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
        }
    }

    fn verdict(&self) -> &'static str {
        let (Some((_, check)), Some(median)) = (self.target, self.median()) else {
            return "";
        };
        let max = self.sorted().last().copied().unwrap_or(f64::NAN);
        let ok = match check {
            Check::MedianAtLeast(t) => median >= t,
            Check::MedianAtMost(t) => median <= t,
            Check::MaxAtMost(t) => max <= t,
        };
        if ok { "PASS" } else { "MISS" }
    }

    fn to_json(&self) -> Value {
        let v = self.sorted();
        json!({
            "key": self.key,
            "label": self.label,
            "unit": self.unit,
            "values": self.values,
            "median": self.median(),
            "min": v.first(),
            "max": v.last(),
            "target": self.target.map(|(t, _)| t),
            "verdict": self.verdict(),
        })
    }
}

/// A child process of this binary (`enqueue` or `worker`), its stdout read line by line.
struct Proc {
    label: String,
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Proc {
    fn spawn(exe: &Path, url: &str, args: &[String]) -> Result<Proc> {
        let label = args.join(" ");
        let mut child = Command::new(exe)
            .args(args)
            .env("REDIS_URL", url)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start {label}: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = mpsc::channel();
        // Ends at end-of-file, i.e. when the child exits or is killed.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Proc {
            label,
            child,
            lines: rx,
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next JSON line, within `timeout`.
    fn line(&mut self, timeout: Duration) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.trim().is_empty() => {}
                Ok(line) => {
                    return serde_json::from_str(&line).map_err(|e| {
                        format!("`{}` printed a non-JSON line ({e}): {line}", self.label).into()
                    });
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    return Err(format!("`{}`: no result within {timeout:?}", self.label).into());
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().ok();
                    return Err(format!(
                        "`{}` exited without a result line ({status:?})",
                        self.label
                    )
                    .into());
                }
            }
        }
    }

    /// The result line, then the exit (bounded); the child is killed if it lingers.
    fn finish(mut self, timeout: Duration) -> Result<Value> {
        let value = self.line(timeout)?;
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(value)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// CPU time samples of Redis and of a worker, every 20 ms, on a thread.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<Sample>>,
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    at: Instant,
    redis: Option<u64>,
    worker: Option<u64>,
}

impl Sampler {
    /// Samples until stopped or for at most `max`.
    fn start(redis_pid: u32, worker_pid: u32, max: Duration) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let end = Instant::now() + max;
            let mut out = Vec::new();
            while !flag.load(Ordering::Relaxed) && Instant::now() < end {
                out.push(Sample {
                    at: Instant::now(),
                    redis: admin::cpu_ticks(redis_pid),
                    worker: admin::cpu_ticks(worker_pid),
                });
                std::thread::sleep(Duration::from_millis(20));
            }
            out
        });
        Sampler { stop, thread }
    }

    fn finish(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// CPU use (% of one core) between `from` and `to` from samples.
fn cpu_pct(
    samples: &[Sample],
    from: Instant,
    to: Instant,
    tck: f64,
    pick: fn(&Sample) -> Option<u64>,
) -> Option<f64> {
    let first = samples.iter().find(|s| s.at >= from && pick(s).is_some())?;
    let last = samples
        .iter()
        .rev()
        .find(|s| s.at <= to && pick(s).is_some())?;
    let secs = last.at.checked_duration_since(first.at)?.as_secs_f64();
    if secs < 0.05 {
        return None;
    }
    let ticks = pick(last)?.checked_sub(pick(first)?)? as f64;
    Some(100.0 * ticks / tck / secs)
}

/// A started worker child.
struct Running {
    proc: Proc,
    ready_at: Instant,
    sampler: Sampler,
}

/// The orchestrator's state.
struct Orchestrator {
    plan: Plan,
    server: RedisServer,
    admin: Connection,
    exe: PathBuf,
    tck: f64,
    figures: Vec<Figure>,
    runs: BTreeMap<String, Vec<Value>>,
    notes: Vec<String>,
    ceilings: Value,
    /// Runs and sections that failed (not targets missed).
    errors: usize,
    /// `git describe --always --dirty` of the measured tree, taken at the start.
    git: Option<String>,
}

/// Runs `dq-bench all`.
pub fn run(args: AllArgs) -> Result<()> {
    let plan = Plan::new(&args);
    let started = SystemTime::now();
    let clock = Instant::now();
    let exe = std::env::current_exe()?;
    eprintln!("dq-bench all: starting a private redis-server ...");
    let server = RedisServer::start_with(ServerOptions::default());
    let admin = server.connection();
    let mut o = Orchestrator {
        plan,
        admin,
        server,
        exe,
        tck: clock_ticks(),
        figures: Vec::new(),
        runs: BTreeMap::new(),
        notes: Vec::new(),
        ceilings: Value::Null,
        errors: 0,
        git: git_describe(),
    };
    o.declare_figures();
    eprintln!(
        "dq-bench all: redis-server pid {} on {} ({} repetition(s){})",
        o.server.pid(),
        o.server.url(),
        o.plan.reps,
        if o.plan.quick { ", quick" } else { "" }
    );
    let wanted = |name: &str| args.only.is_empty() || args.only.iter().any(|o| o == name);
    type Section = fn(&mut Orchestrator) -> Result<()>;
    let sections: [(&str, Section); 11] = [
        ("s1", Orchestrator::s1),
        ("s3", |o| o.drains("s3")),
        ("s3c1", |o| o.drains("s3c1")),
        ("s3r", |o| o.drains("s3r")),
        ("profile", Orchestrator::profile),
        ("s4", Orchestrator::s4),
        ("s5", Orchestrator::s5),
        ("idle", Orchestrator::idle),
        ("scale", Orchestrator::scale),
        ("mass", Orchestrator::mass),
        ("ceilings", Orchestrator::ceilings),
    ];
    for (name, section) in sections {
        if !wanted(name) {
            continue;
        }
        let t = Instant::now();
        eprintln!("== {name}");
        if let Err(e) = section(&mut o) {
            eprintln!("   {name} failed: {e}");
            o.notes.push(format!("section {name} failed: {e}"));
            o.errors += 1;
        }
        eprintln!("   ({:.1} s)", t.elapsed().as_secs_f64());
    }
    let table = o.table();
    println!("{table}");
    println!(
        "measured tree: {} (git describe at start)",
        o.git.as_deref().unwrap_or("?")
    );
    let path = o.write_json(&args, started, clock.elapsed())?;
    println!("results: {}", path.display());
    // A missed target is a finding; a run that could not be measured is an error (CI fails).
    if o.errors > 0 {
        return Err(format!(
            "{} failure(s) while measuring; see the notes above",
            o.errors
        )
        .into());
    }
    Ok(())
}

/// Clock ticks per second of `/proc/<pid>/stat` CPU times.
fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

fn num(v: &Value, pointer: &str) -> Result<f64> {
    v.pointer(pointer)
        .and_then(Value::as_f64)
        .ok_or_else(|| format!("no number at {pointer} in {v}").into())
}

fn s(v: impl ToString) -> String {
    v.to_string()
}

/// Sleeps until the wall clock reaches `ms` (at most `max`).
fn sleep_until_ms(ms: u64, max: Duration) {
    let now = now_ms();
    if ms > now {
        std::thread::sleep(Duration::from_millis(ms - now).min(max));
    }
}

impl Orchestrator {
    fn declare_figures(&mut self) {
        let p = self.plan.clone();
        let d = |key: &str, label: String, unit: &'static str, target| Figure {
            key: key.to_owned(),
            label,
            unit,
            values: Vec::new(),
            target,
        };
        use Check::*;
        self.figures = vec![
            d(
                "s1_single",
                format!("S1 enqueue single (N={})", p.s1_n),
                "jobs/s",
                Some(("≥ 15,000", MedianAtLeast(15_000.0))),
            ),
            d(
                "s1_single_current",
                "S1 enqueue single, current-thread runtime".into(),
                "jobs/s",
                None,
            ),
            d(
                "s1_bulk",
                format!("S1 enqueue bulk, chunk 1000 (N={})", p.s1_n),
                "jobs/s",
                Some(("≥ 80,000", MedianAtLeast(80_000.0))),
            ),
            d(
                "s2_bytes_per_job",
                "S2 memory per pending job".into(),
                "B/job",
                Some(("≤ 250", MedianAtMost(250.0))),
            ),
            d(
                "s2_usage_per_job",
                "S2 MEMORY USAGE of all keys / N".into(),
                "B/job",
                None,
            ),
            d("s2_dbsize", "S2 DBSIZE".into(), "keys", None),
            d(
                "s3_rate",
                format!("S3 drain, conc {} (N={})", p.conc, p.s3_n),
                "jobs/s",
                Some(("≥ 50,000", MedianAtLeast(50_000.0))),
            ),
            d(
                "s3_not_once",
                "S3 jobs not run exactly once".into(),
                "jobs",
                Some(("0", MaxAtMost(0.0))),
            ),
            d(
                "s3_redis_cpu",
                "S3 redis-server CPU during drain".into(),
                "% core",
                None,
            ),
            d(
                "s3_worker_cpu",
                "S3 worker process CPU during drain".into(),
                "% core",
                None,
            ),
            d(
                "s3_evalsha_us",
                "S3 evalsha usec_per_call (commandstats)".into(),
                "µs",
                None,
            ),
            d(
                "s3_evalsha_per_job",
                "S3 evalsha calls per job".into(),
                "calls",
                None,
            ),
            d(
                "s3_server_us_per_job",
                "S3 Redis script time per job".into(),
                "µs/job",
                None,
            ),
            d(
                "s3c1_rate",
                format!("S3c1 drain, conc 1 (N={})", p.s3c1_n),
                "jobs/s",
                None,
            ),
            d(
                "s3c1_not_once",
                "S3c1 jobs not run exactly once".into(),
                "jobs",
                Some(("0", MaxAtMost(0.0))),
            ),
            d(
                "s3r_rate",
                format!("S3R drain of ready jobs, conc {} (N={})", p.conc, p.s3_n),
                "jobs/s",
                Some(("≥ 50,000", MedianAtLeast(50_000.0))),
            ),
            d(
                "s3r_not_once",
                "S3R jobs not run exactly once".into(),
                "jobs",
                Some(("0", MaxAtMost(0.0))),
            ),
            d(
                "s3r_redis_cpu",
                "S3R redis-server CPU during drain".into(),
                "% core",
                None,
            ),
            d(
                "s3r_worker_cpu",
                "S3R worker process CPU during drain".into(),
                "% core",
                None,
            ),
            d(
                "s3r_evalsha_us",
                "S3R evalsha usec_per_call".into(),
                "µs",
                None,
            ),
            d(
                "s3r_evalsha_per_job",
                "S3R evalsha calls per job".into(),
                "calls",
                None,
            ),
            d(
                "s3r_server_us_per_job",
                "S3R Redis script time per job".into(),
                "µs/job",
                None,
            ),
            d(
                "s4_p50",
                format!(
                    "S4 lateness p50 (N={}, {} s window)",
                    p.s4_n,
                    p.s4_window_ms / 1000
                ),
                "ms",
                None,
            ),
            d("s4_p90", "S4 lateness p90".into(), "ms", None),
            d(
                "s4_p99",
                "S4 lateness p99".into(),
                "ms",
                Some(("≤ 5", MedianAtMost(5.0))),
            ),
            d(
                "s4_max",
                "S4 lateness max".into(),
                "ms",
                Some(("≤ 20", MedianAtMost(20.0))),
            ),
            d(
                "s4_not_once",
                "S4 jobs not run exactly once".into(),
                "jobs",
                Some(("0", MaxAtMost(0.0))),
            ),
            d(
                "s5_total",
                format!("S5 retry: first add → last success (N={})", p.s5_n),
                "s",
                Some(("≤ 1.6", MedianAtMost(1.6))),
            ),
            d(
                "s5_not_twice",
                "S5 jobs not run exactly twice".into(),
                "jobs",
                Some(("0", MaxAtMost(0.0))),
            ),
            d(
                "idle_cmds",
                format!(
                    "Idle worker, {} s: client commands/s per fetcher",
                    p.idle_secs
                ),
                "cmd/s",
                Some(("≤ 1", MedianAtMost(1.0))),
            ),
        ];
        let sizes: Vec<u64> = p.scale_sizes.iter().copied().chain(p.scale_big).collect();
        for size in &sizes {
            let n = pretty_count(*size);
            self.figures.push(d(
                &format!("scale_enq_us_{size}"),
                format!("Scale: enqueue (single) with {n} pending"),
                "µs/job",
                None,
            ));
            self.figures.push(d(
                &format!("scale_enq_srv_{size}"),
                format!("Scale: enqueue script time with {n} pending"),
                "µs/job",
                None,
            ));
            self.figures.push(d(
                &format!("scale_fire_us_{size}"),
                format!("Scale: fire (drain, conc {}) with {n} pending", p.conc),
                "µs/job",
                None,
            ));
            self.figures.push(d(
                &format!("scale_fire_srv_{size}"),
                format!("Scale: fire script time with {n} pending"),
                "µs/job",
                None,
            ));
            self.figures.push(d(
                &format!("scale_bytes_{size}"),
                format!("Scale: memory per pending job with {n} pending"),
                "B/job",
                None,
            ));
        }
        for size in sizes.iter().skip(1) {
            let n = pretty_count(*size);
            let base = pretty_count(sizes[0]);
            for (what, label) in [
                ("enq", "enqueue"),
                ("enq_srv", "enqueue script"),
                ("fire", "fire"),
                ("fire_srv", "fire script"),
            ] {
                self.figures.push(d(
                    &format!("scale_ratio_{what}_{size}"),
                    format!("Scale ratio {label}: {n} / {base}"),
                    "×",
                    Some(("≤ 1.3", MedianAtMost(1.3))),
                ));
            }
        }
        self.figures.extend([
            d(
                "mass_last_start",
                format!(
                    "Mass expiry ({} due at one ms): last start after due",
                    pretty_count(p.mass_n)
                ),
                "ms",
                None,
            ),
            d(
                "mass_drain_rate",
                "Mass expiry: drain rate after due".into(),
                "jobs/s",
                None,
            ),
            d(
                "mass_longest_script",
                "Mass expiry: longest script call while firing (SLOWLOG 0)".into(),
                "µs",
                Some(("≤ 10,000", MedianAtMost(10_000.0))),
            ),
            d(
                "mass_longest_fetch",
                "Mass expiry: longest fetch while firing".into(),
                "µs",
                None,
            ),
            d(
                "mass_longest_enqueue",
                "Mass expiry: longest bulk enqueue of 1000, before due".into(),
                "µs",
                None,
            ),
            d(
                "mass_longest_ack",
                "Mass expiry: longest ack while firing".into(),
                "µs",
                None,
            ),
            d(
                "mass_not_once",
                "Mass expiry: jobs not run exactly once".into(),
                "jobs",
                Some(("0", MaxAtMost(0.0))),
            ),
        ]);
    }

    fn push(&mut self, key: &str, value: f64) {
        if let Some(f) = self.figures.iter_mut().find(|f| f.key == key) {
            f.values.push(value);
        } else {
            self.figures.push(Figure {
                key: key.to_owned(),
                label: key.to_owned(),
                unit: "",
                values: vec![value],
                target: None,
            });
        }
    }

    fn record(&mut self, section: &str, value: Value) {
        self.runs.entry(section.to_owned()).or_default().push(value);
    }

    fn url(&self) -> String {
        self.server.url()
    }

    fn cmd<T: redis::FromRedisValue>(&mut self, args: &[&str]) -> Result<T> {
        admin::cmd(&mut self.admin, args)
    }

    fn flush(&mut self) -> Result<()> {
        self.cmd::<()>(&["FLUSHALL"])
    }

    fn resetstat(&mut self) -> Result<()> {
        self.cmd::<()>(&["CONFIG", "RESETSTAT"])
    }

    fn used_memory(&mut self) -> Result<u64> {
        admin::info_u64(&mut self.admin, "memory", "used_memory")
    }

    fn commandstats(&mut self) -> Result<BTreeMap<String, CmdStat>> {
        admin::commandstats(&mut self.admin)
    }

    /// Runs `dq-bench enqueue …` to its result line.
    fn enqueue(&self, args: &[String]) -> Result<Value> {
        let mut full = vec![s("enqueue")];
        full.extend(args.iter().cloned());
        let proc = Proc::spawn(&self.exe, &self.url(), &full)?;
        let out = proc.finish(Duration::from_secs(1800))?;
        if num(&out, "/not_created")? > 0.0 {
            return Err(format!("enqueue did not create every job: {out}").into());
        }
        Ok(out)
    }

    /// Starts `dq-bench worker …` and waits for its ready line.
    fn start_worker(
        &self,
        scenario: Scenario,
        conc: usize,
        n: u64,
        timeout_s: u64,
    ) -> Result<Running> {
        let args = vec![
            s("worker"),
            s("--scenario"),
            s(scenario.name()),
            s("--conc"),
            s(conc),
            s("--n"),
            s(n),
            s("--timeout-s"),
            s(timeout_s),
            s("--linger-ms"),
            s(self.plan.linger_ms),
        ];
        let mut proc = Proc::spawn(&self.exe, &self.url(), &args)?;
        let sampler = Sampler::start(
            self.server.pid(),
            proc.pid(),
            Duration::from_secs(timeout_s + 60),
        );
        let ready = proc.line(Duration::from_secs(30))?;
        let ready_at = Instant::now();
        if ready.get("ready") != Some(&Value::Bool(true)) {
            return Err(format!("worker's first line was not ready: {ready}").into());
        }
        Ok(Running {
            proc,
            ready_at,
            sampler,
        })
    }

    /// Waits for a worker's result; returns it with Redis's and the worker's CPU use during
    /// its `secs`.
    fn finish_worker(&self, running: Running, timeout: Duration) -> Result<(Value, Value)> {
        let Running {
            proc,
            ready_at,
            sampler,
        } = running;
        let result = proc.finish(timeout);
        let samples = sampler.finish();
        let result = result?;
        let secs = num(&result, "/secs")?;
        let to = ready_at + Duration::from_secs_f64(secs);
        let cpu = json!({
            "redis_pct": cpu_pct(&samples, ready_at, to, self.tck, |s| s.redis),
            "worker_pct": cpu_pct(&samples, ready_at, to, self.tck, |s| s.worker),
        });
        Ok((result, cpu))
    }

    /// Waits until at least one client is blocked (an idle fetcher's wake-up listener).
    fn wait_blocked(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            let n = admin::info_u64(&mut self.admin, "clients", "blocked_clients")?;
            if n >= 1 {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err("no worker blocked on its wake-up list in time".into())
    }

    /// Runs `f` for each repetition; a failed repetition is recorded and the rest go on.
    fn reps(
        &mut self,
        section: &str,
        reps: usize,
        mut f: impl FnMut(&mut Self, usize) -> Result<Value>,
    ) -> Result<()> {
        let mut failures = 0;
        for rep in 0..reps {
            let t = Instant::now();
            match f(self, rep) {
                Ok(mut v) => {
                    if let Value::Object(m) = &mut v {
                        m.insert("rep".into(), json!(rep));
                    }
                    eprintln!(
                        "   {section} rep {}/{reps}: {} ({:.1} s)",
                        rep + 1,
                        summary(section, &v),
                        t.elapsed().as_secs_f64()
                    );
                    self.record(section, v);
                }
                Err(e) => {
                    failures += 1;
                    self.errors += 1;
                    eprintln!("   {section} rep {}/{reps} failed: {e}", rep + 1);
                    self.notes.push(format!("{section} rep {}: {e}", rep + 1));
                    self.record(section, json!({"rep": rep, "error": e.to_string()}));
                }
            }
        }
        if failures == reps {
            return Err(format!("every repetition of {section} failed").into());
        }
        Ok(())
    }

    // ---- S1 + S2 ----------------------------------------------------------------------

    fn s1(&mut self) -> Result<()> {
        let n = self.plan.s1_n;
        let reps = self.plan.reps;
        self.reps("s1", reps, |o, _| {
            let mut rep = serde_json::Map::new();
            // `single_current`: the same one-by-one adds from a current-thread runtime, which
            // separates the client runtime's cross-thread wake-ups from dq's own cost.
            for (name, mode, flavor) in [
                ("single", "single", "multi"),
                ("single_current", "single", "current"),
                ("bulk", "bulk", "multi"),
            ] {
                o.flush()?;
                let empty = o.used_memory()?;
                let r = o.enqueue(&[
                    s("--scenario"),
                    s("S1"),
                    s("--mode"),
                    s(mode),
                    s("--n"),
                    s(n),
                    s("--chunk"),
                    s(1000),
                    s("--runtime"),
                    s(flavor),
                ])?;
                o.push(&format!("s1_{name}"), num(&r, "/jobs_per_s")?);
                rep.insert(name.into(), r);
                if mode == "bulk" {
                    let used = o.used_memory()?;
                    let per_job = used.saturating_sub(empty) as f64 / n as f64;
                    let census = admin::census(&mut o.admin, 10_000)?;
                    o.push("s2_bytes_per_job", per_job);
                    o.push(
                        "s2_usage_per_job",
                        census.total_usage_bytes as f64 / n as f64,
                    );
                    o.push("s2_dbsize", census.dbsize as f64);
                    rep.insert(
                        "s2".into(),
                        json!({
                            "used_memory_empty": empty,
                            "used_memory": used,
                            "bytes_per_job": per_job,
                            "census": census,
                        }),
                    );
                }
            }
            Ok(Value::Object(rep))
        })
    }

    // ---- S3, S3c1, S3R ---------------------------------------------------------------

    fn drains(&mut self, which: &'static str) -> Result<()> {
        let (scenario, n, conc) = match which {
            "s3" => (Scenario::S3, self.plan.s3_n, self.plan.conc),
            "s3c1" => (Scenario::S3, self.plan.s3c1_n, 1),
            _ => (Scenario::S3R, self.plan.s3_n, self.plan.conc),
        };
        if which == "s3c1" && n < self.plan.s3_n {
            self.notes.push(format!(
                "S3c1 uses N={n} (not {}): at concurrency 1 the full N would take minutes",
                self.plan.s3_n
            ));
        }
        let reps = self.plan.reps;
        self.reps(which, reps, |o, _| {
            let v = o.drain(scenario, n, conc, false)?;
            o.push(&format!("{which}_rate"), num(&v, "/worker/jobs_per_s")?);
            o.push(
                &format!("{which}_not_once"),
                num(&v, "/worker/jobs_not_exactly_expected")?,
            );
            if which != "s3c1" {
                if let Some(c) = v.pointer("/cpu/redis_pct").and_then(Value::as_f64) {
                    o.push(&format!("{which}_redis_cpu"), c);
                }
                if let Some(c) = v.pointer("/cpu/worker_pct").and_then(Value::as_f64) {
                    o.push(&format!("{which}_worker_cpu"), c);
                }
                o.push(
                    &format!("{which}_evalsha_us"),
                    num(&v, "/redis/evalsha_usec_per_call")?,
                );
                o.push(
                    &format!("{which}_evalsha_per_job"),
                    num(&v, "/redis/evalsha_calls_per_job")?,
                );
                o.push(
                    &format!("{which}_server_us_per_job"),
                    num(&v, "/redis/script_usec_per_job")?,
                );
            }
            Ok(v)
        })
    }

    /// One drain: enqueue N (bulk), wait until due + 1 s (S3), start one worker, time it.
    /// With `profile`, every command is logged (SLOWLOG) and the scripts' costs are grouped.
    fn drain(&mut self, scenario: Scenario, n: u64, conc: usize, profile: bool) -> Result<Value> {
        self.flush()?;
        let mut args = vec![
            s("--scenario"),
            s(scenario.name()),
            s("--mode"),
            s("bulk"),
            s("--n"),
            s(n),
        ];
        if scenario == Scenario::S3 {
            args.extend([s("--delay-ms"), s(self.plan.s3_delay_ms)]);
        }
        let produced = self.enqueue(&args)?;
        if scenario == Scenario::S3 {
            let last_due = num(&produced, "/last_due_ms")? as u64;
            sleep_until_ms(last_due + 1000, Duration::from_secs(60));
        }
        if profile {
            self.slowlog_on(0)?;
        }
        self.resetstat()?;
        let running = self.start_worker(scenario, conc, n, 600)?;
        let (worker, cpu) = self.finish_worker(running, Duration::from_secs(700))?;
        let stats = self.commandstats()?;
        let evalsha = stats.get("evalsha").copied().unwrap_or_default();
        let mut v = json!({
            "enqueue": produced,
            "worker": worker,
            "cpu": cpu,
            "redis": {
                "evalsha_calls": evalsha.calls,
                "evalsha_usec": evalsha.usec,
                "evalsha_usec_per_call": evalsha.usec_per_call(),
                "evalsha_calls_per_job": evalsha.calls as f64 / n as f64,
                "script_usec_per_job": evalsha.usec as f64 / n as f64,
                "commandstats": stats,
            },
        });
        if profile {
            let entries = admin::slowlog(&mut self.admin)?;
            self.slowlog_default()?;
            if entries.len() >= SLOWLOG_MAX_LEN {
                self.notes
                    .push("profile: the slow log filled up; totals are low".into());
            }
            let classes = admin::slow_classes(&entries);
            let per_job: BTreeMap<&String, f64> = classes
                .iter()
                .map(|(k, c)| (k, c.total_us as f64 / n as f64))
                .collect();
            v["slowlog"] = json!({"entries": entries.len(), "classes": classes,
                                  "usec_per_job": per_job});
        }
        Ok(v)
    }

    /// Logs every command that takes `threshold_us` or more (0: every command), from now.
    fn slowlog_on(&mut self, threshold_us: u64) -> Result<()> {
        self.cmd::<()>(&["CONFIG", "SET", "slowlog-max-len", &s(SLOWLOG_MAX_LEN)])?;
        self.cmd::<()>(&["CONFIG", "SET", "slowlog-log-slower-than", &s(threshold_us)])?;
        self.cmd::<()>(&["SLOWLOG", "RESET"])
    }

    fn slowlog_default(&mut self) -> Result<()> {
        self.cmd::<()>(&["CONFIG", "SET", "slowlog-log-slower-than", "10000"])?;
        self.cmd::<()>(&["CONFIG", "SET", "slowlog-max-len", "128"])?;
        self.cmd::<()>(&["SLOWLOG", "RESET"])
    }

    /// One extra S3 drain with every command in the slow log: the cost of each script.
    fn profile(&mut self) -> Result<()> {
        let (n, conc) = (self.plan.s3_n, self.plan.conc);
        let result = self.drain(Scenario::S3, n, conc, true);
        if result.is_err() {
            let _ = self.slowlog_default();
        }
        let v = result?;
        eprintln!(
            "   profile (S3 with SLOWLOG 0): {:.0} jobs/s; per job: {}",
            num(&v, "/worker/jobs_per_s").unwrap_or(f64::NAN),
            v["slowlog"]["usec_per_job"]
        );
        self.record("profile", v);
        Ok(())
    }

    // ---- S4, S5 -------------------------------------------------------------------------

    fn s4(&mut self) -> Result<()> {
        let p = self.plan.clone();
        self.reps("s4", p.reps, |o, _| {
            o.flush()?;
            let timeout = (p.s4_lead_ms + p.s4_window_ms) / 1000 + 120;
            let running = o.start_worker(Scenario::S4, p.conc, p.s4_n, timeout)?;
            o.wait_blocked(Duration::from_secs(10))?;
            o.resetstat()?;
            let start = now_ms() + p.s4_lead_ms;
            let produced = o.enqueue(&[
                s("--scenario"),
                s("S4"),
                s("--mode"),
                s("single"),
                s("--n"),
                s(p.s4_n),
                s("--start-ms"),
                s(start),
                s("--window-ms"),
                s(p.s4_window_ms),
            ])?;
            let (worker, _) = o.finish_worker(running, Duration::from_secs(timeout + 30))?;
            for q in ["p50", "p90", "p99", "max"] {
                o.push(
                    &format!("s4_{q}"),
                    num(&worker, &format!("/lateness_ms/{q}"))?,
                );
            }
            o.push("s4_not_once", num(&worker, "/jobs_not_exactly_expected")?);
            let stats = o.commandstats()?;
            Ok(
                json!({"start_ms": start, "enqueue": produced, "worker": worker,
                      "commandstats": stats}),
            )
        })
    }

    fn s5(&mut self) -> Result<()> {
        let p = self.plan.clone();
        self.reps("s5", p.reps, |o, _| {
            o.flush()?;
            let running = o.start_worker(Scenario::S5, p.conc, p.s5_n, 120)?;
            o.wait_blocked(Duration::from_secs(10))?;
            o.resetstat()?;
            let produced = o.enqueue(&[
                s("--scenario"),
                s("S5"),
                s("--mode"),
                s("bulk"),
                s("--n"),
                s(p.s5_n),
            ])?;
            let (worker, _) = o.finish_worker(running, Duration::from_secs(150))?;
            let total =
                (num(&worker, "/last_done_ms")? - num(&produced, "/first_add_ms")?) / 1000.0;
            o.push("s5_total", total);
            o.push("s5_not_twice", num(&worker, "/jobs_not_exactly_expected")?);
            // Producer and worker together: bulk enqueue, fetch, fail, ack.
            let stats = o.commandstats()?;
            Ok(
                json!({"total_secs": total, "enqueue": produced, "worker": worker,
                      "commandstats": stats}),
            )
        })
    }

    // ---- idle cost ----------------------------------------------------------------------

    fn idle(&mut self) -> Result<()> {
        let p = self.plan.clone();
        self.reps("idle", p.reps, |o, _| {
            o.flush()?;
            let running = o.start_worker(Scenario::Idle, p.conc, 1, p.idle_secs + 60)?;
            o.wait_blocked(Duration::from_secs(10))?;
            o.resetstat()?;
            let t = Instant::now();
            std::thread::sleep(Duration::from_secs(p.idle_secs));
            let stats = o.commandstats()?;
            let elapsed = t.elapsed().as_secs_f64();
            // The idle worker has done its part; it is killed rather than waited for.
            drop(running.sampler.finish());
            drop(running.proc);
            let calls = admin::client_sent_calls(&stats);
            let fetchers = 1.0; // one topic, one partition
            let rate = calls as f64 / elapsed / fetchers;
            o.push("idle_cmds", rate);
            Ok(
                json!({"secs": elapsed, "client_calls": calls, "fetchers": fetchers,
                      "cmds_per_s_per_fetcher": rate, "commandstats": stats}),
            )
        })
    }

    // ---- scale --------------------------------------------------------------------------

    fn scale(&mut self) -> Result<()> {
        let p = self.plan.clone();
        let base = p.scale_sizes[0];
        self.reps("scale", p.reps, |o, rep| {
            let mut sizes = p.scale_sizes.clone();
            if rep == 0 {
                sizes.extend(p.scale_big);
            }
            let mut out = serde_json::Map::new();
            let mut by_size: BTreeMap<u64, [f64; 4]> = BTreeMap::new();
            for size in sizes {
                let v = o.scale_one(size)?;
                let costs = [
                    num(&v, "/enqueue_us_per_job")?,
                    num(&v, "/enqueue_script_us_per_job")?,
                    num(&v, "/fire_us_per_job")?,
                    num(&v, "/fire_script_us_per_job")?,
                ];
                for (what, c) in ["enq_us", "enq_srv", "fire_us", "fire_srv"]
                    .iter()
                    .zip(costs)
                {
                    o.push(&format!("scale_{what}_{size}"), c);
                }
                o.push(
                    &format!("scale_bytes_{size}"),
                    num(&v, "/bytes_per_pending_job")?,
                );
                by_size.insert(size, costs);
                out.insert(size.to_string(), v);
            }
            if let Some(b) = by_size.get(&base).copied() {
                for (size, c) in &by_size {
                    if *size == base {
                        continue;
                    }
                    for (i, what) in ["enq", "enq_srv", "fire", "fire_srv"].iter().enumerate() {
                        o.push(&format!("scale_ratio_{what}_{size}"), c[i] / b[i]);
                    }
                }
            }
            Ok(Value::Object(out))
        })
    }

    /// Enqueue and fire cost per job with `pending` far-future jobs in the same partition.
    fn scale_one(&mut self, pending: u64) -> Result<Value> {
        let p = self.plan.clone();
        self.flush()?;
        let empty = self.used_memory()?;
        let fill = self.enqueue(&[
            s("--scenario"),
            s("FILL"),
            s("--mode"),
            s("bulk"),
            s("--n"),
            s(pending),
            s("--first-id"),
            s(1_000_000_000_000u64),
        ])?;
        let used = self.used_memory()?;
        self.resetstat()?;
        let produced = self.enqueue(&[
            s("--scenario"),
            s("SCALE"),
            s("--mode"),
            s("single"),
            s("--n"),
            s(p.scale_m),
            s("--delay-ms"),
            s(p.scale_delay_ms),
        ])?;
        let enq_stats = self.commandstats()?;
        let enq = enq_stats.get("evalsha").copied().unwrap_or_default();
        sleep_until_ms(
            num(&produced, "/last_due_ms")? as u64 + 1000,
            Duration::from_secs(60),
        );
        self.resetstat()?;
        let running = self.start_worker(Scenario::Scale, p.conc, p.scale_m, 600)?;
        let (worker, cpu) = self.finish_worker(running, Duration::from_secs(700))?;
        let fire = self
            .commandstats()?
            .get("evalsha")
            .copied()
            .unwrap_or_default();
        let m = p.scale_m as f64;
        Ok(json!({
            "pending": pending,
            "fill": fill,
            "bytes_per_pending_job": used.saturating_sub(empty) as f64 / pending as f64,
            "enqueue": produced,
            "enqueue_us_per_job": num(&produced, "/secs")? * 1e6 / m,
            "enqueue_script_us_per_job": enq.usec as f64 / m,
            "enqueue_evalsha_calls": enq.calls,
            "worker": worker,
            "cpu": cpu,
            "fire_us_per_job": num(&worker, "/secs")? * 1e6 / m,
            "fire_script_us_per_job": fire.usec as f64 / m,
            "fire_evalsha_calls": fire.calls,
        }))
    }

    // ---- mass expiry --------------------------------------------------------------------

    fn mass(&mut self) -> Result<()> {
        let p = self.plan.clone();
        self.reps("mass", p.reps, |o, _| {
            let r = o.mass_once(&p);
            let _ = o.slowlog_default();
            r
        })
    }

    fn mass_once(&mut self, p: &Plan) -> Result<Value> {
        self.flush()?;
        let running = self.start_worker(Scenario::Mass, p.conc, p.mass_n, 300)?;
        self.wait_blocked(Duration::from_secs(10))?;
        // Enqueue phase: log only calls over 50 µs (every bulk enqueue call, but not the
        // 400,000 tiny commands its scripts run, which would flood the log).
        self.slowlog_on(50)?;
        let due = now_ms() + p.mass_lead_ms;
        let produced = self.enqueue(&[
            s("--scenario"),
            s("MASS"),
            s("--mode"),
            s("bulk"),
            s("--n"),
            s(p.mass_n),
            s("--start-ms"),
            s(due),
            s("--window-ms"),
            s(0),
        ])?;
        let enqueue_entries = admin::slowlog(&mut self.admin)?;
        // Fire phase: log everything.
        self.slowlog_on(0)?;
        let armed_ms = now_ms();
        let enqueue_late = num(&produced, "/last_add_ms")? > due as f64 || armed_ms > due;
        let (worker, _) = self.finish_worker(running, Duration::from_secs(330))?;
        let fire_entries = admin::slowlog(&mut self.admin)?;
        let overflow = fire_entries.len() >= SLOWLOG_MAX_LEN;
        let enqueue_classes = admin::slow_classes(&enqueue_entries);
        let fire_classes = admin::slow_classes(&fire_entries);
        let longest_script = fire_entries
            .iter()
            .filter(|e| {
                e.args.first().is_some_and(|a| {
                    a.eq_ignore_ascii_case("evalsha") || a.eq_ignore_ascii_case("eval")
                })
            })
            .map(|e| e.micros)
            .max()
            .unwrap_or(0);
        let class_max = |classes: &BTreeMap<String, admin::SlowClass>, name: &str| {
            classes.get(name).map_or(0.0, |c| c.max_us as f64)
        };
        let last_start = num(&worker, "/lateness_ms/max")?;
        let drain_secs = (num(&worker, "/last_done_ms")? - due as f64) / 1000.0;
        self.push("mass_last_start", last_start);
        self.push("mass_drain_rate", p.mass_n as f64 / drain_secs.max(1e-3));
        self.push("mass_longest_script", longest_script as f64);
        self.push(
            "mass_longest_fetch",
            class_max(&fire_classes, "evalsha:fetch"),
        );
        self.push("mass_longest_ack", class_max(&fire_classes, "evalsha:ack"));
        self.push(
            "mass_longest_enqueue",
            class_max(&enqueue_classes, "evalsha:enqueue"),
        );
        self.push("mass_not_once", num(&worker, "/jobs_not_exactly_expected")?);
        if enqueue_late {
            self.notes.push(
                "mass expiry: the producer (or the slow-log switch) finished after the jobs \
                 fell due; the phases overlap"
                    .into(),
            );
        }
        if overflow {
            self.notes.push(format!(
                "mass expiry: the slow log filled up ({SLOWLOG_MAX_LEN} entries); the longest \
                 call may be missing"
            ));
        }
        Ok(json!({
            "due_ms": due,
            "enqueue": produced,
            "enqueue_finished_after_due": enqueue_late,
            "worker": worker,
            "slowlog_enqueue_phase": {"threshold_us": 50, "entries": enqueue_entries.len(),
                                      "classes": enqueue_classes},
            "slowlog_fire_phase": {"threshold_us": 0, "entries": fire_entries.len(),
                                   "classes": fire_classes, "overflow": overflow},
            "longest_script_us": longest_script,
        }))
    }

    // ---- Redis ceilings -----------------------------------------------------------------

    fn ceilings(&mut self) -> Result<()> {
        let p = self.plan.clone();
        let port = s(self.server.port());
        let n = s(p.bench_requests);
        let mut rows = Vec::new();
        let mut raw = serde_json::Map::new();
        self.flush()?;
        for pipeline in [None, Some("16")] {
            let mut args = vec!["-p", &port, "-n", &n, "-t", "set,lpush,zadd,hset", "-q"];
            if let Some(depth) = pipeline {
                args.extend(["-P", depth]);
            }
            let text = run_captured("redis-benchmark", &args, Duration::from_secs(300))?;
            let parsed = parse_benchmark(&text);
            for (cmd, rps) in &parsed {
                let label = match pipeline {
                    Some(d) => format!("{cmd} -P {d}"),
                    None => cmd.clone(),
                };
                rows.push(json!({"label": label, "rps": rps, "ops_per_s": rps}));
            }
            raw.insert(
                format!("-t set,lpush,zadd,hset -P {}", pipeline.unwrap_or("1")),
                json!(parsed),
            );
            self.flush()?;
        }
        // EVALSHA of a ZADD + HSET with a ~120-byte payload.
        let zadd_hset = "redis.call('ZADD', KEYS[1], ARGV[1], ARGV[1]) \
                         redis.call('HSET', KEYS[2], ARGV[1], ARGV[2]) return 1";
        let sha: String = self.cmd(&["SCRIPT", "LOAD", zadd_hset])?;
        let payload = "p".repeat(120);
        for pipeline in [None, Some("16")] {
            let mut args = vec!["-p", &port, "-n", &n, "-r", "100000000", "-q"];
            if let Some(depth) = pipeline {
                args.extend(["-P", depth]);
            }
            args.extend([
                "EVALSHA",
                &sha,
                "2",
                "ceil:{x}:z",
                "ceil:{x}:h",
                "__rand_int__",
                &payload,
            ]);
            let text = run_captured("redis-benchmark", &args, Duration::from_secs(300))?;
            let parsed = parse_benchmark(&text);
            let rps = parsed.values().next().copied();
            let label = match pipeline {
                Some(d) => format!("EVALSHA ZADD+HSET 120 B -P {d}"),
                None => "EVALSHA ZADD+HSET 120 B".to_owned(),
            };
            rows.push(json!({"label": label, "rps": rps, "ops_per_s": rps}));
            raw.insert(label, json!(parsed));
            self.flush()?;
        }
        // EVALSHA of ZRANGEBYSCORE … LIMIT 0 100 + ZREM over a big zset, one client.
        let fill = "for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do \
                    redis.call('ZADD', KEYS[1], i, 'm' .. i) end return 1";
        let step = 100_000u64;
        let mut from = 1;
        while from <= p.zset_members {
            let to = (from + step - 1).min(p.zset_members);
            self.cmd::<i64>(&["EVAL", fill, "1", "ceil:z", &s(from), &s(to)])?;
            from = to + 1;
        }
        let pop = "local m = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '+inf', 'LIMIT', 0, 100) \
                   if #m > 0 then redis.call('ZREM', KEYS[1], unpack(m)) end return #m";
        let sha: String = self.cmd(&["SCRIPT", "LOAD", pop])?;
        let calls = s(p.zrem_calls);
        let text = run_captured(
            "redis-benchmark",
            &[
                "-p", &port, "-n", &calls, "-c", "1", "-q", "EVALSHA", &sha, "1", "ceil:z",
            ],
            Duration::from_secs(300),
        )?;
        let members_left: u64 = self.cmd(&["ZCARD", "ceil:z"])?;
        let parsed = parse_benchmark(&text);
        let rps = parsed.values().next().copied();
        let label = format!(
            "EVALSHA ZRANGEBYSCORE 100 + ZREM ({} zset, 1 client)",
            pretty_count(p.zset_members)
        );
        rows.push(
            json!({"label": label, "rps": rps, "ops_per_s": rps.map(|r| r * 100.0),
                         "note": "ops = members popped"}),
        );
        raw.insert(
            label,
            json!({"results": parsed, "zset_members_after": members_left}),
        );
        self.flush()?;
        self.ceilings = json!({"rows": rows, "raw": raw});
        for r in &rows {
            eprintln!(
                "   {:<52} {:>10} calls/s",
                r["label"].as_str().unwrap_or("?"),
                pretty(r["rps"].as_f64().unwrap_or(f64::NAN))
            );
        }
        Ok(())
    }

    // ---- report -------------------------------------------------------------------------

    fn table(&self) -> String {
        let mut t = String::new();
        let header = format!(
            "{:<58} {:>12} {:>12} {:>12}  {:<7} {:<9} {}",
            "figure", "median", "min", "max", "unit", "target", "verdict"
        );
        t.push_str(&header);
        t.push('\n');
        t.push_str(&"-".repeat(header.chars().count() + 4));
        t.push('\n');
        for f in &self.figures {
            if f.values.is_empty() {
                continue;
            }
            let v = f.sorted();
            t.push_str(&format!(
                "{:<58} {:>12} {:>12} {:>12}  {:<7} {:<9} {}\n",
                f.label,
                pretty(f.median().unwrap_or(f64::NAN)),
                pretty(v[0]),
                pretty(v[v.len() - 1]),
                f.unit,
                f.target.map_or("", |(t, _)| t),
                f.verdict()
            ));
        }
        if let Some(Value::Array(rows)) = self.ceilings.get("rows") {
            t.push_str(&format!(
                "\nRedis ceilings on this machine (redis-benchmark, {} requests, 50 clients unless said):\n",
                pretty_count(self.plan.bench_requests)
            ));
            for r in rows {
                t.push_str(&format!(
                    "  {:<56} {:>12} calls/s {:>12} ops/s\n",
                    r["label"].as_str().unwrap_or("?"),
                    pretty(r["rps"].as_f64().unwrap_or(f64::NAN)),
                    pretty(r["ops_per_s"].as_f64().unwrap_or(f64::NAN)),
                ));
            }
        }
        if let Some(profile) = self.runs.get("profile").and_then(|r| r.last()) {
            t.push_str("\nS3 script costs (one extra drain with SLOWLOG 0 — slower than the runs above):\n");
            if let Value::Object(classes) = &profile["slowlog"]["classes"] {
                // Scripts and blocking calls; the commands run inside scripts are in the JSON.
                let shown = classes
                    .iter()
                    .filter(|(name, _)| name.starts_with("eval") || name.as_str() == "blpop");
                for (name, c) in shown {
                    t.push_str(&format!(
                        "  {:<20} calls {:>8}  mean {:>8} µs  p99 {:>8} µs  max {:>8} µs  per job {:>7} µs\n",
                        name,
                        c["calls"],
                        pretty(c["mean_us"].as_f64().unwrap_or(f64::NAN)),
                        c["p99_us"],
                        c["max_us"],
                        pretty(
                            profile["slowlog"]["usec_per_job"][name]
                                .as_f64()
                                .unwrap_or(f64::NAN)
                        ),
                    ));
                }
            }
        }
        if let Some(s1) = self.runs.get("s1").and_then(|r| r.last())
            && let Some(census) = s1.pointer("/bulk").and(s1.pointer("/s2/census"))
        {
            t.push_str(&format!(
                "\nS2 keys after S1 bulk: {} keys by type {}; largest {}\n",
                census["dbsize"], census["by_type"], census["largest"]
            ));
        }
        if !self.notes.is_empty() {
            t.push_str("\nNotes:\n");
            for n in &self.notes {
                t.push_str(&format!("  - {n}\n"));
            }
        }
        t
    }

    fn write_json(&self, args: &AllArgs, started: SystemTime, took: Duration) -> Result<PathBuf> {
        let dir = args.out.clone().unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .unwrap_or(Path::new("."))
                .join("bench-results")
        });
        std::fs::create_dir_all(&dir)?;
        let stamp = utc_stamp(started);
        let path = dir.join(format!("{stamp}.json"));
        let redis_version: String = {
            let mut conn = self.server.connection();
            admin::info(&mut conn, "server")
                .ok()
                .and_then(|i| admin::info_field(&i, "redis_version").map(str::to_owned))
                .unwrap_or_default()
        };
        let doc = json!({
            "started_utc": stamp,
            "took_secs": took.as_secs_f64(),
            "command": std::env::args().collect::<Vec<_>>(),
            "plan": self.plan,
            "env": {
                "redis_version": redis_version,
                "cpus": std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
                "clk_tck": self.tck,
                "git": self.git,
            },
            "figures": self.figures.iter().filter(|f| !f.values.is_empty())
                .map(Figure::to_json).collect::<Vec<_>>(),
            "ceilings": self.ceilings,
            "runs": self.runs,
            "notes": self.notes,
            "table": self.table(),
        });
        std::fs::write(&path, serde_json::to_string_pretty(&doc)?)?;
        Ok(path)
    }
}

/// A one-line summary of a repetition for the progress log.
fn summary(section: &str, v: &Value) -> String {
    let f = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_f64)
            .map_or("?".into(), pretty)
    };
    match section {
        "s1" => format!(
            "single {} jobs/s (current-thread {}), bulk {} jobs/s, {} B/job",
            f("/single/jobs_per_s"),
            f("/single_current/jobs_per_s"),
            f("/bulk/jobs_per_s"),
            f("/s2/bytes_per_job")
        ),
        "s3" | "s3c1" | "s3r" => format!(
            "{} jobs/s, not once {}, redis {}% worker {}% CPU, evalsha {} µs/call",
            f("/worker/jobs_per_s"),
            f("/worker/jobs_not_exactly_expected"),
            f("/cpu/redis_pct"),
            f("/cpu/worker_pct"),
            f("/redis/evalsha_usec_per_call")
        ),
        "s4" => format!(
            "lateness p50 {} p90 {} p99 {} max {} ms",
            f("/worker/lateness_ms/p50"),
            f("/worker/lateness_ms/p90"),
            f("/worker/lateness_ms/p99"),
            f("/worker/lateness_ms/max")
        ),
        "s5" => format!(
            "total {} s, not twice {}",
            f("/total_secs"),
            f("/worker/jobs_not_exactly_expected")
        ),
        "idle" => format!("{} cmd/s per fetcher", f("/cmds_per_s_per_fetcher")),
        "mass" => format!(
            "last start {} ms after due, longest script {} µs",
            f("/worker/lateness_ms/max"),
            f("/longest_script_us")
        ),
        "scale" => {
            let Value::Object(m) = v else {
                return String::new();
            };
            m.iter()
                .filter(|(k, _)| k.parse::<u64>().is_ok())
                .map(|(k, x)| {
                    let g = |p: &str| {
                        x.pointer(p)
                            .and_then(Value::as_f64)
                            .map_or("?".into(), pretty)
                    };
                    format!(
                        "{} pending: enqueue {} µs, fire {} µs",
                        pretty_count(k.parse().unwrap_or(0)),
                        g("/enqueue_us_per_job"),
                        g("/fire_us_per_job")
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        }
        _ => String::new(),
    }
}

/// Runs a command with a time limit and returns its stdout.
fn run_captured(program: &str, args: &[&str], timeout: Duration) -> Result<String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{program} did not finish within {timeout:?}").into());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = reader.join().unwrap_or_default();
    if !status.success() {
        return Err(format!("{program} failed ({status}): {text}").into());
    }
    Ok(text)
}

/// `NAME: 123.45 requests per second, …` lines of `redis-benchmark -q` (progress lines are
/// separated by `\r`) → NAME → requests per second.
fn parse_benchmark(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for segment in text.split(['\r', '\n']) {
        let Some((head, _)) = segment.split_once(" requests per second") else {
            continue;
        };
        let Some((name, rps)) = head.rsplit_once(": ") else {
            continue;
        };
        if let Ok(rps) = rps.trim().parse::<f64>() {
            out.insert(name.trim().to_owned(), rps);
        }
    }
    out
}

/// `git describe --always --dirty` of the workspace, if git is there.
fn git_describe() -> Option<String> {
    let out = Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// `YYYYMMDDTHHMMSSZ` of a time (UTC).
fn utc_stamp(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A number for the table: thousands separated, sensible decimals.
fn pretty(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    let a = x.abs();
    if a >= 1000.0 {
        let int = x.round() as i64;
        let digits = int.unsigned_abs().to_string();
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        if int < 0 { format!("-{out}") } else { out }
    } else if a >= 100.0 || x == x.trunc() {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// 10k, 1M, 10M.
fn pretty_count(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n.is_multiple_of(1_000_000) => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n.is_multiple_of(1_000) => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn benchmark_output_parses() {
        let text = "SET: rps=0.0 (overall: nan) avg_msec=nan (overall: nan)\r\
                    SET: 98765.43 requests per second, p50=0.255 msec\n\
                    LPUSH: 100000.00 requests per second, p50=0.247 msec\n\
                    EVALSHA abc 2 ceil:{x}:z ceil:{x}:h __rand_int__ ppp: 45000.50 requests per second, p50=1 msec\n";
        let r = parse_benchmark(text);
        assert_eq!(r["SET"], 98765.43);
        assert_eq!(r["LPUSH"], 100000.0);
        assert_eq!(r.len(), 3);
    }

    #[test]
    fn stamps_and_numbers() {
        assert_eq!(utc_stamp(UNIX_EPOCH), "19700101T000000Z");
        assert_eq!(
            utc_stamp(UNIX_EPOCH + Duration::from_secs(1_709_251_199)),
            "20240229T235959Z"
        );
        assert_eq!(pretty(1234567.8), "1,234,568");
        assert_eq!(pretty(12.345), "12.3");
        assert_eq!(pretty(1.5), "1.50");
        assert_eq!(pretty(3.0), "3");
        assert_eq!(pretty_count(1_000_000), "1M");
        assert_eq!(pretty_count(10_000), "10k");
    }

    #[test]
    fn medians_and_verdicts() {
        let f = Figure {
            key: "x".into(),
            label: "x".into(),
            unit: "",
            values: vec![3.0, 1.0, 2.0],
            target: Some(("≤ 2", Check::MedianAtMost(2.0))),
        };
        assert_eq!(f.median(), Some(2.0));
        assert_eq!(f.verdict(), "PASS");
        let g = Figure {
            target: Some(("0", Check::MaxAtMost(0.0))),
            values: vec![0.0, 1.0, 0.0],
            ..f
        };
        assert_eq!(g.verdict(), "MISS");
    }
}
