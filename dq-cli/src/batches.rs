//! `dq batches` and `dq batch`: the batches not done, one batch (its status, policy, what its
//! completion does and that job's state, its members by state, its times), its members with
//! their states, close and cancel — read and done through the operator API
//! (`dq_core::client::admin`: `Admin::batches`, `batch_members`, `batch_follow_up`) and the
//! batch's handle (`Client::batch`).

use std::fmt::Write as _;

use dq_core::client::admin::{BatchFollowUp, FollowUpJob};
use dq_core::{BatchCounts, BatchInfo, BatchStatus, Client, MemberState};
use serde::Serialize;

use crate::cli::{BatchArgs, BatchesArgs};
use crate::fail::{Exit, Failure, Outcome};
use crate::formats::{Printed, table};
use crate::view::{relative, rfc3339};

/// One batch of `dq batches`.
#[derive(Debug, Serialize)]
pub struct BatchRow {
    /// Its id.
    pub id: String,
    /// open, closed, complete or done.
    pub status: BatchStatus,
    /// Its members.
    pub members: u64,
    /// Members that have not ended (reserved or enqueued).
    pub pending: u64,
    /// Members that succeeded.
    pub succeeded: u64,
    /// Members that ended other than by succeeding.
    pub failed: u64,
    /// Its members by state.
    pub counts: BatchCounts,
    /// When it was opened, RFC 3339.
    pub created: String,
    /// When it was opened, Unix ms (the store's clock).
    pub created_ms: u64,
}

impl BatchRow {
    fn new(b: &BatchInfo) -> BatchRow {
        BatchRow {
            id: b.id.to_string(),
            status: b.status(),
            members: b.counts.total(),
            pending: b.counts.pending(),
            succeeded: b.counts.succeeded,
            failed: b.counts.failures(),
            counts: b.counts,
            created: rfc3339(b.created_ms),
            created_ms: b.created_ms,
        }
    }
}

/// What a batch's completion does to a job, and that job now.
#[derive(Debug, Serialize)]
pub struct FollowUpOut {
    /// `callback` (enqueued once the batch is complete) or `parent` (a flow's parent,
    /// released then).
    pub kind: &'static str,
    /// The job's topic.
    pub topic: String,
    /// Its key (a callback's: `batch:<id>`).
    pub key: String,
    /// Its state now (`scheduled`, …, `dead`, or a kept `succeeded`, `cancelled`,
    /// `expired`); `null` when not found.
    pub state: Option<&'static str>,
    /// A flow's parent still waiting for its children.
    pub waiting_for_children: bool,
    /// A live job's due time, RFC 3339 (not for a parent waiting for its children).
    pub due: Option<String>,
}

impl FollowUpOut {
    fn new(f: &BatchFollowUp) -> FollowUpOut {
        let waiting = f.waiting_for_children();
        FollowUpOut {
            kind: f.kind.as_str(),
            topic: f.topic.to_string(),
            key: f.key.to_string(),
            state: f.job.state(),
            waiting_for_children: waiting,
            due: match &f.job {
                FollowUpJob::Live(j) if !waiting => Some(rfc3339(j.due_ms)),
                _ => None,
            },
        }
    }
}

/// One batch, as `dq batch` prints it.
#[derive(Debug, Serialize)]
pub struct BatchOut {
    /// Its id.
    pub id: String,
    /// open, closed, complete or done.
    pub status: BatchStatus,
    /// When it is complete: wait_all, fail_fast or ignore.
    pub policy: dq_core::FailurePolicy,
    /// What its completion does, and that job now; `null` for a batch that only reports its
    /// progress.
    pub then: Option<FollowUpOut>,
    /// Its members.
    pub members: u64,
    /// Members that have not ended.
    pub pending: u64,
    /// Members that ended other than by succeeding.
    pub failed: u64,
    /// Its members by state.
    pub counts: BatchCounts,
    /// When it was opened, RFC 3339.
    pub created: String,
    /// When it was opened, Unix ms (the store's clock).
    pub created_ms: u64,
    /// When it was closed, if it was.
    pub closed: Option<String>,
    /// When it was closed, Unix ms.
    pub closed_ms: Option<u64>,
    /// When it was marked done (its callback enqueued, its parent released), if it was.
    pub done: Option<String>,
    /// When it was marked done, Unix ms.
    pub done_ms: Option<u64>,
    /// How long it is kept once done, ms.
    pub retention_ms: u64,
}

impl BatchOut {
    fn new(b: &BatchInfo, follow_up: Option<&BatchFollowUp>) -> BatchOut {
        BatchOut {
            id: b.id.to_string(),
            status: b.status(),
            policy: b.policy,
            then: follow_up.map(FollowUpOut::new),
            members: b.counts.total(),
            pending: b.counts.pending(),
            failed: b.counts.failures(),
            counts: b.counts,
            created: rfc3339(b.created_ms),
            created_ms: b.created_ms,
            closed: b.closed.then(|| rfc3339(b.closed_ms)),
            closed_ms: b.closed.then_some(b.closed_ms),
            done: b.done.then(|| rfc3339(b.done_ms)),
            done_ms: b.done.then_some(b.done_ms),
            retention_ms: u64::try_from(b.retention.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

/// One member, as `dq batch --members` prints it.
#[derive(Debug, Serialize)]
pub struct MemberOut {
    /// Its topic.
    pub topic: String,
    /// Its key.
    pub key: String,
    /// Its state in the batch.
    pub state: MemberState,
}

/// `value` as JSON to print.
fn json<T: Serialize>(value: &T) -> Outcome<Printed> {
    Ok(Printed::Json(serde_json::to_value(value)?))
}

/// `dq batches`: one page of the batches not done, oldest first.
pub async fn batches(client: &Client, namespace: &str, a: &BatchesArgs) -> Outcome<Printed> {
    let list = client.admin().batches(a.after.as_deref(), a.limit).await?;
    let rows: Vec<BatchRow> = list.batches.iter().map(BatchRow::new).collect();
    let next = list.next.map(|id| id.to_string());
    if a.json {
        return json(&serde_json::json!({ "batches": rows, "next": next }));
    }
    if rows.is_empty() {
        return Ok(Printed::Note(format!(
            "no batches not done in namespace {namespace:?}{}",
            if a.after.is_some() {
                " on this page"
            } else {
                ""
            }
        )));
    }
    let now = client.store().now_ms().await?;
    let cells = rows.iter().map(|r| {
        vec![
            r.id.clone(),
            r.status.to_string(),
            r.members.to_string(),
            r.pending.to_string(),
            r.succeeded.to_string(),
            r.failed.to_string(),
            relative(r.created_ms, now),
        ]
    });
    let head = [
        "ID",
        "STATUS",
        "MEMBERS",
        "PENDING",
        "SUCCEEDED",
        "FAILED",
        "CREATED",
    ];
    if let Some(next) = next {
        // (on stderr, as `dq dead list` does: the table on stdout stays parseable)
        eprintln!("more: dq batches --after '{next}'");
    }
    Ok(Printed::Text(table(&head, cells)))
}

/// `dq batch ID [--members … | --close | --cancel]`.
pub async fn batch(client: &Client, a: &BatchArgs) -> Outcome<Printed> {
    let admin = client.admin();
    if a.members {
        let page = admin
            .batch_members(&a.id, a.state, a.after.unwrap_or(0), a.limit)
            .await
            .map_err(|e| not_found(e, &a.id))?;
        let members: Vec<MemberOut> = page
            .members
            .iter()
            .map(|(m, s)| MemberOut {
                topic: m.topic.to_string(),
                key: m.key.to_string(),
                state: *s,
            })
            .collect();
        if a.json {
            return json(&serde_json::json!({
                "batch": a.id, "members": members, "next": page.next,
            }));
        }
        if let Some(next) = page.next {
            eprintln!(
                "more: dq batch {} --members{} --after {next}",
                a.id,
                a.state
                    .map_or_else(String::new, |s| format!(" --state {s}"))
            );
        }
        if members.is_empty() {
            return Ok(Printed::Note(match a.state {
                Some(s) => format!("no {s} members on this page"),
                None => "no members on this page".to_owned(),
            }));
        }
        let cells = members
            .iter()
            .map(|m| vec![m.topic.clone(), m.key.clone(), m.state.to_string()]);
        return Ok(Printed::Text(table(&["TOPIC", "KEY", "STATE"], cells)));
    }
    let handle = client.batch(&a.id)?;
    let Some(before) = handle.info().await? else {
        return Err(no_batch(&a.id));
    };
    let (info, done) = if a.close {
        let after = handle.close().await.map_err(|e| not_found(e, &a.id))?;
        (after, Some(format!("closed batch {}", a.id)))
    } else if a.cancel {
        if !a.yes {
            crate::confirm(&format!(
                "cancel batch {:?}: close it and cancel its {} members not ended?",
                a.id,
                before.counts.pending()
            ))?;
        }
        let after = handle.cancel().await.map_err(|e| not_found(e, &a.id))?;
        (
            after,
            Some(format!(
                "cancelled batch {}: closed, and its {} members not ended cancelled (their ends \
                 reach the batch through the workers' relay)",
                a.id,
                before.counts.pending()
            )),
        )
    } else {
        (before, None)
    };
    let follow_up = admin.batch_follow_up(&info).await?;
    let out = BatchOut::new(&info, follow_up.as_ref());
    if a.json {
        return json(&out);
    }
    let now = client.store().now_ms().await?;
    let mut text = String::new();
    if let Some(done) = done {
        let _ = writeln!(text, "{done}");
    }
    text.push_str(&batch_detail(&out, &info, follow_up.as_ref(), now));
    Ok(Printed::Text(text))
}

/// An unknown batch: not found (exit code 3).
fn no_batch(id: &str) -> Failure {
    Failure::new(
        Exit::NotFound,
        format!(
            "no batch {id:?} (never opened, or kept past its retention; `dq batches` lists those not done)"
        ),
    )
}

/// A store error, with an unknown batch said as [`no_batch`].
fn not_found(e: dq_core::Error, id: &str) -> Failure {
    match e {
        dq_core::Error::BatchNotFound(_) => no_batch(id),
        e => Failure::from(e),
    }
}

/// What the follow-up job is doing, in words.
fn follow_up_text(f: &BatchFollowUp, status: BatchStatus, now: u64) -> String {
    let job = match &f.job {
        FollowUpJob::Live(_) if f.waiting_for_children() => {
            "scheduled, waiting for its children".to_owned()
        }
        FollowUpJob::Live(j) => format!("{} (due {})", j.state, relative(j.due_ms, now)),
        FollowUpJob::Finished(j) => format!(
            "{} {} (kept until {})",
            j.outcome.as_str(),
            relative(j.finished_ms, now),
            relative(j.kept_until_ms, now)
        ),
        FollowUpJob::NotFound => match (f.kind, status) {
            (dq_core::client::admin::FollowUpKind::Callback, BatchStatus::Done) => {
                "not found: it ran, and its topic keeps no finished jobs (or no longer)".to_owned()
            }
            (dq_core::client::admin::FollowUpKind::Callback, _) => {
                "not enqueued yet (once the batch is complete)".to_owned()
            }
            _ => "not found".to_owned(),
        },
    };
    format!("{} {} {}: {job}", f.kind.as_str(), f.topic, f.key)
}

/// A failure policy's name, as in the JSON (`wait_all`, `fail_fast`, `ignore`).
fn policy_name(p: dq_core::FailurePolicy) -> String {
    match serde_json::to_value(p) {
        Ok(serde_json::Value::String(name)) => name,
        _ => format!("{p:?}"),
    }
}

/// One batch in full, as text.
fn batch_detail(
    out: &BatchOut,
    info: &BatchInfo,
    follow_up: Option<&BatchFollowUp>,
    now: u64,
) -> String {
    let mut text = String::new();
    let _ = writeln!(text, "batch      {}", out.id);
    let _ = writeln!(text, "status     {}", out.status);
    let _ = writeln!(text, "policy     {}", policy_name(out.policy));
    let _ = writeln!(
        text,
        "then       {}",
        follow_up.map_or_else(
            || "nothing (the batch only reports its progress)".to_owned(),
            |f| follow_up_text(f, out.status, now)
        )
    );
    let _ = writeln!(
        text,
        "members    {} ({} not ended, {} succeeded, {} failed)",
        out.members, out.pending, info.counts.succeeded, out.failed
    );
    for state in MemberState::ALL {
        let n = info.counts.get(state);
        if n > 0 {
            let _ = writeln!(text, "  {:<15} {n}", state.name());
        }
    }
    let _ = writeln!(
        text,
        "created    {} ({})",
        out.created,
        relative(info.created_ms, now)
    );
    if let Some(closed) = &out.closed {
        let _ = writeln!(
            text,
            "closed     {closed} ({})",
            relative(info.closed_ms, now)
        );
    }
    if let Some(done) = &out.done {
        let _ = writeln!(text, "done       {done} ({})", relative(info.done_ms, now));
        let kept = info.done_ms.saturating_add(out.retention_ms);
        let _ = writeln!(
            text,
            "kept       until {} ({})",
            rfc3339(kept),
            relative(kept, now)
        );
    }
    text
}
