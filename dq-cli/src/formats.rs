//! `dq formats` and `dq workers`: what the namespace's registry of job-record formats says (the
//! level new jobs are written in, the hold, the live processes and the newest format each
//! reads), holding and releasing the level, and the live workers with the format each reads.

use std::fmt::Write as _;

use dq_core::format::{FormatLevel, FormatRegistry, NEWEST_FORMAT, ProcessInfo};
use dq_core::{Client, WorkerInfo};
use serde::Serialize;

use crate::cli::FormatsCommand;
use crate::fail::Outcome;
use crate::view::{millis, rfc3339};

/// What a command here prints; `main` prints it.
#[derive(Debug)]
pub enum Printed {
    /// One line of JSON on stdout.
    Json(serde_json::Value),
    /// Text on stdout.
    Text(String),
    /// A note on stderr (nothing to list).
    Note(String),
}

/// `value` as JSON to print.
fn json<T: Serialize>(value: &T) -> Outcome<Printed> {
    Ok(Printed::Json(serde_json::to_value(value)?))
}

/// `dq formats` as JSON.
#[derive(Debug, Serialize)]
pub struct FormatsOut {
    /// The format new jobs are written in.
    pub level: u8,
    /// The operator's hold, if any: the level rises no further.
    pub hold: Option<u8>,
    /// The newest format this `dq` reads.
    pub cli_reads: u8,
    /// The live processes, by id.
    pub processes: Vec<ProcessRow>,
}

/// One live process.
#[derive(Debug, Serialize)]
pub struct ProcessRow {
    /// Its id, `<host>-<pid>-<random>`.
    pub id: String,
    /// producer, worker, dashboard…
    pub role: String,
    /// Its host.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// Its dq version.
    pub version: String,
    /// The newest format it reads.
    pub reads: u8,
    /// Its last registration, RFC 3339 (the store's clock).
    pub last_beat: String,
    /// How long ago, ms.
    pub last_beat_age_ms: u64,
}

impl ProcessRow {
    fn new(p: &ProcessInfo, now_ms: u64) -> ProcessRow {
        ProcessRow {
            id: p.id.clone(),
            role: p.role.to_string(),
            host: p.host.clone(),
            pid: p.pid,
            version: p.version.clone(),
            reads: p.reads,
            last_beat: rfc3339(p.beat_ms),
            last_beat_age_ms: now_ms.saturating_sub(p.beat_ms),
        }
    }
}

/// One live worker, as `dq workers --json` prints it.
#[derive(Debug, Serialize)]
pub struct WorkerRow {
    /// Its id.
    pub id: String,
    /// Its host.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// The topics it runs.
    pub topics: Vec<String>,
    /// Jobs running at its last heartbeat.
    pub running: usize,
    /// How many it may run at once.
    pub concurrency: usize,
    /// Its dq version.
    pub version: String,
    /// The newest job-record format it reads (1 for a dq from before versioned formats).
    pub reads: u8,
    /// How long ago its last heartbeat was, ms.
    pub last_beat_age_ms: u64,
}

impl WorkerRow {
    fn new(w: &WorkerInfo, now_ms: u64) -> WorkerRow {
        WorkerRow {
            id: w.id.clone(),
            host: w.host.clone(),
            pid: w.pid,
            topics: w.topics.clone(),
            running: w.running,
            concurrency: w.concurrency,
            version: w.version.clone(),
            reads: w.reads_format,
            last_beat_age_ms: now_ms.saturating_sub(w.beat_ms),
        }
    }
}

/// `dq formats [hold [LEVEL] | release]`.
pub async fn formats(
    client: &Client,
    action: Option<FormatsCommand>,
    as_json: bool,
) -> Outcome<Printed> {
    let admin = client.admin();
    let changed = match action {
        None => None,
        Some(FormatsCommand::Hold { level }) => {
            let level = match level {
                Some(l) => l,
                None => admin.formats().await?.level.level,
            };
            Some(("held at", admin.hold_format(level).await?))
        }
        Some(FormatsCommand::Release) => Some(("released at", admin.release_format().await?)),
    };
    if let Some((what, level)) = changed {
        if as_json {
            return json(&level_json(level));
        }
        return Ok(Printed::Text(format!(
            "format level {what} {}\n",
            describe(level)
        )));
    }
    let registry = admin.formats().await?;
    let now_ms = client.store().now_ms().await?;
    let out = formats_out(&registry, now_ms);
    if as_json {
        return json(&out);
    }
    Ok(Printed::Text(formats_text(&out)))
}

/// `dq workers`.
pub async fn workers(client: &Client, namespace: &str, as_json: bool) -> Outcome<Printed> {
    let workers = client.workers().await?;
    let now_ms = client.store().now_ms().await?;
    let rows: Vec<WorkerRow> = workers.iter().map(|w| WorkerRow::new(w, now_ms)).collect();
    if as_json {
        return json(&rows);
    }
    if rows.is_empty() {
        return Ok(Printed::Note(format!(
            "no live workers in namespace {namespace:?}"
        )));
    }
    let cells = rows.iter().map(|r| {
        vec![
            r.id.clone(),
            r.host.clone(),
            r.pid.to_string(),
            r.topics.join(","),
            format!("{}/{}", r.running, r.concurrency),
            r.version.clone(),
            r.reads.to_string(),
            format!("{} ago", millis(r.last_beat_age_ms)),
        ]
    });
    let head = [
        "ID",
        "HOST",
        "PID",
        "TOPICS",
        "RUNNING",
        "VERSION",
        "READS",
        "LAST BEAT",
    ];
    Ok(Printed::Text(table(&head, cells)))
}

/// The registry as `dq formats` shows it.
fn formats_out(registry: &FormatRegistry, now_ms: u64) -> FormatsOut {
    FormatsOut {
        level: registry.level.level,
        hold: registry.level.hold,
        cli_reads: NEWEST_FORMAT,
        processes: registry
            .processes
            .iter()
            .map(|p| ProcessRow::new(p, now_ms))
            .collect(),
    }
}

/// `{level, hold}` as JSON.
fn level_json(level: FormatLevel) -> serde_json::Value {
    serde_json::json!({ "level": level.level, "hold": level.hold })
}

/// `2 (no hold)`, `1 (held at 1)`.
fn describe(level: FormatLevel) -> String {
    match level.hold {
        Some(h) => format!("{} (held at {h})", level.level),
        None => format!("{} (no hold)", level.level),
    }
}

/// The text of `dq formats`.
fn formats_text(out: &FormatsOut) -> String {
    let mut text = String::new();
    let level = FormatLevel::new(out.level, out.hold);
    let _ = writeln!(text, "new jobs are written in format {}", describe(level));
    let _ = writeln!(text, "this dq reads formats up to {}", out.cli_reads);
    if out.processes.is_empty() {
        let _ = writeln!(text, "no live process registered");
        return text;
    }
    let cells = out.processes.iter().map(|p| {
        vec![
            p.id.clone(),
            p.role.clone(),
            p.host.clone(),
            p.pid.to_string(),
            p.version.clone(),
            p.reads.to_string(),
            format!("{} ago", millis(p.last_beat_age_ms)),
        ]
    });
    let head = ["ID", "ROLE", "HOST", "PID", "VERSION", "READS", "LAST BEAT"];
    text.push_str(&table(&head, cells));
    text
}

/// Left-aligned columns two spaces apart, the last one unpadded.
pub(crate) fn table(head: &[&str], rows: impl Iterator<Item = Vec<String>>) -> String {
    let lines: Vec<Vec<String>> = std::iter::once(head.iter().map(ToString::to_string).collect())
        .chain(rows)
        .collect();
    let widths: Vec<usize> = (0..head.len())
        .map(|i| {
            lines
                .iter()
                .map(|l| l[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for line in &lines {
        let last = line.len() - 1;
        for (i, cell) in line.iter().enumerate() {
            if i == last {
                let _ = writeln!(out, "{cell}");
            } else {
                let pad = widths[i] - cell.chars().count();
                let _ = write!(out, "{cell}{}  ", " ".repeat(pad));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_aligns_columns() {
        let t = table(
            &["A", "BB"],
            [
                vec!["xyz".into(), "1".into()],
                vec!["q".into(), "22".into()],
            ]
            .into_iter(),
        );
        assert_eq!(t, "A    BB\nxyz  1\nq    22\n");
    }
}
