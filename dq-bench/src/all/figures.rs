//! Every figure `dq-bench all` reports, with its unit and its target (ARCHITECTURE.md and
//! shared/bench/SCENARIOS.md), and how a figure's repetitions are judged against it.

use super::*;

/// How a figure is judged against its target.
#[derive(Clone, Copy, Debug)]
pub(super) enum Check {
    /// The median must be at least this.
    MedianAtLeast(f64),
    /// The median must be at most this.
    MedianAtMost(f64),
    /// Every repetition must be at most this (correctness counts).
    MaxAtMost(f64),
}

/// One reported figure: a value per repetition.
#[derive(Clone, Debug)]
pub(super) struct Figure {
    pub(super) key: String,
    pub(super) label: String,
    pub(super) unit: &'static str,
    pub(super) values: Vec<f64>,
    pub(super) target: Option<(&'static str, Check)>,
}

impl Figure {
    pub(super) fn sorted(&self) -> Vec<f64> {
        let mut v = self.values.clone();
        v.sort_by(f64::total_cmp);
        v
    }

    pub(super) fn median(&self) -> Option<f64> {
        let v = self.sorted();
        match v.len() {
            0 => None,
            n if n % 2 == 1 => Some(v[n / 2]),
            n => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
        }
    }

    pub(super) fn verdict(&self) -> &'static str {
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

    pub(super) fn to_json(&self) -> Value {
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

impl Orchestrator {
    pub(super) fn declare_figures(&mut self) {
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
                "s1_ceiling_c1",
                "redis-benchmark -c 1 EVALSHA ZADD+HSET (same rep as S1)".into(),
                "calls/s",
                None,
            ),
            d(
                "s1_single_over_c1",
                "S1 single / redis-benchmark -c 1 EVALSHA (same run)".into(),
                "×",
                Some(("≥ 0.9", MedianAtLeast(0.9))),
            ),
            d(
                "s1_concurrent",
                format!("S1 enqueue concurrent, {} tasks (N={})", p.s1_tasks, p.s1_n),
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
                "s1_conc_over_bulk",
                format!("S1 concurrent ({} tasks) / S1 bulk, same rep", p.s1_tasks),
                "×",
                Some(("≥ 0.6", MedianAtLeast(0.6))),
            ),
            d(
                "s2_bytes_per_job",
                "S2 memory per pending job after S1 bulk".into(),
                "B/job",
                Some(("≤ 250", MedianAtMost(250.0))),
            ),
            d(
                "s2_single_bytes_per_job",
                "S2 memory per pending job after S1 single (receipts incl.)".into(),
                "B/job",
                Some(("≤ 250", MedianAtMost(250.0))),
            ),
            d(
                "s2_concurrent_bytes_per_job",
                "S2 memory per pending job after S1 concurrent".into(),
                "B/job",
                None,
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
                "s3_script_us",
                "S3 script call usec_per_call (commandstats: FCALL)".into(),
                "µs",
                None,
            ),
            d(
                "s3_script_calls_per_job",
                "S3 script calls per job".into(),
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
                "s3r_plain_rate",
                format!("S3R without a metrics recorder (N={})", p.s3_n),
                "jobs/s",
                None,
            ),
            d(
                "s3r_metrics_rate",
                format!("S3R with a metrics recorder (N={})", p.s3_n),
                "jobs/s",
                None,
            ),
            d(
                "s3r_metrics_ratio",
                "S3R with / without a metrics recorder (same run)".into(),
                "×",
                Some(("≥ 0.95", MedianAtLeast(0.95))),
            ),
            d(
                "s3r_keep_plain_rate",
                format!("S3R, finished jobs deleted (N={})", p.s3_n),
                "jobs/s",
                None,
            ),
            d(
                "s3r_keep_rate",
                format!("S3R, succeeded jobs kept an hour (N={})", p.s3_n),
                "jobs/s",
                None,
            ),
            d(
                "s3r_keep_ratio",
                "S3R keeping succeeded jobs / deleting them (same run)".into(),
                "×",
                None,
            ),
            d(
                "s3r_keep_plain_server_us_per_job",
                "Redis script time per job, finished jobs deleted".into(),
                "µs/job",
                None,
            ),
            d(
                "s3r_keep_server_us_per_job",
                "Redis script time per job, succeeded jobs kept".into(),
                "µs/job",
                None,
            ),
            d(
                "s3r_events_plain_rate",
                format!("S3R, no events recorded (N={})", p.s3_n),
                "jobs/s",
                None,
            ),
            d(
                "s3r_events_rate",
                format!("S3R, events recorded and read (N={})", p.s3_n),
                "jobs/s",
                None,
            ),
            d(
                "s3r_events_ratio",
                "S3R recording events / not (same run)".into(),
                "×",
                None,
            ),
            d(
                "s3r_events_plain_server_us_per_job",
                "Redis script time per job, no events".into(),
                "µs/job",
                None,
            ),
            d(
                "s3r_events_server_us_per_job",
                "Redis script time per job, events recorded".into(),
                "µs/job",
                None,
            ),
            d(
                "s3r_groups_plain_rate",
                format!("S3R, no groups (N={}, due now)", p.s3_n),
                "jobs/s",
                None,
            ),
            d(
                "s3r_groups_rate",
                format!(
                    "S3R over {} groups, no limits (N={})",
                    super::groups::GROUPS,
                    p.s3_n
                ),
                "jobs/s",
                None,
            ),
            d(
                "s3r_groups_ratio",
                "S3R over 10,000 groups / no groups (same run)".into(),
                "×",
                None,
            ),
            d(
                "s3r_groups_plain_server_us_per_job",
                "Redis script time per job, S3R no groups".into(),
                "µs/job",
                None,
            ),
            d(
                "s3r_groups_server_us_per_job",
                "Redis script time per job, S3R over 10,000 groups".into(),
                "µs/job",
                None,
            ),
            d(
                "s3r_groups_plain_not_once",
                "S3R no groups: jobs not run exactly once".into(),
                "jobs",
                Some(("0", MaxAtMost(0.0))),
            ),
            d(
                "s3r_groups_not_once",
                "S3R over 10,000 groups: jobs not run exactly once".into(),
                "jobs",
                Some(("0", MaxAtMost(0.0))),
            ),
            d(
                "batches_plain_not_once",
                "batches, plain: jobs not run exactly once".into(),
                "jobs",
                Some(("0", MaxAtMost(0.0))),
            ),
            d(
                "batches_member_not_once",
                "batches, members: jobs not run exactly once".into(),
                "jobs",
                Some(("0", MaxAtMost(0.0))),
            ),
            d(
                "batches_tax_not_once",
                "batches, plain where a member was: not run exactly once".into(),
                "jobs",
                Some(("0", MaxAtMost(0.0))),
            ),
            d(
                "s3r_priority_plain_rate",
                format!("S3R, every job of normal priority (N={}, due now)", p.s3_n),
                "jobs/s",
                None,
            ),
            d(
                "s3r_priority_rate",
                format!("S3R, priorities mixed: 10 % HIGH, 10 % LOW (N={})", p.s3_n),
                "jobs/s",
                None,
            ),
            d(
                "s3r_priority_ratio",
                "S3R with mixed priorities / all normal (same run)".into(),
                "×",
                None,
            ),
            d(
                "s3r_priority_plain_server_us_per_job",
                "Redis script time per job, S3R all normal".into(),
                "µs/job",
                None,
            ),
            d(
                "s3r_priority_server_us_per_job",
                "Redis script time per job, S3R priorities mixed".into(),
                "µs/job",
                None,
            ),
            d(
                "s3r_priority_high_rank",
                "S3R mixed: HIGH jobs' mean completion rank (0 first, 1 last)".into(),
                "",
                None,
            ),
            d(
                "s3r_priority_low_rank",
                "S3R mixed: LOW jobs' mean completion rank (0 first, 1 last)".into(),
                "",
                None,
            ),
            d(
                "s3r_priority_plain_not_once",
                "S3R all normal: jobs not run exactly once".into(),
                "jobs",
                Some(("0", MaxAtMost(0.0))),
            ),
            d(
                "s3r_priority_not_once",
                "S3R priorities mixed: jobs not run exactly once".into(),
                "jobs",
                Some(("0", MaxAtMost(0.0))),
            ),
            d(
                "s3_priority_plain_rate",
                format!(
                    "S3, every job of normal priority (N={}, due together from scheduled)",
                    p.s3_n
                ),
                "jobs/s",
                None,
            ),
            d(
                "s3_priority_rate",
                format!("S3, priorities mixed: 10 % HIGH, 10 % LOW (N={})", p.s3_n),
                "jobs/s",
                None,
            ),
            d(
                "s3_priority_ratio",
                "S3 with mixed priorities / all normal (same run)".into(),
                "×",
                None,
            ),
            d(
                "s3_priority_plain_server_us_per_job",
                "Redis script time per job, S3 all normal".into(),
                "µs/job",
                None,
            ),
            d(
                "s3_priority_server_us_per_job",
                "Redis script time per job, S3 priorities mixed".into(),
                "µs/job",
                None,
            ),
            d(
                "s3_priority_high_rank",
                "S3 mixed: HIGH jobs' mean completion rank (0 first, 1 last)".into(),
                "",
                None,
            ),
            d(
                "s3_priority_low_rank",
                "S3 mixed: LOW jobs' mean completion rank (0 first, 1 last)".into(),
                "",
                None,
            ),
            d(
                "s3_priority_plain_not_once",
                "S3 all normal: jobs not run exactly once".into(),
                "jobs",
                Some(("0", MaxAtMost(0.0))),
            ),
            d(
                "s3_priority_not_once",
                "S3 priorities mixed: jobs not run exactly once".into(),
                "jobs",
                Some(("0", MaxAtMost(0.0))),
            ),
            d(
                "limiter_s3r_ratio",
                "S3R with limits that never bind / without any (same run)".into(),
                "×",
                Some(("≥ 0.95", MedianAtLeast(0.95))),
            ),
            d(
                "payloads_s2_named_bytes_per_job",
                format!(
                    "S2 memory per pending job, payload fields by name (N={})",
                    p.s1_n
                ),
                "B/job",
                None,
            ),
            d(
                "payloads_s2_positional_bytes_per_job",
                "S2 memory per pending job, positional payloads (same rep)".into(),
                "B/job",
                None,
            ),
            d(
                "payloads_named_payload_bytes",
                "encoded payload, fields by name".into(),
                "B",
                None,
            ),
            d(
                "payloads_positional_payload_bytes",
                "encoded payload, positional".into(),
                "B",
                None,
            ),
            d(
                "payloads_s3r_named_rate",
                format!("S3R drain, payload fields by name (N={})", p.s3_n),
                "jobs/s",
                None,
            ),
            d(
                "payloads_s3r_positional_rate",
                "S3R drain, positional payloads (same rep)".into(),
                "jobs/s",
                None,
            ),
            d(
                "payloads_s3r_named_not_once",
                "S3R named: jobs not run exactly once".into(),
                "jobs",
                Some(("0", MaxAtMost(0.0))),
            ),
            d(
                "payloads_s3r_positional_not_once",
                "S3R positional: jobs not run exactly once".into(),
                "jobs",
                Some(("0", MaxAtMost(0.0))),
            ),
            d(
                "payloads_s3r_ratio",
                "S3R named / positional (same run)".into(),
                "×",
                None,
            ),
            d(
                "limiter_rate_measured",
                format!("a 1,000/s rate limit, measured over {} s", p.limiter_secs),
                "jobs/s",
                None,
            ),
            d(
                "limiter_rate_error_pct",
                "the rate limit's error (measured vs 1,000/s)".into(),
                "%",
                None,
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
                "s3r_script_us",
                "S3R script call usec_per_call".into(),
                "µs",
                None,
            ),
            d(
                "s3r_script_calls_per_job",
                "S3R script calls per job".into(),
                "calls",
                None,
            ),
            d(
                "s3r_server_us_per_job",
                "S3R Redis time per job, lease + ack (commandstats)".into(),
                "µs/job",
                Some(("≤ 8", MedianAtMost(8.0))),
            ),
            d(
                "s3r_split_fetch",
                "S3R per job in fetch (profile drain, SLOWLOG 0)".into(),
                "µs/job",
                None,
            ),
            d(
                "s3r_split_ack",
                "S3R per job in ack (profile drain, SLOWLOG 0)".into(),
                "µs/job",
                None,
            ),
            d(
                "s3r_split_other",
                "S3R per job in other scripts (profile drain)".into(),
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
                "s5_s3r_secs",
                format!("S3R drain time of the same N={} (same rep as S5)", p.s5_n),
                "s",
                None,
            ),
            d(
                "s5_enqueue_secs",
                "S5 producer's bulk enqueue of the N jobs (inside the S5 total)".into(),
                "s",
                None,
            ),
            d(
                "s5_retry_ratio",
                "(S5 total − 1 s retry delay) / S3R drain of the same N".into(),
                "×",
                Some(("≤ 2", MedianAtMost(2.0))),
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
        let dense = |n: u64| pretty_count(n);
        let per_ms = |n: u64| n as f64 / p.dense_window_ms.max(1) as f64;
        for size in &p.scale_sizes {
            let n = dense(*size);
            let w = p.dense_window_ms / 1000;
            self.figures.extend([
                d(
                    &format!("dense_enq_srv_{size}"),
                    format!(
                        "Dense scale: fill script time, {n} due in {w} s ({}/ms)",
                        pretty(per_ms(*size))
                    ),
                    "µs/job",
                    None,
                ),
                d(
                    &format!("dense_enq_us_{size}"),
                    format!("Dense scale: fill wall time, {n} pending"),
                    "µs/job",
                    None,
                ),
                d(
                    &format!("dense_fire_srv_{size}"),
                    format!("Dense scale: fire script time (16/ms) with {n} pending"),
                    "µs/job",
                    None,
                ),
                d(
                    &format!("dense_bytes_{size}"),
                    format!("Dense scale: MEMORY USAGE of the keys / pending, {n}"),
                    "B/job",
                    None,
                ),
            ]);
        }
        let base = p.scale_sizes[0];
        for size in p.scale_sizes.iter().filter(|s| **s != base) {
            let (n, b) = (dense(*size), dense(base));
            self.figures.extend([
                d(
                    &format!("dense_ratio_enq_{size}"),
                    format!("Dense scale ratio, enqueue script time: {n} / {b}"),
                    "×",
                    Some(("≤ 1.2", MedianAtMost(1.2))),
                ),
                d(
                    &format!("dense_ratio_fire_{size}"),
                    format!("Dense scale ratio, fire script time: {n} / {b}"),
                    "×",
                    Some(("≤ 1.2", MedianAtMost(1.2))),
                ),
            ]);
        }
        let top = dense(p.scale_sizes.iter().copied().max().unwrap_or(base));
        self.figures.extend([
            d(
                "dense_slow_calls",
                format!("Dense scale: bulk calls over 2 ms in the {top} fill (SLOWLOG)"),
                "calls",
                Some(("0", MaxAtMost(0.0))),
            ),
            d(
                "dense_slow_longest",
                "Dense scale: longest of those calls (0: none)".into(),
                "µs",
                None,
            ),
        ]);
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
            d(
                "bullmq_dq_s3r_rate",
                format!(
                    "dq S3R drain, conc {} (N={}), beside BullMQ's",
                    p.conc, p.s3_n
                ),
                "jobs/s",
                None,
            ),
            d(
                "bullmq_s3r_rate",
                format!("BullMQ S3R drain, conc {} (N={})", p.conc, p.s3_n),
                "jobs/s",
                None,
            ),
            d(
                "s3r_dq_over_bullmq",
                "S3R dq / BullMQ, same run".into(),
                "×",
                Some(("≥ 8", MedianAtLeast(8.0))),
            ),
            d(
                "bullmq_s3r_server_us_per_job",
                "BullMQ S3R Redis script time per job".into(),
                "µs/job",
                None,
            ),
            d(
                "bullmq_s1_single",
                format!("BullMQ S1 enqueue single (N={})", p.s1_n),
                "jobs/s",
                None,
            ),
            d(
                "bullmq_s1_bulk",
                format!("BullMQ S1 enqueue bulk, chunk 1000 (N={})", p.s1_n),
                "jobs/s",
                None,
            ),
            d(
                "bullmq_s1_concurrent",
                format!("BullMQ S1 enqueue concurrent, {} tasks", p.s1_tasks),
                "jobs/s",
                None,
            ),
            d(
                "bullmq_s2_single_bytes_per_job",
                "BullMQ S2 memory per pending job after single".into(),
                "B/job",
                None,
            ),
            d(
                "bullmq_s2_bulk_bytes_per_job",
                "BullMQ S2 memory per pending job after bulk".into(),
                "B/job",
                None,
            ),
            d(
                "bullmq_s2_concurrent_bytes_per_job",
                "BullMQ S2 memory per pending job after concurrent".into(),
                "B/job",
                None,
            ),
            d(
                "bullmq_s3_rate",
                format!("BullMQ S3 drain, conc {} (N={})", p.conc, p.s3_n),
                "jobs/s",
                None,
            ),
            d("bullmq_s4_p50", "BullMQ S4 lateness p50".into(), "ms", None),
            d("bullmq_s4_p99", "BullMQ S4 lateness p99".into(), "ms", None),
            d("bullmq_s4_max", "BullMQ S4 lateness max".into(), "ms", None),
            d(
                "bullmq_s5_total",
                format!("BullMQ S5 retry: first add → last success (N={})", p.s5_n),
                "s",
                None,
            ),
            d(
                "bullmq_not_expected",
                "BullMQ jobs not run as expected (S3R, S3, S4, S5)".into(),
                "jobs",
                None,
            ),
        ]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
