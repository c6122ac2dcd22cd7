//! Shared data a handler needs and the worker lacks is a deployment error, never a job's
//! failure: declared (`#[delayed_job(data(Db))]`) it stops the worker at `build()`;
//! undeclared it defers the job without spending an attempt, says so at ERROR once per topic
//! and type and in the worker's health, and a worker that has the data runs the job.
//! On a real Redis, and on the embedded store through `dq::testing::TestQueue`.

use std::any::type_name;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dq::testing::TestQueue;
use dq::{AttemptOutcome, Client, JobContext, JobError, JobState, Worker, WorkerError};
use dq_testkit::{eventually, eventually_some};

const WAIT: Duration = Duration::from_secs(30);

/// The shared data the handlers need: it records which jobs ran, at which attempt.
#[derive(Clone, Default)]
struct Db(Arc<Mutex<Vec<(String, u32)>>>);

impl Db {
    fn ran(&self) -> Vec<(String, u32)> {
        self.0.lock().unwrap().clone()
    }
}

#[dq::delayed_job(topic = "data.declared", retry = "none", data(Db))]
async fn declared(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    let db = ctx.data::<Db>()?;
    db.0.lock()
        .unwrap()
        .push((ctx.key.to_string(), ctx.attempt));
    Ok(())
}

/// Needs a `Db` without declaring it: only the run can tell.
#[dq::delayed_job(topic = "data.undeclared", retry = "none")]
async fn undeclared(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    let db = ctx.data::<Db>()?;
    db.0.lock()
        .unwrap()
        .push((ctx.key.to_string(), ctx.attempt));
    Ok(())
}

/// Turns the missing-data error into a plain string: the worker still knows.
#[dq::delayed_job(topic = "data.mapped", retry = "none")]
async fn mapped(_n: u64, ctx: JobContext) -> Result<(), String> {
    ctx.data::<Db>().map_err(|e| e.to_string())?;
    Ok(())
}

/// Panics on it.
#[dq::delayed_job(topic = "data.unwrapped", retry = "none")]
async fn unwrapped(_n: u64, ctx: JobContext) -> Result<(), JobError> {
    let _db = ctx.data::<Db>().unwrap();
    Ok(())
}

async fn client() -> Client {
    Client::builder()
        .namespace(dq_testkit::namespace("data"))
        .connect(&dq_testkit::shared().url())
        .await
        .expect("connect")
}

#[tokio::test]
async fn build_refuses_a_worker_missing_declared_data() {
    let client = client().await;
    let err = Worker::builder(client.clone())
        .topics(["data.declared"])
        .build()
        .expect_err("a worker without the declared Db must not start");
    let WorkerError::MissingData {
        job,
        topic,
        at,
        type_name: missing,
    } = &err
    else {
        panic!("expected MissingData, got {err:?}");
    };
    assert!(job.ends_with("::declared"), "{job}");
    assert_eq!(topic, "data.declared");
    assert!(at.starts_with("tests/worker_data.rs:"), "{at}");
    assert_eq!(missing, type_name::<Db>());
    let text = err.to_string();
    assert!(
        text.contains(type_name::<Db>()) && text.contains("declared") && text.contains(".data("),
        "{text}"
    );

    // Given the data, it starts; a worker that does not run the handler needs none.
    assert!(
        Worker::builder(client.clone())
            .topics(["data.declared"])
            .data(Db::default())
            .build()
            .is_ok()
    );
    assert!(
        Worker::builder(client.clone())
            .topics(["data.undeclared"])
            .build()
            .is_ok()
    );
    // On the embedded store too, before any job is taken.
    let err = TestQueue::start(|w| w.topics(["data.declared"])).unwrap_err();
    assert!(matches!(err, WorkerError::MissingData { .. }), "{err:?}");
}

#[tokio::test]
async fn undeclared_missing_data_defers_the_job_and_a_worker_with_the_data_runs_it() {
    // The test's runtime has one thread: every worker task logs to this subscriber.
    let (captured, _guard) =
        dq_testkit::CapturedLog::install(tracing_subscriber::filter::LevelFilter::WARN);
    let client = client().await;
    // Misdeployed: no Db. A short deferral, so that the jobs come back to it while we look.
    let misdeployed = Worker::builder(client.clone())
        .topics(["data.undeclared"])
        .missing_data_delay(Duration::from_millis(300))
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    client.enqueue::<undeclared>(1).key("a").await.unwrap();
    client.enqueue::<undeclared>(2).key("b").await.unwrap();

    // Neither job spent its attempt or went to the dead queue (its retry policy is "none")…
    for key in ["a", "b"] {
        let job = eventually_some("the job is deferred, waiting again", WAIT, || async {
            let job = client.job::<undeclared>(key).await.unwrap().unwrap();
            assert_ne!(job.state, JobState::Dead, "buried: {job:?}");
            (job.state == JobState::Scheduled && !job.history.is_empty()).then_some(job)
        })
        .await;
        assert_eq!(job.attempts, 0, "{job:?}");
        let last = job.history.last().expect("the deferral is in the history");
        assert_eq!(last.outcome, AttemptOutcome::Deferred);
        assert!(last.error.contains(type_name::<Db>()), "{}", last.error);
    }
    // … however many times they come back to this worker, which shows the missing type.
    let report = eventually_some(
        "health lists the missing Db, jobs deferred again",
        WAIT,
        || {
            let health = misdeployed.health();
            async move {
                health
                    .missing_data
                    .into_iter()
                    .find(|m| m.jobs_deferred >= 6)
            }
        },
    )
    .await;
    assert_eq!(report.topic, "data.undeclared");
    assert_eq!(report.type_name, type_name::<Db>());
    assert_eq!(misdeployed.health().missing_data.len(), 1);
    let stats = client.stats::<undeclared>().await.unwrap();
    assert_eq!((stats.dead, stats.buried), (0, 0), "{stats:?}");
    misdeployed.shutdown().await;

    // One ERROR line for the topic and type, however many jobs and rounds, with the fix.
    let logged = captured.text();
    // (Only lines about the type: a loaded machine may log store trouble too.)
    let errors: Vec<_> = logged
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains(type_name::<Db>()))
        .collect();
    assert_eq!(errors.len(), 1, "{logged}");
    assert!(
        errors[0].contains(type_name::<Db>())
            && errors[0].contains(".data(")
            && errors[0].contains("#[delayed_job(data("),
        "{}",
        errors[0]
    );

    // Deployed right: the jobs run, on their first attempt.
    let db = Db::default();
    let fixed = Worker::builder(client.clone())
        .topics(["data.undeclared"])
        .data(db.clone())
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    eventually("both jobs ran", WAIT, || async {
        client.stats::<undeclared>().await.unwrap().succeeded == 2
    })
    .await;
    let mut ran = db.ran();
    ran.sort();
    assert_eq!(ran, [("a".to_string(), 1), ("b".to_string(), 1)]);
    assert!(fixed.health().missing_data.is_empty());
    fixed.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn on_the_embedded_store_a_missing_type_never_buries_whatever_the_handler_makes_of_it() {
    let queue =
        TestQueue::start(|w| w.topics(["data.undeclared", "data.mapped", "data.unwrapped"]))
            .unwrap();
    queue
        .client()
        .enqueue::<undeclared>(1)
        .key("k")
        .await
        .unwrap();
    queue.client().enqueue::<mapped>(1).key("k").await.unwrap();
    queue
        .client()
        .enqueue::<unwrapped>(1)
        .key("k")
        .await
        .unwrap();
    queue.settle().await;
    for job in [
        queue.job::<undeclared>("k").await,
        queue.job::<mapped>("k").await,
        queue.job::<unwrapped>("k").await,
    ] {
        let job = job.expect("the job is kept");
        assert_eq!(
            (job.state, job.attempts),
            (JobState::Scheduled, 0),
            "{job:?}"
        );
    }
    // Deferred by the default 30 s: it comes back then, and still is not buried.
    queue.advance(Duration::from_secs(31)).await;
    let job = queue.job::<mapped>("k").await.unwrap();
    assert_eq!(
        (job.state, job.attempts),
        (JobState::Scheduled, 0),
        "{job:?}"
    );
    assert_eq!(
        job.history
            .iter()
            .filter(|h| h.outcome == AttemptOutcome::Deferred)
            .count(),
        2
    );
    assert!(queue.dead::<unwrapped>().await.is_empty());
    queue.shutdown().await;
}
