//! Live workers on Redis: the hash `<ns>:workers`, worker id → heartbeat (`workers.lua`). It
//! is namespace-wide, so on a cluster it lives in a slot of its own and is only touched by
//! calls of its own, like the topic registry.

use std::time::Duration;

use redis::Value;

use super::RedisStore;
use super::layout;
use super::scripts::{SCRIPTS, unexpected};
use crate::error::{Error, Result};
use crate::workers::WorkerInfo;

impl RedisStore {
    /// Runs `workers.lua` with `args` after the op.
    async fn workers_call(&self, args: &[&[u8]]) -> Result<Value> {
        let key = layout::workers_key(&self.options.namespace);
        self.run_on_key(&SCRIPTS.workers, &key, args).await
    }

    /// See [`Store::beat_worker`](crate::store::Store::beat_worker).
    pub(super) async fn beat_worker_record(
        &self,
        worker: &WorkerInfo,
        ttl: Duration,
    ) -> Result<()> {
        worker.validate(ttl)?;
        let record = worker.encode()?;
        let ttl_ms = super::ms(ttl).to_string();
        self.workers_call(&[b"beat", worker.id.as_bytes(), ttl_ms.as_bytes(), &record])
            .await?;
        Ok(())
    }

    /// See [`Store::workers`](crate::store::Store::workers).
    pub(super) async fn live_workers(&self) -> Result<Vec<WorkerInfo>> {
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

    /// See [`Store::remove_worker`](crate::store::Store::remove_worker).
    pub(super) async fn remove_worker_record(&self, id: &str) -> Result<bool> {
        let s = &SCRIPTS.workers;
        match self.workers_call(&[b"remove", id.as_bytes()]).await? {
            Value::Int(n) => Ok(n > 0),
            other => Err(unexpected(s.name, "count", &other)),
        }
    }
}
