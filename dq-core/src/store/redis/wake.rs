//! The wake-up listener on Redis (ARCHITECTURE.md §6.4): one `BLPOP wake` in flight on a
//! connection of its own, on the node that serves the partition (found again when a cluster
//! slot moves or Sentinel names another master).

use std::time::Duration;

use async_trait::async_trait;
use redis::AsyncConnectionConfig;

use super::conn::{Certs, SharedConnection, node_client, refused_by_cluster};
use super::url::NodeUrl;
use crate::error::{Error, Result, from_redis};
use crate::store::lease::WakeListener;

/// Where a wake-up listener connects: the one node, or the cluster node serving its
/// partition (found through the store's cluster connection).
#[derive(Clone)]
pub(super) enum WakeSource {
    /// The one node.
    Single(redis::Client),
    /// The cluster's nodes, addressed like the seed URL, with the store's TLS certificates.
    Cluster(NodeUrl, Certs),
    /// The master the store's sentinel connection talks to now.
    Sentinel,
}

/// Blocks on `BLPOP wake` on a connection of its own, whose response timeout is longer than
/// the block, so a quiet queue costs one command per `max_wait`.
///
/// On a cluster that connection goes to the master serving the wake key's slot, looked up
/// through the store's cluster connection. When the slot moves, `BLPOP` answers `MOVED` (or
/// the node goes away): the listener drops its node and looks it up again on the next wait.
pub(super) struct RedisWakeListener {
    /// The node to block on; on a cluster, `None` until looked up (and after it failed).
    client: Option<redis::Client>,
    /// On a cluster: the store's connection, to look the node up, and how to address it.
    follow: Option<(SharedConnection, NodeUrl, Certs)>,
    /// Through Sentinel: the store's connection, whose current master the listener blocks on.
    master: Option<SharedConnection>,
    /// Through Sentinel: the generation of the store's connection `client` came from.
    generation: u64,
    key: String,
    conn: Option<(redis::aio::MultiplexedConnection, Duration)>,
    connection_timeout: Duration,
}

#[async_trait]
impl WakeListener for RedisWakeListener {
    async fn wait(&mut self, max_wait: Duration) -> Result<bool> {
        let block = max_wait.clamp(Duration::from_millis(10), Duration::from_secs(60));
        let response_timeout = block + Duration::from_secs(3);
        if self
            .conn
            .as_ref()
            .is_none_or(|(_, t)| *t < response_timeout)
        {
            let client = match (&self.client, &self.follow, &self.master) {
                (Some(client), _, _) => client.clone(),
                (None, Some((shared, nodes, certs)), _) => {
                    let client = self.find_node(shared, nodes, certs).await?;
                    self.client = Some(client.clone());
                    client
                }
                (None, None, Some(shared)) => {
                    let Some((generation, client)) = shared.node() else {
                        unreachable!("a sentinel connection has a master")
                    };
                    self.generation = generation;
                    self.client = Some(client.clone());
                    client
                }
                (None, None, None) => unreachable!("a listener has a node or a way to find one"),
            };
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(self.connection_timeout))
                .set_response_timeout(Some(response_timeout));
            let conn = match client
                .get_multiplexed_async_connection_with_config(&config)
                .await
            {
                Ok(conn) => conn,
                Err(e) => {
                    self.follow_master(&e).await;
                    self.forget_node();
                    return Err(from_redis(e));
                }
            };
            self.conn = Some((conn, response_timeout));
        }
        let Some((conn, _)) = self.conn.as_mut() else {
            unreachable!("connection set above")
        };
        let result: redis::RedisResult<Option<(String, String)>> = redis::cmd("BLPOP")
            .arg(&self.key)
            .arg(block.as_secs_f64())
            .query_async(conn)
            .await;
        match result {
            Ok(token) => Ok(token.is_some()),
            Err(e) => {
                // A broken or timed-out connection is replaced on the next wait; on a cluster
                // the node is looked up again (after MOVED: the slot has moved).
                if refused_by_cluster(&e) {
                    tracing::debug!(key = %self.key, "wake-up listener follows its slot");
                }
                self.conn = None;
                self.follow_master(&e).await;
                self.forget_node();
                Err(from_redis(e))
            }
        }
    }
}

impl RedisWakeListener {
    /// A listener on wake-up key `key`, connecting as `source` says (`shared`: the store's
    /// connection, to find the node on a cluster or through Sentinel).
    pub(super) fn new(
        source: &WakeSource,
        shared: &SharedConnection,
        key: String,
        connection_timeout: Duration,
    ) -> Self {
        let (client, follow, master) = match source {
            WakeSource::Single(client) => (Some(client.clone()), None, None),
            WakeSource::Cluster(nodes, certs) => (
                None,
                Some((shared.clone(), nodes.clone(), certs.clone())),
                None,
            ),
            WakeSource::Sentinel => (None, None, Some(shared.clone())),
        };
        RedisWakeListener {
            client,
            follow,
            master,
            generation: 0,
            key,
            conn: None,
            connection_timeout,
        }
    }

    /// On a cluster, the master serving the wake key's slot now.
    async fn find_node(
        &self,
        shared: &SharedConnection,
        nodes: &NodeUrl,
        certs: &Certs,
    ) -> Result<redis::Client> {
        let key = self.key.clone();
        let owner = shared
            .call(async |conn| conn.master_of(&key).await)
            .await
            .map_err(from_redis)?;
        let Some((host, port)) = owner else {
            // Retryable: the cluster is resharding or failing over.
            return Err(Error::Redis(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "no cluster node serves the wake-up key's slot",
            ))));
        };
        node_client(&nodes.url(&host, port), certs).map_err(|e| {
            Error::InvalidConfig(format!("invalid cluster node address ({:?})", e.kind()))
        })
    }

    /// On a cluster or through Sentinel, drops the node so the next wait looks it up again.
    fn forget_node(&mut self) {
        if self.follow.is_some() || self.master.is_some() {
            self.client = None;
        }
    }

    /// Through Sentinel, after `e` on the master's connection: lets the store's connection
    /// ask the sentinels for the master (the next wait blocks on the one they name).
    async fn follow_master(&self, e: &redis::RedisError) {
        if let Some(shared) = &self.master {
            shared.after_failure(self.generation, e).await;
        }
    }
}
