//! The Lua scripts, loaded once, and the one place their replies and codes become Rust values.
//!
//! Each script is `lua/lib.lua` followed by its own file; the store sends it by SHA
//! (`EVALSHA`) and reloads it transparently after `NOSCRIPT` (a restart, a `SCRIPT FLUSH`, or,
//! on a cluster, a node that has not seen it yet: see `conn.rs`).
//!
//! The scripts are built once per record-format level: a process that reads fewer formats
//! than this dq knows (`ClientBuilder::format_level`) runs scripts whose `NEWEST_FORMAT` is
//! its own, so they treat the formats above it as newer ([`Scripts::reading`]).

use std::sync::LazyLock;

use redis::{Script, Value};

use super::layout::{KeyName, script_table};
use crate::error::{Error, Result};
use crate::format::{LEGACY_FORMAT, NEWEST_FORMAT};

const LIB: &str = include_str!("lua/lib.lua");

/// The line of `lib.lua` that says which formats a script reads; the loader rewrites it for
/// a process that reads fewer.
fn newest_format_line(reads: u8) -> String {
    format!("local NEWEST_FORMAT = {reads}\n")
}

/// `lib.lua` for a process that reads formats up to `reads`.
pub(super) fn lib_reading(reads: u8) -> String {
    let line = newest_format_line(NEWEST_FORMAT);
    assert!(
        LIB.contains(&line),
        "lib.lua declares `{}`",
        line.trim_end()
    );
    LIB.replacen(&line, &newest_format_line(reads), 1)
}

/// One script: its name (for errors), its KEYS in order (from the layout's table), and the
/// loaded `Script`.
pub(crate) struct LuaScript {
    pub name: &'static str,
    pub keys: &'static [KeyName],
    /// The newest record format it reads (its `lib.lua`'s `NEWEST_FORMAT`).
    pub reads: u8,
    pub script: Script,
    /// The full text sent by `SCRIPT LOAD` (on a cluster, to the node that lacks it).
    pub source: String,
    /// Its metric handles (`op` = its name), registered on its first call.
    pub metrics: crate::metrics::StoreOpMetrics,
    #[cfg(test)]
    pub body: &'static str,
}

/// What a script declares to Redis (7.0+) in its shebang line, as the script list says.
#[derive(Clone, Copy)]
enum Flags {
    /// None: Redis refuses the script at `maxmemory`.
    Writes,
    /// Scripts that only move, shrink or rewrite jobs keep working when Redis is at
    /// `maxmemory`: acks, leases and failures must never stall behind a full server.
    AllowOom,
    /// Scripts that only read declare it, which also lets them run at `maxmemory`: reading a
    /// job, the stats or a listing must work when the server is full, when they matter most.
    /// (A `MULTI` of the same reads is refused there: Redis denies every queued command at
    /// `maxmemory`.)
    NoWrites,
}

impl Flags {
    fn shebang(self) -> &'static str {
        match self {
            Flags::Writes => "",
            Flags::AllowOom => "#!lua flags=allow-oom\n",
            Flags::NoWrites => "#!lua flags=no-writes\n",
        }
    }
}

impl LuaScript {
    /// `lib` (`lib.lua` for the process's format level) then `body`, under `flags`' shebang.
    fn new(
        name: &'static str,
        flags: Flags,
        keys: &'static [KeyName],
        (lib, reads): (&str, u8),
        body: &'static str,
    ) -> Self {
        let source = format!("{}{lib}\n{body}", flags.shebang());
        LuaScript {
            name,
            keys,
            reads,
            script: Script::new(&source),
            source,
            metrics: crate::metrics::StoreOpMetrics::new(name),
            #[cfg(test)]
            body,
        }
    }
}

/// Builds [`Scripts`] from the layout's list: a field per script, its text from
/// `lua/<name>.lua`.
macro_rules! loaded_scripts {
    ($($(#[doc = $doc:literal])* $name:ident ($flag:ident): [$($key:ident),* $(,)?];)*) => {
        /// All scripts, loaded.
        pub(crate) struct Scripts {
            $($(#[doc = $doc])* pub $name: LuaScript,)*
        }

        impl Scripts {
            fn load(reads: u8) -> Scripts {
                let lib = lib_reading(reads);
                Scripts {
                    $($name: LuaScript::new(
                        stringify!($name),
                        Flags::$flag,
                        &[$(KeyName::$key),*],
                        (&lib, reads),
                        include_str!(concat!("lua/", stringify!($name), ".lua")),
                    ),)*
                }
            }

            /// Every script, in the list's order.
            #[cfg(test)]
            fn all(&self) -> Vec<&LuaScript> {
                vec![$(&self.$name),*]
            }
        }
    };
}
script_table!(loaded_scripts);

/// The scripts of a process that reads every format this dq knows, loaded on first use.
/// (The namespace-wide scripts, which touch no job record, are the same at every level.)
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts::load(NEWEST_FORMAT));

/// The scripts of a process that reads only the legacy format (an upgrade test's old dq).
static LEGACY_SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts::load(LEGACY_FORMAT));

impl Scripts {
    /// The scripts for a process that reads record formats up to `reads`.
    pub(crate) fn reading(reads: u8) -> &'static Scripts {
        if reads <= LEGACY_FORMAT {
            &LEGACY_SCRIPTS
        } else {
            &SCRIPTS
        }
    }
}

/// Turns a script error into a typed error. Scripts raise `ERR dq bad arguments: …` only when
/// the Rust wrapper has a bug, so that is a protocol error; OOM keeps its own meaning.
pub(crate) fn script_error(script: &LuaScript, e: redis::RedisError) -> Error {
    if e.code() == Some("OOM") {
        return Error::OutOfMemory;
    }
    let text = e.to_string();
    if let Some(format) = newer_format(&text) {
        return Error::NewerFormat {
            format,
            reads: script.reads,
        };
    }
    if text.contains("dq bad arguments") {
        return Error::Protocol(format!(
            "script {} refused its arguments: {text}",
            script.name
        ));
    }
    Error::Redis(e)
}

/// The format of `ERR dq newer format <f>`, the reply of a script that met a newer record
/// (lib.lua `newer_error`) before any write.
fn newer_format(text: &str) -> Option<u8> {
    let (_, rest) = text.split_once("dq newer format ")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Reads script replies with errors that name the script and the field.
pub(crate) struct Reply {
    script: &'static str,
    items: std::vec::IntoIter<Value>,
}

impl Reply {
    pub fn new(script: &'static str, value: Value) -> Result<Self> {
        match value {
            Value::Array(items) => Ok(Reply {
                script,
                items: items.into_iter(),
            }),
            other => Err(unexpected(script, "array", &other)),
        }
    }

    pub fn remaining(&self) -> usize {
        self.items.len()
    }

    fn next(&mut self, what: &str) -> Result<Value> {
        self.items.next().ok_or_else(|| {
            Error::Protocol(format!("script {}: reply ends before {what}", self.script))
        })
    }

    pub fn int(&mut self, what: &str) -> Result<i64> {
        let v = self.next(what)?;
        as_int(&v).ok_or_else(|| unexpected(self.script, what, &v))
    }

    pub fn bytes(&mut self, what: &str) -> Result<Vec<u8>> {
        match self.next(what)? {
            Value::BulkString(b) => Ok(b),
            Value::SimpleString(s) => Ok(s.into_bytes()),
            v => Err(unexpected(self.script, what, &v)),
        }
    }

    /// Bytes, or `None` for a nil (a Lua `false`).
    pub fn optional_bytes(&mut self, what: &str) -> Result<Option<Vec<u8>>> {
        match self.next(what)? {
            Value::Nil => Ok(None),
            Value::BulkString(b) => Ok(Some(b)),
            v => Err(unexpected(self.script, what, &v)),
        }
    }

    /// An integer, or `None` for a nil (a Lua `false`).
    pub fn optional_int(&mut self, what: &str) -> Result<Option<i64>> {
        match self.next(what)? {
            Value::Nil => Ok(None),
            v => as_int(&v)
                .map(Some)
                .ok_or_else(|| unexpected(self.script, what, &v)),
        }
    }

    pub fn string(&mut self, what: &str) -> Result<String> {
        let b = self.bytes(what)?;
        String::from_utf8(b)
            .map_err(|_| Error::Protocol(format!("script {}: {what} is not text", self.script)))
    }
}

/// An integer reply, also accepting numbers sent as text.
pub(crate) fn as_int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

/// A status string reply (one code character per item, for the batch scripts).
pub(crate) fn codes(script: &'static str, v: Value, expected: usize) -> Result<Vec<u8>> {
    let bytes = match v {
        Value::BulkString(b) => b,
        Value::SimpleString(s) => s.into_bytes(),
        Value::Okay => b"OK".to_vec(),
        other => return Err(unexpected(script, "codes", &other)),
    };
    if bytes.len() != expected {
        return Err(Error::Protocol(format!(
            "script {script}: {} codes for {expected} items",
            bytes.len()
        )));
    }
    Ok(bytes)
}

pub(crate) fn unexpected(script: &str, what: &str, v: &Value) -> Error {
    Error::Protocol(format!("script {script}: unexpected {what}: {v:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each script's header documents, in order, exactly the KEYS the layout's table gives its
    /// Rust wrapper, and the script uses no other.
    #[test]
    fn headers_match_key_lists_in_order() {
        let all = SCRIPTS.all();
        assert_eq!(
            all.len(),
            crate::store::redis::layout::SCRIPT_KEYS.len(),
            "every script of the layout's table is loaded"
        );
        for script in all {
            // `-- KEYS[i] name  pattern ...`, numbered from 1 without gaps.
            let documented: Vec<(usize, &str)> = script
                .body
                .lines()
                .filter_map(|l| l.strip_prefix("-- KEYS["))
                .filter_map(|l| l.split_once(']'))
                .filter_map(|(i, rest)| Some((i.parse().ok()?, rest.split_whitespace().next()?)))
                .collect();
            let numbers: Vec<usize> = documented.iter().map(|(i, _)| *i).collect();
            assert_eq!(
                numbers,
                (1..=documented.len()).collect::<Vec<_>>(),
                "script {}: KEYS lines out of order",
                script.name
            );
            let names: Vec<&str> = documented.iter().map(|(_, n)| *n).collect();
            assert_eq!(
                crate::store::redis::layout::script_keys(script.name),
                Some(script.keys),
                "script {}: loaded with the layout's KEYS",
                script.name
            );
            let table: Vec<&str> = script.keys.iter().map(|k| k.as_str()).collect();
            assert_eq!(
                names, table,
                "script {}: header vs layout table",
                script.name
            );
            assert!(
                script.body.contains("-- ARGV"),
                "script {} documents no ARGV",
                script.name
            );
            assert!(
                script.body.contains("Returns"),
                "script {} documents no reply",
                script.name
            );
            let used = (1..=20)
                .filter(|i| script.body.contains(&format!("KEYS[{i}]")))
                .count();
            assert_eq!(
                used,
                script.keys.len(),
                "script {} uses KEYS it does not document",
                script.name
            );
        }
    }

    /// `topic.lua` writes the record format the layout reads.
    #[test]
    fn topic_record_version_matches() {
        let v = crate::store::redis::layout::TOPIC_RECORD_VERSION;
        assert!(
            SCRIPTS
                .topic
                .body
                .contains(&format!("'v={v};partitions=%d;created_ms=%d'")),
            "topic.lua does not write format version {v}"
        );
    }

    /// `fetch.lua` waits for an index held by a newer record as long as the embedded store.
    #[test]
    fn newer_record_wait_matches() {
        let ms = crate::store::lease::NEWER_RECORD_WAIT.as_millis();
        assert!(
            SCRIPTS
                .fetch
                .body
                .contains(&format!("local NEWER_WAIT_MS = {ms}\n")),
            "fetch.lua's NEWER_WAIT_MS is not {ms}"
        );
    }

    /// A process reading only format 1 runs scripts that say so (and a different text).
    #[test]
    fn scripts_read_the_process_level() {
        let legacy = Scripts::reading(LEGACY_FORMAT);
        assert_eq!(
            (legacy.fetch.reads, SCRIPTS.fetch.reads),
            (1, NEWEST_FORMAT)
        );
        assert!(legacy.fetch.source.contains("\nlocal NEWEST_FORMAT = 1\n"));
        assert!(
            SCRIPTS
                .fetch
                .source
                .contains(&format!("\nlocal NEWEST_FORMAT = {NEWEST_FORMAT}\n"))
        );
        assert!(std::ptr::eq(Scripts::reading(NEWEST_FORMAT), &*SCRIPTS));
        assert_eq!(newer_format("ERR dq newer format 3 script: ..."), Some(3));
    }

    /// The receipt life in `enqueue.lua` is the one the client's retry window is built on.
    #[test]
    fn receipt_life_matches() {
        let ms = crate::store::produce::ENQUEUE_RECEIPT_LIFE.as_millis();
        assert!(
            SCRIPTS
                .enqueue
                .body
                .contains(&format!("local RECEIPT_MS = {ms}\n")),
            "enqueue.lua's RECEIPT_MS is not {ms}"
        );
    }
}
