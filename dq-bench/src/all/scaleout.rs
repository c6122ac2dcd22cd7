//! The scale-out section: S3R (drain of ready jobs) and S4 (lateness) with a topic of
//! [`PARTITIONS`] partitions, on one node and on a private 3-master, 3-replica Redis Cluster
//! (`dq_testkit::RedisCluster`), in the same run, with each Redis process's CPU.
//!
//! Producers and workers are this binary's `enqueue` and `worker` commands, unchanged: they
//! get the cluster's `redis+cluster://` URL in `REDIS_URL` and the partition count in
//! `DQ_BENCH_PARTITIONS`. CPU is read from `/proc/<pid>/stat` (utime + stime) of every
//! `redis-server`, sampled every 20 ms, over the worker's measured interval.

use dq_testkit::{ClusterOptions, RedisCluster};

use super::*;

/// Partitions of the topic in both places (6 over 3 masters: every master holds some).
pub(super) const PARTITIONS: u16 = 6;

/// Where one half of the comparison runs: its URL, the masters (flushed before each run,
/// asked for blocked clients) and every `redis-server` process (measured).
struct Place<'a> {
    label: &'static str,
    url: String,
    masters: Vec<&'a RedisServer>,
    nodes: Vec<&'a RedisServer>,
}

impl Place<'_> {
    fn flush(&self) -> Result<()> {
        for m in &self.masters {
            m.try_cmd::<()>(&["FLUSHALL"])?;
        }
        Ok(())
    }

    /// Waits until a worker's wake-up listener blocks on some master.
    fn wait_blocked(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            for m in &self.masters {
                let info: String = m.try_cmd(&["INFO", "clients"])?;
                let blocked = info
                    .lines()
                    .find_map(|l| l.strip_prefix("blocked_clients:"))
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .unwrap_or(0);
                if blocked >= 1 {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(format!(
            "{}: no worker blocked on a wake-up list in time",
            self.label
        )
        .into())
    }
}

/// CPU ticks of several processes, every 20 ms, on a thread.
struct MultiSampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<(Instant, Vec<Option<u64>>)>>,
}

impl MultiSampler {
    fn start(pids: Vec<u32>, max: Duration) -> MultiSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let end = Instant::now() + max;
            let mut out = Vec::new();
            while !flag.load(Ordering::Relaxed) && Instant::now() < end {
                out.push((
                    Instant::now(),
                    pids.iter().map(|p| admin::cpu_ticks(*p)).collect(),
                ));
                std::thread::sleep(Duration::from_millis(20));
            }
            out
        });
        MultiSampler { stop, thread }
    }

    /// Each process's CPU (% of one core) between `from` and `to`.
    fn finish(self, from: Instant, to: Instant, tck: f64) -> Vec<Option<f64>> {
        self.stop.store(true, Ordering::Relaxed);
        let samples = self.thread.join().unwrap_or_default();
        let width = samples.first().map_or(0, |(_, v)| v.len());
        (0..width)
            .map(|i| {
                let pick = |s: &&(Instant, Vec<Option<u64>>)| s.1[i];
                let first = samples.iter().find(|s| s.0 >= from && pick(s).is_some())?;
                let last = samples
                    .iter()
                    .rev()
                    .find(|s| s.0 <= to && pick(s).is_some())?;
                let secs = last.0.checked_duration_since(first.0)?.as_secs_f64();
                if secs < 0.05 {
                    return None;
                }
                let ticks = pick(&last)?.checked_sub(pick(&first)?)? as f64;
                Some(100.0 * ticks / tck / secs)
            })
            .collect()
    }
}

/// One place's measurements: S3R then S4.
fn measure(exe: &Path, plan: &Plan, tck: f64, place: &Place<'_>) -> Result<Value> {
    let env = [(crate::PARTITIONS_ENV, PARTITIONS.to_string())];
    let worker = |scenario: Scenario, n: u64, timeout_s: u64| -> Result<(Proc, Instant)> {
        let args = vec![
            s("worker"),
            s("--scenario"),
            s(scenario.name()),
            s("--conc"),
            s(plan.conc),
            s("--n"),
            s(n),
            s("--timeout-s"),
            s(timeout_s),
            s("--linger-ms"),
            s(plan.linger_ms),
        ];
        let mut proc = Proc::spawn_with_env(exe, &place.url, &args, &env)?;
        let ready = proc.line(Duration::from_secs(60))?;
        if ready.get("ready") != Some(&Value::Bool(true)) {
            return Err(format!("worker's first line was not ready: {ready}").into());
        }
        Ok((proc, Instant::now()))
    };
    let enqueue = |args: &[String]| -> Result<Value> {
        let full = [vec![s("enqueue")], args.to_vec()].concat();
        let out = Proc::spawn_with_env(exe, &place.url, &full, &env)?
            .finish(Duration::from_secs(1800))?;
        if num(&out, "/not_created")? > 0.0 {
            return Err(format!("enqueue did not create every job: {out}").into());
        }
        Ok(out)
    };
    let pids: Vec<u32> = place.nodes.iter().map(|n| n.pid()).collect();
    let ports: Vec<u16> = place.nodes.iter().map(|n| n.port()).collect();
    let cpu_json = |cpu: &[Option<f64>]| -> Value {
        place
            .nodes
            .iter()
            .zip(cpu)
            .map(|(n, c)| {
                let role = if place.masters.iter().any(|m| m.port() == n.port()) {
                    "master"
                } else {
                    "replica"
                };
                json!({"port": n.port(), "pid": n.pid(), "role": role, "cpu_pct": c})
            })
            .collect()
    };

    // S3R: drain ready jobs.
    place.flush()?;
    let n = plan.s3_n;
    let produced = enqueue(&[
        s("--scenario"),
        s("S3R"),
        s("--mode"),
        s("bulk"),
        s("--n"),
        s(n),
    ])?;
    let sampler = MultiSampler::start(pids.clone(), Duration::from_secs(700));
    let (proc, ready_at) = worker(Scenario::S3R, n, 600)?;
    let result = proc.finish(Duration::from_secs(700));
    let s3r = result?;
    let to = ready_at + Duration::from_secs_f64(num(&s3r, "/secs")?);
    let s3r_cpu = sampler.finish(ready_at, to, tck);

    // S4: lateness of jobs due over a window, the worker already waiting.
    place.flush()?;
    let timeout = (plan.s4_lead_ms + plan.s4_window_ms) / 1000 + 120;
    let sampler = MultiSampler::start(pids, Duration::from_secs(timeout + 60));
    let (proc, ready_at) = worker(Scenario::S4, plan.s4_n, timeout)?;
    place.wait_blocked(Duration::from_secs(10))?;
    let start = now_ms() + plan.s4_lead_ms;
    let s4_produced = enqueue(&[
        s("--scenario"),
        s("S4"),
        s("--mode"),
        s("single"),
        s("--n"),
        s(plan.s4_n),
        s("--start-ms"),
        s(start),
        s("--window-ms"),
        s(plan.s4_window_ms),
    ])?;
    let s4 = proc.finish(Duration::from_secs(timeout + 30))?;
    let s4_cpu = sampler.finish(ready_at, Instant::now(), tck);

    Ok(json!({
        "place": place.label,
        "url": place.url,
        "ports": ports,
        "partitions": PARTITIONS,
        "s3r": {"enqueue": produced, "worker": s3r, "redis": cpu_json(&s3r_cpu)},
        "s4": {"start_ms": start, "enqueue": s4_produced, "worker": s4,
               "redis": cpu_json(&s4_cpu)},
    }))
}

/// Sum and largest of the masters' CPU in a `measure` result's `redis` list.
fn master_cpu(v: &Value) -> (f64, f64) {
    let Value::Array(nodes) = v else {
        return (f64::NAN, f64::NAN);
    };
    let masters: Vec<f64> = nodes
        .iter()
        .filter(|n| n["role"] == "master")
        .filter_map(|n| n["cpu_pct"].as_f64())
        .collect();
    (
        masters.iter().sum(),
        masters.iter().copied().fold(f64::NAN, f64::max),
    )
}

impl Orchestrator {
    /// S3R and S4 with a topic of [`PARTITIONS`] partitions on one node and on a 3-master
    /// cluster, side by side, with each Redis process's CPU and the ratios.
    pub(super) fn scaleout(&mut self) -> Result<()> {
        eprintln!("   starting a private 3-master, 3-replica Redis Cluster ...");
        let cluster =
            std::panic::catch_unwind(|| RedisCluster::start_with(ClusterOptions::default()))
                .map_err(|_| "the Redis Cluster did not start (see the panic above)")?;
        self.declare_scaleout_figures();
        let reps = self.plan.reps;
        self.reps("scaleout", reps, |o, rep| {
            let (exe, plan, tck) = (o.exe.clone(), o.plan.clone(), o.tck);
            let single = Place {
                label: "one node",
                url: o.server.url(),
                masters: vec![&o.server],
                nodes: vec![&o.server],
            };
            let masters = cluster.masters();
            let on_cluster = Place {
                label: "cluster",
                url: cluster.url(),
                masters: masters.clone(),
                nodes: cluster.nodes().iter().collect(),
            };
            // Alternate the order, so drift in the machine's load hits both alike.
            let (one, many) = if rep % 2 == 0 {
                let one = measure(&exe, &plan, tck, &single)?;
                (one, measure(&exe, &plan, tck, &on_cluster)?)
            } else {
                let many = measure(&exe, &plan, tck, &on_cluster)?;
                (measure(&exe, &plan, tck, &single)?, many)
            };
            for (what, v) in [("single", &one), ("cluster", &many)] {
                if num(v, "/s3r/worker/jobs_not_exactly_expected")? > 0.0
                    || num(v, "/s4/worker/jobs_not_exactly_expected")? > 0.0
                {
                    return Err(format!("{what}: some job did not run exactly once").into());
                }
            }
            let rate = |v: &Value| num(v, "/s3r/worker/jobs_per_s");
            let (r1, rn) = (rate(&one)?, rate(&many)?);
            o.push("scaleout_s3r_single", r1);
            o.push("scaleout_s3r_cluster", rn);
            o.push("scaleout_s3r_ratio", rn / r1);
            let (c1, _) = master_cpu(&one["s3r"]["redis"]);
            let (cn_sum, cn_max) = master_cpu(&many["s3r"]["redis"]);
            o.push("scaleout_s3r_cpu_single", c1);
            o.push("scaleout_s3r_cpu_cluster_sum", cn_sum);
            o.push("scaleout_s3r_cpu_cluster_max", cn_max);
            for q in ["p50", "p99"] {
                o.push(
                    &format!("scaleout_s4_single_{q}"),
                    num(&one, &format!("/s4/worker/lateness_ms/{q}"))?,
                );
                o.push(
                    &format!("scaleout_s4_cluster_{q}"),
                    num(&many, &format!("/s4/worker/lateness_ms/{q}"))?,
                );
            }
            for (what, v) in [("one node", &one), ("cluster", &many)] {
                for scenario in ["s3r", "s4"] {
                    if let Value::Array(nodes) = &v[scenario]["redis"] {
                        let line: Vec<String> = nodes
                            .iter()
                            .map(|n| {
                                format!(
                                    "{} {} {}%",
                                    n["role"].as_str().unwrap_or("?"),
                                    n["port"],
                                    n["cpu_pct"].as_f64().map_or("?".into(), pretty)
                                )
                            })
                            .collect();
                        eprintln!(
                            "   scaleout {what} {scenario} redis CPU: {}",
                            line.join(", ")
                        );
                    }
                }
            }
            Ok(json!({"single": one, "cluster": many, "s3r_ratio": rn / r1}))
        })
    }

    fn declare_scaleout_figures(&mut self) {
        let p = &self.plan;
        let rows: [(&str, String, &'static str); 11] = [
            (
                "scaleout_s3r_single",
                format!(
                    "Scale-out S3R, one node, {PARTITIONS} partitions (N={})",
                    p.s3_n
                ),
                "jobs/s",
            ),
            (
                "scaleout_s3r_cluster",
                format!("Scale-out S3R, 3-master cluster, {PARTITIONS} partitions"),
                "jobs/s",
            ),
            (
                "scaleout_s3r_ratio",
                "Scale-out S3R cluster / one node (same run)".into(),
                "×",
            ),
            (
                "scaleout_s3r_cpu_single",
                "Scale-out S3R redis CPU, one node".into(),
                "% core",
            ),
            (
                "scaleout_s3r_cpu_cluster_sum",
                "Scale-out S3R redis CPU, cluster masters summed".into(),
                "% core",
            ),
            (
                "scaleout_s3r_cpu_cluster_max",
                "Scale-out S3R redis CPU, busiest cluster master".into(),
                "% core",
            ),
            (
                "scaleout_s4_single_p50",
                "Scale-out S4 lateness p50, one node".into(),
                "ms",
            ),
            (
                "scaleout_s4_cluster_p50",
                "Scale-out S4 lateness p50, cluster".into(),
                "ms",
            ),
            (
                "scaleout_s4_single_p99",
                "Scale-out S4 lateness p99, one node".into(),
                "ms",
            ),
            (
                "scaleout_s4_cluster_p99",
                "Scale-out S4 lateness p99, cluster".into(),
                "ms",
            ),
            (
                "scaleout_partitions",
                "Scale-out partitions of the topic".into(),
                "",
            ),
        ];
        for (key, label, unit) in rows {
            if !self.figures.iter().any(|f| f.key == key) {
                self.figures.push(Figure {
                    key: key.to_owned(),
                    label,
                    unit,
                    values: Vec::new(),
                    target: None,
                });
            }
        }
        self.push("scaleout_partitions", f64::from(PARTITIONS));
    }
}

/// A one-line summary of a scale-out repetition for the progress log.
pub(super) fn summary(v: &Value) -> String {
    let f = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_f64)
            .map_or("?".into(), pretty)
    };
    format!(
        "S3R one node {} jobs/s, cluster {} jobs/s (×{}); S4 p99 one node {} ms, cluster {} ms",
        f("/single/s3r/worker/jobs_per_s"),
        f("/cluster/s3r/worker/jobs_per_s"),
        f("/s3r_ratio"),
        f("/single/s4/worker/lateness_ms/p99"),
        f("/cluster/s4/worker/lateness_ms/p99"),
    )
}
