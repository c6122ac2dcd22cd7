//! Group commit: concurrent single enqueues to one partition share one store call
//! (ARCHITECTURE.md, "Group commit").
//!
//! Each partition a client enqueues to has a *lane* while someone is sending to it. A caller
//! that finds no lane creates it and leads: it sends its own job at once, as a plain enqueue
//! would (no task, no channel — a short mutex on the way in and on the way out). Callers that
//! find a lane queue in it, in arrival order, each with a oneshot channel for its own outcome.
//! When the leader's call returns (or the leader's future is dropped), the lane is handed to a
//! flusher task if anyone queued: it takes up to `max_batch` queued callers, sends their jobs as
//! one enqueue call, answers each, and goes on until the queue is empty; then the lane is
//! removed. So an idle client adds no latency, a busy partition sends one call per round trip
//! whatever the number of callers, and only partitions with a call in flight hold a lane.
//!
//! With a linger, every call goes through the flusher, which waits up to the linger (or until
//! a batch is full) before it takes each batch.
//!
//! Dropping a caller never strands the others: the sending of queued batches happens in the
//! flusher task, which no caller owns. A caller dropped while queued is skipped when a batch is
//! taken (its job is not sent); one dropped after its batch was taken is applied or not as a
//! dropped plain call would be.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};

use crate::error::{Error, Result};
use crate::job::Queue;
use crate::store::produce::{EnqueueOutcome, NewJob};

/// What sends one batch: a single enqueue call of `jobs` to `queue` under one call id,
/// through the client's retry path. The topic client implements it (`enqueue.rs`), so that
/// lanes need nothing of the client.
pub(crate) trait BatchSend: Send + Sync + 'static {
    /// One enqueue call of `jobs` to `queue`.
    fn send_batch<'a>(
        &'a self,
        queue: &'a Queue,
        jobs: &'a [NewJob],
    ) -> Pin<Box<dyn Future<Output = Result<Vec<EnqueueOutcome>>> + Send + 'a>>;
}

/// How one caller's lane is sent: the lanes of its client, what sends a batch, and the
/// settings.
pub(crate) struct Route {
    /// The lanes of the caller's client and its clones.
    pub lanes: Arc<Lanes>,
    /// What sends a batch.
    pub sender: Arc<dyn BatchSend>,
    /// The caller's partition count (the sender checks the topic with it).
    pub partitions: u16,
    /// Most callers per call.
    pub max_batch: usize,
    /// How long each batch waits for company.
    pub linger: Duration,
}

/// One lane per (partition, partition count) with a sender active.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct LaneKey {
    queue: Queue,
    /// The caller's partition count (the lane's sender checks the topic with it).
    partitions: u16,
}

/// A caller waiting in a lane: its job, and where its outcome goes.
struct Waiter {
    job: NewJob,
    reply: oneshot::Sender<Result<EnqueueOutcome>>,
}

/// A partition's lane: present while a leader or a flusher is responsible for it.
struct Lane {
    waiting: VecDeque<Waiter>,
    /// Woken when `waiting` reaches the batch size (ends a linger early).
    full: Arc<Notify>,
}

impl Lane {
    fn new() -> Lane {
        Lane {
            waiting: VecDeque::new(),
            full: Arc::new(Notify::new()),
        }
    }
}

/// The lanes of a client and its clones.
#[derive(Default)]
pub(crate) struct Lanes {
    map: Mutex<HashMap<LaneKey, Lane>>,
}

impl Lanes {
    fn lock(&self) -> MutexGuard<'_, HashMap<LaneKey, Lane>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Callers queued in every lane now (not counting those whose call is in flight).
    pub(crate) fn waiting(&self) -> usize {
        self.lock().values().map(|l| l.waiting.len()).sum()
    }
}

/// What one sender needs: the lanes, what sends, the lane, and the settings.
#[derive(Clone)]
struct Sender {
    lanes: Arc<Lanes>,
    send: Arc<dyn BatchSend>,
    key: LaneKey,
    max_batch: usize,
    linger: Duration,
}

/// Enqueues one validated job of `queue` (the topic already checked) through its lane.
pub(crate) async fn enqueue(route: Route, queue: Queue, job: NewJob) -> Result<EnqueueOutcome> {
    let sender = Sender {
        max_batch: route.max_batch.max(1),
        linger: route.linger,
        key: LaneKey {
            queue,
            partitions: route.partitions,
        },
        lanes: route.lanes,
        send: route.sender,
    };
    let lanes = &sender.lanes;
    let lead = {
        let mut map = lanes.lock();
        match map.get_mut(&sender.key) {
            Some(lane) => Err(join(lane, job, sender.max_batch)),
            None if sender.linger.is_zero() => {
                map.insert(sender.key.clone(), Lane::new());
                Ok(job)
            }
            None => {
                // With a linger, even the first caller waits for company: it queues, and a
                // flusher (which nobody's drop can stop) sends.
                let mut lane = Lane::new();
                let rx = join(&mut lane, job, sender.max_batch);
                map.insert(sender.key.clone(), lane);
                drop(map);
                spawn_flusher(sender.clone());
                Err(rx)
            }
        }
    };
    match lead {
        Ok(job) => lead_one(sender, job).await,
        Err(rx) => rx.await.unwrap_or_else(|_| Err(sender_stopped())),
    }
}

/// Queues a caller in `lane`; its outcome arrives on the returned receiver.
fn join(
    lane: &mut Lane,
    job: NewJob,
    max_batch: usize,
) -> oneshot::Receiver<Result<EnqueueOutcome>> {
    let (reply, rx) = oneshot::channel();
    lane.waiting.push_back(Waiter { job, reply });
    if lane.waiting.len() >= max_batch {
        lane.full.notify_one();
    }
    rx
}

/// The error of a queued caller whose sender ended without answering: only when its task
/// was dropped with the runtime shutting down (or a panic in the store). The job may have
/// been stored.
fn sender_stopped() -> Error {
    Error::Protocol(
        "the group commit sender stopped before answering (runtime shutting down?); the job \
         may have been stored"
            .into(),
    )
}

/// The leader's call: its own job alone, sent at once. Whatever happens to this future, the
/// lane is handed over when it ends.
async fn lead_one(sender: Sender, job: NewJob) -> Result<EnqueueOutcome> {
    let handover = Handover(sender);
    let jobs = [job];
    let result = handover.0.send(&jobs).await;
    drop(handover);
    let mut outcomes = result?;
    outcomes
        .pop()
        .ok_or_else(|| Error::Protocol("enqueue returned no outcome".into()))
}

/// Hands a leader's lane over when the leader is done or dropped: to a flusher if callers
/// queued meanwhile, else it removes the lane.
struct Handover(Sender);

impl Drop for Handover {
    fn drop(&mut self) {
        let mut map = self.0.lanes.lock();
        let queued = map
            .get(&self.0.key)
            .is_some_and(|lane| !lane.waiting.is_empty());
        if queued {
            drop(map);
            spawn_flusher(self.0.clone());
        } else {
            map.remove(&self.0.key);
        }
    }
}

/// Starts the flusher of a lane that has callers queued. The flusher's guard exists before
/// the task does, so that a task dropped unpolled (a runtime shutting down) still frees the
/// lane; without a runtime at all, the lane is freed at once. Its callers then get an error.
fn spawn_flusher(sender: Sender) {
    let stop = Stop {
        sender,
        armed: true,
    };
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(flush(stop));
        }
        Err(_) => drop(stop),
    }
}

/// Sends the lane's queued callers, a batch per call, until none is left; then removes the
/// lane. If this task is dropped before (the runtime shutting down, a panic), its guard
/// removes the lane and the callers still queued get an error.
async fn flush(mut stop: Stop) {
    let sender = &stop.sender;
    let lanes = &sender.lanes;
    // Bounded by the callers: each round answers or drops at least one queued caller, or
    // ends.
    loop {
        let full = {
            let mut map = lanes.lock();
            let Some(lane) = map.get_mut(&sender.key) else {
                stop.armed = false;
                return;
            };
            if lane.waiting.is_empty() {
                map.remove(&sender.key);
                stop.armed = false;
                return;
            }
            (lane.waiting.len() < sender.max_batch).then(|| lane.full.clone())
        };
        if let Some(full) = full
            && !sender.linger.is_zero()
        {
            let _ = tokio::time::timeout(sender.linger, full.notified()).await;
        }
        let batch = sender.take();
        if batch.is_empty() {
            continue;
        }
        let (jobs, replies): (Vec<NewJob>, Vec<_>) =
            batch.into_iter().map(|w| (w.job, w.reply)).unzip();
        match sender.send(&jobs).await {
            Ok(outcomes) if outcomes.len() == replies.len() => {
                for (reply, outcome) in replies.into_iter().zip(outcomes) {
                    let _ = reply.send(Ok(outcome));
                }
            }
            Ok(outcomes) => {
                let e = Error::Protocol(format!(
                    "enqueue of {} jobs returned {} outcomes",
                    replies.len(),
                    outcomes.len()
                ));
                for reply in replies {
                    let _ = reply.send(Err(e.clone()));
                }
            }
            Err(e) => {
                // The whole call failed: every caller of the batch gets the error, as if it
                // had been its own call.
                for reply in replies {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
    }
}

/// A flusher's lane and settings; removes the lane if the flusher ends (or is dropped)
/// without emptying it.
struct Stop {
    sender: Sender,
    /// Cleared when the flusher removed the lane itself.
    armed: bool,
}

impl Drop for Stop {
    fn drop(&mut self) {
        if self.armed {
            let lane = self.sender.lanes.lock().remove(&self.sender.key);
            drop(lane); // outside the lock: the callers' receivers wake with an error
        }
    }
}

impl Sender {
    /// Takes the next batch: up to `max_batch` queued callers, oldest first, skipping (and
    /// dropping) those that went away while queued — their jobs are never sent.
    fn take(&self) -> Vec<Waiter> {
        let mut map = self.lanes.lock();
        let Some(lane) = map.get_mut(&self.key) else {
            return Vec::new();
        };
        let mut batch = Vec::with_capacity(lane.waiting.len().min(self.max_batch));
        while batch.len() < self.max_batch {
            let Some(w) = lane.waiting.pop_front() else {
                break;
            };
            if !w.reply.is_closed() {
                batch.push(w);
            }
        }
        batch
    }

    /// One enqueue call of `jobs`, under one call id, through the client's retry path.
    async fn send(&self, jobs: &[NewJob]) -> Result<Vec<EnqueueOutcome>> {
        crate::metrics::enqueue_batch(self.key.queue.topic.as_str(), jobs.len());
        self.send.send_batch(&self.key.queue, jobs).await
    }
}
