//! A server dies with its test process, even when that process is SIGKILLed and the server
//! lives in a `static` that is never dropped.
//!
//! The parent test re-runs this test binary as a child, filtered to `child_holds_servers`.
//! The child starts servers, reports their pids and directories, and blocks until the parent
//! SIGKILLs it.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use dq_testkit::{RedisServer, eventually_blocking, shared};

const CHILD_ENV: &str = "DQ_TESTKIT_LIFETIME_CHILD";
const REPORT: &str = "DQ_TESTKIT_SERVER";

fn proc_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Only does something when run as the parent's child.
#[test]
fn child_holds_servers() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let own = RedisServer::start();
    {
        let mut out = std::io::stdout().lock();
        for server in [shared(), &own] {
            writeln!(out, "{REPORT} {} {}", server.pid(), server.dir().display()).unwrap();
        }
        writeln!(out, "{REPORT} done").unwrap();
        out.flush().unwrap();
    }
    // Block until the parent kills us (or, should the parent die, until our stdin closes).
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}

#[test]
fn servers_die_when_the_test_process_is_sigkilled() {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "child_holds_servers",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();

    // Collect the child's report on a thread, so that waiting for it is bounded.
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut servers = Vec::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // libtest may have printed `test child_holds_servers ... ` on the same line.
            let Some(at) = line.find(REPORT) else {
                continue;
            };
            let rest = line[at + REPORT.len()..].trim();
            if rest == "done" {
                break;
            }
            let (pid, dir) = rest.split_once(' ').unwrap();
            servers.push((pid.parse::<u32>().unwrap(), PathBuf::from(dir)));
        }
        let _ = tx.send(servers);
    });
    let servers = rx.recv_timeout(Duration::from_secs(30));
    if let Ok(servers) = &servers {
        for (pid, _) in servers {
            assert!(
                proc_exists(*pid),
                "server {pid} is not running before the kill"
            );
        }
    }
    child.kill().unwrap(); // SIGKILL: no destructors, no atexit
    child.wait().unwrap();
    let servers = servers.expect("the child reported its servers");
    assert_eq!(servers.len(), 2, "{servers:?}");

    for (pid, dir) in servers {
        eventually_blocking(
            &format!("redis-server {pid} is gone"),
            Duration::from_secs(10),
            || !proc_exists(pid),
        );
        eventually_blocking(
            &format!("{} is removed", dir.display()),
            Duration::from_secs(10),
            || !dir.exists(),
        );
    }
}
