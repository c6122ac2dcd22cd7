//! The after-scenario checks: the store's structural invariants, and the reconciliation of
//! what was enqueued against the store and the workers' ledgers.
//!
//! # Structural invariants
//!
//! Checked by dq-core's one checker of the Redis layout
//! ([`dq::store::redis::layout::Snapshot::violations`], where the rules are listed), on a
//! [`Snapshot`] read at the end of the scenario.
//!
//! # Reconciliation
//!
//! Every job whose enqueue returned `Ok` must be, at the end, succeeded (its record gone and a
//! finished run in a ledger), cancelled (by the test), or dead. A job still waiting or running
//! is **stuck**; a job gone with no finished run and not cancelled is **lost**. A job whose
//! enqueue returned an error is *ambiguous*: it may not exist, but if it does it must end.
//!
//! A job with more than one finished run is a **duplicate**. It is *explained* when all but
//! one of its finished runs were in flight when a fault hit: the run started before the fault
//! ended and had not finished more than [`ACK_WINDOW_MS`] before the fault began (a finished
//! run's ack may still be on its way). A fault hits one process (a kill, a pause) or all of
//! them (Redis down, connections cut). Duplicates that are not explained fail the scenario.

use std::collections::{BTreeMap, BTreeSet, HashMap};

pub use dq::store::redis::layout::Snapshot;

use crate::ledger::{Entry, Kind};

/// How long after a handler finished its ack may still be unwritten: a run that finished this
/// long before a fault began counts as in flight at that fault.
pub const ACK_WINDOW_MS: u64 = 2_000;

/// The state letter of every job of every topic in `snapshot`, read from its header in
/// whatever record format it has (keys are assumed unique across topics; a value that is not
/// a record of a format this dq reads gives its first byte, `?` when empty).
pub fn states(snapshot: &Snapshot) -> HashMap<String, u8> {
    use dq::store::redis::layout::RecordHeader;
    snapshot
        .partitions
        .values()
        .flat_map(|part| {
            part.jobs.iter().map(|(k, r)| {
                let state = RecordHeader::decode(r)
                    .map_or_else(|_| r.first().copied().unwrap_or(b'?'), |h| h.state.code());
                (k.clone(), state)
            })
        })
        .collect()
}

/// A fault injected by a scenario, for explaining duplicates.
#[derive(Clone, Debug)]
pub struct Fault {
    /// What it was, for reports ("SIGKILL worker w3").
    pub what: String,
    /// The process it hit, or `None` for every process (Redis or network faults).
    pub pid: Option<u32>,
    /// When it began (Unix ms).
    pub start_ms: u64,
    /// When it ended (Unix ms; equal to `start_ms` for a kill).
    pub end_ms: u64,
}

impl Fault {
    /// Whether a run of `pid` from `started` to `finished` (if it did) may have been in flight
    /// at it: started before it ended, and not finished more than [`ACK_WINDOW_MS`] before it
    /// began (its ack may not have been written yet).
    pub fn hit(&self, pid: u32, started: u64, finished: Option<u64>) -> bool {
        self.pid.is_none_or(|p| p == pid)
            && started <= self.end_ms
            && finished.is_none_or(|f| f + ACK_WINDOW_MS >= self.start_ms)
    }

    /// Whether a run was running (its handler had not finished) while the fault was on.
    pub fn interrupted(&self, pid: u32, started: u64, finished: Option<u64>) -> bool {
        self.pid.is_none_or(|p| p == pid)
            && started <= self.end_ms
            && finished.is_none_or(|f| f >= self.start_ms)
    }
}

/// What the test knows about the jobs it enqueued.
#[derive(Clone, Debug, Default)]
pub struct Expected {
    /// Keys whose enqueue returned `Ok`, with when it returned (Unix ms).
    pub ok: BTreeMap<String, u64>,
    /// Keys whose enqueue returned an error: they may or may not exist.
    pub ambiguous: BTreeSet<String>,
    /// Keys the test cancelled successfully.
    pub cancelled: BTreeSet<String>,
    /// When the enqueue call of a key began (Unix ms), where the test recorded it: a call that
    /// spanned a fault had an ambiguous first try and was retried by the client.
    pub call_started: BTreeMap<String, u64>,
}

impl Expected {
    /// Whether the enqueue call of `key` was in progress while a fault was on.
    pub fn call_spanned(&self, key: &str, faults: &[Fault]) -> bool {
        let (Some(start), Some(end)) = (self.call_started.get(key), self.ok.get(key)) else {
            return false;
        };
        faults
            .iter()
            .any(|f| f.pid.is_none() && *start <= f.end_ms && *end >= f.start_ms)
    }
}

/// One handler run, assembled from its ledger lines.
#[derive(Clone, Debug)]
pub struct Run {
    /// The delivery token.
    pub token: u64,
    /// The attempt.
    pub attempt: u32,
    /// The worker process.
    pub pid: u32,
    /// Start (Unix ms).
    pub started: u64,
    /// Finish (Unix ms), if the handler finished.
    pub finished: Option<u64>,
    /// Whether the handler noticed a cancellation.
    pub cancelled: bool,
    /// Whether it aborted the process.
    pub aborted: bool,
}

/// Groups ledger entries into runs per job key (a run is one delivery token of one key).
pub fn runs(entries: &[Entry]) -> BTreeMap<String, Vec<Run>> {
    let mut by_key: BTreeMap<String, BTreeMap<(u64, u32), Run>> = BTreeMap::new();
    for e in entries {
        let run = by_key
            .entry(e.key.clone())
            .or_default()
            .entry((e.token, e.pid))
            .or_insert(Run {
                token: e.token,
                attempt: e.attempt,
                pid: e.pid,
                started: e.ms,
                finished: None,
                cancelled: false,
                aborted: false,
            });
        match e.kind {
            Kind::Start => run.started = e.ms,
            Kind::Finish => run.finished = Some(e.ms),
            Kind::Cancelled => run.cancelled = true,
            Kind::Abort => run.aborted = true,
            // A deliberate failure: the run stays unfinished and its job is retried.
            Kind::Failed => {}
        }
    }
    by_key
        .into_iter()
        .map(|(k, m)| {
            let mut v: Vec<Run> = m.into_values().collect();
            v.sort_by_key(|r| (r.started, r.token));
            (k, v)
        })
        .collect()
}

/// The outcome of a scenario, job by job, summed up.
#[derive(Clone, Debug, Default)]
pub struct Reconciliation {
    /// Jobs whose enqueue returned `Ok`.
    pub jobs: usize,
    /// Jobs with an ambiguous enqueue (returned an error).
    pub ambiguous: usize,
    /// Of the ambiguous ones: never created.
    pub ambiguous_absent: usize,
    /// Jobs gone from the store with a finished run.
    pub succeeded: usize,
    /// Jobs in the dead queue.
    pub dead: Vec<String>,
    /// Jobs cancelled by the test.
    pub cancelled: usize,
    /// Jobs still waiting or running, with their state.
    pub stuck: Vec<(String, char)>,
    /// Jobs gone without a finished run and not cancelled.
    pub lost: Vec<String>,
    /// Jobs with more than one finished run.
    pub duplicates: usize,
    /// Duplicates not explained by a fault (each with its runs).
    pub unexplained: Vec<String>,
    /// Duplicates that are a second *job*, not a second delivery: a later run starts again at
    /// an attempt no higher than an earlier finished run's, and the key's enqueue call spanned
    /// a fault — the client retried an enqueue whose first try had been applied, after the job
    /// had already run and been deleted (finding: enqueue-by-key is idempotent only while the
    /// job exists). Counted apart from `unexplained`; each with its runs.
    pub recreated: Vec<String>,
    /// Runs whose handler was running when a fault hit.
    pub in_flight_at_faults: usize,
    /// Runs that started but never finished (killed, cancelled, aborted).
    pub unfinished_runs: usize,
    /// Keys found in a ledger or the store that the test never enqueued.
    pub unknown: Vec<String>,
    /// Malformed ledger lines.
    pub torn_lines: usize,
    /// Structural invariant violations of the store.
    pub violations: Vec<String>,
}

impl Reconciliation {
    /// Reconciles `expected` against a store snapshot and the ledgers (all topics).
    pub fn compute(
        expected: &Expected,
        snapshot: &Snapshot,
        entries: &[Entry],
        torn_lines: usize,
        faults: &[Fault],
    ) -> Reconciliation {
        let states = states(snapshot);
        let runs = runs(entries);
        let mut r = Reconciliation {
            jobs: expected.ok.len(),
            torn_lines,
            violations: snapshot
                .violations()
                .iter()
                .map(ToString::to_string)
                .collect(),
            ..Reconciliation::default()
        };
        let mut judge = |key: &String, must_exist: bool| {
            let finished = runs
                .get(key)
                .map_or(0, |v| v.iter().filter(|r| r.finished.is_some()).count());
            match states.get(key) {
                Some(b'D') => r.dead.push(key.clone()),
                Some(s) => r.stuck.push((key.clone(), *s as char)),
                None if finished > 0 => r.succeeded += 1,
                None if expected.cancelled.contains(key) => r.cancelled += 1,
                None if must_exist => r.lost.push(key.clone()),
                None => r.ambiguous_absent += 1,
            }
        };
        for key in expected.ok.keys() {
            judge(key, true);
        }
        for key in expected
            .ambiguous
            .iter()
            .filter(|k| !expected.ok.contains_key(*k))
        {
            r.ambiguous += 1;
            judge(key, false);
        }
        let known = |k: &String| expected.ok.contains_key(k) || expected.ambiguous.contains(k);
        r.unknown = states
            .keys()
            .chain(runs.keys())
            .filter(|k| !known(k))
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        for (key, key_runs) in &runs {
            for run in key_runs {
                if run.finished.is_none() {
                    r.unfinished_runs += 1;
                }
                if faults
                    .iter()
                    .any(|f| f.interrupted(run.pid, run.started, run.finished))
                {
                    r.in_flight_at_faults += 1;
                }
            }
            let finished: Vec<&Run> = key_runs.iter().filter(|r| r.finished.is_some()).collect();
            if finished.len() > 1 {
                r.duplicates += 1;
                let unhit = finished
                    .iter()
                    .filter(|run| {
                        !faults
                            .iter()
                            .any(|f| f.hit(run.pid, run.started, run.finished))
                    })
                    .count();
                let restarted = finished.windows(2).any(|w| {
                    let (a, b) = if w[0].token < w[1].token {
                        (w[0], w[1])
                    } else {
                        (w[1], w[0])
                    };
                    b.attempt <= a.attempt
                });
                if unhit > 1 {
                    if restarted && expected.call_spanned(key, faults) {
                        r.recreated.push(format!("{key}: {key_runs:?}"));
                    } else {
                        r.unexplained.push(format!("{key}: {key_runs:?}"));
                    }
                }
            }
        }
        r
    }

    /// Everything that makes the scenario fail: lost, stuck, unexplained duplicates, unknown
    /// jobs, torn ledger lines and structural violations. Dead jobs are the caller's to judge.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if !self.lost.is_empty() {
            p.push(format!("{} lost: {:?}", self.lost.len(), first(&self.lost)));
        }
        if !self.stuck.is_empty() {
            p.push(format!(
                "{} stuck: {:?}",
                self.stuck.len(),
                first(&self.stuck)
            ));
        }
        if !self.unexplained.is_empty() {
            p.push(format!(
                "{} duplicates not in flight at any fault: {:?}",
                self.unexplained.len(),
                first(&self.unexplained)
            ));
        }
        if !self.unknown.is_empty() {
            p.push(format!("unknown jobs: {:?}", first(&self.unknown)));
        }
        if self.torn_lines > 0 {
            p.push(format!("{} torn ledger lines", self.torn_lines));
        }
        for v in self.violations.iter().take(20) {
            p.push(format!("invariant: {v}"));
        }
        p
    }

    /// One line for the scenario report.
    pub fn summary(&self) -> String {
        format!(
            "jobs={} succeeded={} dead={} cancelled={} ambiguous={} (absent {}) lost={} stuck={} \
             duplicates={} (unexplained {}, re-created by a retried enqueue {}) \
             in_flight_at_faults={} unfinished_runs={} violations={}",
            self.jobs,
            self.succeeded,
            self.dead.len(),
            self.cancelled,
            self.ambiguous,
            self.ambiguous_absent,
            self.lost.len(),
            self.stuck.len(),
            self.duplicates,
            self.unexplained.len(),
            self.recreated.len(),
            self.in_flight_at_faults,
            self.unfinished_runs,
            self.violations.len()
        )
    }
}

fn first<T: Clone>(v: &[T]) -> Vec<T> {
    v.iter().take(10).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_are_explained_by_faults_only() {
        let e = |kind, key: &str, token, pid, ms| Entry {
            kind,
            key: key.into(),
            token,
            attempt: 1,
            pid,
            ms,
        };
        let entries = vec![
            // "a": run by pid 1 finished at 1000, pid 1 killed at 1500: explained.
            e(Kind::Start, "a", 1, 1, 900),
            e(Kind::Finish, "a", 1, 1, 1000),
            e(Kind::Start, "a", 2, 2, 3000),
            e(Kind::Finish, "a", 2, 2, 3100),
            // "b": both runs by a live pid long before any fault: unexplained.
            e(Kind::Start, "b", 3, 2, 100),
            e(Kind::Finish, "b", 3, 2, 110),
            e(Kind::Start, "b", 4, 2, 200),
            e(Kind::Finish, "b", 4, 2, 210),
        ];
        let faults = vec![Fault {
            what: "kill".into(),
            pid: Some(1),
            start_ms: 1500,
            end_ms: 1500,
        }];
        let mut expected = Expected::default();
        expected.ok.insert("a".into(), 0);
        expected.ok.insert("b".into(), 0);
        let r = Reconciliation::compute(&expected, &Snapshot::default(), &entries, 0, &faults);
        assert_eq!(r.succeeded, 2);
        assert_eq!(r.duplicates, 2);
        assert_eq!(r.unexplained.len(), 1);
        assert!(r.unexplained[0].starts_with("b:"));
    }

    #[test]
    fn a_second_job_from_a_retried_enqueue_is_told_apart() {
        let e = |kind, token, ms| Entry {
            kind,
            key: "k".into(),
            token,
            attempt: 1,
            pid: 9,
            ms,
        };
        // Both runs after the outage, both attempt 1: the job was created twice.
        let entries = vec![
            e(Kind::Start, 1, 2100),
            e(Kind::Finish, 1, 2110),
            e(Kind::Start, 2, 2900),
            e(Kind::Finish, 2, 2910),
        ];
        let outage = Fault {
            what: "redis down".into(),
            pid: None,
            start_ms: 1000,
            end_ms: 2000,
        };
        let mut expected = Expected::default();
        expected.ok.insert("k".into(), 2800);
        expected.call_started.insert("k".into(), 990);
        let r = Reconciliation::compute(
            &expected,
            &Snapshot::default(),
            &entries,
            0,
            std::slice::from_ref(&outage),
        );
        assert_eq!((r.recreated.len(), r.unexplained.len()), (1, 0));
        // The same runs without a call spanning the outage stay unexplained.
        expected.call_started.insert("k".into(), 2500);
        let r = Reconciliation::compute(&expected, &Snapshot::default(), &entries, 0, &[outage]);
        assert_eq!((r.recreated.len(), r.unexplained.len()), (0, 1));
    }
}
