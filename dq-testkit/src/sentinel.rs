//! A private Redis Sentinel set for tests: a master, its replicas, and three sentinels.
//!
//! The master and the replicas are [`RedisServer`]s (free ports, own directories, killed by pid
//! on drop and by their wrapper when the test process dies: see the crate documentation); each
//! replica starts with `--replicaof` the master. Each sentinel is `redis-server <conf>
//! --sentinel` (the `redis-sentinel` of Debian's package of that name is the same binary) in a
//! directory of its own, under the same kind of wrapper, with a small
//! `down-after-milliseconds` and `failover-timeout` so a failover in a test takes seconds.
//! Start-up waits, with a deadline, until every replica's link is up and every sentinel knows
//! the master, every replica and the other sentinels.

use std::fmt::Write as _;
use std::io::Write;
use std::process::{Child, ChildStdin};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::process::{pid_alive, send_signal, tail};
use crate::server::{RedisServer, ServerOptions, free_port, start_wrapped};
use crate::wait::wait_until;

/// The name the sentinels of a [`RedisSentinelSet`] know the master by.
pub const SENTINEL_MASTER_NAME: &str = "dqmaster";
/// Sentinels of a set (a quorum of 2 of them starts a failover).
const SENTINELS: usize = 3;
/// How long start-up may take (the sentinels discover replicas and each other in seconds).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Connect, read and write timeout of the admin connections to a sentinel.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);
/// How many fresh ports a sentinel is tried on.
const START_ATTEMPTS: usize = 5;

/// Configuration of a [`RedisSentinelSet`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentinelOptions {
    /// Replicas of the master (default 2).
    pub replicas: usize,
    /// `sentinel down-after-milliseconds` (default 1000): how long the master may not answer
    /// before a sentinel thinks it down.
    pub down_after_ms: u64,
    /// `sentinel failover-timeout` (default 3000), which also spaces out failover attempts.
    pub failover_timeout_ms: u64,
    /// Options of the master and the replicas.
    pub server: ServerOptions,
}

impl Default for SentinelOptions {
    fn default() -> Self {
        SentinelOptions {
            replicas: 2,
            down_after_ms: 1000,
            failover_timeout_ms: 3000,
            server: ServerOptions::default(),
        }
    }
}

/// A master, its replicas and three sentinels on 127.0.0.1. Dropping it kills every process.
///
/// Panics with the logs when the set does not come up: this is test code.
pub struct RedisSentinelSet {
    /// Declared first, so the sentinels die before the servers (no failover on drop).
    sentinels: Vec<SentinelProcess>,
    /// The first master, then the replicas (roles change with failovers).
    servers: Vec<RedisServer>,
    /// Whether the servers replicate, and the sentinels watch them, over TLS.
    tls: bool,
}

/// One `redis-server --sentinel` process under the wrapper.
struct SentinelProcess {
    port: u16,
    pid: u32,
    wrapper: Child,
    /// Our end of the wrapper's stdin; the wrapper kills the sentinel when it closes.
    lifeline: Option<ChildStdin>,
    // Declared last: removed after the process is gone.
    dir: TempDir,
}

impl RedisSentinelSet {
    /// Starts a set with [`SentinelOptions::default()`]: a master, 2 replicas, 3 sentinels.
    pub fn start() -> RedisSentinelSet {
        Self::start_with(SentinelOptions::default())
    }

    /// Starts the master, its replicas and three sentinels, and waits until every sentinel
    /// knows them all.
    ///
    /// With [`ServerOptions::tls`] in [`SentinelOptions::server`], the servers replicate over
    /// TLS (`tls-replication yes`, each replica announcing its TLS port) and the sentinels
    /// watch them over TLS, so the sentinels name TLS ports: connect with
    /// [`tls_url`](Self::tls_url). The sentinels themselves answer on plain ports, as dq asks
    /// them. The ports this set's methods return stay the servers' plain ports.
    pub fn start_with(options: SentinelOptions) -> RedisSentinelSet {
        let tls = options.server.tls.is_some();
        let server_options = if tls {
            options.server.clone().arg("--tls-replication").arg("yes")
        } else {
            options.server.clone()
        };
        let master = RedisServer::start_with(server_options.clone());
        let announced = |s: &RedisServer| s.tls_port_if_any().unwrap_or(s.port());
        let master_port = announced(&master);
        let replica_options = server_options
            .arg("--replicaof")
            .arg("127.0.0.1")
            .arg(master_port.to_string());
        let mut servers = vec![master];
        for _ in 0..options.replicas {
            servers.push(RedisServer::start_with(replica_options.clone()));
        }
        let sentinels = (0..SENTINELS)
            .map(|_| SentinelProcess::start(master_port, &options))
            .collect();
        let set = RedisSentinelSet {
            sentinels,
            servers,
            tls,
        };
        set.await_ready(options.replicas);
        set
    }

    /// The URL dq connects with:
    /// `redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/dqmaster`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!(
            "redis+sentinel://{}/{SENTINEL_MASTER_NAME}",
            hosts.join(",")
        )
    }

    /// The URL dq connects with to a set started with TLS:
    /// `rediss+sentinel://127.0.0.1:S1,…/dqmaster` (the sentinels asked over plain TCP, the
    /// master they name over TLS).
    pub fn tls_url(&self) -> String {
        assert!(
            self.tls,
            "dq-testkit: this sentinel set was started without TLS"
        );
        self.url()
            .replacen("redis+sentinel://", "rediss+sentinel://", 1)
    }

    /// The plain port of the server a sentinel names by `announced` (its TLS port, in a set
    /// started with TLS).
    fn plain_port(&self, announced: u16) -> u16 {
        if !self.tls {
            return announced;
        }
        self.servers
            .iter()
            .find(|s| s.tls_port_if_any() == Some(announced))
            .map_or(announced, RedisServer::port)
    }

    /// The sentinels' ports.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|s| s.port).collect()
    }

    /// The server that is master now, as the first sentinel that answers says (`None` while
    /// no sentinel names a running server).
    pub fn master(&self) -> Option<&RedisServer> {
        let port = self.master_port()?;
        self.servers
            .iter()
            .find(|s| s.port() == port && s.is_running())
    }

    /// The running servers that are not the master now.
    pub fn replicas(&self) -> Vec<&RedisServer> {
        let master = self.master_port();
        self.servers
            .iter()
            .filter(|s| Some(s.port()) != master && s.is_running())
            .collect()
    }

    /// Every server, masters and replicas, in start order (the first was the first master).
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    /// The master's port per the first sentinel that answers
    /// `SENTINEL get-master-addr-by-name`.
    pub fn master_port(&self) -> Option<u16> {
        self.sentinels
            .iter()
            .find_map(SentinelProcess::master_port)
            .map(|p| self.plain_port(p))
    }

    /// Kills the master with `SIGKILL` (its own process, by pid), as a crash would, and
    /// returns its port. Panics if no sentinel names a running master.
    pub fn kill_master(&self) -> u16 {
        let master = self
            .master()
            .unwrap_or_else(|| panic!("dq-testkit: no running master to kill"));
        master.kill();
        master.port()
    }

    /// Asks a sentinel for a failover now (`SENTINEL FAILOVER`): a replica is promoted and the
    /// old master, still running, is turned into its replica (it then answers writes with
    /// `READONLY`). Returns the old master's port; wait with
    /// [`wait_for_failover`](Self::wait_for_failover). Panics if no sentinel accepts.
    pub fn switch_over(&self) -> u16 {
        let old = self
            .master_port()
            .unwrap_or_else(|| panic!("dq-testkit: no sentinel names a master"));
        let accepted = self.sentinels.iter().any(|s| {
            s.admin().is_ok_and(|mut conn| {
                redis::cmd("SENTINEL")
                    .arg("FAILOVER")
                    .arg(SENTINEL_MASTER_NAME)
                    .query::<()>(&mut conn)
                    .is_ok()
            })
        });
        assert!(
            accepted,
            "dq-testkit: no sentinel accepted SENTINEL FAILOVER"
        );
        old
    }

    /// Waits until every sentinel names a master other than the one on `old_port`, and that
    /// server answers `ROLE` as a master; returns its port. Panics (with the sentinels' logs)
    /// after `timeout`.
    pub fn wait_for_failover(&self, old_port: u16, timeout: Duration) -> u16 {
        let mut new_port = None;
        let done = wait_until(Instant::now() + timeout, || {
            let ports: Vec<Option<u16>> = self
                .sentinels
                .iter()
                .map(|s| s.master_port().map(|p| self.plain_port(p)))
                .collect();
            let Some(Some(port)) = ports.first().copied() else {
                return false;
            };
            if port == old_port || ports.iter().any(|p| *p != Some(port)) {
                return false;
            }
            let promoted = self
                .servers
                .iter()
                .find(|s| s.port() == port)
                .and_then(|s| s.try_cmd::<redis::Value>(&["ROLE"]).ok());
            let is_master = matches!(
                promoted,
                Some(redis::Value::Array(items))
                    if matches!(items.first(), Some(redis::Value::BulkString(b)) if b == b"master")
            );
            if is_master {
                new_port = Some(port);
            }
            is_master
        });
        match new_port {
            Some(port) if done => port,
            _ => panic!(
                "dq-testkit: no failover away from port {old_port} within {timeout:?}\n{}",
                self.describe()
            ),
        }
    }

    /// Waits until every replica's link to the master is up and every sentinel knows the
    /// master, `replicas` replicas and the other sentinels.
    fn await_ready(&self, replicas: usize) {
        let mut last = String::from("not probed yet");
        let ready = wait_until(Instant::now() + START_TIMEOUT, || {
            for r in &self.servers[1..] {
                match r.try_cmd::<String>(&["INFO", "replication"]) {
                    Ok(info) if info.contains("master_link_status:up") => {}
                    Ok(_) => {
                        last = format!("replica {}: link not up", r.port());
                        return false;
                    }
                    Err(e) => {
                        last = format!("replica {}: {e}", r.port());
                        return false;
                    }
                }
            }
            for s in &self.sentinels {
                match s.master_state() {
                    Ok(fields) => {
                        let get = |k: &str| {
                            fields
                                .iter()
                                .find(|(name, _)| name == k)
                                .map_or("", |(_, v)| v.as_str())
                        };
                        if get("num-slaves") != replicas.to_string()
                            || get("num-other-sentinels") != (SENTINELS - 1).to_string()
                            || get("flags") != "master"
                        {
                            last = format!("sentinel {}: {fields:?}", s.port);
                            return false;
                        }
                    }
                    Err(e) => {
                        last = format!("sentinel {}: {e}", s.port);
                        return false;
                    }
                }
            }
            true
        });
        assert!(
            ready,
            "dq-testkit: sentinel set not ready after {START_TIMEOUT:?}; last: {last}\n{}",
            self.describe()
        );
    }

    /// The sentinels' views and log tails, for panic messages.
    fn describe(&self) -> String {
        let mut out = String::new();
        for s in &self.sentinels {
            let _ = writeln!(
                out,
                "--- sentinel 127.0.0.1:{} pid {} master {:?}\n{}",
                s.port,
                s.pid,
                s.master_port(),
                tail(&s.dir.path().join("sentinel.log"), 30)
            );
        }
        for r in &self.servers {
            let _ = writeln!(
                out,
                "--- server 127.0.0.1:{} pid {} running {}",
                r.port(),
                r.pid(),
                r.is_running()
            );
        }
        out
    }
}

impl std::fmt::Debug for RedisSentinelSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSentinelSet")
            .field("url", &self.url())
            .field("servers", &self.servers)
            .finish_non_exhaustive()
    }
}

impl SentinelProcess {
    /// Starts a sentinel monitoring the master on `master_port`; panics with its log if none
    /// comes up in a few tries.
    fn start(master_port: u16, options: &SentinelOptions) -> SentinelProcess {
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let dir = tempfile::Builder::new()
                .prefix("dq-testkit-sentinel-")
                .tempdir()
                .unwrap_or_else(|e| panic!("dq-testkit: cannot create a temporary directory: {e}"));
            let port = free_port();
            match Self::spawn(port, dir, master_port, options) {
                Ok(p) => return p,
                Err(e) => failures.push(format!("port {port}: {e}")),
            }
        }
        panic!(
            "dq-testkit: no sentinel came up in {START_ATTEMPTS} attempts:\n{}",
            failures.join("\n")
        );
    }

    fn spawn(
        port: u16,
        dir: TempDir,
        master_port: u16,
        options: &SentinelOptions,
    ) -> Result<SentinelProcess, String> {
        let conf = dir.path().join("sentinel.conf");
        let d = dir.path().display();
        let name = SENTINEL_MASTER_NAME;
        // With TLS, the sentinel talks TLS to the servers (its own clients stay on plain TCP).
        let tls = match &options.server.tls {
            Some(tls) => format!(
                "tls-replication yes\ntls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\n",
                tls.cert.display(),
                tls.key.display(),
                tls.ca.display()
            ),
            None => String::new(),
        };
        let text = format!(
            "{tls}port {port}\nbind 127.0.0.1\ndaemonize no\nprotected-mode no\ndir {d}\n\
             logfile {d}/sentinel.log\n\
             sentinel monitor {name} 127.0.0.1 {master_port} 2\n\
             sentinel down-after-milliseconds {name} {}\n\
             sentinel failover-timeout {name} {}\n\
             sentinel parallel-syncs {name} 1\n",
            options.down_after_ms, options.failover_timeout_ms
        );
        std::fs::write(&conf, text).map_err(|e| format!("cannot write sentinel.conf: {e}"))?;
        let stdio = std::fs::File::create(dir.path().join("stdio.log"))
            .map_err(|e| format!("cannot create stdio.log: {e}"))?;
        // The wrapper removes the directory only on an unexpected exit; the TempDir does it
        // otherwise.
        let (wrapper, lifeline, pid) = start_wrapped(
            "dq-testkit-sentinel",
            dir.path(),
            &[conf.into(), "--sentinel".into()],
            stdio,
            Duration::from_secs(10),
        )?;
        let mut process = SentinelProcess {
            port,
            pid,
            wrapper,
            lifeline,
            dir,
        };
        let up = wait_until(Instant::now() + Duration::from_secs(10), || {
            !pid_alive(pid) || process.master_port() == Some(master_port)
        });
        if up && pid_alive(pid) {
            Ok(process)
        } else {
            let log = tail(&process.dir.path().join("sentinel.log"), 20);
            process.kill();
            Err(format!("sentinel (pid {pid}) did not come up:\n{log}"))
        }
    }

    fn admin(&self) -> redis::RedisResult<redis::Connection> {
        let conn = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?
            .get_connection_with_timeout(ADMIN_TIMEOUT)?;
        conn.set_read_timeout(Some(ADMIN_TIMEOUT))?;
        conn.set_write_timeout(Some(ADMIN_TIMEOUT))?;
        Ok(conn)
    }

    /// `SENTINEL get-master-addr-by-name`'s port, if this sentinel answers one.
    fn master_port(&self) -> Option<u16> {
        let mut conn = self.admin().ok()?;
        let addr: Option<(String, String)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(SENTINEL_MASTER_NAME)
            .query(&mut conn)
            .ok()?;
        addr?.1.parse().ok()
    }

    /// `SENTINEL master <name>` as field/value pairs.
    fn master_state(&self) -> redis::RedisResult<Vec<(String, String)>> {
        let mut conn = self.admin()?;
        let flat: Vec<String> = redis::cmd("SENTINEL")
            .arg("master")
            .arg(SENTINEL_MASTER_NAME)
            .query(&mut conn)?;
        Ok(flat
            .chunks(2)
            .filter_map(|kv| Some((kv.first()?.clone(), kv.get(1)?.clone())))
            .collect())
    }

    /// Kills the sentinel by pid and retires its wrapper.
    fn kill(&mut self) {
        if pid_alive(self.pid) {
            let _ = send_signal(self.pid, "KILL");
        }
        wait_until(Instant::now() + Duration::from_secs(10), || {
            !pid_alive(self.pid)
        });
        if let Some(mut lifeline) = self.lifeline.take() {
            let _ = lifeline.write_all(b"keep\n");
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        if !wait_until(deadline, || !matches!(self.wrapper.try_wait(), Ok(None))) {
            let _ = self.wrapper.kill();
        }
        let _ = self.wrapper.wait();
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The Sentinel set all tests of this binary share, started on first use with default
/// options.
///
/// Never dropped; its processes die with the test process. Keep tests apart with
/// [`namespace`](crate::namespace); do not kill its master: start a private
/// [`RedisSentinelSet`] for that.
pub fn shared_sentinel() -> &'static RedisSentinelSet {
    static SHARED: OnceLock<RedisSentinelSet> = OnceLock::new();
    SHARED.get_or_init(RedisSentinelSet::start)
}
