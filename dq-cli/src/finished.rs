//! `dq list` (a page of one state, or of the finished jobs a topic keeps), the kept run that
//! `dq job` shows, and the retention flags of `dq limits`.

use std::fmt::Write as _;
use std::time::Duration;

use dq_core::{
    Cursor, FinishedAs, FinishedJob, JobPage, JobState, Page, Retention, StoredResult, TopicClient,
};
use serde::Serialize;

use crate::cli::{LimitsArgs, ListArgs};
use crate::fail::{Exit, Failure, Outcome};
use crate::formats::Printed;
use crate::view::{
    AttemptOut, JobOut, ProgressOut, attempts_out, millis, payload_json, relative, rfc3339,
};

/// A kept (finished) job, as `dq job` and `dq list` print it.
#[derive(Serialize)]
pub struct FinishedOut {
    /// Its topic.
    pub topic: String,
    /// Its key.
    pub key: String,
    /// succeeded, cancelled or expired.
    pub outcome: String,
    /// When it was due.
    pub due: String,
    /// When it was enqueued.
    pub created: String,
    /// When its successful run began.
    pub started: Option<String>,
    /// When it ended.
    pub finished: String,
    /// How long its successful run took, in ms.
    pub run_ms: Option<u64>,
    /// When the topic lets it go.
    pub kept_until: String,
    /// Attempts started.
    pub attempts: u32,
    /// The worker that ran it to success.
    pub worker: Option<String>,
    /// The handler's value, decoded from MessagePack (`null`: none).
    pub result: Option<serde_json::Value>,
    /// Why the handler's value was not stored, if it was not.
    pub result_not_stored: Option<String>,
    /// Its failed attempts, oldest first.
    pub history: Vec<AttemptOut>,
    /// What its last run reported.
    pub progress: Option<crate::view::ProgressOut>,
    /// The payload decoded from MessagePack, or `null` if it does not decode.
    pub payload: Option<serde_json::Value>,
}

impl FinishedOut {
    /// The view of `job`.
    pub fn new(topic: &str, job: &FinishedJob) -> FinishedOut {
        let decode = |bytes: &[u8]| rmp_serde::from_slice::<serde_json::Value>(bytes).ok();
        let (result, result_not_stored) = match &job.result {
            StoredResult::None => (None, None),
            StoredResult::Value(v) => (decode(v), None),
            StoredResult::NotStored(why) => (None, Some(why.clone())),
        };
        FinishedOut {
            topic: topic.to_owned(),
            key: job.key.to_string(),
            outcome: job.outcome.to_string(),
            due: rfc3339(job.due_ms),
            created: rfc3339(job.created_ms),
            started: job.started_ms.map(rfc3339),
            finished: rfc3339(job.finished_ms),
            run_ms: job.run_time().map(|d| d.as_millis() as u64),
            kept_until: rfc3339(job.kept_until_ms),
            attempts: job.attempts,
            worker: job.worker.clone(),
            result,
            result_not_stored,
            history: attempts_out(&job.history),
            progress: job.progress.as_ref().map(ProgressOut::new),
            payload: payload_json(&job.payload).ok(),
        }
    }
}

/// A kept job in full, as text.
pub fn finished_detail(j: &FinishedOut, job: &FinishedJob, now_ms: u64) -> String {
    let mut out = format!(
        "topic     {}\nkey       {}\nstate     {} (kept until {}, {})\ndue       {}\ncreated   {}\n",
        j.topic,
        j.key,
        j.outcome,
        j.kept_until,
        relative(job.kept_until_ms, now_ms),
        j.due,
        j.created,
    );
    if let Some(started) = &j.started {
        let _ = writeln!(out, "started   {started}");
    }
    let _ = writeln!(
        out,
        "finished  {} ({})",
        j.finished,
        relative(job.finished_ms, now_ms)
    );
    if let Some(ms) = j.run_ms {
        let _ = writeln!(out, "ran       {}", millis(ms));
    }
    let _ = writeln!(out, "attempts  {}", j.attempts);
    if let Some(w) = &j.worker {
        let _ = writeln!(out, "worker    {w}");
    }
    match (&j.result, &j.result_not_stored) {
        (Some(v), _) => {
            let pretty = serde_json::to_string_pretty(v).unwrap_or_default();
            let _ = writeln!(out, "result    {pretty}");
        }
        (None, Some(why)) => {
            let _ = writeln!(out, "result    not stored: {why}");
        }
        (None, None) => {}
    }
    if !j.history.is_empty() {
        out.push_str("errors\n");
        for a in &j.history {
            let _ = writeln!(out, "  #{} {} {}: {}", a.attempt, a.at, a.outcome, a.error);
        }
    }
    if let Some(p) = &j.progress {
        out.push_str(&crate::view::progress_text(p));
    }
    if let Some(v) = &j.payload {
        let pretty = serde_json::to_string_pretty(v).unwrap_or_default();
        let _ = writeln!(out, "payload   {pretty}");
    }
    out
}

/// The state `dq list --state` names: a live state or a kept outcome.
enum Listing {
    Live(JobState),
    Kept(FinishedAs),
}

fn listing(state: &str) -> Outcome<Listing> {
    let live = [
        JobState::Scheduled,
        JobState::Ready,
        JobState::Active,
        JobState::Retry,
        JobState::Dead,
    ]
    .into_iter()
    .find(|s| s.as_str() == state);
    match (live, FinishedAs::parse(state)) {
        (Some(s), _) => Ok(Listing::Live(s)),
        (None, Some(o)) => Ok(Listing::Kept(o)),
        _ => Err(Failure::new(
            Exit::BadInput,
            format!(
                "--state {state:?}: one of scheduled, ready, active, retry, dead, succeeded, \
                 cancelled, expired"
            ),
        )),
    }
}

/// `dq list TOPIC --state STATE`: one page.
pub async fn list(t: &TopicClient, topic: &str, a: &ListArgs, now_ms: u64) -> Outcome<Printed> {
    let page = match &a.after {
        Some(c) => Page::after(c.parse::<Cursor>()?, a.limit),
        None => Page::first(a.limit),
    };
    let (lines, json_jobs, next) = match listing(&a.state)? {
        Listing::Live(state) => {
            let JobPage { jobs, next } = t.list(state, page).await?;
            let outs: Vec<JobOut> = jobs.iter().map(|j| JobOut::new(topic, j)).collect();
            let lines: Vec<String> = outs
                .iter()
                .zip(&jobs)
                .map(|(o, j)| {
                    let last = o.history.last().map_or("", |a| a.error.as_str());
                    format!(
                        "{}\tdue {}\tpriority {}\t{}\t{} attempts\t{}",
                        o.key,
                        relative(j.due_ms, now_ms),
                        o.priority,
                        o.group
                            .as_deref()
                            .map_or("no group".to_owned(), |g| format!("group {g}")),
                        o.attempts,
                        last.lines().next().unwrap_or("")
                    )
                })
                .collect();
            (lines, serde_json::to_value(&outs)?, next)
        }
        Listing::Kept(outcome) => {
            let JobPage { jobs, next } = t.list_finished(outcome, page).await?;
            let outs: Vec<FinishedOut> = jobs.iter().map(|j| FinishedOut::new(topic, j)).collect();
            let lines: Vec<String> = outs
                .iter()
                .zip(&jobs)
                .map(|(o, j)| {
                    format!(
                        "{}\tfinished {}\t{} attempts\t{}",
                        o.key,
                        relative(j.finished_ms, now_ms),
                        o.attempts,
                        o.run_ms
                            .map_or(String::new(), |ms| format!("ran {}", millis(ms)))
                    )
                })
                .collect();
            (lines, serde_json::to_value(&outs)?, next)
        }
    };
    let next = next.map(|c| c.to_string());
    if a.json {
        return Ok(Printed::Json(
            serde_json::json!({"jobs": json_jobs, "next": next}),
        ));
    }
    if lines.is_empty() {
        return Ok(Printed::Note(format!(
            "no {} jobs in topic {topic:?}",
            a.state
        )));
    }
    let mut text = lines.join("\n");
    text.push('\n');
    if let Some(next) = next {
        let _ = writeln!(text, "more: --after {next}");
    }
    Ok(Printed::Text(text))
}

/// The retention `dq limits` sets from its `--keep-*` flags over the topic's current one, or
/// `None` when no such flag was given; `Some(None)` removes it (`--keep-none`).
pub fn retention_change(
    a: &LimitsArgs,
    current: Option<Retention>,
) -> Outcome<Option<Option<Retention>>> {
    if a.keep_none {
        return Ok(Some(None));
    }
    if a.keep_succeeded.is_none()
        && a.keep_cancelled.is_none()
        && a.keep_expired.is_none()
        && a.keep_max.is_none()
    {
        return Ok(None);
    }
    let mut r = current.unwrap_or_default();
    let set = |d: Option<Duration>, slot: &mut Option<Duration>| {
        if let Some(d) = d {
            *slot = (!d.is_zero()).then_some(d);
        }
    };
    set(a.keep_succeeded, &mut r.succeeded);
    set(a.keep_cancelled, &mut r.cancelled);
    set(a.keep_expired, &mut r.expired);
    if let Some(n) = a.keep_max {
        r.max_kept = n;
    }
    r.check()
        .map_err(|e| Failure::new(Exit::BadInput, e.to_string()))?;
    Ok(Some(Some(r)))
}

/// The retention as `dq limits` prints it.
pub fn retention_text(r: Option<Retention>) -> String {
    let Some(r) = r else {
        return "none (finished jobs are deleted)".into();
    };
    let one = |d: Option<Duration>| d.map_or("no".to_owned(), |d| millis(d.as_millis() as u64));
    format!(
        "succeeded {}, cancelled {}, expired {}, at most {}",
        one(r.succeeded),
        one(r.cancelled),
        one(r.expired),
        r.max_kept
    )
}
