//! `/batches`: the batches not done (batches and flows' children), with their status and
//! member counts, page by page; `/batches/{id}`: one batch — its status, policy, what its
//! completion does and that job's state (a callback, or a flow's parent), its members' counts
//! by state and its times — and its members, one state at a time. Read through the operator
//! API (`Admin::batches`, `batch_members`, `batch_follow_up`).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use dq_core::client::admin::{BatchFollowUp, FollowUpJob, FollowUpKind};
use dq_core::{BatchInfo, BatchStatus, MemberState};
use maud::{Markup, html};
use serde::Deserialize;

use super::layout::{
    PAGE, PageError, PageResult, after_given, batch_link, enc, job_link, layout, not_found,
    topic_link, when,
};
use crate::state::Shared;

/// Query of the batches page.
#[derive(Deserialize)]
pub(super) struct BatchesQuery {
    /// The id the page starts after.
    after: Option<String>,
}

/// Query of a batch's page.
#[derive(Deserialize)]
pub(super) struct BatchQuery {
    /// Which members to list (default: every state).
    state: Option<String>,
    /// Cursor of the members' page to show.
    after: Option<u64>,
}

/// A batch's status as a badge.
fn status_badge(status: BatchStatus) -> Markup {
    let name = status.to_string();
    html! { span class={"state batch-" (name)} { (name) } }
}

/// `/batches`: the batches not done, oldest first.
pub(super) async fn batches_page(
    State(shared): State<Arc<Shared>>,
    Query(q): Query<BatchesQuery>,
) -> PageResult {
    let after = q.after.as_deref().filter(|a| !a.is_empty());
    let list = shared.client.admin().batches(after, PAGE).await?;
    let now_ms = shared.client.store().now_ms().await?;
    let base = shared.link("/batches");
    let body = html! {
        h1 { "Batches " small.muted { "not done" } }
        p.muted { "Open, closed with members that have not ended, or complete with their callback not enqueued yet — oldest first. A flow's children are the batch "
            code { "flow.<topic>.<parent key>" } "." }
        table.stats #batches {
            thead { tr {
                th { "Batch" } th { "Status" }
                th.n { "Members" } th.n title="Reserved or enqueued: not ended" { "Pending" }
                th.n { "Succeeded" } th.n title="Dead, cancelled, expired, discarded, refused or never enqueued" { "Failed" }
                th { "Opened" }
            } }
            tbody {
                @for b in &list.batches {
                    tr data-batch=(b.id) {
                        td { a href=(batch_link(&shared, b.id.as_str())) { code { (b.id) } } }
                        td data-field="status" { (status_badge(b.status())) }
                        td.n data-field="members" { (b.counts.total()) }
                        td.n data-field="pending" { (b.counts.pending()) }
                        td.n data-field="succeeded" { (b.counts.succeeded) }
                        td.n.dead[b.counts.failures() > 0] data-field="failed" { (b.counts.failures()) }
                        td { (when(b.created_ms, now_ms)) }
                    }
                }
                @if list.batches.is_empty() { tr { td.muted colspan="7" { "No batch is open, closed or complete: every batch is done." } } }
            }
        }
        p.pager {
            @if after.is_some() { a href=(base) { "« first page" } " " }
            @if let Some(next) = &list.next {
                a #next-page href={(base) "?after=" (enc(next.as_str()))} { "next page »" }
            }
        }
    };
    Ok(layout(
        &shared,
        "Batches",
        after.is_none(),
        html! { a href=(shared.home()) { "Topics" } " / " span { "Batches" } },
        body,
    ))
}

/// What the follow-up job is doing, with a link to its page when it is found.
fn follow_up_cell(shared: &Shared, f: &BatchFollowUp, status: BatchStatus, now_ms: u64) -> Markup {
    let topic = f.topic.as_str();
    let key = f.key.as_str();
    html! {
        (f.kind.as_str()) " "
        @match &f.job {
            FollowUpJob::NotFound => {
                code { (topic) } " " code { (key) } ": "
                span.muted data-field="then-state" {
                    @match (f.kind, status) {
                        (FollowUpKind::Callback, BatchStatus::Done) => "not found (it ran, and its topic keeps no finished jobs)",
                        (FollowUpKind::Callback, _) => "not enqueued yet (once the batch is complete)",
                        _ => "not found",
                    }
                }
            }
            FollowUpJob::Live(j) => {
                a href=(topic_link(shared, topic)) { (topic) } " "
                a href=(job_link(shared, topic, key)) { code { (key) } } ": "
                span data-field="then-state" {
                    span class={"state " (j.state.as_str())} { (j.state.as_str()) }
                    @if f.waiting_for_children() { " waiting for its children" }
                    @else { " due " (when(j.due_ms, now_ms)) }
                }
            }
            FollowUpJob::Finished(j) => {
                a href=(topic_link(shared, topic)) { (topic) } " "
                a href=(job_link(shared, topic, key)) { code { (key) } } ": "
                span data-field="then-state" {
                    span class={"state " (j.outcome.as_str())} { (j.outcome.as_str()) } " " (when(j.finished_ms, now_ms))
                }
            }
        }
    }
}

/// The batch's settings, follow-up and times.
fn summary(
    shared: &Shared,
    b: &BatchInfo,
    follow_up: Option<&BatchFollowUp>,
    now_ms: u64,
) -> Markup {
    let status = b.status();
    html! {
        table.kv #batch {
            tr { th { "Status" } td data-field="status" { (status_badge(status)) } }
            tr { th { "Policy" } td data-field="policy" { (policy_text(b.policy)) } }
            tr { th { "Then" } td data-field="then" {
                @if let Some(f) = follow_up { (follow_up_cell(shared, f, status, now_ms)) }
                @else { span.muted { "nothing (the batch only reports its progress)" } }
            } }
            tr { th { "Opened" } td { (when(b.created_ms, now_ms)) } }
            @if b.closed { tr { th { "Closed" } td data-field="closed" { (when(b.closed_ms, now_ms)) } } }
            @if b.done {
                tr { th { "Done" } td data-field="done" { (when(b.done_ms, now_ms)) } }
                tr { th { "Kept" } td { "until " (when(b.done_ms.saturating_add(u64::try_from(b.retention.as_millis()).unwrap_or(u64::MAX)), now_ms)) } }
            }
        }
    }
}

/// A failure policy in words.
fn policy_text(p: dq_core::FailurePolicy) -> &'static str {
    match p {
        dq_core::FailurePolicy::FailFast => "fail fast (complete at the first member that fails)",
        dq_core::FailurePolicy::Ignore => "ignore failures (complete once every member has ended)",
        _ => "wait for all (complete once every member has ended)",
    }
}

/// `/batches/{id}`: one batch, its counts by state and its members of one state.
pub(super) async fn batch_page(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    Query(q): Query<BatchQuery>,
) -> PageResult {
    let admin = shared.client.admin();
    let info = shared.client.batch(&id)?.info().await?.ok_or_else(|| {
        not_found(format!(
            "no batch {id:?} (never opened, or kept past its retention)"
        ))
    })?;
    let state = match q.state.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(name) => Some(
            MemberState::ALL
                .into_iter()
                .find(|s| s.name() == name)
                .ok_or_else(|| {
                    PageError(StatusCode::BAD_REQUEST, format!("no member state {name:?}"))
                })?,
        ),
    };
    let cursor = q.after.unwrap_or(0);
    let page = admin.batch_members(&id, state, cursor, PAGE).await?;
    let follow_up = admin.batch_follow_up(&info).await?;
    let now_ms = shared.client.store().now_ms().await?;
    let base = batch_link(&shared, &id);
    let listed = state.map_or("every", MemberState::name);
    let body = html! {
        h1 { "Batch " code { (id) } }
        (summary(&shared, &info, follow_up.as_ref(), now_ms))
        h2 { "Members " small.muted { (info.counts.total()) } }
        table.stats #counts {
            thead { tr { th { "State" } th.n { "Members" } } }
            tbody {
                @for s in MemberState::ALL {
                    @let n = info.counts.get(s);
                    tr data-state=(s.name()) {
                        td { a href={(base) "?state=" (s.name())} { (s.name()) } }
                        td.n.dead[s.is_failure() && n > 0] data-field="count" { (n) }
                    }
                }
            }
            tfoot { tr { th { a href=(base) { "every state" } } td.n { (info.counts.total()) } } }
        }
        nav.tabs {
            a.current[state.is_none()] href=(base) { "every state" }
            @for s in MemberState::ALL {
                @let n = info.counts.get(s);
                @if n > 0 || state == Some(s) {
                    a.current[state == Some(s)] href={(base) "?state=" (s.name())} { (s.name()) " " span.count { (n) } }
                }
            }
        }
        table.jobs #members data-state=(listed) {
            thead { tr { th { "Topic" } th { "Key" } th { "State" } } }
            tbody {
                @for (m, s) in &page.members {
                    tr data-member=(m.wire()) {
                        td { a href=(topic_link(&shared, m.topic.as_str())) { (m.topic) } }
                        td { a href=(job_link(&shared, m.topic.as_str(), m.key.as_str())) { code { (m.key) } } }
                        td data-field="state" { span class={"state " (s.name())} { (s.name()) } }
                    }
                }
                @if page.members.is_empty() { tr { td.muted colspan="3" { "No " (listed) " members on this page." } } }
            }
        }
        p.pager {
            @if after_given(q.after.map(|a| a.to_string()).as_deref()) {
                a href={(base) (state.map_or(String::new(), |s| format!("?state={}", s.name())))} { "« first page" } " "
            }
            @if let Some(next) = page.next {
                a #next-page href={(base) "?after=" (next) (state.map_or(String::new(), |s| format!("&state={}", s.name())))} { "next page »" }
            }
        }
        p.muted { "A member's finished job is kept only if its topic keeps finished jobs: its link may find nothing once it ran." }
    };
    let crumbs = html! {
        a href=(shared.home()) { "Topics" } " / " a href=(shared.link("/batches")) { "Batches" } " / " span { (id) }
    };
    Ok(layout(
        &shared,
        &format!("Batch {id}"),
        q.after.is_none(),
        crumbs,
        body,
    ))
}
