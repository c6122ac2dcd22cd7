//! What every request shares: the client, the options, this process's CSRF token, the
//! sampled history, and the registered topics' clients (through the operator API of
//! `dq_core::client::admin`, with each topic's recorded partition count).

use std::sync::Mutex;
use std::sync::atomic::AtomicBool;

use dq_core::{TopicClient, TopicMeta};

use crate::DashboardOptions;
use crate::history::History;

/// State shared by every handler and the sampler.
pub(crate) struct Shared {
    /// The caller's client.
    pub client: dq_core::Client,
    /// The options.
    pub opts: DashboardOptions,
    /// This process's CSRF token: every form that changes something carries it.
    pub csrf: String,
    /// The sampled stats behind the charts.
    pub history: Mutex<History>,
    /// Whether the sampler was started (see `sampler::ensure`).
    pub sampling: AtomicBool,
}

impl Shared {
    /// Shared state for a new router (its sampler not started yet).
    pub fn new(client: dq_core::Client, opts: DashboardOptions) -> Shared {
        let bytes: [u8; 32] = rand::random();
        let csrf = bytes.iter().map(|b| format!("{b:02x}")).collect();
        Shared {
            client,
            history: Mutex::new(History::new(opts.sample_every)),
            opts,
            csrf,
            sampling: AtomicBool::new(false),
        }
    }

    /// The registered topic `name` and its client, or `None`: the dashboard never reads (and
    /// so never records) a topic that no producer or worker has used.
    pub async fn find_topic(
        &self,
        name: &str,
    ) -> dq_core::Result<Option<(TopicMeta, TopicClient)>> {
        self.client.admin().find(name).await
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
