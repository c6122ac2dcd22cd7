//! `/topics/{topic}/dead`: the dead queue — errors grouped by message, the dead jobs
//! filtered by error — and its one POST endpoint: requeue or purge one job, a selection, or
//! every match (through the library's sweep).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use dq_core::{DeadAction, MAX_SWEEP_CHUNK, Page, TopicClient};
use maud::html;
use serde::Deserialize;

use super::layout::{
    PAGE, PageError, PageResult, after_given, csrf_field, dead_link, enc, job_link, layout,
    parse_cursor, topic_link, topic_of, when,
};
use crate::dead;
use crate::security;
use crate::state::Shared;

/// Query of the dead-queue page.
#[derive(Deserialize)]
pub(super) struct DeadQuery {
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
pub(super) async fn dead_page(
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
    let jobs_table = html! {
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
    };
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
        // Read-only: the same table, outside any form: no CSRF token, no buttons.
        @if rw {
            form #dead-jobs method="post" action=(base) {
                (csrf_field(&shared))
                input type="hidden" name="error" value=(filter);
                (jobs_table)
                @if !jobs.is_empty() {
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
        } @else {
            div #dead-jobs { (jobs_table) }
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

/// `POST /topics/{topic}/dead`: requeue or purge one job (`requeue=KEY` / `purge=KEY`),
/// the selected ones (`do=requeue-selected` with `key=…`), or every job whose last error
/// contains `error` (`do=requeue-matching`; first answered with a page that asks to confirm,
/// whose button posts again with `confirm=yes`). Needs the CSRF token; read-only mode and
/// cross-site requests were refused before this runs.
pub(super) async fn dead_action(
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
