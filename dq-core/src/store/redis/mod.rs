//! `RedisStore`: the [`Store`] on Redis, one Lua script per state move.
//!
//! Layout (ARCHITECTURE.md §4): per partition a `jobs` hash of records, `scheduled`/`retry`/
//! `active`/`dead` sorted sets, a `ready` list of hints, a `hist` hash of attempt histories, a
//! `stats` hash of counters and a `wake` list; namespace-wide, the topic registry
//! (`topics.rs`). Keys, the record header and each script's KEYS
//! come from [`layout`]; scripts from `scripts.rs` and `lua/`.
//!
//! One node or a Redis Cluster (`url.rs`): every script call touches the keys of one
//! partition, which share one hash tag, so on a cluster it goes to the master of that tag's
//! slot (`conn.rs` routes it, loads scripts per node and resends what the cluster refused
//! without running it). A fetcher's wake-up listener connects to the node serving its
//! partition and follows the slot when it moves.

mod checks;
mod conn;
pub mod layout;
#[cfg(test)]
mod lua_tests;
mod record;
mod schedules;
mod scripts;
mod topics;
mod url;
mod workers;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::ConnectionManagerConfig;
use redis::cluster::{ClusterClientBuilder, ClusterConfig};
use redis::io::tcp::TcpSettings;
use redis::io::tcp::socket2::TcpKeepalive;
use redis::{AsyncConnectionConfig, Value};

pub use checks::ServerReport;

use self::conn::{Connector, SentinelTarget, SharedConnection, refused_by_cluster};
use self::layout::{KeyName, PartitionKeys};
use self::record::{Record, decode_history};
use self::scripts::{LuaScript, Reply, SCRIPTS, as_int, codes, script_error, unexpected};
use self::url::{NodeUrl, Target};
use super::{FailedAttempt, Store, WakeListener};
use crate::control::{ControlChange, ControlState, Rate};
use crate::error::{Error, Result, from_redis};
use crate::inspect::{DeadAction, ListChunk, ListFrom, ListPos};
use crate::job::{
    AckOutcome, CancelOutcome, DeadLimits, Delivery, Due, EnqueueCall, EnqueueOutcome, Extended,
    FailAction, FailOutcome, FetchCall, FetchReply, FetchRequest, JobInfo, JobState, NewDue,
    NewJob, Queue, RescheduleOutcome, TopicStats, unix_ms,
};
use crate::names::{JobKey, Topic};
use crate::schedule::{ScheduleOutcome, ScheduleRecord};
use crate::store::check_act_len;
use crate::topic::TopicMeta;
use crate::workers::WorkerInfo;

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
        }
    }
}

/// The Redis implementation of [`Store`], on one node or a Redis Cluster.
#[derive(Clone)]
pub struct RedisStore {
    /// Where wake-up listeners connect.
    wake: WakeSource,
    conn: SharedConnection,
    options: Arc<RedisOptions>,
    keys: Arc<RwLock<HashMap<Queue, Arc<PartitionKeys>>>>,
    report: Arc<ServerReport>,
    /// Per partition, fetch calls whose reply arrived and that left a receipt: the next fetch
    /// of the partition deletes those receipts (no retry will look for them).
    received: Arc<Mutex<HashMap<Queue, Vec<u64>>>>,
}

/// Where a wake-up listener connects: the one node, or the cluster node serving its
/// partition (found through the store's cluster connection).
#[derive(Clone)]
enum WakeSource {
    Single(redis::Client),
    Cluster(NodeUrl),
    /// The master the store's sentinel connection talks to now.
    Sentinel,
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
        let (wake, connector) = match url::parse(url)? {
            Target::Single(url) => {
                let client = node_client(&url).map_err(invalid)?;
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
                let client = ClusterClientBuilder::new(seeds)
                    .retries(0)
                    .connection_timeout(options.connection_timeout)
                    .response_timeout(options.response_timeout)
                    .tcp_settings(TcpSettings::default().set_keepalive(keepalive()))
                    .build()
                    .map_err(invalid)?;
                let config = ClusterConfig::new()
                    .set_connection_timeout(options.connection_timeout)
                    .set_response_timeout(options.response_timeout);
                (
                    WakeSource::Cluster(nodes),
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
                let target = SentinelTarget::new(&sentinels, master, nodes, config, lookup)
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
        Ok(RedisStore {
            wake,
            conn,
            options: Arc::new(options),
            keys: Arc::default(),
            report: Arc::new(report),
            received: Arc::default(),
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

    fn keys(&self, queue: &Queue) -> Arc<PartitionKeys> {
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
    fn take_received(&self, queue: &Queue, own: u64) -> Vec<u64> {
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
    fn note_received(&self, queue: &Queue, id: u64) {
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
        let mut invocation = script.script.prepare_invoke();
        invocation.key(key);
        for a in args {
            invocation.arg(*a);
        }
        let sent = std::time::Instant::now();
        let result = self
            .conn
            .call(async |conn| invocation.invoke_async(conn).await)
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
    async fn run(
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
    async fn run_waiting(
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
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha
            .arg(script.script.get_hash())
            .arg(keys.len())
            .arg(&keys[..]);
        args(&mut evalsha);
        let sent = std::time::Instant::now();
        // What the cluster refuses without running it is resent for up to a reply's timeout.
        let patience = self.options.response_timeout;
        let result = match wait {
            None => self
                .conn
                .call(async |conn| {
                    conn.eval(&script.script, &script.source, &evalsha, first, patience)
                        .await
                })
                .await
                .map(|v| (v, None)),
            Some((replicas, timeout)) => self
                .conn
                .call(async |conn| {
                    conn.eval_and_wait(
                        &script.script,
                        &script.source,
                        &evalsha,
                        first,
                        (replicas, timeout),
                        patience,
                    )
                    .await
                })
                .await
                .map(|(v, acked)| (v, Some(acked))),
        };
        script.metrics.record(sent.elapsed(), result.is_ok());
        result.map_err(|e| script_error(script, e))
    }
}

/// A client for one node, with TCP keepalive.
fn node_client(url: &str) -> redis::RedisResult<redis::Client> {
    let info = redis::IntoConnectionInfo::into_connection_info(url)?;
    let tcp = info.tcp_settings().clone().set_keepalive(keepalive());
    redis::Client::open(info.set_tcp_settings(tcp))
}

/// TCP keepalive for every connection: a peer that vanished without closing (a dead host, a
/// NAT that dropped its mapping) is found after about 30 s even when the connection is idle.
fn keepalive() -> TcpKeepalive {
    TcpKeepalive::new()
        .with_time(Duration::from_secs(15))
        .with_interval(Duration::from_secs(5))
        .with_retries(3)
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn per_partition_cap(limits: DeadLimits) -> u64 {
    // Callers pass the per-partition share already; at least one job is always kept.
    limits.cap.max(1)
}

fn key_of(bytes: Vec<u8>) -> Result<JobKey> {
    let s = String::from_utf8(bytes).map_err(|_| Error::Protocol("job key is not text".into()))?;
    JobKey::new(s).map_err(|e| Error::Protocol(format!("stored job key is invalid: {e}")))
}

fn state_of(code: u8) -> Result<JobState> {
    JobState::from_code(code)
        .ok_or_else(|| Error::Protocol(format!("unknown state {:?}", code as char)))
}

#[async_trait]
impl Store for RedisStore {
    async fn enqueue(
        &self,
        queue: &Queue,
        jobs: &[NewJob],
        call: EnqueueCall,
    ) -> Result<Vec<EnqueueOutcome>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let k = self.keys(queue);
        let s = &SCRIPTS.enqueue;
        let durable = self.options.durable_enqueue;
        // The two receipt generations of the call's bucket (the same for every try).
        let receipts = k.enqueue_receipts(call.id);
        let (reply, acked) = self
            .run_waiting(
                s,
                &k,
                &receipts,
                |inv| {
                    inv.arg(jobs.len())
                        .arg(&call.id.to_be_bytes()[..])
                        .arg(if call.retry { "1" } else { "0" });
                    for job in jobs {
                        let (mode, value) = match job.due {
                            Due::Now => ("n", 0),
                            Due::After(d) => ("d", ms(d)),
                            Due::At(t) => ("a", unix_ms(t)),
                        };
                        inv.arg(job.key.as_str())
                            .arg(mode)
                            .arg(value)
                            .arg(if job.replace { "1" } else { "0" })
                            .arg(&job.payload[..]);
                    }
                },
                durable,
            )
            .await?;
        if let (Some((wanted, _)), Some(acked)) = (durable, acked)
            && usize::try_from(acked).unwrap_or(0) < wanted
        {
            return Err(Error::NotReplicated {
                acked: usize::try_from(acked).unwrap_or(0),
                wanted,
            });
        }
        let Value::Array(items) = reply else {
            return Err(unexpected(s.name, "outcomes", &reply));
        };
        if items.len() != jobs.len() {
            return Err(Error::Protocol(format!(
                "enqueue: {} outcomes for {} jobs",
                items.len(),
                jobs.len()
            )));
        }
        items
            .into_iter()
            .map(|v| match &v {
                Value::BulkString(b) if b.as_slice() == b"+" => Ok(EnqueueOutcome::Created),
                Value::BulkString(b) if b.as_slice() == b"~" => Ok(EnqueueOutcome::Replaced),
                Value::BulkString(b) if b.as_slice() == b"E" => Ok(EnqueueOutcome::Ended),
                Value::BulkString(b) if b.len() == 1 => Ok(EnqueueOutcome::Exists(state_of(b[0])?)),
                _ => Err(unexpected(s.name, "outcome", &v)),
            })
            .collect()
    }

    async fn fetch(&self, queue: &Queue, request: &FetchRequest) -> Result<FetchReply> {
        let k = self.keys(queue);
        let s = &SCRIPTS.fetch;
        request.validate()?;
        let lease_ms = ms(request.lease).max(1);
        let call = request.call;
        let done = self.take_received(queue, call.id);
        let mut receipts = vec![k.fetch_receipt(call.id)];
        receipts.extend(done.iter().map(|id| k.fetch_receipt(*id)));
        let reply = self
            .run(s, &k, &receipts, |inv| {
                inv.arg(request.max_jobs)
                    .arg(lease_ms)
                    .arg(request.promote_batch)
                    .arg(request.recover_batch)
                    .arg(per_partition_cap(request.dead_limits))
                    .arg(ms(request.dead_limits.retention))
                    .arg(ms(FetchCall::receipt_life(request.lease)).max(1))
                    .arg(call.retry)
                    .arg(rand::random::<u32>() >> 1)
                    .arg(request.retry_policy.script_args());
            })
            .await?;
        let mut r = Reply::new(s.name, reply)?;
        let now = r.int("now")? as u64;
        let next_ms = r.int("next_ms")?;
        let trimmed = r.int("trimmed")? as u64;
        let n_jobs = r.int("n_jobs")? as usize;
        let n_buried = r.int("n_buried")? as usize;
        if r.remaining() != n_jobs * 2 + n_buried {
            return Err(Error::Protocol(
                "fetch: reply length does not match its counts".into(),
            ));
        }
        let mut jobs = Vec::with_capacity(n_jobs);
        for _ in 0..n_jobs {
            let key = key_of(r.bytes("key")?)?;
            let rec = Record::decode(r.bytes("record")?)?;
            jobs.push(Delivery {
                queue: queue.clone(),
                key,
                token: rec.token,
                attempt: rec.attempts,
                due_ms: rec.due_ms,
                created_ms: rec.created_ms,
                leased_ms: now,
                lease_deadline_ms: now + lease_ms,
                payload: rec.payload,
            });
        }
        let buried = (0..n_buried)
            .map(|_| r.bytes("buried key").and_then(key_of))
            .collect::<Result<Vec<_>>>()?;
        if trimmed > 0 {
            tracing::warn!(topic = %queue.topic, partition = queue.partition, trimmed, "dead queue trimmed (cap or retention)");
        }
        if !jobs.is_empty() || call.is_retry() {
            // The script left a receipt, and this reply has arrived: nobody will retry this
            // call, so the partition's next fetch may delete it.
            self.note_received(queue, call.id);
        }
        Ok(FetchReply {
            jobs,
            next_in: u64::try_from(next_ms).ok().map(Duration::from_millis),
            buried,
            trimmed,
        })
    }

    async fn ack(&self, queue: &Queue, done: &[(JobKey, u64)]) -> Result<Vec<AckOutcome>> {
        if done.is_empty() {
            return Ok(Vec::new());
        }
        let k = self.keys(queue);
        let s = &SCRIPTS.ack;
        let reply = self
            .run(s, &k, &[], |inv| {
                for (key, token) in done {
                    inv.arg(key.as_str()).arg(*token);
                }
            })
            .await?;
        codes(s.name, reply, done.len())?
            .into_iter()
            .map(|c| match c {
                b'A' => Ok(AckOutcome::Acked),
                b'G' => Ok(AckOutcome::Gone),
                b'S' => Ok(AckOutcome::Stale),
                other => Err(Error::Protocol(format!(
                    "ack: unknown code {:?}",
                    other as char
                ))),
            })
            .collect()
    }

    async fn fail(
        &self,
        queue: &Queue,
        key: &JobKey,
        token: u64,
        action: &FailAction,
        error: &str,
        dead_limits: DeadLimits,
    ) -> Result<FailOutcome> {
        let failure = FailedAttempt {
            key: key.clone(),
            token,
            action: action.clone(),
            error: error.to_owned(),
        };
        let mut out = self
            .fail_many(queue, std::slice::from_ref(&failure), dead_limits)
            .await?;
        out.pop()
            .ok_or_else(|| Error::Protocol("fail: empty reply".into()))?
    }

    async fn fail_many(
        &self,
        queue: &Queue,
        failures: &[FailedAttempt],
        dead_limits: DeadLimits,
    ) -> Result<Vec<Result<FailOutcome>>> {
        if failures.is_empty() {
            return Ok(Vec::new());
        }
        let k = self.keys(queue);
        let s = &SCRIPTS.fail;
        let reply = self
            .run(s, &k, &[], |inv| {
                inv.arg(per_partition_cap(dead_limits))
                    .arg(ms(dead_limits.retention));
                for f in failures {
                    let (code, delay) = match &f.action {
                        FailAction::Retry(d) => ("r", ms(*d)),
                        FailAction::Defer(d) => ("d", ms(*d)),
                        FailAction::Bury => ("b", 0),
                        FailAction::Cancel => ("c", 0),
                        FailAction::Throttle(d) => ("t", ms(*d)),
                    };
                    inv.arg(f.key.as_str())
                        .arg(f.token)
                        .arg(code)
                        .arg(delay)
                        .arg(crate::job::truncate_error(&f.error));
                }
            })
            .await?;
        let mut r = Reply::new(s.name, reply)?;
        if r.remaining() != 3 * failures.len() {
            return Err(Error::Protocol(format!(
                "fail: {} values for {} failures",
                r.remaining(),
                failures.len()
            )));
        }
        let mut out = Vec::with_capacity(failures.len());
        for f in failures {
            let (code, at, trimmed) = (r.int("code")?, r.int("at")?, r.int("trimmed")?);
            out.push(match code {
                1 => Ok(FailOutcome::Retrying { at_ms: at as u64 }),
                2 => {
                    if trimmed > 0 {
                        tracing::warn!(topic = %queue.topic, partition = queue.partition, trimmed, "dead queue trimmed (cap or retention)");
                    }
                    Ok(FailOutcome::Buried {
                        trimmed: trimmed as u64,
                    })
                }
                3 => Ok(FailOutcome::Cancelled),
                0 => Ok(FailOutcome::Gone),
                -1 => Err(Error::StaleToken {
                    key: f.key.to_string(),
                }),
                other => return Err(Error::Protocol(format!("fail: unknown code {other}"))),
            });
        }
        Ok(out)
    }

    async fn extend(
        &self,
        queue: &Queue,
        leases: &[(JobKey, u64)],
        lease: Duration,
    ) -> Result<Vec<Extended>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let k = self.keys(queue);
        let s = &SCRIPTS.extend;
        let reply = self
            .run(s, &k, &[], |inv| {
                inv.arg(ms(lease).max(1));
                for (key, token) in leases {
                    inv.arg(key.as_str()).arg(*token);
                }
            })
            .await?;
        codes(s.name, reply, leases.len())?
            .into_iter()
            .map(|c| match c {
                b'1' => Ok(Extended::Held),
                b'0' => Ok(Extended::Lost),
                b'2' => Ok(Extended::CancelRequested),
                other => Err(Error::Protocol(format!(
                    "extend: unknown code {:?}",
                    other as char
                ))),
            })
            .collect()
    }

    async fn release(&self, queue: &Queue, leases: &[(JobKey, u64)]) -> Result<Vec<bool>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let k = self.keys(queue);
        let s = &SCRIPTS.release;
        let reply = self
            .run(s, &k, &[], |inv| {
                for (key, token) in leases {
                    inv.arg(key.as_str()).arg(*token);
                }
            })
            .await?;
        Ok(codes(s.name, reply, leases.len())?
            .into_iter()
            .map(|c| c == b'1')
            .collect())
    }

    async fn cancel(&self, queue: &Queue, key: &JobKey) -> Result<CancelOutcome> {
        let k = self.keys(queue);
        let s = &SCRIPTS.cancel;
        let reply = self
            .run(s, &k, &[], |inv| {
                inv.arg(key.as_str());
            })
            .await?;
        match codes(s.name, reply, 1)?[0] {
            b'S' | b'R' | b'F' => Ok(CancelOutcome::Cancelled),
            b'C' => Ok(CancelOutcome::CancelRequested),
            b'D' => Ok(CancelOutcome::Dead),
            b'N' => Ok(CancelOutcome::NotFound),
            other => Err(Error::Protocol(format!(
                "cancel: unknown code {:?}",
                other as char
            ))),
        }
    }

    async fn reschedule(
        &self,
        queue: &Queue,
        key: &JobKey,
        due: NewDue,
    ) -> Result<RescheduleOutcome> {
        let k = self.keys(queue);
        let s = &SCRIPTS.reschedule;
        let (mode, value): (&str, i64) = match due {
            // Saturate: a huge time must stay far away, not wrap to a negative "now".
            NewDue::At(t) => ("a", i64::try_from(unix_ms(t)).unwrap_or(i64::MAX)),
            NewDue::After(d) => ("d", i64::try_from(ms(d)).unwrap_or(i64::MAX)),
            NewDue::Shift(delta) => ("s", delta),
        };
        let reply = self
            .run(s, &k, &[], |inv| {
                inv.arg(key.as_str()).arg(mode).arg(value);
            })
            .await?;
        let mut r = Reply::new(s.name, reply)?;
        let code = r.string("code")?;
        let due_ms = r.int("due")?;
        match code.as_str() {
            "K" => Ok(RescheduleOutcome::Rescheduled {
                due_ms: due_ms as u64,
            }),
            "A" => Ok(RescheduleOutcome::Running),
            "D" => Ok(RescheduleOutcome::Dead),
            "N" => Ok(RescheduleOutcome::NotFound),
            other => Err(Error::Protocol(format!(
                "reschedule: unknown code {other:?}"
            ))),
        }
    }

    async fn control(&self, queue: &Queue, change: &ControlChange) -> Result<ControlState> {
        let k = self.keys(queue);
        let s = &SCRIPTS.control;
        if let Some(Some(rate)) = change.rate {
            rate.check()?;
        }
        if change.concurrency == Some(Some(0)) {
            return Err(Error::InvalidConfig(
                "a concurrency share must be at least 1".into(),
            ));
        }
        let paused = match change.paused {
            None => "",
            Some(true) => "1",
            Some(false) => "0",
        };
        let rate = match change.rate {
            None => String::new(),
            Some(None) => "-".into(),
            Some(Some(r)) => format!("{}/{}", r.count, r.per_ms()),
        };
        let conc = match change.concurrency {
            None => String::new(),
            Some(None) => "-".into(),
            Some(Some(n)) => n.to_string(),
        };
        let throttle = change
            .throttle
            .map(|d| ms(d).to_string())
            .unwrap_or_default();
        let reply = self
            .run(s, &k, &[], |inv| {
                inv.arg(paused).arg(&rate).arg(&conc).arg(&throttle);
            })
            .await?;
        let mut r = Reply::new(s.name, reply)?;
        let paused = r.int("paused")? != 0;
        let num = |text: String, what: &str| -> Result<Option<u64>> {
            if text.is_empty() {
                return Ok(None);
            }
            text.parse()
                .map(Some)
                .map_err(|_| Error::Protocol(format!("control: {what} {text:?} is not a number")))
        };
        let rate_n = num(r.string("rate_n")?, "rate_n")?;
        let rate_ms = num(r.string("rate_ms")?, "rate_ms")?;
        let conc = num(r.string("conc")?, "conc")?;
        let until = num(r.string("until")?, "until")?;
        Ok(ControlState {
            paused,
            rate: match (rate_n, rate_ms) {
                (Some(n), Some(ms)) => Some(Rate {
                    count: u32::try_from(n).unwrap_or(u32::MAX),
                    per: Duration::from_millis(ms),
                }),
                _ => None,
            },
            concurrency: conc.map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
            throttled_until_ms: until,
        })
    }

    async fn job(&self, queue: &Queue, key: &JobKey) -> Result<Option<JobInfo>> {
        let k = self.keys(queue);
        let s = &SCRIPTS.job;
        let reply = self
            .run(s, &k, &[], |inv| {
                inv.arg(key.as_str());
            })
            .await?;
        let (rec, hist, lease, died): (Option<Vec<u8>>, Option<Vec<u8>>, Option<f64>, Option<f64>) =
            redis::from_redis_value(reply)
                .map_err(|e| Error::Protocol(format!("script {}: unexpected reply: {e}", s.name)))?;
        let Some(rec) = rec else { return Ok(None) };
        let rec = Record::decode(rec)?;
        let history = hist
            .map(|h| decode_history(&h))
            .transpose()?
            .unwrap_or_default();
        Ok(Some(JobInfo {
            key: key.clone(),
            state: rec.state,
            due_ms: rec.due_ms,
            created_ms: rec.created_ms,
            attempts: rec.attempts,
            lease_deadline_ms: lease
                .filter(|_| rec.state == JobState::Active)
                .map(|m| m as u64),
            died_ms: died
                .filter(|_| rec.state == JobState::Dead)
                .map(|m| m as u64),
            history,
            payload: rec.payload,
        }))
    }

    async fn stats(&self, queue: &Queue) -> Result<TopicStats> {
        let k = self.keys(queue);
        let s = &SCRIPTS.stats;
        let reply = self.run(s, &k, &[], |_| {}).await?;
        let mut r = Reply::new(s.name, reply)?;
        let mut st = TopicStats {
            scheduled: r.int("scheduled")? as u64,
            ready: r.int("ready")? as u64,
            active: r.int("active")? as u64,
            retry: r.int("retry")? as u64,
            dead: r.int("dead")? as u64,
            oldest_overdue_ms: r.int("oldest_overdue")?.max(0) as u64,
            overdue: r.int("overdue")?.max(0) as u64,
            ..TopicStats::default()
        };
        while r.remaining() >= 2 {
            let field = r.string("counter")?;
            let value = r.int("counter value")?.max(0) as u64;
            match field.as_str() {
                "enqueued" => st.enqueued = value,
                "succeeded" => st.succeeded = value,
                "retried" => st.retried = value,
                "buried" => st.buried = value,
                "expired" => st.expired = value,
                "cancelled" => st.cancelled = value,
                "trimmed" => st.trimmed = value,
                "throttles" => st.throttles = value,
                "paused" => st.paused = value > 0,
                "throttled" => st.throttled = value > 0,
                _ => {}
            }
        }
        Ok(st)
    }

    async fn list(
        &self,
        queue: &Queue,
        state: JobState,
        from: &ListFrom,
        limit: usize,
    ) -> Result<ListChunk> {
        let k = self.keys(queue);
        let s = &SCRIPTS.list;
        let sorted = state != JobState::Ready;
        let (after_score, after_key, position) = match (sorted, from) {
            (_, ListFrom::Start) => (String::new(), "", 0),
            (true, ListFrom::After(pos)) => (
                // Display prints the shortest text that parses back to the same double.
                f64::from_bits(pos.order.0).to_string(),
                pos.key.as_str(),
                0,
            ),
            (false, ListFrom::Index(i)) => (String::new(), "", *i),
            _ => {
                return Err(Error::InvalidConfig(format!(
                    "the {state} listing cannot start from {from:?}"
                )));
            }
        };
        if limit == 0 {
            return Ok(ListChunk::default());
        }
        let reply = self
            .run(s, &k, &[], |inv| {
                inv.arg(if sorted { "z" } else { "r" })
                    .arg(&[state.code()][..])
                    .arg(limit);
                if sorted {
                    inv.arg(&after_score).arg(after_key);
                } else {
                    inv.arg(position);
                }
            })
            .await?;
        let mut r = Reply::new(s.name, reply)?;
        let more = r.int("more")? != 0;
        let next_index = r.int("next position")?.max(0) as u64;
        if r.remaining() % 4 != 0 {
            return Err(Error::Protocol(
                "list: reply is not key, place, record, history groups".into(),
            ));
        }
        let mut jobs = Vec::with_capacity(r.remaining() / 4);
        while r.remaining() > 0 {
            let key = key_of(r.bytes("key")?)?;
            let place = r.string("place")?;
            let bad_place = || Error::Protocol(format!("list: place {place:?} is not a number"));
            let (order, time) = if sorted {
                let score: f64 = place.parse().map_err(|_| bad_place())?;
                // Scores are never negative, so their bits sort as they do.
                ((score.to_bits(), 0), score as u64)
            } else {
                ((place.parse().map_err(|_| bad_place())?, 0), 0)
            };
            let rec = Record::decode(r.bytes("record")?)?;
            let hist = r.optional_bytes("history")?;
            let info = JobInfo {
                key: key.clone(),
                state: rec.state,
                due_ms: rec.due_ms,
                created_ms: rec.created_ms,
                attempts: rec.attempts,
                lease_deadline_ms: (state == JobState::Active).then_some(time),
                died_ms: (state == JobState::Dead).then_some(time),
                history: hist
                    .map(|h| decode_history(&h))
                    .transpose()?
                    .unwrap_or_default(),
                payload: rec.payload,
            };
            jobs.push((ListPos { order, key }, info));
        }
        Ok(ListChunk {
            jobs,
            next_index,
            more,
        })
    }

    async fn dead(&self, queue: &Queue, offset: usize, limit: usize) -> Result<Vec<JobInfo>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let k = self.keys(queue);
        let s = &SCRIPTS.dead_page;
        let reply = self
            .run(s, &k, &[], |inv| {
                inv.arg(offset).arg(limit);
            })
            .await?;
        let mut r = Reply::new(s.name, reply)?;
        if r.remaining() % 4 != 0 {
            return Err(Error::Protocol(
                "dead_page: reply is not key, died, record, history groups".into(),
            ));
        }
        let mut out = Vec::with_capacity(r.remaining() / 4);
        while r.remaining() > 0 {
            let key = key_of(r.bytes("key")?)?;
            let died: f64 = r
                .string("died")?
                .parse()
                .map_err(|_| Error::Protocol("dead_page: died is not a number".into()))?;
            let rec = Record::decode(r.bytes("record")?)?;
            let hist = r.optional_bytes("history")?;
            out.push(JobInfo {
                key,
                state: rec.state,
                due_ms: rec.due_ms,
                created_ms: rec.created_ms,
                attempts: rec.attempts,
                lease_deadline_ms: None,
                died_ms: Some(died as u64),
                history: hist
                    .map(|h| decode_history(&h))
                    .transpose()?
                    .unwrap_or_default(),
                payload: rec.payload,
            });
        }
        Ok(out)
    }

    async fn requeue_dead(&self, queue: &Queue, keys: &[JobKey]) -> Result<Vec<bool>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let k = self.keys(queue);
        let s = &SCRIPTS.requeue_dead;
        let reply = self
            .run(s, &k, &[], |inv| {
                for key in keys {
                    inv.arg(key.as_str());
                }
            })
            .await?;
        Ok(codes(s.name, reply, keys.len())?
            .into_iter()
            .map(|c| c == b'1')
            .collect())
    }

    async fn purge_dead(&self, queue: &Queue, keys: &[JobKey], limit: usize) -> Result<u64> {
        if limit == 0 {
            return Ok(0);
        }
        let k = self.keys(queue);
        let s = &SCRIPTS.purge_dead;
        let reply = self
            .run(s, &k, &[], |inv| {
                inv.arg(limit);
                for key in keys {
                    inv.arg(key.as_str());
                }
            })
            .await?;
        as_int(&reply)
            .map(|n| n.max(0) as u64)
            .ok_or_else(|| unexpected(s.name, "count", &reply))
    }

    async fn act_on_dead(
        &self,
        queue: &Queue,
        action: DeadAction,
        seen: &[(JobKey, u64)],
    ) -> Result<Vec<bool>> {
        if seen.is_empty() {
            return Ok(Vec::new());
        }
        check_act_len(seen)?;
        let k = self.keys(queue);
        let s = &SCRIPTS.dead_act;
        let reply = self
            .run(s, &k, &[], |inv| {
                inv.arg(match action {
                    DeadAction::Requeue => "R",
                    DeadAction::Purge => "P",
                });
                for (key, died) in seen {
                    inv.arg(key.as_str()).arg(*died);
                }
            })
            .await?;
        Ok(codes(s.name, reply, seen.len())?
            .into_iter()
            .map(|c| c == b'1')
            .collect())
    }

    async fn register_topic(&self, topic: &Topic, partitions: u16) -> Result<TopicMeta> {
        self.register_topic_record(topic, partitions).await
    }

    async fn topics(&self) -> Result<Vec<TopicMeta>> {
        self.registered_topics().await
    }

    async fn reset_topic(&self, topic: &Topic) -> Result<Option<TopicMeta>> {
        self.reset_topic_record(topic).await
    }

    async fn beat_worker(&self, worker: &WorkerInfo, ttl: Duration) -> Result<()> {
        self.beat_worker_record(worker, ttl).await
    }

    async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        self.live_workers().await
    }

    async fn remove_worker(&self, id: &str) -> Result<bool> {
        self.remove_worker_record(id).await
    }

    async fn put_schedule(&self, record: &ScheduleRecord) -> Result<ScheduleOutcome> {
        self.put_schedule_record(record).await
    }

    async fn remove_schedule(&self, name: &str) -> Result<bool> {
        self.remove_schedule_record(name).await
    }

    async fn schedules(&self) -> Result<Vec<ScheduleRecord>> {
        self.schedule_records().await
    }

    async fn advance_schedule(&self, name: &str, from_ms: u64, to_ms: u64) -> Result<bool> {
        self.advance_schedule_cursor(name, from_ms, to_ms).await
    }

    async fn now_ms(&self) -> Result<u64> {
        let (secs, micros): (u64, u64) = self
            .conn
            .call(async |conn| redis::cmd("TIME").query_async(conn).await)
            .await
            .map_err(from_redis)?;
        Ok(secs * 1000 + micros / 1000)
    }

    async fn wake_listener(&self, queue: &Queue) -> Result<Box<dyn WakeListener>> {
        let (client, follow, master) = match &self.wake {
            WakeSource::Single(client) => (Some(client.clone()), None, None),
            WakeSource::Cluster(nodes) => (None, Some((self.conn.clone(), nodes.clone())), None),
            WakeSource::Sentinel => (None, None, Some(self.conn.clone())),
        };
        Ok(Box::new(RedisWakeListener {
            client,
            follow,
            master,
            generation: 0,
            key: self.keys(queue).wake.clone(),
            conn: None,
            connection_timeout: self.options.connection_timeout,
        }))
    }
}

/// Blocks on `BLPOP wake` on a connection of its own, whose response timeout is longer than
/// the block, so a quiet queue costs one command per `max_wait`.
///
/// On a cluster that connection goes to the master serving the wake key's slot, looked up
/// through the store's cluster connection. When the slot moves, `BLPOP` answers `MOVED` (or
/// the node goes away): the listener drops its node and looks it up again on the next wait.
struct RedisWakeListener {
    /// The node to block on; on a cluster, `None` until looked up (and after it failed).
    client: Option<redis::Client>,
    /// On a cluster: the store's connection, to look the node up, and how to address it.
    follow: Option<(SharedConnection, NodeUrl)>,
    /// Through Sentinel: the store's connection, whose current master the listener blocks on.
    master: Option<SharedConnection>,
    /// Through Sentinel: the generation of the store's connection `client` came from.
    generation: u64,
    key: String,
    conn: Option<(redis::aio::MultiplexedConnection, Duration)>,
    connection_timeout: Duration,
}

#[async_trait]
impl WakeListener for RedisWakeListener {
    async fn wait(&mut self, max_wait: Duration) -> Result<bool> {
        let block = max_wait.clamp(Duration::from_millis(10), Duration::from_secs(60));
        let response_timeout = block + Duration::from_secs(3);
        if self
            .conn
            .as_ref()
            .is_none_or(|(_, t)| *t < response_timeout)
        {
            let client = match (&self.client, &self.follow, &self.master) {
                (Some(client), _, _) => client.clone(),
                (None, Some((shared, nodes)), _) => {
                    let client = self.find_node(shared, nodes).await?;
                    self.client = Some(client.clone());
                    client
                }
                (None, None, Some(shared)) => {
                    let Some((generation, client)) = shared.node() else {
                        unreachable!("a sentinel connection has a master")
                    };
                    self.generation = generation;
                    self.client = Some(client.clone());
                    client
                }
                (None, None, None) => unreachable!("a listener has a node or a way to find one"),
            };
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(self.connection_timeout))
                .set_response_timeout(Some(response_timeout));
            let conn = match client
                .get_multiplexed_async_connection_with_config(&config)
                .await
            {
                Ok(conn) => conn,
                Err(e) => {
                    self.follow_master(&e).await;
                    self.forget_node();
                    return Err(from_redis(e));
                }
            };
            self.conn = Some((conn, response_timeout));
        }
        let Some((conn, _)) = self.conn.as_mut() else {
            unreachable!("connection set above")
        };
        let result: redis::RedisResult<Option<(String, String)>> = redis::cmd("BLPOP")
            .arg(&self.key)
            .arg(block.as_secs_f64())
            .query_async(conn)
            .await;
        match result {
            Ok(token) => Ok(token.is_some()),
            Err(e) => {
                // A broken or timed-out connection is replaced on the next wait; on a cluster
                // the node is looked up again (after MOVED: the slot has moved).
                if refused_by_cluster(&e) {
                    tracing::debug!(key = %self.key, "wake-up listener follows its slot");
                }
                self.conn = None;
                self.follow_master(&e).await;
                self.forget_node();
                Err(from_redis(e))
            }
        }
    }
}

impl RedisWakeListener {
    /// On a cluster, the master serving the wake key's slot now.
    async fn find_node(&self, shared: &SharedConnection, nodes: &NodeUrl) -> Result<redis::Client> {
        let key = self.key.clone();
        let owner = shared
            .call(async |conn| conn.master_of(&key).await)
            .await
            .map_err(from_redis)?;
        let Some((host, port)) = owner else {
            // Retryable: the cluster is resharding or failing over.
            return Err(Error::Redis(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "no cluster node serves the wake-up key's slot",
            ))));
        };
        node_client(&nodes.url(&host, port)).map_err(|e| {
            Error::InvalidConfig(format!("invalid cluster node address ({:?})", e.kind()))
        })
    }

    /// On a cluster or through Sentinel, drops the node so the next wait looks it up again.
    fn forget_node(&mut self) {
        if self.follow.is_some() || self.master.is_some() {
            self.client = None;
        }
    }

    /// Through Sentinel, after `e` on the master's connection: lets the store's connection
    /// ask the sentinels for the master (the next wait blocks on the one they name).
    async fn follow_master(&self, e: &redis::RedisError) {
        if let Some(shared) = &self.master {
            shared.after_failure(self.generation, e).await;
        }
    }
}
