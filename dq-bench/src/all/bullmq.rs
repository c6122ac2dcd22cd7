//! The `bullmq` section: BullMQ measured in the same run, on the same private redis-server,
//! through the same contract commands (`dq-bench/peers/bullmq/bench.mjs`, Node.js, BullMQ
//! pinned by its package-lock.json).
//!
//! Each repetition runs dq's S3R drain and BullMQ's back to back (their ratio pairs
//! neighbours), then BullMQ's S1 (single, bulk, concurrent), S3 drain, S4 and S5. The section
//! is skipped, with the reason printed, when node or npm is missing or `npm ci` fails.

use super::*;

/// The BullMQ peer's directory.
fn peer_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/bullmq")
}

/// The BullMQ peer, installed (`npm ci` when node_modules is missing), with its versions, or
/// why it cannot run.
fn bullmq_peer() -> std::result::Result<(Peer, String), String> {
    let dir = peer_dir();
    let script = dir.join("bench.mjs");
    if !script.exists() {
        return Err(format!("{} is missing", script.display()));
    }
    let node = ceiling::run_captured("node", &["--version"], Duration::from_secs(30))
        .map_err(|e| format!("node is not usable: {e}"))?;
    if !dir.join("node_modules").join("bullmq").exists() {
        ceiling::run_captured("npm", &["--version"], Duration::from_secs(30))
            .map_err(|e| format!("npm is not usable: {e}"))?;
        eprintln!("   npm ci in {} ...", dir.display());
        ceiling::run_captured_in(
            Some(&dir),
            "npm",
            &["ci", "--no-audit", "--no-fund"],
            Duration::from_secs(600),
        )
        .map_err(|e| format!("npm ci failed: {e}"))?;
    }
    let version = std::fs::read_to_string(dir.join("node_modules/bullmq/package.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| v["version"].as_str().map(str::to_owned))
        .ok_or("node_modules/bullmq/package.json has no version (install incomplete?)")?;
    let peer = Peer {
        name: "bullmq",
        program: PathBuf::from("node"),
        prefix: vec![script.display().to_string()],
    };
    Ok((peer, format!("BullMQ {version} on node {}", node.trim())))
}

impl Orchestrator {
    pub(super) fn bullmq(&mut self) -> Result<()> {
        let (peer, version) = match bullmq_peer() {
            Ok(p) => p,
            Err(reason) => {
                eprintln!("   bullmq skipped: {reason}");
                self.notes.push(format!("section bullmq skipped: {reason}"));
                return Ok(());
            }
        };
        eprintln!("   {version}");
        self.notes.push(format!("bullmq section: {version}"));
        let p = self.plan.clone();
        let dq = self.dq.clone();
        self.reps("bullmq", p.reps, |o, _| {
            let mut rep = serde_json::Map::new();
            rep.insert("version".into(), json!(version));
            let mut not_expected = 0.0;
            // S3R: dq's drain and BullMQ's, back to back.
            let ours = o.drain_with(&dq, Scenario::S3R, p.s3_n, p.conc, false)?;
            let theirs = o.drain_with(&peer, Scenario::S3R, p.s3_n, p.conc, false)?;
            let (a, b) = (
                num(&ours, "/worker/jobs_per_s")?,
                num(&theirs, "/worker/jobs_per_s")?,
            );
            o.push("bullmq_dq_s3r_rate", a);
            o.push("bullmq_s3r_rate", b);
            o.push("s3r_dq_over_bullmq", a / b);
            o.push(
                "bullmq_s3r_server_us_per_job",
                num(&theirs, "/redis/script_usec_per_job")?,
            );
            not_expected += num(&theirs, "/worker/jobs_not_exactly_expected")?;
            rep.insert("dq_s3r".into(), ours);
            rep.insert("s3r".into(), theirs);
            // S1: single, bulk, concurrent; S2 memory after bulk.
            for mode in ["single", "bulk", "concurrent"] {
                o.flush()?;
                let empty = o.used_memory()?;
                let r = o.enqueue_with(
                    &peer,
                    &[
                        s("--scenario"),
                        s("S1"),
                        s("--mode"),
                        s(mode),
                        s("--n"),
                        s(p.s1_n),
                        s("--chunk"),
                        s(1000),
                        s("--tasks"),
                        s(p.s1_tasks),
                    ],
                )?;
                o.push(&format!("bullmq_s1_{mode}"), num(&r, "/jobs_per_s")?);
                let per_job = o.used_memory()?.saturating_sub(empty) as f64 / p.s1_n as f64;
                o.push(&format!("bullmq_s2_{mode}_bytes_per_job"), per_job);
                rep.insert(format!("s1_{mode}"), r);
            }
            // S3: jobs delayed, drained once due.
            let s3 = o.drain_with(&peer, Scenario::S3, p.s3_n, p.conc, false)?;
            o.push("bullmq_s3_rate", num(&s3, "/worker/jobs_per_s")?);
            not_expected += num(&s3, "/worker/jobs_not_exactly_expected")?;
            rep.insert("s3".into(), s3);
            // S4 lateness.
            let s4 = o.s4_once(&peer)?;
            for q in ["p50", "p99", "max"] {
                o.push(
                    &format!("bullmq_s4_{q}"),
                    num(&s4, &format!("/worker/lateness_ms/{q}"))?,
                );
            }
            not_expected += num(&s4, "/worker/jobs_not_exactly_expected")?;
            rep.insert("s4".into(), s4);
            // S5 retry.
            let s5 = o.s5_once(&peer)?;
            o.push("bullmq_s5_total", num(&s5, "/total_secs")?);
            not_expected += num(&s5, "/worker/jobs_not_exactly_expected")?;
            rep.insert("s5".into(), s5);
            o.push("bullmq_not_expected", not_expected);
            o.flush()?;
            Ok(Value::Object(rep))
        })
    }
}
