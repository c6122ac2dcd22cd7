//! The store's shared connection, and its replacement after a response timeout.
//!
//! redis-rs's `ConnectionManager` reconnects after an I/O error, but a response timeout leaves
//! it on the same socket. When a NAT or a partition leaves that socket half-open (open, but
//! nothing arrives any more), every later call times out in turn, forever. So a call that times
//! out on generation `g` of the connection replaces generation `g` by a fresh manager with the
//! same settings, once: calls of generation `g` that time out later find it already replaced.
//! Calls always use the current generation; calls in flight on the old one finish or time out
//! on it, and the old socket closes when the last of them lets go.
//!
//! The fresh manager connects on its first call (`new_lazy_with_config`), so a replacement
//! needs no task of its own, and the first call after a timeout already goes to a new socket.

use std::sync::{Arc, RwLock};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

/// A `ConnectionManager` that is replaced when a call on it times out. Cheap to clone.
#[derive(Clone)]
pub(crate) struct SharedConnection {
    inner: Arc<Inner>,
}

struct Inner {
    client: redis::Client,
    config: ConnectionManagerConfig,
    current: RwLock<Generation>,
}

#[derive(Clone)]
struct Generation {
    number: u64,
    manager: ConnectionManager,
}

/// The connection a call uses, and the generation it belongs to (for [`SharedConnection::observe`]).
pub(crate) struct Lease {
    generation: u64,
    /// The connection to send the call on.
    pub conn: ConnectionManager,
}

impl SharedConnection {
    /// Connects now (the first connection is not lazy: a wrong address fails `connect`).
    pub async fn connect(
        client: redis::Client,
        config: ConnectionManagerConfig,
    ) -> redis::RedisResult<Self> {
        let manager = ConnectionManager::new_with_config(client.clone(), config.clone()).await?;
        Ok(SharedConnection {
            inner: Arc::new(Inner {
                client,
                config,
                current: RwLock::new(Generation { number: 0, manager }),
            }),
        })
    }

    /// The current connection.
    pub fn get(&self) -> Lease {
        let g = self.read();
        Lease {
            generation: g.number,
            conn: g.manager,
        }
    }

    /// Runs `call` on the current connection and replaces that connection if the call timed
    /// out.
    pub async fn call<T, F>(&self, call: F) -> redis::RedisResult<T>
    where
        F: AsyncFnOnce(&mut ConnectionManager) -> redis::RedisResult<T>,
    {
        let mut lease = self.get();
        let result = call(&mut lease.conn).await;
        self.observe(lease.generation, &result);
        result
    }

    /// Replaces the connection of `generation` if `result` is a timeout and that generation is
    /// still current.
    pub fn observe<T>(&self, generation: u64, result: &redis::RedisResult<T>) {
        if let Err(e) = result
            && e.is_timeout()
        {
            self.replace(generation);
        }
    }

    fn read(&self) -> Generation {
        self.inner
            .current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn replace(&self, generation: u64) {
        let mut current = self
            .inner
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if current.number != generation {
            return; // replaced already by an earlier timeout of the same generation
        }
        match ConnectionManager::new_lazy_with_config(
            self.inner.client.clone(),
            self.inner.config.clone(),
        ) {
            Ok(manager) => {
                tracing::warn!(
                    generation,
                    "a Redis call timed out; replacing its connection"
                );
                *current = Generation {
                    number: generation + 1,
                    manager,
                };
            }
            // Only a configuration the first connect accepted can get here; keep the old one.
            Err(e) => tracing::error!(error = %e, "cannot replace a timed-out Redis connection"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dq_testkit::FaultProxy;
    use std::time::Duration;

    async fn ping(conn: &mut ConnectionManager) -> redis::RedisResult<String> {
        redis::cmd("PING").query_async(conn).await
    }

    /// A call on a frozen socket times out; the next call goes to a new socket and succeeds.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_timeout_replaces_the_connection() {
        let server = dq_testkit::shared();
        let proxy = FaultProxy::start(server.port());
        let client = redis::Client::open(proxy.url()).unwrap();
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(Duration::from_millis(300)))
            .set_connection_timeout(Some(Duration::from_secs(5)));
        let shared = SharedConnection::connect(client, config).await.unwrap();
        assert_eq!(shared.call(ping).await.unwrap(), "PONG");
        let first = shared.get().generation;
        let accepted = proxy.accepted_connections();

        proxy.freeze_open();
        let err = shared.call(ping).await.unwrap_err();
        assert!(err.is_timeout(), "{err:?}");
        assert_eq!(shared.get().generation, first + 1);
        // A second timeout of the replaced generation does not replace the new one.
        shared.observe(first, &Err::<(), _>(err));
        assert_eq!(shared.get().generation, first + 1);

        assert_eq!(shared.call(ping).await.unwrap(), "PONG");
        assert_eq!(proxy.accepted_connections(), accepted + 1);
    }
}
