//! dq on a Redis that needs a user and a password (ACL): a user with exactly
//! `dq::store::redis::acl_rule(namespace)` runs producer, worker (batches and flows and their
//! relay too) and inspection with nothing
//! denied (Redis's ACL log stays empty); a wrong password and a user missing the namespace's
//! keys or a command each get a clear error that never shows the password.

#[path = "worker/support.rs"]
mod support;

use std::io::Write;
use std::time::Duration;

use dq::store::redis::acl_rule;
use dq::{Client, Error, JobContext, JobError, Worker};
use dq_testkit::{RedisServer, ServerOptions, eventually};
use support::{Log, WAIT, record};

const PASSWORD: &str = "s3cret-Pa55";
const NS: &str = "secured";

#[dq::delayed_job(topic = "secured.jobs", retry = "fixed(50ms, 1)")]
async fn secured_job(n: u64, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "ran").await?;
    if n.is_multiple_of(10) && ctx.attempt == 1 {
        return Err(JobError::retry("every tenth fails once"));
    }
    Ok(())
}

/// A server whose users are: `default` (the test kit's own, unrestricted), `dq` with dq's
/// rule for [`NS`], `elsewhere` with dq's rule for another namespace, and `nofcall` with the
/// rule less `FCALL`.
fn server() -> RedisServer {
    let path = std::env::temp_dir().join(format!(
        "dq-secured-{}-{}.acl",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let mut f = std::fs::File::create(&path).unwrap();
    writeln!(f, "user default on nopass ~* &* +@all").unwrap();
    writeln!(f, "user dq on >{PASSWORD} {}", acl_rule(NS)).unwrap();
    writeln!(f, "user elsewhere on >{PASSWORD} {}", acl_rule("other")).unwrap();
    let no_fcall = acl_rule(NS).replace(" +fcall", "");
    writeln!(f, "user nofcall on >{PASSWORD} {no_fcall}").unwrap();
    drop(f);
    let server = RedisServer::start_with(ServerOptions {
        extra_args: vec!["--aclfile".into(), path.display().to_string()],
        ..ServerOptions::default()
    });
    // the file is read at start; the server keeps its users
    let _ = std::fs::remove_file(&path);
    server
}

fn url(server: &RedisServer, user: &str, password: &str) -> String {
    format!("redis://{user}:{password}@127.0.0.1:{}/", server.port())
}

async fn client(url: &str) -> dq::Result<Client> {
    Client::builder().namespace(NS).connect(url).await
}

/// Redis's ACL log: every command refused to any user since the last reset.
fn denied(server: &RedisServer) -> Vec<String> {
    let mut conn = server.connection();
    let log: Vec<Vec<dq_testkit::redis::Value>> = dq_testkit::redis::cmd("ACL")
        .arg("LOG")
        .query(&mut conn)
        .unwrap();
    log.iter().map(|entry| format!("{entry:?}")).collect()
}

#[tokio::test]
async fn a_user_with_dqs_acl_rule_runs_producer_worker_and_tools() {
    let server = server();
    let client = client(&url(&server, "dq", PASSWORD)).await.unwrap();
    let log = Log::default();
    let worker = Worker::builder(client.clone())
        .topics(["secured.jobs"])
        .data(log.clone())
        .data(client.clone())
        .lease(Duration::from_secs(5))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    // (groups with a cap and keys with a window: the commands of their scripts too)
    client
        .topic("secured.jobs")
        .unwrap()
        .set_group_limits(None, Some(dq::GroupLimits::new().concurrency(2)))
        .await
        .unwrap();
    for n in 0..30u64 {
        let mut e = client.enqueue::<secured_job>(n).key(format!("j{n}"));
        if n.is_multiple_of(2) {
            e = e.group(format!("g{}", n % 3));
        }
        if n == 1 {
            e = e.unique_for(Duration::from_secs(60));
        }
        if n.is_multiple_of(3) {
            e.delay(Duration::from_millis(100)).await.unwrap();
        } else {
            e.await.unwrap();
        }
    }
    eventually("every job succeeded", WAIT, || async {
        client.stats::<secured_job>().await.unwrap().succeeded == 30
    })
    .await;
    assert_eq!(client.stats::<secured_job>().await.unwrap().retried, 3);
    client
        .enqueue::<secured_job>(99)
        .key("later")
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    assert!(client.job::<secured_job>("later").await.unwrap().is_some());
    assert_eq!(client.topics().await.unwrap().len(), 1);
    let topic = dq::Topic::new("secured.jobs").unwrap();
    assert!(
        client
            .store()
            .payload_shape(&topic)
            .await
            .unwrap()
            .is_some(),
        "the worker published its payload shape as the dq user"
    );
    client
        .cancel::<secured_job>("later")
        .await
        .expect("cancel as the dq user");
    client
        .enqueue::<secured_job>(98)
        .key("killed")
        .unique_for(Duration::from_secs(60))
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    let outcome = client
        .topic("secured.jobs")
        .unwrap()
        .bury("killed", "not wanted")
        .await
        .expect("bury as the dq user");
    assert_eq!(outcome, dq::BuryOutcome::Buried);
    // a batch and a flow: their scripts, the index and the outboxes (the relay trims them)
    let batch = client
        .new_batch()
        .id("secured-batch")
        .on_complete::<secured_job>(&1001)
        .open()
        .await
        .unwrap();
    batch
        .add::<secured_job>((1..=3).map(|n| dq::JobSpec::new(100 + n).key(format!("b{n}"))))
        .await
        .unwrap();
    batch.close().await.unwrap();
    client
        .new_flow::<secured_job>(dq::JobSpec::new(2001).key("parent"))
        .children::<secured_job>((1..=2).map(|n| dq::JobSpec::new(200 + n).key(format!("c{n}"))))
        .enqueue()
        .await
        .unwrap();
    eventually(
        "the batch called back and the flow's parent ran",
        WAIT,
        || async {
            let done = |id: &str| {
                let client = client.clone();
                let id = id.to_owned();
                async move {
                    client
                        .batch(&id)
                        .unwrap()
                        .info()
                        .await
                        .unwrap()
                        .is_some_and(|b| b.done)
                }
            };
            done("secured-batch").await
                && done("flow.secured.jobs.parent").await
                && client.stats::<secured_job>().await.unwrap().succeeded == 30 + 3 + 1 + 2 + 1
        },
    )
    .await;
    let q = dq::store::Queue::new(dq::Topic::new("secured.jobs").unwrap(), 0);
    let outbox = dq::store::redis::layout::PartitionKeys::new(NS, &q).outbox;
    eventually("the relay trimmed the outbox", WAIT, || async {
        server.cmd::<usize>(&["XLEN", &outbox]) == 0
    })
    .await;
    worker.shutdown().await;
    // (the only refusal allowed: the persistence check's CONFIG GET, skipped when refused)
    let refused: Vec<String> = denied(&server)
        .into_iter()
        .filter(|entry| !entry.contains("config|get"))
        .collect();
    assert!(
        refused.is_empty(),
        "Redis refused dq something: {refused:?}"
    );
}

#[tokio::test]
async fn a_wrong_password_is_a_clear_error_that_never_shows_the_password() {
    let server = server();
    let wrong = "not-the-Pa55word";
    let e = client(&url(&server, "dq", wrong))
        .await
        .expect_err("a wrong password is refused");
    let text = e.to_string();
    assert!(
        text.to_lowercase().contains("authentication failed"),
        "{text}"
    );
    assert!(!text.contains(wrong) && !text.contains(PASSWORD), "{text}");
    assert!(!format!("{e:?}").contains(wrong), "{e:?}");
}

#[tokio::test]
async fn a_user_without_the_namespace_or_a_command_is_told_what_is_missing() {
    let server = server();
    // Keys of another namespace only: refused before anything runs.
    let outcome = match client(&url(&server, "elsewhere", PASSWORD)).await {
        Err(e) => Err(e),
        Ok(c) => c.enqueue::<secured_job>(1).key("x").await.map(|_| ()),
    };
    match outcome {
        Err(Error::NoPermission(what)) => {
            assert!(what.contains("no permissions to access"), "{what}");
            assert!(!what.contains(PASSWORD));
        }
        other => panic!("a user without the namespace's keys: {other:?}"),
    }
    // No FCALL: Redis names the command.
    let outcome = match client(&url(&server, "nofcall", PASSWORD)).await {
        Err(e) => Err(e),
        Ok(c) => c.enqueue::<secured_job>(1).key("x").await.map(|_| ()),
    };
    match outcome {
        Err(Error::NoPermission(what)) => assert!(what.contains("fcall"), "{what}"),
        other => panic!("a user without FCALL: {other:?}"),
    }
    // Nothing was written by either.
    let mut conn = server.connection();
    let keys: Vec<String> = dq_testkit::redis::cmd("KEYS")
        .arg("*")
        .query(&mut conn)
        .unwrap();
    assert!(keys.iter().all(|k| !k.contains("secured.jobs")), "{keys:?}");
}
