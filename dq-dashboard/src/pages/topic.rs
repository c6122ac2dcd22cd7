//! `/topics/{topic}`: one topic's stats, a search by key, and one state's jobs page by
//! page.

use std::sync::{Arc, PoisonError};

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use dq_core::{JobState, Page};
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

/// `/topics/{topic}`: stats, a search by key, and one state's jobs page by page.
pub(super) async fn topic_page(
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
        @if stats.expired_before_start > 0 { p.muted #expired-before-start { "Expired before they started: " span data-stat="expired_before_start" { (stats.expired_before_start) } " (dropped, never run: their expiry came first)" } }
        @if stats.succeeded_after_cancel_request > 0 { p.muted #after-cancel { "Succeeded after a cancel request: " span data-stat="succeeded_after_cancel_request" { (stats.succeeded_after_cancel_request) } " (counted as succeeded, not cancelled: the handler finished anyway)" } }
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
