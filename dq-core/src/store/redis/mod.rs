//! `RedisStore`: the store on Redis, one Lua script per state move.
//!
//! Layout (ARCHITECTURE.md §4): per partition a `jobs` hash of records, `scheduled`/`retry`/
//! `active`/`dead` sorted sets, a `ready` list of hints, a `hist` hash of attempt histories, a
//! `stats` hash of counters and a `wake` list; namespace-wide, the topic registry, the live
//! workers and the schedules. Keys, the record header and each script's KEYS come from
//! [`layout`]; scripts from `scripts.rs` and `lua/`.
//!
//! One node, a Redis Cluster or a master watched by Sentinel (`url.rs`, `conn.rs`): every
//! script call touches the keys of one partition, which share one hash tag, so on a cluster it
//! goes to the master of that tag's slot (`conn.rs` routes it, loads scripts per node and
//! resends what the cluster refused without running it).
//!
//! The rooms: `store.rs` (the connection and how a script is called), one file per role
//! (`produce.rs`, `lease.rs`, `operate.rs`, `catalog.rs`: each call's wrapper of its script),
//! `wake.rs` (the wake-up listener), `acl.rs` (the ACL rule a process needs), `scripts.rs` (the scripts loaded, replies and errors
//! read), `record.rs` (records and histories decoded), `checks.rs` (what the server must
//! offer), `conn.rs`, `url.rs` and `tls.rs` (connections), and the public [`layout`].

mod acl;
mod batches;
mod catalog;
mod checks;
mod conn;
mod events;
pub(crate) mod kept;
pub mod layout;
mod lease;
#[cfg(test)]
mod lua_tests;
mod operate;
mod produce;
mod record;
mod scripts;
mod store;
mod tls;
mod url;
mod wake;

pub use acl::{ACL_COMMANDS, acl_rule};
pub use checks::ServerReport;
pub use store::{RedisOptions, RedisStore};
pub(crate) use tls::tls_failure;
pub use tls::{ENV_TLS_CA, ENV_TLS_CERT, ENV_TLS_KEY, TlsConfig};
pub use url::redacted as redacted_url;
