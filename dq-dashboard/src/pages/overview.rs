//! `/`: every topic's depths, rates, throttles and lateness, whether it is paused, throttled
//! or limited, the charts of all topics, and the live workers.

use std::sync::{Arc, PoisonError};
use std::time::UNIX_EPOCH;

use axum::extract::State;
use dq_core::{TopicControl, TopicStats};
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

/// `/`: every topic's depths, rates and lateness, its pause and limits, and the charts of
/// all topics.
pub(super) async fn overview(State(shared): State<Arc<Shared>>) -> PageResult {
    let rows = shared.client.admin().stats().await?;
    let mut controls = Vec::with_capacity(rows.len());
    for (meta, _) in &rows {
        controls.push(shared.client.admin().topic(meta).control().await?);
    }
    let now_ms = shared.client.store().now_ms().await?;
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
                    th title="Paused, throttled, and the limits set with `dq limits` or TopicClient::set_rate / set_concurrency" { "Leasing" }
                } }
                tbody {
                    @for (((meta, s), r), control) in rows.iter().zip(&rates.0).zip(&controls) {
                        tr data-topic=(meta.topic.as_ref()) {
                            td { a href=(topic_link(&shared, meta.topic.as_ref())) { (meta.topic.as_ref()) } }
                            td.n { (meta.partitions) }
                            (stat_cells(s))
                            td.n data-stat="succeeded_per_min" { (rate(r.map(|r| r.0))) }
                            td.n data-stat="failed_per_min" { (rate(r.map(|r| r.1))) }
                            td.n data-stat="throttles" { (s.throttles) }
                            (leasing_cell(s, control, now_ms))
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
                        td {}
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

/// Whether a topic's workers lease its jobs now, and under which limits: a badge for a
/// pause, one for a throttle (until when, if a handler asked for it), one per limit.
fn leasing_cell(s: &TopicStats, control: &TopicControl, now_ms: u64) -> Markup {
    let throttle_until = control.throttled_until_ms.filter(|&t| t > now_ms);
    html! {
        td.leasing data-stat="leasing" {
            @if control.paused || s.paused {
                span.flag.paused data-flag="paused" title="No worker leases this topic's jobs until it is resumed" { "paused" }
            }
            @if let Some(until) = throttle_until {
                span.flag.throttled data-flag="throttled" { "throttled until " (when(until, now_ms)) }
            } @else if s.throttled {
                span.flag.throttled data-flag="throttled" title="A rate or concurrency limit holds due jobs back" { "throttled" }
            }
            @if let Some(rate) = control.rate {
                span.flag.limit data-flag="rate" title="Rate limit: jobs started per period, across every worker" { "rate " (rate) }
            }
            @if let Some(cap) = control.concurrency {
                span.flag.limit data-flag="concurrency" title="Concurrency cap: jobs running at once, across every worker" { "concurrency " (cap) }
            }
            @if !(control.paused || s.paused || s.throttled || throttle_until.is_some() || control.rate.is_some() || control.concurrency.is_some()) {
                span.muted { "running" }
            }
        }
    }
}
