//! The `payloads` section: what encoding payload fields by name costs, beside the positional
//! encoding dq wrote before (structs as arrays), in the same run.
//!
//! Per repetition, in alternating order so drift in the machine's load hits both alike:
//! 1. S2: N jobs enqueued with S1's bulk API, once named (dq's encoding), once positional
//!    (`dq-bench enqueue --positional`: encoded with `rmp_serde::to_vec` and enqueued raw);
//!    Redis memory per pending job after each, and the encoded size of one payload.
//! 2. S3R: the drain of N ready jobs, once named, once positional; the rates and their ratio.

use super::*;

impl Orchestrator {
    pub(super) fn payloads(&mut self) -> Result<()> {
        let (s1_n, s3_n, conc) = (self.plan.s1_n, self.plan.s3_n, self.plan.conc);
        let reps = self.plan.reps;
        self.reps("payloads", reps, |o, rep| {
            let order = [rep % 2 == 1, rep % 2 == 0];
            let mut memory = [0.0; 2];
            let mut payload_bytes = [0.0; 2];
            let mut runs = Vec::new();
            for positional in order {
                o.flush()?;
                let empty = o.used_memory()?;
                let mut args = vec![
                    s("--scenario"),
                    s("S1"),
                    s("--mode"),
                    s("bulk"),
                    s("--n"),
                    s(s1_n),
                ];
                if positional {
                    args.push(s("--positional"));
                }
                let r = o.enqueue(&args)?;
                let used = o.used_memory()?;
                memory[usize::from(positional)] = used.saturating_sub(empty) as f64 / s1_n as f64;
                payload_bytes[usize::from(positional)] = num(&r, "/payload_bytes")?;
                runs.push(json!({"positional": positional, "s1_bulk": r,
                                 "used_memory_empty": empty, "used_memory": used}));
            }
            o.flush()?;
            let mut rates = [0.0; 2];
            for positional in order {
                o.producer_extra = if positional {
                    vec![s("--positional")]
                } else {
                    Vec::new()
                };
                let v = o.drain(Scenario::S3R, s3_n, conc, false);
                o.producer_extra.clear();
                let v = v?;
                let encoding = if positional { "positional" } else { "named" };
                o.push(
                    &format!("payloads_s3r_{encoding}_not_once"),
                    num(&v, "/worker/jobs_not_exactly_expected")?,
                );
                rates[usize::from(positional)] = num(&v, "/worker/jobs_per_s")?;
                runs.push(json!({"positional": positional, "s3r": v}));
            }
            let [named_b, positional_b] = memory;
            let [named_p, positional_p] = payload_bytes;
            let [named_r, positional_r] = rates;
            o.push("payloads_s2_named_bytes_per_job", named_b);
            o.push("payloads_s2_positional_bytes_per_job", positional_b);
            o.push("payloads_named_payload_bytes", named_p);
            o.push("payloads_positional_payload_bytes", positional_p);
            o.push("payloads_s3r_named_rate", named_r);
            o.push("payloads_s3r_positional_rate", positional_r);
            o.push("payloads_s3r_ratio", named_r / positional_r);
            Ok(json!({
                "s2_named_bytes_per_job": named_b,
                "s2_positional_bytes_per_job": positional_b,
                "named_payload_bytes": named_p,
                "positional_payload_bytes": positional_p,
                "s3r_named_rate": named_r,
                "s3r_positional_rate": positional_r,
                "ratio": named_r / positional_r,
                "runs": runs,
            }))
        })
    }
}
