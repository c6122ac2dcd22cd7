//! The dashboard over HTTP against a real Redis: the numbers its pages show, each topic's
//! pause, throttle and limits, the schedules, errors in the page frame, requeue and purge
//! (one, a selection, every job matching a filter, in chunks), and the safety rules —
//! authentication, read-only mode, CSRF token and origin checks.

mod common;

use std::time::Duration;

use common::{cell, csrf_of, make_dead, make_ready, make_scheduled, make_throttled, row, serve};
use dq_core::JobState;
use dq_dashboard::{Auth, DashboardOptions};
use reqwest::StatusCode;
use reqwest::redirect::Policy;

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .build()
        .unwrap()
}

async fn get(url: &str) -> (StatusCode, String) {
    let r = http().get(url).send().await.unwrap();
    (r.status(), r.text().await.unwrap())
}

async fn post(url: &str, form: &[(&str, &str)]) -> reqwest::Response {
    http().post(url).form(form).send().await.unwrap()
}

fn opts() -> DashboardOptions {
    DashboardOptions::default().refresh(None)
}

/// A payload stored by a typed producer shows its field names on the job page; one stored
/// positionally by an earlier dq (the struct as an array) still shows, as an array.
#[tokio::test]
async fn a_job_page_shows_a_named_payload_by_field_and_a_positional_one_as_an_array() {
    #[derive(serde::Serialize)]
    struct CloseOrder {
        order_id: u64,
        user_id: u64,
    }
    let client = common::client("dash-payloads").await;
    let order = CloseOrder {
        order_id: 7,
        user_id: 42,
    };
    let tc = client.topic("orders").unwrap();
    for (key, bytes) in [
        ("named", dq_core::payload::encode(&order, 1 << 20).unwrap()),
        ("positional", rmp_serde::to_vec(&order).unwrap()),
    ] {
        tc.enqueue(bytes).key(key).await.unwrap();
    }
    let served = serve(client.clone(), opts()).await;
    let (status, page) = get(&format!("{}/topics/orders/jobs/named", served.url)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains("&quot;order_id&quot;: 7") && page.contains("&quot;user_id&quot;: 42"),
        "{page}"
    );
    let (status, page) = get(&format!("{}/topics/orders/jobs/positional", served.url)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("[\n  7,\n  42\n]"), "{page}");
}

#[tokio::test]
async fn pages_show_the_numbers_of_stats() {
    let client = common::client("dash-pages").await;
    // Dead first: make_dead leases the only ready job.
    make_dead(&client, "mail", "d1", "partner API down: 503").await;
    make_dead(&client, "mail", "d2", "partner API down: 503").await;
    make_dead(&client, "mail", "d3", "bad address").await;
    make_scheduled(&client, "mail", "later-", 3).await;
    make_ready(&client, "mail", "now-", 2).await;
    make_scheduled(&client, "sms", "s-", 1).await;
    let stats = client.topic("mail").unwrap().stats().await.unwrap();
    assert_eq!((stats.scheduled, stats.ready, stats.dead), (3, 2, 3));
    let worker = dq_core::WorkerInfo::new(vec!["mail".to_owned()], 8, 1);
    client
        .store()
        .beat_worker(&worker, Duration::from_secs(600))
        .await
        .unwrap();
    let served = serve(client.clone(), opts()).await;

    let (status, page) = get(&served.url).await;
    assert_eq!(status, StatusCode::OK);
    for (stat, want) in [
        ("scheduled", stats.scheduled),
        ("ready", stats.ready),
        ("active", stats.active),
        ("retry", stats.retry),
        ("dead", stats.dead),
        ("overdue", stats.overdue),
    ] {
        assert_eq!(cell(&page, "mail", stat), Some(want.to_string()), "{stat}");
    }
    assert_eq!(cell(&page, "sms", "scheduled").as_deref(), Some("1"));
    assert_eq!(
        cell(&page, "", "scheduled").as_deref(),
        Some("4"),
        "total row"
    );
    assert!(
        page.contains("id=\"workers\""),
        "the live-workers slot is there"
    );
    assert!(
        page.contains(&format!("data-worker=\"{}\"", worker.id)),
        "the live worker is listed"
    );

    // Topic page: the scheduled jobs, by key; the search finds a job or says it is missing.
    let (status, page) = get(&format!("{}/topics/mail", served.url)).await;
    assert_eq!(status, StatusCode::OK);
    for i in 0..3 {
        assert!(page.contains(&format!(">later-{i}<")), "later-{i} listed");
    }
    assert!(!page.contains(">now-0<"), "ready jobs are on their own tab");
    let (_, page) = get(&format!("{}/topics/mail?state=ready", served.url)).await;
    assert!(page.contains(">now-0<") && page.contains(">now-1<"));
    let r = http()
        .get(format!("{}/topics/mail?key=later-1", served.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/topics/mail/jobs/later%2D1");
    let (_, page) = get(&format!("{}/topics/mail?key=nope", served.url)).await;
    assert!(page.contains("No job with key"));

    // Dead queue: errors grouped by message with their counts.
    let (status, page) = get(&format!("{}/topics/mail/dead", served.url)).await;
    assert_eq!(status, StatusCode::OK);
    let errors = &page[page.find("id=\"errors\"").unwrap()..];
    let group = &errors[..errors.find("partner API down: 503").unwrap()];
    assert!(
        group.contains("<td class=\"n\">2</td>"),
        "2 jobs died of the partner error"
    );
    assert!(page.contains("data-key=\"d3\""));

    // Job page: attempt history and payload decoded to JSON.
    let (status, page) = get(&format!("{}/topics/mail/jobs/d1", served.url)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("partner API down: 503"));
    assert!(
        page.contains("&quot;key&quot;: &quot;d1&quot;"),
        "payload as JSON: {page}"
    );
    assert!(page.contains("data-field=\"state\""));

    // Unknown topics and jobs are 404, and looking does not register the topic.
    assert_eq!(
        get(&format!("{}/topics/ghost", served.url)).await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(&format!("{}/topics/mail/jobs/ghost", served.url))
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    let topics = client.topics().await.unwrap();
    assert!(topics.iter().all(|m| m.topic.as_ref() != "ghost"));
}

#[tokio::test]
async fn throttles_are_shown_on_the_overview_and_the_topic_page() {
    let client = common::client("dash-throttles").await;
    make_throttled(&client, "api", "t1").await;
    make_scheduled(&client, "mail", "later-", 1).await;
    let stats = client.topic("api").unwrap().stats().await.unwrap();
    assert_eq!(stats.throttles, 1, "{stats:?}");
    let served = serve(client.clone(), opts()).await;

    let (status, page) = get(&served.url).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(cell(&page, "api", "throttles").as_deref(), Some("1"));
    assert_eq!(cell(&page, "mail", "throttles").as_deref(), Some("0"));
    assert_eq!(
        cell(&page, "", "throttles").as_deref(),
        Some("1"),
        "total row"
    );

    let (status, page) = get(&format!("{}/topics/api", served.url)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains("<span data-stat=\"throttles\">1</span>"),
        "{page}"
    );
}

#[tokio::test]
async fn topics_are_read_with_their_recorded_partition_count() {
    // A producer records 4 partitions; the dashboard's client is configured with the default 1.
    let ns = dq_testkit::namespace("dash-parts");
    let url = dq_testkit::shared().url();
    let wide = dq_core::Client::builder()
        .namespace(ns.clone())
        .partitions("wide", 4)
        .connect(&url)
        .await
        .unwrap();
    make_scheduled(&wide, "wide", "w-", 8).await;
    let plain = dq_core::Client::builder()
        .namespace(ns)
        .connect(&url)
        .await
        .unwrap();
    let served = serve(plain, opts()).await;
    let (status, page) = get(&served.url).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(cell(&page, "wide", "scheduled").as_deref(), Some("8"));
    let (_, page) = get(&format!("{}/topics/wide", served.url)).await;
    assert_eq!(page.matches(">w-").count(), 8);
}

#[tokio::test]
async fn requeue_and_purge_one_a_selection_and_all_matching() {
    let client = common::client("dash-actions").await;
    for i in 0..4 {
        make_dead(&client, "pay", &format!("p{i}"), "partner API down").await;
    }
    for i in 0..3 {
        make_dead(&client, "pay", &format!("b{i}"), "bad card").await;
    }
    let tc = client.topic("pay").unwrap();
    let served = serve(client.clone(), opts()).await;
    let dead_url = format!("{}/topics/pay/dead", served.url);
    let (_, page) = get(&dead_url).await;
    let token = csrf_of(&page).expect("a CSRF token on the page");

    // One.
    let r = post(&dead_url, &[("csrf", &token), ("requeue", "p0")]).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        r.headers()["location"],
        "/topics/pay/dead?done=requeued&n=1"
    );
    assert_eq!(tc.job("p0").await.unwrap().unwrap().state, JobState::Ready);
    let r = post(&dead_url, &[("csrf", &token), ("purge", "b0")]).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(tc.job("b0").await.unwrap().is_none());

    // A selection.
    let r = post(
        &dead_url,
        &[
            ("csrf", &token),
            ("do", "purge-selected"),
            ("key", "b1"),
            ("key", "p1"),
        ],
    )
    .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/topics/pay/dead?done=purged&n=2");
    assert!(tc.job("b1").await.unwrap().is_none() && tc.job("p1").await.unwrap().is_none());

    // All matching a filter: first a page that asks, changing nothing…
    let r = post(
        &dead_url,
        &[
            ("csrf", &token),
            ("do", "requeue-matching"),
            ("error", "partner"),
        ],
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK);
    let confirm = r.text().await.unwrap();
    assert!(
        confirm.contains("name=\"confirm\" value=\"yes\""),
        "{confirm}"
    );
    assert!(confirm.contains("<code>partner</code>"));
    assert_eq!(tc.stats().await.unwrap().dead, 3);
    // … then, confirmed, p2 and p3 only.
    let r = post(
        &dead_url,
        &[
            ("csrf", &token),
            ("do", "requeue-matching"),
            ("error", "partner"),
            ("confirm", "yes"),
        ],
    )
    .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        r.headers()["location"],
        "/topics/pay/dead?error=partner&done=requeued&n=2"
    );
    for key in ["p2", "p3"] {
        assert_eq!(tc.job(key).await.unwrap().unwrap().state, JobState::Ready);
    }
    assert_eq!(tc.job("b2").await.unwrap().unwrap().state, JobState::Dead);
    let (_, page) = get(&format!("{dead_url}?done=requeued&n=2")).await;
    assert!(page.contains("Requeued 2 jobs."));
    assert_eq!(tc.stats().await.unwrap().dead, 1);

    // From a job's page: back to it after a requeue, to the dead queue after a purge.
    make_dead(&client, "pay", "z", "partner API down").await;
    let r = post(
        &dead_url,
        &[("csrf", &token), ("requeue", "z"), ("back", "z")],
    )
    .await;
    assert_eq!(r.headers()["location"], "/topics/pay/jobs/z");
    let r = post(
        &dead_url,
        &[("csrf", &token), ("purge", "b2"), ("back", "b2")],
    )
    .await;
    assert_eq!(r.headers()["location"], "/topics/pay/dead?done=purged&n=1");
    assert_eq!(tc.stats().await.unwrap().dead, 0);
}

#[tokio::test]
async fn matching_requeue_walks_the_dead_queue_in_chunks() {
    // More dead jobs than two chunks of the library's sweep, two errors interleaved: exactly
    // the matches move.
    let client = common::client("dash-chunks").await;
    let n = 2 * dq_core::MAX_SWEEP_CHUNK + 50;
    for i in 0..n {
        let error = if i % 2 == 0 {
            "timeout talking to bank"
        } else {
            "invalid iban"
        };
        make_dead(&client, "bank", &format!("k{i}"), error).await;
    }
    let tc = client.topic("bank").unwrap();
    let served = serve(client.clone(), opts()).await;
    let dead_url = format!("{}/topics/bank/dead", served.url);
    let token = csrf_of(&get(&dead_url).await.1).unwrap();
    let r = post(
        &dead_url,
        &[
            ("csrf", &token),
            ("do", "requeue-matching"),
            ("error", "timeout"),
            ("confirm", "yes"),
        ],
    )
    .await;
    let moved = n.div_ceil(2);
    assert_eq!(
        r.headers()["location"],
        format!("/topics/bank/dead?error=timeout&done=requeued&n={moved}").as_str()
    );
    let stats = tc.stats().await.unwrap();
    assert_eq!(
        (stats.ready, stats.dead),
        (n.div_ceil(2) as u64, (n / 2) as u64)
    );
    let r = post(
        &dead_url,
        &[
            ("csrf", &token),
            ("do", "purge-matching"),
            ("error", ""),
            ("confirm", "yes"),
        ],
    )
    .await;
    assert_eq!(
        r.headers()["location"],
        format!("/topics/bank/dead?done=purged&n={}", n / 2).as_str()
    );
    assert_eq!(tc.stats().await.unwrap().dead, 0);
}

#[tokio::test]
async fn read_only_renders_no_buttons_and_refuses_every_post() {
    let client = common::client("dash-ro").await;
    make_dead(&client, "ro", "x", "boom").await;
    let served = serve(client.clone(), opts().read_only(true)).await;
    let dead_url = format!("{}/topics/ro/dead", served.url);
    let (status, page) = get(&dead_url).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("data-key=\"x\""));
    assert!(!page.contains("<button name=\"do\"") && !page.contains("name=\"requeue\""));
    assert!(page.contains("read-only"));
    // Nothing to post: no POST form, no CSRF token, no selection, no action button.
    assert!(!page.contains("method=\"post\""), "a POST form: {page}");
    assert!(!page.contains("name=\"csrf\""), "a CSRF token: {page}");
    assert!(
        !page.contains("type=\"checkbox\""),
        "selection boxes: {page}"
    );
    for action in ["Requeue", "Purge"] {
        assert!(!page.contains(action), "a {action} button: {page}");
    }
    let (_, job) = get(&format!("{}/topics/ro/jobs/x", served.url)).await;
    assert!(!job.contains("name=\"requeue\""));

    // A POST is refused whatever it carries; the job stays dead.
    // (No page of a read-only dashboard holds the CSRF token: the refusal must say why.)
    let r = post(&dead_url, &[("csrf", "anything"), ("requeue", "x")]).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.text().await.unwrap().contains("read-only"));
    let r = post(&format!("{}/", served.url), &[("requeue", "x")]).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN, "any POST, on any path");
    let tc = client.topic("ro").unwrap();
    assert_eq!(tc.job("x").await.unwrap().unwrap().state, JobState::Dead);
}

#[tokio::test]
async fn authentication_is_required_when_configured() {
    let client = common::client("dash-auth").await;
    make_dead(&client, "au", "x", "boom").await;

    let served = serve(
        client.clone(),
        opts().auth(Auth::Bearer("s3cret-t0ken".into())),
    )
    .await;
    let r = http().get(&served.url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(
        r.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Basic")
    );
    let r = http()
        .get(&served.url)
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = http()
        .get(&served.url)
        .bearer_auth("s3cret-t0ken")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // A browser logs in with basic auth, the token as password.
    let r = http()
        .get(&served.url)
        .basic_auth("anyone", Some("s3cret-t0ken"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // POSTs need it too, before anything else is looked at.
    let r = http()
        .post(format!("{}/topics/au/dead", served.url))
        .form(&[("requeue", "x")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    drop(served);

    let served = serve(
        client.clone(),
        opts().auth(Auth::Basic {
            username: "ops".into(),
            password: "pa55".into(),
        }),
    )
    .await;
    for (user, pass, want) in [
        ("ops", "pa55", StatusCode::OK),
        ("ops", "nope", StatusCode::UNAUTHORIZED),
        ("root", "pa55", StatusCode::UNAUTHORIZED),
    ] {
        let r = http()
            .get(&served.url)
            .basic_auth(user, Some(pass))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), want, "{user}:{pass}");
    }
    // The secret is never printed.
    let shown = format!("{:?}", opts().auth(Auth::Bearer("s3cret-t0ken".into())));
    assert!(!shown.contains("s3cret"), "{shown}");
}

#[tokio::test]
async fn csrf_token_and_origin_are_checked_on_every_post() {
    let client = common::client("dash-csrf").await;
    make_dead(&client, "cs", "x", "boom").await;
    let tc = client.topic("cs").unwrap();
    let served = serve(client.clone(), opts()).await;
    let dead_url = format!("{}/topics/cs/dead", served.url);
    let (_, page) = get(&dead_url).await;
    let token = csrf_of(&page).unwrap();
    let host = served.url.trim_start_matches("http://").to_owned();

    // No token, a wrong token.
    for form in [
        vec![("requeue", "x")],
        vec![("csrf", "0000"), ("requeue", "x")],
    ] {
        let r = post(&dead_url, &form).await;
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
    }
    // The right token from another site.
    let r = http()
        .post(&dead_url)
        .header("Origin", "http://evil.example")
        .form(&[("csrf", token.as_str()), ("requeue", "x")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = http()
        .post(&dead_url)
        .header("Sec-Fetch-Site", "cross-site")
        .form(&[("csrf", token.as_str()), ("requeue", "x")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(tc.job("x").await.unwrap().unwrap().state, JobState::Dead);

    // The right token from the dashboard's own page.
    let r = http()
        .post(&dead_url)
        .header("Origin", format!("http://{host}"))
        .header("Sec-Fetch-Site", "same-origin")
        .form(&[("csrf", token.as_str()), ("requeue", "x")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(tc.job("x").await.unwrap().unwrap().state, JobState::Ready);
}

#[tokio::test]
async fn mounts_under_a_path_in_another_app() {
    let client = common::client("dash-nest").await;
    make_dead(&client, "ne", "x", "boom").await;
    let app = axum::Router::new()
        .route("/health", axum::routing::get(|| async { "ok" }))
        .nest(
            "/ops/dq",
            dq_dashboard::router(client, opts().base_path("/ops/dq/")),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    assert_eq!(get(&format!("{url}/health")).await.1, "ok");
    let (status, page) = get(&format!("{url}/ops/dq")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains("href=\"/ops/dq/topics/ne\""),
        "links carry the mount path"
    );
    let (status, page) = get(&format!("{url}/ops/dq/topics/ne/dead")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("action=\"/ops/dq/topics/ne/dead\""));
    assert!(page.contains("href=\"/ops/dq/schedules\""));
    // An unknown page under the mount: 404 in the frame, its link back carrying the path.
    let (status, page) = get(&format!("{url}/ops/dq/nothing/here")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(page.contains("id=\"back\" href=\"/ops/dq\""), "{page}");
    server.abort();
    let _ = Duration::ZERO;
}

#[tokio::test]
async fn the_topic_page_pages_through_scheduled_jobs_by_due_time() {
    let client = common::client("dash-paging").await;
    let tc = client.topic("many").unwrap();
    // Due times in reverse key order, so due-time order is not key order.
    for i in 0..120u64 {
        tc.enqueue(common::payload(serde_json::json!(i)))
            .key(format!("k{i:03}"))
            .delay(Duration::from_secs(3600 + 10 * (120 - i)))
            .await
            .unwrap();
    }
    let served = serve(client, opts()).await;
    let mut url = format!("{}/topics/many", served.url);
    let mut seen = Vec::new();
    for _ in 0..10 {
        let (status, page) = get(&url).await;
        assert_eq!(status, StatusCode::OK);
        let listing = &page[page.find("id=\"listing\"").unwrap()..];
        let listing = &listing[..listing.find("</table>").unwrap()];
        let keys: Vec<String> = listing
            .split("<code>")
            .skip(1)
            .map(|s| s[..s.find('<').unwrap()].to_owned())
            .collect();
        assert!(keys.len() <= 50);
        seen.extend(keys);
        let Some(at) = page.find("href=\"/topics/many?state=scheduled&amp;after=") else {
            break;
        };
        let href = &page[at + 6..];
        let href = href[..href.find('"').unwrap()].replace("&amp;", "&");
        url = format!("{}{href}", served.url);
    }
    let want: Vec<String> = (0..120u64).rev().map(|i| format!("k{i:03}")).collect();
    assert_eq!(seen, want, "every job once, soonest due first");
}

#[tokio::test]
async fn the_overview_shows_paused_throttled_and_limited_topics() {
    let client = common::client("dash-leasing").await;
    make_scheduled(&client, "held", "h-", 1).await;
    make_scheduled(&client, "capped", "c-", 1).await;
    make_scheduled(&client, "plain", "p-", 1).await;
    make_throttled(&client, "api", "t1").await;
    client.topic("held").unwrap().pause().await.unwrap();
    let capped = client.topic("capped").unwrap();
    capped
        .set_rate(Some("100/s".parse().unwrap()))
        .await
        .unwrap();
    capped.set_concurrency(Some(8)).await.unwrap();
    let served = serve(client.clone(), opts()).await;

    let (status, page) = get(&served.url).await;
    assert_eq!(status, StatusCode::OK);
    let held = row(&page, "held").unwrap();
    assert!(held.contains("data-flag=\"paused\""), "{held}");
    let capped = row(&page, "capped").unwrap();
    assert!(capped.contains(">rate 100/s<"), "{capped}");
    assert!(capped.contains(">concurrency 8<"), "{capped}");
    assert!(!capped.contains("data-flag=\"paused\""), "{capped}");
    // The handler asked for a minute: the row says until when.
    let api = row(&page, "api").unwrap();
    assert!(api.contains("data-flag=\"throttled\""), "{api}");
    assert!(api.contains("throttled until <time"), "{api}");
    let plain = row(&page, "plain").unwrap();
    assert!(!plain.contains("data-flag="), "{plain}");
    assert!(plain.contains(">running<"), "{plain}");
}

#[tokio::test]
async fn errors_and_unknown_pages_keep_the_header_and_a_way_back() {
    let client = common::client("dash-404").await;
    make_scheduled(&client, "mail", "m-", 1).await;
    let served = serve(client.clone(), opts().read_only(true)).await;
    for path in ["/topics/ghost", "/topics/mail/jobs/ghost", "/no/such/page"] {
        let (status, page) = get(&format!("{}{path}", served.url)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert!(page.contains("<header>"), "{path}: no header: {page}");
        assert!(page.contains("class=\"brand\" href=\"/\""), "{path}");
        assert!(page.contains("id=\"back\" href=\"/\""), "{path}");
        assert!(page.contains("read-only"), "{path}: the frame's badge");
    }
    let (status, page) = get(&format!("{}/topics/mail?state=nope", served.url)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(page.contains("<header>") && page.contains("no listing of state"));
}

#[tokio::test]
async fn the_schedules_page_lists_every_schedule() {
    let client = common::client("dash-schedules").await;
    let served = serve(client.clone(), opts()).await;
    let (status, page) = get(&format!("{}/schedules", served.url)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("No schedule in the store"), "{page}");
    let (_, overview) = get(&served.url).await;
    assert!(
        overview.contains("href=\"/schedules\""),
        "linked from the header"
    );

    let nightly = dq_core::Schedule::cron("0 30 2 * * *")
        .unwrap()
        .tz("Europe/Berlin")
        .unwrap();
    let payload = common::payload(serde_json::json!({ "kind": "nightly" }));
    client
        .schedule_raw("nightly-report", "reports", nightly, payload.clone())
        .await
        .unwrap();
    let every = dq_core::Schedule::every(Duration::from_secs(300)).unwrap();
    client
        .schedule_raw("poll", "sensors", every, payload)
        .await
        .unwrap();
    let (status, page) = get(&format!("{}/schedules", served.url)).await;
    assert_eq!(status, StatusCode::OK);
    let nightly = row_of(&page, "data-schedule=\"nightly-report\"");
    assert!(nightly.contains("<code>0 30 2 * * *</code>"), "{nightly}");
    assert!(nightly.contains("Europe/Berlin"), "{nightly}");
    assert!(nightly.contains("href=\"/topics/reports\""), "{nightly}");
    assert!(nightly.contains("data-field=\"next\"><time"), "{nightly}");
    assert!(nightly.contains("data-field=\"last\"><time"), "{nightly}");
    let poll = row_of(&page, "data-schedule=\"poll\"");
    assert!(poll.contains("every 5m"), "{poll}");
    assert!(poll.contains("sensors"), "{poll}");
}

/// The row of a table that carries `attr`.
fn row_of<'a>(html: &'a str, attr: &str) -> &'a str {
    let at = html
        .find(attr)
        .unwrap_or_else(|| panic!("no row {attr}: {html}"));
    let row = &html[at..];
    &row[..row.find("</tr>").unwrap()]
}

/// A topic that keeps its finished jobs shows tabs of them (succeeded with run time and
/// worker); a kept job's page shows its outcome, times, worker and result; a key search finds
/// it.
#[tokio::test]
async fn kept_jobs_have_tabs_and_a_page_with_their_result() {
    let client = common::client("dash-kept").await;
    let tc = client.topic("thumbs").unwrap();
    tc.set_retention(Some(
        dq_core::Retention::default().succeeded(Duration::from_secs(3600)),
    ))
    .await
    .unwrap();
    make_ready(&client, "thumbs", "img-", 1).await;
    let q = dq_core::Queue::new(dq_core::Topic::new("thumbs").unwrap(), 0);
    let request = dq_core::FetchRequest {
        max_jobs: 1,
        lease: Duration::from_secs(60),
        call: dq_core::FetchCall::new(),
        ..dq_core::FetchRequest::default()
    };
    let reply = client.store().fetch(&q, &request).await.unwrap();
    let d = &reply.jobs[0];
    let mut done = dq_core::Success::new(d.key.clone(), d.token);
    done.started_ms = d.leased_ms;
    done.result = dq_core::StoredResult::Value(
        rmp_serde::to_vec_named(&serde_json::json!({"url": "https://cdn/0.png"})).unwrap(),
    );
    client.store().ack(&q, "worker-7", &[done]).await.unwrap();

    let served = serve(client.clone(), opts()).await;
    let (status, page) = get(&format!("{}/topics/thumbs?state=succeeded", served.url)).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("data-state=\"succeeded\""), "{page}");
    assert!(
        page.contains("img-0") && page.contains("on worker-7"),
        "{page}"
    );
    assert!(page.contains("data-stat=\"kept\">1<"), "{page}");
    let (status, page) = get(&format!("{}/topics/thumbs/jobs/img-0", served.url)).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    for want in [
        "state succeeded",
        "worker-7",
        "&quot;url&quot;: &quot;https://cdn/0.png&quot;",
    ] {
        assert!(page.contains(want), "{want:?} in {page}");
    }
    let r = http()
        .get(format!("{}/topics/thumbs?key=img-0", served.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let (status, _) = get(&format!("{}/topics/thumbs?state=finished", served.url)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

/// A topic that records events has an events tab listing them newest first (kind, job,
/// attempt, worker, error); a job's page shows its own events; a topic without events says
/// how to turn them on and shows no tab.
#[tokio::test]
async fn events_are_shown_on_the_topic_and_job_pages() {
    let client = common::client("dash-events").await;
    let tc = client.topic("mails").unwrap();
    tc.set_events(Some(dq_core::EventsPolicy::default()))
        .await
        .unwrap();
    make_ready(&client, "mails", "mail-", 2).await;
    let q = dq_core::Queue::new(dq_core::Topic::new("mails").unwrap(), 0);
    let request = dq_core::FetchRequest {
        max_jobs: 2,
        lease: Duration::from_secs(60),
        call: dq_core::FetchCall::new(),
        ..dq_core::FetchRequest::default()
    };
    let reply = client.store().fetch(&q, &request).await.unwrap();
    assert_eq!(reply.jobs.len(), 2);
    let (ok, bad) = (&reply.jobs[0], &reply.jobs[1]);
    client
        .store()
        .ack(
            &q,
            "worker-9",
            &[dq_core::Success::new(ok.key.clone(), ok.token)],
        )
        .await
        .unwrap();
    let failure = dq_core::FailedAttempt {
        key: bad.key.clone(),
        token: bad.token,
        action: dq_core::FailAction::Retry(Duration::from_secs(3600)),
        error: "smtp said <no>".into(),
    };
    client
        .store()
        .fail_many(&q, &[failure], dq_core::DeadLimits::default())
        .await
        .unwrap();
    client.topic("quiet").unwrap().stats().await.unwrap(); // records a topic without events

    let served = serve(client.clone(), opts()).await;
    let (status, page) = get(&format!("{}/topics/mails", served.url)).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("id=\"events-link\""), "{page}");
    let (status, page) = get(&format!("{}/topics/mails/events", served.url)).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    for want in [
        "data-event=\"succeeded\"",
        "data-event=\"failed\"",
        "data-event=\"started\"",
        "data-event=\"enqueued\"",
        "worker-9",
        "smtp said &lt;no&gt;",
        &format!("/topics/mails/jobs/{}", ok.key.as_str().replace('-', "%2D")),
    ] {
        assert!(page.contains(want), "{want:?} in {page}");
    }
    // newest first: the failure (last) comes before the enqueues (first)
    assert!(
        page.find("data-event=\"failed\"").unwrap() < page.find("data-event=\"enqueued\"").unwrap(),
        "{page}"
    );
    let (status, page) = get(&format!("{}/topics/mails/jobs/{}", served.url, bad.key)).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("<h2>Events</h2>"), "{page}");
    assert!(
        page.contains("data-event=\"failed\"") && !page.contains("worker-9"),
        "only this job's events: {page}"
    );
    let (status, page) = get(&format!("{}/topics/quiet", served.url)).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(!page.contains("id=\"events-link\""), "{page}");
    let (status, page) = get(&format!("{}/topics/quiet/events", served.url)).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("records no events"), "{page}");
}

/// A job's page shows its priority in words; the ready tab lists the ready jobs in the order
/// workers take them (higher priority first, normal ones in the order they became due) with
/// a priority column that marks jobs above and below normal; a finished tab has no such
/// column.
#[tokio::test]
async fn the_ready_tab_lists_jobs_by_priority_and_a_job_page_shows_it() {
    let client = common::client("dash-priority").await;
    // The client alone in its namespace raises the format to the newest (a priority needs 5).
    let c = client.clone();
    dq_testkit::eventually(
        "the namespace writes the newest format",
        Duration::from_secs(30),
        || {
            let c = c.clone();
            async move { c.store().formats().write() == dq_core::format::NEWEST_FORMAT }
        },
    )
    .await;
    let tc = client.admin().topic_with("urgent", 1).unwrap();
    for (key, level) in [
        ("a-low", 0),
        ("b-plain", 5),
        ("c-high", 9),
        ("d-plain", 5),
        ("e-high", 7),
    ] {
        tc.enqueue(common::payload(serde_json::json!(key)))
            .key(key)
            .priority(dq_core::Priority::new(level).unwrap())
            .await
            .unwrap();
    }
    let served = serve(client, opts()).await;
    let (status, page) = get(&format!("{}/topics/urgent?state=ready", served.url)).await;
    assert_eq!(status, StatusCode::OK);
    let listing = &page[page.find("id=\"listing\"").unwrap()..];
    let listing = &listing[..listing.find("</table>").unwrap()];
    assert!(listing.contains(">Priority</th>"), "{listing}");
    let listed: Vec<(String, String)> = listing
        .split("<code>")
        .skip(1)
        .map(|s| {
            let key = s[..s.find('<').unwrap()].to_owned();
            let at = s.find("data-priority=\"").unwrap() + "data-priority=\"".len();
            (key, s[at..at + s[at..].find('"').unwrap()].to_owned())
        })
        .collect();
    let want = [
        ("c-high", "9"),
        ("e-high", "7"),
        ("b-plain", "5"),
        ("d-plain", "5"),
        ("a-low", "0"),
    ];
    assert_eq!(
        listed,
        want.map(|(k, p)| (k.to_owned(), p.to_owned())),
        "{listing}"
    );
    assert!(
        row_of(listing, "c-high").contains("class=\"n priority high\""),
        "{listing}"
    );
    assert!(
        row_of(listing, "a-low").contains("class=\"n priority low\""),
        "{listing}"
    );

    let (status, page) = get(&format!("{}/topics/urgent/jobs/e-high", served.url)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        row_of(&page, "data-field=\"priority\"").contains("7 (above normal)"),
        "{page}"
    );
    let (_, page) = get(&format!("{}/topics/urgent/jobs/b-plain", served.url)).await;
    assert!(
        row_of(&page, "data-field=\"priority\"").contains("5 (normal)"),
        "{page}"
    );

    let (status, page) = get(&format!("{}/topics/urgent?state=succeeded", served.url)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!page.contains(">Priority</th>"), "{page}");
}

/// A grouped job's page shows its group (a job in no group has no such row); the topic page
/// shows the default group limits and every group's running and waiting jobs once there are
/// any, and says nothing of groups on a topic that has none.
#[tokio::test]
async fn a_job_page_shows_its_group_and_the_topic_page_the_groups() {
    let client = common::client("dash-group").await;
    // The client alone in its namespace raises the format to the newest (a group needs 6).
    let c = client.clone();
    dq_testkit::eventually(
        "the namespace writes the newest format",
        Duration::from_secs(30),
        || {
            let c = c.clone();
            async move { c.store().formats().write() == dq_core::format::NEWEST_FORMAT }
        },
    )
    .await;
    let plain = client.admin().topic_with("plain", 1).unwrap();
    plain
        .enqueue(common::payload(serde_json::json!(1)))
        .key("p")
        .await
        .unwrap();
    let tc = client.admin().topic_with("tenants", 1).unwrap();
    for (key, group) in [
        ("a", Some("tenant-7")),
        ("b", Some("tenant-7")),
        ("c", None),
    ] {
        let mut call = tc.enqueue(common::payload(serde_json::json!(key))).key(key);
        if let Some(g) = group {
            call = call.group(g);
        }
        call.await.unwrap();
    }
    tc.set_group_limits(
        None,
        Some(dq_core::GroupLimits::new().concurrency(4).weight(2)),
    )
    .await
    .unwrap();
    let served = serve(client, opts()).await;

    let (status, page) = get(&format!("{}/topics/tenants/jobs/a", served.url)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        row_of(&page, "data-field=\"group\"").contains("tenant-7"),
        "{page}"
    );
    let (_, page) = get(&format!("{}/topics/tenants/jobs/c", served.url)).await;
    assert!(!page.contains("data-field=\"group\""), "{page}");

    let (status, page) = get(&format!("{}/topics/tenants", served.url)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("data-stat=\"group_waiting\">2<"), "{page}");
    assert!(page.contains("data-stat=\"group_running\">0<"), "{page}");
    assert!(
        page.contains("concurrency 4, rate none, weight 2"),
        "{page}"
    );
    let (_, page) = get(&format!("{}/topics/plain", served.url)).await;
    assert!(!page.contains("id=\"groups\""), "{page}");
}
