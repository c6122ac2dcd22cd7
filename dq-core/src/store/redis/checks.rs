//! Checks run on connect: is this Redis fit to hold jobs?
//!
//! 1. Version ≥ 7.0 (scripts use `LPOP key count`, `ZRANGE … WITHSCORES` semantics of 7.x).
//! 2. `maxmemory-policy` is `noeviction`: any other policy lets Redis delete jobs silently
//!    under memory pressure. Refused unless the caller allows it, then a warning.
//! 3. Persistence: a warning when neither AOF nor RDB snapshots are on, since a restart of
//!    such a server loses every job.
//!
//! On a cluster every master is checked (its replicas take over its jobs, but a failover is
//! not what these checks are about); the report is the weakest: the lowest version, an
//! evicting policy if any master has one, persistence only if every master has it.

use redis::{Cmd, FromRedisValue};

use super::conn::Conn;
use crate::error::{Error, Result, from_redis};

/// What the checks found.
#[derive(Clone, Debug, Default)]
pub struct ServerReport {
    /// `redis_version` of the server.
    pub version: String,
    /// Its `maxmemory_policy`.
    pub maxmemory_policy: String,
    /// Whether the append-only file is on.
    pub aof_enabled: bool,
    /// Whether RDB snapshots are configured (`save` not empty); `None` if `CONFIG` is denied.
    pub rdb_enabled: Option<bool>,
}

fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

fn version_at_least(version: &str, major: u32, minor: u32) -> bool {
    major_minor(version) >= (major, minor)
}

/// Checks the server, or every master of a cluster.
pub(crate) async fn check(conn: &mut Conn, allow_eviction: bool) -> Result<ServerReport> {
    let masters = conn.masters().await.map_err(from_redis)?;
    let report = if masters.is_empty() {
        check_node(conn, None, allow_eviction).await?
    } else {
        let mut all = ServerReport {
            version: String::new(),
            maxmemory_policy: "noeviction".into(),
            aof_enabled: true,
            rdb_enabled: Some(true),
        };
        for (host, port) in &masters {
            let one = check_node(conn, Some((host.as_str(), *port)), allow_eviction).await?;
            if all.version.is_empty() || major_minor(&one.version) < major_minor(&all.version) {
                all.version = one.version;
            }
            if one.maxmemory_policy != "noeviction" {
                all.maxmemory_policy = one.maxmemory_policy;
            }
            all.aof_enabled &= one.aof_enabled;
            all.rdb_enabled = match (all.rdb_enabled, one.rdb_enabled) {
                (Some(a), Some(b)) => Some(a && b),
                _ => None,
            };
        }
        all
    };
    if !report.aof_enabled && report.rdb_enabled == Some(false) {
        tracing::warn!(
            "redis persistence is off (no AOF, no RDB snapshots): a restart of the server loses every job"
        );
    }
    Ok(report)
}

fn major_minor(version: &str) -> (u32, u32) {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// Sends `cmd` to `node` (a cluster master), or over `conn` to its one server.
async fn query<T: FromRedisValue>(
    conn: &mut Conn,
    node: Option<(&str, u16)>,
    cmd: Cmd,
) -> redis::RedisResult<T> {
    match node {
        None => cmd.query_async(conn).await,
        Some((host, port)) => {
            let v = conn.on_node(cmd, host, port).await?;
            redis::from_redis_value(v).map_err(redis::RedisError::from)
        }
    }
}

async fn check_node(
    conn: &mut Conn,
    node: Option<(&str, u16)>,
    allow_eviction: bool,
) -> Result<ServerReport> {
    let on = node.map_or_else(String::new, |(h, p)| format!(" (cluster master {h}:{p})"));
    let mut info_cmd = redis::cmd("INFO");
    info_cmd.arg("server").arg("memory").arg("persistence");
    let info: String = query(conn, node, info_cmd).await.map_err(from_redis)?;
    let version = info_field(&info, "redis_version").unwrap_or("").to_string();
    if !version_at_least(&version, 7, 0) {
        return Err(Error::UnsuitableServer(format!(
            "dq needs Redis 7.0 or newer; this server{on} is {version:?}"
        )));
    }
    let maxmemory_policy = info_field(&info, "maxmemory_policy")
        .unwrap_or("")
        .to_string();
    if maxmemory_policy != "noeviction" {
        let msg = format!(
            "maxmemory-policy{on} is {maxmemory_policy:?}: Redis may evict jobs under memory \
             pressure; set it to noeviction (CONFIG SET maxmemory-policy noeviction)"
        );
        if !allow_eviction {
            return Err(Error::UnsuitableServer(msg));
        }
        tracing::warn!("{msg}");
    }
    let aof_enabled = info_field(&info, "aof_enabled") == Some("1");
    let mut save = redis::cmd("CONFIG");
    save.arg("GET").arg("save");
    let rdb_enabled = match query::<Vec<String>>(conn, node, save).await {
        Ok(pair) => Some(pair.get(1).is_some_and(|v| !v.trim().is_empty())),
        Err(_) => None, // CONFIG may be renamed or denied by ACL; not our business to fail.
    };
    Ok(ServerReport {
        version,
        maxmemory_policy,
        aof_enabled,
        rdb_enabled,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_info_and_versions() {
        let info =
            "# Server\r\nredis_version:7.0.15\r\n# Memory\r\nmaxmemory_policy:allkeys-lru\r\n";
        assert_eq!(info_field(info, "redis_version"), Some("7.0.15"));
        assert_eq!(info_field(info, "maxmemory_policy"), Some("allkeys-lru"));
        assert_eq!(info_field(info, "missing"), None);
        assert!(version_at_least("7.0.15", 7, 0));
        assert!(version_at_least("7.2.4", 7, 0));
        assert!(!version_at_least("6.2.14", 7, 0));
        assert!(!version_at_least("", 7, 0));
    }
}
