//! The report: the table printed at the end, the JSON file of every figure and raw run, and
//! the formatting both use.

use super::*;

impl Orchestrator {
    pub(super) fn table(&self) -> String {
        let mut t = String::new();
        let header = format!(
            "{:<58} {:>12} {:>12} {:>12}  {:<7} {:<9} {}",
            "figure", "median", "min", "max", "unit", "target", "verdict"
        );
        t.push_str(&header);
        t.push('\n');
        t.push_str(&"-".repeat(header.chars().count() + 4));
        t.push('\n');
        for f in &self.figures {
            if f.values.is_empty() {
                continue;
            }
            let v = f.sorted();
            t.push_str(&format!(
                "{:<58} {:>12} {:>12} {:>12}  {:<7} {:<9} {}\n",
                f.label,
                pretty(f.median().unwrap_or(f64::NAN)),
                pretty(v[0]),
                pretty(v[v.len() - 1]),
                f.unit,
                f.target.map_or("", |(t, _)| t),
                f.verdict()
            ));
        }
        if let Some(Value::Array(rows)) = self.ceilings.get("rows") {
            t.push_str(&format!(
                "\nRedis ceilings on this machine (redis-benchmark, {} requests, 50 clients unless said):\n",
                pretty_count(self.plan.bench_requests)
            ));
            for r in rows {
                t.push_str(&format!(
                    "  {:<56} {:>12} calls/s {:>12} ops/s\n",
                    r["label"].as_str().unwrap_or("?"),
                    pretty(r["rps"].as_f64().unwrap_or(f64::NAN)),
                    pretty(r["ops_per_s"].as_f64().unwrap_or(f64::NAN)),
                ));
            }
        }
        for (section, what) in [("profile", "S3"), ("profile-s3r", "S3R")] {
            let Some(profile) = self.runs.get(section).and_then(|r| r.last()) else {
                continue;
            };
            t.push_str(&format!(
                "\n{what} script costs (one extra drain with SLOWLOG 0 — slower than the runs above):\n"
            ));
            if let Value::Object(classes) = &profile["slowlog"]["classes"] {
                // Scripts and blocking calls; the commands run inside scripts are in the JSON.
                let shown = classes
                    .iter()
                    .filter(|(name, _)| name.starts_with("eval") || name.as_str() == "blpop");
                for (name, c) in shown {
                    t.push_str(&format!(
                        "  {:<20} calls {:>8}  mean {:>8} µs  p99 {:>8} µs  max {:>8} µs  per job {:>7} µs\n",
                        name,
                        c["calls"],
                        pretty(c["mean_us"].as_f64().unwrap_or(f64::NAN)),
                        c["p99_us"],
                        c["max_us"],
                        pretty(
                            profile["slowlog"]["usec_per_job"][name]
                                .as_f64()
                                .unwrap_or(f64::NAN)
                        ),
                    ));
                }
            }
        }
        if let Some(s1) = self.runs.get("s1").and_then(|r| r.last())
            && let Some(census) = s1.pointer("/bulk").and(s1.pointer("/s2/census"))
        {
            t.push_str(&format!(
                "\nS2 keys after S1 bulk: {} keys by type {}; largest {}\n",
                census["dbsize"], census["by_type"], census["largest"]
            ));
        }
        if !self.notes.is_empty() {
            t.push_str("\nNotes:\n");
            for n in &self.notes {
                t.push_str(&format!("  - {n}\n"));
            }
        }
        t
    }

    pub(super) fn write_json(
        &self,
        args: &AllArgs,
        started: SystemTime,
        took: Duration,
    ) -> Result<PathBuf> {
        let dir = args.out.clone().unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .unwrap_or(Path::new("."))
                .join("bench-results")
        });
        std::fs::create_dir_all(&dir)?;
        let stamp = utc_stamp(started);
        let path = dir.join(format!("{stamp}.json"));
        let redis_version: String = {
            let mut conn = self.server.connection();
            admin::info(&mut conn, "server")
                .ok()
                .and_then(|i| admin::info_field(&i, "redis_version").map(str::to_owned))
                .unwrap_or_default()
        };
        let doc = json!({
            "started_utc": stamp,
            "took_secs": took.as_secs_f64(),
            "command": std::env::args().collect::<Vec<_>>(),
            "plan": self.plan,
            "env": {
                "redis_version": redis_version,
                "cpus": std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
                "clk_tck": self.tck,
                "git": self.git,
            },
            "figures": self.figures.iter().filter(|f| !f.values.is_empty())
                .map(Figure::to_json).collect::<Vec<_>>(),
            "ceilings": self.ceilings,
            "runs": self.runs,
            "notes": self.notes,
            "table": self.table(),
        });
        std::fs::write(&path, serde_json::to_string_pretty(&doc)?)?;
        Ok(path)
    }
}

/// `git describe --always --dirty` of the workspace, if git is there.
pub(super) fn git_describe() -> Option<String> {
    let out = Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// `YYYYMMDDTHHMMSSZ` of a time (UTC).
pub(super) fn utc_stamp(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A number for the table: thousands separated, sensible decimals.
pub(super) fn pretty(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    let a = x.abs();
    if a >= 1000.0 {
        let int = x.round() as i64;
        let digits = int.unsigned_abs().to_string();
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        if int < 0 { format!("-{out}") } else { out }
    } else if a >= 100.0 || x == x.trunc() {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// 10k, 1M, 10M.
pub(super) fn pretty_count(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n.is_multiple_of(1_000_000) => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n.is_multiple_of(1_000) => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_and_numbers() {
        assert_eq!(utc_stamp(UNIX_EPOCH), "19700101T000000Z");
        assert_eq!(
            utc_stamp(UNIX_EPOCH + Duration::from_secs(1_709_251_199)),
            "20240229T235959Z"
        );
        assert_eq!(pretty(1234567.8), "1,234,568");
        assert_eq!(pretty(12.345), "12.3");
        assert_eq!(pretty(1.5), "1.50");
        assert_eq!(pretty(3.0), "3");
        assert_eq!(pretty_count(1_000_000), "1M");
        assert_eq!(pretty_count(10_000), "10k");
    }
}
