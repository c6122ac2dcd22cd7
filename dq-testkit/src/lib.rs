//! Test support for dq: a private `redis-server` per test binary, unique key namespaces, and
//! deadline-bounded polling.
//!
//! # Servers
//!
//! Tests never touch a server on 6379. [`RedisServer::start`] launches a private `redis-server`
//! on a free port, in its own temporary directory, and [`shared`] gives one lazily started server
//! per test binary. Tests sharing a server keep apart by using distinct [`namespace`]s, and
//! [`keys_in_namespace`] lets them check that nothing was left behind.
//!
//! [`RedisCluster::start`] starts a private Redis Cluster (3 masters, 3 replicas, each node a
//! [`RedisServer`]) joined by `redis-cli --cluster create`, and [`shared_cluster`] one per test
//! binary; [`RedisCluster::url`] is the `redis+cluster://…` seed URL dq connects with.
//!
//! [`RedisSentinelSet::start`] starts a master, two replicas and three sentinels
//! (`redis-server <conf> --sentinel`) with a small `down-after-milliseconds`;
//! [`RedisSentinelSet::url`] is the `redis+sentinel://…/dqmaster` URL dq connects with, and
//! [`RedisSentinelSet::kill_master`] / [`RedisSentinelSet::wait_for_failover`] drive a failover.
//!
//! # TLS
//!
//! [`TestCerts::generate`] makes a CA and certificates it signs (with `rcgen`) at test time;
//! [`ServerOptions::tls`] with [`TestCerts::server_tls`] starts a server that also listens
//! with TLS on a second port ([`RedisServer::tls_url`]); the plain port stays for the kit's
//! own admin connections.
//!
//! # Why `redis-server` runs under a `bash` wrapper
//!
//! A server must die with the test process that started it, *however* that process ends:
//! a panic, `std::process::exit`, a `SIGKILL` from a test runner's timeout, or simply a
//! `static` (like the one behind [`shared`]) whose destructor never runs. `Drop` covers none of
//! the last three, and the usual kernel tool (`prctl(PR_SET_PDEATHSIG)`) needs `unsafe`, which
//! this workspace forbids.
//!
//! So the server is started by a small `bash -c` script whose stdin is a pipe held by the test
//! process. The script starts `redis-server` in the background, reports its pid, then blocks
//! reading that pipe. The kernel closes our end of the pipe when the test process dies, for
//! whatever reason; the script's read then returns, and it `kill -9`s the server and removes its
//! directory. When the test process retires a server on purpose ([`RedisServer::kill`],
//! [`RedisServer::restart`], `Drop`), it first writes `keep` into the pipe so the script leaves
//! the directory alone (AOF files must survive a restart).
//!
//! # Waiting
//!
//! Nothing here synchronises by sleeping. [`eventually`], [`eventually_some`] and
//! [`eventually_blocking`] poll a condition every few milliseconds until it holds or a deadline
//! passes, and then panic with a message saying what was being waited for.
//!
//! # Environment
//!
//! `DQ_TESTKIT_REDIS_SERVER` names the `redis-server` binary to run (default: `redis-server`
//! from `PATH`), `DQ_TESTKIT_REDIS_CLI` the `redis-cli` that creates clusters (default:
//! `redis-cli` from `PATH`; Debian's `redis-tools`, which `redis-server` depends on). `bash` must be on `PATH`. Process checks read `/proc`, so this crate is for
//! Linux.

mod child;
mod cluster;
mod log;
mod namespace;
mod process;
pub mod proxy;
mod sentinel;
mod server;
mod tls;
mod wait;

pub use child::TestChild;
pub use cluster::{
    CLUSTER_MASTERS, CLUSTER_NODES, ClusterOptions, NodeInfo, NodeRole, RedisCluster,
    shared_cluster,
};
pub use log::CapturedLog;
pub use namespace::{keys_in_namespace, namespace};
pub use proxy::FaultProxy;
/// The `redis` crate this kit is built on, for the reply types of [`RedisServer::cmd`].
pub use redis;
pub use sentinel::{RedisSentinelSet, SENTINEL_MASTER_NAME, SentinelOptions, shared_sentinel};
pub use server::{Persistence, RedisServer, ServerOptions, shared};
pub use tls::{ServerTls, TestCerts};
pub use wait::{POLL_INTERVAL, eventually, eventually_blocking, eventually_some};
