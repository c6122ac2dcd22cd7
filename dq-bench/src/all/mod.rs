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
//! The `bullmq` section (not in `--quick`) drives the BullMQ peer in `dq-bench/peers/bullmq`
//! (a Node.js program implementing the same contract) on the same private redis-server, so
//! dq's figures are read beside BullMQ's from the same run.
//!
//! Every wait is bounded; every child process is killed if it outlives its purpose.
//!
//! This file holds the orchestration (the plan, the order of sections, the child processes'
//! start and finish, repetitions); the sections themselves are in `scenarios.rs`,
//! `ceiling.rs`, `lease_floor.rs`, `client_floor.rs`, `batches.rs` (and the others below), the figures and their targets in `figures.rs`, the printed table and the JSON
//! file in `report.rs`. The other files start with `use super::*;`: the imports below are
//! shared by all.

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

mod batches;
mod bullmq;
mod ceiling;
mod client_floor;
mod figures;
mod groups;
mod http;
mod lease_floor;
mod limiter;
mod payloads;
mod priority;
mod process;
mod report;
mod scaleout;
mod scenarios;

use self::figures::Figure;
use self::process::{Proc, Sampler, cpu_pct};
use self::report::{git_describe, pretty, pretty_count};

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
    /// Only these sections, comma-separated: s1 (or s2: S1 with S2 memory and the -c 1 ceiling), s3,
    /// s3c1, s3r, s3r-metrics, s3r-keep, s3r-events, s3r-priority, s3r-groups, batches, profile, s4, s5, idle, scale, scale-dense,
    /// mass, scaleout,
    /// limiter, payloads, ceilings, lease-floor, client-floor, http, bullmq (default: all; with --quick
    /// all but bullmq).
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
    /// Tasks of S1 `concurrent`.
    s1_tasks: usize,
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
    /// Dense-due scale variant: the pending jobs are due within this window, ms.
    dense_window_ms: u64,
    /// Dense-due scale variant: the window starts this far ahead (never fires in the run), ms.
    dense_lead_ms: u64,
    mass_n: u64,
    mass_lead_ms: u64,
    bench_requests: u64,
    zset_members: u64,
    zrem_calls: u64,
    /// How long the limiter section's rate is measured, s.
    limiter_secs: u64,
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
                s1_tasks: 64,
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
                dense_window_ms: 60_000,
                dense_lead_ms: 3_600_000,
                mass_n: 2_000,
                mass_lead_ms: 1_500,
                bench_requests: 20_000,
                zset_members: 100_000,
                zrem_calls: 200,
                limiter_secs: 3,
            }
        } else {
            Plan {
                quick: false,
                reps: args.reps.unwrap_or(3),
                conc: 50,
                linger_ms: 3_000,
                s1_n: 100_000,
                s1_tasks: 64,
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
                dense_window_ms: 60_000,
                dense_lead_ms: 3_600_000,
                mass_n: 100_000,
                mass_lead_ms: 5_000,
                bench_requests: 200_000,
                zset_members: 1_000_000,
                zrem_calls: 5_000,
                limiter_secs: 30,
            }
        }
    }
}

/// A program implementing the SCENARIOS.md contract: this binary (dq) or a peer queue's.
#[derive(Clone, Debug)]
struct Peer {
    /// What the figures call it (`dq`, `bullmq`).
    name: &'static str,
    /// The program run.
    program: PathBuf,
    /// Arguments before the contract's (`bench.mjs` for the Node.js peer).
    prefix: Vec<String>,
}

impl Peer {
    /// The contract command `args`, after the prefix.
    fn args(&self, args: &[String]) -> Vec<String> {
        [self.prefix.clone(), args.to_vec()].concat()
    }
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
    /// This binary as a [`Peer`] (dq).
    dq: Peer,
    tck: f64,
    figures: Vec<Figure>,
    runs: BTreeMap<String, Vec<Value>>,
    notes: Vec<String>,
    ceilings: Value,
    /// Runs and sections that failed (not targets missed).
    errors: usize,
    /// `git describe --always --dirty` of the measured tree, taken at the start.
    git: Option<String>,
    /// Extra arguments of the next workers started (`--metrics`).
    worker_extra: Vec<String>,
    /// Limits the next drain's topic gets before its worker starts (the limiter section).
    limits: Option<limiter::Limits>,
    /// Extra arguments of the next drains' producers (`--positional`).
    producer_extra: Vec<String>,
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
        dq: Peer {
            name: "dq",
            program: exe.clone(),
            prefix: Vec::new(),
        },
        exe,
        tck: clock_ticks(),
        figures: Vec::new(),
        runs: BTreeMap::new(),
        notes: Vec::new(),
        ceilings: Value::Null,
        errors: 0,
        git: git_describe(),
        worker_extra: Vec::new(),
        limits: None,
        producer_extra: Vec::new(),
    };
    o.declare_figures();
    eprintln!(
        "dq-bench all: redis-server pid {} on {} ({} repetition(s){})",
        o.server.pid(),
        o.server.url(),
        o.plan.reps,
        if o.plan.quick { ", quick" } else { "" }
    );
    // `bullmq` needs Node.js and takes minutes: never part of `--quick` unless named. S2 is
    // measured in the s1 section (`s2` names it too).
    let quick = o.plan.quick;
    let wanted = |name: &str| {
        if args.only.is_empty() {
            !(quick && name == "bullmq")
        } else {
            args.only
                .iter()
                .any(|o| o == name || (o == "s2" && name == "s1"))
        }
    };
    type Section = fn(&mut Orchestrator) -> Result<()>;
    let sections: [(&str, Section); 25] = [
        ("s1", Orchestrator::s1),
        ("s3", |o| o.drains("s3")),
        ("s3c1", |o| o.drains("s3c1")),
        ("s3r", |o| o.drains("s3r")),
        ("s3r-metrics", Orchestrator::s3r_metrics),
        ("s3r-keep", Orchestrator::s3r_keep),
        ("s3r-events", Orchestrator::s3r_events),
        ("s3r-priority", Orchestrator::s3r_priority),
        ("s3r-groups", Orchestrator::s3r_groups),
        ("batches", Orchestrator::batches),
        ("profile", Orchestrator::profile),
        ("s4", Orchestrator::s4),
        ("s5", Orchestrator::s5),
        ("idle", Orchestrator::idle),
        ("scale", Orchestrator::scale),
        ("scale-dense", Orchestrator::scale_dense),
        ("mass", Orchestrator::mass),
        ("scaleout", Orchestrator::scaleout),
        ("limiter", Orchestrator::limiter),
        ("payloads", Orchestrator::payloads),
        ("ceilings", Orchestrator::ceilings),
        ("lease-floor", Orchestrator::lease_floor),
        ("client-floor", Orchestrator::client_floor),
        ("http", Orchestrator::http),
        ("bullmq", Orchestrator::bullmq),
    ];
    for name in &args.only {
        if name != "s2" && !sections.iter().any(|(s, _)| s == name) {
            return Err(format!("--only: no section {name:?}").into());
        }
    }
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

    /// [`Orchestrator::push`] to a figure declared on first use (no target), with its label
    /// and unit.
    fn push_labeled(&mut self, key: &str, label: &str, unit: &'static str, value: f64) {
        if !self.figures.iter().any(|f| f.key == key) {
            self.figures.push(Figure {
                key: key.to_owned(),
                label: label.to_owned(),
                unit,
                values: Vec::new(),
                target: None,
            });
        }
        self.push(key, value);
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
        let dq = self.dq.clone();
        self.enqueue_with(&dq, args)
    }

    /// Runs `<peer> enqueue …` to its result line.
    fn enqueue_with(&self, peer: &Peer, args: &[String]) -> Result<Value> {
        let mut full = vec![s("enqueue")];
        full.extend(args.iter().cloned());
        let proc = Proc::spawn(&peer.program, &self.url(), &peer.args(&full))?;
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
        let dq = self.dq.clone();
        self.start_worker_with(&dq, scenario, conc, n, timeout_s)
    }

    /// Starts `<peer> worker …` and waits for its ready line.
    fn start_worker_with(
        &self,
        peer: &Peer,
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
        let args = [args, self.worker_extra.clone()].concat();
        let mut proc = Proc::spawn(&peer.program, &self.url(), &peer.args(&args))?;
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
            "single {} jobs/s (current-thread {}; -c 1 EVALSHA ceiling {}), concurrent {}, \
             bulk {} jobs/s; {} B/job after single, {} after bulk",
            f("/single/jobs_per_s"),
            f("/single_current/jobs_per_s"),
            f("/ceiling_c1_evalsha_rps"),
            f("/concurrent/jobs_per_s"),
            f("/bulk/jobs_per_s"),
            f("/s2_single/bytes_per_job"),
            f("/s2/bytes_per_job")
        ),
        "bullmq" => format!(
            "S3R dq {} vs BullMQ {} jobs/s; BullMQ S1 single {} bulk {} concurrent {}, \
             S3 {} jobs/s, S4 p99 {} ms, S5 {} s",
            f("/dq_s3r/worker/jobs_per_s"),
            f("/s3r/worker/jobs_per_s"),
            f("/s1_single/jobs_per_s"),
            f("/s1_bulk/jobs_per_s"),
            f("/s1_concurrent/jobs_per_s"),
            f("/s3/worker/jobs_per_s"),
            f("/s4/worker/lateness_ms/p99"),
            f("/s5/total_secs")
        ),
        "s3" | "s3c1" | "s3r" => format!(
            "{} jobs/s, not once {}, redis {}% worker {}% CPU, script calls {} µs/call",
            f("/worker/jobs_per_s"),
            f("/worker/jobs_not_exactly_expected"),
            f("/cpu/redis_pct"),
            f("/cpu/worker_pct"),
            f("/redis/script_usec_per_call")
        ),
        "limiter" => format!(
            "S3R without limits {} jobs/s, with limits that never bind {} (ratio {}); \
             a 1000/s limit measured {} jobs/s ({} %)",
            f("/s3r_plain_rate"),
            f("/s3r_limits_rate"),
            f("/ratio"),
            f("/rate_measured"),
            f("/rate_error_pct")
        ),
        "s3r-keep" => format!(
            "S3R deleting {} / keeping {} jobs/s (ratio {}); Redis {} / {} µs/job",
            f("/plain_rate"),
            f("/keep_rate"),
            f("/ratio"),
            f("/plain_server_us_per_job"),
            f("/keep_server_us_per_job")
        ),
        "s3r-events" => format!(
            "S3R without events {} / recording them {} jobs/s (ratio {}); Redis {} / {} µs/job",
            f("/plain_rate"),
            f("/events_rate"),
            f("/ratio"),
            f("/plain_server_us_per_job"),
            f("/events_server_us_per_job")
        ),
        "s3r-groups" => format!(
            "S3R without groups {} / over {} groups {} jobs/s (ratio {}); Redis {} / {} µs/job",
            f("/plain_rate"),
            f("/groups"),
            f("/groups_rate"),
            f("/ratio"),
            f("/plain_server_us_per_job"),
            f("/groups_server_us_per_job")
        ),
        "batches" => format!(
            "Redis time per job plain {} / members {} µs (Δ {} per member; CPU Δ {}); plain \
             jobs in a partition that held a member Δ {} µs; callback {} ms after the last \
             end, outbox peak {} notes; pending {} / {} B/job (Δ {} per member, the batch's \
             hash {}), {} B per outbox note; relay alone {} µs per note",
            f("/drains/plain_us_per_job"),
            f("/drains/member_us_per_job"),
            f("/drains/us_per_member"),
            f("/drains/cpu_us_per_member"),
            f("/drains/tax_over_plain_us_per_job"),
            f("/drains/runs/member/worker/callback_lag_ms"),
            f("/drains/runs/member/outbox/peak_notes"),
            f("/bytes/plain_bytes_per_job"),
            f("/bytes/member_bytes_per_job"),
            f("/bytes/bytes_per_member"),
            f("/bytes/hash_bytes_per_member"),
            f("/bytes/outbox/bytes_per_note"),
            f("/bytes/outbox/relay/us")
        ),
        "s3r-priority" => {
            let pair = |name: &str| {
                let g = |p: &str| f(&format!("/{name}{p}"));
                format!(
                    "{} normal {} / mixed {} jobs/s (ratio {}); Redis {} / {} µs/job; \
                     mean completion rank HIGH {} NORMAL {} LOW {}",
                    name.to_uppercase(),
                    g("/plain_rate"),
                    g("/priority_rate"),
                    g("/ratio"),
                    g("/plain_server_us_per_job"),
                    g("/priority_server_us_per_job"),
                    g("/mean_rank/high"),
                    g("/mean_rank/normal"),
                    g("/mean_rank/low")
                )
            };
            format!("{}; {}", pair("s3r"), pair("s3"))
        }
        "payloads" => format!(
            "S2 named {} / positional {} B/job (payload {} / {} B); \
             S3R named {} / positional {} jobs/s (ratio {})",
            f("/s2_named_bytes_per_job"),
            f("/s2_positional_bytes_per_job"),
            f("/named_payload_bytes"),
            f("/positional_payload_bytes"),
            f("/s3r_named_rate"),
            f("/s3r_positional_rate"),
            f("/ratio")
        ),
        "http" => format!(
            "direct c=1 {} / HTTP c=1 {} jobs/s (ratio {}); the HTTP round trip alone costs \
             {} µs, bounding it at {} ({} µs beyond); direct c=64 {} / HTTP c=64 {} jobs/s \
             (ratio {}; floor {} calls/s); jobs per enqueue call at c=64: direct {}, HTTP {}",
            f("/direct_c1"),
            f("/http_c1"),
            f("/ratio_c1"),
            f("/floor_c1_us"),
            f("/bound_c1"),
            f("/rest_c1_us"),
            f("/direct_c64"),
            f("/http_c64"),
            f("/ratio_c64"),
            f("/floor_c64"),
            f("/direct_c64_jobs_per_call"),
            f("/http_c64_jobs_per_call")
        ),
        "s3r-metrics" => format!(
            "without {} jobs/s, with a recorder {} jobs/s, ratio {}",
            f("/plain_rate"),
            f("/metrics_rate"),
            f("/ratio")
        ),
        "s4" => format!(
            "lateness p50 {} p90 {} p99 {} max {} ms",
            f("/worker/lateness_ms/p50"),
            f("/worker/lateness_ms/p90"),
            f("/worker/lateness_ms/p99"),
            f("/worker/lateness_ms/max")
        ),
        "s5" => format!(
            "total {} s, not twice {}; S3R of the same N {} s; (total − 1 s) / S3R {}",
            f("/total_secs"),
            f("/worker/jobs_not_exactly_expected"),
            f("/s3r_same_n/secs"),
            f("/retry_ratio")
        ),
        "idle" => format!("{} cmd/s per fetcher", f("/cmds_per_s_per_fetcher")),
        "scaleout" => scaleout::summary(v),
        "mass" => format!(
            "last start {} ms after due, longest script {} µs",
            f("/worker/lateness_ms/max"),
            f("/longest_script_us")
        ),
        "scale" | "scale-dense" => {
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
                        "{} pending: enqueue {} µs (script {}), fire {} µs (script {})",
                        pretty_count(k.parse().unwrap_or(0)),
                        g("/enqueue_us_per_job"),
                        g("/enqueue_script_us_per_job"),
                        g("/fire_us_per_job"),
                        g("/fire_script_us_per_job")
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        }
        _ => String::new(),
    }
}
