//! What every request shares: the client, the options, this process's CSRF token, the
//! sampled history, and topic clients built with each topic's recorded partition count.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use dq_core::{Client, ClientConfig, TopicClient, TopicMeta};

use crate::DashboardOptions;
use crate::sampler::History;

/// State shared by every handler and the sampler.
pub(crate) struct Shared {
    /// The caller's client.
    pub client: Client,
    /// The options.
    pub opts: DashboardOptions,
    /// This process's CSRF token: every form that changes something carries it.
    pub csrf: String,
    /// The sampled stats behind the charts.
    pub history: Mutex<History>,
    /// Clients on the caller's store whose every topic has N partitions, by N: a topic is
    /// read with the count in its record, whatever the caller's client was configured with.
    by_partitions: Mutex<HashMap<u16, Client>>,
    /// Whether the sampler was started.
    sampling: AtomicBool,
}

impl Shared {
    /// Shared state for a new router.
    pub fn new(client: Client, opts: DashboardOptions) -> Arc<Shared> {
        let bytes: [u8; 32] = rand::random();
        let csrf = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let shared = Arc::new(Shared {
            client,
            history: Mutex::new(History::new(opts.sample_every)),
            opts,
            csrf,
            by_partitions: Mutex::default(),
            sampling: AtomicBool::new(false),
        });
        if tokio::runtime::Handle::try_current().is_ok() {
            shared.ensure_sampler();
        }
        shared
    }

    /// Starts the sampler once, on the current runtime.
    pub fn ensure_sampler(self: &Arc<Self>) {
        if !self.sampling.swap(true, Ordering::AcqRel) {
            tokio::spawn(crate::sampler::run(Arc::downgrade(self)));
        }
    }

    /// The topic client for a registered topic, with its recorded partition count.
    pub fn topic_client(&self, meta: &TopicMeta) -> dq_core::Result<TopicClient> {
        let name = meta.topic.as_ref();
        if self.client.config().partitions_of(name) == meta.partitions {
            return self.client.topic(name);
        }
        let client = self
            .by_partitions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(meta.partitions)
            .or_insert_with(|| {
                let config = ClientConfig {
                    partitions: HashMap::new(),
                    default_partitions: meta.partitions,
                    ..self.client.config().clone()
                };
                Client::from_store(self.client.store().clone(), config)
            })
            .clone();
        client.topic(name)
    }

    /// The registered topic `name`, or `None`: the dashboard never reads (and so never
    /// records) a topic that no producer or worker has used.
    pub async fn find_topic(
        &self,
        name: &str,
    ) -> dq_core::Result<Option<(TopicMeta, TopicClient)>> {
        let topics = self.client.topics().await?;
        let Some(meta) = topics.into_iter().find(|m| m.topic.as_ref() == name) else {
            return Ok(None);
        };
        let tc = self.topic_client(&meta)?;
        Ok(Some((meta, tc)))
    }

    /// A link inside the dashboard.
    pub fn link(&self, path: &str) -> String {
        format!("{}{path}", self.opts.base_path)
    }

    /// The overview's link: the mount path itself (a nested router's `/` answers there).
    pub fn home(&self) -> String {
        if self.opts.base_path.is_empty() {
            "/".to_owned()
        } else {
            self.opts.base_path.clone()
        }
    }
}
