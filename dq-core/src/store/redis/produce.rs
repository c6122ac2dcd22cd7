//! The producer's call on Redis: `enqueue.lua`, one call per job or bulk chunk (with `WAIT`
//! in the same pipeline when enqueues are durable).

use async_trait::async_trait;
use redis::Value;

use super::scripts::unexpected;
use super::store::{RedisStore, ms, state_of};
use crate::error::{Error, Result};
use crate::format::{BATCH_FORMAT, EXPIRING_FORMAT, GROUP_FORMAT, PRIORITY_FORMAT};
use crate::job::{Due, Expiry, Queue, unix_ms};
use crate::store::produce::{EnqueueCall, EnqueueOutcome, NewJob, Produce};

#[async_trait]
impl Produce for RedisStore {
    async fn enqueue(
        &self,
        queue: &Queue,
        jobs: &[NewJob],
        call: EnqueueCall,
    ) -> Result<Vec<EnqueueOutcome>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let k = self.keys(queue);
        let s = &self.scripts().enqueue;
        let durable = self.options.durable_enqueue;
        // New records are written in the format every live process of the namespace reads.
        let write_format = self.formats.write();
        if write_format < EXPIRING_FORMAT && jobs.iter().any(|j| j.expires.is_some()) {
            return Err(Error::NeedsFormat {
                feature: "a job's expiry",
                needs: EXPIRING_FORMAT,
                level: write_format,
            });
        }
        if write_format < PRIORITY_FORMAT && jobs.iter().any(|j| !j.priority.is_normal()) {
            return Err(Error::NeedsFormat {
                feature: "a job's priority",
                needs: PRIORITY_FORMAT,
                level: write_format,
            });
        }
        if write_format < GROUP_FORMAT && jobs.iter().any(|j| j.group.is_some()) {
            return Err(Error::NeedsFormat {
                feature: "a job's group",
                needs: GROUP_FORMAT,
                level: write_format,
            });
        }
        if write_format < BATCH_FORMAT && jobs.iter().any(|j| j.batch.is_some()) {
            return Err(Error::NeedsFormat {
                feature: "a batch",
                needs: BATCH_FORMAT,
                level: write_format,
            });
        }
        // The two receipt generations of the call's bucket (the same for every try).
        let receipts = k.enqueue_receipts(call.id);
        let (reply, acked) = self
            .run_waiting(
                s,
                &k,
                &receipts,
                |inv| {
                    inv.arg(jobs.len())
                        .arg(&call.id.to_be_bytes()[..])
                        .arg(if call.retry { "1" } else { "0" })
                        .arg(write_format);
                    for job in jobs {
                        let (letter, value) = match job.due {
                            Due::Now => ("n", 0),
                            Due::After(d) => ("d", ms(d)),
                            Due::At(t) => ("a", unix_ms(t)),
                        };
                        // the expiry follows the mode letter: '+' ms after due, '@' Unix ms
                        // then the priority, when not normal: '!' and its digit
                        let mut mode = match job.expires {
                            None => letter.to_owned(),
                            Some(Expiry::AfterDue(d)) => format!("{letter}+{}", ms(d).max(1)),
                            Some(Expiry::At(t)) => format!("{letter}@{}", unix_ms(t).max(1)),
                        };
                        if !job.priority.is_normal() {
                            mode.push('!');
                            mode.push(char::from(b'0' + job.priority.level()));
                        }
                        // the key's window follows a '|': 'u', 'b' or 't' and its ms
                        if let Some(window) = job.window {
                            mode = format!("{mode}|{}", window.wire());
                        }
                        // then the batch, after a '~'
                        if let Some(batch) = &job.batch {
                            mode = format!("{mode}~{batch}");
                        }
                        // the group comes last, after a '#'
                        if let Some(group) = &job.group {
                            mode = format!("{mode}#{group}");
                        }
                        inv.arg(job.key.as_str())
                            .arg(mode)
                            .arg(value)
                            .arg(if job.replace { "1" } else { "0" })
                            .arg(&job.payload[..]);
                    }
                },
                durable,
            )
            .await?;
        RedisStore::replicated(durable, acked)?;
        let Value::Array(items) = reply else {
            return Err(unexpected(s.name, "outcomes", &reply));
        };
        if items.len() != jobs.len() {
            return Err(Error::Protocol(format!(
                "enqueue: {} outcomes for {} jobs",
                items.len(),
                jobs.len()
            )));
        }
        items
            .into_iter()
            .map(|v| match &v {
                Value::BulkString(b) if b.as_slice() == b"+" => Ok(EnqueueOutcome::Created),
                Value::BulkString(b) if b.as_slice() == b"~" => Ok(EnqueueOutcome::Replaced),
                Value::BulkString(b) if b.as_slice() == b"E" => Ok(EnqueueOutcome::Ended),
                Value::BulkString(b) if b.len() > 1 && b[0] == b'U' => std::str::from_utf8(&b[1..])
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .map(|until_ms| EnqueueOutcome::Refused { until_ms })
                    .ok_or_else(|| unexpected(s.name, "outcome", &v)),
                Value::BulkString(b) if b.len() == 1 => Ok(EnqueueOutcome::Exists(state_of(b[0])?)),
                _ => Err(unexpected(s.name, "outcome", &v)),
            })
            .collect()
    }
}
