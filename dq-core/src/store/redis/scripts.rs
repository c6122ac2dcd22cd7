//! The Lua scripts, built into one Redis Functions library per record-format level, and the
//! one place their replies and codes become Rust values.
//!
//! The library (`FUNCTION LOAD`) holds `lua/lib.lua` and every script's body, each wrapped as
//! a function of `(KEYS, ARGV)` and registered as `dq_<hash>_<script>` with the flags of the
//! layout's script table (`layout::script_of_function`). The store calls a script by `FCALL`,
//! and loads the library wherever the server lacks it (`ERR Function not found`: a restart
//! without persistence, a `FUNCTION FLUSH`, a new cluster node; see `conn.rs`).
//!
//! Redis runs a library's top level at `FUNCTION LOAD` with nothing but `redis` in reach (no
//! `pairs`, `string`, `struct`, …), so the top level only registers the functions; the first
//! call after a load runs `lib.lua`'s top level and builds every script's closure, once, and
//! every later call finds them built. That is the saving over `EVALSHA` of lib.lua prepended to
//! each script, which ran lib.lua's top level (some 40 closures and a few tables) on every
//! call. lib.lua's tables are therefore shared by every call: a script must never write them.
//!
//! The library is built once per record-format level: a process that reads fewer formats
//! than this dq knows (`ClientBuilder::format_level`) runs scripts whose `NEWEST_FORMAT` is
//! its own, so they treat the formats above it as newer ([`Scripts::reading`]). Its name is a
//! hash of its text, so two levels, or two dq versions, keep their own library on one server.
//! A library an earlier build left on a server costs a little memory and nothing else.

use std::sync::{Arc, LazyLock};

use redis::{ErrorKind, Script, ServerErrorKind, Value};

use super::conn::function_missing;
use super::layout::{KeyName, function_name, library_name, script_table};
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

/// One Redis Functions library: every script of one record-format level.
pub(crate) struct Library {
    /// `dq_<hash>` (`layout::library_name`).
    pub name: String,
    /// The text `FUNCTION LOAD` sends.
    pub code: String,
}

/// One script as the table lists it: its name, flags, KEYS and body (`lua/<name>.lua`).
struct Source {
    name: &'static str,
    flags: Flags,
    keys: &'static [KeyName],
    body: &'static str,
}

impl Library {
    /// The library of `scripts` over `lib` (lib.lua at one level). Its name is the hash of its
    /// text written under a fixed name, so the same lib.lua, bodies and flags always give the
    /// same name, and any change gives another.
    fn build(lib: &str, scripts: &[Source]) -> Library {
        let draft = library_code("dq", lib, scripts);
        let name = library_name(Script::new(&draft).get_hash());
        Library {
            code: library_code(&name, lib, scripts),
            name,
        }
    }
}

/// The text of library `name`. Each body becomes an anonymous function of `(KEYS, ARGV)`
/// (anonymous, so that no script's name shadows a lib.lua local its body calls), built with
/// lib.lua's top level by `dq_define__` on the first call after a load.
fn library_code(name: &str, lib: &str, scripts: &[Source]) -> String {
    let mut code = format!(
        "#!lua name={name}\n\
         -- dq's scripts, built by dq-core's store/redis/scripts.rs from lua/lib.lua and\n\
         -- lua/<script>.lua. Redis offers a library nothing but `redis` while it loads, so\n\
         -- lib.lua's top level and the scripts are built by the first call after a load.\n\
         local dq_scripts__ = {{}}\n\
         local dq_defined__ = false\n\
         local function dq_define__()\n\
         {lib}\n"
    );
    for s in scripts {
        code.push_str(&format!(
            "dq_scripts__.{} = function(KEYS, ARGV)\n{}\nend\n",
            s.name, s.body
        ));
    }
    code.push_str("dq_defined__ = true\nend\n");
    for s in scripts {
        code.push_str(&format!(
            "redis.register_function{{function_name = '{}', flags = {}, \
             callback = function(keys, args)\n\
             \x20 if not dq_defined__ then dq_define__() end\n\
             \x20 return dq_scripts__.{}(keys, args)\n\
             end}}\n",
            function_name(name, s.name),
            s.flags.lua(),
            s.name
        ));
    }
    code
}

/// One script: its name (for errors), its KEYS in order (from the layout's table), and the
/// function that runs it.
pub(crate) struct LuaScript {
    pub name: &'static str,
    pub keys: &'static [KeyName],
    /// The newest record format it reads (its `lib.lua`'s `NEWEST_FORMAT`).
    pub reads: u8,
    /// Its function: `dq_<hash>_<name>`, what `FCALL` names.
    pub function: String,
    /// The library that defines it: loaded (on a cluster, on the node that lacks it) when a
    /// call finds the function missing.
    pub library: Arc<Library>,
    /// Its metric handles (`op` = its name), registered on its first call.
    pub metrics: crate::metrics::StoreOpMetrics,
    #[cfg(test)]
    pub body: &'static str,
    #[cfg(test)]
    flags: Flags,
}

/// What a script declares to Redis (7.0+) when its function is registered, as the script
/// list says.
#[derive(Clone, Copy, Debug)]
enum Flags {
    /// None: Redis refuses the script at `maxmemory`, before it runs.
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
    /// The flags as `redis.register_function` takes them.
    fn lua(self) -> &'static str {
        match self {
            Flags::Writes => "{}",
            Flags::AllowOom => "{'allow-oom'}",
            Flags::NoWrites => "{'no-writes'}",
        }
    }

    /// The flags as `FUNCTION LIST` shows them.
    #[cfg(test)]
    fn listed(self) -> &'static [&'static str] {
        match self {
            Flags::Writes => &[],
            Flags::AllowOom => &["allow-oom"],
            Flags::NoWrites => &["no-writes"],
        }
    }
}

impl LuaScript {
    fn new(source: &Source, reads: u8, library: &Arc<Library>) -> Self {
        LuaScript {
            name: source.name,
            keys: source.keys,
            reads,
            function: function_name(&library.name, source.name),
            library: library.clone(),
            metrics: crate::metrics::StoreOpMetrics::new(source.name),
            #[cfg(test)]
            body: source.body,
            #[cfg(test)]
            flags: source.flags,
        }
    }
}

/// Builds [`Scripts`] from the layout's list: a field per script, its text from
/// `lua/<name>.lua`, all in one library.
macro_rules! loaded_scripts {
    ($($(#[doc = $doc:literal])* $name:ident ($flag:ident): [$($key:ident),* $(,)?];)*) => {
        /// All scripts, in one library (each names it: [`LuaScript::library`]).
        pub(crate) struct Scripts {
            $($(#[doc = $doc])* pub $name: LuaScript,)*
        }

        impl Scripts {
            fn load(reads: u8) -> Scripts {
                let sources = [$(Source {
                    name: stringify!($name),
                    flags: Flags::$flag,
                    keys: &[$(KeyName::$key),*],
                    body: include_str!(concat!("lua/", stringify!($name), ".lua")),
                }),*];
                let library = Arc::new(Library::build(&lib_reading(reads), &sources));
                let mut scripts = sources.iter().map(|s| LuaScript::new(s, reads, &library));
                Scripts {
                    $($name: scripts.next().expect("one script per entry"),)*
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

/// The scripts of a process that reads every format this dq knows, built on first use.
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
/// the Rust wrapper has a bug, so that is a protocol error; OOM keeps its own meaning; a
/// function the server still lacks (a `FUNCTION FLUSH` between the load and the call) did not
/// run, and is retryable like `NOSCRIPT`; a library the server refused to load is a bug of
/// this dq build (a protocol error naming what Redis said).
pub(crate) fn script_error(script: &LuaScript, e: redis::RedisError) -> Error {
    if e.code() == Some("OOM") {
        return Error::OutOfMemory;
    }
    if let Some(denied) = crate::error::permission_denied(&e) {
        return denied;
    }
    if function_missing(&e) {
        return Error::Redis(redis::RedisError::from((
            ErrorKind::Server(ServerErrorKind::NoScript),
            "the server lacks dq's function",
            script.function.clone(),
        )));
    }
    let text = e.to_string();
    if let Some(format) = newer_format(&text) {
        return Error::NewerFormat {
            format,
            reads: script.reads,
        };
    }
    if text.contains("dq expiry not after due") {
        return Error::InvalidExpiry(format!(
            "the expiry is not after the due time by the store's clock ({text})"
        ));
    }
    if let Some((job, delay_ms, max_delay_ms)) = delay_too_long(&text) {
        return Error::DelayTooLong {
            delay_ms,
            max_delay_ms,
            job,
        };
    }
    // (the batch's id is put in by the caller: store/redis/batches.rs)
    if text.contains("dq batch not found") {
        return Error::BatchNotFound(String::new());
    }
    if text.contains("dq batch closed") {
        return Error::BatchClosed(String::new());
    }
    if text.contains("dq bad arguments") {
        return Error::Protocol(format!(
            "script {} refused its arguments: {text}",
            script.name
        ));
    }
    if text.contains("Error registering functions") || text.contains("Error compiling") {
        return Error::Protocol(format!(
            "the server refused dq's scripts library {}: {text}",
            script.library.name
        ));
    }
    Error::Redis(e)
}

/// The numbers of `ERR dq delay too long: job <i> <ms> <max ms>` (enqueue.lua,
/// reschedule.lua: a due time beyond the topic's `max_delay`, refused before any write).
fn delay_too_long(text: &str) -> Option<(usize, u64, u64)> {
    let (_, rest) = text.split_once("dq delay too long: job ")?;
    let mut words = rest.split_whitespace();
    let job = words.next()?.parse().ok()?;
    let delay = words.next()?.parse().ok()?;
    let max = words.next()?.parse().ok()?;
    Some((job, delay, max))
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
            let used = (1..=40)
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

    /// A process reading only format 1 runs scripts that say so, in a library of its own
    /// (another text, so another name: both coexist on one server).
    #[test]
    fn scripts_read_the_process_level() {
        let legacy = Scripts::reading(LEGACY_FORMAT);
        assert_eq!(
            (legacy.fetch.reads, SCRIPTS.fetch.reads),
            (1, NEWEST_FORMAT)
        );
        assert!(
            legacy
                .fetch
                .library
                .code
                .contains("\nlocal NEWEST_FORMAT = 1\n")
        );
        assert!(
            SCRIPTS
                .fetch
                .library
                .code
                .contains(&format!("\nlocal NEWEST_FORMAT = {NEWEST_FORMAT}\n"))
        );
        assert_ne!(legacy.fetch.library.name, SCRIPTS.fetch.library.name);
        assert_eq!(
            crate::store::redis::layout::script_of_function(&legacy.fetch.function),
            Some("fetch")
        );
        assert!(std::ptr::eq(Scripts::reading(NEWEST_FORMAT), &*SCRIPTS));
        assert_eq!(newer_format("ERR dq newer format 3 script: ..."), Some(3));
    }

    /// The library loads on a real redis-server at every level (which also holds every body
    /// to Lua 5.1's limits, such as 60 upvalues per function: lib.lua's locals are upvalues of
    /// the bodies now), registers every script under its name with the flags of the table,
    /// and loading it twice (two processes at once) is no error.
    #[tokio::test]
    async fn the_library_loads_with_every_function_and_its_flags() {
        let server = dq_testkit::RedisServer::start();
        let mut conn = redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        for level in [LEGACY_FORMAT, NEWEST_FORMAT] {
            let scripts = Scripts::reading(level);
            let missing = redis::cmd("FCALL")
                .arg(&scripts.stats.function)
                .arg(0)
                .query_async::<redis::Value>(&mut conn)
                .await
                .unwrap_err();
            assert!(function_missing(&missing), "{missing}");
            for _ in 0..2 {
                let load = redis::cmd("FUNCTION")
                    .arg("LOAD")
                    .arg(&scripts.fetch.library.code)
                    .query_async::<String>(&mut conn)
                    .await;
                match load {
                    Ok(name) => assert_eq!(name, scripts.fetch.library.name),
                    Err(e) => assert!(super::super::conn::already_loaded(&e), "{e}"),
                }
            }
            let listed: Vec<redis::Value> = redis::cmd("FUNCTION")
                .arg("LIST")
                .arg("LIBRARYNAME")
                .arg(&scripts.fetch.library.name)
                .query_async(&mut conn)
                .await
                .unwrap();
            let functions = listed_functions(&listed, &scripts.fetch.library.name);
            let want: Vec<(String, Vec<String>)> = scripts
                .all()
                .iter()
                .map(|s| {
                    let flags = s.flags.listed().iter().map(|f| (*f).to_owned()).collect();
                    (s.function.clone(), flags)
                })
                .collect();
            let mut want = want;
            want.sort();
            assert_eq!(functions, want, "level {level}");
        }
    }

    /// `(name, flags)` of every function of `library` in a `FUNCTION LIST` reply, sorted.
    fn listed_functions(reply: &[redis::Value], library: &str) -> Vec<(String, Vec<String>)> {
        use redis::Value::{Array, BulkString, Map};
        let text = |v: &redis::Value| match v {
            BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            redis::Value::SimpleString(s) => s.clone(),
            _ => String::new(),
        };
        // RESP2 (arrays of field, value) or RESP3 (maps): the same fields either way.
        let fields = |v: &redis::Value| -> Vec<(String, redis::Value)> {
            match v {
                Array(items) => items
                    .chunks(2)
                    .map(|kv| (text(&kv[0]), kv[1].clone()))
                    .collect(),
                Map(items) => items.iter().map(|(k, v)| (text(k), v.clone())).collect(),
                _ => Vec::new(),
            }
        };
        let field = |v: &redis::Value, name: &str| {
            fields(v)
                .into_iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v)
        };
        let mut out = Vec::new();
        for lib in reply {
            if field(lib, "library_name").map(|v| text(&v)).as_deref() != Some(library) {
                continue;
            }
            let Some(Array(functions)) = field(lib, "functions") else {
                continue;
            };
            for f in &functions {
                let name = field(f, "name").map(|v| text(&v)).unwrap_or_default();
                let flags = match field(f, "flags") {
                    Some(Array(flags)) | Some(redis::Value::Set(flags)) => {
                        flags.iter().map(text).collect()
                    }
                    _ => Vec::new(),
                };
                out.push((name, flags));
            }
        }
        out.sort();
        out
    }

    /// lib.lua's top level runs once per load now, so its tables are shared by every call:
    /// no script writes one (a write would leak into every later call).
    #[test]
    fn no_script_writes_lib_tables() {
        let tables: Vec<&str> = LIB
            .lines()
            .filter_map(|l| l.strip_prefix("local "))
            .filter_map(|l| l.split_once(" = {"))
            .map(|(name, _)| name.trim())
            .collect();
        assert!(tables.contains(&"STATE"), "{tables:?}");
        for script in SCRIPTS.all() {
            for line in script.body.lines().map(str::trim) {
                for table in &tables {
                    let Some(rest) = line.strip_prefix(table) else {
                        continue;
                    };
                    let indexed = rest.starts_with('[') || rest.starts_with('.');
                    let assigns = rest.split_once('=').is_some_and(|(before, after)| {
                        !after.starts_with('=') && !before.ends_with(['~', '<', '>', '='])
                    });
                    assert!(
                        !(indexed && assigns),
                        "script {} writes lib.lua's table {table}: {line}",
                        script.name
                    );
                }
            }
        }
    }

    /// A function the server lacks (after a `FUNCTION FLUSH`) did not run: it is retryable,
    /// and surely not applied.
    #[test]
    fn a_missing_function_is_retryable() {
        let e = redis::RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "An error was signalled by the server",
            "Function not found".to_owned(),
        ));
        assert!(function_missing(&e));
        let typed = script_error(&SCRIPTS.ack, e);
        assert!(typed.is_retryable() && !typed.may_have_applied(), "{typed}");
        let other = redis::RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "An error was signalled by the server",
            "dq bad arguments: x".to_owned(),
        ));
        assert!(!function_missing(&other));
        assert!(matches!(
            script_error(&SCRIPTS.ack, other),
            Error::Protocol(_)
        ));
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
