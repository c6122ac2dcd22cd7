//! A private Redis Cluster for tests: 3 masters and 3 replicas, each a [`RedisServer`] of its own.
//!
//! Every node is a private `redis-server` (free port, own directory, killed by pid when the
//! cluster drops, and by its wrapper when the test process dies: see the crate documentation)
//! started with `cluster-enabled yes` and a small `cluster-node-timeout`, so a failover in a
//! fault test takes seconds. `redis-cli --cluster create … --cluster-replicas 1 --cluster-yes`
//! joins them; start-up then waits, with a deadline, until every node reports
//! `cluster_state:ok` with all 16384 slots assigned and ok, and knows every other node.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use redis::FromRedisValue;

use crate::server::{RedisServer, ServerOptions};
use crate::wait::wait_until;

/// Masters of a test cluster.
pub const CLUSTER_MASTERS: usize = 3;
/// Nodes of a test cluster: each master has one replica.
pub const CLUSTER_NODES: usize = 2 * CLUSTER_MASTERS;
/// Slots of a Redis Cluster.
const SLOTS: usize = 16384;
/// How long `redis-cli --cluster create` and the convergence after it may take.
const CREATE_TIMEOUT: Duration = Duration::from_secs(60);
/// Connect, read and write timeout of the admin connections to a node.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Configuration of a [`RedisCluster`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterOptions {
    /// `cluster-node-timeout` in ms (default 2000): how long a master may be unreachable
    /// before its replica is promoted.
    pub node_timeout_ms: u64,
    /// Options of every node (persistence, memory, further arguments).
    pub server: ServerOptions,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            node_timeout_ms: 2000,
            server: ServerOptions::default(),
        }
    }
}

/// A node's role, as `ROLE` reports it now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeRole {
    /// Serves slots.
    Master,
    /// Replicates a master.
    Replica,
    /// Not reachable (killed, stopped, or not answering within the admin timeout).
    Unreachable,
}

/// One node of a [`RedisCluster`], as seen now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    /// Index in [`RedisCluster::nodes`].
    pub index: usize,
    /// Port on 127.0.0.1 (stays the same across restarts).
    pub port: u16,
    /// Pid of the node's `redis-server` (the last one, if it is not running).
    pub pid: u32,
    /// Its role now.
    pub role: NodeRole,
}

/// A private 3-master, 3-replica Redis Cluster on 127.0.0.1. Dropping it kills every node.
///
/// Panics with the nodes' log tails when the cluster does not come up: this is test code.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    options: ClusterOptions,
}

impl RedisCluster {
    /// Starts a cluster with [`ClusterOptions::default()`].
    pub fn start() -> RedisCluster {
        Self::start_with(ClusterOptions::default())
    }

    /// Starts six nodes with `options`, creates the cluster with `redis-cli --cluster create`,
    /// and waits until every node reports it healthy.
    pub fn start_with(options: ClusterOptions) -> RedisCluster {
        let mut server = options.server.clone();
        if server.tls.is_some() {
            // The cluster bus and replication over TLS too; the nodes then announce their
            // TLS ports to TLS clients (and their plain ports to plain ones).
            server = server
                .arg("--tls-cluster")
                .arg("yes")
                .arg("--tls-replication")
                .arg("yes");
        }
        let server = server
            .arg("--cluster-enabled")
            .arg("yes")
            .arg("--cluster-config-file")
            .arg("nodes.conf")
            .arg("--cluster-node-timeout")
            .arg(options.node_timeout_ms.to_string());
        let nodes: Vec<RedisServer> = (0..CLUSTER_NODES)
            .map(|_| RedisServer::start_with(server.clone()))
            .collect();
        let cluster = RedisCluster { nodes, options };
        cluster.create();
        cluster.await_healthy();
        cluster
    }

    /// The seed URL dq connects with: `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,…` (every
    /// node, so a client still finds the cluster when some are down).
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// The seed URL of the nodes' TLS ports, `rediss+cluster://127.0.0.1:T1,…` (with
    /// [`ServerOptions::tls`] in [`ClusterOptions::server`]: the bus and replication are then
    /// TLS too). Panics for a cluster started without TLS.
    pub fn tls_url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.tls_port()))
            .collect();
        format!("rediss+cluster://{}", seeds.join(","))
    }

    /// Every node, masters and replicas, in start order. Use them to kill, stop, restart or
    /// signal a node (a restarted node rejoins with its `nodes.conf`).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The options the cluster was started with.
    pub fn options(&self) -> &ClusterOptions {
        &self.options
    }

    /// Every node's port, pid and current role (asked now, so it reflects failovers).
    pub fn node_infos(&self) -> Vec<NodeInfo> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(index, n)| NodeInfo {
                index,
                port: n.port(),
                pid: n.pid(),
                role: role_of(n),
            })
            .collect()
    }

    /// The nodes that are masters now.
    pub fn masters(&self) -> Vec<&RedisServer> {
        self.nodes
            .iter()
            .filter(|n| role_of(n) == NodeRole::Master)
            .collect()
    }

    /// The node that serves `slot` now, as the first reachable node's `CLUSTER SLOTS` says.
    pub fn master_of_slot(&self, slot: u16) -> Option<&RedisServer> {
        let port = self.nodes.iter().find_map(|n| {
            let slots: redis::Value = n.try_cmd(&["CLUSTER", "SLOTS"]).ok()?;
            slot_owner(&slots, slot)
        })?;
        self.nodes.iter().find(|n| n.port() == port)
    }

    /// Runs one command on a fresh cluster connection (routed by its key as a cluster client
    /// routes it) and converts the reply: `cluster.cmd::<String>(&["TYPE", key])`. Panics if it
    /// fails.
    pub fn cmd<T: FromRedisValue>(&self, args: &[&str]) -> T {
        let Some((name, rest)) = args.split_first() else {
            panic!("dq-testkit: cmd needs at least a command name");
        };
        let mut conn = self.connection();
        redis::cmd(name)
            .arg(rest)
            .query(&mut conn)
            .unwrap_or_else(|e| panic!("dq-testkit: {args:?} failed on the cluster: {e}"))
    }

    /// A synchronous cluster connection with 5-second timeouts. Panics if the cluster cannot be
    /// reached.
    pub fn connection(&self) -> redis::cluster::ClusterConnection {
        let seeds: Vec<String> = self.nodes.iter().map(RedisServer::url).collect();
        redis::cluster::ClusterClient::builder(seeds)
            .connection_timeout(ADMIN_TIMEOUT)
            .response_timeout(ADMIN_TIMEOUT)
            .build()
            .and_then(|c| c.get_connection())
            .unwrap_or_else(|e| panic!("dq-testkit: cannot connect to the cluster: {e}"))
    }

    /// Lists the keys matching `{ns}:*` on every master, sorted, with `SCAN` (never `KEYS`).
    /// Panics if a master cannot be scanned.
    pub fn keys_in_namespace(&self, ns: &str) -> Vec<String> {
        let mut keys: Vec<String> = self
            .masters()
            .into_iter()
            .flat_map(|m| crate::namespace::keys_in_namespace(m, ns))
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// `redis-cli --cluster create` over all nodes, one replica per master.
    fn create(&self) {
        let binary: PathBuf = std::env::var_os("DQ_TESTKIT_REDIS_CLI")
            .unwrap_or_else(|| "redis-cli".into())
            .into();
        let mut child = Command::new(&binary)
            .arg("--cluster")
            .arg("create")
            .args(self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())))
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "dq-testkit: cannot run {} (Debian: apt-get install redis-tools): {e}",
                    binary.display()
                )
            });
        // Drain its output on threads so a chatty redis-cli never blocks on a full pipe.
        let drain = |r: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut s = String::new();
                if let Some(mut r) = r {
                    let _ = r.read_to_string(&mut s);
                }
                s
            })
        };
        let out = drain(child.stdout.take().map(|s| Box::new(s) as _));
        let err = drain(child.stderr.take().map(|s| Box::new(s) as _));
        let mut status = None;
        let done = wait_until(Instant::now() + CREATE_TIMEOUT, || {
            status = child.try_wait().ok().flatten();
            status.is_some()
        });
        if !done {
            let _ = child.kill();
            let _ = child.wait();
        }
        let (out, err) = (
            out.join().unwrap_or_default(),
            err.join().unwrap_or_default(),
        );
        match status {
            Some(s) if s.success() => {}
            _ => panic!(
                "dq-testkit: redis-cli --cluster create failed ({status:?}, timeout \
                 {CREATE_TIMEOUT:?}):\n{out}\n{err}\n{}",
                self.describe()
            ),
        }
    }

    /// Waits until every node says the cluster is ok, serves all slots and knows all nodes,
    /// and every replica's link to its master is up.
    fn await_healthy(&self) {
        let mut last = String::from("not probed yet");
        let healthy = wait_until(Instant::now() + CREATE_TIMEOUT, || {
            for n in &self.nodes {
                match node_health(n) {
                    Ok(()) => {}
                    Err(e) => {
                        last = format!("node {}: {e}", n.port());
                        return false;
                    }
                }
            }
            true
        });
        assert!(
            healthy,
            "dq-testkit: cluster not healthy after {CREATE_TIMEOUT:?}; last: {last}\n{}",
            self.describe()
        );
    }

    /// Every node's port, pid, role and `CLUSTER NODES` view, for panic messages.
    fn describe(&self) -> String {
        self.nodes
            .iter()
            .map(|n| {
                let view: String = n
                    .try_cmd(&["CLUSTER", "NODES"])
                    .unwrap_or_else(|e| format!("(CLUSTER NODES failed: {e})"));
                format!(
                    "--- node 127.0.0.1:{} pid {} dir {}\n{view}",
                    n.port(),
                    n.pid(),
                    n.dir().display()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl std::fmt::Debug for RedisCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCluster")
            .field("url", &self.url())
            .field("nodes", &self.nodes)
            .finish_non_exhaustive()
    }
}

/// `Ok` once `node` reports the whole cluster healthy from where it stands.
fn node_health(node: &RedisServer) -> Result<(), String> {
    let info: String = node
        .try_cmd(&["CLUSTER", "INFO"])
        .map_err(|e| e.to_string())?;
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map_or("", str::trim)
            .to_owned()
    };
    let slots = SLOTS.to_string();
    let nodes = CLUSTER_NODES.to_string();
    if field("cluster_state") != "ok"
        || field("cluster_slots_assigned") != slots
        || field("cluster_slots_ok") != slots
        || field("cluster_known_nodes") != nodes
    {
        return Err(format!("CLUSTER INFO: {}", info.replace("\r\n", " ")));
    }
    let replication: String = node
        .try_cmd(&["INFO", "replication"])
        .map_err(|e| e.to_string())?;
    if replication.contains("role:slave") && !replication.contains("master_link_status:up") {
        return Err("replica's link to its master is not up yet".into());
    }
    Ok(())
}

/// The role of `node` now (`ROLE`'s first element).
fn role_of(node: &RedisServer) -> NodeRole {
    if !node.is_running() {
        return NodeRole::Unreachable;
    }
    let Ok(conn) =
        redis::Client::open(node.url()).and_then(|c| c.get_connection_with_timeout(ADMIN_TIMEOUT))
    else {
        return NodeRole::Unreachable;
    };
    let mut conn = conn;
    let _ = conn.set_read_timeout(Some(ADMIN_TIMEOUT));
    match redis::cmd("ROLE").query::<redis::Value>(&mut conn) {
        Ok(redis::Value::Array(items)) => match items.first() {
            Some(redis::Value::BulkString(b)) if b == b"master" => NodeRole::Master,
            Some(redis::Value::BulkString(_)) => NodeRole::Replica,
            _ => NodeRole::Unreachable,
        },
        _ => NodeRole::Unreachable,
    }
}

/// The port of the master serving `slot` in a `CLUSTER SLOTS` reply.
fn slot_owner(slots: &redis::Value, slot: u16) -> Option<u16> {
    let redis::Value::Array(ranges) = slots else {
        return None;
    };
    ranges.iter().find_map(|range| {
        let redis::Value::Array(items) = range else {
            return None;
        };
        let int = |v: Option<&redis::Value>| match v {
            Some(redis::Value::Int(i)) => Some(*i),
            _ => None,
        };
        let (start, end) = (int(items.first())?, int(items.get(1))?);
        if !(start..=end).contains(&i64::from(slot)) {
            return None;
        }
        let redis::Value::Array(master) = items.get(2)? else {
            return None;
        };
        u16::try_from(int(master.get(1))?).ok()
    })
}

/// The cluster all tests of this binary share, started on first use with default options.
///
/// Never dropped; its nodes die with the test process. Keep tests apart with
/// [`namespace`](crate::namespace); do not kill or reshard it: start a private
/// [`RedisCluster`] for that.
pub fn shared_cluster() -> &'static RedisCluster {
    static SHARED: OnceLock<RedisCluster> = OnceLock::new();
    SHARED.get_or_init(RedisCluster::start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value;

    #[test]
    fn finds_the_owner_of_a_slot() {
        let node = |port| {
            Value::Array(vec![
                Value::BulkString(b"127.0.0.1".to_vec()),
                Value::Int(port),
            ])
        };
        let slots = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node(7001),
                node(7004),
            ]),
            Value::Array(vec![Value::Int(5461), Value::Int(16383), node(7002)]),
        ]);
        assert_eq!(slot_owner(&slots, 0), Some(7001));
        assert_eq!(slot_owner(&slots, 5460), Some(7001));
        assert_eq!(slot_owner(&slots, 5461), Some(7002));
        assert_eq!(slot_owner(&slots, 16383), Some(7002));
        assert_eq!(slot_owner(&Value::Nil, 1), None);
    }
}
