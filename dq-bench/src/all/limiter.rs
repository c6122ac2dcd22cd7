//! The `limiter` section: what the topic controls (pause, rate, global concurrency) cost a
//! topic that does not use them, and how exact the rate limit is.
//!
//! 1. S3R drained twice per repetition in the same run, in alternating order: once on a topic
//!    with no control hash at all (what every topic without limits pays: one `HMGET` of an
//!    absent key per fetch, one `EXISTS` per ack batch), once with limits present that never
//!    bind (a cap and a rate of 1,000,000). The figure is the ratio of the two rates.
//! 2. Accuracy: a rate of 1,000 jobs/s on a topic holding `rate × secs` ready jobs, drained by
//!    one worker of concurrency `conc`: jobs per second from the worker's start to the last
//!    completion (30 s in the full run), against 1,000.
//!
//! The limits are written straight into the partition's `control` hash (the layout names
//! it) after the jobs are enqueued, as `TopicClient::set_rate` would for a one-partition topic.

use super::*;

use dq::store::Queue;
use dq::store::redis::layout::PartitionKeys;

/// Limits one drain's topic gets before its worker starts (see [`Orchestrator::drain`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    /// Global concurrency share of partition 0 (the bench topics have one partition).
    pub conc: Option<u64>,
    /// Jobs per second.
    pub rate_per_s: Option<u64>,
}

/// The rate whose accuracy is measured.
const RATE: u64 = 1_000;

impl Orchestrator {
    /// Writes `limits` into the control hash of `topic`'s partition 0.
    pub(super) fn apply_limits(&mut self, topic: &str, limits: Limits) -> Result<()> {
        let topic = dq::Topic::new(topic)?;
        let key = PartitionKeys::new(crate::NAMESPACE, &Queue::new(topic, 0)).control;
        if let Some(conc) = limits.conc {
            self.cmd::<()>(&["HSET", &key, "conc", &conc.to_string()])?;
        }
        if let Some(rate) = limits.rate_per_s {
            self.cmd::<()>(&["HSET", &key, "rate_n", &rate.to_string(), "rate_ms", "1000"])?;
        }
        Ok(())
    }

    pub(super) fn limiter(&mut self) -> Result<()> {
        let (n, conc, secs) = (self.plan.s3_n, self.plan.conc, self.plan.limiter_secs);
        let reps = self.plan.reps;
        self.reps("limiter", reps, |o, rep| {
            let mut rates = [0.0; 2];
            let mut runs = Vec::new();
            for with in [rep % 2 == 1, rep % 2 == 0] {
                o.limits = with.then_some(Limits {
                    conc: Some(1_000_000),
                    rate_per_s: Some(1_000_000),
                });
                let v = o.drain(Scenario::S3R, n, conc, false);
                o.limits = None;
                let v = v?;
                rates[usize::from(with)] = num(&v, "/worker/jobs_per_s")?;
                runs.push(json!({"limits": with, "run": v}));
            }
            let [plain, limited] = rates;
            o.push("limiter_s3r_plain_rate", plain);
            o.push("limiter_s3r_limits_rate", limited);
            o.push("limiter_s3r_ratio", limited / plain);

            let m = RATE * secs;
            o.limits = Some(Limits {
                conc: None,
                rate_per_s: Some(RATE),
            });
            let v = o.drain(Scenario::S3R, m, conc, false);
            o.limits = None;
            let v = v?;
            let measured = num(&v, "/worker/jobs_per_s")?;
            let error_pct = (measured / RATE as f64 - 1.0) * 100.0;
            o.push("limiter_rate_measured", measured);
            o.push("limiter_rate_error_pct", error_pct);
            Ok(json!({
                "s3r_plain_rate": plain,
                "s3r_limits_rate": limited,
                "ratio": limited / plain,
                "rate": RATE,
                "rate_jobs": m,
                "rate_measured": measured,
                "rate_error_pct": error_pct,
                "runs": runs,
                "rate_run": v,
            }))
        })
    }
}
