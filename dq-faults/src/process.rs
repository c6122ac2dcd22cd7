//! Starting, signalling and killing `fault-worker` processes from a test.
//!
//! Every process is started with its stdin a pipe held by the test and `--exit-on-stdin-eof`,
//! so it exits when the test process dies, however it dies; [`WorkerProcess`]'s `Drop` kills
//! it too. Its stdout (where it prints `ready`) is read by a thread; its stderr (the tracing
//! log) goes to a file next to its ledger.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::ledger::now_ms;

/// How to run one `fault-worker` (each field is one command-line option of the binary).
#[derive(Clone, Debug)]
pub struct WorkerSpec {
    /// `--redis-url`.
    pub redis_url: String,
    /// `--namespace`.
    pub namespace: String,
    /// `--topics`.
    pub topics: Vec<String>,
    /// `--concurrency` (every topic).
    pub concurrency: usize,
    /// `--lease-ms`.
    pub lease: Duration,
    /// `--sleep-ms`: overrides every payload's own sleep when set.
    pub sleep: Option<Duration>,
    /// `--abort-on`: payload ids whose handler aborts the process.
    pub abort_on: Vec<u64>,
    /// `--response-timeout-ms` of the worker's Redis client.
    pub response_timeout: Option<Duration>,
    /// `--shutdown-timeout-ms`.
    pub shutdown_timeout: Option<Duration>,
    /// `--idle-wait-ms`.
    pub idle_wait: Option<Duration>,
    /// `--connect-timeout-ms`: how long the binary keeps retrying its first connection.
    pub connect_timeout: Option<Duration>,
    /// `--heartbeat-ms`: the worker's heartbeat period.
    pub heartbeat: Option<Duration>,
    /// `--partitions`: partitions recorded for a topic with no record yet (a recorded count
    /// is adopted).
    pub partitions: Option<u16>,
    /// `--configured-partitions`: partitions configured for each of its topics (must match
    /// the record).
    pub configured_partitions: Option<u16>,
    /// `--durable-replicas` and `--durable-timeout-ms`: the worker's client waits for this
    /// many replicas, this long, after each enqueue and each batch apply
    /// (`ClientBuilder::durable_enqueue`).
    pub durable: Option<(usize, Duration)>,
    /// The binary's log filter (`FW_LOG`, tracing's `EnvFilter` syntax).
    pub log: String,
    /// Run the worker under `nice -n N` (lower priority), so that on a small machine Redis
    /// keeps its core when both are busy (for measurements of Redis itself).
    pub nice: Option<i32>,
}

impl WorkerSpec {
    /// A worker of topic `fault.work` with concurrency 8 and a 1 s lease.
    pub fn new(redis_url: impl Into<String>, namespace: impl Into<String>) -> WorkerSpec {
        WorkerSpec {
            redis_url: redis_url.into(),
            namespace: namespace.into(),
            topics: vec![crate::WORK_TOPIC.to_string()],
            concurrency: 8,
            lease: Duration::from_secs(1),
            sleep: None,
            abort_on: Vec::new(),
            response_timeout: None,
            shutdown_timeout: None,
            idle_wait: None,
            connect_timeout: None,
            heartbeat: None,
            partitions: None,
            configured_partitions: None,
            durable: None,
            log: "warn".into(),
            nice: None,
        }
    }

    fn args(&self, ledger: &Path) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "--redis-url".into(),
            self.redis_url.clone(),
            "--namespace".into(),
            self.namespace.clone(),
            "--topics".into(),
            self.topics.join(","),
            "--concurrency".into(),
            self.concurrency.to_string(),
            "--lease-ms".into(),
            self.lease.as_millis().to_string(),
            "--ledger".into(),
            ledger.display().to_string(),
            "--exit-on-stdin-eof".into(),
        ];
        let mut opt = |name: &str, v: Option<Duration>| {
            if let Some(v) = v {
                a.push(name.into());
                a.push(v.as_millis().to_string());
            }
        };
        opt("--sleep-ms", self.sleep);
        opt("--response-timeout-ms", self.response_timeout);
        opt("--shutdown-timeout-ms", self.shutdown_timeout);
        opt("--idle-wait-ms", self.idle_wait);
        opt("--connect-timeout-ms", self.connect_timeout);
        opt("--heartbeat-ms", self.heartbeat);
        if let Some(p) = self.partitions {
            a.push("--partitions".into());
            a.push(p.to_string());
        }
        if let Some(p) = self.configured_partitions {
            a.push("--configured-partitions".into());
            a.push(p.to_string());
        }
        if let Some((replicas, timeout)) = self.durable {
            a.push("--durable-replicas".into());
            a.push(replicas.to_string());
            a.push("--durable-timeout-ms".into());
            a.push(timeout.as_millis().to_string());
        }
        if !self.abort_on.is_empty() {
            a.push("--abort-on".into());
            a.push(
                self.abort_on
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            );
        }
        a
    }
}

/// One running (or exited) `fault-worker` process.
pub struct WorkerProcess {
    child: Child,
    /// Held open: the worker exits when it reads end-of-file here.
    lifeline: Option<ChildStdin>,
    stdout: mpsc::Receiver<String>,
    name: String,
    ledger: PathBuf,
    log: PathBuf,
    exit: Option<ExitStatus>,
}

impl std::fmt::Debug for WorkerProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerProcess")
            .field("name", &self.name)
            .field("pid", &self.pid())
            .finish_non_exhaustive()
    }
}

impl WorkerProcess {
    /// Starts `binary` (the test's `env!("CARGO_BIN_EXE_fault-worker")`) as `spec` says, with
    /// its ledger `dir/<name>.ledger` and log `dir/<name>.log`. Does not wait for `ready`.
    pub fn spawn(binary: &Path, spec: &WorkerSpec, dir: &Path, name: &str) -> WorkerProcess {
        let ledger = dir.join(format!("{name}.ledger"));
        let log = dir.join(format!("{name}.log"));
        let log_file = std::fs::File::create(&log)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", log.display()));
        let mut command = match spec.nice {
            Some(n) => {
                let mut c = Command::new("nice");
                c.arg("-n").arg(n.to_string()).arg(binary);
                c
            }
            None => Command::new(binary),
        };
        let mut child = command
            .args(spec.args(&ledger))
            .env("FW_LOG", &spec.log)
            .env("NO_COLOR", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let lifeline = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        WorkerProcess {
            child,
            lifeline,
            stdout: rx,
            name: name.to_string(),
            ledger,
            log,
            exit: None,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The name given at spawn (ledger and log file stem).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The ledger file.
    pub fn ledger(&self) -> &Path {
        &self.ledger
    }

    /// Waits until the worker prints `ready`; panics with its log if it does not within
    /// `timeout` or exits first.
    pub fn wait_ready(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self
                .stdout
                .recv_timeout(left.min(Duration::from_millis(100)))
            {
                Ok(line) if line.trim() == "ready" => return,
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.wait_exit(Duration::from_secs(5));
                    panic!(
                        "worker {} exited before ready ({status:?}); log:\n{}",
                        self.name,
                        self.log_tail(40)
                    );
                }
            }
            if Instant::now() >= deadline {
                panic!(
                    "worker {} not ready after {timeout:?}; log:\n{}",
                    self.name,
                    self.log_tail(40)
                );
            }
        }
    }

    /// Whether it has printed `ready` by now (non-blocking; consumes stdout lines).
    pub fn poll_ready(&mut self) -> bool {
        while let Ok(line) = self.stdout.try_recv() {
            if line.trim() == "ready" {
                return true;
            }
        }
        false
    }

    /// Sends `SIGKILL` and reaps the process. Returns the Unix ms just before the signal.
    pub fn kill(&mut self) -> u64 {
        let at = now_ms();
        let _ = self.child.kill();
        self.exit = self.child.wait().ok();
        at
    }

    /// Sends a signal by name (`STOP`, `CONT`, `TERM`, …) with bash's `kill` builtin.
    pub fn signal(&self, sig: &str) {
        assert!(
            !sig.is_empty() && sig.bytes().all(|b| b.is_ascii_alphanumeric()),
            "not a signal name: {sig:?}"
        );
        let ok = Command::new("bash")
            .args(["-c", r#"kill -s "$1" "$2""#, "dq-faults-kill", sig])
            .arg(self.pid().to_string())
            .stdin(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -s {sig} {} failed", self.pid());
    }

    /// The exit status if the process has exited (non-blocking).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().ok().flatten();
        }
        self.exit
    }

    /// Waits up to `timeout` for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.exited() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends `SIGTERM` and waits up to `timeout` for a graceful exit; panics if it does not
    /// exit in time.
    pub fn terminate(&mut self, timeout: Duration) -> ExitStatus {
        if let Some(s) = self.exited() {
            return s;
        }
        self.signal("TERM");
        self.wait_exit(timeout).unwrap_or_else(|| {
            panic!(
                "worker {} did not stop within {timeout:?} of SIGTERM; log:\n{}",
                self.name,
                self.log_tail(40)
            )
        })
    }

    /// The worker's whole log (its stderr).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `n` lines of the log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        if self.exited().is_none() {
            // SIGKILL works on a stopped (SIGSTOP) process too. Reap it: no zombie is left.
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        self.lifeline.take();
    }
}
