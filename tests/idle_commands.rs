//! What an idle worker costs Redis: every command a worker with one topic, no jobs and no
//! schedules sends in 10 s, seen with `MONITOR` on a private `redis-server` (nothing else
//! talks to it in that window). At most four (an idle fetch every `idle_wait`, a heartbeat
//! every 10 s, the wake-up listener's `BLPOP` renewed once a minute), and none about
//! schedules: the scheduler sleeps until a schedule changes (its own client, or another
//! process, as the next heartbeat's reply tells).

use std::time::Duration;

use dq::{Client, JobContext, JobError, Worker};
use dq_testkit::{RedisServer, eventually};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const WAIT: Duration = Duration::from_secs(30);
/// The window counted, after the worker's start-up.
const WINDOW: Duration = Duration::from_secs(10);
/// Start-up calls (the topic check, the first fetch, the scheduler's first passes) that may
/// still be under way when `MONITOR` starts are left out: the window opens this much later.
const SETTLE: Duration = Duration::from_secs(1);

#[dq::delayed_job(topic = "idle.one", retry = "none")]
async fn idle_job(_n: u32, _ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

/// The keys of the jobs `ticked` ran.
#[derive(Clone, Default)]
struct Ran(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

#[dq::delayed_job(topic = "idle.ticked", retry = "none")]
async fn ticked(_n: u32, ctx: JobContext) -> Result<(), JobError> {
    ctx.data::<Ran>()?
        .0
        .lock()
        .unwrap()
        .push(ctx.key.to_string());
    Ok(())
}

/// One line `MONITOR` printed: the server's time (s) and the rest of the line.
fn parse(line: &str) -> Option<(f64, &str)> {
    let line = line.strip_prefix('+')?;
    let (time, rest) = line.split_once(' ')?;
    Some((time.parse().ok()?, rest))
}

#[tokio::test]
async fn an_idle_worker_sends_at_most_four_commands_in_ten_seconds_none_about_schedules() {
    let server = RedisServer::start();
    let ns = dq_testkit::namespace("idle");
    let client = Client::builder()
        .namespace(ns.clone())
        .connect(&server.url())
        .await
        .unwrap();
    let worker = Worker::builder(client.clone())
        .topics(["idle.one"])
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    eventually(
        "the worker listed and its fetcher past its first call",
        WAIT,
        || {
            let client = client.clone();
            let fetched = worker
                .health()
                .fetchers
                .iter()
                .all(|f| f.last_call_at.is_some());
            async move { fetched && client.workers().await.unwrap().len() == 1 }
        },
    )
    .await;

    let mut monitor = tokio::net::TcpStream::connect(("127.0.0.1", server.port()))
        .await
        .unwrap();
    monitor.write_all(b"MONITOR\r\n").await.unwrap();
    let mut lines = BufReader::new(monitor).lines();
    let first = lines.next_line().await.unwrap().unwrap();
    assert_eq!(first, "+OK");
    // The window, by the server's clock (the timestamps MONITOR prints); read until it has
    // surely closed by ours (the same machine's).
    let mut conn = dq_testkit::redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let (secs, micros): (u64, u64) = dq_testkit::redis::cmd("TIME")
        .query_async(&mut conn)
        .await
        .unwrap();
    let read_until = tokio::time::Instant::now() + SETTLE + WINDOW + Duration::from_millis(500);
    let opens = secs as f64 + micros as f64 / 1e6 + SETTLE.as_secs_f64();
    let closes = opens + WINDOW.as_secs_f64();
    let mut seen = Vec::new();
    while let Ok(line) = tokio::time::timeout_at(read_until, lines.next_line()).await {
        let line = line.unwrap().expect("MONITOR ended");
        let Some((at, rest)) = parse(&line) else {
            continue;
        };
        // Calls a script makes are shown too, from "lua": count what clients send.
        if at >= opens && at < closes && !rest.contains(" lua]") {
            seen.push(rest.to_string());
        }
    }
    let schedules = dq::store::redis::layout::schedules_key(&ns);
    let about_schedules: Vec<&String> = seen
        .iter()
        .filter(|c| c.contains(&schedules) || c.contains("\"TIME\""))
        .collect();
    assert!(
        about_schedules.is_empty(),
        "no schedule is near, yet the worker asked about schedules: {about_schedules:#?}"
    );
    assert!(
        seen.len() <= 4,
        "an idle worker sent {} commands in {WINDOW:?}: {seen:#?}",
        seen.len()
    );
    worker.shutdown().await;
}

/// The other side of sleeping: a schedule stored by another client (as another process
/// would) is run by a worker whose scheduler sleeps — its heartbeat's reply says the
/// schedules changed — well before the 10-minute safety pass.
#[tokio::test]
async fn a_schedule_stored_elsewhere_wakes_a_sleeping_scheduler_through_the_heartbeat() {
    let server = RedisServer::start();
    let ns = dq_testkit::namespace("idle-elsewhere");
    let url = server.url();
    let connect = || Client::builder().namespace(ns.clone()).connect(&url);
    let (worker_client, elsewhere) = (connect().await.unwrap(), connect().await.unwrap());
    let ran = Ran::default();
    let worker = Worker::builder(worker_client.clone())
        .topics(["idle.ticked"])
        .data(ran.clone())
        .build()
        .unwrap()
        .start()
        .await
        .expect("the worker starts");
    eventually("the worker listed", WAIT, || {
        let client = worker_client.clone();
        async move { client.workers().await.unwrap().len() == 1 }
    })
    .await;
    let every = dq::Schedule::every(Duration::from_secs(1)).unwrap();
    elsewhere
        .schedule::<ticked>("elsewhere", every, 0)
        .await
        .unwrap();
    let first = elsewhere.schedules().await.unwrap()[0].next_ms.unwrap();
    let key = dq::store::tick_key("elsewhere", first);
    // Within one heartbeat (10 s) of the change; the deadline is three times that.
    eventually("the first tick's job run by the worker", WAIT, || {
        let seen = ran.0.lock().unwrap().contains(&key);
        async move { seen }
    })
    .await;
    // The generation shares the live workers' hash: a listing still shows just the worker.
    let listed = worker_client.workers().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].id, worker.id());
    worker.shutdown().await;
}

/// Every `schedule` and `unschedule` moves the schedules generation a heartbeat returns, on
/// Redis and on the embedded store alike; a change made before any worker beat is kept for
/// the first one.
async fn generation_moves(client: Client) {
    let store = client.store().clone();
    let info = dq::WorkerInfo::new(vec!["idle.ticked".into()], 1, 0);
    let ttl = Duration::from_secs(30);
    let every = dq::Schedule::every(Duration::from_secs(60)).unwrap();
    client
        .schedule::<ticked>("gen", every.clone(), 1)
        .await
        .unwrap();
    let first = store.beat_worker(&info, ttl).await.unwrap();
    assert!(first > 0, "a change before any beat is kept: {first}");
    assert_eq!(store.beat_worker(&info, ttl).await.unwrap(), first);
    // Unchanged too: an earlier call may have stopped before announcing.
    client.schedule::<ticked>("gen", every, 1).await.unwrap();
    let second = store.beat_worker(&info, ttl).await.unwrap();
    assert_ne!(second, first);
    assert!(client.unschedule("gen").await.unwrap());
    assert_ne!(store.beat_worker(&info, ttl).await.unwrap(), second);
    let listed = client.workers().await.unwrap();
    assert_eq!(
        listed.len(),
        1,
        "the generation is not a worker: {listed:?}"
    );
}

#[tokio::test]
async fn schedule_changes_move_the_generation_heartbeats_return() {
    let server = RedisServer::start();
    let redis = Client::builder()
        .namespace(dq_testkit::namespace("idle-generation"))
        .connect(&server.url())
        .await
        .unwrap();
    generation_moves(redis).await;
    generation_moves(Client::in_memory()).await;
}
