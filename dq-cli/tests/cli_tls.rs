//! The `dq` binary over TLS (feature `tls`): against a `redis-server` listening with TLS on
//! certificates made at test time, as an ACL user with exactly dq's rule, the commands and
//! the dashboard connect to `rediss://user:password@…` with the CA given by `--tls-ca` or
//! `DQ_TLS_CA`; a wrong CA exits 4 saying the certificate is not trusted, and neither it nor
//! a wrong password shows the password.

#![cfg(feature = "tls")]

use std::io::{BufRead, Write};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use dq_core::store::redis::acl_rule;
use dq_core::{Client, TlsConfig};
use dq_testkit::{RedisServer, ServerOptions, TestCerts};

const PASSWORD: &str = "cli-tls-Pa55";
const NS: &str = "clitls";
const CONNECTION: i32 = 4;

/// A server listening with TLS whose users are `default` (the test kit's, on the plain port)
/// and `dq` with dq's rule for [`NS`].
fn server(certs: &TestCerts) -> RedisServer {
    let path = certs.dir().join("users.acl");
    let mut f = std::fs::File::create(&path).unwrap();
    writeln!(f, "user default on nopass ~* &* +@all").unwrap();
    writeln!(f, "user dq on >{PASSWORD} {}", acl_rule(NS)).unwrap();
    drop(f);
    RedisServer::start_with(
        ServerOptions::default()
            .tls(certs.server_tls())
            .arg("--aclfile")
            .arg(path.display().to_string()),
    )
}

fn url_of(server: &RedisServer, password: &str) -> String {
    format!("rediss://dq:{password}@127.0.0.1:{}/", server.tls_port())
}

/// Runs `dq --url URL --namespace NS ARGS` with `env` (and no inherited connection or TLS
/// settings).
fn dq(url: &str, args: &[&str], env: &[(&str, &std::path::Path)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dq"));
    cmd.args(["--url", url, "--namespace", NS, "--connect-timeout", "10s"])
        .args(args)
        .stdin(Stdio::null());
    for var in [
        "REDIS_URL",
        "DQ_NAMESPACE",
        "DQ_TLS_CA",
        "DQ_TLS_CERT",
        "DQ_TLS_KEY",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run dq")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn commands_connect_over_tls_with_the_ca_of_the_flag_or_the_environment() {
    let certs = TestCerts::generate();
    let server = server(&certs);
    let url = url_of(&server, PASSWORD);
    let client = Client::builder()
        .namespace(NS)
        .tls(TlsConfig::new().ca_file(certs.ca_file()).unwrap())
        .connect(&url)
        .await
        .unwrap();
    client
        .topic("tls.cli")
        .unwrap()
        .enqueue(vec![0x90])
        .key("k1")
        .await
        .unwrap();

    let ca = certs.ca_file();
    let out = dq(&url, &["--tls-ca", ca.to_str().unwrap(), "topics"], &[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("tls.cli"), "{stdout}");

    let out = dq(&url, &["job", "tls.cli", "k1"], &[("DQ_TLS_CA", &ca)]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("k1"), "{stdout}");

    // A CA that did not sign the server's certificate: exit 4, saying so.
    let unrelated = TestCerts::generate();
    let out = dq(&url, &["topics"], &[("DQ_TLS_CA", &unrelated.ca_file())]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(CONNECTION), "{stdout}\n{stderr}");
    assert!(stderr.contains("is the CA right?"), "{stderr}");
    assert!(stderr.contains("rediss://dq:***@127.0.0.1"), "{stderr}");
    assert!(!stderr.contains(PASSWORD), "{stderr}");

    // A wrong password: refused, named, never shown (nor the right one).
    let wrong = "not-the-Pa55word";
    let out = dq(
        &url_of(&server, wrong),
        &["--tls-ca", ca.to_str().unwrap(), "topics"],
        &[],
    );
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stderr.to_lowercase().contains("authentication failed"),
        "{stderr}"
    );
    assert!(
        !stderr.contains(wrong) && !stderr.contains(PASSWORD),
        "{stderr}"
    );

    // A CA file that cannot be read: bad input, naming the file.
    let out = dq(&url, &["--tls-ca", "/nonexistent/dq-ca.pem", "topics"], &[]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("/nonexistent/dq-ca.pem"), "{stderr}");
}

/// Kills the `dq dashboard` child it holds when the test ends, also on panic.
struct Serving(std::process::Child);

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn the_dashboard_connects_over_tls() {
    let certs = TestCerts::generate();
    let server = server(&certs);
    let url = url_of(&server, PASSWORD);
    let client = Client::builder()
        .namespace(NS)
        .tls(TlsConfig::new().ca_file(certs.ca_file()).unwrap())
        .connect(&url)
        .await
        .unwrap();
    client
        .topic("tls.shown")
        .unwrap()
        .enqueue(vec![0x90])
        .key("a")
        .await
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_dq"))
        .args(["--url", &url, "--namespace", NS])
        .args(["dashboard", "--listen", "127.0.0.1:0", "--read-only"])
        .env("DQ_TLS_CA", certs.ca_file())
        .env_remove("DQ_DASHBOARD_TOKEN")
        .env_remove("DQ_DASHBOARD_PASSWORD")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start dq dashboard");
    let stderr = child.stderr.take().unwrap();
    let serving = Serving(child);
    // The first line names the address the dashboard bound; a line read blocks at most until
    // the child exits, which the guard's kill guarantees.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let line = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("dq dashboard printed where it listens");
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    let page = tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut s = std::net::TcpStream::connect(&addr).expect("connect to the dashboard");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(s, "GET / HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).expect("read the reply");
        reply
    })
    .await
    .unwrap();
    assert!(
        page.starts_with("HTTP/1.1 200") || page.starts_with("HTTP/1.0 200"),
        "{page}"
    );
    assert!(
        page.contains("tls.shown"),
        "the overview lists the topic: {page}"
    );
    // The dashboard's connections are the dq user's, on the TLS port.
    let clients: String = server.cmd(&["CLIENT", "LIST"]);
    let tls_port = format!(" laddr=127.0.0.1:{} ", server.tls_port());
    assert!(
        clients
            .lines()
            .filter(|l| l.contains(" user=dq "))
            .all(|l| l.contains(&tls_port)),
        "{clients}"
    );
    drop(serving);
}
