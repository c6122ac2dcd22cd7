//! `RedisStore`: the connection, its options and the server checks, and how one script call
//! is made (its KEYS from the layout's table, its reply timed and its errors typed). The role
//! files (`produce.rs`, `lease.rs`, `operate.rs`, `catalog.rs`) implement the store's calls on
//! it, one script each.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use redis::Value;
use redis::aio::ConnectionManagerConfig;
use redis::cluster::{ClusterClientBuilder, ClusterConfig};
use redis::io::tcp::TcpSettings;

use super::checks::{self, ServerReport};
use super::conn::{Certs, Connector, SentinelTarget, SharedConnection, keepalive, node_client};
use super::layout::{KeyName, PartitionKeys};
use super::scripts::{LuaScript, Scripts, script_error};
use super::tls::TlsConfig;
use super::url::{self, Target};
use super::wake::WakeSource;
use crate::error::{Error, Result, from_redis};
use crate::format::{Formats, NEWEST_FORMAT};
use crate::job::{JobState, Queue};
use crate::names::JobKey;
use crate::store::lease::DeadLimits;

/// How dq connects to Redis and what it accepts of the server.
#[derive(Clone, Debug)]
pub struct RedisOptions {
    /// Prefix of every key (default `dq`). Separate namespaces never see each other's jobs.
    pub namespace: String,
    /// Longest wait for one reply before the call fails with a retryable error (default 5 s).
    ///
    /// A call that times out also replaces the connection it was sent on: the next calls go
    /// to a new connection, so a connection left half-open by a NAT timeout or a partition
    /// (open, but nothing arrives) costs one timeout, not every call from then on. The wake
    /// listener's own connection is replaced the same way. Connections also send TCP
    /// keepalive probes, so an idle dead one is noticed by the operating system.
    ///
    /// On a cluster it is also how long a call the cluster refuses without running it (a slot
    /// migrating, a master failing over: `TRYAGAIN`, `ASK`, `MOVED`, `CLUSTERDOWN`) is sent
    /// again, with a bounded back-off, before the retryable error reaches the caller.
    pub response_timeout: Duration,
    /// Longest wait to establish a connection (default 5 s).
    pub connection_timeout: Duration,
    /// Accept a server whose `maxmemory-policy` may evict keys (default `false`: refuse it,
    /// since eviction silently deletes jobs). `true` downgrades the check to a warning.
    pub allow_eviction: bool,
    /// Run the server checks on connect (default `true`).
    pub check_server: bool,
    /// Durable enqueue (default `None`: off): `Some((replicas, timeout))` makes every enqueue
    /// script call wait, in the same pipeline, for `WAIT replicas timeout` before it answers,
    /// and fail with [`Error::NotReplicated`] when fewer replicas confirmed the write. See
    /// [`ClientBuilder::durable_enqueue`](crate::connect::ClientBuilder::durable_enqueue).
    pub durable_enqueue: Option<(usize, Duration)>,
    /// TLS settings for a `rediss://` URL (default `None`: the built-in roots, no client
    /// certificate): a private CA, a client certificate. See [`TlsConfig`] and
    /// [`ClientBuilder::tls`](crate::connect::ClientBuilder::tls). Refused with a URL that is
    /// not `rediss://`.
    pub tls: Option<TlsConfig>,
    /// The newest record format this process reads and may write (default: the newest this
    /// dq knows, [`NEWEST_FORMAT`]). Lower only to act as an older dq in upgrade tests.
    #[doc(hidden)]
    pub format_level: u8,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            namespace: "dq".into(),
            response_timeout: Duration::from_secs(5),
            connection_timeout: Duration::from_secs(5),
            allow_eviction: false,
            check_server: true,
            durable_enqueue: None,
            tls: None,
            format_level: NEWEST_FORMAT,
        }
    }
}

/// The Redis implementation of [`Store`](crate::store::Store), on one node, a Redis Cluster or
/// a master watched by Sentinel.
///
/// Its Lua scripts run as Redis Functions: one library per dq build and record-format level,
/// `dq_<hash>` (functions `dq_<hash>_<script>`, see
/// [`layout::script_of_function`](super::layout::script_of_function)), loaded by the first
/// call that finds the server without it (after a restart without persistence, a `FUNCTION
/// FLUSH`, on a new cluster node). Its Redis user needs `FCALL` and `FUNCTION LOAD`
/// (`@scripting`). A library left by an earlier dq build costs the server a little memory and
/// nothing else; `FUNCTION DELETE dq_<hash>` removes it once no process of that build runs.
#[derive(Clone)]
pub struct RedisStore {
    /// Where wake-up listeners connect.
    pub(super) wake: WakeSource,
    pub(super) conn: SharedConnection,
    pub(super) options: Arc<RedisOptions>,
    keys: Arc<RwLock<HashMap<Queue, Arc<PartitionKeys>>>>,
    report: Arc<ServerReport>,
    /// Per partition, fetch calls whose reply arrived and that left a receipt: the next fetch
    /// of the partition deletes those receipts (no retry will look for them).
    received: Arc<Mutex<HashMap<Queue, Vec<u64>>>>,
    /// The record formats it reads and the one it writes now.
    pub(super) formats: Arc<Formats>,
}

/// The certificates of `tls` for connections to `url`: `None` without TLS settings. TLS
/// settings with a URL that is not `rediss…`, or without the `tls` feature, are refused (they
/// would be ignored), as is a CA or client certificate that does not parse.
fn certificates(url: &str, tls: Option<&TlsConfig>) -> Result<Certs> {
    let Some(tls) = tls else {
        return Ok(None);
    };
    if !url.starts_with("rediss") {
        return Err(Error::InvalidConfig(
            "TLS settings (a CA or client certificate) were given, but the URL is not \
             rediss://, rediss+cluster:// or rediss+sentinel://"
                .to_owned(),
        ));
    }
    #[cfg(feature = "tls")]
    {
        Ok(Some(Arc::new(tls.certificates()?)))
    }
    #[cfg(not(feature = "tls"))]
    {
        let _ = tls;
        Err(Error::InvalidConfig(
            "TLS settings were given, but dq was built without its `tls` feature".to_owned(),
        ))
    }
}

/// Most receipts one fetch deletes; more wait for the next fetch, or expire.
const MAX_RECEIPTS_DELETED: usize = 16;

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the connection info: it may hold credentials.
        f.debug_struct("RedisStore")
            .field("namespace", &self.options.namespace)
            .field("server", &self.report.version)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects to `url` and checks that the server can hold jobs safely.
    ///
    /// One node: `redis://[user:password@]host:port/db`, or `rediss://` with the `tls`
    /// feature. A Redis Cluster: `redis+cluster://[user:password@]host:port[,host:port…]`
    /// (seed nodes: any reachable one finds the rest; `rediss+cluster://` with `tls`); every
    /// master is checked. A master watched by Redis Sentinel:
    /// `redis+sentinel://[user:password@]host:port[,host:port…]/<master-name>[/db]` (the
    /// hosts are sentinels; `rediss+sentinel://` with `tls`): the store asks the sentinels
    /// for the master, and follows the master they name after a failover.
    ///
    /// With TLS (`rediss…`), [`RedisOptions::tls`] says which CA to trust (default: the
    /// built-in roots) and which client certificate to present; a certificate refused either
    /// way is [`Error::Tls`]. Through Sentinel, the master is reached over TLS and the
    /// sentinels over plain TCP.
    pub async fn connect(url: &str, options: RedisOptions) -> Result<Self> {
        crate::names::Topic::new(&options.namespace).map_err(|_| {
            Error::InvalidConfig(format!(
                "namespace {:?} must be 1-128 characters of [A-Za-z0-9._-]",
                options.namespace
            ))
        })?;
        let invalid = |e: redis::RedisError| {
            // The parse error may quote the URL; report only its kind.
            Error::InvalidConfig(format!("invalid Redis URL ({:?})", e.kind()))
        };
        let certs = certificates(url, options.tls.as_ref())?;
        let (wake, connector) = match url::parse(url)? {
            Target::Single(url) => {
                let client = node_client(&url, &certs).map_err(invalid)?;
                let config = ConnectionManagerConfig::new()
                    .set_response_timeout(Some(options.response_timeout))
                    .set_connection_timeout(Some(options.connection_timeout))
                    .set_number_of_retries(3)
                    .set_max_delay(Duration::from_secs(2));
                (
                    WakeSource::Single(client.clone()),
                    Connector::Single { client, config },
                )
            }
            Target::Cluster { seeds, nodes } => {
                let seeds = seeds
                    .iter()
                    .map(|s| redis::IntoConnectionInfo::into_connection_info(s.as_str()))
                    .collect::<redis::RedisResult<Vec<_>>>()
                    .map_err(invalid)?;
                // No retries inside redis-rs: it would resend calls that may have been
                // applied (conn.rs says why, and what dq resends instead).
                let builder = ClusterClientBuilder::new(seeds)
                    .retries(0)
                    .connection_timeout(options.connection_timeout)
                    .response_timeout(options.response_timeout)
                    .tcp_settings(TcpSettings::default().set_keepalive(keepalive()));
                #[cfg(feature = "tls")]
                let builder = match &certs {
                    Some(certs) => builder.certs((**certs).clone()),
                    None => builder,
                };
                let client = builder.build().map_err(invalid)?;
                let config = ClusterConfig::new()
                    .set_connection_timeout(options.connection_timeout)
                    .set_response_timeout(options.response_timeout);
                (
                    WakeSource::Cluster(nodes, certs),
                    Connector::Cluster { client, config },
                )
            }
            Target::Sentinel {
                sentinels,
                master,
                nodes,
            } => {
                let config = ConnectionManagerConfig::new()
                    .set_response_timeout(Some(options.response_timeout))
                    .set_connection_timeout(Some(options.connection_timeout))
                    .set_number_of_retries(3)
                    .set_max_delay(Duration::from_secs(2));
                // Sentinels asked, then the master's role checked: two connections at most.
                let lookup = 2 * options.connection_timeout + options.response_timeout;
                let target = SentinelTarget::new(&sentinels, master, nodes, certs, config, lookup)
                    .map_err(invalid)?;
                (WakeSource::Sentinel, Connector::Sentinel(Arc::new(target)))
            }
        };
        let conn = SharedConnection::connect(connector)
            .await
            .map_err(from_redis)?;
        let report = if options.check_server {
            checks::check(&mut conn.get().conn, options.allow_eviction).await?
        } else {
            ServerReport::default()
        };
        tracing::debug!(
            namespace = %options.namespace,
            server = %report.version,
            "connected to redis"
        );
        let format_level = options.format_level;
        Ok(RedisStore {
            wake,
            conn,
            options: Arc::new(options),
            keys: Arc::default(),
            report: Arc::new(report),
            received: Arc::default(),
            formats: Arc::new(Formats::shared(format_level)),
        })
    }

    /// What the server checks found on connect.
    pub fn server(&self) -> &ServerReport {
        &self.report
    }

    /// The key namespace.
    pub fn namespace(&self) -> &str {
        &self.options.namespace
    }

    /// Whether this store is on a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.conn.is_cluster()
    }

    /// Whether this store finds its master through Redis Sentinel.
    pub fn is_sentinel(&self) -> bool {
        self.conn.is_sentinel()
    }

    /// The keys of `queue`'s partition, built once per partition.
    /// The scripts for the record formats this process reads.
    pub(super) fn scripts(&self) -> &'static Scripts {
        Scripts::reading(self.formats.reads())
    }

    pub(super) fn keys(&self, queue: &Queue) -> Arc<PartitionKeys> {
        if let Some(k) = self
            .keys
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(queue)
        {
            return k.clone();
        }
        let k = Arc::new(PartitionKeys::new(&self.options.namespace, queue));
        self.keys
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(queue.clone(), k.clone());
        k
    }

    /// The receipts the next fetch of `queue` deletes (at most [`MAX_RECEIPTS_DELETED`]),
    /// leaving out `own`, the call about to be made (a caller may retry a call whose reply it
    /// did receive; its receipt must stay).
    pub(super) fn take_received(&self, queue: &Queue, own: u64) -> Vec<u64> {
        let mut received = self
            .received
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(ids) = received.get_mut(queue) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        ids.retain(|id| {
            if *id != own && out.len() < MAX_RECEIPTS_DELETED {
                out.push(*id);
                false
            } else {
                true
            }
        });
        out
    }

    /// Notes that the reply of fetch call `id` on `queue` arrived. A list that has grown
    /// past its bound (fetches that kept failing) drops its oldest: those receipts expire.
    pub(super) fn note_received(&self, queue: &Queue, id: u64) {
        let mut received = self
            .received
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let ids = received.entry(queue.clone()).or_default();
        if ids.len() >= 4 * MAX_RECEIPTS_DELETED {
            ids.remove(0);
        }
        ids.push(id);
    }

    /// Runs a namespace-wide `script` (topic registry, live workers, schedules) on its one
    /// `key` with `args`, timed in the script's store metrics. On a cluster the call goes to
    /// the master of that key's slot.
    pub(super) async fn run_on_key(
        &self,
        script: &LuaScript,
        key: &str,
        args: &[&[u8]],
    ) -> Result<Value> {
        let fcall = fcall_on_key(script, key, args);
        let sent = std::time::Instant::now();
        let patience = self.options.response_timeout;
        let result = self
            .conn
            .call(async |conn| {
                conn.fcall(&script.library.code, &fcall, key, patience)
                    .await
            })
            .await;
        script.metrics.record(sent.elapsed(), result.is_ok());
        result.map_err(|e| script_error(script, e))
    }

    /// [`Error::NotReplicated`] when a call made with `wait` = `Some((replicas, _))` was
    /// confirmed by fewer replicas (`acked`, as [`RedisStore::run_waiting`] returns it).
    pub(super) fn replicated(wait: Option<(usize, Duration)>, acked: Option<i64>) -> Result<()> {
        match (wait, acked) {
            (Some((wanted, _)), Some(acked)) if usize::try_from(acked).unwrap_or(0) < wanted => {
                Err(Error::NotReplicated {
                    acked: usize::try_from(acked).unwrap_or(0),
                    wanted,
                })
            }
            _ => Ok(()),
        }
    }

    /// [`RedisStore::run_on_key`], then `WAIT replicas timeout` on the same connection (on a
    /// cluster, to the master of `key`'s slot): the reply and how many replicas confirmed.
    pub(super) async fn run_on_key_waiting(
        &self,
        script: &LuaScript,
        key: &str,
        args: &[&[u8]],
        wait: (usize, Duration),
    ) -> Result<(Value, i64)> {
        let fcall = fcall_on_key(script, key, args);
        let sent = std::time::Instant::now();
        let patience = self.options.response_timeout;
        let result = self
            .conn
            .call(async |conn| {
                conn.fcall_and_wait(&script.library.code, &fcall, key, wait, patience)
                    .await
            })
            .await;
        script.metrics.record(sent.elapsed(), result.is_ok());
        result.map_err(|e| script_error(script, e))
    }

    /// Runs `script` on partition keys `k`: its KEYS come from the layout's table, in order;
    /// each key of the table that `k` does not give (a fetch receipt, enqueue's two receipt
    /// generations) is the next of `receipts`, and fetch takes the rest (the receipts it
    /// deletes) after its own keys.
    ///
    /// Every key is in the partition's hash tag, so on a cluster the call goes to the master
    /// of that tag's slot.
    pub(super) async fn run(
        &self,
        script: &LuaScript,
        k: &PartitionKeys,
        receipts: &[String],
        args: impl FnOnce(&mut redis::Cmd),
    ) -> Result<Value> {
        Ok(self.run_waiting(script, k, receipts, args, None).await?.0)
    }

    /// [`RedisStore::run`], and with `wait` = `Some((replicas, timeout))` a `WAIT` after the
    /// script in the same pipeline: returns the reply and how many replicas confirmed.
    pub(super) async fn run_waiting(
        &self,
        script: &LuaScript,
        k: &PartitionKeys,
        receipts: &[String],
        args: impl FnOnce(&mut redis::Cmd),
        wait: Option<(usize, Duration)>,
    ) -> Result<(Value, Option<i64>)> {
        debug_assert!(
            receipts.is_empty()
                || script.keys.contains(&KeyName::FetchReceipt)
                || script.keys.contains(&KeyName::Receipts),
            "script {} takes no receipts",
            script.name
        );
        let mut keys: Vec<&str> = Vec::with_capacity(script.keys.len() + receipts.len());
        let mut receipts = receipts.iter();
        for name in script.keys {
            match k.get(*name) {
                Some(key) => keys.push(key),
                None => keys.push(receipts.next().ok_or_else(|| {
                    Error::Protocol(format!("script {}: no receipt key given", script.name))
                })?),
            }
        }
        keys.extend(receipts.map(String::as_str));
        let first = *keys
            .first()
            .ok_or_else(|| Error::Protocol(format!("script {} has no keys", script.name)))?;
        let mut fcall = redis::cmd("FCALL");
        fcall.arg(&script.function).arg(keys.len()).arg(&keys[..]);
        args(&mut fcall);
        let library = &script.library.code;
        let sent = std::time::Instant::now();
        // What the cluster refuses without running it is resent for up to a reply's timeout.
        let patience = self.options.response_timeout;
        let result = match wait {
            None => self
                .conn
                .call(async |conn| conn.fcall(library, &fcall, first, patience).await)
                .await
                .map(|v| (v, None)),
            Some((replicas, timeout)) => self
                .conn
                .call(async |conn| {
                    conn.fcall_and_wait(library, &fcall, first, (replicas, timeout), patience)
                        .await
                })
                .await
                .map(|(v, acked)| (v, Some(acked))),
        };
        script.metrics.record(sent.elapsed(), result.is_ok());
        result.map_err(|e| script_error(script, e))
    }
}

/// `FCALL <script> 1 <key> <args…>`: a call of a script on its one key.
fn fcall_on_key(script: &LuaScript, key: &str, args: &[&[u8]]) -> redis::Cmd {
    let mut fcall = redis::cmd("FCALL");
    fcall.arg(&script.function).arg(1).arg(key);
    for a in args {
        fcall.arg(*a);
    }
    fcall
}

/// A duration in whole ms, saturating.
pub(super) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The dead-queue cap a script is given.
pub(super) fn per_partition_cap(limits: DeadLimits) -> u64 {
    // Callers pass the per-partition share already; at least one job is always kept.
    limits.cap.max(1)
}

/// A job key read back from a script reply.
pub(super) fn key_of(bytes: Vec<u8>) -> Result<JobKey> {
    let s = String::from_utf8(bytes).map_err(|_| Error::Protocol("job key is not text".into()))?;
    JobKey::stored(s).map_err(|e| Error::Protocol(format!("stored job key is invalid: {e}")))
}

/// A state read back from a script's one-letter code.
pub(super) fn state_of(code: u8) -> Result<JobState> {
    JobState::from_code(code)
        .ok_or_else(|| Error::Protocol(format!("unknown state {:?}", code as char)))
}
