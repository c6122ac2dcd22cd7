//! The topic registry on Redis: the hash `<ns>:topics`, topic → metadata record
//! ([`layout::TopicRecord`]). It is namespace-wide, so on a cluster it lives in a slot of its
//! own: it is only touched by calls of its own (`topic.lua`, `HGETALL`, `HDEL`), never inside
//! a partition's script. A client reads it once per topic per process (the client caches it).

use redis::Value;

use super::RedisStore;
use super::layout::{self, PartitionKeys, TopicRecord};
use super::scripts::{SCRIPTS, unexpected};
use crate::error::{Error, Result, from_redis};
use crate::job::Queue;
use crate::names::Topic;
use crate::topic::TopicMeta;

impl RedisStore {
    fn topics_key(&self) -> String {
        layout::topics_key(&self.options.namespace)
    }

    /// See [`Store::register_topic`](crate::store::Store::register_topic): one `topic.lua` call.
    pub(super) async fn register_topic_record(
        &self,
        topic: &Topic,
        partitions: u16,
    ) -> Result<TopicMeta> {
        let s = &SCRIPTS.topic;
        let key = self.topics_key();
        let partitions = partitions.to_string();
        let reply = self
            .run_on_key(s, &key, &[topic.as_str().as_bytes(), partitions.as_bytes()])
            .await?;
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
    pub(super) async fn registered_topics(&self) -> Result<Vec<TopicMeta>> {
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

    /// See [`Store::reset_topic`](crate::store::Store::reset_topic): counts the records of
    /// every partition of the recorded count (`HLEN` of each `jobs` hash, one call per
    /// partition: each is its own slot), and deletes the registry field only if all are
    /// empty. Counters and delivery tokens stay (tokens must never repeat on a partition).
    pub(super) async fn reset_topic_record(&self, topic: &Topic) -> Result<Option<TopicMeta>> {
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
}
