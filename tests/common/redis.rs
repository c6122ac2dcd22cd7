//! The Redis [`Harness`]: a fresh namespace on the shared test server (or on the shared test
//! cluster), and the invariant check of dq-core's layout module run on it.

use std::sync::Arc;

use dq::store::redis::layout::{self, PartitionKeys};
use dq::store::{LEGACY_FORMAT, NEWEST_FORMAT};
use dq::store::{Queue, RedisOptions, RedisStore, Store};
use dq::{Client, ClientBuilder, JobKey, JobState, Topic};
use dq_testkit::{RedisCluster, RedisSentinelSet, RedisServer, keys_in_namespace};

use super::Harness;

/// How many records per partition the check also reads through `Store::job` (which decodes
/// the record and its history).
const DECODE_SAMPLE: usize = 200;

/// Where a [`RedisHarness`] keeps its namespace.
#[derive(Clone, Copy)]
enum Backend {
    /// The binary's shared server.
    Single(&'static RedisServer),
    /// The binary's shared 3-master cluster.
    Cluster(&'static RedisCluster),
    /// The binary's shared Sentinel set (a master, 2 replicas, 3 sentinels).
    Sentinel(&'static RedisSentinelSet),
}

impl Backend {
    fn url(self) -> String {
        match self {
            Backend::Single(s) => s.url(),
            Backend::Cluster(c) => c.url(),
            Backend::Sentinel(s) => s.url(),
        }
    }

    /// Runs one command built with binary arguments.
    fn query<T: dq_testkit::redis::FromRedisValue>(self, cmd: &dq_testkit::redis::Cmd) -> T {
        let reply = match self {
            Backend::Single(s) => cmd.query(&mut s.connection()),
            Backend::Cluster(c) => cmd.query(&mut c.connection()),
            Backend::Sentinel(s) => cmd.query(
                &mut s
                    .master()
                    .expect("the sentinels name a master")
                    .connection(),
            ),
        };
        reply.expect("a test command")
    }

    fn cmd<T: dq_testkit::redis::FromRedisValue>(self, args: &[&str]) -> T {
        match self {
            Backend::Single(s) => s.cmd(args),
            Backend::Cluster(c) => c.cmd(args),
            Backend::Sentinel(s) => s.master().expect("the sentinels name a master").cmd(args),
        }
    }
}

/// A fresh namespace on the shared test server or cluster.
pub struct RedisHarness {
    backend: Backend,
    ns: String,
    client: Client,
    /// The same namespace, for the layout's invariant check.
    store: RedisStore,
}

impl RedisHarness {
    /// A harness with its own namespace on [`dq_testkit::shared`].
    pub async fn new() -> Self {
        Self::on(Backend::Single(dq_testkit::shared())).await
    }

    /// A harness with its own namespace on [`dq_testkit::shared_cluster`].
    pub async fn new_cluster() -> Self {
        Self::on(Backend::Cluster(dq_testkit::shared_cluster())).await
    }

    /// A harness with its own namespace on [`dq_testkit::shared_sentinel`], connected by its
    /// `redis+sentinel://` URL.
    pub async fn new_sentinel() -> Self {
        Self::on(Backend::Sentinel(dq_testkit::shared_sentinel())).await
    }

    async fn on(backend: Backend) -> Self {
        let ns = dq_testkit::namespace("store");
        let client = Client::builder()
            .namespace(&ns)
            .connect(&backend.url())
            .await
            .expect("connect to the test redis");
        // The suite's jobs are written in the newest format, as once every live process of
        // a namespace reads it (the bodies about formats choose theirs).
        client.store().formats().set_write(NEWEST_FORMAT);
        let store = RedisStore::connect(
            &backend.url(),
            RedisOptions {
                namespace: ns.clone(),
                ..RedisOptions::default()
            },
        )
        .await
        .expect("connect to the test redis");
        RedisHarness {
            backend,
            ns,
            client,
            store,
        }
    }

    /// The namespace (key prefix) of this harness.
    pub fn namespace(&self) -> &str {
        &self.ns
    }

    /// The server (panics on a cluster harness: its tests use [`Self::keys`] and the store).
    pub fn server(&self) -> &'static RedisServer {
        match self.backend {
            Backend::Single(s) => s,
            Backend::Cluster(_) => panic!("a cluster harness has no single server"),
            Backend::Sentinel(s) => s.master().expect("the sentinels name a master"),
        }
    }

    /// Every key in the namespace (on a cluster: on every master), sorted, but the registry of
    /// record formats, which the harness's own client wrote when it connected.
    pub fn keys(&self) -> Vec<String> {
        let mut keys = match self.backend {
            Backend::Single(s) => keys_in_namespace(s, &self.ns),
            Backend::Cluster(c) => c.keys_in_namespace(&self.ns),
            Backend::Sentinel(s) => {
                keys_in_namespace(s.master().expect("the sentinels name a master"), &self.ns)
            }
        };
        keys.retain(|k| *k != layout::formats_key(&self.ns));
        keys
    }

    /// The keys of partition `partition` of `topic` in this namespace.
    pub fn partition_keys(&self, topic: &str, partition: u16) -> PartitionKeys {
        let topic = Topic::new(topic).expect("a valid topic");
        PartitionKeys::new(&self.ns, &Queue::new(topic, partition))
    }

    /// The invariant violations found right now (empty when all is well): the layout's rules
    /// (see [`layout::Snapshot::violations`]), and up to [`DECODE_SAMPLE`] records per
    /// partition read back through `Store::job` (record and history decode) in the same state.
    pub async fn violations(&self) -> Vec<String> {
        let snapshot = layout::Snapshot::read(&self.store)
            .await
            .expect("read the namespace");
        let mut v: Vec<String> = snapshot
            .violations()
            .iter()
            .map(ToString::to_string)
            .collect();
        let store = self.client.store();
        for ((topic, p), part) in &snapshot.partitions {
            let Ok(t) = Topic::new(topic) else { continue };
            let queue = Queue::new(t, *p);
            for (job, rec) in part.jobs.iter().take(DECODE_SAMPLE) {
                let (Ok(k), Ok(mut h)) =
                    (JobKey::new(job.clone()), layout::RecordHeader::decode(rec))
                else {
                    continue;
                };
                // a lean record is running while `leases` holds it
                if let Some(token) = part.leases.get(job).and_then(|t| t.parse().ok()) {
                    h = h.leased(token);
                }
                let at = format!("{topic}#{p}");
                match store.job(&queue, &k).await {
                    Ok(Some(info)) if info.state == h.state => {}
                    Ok(Some(info)) => v.push(format!(
                        "{at}: Store::job({job:?}) says {}, record says {}",
                        info.state, h.state
                    )),
                    Ok(None) => v.push(format!("{at}: Store::job({job:?}) finds nothing")),
                    Err(e) => v.push(format!("{at}: Store::job({job:?}) fails: {e}")),
                }
            }
        }
        v
    }
}

impl Harness for RedisHarness {
    async fn client(&self) -> Client {
        self.client.clone()
    }

    async fn client_with(
        &self,
        configure: impl FnOnce(ClientBuilder) -> ClientBuilder,
    ) -> dq::Result<Client> {
        configure(Client::builder())
            .namespace(&self.ns)
            .connect(&self.backend.url())
            .await
    }

    fn store(&self) -> Arc<dyn Store> {
        self.client.store().clone()
    }

    async fn check_invariants(&self) {
        let v = self.violations().await;
        assert!(
            v.is_empty(),
            "store invariants violated in namespace {}:\n  {}",
            self.ns,
            v.join("\n  ")
        );
    }

    async fn assert_no_leftovers(&self) {
        let keys = self.keys();
        let left: Vec<String> = keys
            .iter()
            .filter(|k| {
                // The topic registry stays: it says what the topics are, not what they hold.
                **k != layout::topics_key(&self.ns)
                    && !layout::parse_key(&self.ns, k).is_some_and(|p| {
                        matches!(
                            p.name,
                            Some(
                                layout::KeyName::Stats
                                    | layout::KeyName::Wake
                                    | layout::KeyName::Calls
                                    | layout::KeyName::Receipts
                                    | layout::KeyName::OldReceipts
                                    | layout::KeyName::FetchReceipt
                            )
                        )
                    })
            })
            .map(|k| describe(self.backend, k))
            .collect();
        assert!(
            left.is_empty(),
            "job data left in namespace {} (only `stats`, `wake`, the enqueue and fetch \
             receipts, which expire, and the topic registry may remain):\n  {}",
            self.ns,
            left.join("\n  ")
        );
    }

    async fn plant_record(
        &self,
        q: &Queue,
        key: &str,
        (format, state): (u8, JobState),
        at_ms: u64,
        payload: &[u8],
    ) {
        let k = PartitionKeys::new(&self.ns, q);
        let ran = !matches!(state, JobState::Scheduled | JobState::Ready);
        let header = |format| layout::RecordHeader {
            format,
            state,
            attempts: u8::from(ran),
            due_ms: at_ms,
            created_ms: at_ms,
            token: u64::from(ran),
            expires_ms: 0,
            priority: 5,
            group_len: 0,
            batch_len: 0,
        };
        let record = if format <= NEWEST_FORMAT {
            header(format).encode(payload)
        } else {
            // a newer dq's: its version byte, then bytes this dq does not read
            let mut r = vec![format];
            r.extend_from_slice(&header(LEGACY_FORMAT).encode(payload));
            r
        };
        let mut hset = dq_testkit::redis::cmd("HSET");
        hset.arg(&k.jobs).arg(key).arg(record);
        let _: i64 = self.backend.query(&hset);
        let at = at_ms.to_string();
        match state {
            JobState::Ready => self.backend.cmd::<i64>(&["RPUSH", &k.ready, key]),
            JobState::Scheduled => self.backend.cmd(&["ZADD", &k.scheduled, &at, key]),
            JobState::Retry => self.backend.cmd(&["ZADD", &k.retry, &at, key]),
            JobState::Active => self.backend.cmd(&["ZADD", &k.active, &at, key]),
            JobState::Dead => self.backend.cmd(&["ZADD", &k.dead, &at, key]),
        };
    }

    async fn record_format(&self, q: &Queue, key: &str) -> Option<u8> {
        let k = PartitionKeys::new(&self.ns, q);
        let mut hget = dq_testkit::redis::cmd("HGET");
        hget.arg(&k.jobs).arg(key);
        let record: Option<Vec<u8>> = self.backend.query(&hget);
        match layout::record_format(&record?, NEWEST_FORMAT) {
            layout::RecordFormat::Known(f) | layout::RecordFormat::Newer(f) => Some(f),
            layout::RecordFormat::Corrupt => panic!("job {key:?} holds no record"),
        }
    }

    async fn describe_record(&self, q: &Queue, key: &str) -> Option<String> {
        let k = PartitionKeys::new(&self.ns, q);
        let mut hget = dq_testkit::redis::cmd("HGET");
        hget.arg(&k.jobs).arg(key);
        let record: Option<Vec<u8>> = self.backend.query(&hget);
        let record = record?;
        let mut out = format!("record {record:?}");
        for (name, set) in [
            ("scheduled", &k.scheduled),
            ("retry", &k.retry),
            ("active", &k.active),
            ("dead", &k.dead),
        ] {
            let score: Option<String> = self.backend.cmd(&["ZSCORE", set, key]);
            out.push_str(&format!(" {name} {score:?}"));
        }
        let ready: Vec<String> = self.backend.cmd(&["LRANGE", &k.ready, "0", "-1"]);
        let at: Vec<usize> = (0..ready.len()).filter(|i| ready[*i] == key).collect();
        let hist: Option<Vec<u8>> = self.backend.cmd(&["HGET", &k.hist, key]);
        let cancel: Option<String> = self.backend.cmd(&["HGET", &k.control, &format!("x:{key}")]);
        out.push_str(&format!(
            " ready at {at:?} history {hist:?} cancel {cancel:?}"
        ));
        Some(out)
    }

    async fn assert_untouched(&self) {
        let keys = self.keys();
        assert!(
            keys.is_empty(),
            "expected no key in namespace {}, found:\n  {}",
            self.ns,
            keys.iter()
                .map(|k| describe(self.backend, k))
                .collect::<Vec<_>>()
                .join("\n  ")
        );
    }
}

/// One line about a key: its name, type and size.
fn describe(server: Backend, key: &str) -> String {
    let ty: String = server.cmd(&["TYPE", key]);
    let len: i64 = match ty.as_str() {
        "hash" => server.cmd(&["HLEN", key]),
        "zset" => server.cmd(&["ZCARD", key]),
        "list" => server.cmd(&["LLEN", key]),
        _ => -1,
    };
    let sample: Vec<String> = match ty.as_str() {
        "hash" => server.cmd(&["HKEYS", key]),
        "zset" => server.cmd(&["ZRANGE", key, "0", "4"]),
        "list" => server.cmd(&["LRANGE", key, "0", "4"]),
        _ => Vec::new(),
    };
    format!("{key} ({ty}, {len} entries, e.g. {sample:?})")
}
