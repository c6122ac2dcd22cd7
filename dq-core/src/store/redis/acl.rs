//! The Redis ACL rule a dq process needs: the commands it sends and its scripts run, on the
//! keys of its namespace only (README "Secured Redis"; tested in `tests/secured_redis.rs`,
//! which runs client, worker and CLI as a user with exactly this rule and checks that Redis
//! denied nothing).

/// Every command a dq process sends or its scripts run, as `ACL SETUSER` names them
/// (`command|subcommand` for one subcommand only). No admin or dangerous command (no
/// `CONFIG`: the persistence check at connect reads it where it may and is skipped where it
/// may not), no `FLUSH*`, no `KEYS`, no pub/sub. On Redis 7.2 and later the `redis` crate
/// also sends `CLIENT SETINFO` on connect; its refusal is ignored (add `+client|setinfo`
/// there to keep the ACL log quiet: Redis 7.0 refuses a rule that names it).
pub const ACL_COMMANDS: &[&str] = &[
    // calls and connections
    "fcall",
    "function|load",
    "ping",
    "time",
    "hello",
    "select",
    "client|setname",
    "info",
    "role",
    "blpop",
    "wait",
    // Redis Cluster (routing and slot moves)
    "cluster|slots",
    "cluster|keyslot",
    "asking",
    "readonly",
    // what the scripts run, and the tools' reads
    "get",
    "set",
    "del",
    "exists",
    "append",
    "getrange",
    "rename",
    "pexpire",
    "pttl",
    "type",
    "scan",
    "hget",
    "hset",
    "hsetnx",
    "hdel",
    "hexists",
    "hgetall",
    "hincrby",
    "hkeys",
    "hlen",
    "hmget",
    "hscan",
    "llen",
    "lpush",
    "rpush",
    "rpop",
    "lrange",
    "ltrim",
    "zadd",
    "zcard",
    "zcount",
    "zlexcount",
    "zmscore",
    "zpopmin",
    "zrange",
    "zrank",
    "zrangebylex",
    "zrangebyscore",
    "zrevrangebyscore",
    "zrem",
    "zremrangebyrank",
    "zscore",
    // the event stream (topics that record events): the scripts append, readers read
    "xadd",
    "xdel",
    "xrange",
    "xrevrange",
    // the batches' outboxes (ARCHITECTURE.md §16): a relay that applied all it read trims
    "xtrim",
];

/// The ACL rule (what follows `ACL SETUSER <name> on ><password>`, or a `user` line of an ACL
/// file) that lets a dq process use `namespace` and nothing else: its keys (`~<namespace>:*`),
/// no channels, and [`ACL_COMMANDS`].
///
/// ```
/// let rule = dq_core::store::redis::acl_rule("myapp");
/// assert!(rule.starts_with("~myapp:* resetchannels -@all +fcall"));
/// ```
pub fn acl_rule(namespace: &str) -> String {
    let mut rule = format!("~{namespace}:* resetchannels -@all");
    for c in ACL_COMMANDS {
        rule.push_str(" +");
        rule.push_str(c);
    }
    rule
}
