//! `dq-bench soak`: a long run of mixed load with a worker process killed over and over,
//! then a reconciliation and the memory drift. Not run in CI (30 minutes by default); a short
//! run is the test `dq-bench/tests/soak.rs`. The soak, in order:
//!
//! 1. starts a private `redis-server` (no persistence) and two `fault-worker` processes of
//!    dq-faults on topics `fault.work` and `fault.flaky`: one long-lived, one killed;
//! 2. produces the load of [`load`] from this process for `--minutes`, while it `SIGKILL`s
//!    the killed worker every `--kill-every` seconds (restarting it at once), samples memory
//!    (the long-lived worker's RSS, Redis `used_memory` per pending job) and prints a
//!    progress line every `--report-every` seconds;
//! 3. stops the load and waits, within a bound, until nothing is scheduled, ready, running or
//!    in retry;
//! 4. stops the workers with `SIGTERM` and reconciles the load's record with the store and the
//!    workers' ledgers (dq-faults' checker: lost, stuck, duplicates explained by a kill or
//!    not, the store's structural invariants);
//! 5. prints one JSON line on stdout and a table on stderr; fails (keeping the ledgers) when a
//!    job was lost or stuck or dead, a duplicate is unexplained, or an invariant is violated.

mod args;
mod load;
mod memory;
mod report;

pub use args::SoakArgs;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dq_faults::{FLAKY_TOPIC, Scenario, WORK_TOPIC};
use dq_testkit::ServerOptions;

use crate::Result;
use args::Plan;
use load::Load;
use memory::Sample;
use report::Outcome;

/// The topics the load uses and the workers run.
const TOPICS: [&str; 2] = [WORK_TOPIC, FLAKY_TOPIC];
/// The worker that is never killed (its RSS is the worker RSS figure).
const STEADY: usize = 0;
/// The worker killed every `--kill-every`.
const KILLED: usize = 1;
/// How long a worker has to stop after `SIGTERM` at the end.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `dq-bench soak`; prints the JSON line; an error when the soak found a problem.
pub async fn run(args: SoakArgs) -> Result<()> {
    let plan = Plan::new(&args)?;
    let binary = plan
        .fault_worker
        .to_str()
        .ok_or("the fault-worker path is not UTF-8")?
        .to_owned();
    eprintln!(
        "dq-bench soak: {:.1} min at {} jobs/s, a worker killed every {:.1} s; starting redis-server and workers ...",
        plan.run.as_secs_f64() / 60.0,
        plan.rate,
        plan.kill_every.as_secs_f64()
    );
    let mut s = Scenario::start("soak", &binary, ServerOptions::default()).await;
    let mut spec = s.spec();
    spec.topics = TOPICS.map(String::from).into();
    spec.concurrency = plan.concurrency;
    spec.lease = plan.lease;
    // Spawning waits for `ready` on a blocking channel: off the runtime's async threads.
    tokio::task::block_in_place(|| {
        s.spawn(&spec);
        s.spawn(&spec);
    });
    let mut admin = s.server.connection();
    let used_memory_empty = used_memory(&mut admin)?;

    let enqueued = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let load =
        tokio::spawn(Load::new(s.client.clone(), plan.clone(), enqueued.clone()).run(stop.clone()));
    let start = Instant::now();
    let mut problems = Vec::new();
    let mut samples = Vec::new();
    let mut kills = 0;
    let (mut next_kill, mut next_sample, mut next_report) =
        (plan.kill_every, plan.sample_every, plan.report_every);
    loop {
        let now = start.elapsed();
        if now >= plan.run {
            break;
        }
        if now >= next_kill {
            tokio::task::block_in_place(|| {
                s.kill(KILLED);
                s.respawn(KILLED, &spec);
            });
            kills += 1;
            next_kill = (next_kill + plan.kill_every).max(start.elapsed());
        }
        if now >= next_sample {
            samples.push(sample(&s, &mut admin, start, used_memory_empty).await?);
            next_sample += plan.sample_every;
        }
        if now >= next_report {
            let last = samples.last();
            eprintln!(
                "soak: {:>6.0} s  enqueued {:>9}  kills {:>4}  pending {:>7}  worker RSS {:>7} KiB  Redis {:>6.0} B/pending job",
                now.as_secs_f64(),
                enqueued.load(Ordering::Relaxed),
                kills,
                last.map_or(0, |x| x.pending),
                last.and_then(|x| x.worker_rss_kib).unwrap_or(0),
                last.and_then(Sample::redis_per_pending).unwrap_or(0.0),
            );
            next_report += plan.report_every;
        }
        if let Some(status) = s.workers[STEADY].exited() {
            problems.push(format!("the long-lived worker exited ({status})"));
            break;
        }
        let wake = next_kill.min(next_sample).min(next_report).min(plan.run);
        // Pacing to the next scheduled event, not a wait for a condition.
        tokio::time::sleep(wake.saturating_sub(start.elapsed())).await;
    }
    stop.store(true, Ordering::Relaxed);
    let produced = load.await?;
    samples.push(sample(&s, &mut admin, start, used_memory_empty).await?);

    eprintln!("soak: load stopped; waiting for everything due to run ...");
    let drain_start = Instant::now();
    let settled = drain(&s, plan.drain_limit()).await;
    let drain_s = drain_start.elapsed().as_secs_f64();
    tokio::task::block_in_place(|| stop_workers(&mut s, &mut problems));

    s.expected = produced.expected;
    let r = s.reconcile().await;
    problems.splice(0..0, r.problems());
    if !r.dead.is_empty() {
        problems.push(format!(
            "{} dead jobs: {:?}",
            r.dead.len(),
            &r.dead[..r.dead.len().min(10)]
        ));
    }
    if !problems.is_empty() {
        s.dir.disable_cleanup(true);
        problems.push(format!(
            "ledgers and worker logs kept in {}",
            s.dir().display()
        ));
    }
    let outcome = Outcome {
        plan: &plan,
        counts: &produced.counts,
        load_s: produced.elapsed.as_secs_f64(),
        kills,
        samples: &samples,
        used_memory_empty,
        drain_s,
        settled,
        reconciliation: &r,
        problems: &problems,
    };
    crate::emit(&outcome.json());
    eprintln!("{}", outcome.table());
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("the soak found problems: {}", problems.join("; ")).into())
    }
}

/// Redis `used_memory`, bytes.
fn used_memory(admin: &mut redis::Connection) -> Result<u64> {
    tokio::task::block_in_place(|| crate::redis_admin::info_u64(admin, "memory", "used_memory"))
}

/// Jobs in the store over every topic: `(all of them, those not yet ended)`, where ended is
/// dead (the rest is scheduled, ready, running or in retry).
async fn census(s: &Scenario) -> dq::Result<(u64, u64)> {
    let (mut all, mut waiting) = (0, 0);
    for topic in TOPICS {
        let t = s.stats(topic).await?;
        let w = t.scheduled + t.ready + t.active + t.retry;
        waiting += w;
        all += w + t.dead;
    }
    Ok((all, waiting))
}

/// One memory sample.
async fn sample(
    s: &Scenario,
    admin: &mut redis::Connection,
    start: Instant,
    used_memory_empty: u64,
) -> Result<Sample> {
    let used_memory = used_memory(admin)?;
    let (pending, _) = census(s).await?;
    Ok(Sample {
        at_s: start.elapsed().as_secs_f64(),
        worker_rss_kib: memory::rss_kib(s.workers[STEADY].pid()),
        used_memory,
        used_memory_empty,
        pending,
    })
}

/// Waits until nothing is scheduled, ready, running or in retry, for at most `limit`;
/// whether it got there.
async fn drain(s: &Scenario, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if matches!(census(s).await, Ok((_, 0))) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Stops every worker with `SIGTERM`; one that does not exit cleanly in time is a problem.
fn stop_workers(s: &mut Scenario, problems: &mut Vec<String>) {
    for w in &mut s.workers {
        if w.exited().is_some() {
            continue;
        }
        w.signal("TERM");
        match w.wait_exit(STOP_TIMEOUT) {
            Some(status) if status.success() => {}
            Some(status) => problems.push(format!(
                "worker {} exited with {status} on SIGTERM",
                w.name()
            )),
            None => problems.push(format!(
                "worker {} did not stop within {STOP_TIMEOUT:?} of SIGTERM",
                w.name()
            )),
        }
    }
}
