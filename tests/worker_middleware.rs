//! Middleware around handler runs (`WorkerBuilder::layer`), on a real Redis and on the
//! embedded store: the layers see every run with its context, in the documented order (the
//! first added outermost), and a layer that refuses a run sends the job down the handler's
//! failure path (retried on the policy, then dead) without the handler running.

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use dq::middleware::{BoxFuture, JobRequest, Layer, Returned, Service, ServiceBuilder};
use dq::{Client, JobContext, JobError, JobState, Worker, WorkerBuilder};
use dq_testkit::eventually;
use serde::{Deserialize, Serialize};

const WAIT: Duration = Duration::from_secs(20);

#[derive(Serialize, Deserialize)]
struct Work {
    tenant: String,
    n: u64,
}

/// What the layers only need of the payload: any type reading some of its fields.
#[derive(Deserialize)]
struct TenantOnly {
    tenant: String,
}

/// Everything the layers and handlers saw, in order.
#[derive(Clone, Default)]
struct Trail(Arc<Mutex<Vec<String>>>);

impl Trail {
    fn push(&self, line: String) {
        self.0.lock().unwrap().push(line);
    }

    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

#[dq::delayed_job(topic = "mw.seen", retry = "none", keep_succeeded = "1h")]
async fn seen(work: Work, ctx: JobContext) -> Result<u64, JobError> {
    ctx.data::<Trail>()?
        .push(format!("handler {} {}", ctx.key, work.n));
    Ok(work.n * 2)
}

#[dq::delayed_job(topic = "mw.refused", retry = "50ms, 50ms")]
async fn refused(_work: Work, ctx: JobContext) -> Result<(), JobError> {
    ctx.data::<Trail>()?.push(format!("handler {}", ctx.key));
    Ok(())
}

/// A layer that writes what it sees before and after the inner service, under its name;
/// with `refuse`, answers with an error without calling the inner service.
#[derive(Clone)]
struct Probe {
    name: &'static str,
    trail: Trail,
    refuse: bool,
}

impl<S> Layer<S> for Probe {
    type Service = ProbeService<S>;

    fn layer(&self, inner: S) -> ProbeService<S> {
        ProbeService {
            probe: self.clone(),
            inner,
        }
    }
}

#[derive(Clone)]
struct ProbeService<S> {
    probe: Probe,
    inner: S,
}

impl<S> Service<JobRequest> for ProbeService<S>
where
    S: Service<JobRequest, Response = Returned, Error = JobError>,
    S::Future: Send + 'static,
{
    type Response = Returned;
    type Error = JobError;
    type Future = BoxFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), JobError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, job: JobRequest) -> BoxFuture {
        let Probe {
            name,
            trail,
            refuse,
        } = self.probe.clone();
        let tenant = job
            .payload_as::<TenantOnly>()
            .map_or_else(|e| format!("<{e}>"), |p| p.tenant);
        trail.push(format!(
            "{name}> {} {} #{} {tenant} last={}",
            job.topic(),
            job.key(),
            job.attempt(),
            job.context().is_last_attempt(),
        ));
        if refuse {
            return Box::pin(
                async move { Err(JobError::retry(format!("{name} refused the run"))) },
            );
        }
        let run = self.inner.call(job);
        Box::pin(async move {
            let outcome = run.await;
            trail.push(match &outcome {
                Ok(Returned::Value(v)) => {
                    format!("{name}< ok {}", dq::payload::decode::<u64>(v).unwrap())
                }
                Ok(other) => format!("{name}< ok {other:?}"),
                Err(e) => format!("{name}< err {e}"),
            });
            outcome
        })
    }
}

fn probe(name: &'static str, trail: &Trail) -> Probe {
    Probe {
        name,
        trail: trail.clone(),
        refuse: false,
    }
}

async fn redis_client() -> Client {
    Client::builder()
        .namespace(dq_testkit::namespace("mw"))
        .connect(&dq_testkit::shared().url())
        .await
        .expect("connect")
}

/// Two layers around one handler: each run goes A, B, the handler, B, A, with the job's
/// topic, key, attempt and payload; an undecodable payload is the innermost service's
/// permanent error, which the layers see and which buries the job.
async fn layers_see_every_run_in_order(
    client: Client,
    add_a_then_b: impl FnOnce(WorkerBuilder, Probe, Probe) -> WorkerBuilder,
) {
    let trail = Trail::default();
    let builder = Worker::builder(client.clone())
        .topics(["mw.seen"])
        .data(trail.clone());
    let worker = add_a_then_b(builder, probe("A", &trail), probe("B", &trail))
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    client
        .enqueue::<seen>(Work {
            tenant: "acme".into(),
            n: 21,
        })
        .key("job-1")
        .await
        .unwrap();
    eventually("job-1 ran", WAIT, || async { trail.lines().len() == 5 }).await;
    assert_eq!(
        trail.lines(),
        [
            "A> mw.seen job-1 #1 acme last=true",
            "B> mw.seen job-1 #1 acme last=true",
            "handler job-1 21",
            "B< ok 42",
            "A< ok 42",
        ]
    );
    // What the handler returned went through both layers to the store.
    match client.wait::<seen>("job-1", WAIT).await.unwrap() {
        dq::WaitOutcome::Succeeded { result, .. } => assert_eq!(result, 42),
        other => panic!("{other:?}"),
    }

    // Bytes that are not a `Work`: the handler never runs, the layers see the refusal.
    client
        .topic("mw.seen")
        .unwrap()
        .enqueue(b"\xc1".to_vec())
        .key("garbage")
        .await
        .unwrap();
    eventually("garbage dead", WAIT, || async {
        client
            .job::<seen>("garbage")
            .await
            .unwrap()
            .is_some_and(|j| j.state == JobState::Dead)
    })
    .await;
    let lines = trail.lines();
    assert_eq!(lines.len(), 9, "{lines:#?}");
    assert!(
        lines[5].starts_with("A> mw.seen garbage #1 <"),
        "{lines:#?}"
    );
    assert!(
        lines[6].starts_with("B> mw.seen garbage #1 <"),
        "{lines:#?}"
    );
    assert!(
        lines[7].starts_with("B< err undecodable payload: does not fit"),
        "{lines:#?}"
    );
    assert!(
        lines[8].starts_with("A< err undecodable payload"),
        "{lines:#?}"
    );
    let dead = client.job::<seen>("garbage").await.unwrap().unwrap();
    assert_eq!(dead.attempts, 1);
    assert!(
        dead.history[0].error.starts_with("undecodable payload"),
        "{:?}",
        dead.history
    );
    worker.shutdown().await;
}

/// A layer that refuses every run: the handler never runs, the job is retried on its policy
/// (two retries) and then dead, each attempt's error the layer's.
async fn a_refusing_layer_retries_then_buries(client: Client) {
    let trail = Trail::default();
    let worker = Worker::builder(client.clone())
        .topics(["mw.refused"])
        .data(trail.clone())
        .layer(probe("outer", &trail))
        .layer(Probe {
            refuse: true,
            ..probe("gate", &trail)
        })
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    client
        .enqueue::<refused>(Work {
            tenant: "mallory".into(),
            n: 1,
        })
        .key("job-r")
        .await
        .unwrap();
    eventually("job-r dead", WAIT, || async {
        client
            .job::<refused>("job-r")
            .await
            .unwrap()
            .is_some_and(|j| j.state == JobState::Dead)
    })
    .await;
    let dead = client.job::<refused>("job-r").await.unwrap().unwrap();
    assert_eq!(dead.attempts, 3);
    let errors: Vec<_> = dead.history.iter().map(|a| a.error.as_str()).collect();
    assert_eq!(errors, ["gate refused the run"; 3]);
    let lines = trail.lines();
    let expected: Vec<String> = (1..=3)
        .flat_map(|attempt| {
            [
                format!(
                    "outer> mw.refused job-r #{attempt} mallory last={}",
                    attempt == 3
                ),
                format!(
                    "gate> mw.refused job-r #{attempt} mallory last={}",
                    attempt == 3
                ),
                "outer< err gate refused the run".to_string(),
            ]
        })
        .collect();
    assert_eq!(lines, expected, "the handler never ran");
    worker.shutdown().await;
}

#[tokio::test]
async fn layers_see_every_run_in_order_on_redis() {
    layers_see_every_run_in_order(redis_client().await, |w, a, b| w.layer(a).layer(b)).await;
}

#[tokio::test]
async fn layers_see_every_run_in_order_on_the_embedded_store() {
    layers_see_every_run_in_order(Client::in_memory(), |w, a, b| w.layer(a).layer(b)).await;
}

/// `tower::ServiceBuilder` is itself one layer, its first layer the outermost: the same
/// order as two `.layer` calls.
#[tokio::test]
async fn a_service_builder_is_one_layer_in_the_same_order() {
    layers_see_every_run_in_order(Client::in_memory(), |w, a, b| {
        w.layer(ServiceBuilder::new().layer(a).layer(b))
    })
    .await;
}

#[tokio::test]
async fn a_refusing_layer_retries_then_buries_on_redis() {
    a_refusing_layer_retries_then_buries(redis_client().await).await;
}

#[tokio::test]
async fn a_refusing_layer_retries_then_buries_on_the_embedded_store() {
    a_refusing_layer_retries_then_buries(Client::in_memory()).await;
}
