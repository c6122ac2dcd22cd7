//! What the commands print: the JSON shapes of `--json` (serde structs, stable field names)
//! and their text rendering, with times as RFC 3339 and "in 5m" / "3m ago".

use std::fmt::Write as _;
use std::time::Duration;

use dq_core::{JobInfo, ScheduleInfo, TopicMeta, TopicStats};
use serde::Serialize;

/// A store time (Unix ms) as RFC 3339, to the millisecond.
pub fn rfc3339(ms: u64) -> String {
    let ms = i64::try_from(ms).unwrap_or(i64::MAX);
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(t) => format!("{t:.3}"),
        Err(_) => format!("{ms} ms"),
    }
}

/// A time relative to `now_ms`: "in 5m", "3m 20s ago", "now".
pub fn relative(ms: u64, now_ms: u64) -> String {
    // Whole seconds: milliseconds are noise at an operator's scale.
    let span = |d: u64| humantime::format_duration(Duration::from_secs(d / 1000)).to_string();
    if ms >= now_ms + 1000 {
        format!("in {}", span(ms - now_ms))
    } else if now_ms >= ms + 1000 {
        format!("{} ago", span(now_ms - ms))
    } else {
        "now".into()
    }
}

/// A duration in ms, for lateness.
pub fn millis(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else {
        humantime::format_duration(Duration::from_secs(ms / 1000)).to_string()
    }
}

/// One topic of `dq topics`.
#[derive(Serialize)]
pub struct TopicRow {
    /// Its name.
    pub topic: String,
    /// Its recorded partition count.
    pub partitions: u16,
    /// When it was first recorded, RFC 3339.
    pub created: String,
}

impl From<&TopicMeta> for TopicRow {
    fn from(m: &TopicMeta) -> TopicRow {
        TopicRow {
            topic: m.topic.to_string(),
            partitions: m.partitions,
            created: rfc3339(m.created_ms),
        }
    }
}

/// One topic's stats, as `dq stats` prints them.
#[derive(Serialize)]
pub struct StatsView {
    /// The topic.
    pub topic: String,
    /// Its partition count.
    pub partitions: u16,
    /// Jobs waiting for their due time.
    pub scheduled: u64,
    /// Due and waiting for a worker.
    pub ready: u64,
    /// Running.
    pub active: u64,
    /// Waiting for a retry.
    pub retry: u64,
    /// In the dead queue.
    pub dead: u64,
    /// Finished jobs the topic keeps (`dq list --state succeeded`, …).
    pub kept: u64,
    /// Due but not yet moved to ready.
    pub overdue: u64,
    /// How long the most overdue job has waited, ms.
    pub oldest_overdue_ms: u64,
    /// Counters since the topic began.
    pub counters: Counters,
    /// Live workers serving the topic (heartbeats not yet expired).
    pub workers: Option<u64>,
    /// Leasing is paused (`Client::pause`).
    pub paused: bool,
    /// A limit (rate, global concurrency, a handler's throttle) holds due work back now.
    pub throttled: bool,
}

/// A topic's counters.
#[derive(Serialize)]
pub struct Counters {
    /// Jobs enqueued (created or replaced).
    pub enqueued: u64,
    /// Jobs that succeeded.
    pub succeeded: u64,
    /// Failed attempts scheduled for retry.
    pub retried: u64,
    /// Jobs moved to the dead queue.
    pub buried: u64,
    /// Leases that expired.
    pub expired: u64,
    /// Jobs dropped because their expiry came before they started.
    pub expired_before_start: u64,
    /// Jobs that ended cancelled, their work not done.
    pub cancelled: u64,
    /// Jobs that succeeded although a cancel was requested while they ran (also in
    /// `succeeded`).
    pub succeeded_after_cancel_request: u64,
    /// Dead jobs trimmed by cap or retention.
    pub trimmed: u64,
    /// Times a handler asked to slow the topic down (a partner's rate limit).
    pub throttles: u64,
    /// Kept finished jobs dropped before their time because the topic kept its cap.
    pub kept_trimmed: u64,
    /// Jobs a handler's retry function discarded (deleted after a failure).
    pub discarded: u64,
}

impl StatsView {
    /// The view of `s` for `topic`.
    pub fn new(topic: &str, partitions: u16, s: &TopicStats) -> StatsView {
        StatsView {
            topic: topic.to_owned(),
            partitions,
            scheduled: s.scheduled,
            ready: s.ready,
            active: s.active,
            retry: s.retry,
            dead: s.dead,
            kept: s.kept,
            overdue: s.overdue,
            oldest_overdue_ms: s.oldest_overdue_ms,
            counters: Counters {
                enqueued: s.enqueued,
                succeeded: s.succeeded,
                retried: s.retried,
                buried: s.buried,
                expired: s.expired,
                expired_before_start: s.expired_before_start,
                cancelled: s.cancelled,
                succeeded_after_cancel_request: s.succeeded_after_cancel_request,
                trimmed: s.trimmed,
                throttles: s.throttles,
                kept_trimmed: s.kept_trimmed,
                discarded: s.discarded,
            },
            workers: None,
            paused: s.paused,
            throttled: s.throttled,
        }
    }
}

/// The text table of several topics' stats.
pub fn stats_table(rows: &[StatsView]) -> String {
    let width = rows.iter().map(|r| r.topic.len()).max().unwrap_or(0).max(5);
    let mut out = format!(
        "{:width$}  {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  {:>14}  {:>9}\n",
        "TOPIC",
        "SCHEDULED",
        "READY",
        "ACTIVE",
        "RETRY",
        "DEAD",
        "OVERDUE",
        "OLDEST OVERDUE",
        "WORKERS"
    );
    for r in rows {
        let workers = r.workers.map_or_else(|| "-".to_owned(), |w| w.to_string());
        let mark = match (r.paused, r.throttled) {
            (true, _) => "  paused",
            (false, true) => "  throttled",
            (false, false) => "",
        };
        let _ = writeln!(
            out,
            "{:width$}  {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  {:>14}  {:>9}{mark}",
            r.topic,
            r.scheduled,
            r.ready,
            r.active,
            r.retry,
            r.dead,
            r.overdue,
            millis(r.oldest_overdue_ms),
            workers
        );
    }
    out
}

/// One topic's stats in full, as text.
pub fn stats_detail(r: &StatsView) -> String {
    let c = &r.counters;
    let workers = r.workers.map_or_else(|| "-".to_owned(), |w| w.to_string());
    format!(
        "topic           {}  ({} partition{})\n\
         scheduled       {}\nready           {}\nactive          {}\nretry           {}\n\
         dead            {}\noverdue         {}\noldest overdue  {}\nlive workers    {}\n\
         leasing         {}\n\
         counters        enqueued {}, succeeded {}, retried {}, buried {}, expired {}, \
         cancelled {}, trimmed {}, throttles {}\n\
         {}{}{}{}",
        r.topic,
        r.partitions,
        if r.partitions == 1 { "" } else { "s" },
        r.scheduled,
        r.ready,
        r.active,
        r.retry,
        r.dead,
        r.overdue,
        millis(r.oldest_overdue_ms),
        workers,
        match (r.paused, r.throttled) {
            (true, _) => "paused",
            (false, true) => "throttled (a limit holds due work back)",
            (false, false) => "running",
        },
        c.enqueued,
        c.succeeded,
        c.retried,
        c.buried,
        c.expired,
        c.cancelled,
        c.trimmed,
        c.throttles,
        match c.succeeded_after_cancel_request {
            0 => String::new(),
            n => format!(
                "                {n} of the succeeded had a cancel requested while running \
                 (their handler finished anyway)\n"
            ),
        },
        match c.expired_before_start {
            0 => String::new(),
            n => format!("                {n} dropped: their expiry came before they started\n"),
        },
        match c.discarded {
            0 => String::new(),
            n => format!("                {n} discarded by their handler's retry function\n"),
        },
        match (r.kept, c.kept_trimmed) {
            (0, 0) => String::new(),
            (n, 0) => format!("kept            {n} finished (dq list --state succeeded, …)\n"),
            (n, t) =>
                format!("kept            {n} finished; {t} trimmed before their time (the cap)\n"),
        }
    )
}

/// A job, as `dq job` and `dq dead list` print it.
#[derive(Serialize)]
pub struct JobOut {
    /// Its topic.
    pub topic: String,
    /// Its key.
    pub key: String,
    /// Its state.
    pub state: String,
    /// When it is (was) due; for retry, the next attempt.
    pub due: String,
    /// When it was enqueued.
    pub created: String,
    /// Attempts started.
    pub attempts: u32,
    /// Its priority among the due jobs of its partition, 0 (lowest) to 9 (highest); 5 is
    /// normal.
    pub priority: u8,
    /// Its group, if it has one (it waits for its group's turn once due).
    pub group: Option<String>,
    /// The batch it is a member of, if any (`dq batch ID`).
    pub batch: Option<String>,
    /// For a running job, when its lease runs out.
    pub lease_deadline: Option<String>,
    /// For a dead job, when it died.
    pub died: Option<String>,
    /// When it is dropped unless it has started (its expiry), if it has one.
    pub expires: Option<String>,
    /// Its failed or deferred attempts, oldest first.
    pub history: Vec<AttemptOut>,
    /// What a running job reported in this run.
    pub progress: Option<ProgressOut>,
    /// The payload decoded from MessagePack, or `null` if it does not decode.
    pub payload: Option<serde_json::Value>,
    /// Why the payload does not decode, if it does not.
    pub payload_error: Option<String>,
    /// The payload's size in bytes.
    pub payload_bytes: usize,
}

/// A job's progress and log lines, as `dq job` prints them.
#[derive(Serialize)]
pub struct ProgressOut {
    /// The last progress value, decoded from MessagePack (`null`: none).
    pub value: Option<serde_json::Value>,
    /// The log lines, oldest first: time and text.
    pub log: Vec<(String, String)>,
    /// Lines dropped (more than were kept).
    pub dropped_lines: u64,
}

impl ProgressOut {
    /// The view of `p`.
    pub fn new(p: &dq_core::JobProgress) -> ProgressOut {
        ProgressOut {
            value: p
                .value
                .as_deref()
                .and_then(|v| rmp_serde::from_slice::<serde_json::Value>(v).ok()),
            log: p
                .log
                .iter()
                .map(|l| (rfc3339(l.at_ms), l.text.clone()))
                .collect(),
            dropped_lines: p.dropped_lines,
        }
    }
}

/// The progress lines of `dq job`.
pub fn progress_text(p: &ProgressOut) -> String {
    let mut out = String::new();
    if let Some(v) = &p.value {
        let _ = writeln!(
            out,
            "progress  {}",
            serde_json::to_string(v).unwrap_or_default()
        );
    }
    if !p.log.is_empty() {
        let _ = writeln!(
            out,
            "log{}",
            match p.dropped_lines {
                0 => String::new(),
                n => format!(" ({n} earlier lines dropped)"),
            }
        );
        for (at, text) in &p.log {
            let _ = writeln!(out, "  {at} {text}");
        }
    }
    out
}

/// One attempt of a job's history.
#[derive(Serialize)]
pub struct AttemptOut {
    /// Which attempt.
    pub attempt: u32,
    /// When it ended.
    pub at: String,
    /// failed, lease_expired, deferred or buried.
    pub outcome: String,
    /// The error text.
    pub error: String,
}

/// A job's failed attempts as the tools print them, oldest first.
pub fn attempts_out(history: &[dq_core::AttemptRecord]) -> Vec<AttemptOut> {
    history
        .iter()
        .map(|a| AttemptOut {
            attempt: a.attempt,
            at: rfc3339(a.at_ms),
            outcome: a.outcome.as_str().to_owned(),
            error: a.error.clone(),
        })
        .collect()
}

/// A stored payload decoded from MessagePack to JSON (its trace context left out), or why it
/// does not decode.
pub fn payload_json(payload: &[u8]) -> Result<serde_json::Value, String> {
    rmp_serde::from_slice::<serde_json::Value>(dq_core::trace::split(payload).1)
        .map_err(|e| e.to_string())
}

impl JobOut {
    /// The view of `info`, its payload decoded from MessagePack to JSON.
    pub fn new(topic: &str, info: &JobInfo) -> JobOut {
        let (payload, payload_error) = match payload_json(&info.payload) {
            Ok(v) => (Some(v), None),
            Err(e) => (None, Some(e)),
        };
        JobOut {
            topic: topic.to_owned(),
            key: info.key.to_string(),
            state: info.state.to_string(),
            due: rfc3339(info.due_ms),
            created: rfc3339(info.created_ms),
            attempts: info.attempts,
            priority: info.priority.level(),
            group: info.group.as_ref().map(ToString::to_string),
            batch: info.batch.as_ref().map(ToString::to_string),
            lease_deadline: info.lease_deadline_ms.map(rfc3339),
            died: info.died_ms.map(rfc3339),
            expires: info.expires_ms.map(rfc3339),
            history: attempts_out(&info.history),
            progress: info.progress.as_ref().map(ProgressOut::new),
            payload,
            payload_error,
            payload_bytes: info.payload.len(),
        }
    }
}

/// One job in full, as text.
pub fn job_detail(j: &JobOut, info: &JobInfo, now_ms: u64) -> String {
    let mut out = format!(
        "topic     {}\nkey       {}\nstate     {}\ndue       {} ({})\ncreated   {}\nattempts  {}\n",
        j.topic,
        j.key,
        j.state,
        j.due,
        relative(info.due_ms, now_ms),
        j.created,
        j.attempts
    );
    let _ = writeln!(out, "priority  {}", priority_text(j.priority));
    if let Some(g) = &j.group {
        let _ = writeln!(out, "group     {g}");
    }
    if let Some(b) = &j.batch {
        let _ = writeln!(out, "batch     {b} (dq batch {b})");
    }
    if let (Some(d), Some(ms)) = (&j.lease_deadline, info.lease_deadline_ms) {
        let _ = writeln!(out, "lease     until {d} ({})", relative(ms, now_ms));
    }
    if let (Some(d), Some(ms)) = (&j.died, info.died_ms) {
        let _ = writeln!(out, "died      {d} ({})", relative(ms, now_ms));
    }
    if let (Some(e), Some(ms)) = (&j.expires, info.expires_ms) {
        let _ = writeln!(
            out,
            "expires   {e} ({}) unless it has started",
            relative(ms, now_ms)
        );
    }
    if j.history.is_empty() {
        out.push_str("errors    none\n");
    } else {
        out.push_str("errors\n");
        for a in &j.history {
            let _ = writeln!(out, "  #{} {} {}: {}", a.attempt, a.at, a.outcome, a.error);
        }
    }
    if let Some(p) = &j.progress {
        out.push_str(&progress_text(p));
    }
    match (&j.payload, &j.payload_error) {
        (Some(v), _) => {
            let pretty = serde_json::to_string_pretty(v).unwrap_or_default();
            let _ = writeln!(out, "payload   {pretty}");
        }
        (None, e) => {
            let _ = writeln!(
                out,
                "payload   {} bytes, not MessagePack that maps to JSON ({})",
                j.payload_bytes,
                e.as_deref().unwrap_or("?")
            );
        }
    }
    out
}

/// Group limits in words: `concurrency 4, rate 10/s, weight 2`.
pub fn group_limits_text(l: &dq_core::GroupLimits) -> String {
    format!(
        "concurrency {}, rate {}, weight {}",
        l.concurrency.map_or("none".to_owned(), |c| c.to_string()),
        l.rate.map_or("none".to_owned(), |r| r.to_string()),
        l.weight
    )
}

/// Group limits as JSON: `{"concurrency": 4, "rate": "10/s", "weight": 2}`.
fn group_limits_json(l: &dq_core::GroupLimits) -> serde_json::Value {
    serde_json::json!({
        "concurrency": l.concurrency,
        "rate": l.rate.map(|r| r.to_string()),
        "weight": l.weight,
    })
}

/// What `dq group` prints: a group's limits (or, with no group, the default ones), its hold,
/// its running and waiting jobs (with no group: every group's).
pub fn group_state(
    topic: &str,
    group: Option<&str>,
    s: &dq_core::GroupState,
    now_ms: u64,
    json: bool,
) -> crate::formats::Printed {
    let held = s.held_until_ms.filter(|&ms| ms > now_ms);
    if json {
        return crate::formats::Printed::Json(serde_json::json!({
            "topic": topic,
            "group": group,
            "limits": s.limits.as_ref().map(group_limits_json),
            "default_limits": s.default_limits.as_ref().map(group_limits_json),
            "held_until": held.map(rfc3339),
            "held_until_ms": held,
            "running": s.running,
            "waiting": s.waiting,
        }));
    }
    let mut out = format!("topic        {topic}\n");
    let default = s
        .default_limits
        .as_ref()
        .map_or("none".to_owned(), group_limits_text);
    match group {
        Some(g) => {
            let _ = writeln!(out, "group        {g}");
            let _ = writeln!(
                out,
                "limits       {}",
                s.limits.as_ref().map_or_else(
                    || "none of its own (the default applies)".to_owned(),
                    group_limits_text
                )
            );
            let _ = writeln!(out, "default      {default}");
            let _ = writeln!(
                out,
                "held         {}",
                held.map_or("no".to_owned(), |ms| format!(
                    "until {} ({})",
                    rfc3339(ms),
                    relative(ms, now_ms)
                ))
            );
            let _ = writeln!(out, "running      {}", s.running);
            let _ = writeln!(out, "waiting      {}", s.waiting);
        }
        None => {
            let _ = writeln!(out, "group        (every group without limits of its own)");
            let _ = writeln!(out, "default      {default}");
            let _ = writeln!(out, "running      {} (every group)", s.running);
            let _ = writeln!(out, "waiting      {} (every group)", s.waiting);
        }
    }
    crate::formats::Printed::Text(out)
}

/// A priority in words: `5 (normal)`, `8 (above normal)`, `0 (below normal)`.
pub fn priority_text(level: u8) -> String {
    let word = match level.cmp(&dq_core::Priority::NORMAL.level()) {
        std::cmp::Ordering::Less => "below normal",
        std::cmp::Ordering::Equal => "normal",
        std::cmp::Ordering::Greater => "above normal",
    };
    format!("{level} ({word})")
}

/// One line per dead job: key, when it died, attempts, last error.
pub fn dead_line(j: &JobOut, info: &JobInfo, now_ms: u64) -> String {
    let died = info
        .died_ms
        .map_or_else(String::new, |ms| relative(ms, now_ms));
    let last = j.history.last().map_or("", |a| a.error.as_str());
    // One line per job: errors are cut at the first line break.
    let last = last.lines().next().unwrap_or("");
    format!("{}\t{}\t{}\t{}", j.key, died, j.attempts, last)
}

/// One schedule of `dq schedules`.
#[derive(Serialize)]
pub struct ScheduleRow {
    /// Its name (each tick's job key is `<name>@<tick ms>`).
    pub name: String,
    /// The topic its jobs go to.
    pub topic: String,
    /// Its cron expression, or `None` for an interval schedule.
    pub cron: Option<String>,
    /// The time zone of a cron schedule (`None`: UTC).
    pub time_zone: Option<String>,
    /// The interval of an `every` schedule, ms.
    pub every_ms: Option<u64>,
    /// What happens to ticks missed while no worker ran: `once` or `skip`.
    pub missed: String,
    /// Its next tick, RFC 3339 (`None`: it never ticks again).
    pub next: Option<String>,
    /// Its next tick, Unix ms.
    pub next_ms: Option<u64>,
    /// The tick before the next one, RFC 3339: the last one enqueued, unless the schedule
    /// was created or changed after it.
    pub last: Option<String>,
    /// That tick, Unix ms.
    pub last_ms: Option<u64>,
}

impl From<&ScheduleInfo> for ScheduleRow {
    fn from(s: &ScheduleInfo) -> ScheduleRow {
        let last_ms = s
            .next_ms
            .and_then(|next| s.schedule.last_at_or_before(next.saturating_sub(1)));
        ScheduleRow {
            name: s.name.clone(),
            topic: s.topic.clone(),
            cron: s.schedule.cron_expr().map(str::to_owned),
            time_zone: s.schedule.time_zone().map(str::to_owned),
            every_ms: s
                .schedule
                .interval()
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            missed: s.schedule.missed_policy().as_str().to_owned(),
            next: s.next_ms.map(rfc3339),
            next_ms: s.next_ms,
            last: last_ms.map(rfc3339),
            last_ms,
        }
    }
}

/// The text table of `dq schedules`: when each schedule ticks, its next and last tick.
pub fn schedules_table(rows: &[ScheduleRow], now_ms: u64) -> String {
    let ticks = |r: &ScheduleRow| match (&r.cron, r.every_ms) {
        (Some(expr), _) => format!("cron {expr} {}", r.time_zone.as_deref().unwrap_or("UTC")),
        (None, Some(ms)) => format!("every {}", millis(ms)),
        (None, None) => "-".to_owned(),
    };
    let when = |ms: Option<u64>| ms.map_or_else(|| "-".to_owned(), |ms| relative(ms, now_ms));
    let cells: Vec<[String; 5]> = rows
        .iter()
        .map(|r| {
            [
                r.name.clone(),
                r.topic.clone(),
                ticks(r),
                when(r.next_ms),
                when(r.last_ms),
            ]
        })
        .collect();
    let head = ["NAME", "TOPIC", "TICKS", "NEXT TICK", "LAST TICK"];
    let width = |i: usize| {
        cells
            .iter()
            .map(|c| c[i].chars().count())
            .chain([head[i].len()])
            .max()
            .unwrap_or(0)
    };
    let widths = [width(0), width(1), width(2), width(3)];
    let mut out = String::new();
    for line in std::iter::once(head.map(str::to_owned)).chain(cells) {
        let _ = writeln!(
            out,
            "{:w0$}  {:w1$}  {:w2$}  {:w3$}  {}",
            line[0],
            line[1],
            line[2],
            line[3],
            line[4],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3]
        );
    }
    out
}
