//! Stored-format fixtures: a portable text dump of one namespace (every key with its type,
//! remaining TTL and values, binary bytes hex-escaped), written once by a fixture's generator
//! and loaded back by the drain test with plain commands (HSET, ZADD, RPUSH, SET, XADD,
//! PEXPIRE), so it loads into any Redis version and reads in a review. See `tests/fixtures/README.md`.
//!
//! The dump format, one key per block, keys sorted:
//!
//! ```text
//! # comment
//! <type> "<key>" <remaining ttl in ms, or ->
//!   hash:   "<field>" "<value>"     one line per field, fields sorted
//!   zset:   <score> "<member>"      one line per member, in score order
//!   list:   "<item>"                one line per item, head first
//!   string: "<value>"               one line
//!   stream: <id> "<field>" "<value>" …  one line per entry, oldest first
//! ```
//!
//! Inside quotes every byte outside printable ASCII, and `"` and `\`, is written `\xHH`.
//! Scores are written as Redis replies them (enough digits to read back the same double).

// The generator uses the dumper, the drain test the loader: each leaves the other half unused.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use dq::store::redis::layout;
use dq::store::{RedisOptions, RedisStore};
use dq_testkit::redis::{self, Connection};
use dq_testkit::{RedisServer, keys_in_namespace};

/// One key of a dump: its value and its remaining time to live.
#[derive(Clone, Debug, PartialEq)]
pub struct DumpedKey {
    /// The key's name.
    pub key: String,
    /// Remaining TTL in ms when dumped; `None` for a key that does not expire.
    pub ttl_ms: Option<u64>,
    /// Its value.
    pub value: Value,
}

/// The value of one key, by Redis type.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A hash: field → value, sorted by field.
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
    /// A sorted set: (score as Redis wrote it, member), in score order.
    Zset(Vec<(String, Vec<u8>)>),
    /// A list, head first.
    List(Vec<Vec<u8>>),
    /// A string.
    String(Vec<u8>),
    /// A stream: (entry id, its fields and values in order), oldest first.
    Stream(Vec<StreamEntry>),
}

/// One entry of a stream: its id (`<ms>-<seq>`) and its fields and values, in order.
pub type StreamEntry = (String, Vec<(Vec<u8>, Vec<u8>)>);

impl Value {
    fn type_name(&self) -> &'static str {
        match self {
            Value::Hash(_) => "hash",
            Value::Zset(_) => "zset",
            Value::List(_) => "list",
            Value::String(_) => "string",
            Value::Stream(_) => "stream",
        }
    }
}

/// Reads every key of namespace `ns` on `server` (found with SCAN), with its TTL.
pub fn read_namespace(server: &RedisServer, ns: &str) -> Vec<DumpedKey> {
    let mut con = server.connection();
    keys_in_namespace(server, ns)
        .into_iter()
        .map(|key| {
            let ty: String = query(&mut con, redis::cmd("TYPE").arg(&key));
            let value = match ty.as_str() {
                "hash" => {
                    let pairs: Vec<(Vec<u8>, Vec<u8>)> =
                        query(&mut con, redis::cmd("HGETALL").arg(&key));
                    Value::Hash(pairs.into_iter().collect())
                }
                "zset" => {
                    let pairs: Vec<(Vec<u8>, String)> = query(
                        &mut con,
                        redis::cmd("ZRANGE")
                            .arg(&key)
                            .arg(0)
                            .arg(-1)
                            .arg("WITHSCORES"),
                    );
                    Value::Zset(pairs.into_iter().map(|(m, s)| (s, m)).collect())
                }
                "list" => Value::List(query(
                    &mut con,
                    redis::cmd("LRANGE").arg(&key).arg(0).arg(-1),
                )),
                "string" => Value::String(query(&mut con, redis::cmd("GET").arg(&key))),
                "stream" => {
                    let entries: Vec<(String, Vec<Vec<u8>>)> =
                        query(&mut con, redis::cmd("XRANGE").arg(&key).arg("-").arg("+"));
                    Value::Stream(
                        entries
                            .into_iter()
                            .map(|(id, flat)| {
                                let pairs = flat
                                    .chunks(2)
                                    .map(|p| (p[0].clone(), p.get(1).cloned().unwrap_or_default()))
                                    .collect();
                                (id, pairs)
                            })
                            .collect(),
                    )
                }
                other => panic!("{key}: a {other} in the namespace; dq writes no such key"),
            };
            let pttl: i64 = query(&mut con, redis::cmd("PTTL").arg(&key));
            DumpedKey {
                key,
                ttl_ms: u64::try_from(pttl).ok(),
                value,
            }
        })
        .collect()
}

/// The dump text of `keys`, opening with the comment lines `header`.
pub fn to_text(header: &[&str], keys: &[DumpedKey]) -> String {
    let mut out = String::new();
    for line in header {
        writeln!(out, "# {line}").unwrap();
    }
    for k in keys {
        let ttl = k.ttl_ms.map_or_else(|| "-".to_owned(), |t| t.to_string());
        writeln!(
            out,
            "{} {} {ttl}",
            k.value.type_name(),
            quote(k.key.as_bytes())
        )
        .unwrap();
        match &k.value {
            Value::Hash(fields) => {
                for (f, v) in fields {
                    writeln!(out, "  {} {}", quote(f), quote(v)).unwrap();
                }
            }
            Value::Zset(members) => {
                for (score, m) in members {
                    writeln!(out, "  {score} {}", quote(m)).unwrap();
                }
            }
            Value::List(items) => {
                for item in items {
                    writeln!(out, "  {}", quote(item)).unwrap();
                }
            }
            Value::String(v) => writeln!(out, "  {}", quote(v)).unwrap(),
            Value::Stream(entries) => {
                for (id, fields) in entries {
                    write!(out, "  {id}").unwrap();
                    for (f, v) in fields {
                        write!(out, " {} {}", quote(f), quote(v)).unwrap();
                    }
                    writeln!(out).unwrap();
                }
            }
        }
    }
    out
}

/// Parses a dump written by [`to_text`]; panics naming the line of anything else.
pub fn parse(text: &str) -> Vec<DumpedKey> {
    let mut keys: Vec<DumpedKey> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let at = || format!("dump line {}: {line:?}", n + 1);
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let tokens = tokens(line).unwrap_or_else(|e| panic!("{}: {e}", at()));
        if line.starts_with("  ") {
            let Some(last) = keys.last_mut() else {
                panic!("{}: an entry before any key", at());
            };
            match (&mut last.value, tokens.as_slice()) {
                (Value::Hash(h), [f, v]) => {
                    h.insert(f.clone(), v.clone());
                }
                (Value::Zset(z), [score, m]) => {
                    let score = String::from_utf8(score.clone()).expect("a score is text");
                    score
                        .parse::<f64>()
                        .unwrap_or_else(|_| panic!("{}: bad score", at()));
                    z.push((score, m.clone()));
                }
                (Value::List(l), [item]) => l.push(item.clone()),
                (Value::String(s), [v]) if s.is_empty() => *s = v.clone(),
                (Value::Stream(entries), [id, rest @ ..])
                    if !rest.is_empty() && rest.len() % 2 == 0 =>
                {
                    let id = String::from_utf8(id.clone())
                        .unwrap_or_else(|_| panic!("{}: bad stream id", at()));
                    let fields = rest
                        .chunks(2)
                        .map(|p| (p[0].clone(), p[1].clone()))
                        .collect();
                    entries.push((id, fields));
                }
                _ => panic!("{}: does not fit key {}", at(), last.key),
            }
            continue;
        }
        let [ty, key, ttl] = tokens.as_slice() else {
            panic!("{}: expected `<type> \"<key>\" <ttl>`", at());
        };
        let value = match ty.as_slice() {
            b"hash" => Value::Hash(BTreeMap::new()),
            b"zset" => Value::Zset(Vec::new()),
            b"list" => Value::List(Vec::new()),
            b"string" => Value::String(Vec::new()),
            b"stream" => Value::Stream(Vec::new()),
            _ => panic!("{}: unknown type", at()),
        };
        let ttl_ms = match ttl.as_slice() {
            b"-" => None,
            t => Some(
                std::str::from_utf8(t)
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .unwrap_or_else(|| panic!("{}: bad ttl", at())),
            ),
        };
        keys.push(DumpedKey {
            key: String::from_utf8(key.clone()).unwrap_or_else(|_| panic!("{}: key", at())),
            ttl_ms,
            value,
        });
    }
    keys
}

/// Writes `keys` to `server` with plain commands (a stream's entries with `XADD` under their
/// own ids), each key with its TTL; panics if any of
/// them exists already (a fixture is loaded into a fresh server).
pub fn load(server: &RedisServer, keys: &[DumpedKey]) {
    let mut con = server.connection();
    for k in keys {
        let exists: i64 = query(&mut con, redis::cmd("EXISTS").arg(&k.key));
        assert_eq!(exists, 0, "{} exists before the fixture is loaded", k.key);
        let cmds = match &k.value {
            Value::Hash(fields) => {
                let mut c = redis::cmd("HSET");
                c.arg(&k.key);
                for (f, v) in fields {
                    c.arg(f.as_slice()).arg(v.as_slice());
                }
                vec![c]
            }
            Value::Zset(members) => {
                let mut c = redis::cmd("ZADD");
                c.arg(&k.key);
                for (score, m) in members {
                    c.arg(score).arg(m.as_slice());
                }
                vec![c]
            }
            Value::List(items) => {
                let mut c = redis::cmd("RPUSH");
                c.arg(&k.key);
                for item in items {
                    c.arg(item.as_slice());
                }
                vec![c]
            }
            Value::String(v) => {
                let mut c = redis::cmd("SET");
                c.arg(&k.key).arg(v.as_slice());
                vec![c]
            }
            Value::Stream(entries) => {
                assert!(!entries.is_empty(), "{}: an empty stream", k.key);
                entries
                    .iter()
                    .map(|(id, fields)| {
                        let mut c = redis::cmd("XADD");
                        c.arg(&k.key).arg(id);
                        for (f, v) in fields {
                            c.arg(f.as_slice()).arg(v.as_slice());
                        }
                        c
                    })
                    .collect()
            }
        };
        for cmd in &cmds {
            let () = query(&mut con, cmd);
        }
        if let Some(ttl) = k.ttl_ms {
            let set: i64 = query(&mut con, redis::cmd("PEXPIRE").arg(&k.key).arg(ttl.max(1)));
            assert_eq!(set, 1, "PEXPIRE {}", k.key);
        }
    }
}

/// Reads and loads the dump file `path` into `server`; returns what it loaded.
pub fn load_file(server: &RedisServer, path: &Path) -> Vec<DumpedKey> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read the fixture dump {}: {e}", path.display()));
    let keys = parse(&text);
    assert!(!keys.is_empty(), "{} holds no key", path.display());
    load(server, &keys);
    keys
}

/// The violations of the store's invariants in namespace `ns` on `url` (empty when all is
/// well): the layout's own check (`layout::Snapshot::violations`).
pub async fn violations(url: &str, ns: &str) -> Vec<String> {
    let store = RedisStore::connect(
        url,
        RedisOptions {
            namespace: ns.to_owned(),
            ..RedisOptions::default()
        },
    )
    .await
    .expect("connect for the invariant check");
    let snapshot = layout::Snapshot::read(&store)
        .await
        .expect("read the namespace");
    snapshot
        .violations()
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// `bytes` quoted, with every byte outside printable ASCII, `"` and `\` written `\xHH`.
pub fn quote(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() + 2);
    s.push('"');
    for &b in bytes {
        if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' {
            s.push(b as char);
        } else {
            write!(s, "\\x{b:02x}").unwrap();
        }
    }
    s.push('"');
    s
}

/// The tokens of one dump line: quoted strings (unescaped) and bare words.
fn tokens(line: &str) -> Result<Vec<Vec<u8>>, String> {
    let bytes = line.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b' ' => i += 1,
            b'"' => {
                let mut tok = Vec::new();
                i += 1;
                loop {
                    match bytes.get(i) {
                        None => return Err("an unclosed quote".into()),
                        Some(b'"') => break,
                        Some(b'\\') => {
                            let hex = line
                                .get(i + 1..i + 4)
                                .and_then(|h| h.strip_prefix('x'))
                                .and_then(|h| u8::from_str_radix(h, 16).ok())
                                .ok_or("a bad \\x escape")?;
                            tok.push(hex);
                            i += 4;
                        }
                        Some(&b) => {
                            tok.push(b);
                            i += 1;
                        }
                    }
                }
                i += 1;
                out.push(tok);
            }
            _ => {
                let end = line[i..].find(' ').map_or(bytes.len(), |e| i + e);
                out.push(bytes[i..end].to_vec());
                i = end;
            }
        }
    }
    Ok(out)
}

fn query<T: redis::FromRedisValue>(con: &mut Connection, cmd: &redis::Cmd) -> T {
    cmd.query(con)
        .unwrap_or_else(|e| panic!("redis command failed: {e}"))
}
