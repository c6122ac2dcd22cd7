//! Flows: a parent job that becomes due only once its children have ended (ARCHITECTURE.md
//! §16). The parent waits scheduled at [`FLOW_WAIT_MS`]; its children are one batch (id
//! [`BatchId::of_flow`]) whose completion releases it — made due now, once — with the
//! batch's policy for failed children. A child may itself be a flow, to [`MAX_FLOW_DEPTH`]
//! levels.

use std::time::Duration;

use crate::Job;
use crate::batch::{
    BatchId, BatchSpec, BatchThen, DEFAULT_BATCH_RETENTION, FailurePolicy, MAX_FLOW_DEPTH,
};
use crate::client::{BatchHandle, Client, JobSpec};
use crate::error::{Error, Result};
use crate::job::{Due, MAX_DUE_MS, from_unix_ms};
use crate::names::{JobKey, Topic};

/// The due time (Unix ms) a flow's parent waits at until its children have ended: the
/// latest a record holds ([`MAX_DUE_MS`]), so no fetch ever promotes it. Its release makes it
/// due now.
pub const FLOW_WAIT_MS: u64 = MAX_DUE_MS;

/// One level of a flow's children: jobs of one topic, or a nested flow.
enum Child {
    Jobs(Topic, Vec<JobSpec<Vec<u8>>>),
    Flow(Box<FlowBuilder>),
}

/// A flow about to be enqueued: its parent, its children, the policy for failed children.
/// From [`Client::new_flow`].
#[must_use = "a flow is stored by `enqueue`"]
pub struct FlowBuilder {
    client: Client,
    parent: Result<(Topic, JobSpec<Vec<u8>>)>,
    children: Vec<Result<Child>>,
    policy: FailurePolicy,
    retention: Duration,
}

/// A flow once stored: its parent's topic and key, and the batch of its children.
#[derive(Clone, Debug)]
pub struct FlowHandle {
    /// The parent's topic.
    pub topic: Topic,
    /// The parent's key.
    pub key: JobKey,
    /// The children's batch (its progress, members, cancel).
    pub children: BatchHandle,
}

impl Client {
    /// Starts a flow whose parent is a job of `J`: it runs once its children (added with
    /// [`FlowBuilder::children`] and [`FlowBuilder::child_flow`]) have ended.
    ///
    /// ```no_run
    /// # async fn demo(client: dq_core::Client) -> dq_core::Result<()> {
    /// # struct release_item; struct close_order;
    /// # impl dq_core::Job for release_item { type Payload = u64; const TOPIC: &'static str = "items.release"; }
    /// # impl dq_core::Job for close_order { type Payload = u64; const TOPIC: &'static str = "orders.close"; }
    /// use dq_core::JobSpec;
    /// client
    ///     .new_flow::<close_order>(JobSpec::new(17).key("order-17"))
    ///     .children::<release_item>((1..=3).map(|item| JobSpec::new(item).key(format!("17-{item}"))))
    ///     .enqueue()
    ///     .await?; // close_order runs once the three items have ended
    /// # Ok(()) }
    /// ```
    pub fn new_flow<J: Job>(&self, parent: JobSpec<J::Payload>) -> FlowBuilder {
        let max = self.config.max_payload;
        let parent =
            typed_spec::<J>(parent, max).and_then(|spec| Ok((Topic::new(J::TOPIC)?, spec)));
        FlowBuilder {
            client: self.clone(),
            parent,
            children: Vec::new(),
            policy: FailurePolicy::default(),
            retention: DEFAULT_BATCH_RETENTION,
        }
    }
}

/// A typed spec as the typed client sends it: encoded, with the handler's defaults.
fn typed_spec<J: Job>(j: JobSpec<J::Payload>, max: usize) -> Result<JobSpec<Vec<u8>>> {
    let mut one = super::typed::typed_specs::<J>([j], max)?;
    one.pop()
        .ok_or_else(|| Error::Protocol("one spec in, none out".into()))
}

impl FlowBuilder {
    /// Adds children: jobs of `J` (due when their specs say: a child may wait too).
    pub fn children<J: Job>(
        mut self,
        specs: impl IntoIterator<Item = JobSpec<J::Payload>>,
    ) -> Self {
        let max = self.client.config.max_payload;
        let child = Topic::new(J::TOPIC).and_then(|topic| {
            Ok(Child::Jobs(
                topic,
                super::typed::typed_specs::<J>(specs, max)?,
            ))
        });
        self.children.push(child);
        self
    }

    /// Adds a child that is itself a flow: its parent is a child of this one, released once
    /// its own children have ended.
    pub fn child_flow(mut self, flow: FlowBuilder) -> Self {
        self.children.push(Ok(Child::Flow(Box::new(flow))));
        self
    }

    /// The policy for failed children (default [`FailurePolicy::WaitAll`]).
    pub fn policy(mut self, policy: FailurePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// How long the children's batch is kept once the parent is released (default 7 days).
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention.max(Duration::from_secs(1));
        self
    }

    /// Stores the flow: every level's children batch is opened, its parent enqueued waiting
    /// (a member of the level above), its children added, then the batch closed. Everything is
    /// checked first (payloads, keys, depth at most [`MAX_FLOW_DEPTH`], no `replace` or
    /// `debounce`): a bad flow writes nothing. Enqueueing the same flow again (the same keys)
    /// after a failure completes it without doubling anything.
    pub async fn enqueue(mut self) -> Result<FlowHandle> {
        self.check(1)?;
        super::batch::check_batch_format(&self.client)?;
        let client = self.client.clone();
        self.store(&client, None).await
    }

    /// Checks this level and below; gives every parent without a key one (so a level's batch
    /// id is known before anything is written).
    fn check(&mut self, depth: usize) -> Result<()> {
        if depth > MAX_FLOW_DEPTH {
            return Err(Error::InvalidConfig(format!(
                "a flow nests at most {MAX_FLOW_DEPTH} levels"
            )));
        }
        let Ok((_, parent)) = &mut self.parent else {
            return Err(take_error(&mut self.parent));
        };
        if parent.replace
            || parent.window.is_some()
            || parent.due != Due::Now
            || matches!(parent.expires, Some(crate::job::Expiry::At(_)))
        {
            return Err(Error::InvalidConfig(
                "a flow's parent is due when its children have ended: no due time, absolute \
                 expiry, replace or key window of its own"
                    .into(),
            ));
        }
        let key = match parent.key.take() {
            Some(k) => JobKey::new(k)?,
            None => JobKey::generate(),
        };
        parent.key = Some(key.as_str().to_owned());
        for child in &mut self.children {
            if child.is_err() {
                return Err(take_error(child));
            }
            match child
                .as_mut()
                .map_err(|_| Error::Protocol("checked above".into()))?
            {
                Child::Jobs(_, specs) => {
                    for s in specs {
                        if let Some(k) = &s.key {
                            JobKey::new(k.clone())?;
                        }
                    }
                }
                Child::Flow(f) => f.check(depth + 1)?,
            }
        }
        Ok(())
    }

    async fn store(self, client: &Client, above: Option<&BatchHandle>) -> Result<FlowHandle> {
        let (topic, mut parent) = self.parent?;
        let key = JobKey::new(parent.key.clone().unwrap_or_default())?;
        let id = BatchId::of_flow(&topic, &key);
        let spec = BatchSpec {
            then: BatchThen::Release {
                topic: topic.clone(),
                key: key.clone(),
            },
            policy: self.policy,
            retention: self.retention,
        };
        let (_, opened) = client.store.batch_open(&id, &spec).await?;
        let children = client.batch(id.as_str())?;
        if opened.closed {
            // stored whole before (a level is closed only once all of it is stored)
            return Ok(FlowHandle {
                topic,
                key,
                children,
            });
        }
        // the parent waits for its children (a member of the level above, if any)
        parent.due = Due::At(from_unix_ms(FLOW_WAIT_MS));
        match above {
            Some(batch) => {
                batch.add_raw(topic.as_str(), vec![parent]).await?;
            }
            None => {
                client
                    .topic(topic.as_str())?
                    .enqueue_bulk(vec![parent])
                    .await?;
            }
        }
        for child in self.children {
            let stored = match child? {
                Child::Jobs(t, specs) => children.add_raw(t.as_str(), specs).await.map(drop),
                Child::Flow(f) => Box::pin(f.store(client, Some(&children))).await.map(drop),
            };
            match stored {
                Ok(()) => {}
                // under FailFast a child that failed while the level was being stored completed
                // it (its parent is failed): the rest of the level is not needed
                Err(Error::BatchClosed(_)) if children.info().await?.is_some_and(|b| b.done) => {
                    return Ok(FlowHandle {
                        topic,
                        key,
                        children,
                    });
                }
                Err(e) => return Err(e),
            }
        }
        children.close().await?;
        Ok(FlowHandle {
            topic,
            key,
            children,
        })
    }
}

/// The error a builder kept until `enqueue` (met while building), taken out to be returned.
fn take_error<T>(slot: &mut Result<T>) -> Error {
    match std::mem::replace(slot, Err(Error::InvalidConfig("reported already".into()))) {
        Err(e) => e,
        Ok(_) => Error::Protocol("no error kept".into()),
    }
}
