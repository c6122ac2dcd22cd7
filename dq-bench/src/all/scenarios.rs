//! The scenarios: each section of `dq-bench all` (S1 enqueue, the S3 drains and their profile,
//! S4, S5, idle, scale, mass expiry), run through child processes and recorded as figures.

use super::*;

impl Orchestrator {
    // ---- S1 + S2 ----------------------------------------------------------------------

    pub(super) fn s1(&mut self) -> Result<()> {
        let n = self.plan.s1_n;
        let tasks = self.plan.s1_tasks;
        let reps = self.plan.reps;
        self.reps("s1", reps, |o, _| {
            let mut rep = serde_json::Map::new();
            // The round-trip ceiling first, right before `single`, so the ratio pairs
            // neighbours: one client awaiting each EVALSHA of a one-ZADD-one-HSET script.
            o.flush()?;
            let ceiling = o.evalsha_zadd_hset(Some(1), None, n)?;
            o.push("s1_ceiling_c1", ceiling);
            rep.insert("ceiling_c1_evalsha_rps".into(), json!(ceiling));
            // `single_current`: the same one-by-one adds from a current-thread runtime, which
            // separates the client runtime's cross-thread wake-ups from dq's own cost.
            for (name, mode, flavor) in [
                ("single", "single", "multi"),
                ("single_current", "single", "current"),
                ("concurrent", "concurrent", "multi"),
                ("bulk", "bulk", "multi"),
            ] {
                o.flush()?;
                let empty = o.used_memory()?;
                let r = o.enqueue(&[
                    s("--scenario"),
                    s("S1"),
                    s("--mode"),
                    s(mode),
                    s("--n"),
                    s(n),
                    s("--chunk"),
                    s(1000),
                    s("--tasks"),
                    s(tasks),
                    s("--runtime"),
                    s(flavor),
                ])?;
                o.push(&format!("s1_{name}"), num(&r, "/jobs_per_s")?);
                rep.insert(name.into(), r);
                // S2: memory per pending job right after the enqueue (receipts of the calls
                // included: they live 30–60 s).
                let used = o.used_memory()?;
                let per_job = used.saturating_sub(empty) as f64 / n as f64;
                match name {
                    "single" | "concurrent" => {
                        o.push(&format!("s2_{name}_bytes_per_job"), per_job);
                        rep.insert(
                            format!("s2_{name}"),
                            json!({"used_memory_empty": empty, "used_memory": used,
                                   "bytes_per_job": per_job}),
                        );
                    }
                    "bulk" => {
                        let census = admin::census(&mut o.admin, 10_000)?;
                        o.push("s2_bytes_per_job", per_job);
                        o.push(
                            "s2_usage_per_job",
                            census.total_usage_bytes as f64 / n as f64,
                        );
                        o.push("s2_dbsize", census.dbsize as f64);
                        rep.insert(
                            "s2".into(),
                            json!({
                                "used_memory_empty": empty,
                                "used_memory": used,
                                "bytes_per_job": per_job,
                                "census": census,
                            }),
                        );
                    }
                    _ => {}
                }
            }
            let rate = |k: &str| num(&rep[k], "/jobs_per_s");
            let (single, conc, bulk) = (rate("single")?, rate("concurrent")?, rate("bulk")?);
            o.push("s1_single_over_c1", single / ceiling);
            o.push("s1_conc_over_bulk", conc / bulk);
            o.flush()?;
            Ok(Value::Object(rep))
        })
    }

    // ---- S3, S3c1, S3R ---------------------------------------------------------------

    pub(super) fn drains(&mut self, which: &'static str) -> Result<()> {
        let (scenario, n, conc) = match which {
            "s3" => (Scenario::S3, self.plan.s3_n, self.plan.conc),
            "s3c1" => (Scenario::S3, self.plan.s3c1_n, 1),
            _ => (Scenario::S3R, self.plan.s3_n, self.plan.conc),
        };
        if which == "s3c1" && n < self.plan.s3_n {
            self.notes.push(format!(
                "S3c1 uses N={n} (not {}): at concurrency 1 the full N would take minutes",
                self.plan.s3_n
            ));
        }
        let reps = self.plan.reps;
        self.reps(which, reps, |o, _| {
            let v = o.drain(scenario, n, conc, false)?;
            o.push(&format!("{which}_rate"), num(&v, "/worker/jobs_per_s")?);
            o.push(
                &format!("{which}_not_once"),
                num(&v, "/worker/jobs_not_exactly_expected")?,
            );
            if which != "s3c1" {
                if let Some(c) = v.pointer("/cpu/redis_pct").and_then(Value::as_f64) {
                    o.push(&format!("{which}_redis_cpu"), c);
                }
                if let Some(c) = v.pointer("/cpu/worker_pct").and_then(Value::as_f64) {
                    o.push(&format!("{which}_worker_cpu"), c);
                }
                o.push(
                    &format!("{which}_script_us"),
                    num(&v, "/redis/script_usec_per_call")?,
                );
                o.push(
                    &format!("{which}_script_calls_per_job"),
                    num(&v, "/redis/script_calls_per_job")?,
                );
                o.push(
                    &format!("{which}_server_us_per_job"),
                    num(&v, "/redis/script_usec_per_job")?,
                );
            }
            Ok(v)
        })
    }

    /// S3R with and without a metrics recorder installed in the worker, in the same run:
    /// each repetition drains twice, in alternating order, so drift in the machine's load
    /// hits both alike. The figure is the ratio of the two rates (target: within 5 %).
    pub(super) fn s3r_metrics(&mut self) -> Result<()> {
        let (n, conc) = (self.plan.s3_n, self.plan.conc);
        let reps = self.plan.reps;
        self.reps("s3r-metrics", reps, |o, rep| {
            let mut rates = [0.0; 2];
            let mut runs = Vec::new();
            for with in [rep % 2 == 1, rep % 2 == 0] {
                o.worker_extra = if with {
                    vec![s("--metrics")]
                } else {
                    Vec::new()
                };
                let v = o.drain(Scenario::S3R, n, conc, false);
                o.worker_extra.clear();
                let v = v?;
                if with && num(&v, "/worker/metrics_succeeded")? < n as f64 {
                    return Err("the recorder did not record every success".into());
                }
                rates[usize::from(with)] = num(&v, "/worker/jobs_per_s")?;
                runs.push(json!({"metrics": with, "run": v}));
            }
            let [plain, metered] = rates;
            o.push("s3r_plain_rate", plain);
            o.push("s3r_metrics_rate", metered);
            o.push("s3r_metrics_ratio", metered / plain);
            Ok(
                json!({"plain_rate": plain, "metrics_rate": metered, "ratio": metered / plain,
                      "runs": runs}),
            )
        })
    }

    /// S3R with and without the topic keeping its succeeded jobs (a retention of an hour), in
    /// the same run: each repetition drains twice, in alternating order. The figures are the
    /// two rates, their ratio, and Redis's script time per job of each.
    pub(super) fn s3r_keep(&mut self) -> Result<()> {
        let (n, conc) = (self.plan.s3_n, self.plan.conc);
        let reps = self.plan.reps;
        self.reps("s3r-keep", reps, |o, rep| {
            let mut rates = [0.0; 2];
            let mut script = [0.0; 2];
            let mut runs = Vec::new();
            for with in [rep % 2 == 1, rep % 2 == 0] {
                o.worker_extra = if with { vec![s("--keep")] } else { Vec::new() };
                let v = o.drain(Scenario::S3R, n, conc, false);
                o.worker_extra.clear();
                let v = v?;
                if with && num(&v, "/worker/kept")? < n as f64 {
                    return Err("the topic did not keep every succeeded job".into());
                }
                rates[usize::from(with)] = num(&v, "/worker/jobs_per_s")?;
                script[usize::from(with)] = num(&v, "/redis/script_usec_per_job")?;
                runs.push(json!({"keep": with, "run": v}));
            }
            let [plain, kept] = rates;
            o.push("s3r_keep_plain_rate", plain);
            o.push("s3r_keep_rate", kept);
            o.push("s3r_keep_ratio", kept / plain);
            o.push("s3r_keep_plain_server_us_per_job", script[0]);
            o.push("s3r_keep_server_us_per_job", script[1]);
            Ok(
                json!({"plain_rate": plain, "keep_rate": kept, "ratio": kept / plain,
                      "plain_server_us_per_job": script[0], "keep_server_us_per_job": script[1],
                      "runs": runs}),
            )
        })
    }

    /// S3R with and without the topic recording its events (and a reader following them in
    /// the worker's process), in the same run: each repetition drains twice, in alternating
    /// order. The figures are the two rates, their ratio, and Redis's script time per job of
    /// each.
    pub(super) fn s3r_events(&mut self) -> Result<()> {
        let (n, conc) = (self.plan.s3_n, self.plan.conc);
        let reps = self.plan.reps;
        // where the time goes with events on: one drain under SLOWLOG 0, split by script
        self.worker_extra = vec![s("--events")];
        let profiled = self.drain(Scenario::S3R, n, conc, true);
        self.worker_extra.clear();
        if profiled.is_err() {
            let _ = self.slowlog_default();
        }
        let profiled = profiled?;
        eprintln!(
            "   s3r-events (profile, SLOWLOG 0): per job: {}",
            profiled["slowlog"]["usec_per_job"]
        );
        self.reps("s3r-events", reps, |o, rep| {
            let mut rates = [0.0; 2];
            let mut script = [0.0; 2];
            let mut runs = Vec::new();
            for with in [rep % 2 == 1, rep % 2 == 0] {
                o.worker_extra = if with {
                    vec![s("--events")]
                } else {
                    Vec::new()
                };
                let v = o.drain(Scenario::S3R, n, conc, false);
                o.worker_extra.clear();
                let v = v?;
                if with && num(&v, "/worker/events_read")? < 2.0 * n as f64 {
                    return Err(
                        "the reader did not read a started and a succeeded event per job".into(),
                    );
                }
                rates[usize::from(with)] = num(&v, "/worker/jobs_per_s")?;
                script[usize::from(with)] = num(&v, "/redis/script_usec_per_job")?;
                runs.push(json!({"events": with, "run": v}));
            }
            let [plain, recorded] = rates;
            o.push("s3r_events_plain_rate", plain);
            o.push("s3r_events_rate", recorded);
            o.push("s3r_events_ratio", recorded / plain);
            o.push("s3r_events_plain_server_us_per_job", script[0]);
            o.push("s3r_events_server_us_per_job", script[1]);
            Ok(
                json!({"plain_rate": plain, "events_rate": recorded, "ratio": recorded / plain,
                      "plain_server_us_per_job": script[0], "events_server_us_per_job": script[1],
                      "runs": runs}),
            )
        })
    }

    /// One drain: enqueue N (bulk), wait until due + 1 s (S3), start one worker, time it.
    /// With `profile`, every command is logged (SLOWLOG) and the scripts' costs are grouped.
    pub(super) fn drain(
        &mut self,
        scenario: Scenario,
        n: u64,
        conc: usize,
        profile: bool,
    ) -> Result<Value> {
        let dq = self.dq.clone();
        self.drain_with(&dq, scenario, n, conc, profile)
    }

    /// [`Orchestrator::drain`] of any peer's contract commands.
    ///
    /// `redis` in the result holds Redis's time in scripts while the worker ran (`INFO
    /// commandstats` reset just before it starts, read after it exits): with one producer done
    /// and nothing else connected, every script call (dq's `fcall`s, BullMQ's `evalsha`s) is
    /// the worker's fetches, acks and bookkeeping.
    pub(super) fn drain_with(
        &mut self,
        peer: &Peer,
        scenario: Scenario,
        n: u64,
        conc: usize,
        profile: bool,
    ) -> Result<Value> {
        self.flush()?;
        let mut args = vec![
            s("--scenario"),
            s(scenario.name()),
            s("--mode"),
            s("bulk"),
            s("--n"),
            s(n),
        ];
        if scenario == Scenario::S3 {
            args.extend([s("--delay-ms"), s(self.plan.s3_delay_ms)]);
        }
        args.extend(self.producer_extra.iter().cloned());
        let produced = self.enqueue_with(peer, &args)?;
        if scenario == Scenario::S3 {
            let last_due = num(&produced, "/last_due_ms")? as u64;
            sleep_until_ms(last_due + 1000, Duration::from_secs(60));
        }
        if let Some(limits) = self.limits {
            self.apply_limits(scenario.topic(), limits)?;
        }
        if profile {
            self.slowlog_on(0)?;
        }
        self.resetstat()?;
        let running = self.start_worker_with(peer, scenario, conc, n, 600)?;
        let (worker, cpu) = self.finish_worker(running, Duration::from_secs(700))?;
        let stats = self.commandstats()?;
        let scripts = admin::script_calls(&stats);
        let mut v = json!({
            "peer": peer.name,
            "enqueue": produced,
            "worker": worker,
            "cpu": cpu,
            "redis": {
                "script_calls": scripts.calls,
                "script_usec": scripts.usec,
                "script_usec_per_call": scripts.usec_per_call(),
                "script_calls_per_job": scripts.calls as f64 / n as f64,
                "script_usec_per_job": scripts.usec as f64 / n as f64,
                "commandstats": stats,
            },
        });
        if profile {
            let entries = admin::slowlog(&mut self.admin)?;
            self.slowlog_default()?;
            if entries.len() >= SLOWLOG_MAX_LEN {
                self.notes
                    .push("profile: the slow log filled up; totals are low".into());
            }
            let classes = admin::slow_classes(&entries);
            let per_job: BTreeMap<&String, f64> = classes
                .iter()
                .map(|(k, c)| (k, c.total_us as f64 / n as f64))
                .collect();
            v["slowlog"] = json!({"entries": entries.len(), "classes": classes,
                                  "usec_per_job": per_job});
        }
        Ok(v)
    }

    /// Logs every command that takes `threshold_us` or more (0: every command), from now.
    pub(super) fn slowlog_on(&mut self, threshold_us: u64) -> Result<()> {
        self.cmd::<()>(&["CONFIG", "SET", "slowlog-max-len", &s(SLOWLOG_MAX_LEN)])?;
        self.cmd::<()>(&["CONFIG", "SET", "slowlog-log-slower-than", &s(threshold_us)])?;
        self.cmd::<()>(&["SLOWLOG", "RESET"])
    }

    pub(super) fn slowlog_default(&mut self) -> Result<()> {
        self.cmd::<()>(&["CONFIG", "SET", "slowlog-log-slower-than", "10000"])?;
        self.cmd::<()>(&["CONFIG", "SET", "slowlog-max-len", "128"])?;
        self.cmd::<()>(&["SLOWLOG", "RESET"])
    }

    /// One extra S3 drain and one extra S3R drain with every command in the slow log: the
    /// cost of each script (S3R's split, per job, becomes figures).
    pub(super) fn profile(&mut self) -> Result<()> {
        let (n, conc) = (self.plan.s3_n, self.plan.conc);
        for (scenario, section) in [(Scenario::S3, "profile"), (Scenario::S3R, "profile-s3r")] {
            let result = self.drain(scenario, n, conc, true);
            if result.is_err() {
                let _ = self.slowlog_default();
            }
            let v = result?;
            eprintln!(
                "   {section} ({} with SLOWLOG 0): {:.0} jobs/s; per job: {}",
                scenario.name(),
                num(&v, "/worker/jobs_per_s").unwrap_or(f64::NAN),
                v["slowlog"]["usec_per_job"]
            );
            if scenario == Scenario::S3R
                && let Value::Object(per_job) = &v["slowlog"]["usec_per_job"]
            {
                let mut other = 0.0;
                for (class, us) in per_job {
                    let us = us.as_f64().unwrap_or(0.0);
                    match class.strip_prefix(admin::script_class("").as_str()) {
                        Some("fetch") => self.push("s3r_split_fetch", us),
                        Some("ack") => self.push("s3r_split_ack", us),
                        Some(script) if !script.starts_with("keys=") => self.push_labeled(
                            &format!("s3r_split_{script}"),
                            &format!("S3R per job in {script} (profile drain)"),
                            "µs/job",
                            us,
                        ),
                        _ if class.starts_with("eval") => other += us,
                        _ => {}
                    }
                }
                self.push("s3r_split_other", other);
            }
            self.record(section, v);
        }
        Ok(())
    }

    // ---- S4, S5 -------------------------------------------------------------------------

    pub(super) fn s4(&mut self) -> Result<()> {
        let p = self.plan.clone();
        let dq = self.dq.clone();
        self.reps("s4", p.reps, |o, _| {
            let v = o.s4_once(&dq)?;
            for q in ["p50", "p90", "p99", "max"] {
                o.push(
                    &format!("s4_{q}"),
                    num(&v, &format!("/worker/lateness_ms/{q}"))?,
                );
            }
            o.push("s4_not_once", num(&v, "/worker/jobs_not_exactly_expected")?);
            Ok(v)
        })
    }

    /// One S4 run of `peer`: a worker running, N jobs due over a window starting a few
    /// seconds from now (one by one).
    pub(super) fn s4_once(&mut self, peer: &Peer) -> Result<Value> {
        let p = self.plan.clone();
        self.flush()?;
        let timeout = (p.s4_lead_ms + p.s4_window_ms) / 1000 + 120;
        let running = self.start_worker_with(peer, Scenario::S4, p.conc, p.s4_n, timeout)?;
        self.wait_blocked(Duration::from_secs(10))?;
        self.resetstat()?;
        let start = now_ms() + p.s4_lead_ms;
        let produced = self.enqueue_with(
            peer,
            &[
                s("--scenario"),
                s("S4"),
                s("--mode"),
                s("single"),
                s("--n"),
                s(p.s4_n),
                s("--start-ms"),
                s(start),
                s("--window-ms"),
                s(p.s4_window_ms),
            ],
        )?;
        let (worker, _) = self.finish_worker(running, Duration::from_secs(timeout + 30))?;
        let stats = self.commandstats()?;
        Ok(
            json!({"peer": peer.name, "start_ms": start, "enqueue": produced, "worker": worker,
                  "commandstats": stats}),
        )
    }

    /// S5, and in the same repetition an S3R drain of the same N: a retry should cost no more
    /// than a second run, so `(S5 total − 1 s) / S3R drain` is the retry path's figure.
    pub(super) fn s5(&mut self) -> Result<()> {
        let p = self.plan.clone();
        let dq = self.dq.clone();
        self.reps("s5", p.reps, |o, _| {
            let drain = o.drain(Scenario::S3R, p.s5_n, p.conc, false)?;
            let drain_secs = num(&drain, "/worker/secs")?;
            let mut v = o.s5_once(&dq)?;
            let total = num(&v, "/total_secs")?;
            o.push("s5_total", total);
            o.push(
                "s5_not_twice",
                num(&v, "/worker/jobs_not_exactly_expected")?,
            );
            o.push("s5_s3r_secs", drain_secs);
            // (total − 1 s) holds the producer's bulk enqueue of the N jobs: the last one's
            // retry cannot be due before it was added + 1 s
            o.push("s5_enqueue_secs", num(&v, "/enqueue/secs")?);
            let ratio = (total - 1.0) / drain_secs;
            o.push("s5_retry_ratio", ratio);
            v["s3r_same_n"] = json!({"secs": drain_secs, "run": drain});
            v["retry_ratio"] = json!(ratio);
            Ok(v)
        })
    }

    /// One S5 run of `peer`: a worker running, N jobs due now (bulk); every first attempt
    /// fails, the retry 1 s later succeeds. `total_secs`: first add → last success.
    pub(super) fn s5_once(&mut self, peer: &Peer) -> Result<Value> {
        let p = self.plan.clone();
        self.flush()?;
        let running = self.start_worker_with(peer, Scenario::S5, p.conc, p.s5_n, 120)?;
        self.wait_blocked(Duration::from_secs(10))?;
        self.resetstat()?;
        let produced = self.enqueue_with(
            peer,
            &[
                s("--scenario"),
                s("S5"),
                s("--mode"),
                s("bulk"),
                s("--n"),
                s(p.s5_n),
            ],
        )?;
        let (worker, _) = self.finish_worker(running, Duration::from_secs(150))?;
        let total = (num(&worker, "/last_done_ms")? - num(&produced, "/first_add_ms")?) / 1000.0;
        // Producer and worker together: bulk enqueue, fetch, fail, ack.
        let stats = self.commandstats()?;
        Ok(
            json!({"peer": peer.name, "total_secs": total, "enqueue": produced,
                  "worker": worker, "commandstats": stats}),
        )
    }

    // ---- idle cost ----------------------------------------------------------------------

    pub(super) fn idle(&mut self) -> Result<()> {
        let p = self.plan.clone();
        self.reps("idle", p.reps, |o, _| {
            o.flush()?;
            let running = o.start_worker(Scenario::Idle, p.conc, 1, p.idle_secs + 60)?;
            o.wait_blocked(Duration::from_secs(10))?;
            o.resetstat()?;
            let t = Instant::now();
            std::thread::sleep(Duration::from_secs(p.idle_secs));
            let stats = o.commandstats()?;
            let elapsed = t.elapsed().as_secs_f64();
            // The idle worker has done its part; it is killed rather than waited for.
            drop(running.sampler.finish());
            drop(running.proc);
            let calls = admin::client_sent_calls(&stats);
            let fetchers = 1.0; // one topic, one partition
            let rate = calls as f64 / elapsed / fetchers;
            o.push("idle_cmds", rate);
            Ok(
                json!({"secs": elapsed, "client_calls": calls, "fetchers": fetchers,
                      "cmds_per_s_per_fetcher": rate, "commandstats": stats}),
            )
        })
    }

    // ---- scale --------------------------------------------------------------------------

    pub(super) fn scale(&mut self) -> Result<()> {
        let p = self.plan.clone();
        let base = p.scale_sizes[0];
        self.reps("scale", p.reps, |o, rep| {
            let mut sizes = p.scale_sizes.clone();
            if rep == 0 {
                sizes.extend(p.scale_big);
            }
            let mut out = serde_json::Map::new();
            let mut by_size: BTreeMap<u64, [f64; 4]> = BTreeMap::new();
            for size in sizes {
                let v = o.scale_one(size)?;
                let costs = [
                    num(&v, "/enqueue_us_per_job")?,
                    num(&v, "/enqueue_script_us_per_job")?,
                    num(&v, "/fire_us_per_job")?,
                    num(&v, "/fire_script_us_per_job")?,
                ];
                for (what, c) in ["enq_us", "enq_srv", "fire_us", "fire_srv"]
                    .iter()
                    .zip(costs)
                {
                    o.push(&format!("scale_{what}_{size}"), c);
                }
                o.push(
                    &format!("scale_bytes_{size}"),
                    num(&v, "/bytes_per_pending_job")?,
                );
                by_size.insert(size, costs);
                out.insert(size.to_string(), v);
            }
            if let Some(b) = by_size.get(&base).copied() {
                for (size, c) in &by_size {
                    if *size == base {
                        continue;
                    }
                    for (i, what) in ["enq", "enq_srv", "fire", "fire_srv"].iter().enumerate() {
                        o.push(&format!("scale_ratio_{what}_{size}"), c[i] / b[i]);
                    }
                }
            }
            Ok(Value::Object(out))
        })
    }

    /// Enqueue and fire cost per job with `pending` far-future jobs in the same partition.
    pub(super) fn scale_one(&mut self, pending: u64) -> Result<Value> {
        let p = self.plan.clone();
        self.flush()?;
        let empty = self.used_memory()?;
        let fill = self.enqueue(&[
            s("--scenario"),
            s("FILL"),
            s("--mode"),
            s("bulk"),
            s("--n"),
            s(pending),
            s("--first-id"),
            s(1_000_000_000_000u64),
        ])?;
        let used = self.used_memory()?;
        self.resetstat()?;
        let produced = self.enqueue(&[
            s("--scenario"),
            s("SCALE"),
            s("--mode"),
            s("single"),
            s("--n"),
            s(p.scale_m),
            s("--delay-ms"),
            s(p.scale_delay_ms),
        ])?;
        let enq_stats = self.commandstats()?;
        let enq = admin::script_calls(&enq_stats);
        sleep_until_ms(
            num(&produced, "/last_due_ms")? as u64 + 1000,
            Duration::from_secs(60),
        );
        self.resetstat()?;
        let running = self.start_worker(Scenario::Scale, p.conc, p.scale_m, 600)?;
        let (worker, cpu) = self.finish_worker(running, Duration::from_secs(700))?;
        let fire = admin::script_calls(&self.commandstats()?);
        let m = p.scale_m as f64;
        Ok(json!({
            "pending": pending,
            "fill": fill,
            "bytes_per_pending_job": used.saturating_sub(empty) as f64 / pending as f64,
            "enqueue": produced,
            "enqueue_us_per_job": num(&produced, "/secs")? * 1e6 / m,
            "enqueue_script_us_per_job": enq.usec as f64 / m,
            "enqueue_script_calls": enq.calls,
            "worker": worker,
            "cpu": cpu,
            "fire_us_per_job": num(&worker, "/secs")? * 1e6 / m,
            "fire_script_us_per_job": fire.usec as f64 / m,
            "fire_script_calls": fire.calls,
        }))
    }

    // ---- scale, dense due times --------------------------------------------------------

    /// The scale scenario's second variant: the pending jobs are all due within one 60 s
    /// window (1,000,000 of them: about 16 per ms), filled with the bulk API and the client's
    /// default chunk. Enqueue cost per job is Redis's script time during that fill; fire cost
    /// per job is Redis's script time while a worker fires a batch of measured jobs due just
    /// as densely (16 per ms), soon, beside the pending ones. During the largest fill the slow
    /// log records every call over 2 ms.
    pub(super) fn scale_dense(&mut self) -> Result<()> {
        let p = self.plan.clone();
        let base = p.scale_sizes[0];
        let top = p.scale_sizes.iter().copied().max().unwrap_or(base);
        self.reps("scale-dense", p.reps, |o, _| {
            let mut out = serde_json::Map::new();
            let mut by_size: BTreeMap<u64, [f64; 2]> = BTreeMap::new();
            for size in p.scale_sizes.clone() {
                let r = o.scale_dense_one(size, size == top);
                if size == top {
                    let _ = o.slowlog_default();
                }
                let v = r?;
                let costs = [
                    num(&v, "/enqueue_script_us_per_job")?,
                    num(&v, "/fire_script_us_per_job")?,
                ];
                o.push(&format!("dense_enq_srv_{size}"), costs[0]);
                o.push(&format!("dense_fire_srv_{size}"), costs[1]);
                o.push(
                    &format!("dense_enq_us_{size}"),
                    num(&v, "/enqueue_us_per_job")?,
                );
                o.push(
                    &format!("dense_bytes_{size}"),
                    num(&v, "/bytes_per_pending_job")?,
                );
                if size == top {
                    o.push("dense_slow_calls", num(&v, "/slowlog/script_calls")?);
                    o.push("dense_slow_longest", num(&v, "/slowlog/longest_us")?);
                }
                by_size.insert(size, costs);
                out.insert(size.to_string(), v);
            }
            if let Some(b) = by_size.get(&base).copied() {
                for (size, c) in &by_size {
                    if *size != base {
                        o.push(&format!("dense_ratio_enq_{size}"), c[0] / b[0]);
                        o.push(&format!("dense_ratio_fire_{size}"), c[1] / b[1]);
                    }
                }
            }
            Ok(Value::Object(out))
        })
    }

    /// One size of [`Orchestrator::scale_dense`]; with `watch`, the fill runs with the slow
    /// log at 2,000 µs (the caller restores it).
    pub(super) fn scale_dense_one(&mut self, pending: u64, watch: bool) -> Result<Value> {
        let p = self.plan.clone();
        self.flush()?;
        let empty = self.used_memory()?;
        let start = now_ms() + p.dense_lead_ms;
        if watch {
            self.slowlog_on(2_000)?;
        }
        self.resetstat()?;
        let fill = self.enqueue(&[
            s("--scenario"),
            s("FILL"),
            s("--mode"),
            s("bulk"),
            s("--n"),
            s(pending),
            s("--chunk"),
            s(dq::DEFAULT_BULK_CHUNK),
            s("--start-ms"),
            s(start),
            s("--window-ms"),
            s(p.dense_window_ms),
            s("--first-id"),
            s(1_000_000_000_000u64),
        ])?;
        let fill_stats = self.commandstats()?;
        let enq = admin::script_calls(&fill_stats);
        let slowlog = if watch {
            let entries = admin::slowlog(&mut self.admin)?;
            // The script calls (the bulk chunks); the commands they run are logged apart too.
            let calls: Vec<u64> = entries
                .iter()
                .filter(|e| admin::is_script_call(&e.args))
                .map(|e| e.micros)
                .collect();
            self.slowlog_default()?;
            json!({"threshold_us": 2_000, "entries": entries.len(), "script_calls": calls.len(),
                   "longest_us": calls.iter().max().copied().unwrap_or(0),
                   "classes": admin::slow_classes(&entries)})
        } else {
            Value::Null
        };
        // Memory from the keys themselves (a handful of them): unlike `used_memory`, not
        // moved by client buffers of the processes before.
        let usage = admin::census(&mut self.admin, 1_000)?.total_usage_bytes;
        let used = self.used_memory()?;
        // The measured jobs: as dense (16 per ms), due half a second from now.
        let m = p.scale_m;
        let window = (m / 16).max(1);
        let produced = self.enqueue(&[
            s("--scenario"),
            s("SCALE"),
            s("--mode"),
            s("bulk"),
            s("--n"),
            s(m),
            s("--chunk"),
            s(dq::DEFAULT_BULK_CHUNK),
            s("--start-ms"),
            s(now_ms() + 500),
            s("--window-ms"),
            s(window),
        ])?;
        sleep_until_ms(
            num(&produced, "/last_due_ms")? as u64 + 1000,
            Duration::from_secs(60),
        );
        self.resetstat()?;
        let running = self.start_worker(Scenario::Scale, p.conc, m, 600)?;
        let (worker, cpu) = self.finish_worker(running, Duration::from_secs(700))?;
        let fire = admin::script_calls(&self.commandstats()?);
        let mf = m as f64;
        let pf = pending as f64;
        Ok(json!({
            "pending": pending,
            "window_ms": p.dense_window_ms,
            "per_ms": pf / p.dense_window_ms.max(1) as f64,
            "fill": fill,
            "bytes_per_pending_job": usage as f64 / pf,
            "used_memory_per_pending_job": used.saturating_sub(empty) as f64 / pf,
            "enqueue_us_per_job": num(&fill, "/secs")? * 1e6 / pf,
            "enqueue_script_us_per_job": enq.usec as f64 / pf,
            "enqueue_script_calls": enq.calls,
            "slowlog": slowlog,
            "measured": produced,
            "worker": worker,
            "cpu": cpu,
            "fire_us_per_job": num(&worker, "/secs")? * 1e6 / mf,
            "fire_script_us_per_job": fire.usec as f64 / mf,
            "fire_script_calls": fire.calls,
        }))
    }

    // ---- mass expiry --------------------------------------------------------------------

    pub(super) fn mass(&mut self) -> Result<()> {
        let p = self.plan.clone();
        self.reps("mass", p.reps, |o, _| {
            let r = o.mass_once(&p);
            let _ = o.slowlog_default();
            r
        })
    }

    pub(super) fn mass_once(&mut self, p: &Plan) -> Result<Value> {
        self.flush()?;
        let running = self.start_worker(Scenario::Mass, p.conc, p.mass_n, 300)?;
        self.wait_blocked(Duration::from_secs(10))?;
        // Enqueue phase: log only calls over 50 µs (every bulk enqueue call, but not the
        // 400,000 tiny commands its scripts run, which would flood the log).
        self.slowlog_on(50)?;
        let due = now_ms() + p.mass_lead_ms;
        let produced = self.enqueue(&[
            s("--scenario"),
            s("MASS"),
            s("--mode"),
            s("bulk"),
            s("--n"),
            s(p.mass_n),
            s("--start-ms"),
            s(due),
            s("--window-ms"),
            s(0),
        ])?;
        let enqueue_entries = admin::slowlog(&mut self.admin)?;
        // Fire phase: log everything.
        self.slowlog_on(0)?;
        let armed_ms = now_ms();
        let enqueue_late = num(&produced, "/last_add_ms")? > due as f64 || armed_ms > due;
        let (worker, _) = self.finish_worker(running, Duration::from_secs(330))?;
        let fire_entries = admin::slowlog(&mut self.admin)?;
        let overflow = fire_entries.len() >= SLOWLOG_MAX_LEN;
        let enqueue_classes = admin::slow_classes(&enqueue_entries);
        let fire_classes = admin::slow_classes(&fire_entries);
        let longest_script = fire_entries
            .iter()
            .filter(|e| admin::is_script_call(&e.args))
            .map(|e| e.micros)
            .max()
            .unwrap_or(0);
        let class_max = |classes: &BTreeMap<String, admin::SlowClass>, name: &str| {
            classes.get(name).map_or(0.0, |c| c.max_us as f64)
        };
        let last_start = num(&worker, "/lateness_ms/max")?;
        let drain_secs = (num(&worker, "/last_done_ms")? - due as f64) / 1000.0;
        self.push("mass_last_start", last_start);
        self.push("mass_drain_rate", p.mass_n as f64 / drain_secs.max(1e-3));
        self.push("mass_longest_script", longest_script as f64);
        self.push(
            "mass_longest_fetch",
            class_max(&fire_classes, &admin::script_class("fetch")),
        );
        self.push(
            "mass_longest_ack",
            class_max(&fire_classes, &admin::script_class("ack")),
        );
        self.push(
            "mass_longest_enqueue",
            class_max(&enqueue_classes, &admin::script_class("enqueue")),
        );
        self.push("mass_not_once", num(&worker, "/jobs_not_exactly_expected")?);
        if enqueue_late {
            self.notes.push(
                "mass expiry: the producer (or the slow-log switch) finished after the jobs \
                 fell due; the phases overlap"
                    .into(),
            );
        }
        if overflow {
            self.notes.push(format!(
                "mass expiry: the slow log filled up ({SLOWLOG_MAX_LEN} entries); the longest \
                 call may be missing"
            ));
        }
        Ok(json!({
            "due_ms": due,
            "enqueue": produced,
            "enqueue_finished_after_due": enqueue_late,
            "worker": worker,
            "slowlog_enqueue_phase": {"threshold_us": 50, "entries": enqueue_entries.len(),
                                      "classes": enqueue_classes},
            "slowlog_fire_phase": {"threshold_us": 0, "entries": fire_entries.len(),
                                   "classes": fire_classes, "overflow": overflow},
            "longest_script_us": longest_script,
        }))
    }
}
