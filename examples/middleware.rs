//! Middleware: an enqueue hook on the client and two tower layers around every handler run.
//!
//! A billing service sends invoices for its tenants. The client's **enqueue hook** refuses a
//! job for a tenant it does not know (nothing is written; the caller gets the hook's own
//! error back, typed). On the worker, a **timing layer** (added first: the outermost) logs
//! every run with its duration and outcome, and a **tenant-check layer** refuses runs for a
//! tenant suspended after its job was enqueued: its `JobError::permanent` sends the job to
//! the dead queue without the handler running.
//!
//! Run: `cargo run --example middleware` (embedded store), or with `REDIS_URL=redis://…`.

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use dq::middleware::{
    BoxFuture, EnqueueHook, EnqueueRequest, JobRequest, Layer, Returned, Service, layer_fn,
};
use dq::{JobError, JobState};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Invoice {
    tenant: String,
    cents: u64,
}

/// Sends an invoice.
#[dq::delayed_job(topic = "billing.invoice", retry = "1s, 5s")]
async fn send_invoice(invoice: Invoice, ctx: dq::JobContext) -> Result<(), JobError> {
    tokio::time::sleep(Duration::from_millis(30)).await; // talking to the mail server
    ctx.data::<common::Timeline>()?.say(format!(
        "invoice of {} cents sent to {}",
        invoice.cents, invoice.tenant
    ));
    Ok(())
}

/// The tenants: the ones the service knows, and those of them suspended.
#[derive(Default)]
struct Tenants {
    known: HashSet<String>,
    suspended: Mutex<HashSet<String>>,
}

/// What the hook and the layer read of any job's payload: only its tenant.
#[derive(Deserialize)]
struct TenantOf {
    tenant: String,
}

/// The hook's own error: the caller gets it back with `Error::refused_with`.
#[derive(Debug)]
struct UnknownTenant(String);

impl std::fmt::Display for UnknownTenant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tenant {} is not a customer", self.0)
    }
}

impl std::error::Error for UnknownTenant {}

/// The enqueue hook: a job for an unknown tenant is never written.
struct KnownTenant(Arc<Tenants>);

#[dq::middleware::async_trait]
impl EnqueueHook for KnownTenant {
    async fn check(&self, job: &EnqueueRequest<'_>) -> Result<(), dq::BoxError> {
        let TenantOf { tenant } = job.payload_as()?;
        if self.0.known.contains(&tenant) {
            Ok(())
        } else {
            Err(Box::new(UnknownTenant(tenant)))
        }
    }
}

/// The timing layer's service: logs each run's duration and outcome.
#[derive(Clone)]
struct Timing<S>(S);

impl<S> Service<JobRequest> for Timing<S>
where
    S: Service<JobRequest, Response = Returned, Error = JobError>,
    S::Future: Send + 'static,
{
    type Response = Returned;
    type Error = JobError;
    type Future = BoxFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), JobError>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, job: JobRequest) -> BoxFuture {
        // Optional data: `try_data` (a missing `data` would defer the job, see below).
        let timeline = job.context().try_data::<common::Timeline>().copied();
        let what = format!("{} {} (attempt {})", job.topic(), job.key(), job.attempt());
        let run = self.0.call(job);
        Box::pin(async move {
            let started = Instant::now();
            let outcome = run.await;
            let how = match &outcome {
                Ok(_) => "ok".to_string(),
                Err(e) => format!("failed: {e}"),
            };
            if let Some(timeline) = timeline {
                timeline.say(format!("[timing] {what}: {how} in {:?}", started.elapsed()));
            }
            outcome
        })
    }
}

/// The tenant-check layer's service: a suspended tenant's job does not run.
#[derive(Clone)]
struct TenantCheck<S>(S);

impl<S> Service<JobRequest> for TenantCheck<S>
where
    S: Service<JobRequest, Response = Returned, Error = JobError>,
    S::Future: Send + 'static,
{
    type Response = Returned;
    type Error = JobError;
    type Future = BoxFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), JobError>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, job: JobRequest) -> BoxFuture {
        // A worker not given the tenants is misdeployed: `data` fails, and the job is deferred
        // without spending an attempt (as a handler's `ctx.data` would).
        let tenants = match job.context().data::<Arc<Tenants>>() {
            Ok(tenants) => tenants.clone(),
            Err(missing) => return Box::pin(async move { Err(missing) }),
        };
        if let Ok(TenantOf { tenant }) = job.payload_as::<TenantOf>()
            && tenants.suspended.lock().unwrap().contains(&tenant)
        {
            return Box::pin(async move {
                Err(JobError::permanent(format!("tenant {tenant} is suspended")))
            });
        }
        // (An undecodable payload: the handler's decode buries it, saying why.)
        Box::pin(self.0.call(job))
    }
}

/// The layer itself: any `Layer` works (`tower::ServiceBuilder` too).
#[derive(Clone, Copy)]
struct TenantCheckLayer;

impl<S> Layer<S> for TenantCheckLayer {
    type Service = TenantCheck<S>;

    fn layer(&self, inner: S) -> TenantCheck<S> {
        TenantCheck(inner)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    common::init_logs();
    let timeline = common::Timeline::start();
    let tenants = Arc::new(Tenants {
        known: ["acme", "initech"].map(String::from).into(),
        suspended: Mutex::default(),
    });
    let client = common::connect_with("middleware", |b| {
        b.enqueue_hook(KnownTenant(tenants.clone()))
    })
    .await;

    let invoice = |tenant: &str, cents| Invoice {
        tenant: tenant.into(),
        cents,
    };
    for (tenant, cents) in [("acme", 1200), ("initech", 800), ("globex", 500)] {
        match client
            .enqueue::<send_invoice>(invoice(tenant, cents))
            .key(format!("inv-{tenant}"))
            .delay(Duration::from_millis(300))
            .await
        {
            Ok(_) => timeline.say(format!("invoice for {tenant} enqueued")),
            Err(e) => {
                let refusal = e.refused_with::<UnknownTenant>();
                assert!(refusal.is_some(), "only globex is refused: {e}");
                timeline.say(format!("enqueue refused, nothing written: {e}"));
            }
        }
    }
    assert!(client.job::<send_invoice>("inv-globex").await?.is_none());
    // Suspended after its invoice was enqueued: the worker's layer stops it.
    tenants.suspended.lock().unwrap().insert("initech".into());

    let worker = dq::Worker::builder(client.clone())
        .topics(["billing.invoice"])
        .data(timeline)
        .data(tenants.clone())
        .layer(layer_fn(Timing)) // first added: the outermost
        .layer(TenantCheckLayer)
        .build()?;
    let watcher = client.clone();
    worker
        .run_until(async move {
            // Until acme's invoice is sent and initech's is dead (at most 10 s).
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                let acme = watcher.job::<send_invoice>("inv-acme").await;
                let initech = watcher.job::<send_invoice>("inv-initech").await;
                let sent = matches!(acme, Ok(None));
                let dead = matches!(initech, Ok(Some(j)) if j.state == JobState::Dead);
                if sent && dead {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await?;
    let stats = client.stats::<send_invoice>().await?;
    let dead = client.job::<send_invoice>("inv-initech").await?;
    println!(
        "summary: {} sent, {} dead ({}); globex's was never written",
        stats.succeeded,
        stats.dead,
        dead.and_then(|j| j.history.last().map(|a| a.error.clone()))
            .unwrap_or_default()
    );
    assert_eq!((stats.succeeded, stats.dead), (1, 1));
    Ok(())
}
