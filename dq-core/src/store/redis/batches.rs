//! The batches role on Redis: `batch.lua` on the batch's own key, plain `ZADD`/`ZREM`/`ZRANGE`
//! on the namespace's index, `XRANGE`/`XDEL` on a partition's outbox (ARCHITECTURE.md §16).

use std::time::Duration;

use async_trait::async_trait;
use redis::Value;

use super::layout;
use super::scripts::{SCRIPTS, unexpected};
use super::store::{RedisStore, ms};
use crate::batch::{
    BatchCounts, BatchId, BatchInfo, BatchSpec, BatchThen, FailurePolicy, IndexEntry, MemberId,
    MemberPage, MemberState, OutboxNote, Reservation,
};
use crate::error::{Error, Result, from_redis};
use crate::job::Queue;
use crate::names::{JobKey, Topic};
use crate::store::batches::Batches;

impl RedisStore {
    /// Runs `batch.lua` on batch `id`'s key. Under durable enqueue
    /// ([`RedisOptions::durable_enqueue`](crate::RedisOptions::durable_enqueue)) every call
    /// that writes (all but `get` and `members`) is followed by `WAIT` for those replicas on
    /// the batch's master, and fails with [`Error::NotReplicated`] when fewer confirm: an open,
    /// a reservation, an apply, a close or a done mark acknowledged to its caller then
    /// survives a failover (a relay keeps its notes, a producer repeats its call).
    async fn batch_call(&self, id: &BatchId, args: &[&[u8]]) -> Result<Value> {
        let key = layout::batch_key(&self.options.namespace, id.as_str());
        let writes = !matches!(args.first(), Some(&b"get") | Some(&b"members"));
        // (the calls that grow the record are refused at maxmemory: batch_grow.lua)
        let script = match args.first() {
            Some(&b"open") | Some(&b"reserve") => &SCRIPTS.batch_grow,
            _ => &SCRIPTS.batch,
        };
        let result = match self.options.durable_enqueue {
            Some((replicas, timeout)) if writes => self
                .run_on_key_waiting(script, &key, args, (replicas, timeout))
                .await
                .and_then(|(reply, acked)| {
                    RedisStore::replicated(Some((replicas, timeout)), Some(acked)).map(|()| reply)
                }),
            _ => self.run_on_key(script, &key, args).await,
        };
        result.map_err(|e| match e {
            Error::BatchNotFound(_) => Error::BatchNotFound(id.to_string()),
            Error::BatchClosed(_) => Error::BatchClosed(id.to_string()),
            other => other,
        })
    }

    async fn index(&self, cmd: redis::Cmd) -> Result<Value> {
        self.conn
            .call(async |conn| cmd.query_async(conn).await)
            .await
            .map_err(from_redis)
    }
}

/// How many items a batch record reply has (`batch.lua`'s header): a reservation's states
/// follow them.
const RECORD_ITEMS: usize = 21;

/// A reply's items as bytes (numbers as their text).
fn reply_items(reply: Vec<Value>) -> Result<Vec<Vec<u8>>> {
    reply
        .into_iter()
        .map(|v| match v {
            Value::BulkString(b) => Ok(b),
            Value::Int(n) => Ok(n.to_string().into_bytes()),
            other => Err(unexpected(SCRIPTS.batch.name, "batch field", &other)),
        })
        .collect()
}

/// Reads `batch.lua`'s record reply (its first item: created by this call).
fn decode_info(id: &BatchId, reply: Value) -> Result<Option<(bool, BatchInfo)>> {
    let items = match reply {
        Value::Nil => return Ok(None),
        Value::Array(items) => items,
        other => return Err(unexpected(SCRIPTS.batch.name, "batch record", &other)),
    };
    decode_record(id, reply_items(items)?).map(Some)
}

/// A record reply's items as the batch they describe.
fn decode_record(id: &BatchId, raw: Vec<Vec<u8>>) -> Result<(bool, BatchInfo)> {
    // (every field but the callback's payload is text)
    let text: Vec<String> = raw
        .iter()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect();
    if text.len() != RECORD_ITEMS {
        return Err(Error::Protocol(format!(
            "batch record of {} fields",
            text.len()
        )));
    }
    let num = |i: usize| -> u64 { text[i].parse::<i64>().map_or(0, |n| n.max(0) as u64) };
    if text[1] != "1" {
        return Err(Error::Protocol(format!(
            "batch {id} is of record format {:?}, newer than this dq reads",
            text[1]
        )));
    }
    let topic = || Topic::new(text[3].clone());
    let then = match text[2].as_str() {
        "c" => BatchThen::Callback {
            topic: topic()?,
            payload: raw[5].clone(),
        },
        "r" => BatchThen::Release {
            topic: topic()?,
            key: JobKey::stored(text[4].clone())?,
        },
        _ => BatchThen::Nothing,
    };
    let mut counts = BatchCounts::default();
    for (i, s) in MemberState::ALL.into_iter().enumerate() {
        counts.set(s, num(12 + i));
    }
    let info = BatchInfo {
        id: id.clone(),
        closed: !text[9].is_empty(),
        done: !text[10].is_empty(),
        created_ms: num(8),
        closed_ms: num(9),
        done_ms: num(10),
        reserved_ms: num(11),
        then,
        policy: text[6]
            .bytes()
            .next()
            .and_then(FailurePolicy::from_code)
            .unwrap_or_default(),
        retention: Duration::from_millis(num(7)),
        counts,
    };
    Ok((text[0] == "1", info))
}

fn must(id: &BatchId, reply: Value) -> Result<BatchInfo> {
    decode_info(id, reply)?
        .map(|(_, info)| info)
        .ok_or_else(|| Error::BatchNotFound(id.to_string()))
}

#[async_trait]
impl Batches for RedisStore {
    async fn batch_open(&self, id: &BatchId, spec: &BatchSpec) -> Result<(bool, BatchInfo)> {
        let (kind, topic, key, payload): (&[u8], &str, &str, &[u8]) = match &spec.then {
            BatchThen::Nothing => (b"n", "", "", b""),
            BatchThen::Callback { topic, payload } => (b"c", topic.as_str(), "", payload),
            BatchThen::Release { topic, key } => (b"r", topic.as_str(), key.as_str(), b""),
        };
        let retention = ms(spec.retention).max(1).to_string();
        let policy = [spec.policy.code()];
        let reply = self
            .batch_call(
                id,
                &[
                    b"open",
                    kind,
                    topic.as_bytes(),
                    key.as_bytes(),
                    payload,
                    &policy,
                    retention.as_bytes(),
                ],
            )
            .await?;
        let (created, info) =
            decode_info(id, reply)?.ok_or_else(|| Error::BatchNotFound(id.to_string()))?;
        // listed among the batches not done (again, harmlessly, for an existing one not done)
        if !info.done {
            let mut zadd = redis::cmd("ZADD");
            zadd.arg(layout::batch_index_key(&self.options.namespace))
                .arg("NX")
                .arg(info.created_ms)
                .arg(id.as_str());
            self.index(zadd).await?;
        }
        Ok((created, info))
    }

    async fn batch_reserve(&self, id: &BatchId, members: &[MemberId]) -> Result<Reservation> {
        let wires: Vec<String> = members.iter().map(MemberId::wire).collect();
        let mut args: Vec<&[u8]> = vec![b"reserve"];
        args.extend(wires.iter().map(String::as_bytes));
        let Value::Array(items) = self.batch_call(id, &args).await? else {
            return Err(Error::BatchNotFound(id.to_string()));
        };
        let mut raw = reply_items(items)?;
        if raw.len() != RECORD_ITEMS + members.len() {
            return Err(Error::Protocol(format!(
                "a reservation of {} members answered {} items",
                members.len(),
                raw.len()
            )));
        }
        let before = raw
            .split_off(RECORD_ITEMS)
            .into_iter()
            .map(|s| match s.first() {
                None => Ok(None),
                Some(&c) => MemberState::from_code(c)
                    .map(Some)
                    .ok_or_else(|| Error::Protocol(format!("batch member state {c:?}"))),
            })
            .collect::<Result<_>>()?;
        let (_, info) = decode_record(id, raw)?;
        Ok(Reservation { info, before })
    }

    async fn batch_apply(
        &self,
        id: &BatchId,
        notes: &[(MemberId, MemberState)],
    ) -> Result<Option<BatchInfo>> {
        let wires: Vec<(String, [u8; 1])> =
            notes.iter().map(|(m, s)| (m.wire(), [s.code()])).collect();
        let mut args: Vec<&[u8]> = vec![b"apply"];
        for (w, s) in &wires {
            args.push(w.as_bytes());
            args.push(s);
        }
        let reply = self.batch_call(id, &args).await?;
        Ok(decode_info(id, reply)?.map(|(_, info)| info))
    }

    async fn batch_close(&self, id: &BatchId) -> Result<BatchInfo> {
        must(id, self.batch_call(id, &[b"close"]).await?)
    }

    async fn batch_mark_done(&self, id: &BatchId) -> Result<BatchInfo> {
        let info = must(id, self.batch_call(id, &[b"done"]).await?)?;
        self.forget_batch(id).await?;
        Ok(info)
    }

    async fn batch(&self, id: &BatchId) -> Result<Option<BatchInfo>> {
        Ok(decode_info(id, self.batch_call(id, &[b"get"]).await?)?.map(|(_, i)| i))
    }

    async fn batch_members(&self, id: &BatchId, cursor: u64, limit: usize) -> Result<MemberPage> {
        let c = cursor.to_string();
        let n = limit.max(1).to_string();
        let reply = self
            .batch_call(id, &[b"members", c.as_bytes(), n.as_bytes()])
            .await?;
        let Value::Array(items) = reply else {
            return Err(unexpected(SCRIPTS.batch.name, "members", &reply));
        };
        let mut items = items.into_iter().map(|v| match v {
            Value::BulkString(b) => {
                String::from_utf8(b).map_err(|_| Error::Protocol("batch member: not text".into()))
            }
            other => Err(unexpected(SCRIPTS.batch.name, "member", &other)),
        });
        let next: u64 = items
            .next()
            .transpose()?
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let mut members = Vec::new();
        while let (Some(m), Some(s)) = (items.next(), items.next()) {
            let (m, s) = (m?, s?);
            let state = s
                .bytes()
                .next()
                .and_then(MemberState::from_code)
                .ok_or_else(|| Error::Protocol(format!("batch member state {s:?}")))?;
            members.push((MemberId::from_wire(&m)?, state));
        }
        Ok(MemberPage {
            members,
            next: (next != 0).then_some(next),
        })
    }

    async fn open_batches(
        &self,
        after: Option<&IndexEntry>,
        limit: usize,
    ) -> Result<Vec<IndexEntry>> {
        let key = layout::batch_index_key(&self.options.namespace);
        let limit = limit.max(1);
        // (ordered by when each was opened, then by id; a walk resumes from `after`'s time
        // and skips the entries at or before it: it need not be listed any more)
        let (from, page) = match after {
            None => (0, limit),
            Some(a) => (a.opened_ms, limit.saturating_add(OPEN_BATCHES_SLACK)),
        };
        let mut out = Vec::with_capacity(limit);
        let mut offset = 0usize;
        // (bounded: each round reads a page further; many batches opened in the same ms as
        // `after` take more than one)
        for _ in 0..OPEN_BATCHES_ROUNDS {
            let mut range = redis::cmd("ZRANGE");
            range
                .arg(&key)
                .arg(from)
                .arg("+inf")
                .arg("BYSCORE")
                .arg("LIMIT")
                .arg(offset)
                .arg(page)
                .arg("WITHSCORES");
            let Value::Array(items) = self.index(range).await? else {
                return Ok(out);
            };
            let read = items.len() / 2;
            let mut items = items.into_iter();
            while let (Some(id), Some(score)) = (items.next(), items.next()) {
                let entry = index_entry(id, score)?;
                if after.is_some_and(|a| &entry <= a) {
                    continue;
                }
                out.push(entry);
                if out.len() == limit {
                    return Ok(out);
                }
            }
            if read < page {
                break;
            }
            offset += read;
        }
        Ok(out)
    }

    async fn open_batch_count(&self) -> Result<u64> {
        let mut zcard = redis::cmd("ZCARD");
        zcard.arg(layout::batch_index_key(&self.options.namespace));
        match self.index(zcard).await? {
            Value::Int(n) => Ok(u64::try_from(n).unwrap_or(0)),
            other => Err(unexpected("ZCARD", "a count", &other)),
        }
    }

    async fn forget_batch(&self, id: &BatchId) -> Result<()> {
        let mut zrem = redis::cmd("ZREM");
        zrem.arg(layout::batch_index_key(&self.options.namespace))
            .arg(id.as_str());
        self.index(zrem).await.map(drop)
    }

    async fn outbox(
        &self,
        queue: &Queue,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<OutboxNote>> {
        let start = match after {
            None => "-".to_owned(),
            Some(id) => {
                let (ms, seq) = note_id(id)?;
                format!("({ms}-{seq}")
            }
        };
        let k = self.keys(queue);
        let mut range = redis::cmd("XRANGE");
        range
            .arg(&k.outbox)
            .arg(start)
            .arg("+")
            .arg("COUNT")
            .arg(limit.max(1));
        let Value::Array(entries) = self.index(range).await? else {
            return Ok(Vec::new());
        };
        let mut notes = Vec::with_capacity(entries.len());
        for entry in entries {
            let Value::Array(mut parts) = entry else {
                return Err(Error::Protocol("outbox: entry is not an array".into()));
            };
            let (Some(Value::Array(fields)), Some(Value::BulkString(id))) =
                (parts.pop(), parts.pop())
            else {
                return Err(Error::Protocol("outbox: malformed entry".into()));
            };
            let id = String::from_utf8(id).map_err(|_| Error::Protocol("outbox id".into()))?;
            let (mut batch, mut key, mut outcome) = (None, None, None);
            for pair in fields.chunks(2) {
                if let [Value::BulkString(f), Value::BulkString(v)] = pair {
                    let v = String::from_utf8_lossy(v).into_owned();
                    match f.as_slice() {
                        b"b" => batch = Some(v),
                        b"m" => key = Some(v),
                        b"o" => outcome = v.bytes().next().and_then(MemberState::from_code),
                        _ => {}
                    }
                }
            }
            match (batch, key.map(JobKey::stored), outcome) {
                (Some(b), Some(Ok(key)), Some(o)) => notes.push(OutboxNote {
                    id,
                    batch: BatchId::stored(b),
                    key,
                    outcome: o,
                }),
                // a note this dq cannot read is left for a newer one (never deleted here): the
                // notes read are the outbox's prefix before it, so a relay may trim them
                _ => {
                    tracing::warn!(queue = ?queue, note = %id, "an outbox note this dq cannot read is left for a newer dq");
                    break;
                }
            }
        }
        Ok(notes)
    }

    async fn outbox_trim(&self, queue: &Queue, through: &str) -> Result<()> {
        // MINID keeps the entries at or after its id: the one right after `through`
        let (ms, seq) = note_id(through)?;
        let k = self.keys(queue);
        let mut xtrim = redis::cmd("XTRIM");
        xtrim
            .arg(&k.outbox)
            .arg("MINID")
            .arg(format!("{ms}-{}", seq.saturating_add(1)));
        self.index(xtrim).await.map(drop)
    }

    async fn outbox_done(&self, queue: &Queue, ids: &[String]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let k = self.keys(queue);
        let mut xdel = redis::cmd("XDEL");
        xdel.arg(&k.outbox).arg(ids);
        self.index(xdel).await.map(drop)
    }
}

/// How many entries past a page [`Batches::open_batches`] reads when it resumes, for those at
/// or before its `after` (in the same ms) that it skips.
const OPEN_BATCHES_SLACK: usize = 64;

/// Most pages one [`Batches::open_batches`] reads.
const OPEN_BATCHES_ROUNDS: usize = 1_000;

/// One entry of the index as `ZRANGE … WITHSCORES` answers it.
fn index_entry(id: Value, score: Value) -> Result<IndexEntry> {
    let id = match id {
        Value::BulkString(b) => String::from_utf8(b)
            .map(BatchId::stored)
            .map_err(|_| Error::Protocol("batch id: not text".into()))?,
        other => return Err(unexpected("ZRANGE", "batch id", &other)),
    };
    let opened_ms = match score {
        Value::Double(d) => d as u64,
        Value::BulkString(b) => String::from_utf8_lossy(&b)
            .parse::<f64>()
            .map(|d| d as u64)
            .map_err(|_| Error::Protocol("batch index score".into()))?,
        other => return Err(unexpected("ZRANGE", "batch index score", &other)),
    };
    Ok(IndexEntry { opened_ms, id })
}

/// A stream entry's id, `<ms>-<seq>`, as numbers.
fn note_id(id: &str) -> Result<(u64, u64)> {
    id.split_once('-')
        .and_then(|(ms, seq)| Some((ms.parse::<u64>().ok()?, seq.parse::<u64>().ok()?)))
        .ok_or_else(|| Error::Protocol(format!("outbox note id {id:?}: not a note's id")))
}
