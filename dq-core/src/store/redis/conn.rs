//! The store's shared connection — to one node, or to a Redis Cluster — and its replacement
//! after a response timeout.
//!
//! redis-rs's `ConnectionManager` reconnects after an I/O error, but a response timeout leaves
//! it on the same socket. When a NAT or a partition leaves that socket half-open (open, but
//! nothing arrives any more), every later call times out in turn, forever. So a call that times
//! out on generation `g` of the connection replaces generation `g` by a fresh manager with the
//! same settings, once: calls of generation `g` that time out later find it already replaced.
//! Calls always use the current generation; calls in flight on the old one finish or time out
//! on it, and the old socket closes when the last of them lets go.
//!
//! The fresh manager connects on its first call (`new_lazy_with_config`), so a replacement
//! needs no task of its own, and the first call after a timeout already goes to a new socket.
//!
//! **On a cluster** the connection is redis-rs's `ClusterConnection` (one multiplexed
//! connection per node, routed by slot). It reconnects a node after an I/O error, but it too
//! keeps a node's socket after a response timeout, so the same replacement applies: a timeout
//! replaces the whole cluster connection (lazily: `get_pending_async_connection_with_config`).
//! It is built with **no retries of its own** (`retries(0)`): redis-rs would resend a command
//! after a timeout or a dropped connection, when it may already have been applied, and a
//! script call is not safe to repeat blindly (a second `enqueue` would report `Exists` for the
//! caller's own new job, a second `Shift` would shift twice, a second `fetch` would orphan the
//! first one's leases). dq's own retries mark a retry as one (ARCHITECTURE.md §6.1, §6.2). What
//! the server refused without running it — `MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`,
//! `MASTERDOWN`, `LOADING`, `READONLY` — is safe to resend, and [`Conn::fcall`] does so with a
//! bounded back-off for up to the response timeout (a `MOVED` also makes redis-rs refresh its
//! slot map): a slot migrating (`TRYAGAIN` while its keys are split between two nodes, `ASK`
//! once they have all moved, then `MOVED`) or a master failing over (`CLUSTERDOWN`, then
//! `MOVED`) within that time costs the call a wait. `ASK` is not followed to the importing
//! node: a dq script declares keys that do not exist yet (receipts, history), which the
//! importing node refuses with `TRYAGAIN` until every key has arrived, so the call waits at
//! the source until the slot is reassigned. Errors that outlast the patience reach the caller
//! as retryable (they did nothing).
//!
//! **Through Redis Sentinel** the connection is a manager to the master the sentinels name.
//! When a call on it fails in a way a failover causes — the connection refused, dropped or
//! timed out (the master died), or `READONLY` (the old master came back as a replica) — the
//! sentinels are asked again ([`SharedConnection::follow_master`]); if they name a master
//! that answers as one, a fresh manager to it replaces the old one, as after a timeout. The
//! call itself is sent again only if the server surely did not run it: refused (`READONLY`,
//! `MASTERDOWN`, `LOADING`, …) or the connection refused before anything was sent; a call
//! whose connection dropped or timed out may have been applied and goes back to the caller
//! as retryable, as on one node.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::io::tcp::socket2::TcpKeepalive;
use redis::sentinel::{Sentinel, SentinelNodeConnectionInfo};
use redis::{Cmd, ConnectionAddr, ErrorKind, RedisFuture, RedisResult, ServerErrorKind, Value};

use super::url::NodeUrl;

/// Most tries after the first of a script call the cluster refused without running it (the
/// pauses between them are bounded by the caller's patience first).
const REFUSED_TRIES: usize = 200;
/// Longest pause between two of those tries.
const REFUSED_BACKOFF_CAP: Duration = Duration::from_millis(250);
/// How many times a call through Sentinel that surely did not run is sent in all, on the
/// master the sentinels name after the failure.
const SENTINEL_TRIES: u32 = 8;

/// A connection to one Redis node or to a cluster. Cheap to clone; commands sent through
/// [`ConnectionLike`] are routed by their first key on a cluster.
#[derive(Clone)]
pub(crate) enum Conn {
    /// One node, through a reconnecting manager.
    Single(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// Whether the server refused `e` without running the command, so that sending it again
/// cannot apply it twice: redirections and a cluster (or a node) not ready to serve.
pub(crate) fn refused_by_cluster(e: &redis::RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Server(
            ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::BusyLoading
                | ServerErrorKind::ReadOnly
        )
    )
}

/// Whether the server answered that it lacks the function called (`ERR Function not found`,
/// also inside a pipeline's error): after a restart without persistence, a `FUNCTION FLUSH`,
/// or on a cluster node that never loaded the library. The call did not run.
pub(crate) fn function_missing(e: &redis::RedisError) -> bool {
    e.code() == Some("ERR") && e.to_string().contains("Function not found")
}

/// Whether a `FUNCTION LOAD` failed only because the library is there already (loaded by a
/// concurrent call, or another process of the same build): the load's purpose is met.
pub(crate) fn already_loaded(e: &redis::RedisError) -> bool {
    e.code() == Some("ERR") && e.to_string().contains("already exists")
}

/// `FUNCTION LOAD` of a library's `code`.
fn load_command(code: &str) -> Cmd {
    let mut load = redis::cmd("FUNCTION");
    load.arg("LOAD").arg(code);
    load
}

/// The outcome of a `FUNCTION LOAD`: a library already there counts as loaded.
fn loaded(result: RedisResult<Value>) -> RedisResult<()> {
    match result {
        Err(e) if !already_loaded(&e) => Err(e),
        _ => Ok(()),
    }
}

impl Conn {
    /// Runs a script call: `fcall` is `FCALL <function> <numkeys> <keys…> <args…>` of a
    /// function of the library whose text is `library`, and `key` its first key. When the
    /// server lacks the function ([`function_missing`]) the library is loaded on the node that
    /// answered — on a cluster, the master of `key`'s slot — and the call sent again. On a
    /// cluster, a call refused without being run ([`refused_by_cluster`]) is sent again with a
    /// bounded exponential back-off ([`refused_backoff`]) for up to `patience` of pauses in
    /// all: a slot that migrates or fails over within that time costs the caller a wait, not
    /// an error.
    pub async fn fcall(
        &mut self,
        library: &str,
        fcall: &Cmd,
        key: &str,
        patience: Duration,
    ) -> RedisResult<Value> {
        match self {
            Conn::Single(c) => match fcall.query_async(c).await {
                Err(e) if function_missing(&e) => {
                    loaded(load_command(library).query_async(c).await)?;
                    fcall.query_async(c).await
                }
                other => other,
            },
            Conn::Cluster(c) => {
                // Each try on its own handle of the same connection (a clone shares it).
                (|| fcall_on_cluster(c.clone(), library, fcall, key))
                    .retry(refused_backoff(patience))
                    .when(|e| refused_by_cluster(e) || function_missing(e))
                    .await
            }
        }
    }

    /// Like [`Conn::fcall`], then `WAIT replicas timeout_ms` in the same pipeline, on the
    /// same connection (on a cluster: to the master of `key`'s slot, where the script ran).
    /// Returns the script's reply and how many replicas confirmed its write.
    pub async fn fcall_and_wait(
        &mut self,
        library: &str,
        fcall: &Cmd,
        key: &str,
        (replicas, timeout): (usize, Duration),
        patience: Duration,
    ) -> RedisResult<(Value, i64)> {
        let mut pipe = redis::pipe();
        pipe.add_command(fcall.clone())
            .cmd("WAIT")
            .arg(replicas)
            .arg(
                u64::try_from(timeout.as_millis())
                    .unwrap_or(u64::MAX)
                    .max(1),
            );
        // A pipeline whose script did not run (its function missing, or refused) is sent
        // again: it runs the script once, and the failed pipeline's WAIT waited for nothing
        // of ours.
        match self {
            Conn::Single(c) => match pipe.query_async::<(Value, i64)>(c).await {
                Err(e) if function_missing(&e) => {
                    loaded(load_command(library).query_async(c).await)?;
                    pipe.query_async(c).await
                }
                other => other,
            },
            Conn::Cluster(c) => {
                (|| wait_on_cluster(c.clone(), library, &pipe, key))
                    .retry(refused_backoff(patience))
                    .when(|e| refused_by_cluster(e) || function_missing(e))
                    .await
            }
        }
    }

    /// On a cluster: every master's address (`host`, `port`), from `CLUSTER SLOTS` of any
    /// node. On one node: empty.
    pub async fn masters(&mut self) -> RedisResult<Vec<(String, u16)>> {
        let Conn::Cluster(c) = self else {
            return Ok(Vec::new());
        };
        let slots: Value = redis::cmd("CLUSTER").arg("SLOTS").query_async(c).await?;
        let mut out: Vec<(String, u16)> = slot_ranges(&slots)
            .into_iter()
            .map(|(_, _, addr)| addr)
            .collect();
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// On a cluster: the address of the master serving `key`'s slot now, per `CLUSTER SLOTS`
    /// of any node (`None` if no node claims it). On one node: `None`.
    pub async fn master_of(&mut self, key: &str) -> RedisResult<Option<(String, u16)>> {
        let Conn::Cluster(c) = self else {
            return Ok(None);
        };
        // redis-rs computes slots but does not expose the number; the server tells it.
        let slot: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query_async(c)
            .await?;
        let slots: Value = redis::cmd("CLUSTER").arg("SLOTS").query_async(c).await?;
        Ok(slot_ranges(&slots)
            .into_iter()
            .find(|(start, end, _)| (*start..=*end).contains(&slot))
            .map(|(_, _, addr)| addr))
    }

    /// Runs `cmd` on the cluster node at `host:port` (a master from [`Conn::masters`]); on one
    /// node, on that node.
    pub async fn on_node(&mut self, cmd: Cmd, host: &str, port: u16) -> RedisResult<Value> {
        match self {
            Conn::Single(c) => cmd.query_async(c).await,
            Conn::Cluster(c) => {
                c.route_command(
                    cmd,
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                        host: host.to_owned(),
                        port,
                    }),
                )
                .await
            }
        }
    }
}

/// `FUNCTION LOAD` of `library` on the master of `key`'s slot only: a node down elsewhere in
/// the cluster must not fail this partition's calls.
async fn load_on_master_of(c: &mut ClusterConnection, library: &str, key: &str) -> RedisResult<()> {
    let route = Route::with_key(key.as_bytes(), SlotAddr::Master);
    loaded(
        c.route_command(
            load_command(library),
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
        )
        .await,
    )
}

/// One try of a script call on a cluster: `FCALL`, and when the function is missing a
/// `FUNCTION LOAD` on the master of `key`'s slot and `FCALL` again.
async fn fcall_on_cluster(
    mut c: ClusterConnection,
    library: &str,
    fcall: &Cmd,
    key: &str,
) -> RedisResult<Value> {
    match fcall.query_async(&mut c).await {
        Err(e) if function_missing(&e) => {
            load_on_master_of(&mut c, library, key).await?;
            fcall.query_async(&mut c).await
        }
        other => other,
    }
}

/// One try of a script-and-`WAIT` pipeline on a cluster (routed by the script's key): when
/// the function is missing, a `FUNCTION LOAD` on the master of `key`'s slot and the pipeline
/// again.
async fn wait_on_cluster(
    mut c: ClusterConnection,
    library: &str,
    pipe: &redis::Pipeline,
    key: &str,
) -> RedisResult<(Value, i64)> {
    match pipe.query_async::<(Value, i64)>(&mut c).await {
        Err(e) if function_missing(&e) => {
            load_on_master_of(&mut c, library, key).await?;
            pipe.query_async(&mut c).await
        }
        other => other,
    }
}

/// The pause before try `tries + 1` of a call through Sentinel that surely did not run: from
/// 20 ms, doubling, at most [`REFUSED_BACKOFF_CAP`].
fn backoff(tries: u32) -> Duration {
    (Duration::from_millis(10) * 2u32.saturating_pow(tries.min(8))).min(REFUSED_BACKOFF_CAP)
}

/// How [`Conn::fcall`] spaces the tries of a call the cluster refused without running it:
/// from 10 ms, doubling, at most [`REFUSED_BACKOFF_CAP`] apart, with jitter, until the pauses
/// add up to `patience` (at most [`REFUSED_TRIES`] tries).
fn refused_backoff(patience: Duration) -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(10))
        .with_max_delay(REFUSED_BACKOFF_CAP)
        .with_max_times(REFUSED_TRIES)
        .with_total_delay(Some(patience))
        .with_jitter()
}

/// The slot ranges of a `CLUSTER SLOTS` reply: (first slot, last slot, master address).
/// Ranges whose master has no usable address are left out.
fn slot_ranges(slots: &Value) -> Vec<(i64, i64, (String, u16))> {
    let Value::Array(ranges) = slots else {
        return Vec::new();
    };
    ranges
        .iter()
        .filter_map(|range| {
            let Value::Array(items) = range else {
                return None;
            };
            let int = |v: Option<&Value>| match v {
                Some(Value::Int(i)) => Some(*i),
                _ => None,
            };
            let (start, end) = (int(items.first())?, int(items.get(1))?);
            let Value::Array(master) = items.get(2)? else {
                return None;
            };
            let host = match master.first()? {
                Value::BulkString(b) => String::from_utf8(b.clone()).ok()?,
                Value::SimpleString(s) => s.clone(),
                _ => return None,
            };
            let port = u16::try_from(int(master.get(1))?).ok()?;
            (!host.is_empty()).then_some((start, end, (host, port)))
        })
        .collect()
}

/// How to open a [`Conn`]: the same settings for the first connection and every replacement.
#[derive(Clone)]
pub(crate) enum Connector {
    /// One node.
    Single {
        /// The node.
        client: redis::Client,
        /// Timeouts and reconnection of the manager.
        config: ConnectionManagerConfig,
    },
    /// A cluster, from its seed nodes.
    Cluster {
        /// The seeds and settings (no retries of its own: see the module docs).
        client: ClusterClient,
        /// Timeouts.
        config: ClusterConfig,
    },
    /// The master the sentinels name.
    Sentinel(Arc<SentinelTarget>),
}

/// The sentinels as redis-rs asks them (it keeps a connection to each it has asked).
enum Sentinels {
    /// Without TLS certificates of dq's own: redis-rs's defaults check the master's role.
    Plain(Sentinel),
    /// With them: the client redis-rs builds with certificates, so that its check of the
    /// master's role (over TLS) trusts the same CA as dq's connections.
    #[cfg(feature = "tls")]
    WithCerts(redis::sentinel::SentinelClient),
}

/// How to find the master through Redis Sentinel, and how to connect to it.
pub(crate) struct SentinelTarget {
    /// The sentinels.
    sentinels: tokio::sync::Mutex<Sentinels>,
    /// The master's name.
    master: String,
    /// Credentials, TLS and database for the master, for the sentinel client's `ROLE` check.
    info: SentinelNodeConnectionInfo,
    /// The master's URL from its address.
    nodes: NodeUrl,
    /// TLS certificates for the master.
    certs: Certs,
    /// Timeouts and reconnection of the manager to the master.
    config: ConnectionManagerConfig,
    /// Longest lookup (sentinels asked, then the master's role checked).
    lookup_timeout: Duration,
}

impl SentinelTarget {
    /// A target for master `master` watched by `sentinels` (`redis://host:port/` URLs).
    pub fn new(
        sentinels: &[String],
        master: String,
        nodes: NodeUrl,
        certs: Certs,
        config: ConnectionManagerConfig,
        lookup_timeout: Duration,
    ) -> RedisResult<Self> {
        // The master's credentials, database and TLS, read by redis-rs from its URL form.
        let probe = redis::IntoConnectionInfo::into_connection_info(nodes.url("localhost", 1))?;
        let mut info = SentinelNodeConnectionInfo::default()
            .set_redis_connection_info(probe.redis_settings().clone());
        if let ConnectionAddr::TcpTls { insecure, .. } = probe.addr() {
            info = info.set_tls_mode(if *insecure {
                redis::TlsMode::Insecure
            } else {
                redis::TlsMode::Secure
            });
        }
        #[cfg(feature = "tls")]
        let asked = match &certs {
            Some(certs) => Sentinels::WithCerts(with_certs(sentinels, &master, &probe, certs)?),
            None => Sentinels::Plain(Sentinel::build(sentinels.to_vec())?),
        };
        #[cfg(not(feature = "tls"))]
        let asked = Sentinels::Plain(Sentinel::build(sentinels.to_vec())?);
        Ok(SentinelTarget {
            sentinels: tokio::sync::Mutex::new(asked),
            master,
            info,
            nodes,
            certs,
            config,
            lookup_timeout,
        })
    }

    /// Asks the sentinels for the master, checks that it answers as a master, and returns a
    /// client for it (with dq's TCP settings).
    async fn resolve(&self) -> RedisResult<redis::Client> {
        let lookup = async {
            match &mut *self.sentinels.lock().await {
                Sentinels::Plain(sentinels) => {
                    sentinels
                        .async_master_for(&self.master, Some(&self.info))
                        .await
                }
                #[cfg(feature = "tls")]
                Sentinels::WithCerts(client) => client.async_get_client().await,
            }
        };
        let found = tokio::time::timeout(self.lookup_timeout, lookup)
            .await
            .map_err(|_| {
                redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the sentinels did not name a master in time",
                ))
            })??;
        let (host, port) = match found.get_connection_info().addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                (host.clone(), *port)
            }
            _ => {
                return Err(redis::RedisError::from((
                    ErrorKind::InvalidClientConfig,
                    "the sentinels named a master that is not a TCP address",
                )));
            }
        };
        node_client(&self.nodes.url(&host, port), &self.certs)
    }
}

/// A sentinel client whose check of the master's role uses `certs` and the credentials, TLS
/// mode and database of `master_info` (the master's URL, read by redis-rs).
#[cfg(feature = "tls")]
fn with_certs(
    sentinels: &[String],
    master: &str,
    master_info: &redis::ConnectionInfo,
    certs: &redis::TlsCertificates,
) -> RedisResult<redis::sentinel::SentinelClient> {
    use redis::sentinel::{SentinelClientBuilder, SentinelServerType};
    let addrs = sentinels
        .iter()
        .map(|s| {
            redis::IntoConnectionInfo::into_connection_info(s.as_str()).map(|i| i.addr().clone())
        })
        .collect::<RedisResult<Vec<_>>>()?;
    let settings = master_info.redis_settings();
    let mut builder = SentinelClientBuilder::new(addrs, master, SentinelServerType::Master)?
        .set_client_to_redis_db(settings.db())
        .set_client_to_redis_protocol(settings.protocol())
        .set_client_to_redis_certificates(certs.clone())
        .set_client_to_redis_tcp_settings(
            redis::io::tcp::TcpSettings::default().set_keepalive(keepalive()),
        );
    if let ConnectionAddr::TcpTls { insecure, .. } = master_info.addr() {
        builder = builder.set_client_to_redis_tls_mode(if *insecure {
            redis::TlsMode::Insecure
        } else {
            redis::TlsMode::Secure
        });
    }
    if let Some(user) = settings.username() {
        builder = builder.set_client_to_redis_username(user);
    }
    if let Some(password) = settings.password() {
        builder = builder.set_client_to_redis_password(password);
    }
    builder.build()
}

impl Connector {
    /// Connects now; also returns the node's client, when there is one node.
    async fn connect(&self) -> RedisResult<(Conn, Option<redis::Client>)> {
        match self {
            Connector::Single { client, config } => Ok((
                Conn::Single(
                    ConnectionManager::new_with_config(client.clone(), config.clone()).await?,
                ),
                Some(client.clone()),
            )),
            Connector::Cluster { client, config } => Ok((
                Conn::Cluster(
                    client
                        .get_async_connection_with_config(config.clone())
                        .await?,
                ),
                None,
            )),
            Connector::Sentinel(target) => {
                let client = target.resolve().await?;
                let conn =
                    ConnectionManager::new_with_config(client.clone(), target.config.clone())
                        .await?;
                Ok((Conn::Single(conn), Some(client)))
            }
        }
    }

    /// A connection that connects on its first call (to the same node or cluster; a
    /// sentinel connection keeps its master: [`SharedConnection::follow_master`] changes it).
    fn connect_lazy(&self, node: Option<&redis::Client>) -> RedisResult<Conn> {
        match (self, node) {
            (Connector::Single { client, config }, _) => Ok(Conn::Single(
                ConnectionManager::new_lazy_with_config(client.clone(), config.clone())?,
            )),
            (Connector::Cluster { client, config }, _) => Ok(Conn::Cluster(
                client.get_pending_async_connection_with_config(config.clone()),
            )),
            (Connector::Sentinel(target), Some(client)) => Ok(Conn::Single(
                ConnectionManager::new_lazy_with_config(client.clone(), target.config.clone())?,
            )),
            (Connector::Sentinel(_), None) => Err(redis::RedisError::from((
                ErrorKind::InvalidClientConfig,
                "a sentinel connection without a master",
            ))),
        }
    }
}

/// Whether `e` is what a failover looks like from a client of the old master: the
/// connection refused, dropped or timed out, or the node refusing to act as a master.
fn failover_sign(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || refused_by_cluster(e)
}

/// Whether a call that failed with `e` surely did not run, so that it may be sent again as it
/// is: the server refused it, or no connection could be made to send it.
fn surely_not_run(e: &redis::RedisError) -> bool {
    refused_by_cluster(e) || e.is_connection_refusal()
}

/// A [`Conn`] that is replaced when a call on it times out. Cheap to clone.
#[derive(Clone)]
pub(crate) struct SharedConnection {
    inner: Arc<Inner>,
}

struct Inner {
    connector: Connector,
    current: RwLock<Generation>,
    /// Held while the sentinels are asked for the master, so a burst of failed calls asks once.
    following: tokio::sync::Mutex<()>,
}

#[derive(Clone)]
struct Generation {
    number: u64,
    conn: Conn,
    /// The node this generation talks to (one node, or the master the sentinels named).
    node: Option<redis::Client>,
}

/// The connection a call uses, and the generation it belongs to (for [`SharedConnection::observe`]).
pub(crate) struct Lease {
    generation: u64,
    /// The connection to send the call on.
    pub conn: Conn,
}

impl SharedConnection {
    /// Connects now (the first connection is not lazy: a wrong address fails `connect`).
    pub async fn connect(connector: Connector) -> RedisResult<Self> {
        let (conn, node) = connector.connect().await?;
        Ok(SharedConnection {
            inner: Arc::new(Inner {
                connector,
                current: RwLock::new(Generation {
                    number: 0,
                    conn,
                    node,
                }),
                following: tokio::sync::Mutex::new(()),
            }),
        })
    }

    /// Whether this connection finds its master through Redis Sentinel.
    pub fn is_sentinel(&self) -> bool {
        matches!(self.inner.connector, Connector::Sentinel(_))
    }

    /// On one node or through Sentinel: the node the current generation talks to, and that
    /// generation (for [`SharedConnection::after_failure`]).
    pub fn node(&self) -> Option<(u64, redis::Client)> {
        let g = self.read();
        g.node.map(|n| (g.number, n))
    }

    /// Whether this is a cluster connection.
    pub fn is_cluster(&self) -> bool {
        matches!(self.inner.connector, Connector::Cluster { .. })
    }

    /// The current connection.
    pub fn get(&self) -> Lease {
        let g = self.read();
        Lease {
            generation: g.number,
            conn: g.conn,
        }
    }

    /// Runs `call` on the current connection and replaces that connection if the call timed
    /// out. Through Sentinel, a failure that looks like a failover also asks the sentinels
    /// for the master, and a call that surely did not run is sent again (a few times, with a
    /// short back-off) on the connection to the master they name.
    pub async fn call<T, F>(&self, call: F) -> RedisResult<T>
    where
        F: AsyncFnOnce(&mut Conn) -> RedisResult<T> + Clone,
    {
        let mut tries = 0;
        loop {
            tries += 1;
            let mut lease = self.get();
            let result = call.clone()(&mut lease.conn).await;
            if let Err(e) = &result
                && self.is_sentinel()
            {
                self.after_failure(lease.generation, e).await;
                if surely_not_run(e) && tries < SENTINEL_TRIES {
                    tokio::time::sleep(backoff(tries)).await;
                    continue;
                }
                return result;
            }
            self.observe(lease.generation, &result);
            return result;
        }
    }

    /// After a call of `generation` failed with `e`: through Sentinel, follows the master if
    /// `e` looks like a failover; otherwise replaces the connection after a timeout.
    pub async fn after_failure(&self, generation: u64, e: &redis::RedisError) {
        if self.is_sentinel() {
            if failover_sign(e) {
                self.follow_master(generation).await;
            }
        } else if e.is_timeout() {
            self.replace(generation);
        }
    }

    /// Through Sentinel: asks the sentinels for the master and, if one answers as a master,
    /// replaces generation `generation` by a connection to it (unless another call already
    /// replaced it). While the sentinels name no usable master (a failover in progress), the
    /// old connection stays, and the next failed call asks again.
    pub async fn follow_master(&self, generation: u64) {
        let Connector::Sentinel(target) = &self.inner.connector else {
            return;
        };
        let _one_at_a_time = self.inner.following.lock().await;
        if self.read().number != generation {
            return; // followed already, after an earlier failure of the same generation
        }
        let client = match target.resolve().await {
            Ok(client) => client,
            Err(e) => {
                tracing::debug!(error = %e, "the sentinels name no usable master yet");
                return;
            }
        };
        let conn = match self.inner.connector.connect_lazy(Some(&client)) {
            Ok(conn) => conn,
            Err(e) => {
                tracing::error!(error = %e, "cannot connect to the master the sentinels named");
                return;
            }
        };
        let mut current = self
            .inner
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if current.number != generation {
            return;
        }
        let moved = current.node.as_ref().is_none_or(|old| {
            old.get_connection_info().addr() != client.get_connection_info().addr()
        });
        if moved {
            tracing::warn!(
                master = %target.master,
                "the sentinels name a new master; following it"
            );
        }
        *current = Generation {
            number: generation + 1,
            conn,
            node: Some(client),
        };
    }

    /// Replaces the connection of `generation` if `result` is a timeout and that generation is
    /// still current.
    pub fn observe<T>(&self, generation: u64, result: &RedisResult<T>) {
        if let Err(e) = result
            && e.is_timeout()
        {
            self.replace(generation);
        }
    }

    fn read(&self) -> Generation {
        self.inner
            .current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn replace(&self, generation: u64) {
        let mut current = self
            .inner
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if current.number != generation {
            return; // replaced already by an earlier timeout of the same generation
        }
        match self.inner.connector.connect_lazy(current.node.as_ref()) {
            Ok(conn) => {
                tracing::warn!(
                    generation,
                    "a Redis call timed out; replacing its connection"
                );
                *current = Generation {
                    number: generation + 1,
                    conn,
                    node: current.node.clone(),
                };
            }
            // Only a configuration the first connect accepted can get here; keep the old one.
            Err(e) => tracing::error!(error = %e, "cannot replace a timed-out Redis connection"),
        }
    }
}

/// The TLS certificates every connection of a store uses (a CA, a client certificate), from
/// [`TlsConfig`](super::TlsConfig); `None`: redis-rs's defaults for a `rediss://` URL (the
/// built-in roots), or no TLS.
#[cfg(feature = "tls")]
pub(crate) type Certs = Option<Arc<redis::TlsCertificates>>;
/// Without the `tls` feature there are no certificates to hold.
#[cfg(not(feature = "tls"))]
pub(crate) type Certs = Option<Arc<std::convert::Infallible>>;

/// A client for one node, with TCP keepalive, and `certs` for TLS.
pub(super) fn node_client(url: &str, certs: &Certs) -> redis::RedisResult<redis::Client> {
    let info = redis::IntoConnectionInfo::into_connection_info(url)?;
    let tcp = info.tcp_settings().clone().set_keepalive(keepalive());
    let info = info.set_tcp_settings(tcp);
    #[cfg(feature = "tls")]
    if let Some(certs) = certs {
        return redis::Client::build_with_tls(info, (**certs).clone());
    }
    #[cfg(not(feature = "tls"))]
    let _ = certs;
    redis::Client::open(info)
}

/// TCP keepalive for every connection: a peer that vanished without closing (a dead host, a
/// NAT that dropped its mapping) is found after about 30 s even when the connection is idle.
pub(super) fn keepalive() -> TcpKeepalive {
    TcpKeepalive::new()
        .with_time(Duration::from_secs(15))
        .with_interval(Duration::from_secs(5))
        .with_retries(3)
}

#[cfg(test)]
mod tests {
    use super::*;
    use backon::BackoffBuilder;
    use dq_testkit::FaultProxy;

    async fn ping(conn: &mut Conn) -> redis::RedisResult<String> {
        redis::cmd("PING").query_async(conn).await
    }

    #[test]
    fn slot_ranges_of_a_cluster_slots_reply() {
        let node = |host: &str, port| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let slots = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("127.0.0.1", 7001),
                node("127.0.0.1", 7004),
            ]),
            Value::Array(vec![Value::Int(5461), Value::Int(16383), node("::1", 7002)]),
            // A master with no usable address is left out.
            Value::Array(vec![Value::Int(1), Value::Int(2), node("", 7003)]),
        ]);
        assert_eq!(
            slot_ranges(&slots),
            [
                (0, 5460, ("127.0.0.1".to_owned(), 7001)),
                (5461, 16383, ("::1".to_owned(), 7002)),
            ]
        );
        assert!(slot_ranges(&Value::Nil).is_empty());
    }

    #[test]
    fn refused_calls_back_off_briefly() {
        // The pauses stay short (jitter adds at most as much again) and add up to the
        // patience at most, however many tries that takes.
        for patience in [
            Duration::ZERO,
            Duration::from_secs(1),
            Duration::from_secs(5),
        ] {
            let pauses: Vec<Duration> = refused_backoff(patience).build().collect();
            assert!(
                pauses.iter().all(|p| *p <= 2 * REFUSED_BACKOFF_CAP),
                "{pauses:?}"
            );
            let total: Duration = pauses.iter().sum();
            assert!(total <= patience, "{total:?} > {patience:?}");
            assert!(pauses.len() <= REFUSED_TRIES);
            // It waits out most of the patience: a migration of a few seconds is ridden out.
            assert!(total + 2 * REFUSED_BACKOFF_CAP >= patience, "{total:?}");
        }
        let moved = redis::RedisError::from((
            ErrorKind::Server(ServerErrorKind::Moved),
            "MOVED",
            "1 127.0.0.1:7000".to_owned(),
        ));
        assert!(refused_by_cluster(&moved));
        // What the cluster refused is retried by dq's callers, as a call that did nothing.
        let moved = crate::error::Error::Redis(moved);
        assert!(moved.is_retryable() && !moved.may_have_applied());
        let timeout = redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert!(
            !refused_by_cluster(&timeout),
            "a timeout may have been applied"
        );
    }

    #[test]
    fn what_a_sentinel_connection_follows_and_what_it_resends() {
        let server = |kind, code: &str| {
            redis::RedisError::from((ErrorKind::Server(kind), "err", code.to_owned()))
        };
        let readonly = server(ServerErrorKind::ReadOnly, "READONLY");
        assert!(failover_sign(&readonly) && surely_not_run(&readonly));
        let refused =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(failover_sign(&refused) && surely_not_run(&refused));
        // A lost reply may have been applied: follow the master, but never resend blindly.
        for kind in [
            std::io::ErrorKind::TimedOut,
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::UnexpectedEof,
        ] {
            let e = redis::RedisError::from(std::io::Error::from(kind));
            assert!(failover_sign(&e) && !surely_not_run(&e), "{kind:?}");
        }
        // An answer of the master itself is no sign of a failover.
        let wrong = redis::RedisError::from((ErrorKind::UnexpectedReturnType, "WRONGTYPE"));
        assert!(!failover_sign(&wrong) && !surely_not_run(&wrong));
    }

    /// A call on a frozen socket times out; the next call goes to a new socket and succeeds.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_timeout_replaces_the_connection() {
        let server = dq_testkit::shared();
        let proxy = FaultProxy::start(server.port());
        let client = redis::Client::open(proxy.url()).unwrap();
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(Duration::from_millis(300)))
            .set_connection_timeout(Some(Duration::from_secs(5)));
        let shared = SharedConnection::connect(Connector::Single { client, config })
            .await
            .unwrap();
        assert_eq!(shared.call(ping).await.unwrap(), "PONG");
        let first = shared.get().generation;
        let accepted = proxy.accepted_connections();

        proxy.freeze_open();
        let err = shared.call(ping).await.unwrap_err();
        assert!(err.is_timeout(), "{err:?}");
        assert_eq!(shared.get().generation, first + 1);
        // A second timeout of the replaced generation does not replace the new one.
        shared.observe(first, &Err::<(), _>(err));
        assert_eq!(shared.get().generation, first + 1);

        assert_eq!(shared.call(ping).await.unwrap(), "PONG");
        assert_eq!(proxy.accepted_connections(), accepted + 1);
    }
}
