//! The namespace's records in memory: the topic registry, the live workers' heartbeats and the
//! periodic schedules, the payload shapes (kept in their stored form, as Redis keeps them), with the semantics of `topic.lua`, `workers.lua` and `schedules.lua`,
//! and the store's clock. The registry of record formats is the trait's default: the embedded
//! store is one process, so its level is simply what it reads and no process is listed.

use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;

use super::store::MemoryStore;
use crate::error::{Error, Result};
use crate::job::Queue;
use crate::names::Topic;
use crate::schedule::{ScheduleOutcome, ScheduleRecord, check_schedule_name};
use crate::shape::PayloadShape;
use crate::store::catalog::{Catalog, read_shape};
use crate::topic::TopicMeta;
use crate::workers::WorkerInfo;

#[async_trait]
impl Catalog for MemoryStore {
    async fn register_topic(&self, topic: &Topic, partitions: u16) -> Result<TopicMeta> {
        if partitions == 0 {
            return Err(Error::InvalidConfig(
                "a topic needs at least one partition".into(),
            ));
        }
        let now = self.clock.now_ms();
        Ok(self
            .lock_topics()
            .entry(topic.clone())
            .or_insert_with(|| TopicMeta::new(topic.clone(), partitions, now))
            .clone())
    }

    async fn topics(&self) -> Result<Vec<TopicMeta>> {
        Ok(self.lock_topics().values().cloned().collect())
    }

    async fn reset_topic(&self, topic: &Topic) -> Result<Option<TopicMeta>> {
        // Registry, then partitions: the one order both locks are taken in.
        let mut topics = self.lock_topics();
        let Some(meta) = topics.get(topic) else {
            return Ok(None);
        };
        let state = self.lock();
        let jobs: usize = (0..meta.partitions)
            .filter_map(|p| state.get(&Queue::new(topic.clone(), p)))
            .map(|p| p.jobs.len())
            .sum();
        if jobs > 0 {
            return Err(Error::TopicNotEmpty {
                topic: topic.to_string(),
                jobs: jobs as u64,
            });
        }
        Ok(topics.remove(topic))
    }

    async fn beat_worker(&self, worker: &WorkerInfo, ttl: Duration) -> Result<u64> {
        worker.validate(ttl)?;
        let now = self.clock.now_ms();
        let mut info = worker.clone();
        info.beat_ms = now;
        info.expires_ms = now.saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        self.lock_workers().insert(info.id.clone(), info);
        Ok(self.schedules_generation.load(Ordering::Relaxed))
    }

    async fn touch_schedules(&self) -> Result<()> {
        self.schedules_generation.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        let now = self.clock.now_ms();
        let mut workers = self.lock_workers();
        workers.retain(|_, w| w.expires_ms > now);
        Ok(workers.values().cloned().collect())
    }

    async fn remove_worker(&self, id: &str) -> Result<bool> {
        Ok(self.lock_workers().remove(id).is_some())
    }

    async fn put_schedule(&self, record: &ScheduleRecord) -> Result<ScheduleOutcome> {
        record.validate()?;
        let mut schedules = self.lock_schedules();
        let outcome = match schedules.get(&record.name) {
            None => ScheduleOutcome::Created,
            Some((_, def)) if *def == record.definition => return Ok(ScheduleOutcome::Unchanged),
            Some(_) => ScheduleOutcome::Updated,
        };
        schedules.insert(
            record.name.clone(),
            (record.next_ms, record.definition.clone()),
        );
        Ok(outcome)
    }

    async fn remove_schedule(&self, name: &str) -> Result<bool> {
        check_schedule_name(name)?;
        Ok(self.lock_schedules().remove(name).is_some())
    }

    async fn schedules(&self) -> Result<Vec<ScheduleRecord>> {
        Ok(self
            .lock_schedules()
            .iter()
            .map(|(name, (next_ms, definition))| ScheduleRecord {
                name: name.clone(),
                next_ms: *next_ms,
                definition: definition.clone(),
            })
            .collect())
    }

    async fn advance_schedule(&self, name: &str, from_ms: u64, to_ms: u64) -> Result<bool> {
        check_schedule_name(name)?;
        match self.lock_schedules().get_mut(name) {
            Some((cursor, _)) if *cursor == from_ms => {
                *cursor = to_ms;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn put_payload_shape(&self, topic: &Topic, shape: Option<&PayloadShape>) -> Result<()> {
        let mut shapes = self.lock_shapes();
        match shape {
            Some(shape) => shapes.insert(topic.clone(), shape.encode()),
            None => shapes.remove(topic),
        };
        Ok(())
    }

    async fn payload_shape(&self, topic: &Topic) -> Result<Option<PayloadShape>> {
        let bytes = self.lock_shapes().get(topic).cloned();
        Ok(bytes.and_then(|b| read_shape(topic, &b)))
    }

    async fn now_ms(&self) -> Result<u64> {
        Ok(self.clock.now_ms())
    }
    fn formats(&self) -> &crate::format::Formats {
        &self.formats
    }
}
