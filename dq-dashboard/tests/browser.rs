//! The dashboard in a real browser: headless Chromium driven over WebDriver (chromedriver,
//! started here on a free port and killed by pid at the end). Jobs in every state are made
//! in a real Redis; the test reads the overview's numbers against `stats`, requeues one dead
//! job by clicking its button and watches it leave the dead queue, checks that equal depths
//! both stay visible in the chart, that a 404 keeps the header and a way back, that a
//! read-only dashboard's dead queue holds no form, that the schedules page lists the
//! schedules, and that the batches page leads to a batch's counts, callback and members and
//! on to a member's job page and back; it saves a screenshot of each page under `target/dashboard-screenshots/`. With
//! `DQ_UPDATE_SCREENSHOTS=1` it also writes the overview, dead-queue, topic and schedules
//! screenshots to `docs/img/` for the README.

mod common;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{make_dead, make_ready, make_scheduled, serve};
use dq_core::{FailAction, JobState};
use dq_dashboard::DashboardOptions;
use dq_testkit::{eventually, eventually_some};
use fantoccini::{Client as Browser, ClientBuilder, Locator};

/// How long any one wait for the browser may take: generous, for a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(60);

/// chromedriver, killed (by its pid) when dropped, so a failing test leaves nothing behind.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn binary(env: &str, default: &str) -> String {
    std::env::var(env).unwrap_or_else(|_| default.to_owned())
}

async fn start_driver() -> Driver {
    let path = binary("DQ_TEST_CHROMEDRIVER", "/usr/bin/chromedriver");
    let port = free_port();
    let child = Command::new(&path)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start {path} ({e}): install Debian's chromium and chromium-driver (scripts/test.sh does)")
        });
    let driver = Driver {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let status = format!("{}/status", driver.url);
    eventually("chromedriver answers /status", WAIT, || {
        let status = status.clone();
        async move { matches!(reqwest::get(&status).await, Ok(r) if r.status().is_success()) }
    })
    .await;
    driver
}

async fn open_browser(driver: &Driver, profile: &std::path::Path) -> Browser {
    let args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1360,1000",
        &format!("--user-data-dir={}", profile.display()),
    ];
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": binary("DQ_TEST_CHROMIUM", "/usr/bin/chromium"),
            "args": args,
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a chromium session from chromedriver")
}

/// The text of the first element matching `css`, once there is one.
async fn text_of(browser: &Browser, css: &str) -> String {
    eventually_some(&format!("an element {css}"), WAIT, || async move {
        let el = browser.find(Locator::Css(css)).await.ok()?;
        el.text().await.ok()
    })
    .await
}

fn screenshots_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/dashboard-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn screenshot(browser: &Browser, name: &str) -> PathBuf {
    let png = browser.screenshot().await.expect("screenshot");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let path = screenshots_dir().join(format!("{name}.png"));
    std::fs::write(&path, png).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_in_a_real_browser() {
    // Jobs in every state: dead (two errors), retrying, ready (due), scheduled (delayed).
    let client = common::client("dash-browser").await;
    let errors = [
        "partner API down: 503 Service Unavailable",
        "partner API down: 503 Service Unavailable",
        "partner API down: 503 Service Unavailable",
        "invalid address: no MX record for example.invalid",
        "template `welcome_v2` not found",
    ];
    for (i, error) in errors.iter().enumerate() {
        make_dead(&client, "emails", &format!("email-{}", 1001 + i), error).await;
    }
    make_retry(&client, "emails", "email-2001", "timeout after 30s").await;
    make_ready(&client, "emails", "email-30", 4).await;
    make_scheduled(&client, "emails", "email-40", 6).await;
    make_dead(&client, "invoices", "inv-77", "PDF renderer crashed").await;
    make_scheduled(&client, "invoices", "inv-1", 12).await;
    make_ready(&client, "webhooks", "hook-", 3).await;
    // Equal depths: two ready, two dead (the chart must show both lines).
    make_dead(&client, "alerts", "alert-1", "pager service down").await;
    make_dead(&client, "alerts", "alert-2", "pager service down").await;
    make_ready(&client, "alerts", "alert-ready-", 2).await;
    let emails = client.topic("emails").unwrap();
    // Limits on one topic, a pause on another: the overview flags both.
    emails
        .set_rate(Some("100/s".parse().unwrap()))
        .await
        .unwrap();
    emails.set_concurrency(Some(8)).await.unwrap();
    client.topic("invoices").unwrap().pause().await.unwrap();
    // Two periodic schedules.
    let payload = common::payload(serde_json::json!({ "kind": "nightly" }));
    let nightly = dq_core::Schedule::cron("0 30 2 * * *")
        .unwrap()
        .tz("Europe/Berlin")
        .unwrap();
    client
        .schedule_raw("nightly-invoices", "invoices", nightly, payload.clone())
        .await
        .unwrap();
    let every = dq_core::Schedule::every(Duration::from_secs(300)).unwrap();
    client
        .schedule_raw("webhook-retry-sweep", "webhooks", every, payload)
        .await
        .unwrap();
    // A batch: one member succeeded, one dead, one scheduled; its callback not enqueued yet.
    common::make_batch(&client, "order-17", "parcels", "parcel-", "orders.close").await;
    // A live worker serving two of the topics, as a running worker's heartbeat records it.
    let mut worker = dq_core::WorkerInfo::new(vec!["emails".into(), "invoices".into()], 8, 1);
    worker.started_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        - 3_600_000;
    worker.running = 2;
    client
        .store()
        .beat_worker(&worker, Duration::from_secs(600))
        .await
        .unwrap();

    let served = serve(
        client.clone(),
        DashboardOptions::default()
            .refresh(None)
            .sample_every(Duration::from_millis(250)),
    )
    .await;
    let read_only = serve(
        client.clone(),
        DashboardOptions::default().refresh(None).read_only(true),
    )
    .await;
    let driver = start_driver().await;
    let profile = tempfile::tempdir().unwrap();
    let browser = open_browser(&driver, profile.path()).await;
    let outcome = tokio::spawn({
        let (browser, client) = (browser.clone(), client.clone());
        let urls = [served.url.clone(), read_only.url.clone()];
        let worker_id = worker.id.clone();
        async move { run(&browser, &urls, &client, &emails, &worker_id).await }
    })
    .await;
    if outcome.is_err() {
        // What the browser showed when it failed, for whoever reads the failure.
        let _ = screenshot(&browser, "failure").await;
        if let Ok(html) = browser.source().await {
            let _ = std::fs::write(screenshots_dir().join("failure.html"), html);
        }
    }
    // Close the session (and its chromium) whatever happened, then report.
    let _ = browser.close().await;
    drop(driver);
    let shots = match outcome {
        Ok(shots) => shots,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    };
    if std::env::var("DQ_UPDATE_SCREENSHOTS").as_deref() == Ok("1") {
        let docs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/img");
        std::fs::create_dir_all(&docs).unwrap();
        std::fs::copy(&shots.overview, docs.join("dashboard-overview.png")).unwrap();
        std::fs::copy(&shots.dead, docs.join("dashboard-dead-queue.png")).unwrap();
        std::fs::copy(&shots.topic, docs.join("dashboard-topic.png")).unwrap();
        std::fs::copy(&shots.schedules, docs.join("dashboard-schedules.png")).unwrap();
    }
}

struct Shots {
    overview: PathBuf,
    dead: PathBuf,
    topic: PathBuf,
    schedules: PathBuf,
}

async fn run(
    browser: &Browser,
    [base, read_only]: &[String; 2],
    client: &dq_core::Client,
    emails: &dq_core::TopicClient,
    worker_id: &str,
) -> Shots {
    let base = base.as_str();
    // The overview shows what stats says.
    browser.goto(base).await.unwrap();
    let stats = emails.stats().await.unwrap();
    assert_eq!(
        (stats.dead, stats.retry, stats.ready, stats.scheduled),
        (5, 1, 4, 6)
    );
    for (stat, want) in [
        ("scheduled", stats.scheduled),
        ("ready", stats.ready),
        ("active", stats.active),
        ("retry", stats.retry),
        ("dead", stats.dead),
    ] {
        let css = format!("tr[data-topic=\"emails\"] td[data-stat=\"{stat}\"]");
        assert_eq!(text_of(browser, &css).await, want.to_string(), "{stat}");
    }
    // The live worker is listed with what it serves.
    let row = format!("tr[data-worker=\"{worker_id}\"]");
    let listed = text_of(browser, &row).await;
    assert!(listed.contains("emails, invoices"), "{listed}");
    let invoices = client.topic("invoices").unwrap().stats().await.unwrap();
    assert_eq!(
        text_of(
            browser,
            "tr[data-topic=\"invoices\"] td[data-stat=\"scheduled\"]"
        )
        .await,
        invoices.scheduled.to_string()
    );
    // Some traffic on another topic while the sampler samples, until the throughput chart
    // has a line of a dozen points.
    let traffic = tokio::spawn(traffic(client.clone(), "webhooks"));
    eventually(
        "the throughput chart has a line of 12 points",
        WAIT,
        || async {
            if browser.refresh().await.is_err() {
                return false;
            }
            let Ok(line) = browser.find(Locator::Css("figure.chart polyline")).await else {
                return false;
            };
            let points = line.attr("points").await.ok().flatten().unwrap_or_default();
            points.split(' ').count() >= 12
        },
    )
    .await;
    traffic.abort();
    // Pause and limits are flagged on the overview.
    let flags = text_of(
        browser,
        "tr[data-topic=\"emails\"] td[data-stat=\"leasing\"]",
    )
    .await;
    assert!(
        flags.contains("rate 100/s") && flags.contains("concurrency 8"),
        "{flags}"
    );
    let flags = text_of(
        browser,
        "tr[data-topic=\"invoices\"] td[data-stat=\"leasing\"]",
    )
    .await;
    assert!(flags.contains("paused"), "{flags}");
    let overview = screenshot(browser, "overview").await;

    // Equal depths stay visible: ready = 2 and dead = 2 are two lines apart, each marked,
    // and the legend gives both values.
    browser
        .goto(&format!("{base}/topics/alerts"))
        .await
        .unwrap();
    let depth = "figure.chart[data-chart=\"depth\"]";
    // Both lines read from one page load (a reload moves every point left).
    let (ready, dead) = eventually_some("a ready and a dead line", WAIT, || async move {
        browser.refresh().await.ok()?;
        let mut lines = Vec::new();
        for series in ["ready", "dead"] {
            let css = format!("{depth} polyline[data-series=\"{series}\"]");
            let line = browser.find(Locator::Css(&css)).await.ok()?;
            lines.push(line.attr("points").await.ok().flatten()?);
        }
        let dead = lines.pop()?;
        Some((lines.pop()?, dead))
    })
    .await;
    assert_ne!(ready, dead, "the ready line lies on the dead line");
    for series in ["ready", "dead"] {
        let marker = format!("{depth} circle.marker[data-series=\"{series}\"]");
        assert!(
            browser.find(Locator::Css(&marker)).await.is_ok(),
            "{series} marker"
        );
        let legend = text_of(
            browser,
            &format!("{depth} .legend span[data-series=\"{series}\"]"),
        )
        .await;
        assert_eq!(legend, format!("{series} 2"));
    }
    let topic_shot = screenshot(browser, "topic-equal-depths").await;

    // A page that does not exist keeps the header and links back to the overview.
    browser.goto(&format!("{base}/topics/ghost")).await.unwrap();
    assert!(text_of(browser, "h1").await.starts_with("404"));
    assert_eq!(text_of(browser, "header a.brand").await, "dq");
    browser
        .find(Locator::Css("#back"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    text_of(browser, "#topics").await;

    // The schedules page, from the header.
    browser
        .find(Locator::Css("#schedules-link"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let nightly = text_of(browser, "tr[data-schedule=\"nightly-invoices\"]").await;
    assert!(
        nightly.contains("invoices") && nightly.contains("cron 0 30 2 * * *"),
        "{nightly}"
    );
    let sweep = text_of(
        browser,
        "tr[data-schedule=\"webhook-retry-sweep\"] td[data-field=\"ticks\"]",
    )
    .await;
    assert_eq!(sweep, "every 5m");
    let schedules = screenshot(browser, "schedules").await;

    // The batches page, from the header: a batch not done, then its page — counts by state,
    // its callback not enqueued yet, its dead member — and that member's job page, which
    // links back to the batch.
    browser
        .find(Locator::Css("#batches-link"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let row = text_of(browser, "tr[data-batch=\"order-17\"]").await;
    assert!(row.contains("open"), "{row}");
    screenshot(browser, "batches").await;
    browser
        .find(Locator::Css("tr[data-batch=\"order-17\"] a"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert_eq!(
        text_of(
            browser,
            "#counts tr[data-state=\"dead\"] td[data-field=\"count\"]"
        )
        .await,
        "1"
    );
    assert_eq!(
        text_of(
            browser,
            "#counts tr[data-state=\"succeeded\"] td[data-field=\"count\"]"
        )
        .await,
        "1"
    );
    let then = text_of(browser, "td[data-field=\"then\"]").await;
    assert!(then.contains("not enqueued yet"), "{then}");
    screenshot(browser, "batch").await;
    browser
        .find(Locator::Css("nav.tabs a[href$=\"?state=dead\"]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert_eq!(text_of(browser, "#members").await.lines().count(), 2);
    browser
        .find(Locator::Css(
            "tr[data-member=\"parcels#parcel-2\"] td:nth-child(2) a",
        ))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert_eq!(text_of(browser, "td[data-field=\"state\"]").await, "dead");
    assert_eq!(
        text_of(browser, "td[data-field=\"batch\"]").await,
        "order-17"
    );
    browser
        .find(Locator::Css("td[data-field=\"batch\"] a"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert_eq!(text_of(browser, "h1").await, "Batch order-17");

    // A read-only dashboard's dead queue: the jobs, and nothing to post.
    browser
        .goto(&format!("{read_only}/topics/emails/dead"))
        .await
        .unwrap();
    text_of(browser, "tr[data-key=\"email-1001\"]").await;
    for css in [
        "form[method=\"post\"]",
        "input[name=\"csrf\"]",
        "#dead-jobs button",
        "#errors button",
    ] {
        let found = browser.find_all(Locator::Css(css)).await.unwrap();
        assert!(found.is_empty(), "read-only page has {css}");
    }
    screenshot(browser, "dead-queue-read-only").await;

    // The topic page lists the scheduled jobs.
    browser.goto(base).await.unwrap();
    browser
        .find(Locator::Css("tr[data-topic=\"emails\"] a"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let first = text_of(browser, "#listing tbody tr td code").await;
    assert_eq!(first, "email-400");
    screenshot(browser, "topic").await;
    browser
        .goto(&format!("{base}/topics/emails?state=retry"))
        .await
        .unwrap();
    assert_eq!(
        text_of(browser, "#listing td.err").await,
        "timeout after 30s"
    );
    screenshot(browser, "topic-retry").await;

    // The dead queue: errors grouped, then requeue one job by clicking.
    browser
        .goto(&format!("{base}/topics/emails/dead"))
        .await
        .unwrap();
    let top_group = text_of(browser, "#errors tbody tr").await;
    assert!(top_group.starts_with("3 partner API down"), "{top_group}");
    let dead = screenshot(browser, "dead-queue").await;
    browser
        .find(Locator::Css("tr[data-key=\"email-1004\"] button.requeue"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert_eq!(text_of(browser, "#notice").await, "Requeued 1 job.");
    eventually("email-1004 leaves the dead queue page", WAIT, || async {
        browser
            .find_all(Locator::Css("tr[data-key=\"email-1004\"]"))
            .await
            .is_ok_and(|rows| rows.is_empty())
    })
    .await;
    assert_eq!(text_of(browser, "#dead-count").await, "4 dead");
    let job = emails.job("email-1004").await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Ready);
    assert_eq!(emails.stats().await.unwrap().dead, 4);
    screenshot(browser, "dead-queue-after-requeue").await;

    // The job page: attempts and payload.
    browser
        .goto(&format!("{base}/topics/emails/jobs/email-1001"))
        .await
        .unwrap();
    assert_eq!(text_of(browser, "td[data-field=\"state\"]").await, "dead");
    assert!(
        text_of(browser, "pre.payload")
            .await
            .contains("\"email-1001\"")
    );
    screenshot(browser, "job").await;
    Shots {
        overview,
        dead,
        topic: topic_shot,
        schedules,
    }
}

/// Jobs flowing through `topic` (for the charts): every 100 ms, three enqueued and the ready
/// ones fetched, most acknowledged and one in four failed into `retry`. Runs until aborted.
async fn traffic(client: dq_core::Client, topic: &'static str) {
    let tc = client.topic(topic).unwrap();
    let queue = dq_core::Queue::new(dq_core::Topic::new(topic).unwrap(), 0);
    let mut pace = tokio::time::interval(Duration::from_millis(100));
    for round in 0u64.. {
        pace.tick().await;
        for i in 0..3 {
            let _ = tc
                .enqueue(common::payload(serde_json::json!({ "round": round })))
                .key(format!("t-{round}-{i}"))
                .await;
        }
        let request = dq_core::FetchRequest {
            max_jobs: 2 + (round % 3) as usize,
            ..common::fetch_one()
        };
        let Ok(reply) = client.store().fetch(&queue, &request).await else {
            continue;
        };
        for (n, d) in reply.jobs.iter().enumerate() {
            if (round + n as u64).is_multiple_of(4) {
                let action = FailAction::Retry(Duration::from_secs(3600));
                let limits = dq_core::DeadLimits::default();
                let failure = dq_core::FailedAttempt {
                    key: d.key.clone(),
                    token: d.token,
                    action,
                    error: "HTTP 502 from receiver".into(),
                };
                let _ = client.store().fail_many(&queue, &[failure], limits).await;
            } else {
                let _ = client
                    .store()
                    .ack(
                        &queue,
                        "",
                        &dq_core::Success::of(&[(d.key.clone(), d.token)]),
                    )
                    .await;
            }
        }
    }
}

/// Enqueues `key` due now, leases it and fails it into `retry` in an hour with `error`.
async fn make_retry(client: &dq_core::Client, topic: &str, key: &str, error: &str) {
    let tc = client.topic(topic).unwrap();
    tc.enqueue(common::payload(serde_json::json!({ "key": key })))
        .key(key)
        .await
        .unwrap();
    let queue = dq_core::Queue::new(dq_core::Topic::new(topic).unwrap(), 0);
    let reply = client
        .store()
        .fetch(&queue, &common::fetch_one())
        .await
        .unwrap();
    let d = &reply.jobs[0];
    let failure = dq_core::FailedAttempt {
        key: d.key.clone(),
        token: d.token,
        action: FailAction::Retry(Duration::from_secs(3600)),
        error: error.to_owned(),
    };
    let out = client
        .store()
        .fail_many(&queue, &[failure], dq_core::DeadLimits::default())
        .await
        .unwrap();
    out[0].as_ref().unwrap();
}
