//! `/topics/{topic}`: one topic's stats, a search by key, and one state's jobs page by
//! page.

use std::sync::{Arc, PoisonError};

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use dq_core::{FinishedAs, JobState, Page};
use maud::html;
use serde::Deserialize;

use super::layout::{
    PAGE, PageError, PageResult, after_given, charts, dead_link, enc, job_link, layout,
    parse_cursor, topic_link, topic_of, when,
};
use crate::dead;
use crate::state::Shared;

/// Query of the topic page.
#[derive(Deserialize)]
pub(super) struct TopicQuery {
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

/// What a tab lists: a live state, or the finished jobs the topic keeps of one outcome.
enum Tab {
    Live(JobState),
    Kept(FinishedAs),
}

impl Tab {
    fn name(&self) -> &'static str {
        match self {
            Tab::Live(s) => s.as_str(),
            Tab::Kept(o) => o.as_str(),
        }
    }
}

/// One row of the listing, whichever tab.
struct Row {
    key: String,
    /// Due, lease deadline or finish time.
    at_ms: u64,
    attempts: u32,
    /// A live job's priority (a finished one's is not kept).
    priority: Option<dq_core::Priority>,
    created_ms: u64,
    /// The last error (retry), or the run time and worker (succeeded).
    note: String,
}

/// `/topics/{topic}`: stats, a search by key, and one state's jobs page by page.
pub(super) async fn topic_page(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    Query(q): Query<TopicQuery>,
) -> PageResult {
    let (meta, tc) = topic_of(&shared, &name).await?;
    let mut missing = None;
    if let Some(key) = q.key.as_deref().map(str::trim).filter(|k| !k.is_empty()) {
        if tc.job(key).await?.is_some() || tc.finished(key).await?.is_some() {
            return Ok(Redirect::to(&job_link(&shared, &name, key)).into_response());
        }
        missing = Some(key.to_owned());
    }
    let state_name = q.state.as_deref().unwrap_or("scheduled");
    let tab = match (parse_state(state_name), FinishedAs::parse(state_name)) {
        (Some(s), _) => Tab::Live(s),
        (None, Some(o)) => Tab::Kept(o),
        _ => {
            return Err(PageError(
                StatusCode::BAD_REQUEST,
                format!("no listing of state {state_name:?}"),
            ));
        }
    };
    let after = parse_cursor(q.after.as_deref())?;
    let page = match after {
        Some(c) => Page::after(c, PAGE),
        None => Page::first(PAGE),
    };
    let (rows, next): (Vec<Row>, _) = match &tab {
        Tab::Live(state) => {
            let listed = tc.list(*state, page).await?;
            let rows = listed
                .jobs
                .iter()
                .map(|j| Row {
                    key: j.key.to_string(),
                    at_ms: j.lease_deadline_ms.unwrap_or(j.due_ms),
                    attempts: j.attempts,
                    priority: Some(j.priority),
                    created_ms: j.created_ms,
                    note: if *state == JobState::Retry {
                        dead::last_error(j).to_string()
                    } else {
                        String::new()
                    },
                })
                .collect();
            (rows, listed.next)
        }
        Tab::Kept(outcome) => {
            let listed = tc.list_finished(*outcome, page).await?;
            let rows = listed
                .jobs
                .iter()
                .map(|j| Row {
                    key: j.key.to_string(),
                    at_ms: j.finished_ms,
                    attempts: j.attempts,
                    priority: None,
                    created_ms: j.created_ms,
                    note: match (j.run_time(), &j.worker) {
                        (Some(d), Some(w)) => format!("ran {} ms on {w}", d.as_millis()),
                        _ => String::new(),
                    },
                })
                .collect();
            (rows, listed.next)
        }
    };
    let control = tc.control().await?;
    let (retention, recording_events) = (control.retention, control.events.is_some());
    let stats = tc.stats().await?;
    let groups = tc.group_state(None).await?;
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
        @if stats.expired_before_start > 0 { p.muted #expired-before-start { "Expired before they started: " span data-stat="expired_before_start" { (stats.expired_before_start) } " (dropped, never run: their expiry came first)" } }
        @if stats.succeeded_after_cancel_request > 0 { p.muted #after-cancel { "Succeeded after a cancel request: " span data-stat="succeeded_after_cancel_request" { (stats.succeeded_after_cancel_request) } " (counted as succeeded, not cancelled: the handler finished anyway)" } }
        @if groups.default_limits.is_some() || groups.running > 0 || groups.waiting > 0 {
            p.muted #groups { "Groups: " span data-stat="group_running" { (groups.running) } " grouped jobs running, " span data-stat="group_waiting" { (groups.waiting) } " waiting for their group's turn; default limits: "
                span data-field="default_group_limits" { (groups.default_limits.as_ref().map_or("none".to_owned(), group_limits_text)) } }
        }
        form.search method="get" action=(base) {
            input type="text" name="key" placeholder="Find a job by key" value=[missing.as_deref()] required;
            button type="submit" { "Find" }
        }
        @if let Some(key) = &missing { p.error { "No job with key " code { (key) } " in this topic." } }
        nav.tabs {
            @for st in [JobState::Scheduled, JobState::Ready, JobState::Active, JobState::Retry] {
                a.current[matches!(tab, Tab::Live(s) if s == st)] href={(base) "?state=" (st.as_str())} { (st.as_str()) " " span.count { (count(st)) } }
            }
            a href=(dead_link(&shared, &name)) { "dead " span.count.dead[stats.dead > 0] { (stats.dead) } }
            @if retention.is_some() || stats.kept > 0 {
                @for o in FinishedAs::ALL {
                    a.kept.current[matches!(tab, Tab::Kept(k) if k == o)] href={(base) "?state=" (o.as_str())} { (o.as_str()) }
                }
            }
            @if recording_events {
                a #events-link href={(base) "/events"} { "events" }
            }
        }
        @if retention.is_some() || stats.kept > 0 {
            p.muted #kept { "Kept: " span data-stat="kept" { (stats.kept) } " finished jobs"
                @if let Some(r) = retention { " (succeeded " (keep_text(r.succeeded)) ", cancelled " (keep_text(r.cancelled)) ", expired " (keep_text(r.expired)) ", at most " (r.max_kept) ")" }
                @if stats.kept_trimmed > 0 { "; " span data-stat="kept_trimmed" { (stats.kept_trimmed) } " trimmed before their time (the cap)" }
            }
        }
        table.jobs #listing data-state=(tab.name()) {
            thead { tr {
                th { "Key" }
                th { (match tab { Tab::Live(JobState::Retry) => "Next attempt", Tab::Live(JobState::Active) => "Lease until", Tab::Live(_) => "Due", Tab::Kept(_) => "Finished" }) }
                th.n { "Attempts" }
                @if matches!(tab, Tab::Live(_)) { th.n title="0 (lowest) to 9 (highest); 5 is normal" { "Priority" } }
                th { "Enqueued" }
                @if matches!(tab, Tab::Live(JobState::Retry)) { th { "Last error" } }
                @if matches!(tab, Tab::Kept(FinishedAs::Succeeded)) { th { "Run" } }
            } }
            tbody {
                @for j in &rows {
                    tr {
                        td { a href=(job_link(&shared, &name, &j.key)) { code { (j.key) } } }
                        td { (when(j.at_ms, now_ms)) }
                        td.n { (j.attempts) }
                        @if let Some(p) = j.priority {
                            td.n.priority.high[p > dq_core::Priority::NORMAL].low[p < dq_core::Priority::NORMAL] data-priority=(p.level()) { (p.level()) }
                        }
                        td { (when(j.created_ms, now_ms)) }
                        @if matches!(tab, Tab::Live(JobState::Retry)) { td.err { (j.note) } }
                        @if matches!(tab, Tab::Kept(FinishedAs::Succeeded)) { td { (j.note) } }
                    }
                }
                @if rows.is_empty() { tr { td.muted colspan="6" { "No " (tab.name()) " jobs." } } }
            }
        }
        p.pager {
            @if after_given(q.after.as_deref()) { a href={(base) "?state=" (tab.name())} { "« first page" } " " }
            @if let Some(next) = &next {
                a href={(base) "?state=" (tab.name()) "&after=" (enc(&next.to_string()))} { "next page »" }
            }
        }
        (charts(&shared, &samples, Some(&name)))
    };
    let crumbs = html! { a href=(shared.home()) { "Topics" } " / " span { (name) } };
    Ok(layout(&shared, &name, q.after.is_none(), crumbs, body))
}

/// Group limits in words: `concurrency 4, rate 10/s, weight 2`.
fn group_limits_text(l: &dq_core::GroupLimits) -> String {
    format!(
        "concurrency {}, rate {}, weight {}",
        l.concurrency.map_or("none".to_owned(), |c| c.to_string()),
        l.rate.map_or("none".to_owned(), |r| r.to_string()),
        l.weight
    )
}

/// How long an outcome is kept, as the topic page says it.
fn keep_text(d: Option<std::time::Duration>) -> String {
    d.map_or("no".into(), |d| humantime::format_duration(d).to_string())
}
