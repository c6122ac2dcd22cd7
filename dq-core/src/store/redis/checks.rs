//! Checks run on connect: is this Redis fit to hold jobs?
//!
//! 1. Version ≥ 7.0 (scripts use `LPOP key count`, `ZRANGE … WITHSCORES` semantics of 7.x).
//! 2. `maxmemory-policy` is `noeviction`: any other policy lets Redis delete jobs silently
//!    under memory pressure. Refused unless the caller allows it, then a warning.
//! 3. Persistence: a warning when neither AOF nor RDB snapshots are on, since a restart of
//!    such a server loses every job.

use redis::aio::ConnectionManager;

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
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (ma, mi) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (ma, mi) >= (major, minor)
}

pub(crate) async fn check(
    conn: &mut ConnectionManager,
    allow_eviction: bool,
) -> Result<ServerReport> {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .arg("memory")
        .arg("persistence")
        .query_async(conn)
        .await
        .map_err(from_redis)?;
    let version = info_field(&info, "redis_version").unwrap_or("").to_string();
    if !version_at_least(&version, 7, 0) {
        return Err(Error::UnsuitableServer(format!(
            "dq needs Redis 7.0 or newer; this server is {version:?}"
        )));
    }
    let maxmemory_policy = info_field(&info, "maxmemory_policy")
        .unwrap_or("")
        .to_string();
    if maxmemory_policy != "noeviction" {
        let msg = format!(
            "maxmemory-policy is {maxmemory_policy:?}: Redis may evict jobs under memory \
             pressure; set it to noeviction (CONFIG SET maxmemory-policy noeviction)"
        );
        if !allow_eviction {
            return Err(Error::UnsuitableServer(msg));
        }
        tracing::warn!("{msg}");
    }
    let aof_enabled = info_field(&info, "aof_enabled") == Some("1");
    let rdb_enabled = match redis::cmd("CONFIG")
        .arg("GET")
        .arg("save")
        .query_async::<Vec<String>>(conn)
        .await
    {
        Ok(pair) => Some(pair.get(1).is_some_and(|v| !v.trim().is_empty())),
        Err(_) => None, // CONFIG may be renamed or denied by ACL; not our business to fail.
    };
    if !aof_enabled && rdb_enabled == Some(false) {
        tracing::warn!(
            "redis persistence is off (no AOF, no RDB snapshots): a restart of the server loses every job"
        );
    }
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
