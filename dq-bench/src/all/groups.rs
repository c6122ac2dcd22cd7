//! The `s3r-groups` section: what groups cost a drain, in the same run.
//!
//! Per repetition, a pair of S3R drains of N jobs due now by one worker (concurrency 50), in
//! alternating order so drift in the machine's load hits both halves alike: once without
//! groups (the `ready` list), once with `dq-bench enqueue --groups 10000` (order `id` in group
//! `g<id % 10000>`: the jobs wait in the partition's `gready`, and every fetch serves the
//! groups in turns, looking at most at `dq::GROUP_SCAN` groups). No group has limits: the
//! figures are the cost of the turns themselves.
//!
//! Figures: the rates, their ratio, and Redis's script time per job of each.

use super::*;

/// How many groups the grouped drain spreads its jobs over.
pub(super) const GROUPS: u64 = 10_000;

impl Orchestrator {
    pub(super) fn s3r_groups(&mut self) -> Result<()> {
        let (n, conc) = (self.plan.s3_n, self.plan.conc);
        let reps = self.plan.reps;
        self.reps("s3r-groups", reps, |o, rep| o.groups_pair(n, conc, rep))
    }

    /// One pair of S3R drains, without and with groups, in the order `rep` gives; pushes the
    /// `s3r_groups_*` figures.
    fn groups_pair(&mut self, n: u64, conc: usize, rep: usize) -> Result<Value> {
        let mut rates = [0.0; 2];
        let mut script = [0.0; 2];
        let mut runs = Vec::new();
        let first = rep % 2 == 1;
        for with in [first, !first] {
            if with {
                self.producer_extra = vec![s("--groups"), GROUPS.to_string()];
            }
            let v = self.drain(Scenario::S3R, n, conc, false);
            self.producer_extra.clear();
            let v = v?;
            let tag = if with { "" } else { "plain_" };
            self.push(
                &format!("s3r_groups_{tag}not_once"),
                num(&v, "/worker/jobs_not_exactly_expected")?,
            );
            rates[usize::from(with)] = num(&v, "/worker/jobs_per_s")?;
            script[usize::from(with)] = num(&v, "/redis/script_usec_per_job")?;
            runs.push(json!({"groups": if with { GROUPS } else { 0 }, "run": v}));
        }
        let [plain, grouped] = rates;
        self.push("s3r_groups_plain_rate", plain);
        self.push("s3r_groups_rate", grouped);
        self.push("s3r_groups_ratio", grouped / plain);
        self.push("s3r_groups_plain_server_us_per_job", script[0]);
        self.push("s3r_groups_server_us_per_job", script[1]);
        Ok(json!({
            "groups": GROUPS,
            "plain_rate": plain,
            "groups_rate": grouped,
            "ratio": grouped / plain,
            "plain_server_us_per_job": script[0],
            "groups_server_us_per_job": script[1],
            "runs": runs,
        }))
    }
}
