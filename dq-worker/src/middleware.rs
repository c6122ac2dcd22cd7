//! Middleware: tower [`Layer`]s around every handler run of a worker
//! ([`WorkerBuilder::layer`](crate::WorkerBuilder::layer)).
//!
//! A run is a tower request, [`JobRequest`] (the job's context and its payload bytes), and
//! its response is the handler's outcome: `Ok(`[`Returned`]`)` or a [`JobError`]. The
//! innermost service, [`HandlerService`], decodes the payload and calls the handler; each
//! layer wraps the one added after it, so **the first layer added is the outermost**: it sees
//! the request first and the response last (as with `tower::ServiceBuilder`). A layer may
//!
//! - time or log the run (it wraps the decode and the handler);
//! - short-circuit it: an `Err(JobError)` without calling the inner service takes the
//!   handler's failure path (retry on the topic's policy, then dead; `JobError::permanent`
//!   buries at once, `JobError::defer` runs it again later without spending an attempt);
//! - change the outcome the inner service returned.
//!
//! The whole stack runs where the handler alone runs without layers: on the run's own task,
//! under the topic's timeout, stopped when the lease is lost or at shutdown (the stack's
//! future is then dropped: a layer sees no response for such a run), a panic anywhere in it
//! a failed attempt. A payload that does not fit the handler's type is the inner service's
//! `JobError::permanent("undecodable payload: …")`.
//!
//! A worker without layers runs its handlers exactly as before: no request is built and
//! nothing more is allocated per run. With layers, each run clones the stack (one boxed
//! service per layer) and boxes its future once more. A layer's service must be `Clone` and
//! `Send` (not `Sync`), its future `Send`.
//!
//! ```no_run
//! use std::task::{Context, Poll};
//! use std::time::Instant;
//! use dq_worker::middleware::{BoxFuture, JobRequest, Layer, Service};
//! use dq_core::{JobError, Returned};
//!
//! /// Logs how long each run took.
//! #[derive(Clone)]
//! struct Timing<S>(S);
//!
//! impl<S> Service<JobRequest> for Timing<S>
//! where
//!     S: Service<JobRequest, Response = Returned, Error = JobError>,
//!     S::Future: Send + 'static,
//! {
//!     type Response = Returned;
//!     type Error = JobError;
//!     type Future = BoxFuture;
//!
//!     fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), JobError>> {
//!         self.0.poll_ready(cx)
//!     }
//!
//!     fn call(&mut self, job: JobRequest) -> Self::Future {
//!         let (topic, attempt) = (job.topic(), job.attempt());
//!         let run = self.0.call(job);
//!         Box::pin(async move {
//!             let started = Instant::now();
//!             let outcome = run.await;
//!             println!("{topic} attempt {attempt}: {:?}, ok: {}", started.elapsed(), outcome.is_ok());
//!             outcome
//!         })
//!     }
//! }
//!
//! # async fn demo(client: dq_core::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let worker = dq_worker::Worker::builder(client)
//!     .layer(dq_worker::middleware::layer_fn(Timing))
//!     .build()?;
//! # Ok(()) }
//! ```

use std::future::{Ready, ready};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use dq_core::{HandlerFn, HandlerFuture, JobContext, JobError, JobKey, Returned};
use tower::util::BoxCloneService;

pub use tower::layer::layer_fn;
pub use tower::{Layer, Service, ServiceBuilder, ServiceExt};

/// The service a layer added with [`WorkerBuilder::layer`](crate::WorkerBuilder::layer)
/// wraps: the handler with the layers added after this one, boxed.
pub type JobService = BoxCloneService<JobRequest, Returned, JobError>;

/// A boxed future of a run's outcome, for layers that name their future's type.
pub type BoxFuture = HandlerFuture;

/// One handler run, as the layers see it: the job's context (topic, key, attempt, its
/// shared data, …) and its payload.
pub struct JobRequest {
    ctx: JobContext,
    /// The stored bytes: any trace context in front, then the MessagePack payload.
    payload: Vec<u8>,
    /// The handler's decode-and-call.
    run: HandlerFn,
}

impl std::fmt::Debug for JobRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobRequest")
            .field("topic", &self.ctx.topic)
            .field("key", &self.ctx.key)
            .field("attempt", &self.ctx.attempt)
            .field("payload_len", &self.payload().len())
            .finish_non_exhaustive()
    }
}

impl JobRequest {
    pub(crate) fn new(run: HandlerFn, payload: Vec<u8>, ctx: JobContext) -> Self {
        JobRequest { ctx, payload, run }
    }

    /// The job's topic.
    pub fn topic(&self) -> &'static str {
        self.ctx.topic
    }

    /// The job's key.
    pub fn key(&self) -> &JobKey {
        &self.ctx.key
    }

    /// Which attempt this run is, from 1.
    pub fn attempt(&self) -> u32 {
        self.ctx.attempt
    }

    /// The context the handler gets: also its due time, lateness, last attempt, cancellation
    /// and the worker's shared data (`context().data::<T>()`).
    pub fn context(&self) -> &JobContext {
        &self.ctx
    }

    /// The job's payload as enqueued (MessagePack; without the trace context dq may store in
    /// front of it).
    pub fn payload(&self) -> &[u8] {
        dq_core::trace::split(&self.payload).1
    }

    /// The payload decoded as `T` — the handler's payload type, or any type that reads the
    /// fields the layer needs (MessagePack by field name: other fields are skipped). A
    /// payload that does not fit is [`dq_core::Error::Decode`].
    pub fn payload_as<T: serde::de::DeserializeOwned>(&self) -> dq_core::Result<T> {
        dq_core::payload::decode(&self.payload)
    }
}

/// The innermost service: decodes the payload into the handler's type and calls the
/// handler. A payload that does not fit is `JobError::permanent` (the job is buried at once,
/// as without layers).
#[derive(Clone, Copy, Debug, Default)]
pub struct HandlerService;

impl Service<JobRequest> for HandlerService {
    type Response = Returned;
    type Error = JobError;
    type Future = HandlerFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), JobError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, job: JobRequest) -> HandlerFuture {
        match (job.run)(&job.payload, job.ctx) {
            Ok(run) => run,
            Err(e) => {
                let failed: Ready<Result<Returned, JobError>> =
                    ready(Err(JobError::permanent(undecodable(e))));
                Box::pin(failed)
            }
        }
    }
}

/// The history's text for a payload that does not fit the handler's type.
pub(crate) fn undecodable(e: dq_core::Error) -> String {
    // The error names the type and serde's reason (`missing field …`); once a fixed handler
    // is deployed, requeueing the dead job runs it.
    let why = match e {
        dq_core::Error::Decode(why) => why,
        other => other.to_string(),
    };
    format!("undecodable payload: {why}")
}

/// One layer as the builder keeps it: wraps a stack in itself.
pub(crate) type Wrap = Arc<dyn Fn(JobService) -> JobService + Send + Sync>;

/// A worker's layers around [`HandlerService`], built once; each run clones it. (Behind a
/// mutex, held only to clone: a layer's service need not be `Sync`, as one holding a
/// `Box<dyn Future + Send>` or a `Cell` is not.)
pub(crate) struct Stack(Mutex<JobService>);

impl Stack {
    /// The stack of `layers` (`None`: no layers, the runner calls handlers directly).
    pub(crate) fn of(layers: &[Wrap]) -> Option<Arc<Stack>> {
        if layers.is_empty() {
            return None;
        }
        // The first added is the outermost: wrap from the last.
        let service = layers
            .iter()
            .rev()
            .fold(JobService::new(HandlerService), |inner, wrap| wrap(inner));
        Some(Arc::new(Stack(Mutex::new(service))))
    }

    /// A run through the stack: readiness, then the call, on the run's task.
    pub(crate) fn call(&self, job: JobRequest) -> HandlerFuture {
        let service = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        Box::pin(service.oneshot(job))
    }
}
