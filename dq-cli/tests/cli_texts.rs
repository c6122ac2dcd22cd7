//! End-to-end tests of the `dq` binary for what a newcomer trips over: an unreachable or
//! mistyped Redis address fails within seconds (exit code 4) naming the address it tried and
//! never its password; a key with an invisible character is refused (exit code 2) saying
//! where; `dq stats` tells a success after a cancel request from a cancel; groups are
//! enqueued, shown, limited and held (`dq group`).

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use dq_core::{Client, FetchCall, FetchRequest, Queue, Topic};

const BAD_INPUT: i32 = 2;
const CONNECTION: i32 = 4;

/// Far under the 30 s an application waits, and far over the 5 s default plus its grace:
/// the bound holds on a loaded machine and fails on a CLI that inherits the 30 s.
const GENEROUS: Duration = Duration::from_secs(15);

/// A loopback port nothing listens on: bound, noted, closed.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `dq ARGS` with `env` set (and no inherited connection settings); exit code, stdout,
/// stderr and how long it took.
fn dq(args: &[&str], env: &[(&str, &str)]) -> (Output, Duration) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dq"));
    cmd.args(args)
        .stdin(Stdio::null())
        .env_remove("REDIS_URL")
        .env_remove("DQ_NAMESPACE")
        .env_remove("DQ_CONNECT_TIMEOUT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let started = Instant::now();
    let out = cmd.output().expect("run dq");
    (out, started.elapsed())
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The case: `dq` took 31 s to say Redis is unreachable. By default it now gives up
/// within seconds with exit code 4, naming the address without the password; so does the
/// dashboard command, and `--connect-timeout` / `DQ_CONNECT_TIMEOUT` set the wait.
#[test]
fn an_unreachable_address_fails_within_seconds_naming_it_without_the_password() {
    let port = closed_port();
    let url = format!("redis://app:s3cret-pw@127.0.0.1:{port}/");
    let shown = format!("redis://app:***@127.0.0.1:{port}/");
    for (args, env) in [
        (vec!["--url", url.as_str(), "topics"], vec![]),
        (
            vec!["--url", url.as_str(), "--connect-timeout", "1s", "stats"],
            vec![],
        ),
        (
            vec![
                "--url",
                url.as_str(),
                "dashboard",
                "--listen",
                "127.0.0.1:0",
            ],
            vec![("DQ_CONNECT_TIMEOUT", "1s")],
        ),
    ] {
        let (out, took) = dq(&args, &env);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(CONNECTION), "{args:?}: {stderr}");
        assert!(took < GENEROUS, "{args:?} took {took:?}: {stderr}");
        assert!(
            stderr.contains(&shown) && stderr.contains("cannot reach Redis"),
            "{args:?}: the address is not named: {stderr}"
        );
        assert!(!stderr.contains("s3cret"), "{args:?}: {stderr}");
        if args.contains(&"1s") || !env.is_empty() {
            assert!(stderr.contains("gave up after 1s"), "{stderr}");
        } else {
            assert!(stderr.contains("gave up after 5s"), "{stderr}");
        }
    }
    // A bad flag value is bad input, before anything is tried.
    let (out, _) = dq(&["--url", &url, "--connect-timeout", "soon", "topics"], &[]);
    assert_eq!(out.status.code(), Some(BAD_INPUT), "{}", text(&out.stderr));
}

/// A key holding an invisible character (it looks like `order7` in every tool) is refused
/// with exit code 2, naming the character and where it is; nothing is stored.
#[tokio::test]
async fn an_invisible_character_in_a_key_is_refused_saying_where() {
    let url = dq_testkit::shared().url();
    let ns = dq_testkit::namespace("cli-texts");
    let client = Client::builder()
        .namespace(&ns)
        .connect(&url)
        .await
        .unwrap();
    let t = client.topic("texts").unwrap();
    t.enqueue(vec![0x01]).key("order7").await.unwrap();
    for (key, code) in [("order\u{200b}7", "U+200B"), ("\u{feff}order7", "U+FEFF")] {
        for args in [
            vec!["enqueue", "texts", "--key", key, "--json", "1"],
            vec!["cancel", "texts", key],
            vec!["job", "texts", key],
        ] {
            let mut all = vec!["--url", url.as_str(), "--namespace", ns.as_str()];
            all.extend(&args);
            let (out, _) = dq(&all, &[]);
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(BAD_INPUT), "{args:?}: {stderr}");
            assert!(stderr.contains(code), "{args:?}: {stderr}");
        }
    }
    let st = t.stats().await.unwrap();
    assert_eq!((st.enqueued, st.ready, st.cancelled), (1, 1, 0), "{st:?}");
}

/// `dq stats` shows a job that succeeded after its cancel was requested apart from the
/// cancelled ones, in text and JSON.
#[tokio::test]
async fn stats_tell_a_success_after_a_cancel_request_from_a_cancel() {
    let url = dq_testkit::shared().url();
    let ns = dq_testkit::namespace("cli-texts");
    let client = Client::builder()
        .namespace(&ns)
        .connect(&url)
        .await
        .unwrap();
    let t = client.topic("texts").unwrap();
    t.enqueue(vec![0x01]).key("finished").await.unwrap();
    let q = Queue::new(Topic::new("texts").unwrap(), 0);
    let request = FetchRequest {
        max_jobs: 1,
        lease: Duration::from_secs(60),
        call: FetchCall::new(),
        ..FetchRequest::default()
    };
    let reply = client.store().fetch(&q, &request).await.unwrap();
    assert_eq!(reply.jobs.len(), 1);
    t.cancel("finished").await.unwrap();
    let lease = dq_core::store::lease_of(&reply.jobs[0]);
    client
        .store()
        .ack(&q, "", &dq_core::Success::of(&[lease]))
        .await
        .unwrap();

    let base = ["--url", url.as_str(), "--namespace", ns.as_str()];
    let mut args = base.to_vec();
    args.extend(["stats", "texts", "--json"]);
    let (out, _) = dq(&args, &[]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = &json["counters"];
    assert_eq!(
        (
            &c["succeeded"],
            &c["succeeded_after_cancel_request"],
            &c["cancelled"]
        ),
        (&1.into(), &1.into(), &0.into()),
        "{json}"
    );
    let mut args = base.to_vec();
    args.extend(["stats", "texts"]);
    let (out, _) = dq(&args, &[]);
    let detail = text(&out.stdout);
    assert!(
        detail.contains("cancelled 0")
            && detail.contains("1 of the succeeded had a cancel requested"),
        "{detail}"
    );
}

/// `dq limits --keep-*` sets which finished jobs a topic keeps; `dq job` shows a kept job
/// with its outcome, worker and result; `dq list --state succeeded` pages them; a bad
/// retention or state is refused (exit code 2) before anything is written.
#[tokio::test]
async fn kept_jobs_are_set_shown_and_listed() {
    let url = dq_testkit::shared().url();
    let ns = dq_testkit::namespace("cli-kept");
    let client = Client::builder()
        .namespace(&ns)
        .connect(&url)
        .await
        .unwrap();
    let base = ["--url", url.as_str(), "--namespace", ns.as_str()];
    let run = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend(extra);
        dq(&args, &[]).0
    };
    let t = client.topic("thumbs").unwrap();
    t.stats().await.unwrap(); // records the topic
    let out = run(&["limits", "thumbs", "--keep-succeeded", "0s"]);
    assert_eq!(out.status.code(), Some(BAD_INPUT), "{}", text(&out.stderr));
    // a bad retention beside a good rate: refused before either is written
    let out = run(&["limits", "thumbs", "--rate", "10/s", "--keep-max", "0"]);
    assert_eq!(out.status.code(), Some(BAD_INPUT), "{}", text(&out.stderr));
    assert_eq!(t.control().await.unwrap().rate, None, "nothing written");
    let out = run(&[
        "limits",
        "thumbs",
        "--keep-succeeded",
        "1h",
        "--keep-max",
        "50",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout)
            .contains("keep         succeeded 1h, cancelled no, expired no, at most 50"),
        "{}",
        text(&out.stdout)
    );
    t.enqueue(rmp_serde::to_vec(&7u64).unwrap())
        .key("image-7")
        .await
        .unwrap();
    let q = Queue::new(Topic::new("thumbs").unwrap(), 0);
    let request = FetchRequest {
        max_jobs: 1,
        lease: Duration::from_secs(60),
        call: FetchCall::new(),
        ..FetchRequest::default()
    };
    let reply = client.store().fetch(&q, &request).await.unwrap();
    let d = &reply.jobs[0];
    let mut done = dq_core::Success::new(d.key.clone(), d.token);
    done.started_ms = d.leased_ms;
    done.result = dq_core::StoredResult::Value(
        rmp_serde::to_vec_named(&serde_json::json!({"url": "https://cdn/7.png"})).unwrap(),
    );
    client.store().ack(&q, "worker-a", &[done]).await.unwrap();

    let out = run(&["job", "thumbs", "image-7"]);
    let shown = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for want in [
        "succeeded (kept until",
        "worker    worker-a",
        "https://cdn/7.png",
        "payload   7",
    ] {
        assert!(shown.contains(want), "{want:?} in {shown}");
    }
    let out = run(&["job", "thumbs", "image-7", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["outcome"], "succeeded", "{json}");
    assert_eq!(json["result"]["url"], "https://cdn/7.png", "{json}");
    let out = run(&["list", "thumbs", "--state", "succeeded", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["jobs"][0]["key"], "image-7", "{json}");
    assert_eq!(json["next"], serde_json::Value::Null);
    let out = run(&["list", "thumbs", "--state", "cancelled"]);
    assert!(out.status.success());
    assert!(
        text(&out.stderr).contains("no cancelled jobs"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&["list", "thumbs", "--state", "finished"]);
    assert_eq!(out.status.code(), Some(BAD_INPUT), "{}", text(&out.stderr));
    let out = run(&["stats", "thumbs"]);
    assert!(
        text(&out.stdout).contains("kept            1 finished"),
        "{}",
        text(&out.stdout)
    );
}

/// `dq limits --events N|on|off` turns a topic's events on and off (a bad bound is refused,
/// exit code 2, before anything is written); `dq events --from start --limit N` prints them,
/// one JSON object per line, and the cursor to resume from on stderr; `--from <cursor>`
/// resumes right after it.
#[tokio::test]
async fn events_are_turned_on_and_followed() {
    let url = dq_testkit::shared().url();
    let ns = dq_testkit::namespace("cli-events");
    let client = Client::builder()
        .namespace(&ns)
        .connect(&url)
        .await
        .unwrap();
    let base = ["--url", url.as_str(), "--namespace", ns.as_str()];
    let run = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend(extra);
        dq(&args, &[]).0
    };
    let t = client.topic("mails").unwrap();
    t.stats().await.unwrap(); // records the topic
    for bad in ["0", "lots", "20000000"] {
        let out = run(&["limits", "mails", "--rate", "10/s", "--events", bad]);
        assert_eq!(out.status.code(), Some(BAD_INPUT), "{}", text(&out.stderr));
    }
    assert_eq!(t.control().await.unwrap().rate, None, "nothing written");
    let out = run(&["limits", "mails", "--events", "500"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("events       on, the last 500 kept"),
        "{}",
        text(&out.stdout)
    );
    for n in 0..3u64 {
        t.enqueue(rmp_serde::to_vec(&n).unwrap())
            .key(format!("mail-{n}"))
            .await
            .unwrap();
    }
    let out = run(&[
        "events", "mails", "--from", "start", "--limit", "2", "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(
        (&lines[0]["kind"], &lines[0]["key"], &lines[0]["topic"]),
        (&"enqueued".into(), &"mail-0".into(), &"mails".into())
    );
    let stderr = text(&out.stderr);
    let cursor = stderr
        .lines()
        .find_map(|l| l.strip_prefix("cursor: "))
        .unwrap_or_else(|| panic!("a cursor on stderr: {stderr}"))
        .to_owned();
    let out = run(&["events", "mails", "--from", &cursor, "--limit", "1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let line = text(&out.stdout);
    assert!(
        line.contains("mails#0  enqueued   mail-2"),
        "resumed after mail-1: {line}"
    );
    let out = run(&["events", "--from", "mails#0=x"]);
    assert_eq!(out.status.code(), Some(BAD_INPUT), "{}", text(&out.stderr));
    let out = run(&["limits", "mails", "--events", "off"]);
    assert!(
        text(&out.stdout).contains("events       off"),
        "{}",
        text(&out.stdout)
    );
}

/// `dq limits --max-delay DURATION|off` sets and removes a topic's max_delay (a bad value is
/// refused, exit code 2, before anything is written); an enqueue due beyond it is refused.
#[tokio::test]
async fn max_delay_is_set_and_removed() {
    let url = dq_testkit::shared().url();
    let ns = dq_testkit::namespace("cli-maxdelay");
    let client = Client::builder()
        .namespace(&ns)
        .connect(&url)
        .await
        .unwrap();
    let base = ["--url", url.as_str(), "--namespace", ns.as_str()];
    let run = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend(extra);
        dq(&args, &[]).0
    };
    let t = client.topic("bills").unwrap();
    t.stats().await.unwrap(); // records the topic
    for bad in ["0s", "soon", "-1d"] {
        let out = run(&["limits", "bills", "--rate", "10/s", "--max-delay", bad]);
        assert_eq!(out.status.code(), Some(BAD_INPUT), "{}", text(&out.stderr));
    }
    assert_eq!(t.control().await.unwrap().rate, None, "nothing written");
    let out = run(&["limits", "bills", "--max-delay", "90d"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("max delay    90d"),
        "{}",
        text(&out.stdout)
    );
    let far = t
        .enqueue(rmp_serde::to_vec(&1u64).unwrap())
        .delay(Duration::from_secs(91 * 86_400))
        .await;
    assert!(
        matches!(far, Err(dq_core::Error::DelayTooLong { .. })),
        "{far:?}"
    );
    let out = run(&["limits", "bills", "--max-delay", "off", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(v["max_delay_ms"], serde_json::Value::Null, "{v}");
}

/// `dq enqueue --throttle` opens a window on the key: the next enqueue of it fails (exit 1)
/// saying until when; `--debounce` with `--in` is refused by the parser (exit 2).
#[tokio::test]
async fn enqueue_with_a_window_refuses_the_key() {
    let url = dq_testkit::shared().url();
    let ns = dq_testkit::namespace("cli-window");
    let base = ["--url", url.as_str(), "--namespace", ns.as_str()];
    let run = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend(extra);
        dq(&args, &[]).0
    };
    let first = [
        "enqueue",
        "calls",
        "--key",
        "c1",
        "--json",
        "1",
        "--in",
        "1h",
        "--throttle",
        "1h",
        "--partitions",
        "1",
    ];
    let out = run(&first);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(&["enqueue", "calls", "--key", "c1", "--json", "2"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("inside a unique_for or throttle window"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&[
        "enqueue",
        "calls",
        "--key",
        "c2",
        "--json",
        "3",
        "--in",
        "1m",
        "--debounce",
        "5s",
    ]);
    assert_eq!(out.status.code(), Some(BAD_INPUT), "{}", text(&out.stderr));
}

/// `dq enqueue --priority N` stores the priority: `dq job` shows it (in words, and as a
/// number in JSON), `dq list --state ready` lists the ready jobs in the order workers take
/// them with a priority column; a priority outside 0..=9 (or not a number) is bad input
/// (exit 2) saying what to write, and nothing is written.
#[tokio::test]
async fn enqueue_with_a_priority_is_shown_and_listed_in_order() {
    let url = dq_testkit::shared().url();
    let ns = dq_testkit::namespace("cli-priority");
    // A registered process alone in the namespace raises its format level to the newest,
    // which a priority needs (the level never lowers after it is gone).
    let client = Client::builder()
        .namespace(&ns)
        .connect(&url)
        .await
        .expect("connect");
    dq_testkit::eventually("the namespace writes the newest format", GENEROUS, || {
        let client = client.clone();
        async move { client.store().formats().write() == dq_core::format::NEWEST_FORMAT }
    })
    .await;
    let base = ["--url", url.as_str(), "--namespace", ns.as_str()];
    let run = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend(extra);
        dq(&args, &[]).0
    };
    for (key, priority) in [("low", Some("2")), ("plain", None), ("urgent", Some("8"))] {
        let mut args = vec![
            "enqueue",
            "calls",
            "--key",
            key,
            "--json",
            "1",
            "--partitions",
            "1",
        ];
        if let Some(p) = priority {
            args.extend(["--priority", p]);
        }
        let out = run(&args);
        assert!(out.status.success(), "{key}: {}", text(&out.stderr));
    }
    for bad in ["10", "-1", "high", ""] {
        let out = run(&[
            "enqueue",
            "calls",
            "--key",
            "bad",
            "--json",
            "1",
            "--priority",
            bad,
        ]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(BAD_INPUT), "{bad:?}: {stderr}");
        assert!(
            stderr.contains("is not a priority") && stderr.contains("0 (lowest) to 9 (highest)"),
            "{bad:?}: {stderr}"
        );
    }
    let out = run(&["job", "calls", "bad"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));

    let out = run(&["job", "calls", "urgent"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("priority  8 (above normal)\n"),
        "{}",
        text(&out.stdout)
    );
    let out = run(&["job", "calls", "plain"]);
    assert!(
        text(&out.stdout).contains("priority  5 (normal)\n"),
        "{}",
        text(&out.stdout)
    );
    let out = run(&["job", "calls", "low", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(v["priority"], 2, "{v}");

    let out = run(&["list", "calls", "--state", "ready"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed: Vec<(String, String)> = text(&out.stdout)
        .lines()
        .map(|line| {
            let cols: Vec<&str> = line.split('\t').collect();
            (cols[0].to_owned(), cols[2].to_owned())
        })
        .collect();
    let expected = [
        ("urgent", "priority 8"),
        ("plain", "priority 5"),
        ("low", "priority 2"),
    ];
    assert_eq!(
        listed,
        expected.map(|(k, p)| (k.to_owned(), p.to_owned())),
        "{}",
        text(&out.stdout)
    );
    let out = run(&["list", "calls", "--state", "ready", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    let priorities: Vec<u64> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["priority"].as_u64().unwrap())
        .collect();
    assert_eq!(priorities, [8, 5, 2], "{v}");
}

/// `dq enqueue --group NAME` puts the job in a group: `dq job` shows it (text and JSON), `dq
/// list` has a group column; a bad name is bad input (exit 2) saying why, nothing written.
/// `dq group` shows and sets a group's limits and the default (a flag changes one limit of
/// those that apply now, `--clear` removes them), holds a group, and counts its running and
/// waiting jobs; bad limits, a bad hold or a bad name are bad input before any write.
#[tokio::test]
async fn groups_are_enqueued_shown_limited_and_held() {
    let url = dq_testkit::shared().url();
    let ns = dq_testkit::namespace("cli-group");
    // A registered process alone in the namespace raises its format level to the newest,
    // which a group needs.
    let client = Client::builder()
        .namespace(&ns)
        .connect(&url)
        .await
        .expect("connect");
    dq_testkit::eventually("the namespace writes the newest format", GENEROUS, || {
        let client = client.clone();
        async move { client.store().formats().write() == dq_core::format::NEWEST_FORMAT }
    })
    .await;
    let base = ["--url", url.as_str(), "--namespace", ns.as_str()];
    let run = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend(extra);
        dq(&args, &[]).0
    };
    let ok = |extra: &[&str]| {
        let out = run(extra);
        assert!(out.status.success(), "{extra:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    let refused = |extra: &[&str], says: &str| {
        let out = run(extra);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(BAD_INPUT), "{extra:?}: {stderr}");
        assert!(stderr.contains(says), "{extra:?}: {stderr}");
    };
    ok(&[
        "enqueue",
        "calls",
        "--key",
        "t7",
        "--json",
        "1",
        "--group",
        "tenant-7",
        "--partitions",
        "2",
    ]);
    ok(&["enqueue", "calls", "--key", "plain", "--json", "1"]);
    for bad in ["a b", "", "zero\u{200b}width"] {
        refused(
            &[
                "enqueue", "calls", "--key", "bad", "--json", "1", "--group", bad,
            ],
            "invalid group name",
        );
    }
    let t = client.admin().topic_with("calls", 2).unwrap();
    assert!(t.job("bad").await.unwrap().is_none());

    let shown = ok(&["job", "calls", "t7"]);
    assert!(shown.contains("group     tenant-7\n"), "{shown}");
    assert!(!ok(&["job", "calls", "plain"]).contains("group"));
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["job", "calls", "t7", "--json"])).unwrap();
    assert_eq!(v["group"], "tenant-7", "{v}");
    let listed = ok(&["list", "calls", "--state", "ready"]);
    let mut columns: Vec<(String, String)> = listed
        .lines()
        .map(|line| {
            let cols: Vec<&str> = line.split('\t').collect();
            (cols[0].to_owned(), cols[3].to_owned())
        })
        .collect();
    columns.sort();
    assert_eq!(
        columns,
        [
            ("plain".to_owned(), "no group".to_owned()),
            ("t7".to_owned(), "group tenant-7".to_owned())
        ],
        "{listed}"
    );

    // Nothing set: no limits; the due job waits for its group's turn.
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["group", "calls", "tenant-7", "--json"])).unwrap();
    assert_eq!(
        (
            &v["limits"],
            &v["default_limits"],
            &v["waiting"],
            &v["running"]
        ),
        (
            &json_null(),
            &json_null(),
            &serde_json::json!(1),
            &serde_json::json!(0)
        ),
        "{v}"
    );
    // The default, then one group's own over it (the default's other limits kept).
    let shown = ok(&["group", "calls", "--concurrency", "4", "--rate", "10/s"]);
    assert!(
        shown.contains("default      concurrency 4, rate 10/s, weight 1\n"),
        "{shown}"
    );
    assert!(shown.contains("waiting      1 (every group)\n"), "{shown}");
    let shown = ok(&["group", "calls", "tenant-7", "--weight", "3"]);
    assert!(
        shown.contains("limits       concurrency 4, rate 10/s, weight 3\n"),
        "{shown}"
    );
    let state = t.group_state(Some("tenant-7")).await.unwrap();
    let own = state.limits.expect("own limits");
    assert_eq!((own.concurrency, own.weight), (Some(4), 3));
    assert_eq!(own.rate.unwrap().to_string(), "10/s");
    let shown = ok(&["group", "calls", "tenant-7", "--rate", "none"]);
    assert!(
        shown.contains("limits       concurrency 4, rate none, weight 3\n"),
        "{shown}"
    );

    // Bad input, before any write: the limits stay as they were.
    let before = t.group_state(Some("tenant-7")).await.unwrap();
    refused(
        &["group", "calls", "tenant-7", "--concurrency", "1"],
        "concurrency",
    );
    refused(
        &["group", "calls", "tenant-7", "--concurrency", "many"],
        "--concurrency",
    );
    refused(&["group", "calls", "tenant-7", "--rate", "fast"], "--rate");
    refused(&["group", "calls", "tenant-7", "--weight", "0"], "weight");
    refused(
        &["group", "calls", "tenant-7", "--weight", "1001"],
        "weight",
    );
    refused(
        &[
            "group", "calls", "tenant-7", "--weight", "2", "--hold", "0s",
        ],
        "hold",
    );
    refused(
        &["group", "calls", "a b", "--weight", "2"],
        "invalid group name",
    );
    refused(&["group", "calls", "--hold", "5m"], "GROUP");
    assert_eq!(t.group_state(Some("tenant-7")).await.unwrap(), before);
    let out = run(&["group", "nosuch", "tenant-7"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));

    // A hold, shown with its end; --clear removes the group's own limits.
    let v: serde_json::Value = serde_json::from_str(&ok(&[
        "group", "calls", "tenant-7", "--hold", "10m", "--json",
    ]))
    .unwrap();
    assert!(v["held_until"].is_string(), "{v}");
    assert!(
        t.group_state(Some("tenant-7"))
            .await
            .unwrap()
            .held_until_ms
            .is_some()
    );
    let shown = ok(&["group", "calls", "tenant-7"]);
    assert!(shown.contains("held         until "), "{shown}");
    let shown = ok(&["group", "calls", "tenant-7", "--clear"]);
    assert!(
        shown.contains("limits       none of its own (the default applies)\n"),
        "{shown}"
    );
    ok(&["group", "calls", "--clear"]);
    let state = t.group_state(None).await.unwrap();
    assert_eq!((state.limits, state.default_limits), (None, None));
}

fn json_null() -> serde_json::Value {
    serde_json::Value::Null
}
