//! Every Redis key dq uses, in one place. Nobody else formats a key string.
//!
//! All keys of one partition share the hash tag `{<topic>#<partition>}`, so every script
//! touches a single slot and runs unchanged on Redis Cluster:
//! `<ns>:{orders.close#0}:scheduled`.

use crate::job::Queue;

/// The keys of one partition.
#[derive(Clone, Debug)]
pub(crate) struct PartitionKeys {
    /// ZSET key -> due score: jobs waiting for their due time.
    pub scheduled: String,
    /// ZSET key -> next attempt score: failed jobs waiting to be retried.
    pub retry: String,
    /// LIST of keys due now, FIFO (hints: the record decides).
    pub ready: String,
    /// ZSET key -> lease deadline ms: running jobs.
    pub active: String,
    /// ZSET key -> died ms: the dead queue.
    pub dead: String,
    /// HASH key -> record (header + payload).
    pub pool: String,
    /// HASH key -> attempt history (only jobs that failed at least once).
    pub hist: String,
    /// HASH of counters.
    pub stats: String,
    /// LIST of wake-up tokens for blocked fetchers.
    pub wake: String,
    /// ZSET applied enqueue call id -> ms: receipts, kept `ENQUEUE_RECEIPT_LIFE` at least;
    /// the set expires by itself once no call writes to it.
    pub calls: String,
    /// `<prefix>fetch:`, the start of every fetch receipt's key (see [`Self::fetch_receipt`]).
    fetch_receipt_prefix: String,
}

impl PartitionKeys {
    pub fn new(namespace: &str, queue: &Queue) -> Self {
        let prefix = format!("{namespace}:{{{}#{}}}:", queue.topic, queue.partition);
        let key = |name: &str| format!("{prefix}{name}");
        PartitionKeys {
            scheduled: key("scheduled"),
            retry: key("retry"),
            ready: key("ready"),
            active: key("active"),
            dead: key("dead"),
            pool: key("pool"),
            hist: key("hist"),
            stats: key("stats"),
            wake: key("wake"),
            calls: key("calls"),
            fetch_receipt_prefix: key("fetch:"),
        }
    }

    /// STRING, the receipt of fetch call `call` (what it leased, for a retry of the same call
    /// to find); it expires after `FetchCall::receipt_life`. One key per call, in the
    /// partition's hash tag like every other key, so fetch stays a one-slot script.
    pub fn fetch_receipt(&self, call: u64) -> String {
        format!("{}{call}", self.fetch_receipt_prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::Topic;

    #[test]
    fn keys_share_one_hash_tag() {
        let k = PartitionKeys::new("dq", &Queue::new(Topic::new("orders.close").unwrap(), 3));
        assert_eq!(k.scheduled, "dq:{orders.close#3}:scheduled");
        assert_eq!(k.fetch_receipt(7), "dq:{orders.close#3}:fetch:7");
        for key in [
            &k.retry,
            &k.ready,
            &k.active,
            &k.dead,
            &k.pool,
            &k.hist,
            &k.stats,
            &k.wake,
            &k.calls,
            &k.fetch_receipt(42),
        ] {
            assert!(key.starts_with("dq:{orders.close#3}:"), "{key}");
        }
    }
}
