//! Periodic schedules on Redis: the hash `<ns>:schedules`, name → `<cursor_ms>|<definition>`
//! (`schedules.lua`). Namespace-wide, so on a cluster it lives in a slot of its own and is
//! only touched by calls of its own, like the topic registry and the live workers.

use redis::Value;

use super::RedisStore;
use super::layout;
use super::scripts::{SCRIPTS, unexpected};
use crate::error::{Error, Result};
use crate::schedule::{ScheduleOutcome, ScheduleRecord, check_schedule_name};

impl RedisStore {
    /// Runs `schedules.lua` with `args` after the op.
    async fn schedules_call(&self, args: &[&[u8]]) -> Result<Value> {
        let key = layout::schedules_key(&self.options.namespace);
        self.run_on_key(&SCRIPTS.schedules, &key, args).await
    }

    /// See [`Store::put_schedule`](crate::store::Store::put_schedule).
    pub(super) async fn put_schedule_record(
        &self,
        record: &ScheduleRecord,
    ) -> Result<ScheduleOutcome> {
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

    /// See [`Store::remove_schedule`](crate::store::Store::remove_schedule).
    pub(super) async fn remove_schedule_record(&self, name: &str) -> Result<bool> {
        check_schedule_name(name)?;
        match self.schedules_call(&[b"remove", name.as_bytes()]).await? {
            Value::Int(n) => Ok(n > 0),
            other => Err(unexpected(SCRIPTS.schedules.name, "count", &other)),
        }
    }

    /// See [`Store::schedules`](crate::store::Store::schedules).
    pub(super) async fn schedule_records(&self) -> Result<Vec<ScheduleRecord>> {
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

    /// See [`Store::advance_schedule`](crate::store::Store::advance_schedule).
    pub(super) async fn advance_schedule_cursor(
        &self,
        name: &str,
        from_ms: u64,
        to_ms: u64,
    ) -> Result<bool> {
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
}
