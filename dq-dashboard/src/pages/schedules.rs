//! `/schedules`: every periodic schedule in the store — its name, topic, when it ticks, its
//! next tick and the tick before it — read through `Client::schedules`.

use std::sync::Arc;

use axum::extract::State;
use dq_core::ScheduleInfo;
use maud::{Markup, html};

use super::layout::{PageResult, layout, topic_link, when};
use crate::state::Shared;

/// `/schedules`: the stored schedules, by name.
pub(super) async fn schedules_page(State(shared): State<Arc<Shared>>) -> PageResult {
    let schedules = shared.client.schedules().await?;
    let now_ms = shared.client.store().now_ms().await?;
    let body = html! {
        h1 { "Schedules " small.muted { (schedules.len()) } }
        @if schedules.is_empty() {
            p.muted { "No schedule in the store: declare one with Client::schedule (a worker runs it)." }
        } @else {
            table.stats #schedules {
                thead { tr {
                    th { "Name" } th { "Topic" } th { "Ticks" } th { "Missed ticks" }
                    th { "Next tick" }
                    th title="The tick before the next one: the scheduler enqueued it, unless the schedule was created or changed after it" { "Last tick" }
                } }
                tbody {
                    @for s in &schedules {
                        tr data-schedule=(s.name) {
                            td { code { (s.name) } }
                            td { a href=(topic_link(&shared, &s.topic)) { (s.topic) } }
                            td data-field="ticks" { (ticks(s)) }
                            td { (s.schedule.missed_policy().as_str()) }
                            td data-field="next" { @if let Some(next) = s.next_ms { (when(next, now_ms)) } @else { "never" } }
                            td data-field="last" { @if let Some(last) = last_tick(s) { (when(last, now_ms)) } @else { "–" } }
                        }
                    }
                }
            }
        }
    };
    Ok(layout(
        &shared,
        "Schedules",
        true,
        html! { a href=(shared.home()) { "Topics" } " / " span { "Schedules" } },
        body,
    ))
}

/// When a schedule ticks: its cron expression (and zone), or its interval.
fn ticks(s: &ScheduleInfo) -> Markup {
    html! {
        @if let Some(expr) = s.schedule.cron_expr() {
            "cron " code { (expr) }
            " " span.muted { (s.schedule.time_zone().unwrap_or("UTC")) }
        } @else if let Some(every) = s.schedule.interval() {
            "every " (humantime::format_duration(every))
        }
    }
}

/// The tick before the schedule's next one (the cursor): the last one the scheduler
/// enqueued, unless the schedule was created or changed after it.
fn last_tick(s: &ScheduleInfo) -> Option<u64> {
    s.schedule.last_at_or_before(s.next_ms?.saturating_sub(1))
}
