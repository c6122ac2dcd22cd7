//! Groups across three worker processes on a real Redis: no group ever runs more jobs at once
//! than its cap or starts them faster than its rate, and no group starves while another has
//! work. This test binary is started three times more with `DQ_GROUPS_CHILD` set, each running
//! only [`groups_child`] (a worker of six slots); this process enqueues the jobs (a "hog"
//! group of 40 first, then twelve groups of 8, then a "vip" group of 10 with its own limits),
//! waits until every job has succeeded, and checks what the handlers recorded in Redis: each
//! run adds its group's running count (an `INCR` as it starts, a `DECR` before it returns) and
//! the store time its lease started.

use std::collections::HashMap;
use std::io::Write;
use std::sync::OnceLock;
use std::time::Duration;

use dq::Job as _;
use dq::{Client, GroupLimits, JobError, Rate, Worker, delayed_job};
use dq_testkit::redis::AsyncCommands;
use dq_testkit::{RedisServer, TestChild, eventually, namespace};

/// Generous: the machine is shared and loaded.
const WAIT: Duration = Duration::from_secs(120);
/// Set in each child: `<redis url> <namespace>`.
const CHILD: &str = "DQ_GROUPS_CHILD";
/// How the children's report lines start on their stdout.
const SAYS: &str = "groups: ";
/// The default limits of every group: two at once, ten a second.
const CAP: u32 = 2;
const RATE_PER_S: u32 = 10;
/// The vip group's own limits: four at once, no rate, two per turn.
const VIP_CAP: u32 = 4;

/// The child's connection for the handlers' records, and the namespace they are kept under.
static RECORDS: OnceLock<(dq_testkit::redis::aio::MultiplexedConnection, String)> = OnceLock::new();

/// One tenant's job: records its group's running count and its lease's start, works a little.
#[delayed_job(topic = "groups.proc")]
async fn tenant_job(job: (String, u32), ctx: dq::JobContext) -> Result<(), JobError> {
    let (group, _) = job;
    let (conn, ns) = RECORDS.get().expect("the child's connection");
    let mut conn = conn.clone();
    let running_key = format!("{ns}:test:running:{group}");
    let running: i64 = conn.incr(&running_key, 1).await.map_err(JobError::retry)?;
    let leased = ctx.due_ms + ctx.late.as_millis() as u64;
    let _: () = conn
        .rpush(
            format!("{ns}:test:starts"),
            format!("{group} {leased} {running} {}", ctx.key),
        )
        .await
        .map_err(JobError::retry)?;
    tokio::time::sleep(Duration::from_millis(30)).await;
    let _: i64 = conn.decr(&running_key, 1).await.map_err(JobError::retry)?;
    Ok(())
}

/// A child: a worker of `tenant_job` with six slots, until killed.
#[tokio::test]
#[ignore = "a worker process of groups_across_processes, started with DQ_GROUPS_CHILD"]
async fn groups_child() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let (url, ns) = spec.split_once(' ').expect("url and namespace");
    let records = dq_testkit::redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    RECORDS.set((records, ns.to_owned())).ok();
    let client = connect(url, ns).await;
    let worker = Worker::builder(client)
        .topics([tenant_job::TOPIC])
        .concurrency(tenant_job::TOPIC, 6)
        .idle_wait(Duration::from_millis(50))
        .build()
        .expect("worker settings")
        .start()
        .await
        .expect("worker start");
    println!("{SAYS}worker {}", worker.id());
    std::io::stdout().flush().unwrap();
    std::future::pending::<()>().await;
}

async fn connect(url: &str, ns: &str) -> Client {
    Client::builder()
        .namespace(ns)
        .connect_timeout(Duration::from_secs(20))
        .connect(url)
        .await
        .expect("connect")
}

/// One run as a handler recorded it.
struct Start {
    group: String,
    leased_ms: u64,
    running: i64,
    key: String,
}

#[tokio::test]
async fn groups_keep_their_limits_and_take_turns_across_three_workers() {
    let server = RedisServer::start();
    let ns = namespace("groups");
    let client = connect(&server.url(), &ns).await;
    let topic = client.topic(tenant_job::TOPIC).unwrap();
    let rate = Rate::new(RATE_PER_S, Duration::from_secs(1)).unwrap();
    topic
        .set_group_limits(None, Some(GroupLimits::new().concurrency(CAP).rate(rate)))
        .await
        .unwrap();
    topic
        .set_group_limits(
            Some("vip"),
            Some(GroupLimits::new().concurrency(VIP_CAP).weight(2)),
        )
        .await
        .unwrap();

    // the hog's jobs first: without turns they would all run before anyone else's
    let mut plan: Vec<(String, u32)> = (0..40).map(|i| ("hog".to_owned(), i)).collect();
    for g in 0..12 {
        plan.extend((0..8).map(|i| (format!("g{g:02}"), i)));
    }
    plan.extend((0..10).map(|i| ("vip".to_owned(), i)));
    let total = plan.len() as u64;
    let specs = plan.iter().map(|(g, i)| {
        dq::JobSpec::new((g.clone(), *i))
            .key(format!("{g}-{i}"))
            .group(g.clone())
    });
    client.enqueue_bulk::<tenant_job>(specs).await.unwrap();
    assert_eq!(topic.group_state(Some("hog")).await.unwrap().waiting, 40);

    let mut children = Vec::new();
    for _ in 0..3 {
        let mut child = TestChild::spawn(
            "groups_child",
            CHILD,
            &format!("{} {ns}", server.url()),
            SAYS,
        );
        child.next_said("a worker starts", WAIT).await;
        children.push(child);
    }
    eventually("every job succeeds", WAIT, || async {
        topic.stats().await.unwrap().succeeded >= total
    })
    .await;
    drop(children);

    let mut conn = dq_testkit::redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let lines: Vec<String> = conn
        .lrange(format!("{ns}:test:starts"), 0, -1)
        .await
        .unwrap();
    let starts: Vec<Start> = lines
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            Start {
                group: f[0].to_owned(),
                leased_ms: f[1].parse().unwrap(),
                running: f[2].parse().unwrap(),
                key: f[3].to_owned(),
            }
        })
        .collect();
    // every job ran once
    assert_eq!(starts.len() as u64, total, "runs recorded");
    let mut keys: Vec<&str> = starts.iter().map(|s| s.key.as_str()).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len() as u64, total, "each job once");

    let mut by_group: HashMap<&str, Vec<&Start>> = HashMap::new();
    for s in &starts {
        by_group.entry(s.group.as_str()).or_default().push(s);
    }
    assert_eq!(by_group.len(), 14);
    for (group, runs) in &mut by_group {
        runs.sort_by_key(|s| s.leased_ms);
        // never over the cap: the count each run saw as it started
        let cap = if *group == "vip" { VIP_CAP } else { CAP };
        let most = runs.iter().map(|s| s.running).max().unwrap();
        assert!(
            most <= i64::from(cap),
            "{group}: {most} ran at once, cap {cap}"
        );
        // never over the rate: a lease at most every 100 ms (one partition, no burst)
        if *group != "vip" {
            let gap = 1000 / u64::from(RATE_PER_S);
            for w in runs.windows(2) {
                assert!(
                    w[1].leased_ms >= w[0].leased_ms + gap,
                    "{group}: leases at {} and {} ms, closer than {gap} ms",
                    w[0].leased_ms,
                    w[1].leased_ms
                );
            }
        }
    }
    // no group starved behind the hog: each had its first run before the hog's fifth
    let hog_fifth = by_group["hog"][4].leased_ms;
    for (group, runs) in &by_group {
        assert!(
            runs[0].leased_ms <= hog_fifth,
            "{group} first ran at {} ms, after the hog's fifth run at {hog_fifth} ms",
            runs[0].leased_ms
        );
    }
    let st = topic.group_state(None).await.unwrap();
    assert_eq!((st.running, st.waiting), (0, 0), "{st:?}");
}
