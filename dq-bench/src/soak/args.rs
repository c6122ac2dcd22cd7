//! The command line of `dq-bench soak` and the plan it stands for, checked before anything
//! starts.

use std::path::PathBuf;
use std::time::Duration;

/// `dq-bench soak`: mixed load for a long time against a private Redis, with one worker
/// process killed over and over; prints lost jobs, duplicates and memory drift.
#[derive(clap::Args, Debug, Clone)]
pub struct SoakArgs {
    /// How long to produce load, in minutes (fractions allowed: `0.5` is 30 s).
    #[arg(long, default_value_t = 30.0)]
    pub minutes: f64,
    /// Seconds between two SIGKILLs of the killed worker (it is restarted at once).
    #[arg(long, default_value_t = 10.0)]
    pub kill_every: f64,
    /// Jobs enqueued per second (one at a time, from this process).
    #[arg(long, default_value_t = 500)]
    pub rate: u32,
    /// Seconds between two progress lines on stderr.
    #[arg(long, default_value_t = 60.0)]
    pub report_every: f64,
    /// The longest delay of an enqueued job, in seconds (the far band is 5 s to this).
    #[arg(long, default_value_t = 60.0)]
    pub max_delay: f64,
    /// The workers' lease, in ms.
    #[arg(long, default_value_t = 5_000)]
    pub lease_ms: u64,
    /// Handler slots of each worker, per topic.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// The seed of the load's random choices (the same seed gives the same mix).
    #[arg(long, default_value_t = 22)]
    pub seed: u64,
    /// The `fault-worker` binary (default: next to this binary; `cargo build --workspace
    /// --bins` builds both).
    #[arg(long)]
    pub fault_worker: Option<PathBuf>,
}

/// How long the memory reference waits when the run is long enough: the issue's "after the
/// first 5 minutes".
pub const REFERENCE_AFTER: Duration = Duration::from_secs(300);

/// Runs shorter than this take their memory reference at half time instead.
pub const SHORTEST_FOR_MINUTE_5: Duration = Duration::from_secs(600);

/// The shortest far delay (the far band is `FAR_FROM` to `--max-delay`).
pub const FAR_FROM: Duration = Duration::from_secs(5);

/// The soak as checked numbers.
#[derive(Clone, Debug)]
pub struct Plan {
    /// How long load is produced.
    pub run: Duration,
    /// Time between kills.
    pub kill_every: Duration,
    /// Jobs per second.
    pub rate: f64,
    /// Time between progress lines.
    pub report_every: Duration,
    /// The longest delay of a job.
    pub max_delay: Duration,
    /// The workers' lease.
    pub lease: Duration,
    /// Handler slots per worker and topic.
    pub concurrency: usize,
    /// The load's seed.
    pub seed: u64,
    /// The `fault-worker` binary.
    pub fault_worker: PathBuf,
    /// When the memory reference is taken, from the start of the load.
    pub reference_at: Duration,
    /// How the reference was chosen, for the report.
    pub reference_rule: &'static str,
    /// Time between two memory samples.
    pub sample_every: Duration,
}

impl Plan {
    /// Checks every flag and finds the `fault-worker` binary; a clear error names the first
    /// bad one.
    pub fn new(args: &SoakArgs) -> Result<Plan, String> {
        let secs = |name: &str, v: f64, min: f64, max: f64| -> Result<Duration, String> {
            if v.is_finite() && (min..=max).contains(&v) {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(format!("--{name} {v} is out of range ({min} to {max})"))
            }
        };
        let run = secs("minutes", args.minutes * 60.0, 6.0, 7.0 * 24.0 * 3600.0)
            .map_err(|_| format!("--minutes {} is out of range (0.1 to 10080)", args.minutes))?;
        let kill_every = secs("kill-every", args.kill_every, 1.0, 3600.0)?;
        let report_every = secs("report-every", args.report_every, 1.0, 3600.0)?;
        let max_delay = secs("max-delay", args.max_delay, 6.0, 3600.0)?;
        if !(1..=50_000).contains(&args.rate) {
            return Err(format!("--rate {} is out of range (1 to 50000)", args.rate));
        }
        if !(100..=600_000).contains(&args.lease_ms) {
            return Err(format!(
                "--lease-ms {} is out of range (100 to 600000)",
                args.lease_ms
            ));
        }
        if !(1..=1_000).contains(&args.concurrency) {
            return Err(format!(
                "--concurrency {} is out of range (1 to 1000)",
                args.concurrency
            ));
        }
        let fault_worker = match &args.fault_worker {
            Some(path) => path.clone(),
            None => std::env::current_exe()
                .map_err(|e| format!("cannot locate this binary: {e}"))?
                .with_file_name("fault-worker"),
        };
        if !fault_worker.is_file() {
            return Err(format!(
                "no fault-worker binary at {} (build it with `cargo build --workspace --bins`, \
                 or pass --fault-worker PATH)",
                fault_worker.display()
            ));
        }
        let (reference_at, reference_rule) = if run >= SHORTEST_FOR_MINUTE_5 {
            (REFERENCE_AFTER, "minute 5")
        } else {
            (run / 2, "half time (the run is shorter than 10 minutes)")
        };
        Ok(Plan {
            run,
            kill_every,
            rate: f64::from(args.rate),
            report_every,
            max_delay,
            lease: Duration::from_millis(args.lease_ms),
            concurrency: args.concurrency,
            seed: args.seed,
            fault_worker,
            reference_at,
            reference_rule,
            sample_every: (run / 10).clamp(Duration::from_secs(1), Duration::from_secs(60)),
        })
    }

    /// How long the drain may take after the load stops: the farthest due time (a delay or a
    /// reschedule), the retries of a flaky job, a lease lost to the last kill, and a margin
    /// for a loaded machine.
    pub fn drain_limit(&self) -> Duration {
        self.max_delay + self.lease * 3 + Duration::from_secs(120)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> SoakArgs {
        SoakArgs {
            minutes: 30.0,
            kill_every: 10.0,
            rate: 500,
            report_every: 60.0,
            max_delay: 60.0,
            lease_ms: 5_000,
            concurrency: 16,
            seed: 1,
            fault_worker: Some(std::env::current_exe().unwrap()),
        }
    }

    #[test]
    fn the_reference_is_minute_5_or_half_time() {
        let p = Plan::new(&args()).unwrap();
        assert_eq!(p.reference_at, REFERENCE_AFTER);
        assert_eq!(p.sample_every, Duration::from_secs(60));
        let p = Plan::new(&SoakArgs {
            minutes: 2.0,
            ..args()
        })
        .unwrap();
        assert_eq!(p.reference_at, Duration::from_secs(60));
        assert_eq!(p.sample_every, Duration::from_secs(12));
    }

    #[test]
    fn bad_flags_are_refused_by_name() {
        let bad = [
            SoakArgs {
                minutes: 0.0,
                ..args()
            },
            SoakArgs {
                kill_every: f64::NAN,
                ..args()
            },
            SoakArgs { rate: 0, ..args() },
            SoakArgs {
                max_delay: 1.0,
                ..args()
            },
            SoakArgs {
                fault_worker: Some("/nonexistent/fault-worker".into()),
                ..args()
            },
        ];
        let names = [
            "--minutes",
            "--kill-every",
            "--rate",
            "--max-delay",
            "fault-worker",
        ];
        for (a, name) in bad.iter().zip(names) {
            let e = Plan::new(a).unwrap_err();
            assert!(e.contains(name), "{e}");
        }
    }
}
