//! The namespace's records on Redis, each a hash of its own outside every partition (on a
//! cluster, a slot of its own), touched only by calls of its own, never inside a partition's
//! script:
//!
//! - the topic registry `<ns>:topics`, topic → metadata record ([`layout::TopicRecord`]):
//!   `topic.lua`, `HGETALL`, `HDEL`. A client reads it once per topic per process (it caches
//!   it);
//! - the live workers `<ns>:workers`, worker id → heartbeat: `workers.lua`;
//! - the periodic schedules `<ns>:schedules`, name → `<cursor_ms>|<definition>`:
//!   `schedules.lua`;
//! - the record-format registry `<ns>:formats` (level, hold, one field per live process):
//!   `formats.lua`;
//! - the payload shapes `<ns>:shapes`, topic → `<format>|<shape>` ([`crate::shape`]): plain
//!   `HSET`, `HGET`;
//!
//! and the store's clock, Redis `TIME`.

use std::time::Duration;

use async_trait::async_trait;
use redis::Value;

use super::layout::{self, PartitionKeys, TopicRecord};
use super::scripts::{SCRIPTS, unexpected};
use super::store::{RedisStore, ms};
use crate::error::{Error, Result, from_redis};
use crate::format::{FormatLevel, FormatRegistry, ProcessInfo, check_format};
use crate::job::Queue;
use crate::names::Topic;
use crate::schedule::{ScheduleOutcome, ScheduleRecord, check_schedule_name};
use crate::shape::PayloadShape;
use crate::store::catalog::{Catalog, read_shape};
use crate::topic::TopicMeta;
use crate::workers::WorkerInfo;

/// How long the live workers' hash lasts when a schedule change creates it (no worker beats
/// into it yet): a worker starting meanwhile still finds the generation moved.
const TOUCHED_HASH_TTL: Duration = Duration::from_secs(60);

#[async_trait]
impl Catalog for RedisStore {
    async fn register_topic(&self, topic: &Topic, partitions: u16) -> Result<TopicMeta> {
        let s = &SCRIPTS.topic;
        let key = self.topics_key();
        let partitions = partitions.to_string();
        let reply = match self
            .run_on_key(s, &key, &[topic.as_str().as_bytes(), partitions.as_bytes()])
            .await
        {
            // At `maxmemory` Redis refuses the (writing) function before it runs; a topic
            // already recorded is only read, which a plain `HGET` still does there.
            Err(Error::OutOfMemory) => {
                let record = self.topic_record(topic).await?.ok_or(Error::OutOfMemory)?;
                return Ok(TopicMeta::new(
                    topic.clone(),
                    record.partitions,
                    record.created_ms,
                ));
            }
            other => other?,
        };
        let text = match &reply {
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            Value::SimpleString(t) => t.clone(),
            _ => return Err(unexpected(s.name, "topic record", &reply)),
        };
        let record = TopicRecord::decode(&text)?;
        Ok(TopicMeta::new(
            topic.clone(),
            record.partitions,
            record.created_ms,
        ))
    }

    /// Every topic of the registry, by name (one `HGETALL`: a namespace has few topics).
    async fn topics(&self) -> Result<Vec<TopicMeta>> {
        let key = self.topics_key();
        let mut all: Vec<(String, String)> = self
            .conn
            .call(async |conn| redis::cmd("HGETALL").arg(&key).query_async(conn).await)
            .await
            .map_err(from_redis)?;
        all.sort();
        all.into_iter()
            .map(|(name, text)| {
                let topic = Topic::new(name.clone()).map_err(|e| {
                    Error::Protocol(format!("topic registry holds an invalid topic: {e}"))
                })?;
                let record = TopicRecord::decode(&text)?;
                Ok(TopicMeta::new(topic, record.partitions, record.created_ms))
            })
            .collect()
    }

    /// Counts the records of every partition of the recorded count (`HLEN` of each `jobs`
    /// hash, one call per partition: each is its own slot), and deletes the registry field
    /// only if all are empty. Counters and delivery tokens stay (tokens must never repeat on a partition).
    async fn reset_topic(&self, topic: &Topic) -> Result<Option<TopicMeta>> {
        let Some(record) = self.topic_record(topic).await? else {
            return Ok(None);
        };
        let mut jobs: u64 = 0;
        for p in 0..record.partitions {
            let k = PartitionKeys::new(&self.options.namespace, &Queue::new(topic.clone(), p));
            let n: u64 = self
                .conn
                .call(async |conn| redis::cmd("HLEN").arg(&k.jobs).query_async(conn).await)
                .await
                .map_err(from_redis)?;
            jobs += n;
        }
        if jobs > 0 {
            return Err(Error::TopicNotEmpty {
                topic: topic.to_string(),
                jobs,
            });
        }
        let key = self.topics_key();
        let _: u64 = self
            .conn
            .call(async |conn| {
                redis::cmd("HDEL")
                    .arg(&key)
                    .arg(topic.as_str())
                    .query_async(conn)
                    .await
            })
            .await
            .map_err(from_redis)?;
        Ok(Some(TopicMeta::new(
            topic.clone(),
            record.partitions,
            record.created_ms,
        )))
    }

    async fn beat_worker(&self, worker: &WorkerInfo, ttl: Duration) -> Result<u64> {
        worker.validate(ttl)?;
        let record = worker.encode()?;
        let ttl_ms = ms(ttl).to_string();
        let reply = self
            .workers_call(&[b"beat", worker.id.as_bytes(), ttl_ms.as_bytes(), &record])
            .await?;
        let generation = match &reply {
            Value::Array(pair) => match pair.as_slice() {
                [Value::Int(_), Value::Int(generation)] => u64::try_from(*generation).ok(),
                _ => None,
            },
            _ => None,
        };
        generation.ok_or_else(|| unexpected(SCRIPTS.workers.name, "(expiry, generation)", &reply))
    }

    /// Bumps the generation in the live workers' hash; a hash no worker keeps yet lasts
    /// a minute, enough for a worker starting at that moment to beat into it.
    async fn touch_schedules(&self) -> Result<()> {
        let ttl_ms = ms(TOUCHED_HASH_TTL).to_string();
        match self.workers_call(&[b"touch", ttl_ms.as_bytes()]).await? {
            Value::Int(_) => Ok(()),
            other => Err(unexpected(SCRIPTS.workers.name, "generation", &other)),
        }
    }

    async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        let s = &SCRIPTS.workers;
        let reply = self.workers_call(&[b"list"]).await?;
        let Value::Array(items) = reply else {
            return Err(unexpected(s.name, "array", &reply));
        };
        let int = |v: &Value| -> Result<u64> {
            match v {
                Value::BulkString(b) => std::str::from_utf8(b)
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .ok_or_else(|| unexpected(s.name, "time", v)),
                _ => Err(unexpected(s.name, "time", v)),
            }
        };
        let mut out = Vec::with_capacity(items.len() / 3);
        for triple in items.chunks(3) {
            let [expires, beat, Value::BulkString(record)] = triple else {
                return Err(Error::Protocol(format!(
                    "{}: a heartbeat is not (expiry, beat, record)",
                    s.name
                )));
            };
            out.push(WorkerInfo::decode(record, int(beat)?, int(expires)?)?);
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    async fn remove_worker(&self, id: &str) -> Result<bool> {
        let s = &SCRIPTS.workers;
        match self.workers_call(&[b"remove", id.as_bytes()]).await? {
            Value::Int(n) => Ok(n > 0),
            other => Err(unexpected(s.name, "count", &other)),
        }
    }

    async fn put_schedule(&self, record: &ScheduleRecord) -> Result<ScheduleOutcome> {
        record.validate()?;
        let cursor = record.next_ms.to_string();
        let reply = self
            .schedules_call(&[
                b"put",
                record.name.as_bytes(),
                cursor.as_bytes(),
                &record.definition,
            ])
            .await?;
        match reply {
            Value::Int(1) => Ok(ScheduleOutcome::Created),
            Value::Int(2) => Ok(ScheduleOutcome::Updated),
            Value::Int(0) => Ok(ScheduleOutcome::Unchanged),
            other => Err(unexpected(SCRIPTS.schedules.name, "put outcome", &other)),
        }
    }

    async fn remove_schedule(&self, name: &str) -> Result<bool> {
        check_schedule_name(name)?;
        match self.schedules_call(&[b"remove", name.as_bytes()]).await? {
            Value::Int(n) => Ok(n > 0),
            other => Err(unexpected(SCRIPTS.schedules.name, "count", &other)),
        }
    }

    async fn schedules(&self) -> Result<Vec<ScheduleRecord>> {
        let s = &SCRIPTS.schedules;
        let reply = self.schedules_call(&[b"list"]).await?;
        let Value::Array(items) = reply else {
            return Err(unexpected(s.name, "array", &reply));
        };
        let mut out = Vec::with_capacity(items.len() / 3);
        for triple in items.chunks(3) {
            let [
                Value::BulkString(name),
                Value::BulkString(cursor),
                Value::BulkString(definition),
            ] = triple
            else {
                return Err(Error::Protocol(format!(
                    "{}: a schedule is not (name, cursor, definition)",
                    s.name
                )));
            };
            let name = String::from_utf8_lossy(name).into_owned();
            let next_ms = std::str::from_utf8(cursor)
                .ok()
                .and_then(|c| c.parse().ok())
                .ok_or_else(|| {
                    Error::Protocol(format!("{}: schedule {name:?} has no cursor", s.name))
                })?;
            out.push(ScheduleRecord {
                name,
                next_ms,
                definition: definition.clone(),
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    async fn advance_schedule(&self, name: &str, from_ms: u64, to_ms: u64) -> Result<bool> {
        check_schedule_name(name)?;
        let (from, to) = (from_ms.to_string(), to_ms.to_string());
        match self
            .schedules_call(&[b"advance", name.as_bytes(), from.as_bytes(), to.as_bytes()])
            .await?
        {
            Value::Int(n) => Ok(n == 1),
            other => Err(unexpected(
                SCRIPTS.schedules.name,
                "advance outcome",
                &other,
            )),
        }
    }

    async fn put_payload_shape(&self, topic: &Topic, shape: Option<&PayloadShape>) -> Result<()> {
        let key = layout::shapes_key(&self.options.namespace);
        let bytes = shape.map(PayloadShape::encode);
        let _: i64 = self
            .conn
            .call(async |conn| {
                let cmd = match &bytes {
                    Some(bytes) => redis::cmd("HSET")
                        .arg(&key)
                        .arg(topic.as_str())
                        .arg(bytes)
                        .clone(),
                    None => redis::cmd("HDEL").arg(&key).arg(topic.as_str()).clone(),
                };
                cmd.query_async(conn).await
            })
            .await
            .map_err(from_redis)?;
        Ok(())
    }

    async fn payload_shape(&self, topic: &Topic) -> Result<Option<PayloadShape>> {
        let key = layout::shapes_key(&self.options.namespace);
        let bytes: Option<Vec<u8>> = self
            .conn
            .call(async |conn| {
                redis::cmd("HGET")
                    .arg(&key)
                    .arg(topic.as_str())
                    .query_async(conn)
                    .await
            })
            .await
            .map_err(from_redis)?;
        Ok(bytes.and_then(|b| read_shape(topic, &b)))
    }

    async fn now_ms(&self) -> Result<u64> {
        let (secs, micros): (u64, u64) = self
            .conn
            .call(async |conn| redis::cmd("TIME").query_async(conn).await)
            .await
            .map_err(from_redis)?;
        Ok(secs * 1000 + micros / 1000)
    }
    fn formats(&self) -> &crate::format::Formats {
        &self.formats
    }

    async fn beat_process(
        &self,
        process: &ProcessInfo,
        ttl: Duration,
        workers_read: u8,
    ) -> Result<FormatLevel> {
        process.validate()?;
        check_format(workers_read)?;
        let record = process.encode()?;
        let (ttl_ms, reads, workers_read) = (
            ms(ttl).max(1).to_string(),
            process.reads.to_string(),
            workers_read.to_string(),
        );
        let reply = self
            .formats_call(&[
                b"beat",
                process.id.as_bytes(),
                ttl_ms.as_bytes(),
                reads.as_bytes(),
                workers_read.as_bytes(),
                &record,
            ])
            .await?;
        let (registered, level) = applied_level(&reply)?;
        if !registered {
            return Err(Error::FormatTooOld {
                level: level.level,
                reads: process.reads,
            });
        }
        Ok(level)
    }

    async fn format_registry(&self) -> Result<FormatRegistry> {
        let s = &SCRIPTS.formats;
        let reply = self.formats_call(&[b"list"]).await?;
        let Value::Array(items) = reply else {
            return Err(unexpected(s.name, "array", &reply));
        };
        let [level, hold, rest @ ..] = items.as_slice() else {
            return Err(unexpected(s.name, "(level, hold, …)", &Value::Array(items)));
        };
        let level = level_of(level, hold)?;
        let mut processes = Vec::with_capacity(rest.len() / 4);
        for four in rest.chunks(4) {
            let [expires, beat, _reads, Value::BulkString(record)] = four else {
                return Err(Error::Protocol(format!(
                    "{}: a registration is not (expiry, beat, reads, record)",
                    s.name
                )));
            };
            processes.push(ProcessInfo::decode(
                record,
                number(s.name, beat)?,
                number(s.name, expires)?,
            )?);
        }
        processes.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(FormatRegistry::new(level, processes))
    }

    async fn remove_process(&self, id: &str) -> Result<bool> {
        match self.formats_call(&[b"remove", id.as_bytes()]).await? {
            Value::Int(n) => Ok(n > 0),
            other => Err(unexpected(SCRIPTS.formats.name, "count", &other)),
        }
    }

    async fn hold_format(&self, level: u8) -> Result<FormatLevel> {
        check_format(level)?;
        let arg = level.to_string();
        let reply = self.formats_call(&[b"hold", arg.as_bytes()]).await?;
        let (held, now) = applied_level(&reply)?;
        if !held {
            return Err(Error::InvalidConfig(format!(
                "the namespace already writes format {}: a hold at {level} cannot lower it \
                 (the level never goes back)",
                now.level
            )));
        }
        Ok(now)
    }

    async fn release_format(&self) -> Result<FormatLevel> {
        let reply = self.formats_call(&[b"release"]).await?;
        match &reply {
            Value::Array(pair) => match pair.as_slice() {
                [level, hold] => level_of(level, hold),
                _ => Err(unexpected(SCRIPTS.formats.name, "(level, hold)", &reply)),
            },
            _ => Err(unexpected(SCRIPTS.formats.name, "(level, hold)", &reply)),
        }
    }
}

/// Reads `formats.lua`'s `{applied, level, hold}` reply (beat, hold).
fn applied_level(reply: &Value) -> Result<(bool, FormatLevel)> {
    match reply {
        Value::Array(three) => match three.as_slice() {
            [Value::Int(applied), level, hold] => Ok((*applied == 1, level_of(level, hold)?)),
            _ => Err(unexpected(
                SCRIPTS.formats.name,
                "(applied, level, hold)",
                reply,
            )),
        },
        _ => Err(unexpected(
            SCRIPTS.formats.name,
            "(applied, level, hold)",
            reply,
        )),
    }
}

/// The level and hold of a `formats.lua` reply (a hold of 0 is none).
fn level_of(level: &Value, hold: &Value) -> Result<FormatLevel> {
    let name = SCRIPTS.formats.name;
    let format = |v: &Value| -> Result<u8> {
        u8::try_from(number(name, v)?).map_err(|_| unexpected(name, "format", v))
    };
    let (level, hold) = (format(level)?, format(hold)?);
    Ok(FormatLevel::new(level, (hold > 0).then_some(hold)))
}

/// An integer of a script reply, as an integer or as text.
fn number(script: &str, v: &Value) -> Result<u64> {
    match v {
        Value::Int(n) => u64::try_from(*n).map_err(|_| unexpected(script, "number", v)),
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| unexpected(script, "number", v)),
        _ => Err(unexpected(script, "number", v)),
    }
}

/// The namespace-wide calls' own helpers.
impl RedisStore {
    /// The registry's key in this namespace.
    fn topics_key(&self) -> String {
        layout::topics_key(&self.options.namespace)
    }

    /// `topic`'s record in the registry, if any.
    async fn topic_record(&self, topic: &Topic) -> Result<Option<TopicRecord>> {
        let key = self.topics_key();
        let text: Option<String> = self
            .conn
            .call(async |conn| {
                redis::cmd("HGET")
                    .arg(&key)
                    .arg(topic.as_str())
                    .query_async(conn)
                    .await
            })
            .await
            .map_err(from_redis)?;
        text.map(|t| TopicRecord::decode(&t)).transpose()
    }

    /// Runs `workers.lua` with `args` after the op.
    async fn workers_call(&self, args: &[&[u8]]) -> Result<Value> {
        let key = layout::workers_key(&self.options.namespace);
        self.run_on_key(&SCRIPTS.workers, &key, args).await
    }

    /// Runs `formats.lua` with `args` after the op.
    async fn formats_call(&self, args: &[&[u8]]) -> Result<Value> {
        let key = layout::formats_key(&self.options.namespace);
        self.run_on_key(&SCRIPTS.formats, &key, args).await
    }

    /// Runs `schedules.lua` with `args` after the op.
    async fn schedules_call(&self, args: &[&[u8]]) -> Result<Value> {
        let key = layout::schedules_key(&self.options.namespace);
        self.run_on_key(&SCRIPTS.schedules, &key, args).await
    }
}
