//! The routes and their pages: overview, topic, dead queue (and its one POST endpoint), job.
//! Everything is rendered on the server with `maud` (which escapes every value); the pages
//! carry no script.

use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use dq_core::{
    Cursor, DeadAction, JobState, MAX_SWEEP_CHUNK, Page, TopicClient, TopicMeta, TopicStats,
};
use maud::{DOCTYPE, Markup, PreEscaped, html};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde::Deserialize;

use crate::chart;
use crate::dead;
use crate::security;
use crate::state::Shared;

/// Jobs per page of a listing.
const PAGE: usize = 50;

/// The dashboard's routes over `shared`.
pub(crate) fn routes(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", get(overview))
        .route("/topics/{topic}", get(topic_page))
        .route("/topics/{topic}/dead", get(dead_page).post(dead_action))
        .route("/topics/{topic}/jobs/{key}", get(job_page))
        .layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            security::guard,
        ))
        .with_state(shared)
}

/// A page that could not be shown.
struct PageError(StatusCode, String);

impl From<dq_core::Error> for PageError {
    fn from(e: dq_core::Error) -> Self {
        use dq_core::Error as E;
        match e {
            E::InvalidKey { .. } | E::InvalidTopic { .. } | E::InvalidConfig(_) => {
                PageError(StatusCode::BAD_REQUEST, e.to_string())
            }
            e => {
                tracing::warn!(error = %e, "dq dashboard: store call failed");
                PageError(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
            }
        }
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let body = html! {
            (DOCTYPE)
            html { head { meta charset="utf-8"; title { "dq · error" } style { (PreEscaped(CSS)) } }
                body { main { h1 { (self.0.as_u16()) " " (self.0.canonical_reason().unwrap_or("")) } p.error { (self.1) } } } }
        };
        (self.0, body).into_response()
    }
}

type PageResult = Result<Response, PageError>;

fn not_found(what: String) -> PageError {
    PageError(StatusCode::NOT_FOUND, what)
}

/// A registered topic, or 404.
async fn topic_of(shared: &Shared, name: &str) -> Result<(TopicMeta, TopicClient), PageError> {
    shared
        .find_topic(name)
        .await?
        .ok_or_else(|| not_found(format!("no topic {name:?} in the topic registry")))
}

fn enc(s: &str) -> String {
    utf8_percent_encode(s, NON_ALPHANUMERIC).to_string()
}

fn topic_link(shared: &Shared, topic: &str) -> String {
    shared.link(&format!("/topics/{}", enc(topic)))
}

fn dead_link(shared: &Shared, topic: &str) -> String {
    shared.link(&format!("/topics/{}/dead", enc(topic)))
}

fn job_link(shared: &Shared, topic: &str, key: &str) -> String {
    shared.link(&format!("/topics/{}/jobs/{}", enc(topic), enc(key)))
}

/// The frame around every page.
fn layout(shared: &Shared, title: &str, refresh: bool, crumbs: Markup, body: Markup) -> Response {
    let refresh = refresh.then_some(shared.opts.refresh).flatten();
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                @if let Some(every) = refresh {
                    meta http-equiv="refresh" content=(every.as_secs().max(1));
                }
                title { (title) " · dq" }
                style { (PreEscaped(CSS)) }
            }
            body {
                header {
                    a.brand href=(shared.home()) { "dq" }
                    nav.crumbs { (crumbs) }
                    @if shared.opts.read_only { span.badge { "read-only" } }
                }
                main { (body) }
            }
        }
    }
    .into_response()
}

/// A time relative to `now_ms` ("in 4m 10s", "3s ago"), the exact time on hover.
fn when(ms: u64, now_ms: u64) -> Markup {
    let exact = humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(ms));
    let rel = if ms >= now_ms {
        format!("in {}", short(ms - now_ms))
    } else {
        format!("{} ago", short(now_ms - ms))
    };
    html! { time datetime=(exact.to_string()) title=(exact.to_string()) { (rel) } }
}

/// A duration in ms, roughly: "850ms", "12s", "4m 10s", "3h 2m", "2d 4h".
fn short(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0 => format!("{ms}ms"),
        1..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86400, s % 86400 / 3600),
    }
}

fn rate(r: Option<f64>) -> String {
    r.map_or_else(|| "–".to_owned(), |r| format!("{r:.1}"))
}

/// The live-workers part of the overview: every worker whose heartbeat has not expired
/// (`Client::workers`), with what it serves and when it last beat.
async fn live_workers(shared: &Shared) -> Markup {
    let workers = match shared.client.workers().await {
        Ok(w) => w,
        Err(e) => {
            return html! {
                section #workers {
                    h2 { "Live workers" }
                    p.error { "Cannot list the live workers: " (e) }
                }
            };
        }
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    html! {
        section #workers {
            h2 { "Live workers " span.muted { (workers.len()) } }
            @if workers.is_empty() {
                p.muted { "No live worker: no worker has sent a heartbeat that has not expired." }
            } @else {
                table.stats {
                    thead { tr {
                        th { "Worker" } th { "Host" } th.n { "Pid" } th { "Topics" }
                        th.n { "Running" } th.n { "Concurrency" } th.n { "Up" } th.n { "Last beat" } th { "Version" }
                    } }
                    tbody {
                        @for w in &workers {
                            tr data-worker=(w.id) {
                                td { code { (w.id) } }
                                td { (w.host) }
                                td.n { (w.pid) }
                                td { (w.topics.join(", ")) }
                                td.n { (w.running) }
                                td.n { (w.concurrency) }
                                td.n { (short(now_ms.saturating_sub(w.started_ms))) }
                                td.n { (when(w.beat_ms, now_ms)) }
                                td { (w.version) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `/`: every topic's depths, rates and lateness, and the charts of all topics.
async fn overview(State(shared): State<Arc<Shared>>) -> PageResult {
    let rows = shared.client.admin().stats().await?;
    let total: TopicStats = rows.iter().map(|(_, s)| s).sum();
    let (charts, rates) = {
        let history = shared
            .history
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let samples: Vec<_> = history.samples.iter().cloned().collect();
        let rates: Vec<_> = rows
            .iter()
            .map(|(m, _)| history.rates(Some(m.topic.as_ref())))
            .collect();
        (
            charts(&shared, &samples, None),
            (rates, history.rates(None)),
        )
    };
    let workers = live_workers(&shared).await;
    let body = html! {
        h1 { "Topics" }
        @if rows.is_empty() {
            p.muted { "No topic in the registry yet: topics appear once a producer or worker has used them." }
        } @else {
            table.stats #topics {
                thead { tr {
                    th { "Topic" } th.n { "Partitions" } th.n { "Scheduled" } th.n { "Ready" }
                    th.n { "Active" } th.n { "Retry" } th.n { "Dead" } th.n title="Due but still in scheduled or retry: a worker moves them to ready on its next fetch" { "Due, not moved" }
                    th.n title="How long the most overdue job (due, not started) has waited" { "Oldest overdue" } th.n { "Succeeded / min" } th.n { "Failed / min" }
                    th.n title="Times a handler asked to slow the topic down (a partner's rate limit)" { "Throttles" }
                } }
                tbody {
                    @for ((meta, s), r) in rows.iter().zip(&rates.0) {
                        tr data-topic=(meta.topic.as_ref()) {
                            td { a href=(topic_link(&shared, meta.topic.as_ref())) { (meta.topic.as_ref()) } }
                            td.n { (meta.partitions) }
                            (stat_cells(s))
                            td.n data-stat="succeeded_per_min" { (rate(r.map(|r| r.0))) }
                            td.n data-stat="failed_per_min" { (rate(r.map(|r| r.1))) }
                            td.n data-stat="throttles" { (s.throttles) }
                        }
                    }
                }
                tfoot {
                    tr data-topic="" {
                        th { "All topics" } td {}
                        (stat_cells(&total))
                        td.n { (rate(rates.1.map(|r| r.0))) }
                        td.n { (rate(rates.1.map(|r| r.1))) }
                        td.n data-stat="throttles" { (total.throttles) }
                    }
                }
            }
        }
        (charts)
        (workers)
    };
    Ok(layout(
        &shared,
        "Topics",
        true,
        html! { span { "Topics" } },
        body,
    ))
}

/// The depth and lateness cells of a stats row.
fn stat_cells(s: &TopicStats) -> Markup {
    html! {
        td.n data-stat="scheduled" { (s.scheduled) }
        td.n data-stat="ready" { (s.ready) }
        td.n data-stat="active" { (s.active) }
        td.n data-stat="retry" { (s.retry) }
        td.n.dead[s.dead > 0] data-stat="dead" { (s.dead) }
        td.n data-stat="overdue" { (s.overdue) }
        td.n data-stat="oldest_overdue" {
            @if s.oldest_overdue_ms > 0 { (short(s.oldest_overdue_ms)) } @else { "–" }
        }
    }
}

/// The three charts of `topic` (or all topics) over the sampled hour.
fn charts(shared: &Shared, samples: &[crate::history::Sample], topic: Option<&str>) -> Markup {
    let now = Instant::now();
    let span = chart::span(samples, now, shared.opts.sample_every);
    html! {
        section.charts {
            (chart::line_chart("Throughput (jobs / min)", "", span, &chart::throughput_series(samples, now, topic)))
            (chart::line_chart("Depth by state", "", span, &chart::depth_series(samples, now, topic)))
            (chart::line_chart("Lateness: oldest overdue", "s", span, &chart::lateness_series(samples, now, topic)))
        }
    }
}

/// Query of the topic page.
#[derive(Deserialize)]
struct TopicQuery {
    /// Which state to list (default `scheduled`).
    state: Option<String>,
    /// Cursor of the page to show.
    after: Option<String>,
    /// A key to look up.
    key: Option<String>,
}

fn parse_state(s: &str) -> Option<JobState> {
    [
        JobState::Scheduled,
        JobState::Ready,
        JobState::Active,
        JobState::Retry,
    ]
    .into_iter()
    .find(|st| st.as_str() == s)
}

fn parse_cursor(after: Option<&str>) -> Result<Option<Cursor>, PageError> {
    after
        .filter(|a| !a.is_empty())
        .map(str::parse::<Cursor>)
        .transpose()
        .map_err(PageError::from)
}

/// `/topics/{topic}`: stats, a search by key, and one state's jobs page by page.
async fn topic_page(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    Query(q): Query<TopicQuery>,
) -> PageResult {
    let (meta, tc) = topic_of(&shared, &name).await?;
    let mut missing = None;
    if let Some(key) = q.key.as_deref().map(str::trim).filter(|k| !k.is_empty()) {
        if tc.job(key).await?.is_some() {
            return Ok(Redirect::to(&job_link(&shared, &name, key)).into_response());
        }
        missing = Some(key.to_owned());
    }
    let state_name = q.state.as_deref().unwrap_or("scheduled");
    let state = parse_state(state_name).ok_or_else(|| {
        PageError(
            StatusCode::BAD_REQUEST,
            format!("no listing of state {state_name:?}"),
        )
    })?;
    let after = parse_cursor(q.after.as_deref())?;
    let page = match after {
        Some(c) => Page::after(c, PAGE),
        None => Page::first(PAGE),
    };
    let listed = tc.list(state, page).await?;
    let stats = tc.stats().await?;
    let now_ms = shared.client.store().now_ms().await?;
    let samples: Vec<_> = shared
        .history
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .samples
        .iter()
        .cloned()
        .collect();
    let base = topic_link(&shared, &name);
    let count = |st: JobState| match st {
        JobState::Scheduled => stats.scheduled,
        JobState::Ready => stats.ready,
        JobState::Active => stats.active,
        JobState::Retry => stats.retry,
        JobState::Dead => stats.dead,
    };
    let body = html! {
        h1 { (name) " " small.muted { (meta.partitions) " partition" @if meta.partitions != 1 { "s" } } }
        @if stats.paused { p.error #leasing { "Paused: no worker leases this topic's jobs until it is resumed." } }
        @else if stats.throttled { p.muted #leasing { "Throttled: a rate or concurrency limit holds due jobs back (lateness, not an error)." } }
        p.muted #throttles { "Throttles: " span data-stat="throttles" { (stats.throttles) } " (times a handler asked to slow the topic down)" }
        form.search method="get" action=(base) {
            input type="text" name="key" placeholder="Find a job by key" value=[missing.as_deref()] required;
            button type="submit" { "Find" }
        }
        @if let Some(key) = &missing { p.error { "No job with key " code { (key) } " in this topic." } }
        nav.tabs {
            @for st in [JobState::Scheduled, JobState::Ready, JobState::Active, JobState::Retry] {
                a.current[st == state] href={(base) "?state=" (st.as_str())} { (st.as_str()) " " span.count { (count(st)) } }
            }
            a href=(dead_link(&shared, &name)) { "dead " span.count.dead[stats.dead > 0] { (stats.dead) } }
        }
        table.jobs #listing data-state=(state.as_str()) {
            thead { tr {
                th { "Key" }
                th { (match state { JobState::Retry => "Next attempt", JobState::Active => "Lease until", _ => "Due" }) }
                th.n { "Attempts" }
                th { "Enqueued" }
                @if state == JobState::Retry { th { "Last error" } }
            } }
            tbody {
                @for j in &listed.jobs {
                    tr {
                        td { a href=(job_link(&shared, &name, j.key.as_ref())) { code { (j.key.as_ref()) } } }
                        td { (when(j.lease_deadline_ms.unwrap_or(j.due_ms), now_ms)) }
                        td.n { (j.attempts) }
                        td { (when(j.created_ms, now_ms)) }
                        @if state == JobState::Retry { td.err { (dead::last_error(j)) } }
                    }
                }
                @if listed.jobs.is_empty() { tr { td.muted colspan="5" { "No " (state.as_str()) " jobs." } } }
            }
        }
        p.pager {
            @if after_given(q.after.as_deref()) { a href={(base) "?state=" (state.as_str())} { "« first page" } " " }
            @if let Some(next) = &listed.next {
                a href={(base) "?state=" (state.as_str()) "&after=" (enc(&next.to_string()))} { "next page »" }
            }
        }
        (charts(&shared, &samples, Some(&name)))
    };
    let crumbs = html! { a href=(shared.home()) { "Topics" } " / " span { (name) } };
    Ok(layout(&shared, &name, q.after.is_none(), crumbs, body))
}

fn after_given(after: Option<&str>) -> bool {
    after.is_some_and(|a| !a.is_empty())
}

/// Query of the dead-queue page.
#[derive(Deserialize)]
struct DeadQuery {
    /// Show only jobs whose last error contains this.
    error: Option<String>,
    /// Cursor of the page to show.
    after: Option<String>,
    /// What the last POST did (`requeued`, `purged`) …
    done: Option<String>,
    /// … to how many jobs.
    n: Option<u64>,
}

/// `/topics/{topic}/dead`: errors grouped by message, then the dead jobs (filtered by
/// error) with requeue and purge for one, a selection, or every match.
async fn dead_page(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    Query(q): Query<DeadQuery>,
) -> PageResult {
    let (_, tc) = topic_of(&shared, &name).await?;
    let filter = q.error.clone().unwrap_or_default();
    let after = parse_cursor(q.after.as_deref())?;
    let stats = tc.stats().await?;
    let (groups, scanned) = dead::group_errors(&tc).await?;
    // The library's filtered listing: whole pages, a bounded read per call.
    let page = match after {
        Some(c) => Page::after(c, PAGE),
        None => Page::first(PAGE),
    };
    let listed = tc.list_dead(&dead::filter_of(&filter), page).await?;
    let (jobs, next) = (listed.jobs, listed.next);
    let now_ms = shared.client.store().now_ms().await?;
    let base = dead_link(&shared, &name);
    let filter_q = if filter.is_empty() {
        String::new()
    } else {
        format!("error={}&", enc(&filter))
    };
    let rw = !shared.opts.read_only;
    let body = html! {
        h1 { "Dead queue of " a href=(topic_link(&shared, &name)) { (name) } " " small.muted #dead-count { (stats.dead) " dead" } }
        @if let (Some(done), Some(n)) = (q.done.as_deref(), q.n) {
            @if done == "requeued" || done == "purged" {
                p.notice #notice { (done.to_uppercase().get(..1).unwrap_or("")) (&done[1..]) " " (n) " job" @if n != 1 { "s" } "." }
            }
        }
        h2 { "Errors" }
        @if groups.is_empty() { p.muted { "The dead queue is empty." } } @else {
            table.stats #errors {
                thead { tr { th.n { "Jobs" } th { "Last error" } @if rw { th {} } } }
                tbody {
                    @for (msg, count) in &groups {
                        tr {
                            td.n { (count) }
                            td.err { a href={(base) "?error=" (enc(msg))} { @if msg.is_empty() { em { "(no error recorded)" } } @else { (msg) } } }
                            @if rw {
                                td.actions {
                                    // An empty filter would match every dead job, not this group.
                                    @if !msg.is_empty() {
                                        form method="post" action=(base) {
                                            (csrf_field(&shared))
                                            input type="hidden" name="error" value=(msg);
                                            button name="do" value="requeue-matching" { "Requeue all" }
                                            button.danger name="do" value="purge-matching" { "Purge all" }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @if scanned as u64 >= dead::GROUP_SCAN as u64 && stats.dead > scanned as u64 {
                p.muted { "Grouped from the " (scanned) " oldest dead jobs of " (stats.dead) "." }
            }
        }
        h2 { "Jobs" }
        form.search method="get" action=(base) {
            input type="text" name="error" placeholder="Last error contains…" value=(filter);
            button type="submit" { "Filter" }
            @if !filter.is_empty() { " " a href=(base) { "clear" } }
        }
        form #dead-jobs method="post" action=(base) {
            (csrf_field(&shared))
            input type="hidden" name="error" value=(filter);
            table.jobs {
                thead { tr {
                    @if rw { th {} }
                    th { "Key" } th { "Died" } th.n { "Attempts" } th { "Last error" }
                    @if rw { th {} }
                } }
                tbody {
                    @for j in &jobs {
                        tr data-key=(j.key.as_ref()) {
                            @if rw { td { input type="checkbox" name="key" value=(j.key.as_ref()) aria-label="select"; } }
                            td { a href=(job_link(&shared, &name, j.key.as_ref())) { code { (j.key.as_ref()) } } }
                            td { @if let Some(d) = j.died_ms { (when(d, now_ms)) } }
                            td.n { (j.attempts) }
                            td.err { (dead::last_error(j)) }
                            @if rw {
                                td.actions {
                                    button.requeue name="requeue" value=(j.key.as_ref()) { "Requeue" }
                                    button.danger.purge name="purge" value=(j.key.as_ref()) { "Purge" }
                                }
                            }
                        }
                    }
                    @if jobs.is_empty() { tr { td.muted colspan="6" { "No dead jobs" @if !filter.is_empty() { " matching this filter" } "." } } }
                }
            }
            @if rw && !jobs.is_empty() {
                p.bulk {
                    button name="do" value="requeue-selected" { "Requeue selected" }
                    button.danger name="do" value="purge-selected" { "Purge selected" }
                    span.sep {}
                    button name="do" value="requeue-matching" {
                        "Requeue all " @if filter.is_empty() { "dead jobs" } @else { "matching the filter" }
                    }
                    button.danger name="do" value="purge-matching" {
                        "Purge all " @if filter.is_empty() { "dead jobs" } @else { "matching the filter" }
                    }
                }
            }
        }
        p.pager {
            @if after_given(q.after.as_deref()) { a href={(base) "?" (filter_q)} { "« first page" } " " }
            @if let Some(next) = &next {
                a href={(base) "?" (filter_q) "after=" (enc(&next.to_string()))} { "next page »" }
            }
        }
    };
    let crumbs = html! {
        a href=(shared.home()) { "Topics" } " / " a href=(topic_link(&shared, &name)) { (name) } " / " span { "dead" }
    };
    Ok(layout(
        &shared,
        &format!("{name} dead queue"),
        false,
        crumbs,
        body,
    ))
}

fn csrf_field(shared: &Shared) -> Markup {
    html! { input type="hidden" name="csrf" value=(shared.csrf); }
}

/// `POST /topics/{topic}/dead`: requeue or purge one job (`requeue=KEY` / `purge=KEY`),
/// the selected ones (`do=requeue-selected` with `key=…`), or every job whose last error
/// contains `error` (`do=requeue-matching`; first answered with a page that asks to confirm,
/// whose button posts again with `confirm=yes`). Needs the CSRF token; read-only mode and
/// cross-site requests were refused before this runs.
async fn dead_action(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    body: Bytes,
) -> PageResult {
    let fields: Vec<(String, String)> = form_urlencoded::parse(&body).into_owned().collect();
    let field = |n: &str| fields.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
    if !security::token_ok(&shared, field("csrf")) {
        return Ok(security::forbidden("missing or wrong CSRF token"));
    }
    let (_, tc) = topic_of(&shared, &name).await?;
    let filter = field("error").unwrap_or("").to_owned();
    let selected: Vec<&str> = fields
        .iter()
        .filter(|(k, _)| k == "key")
        .map(|(_, v)| v.as_str())
        .collect();
    let bad = |why: &str| PageError(StatusCode::BAD_REQUEST, why.to_owned());
    let (action, n) = if let Some(key) = field("requeue") {
        (DeadAction::Requeue, tc.requeue_dead(&[key]).await?)
    } else if let Some(key) = field("purge") {
        (DeadAction::Purge, tc.purge_dead(&[key]).await?)
    } else {
        let action = match field("do") {
            Some("requeue-selected" | "requeue-matching") => DeadAction::Requeue,
            Some("purge-selected" | "purge-matching") => DeadAction::Purge,
            _ => return Err(bad("no action given")),
        };
        let n = if field("do").is_some_and(|d| d.ends_with("-selected")) {
            if selected.is_empty() {
                return Err(bad("no job selected"));
            }
            let mut n = 0;
            for chunk in selected.chunks(MAX_SWEEP_CHUNK) {
                n += match action {
                    DeadAction::Requeue => tc.requeue_dead(chunk).await?,
                    DeadAction::Purge => tc.purge_dead(chunk).await?,
                };
            }
            n
        } else if field("confirm") == Some("yes") {
            let sweep = tc.sweep_dead(action, dead::filter_of(&filter)).await?;
            sweep.run().await?.done
        } else {
            // Every job matching a filter is one click from gone: ask once more.
            return confirm_page(&shared, &name, &tc, action, &filter).await;
        };
        (action, n)
    };
    let done = match action {
        DeadAction::Requeue => "requeued",
        DeadAction::Purge => "purged",
    };
    tracing::info!(topic = %name, action = done, jobs = n, "dq dashboard: dead jobs changed");
    let back = match field("back") {
        // Back to the job's page, unless it is gone.
        Some(key) if !key.is_empty() && action == DeadAction::Requeue => {
            job_link(&shared, &name, key)
        }
        _ => {
            let filter_q = if filter.is_empty() {
                String::new()
            } else {
                format!("error={}&", enc(&filter))
            };
            format!("{}?{filter_q}done={done}&n={n}", dead_link(&shared, &name))
        }
    };
    Ok(Redirect::to(&back).into_response())
}

/// The page that asks before a requeue or purge of every dead job matching `filter`.
async fn confirm_page(
    shared: &Shared,
    name: &str,
    tc: &TopicClient,
    action: DeadAction,
    filter: &str,
) -> PageResult {
    let dead = tc.stats().await?.dead;
    let (verb, value) = match action {
        DeadAction::Requeue => ("Requeue", "requeue-matching"),
        DeadAction::Purge => ("Purge", "purge-matching"),
    };
    let base = dead_link(shared, name);
    let body = html! {
        h1 { (verb) " dead jobs of " (name) "?" }
        p #confirm-what {
            @if filter.is_empty() {
                (verb) " every dead job of " strong { (name) } " (" (dead) " now)."
            } @else {
                (verb) " every dead job of " strong { (name) } " whose last error contains "
                code { (filter) } " (the dead queue holds " (dead) " jobs)."
            }
            @if action == DeadAction::Purge { " Purged jobs cannot be brought back." }
        }
        form.job-actions method="post" action=(base) {
            (csrf_field(shared))
            input type="hidden" name="error" value=(filter);
            input type="hidden" name="confirm" value="yes";
            button.danger[action == DeadAction::Purge] name="do" value=(value) { (verb) " them" }
            a href={(base) @if !filter.is_empty() { "?error=" (enc(filter)) }} { "Cancel" }
        }
    };
    let crumbs = html! {
        a href=(shared.home()) { "Topics" } " / " a href=(topic_link(shared, name)) { (name) } " / " span { "dead" }
    };
    Ok(layout(shared, "Confirm", false, crumbs, body))
}

/// `/topics/{topic}/jobs/{key}`: one job's state, times, attempts and payload.
async fn job_page(
    State(shared): State<Arc<Shared>>,
    Path((name, key)): Path<(String, String)>,
) -> PageResult {
    let (meta, tc) = topic_of(&shared, &name).await?;
    let job = tc
        .job(&key)
        .await?
        .ok_or_else(|| not_found(format!("no job {key:?} in topic {name:?}")))?;
    let now_ms = shared.client.store().now_ms().await?;
    let payload =
        match rmp_serde::from_slice::<serde_json::Value>(dq_core::trace::split(&job.payload).1) {
            Ok(v) => serde_json::to_string_pretty(&v).unwrap_or_default(),
            Err(e) => format!(
                "(not decodable as MessagePack: {e})\n{}",
                job.payload
                    .iter()
                    .take(512)
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            ),
        };
    let rw = !shared.opts.read_only;
    let partition = job.key.partition(meta.partitions);
    let body = html! {
        h1 { "Job " code { (key) } }
        table.kv #job {
            tr { th { "Topic" } td { a href=(topic_link(&shared, &name)) { (name) } " (partition " (partition) ")" } }
            tr { th { "State" } td data-field="state" { span class={"state " (job.state.as_str())} { (job.state.as_str()) } } }
            tr { th { (if job.state == JobState::Retry { "Next attempt" } else { "Due" }) } td { (when(job.due_ms, now_ms)) } }
            tr { th { "Enqueued" } td { (when(job.created_ms, now_ms)) } }
            tr { th { "Attempts" } td data-field="attempts" { (job.attempts) } }
            @if let Some(d) = job.lease_deadline_ms { tr { th { "Lease until" } td { (when(d, now_ms)) } } }
            @if let Some(d) = job.died_ms { tr { th { "Died" } td { (when(d, now_ms)) } } }
        }
        @if rw && job.state == JobState::Dead {
            form.job-actions method="post" action=(dead_link(&shared, &name)) {
                (csrf_field(&shared))
                input type="hidden" name="back" value=(key);
                button name="requeue" value=(key) { "Requeue" }
                button.danger name="purge" value=(key) { "Purge" }
            }
        }
        h2 { "Attempts" }
        @if job.history.is_empty() { p.muted { "No failed attempt recorded." } } @else {
            table.jobs #history {
                thead { tr { th.n { "#" } th { "Ended" } th { "Outcome" } th { "Error" } } }
                tbody {
                    @for a in &job.history {
                        tr {
                            td.n { (a.attempt) }
                            td { (when(a.at_ms, now_ms)) }
                            td { (format!("{:?}", a.outcome)) }
                            td.err { (a.error) }
                        }
                    }
                }
            }
        }
        h2 { "Payload" }
        pre.payload { (payload) }
    };
    let crumbs = html! {
        a href=(shared.home()) { "Topics" } " / " a href=(topic_link(&shared, &name)) { (name) } " / " span { (key) }
    };
    Ok(layout(
        &shared,
        &format!("{name} / {key}"),
        false,
        crumbs,
        body,
    ))
}

const CSS: &str = r#"
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2733;background:#f5f7fa}
header{display:flex;align-items:center;gap:16px;padding:10px 24px;background:#1d2733;color:#fff}
header a{color:#cfe0ff;text-decoration:none}
.brand{font-weight:700;font-size:18px;color:#fff!important;letter-spacing:.5px}
.crumbs{color:#9fb0c4}
.badge{margin-left:auto;background:#e69a00;color:#1d2733;border-radius:10px;padding:1px 10px;font-size:12px;font-weight:600}
main{padding:16px 24px;max-width:1400px}
h1{font-size:22px;margin:6px 0 14px}h2{font-size:16px;margin:22px 0 8px}
a{color:#1f5fbf}
.muted{color:#6b7785}small{font-weight:400;font-size:14px}
table{border-collapse:collapse;background:#fff;box-shadow:0 1px 2px rgba(0,0,0,.08);border-radius:6px;overflow:hidden;min-width:480px}
th,td{padding:6px 12px;border-bottom:1px solid #e8ebef;text-align:left;vertical-align:top}
thead th{background:#eef1f5;font-weight:600;font-size:12px;text-transform:uppercase;letter-spacing:.3px;color:#4a5562}
tfoot th,tfoot td{background:#f8f9fb;font-weight:600}
.n{text-align:right;font-variant-numeric:tabular-nums}
td.dead,span.dead{color:#c0392b;font-weight:700}
.err{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;color:#8a2d22;max-width:560px;word-break:break-word}
code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px}
.charts{display:flex;flex-wrap:wrap;gap:16px;margin-top:20px}
.chart{margin:0;background:#fff;padding:10px 12px;border-radius:6px;box-shadow:0 1px 2px rgba(0,0,0,.08)}
.chart figcaption{font-weight:600;font-size:13px;margin-bottom:4px}
.legend{display:flex;gap:12px;flex-wrap:wrap;font-size:12px;color:#4a5562}
.legend i{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px;vertical-align:-1px}
.tabs{display:flex;gap:4px;margin:14px 0 0}
.tabs a{padding:6px 12px;border-radius:6px 6px 0 0;background:#e4e8ee;text-decoration:none;color:#1d2733}
.tabs a.current{background:#fff;font-weight:600}
.count{display:inline-block;min-width:20px;padding:0 6px;border-radius:9px;background:#d5dbe3;font-size:12px;text-align:center}
.search{display:flex;gap:6px;margin:6px 0 10px}
input[type=text]{padding:5px 8px;border:1px solid #c5ccd6;border-radius:4px;min-width:280px}
button{padding:4px 10px;border:1px solid #9fb0c4;border-radius:4px;background:#fff;cursor:pointer;font-size:13px}
button:hover{background:#eef3fb}
button.danger{border-color:#e0a39b;color:#a23325}
.actions{white-space:nowrap}.actions form{display:flex;gap:6px}.actions>button+button{margin-left:6px}
form.job-actions{display:flex;gap:6px;margin:12px 0}
.bulk{display:flex;gap:8px;align-items:center;margin:10px 0}.sep{width:16px}
.notice{background:#e6f5ec;border:1px solid #a7dcb9;padding:6px 12px;border-radius:4px;display:inline-block}
.error{color:#a23325}
.pager a{margin-right:12px}
.kv th{width:140px;background:#f8f9fb}
.state{padding:1px 8px;border-radius:9px;background:#d5dbe3;font-weight:600;font-size:12px}
.state.dead{background:#f6d5d1;color:#a23325}.state.ready{background:#d6e6fb}.state.retry{background:#fbe7c2}
pre.payload{background:#fff;padding:12px;border-radius:6px;box-shadow:0 1px 2px rgba(0,0,0,.08);overflow:auto;max-height:480px}
"#;
