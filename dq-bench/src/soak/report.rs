//! The soak's report: one JSON line (every figure) for stdout, and a short table for stderr.

use serde_json::{Value, json};

use dq_faults::Reconciliation;

use super::args::Plan;
use super::load::Counts;
use super::memory::{Drift, Sample, drift};

/// Everything the report is made of.
pub struct Outcome<'a> {
    /// The plan the soak ran.
    pub plan: &'a Plan,
    /// The load's counters.
    pub counts: &'a Counts,
    /// How long the load ran, seconds.
    pub load_s: f64,
    /// Kills of the killed worker.
    pub kills: usize,
    /// Memory samples, the last one taken as the load stopped.
    pub samples: &'a [Sample],
    /// Redis `used_memory` before any job, bytes.
    pub used_memory_empty: u64,
    /// How long the drain took, seconds, and whether everything due ran within its limit.
    pub drain_s: f64,
    /// See `drain_s`.
    pub settled: bool,
    /// The reconciliation of the load with the store and the ledgers.
    pub reconciliation: &'a Reconciliation,
    /// Everything that fails the soak.
    pub problems: &'a [String],
}

impl Outcome<'_> {
    /// Duplicates whose extra finished runs were all in flight at a kill.
    fn explained(&self) -> usize {
        let r = self.reconciliation;
        r.duplicates
            .saturating_sub(r.unexplained.len())
            .saturating_sub(r.recreated.len())
    }

    fn rss(&self) -> Option<Drift> {
        drift(self.samples, self.plan.reference_at, Sample::worker_rss)
    }

    fn redis(&self) -> Option<Drift> {
        drift(
            self.samples,
            self.plan.reference_at,
            Sample::redis_per_pending,
        )
    }

    fn redis_above_empty(&self) -> Option<Drift> {
        drift(
            self.samples,
            self.plan.reference_at,
            Sample::redis_above_empty_per_pending,
        )
    }

    /// The JSON line.
    pub fn json(&self) -> Value {
        let (p, c, r) = (self.plan, self.counts, self.reconciliation);
        json!({
            "soak": {
                "minutes": p.run.as_secs_f64() / 60.0,
                "kill_every_s": p.kill_every.as_secs_f64(),
                "rate": p.rate,
                "lease_ms": p.lease.as_millis() as u64,
                "max_delay_s": p.max_delay.as_secs_f64(),
                "concurrency": p.concurrency,
                "seed": p.seed,
                "reference": p.reference_rule,
                "reference_at_s": p.reference_at.as_secs_f64(),
            },
            "ok": self.problems.is_empty(),
            "lost": r.lost.len(),
            "stuck": r.stuck.len(),
            "duplicates": r.duplicates,
            "duplicates_explained_by_kill": self.explained(),
            "duplicates_unexplained": r.unexplained.len(),
            "violations": r.violations.len(),
            "worker_rss_kib": self.rss(),
            "redis_used_memory_per_pending": self.redis(),
            "redis_used_memory_above_empty_per_pending": self.redis_above_empty(),
            "enqueued": c.enqueued,
            "enqueued_per_s": c.enqueued as f64 / self.load_s.max(1e-9),
            "kills": self.kills,
            "load_s": self.load_s,
            "drain_s": self.drain_s,
            "settled": self.settled,
            "load": c,
            "reconciliation": {
                "jobs": r.jobs,
                "succeeded": r.succeeded,
                "cancelled": r.cancelled,
                "dead": r.dead.len(),
                "ambiguous": r.ambiguous,
                "recreated": r.recreated.len(),
                "in_flight_at_kills": r.in_flight_at_faults,
                "unfinished_runs": r.unfinished_runs,
                "unknown": r.unknown.len(),
                "torn_lines": r.torn_lines,
            },
            "redis_used_memory_empty": self.used_memory_empty,
            "samples": self.samples,
            "problems": self.problems,
        })
    }

    /// The human table.
    pub fn table(&self) -> String {
        let (p, c, r) = (self.plan, self.counts, self.reconciliation);
        let pct = |part: u64| 100.0 * part as f64 / c.enqueued.max(1) as f64;
        let drift_line = |name: &str, unit: &str, d: Option<Drift>| match d {
            Some(d) => format!(
                "  {name:<34} {:>8.0} {unit} at {:>5.0} s  {:>8.0} {unit} at {:>5.0} s  drift {:+.1} %",
                d.reference, d.reference_at_s, d.end, d.end_at_s, d.drift_pct
            ),
            None => format!("  {name:<34} (too few samples)"),
        };
        let mut t = vec![
            format!(
                "soak: {:.1} min of load, {} jobs/s asked, {:.1} achieved, worker killed {} times, drain {:.1} s{}",
                self.load_s / 60.0,
                p.rate,
                c.enqueued as f64 / self.load_s.max(1e-9),
                self.kills,
                self.drain_s,
                if self.settled { "" } else { " (NOT settled)" }
            ),
            format!(
                "  enqueued {} (business keys {:.0} %, flaky {:.0} %; due now {:.0} %, soon {:.0} %, far {:.0} %), errors {}",
                c.enqueued,
                pct(c.business_keys),
                pct(c.flaky),
                pct(c.due_now),
                pct(c.due_soon),
                pct(c.due_far),
                c.enqueue_errors
            ),
            format!(
                "  cancels: {} cancelled, {} requested, {} not found; reschedules: {} moved, {} running, {} not found",
                c.cancel.cancelled,
                c.cancel.requested,
                c.cancel.not_found,
                c.reschedule.rescheduled,
                c.reschedule.running,
                c.reschedule.not_found
            ),
            format!(
                "  succeeded {}  cancelled {}  dead {}  LOST {}  stuck {}  duplicates {} (explained by a kill {}, UNEXPLAINED {})  invariant violations {}",
                r.succeeded,
                r.cancelled,
                r.dead.len(),
                r.lost.len(),
                r.stuck.len(),
                r.duplicates,
                self.explained(),
                r.unexplained.len(),
                r.violations.len()
            ),
            format!("  memory (reference: {}):", p.reference_rule),
            drift_line("worker RSS", "KiB", self.rss()),
            drift_line("Redis used_memory / pending job", "B", self.redis()),
            drift_line(
                "  the same above the empty server",
                "B",
                self.redis_above_empty(),
            ),
        ];
        if self.problems.is_empty() {
            t.push("  ok".into());
        } else {
            t.extend(self.problems.iter().map(|p| format!("  PROBLEM: {p}")));
        }
        t.join("\n")
    }
}
