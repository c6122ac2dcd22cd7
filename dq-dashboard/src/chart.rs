//! Line charts of the sampled history as inline SVG: no script, no image files.
//!
//! Two series with equal values must both stay visible (ready = 2 must not hide under
//! dead = 2): each series is drawn with its own dash pattern, shifted a little up or down
//! from the others (`OFFSET` pixels apart, the legend giving the exact values), and marked
//! at its latest point.

use std::time::{Duration, Instant};

use maud::{Markup, html};

use crate::history::{Sample, WINDOW};

/// One line of a chart.
pub(crate) struct Series {
    /// Its name in the legend.
    pub name: &'static str,
    /// Its colour (CSS).
    pub color: &'static str,
    /// Its points: (seconds before now, value).
    pub points: Vec<(f64, f64)>,
}

const W: f64 = 400.0;
const H: f64 = 150.0;
const PAD_L: f64 = 44.0;
const PAD_B: f64 = 18.0;
const PAD_T: f64 = 8.0;
/// Vertical distance between two series' lines, in pixels: equal values run side by side.
const OFFSET: f64 = 2.0;
/// Dash patterns, one per series in order (the first solid).
const DASHES: [&str; 5] = ["none", "7 3", "2 2", "9 3 2 3", "4 4"];

/// How far back a chart reaches: the age of the oldest sample, at least twenty sampling
/// intervals (a fresh dashboard draws lines across the chart, not a dot at its edge), at
/// most an hour.
pub(crate) fn span(samples: &[Sample], now: Instant, every: Duration) -> Duration {
    let oldest = samples
        .first()
        .map_or(Duration::ZERO, |s| now.saturating_duration_since(s.at));
    oldest.max(every * 20).min(WINDOW)
}

/// A chart of `series` over the last `span`, titled `title`, values shown with `unit`;
/// `name` tells it from the page's other charts (`data-chart`).
pub(crate) fn line_chart(
    name: &str,
    title: &str,
    unit: &str,
    span: Duration,
    series: &[Series],
) -> Markup {
    let max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0_f64, f64::max);
    let top = nice_ceiling(max);
    let label = |d: Duration| {
        let s = d.as_secs();
        if s >= 120 {
            format!("−{} min", s / 60)
        } else {
            format!("−{s} s")
        }
    };
    let (full, half) = (label(span), label(span / 2));
    let span = span.as_secs_f64().max(1.0);
    let x = |ago: f64| PAD_L + (W - PAD_L - 4.0) * (1.0 - (ago / span).clamp(0.0, 1.0));
    let y = |v: f64| PAD_T + (H - PAD_T - PAD_B) * (1.0 - v / top);
    html! {
        figure.chart data-chart=(name) {
            figcaption { (title) }
            svg viewBox={"0 0 " (W) " " (H)} width=(W) height=(H) role="img" aria-label=(title) {
                @for frac in [0.0, 0.5, 1.0] {
                    line x1=(PAD_L) x2=(W - 4.0) y1=(y(top * frac)) y2=(y(top * frac)) stroke="#e3e6ea" {}
                    text x=(PAD_L - 4.0) y=(y(top * frac) + 4.0) text-anchor="end" font-size="10" fill="#667" {
                        (format_value(top * frac)) (unit)
                    }
                }
                text x=(PAD_L) y=(H - 4.0) font-size="10" fill="#667" { (full) }
                text x=(x(span / 2.0)) y=(H - 4.0) font-size="10" fill="#667" text-anchor="middle" { (half) }
                text x=(W - 4.0) y=(H - 4.0) font-size="10" fill="#667" text-anchor="end" { "now" }
                @for (i, s) in series.iter().enumerate() {
                    @let shift = (i as f64 - (series.len() as f64 - 1.0) / 2.0) * OFFSET;
                    @let dash = DASHES[i % DASHES.len()];
                    @if s.points.len() > 1 {
                        polyline data-series=(s.name) fill="none" stroke=(s.color) stroke-width="1.8" stroke-dasharray=(dash) points=(
                            s.points.iter().map(|&(ago, v)| format!("{:.1},{:.1}", x(ago), y(v) + shift)).collect::<Vec<_>>().join(" ")
                        ) {}
                    }
                    @if let Some(&(ago, v)) = s.points.last() {
                        circle.marker data-series=(s.name) cx=(x(ago)) cy=(y(v) + shift) r="2.8" fill=(s.color) {}
                    }
                }
            }
            div.legend {
                @for s in series {
                    span data-series=(s.name) {
                        i style={"background:" (s.color)} {} (s.name)
                        @if let Some(&(_, v)) = s.points.last() { " " b { (format_value(v)) (unit) } }
                    }
                }
                @if series.iter().all(|s| s.points.is_empty()) {
                    span.muted { "collecting samples…" }
                }
            }
        }
    }
}

/// The depths of `topic` (or all topics) over the sampled hour.
pub(crate) fn depth_series(samples: &[Sample], now: Instant, topic: Option<&str>) -> Vec<Series> {
    let pts = |f: fn(&dq_core::TopicStats) -> u64| {
        samples
            .iter()
            .map(|s| (ago(now, s), f(&s.of(topic)) as f64))
            .collect()
    };
    vec![
        Series {
            name: "scheduled",
            color: "#7a8ca3",
            points: pts(|s| s.scheduled),
        },
        Series {
            name: "ready",
            color: "#2f7ed8",
            points: pts(|s| s.ready),
        },
        Series {
            name: "active",
            color: "#1aa260",
            points: pts(|s| s.active),
        },
        Series {
            name: "retry",
            color: "#e69a00",
            points: pts(|s| s.retry),
        },
        Series {
            name: "dead",
            color: "#d23f31",
            points: pts(|s| s.dead),
        },
    ]
}

/// Jobs per minute (succeeded, failed attempts) between consecutive samples.
pub(crate) fn throughput_series(
    samples: &[Sample],
    now: Instant,
    topic: Option<&str>,
) -> Vec<Series> {
    let mut ok = Vec::new();
    let mut failed = Vec::new();
    for pair in samples.windows(2) {
        let secs = pair[1].at.duration_since(pair[0].at).as_secs_f64();
        if secs <= 0.0 {
            continue;
        }
        let (a, b) = (pair[0].of(topic), pair[1].of(topic));
        let at = ago(now, &pair[1]);
        ok.push((
            at,
            b.succeeded.saturating_sub(a.succeeded) as f64 * 60.0 / secs,
        ));
        let fa = a.retried + a.buried;
        let fb = b.retried + b.buried;
        failed.push((at, fb.saturating_sub(fa) as f64 * 60.0 / secs));
    }
    vec![
        Series {
            name: "succeeded / min",
            color: "#1aa260",
            points: ok,
        },
        Series {
            name: "failed / min",
            color: "#d23f31",
            points: failed,
        },
    ]
}

/// The oldest overdue job's wait, in seconds.
pub(crate) fn lateness_series(
    samples: &[Sample],
    now: Instant,
    topic: Option<&str>,
) -> Vec<Series> {
    vec![Series {
        name: "oldest overdue",
        color: "#8e44ad",
        points: samples
            .iter()
            .map(|s| (ago(now, s), s.of(topic).oldest_overdue_ms as f64 / 1000.0))
            .collect(),
    }]
}

fn ago(now: Instant, s: &Sample) -> f64 {
    now.saturating_duration_since(s.at).as_secs_f64()
}

/// The smallest of 1, 2, 5 × 10ⁿ at or above `v` (at least 1).
fn nice_ceiling(v: f64) -> f64 {
    if v <= 1.0 {
        return 1.0;
    }
    let exp = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * exp)
        .find(|c| *c >= v)
        .unwrap_or(10.0 * exp)
}

fn format_value(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}
