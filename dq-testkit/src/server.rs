//! One private `redis-server` process, and the per-binary shared one.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use redis::FromRedisValue;
use tempfile::TempDir;

use crate::process::{pid_alive, send_signal, tail};
use crate::tls::ServerTls;
use crate::wait::wait_until;

/// How many fresh ports [`RedisServer::start_with`] tries before giving up (another process
/// may grab a port between our probe and the server's bind).
const START_ATTEMPTS: usize = 5;
/// How many times [`RedisServer::restart`] tries to bind the server's original port.
const RESTART_ATTEMPTS: usize = 5;
/// How long a server may take to answer `PING` and finish loading its data.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a killed or stopped server may take to disappear.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Connect, read and write timeout of the admin connections behind [`RedisServer::cmd`].
const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Connect timeout of a single readiness probe.
const PROBE_TIMEOUT: Duration = Duration::from_millis(250);
/// Lines of the server's logs quoted in panic messages.
const LOG_LINES: usize = 30;

/// File (in the server's directory) taking the server's own stdout and stderr, and the
/// wrapper's; `redis.log` holds the server's log proper.
const STDIO_LOG: &str = "stdio.log";
const REDIS_LOG: &str = "redis.log";

/// The wrapper that ties the server's life to ours; see the crate documentation.
///
/// `$1` is the server's directory, the remaining arguments are the server command line.
/// It prints the server's pid, then waits for a line or end-of-file on stdin (a pipe held by
/// the test process). Then it kills and reaps the server, and removes the directory unless the
/// line was `keep`.
pub(crate) const WRAPPER: &str = r#"
d=$1; shift
"$@" </dev/null >&2 &
p=$!
echo "$p"
IFS= read -r msg
kill -9 "$p" 2>/dev/null
wait "$p" 2>/dev/null
if [ "$msg" != keep ] && [ -n "$d" ]; then rm -rf -- "$d"; fi
"#;

/// How a test server persists its data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Persistence {
    /// No persistence at all (`--save "" --appendonly no`): a restart starts empty.
    #[default]
    None,
    /// Append-only file, fsynced once a second (`--appendonly yes --appendfsync everysec`).
    AofEverySec,
    /// Append-only file, fsynced before every reply (`--appendonly yes --appendfsync always`):
    /// every acknowledged write survives [`RedisServer::kill`] + [`RedisServer::restart`].
    AofAlways,
}

/// Configuration for [`RedisServer::start_with`]; `ServerOptions::default()` is a plain
/// in-memory server with Redis defaults.
///
/// Set the public fields directly, or chain the methods of the same names:
///
/// ```no_run
/// use dq_testkit::{Persistence, RedisServer, ServerOptions};
/// let server = RedisServer::start_with(
///     ServerOptions::default()
///         .persistence(Persistence::AofAlways)
///         .maxmemory(8 << 20)
///         .maxmemory_policy("noeviction"),
/// );
/// ```
///
/// Every server also runs with `--enable-debug-command local`, so tests may use `DEBUG`
/// (e.g. `DEBUG SLEEP`) from localhost.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerOptions {
    /// How the server persists data (default: not at all).
    pub persistence: Persistence,
    /// `--maxmemory` in bytes (default: Redis's, unlimited).
    pub maxmemory: Option<u64>,
    /// `--maxmemory-policy`, e.g. `allkeys-lru` (default: Redis's, `noeviction`).
    pub maxmemory_policy: Option<String>,
    /// `--hz`, the frequency of the server's background tasks (default: Redis's, 10).
    pub hz: Option<u32>,
    /// Further command-line arguments, appended last, e.g. `["--maxclients", "100"]`.
    pub extra_args: Vec<String>,
    /// TLS on a second port besides the plain one (default: none). See
    /// [`TestCerts`](crate::TestCerts) and [`RedisServer::tls_url`].
    pub tls: Option<ServerTls>,
}

impl ServerOptions {
    /// Sets [`ServerOptions::persistence`].
    pub fn persistence(mut self, persistence: Persistence) -> Self {
        self.persistence = persistence;
        self
    }

    /// Sets [`ServerOptions::maxmemory`], in bytes.
    pub fn maxmemory(mut self, bytes: u64) -> Self {
        self.maxmemory = Some(bytes);
        self
    }

    /// Sets [`ServerOptions::maxmemory_policy`].
    pub fn maxmemory_policy(mut self, policy: impl Into<String>) -> Self {
        self.maxmemory_policy = Some(policy.into());
        self
    }

    /// Sets [`ServerOptions::hz`].
    pub fn hz(mut self, hz: u32) -> Self {
        self.hz = Some(hz);
        self
    }

    /// Sets [`ServerOptions::tls`].
    pub fn tls(mut self, tls: ServerTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Appends one argument to [`ServerOptions::extra_args`].
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.extra_args.push(arg.into());
        self
    }

    /// The server command-line arguments these options stand for (after port, bind and paths).
    fn args(&self) -> Vec<String> {
        let mut args: Vec<String> = ["--save", "", "--enable-debug-command", "local"]
            .map(String::from)
            .into();
        let aof = |fsync: &str| ["--appendonly", "yes", "--appendfsync", fsync].map(String::from);
        match self.persistence {
            Persistence::None => args.extend(["--appendonly", "no"].map(String::from)),
            Persistence::AofEverySec => args.extend(aof("everysec")),
            Persistence::AofAlways => args.extend(aof("always")),
        }
        if let Some(bytes) = self.maxmemory {
            args.extend(["--maxmemory".to_owned(), bytes.to_string()]);
        }
        if let Some(policy) = &self.maxmemory_policy {
            args.extend(["--maxmemory-policy".to_owned(), policy.clone()]);
        }
        if let Some(hz) = self.hz {
            args.extend(["--hz".to_owned(), hz.to_string()]);
        }
        args.extend(self.extra_args.iter().cloned());
        args
    }
}

/// A private `redis-server` for tests: its own free port on 127.0.0.1, its own temporary
/// directory, and a process that dies with the test process (see the crate documentation).
///
/// All methods take `&self`, so one server can be shared between threads and tasks (e.g. in
/// an `Arc`). Methods panic with a descriptive message when something goes wrong: this is
/// test code. Dropping the server kills the process and removes the directory.
pub struct RedisServer {
    port: u16,
    /// The TLS port, with [`ServerOptions::tls`].
    tls_port: Option<u16>,
    options: ServerOptions,
    state: Mutex<State>,
    // Declared last so that it is removed after `Drop::drop` has killed the server.
    dir: TempDir,
}

struct State {
    /// The pid of the current server process, or of the last one if none is running.
    pid: u32,
    /// The current server process, unless it was killed or stopped.
    instance: Option<Instance>,
}

/// One `redis-server` process and the wrapper watching over it.
struct Instance {
    pid: u32,
    wrapper: Child,
    /// Our end of the wrapper's stdin; the wrapper kills the server when it closes.
    lifeline: Option<ChildStdin>,
}

impl RedisServer {
    /// Starts a server with [`ServerOptions::default()`]: no persistence, Redis defaults.
    ///
    /// Panics, quoting the server's log, if no server comes up.
    pub fn start() -> RedisServer {
        Self::start_with(ServerOptions::default())
    }

    /// Starts a server with the given options, on a free port and in a new temporary
    /// directory, and waits until it answers `PING` and has finished loading.
    ///
    /// A port can be taken by someone else between our probe and the server's bind, so this
    /// tries up to five ports. Panics, quoting the server's logs, if none works.
    pub fn start_with(options: ServerOptions) -> RedisServer {
        let dir = tempfile::Builder::new()
            .prefix("dq-testkit-redis-")
            .tempdir()
            .unwrap_or_else(|e| panic!("dq-testkit: cannot create a temporary directory: {e}"));
        let mut failures = Vec::new();
        let cluster = options.extra_args.iter().any(|a| a == "--cluster-enabled");
        for _ in 0..START_ATTEMPTS {
            let port = if cluster {
                free_cluster_port()
            } else {
                free_port()
            };
            let tls_port = options.tls.as_ref().map(|_| {
                if cluster {
                    free_cluster_port()
                } else {
                    free_port()
                }
            });
            match Instance::spawn(port, tls_port, dir.path(), &options) {
                Ok(instance) => {
                    return RedisServer {
                        port,
                        tls_port,
                        options,
                        state: Mutex::new(State {
                            pid: instance.pid,
                            instance: Some(instance),
                        }),
                        dir,
                    };
                }
                Err(e) => failures.push(format!("port {port}: {e}")),
            }
        }
        panic!(
            "dq-testkit: redis-server did not come up in {START_ATTEMPTS} attempts:\n{}\n{}",
            failures.join("\n"),
            logs(dir.path())
        );
    }

    /// The URL clients connect with, `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The URL of the server's TLS port, `rediss://127.0.0.1:TLS_PORT/`. Panics unless the
    /// server was started with [`ServerOptions::tls`].
    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.tls_port())
    }

    /// The TLS port (on 127.0.0.1; the same across restarts). Panics unless the server was
    /// started with [`ServerOptions::tls`].
    pub fn tls_port(&self) -> u16 {
        self.tls_port
            .unwrap_or_else(|| panic!("dq-testkit: this server was started without TLS"))
    }

    /// The TLS port, if the server has one.
    pub(crate) fn tls_port_if_any(&self) -> Option<u16> {
        self.tls_port
    }

    /// The TCP port the server listens on (on 127.0.0.1); it stays the same across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The pid of the `redis-server` process: the running one, or the last one after
    /// [`kill`](Self::kill) or [`stop`](Self::stop). It changes with every restart.
    pub fn pid(&self) -> u32 {
        self.state().pid
    }

    /// The server's directory: its working directory, AOF files, `redis.log`, and `stdio.log`
    /// (the process's stdout and stderr).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The options the server was started with (and restarts with).
    pub fn options(&self) -> &ServerOptions {
        &self.options
    }

    /// Whether the server process is alive. False after [`kill`](Self::kill) or
    /// [`stop`](Self::stop), and also if the process died on its own. A process stopped by
    /// `SIGSTOP` is alive.
    pub fn is_running(&self) -> bool {
        self.state()
            .instance
            .as_ref()
            .is_some_and(|instance| pid_alive(instance.pid))
    }

    /// Kills the server with `SIGKILL`, as a crash would, and waits until the process is gone.
    /// Data not yet persisted is lost. Does nothing if the server is not running.
    pub fn kill(&self) {
        if let Some(instance) = self.state().instance.take() {
            instance
                .kill()
                .unwrap_or_else(|e| panic!("dq-testkit: {e}"));
        }
    }

    /// Stops the server gracefully and waits until the process is gone: `SIGTERM` (Redis then
    /// flushes the AOF and exits; with [`Persistence::None`] it saves nothing), followed by
    /// `SIGCONT` in case it was frozen with `SIGSTOP`. If it is not gone within 10 seconds, it
    /// is killed. Does nothing if the server is not running.
    pub fn stop(&self) {
        let Some(instance) = self.state().instance.take() else {
            return;
        };
        // Errors mean the process is already gone, which is what we want anyway.
        let _ = send_signal(instance.pid, "TERM");
        let _ = send_signal(instance.pid, "CONT");
        wait_until(Instant::now() + STOP_TIMEOUT, || !pid_alive(instance.pid));
        instance
            .kill()
            .unwrap_or_else(|e| panic!("dq-testkit: {e}"));
    }

    /// Starts a new server process on the same port, in the same directory, with the same
    /// options, so persisted data (see [`Persistence`]) is loaded again. Waits until it answers
    /// `PING` and has finished loading (`loading:0`).
    ///
    /// If the server is still running, it is first killed as by [`kill`](Self::kill). Panics,
    /// quoting the server's logs, if the new process does not come up (for instance because
    /// another process took the port meanwhile).
    pub fn restart(&self) {
        let mut state = self.state();
        if let Some(instance) = state.instance.take() {
            instance
                .kill()
                .unwrap_or_else(|e| panic!("dq-testkit: {e}"));
        }
        let mut failures = Vec::new();
        for _ in 0..RESTART_ATTEMPTS {
            match Instance::spawn(self.port, self.tls_port, self.dir(), &self.options) {
                Ok(instance) => {
                    state.pid = instance.pid;
                    state.instance = Some(instance);
                    return;
                }
                Err(e) => failures.push(e),
            }
        }
        panic!(
            "dq-testkit: redis-server did not come back on port {} in {RESTART_ATTEMPTS} \
             attempts:\n{}\n{}",
            self.port,
            failures.join("\n"),
            logs(self.dir())
        );
    }

    /// Sends a signal to the server process: `"STOP"` freezes it (connections hang, nothing
    /// is answered), `"CONT"` resumes it; any name or number bash's `kill -s` takes works.
    /// Panics if the server is not running or the signal cannot be sent.
    pub fn signal(&self, sig: &str) {
        let state = self.state();
        let Some(instance) = &state.instance else {
            panic!("dq-testkit: cannot send SIG{sig}: the server is not running");
        };
        send_signal(instance.pid, sig).unwrap_or_else(|e| panic!("dq-testkit: {e}"));
    }

    /// Runs one command on a fresh synchronous connection and converts the reply, for quick
    /// administration in tests: `server.cmd::<String>(&["INFO", "memory"])`,
    /// `server.cmd::<()>(&["FLUSHALL"])`, `server.cmd::<i64>(&["DBSIZE"])`. Use
    /// `redis::Value` to take the reply as it is.
    ///
    /// Panics if the command cannot be sent, fails, or its reply does not convert; see
    /// [`try_cmd`](Self::try_cmd) for a version that returns the error.
    pub fn cmd<T: FromRedisValue>(&self, args: &[&str]) -> T {
        self.try_cmd(args)
            .unwrap_or_else(|e| panic!("dq-testkit: {args:?} failed: {e}"))
    }

    /// Like [`cmd`](Self::cmd), but returns errors (connection refused, timeout after
    /// 5 seconds, error replies) instead of panicking.
    pub fn try_cmd<T: FromRedisValue>(&self, args: &[&str]) -> redis::RedisResult<T> {
        let Some((name, rest)) = args.split_first() else {
            panic!("dq-testkit: cmd needs at least a command name");
        };
        let mut conn = self.admin_connection()?;
        redis::cmd(name).arg(rest).query(&mut conn)
    }

    /// Opens a synchronous connection with 5-second connect, read and write timeouts, for
    /// tests that send many admin commands. Panics if the server cannot be reached.
    pub fn connection(&self) -> redis::Connection {
        self.admin_connection()
            .unwrap_or_else(|e| panic!("dq-testkit: cannot connect to {}: {e}", self.url()))
    }

    fn admin_connection(&self) -> redis::RedisResult<redis::Connection> {
        let conn = redis::Client::open(self.url())?.get_connection_with_timeout(ADMIN_TIMEOUT)?;
        conn.set_read_timeout(Some(ADMIN_TIMEOUT))?;
        conn.set_write_timeout(Some(ADMIN_TIMEOUT))?;
        Ok(conn)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while the lock was held (say, a failed restart) leaves a consistent state.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let state = self
            .state
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(instance) = state.instance.take()
            && let Err(e) = instance.kill()
        {
            // Panicking in drop could abort the test binary; the wrapper still cleans up
            // when this process exits.
            eprintln!("dq-testkit: while dropping the server: {e}");
        }
    }
}

impl std::fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisServer")
            .field("url", &self.url())
            .field("pid", &self.pid())
            .field("dir", &self.dir())
            .finish_non_exhaustive()
    }
}

impl Instance {
    /// Starts a server on `port` in `dir`, and waits until it answers and has loaded its data.
    /// On failure everything started is torn down again.
    fn spawn(
        port: u16,
        tls_port: Option<u16>,
        dir: &Path,
        options: &ServerOptions,
    ) -> Result<Instance, String> {
        let stdio_log = File::create(dir.join(STDIO_LOG))
            .map_err(|e| format!("cannot create {STDIO_LOG}: {e}"))?;
        let mut args: Vec<std::ffi::OsString> = vec![
            "--port".into(),
            port.to_string().into(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--dir".into(),
            dir.into(),
            "--daemonize".into(),
            "no".into(),
            "--protected-mode".into(),
            "no".into(),
            "--logfile".into(),
            dir.join(REDIS_LOG).into(),
        ];
        if let (Some(tls), Some(tls_port)) = (&options.tls, tls_port) {
            args.extend(tls.args(tls_port));
        }
        args.extend(options.args().into_iter().map(Into::into));
        let (wrapper, lifeline, pid) =
            start_wrapped("dq-testkit-redis", dir, &args, stdio_log, START_TIMEOUT)?;

        let instance = Instance {
            pid,
            wrapper,
            lifeline,
        };
        match instance.await_ready(port) {
            Ok(()) => Ok(instance),
            Err(e) => match instance.kill() {
                Ok(()) => Err(e),
                Err(teardown) => Err(format!("{e}; then: {teardown}")),
            },
        }
    }

    /// Waits until the server on `port` answers `PING`, is this process (not some other
    /// server that got the port), and has finished loading its data.
    fn await_ready(&self, port: u16) -> Result<(), String> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .map_err(|e| format!("bad URL: {e}"))?;
        let deadline = Instant::now() + START_TIMEOUT;
        let mut last = String::from("not probed yet");
        let mut outcome = Err(String::new());
        wait_until(deadline, || {
            if !pid_alive(self.pid) {
                outcome = Err(format!("redis-server (pid {}) exited", self.pid));
                return true;
            }
            match probe(&client) {
                Ok(Some(server_pid)) if server_pid != self.pid => {
                    outcome = Err(format!(
                        "port {port} is served by another redis-server (pid {server_pid})"
                    ));
                    true
                }
                Ok(Some(_)) => {
                    outcome = Ok(());
                    true
                }
                Ok(None) => {
                    last = "still loading its data".to_owned();
                    false
                }
                Err(e) => {
                    last = e.to_string();
                    false
                }
            }
        });
        match outcome {
            Err(e) if e.is_empty() => Err(format!(
                "redis-server (pid {}) not ready after {START_TIMEOUT:?}; last probe: {last}",
                self.pid
            )),
            outcome => outcome,
        }
    }

    /// Kills the server if it still runs, waits until it is gone, and retires the wrapper,
    /// telling it to keep the directory.
    fn kill(mut self) -> Result<(), String> {
        let pid = self.pid;
        let deadline = Instant::now() + STOP_TIMEOUT;
        let mut problems = Vec::new();
        if pid_alive(pid)
            && let Err(e) = send_signal(pid, "KILL")
        {
            // The process may have exited between the check and the signal.
            if pid_alive(pid) {
                problems.push(e);
            }
        }
        if !wait_until(deadline, || !pid_alive(pid)) {
            problems.push(format!(
                "redis-server (pid {pid}) still alive after SIGKILL"
            ));
        }
        if let Some(mut lifeline) = self.lifeline.take() {
            // If the wrapper is already gone, the write fails; nothing left to tell it then.
            let _ = lifeline.write_all(b"keep\n");
        }
        let exited = wait_until(deadline, || !matches!(self.wrapper.try_wait(), Ok(None)));
        if !exited {
            let _ = self.wrapper.kill();
            problems.push(format!("the wrapper of pid {pid} did not exit; killed it"));
        }
        let _ = self.wrapper.wait();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // Only reached without `Instance::kill` on an unexpected path. Closing the pipe makes
        // the wrapper kill the server; the directory belongs to the `RedisServer`, so keep it.
        if let Some(mut lifeline) = self.lifeline.take() {
            let _ = lifeline.write_all(b"keep\n");
        }
        let _ = self.wrapper.try_wait();
    }
}

/// One readiness probe: `Ok(Some(pid))` once the server answers `PING` and has loaded its
/// data, `Ok(None)` while it is loading, `Err` if it cannot be reached yet.
fn probe(client: &redis::Client) -> redis::RedisResult<Option<u32>> {
    let mut conn = client.get_connection_with_timeout(PROBE_TIMEOUT)?;
    conn.set_read_timeout(Some(PROBE_TIMEOUT))?;
    conn.set_write_timeout(Some(PROBE_TIMEOUT))?;
    // A loading server answers PING, but most other commands with a LOADING error.
    let pong: String = redis::cmd("PING").query(&mut conn)?;
    if pong != "PONG" {
        return Ok(None);
    }
    let info: String = redis::cmd("INFO")
        .arg("server")
        .arg("persistence")
        .query(&mut conn)?;
    if info_field(&info, "loading") != Some("0") {
        return Ok(None);
    }
    Ok(info_field(&info, "process_id").and_then(|pid| pid.parse().ok()))
}

/// The value of `field` in an `INFO` reply (`field:value` lines).
fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

/// A port that was free a moment ago: bind port 0 on 127.0.0.1, note the port, release it.
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map_or_else(
            |e| panic!("dq-testkit: cannot find a free port: {e}"),
            |addr| addr.port(),
        )
}

/// Highest port a cluster node may use: its cluster bus listens 10000 above.
const MAX_CLUSTER_PORT: u16 = 65535 - 10000;

/// A free port for a cluster node: at most [`MAX_CLUSTER_PORT`], and whose bus port (10000
/// above) was free a moment ago too. Falls back to any free port after 1000 probes (the
/// server then fails to start, and the caller tries again).
fn free_cluster_port() -> u16 {
    for _ in 0..1000 {
        let port = free_port();
        if port <= MAX_CLUSTER_PORT && TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            return port;
        }
    }
    free_port()
}

/// The tails of the server's logs, for error messages.
fn logs(dir: &Path) -> String {
    format!(
        "--- {REDIS_LOG} (last {LOG_LINES} lines) ---\n{}\n--- {STDIO_LOG} ---\n{}",
        tail(&dir.join(REDIS_LOG), LOG_LINES),
        tail(&dir.join(STDIO_LOG), LOG_LINES),
    )
}

/// The server all tests of this binary share, started on first use with default options.
///
/// It is never dropped (it lives in a `static`); it dies, and its directory is removed, when
/// the test process exits. Keep tests apart with [`namespace`](crate::namespace), and do not
/// kill, stop, restart, signal or `FLUSHALL` it: start a private [`RedisServer`] for that.
pub fn shared() -> &'static RedisServer {
    static SHARED: OnceLock<RedisServer> = OnceLock::new();
    SHARED.get_or_init(RedisServer::start)
}

/// Starts `redis-server` (or `$DQ_TESTKIT_REDIS_SERVER`) with `args` under the [`WRAPPER`]
/// script in `dir` (`name` is the wrapper's `$0`; the server's stdout and stderr go to
/// `stdio`), and reads the pid the wrapper reports within `timeout`. Returns the wrapper, its
/// lifeline (the server dies when it is dropped) and the server's pid; on failure the wrapper
/// is killed.
pub(crate) fn start_wrapped(
    name: &str,
    dir: &Path,
    args: &[std::ffi::OsString],
    stdio: File,
    timeout: std::time::Duration,
) -> Result<(Child, Option<ChildStdin>, u32), String> {
    let binary: PathBuf = std::env::var_os("DQ_TESTKIT_REDIS_SERVER")
        .unwrap_or_else(|| "redis-server".into())
        .into();
    let mut wrapper = Command::new("bash")
        .args(["-c", WRAPPER, name])
        .arg(dir)
        .arg(&binary)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stdio)
        .spawn()
        .map_err(|e| format!("cannot run bash to start {}: {e}", binary.display()))?;
    let lifeline = wrapper.stdin.take();
    // Read the pid the wrapper prints, on a thread so the wait is bounded.
    let stdout = wrapper.stdout.take().expect("stdout is piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = tx.send(BufReader::new(stdout).read_line(&mut line).map(|_| line));
    });
    let pid = match rx.recv_timeout(timeout) {
        Ok(Ok(line)) => line.trim().parse::<u32>().ok(),
        _ => None,
    };
    let Some(pid) = pid else {
        let _ = wrapper.kill();
        let _ = wrapper.wait();
        return Err("the wrapper script did not report a pid".to_owned());
    };
    Ok((wrapper, lifeline, pid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_fields() {
        let info = "# Server\r\nredis_version:7.0.15\r\nprocess_id:42\r\n# Persistence\r\n\
                    loading:0\r\nloading_eta_seconds:1\r\n";
        assert_eq!(info_field(info, "process_id"), Some("42"));
        assert_eq!(info_field(info, "loading"), Some("0"));
        assert_eq!(info_field(info, "loading_eta"), None);
        assert_eq!(info_field(info, "missing"), None);
    }

    #[test]
    fn option_arguments() {
        let args = ServerOptions::default().args();
        assert!(args.windows(2).any(|w| w == ["--save", ""]));
        assert!(args.windows(2).any(|w| w == ["--appendonly", "no"]));
        assert!(
            !args
                .iter()
                .any(|a| a.starts_with("--maxmemory") || a == "--hz")
        );

        let args = ServerOptions::default()
            .persistence(Persistence::AofAlways)
            .maxmemory(1024)
            .maxmemory_policy("allkeys-lru")
            .hz(100)
            .arg("--x")
            .args();
        for pair in [
            ["--appendonly", "yes"],
            ["--appendfsync", "always"],
            ["--maxmemory", "1024"],
            ["--maxmemory-policy", "allkeys-lru"],
            ["--hz", "100"],
        ] {
            assert!(args.windows(2).any(|w| w == pair), "{pair:?} in {args:?}");
        }
        assert_eq!(args.last().map(String::as_str), Some("--x"));
    }
}
