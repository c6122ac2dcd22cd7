//! `/topics/{topic}/events`: the topic's recent events (newest first, from its event stream:
//! `TopicClient::recent_events`), refreshed like the other pages; and the events block of a
//! job page (`TopicClient::job_events`).

use std::sync::Arc;

use axum::extract::{Path, State};
use dq_core::Event;
use maud::{Markup, html};

use super::layout::{PageResult, job_link, layout, topic_link, topic_of, when};
use crate::state::Shared;

/// Events shown on a topic's events page.
const SHOWN: usize = 200;

/// `/topics/{topic}/events`: the last events of every partition, newest first.
pub(super) async fn events_page(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
) -> PageResult {
    let (_, tc) = topic_of(&shared, &name).await?;
    let recording = tc.control().await?.events;
    let events = tc.recent_events(SHOWN).await?;
    let now_ms = shared.client.store().now_ms().await?;
    let body = html! {
        h1 { "Events of " (name) }
        @match recording {
            Some(p) => p.muted #recording { "Recording: the last " (p.max_kept) " events are kept. Newest first; this page refreshes itself." },
            None => p.muted #recording { "This topic records no events: turn them on with #[delayed_job(events)], TopicClient::set_events or dq limits " (name) " --events on." },
        }
        (events_table(&shared, &name, &events, now_ms, true))
    };
    let crumbs = html! {
        a href=(shared.home()) { "Topics" } " / " a href=(topic_link(&shared, &name)) { (name) } " / " span { "events" }
    };
    Ok(layout(
        &shared,
        &format!("{name} / events"),
        true,
        crumbs,
        body,
    ))
}

/// A table of events; `with_key` adds the job's key (linked to its page).
pub(super) fn events_table(
    shared: &Shared,
    topic: &str,
    events: &[Event],
    now_ms: u64,
    with_key: bool,
) -> Markup {
    html! {
        @if events.is_empty() {
            p.muted #no-events { "No event recorded." }
        } @else {
            table.jobs #events {
                thead { tr {
                    th { "When" } th { "Event" }
                    @if with_key { th { "Job" } }
                    th.n { "Attempt" } th { "Worker / next due" } th { "Error" }
                } }
                tbody {
                    @for e in events {
                        tr data-event=(e.kind.as_str()) {
                            td { (when(e.at_ms, now_ms)) }
                            td { span class={"state " (e.kind.as_str())} { (e.kind.as_str()) } }
                            @if with_key { td { a href=(job_link(shared, topic, &e.key)) { code { (e.key) } } } }
                            td.n { @if let Some(a) = e.attempt { (a) } }
                            td {
                                @if let Some(w) = &e.worker { (w) }
                                @if let Some(d) = e.due_ms { (when(d, now_ms)) }
                            }
                            td.err { @if let Some(err) = &e.error { (err) } }
                        }
                    }
                }
            }
        }
    }
}
