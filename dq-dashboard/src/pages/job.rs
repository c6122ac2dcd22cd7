//! `/topics/{topic}/jobs/{key}`: one job's state, times, attempts, progress and payload (or a
//! finished job's outcome, times, worker and result, when its topic keeps it).

use std::sync::Arc;

use axum::extract::{Path, State};
use dq_core::{FinishedJob, JobState, StoredResult};
use maud::html;

use super::layout::{
    PageResult, batch_link, csrf_field, dead_link, layout, not_found, topic_link, topic_of, when,
};
use crate::state::Shared;

/// MessagePack bytes as pretty JSON, or a note and their start in hex.
fn pretty_msgpack(bytes: &[u8]) -> String {
    match rmp_serde::from_slice::<serde_json::Value>(dq_core::trace::split(bytes).1) {
        Ok(v) => serde_json::to_string_pretty(&v).unwrap_or_default(),
        Err(e) => format!(
            "(not decodable as MessagePack: {e})\n{}",
            bytes
                .iter()
                .take(512)
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        ),
    }
}

/// A job's failed attempts, oldest first.
fn history_block(history: &[dq_core::AttemptRecord], now_ms: u64) -> maud::Markup {
    html! {
        h2 { "Attempts" }
        @if history.is_empty() { p.muted { "No failed attempt recorded." } } @else {
            table.jobs #history {
                thead { tr { th.n { "#" } th { "Ended" } th { "Outcome" } th { "Error" } } }
                tbody {
                    @for a in history {
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
    }
}

/// A job's progress and log lines, if it reported any.
fn progress_block(p: Option<&dq_core::JobProgress>, now_ms: u64) -> maud::Markup {
    html! {
        @if let Some(p) = p {
            h2 { "Progress" }
            @if let Some(v) = &p.value { pre.payload #progress { (pretty_msgpack(v)) } }
            @if !p.log.is_empty() {
                @if p.dropped_lines > 0 { p.muted { (p.dropped_lines) " earlier lines dropped" } }
                table.jobs #log {
                    thead { tr { th { "At" } th { "Line" } } }
                    tbody { @for l in &p.log { tr { td { (when(l.at_ms, now_ms)) } td { (l.text) } } } }
                }
            }
        }
    }
}

/// A job's recent events (from its topic's event stream), when it has any.
fn events_block(
    shared: &Shared,
    topic: &str,
    events: &[dq_core::Event],
    now_ms: u64,
) -> maud::Markup {
    html! {
        @if !events.is_empty() {
            h2 { "Events" }
            (super::events::events_table(shared, topic, events, now_ms, false))
        }
    }
}

/// A finished job its topic keeps: outcome, times, worker, result, attempts and payload.
async fn finished_page(
    shared: &Arc<Shared>,
    name: &str,
    key: &str,
    job: &FinishedJob,
    job_events: &[dq_core::Event],
) -> PageResult {
    let now_ms = shared.client.store().now_ms().await?;
    let result = match &job.result {
        StoredResult::None => None,
        StoredResult::Value(v) => Some(pretty_msgpack(v)),
        StoredResult::NotStored(why) => Some(format!("(not stored: {why})")),
    };
    let body = html! {
        h1 { "Job " code { (key) } }
        table.kv #job {
            tr { th { "Topic" } td { a href=(topic_link(shared, name)) { (name) } } }
            tr { th { "State" } td data-field="state" { span class={"state " (job.outcome.as_str())} { (job.outcome.as_str()) } " (kept until " (when(job.kept_until_ms, now_ms)) ")" } }
            tr { th { "Due" } td { (when(job.due_ms, now_ms)) } }
            tr { th { "Enqueued" } td { (when(job.created_ms, now_ms)) } }
            @if let Some(s) = job.started_ms { tr { th { "Started" } td { (when(s, now_ms)) } } }
            tr { th { "Finished" } td data-field="finished" { (when(job.finished_ms, now_ms)) } }
            @if let Some(d) = job.run_time() { tr { th { "Run time" } td { (d.as_millis()) " ms" } } }
            tr { th { "Attempts" } td data-field="attempts" { (job.attempts) } }
            (callback_row(shared, key))
            @if let Some(w) = &job.worker { tr { th { "Worker" } td data-field="worker" { code { (w) } } } }
        }
        @if let Some(result) = &result {
            h2 { "Result" }
            pre.payload #result { (result) }
        }
        (progress_block(job.progress.as_ref(), now_ms))
        (history_block(&job.history, now_ms))
        (events_block(shared, name, job_events, now_ms))
        h2 { "Payload" }
        pre.payload { (pretty_msgpack(&job.payload)) }
    };
    let crumbs = html! {
        a href=(shared.home()) { "Topics" } " / " a href=(topic_link(shared, name)) { (name) } " / " span { (key) }
    };
    Ok(layout(
        shared,
        &format!("{name} / {key}"),
        false,
        crumbs,
        body,
    ))
}

/// `/topics/{topic}/jobs/{key}`: one job's state, times, attempts and payload.
pub(super) async fn job_page(
    State(shared): State<Arc<Shared>>,
    Path((name, key)): Path<(String, String)>,
) -> PageResult {
    let (meta, tc) = topic_of(&shared, &name).await?;
    let Some(job) = tc.job(&key).await? else {
        let kept = tc
            .finished(&key)
            .await?
            .ok_or_else(|| not_found(format!("no job {key:?} in topic {name:?}")))?;
        let job_events = tc.job_events(&key).await?;
        return finished_page(&shared, &name, &key, &kept, &job_events).await;
    };
    let now_ms = shared.client.store().now_ms().await?;
    let job_events = tc.job_events(&key).await?;
    let payload = pretty_msgpack(&job.payload);
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
            tr { th { "Priority" } td data-field="priority" data-priority=(job.priority.level()) { (priority_text(job.priority)) } }
            @if let Some(g) = &job.group { tr { th { "Group" } td data-field="group" { code { (g) } } } }
            @if let Some(b) = &job.batch { tr { th { "Batch" } td data-field="batch" { a href=(batch_link(&shared, b.as_str())) { code { (b) } } } } }
            (callback_row(&shared, &key))
            @if let Some(d) = job.lease_deadline_ms { tr { th { "Lease until" } td { (when(d, now_ms)) } } }
            @if let Some(d) = job.died_ms { tr { th { "Died" } td { (when(d, now_ms)) } } }
            @if let Some(e) = job.expires_ms { tr { th { "Expires" } td { (when(e, now_ms)) " unless started" } } }
        }
        @if rw && job.state == JobState::Dead {
            form.job-actions method="post" action=(dead_link(&shared, &name)) {
                (csrf_field(&shared))
                input type="hidden" name="back" value=(key);
                button name="requeue" value=(key) { "Requeue" }
                button.danger name="purge" value=(key) { "Purge" }
            }
        }
        (progress_block(job.progress.as_ref(), now_ms))
        (history_block(&job.history, now_ms))
        (events_block(&shared, &name, &job_events, now_ms))
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

/// For a batch's callback (its key `batch:<id>`): a row linking to its batch.
fn callback_row(shared: &Shared, key: &str) -> maud::Markup {
    html! {
        @if let Some(id) = dq_core::BatchId::from_callback_key(key) {
            tr { th { "Callback of" } td data-field="callback-of" { "batch " a href=(batch_link(shared, id.as_str())) { code { (id) } } } }
        }
    }
}

/// A priority in words: `5 (normal)`, `8 (above normal: leased first)`, `2 (below normal)`.
pub(super) fn priority_text(p: dq_core::Priority) -> String {
    let word = match p.cmp(&dq_core::Priority::NORMAL) {
        std::cmp::Ordering::Less => "below normal",
        std::cmp::Ordering::Equal => "normal",
        std::cmp::Ordering::Greater => "above normal",
    };
    format!("{} ({word})", p.level())
}
