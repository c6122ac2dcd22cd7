//! What the orchestrator reads from Redis and from `/proc`: `INFO` fields, command statistics,
//! a census of the keys (type, `MEMORY USAGE`), the slow log with each script call named, and
//! the CPU time of a process.
//!
//! dq calls its scripts as Redis Functions (`FCALL dq_<hash>_<script>`); BullMQ and the
//! ceilings of `redis-benchmark` call theirs by `EVALSHA`. Both count as script calls.

use std::collections::BTreeMap;

use dq::store::redis::layout::{KeyName, SCRIPT_KEYS, script_of_function};
use redis::{Connection, Value};
use serde::Serialize;

use crate::Result;

/// Runs one admin command.
pub fn cmd<T: redis::FromRedisValue>(conn: &mut Connection, args: &[&str]) -> Result<T> {
    let (name, rest) = args.split_first().ok_or("empty command")?;
    Ok(redis::cmd(name).arg(rest).query(conn)?)
}

/// `INFO <section>`.
pub fn info(conn: &mut Connection, section: &str) -> Result<String> {
    cmd(conn, &["INFO", section])
}

/// The value of `field` in an `INFO` reply.
pub fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

/// A numeric `INFO` field.
pub fn info_u64(conn: &mut Connection, section: &str, field: &str) -> Result<u64> {
    let info = info(conn, section)?;
    info_field(&info, field)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("INFO {section} has no numeric {field}").into())
}

/// One line of `INFO commandstats`.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct CmdStat {
    /// Calls.
    pub calls: u64,
    /// Total microseconds.
    pub usec: u64,
}

impl CmdStat {
    /// Microseconds per call.
    pub fn usec_per_call(&self) -> f64 {
        if self.calls == 0 {
            0.0
        } else {
            self.usec as f64 / self.calls as f64
        }
    }
}

/// `INFO commandstats`, by command name (`fcall`, `evalsha`, `zadd`, `client|setinfo`, ...).
///
/// Redis counts the commands scripts run too, so `zadd` includes those inside `fcall`.
pub fn commandstats(conn: &mut Connection) -> Result<BTreeMap<String, CmdStat>> {
    let info = info(conn, "commandstats")?;
    let mut out = BTreeMap::new();
    for line in info.lines() {
        let Some((name, rest)) = line
            .trim()
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let mut stat = CmdStat::default();
        for kv in rest.split(',') {
            match kv.split_once('=') {
                Some(("calls", v)) => stat.calls = v.parse().unwrap_or(0),
                Some(("usec", v)) => stat.usec = v.parse().unwrap_or(0),
                _ => {}
            }
        }
        out.insert(name.to_owned(), stat);
    }
    Ok(out)
}

/// The commands that call a script: dq's `FCALL`s, and the `EVALSHA`s of BullMQ and of the
/// ceilings.
pub const SCRIPT_COMMANDS: &[&str] = &["fcall", "fcall_ro", "evalsha", "evalsha_ro", "eval"];

/// Every [`SCRIPT_COMMANDS`] line together: the time Redis spent in script calls (a drain
/// runs one peer alone, so these are its calls only).
pub fn script_calls(stats: &BTreeMap<String, CmdStat>) -> CmdStat {
    SCRIPT_COMMANDS
        .iter()
        .filter_map(|name| stats.get(*name))
        .fold(CmdStat::default(), |a, s| CmdStat {
            calls: a.calls + s.calls,
            usec: a.usec + s.usec,
        })
}

/// Commands a client sends (as opposed to commands a script runs inside Redis): the ones dq
/// and redis-rs use, plus the other blocking and scripting commands a queue could use.
pub const SENT_BY_CLIENTS: &[&str] = &[
    "evalsha",
    "eval",
    "evalsha_ro",
    "eval_ro",
    "fcall",
    "fcall_ro",
    "function",
    "blpop",
    "brpop",
    "blmove",
    "bzpopmin",
    "script",
    "ping",
    "hello",
    "client",
    "select",
    "subscribe",
    "psubscribe",
];

/// Calls of [`SENT_BY_CLIENTS`] commands in a `commandstats` map.
pub fn client_sent_calls(stats: &BTreeMap<String, CmdStat>) -> u64 {
    stats
        .iter()
        .filter(|(name, _)| {
            let base = name.split('|').next().unwrap_or(name);
            SENT_BY_CLIENTS.contains(&base)
        })
        .map(|(_, s)| s.calls)
        .sum()
}

/// The largest key found by a census.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LargestKey {
    /// Its name.
    pub key: String,
    /// Its type.
    pub key_type: String,
    /// `MEMORY USAGE key SAMPLES 0`, bytes.
    pub bytes: u64,
}

/// Every key: how many, of which type, their memory, the largest.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Census {
    /// `DBSIZE`.
    pub dbsize: u64,
    /// Keys per type.
    pub by_type: BTreeMap<String, u64>,
    /// `MEMORY USAGE … SAMPLES 0` summed over every key, bytes.
    pub total_usage_bytes: u64,
    /// The largest key.
    pub largest: Option<LargestKey>,
}

/// SCAN + TYPE + `MEMORY USAGE key SAMPLES 0` over every key (bounded: at most `max_rounds`
/// SCAN calls).
pub fn census(conn: &mut Connection, max_rounds: usize) -> Result<Census> {
    let mut out = Census {
        dbsize: cmd(conn, &["DBSIZE"])?,
        ..Census::default()
    };
    let mut cursor = "0".to_owned();
    for _ in 0..max_rounds {
        let (next, keys): (String, Vec<String>) = cmd(conn, &["SCAN", &cursor, "COUNT", "1000"])?;
        for key in keys {
            let key_type: String = cmd(conn, &["TYPE", &key])?;
            let bytes: Option<u64> = cmd(conn, &["MEMORY", "USAGE", &key, "SAMPLES", "0"])?;
            let bytes = bytes.unwrap_or(0);
            *out.by_type.entry(key_type.clone()).or_insert(0) += 1;
            out.total_usage_bytes += bytes;
            if out.largest.as_ref().is_none_or(|l| bytes > l.bytes) {
                out.largest = Some(LargestKey {
                    key,
                    key_type,
                    bytes,
                });
            }
        }
        cursor = next;
        if cursor == "0" {
            break;
        }
    }
    Ok(out)
}

/// One slow-log entry.
#[derive(Clone, Debug)]
pub struct SlowEntry {
    /// How long the command ran, µs.
    pub micros: u64,
    /// Its arguments (Redis keeps at most 32, each cut at 128 bytes).
    pub args: Vec<String>,
}

/// Every entry of the slow log (`SLOWLOG GET -1`).
pub fn slowlog(conn: &mut Connection) -> Result<Vec<SlowEntry>> {
    let Value::Array(entries) = cmd::<Value>(conn, &["SLOWLOG", "GET", "-1"])? else {
        return Err("SLOWLOG GET: unexpected reply".into());
    };
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(fields) = entry else {
            continue;
        };
        let micros = match fields.get(2) {
            Some(Value::Int(us)) => *us as u64,
            _ => continue,
        };
        let args = match fields.get(3) {
            Some(Value::Array(args)) => args
                .iter()
                .map(|a| match a {
                    Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                    Value::SimpleString(s) => s.clone(),
                    other => format!("{other:?}"),
                })
                .collect(),
            _ => Vec::new(),
        };
        out.push(SlowEntry { micros, args });
    }
    Ok(out)
}

/// Whether a slow-log entry is a script call (not a command a script ran).
pub fn is_script_call(args: &[String]) -> bool {
    args.first()
        .is_some_and(|c| SCRIPT_COMMANDS.contains(&c.to_ascii_lowercase().as_str()))
}

/// The slow-log class of a call of dq's script `script`.
pub fn script_class(script: &str) -> String {
    format!("script:{script}")
}

/// What a slow-log entry was: `script:fetch`, `script:ack`, `blpop`, ...
///
/// dq's calls name their script (`FCALL dq_<hash>_<script>`). An `EVALSHA` is told by its
/// KEYS, read against the layout's table of each script's keys (fetch may name further
/// receipts, to delete, after its own keys); scripts that take the same keys would be named
/// together (`script:<one>|<other>`), and keys of no dq script are listed
/// (`evalsha:keys=…`).
pub fn classify(args: &[String]) -> String {
    let Some(name) = args.first() else {
        return "?".into();
    };
    let name = name.to_ascii_lowercase();
    if name == "fcall" || name == "fcall_ro" {
        let function = args.get(1).map_or("", String::as_str);
        return match script_of_function(function) {
            Some(script) => script_class(script),
            None => format!("{name}:{function}"),
        };
    }
    if name != "evalsha" && name != "eval" {
        return name;
    }
    let numkeys: usize = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(0);
    let keys: Vec<&String> = args.iter().skip(3).take(numkeys).collect();
    // The name after the partition's hash tag (`scheduled`, `fetch:<call id>`, …).
    let names: Vec<Option<KeyName>> = keys
        .iter()
        .map(|k| {
            k.rsplit_once("}:")
                .and_then(|(_, suffix)| KeyName::from_suffix(suffix))
        })
        .collect();
    let scripts: Vec<&str> = SCRIPT_KEYS
        .iter()
        .filter(|(_, want)| {
            let n = want.len();
            names.len() >= n
                && names[..n]
                    .iter()
                    .zip(*want)
                    .all(|(got, w)| *got == Some(*w))
                && (names.len() == n
                    || (want.last() == Some(&KeyName::FetchReceipt)
                        && names[n..].iter().all(|k| *k == Some(KeyName::FetchReceipt))))
        })
        .map(|(script, _)| *script)
        .collect();
    if scripts.is_empty() {
        let suffixes: Vec<&str> = keys
            .iter()
            .map(|k| k.rsplit(':').next().unwrap_or(k))
            .collect();
        return format!("{name}:keys={}", suffixes.join(","));
    }
    script_class(&scripts.join("|"))
}

/// Per-class totals of a slow log: calls, total µs, max µs.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SlowClass {
    /// Calls.
    pub calls: u64,
    /// Total µs.
    pub total_us: u64,
    /// Longest call, µs.
    pub max_us: u64,
    /// Mean µs per call.
    pub mean_us: f64,
    /// 99th percentile, µs.
    pub p99_us: u64,
}

/// Groups slow-log entries by [`classify`].
pub fn slow_classes(entries: &[SlowEntry]) -> BTreeMap<String, SlowClass> {
    let mut by: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for e in entries {
        by.entry(classify(&e.args)).or_default().push(e.micros);
    }
    by.into_iter()
        .map(|(name, mut us)| {
            us.sort_unstable();
            let total: u64 = us.iter().sum();
            let rank = ((0.99 * us.len() as f64).ceil() as usize).clamp(1, us.len());
            let class = SlowClass {
                calls: us.len() as u64,
                total_us: total,
                max_us: *us.last().unwrap_or(&0),
                mean_us: total as f64 / us.len().max(1) as f64,
                p99_us: us[rank - 1],
            };
            (name, class)
        })
        .collect()
}

/// User + system CPU time of process `pid` so far, in clock ticks (`/proc/<pid>/stat`).
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces) start at field 3.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(std::string::ToString::to_string).collect()
    }

    /// An `EVALSHA` with the KEYS of `script` on partition 0 of `bench.s3`.
    fn evalsha(script: &str, receipts: &[u64]) -> Vec<String> {
        let keys = dq::store::redis::layout::PartitionKeys::new(
            "bench",
            &dq::store::Queue::new(dq::Topic::new("bench.s3").unwrap(), 0),
        );
        // in the script's order; the keys `PartitionKeys::get` does not give are named per
        // call: enqueue's two receipt strings, fetch's receipt (then those it deletes)
        let mut per_call: Vec<String> = if script == "enqueue" {
            keys.enqueue_receipts(0).to_vec()
        } else {
            receipts.iter().map(|id| keys.fetch_receipt(*id)).collect()
        };
        per_call.reverse();
        let mut names: Vec<String> = Vec::new();
        for n in dq::store::redis::layout::script_keys(script).unwrap() {
            match keys.get(*n) {
                Some(k) => names.push(k.to_string()),
                None => names.extend(per_call.pop()),
            }
        }
        per_call.reverse();
        names.extend(per_call);
        let mut a = args(&["EVALSHA", "abc", &names.len().to_string()]);
        a.extend(names);
        a.extend(args(&["50", "30000", "1000", "100"]));
        a
    }

    /// dq's calls name their script's function; the class is the script.
    #[test]
    fn function_calls_are_named_by_their_script() {
        for (script, _) in SCRIPT_KEYS {
            let function = format!(
                "{}{}_{script}",
                dq::store::redis::layout::LIBRARY_PREFIX,
                "0123456789ab"
            );
            let mut call = args(&["FCALL", &function, "1", "k", "a"]);
            assert_eq!(classify(&call), script_class(script));
            assert!(is_script_call(&call));
            call[0] = "fcall_ro".into();
            assert_eq!(classify(&call), script_class(script));
        }
        assert_eq!(classify(&args(&["FCALL", "other", "0"])), "fcall:other");
        assert!(!is_script_call(&args(&["ZADD", "k", "1", "m"])));
    }

    #[test]
    fn scripts_are_told_apart_by_their_keys() {
        assert_eq!(classify(&evalsha("fetch", &[123])), "script:fetch");
        // with two earlier receipts to delete
        assert_eq!(classify(&evalsha("fetch", &[1, 2, 3])), "script:fetch");
        for script in [
            "fail", "ack", "enqueue", "extend", "release", "stats", "job",
        ] {
            assert_eq!(classify(&evalsha(script, &[])), script_class(script));
        }
        assert_eq!(classify(&evalsha("purge_dead", &[])), "script:purge_dead");
        // A receipt after keys of a script that takes none is not that script.
        assert!(classify(&evalsha("ack", &[1])).starts_with("evalsha:keys="));
        assert_eq!(classify(&args(&["BLPOP", "x", "5"])), "blpop");
    }

    #[test]
    fn commandstats_lines_parse() {
        let mut m = BTreeMap::new();
        m.insert("fcall".to_owned(), CmdStat { calls: 4, usec: 10 });
        m.insert("zadd".to_owned(), CmdStat { calls: 9, usec: 1 });
        m.insert("client|setinfo".to_owned(), CmdStat { calls: 2, usec: 1 });
        assert_eq!(client_sent_calls(&m), 6);
        assert_eq!(m["fcall"].usec_per_call(), 2.5);
        m.insert("evalsha_ro".to_owned(), CmdStat { calls: 1, usec: 5 });
        let both = script_calls(&m);
        assert_eq!((both.calls, both.usec), (5, 15));
    }

    #[test]
    fn own_cpu_time_is_readable() {
        assert!(cpu_ticks(std::process::id()).is_some());
    }
}
