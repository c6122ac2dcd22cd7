//! The event stream across processes, a worker SIGKILL and a Redis restart, on a real Redis
//! (append-only file, fsynced at every write). A worker in another OS process (this test
//! binary started again with `DQ_EVENTS_CHILD` set, running only [`events_child`]) turns its
//! topic's events on (`#[delayed_job(events)]`) and runs the jobs; this process reads the
//! events with `Client::events`. The worker is killed by its pid while it runs a job, a second
//! worker takes the job over when its lease runs out, then Redis itself is killed and
//! restarted: the same stream goes on, and every job's events arrive once each, in order. A
//! second reader started from the first one's saved cursor reads exactly what came after.

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use dq::Job as _;
use dq::{Client, EventKind, EventsFrom, EventsOptions, JobError, Worker, delayed_job};
use dq_testkit::{Persistence, RedisServer, ServerOptions, TestChild, eventually, namespace};

/// Generous: the machine is shared and loaded.
const WAIT: Duration = Duration::from_secs(60);
/// Set in the child: `<redis url> <namespace>`.
const CHILD: &str = "DQ_EVENTS_CHILD";
/// How the child's report lines start on its stdout.
const SAYS: &str = "events: ";

/// Job `0`'s first attempt never ends (its worker is killed under it); every other run
/// succeeds at once.
#[delayed_job(topic = "events.proc", events, retry = "1s")]
async fn step(n: u64, ctx: dq::JobContext) -> Result<(), JobError> {
    if n == 0 && ctx.attempt == 1 {
        std::future::pending::<()>().await;
    }
    Ok(())
}

async fn connect(url: &str, ns: &str) -> Client {
    Client::builder()
        .namespace(ns)
        .connect_timeout(Duration::from_secs(20))
        .connect(url)
        .await
        .expect("connect")
}

/// The child: a worker of `step` (short leases, so a lost job comes back soon) that reports
/// its id, then runs until killed.
#[tokio::test]
#[ignore = "the worker process of events_across_processes, started with DQ_EVENTS_CHILD"]
async fn events_child() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let (url, ns) = spec.split_once(' ').expect("url and namespace");
    let client = connect(url, ns).await;
    let worker = Worker::builder(client)
        .topics([step::TOPIC])
        .lease(Duration::from_secs(2))
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

/// Starts a worker process and waits for its report.
async fn start_worker(url: &str, ns: &str) -> TestChild {
    let mut child = TestChild::spawn("events_child", CHILD, &format!("{url} {ns}"), SAYS);
    child.next_said("the worker starts", WAIT).await;
    child
}

/// Reads events from `stream` into `log` until `done` holds of it; fails after [`WAIT`].
async fn read_until(
    stream: &mut dq::EventStream,
    log: &mut Vec<dq::Event>,
    what: &str,
    done: impl Fn(&[dq::Event]) -> bool,
) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !done(log) {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(left, stream.next()).await {
            Ok(Some(Ok(event))) => log.push(event),
            Ok(Some(Err(e))) => panic!("{what}: the stream reported {e}"),
            Ok(None) => panic!("{what}: the stream ended"),
            Err(_) => panic!("{what}: not in time; read so far: {log:#?}"),
        }
    }
}

/// The kinds of `key`'s events, in order.
fn of(log: &[dq::Event], key: &str) -> Vec<EventKind> {
    log.iter()
        .filter(|e| e.key == key)
        .map(|e| e.kind.clone())
        .collect()
}

fn succeeded(log: &[dq::Event], key: &str) -> bool {
    log.iter()
        .any(|e| e.key == key && e.kind == EventKind::Succeeded)
}

#[tokio::test]
async fn events_are_read_across_a_worker_kill_and_a_redis_restart() {
    let server =
        RedisServer::start_with(ServerOptions::default().persistence(Persistence::AofAlways));
    let ns = namespace("events");
    let client = connect(&server.url(), &ns).await;
    let topic = client.topic(step::TOPIC).unwrap();
    assert_eq!(topic.control().await.unwrap().events, None);

    let first = start_worker(&server.url(), &ns).await;
    // the worker turned its handler's events on when it started
    assert_eq!(
        topic.control().await.unwrap().events,
        Some(dq::EventsPolicy::default())
    );
    let options = || {
        EventsOptions::default()
            .topics([step::TOPIC])
            .poll(Duration::from_millis(20))
    };
    let mut stream = client.events_with(options()).await.unwrap();
    let mut log = Vec::new();
    for n in 0..4u64 {
        client
            .enqueue::<step>(n)
            .key(format!("job-{n}"))
            .await
            .unwrap();
    }
    read_until(&mut stream, &mut log, "the first run", |log| {
        (1..4).all(|n| succeeded(log, &format!("job-{n}")))
            && of(log, "job-0").contains(&EventKind::Started)
    })
    .await;
    // the reader saves its place here; a second reader resumes from it below
    let saved = stream.cursor().to_string();
    let seen_at_save = log.len();

    // SIGKILL the worker under job-0; a second worker takes it over once its lease runs out
    drop(first);
    let second = start_worker(&server.url(), &ns).await;
    read_until(&mut stream, &mut log, "job-0 retried", |log| {
        succeeded(log, "job-0")
    })
    .await;

    // Redis itself is killed and restarted (its append-only file keeps every write); the
    // same stream goes on, and the worker too
    server.kill();
    server.restart();
    for n in 4..6u64 {
        // (the client reconnects by itself; an enqueue refused on the way is tried again)
        eventually("an enqueue after the restart", WAIT, || async {
            client
                .enqueue::<step>(n)
                .key(format!("job-{n}"))
                .await
                .is_ok()
        })
        .await;
    }
    read_until(&mut stream, &mut log, "after the restart", |log| {
        succeeded(log, "job-4") && succeeded(log, "job-5")
    })
    .await;
    drop(second);

    use EventKind::*;
    for n in 1..6 {
        assert_eq!(
            of(&log, &format!("job-{n}")),
            [Enqueued, Started, Succeeded],
            "job-{n}: {log:#?}"
        );
    }
    // job-0: its first attempt's lease ran out (a failed attempt, retried), then it succeeded
    assert_eq!(
        of(&log, "job-0"),
        [Enqueued, Started, Failed, Started, Succeeded],
        "{log:#?}"
    );
    let lost = log
        .iter()
        .find(|e| e.key == "job-0" && e.kind == Failed)
        .unwrap();
    assert_eq!(lost.error.as_deref(), Some("lease expired"));
    assert_eq!(lost.attempt, Some(1));
    // each event once, in order
    let mut ids = HashMap::new();
    for e in &log {
        assert!(
            ids.insert((e.partition, e.id), ()).is_none(),
            "twice: {e:?}"
        );
    }

    // a reader started from the saved cursor reads exactly what came after it
    let cursor: dq::EventCursor = saved.parse().unwrap();
    let mut resumed = client
        .events_with(options().from(EventsFrom::Cursor(cursor)))
        .await
        .unwrap();
    let rest = &log[seen_at_save..];
    let mut again = Vec::new();
    read_until(&mut resumed, &mut again, "the resumed reader", |got| {
        got.len() >= rest.len()
    })
    .await;
    assert_eq!(
        again, rest,
        "the resumed reader reads what came after the cursor"
    );
}
