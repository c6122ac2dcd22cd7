//! dq over TLS (feature `tls`), against a `redis-server` listening with TLS on certificates
//! made at test time (`dq_testkit::TestCerts`), as an ACL user with exactly
//! `dq::store::redis::acl_rule(namespace)`: producer, worker (with delayed jobs, so the wake
//! listener's own connection too) and inspection run over `rediss://user:password@…` with
//! the test CA given as a file; a wrong CA, no CA (the built-in roots), a wrong password, a
//! user missing a command and a server wanting a client certificate each get a clear error
//! that never shows the password; mutual TLS works with a client certificate.

#![cfg(feature = "tls")]

#[path = "worker/support.rs"]
mod support;

use std::io::Write;
use std::time::Duration;

use dq::store::redis::acl_rule;
use dq::{Client, Error, JobContext, JobError, TlsConfig, Worker};
use dq_testkit::{
    ClusterOptions, RedisCluster, RedisSentinelSet, RedisServer, SentinelOptions, ServerOptions,
    TestCerts, eventually,
};
use support::{Log, WAIT, record};

const PASSWORD: &str = "tls-s3cret-Pa55";
const NS: &str = "tlsq";

#[dq::delayed_job(topic = "tls.jobs", retry = "fixed(50ms, 1)")]
async fn tls_job(n: u64, ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "ran").await?;
    if n.is_multiple_of(10) && ctx.attempt == 1 {
        return Err(JobError::retry("every tenth fails once"));
    }
    Ok(())
}

/// A server listening with TLS (certificates of `certs`; a client certificate required if
/// `mtls`) whose users are `default` (the test kit's, on the plain port), `dq` with dq's
/// rule for [`NS`] and `nofcall` with that rule less `FCALL`.
fn server(certs: &TestCerts, mtls: bool) -> RedisServer {
    let path = acl_file();
    let server = RedisServer::start_with(
        ServerOptions::default()
            .tls(certs.server_tls().auth_clients(mtls))
            .arg("--aclfile")
            .arg(path.display().to_string()),
    );
    let _ = std::fs::remove_file(&path);
    server
}

/// An ACL file with the users of [`server`]; the caller removes it once the servers read it.
fn acl_file() -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!(
        "dq-tls-{}-{}.acl",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let mut f = std::fs::File::create(&path).unwrap();
    writeln!(f, "user default on nopass ~* &* +@all").unwrap();
    writeln!(f, "user dq on >{PASSWORD} {}", acl_rule(NS)).unwrap();
    let no_fcall = acl_rule(NS).replace(" +fcall", "");
    writeln!(f, "user nofcall on >{PASSWORD} {no_fcall}").unwrap();
    drop(f);
    path
}

fn url(server: &RedisServer, user: &str, password: &str) -> String {
    format!(
        "rediss://{user}:{password}@127.0.0.1:{}/",
        server.tls_port()
    )
}

async fn client(url: &str, tls: Option<TlsConfig>) -> dq::Result<Client> {
    let builder = Client::builder().namespace(NS);
    match tls {
        Some(tls) => builder.tls(tls).connect(url).await,
        None => builder.connect(url).await,
    }
}

fn ca(certs: &TestCerts) -> Option<TlsConfig> {
    Some(TlsConfig::new().ca_file(certs.ca_file()).unwrap())
}

/// Neither the error's text nor its `Debug` shows the password.
fn no_password(e: &Error) {
    for text in [e.to_string(), format!("{e:?}")] {
        assert!(!text.contains(PASSWORD), "{text}");
        assert!(!text.contains("not-the-Pa55word"), "{text}");
    }
}

#[tokio::test]
async fn producer_and_worker_run_over_tls_as_an_acl_user_with_a_private_ca() {
    let certs = TestCerts::generate();
    let server = server(&certs, false);
    let client = client(&url(&server, "dq", PASSWORD), ca(&certs))
        .await
        .unwrap();
    let log = Log::default();
    let worker = Worker::builder(client.clone())
        .topics(["tls.jobs"])
        .data(log.clone())
        .data(client.clone())
        .lease(Duration::from_secs(5))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    for n in 0..20u64 {
        let e = client.enqueue::<tls_job>(n).key(format!("j{n}"));
        if n.is_multiple_of(3) {
            e.delay(Duration::from_millis(100)).await.unwrap();
        } else {
            e.await.unwrap();
        }
    }
    eventually("every job succeeded", WAIT, || async {
        client.stats::<tls_job>().await.unwrap().succeeded == 20
    })
    .await;
    assert_eq!(client.stats::<tls_job>().await.unwrap().retried, 2);
    assert_eq!(log.count("ran"), 22);
    assert_eq!(client.topics().await.unwrap().len(), 1);
    // Every connection of the dq user (the client's, the worker's wake-up listener's) came to
    // the TLS port; the test kit's own admin connections are `default`'s, on the plain port.
    let clients: String = server.cmd(&["CLIENT", "LIST"]);
    let dq: Vec<&str> = clients
        .lines()
        .filter(|l| l.contains(" user=dq "))
        .collect();
    assert!(dq.len() >= 2, "{clients}");
    let tls_port = format!(" laddr=127.0.0.1:{} ", server.tls_port());
    assert!(dq.iter().all(|l| l.contains(&tls_port)), "{clients}");
    worker.shutdown().await;
}

#[tokio::test]
async fn a_wrong_ca_or_none_is_a_tls_error_naming_the_certificate_problem() {
    let certs = TestCerts::generate();
    let server = server(&certs, false);
    let unrelated = TestCerts::generate();
    for tls in [ca(&unrelated), None] {
        let e = client(&url(&server, "dq", PASSWORD), tls)
            .await
            .expect_err("a certificate no trusted CA signed is refused");
        match &e {
            Error::Tls(why) => {
                assert!(
                    why.contains("not signed by a CA this client trusts"),
                    "{why}"
                );
                assert!(why.contains("is the CA right?"), "{why}");
            }
            other => panic!("a wrong CA: {other:?}"),
        }
        assert!(!e.is_retryable(), "retrying does not change a certificate");
        no_password(&e);
    }
    // A CA file that holds no certificate is refused before connecting, naming the file.
    let junk = certs.dir().join("junk.pem");
    std::fs::write(&junk, "not a certificate").unwrap();
    let tls = TlsConfig::new().ca_file(&junk).unwrap();
    match client(&url(&server, "dq", PASSWORD), Some(tls)).await {
        Err(Error::InvalidConfig(m)) => {
            assert!(
                m.contains("junk.pem") && m.contains("no PEM certificate"),
                "{m}"
            );
        }
        other => panic!("a CA file without a certificate: {other:?}"),
    }
    // TLS settings with a plain URL would be ignored: refused.
    let plain = format!("redis://dq:{PASSWORD}@127.0.0.1:{}/", server.port());
    match client(&plain, ca(&certs)).await {
        Err(e @ Error::InvalidConfig(_)) => {
            assert!(e.to_string().contains("not rediss://"), "{e}");
            no_password(&e);
        }
        other => panic!("TLS settings with redis://: {other:?}"),
    }
}

#[tokio::test]
async fn a_wrong_password_or_a_missing_command_over_tls_is_told_without_the_password() {
    let certs = TestCerts::generate();
    let server = server(&certs, false);
    let e = client(&url(&server, "dq", "not-the-Pa55word"), ca(&certs))
        .await
        .expect_err("a wrong password is refused");
    assert!(
        e.to_string()
            .to_lowercase()
            .contains("authentication failed"),
        "{e}"
    );
    no_password(&e);

    let outcome = match client(&url(&server, "nofcall", PASSWORD), ca(&certs)).await {
        Err(e) => Err(e),
        Ok(c) => c.enqueue::<tls_job>(1).key("x").await.map(|_| ()),
    };
    match outcome {
        Err(e @ Error::NoPermission(_)) => {
            assert!(e.to_string().contains("fcall"), "{e}");
            no_password(&e);
        }
        other => panic!("a user without FCALL: {other:?}"),
    }
}

#[tokio::test]
async fn mutual_tls_wants_the_client_certificate_and_works_with_it() {
    let certs = TestCerts::generate();
    let server = server(&certs, true);
    let e = client(&url(&server, "dq", PASSWORD), ca(&certs))
        .await
        .expect_err("no client certificate");
    match &e {
        // The server closes the handshake with an alert, or (TLS 1.3) right after it.
        Error::Tls(why) => assert!(why.contains("client"), "{why}"),
        Error::Redis(r) if r.is_io_error() || r.is_connection_dropped() => {}
        other => panic!("no client certificate: {other:?}"),
    }
    no_password(&e);

    let tls = TlsConfig::new()
        .ca_file(certs.ca_file())
        .unwrap()
        .client_cert_files(certs.client_cert_file(), certs.client_key_file())
        .unwrap();
    let client = client(&url(&server, "dq", PASSWORD), Some(tls))
        .await
        .unwrap();
    client.enqueue::<tls_job>(1).key("m1").await.unwrap();
    assert!(client.job::<tls_job>("m1").await.unwrap().is_some());
}

/// A cluster whose nodes listen with TLS, and talk TLS to each other (bus and replication),
/// with the ACL users of [`server`] on every node: dq connects to the TLS seeds as `dq`,
/// follows the nodes' TLS addresses, and blocks its wake-up listeners on each master over TLS.
#[tokio::test]
async fn a_cluster_over_tls_runs_producer_and_worker_as_an_acl_user() {
    let certs = TestCerts::generate();
    let path = acl_file();
    let cluster = RedisCluster::start_with(ClusterOptions {
        server: ServerOptions::default()
            .tls(certs.server_tls())
            .arg("--aclfile")
            .arg(path.display().to_string()),
        ..ClusterOptions::default()
    });
    let _ = std::fs::remove_file(&path);
    let url = cluster.tls_url().replace(
        "rediss+cluster://",
        &format!("rediss+cluster://dq:{PASSWORD}@"),
    );

    let unrelated = TestCerts::generate();
    let e = client(&url, ca(&unrelated))
        .await
        .expect_err("a wrong CA on a cluster");
    match &e {
        Error::Tls(why) => assert!(why.contains("is the CA right?"), "{why}"),
        other => panic!("a wrong CA on a cluster: {other:?}"),
    }
    no_password(&e);

    let client = Client::builder()
        .namespace(NS)
        .partitions("tls.jobs", 6)
        .tls(TlsConfig::new().ca_file(certs.ca_file()).unwrap())
        .connect(&url)
        .await
        .unwrap();
    let log = Log::default();
    let worker = Worker::builder(client.clone())
        .topics(["tls.jobs"])
        .data(log.clone())
        .data(client.clone())
        .lease(Duration::from_secs(5))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    for n in 0..20u64 {
        let e = client.enqueue::<tls_job>(n).key(format!("c{n}"));
        if n.is_multiple_of(3) {
            e.delay(Duration::from_millis(100)).await.unwrap();
        } else {
            e.await.unwrap();
        }
    }
    eventually("every job succeeded on the cluster", WAIT, || async {
        client.stats::<tls_job>().await.unwrap().succeeded == 20
    })
    .await;
    // The dq user's connections reached every master, each on its TLS port.
    for master in cluster.masters() {
        let clients: String = master.cmd(&["CLIENT", "LIST"]);
        let dq: Vec<&str> = clients
            .lines()
            .filter(|l| l.contains(" user=dq "))
            .collect();
        assert!(
            !dq.is_empty(),
            "no dq connection on {}: {clients}",
            master.port()
        );
        let tls_port = format!(" laddr=127.0.0.1:{} ", master.tls_port());
        assert!(dq.iter().all(|l| l.contains(&tls_port)), "{clients}");
    }
    worker.shutdown().await;
}

/// Through Sentinel: the servers replicate over TLS and the sentinels name their TLS ports;
/// dq asks the sentinels (plain TCP), checks and uses the master over TLS as the ACL user,
/// and after a switch-over follows the new master, over TLS again.
#[tokio::test]
async fn through_sentinel_the_master_is_reached_over_tls_before_and_after_a_failover() {
    let certs = TestCerts::generate();
    let path = acl_file();
    let set = RedisSentinelSet::start_with(SentinelOptions {
        server: ServerOptions::default()
            .tls(certs.server_tls())
            .arg("--aclfile")
            .arg(path.display().to_string()),
        ..SentinelOptions::default()
    });
    let url = set.tls_url().replace(
        "rediss+sentinel://",
        &format!("rediss+sentinel://dq:{PASSWORD}@"),
    );

    let unrelated = TestCerts::generate();
    let e = client(&url, ca(&unrelated))
        .await
        .expect_err("a wrong CA through Sentinel");
    match &e {
        Error::Tls(why) => assert!(why.contains("is the CA right?"), "{why}"),
        other => panic!("a wrong CA through Sentinel: {other:?}"),
    }
    no_password(&e);

    let client = client(&url, ca(&certs)).await.unwrap();
    let log = Log::default();
    let worker = Worker::builder(client.clone())
        .topics(["tls.jobs"])
        .data(log.clone())
        .data(client.clone())
        .lease(Duration::from_secs(5))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let enqueue = async |from: u64| {
        for n in from..from + 10 {
            let e = client.enqueue::<tls_job>(n).key(format!("s{n}"));
            let result = if n.is_multiple_of(3) {
                e.delay(Duration::from_millis(100)).await
            } else {
                e.await
            };
            result.unwrap();
        }
    };
    enqueue(1).await;
    eventually("the first jobs succeeded", WAIT, || async {
        client.stats::<tls_job>().await.unwrap().succeeded == 10
    })
    .await;
    // Whether the dq user has connections to the master now, each on its TLS port (a
    // command that fails, the server busy with a failover, counts as not yet).
    let on_tls = || {
        let Some(master) = set.master() else {
            return false;
        };
        let Ok(clients) = master.try_cmd::<String>(&["CLIENT", "LIST"]) else {
            return false;
        };
        let tls_port = format!(" laddr=127.0.0.1:{} ", master.tls_port());
        let dq: Vec<&str> = clients
            .lines()
            .filter(|l| l.contains(" user=dq "))
            .collect();
        !dq.is_empty() && dq.iter().all(|l| l.contains(&tls_port))
    };
    eventually(
        "the dq user's connections to the master are on its TLS port",
        WAIT,
        || async { on_tls() },
    )
    .await;

    let old = set.switch_over();
    set.wait_for_failover(old, Duration::from_secs(30));
    let old_master = set.servers().iter().find(|s| s.port() == old).unwrap();
    eventually("the old master is a replica", WAIT, || async {
        let role = old_master.try_cmd::<Vec<dq_testkit::redis::Value>>(&["ROLE"]);
        matches!(role.as_deref(), Ok([dq_testkit::redis::Value::BulkString(b), ..]) if b == b"slave")
    })
    .await;
    // The enqueues find the old master read-only, follow the sentinels to the new one (over
    // TLS, with the same CA) and are sent again there.
    enqueue(101).await;
    eventually("every job succeeded after the failover", WAIT, || async {
        client
            .stats::<tls_job>()
            .await
            .is_ok_and(|s| s.succeeded == 20)
    })
    .await;
    assert_ne!(set.master_port(), Some(old));
    eventually(
        "the dq user's connections to the new master are on its TLS port",
        WAIT,
        || async { on_tls() },
    )
    .await;
    worker.shutdown().await;
    let _ = std::fs::remove_file(&path);
}
