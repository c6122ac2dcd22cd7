//! Results and `wait` across processes, on a real Redis: a worker in another OS process (this
//! test binary started again with `DQ_RESULTS_CHILD` set, running only [`results_child`])
//! runs a handler that returns a value, and this process, which never set a retention, waits
//! for the jobs and reads their results back typed. The worker writes the retention its
//! handler declares (`keep_succeeded`, `keep_cancelled`) when it starts, keeps the value with
//! the succeeded job and its own id, and a job that fails for good is reported dead with its
//! error. Then the worker is killed by its pid (SIGKILL) and what it kept is still there.

use std::io::Write;
use std::time::Duration;

use dq::Job as _;
use dq::{Client, FinishedAs, JobError, Retention, StoredResult, WaitOutcome, Worker, delayed_job};
use dq_testkit::{RedisServer, TestChild, eventually, namespace};
use serde::{Deserialize, Serialize};

/// Generous: the machine is shared and loaded.
const WAIT: Duration = Duration::from_secs(60);
/// Set in the child: `<redis url> <namespace>`.
const CHILD: &str = "DQ_RESULTS_CHILD";
/// How the child's report lines start on its stdout.
const SAYS: &str = "results: ";

/// The handler's value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Thumbnail {
    url: String,
    bytes: u64,
}

/// Makes a thumbnail of image `n`; image 0 does not exist (a permanent failure).
#[delayed_job(
    topic = "results.thumbnail",
    keep_succeeded = "1h",
    keep_cancelled = "1h",
    retry = "none"
)]
async fn thumbnail(n: u64, ctx: dq::JobContext) -> Result<Thumbnail, JobError> {
    if n == 0 {
        return Err(JobError::permanent("no image 0"));
    }
    ctx.log(format!("resizing image {n}")).await?;
    ctx.progress(&100u32).await?;
    Ok(Thumbnail {
        url: format!("https://cdn.example/{n}.png"),
        bytes: n * 1000,
    })
}

async fn connect(url: &str, ns: &str) -> Client {
    Client::builder()
        .namespace(ns)
        .connect_timeout(Duration::from_secs(20))
        .connect(url)
        .await
        .expect("connect")
}

/// The child: a worker of `thumbnail` that reports its id, then runs until killed.
#[tokio::test]
#[ignore = "the worker process of results_across_processes, started with DQ_RESULTS_CHILD"]
async fn results_child() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let (url, ns) = spec.split_once(' ').expect("url and namespace");
    let client = connect(url, ns).await;
    let worker = Worker::builder(client)
        .topics([thumbnail::TOPIC])
        .idle_wait(Duration::from_millis(100))
        .build()
        .expect("worker settings")
        .start()
        .await
        .expect("worker start");
    println!("{SAYS}worker {}", worker.id());
    std::io::stdout().flush().unwrap();
    std::future::pending::<()>().await;
}

#[tokio::test]
async fn a_wait_is_answered_by_a_worker_in_another_process() {
    let server = RedisServer::start();
    let ns = namespace("results");
    let client = connect(&server.url(), &ns).await;
    let topic = client.topic(thumbnail::TOPIC).unwrap();
    assert_eq!(topic.control().await.unwrap().retention, None);
    client.enqueue::<thumbnail>(7).key("image-7").await.unwrap();
    client.enqueue::<thumbnail>(0).key("image-0").await.unwrap();
    client
        .enqueue::<thumbnail>(9)
        .key("image-9")
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();

    let mut child = TestChild::spawn(
        "results_child",
        CHILD,
        &format!("{} {ns}", server.url()),
        SAYS,
    );
    let said = child.next_said("the worker starts", WAIT).await;
    let worker_id = said.strip_prefix("worker ").expect("its id").to_string();

    // The worker wrote its handler's retention when it started.
    let retention = topic
        .control()
        .await
        .unwrap()
        .retention
        .expect("a retention");
    assert_eq!(retention.succeeded, Some(Duration::from_secs(3600)));
    assert_eq!(retention.cancelled, Some(Duration::from_secs(3600)));
    assert_eq!(retention.expired, None);

    match client.wait::<thumbnail>("image-7", WAIT).await.unwrap() {
        WaitOutcome::Succeeded { result, job } => {
            assert_eq!(
                result,
                Thumbnail {
                    url: "https://cdn.example/7.png".into(),
                    bytes: 7000
                }
            );
            assert_eq!(job.outcome, FinishedAs::Succeeded);
            assert_eq!(job.worker.as_deref(), Some(worker_id.as_str()));
            assert_eq!(job.attempts, 1);
            let p = job.progress.clone().expect("its progress, kept");
            assert_eq!(p.value_as::<u32>().unwrap().unwrap(), 100);
            assert_eq!(p.log[0].text, "resizing image 7");
            let started = job.started_ms.expect("a start time");
            assert!(
                job.due_ms <= started && started <= job.finished_ms,
                "{job:?}"
            );
        }
        other => panic!("image-7: {other:?}"),
    }
    match client.wait::<thumbnail>("image-0", WAIT).await.unwrap() {
        WaitOutcome::Dead(info) => {
            assert_eq!(info.history.last().unwrap().error, "no image 0");
        }
        other => panic!("image-0: {other:?}"),
    }
    let short = client
        .wait::<thumbnail>("image-9", Duration::from_millis(200))
        .await
        .unwrap();
    assert!(matches!(short, WaitOutcome::TimedOut), "{short:?}");
    topic.cancel("image-9").await.unwrap();
    let cancelled = client.wait::<thumbnail>("image-9", WAIT).await.unwrap();
    assert!(
        matches!(cancelled, WaitOutcome::Cancelled(_)),
        "{cancelled:?}"
    );

    // Killed by its pid: what it kept stays.
    child.kill();
    let kept = topic.finished("image-7").await.unwrap().expect("kept");
    assert!(matches!(kept.result, StoredResult::Value(_)));
    let result = client.result::<thumbnail>("image-7").await.unwrap();
    assert_eq!(result.map(|t| t.bytes), Some(7000));
    eventually("the stats count one kept succeeded job", WAIT, || async {
        let st = topic.stats().await.unwrap();
        st.kept == 2 && st.succeeded == 1
    })
    .await;
    // an operator's retention stays until a worker starts again
    topic
        .set_retention(Some(
            Retention::default().succeeded(Duration::from_secs(60)),
        ))
        .await
        .unwrap();
    assert_eq!(
        topic.control().await.unwrap().retention.unwrap().cancelled,
        None
    );
}
