//! `/`: every topic's depths, rates, throttles and lateness, the charts of all topics, and
//! the live workers.

use std::sync::{Arc, PoisonError};
use std::time::UNIX_EPOCH;

use axum::extract::State;
use dq_core::TopicStats;
use maud::{Markup, html};

use super::layout::{PageResult, charts, layout, rate, short, topic_link, when};
use crate::state::Shared;

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
pub(super) async fn overview(State(shared): State<Arc<Shared>>) -> PageResult {
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
