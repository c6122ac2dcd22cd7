//! What every page shares: the frame around it (errors and 404s included), links, times and rates
//! as shown, the charts, and the cursor and CSRF fields of forms.

use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use axum::extract::{Request, State};
use axum::http::{StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use dq_core::{Cursor, TopicClient, TopicMeta};
use maud::{DOCTYPE, Markup, PreEscaped, html};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};

use super::style::CSS;
use crate::chart;
use crate::state::Shared;

/// Jobs per page of a listing.
pub(super) const PAGE: usize = 50;

/// A page that could not be shown.
pub(super) struct PageError(pub(super) StatusCode, pub(super) String);

impl From<dq_core::Error> for PageError {
    fn from(e: dq_core::Error) -> Self {
        use dq_core::Error as E;
        match e {
            E::InvalidKey { .. }
            | E::InvalidTopic { .. }
            | E::InvalidConfig(_)
            | E::InvalidBatch { .. } => PageError(StatusCode::BAD_REQUEST, e.to_string()),
            E::BatchNotFound(_) => PageError(StatusCode::NOT_FOUND, e.to_string()),
            e => {
                tracing::warn!(error = %e, "dq dashboard: store call failed");
                PageError(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
            }
        }
    }
}

impl IntoResponse for PageError {
    /// A bare response carrying the error; [`frame_errors`] puts it in the page frame (it
    /// holds what the frame needs: the mount path, the read-only flag).
    fn into_response(self) -> Response {
        let mut response = (self.0, self.1.clone()).into_response();
        response.extensions_mut().insert(Unframed(self.1));
        response
    }
}

/// The message of an error response that still needs the page frame.
#[derive(Clone)]
struct Unframed(String);

/// Every response: an error a page returned is shown inside the frame, with the header and
/// a link back to the overview, its status kept.
pub(super) async fn frame_errors(
    State(shared): State<Arc<Shared>>,
    request: Request,
    next: Next,
) -> Response {
    let response = next.run(request).await;
    let Some(Unframed(why)) = response.extensions().get::<Unframed>().cloned() else {
        return response;
    };
    let status = response.status();
    let reason = status.canonical_reason().unwrap_or("");
    let body = html! {
        h1 { (status.as_u16()) " " (reason) }
        p.error #error { (why) }
        p { a #back href=(shared.home()) { "« Back to the topics" } }
    };
    let mut framed = layout(
        &shared,
        reason,
        false,
        html! { a href=(shared.home()) { "Topics" } " / " span { (reason) } },
        body,
    );
    *framed.status_mut() = status;
    framed
}

/// Any path the dashboard has no page for: 404 in the page frame.
pub(super) async fn no_such_page(uri: Uri) -> PageError {
    not_found(format!("no page at {}", uri.path()))
}

pub(super) type PageResult = Result<Response, PageError>;

pub(super) fn not_found(what: String) -> PageError {
    PageError(StatusCode::NOT_FOUND, what)
}

/// A registered topic, or 404.
pub(super) async fn topic_of(
    shared: &Shared,
    name: &str,
) -> Result<(TopicMeta, TopicClient), PageError> {
    shared
        .find_topic(name)
        .await?
        .ok_or_else(|| not_found(format!("no topic {name:?} in the topic registry")))
}

pub(super) fn enc(s: &str) -> String {
    utf8_percent_encode(s, NON_ALPHANUMERIC).to_string()
}

pub(super) fn topic_link(shared: &Shared, topic: &str) -> String {
    shared.link(&format!("/topics/{}", enc(topic)))
}

pub(super) fn dead_link(shared: &Shared, topic: &str) -> String {
    shared.link(&format!("/topics/{}/dead", enc(topic)))
}

pub(super) fn job_link(shared: &Shared, topic: &str, key: &str) -> String {
    shared.link(&format!("/topics/{}/jobs/{}", enc(topic), enc(key)))
}

pub(super) fn batch_link(shared: &Shared, id: &str) -> String {
    shared.link(&format!("/batches/{}", enc(id)))
}

/// The frame around every page.
pub(super) fn layout(
    shared: &Shared,
    title: &str,
    refresh: bool,
    crumbs: Markup,
    body: Markup,
) -> Response {
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
                    nav.links {
                        a #batches-link href=(shared.link("/batches")) { "Batches" } " "
                        a #schedules-link href=(shared.link("/schedules")) { "Schedules" }
                    }
                    @if shared.opts.read_only { span.badge { "read-only" } }
                }
                main { (body) }
            }
        }
    }
    .into_response()
}

/// A time relative to `now_ms` ("in 4m 10s", "3s ago"), the exact time on hover.
pub(super) fn when(ms: u64, now_ms: u64) -> Markup {
    let exact = humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(ms));
    let rel = if ms >= now_ms {
        format!("in {}", short(ms - now_ms))
    } else {
        format!("{} ago", short(now_ms - ms))
    };
    html! { time datetime=(exact.to_string()) title=(exact.to_string()) { (rel) } }
}

/// A duration in ms, roughly: "850ms", "12s", "4m 10s", "3h 2m", "2d 4h".
pub(super) fn short(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0 => format!("{ms}ms"),
        1..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86400, s % 86400 / 3600),
    }
}

pub(super) fn rate(r: Option<f64>) -> String {
    r.map_or_else(|| "–".to_owned(), |r| format!("{r:.1}"))
}

/// The three charts of `topic` (or all topics) over the sampled hour.
pub(super) fn charts(
    shared: &Shared,
    samples: &[crate::history::Sample],
    topic: Option<&str>,
) -> Markup {
    let now = Instant::now();
    let span = chart::span(samples, now, shared.opts.sample_every);
    html! {
        section.charts {
            (chart::line_chart("throughput", "Throughput (jobs / min)", "", span, &chart::throughput_series(samples, now, topic)))
            (chart::line_chart("depth", "Depth by state", "", span, &chart::depth_series(samples, now, topic)))
            (chart::line_chart("lateness", "Lateness: oldest overdue", "s", span, &chart::lateness_series(samples, now, topic)))
        }
    }
}

pub(super) fn parse_cursor(after: Option<&str>) -> Result<Option<Cursor>, PageError> {
    after
        .filter(|a| !a.is_empty())
        .map(str::parse::<Cursor>)
        .transpose()
        .map_err(PageError::from)
}

pub(super) fn after_given(after: Option<&str>) -> bool {
    after.is_some_and(|a| !a.is_empty())
}

pub(super) fn csrf_field(shared: &Shared) -> Markup {
    html! { input type="hidden" name="csrf" value=(shared.csrf); }
}
