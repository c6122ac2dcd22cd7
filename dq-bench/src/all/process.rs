//! The orchestrator's child processes (`enqueue` and `worker` runs of this binary, read line by
//! line) and the CPU sampler that watches Redis and a worker while they run.

use super::*;

/// A child process of this binary (`enqueue` or `worker`), its stdout read line by line.
pub(super) struct Proc {
    pub(super) label: String,
    pub(super) child: Child,
    pub(super) lines: mpsc::Receiver<String>,
}

impl Proc {
    pub(super) fn spawn(exe: &Path, url: &str, args: &[String]) -> Result<Proc> {
        Self::spawn_with_env(exe, url, args, &[])
    }

    /// [`Proc::spawn`] with further environment variables (`DQ_BENCH_PARTITIONS`).
    pub(super) fn spawn_with_env(
        exe: &Path,
        url: &str,
        args: &[String],
        env: &[(&str, String)],
    ) -> Result<Proc> {
        let label = args.join(" ");
        let mut child = Command::new(exe)
            .args(args)
            .env("REDIS_URL", url)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start {label}: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = mpsc::channel();
        // Ends at end-of-file, i.e. when the child exits or is killed.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Proc {
            label,
            child,
            lines: rx,
        })
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next JSON line, within `timeout`.
    pub(super) fn line(&mut self, timeout: Duration) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.trim().is_empty() => {}
                Ok(line) => {
                    return serde_json::from_str(&line).map_err(|e| {
                        format!("`{}` printed a non-JSON line ({e}): {line}", self.label).into()
                    });
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    return Err(format!("`{}`: no result within {timeout:?}", self.label).into());
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().ok();
                    return Err(format!(
                        "`{}` exited without a result line ({status:?})",
                        self.label
                    )
                    .into());
                }
            }
        }
    }

    /// The result line, then the exit (bounded); the child is killed if it lingers.
    pub(super) fn finish(mut self, timeout: Duration) -> Result<Value> {
        let value = self.line(timeout)?;
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(value)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// CPU time samples of Redis and of a worker, every 20 ms, on a thread.
pub(super) struct Sampler {
    pub(super) stop: Arc<AtomicBool>,
    pub(super) thread: JoinHandle<Vec<Sample>>,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Sample {
    pub(super) at: Instant,
    pub(super) redis: Option<u64>,
    pub(super) worker: Option<u64>,
}

impl Sampler {
    /// Samples until stopped or for at most `max`.
    pub(super) fn start(redis_pid: u32, worker_pid: u32, max: Duration) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let end = Instant::now() + max;
            let mut out = Vec::new();
            while !flag.load(Ordering::Relaxed) && Instant::now() < end {
                out.push(Sample {
                    at: Instant::now(),
                    redis: admin::cpu_ticks(redis_pid),
                    worker: admin::cpu_ticks(worker_pid),
                });
                std::thread::sleep(Duration::from_millis(20));
            }
            out
        });
        Sampler { stop, thread }
    }

    pub(super) fn finish(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// CPU use (% of one core) between `from` and `to` from samples.
pub(super) fn cpu_pct(
    samples: &[Sample],
    from: Instant,
    to: Instant,
    tck: f64,
    pick: fn(&Sample) -> Option<u64>,
) -> Option<f64> {
    let first = samples.iter().find(|s| s.at >= from && pick(s).is_some())?;
    let last = samples
        .iter()
        .rev()
        .find(|s| s.at <= to && pick(s).is_some())?;
    let secs = last.at.checked_duration_since(first.at)?.as_secs_f64();
    if secs < 0.05 {
        return None;
    }
    let ticks = pick(last)?.checked_sub(pick(first)?)? as f64;
    Some(100.0 * ticks / tck / secs)
}
