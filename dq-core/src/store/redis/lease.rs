//! The lease protocol on Redis (ARCHITECTURE.md §6.2–6.4): `fetch.lua`, `ack.lua`,
//! `fail.lua`, `extend.lua` and `release.lua`, and the wake-up listener (`wake.rs`).

use std::time::Duration;

use async_trait::async_trait;

use super::kept::result_arg;
use super::record::Record;
use super::scripts::{Reply, codes};
use super::store::{RedisStore, key_of, ms, per_partition_cap};
use super::wake::RedisWakeListener;
use crate::error::{Error, Result};
use crate::job::{Queue, truncate_error};
use crate::names::JobKey;
use crate::progress::Report;
use crate::store::lease::{
    AckOutcome, DeadLimits, Delivery, Extended, FailAction, FailOutcome, FailedAttempt, FetchCall,
    FetchReply, FetchRequest, Lease, NewerRecord, Success, WakeListener,
};

#[async_trait]
impl Lease for RedisStore {
    async fn fetch(&self, queue: &Queue, request: &FetchRequest) -> Result<FetchReply> {
        let k = self.keys(queue);
        let s = &self.scripts().fetch;
        request.validate()?;
        let lease_ms = ms(request.lease).max(1);
        let call = request.call;
        let done = self.take_received(queue, call.id);
        let mut receipts = vec![k.fetch_receipt(call.id)];
        receipts.extend(done.iter().map(|id| k.fetch_receipt(*id)));
        let reply = self
            .run(s, &k, &receipts, |inv| {
                inv.arg(request.max_jobs)
                    .arg(lease_ms)
                    .arg(request.promote_batch)
                    .arg(request.recover_batch)
                    .arg(per_partition_cap(request.dead_limits))
                    .arg(ms(request.dead_limits.retention))
                    .arg(ms(FetchCall::receipt_life(request.lease)).max(1))
                    .arg(call.retry)
                    .arg(rand::random::<u32>() >> 1)
                    .arg(request.retry_policy.script_args());
            })
            .await?;
        let mut r = Reply::new(s.name, reply)?;
        let now = r.int("now")? as u64;
        let next_ms = r.int("next_ms")?;
        let trimmed = r.int("trimmed")? as u64;
        let n_jobs = r.int("n_jobs")? as usize;
        let n_buried = r.int("n_buried")? as usize;
        let n_newer = r.int("n_newer")? as usize;
        if r.remaining() != n_jobs * 3 + n_buried + n_newer * 2 {
            return Err(Error::Protocol(
                "fetch: reply length does not match its counts".into(),
            ));
        }
        let mut jobs = Vec::with_capacity(n_jobs);
        for _ in 0..n_jobs {
            let key = key_of(r.bytes("key")?)?;
            let bytes = r.bytes("record")?;
            let token = r.int("token")? as u64;
            // (a format-1/2 record comes back leased; a lean one as stored, its lease beside it)
            let rec = Record::decode_leased(bytes, self.formats.reads(), Some(token))?;
            jobs.push(Delivery {
                queue: queue.clone(),
                key,
                token: rec.token,
                attempt: rec.attempts,
                due_ms: rec.due_ms,
                created_ms: rec.created_ms,
                leased_ms: now,
                lease_deadline_ms: now + lease_ms,
                group: rec.group,
                batch: rec.batch,
                payload: rec.payload,
            });
        }
        let buried = (0..n_buried)
            .map(|_| r.bytes("buried key").and_then(key_of))
            .collect::<Result<Vec<_>>>()?;
        let newer = (0..n_newer)
            .map(|_| {
                let key = r.bytes("newer key").and_then(key_of)?;
                let format = r.int("newer format")?;
                let format = u8::try_from(format)
                    .map_err(|_| Error::Protocol(format!("fetch: record format {format}")))?;
                Ok(NewerRecord { key, format })
            })
            .collect::<Result<Vec<_>>>()?;
        if trimmed > 0 {
            tracing::warn!(topic = %queue.topic, partition = queue.partition, trimmed, "dead queue trimmed (cap or retention)");
        }
        if !jobs.is_empty() || call.is_retry() {
            // The script left a receipt, and this reply has arrived: nobody will retry this
            // call, so the partition's next fetch may delete it.
            self.note_received(queue, call.id);
        }
        Ok(FetchReply {
            jobs,
            next_in: u64::try_from(next_ms).ok().map(Duration::from_millis),
            buried,
            trimmed,
            newer,
        })
    }

    async fn report(
        &self,
        queue: &Queue,
        key: &JobKey,
        token: u64,
        report: &Report,
    ) -> Result<bool> {
        let report = crate::progress::checked(report)?;
        let k = self.keys(queue);
        let s = &self.scripts().progress;
        let reply = self
            .run(s, &k, &[], |inv| {
                inv.arg(key.as_str()).arg(token);
                match &report {
                    Report::Progress(v) => inv.arg("p").arg(&v[..]),
                    Report::Log(text) => inv.arg("l").arg(text.as_str()),
                };
            })
            .await?;
        let written: i64 = redis::from_redis_value(reply)
            .map_err(|e| Error::Protocol(format!("script {}: unexpected reply: {e}", s.name)))?;
        Ok(written == 1)
    }

    async fn ack(&self, queue: &Queue, worker: &str, done: &[Success]) -> Result<Vec<AckOutcome>> {
        if done.is_empty() {
            return Ok(Vec::new());
        }
        let k = self.keys(queue);
        let s = &self.scripts().ack;
        let reply = self
            .run(s, &k, &[], |inv| {
                inv.arg(worker);
                for d in done {
                    inv.arg(d.key.as_str())
                        .arg(d.token)
                        .arg(d.started_ms)
                        .arg(result_arg(&d.result));
                }
            })
            .await?;
        codes(s.name, reply, done.len())?
            .into_iter()
            .map(|c| match c {
                b'A' => Ok(AckOutcome::Acked),
                b'G' => Ok(AckOutcome::Gone),
                b'S' => Ok(AckOutcome::Stale),
                other => Err(Error::Protocol(format!(
                    "ack: unknown code {:?}",
                    other as char
                ))),
            })
            .collect()
    }

    async fn fail_many(
        &self,
        queue: &Queue,
        failures: &[FailedAttempt],
        dead_limits: DeadLimits,
    ) -> Result<Vec<Result<FailOutcome>>> {
        if failures.is_empty() {
            return Ok(Vec::new());
        }
        let k = self.keys(queue);
        let s = &self.scripts().fail;
        let reply = self
            .run(s, &k, &[], |inv| {
                inv.arg(per_partition_cap(dead_limits))
                    .arg(ms(dead_limits.retention));
                for f in failures {
                    let (code, delay) = match &f.action {
                        FailAction::Retry(d) => ("r", ms(*d)),
                        FailAction::Defer(d) => ("d", ms(*d)),
                        FailAction::Bury => ("b", 0),
                        FailAction::Cancel => ("c", 0),
                        FailAction::Throttle(d) => ("t", ms(*d)),
                        FailAction::Discard => ("x", 0),
                    };
                    inv.arg(f.key.as_str())
                        .arg(f.token)
                        .arg(code)
                        .arg(delay)
                        .arg(truncate_error(&f.error).as_ref());
                }
            })
            .await?;
        let mut r = Reply::new(s.name, reply)?;
        if r.remaining() != 3 * failures.len() {
            return Err(Error::Protocol(format!(
                "fail: {} values for {} failures",
                r.remaining(),
                failures.len()
            )));
        }
        let mut out = Vec::with_capacity(failures.len());
        for f in failures {
            let (code, at, trimmed) = (r.int("code")?, r.int("at")?, r.int("trimmed")?);
            out.push(match code {
                1 => Ok(FailOutcome::Retrying { at_ms: at as u64 }),
                2 => {
                    if trimmed > 0 {
                        tracing::warn!(topic = %queue.topic, partition = queue.partition, trimmed, "dead queue trimmed (cap or retention)");
                    }
                    Ok(FailOutcome::Buried {
                        trimmed: trimmed as u64,
                    })
                }
                3 => Ok(FailOutcome::Cancelled),
                4 => Ok(FailOutcome::Discarded),
                0 => Ok(FailOutcome::Gone),
                -1 => Err(Error::StaleToken {
                    key: f.key.to_string(),
                }),
                other => return Err(Error::Protocol(format!("fail: unknown code {other}"))),
            });
        }
        Ok(out)
    }

    async fn extend(
        &self,
        queue: &Queue,
        leases: &[(JobKey, u64)],
        lease: Duration,
    ) -> Result<Vec<Extended>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let k = self.keys(queue);
        let s = &self.scripts().extend;
        let reply = self
            .run(s, &k, &[], |inv| {
                inv.arg(ms(lease).max(1));
                for (key, token) in leases {
                    inv.arg(key.as_str()).arg(*token);
                }
            })
            .await?;
        codes(s.name, reply, leases.len())?
            .into_iter()
            .map(|c| match c {
                b'1' => Ok(Extended::Held),
                b'0' => Ok(Extended::Lost),
                b'2' => Ok(Extended::CancelRequested),
                other => Err(Error::Protocol(format!(
                    "extend: unknown code {:?}",
                    other as char
                ))),
            })
            .collect()
    }

    async fn release(&self, queue: &Queue, leases: &[(JobKey, u64)]) -> Result<Vec<bool>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let k = self.keys(queue);
        let s = &self.scripts().release;
        let reply = self
            .run(s, &k, &[], |inv| {
                for (key, token) in leases {
                    inv.arg(key.as_str()).arg(*token);
                }
            })
            .await?;
        Ok(codes(s.name, reply, leases.len())?
            .into_iter()
            .map(|c| c == b'1')
            .collect())
    }

    async fn wake_listener(&self, queue: &Queue) -> Result<Box<dyn WakeListener>> {
        Ok(Box::new(RedisWakeListener::new(
            &self.wake,
            &self.conn,
            self.keys(queue).wake.clone(),
            self.options.connection_timeout,
        )))
    }
}
