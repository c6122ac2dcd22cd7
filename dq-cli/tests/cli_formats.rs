//! `dq formats` and `dq workers` end to end: the built binary against this test binary's
//! private redis-server, in a namespace of its own, beside library clients of different
//! format levels (docs/UPGRADING.md).

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use dq_core::format::{LEGACY_FORMAT, NEWEST_FORMAT, ProcessRole};
use dq_core::store::redis::layout;
use dq_core::{Client, WorkerInfo};
use dq_testkit::{RedisServer, eventually};
use serde_json::Value;

/// A short format beat, so a dropped client stops holding the level soon.
const BEAT: Duration = Duration::from_millis(200);
const WAIT: Duration = Duration::from_secs(60);

/// What `dq` printed and exited with.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }
}

/// Runs `dq --url … --namespace … ARGS` with stdin null.
fn dq(server: &RedisServer, ns: &str, args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_dq"))
        .args(["--url", &server.url(), "--namespace", ns])
        .args(args)
        .stdin(Stdio::null())
        .env_remove("REDIS_URL")
        .env_remove("DQ_NAMESPACE")
        .output()
        .expect("run dq");
    Run {
        code: out.status.code().expect("dq exited by a signal"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A registered client acting as a dq that reads formats up to `level`.
async fn client(server: &RedisServer, ns: &str, level: u8, role: ProcessRole) -> Client {
    Client::builder()
        .namespace(ns)
        .format_level(level)
        .format_beat(BEAT)
        .role(role)
        .connect(&server.url())
        .await
        .expect("connect")
}

#[tokio::test]
async fn formats_shows_the_level_the_hold_and_each_live_process() {
    let server = RedisServer::start();
    let ns = dq_testkit::namespace("cli-formats");
    let old = client(&server, &ns, LEGACY_FORMAT, ProcessRole::Producer).await;
    let new = client(&server, &ns, NEWEST_FORMAT, ProcessRole::Dashboard).await;

    let text = dq(&server, &ns, &["formats"]);
    assert_eq!(text.code, 0, "{text:?}");
    let out = &text.stdout;
    assert!(
        out.contains("new jobs are written in format 1 (no hold)"),
        "{out}"
    );
    assert!(
        out.contains(&format!("this dq reads formats up to {NEWEST_FORMAT}")),
        "{out}"
    );
    for header in ["ID", "ROLE", "HOST", "PID", "VERSION", "READS", "LAST BEAT"] {
        assert!(out.contains(header), "{out}");
    }
    for c in [&old, &new] {
        let p = c.registered_process().unwrap();
        let row = out
            .lines()
            .find(|l| l.starts_with(&p.id))
            .unwrap_or_else(|| panic!("{} listed: {out}", p.id));
        assert!(row.contains(&p.role.to_string()), "{row}");
        assert!(row.contains(&format!(" {} ", p.reads)), "{row}");
        assert!(row.contains(&p.pid.to_string()), "{row}");
        assert!(row.trim_end().ends_with("ago"), "{row}");
    }
    // The command itself does not register: only the two clients are listed.
    let json = dq(&server, &ns, &["formats", "--json"]).json();
    assert_eq!(json["level"], 1);
    assert_eq!(json["hold"], Value::Null);
    assert_eq!(json["cli_reads"], NEWEST_FORMAT);
    let reads: BTreeSet<u64> = json["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["reads"].as_u64().unwrap())
        .collect();
    assert_eq!(
        reads,
        BTreeSet::from([1, u64::from(NEWEST_FORMAT)]),
        "{json}"
    );

    // Hold at the level now, then release.
    let held = dq(&server, &ns, &["formats", "hold"]);
    assert_eq!(
        (held.code, held.stdout.trim()),
        (0, "format level held at 1 (held at 1)")
    );
    assert_eq!(dq(&server, &ns, &["formats", "--json"]).json()["hold"], 1);
    let released = dq(&server, &ns, &["formats", "release", "--json"]);
    assert_eq!(released.json()["hold"], Value::Null, "{released:?}");

    // The old process gone, the level rises; a hold below it is refused as bad input.
    drop(old);
    eventually("the level rises to the newest", WAIT, || {
        let new = new.clone();
        async move { new.store().formats().write() == NEWEST_FORMAT }
    })
    .await;
    assert_eq!(
        dq(&server, &ns, &["formats", "--json"]).json()["level"],
        NEWEST_FORMAT
    );
    let refused = dq(&server, &ns, &["formats", "hold", "1"]);
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(refused.stderr.contains("cannot lower"), "{refused:?}");
}

/// A namespace whose level is newer than this `dq` reads: every command refuses, naming the
/// level and what to do, and writes nothing.
#[tokio::test]
async fn a_namespace_newer_than_the_cli_is_refused() {
    let server = RedisServer::start();
    let ns = dq_testkit::namespace("cli-formats");
    let newer = (NEWEST_FORMAT + 1).to_string();
    server.cmd::<()>(&["HSET", &layout::formats_key(&ns), "level", &newer]);
    for args in [
        &["topics"][..],
        &["formats"],
        &["enqueue", "t", "--key", "k", "--json", "1"],
    ] {
        let run = dq(&server, &ns, args);
        assert_eq!(run.code, 1, "{args:?}: {run:?}");
        assert!(
            run.stderr.contains(&format!("format {newer}"))
                && run
                    .stderr
                    .contains(&format!("reads formats up to {NEWEST_FORMAT}"))
                && run.stderr.contains("docs/UPGRADING.md"),
            "{args:?}: {run:?}"
        );
    }
    let keys = dq_testkit::keys_in_namespace(&server, &ns);
    assert_eq!(keys, [layout::formats_key(&ns)], "nothing written");
}

#[tokio::test]
async fn workers_shows_the_format_each_worker_reads() {
    let server = RedisServer::start();
    let ns = dq_testkit::namespace("cli-formats");
    let c = client(&server, &ns, NEWEST_FORMAT, ProcessRole::Worker).await;
    let none = dq(&server, &ns, &["workers"]);
    assert_eq!(none.code, 0);
    assert!(none.stderr.contains("no live workers"), "{none:?}");
    let mut old = WorkerInfo::new(vec!["orders".into()], 4, 0);
    old.reads_format = LEGACY_FORMAT;
    c.store()
        .beat_worker(&old, Duration::from_secs(60))
        .await
        .unwrap();
    let text = dq(&server, &ns, &["workers"]);
    assert_eq!(text.code, 0, "{text:?}");
    assert!(
        text.stdout.lines().next().unwrap().contains("READS"),
        "{text:?}"
    );
    let row = text
        .stdout
        .lines()
        .find(|l| l.starts_with(&old.id))
        .unwrap();
    assert!(row.contains(" 0/4 ") && row.contains(" 1 "), "{row}");
    let json = dq(&server, &ns, &["workers", "--json"]).json();
    assert_eq!(json[0]["reads"], 1, "{json}");
    assert_eq!(json[0]["topics"][0], "orders", "{json}");
}

/// A registry the CLI cannot read (here a key of another type) does not keep it from
/// inspecting the namespace: it acts as a dq writing format 1 and leaves the key as it is; only
/// a level newer than it reads refuses it.
#[tokio::test]
async fn a_registry_the_cli_cannot_read_does_not_stop_it() {
    let server = RedisServer::start();
    let ns = dq_testkit::namespace("cli-formats");
    server.cmd::<()>(&["SET", &layout::formats_key(&ns), "not a hash"]);
    let run = dq(&server, &ns, &["topics"]);
    assert_eq!(run.code, 0, "{run:?}");
    let value: String = server.cmd(&["GET", &layout::formats_key(&ns)]);
    assert_eq!(value, "not a hash");
}
