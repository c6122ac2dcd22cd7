//! Connection URLs: one node (`redis://…`, `rediss://…`, as redis-rs reads them) or a Redis
//! Cluster by its seed nodes (`redis+cluster://[user:password@]host:port[,host:port…]`,
//! `rediss+cluster://…` with the `tls` feature), a form redis-rs does not read: it is split
//! here into one node URL per seed, with the credentials and TLS of the whole.
//!
//! A master watched by Redis Sentinel:
//! `redis+sentinel://[user:password@]host:port[,host:port…]/<master-name>[/db]`
//! (`rediss+sentinel://…` with the `tls` feature): the hosts are sentinels, asked without
//! credentials; the credentials, TLS and database are those of the master (and of whichever
//! replica is promoted in its place).
//!
//! Errors never quote the URL: it may hold a password.

use crate::error::{Error, Result};

/// What a URL asks to connect to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// One node: the URL as given, for redis-rs.
    Single(String),
    /// A cluster: one `redis://` (or `rediss://`) URL per seed node, and how to address any
    /// other node of it.
    Cluster {
        /// A URL per seed node.
        seeds: Vec<String>,
        /// Builds the URL of a node found later (the owner of a slot).
        nodes: NodeUrl,
    },
    /// A master found through Redis Sentinel.
    Sentinel {
        /// A `redis://host:port/` URL per sentinel (no credentials, no TLS).
        sentinels: Vec<String>,
        /// The name the sentinels know the master by.
        master: String,
        /// The URL of the master's address as the sentinels give it: credentials, TLS and
        /// database of the whole URL.
        nodes: NodeUrl,
    },
}

/// Builds a node URL with the credentials, TLS and options of the cluster URL.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct NodeUrl {
    scheme: &'static str,
    /// `user:password@`, as given (percent-encoded), or empty.
    userinfo: String,
    /// `?…` as given, or empty.
    query: String,
    /// `db` of the path (sentinel URLs), or empty.
    db: String,
}

impl std::fmt::Debug for NodeUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the credentials.
        f.debug_struct("NodeUrl")
            .field("scheme", &self.scheme)
            .finish_non_exhaustive()
    }
}

impl NodeUrl {
    /// The URL of the node at `host:port` (an IPv6 address is bracketed).
    pub fn url(&self, host: &str, port: u16) -> String {
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        format!(
            "{}://{}{host}:{port}/{}{}",
            self.scheme, self.userinfo, self.db, self.query
        )
    }
}

const CLUSTER_SCHEMES: [(&str, &str); 2] = [
    ("redis+cluster://", "redis"),
    ("rediss+cluster://", "rediss"),
];

const SENTINEL_SCHEMES: [(&str, &str); 2] = [
    ("redis+sentinel://", "redis"),
    ("rediss+sentinel://", "rediss"),
];

/// `url` as it may be shown to a person or written to a log: the password is replaced by
/// `***` (a user name is kept) and the query (`?…`, which may carry a password) is dropped;
/// scheme, hosts, ports, database and master name stay, so that the message says what was
/// tried. Works on every URL form the store connects with, and on text that is no URL at all.
pub fn redacted(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    let rest = rest.split_once('?').map_or(rest, |(before, _)| before);
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let authority = match authority.rfind('@') {
        Some(i) => {
            let (userinfo, hosts) = (&authority[..i], &authority[i + 1..]);
            match userinfo.split_once(':') {
                Some((user, _)) if !user.is_empty() => format!("{user}:***@{hosts}"),
                _ => format!("***@{hosts}"),
            }
        }
        None => authority.to_owned(),
    };
    format!("{scheme}{authority}{path}")
}

/// Reads `url`: a cluster URL is split into its seeds, a sentinel URL into its sentinels and
/// master name; any other URL is left to redis-rs.
pub(crate) fn parse(url: &str) -> Result<Target> {
    if let Some((rest, scheme)) = SENTINEL_SCHEMES
        .iter()
        .find_map(|(prefix, scheme)| Some((url.strip_prefix(prefix)?, *scheme)))
    {
        return parse_sentinel(rest, scheme);
    }
    let Some((rest, scheme)) = CLUSTER_SCHEMES
        .iter()
        .find_map(|(prefix, scheme)| Some((url.strip_prefix(prefix)?, *scheme)))
    else {
        return Ok(Target::Single(url.to_owned()));
    };
    let invalid = |what: &str| Error::InvalidConfig(format!("invalid Redis Cluster URL: {what}"));
    let (authority, path, query) = split_after_scheme(rest);
    if !(path.is_empty() || path == "0") {
        return Err(invalid(
            "a cluster has only database 0 (no path other than `/` or `/0`)",
        ));
    }
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(i) => (&authority[..=i], &authority[i + 1..]),
        None => ("", authority),
    };
    let nodes = NodeUrl {
        scheme,
        userinfo: userinfo.to_owned(),
        query: query.to_owned(),
        db: String::new(),
    };
    let mut seeds = Vec::new();
    for seed in hosts.split(',') {
        let (host, port) = split_host_port(seed)
            .ok_or_else(|| invalid("each seed must be host:port, separated by commas"))?;
        seeds.push(nodes.url(host, port));
    }
    Ok(Target::Cluster { seeds, nodes })
}

/// The part of a sentinel URL after its scheme:
/// `[user:password@]host:port[,host:port…]/<master-name>[/db][?…]`.
fn parse_sentinel(rest: &str, scheme: &'static str) -> Result<Target> {
    let invalid = |what: &str| {
        Error::InvalidConfig(format!(
            "invalid Redis Sentinel URL: {what} (the form is \
             redis+sentinel://[user:password@]host:port[,host:port…]/<master-name>[/db])"
        ))
    };
    let (authority, path, query) = split_after_scheme(rest);
    let mut parts = path.split('/');
    let master = parts.next().unwrap_or_default();
    if master.is_empty() {
        return Err(invalid("no master name after the sentinels"));
    }
    if !master
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    {
        return Err(invalid(
            "a master name is letters, digits, `.`, `_` and `-`",
        ));
    }
    let db = match parts.next() {
        None | Some("") => String::new(),
        Some(db) => {
            db.parse::<u32>()
                .map_err(|_| invalid("the database after the master name must be a number"))?;
            db.to_owned()
        }
    };
    if parts.next().is_some_and(|p| !p.is_empty()) {
        return Err(invalid("nothing may follow the database"));
    }
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(i) => (&authority[..=i], &authority[i + 1..]),
        None => ("", authority),
    };
    let mut sentinels = Vec::new();
    for host in hosts.split(',') {
        let (host, port) = split_host_port(host)
            .ok_or_else(|| invalid("each sentinel must be host:port, separated by commas"))?;
        let plain = NodeUrl {
            scheme: "redis",
            userinfo: String::new(),
            query: String::new(),
            db: String::new(),
        };
        sentinels.push(plain.url(host, port));
    }
    Ok(Target::Sentinel {
        sentinels,
        master: master.to_owned(),
        nodes: NodeUrl {
            scheme,
            userinfo: userinfo.to_owned(),
            query: query.to_owned(),
            db,
        },
    })
}

/// `host:port` or `[v6]:port`; `None` if either part is missing or the port is not a number.
fn split_host_port(seed: &str) -> Option<(&str, u16)> {
    let (host, port) = if let Some(rest) = seed.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        (host, after.strip_prefix(':')?)
    } else {
        seed.rsplit_once(':')?
    };
    if host.is_empty() || host.contains(['/', '@', ',']) {
        return None;
    }
    Some((host, port.parse().ok().filter(|p| *p != 0)?))
}

/// Splits what follows a URL's scheme into its authority (credentials and hosts), its path
/// (without the leading `/`) and its query (with the leading `?`, or empty).
fn split_after_scheme(rest: &str) -> (&str, &str, &str) {
    let (rest, query) = match rest.find('?') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, ""),
    };
    (authority, path, query)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(url: &str) -> (Vec<String>, NodeUrl) {
        match parse(url).unwrap() {
            Target::Cluster { seeds, nodes } => (seeds, nodes),
            other => panic!("{url}: {other:?}"),
        }
    }

    #[test]
    fn redacted_urls_keep_the_address_and_never_the_password() {
        for (url, shown) in [
            ("redis://127.0.0.1:6379/", "redis://127.0.0.1:6379/"),
            ("redis://:s3cret@h:1/2", "redis://***@h:1/2"),
            ("redis://app:s3cret@h:1/", "redis://app:***@h:1/"),
            ("rediss://app:p@ss@h:1/0", "rediss://app:***@h:1/0"),
            ("redis://s3cret@h:1", "redis://***@h:1"),
            (
                "redis+cluster://app:s3cret@a:1,b:2",
                "redis+cluster://app:***@a:1,b:2",
            ),
            (
                "redis+sentinel://:s3cret@s1:26379,s2:26379/mymaster/3",
                "redis+sentinel://***@s1:26379,s2:26379/mymaster/3",
            ),
            (
                "redis+unix:///tmp/redis.sock?db=1&pass=s3cret",
                "redis+unix:///tmp/redis.sock",
            ),
            ("h:1?password=s3cret", "h:1"),
            ("user:s3cret@h:1", "user:***@h:1"),
        ] {
            assert_eq!(redacted(url), shown, "{url}");
            assert!(!redacted(url).contains("s3cret"));
        }
    }

    #[test]
    fn single_node_urls_are_left_as_they_are() {
        for url in [
            "redis://127.0.0.1/",
            "rediss://u:p@h:1/2",
            "redis+unix:///tmp/s",
        ] {
            assert_eq!(parse(url).unwrap(), Target::Single(url.to_owned()));
        }
    }

    #[test]
    fn cluster_urls_split_into_seeds() {
        let (seeds, nodes) = cluster("redis+cluster://127.0.0.1:7000,127.0.0.1:7001");
        assert_eq!(
            seeds,
            ["redis://127.0.0.1:7000/", "redis://127.0.0.1:7001/"]
        );
        assert_eq!(nodes.url("10.0.0.9", 7005), "redis://10.0.0.9:7005/");

        let (seeds, nodes) = cluster("rediss+cluster://me:p%40ss@a.example:7000,[::1]:7001/0?x=1");
        assert_eq!(
            seeds,
            [
                "rediss://me:p%40ss@a.example:7000/?x=1",
                "rediss://me:p%40ss@[::1]:7001/?x=1"
            ]
        );
        assert_eq!(nodes.url("::2", 7), "rediss://me:p%40ss@[::2]:7/?x=1");
        assert!(
            !format!("{nodes:?}").contains("p%40ss"),
            "no password in Debug"
        );

        let (seeds, _) = cluster("redis+cluster://:secret@h:1/");
        assert_eq!(seeds, ["redis://:secret@h:1/"]);
    }

    fn sentinel(url: &str) -> (Vec<String>, String, NodeUrl) {
        match parse(url).unwrap() {
            Target::Sentinel {
                sentinels,
                master,
                nodes,
            } => (sentinels, master, nodes),
            other => panic!("{url}: {other:?}"),
        }
    }

    #[test]
    fn sentinel_urls_split_into_sentinels_and_master() {
        let (sentinels, master, nodes) =
            sentinel("redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster");
        assert_eq!(
            sentinels,
            ["redis://127.0.0.1:26379/", "redis://127.0.0.1:26380/"]
        );
        assert_eq!(master, "mymaster");
        assert_eq!(nodes.url("10.0.0.2", 6380), "redis://10.0.0.2:6380/");

        let (sentinels, master, nodes) =
            sentinel("rediss+sentinel://me:p%40ss@[::1]:26379/orders.main/3?x=1");
        assert_eq!(
            sentinels,
            ["redis://[::1]:26379/"],
            "no credentials to sentinels"
        );
        assert_eq!(master, "orders.main");
        assert_eq!(nodes.url("h", 1), "rediss://me:p%40ss@h:1/3?x=1");
        assert!(!format!("{nodes:?}").contains("p%40ss"));

        let (_, master, nodes) = sentinel("redis+sentinel://h:1/m/");
        assert_eq!(
            (master.as_str(), nodes.url("h", 2).as_str()),
            ("m", "redis://h:2/")
        );
    }

    #[test]
    fn bad_sentinel_urls_are_refused_without_quoting_them() {
        for url in [
            "redis+sentinel://",
            "redis+sentinel://h:1",
            "redis+sentinel://h:1/",
            "redis+sentinel:///m",
            "redis+sentinel://h/m",
            "redis+sentinel://h:x/m",
            "redis+sentinel://h:0/m",
            "redis+sentinel://h:70000/m",
            "redis+sentinel://h:1,/m",
            "redis+sentinel://u:secret@h:1/m/x",
            "redis+sentinel://u:secret@h:1/m/1/2",
            "redis+sentinel://u:secret@h:1/m%20x",
        ] {
            match parse(url) {
                Err(Error::InvalidConfig(msg)) => assert!(!msg.contains("secret"), "{msg}"),
                other => panic!("{url}: {other:?}"),
            }
        }
    }

    #[test]
    fn bad_cluster_urls_are_refused_without_quoting_them() {
        for url in [
            "redis+cluster://",
            "redis+cluster://h",
            "redis+cluster://h:x",
            "redis+cluster://h:0",
            "redis+cluster://h:1,",
            "redis+cluster://h:1,,h:2",
            "redis+cluster://u:secret@h:1/3",
            "redis+cluster://u:secret@:1",
            "redis+cluster://[::1:7000",
        ] {
            match parse(url) {
                Err(Error::InvalidConfig(msg)) => assert!(!msg.contains("secret"), "{msg}"),
                other => panic!("{url}: {other:?}"),
            }
        }
    }
}
