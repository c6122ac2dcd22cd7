//! Enqueue hooks: [`EnqueueHook`], asked about every job a producer enqueues through the
//! client, after the job is validated and before anything is written; a refusal is
//! [`Error::EnqueueRefused`] and nothing is written.
//!
//! Set on the client with [`ClientBuilder::enqueue_hook`](crate::ClientBuilder::enqueue_hook)
//! (several run in the order added; the first refusal wins). They see single enqueues (typed
//! and raw), bulk enqueues (each job, before any of the bulk is written: a refusal is
//! [`Error::BulkItem`] naming the job, its `source` the refusal) and repeatable enqueues (the
//! HTTP API's). The ticks of periodic schedules, which workers enqueue, are not passed to
//! them. A hook sees the job and may refuse it; it does not change it (a producer that wants
//! another job enqueues another job).

use std::sync::Arc;

use async_trait::async_trait;

use super::handle::TopicClient;
use crate::error::{Error, Result};
use crate::handler::BoxError;
use crate::job::{Due, Expiry};
use crate::names::{JobKey, Topic};
use crate::store::produce::NewJob;

/// Asked about every job enqueued through a client, before it is written (see the module
/// docs of [`crate::client`] and [`ClientBuilder::enqueue_hook`](crate::ClientBuilder::enqueue_hook)).
///
/// ```
/// use dq_core::{BoxError, EnqueueHook, EnqueueRequest};
///
/// /// Refuses jobs of topics outside the tenant's prefix.
/// struct TenantTopics(&'static str);
///
/// #[dq_core::async_trait]
/// impl EnqueueHook for TenantTopics {
///     async fn check(&self, job: &EnqueueRequest<'_>) -> Result<(), BoxError> {
///         if job.topic().starts_with(self.0) {
///             Ok(())
///         } else {
///             Err(format!("topic {} is not the tenant's", job.topic()).into())
///         }
///     }
/// }
/// ```
#[async_trait]
pub trait EnqueueHook: Send + Sync + 'static {
    /// `Ok(())` lets the job through; an error refuses it: nothing is written, and the
    /// caller gets [`Error::EnqueueRefused`] with this error as its `source` (downcast it, or
    /// use [`Error::refused_with`], to get your type back).
    async fn check(&self, job: &EnqueueRequest<'_>) -> std::result::Result<(), BoxError>;
}

/// A job about to be enqueued, validated, as an [`EnqueueHook`] sees it.
#[derive(Debug)]
pub struct EnqueueRequest<'a> {
    topic: &'a Topic,
    job: &'a NewJob,
}

impl EnqueueRequest<'_> {
    /// The job's topic.
    pub fn topic(&self) -> &str {
        self.topic.as_str()
    }

    /// The job's key (the one it will have: a generated key is generated already).
    pub fn key(&self) -> &JobKey {
        &self.job.key
    }

    /// When it is due.
    pub fn due(&self) -> Due {
        self.job.due
    }

    /// Whether it replaces a waiting job of the same key.
    pub fn replace(&self) -> bool {
        self.job.replace
    }

    /// When it expires, if it does.
    pub fn expires(&self) -> Option<Expiry> {
        self.job.expires
    }

    /// Its MessagePack payload (without the trace context dq may store in front of it).
    pub fn payload(&self) -> &[u8] {
        crate::trace::split(&self.job.payload).1
    }

    /// The payload decoded as `T` — the job's payload type, or any type that reads the
    /// fields the hook needs (by field name: other fields are skipped).
    pub fn payload_as<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        crate::payload::decode(&self.job.payload)
    }
}

/// A client's enqueue hooks, in the order added.
#[derive(Clone, Default)]
pub(crate) struct EnqueueHooks(Arc<[Arc<dyn EnqueueHook>]>);

impl EnqueueHooks {
    /// These hooks and `hook` after them.
    pub(crate) fn with(&self, hook: Arc<dyn EnqueueHook>) -> EnqueueHooks {
        EnqueueHooks(self.0.iter().cloned().chain([hook]).collect())
    }
}

impl std::fmt::Debug for EnqueueHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EnqueueHooks({})", self.0.len())
    }
}

impl TopicClient {
    /// Asks the client's hooks about a validated job: the first refusal is
    /// [`Error::EnqueueRefused`]. Nothing to do (no call, no allocation) without hooks.
    pub(super) async fn ask_hooks(&self, job: &NewJob) -> Result<()> {
        let hooks = &self.client.hooks.0;
        if hooks.is_empty() {
            return Ok(());
        }
        let request = EnqueueRequest {
            topic: &self.topic,
            job,
        };
        for hook in hooks.iter() {
            if let Err(source) = hook.check(&request).await {
                return Err(Error::EnqueueRefused {
                    topic: self.topic.to_string(),
                    key: job.key.to_string(),
                    source: Arc::from(source),
                });
            }
        }
        Ok(())
    }
}
