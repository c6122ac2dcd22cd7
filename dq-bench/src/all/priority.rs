//! The `s3r-priority` section: what job priorities cost a drain, in the same run.
//!
//! Per repetition, two pairs of drains of N jobs by one worker (concurrency 50), each pair in
//! alternating order so drift in the machine's load hits both halves alike:
//! 1. S3R: N jobs due now, once all of normal priority (the `ready` list only), once with
//!    `dq-bench enqueue --priorities` (one job in ten HIGH, one in ten LOW, the rest NORMAL,
//!    interleaved: the HIGH and LOW ones wait in the partition's `pready` zset);
//! 2. S3: the same two, but the jobs wait in `scheduled` and become due together (delayed,
//!    the worker starts once the last is due + 1 s), so the fetches promote them by priority.
//!
//! Figures: the rates, their ratio, and Redis's script time per job of each; with priorities,
//! each class's mean completion rank (0 = first, 1 = last), which shows they took effect
//! (a note if HIGH did not run before NORMAL, or NORMAL before LOW).

use super::*;

impl Orchestrator {
    pub(super) fn s3r_priority(&mut self) -> Result<()> {
        let (n, conc) = (self.plan.s3_n, self.plan.conc);
        let reps = self.plan.reps;
        self.reps("s3r-priority", reps, |o, rep| {
            let mut out = serde_json::Map::new();
            for (name, scenario) in [("s3r", Scenario::S3R), ("s3", Scenario::S3)] {
                let v = o.priority_pair(name, scenario, n, conc, rep)?;
                out.insert(name.into(), v);
            }
            Ok(Value::Object(out))
        })
    }

    /// One pair of drains of `scenario`, without and with mixed priorities, in the order
    /// `rep` gives; pushes the `{name}_priority_*` figures.
    fn priority_pair(
        &mut self,
        name: &str,
        scenario: Scenario,
        n: u64,
        conc: usize,
        rep: usize,
    ) -> Result<Value> {
        let mut rates = [0.0; 2];
        let mut script = [0.0; 2];
        let mut ranks = Value::Null;
        let mut runs = Vec::new();
        let first = rep % 2 == 1;
        for with in [first, !first] {
            let extra = if with {
                vec![s("--priorities")]
            } else {
                Vec::new()
            };
            self.producer_extra = extra.clone();
            self.worker_extra = extra;
            let v = self.drain(scenario, n, conc, false);
            self.producer_extra.clear();
            self.worker_extra.clear();
            let v = v?;
            let tag = if with { "" } else { "plain_" };
            self.push(
                &format!("{name}_priority_{tag}not_once"),
                num(&v, "/worker/jobs_not_exactly_expected")?,
            );
            rates[usize::from(with)] = num(&v, "/worker/jobs_per_s")?;
            script[usize::from(with)] = num(&v, "/redis/script_usec_per_job")?;
            if with {
                ranks = v
                    .pointer("/worker/priority_mean_rank")
                    .cloned()
                    .ok_or("the worker reported no completion ranks by priority")?;
                let rank = |class: &str| num(&ranks, &format!("/{class}"));
                let (high, normal, low) = (rank("high")?, rank("normal")?, rank("low")?);
                self.push(&format!("{name}_priority_high_rank"), high);
                self.push(&format!("{name}_priority_low_rank"), low);
                if !(high < normal && normal < low) {
                    self.notes.push(format!(
                        "{name}-priority rep {}: the classes did not run in priority order \
                         (mean completion rank HIGH {high:.3}, NORMAL {normal:.3}, \
                         LOW {low:.3})",
                        rep + 1
                    ));
                }
            }
            runs.push(json!({"priorities": with, "run": v}));
        }
        let [plain, mixed] = rates;
        self.push(&format!("{name}_priority_plain_rate"), plain);
        self.push(&format!("{name}_priority_rate"), mixed);
        self.push(&format!("{name}_priority_ratio"), mixed / plain);
        self.push(
            &format!("{name}_priority_plain_server_us_per_job"),
            script[0],
        );
        self.push(&format!("{name}_priority_server_us_per_job"), script[1]);
        Ok(json!({
            "plain_rate": plain,
            "priority_rate": mixed,
            "ratio": mixed / plain,
            "plain_server_us_per_job": script[0],
            "priority_server_us_per_job": script[1],
            "mean_rank": ranks,
            "runs": runs,
        }))
    }
}
