//! The JSON the API takes and answers with (serde, with their OpenAPI schemas from
//! `utoipa`). Times are RFC 3339 strings (`2026-11-24T08:00:00.000Z`), durations are written
//! as people write them (`90s`, `10m`, `2h30m`, `7d`).

use dq_core::{JobInfo, ScheduleInfo, TopicControl, TopicMeta, TopicStats};
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::{IntoParams, ToSchema};

/// One job to enqueue.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnqueueRequest {
    /// The payload, as JSON: objects are stored with their fields by name, as the Rust
    /// handler's payload type reads them.
    #[schema(value_type = Object)]
    pub payload: serde_json::Value,
    /// The job's key (default: one derived from the `Idempotency-Key` header, else a
    /// generated one). A job with this key that exists is left alone unless `replace`.
    #[serde(default)]
    pub key: Option<String>,
    /// Due this long from now (`90s`, `5m`, `2h`); default: now. Not with `at`.
    #[serde(default)]
    pub delay: Option<String>,
    /// Due at this time, RFC 3339 (at once if it has passed). Not with `delay`.
    #[serde(default)]
    pub at: Option<String>,
    /// Replace a waiting or dead job with the same key (a running one is never replaced).
    #[serde(default)]
    pub replace: bool,
    /// Drop the job, never starting it, if it has not started this long after its due time.
    #[serde(default)]
    pub expires_after: Option<String>,
    /// Refuse the key while its job exists and for this long after it finished (answered
    /// `refused` with `until_ms`). At most one of `unique_for`, `debounce`, `throttle`.
    #[serde(default)]
    pub unique_for: Option<String>,
    /// Run the job this long after the last enqueue of its key, with the last payload (a
    /// waiting job is replaced). Not with `delay` or `at`.
    #[serde(default)]
    pub debounce: Option<String>,
    /// Refuse every enqueue of the key for this long after this one is accepted.
    #[serde(default)]
    pub throttle: Option<String>,
    /// Its priority among the due jobs of its partition: 0 (lowest) to 9 (highest); default
    /// the typed topic's handler's, else 5 (normal). Anything else is 400 `invalid_request`.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 9)]
    pub priority: Option<i64>,
    /// Its group: once due it waits for its group's turn and runs within the group's limits
    /// (`/v1/topics/{topic}/groups/{group}`). 1 to 64 bytes of visible text, no whitespace;
    /// anything else is 400 `invalid_request`.
    #[serde(default)]
    pub group: Option<String>,
}

/// What an enqueue did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EnqueueOutcomeOut {
    /// A new job was stored (or, for a repeated request, was stored by the first one).
    Created,
    /// A waiting or dead job with the key was replaced.
    Replaced,
    /// A job with the key exists (see `state`); nothing was written.
    Exists,
    /// The key is inside a `unique_for` or `throttle` window until `until_ms`; nothing was
    /// written.
    Refused,
}

/// The answer to an enqueue.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct EnqueueResponse {
    /// The job's key (the generated or derived one, if none was given).
    pub key: String,
    /// What happened.
    pub outcome: EnqueueOutcomeOut,
    /// For `exists`: the state of the job that holds the key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// For `refused`: when the key's window ends (Unix ms, the store's clock).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<u64>,
}

/// Many jobs to enqueue at once: all are checked before any is written.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkRequest {
    /// The jobs (at most 1000).
    pub jobs: Vec<EnqueueRequest>,
}

/// The answer to a bulk enqueue: one entry per job, in order.
#[derive(Debug, Serialize, ToSchema)]
pub struct BulkResponse {
    /// What happened to each job.
    pub jobs: Vec<EnqueueResponse>,
}

/// What a cancel did.
#[derive(Debug, Serialize, ToSchema)]
pub struct CancelResponse {
    /// The job's key.
    pub key: String,
    /// `cancelled` (removed before it started), `cancel_requested` (running: its worker is
    /// asked to stop it) or `gone` (it will not run).
    pub outcome: String,
}

/// Why a job is buried (the body of a bury is optional: without one, or without `reason`, the
/// reason is `buried by an operator`).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BuryRequest {
    /// The reason kept in the job's history (cut like an error text when long).
    #[serde(default)]
    pub reason: Option<String>,
}

/// What a bury did.
#[derive(Debug, Serialize, ToSchema)]
pub struct BuryResponse {
    /// The job's key.
    pub key: String,
    /// `buried`: the job is in the dead queue, the reason in its history.
    pub outcome: String,
}

/// A new due time: exactly one of `at` and `delay` (`"delay": "0s"` makes it due now).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RescheduleRequest {
    /// At this time, RFC 3339.
    #[serde(default)]
    pub at: Option<String>,
    /// This long from now (`90s`, `10m`).
    #[serde(default)]
    pub delay: Option<String>,
}

/// What a reschedule did.
#[derive(Debug, Serialize, ToSchema)]
pub struct RescheduleResponse {
    /// The job's key.
    pub key: String,
    /// `rescheduled`.
    pub outcome: String,
    /// Its new due time, RFC 3339.
    pub due: String,
}

/// A job, as `dq job --json` prints it.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobOut {
    /// Its topic.
    pub topic: String,
    /// Its key.
    pub key: String,
    /// scheduled, ready, active, retry or dead.
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
    /// For a running job, when its lease runs out.
    pub lease_deadline: Option<String>,
    /// For a dead job, when it died.
    pub died: Option<String>,
    /// When it is dropped unless it has started, if it has an expiry.
    pub expires: Option<String>,
    /// Its failed or deferred attempts, oldest first.
    pub history: Vec<AttemptOut>,
    /// The payload decoded from MessagePack, or `null` if it does not decode.
    #[schema(value_type = Option<Object>)]
    pub payload: Option<serde_json::Value>,
    /// Why the payload does not decode, if it does not.
    pub payload_error: Option<String>,
    /// The payload's size in bytes.
    pub payload_bytes: usize,
}

/// One attempt of a job's history.
#[derive(Debug, Serialize, ToSchema)]
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

impl JobOut {
    /// The view of `info`, its payload decoded from MessagePack to JSON.
    pub fn new(topic: &str, info: &JobInfo) -> JobOut {
        let bytes = dq_core::trace::split(&info.payload).1;
        let (payload, payload_error) = match rmp_serde::from_slice::<serde_json::Value>(bytes) {
            Ok(v) => (Some(v), None),
            Err(e) => (None, Some(e.to_string())),
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
            lease_deadline: info.lease_deadline_ms.map(rfc3339),
            died: info.died_ms.map(rfc3339),
            expires: info.expires_ms.map(rfc3339),
            history: info
                .history
                .iter()
                .map(|a| AttemptOut {
                    attempt: a.attempt,
                    at: rfc3339(a.at_ms),
                    outcome: a.outcome.as_str().to_owned(),
                    error: a.error.clone(),
                })
                .collect(),
            payload,
            payload_error,
            payload_bytes: info.payload.len(),
        }
    }
}

/// Which jobs to list.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// scheduled, ready, active, retry or dead.
    pub state: String,
    /// Most jobs on the page (1 to 1000; default 100).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Continue after this cursor (the `next` of the page before).
    #[serde(default)]
    pub after: Option<String>,
}

/// Which dead jobs to list.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeadListQuery {
    /// Only jobs whose last error contains this text (case-sensitive).
    #[serde(default)]
    pub error_contains: Option<String>,
    /// Only jobs that died more than this long ago (`7d`, `12h`).
    #[serde(default)]
    pub older_than: Option<String>,
    /// Most jobs on the page (1 to 1000; default 100).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Continue after this cursor (the `next` of the page before).
    #[serde(default)]
    pub after: Option<String>,
}

/// One page of jobs.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobList {
    /// The jobs.
    pub jobs: Vec<JobOut>,
    /// The cursor of the next page (`after=`), or `null` on the last page.
    pub next: Option<String>,
}

/// Dead jobs to requeue or purge: named ones (`keys`), or every one matching the filter
/// (`all: true`, optionally narrowed by `error_contains` / `older_than`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeadActionRequest {
    /// Keys of dead jobs (not with `all`).
    #[serde(default)]
    pub keys: Vec<String>,
    /// Every dead job of the topic matching the filter.
    #[serde(default)]
    pub all: bool,
    /// Only jobs whose last error contains this text.
    #[serde(default)]
    pub error_contains: Option<String>,
    /// Only jobs that died more than this long ago (`7d`).
    #[serde(default)]
    pub older_than: Option<String>,
}

/// What a requeue or purge did.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeadActionResponse {
    /// `requeue` or `purge`.
    pub action: String,
    /// Dead jobs read.
    pub scanned: u64,
    /// Of those, matching.
    pub matched: u64,
    /// Requeued or purged.
    pub done: u64,
    /// Named keys not in the dead queue.
    pub not_dead: Vec<String>,
}

/// A topic in the namespace's registry.
#[derive(Debug, Serialize, ToSchema)]
pub struct TopicOut {
    /// Its name.
    pub topic: String,
    /// Its recorded partition count.
    pub partitions: u16,
    /// When it was first recorded.
    pub created: String,
}

impl From<&TopicMeta> for TopicOut {
    fn from(m: &TopicMeta) -> TopicOut {
        TopicOut {
            topic: m.topic.to_string(),
            partitions: m.partitions,
            created: rfc3339(m.created_ms),
        }
    }
}

/// A topic's depths and counters, summed over its partitions.
#[derive(Debug, Serialize, ToSchema)]
pub struct StatsOut {
    /// The topic.
    pub topic: String,
    /// Jobs waiting for their due time.
    pub scheduled: u64,
    /// Due, waiting for a worker.
    pub ready: u64,
    /// Running.
    pub active: u64,
    /// Waiting for a retry.
    pub retry: u64,
    /// In the dead queue.
    pub dead: u64,
    /// Due but not yet moved to ready.
    pub overdue: u64,
    /// How long the most overdue job has waited, ms.
    pub oldest_overdue_ms: u64,
    /// Jobs enqueued (created or replaced), ever.
    pub enqueued: u64,
    /// Jobs that succeeded.
    pub succeeded: u64,
    /// Failed attempts scheduled for retry.
    pub retried: u64,
    /// Jobs moved to the dead queue.
    pub buried: u64,
    /// Jobs that ended cancelled.
    pub cancelled: u64,
    /// Leasing is paused.
    pub paused: bool,
    /// A limit holds due work back now.
    pub throttled: bool,
}

impl StatsOut {
    /// The view of `s` for `topic`.
    pub fn new(topic: &str, s: &TopicStats) -> StatsOut {
        StatsOut {
            topic: topic.to_owned(),
            scheduled: s.scheduled,
            ready: s.ready,
            active: s.active,
            retry: s.retry,
            dead: s.dead,
            overdue: s.overdue,
            oldest_overdue_ms: s.oldest_overdue_ms,
            enqueued: s.enqueued,
            succeeded: s.succeeded,
            retried: s.retried,
            buried: s.buried,
            cancelled: s.cancelled,
            paused: s.paused,
            throttled: s.throttled,
        }
    }
}

/// A topic's pause and limits.
#[derive(Debug, Serialize, ToSchema)]
pub struct ControlOut {
    /// The topic.
    pub topic: String,
    /// Leasing is paused.
    pub paused: bool,
    /// The rate limit (`100/s`), if any.
    pub rate: Option<String>,
    /// The cap on running jobs across every worker, if any.
    pub concurrency: Option<u32>,
}

impl ControlOut {
    /// The view of `c` for `topic`.
    pub fn new(topic: &str, c: &TopicControl) -> ControlOut {
        ControlOut {
            topic: topic.to_owned(),
            paused: c.paused,
            rate: c.rate.map(|r| r.to_string()),
            concurrency: c.concurrency,
        }
    }
}

/// New limits: a field left out is left as it is; `null` removes the limit.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitsRequest {
    /// The rate limit (`100/s`, `6000/min`, `5/250ms`), or `null` to remove it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub rate: Option<Option<String>>,
    /// The cap on running jobs across every worker, or `null` to remove it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<u32>)]
    pub concurrency: Option<Option<u32>>,
}

/// The limits of a group, or the default ones of every group.
#[derive(Debug, Serialize, ToSchema)]
pub struct GroupLimitsOut {
    /// At most this many of the group's jobs run at once across every worker, if capped.
    pub concurrency: Option<u32>,
    /// At most this many of the group's jobs start per period (`10/s`), if limited.
    pub rate: Option<String>,
    /// Jobs the group may start per turn when groups share a fetch (1 to 1000).
    pub weight: u32,
}

impl GroupLimitsOut {
    /// The view of `l`.
    pub fn new(l: &dq_core::GroupLimits) -> GroupLimitsOut {
        GroupLimitsOut {
            concurrency: l.concurrency,
            rate: l.rate.map(|r| r.to_string()),
            weight: l.weight,
        }
    }
}

/// A group's limits, hold and jobs; or, for the topic's groups as a whole, the default
/// limits and every group's jobs.
#[derive(Debug, Serialize, ToSchema)]
pub struct GroupOut {
    /// The topic.
    pub topic: String,
    /// The group (`null`: every group, the default limits).
    pub group: Option<String>,
    /// The group's own limits, if set (`null`: the default applies; always `null` for every
    /// group).
    pub limits: Option<GroupLimitsOut>,
    /// The default limits of every group without its own, if set.
    pub default_limits: Option<GroupLimitsOut>,
    /// None of the group's jobs start before this time, if held.
    pub held_until: Option<String>,
    /// Its jobs running now (every group's, for the topic's groups).
    pub running: u64,
    /// Its jobs due and waiting for their turn (every group's, for the topic's groups).
    pub waiting: u64,
}

impl GroupOut {
    /// The view of `s` for `group` of `topic`, a hold that has passed by `now_ms` left out.
    pub fn new(topic: &str, group: Option<&str>, s: &dq_core::GroupState, now_ms: u64) -> GroupOut {
        GroupOut {
            topic: topic.to_owned(),
            group: group.map(str::to_owned),
            limits: s.limits.as_ref().map(GroupLimitsOut::new),
            default_limits: s.default_limits.as_ref().map(GroupLimitsOut::new),
            held_until: s.held_until_ms.filter(|&ms| ms > now_ms).map(rfc3339),
            running: s.running,
            waiting: s.waiting,
        }
    }
}

/// New group limits, over those that apply now (the group's own, else the default): a field
/// left out is left as it is; `null` removes the limit.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupLimitsRequest {
    /// The cap on the group's jobs running at once across every worker (at least the
    /// partition count), or `null` to remove it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<u32>)]
    pub concurrency: Option<Option<u32>>,
    /// How many of the group's jobs may start per period (`10/s`, `600/min`), or `null` to
    /// remove it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub rate: Option<Option<String>>,
    /// Jobs the group may start per turn (1 to 1000).
    #[serde(default)]
    pub weight: Option<u32>,
}

/// Hold a group: start none of its jobs for a while.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupHoldRequest {
    /// How long from now (`30s`, `5m`); a hold under way is never shortened.
    pub duration: String,
}

/// A field that is present (`null` included) is `Some`.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// A periodic schedule.
#[derive(Debug, Serialize, ToSchema)]
pub struct ScheduleOut {
    /// Its name.
    pub name: String,
    /// The topic its jobs go to.
    pub topic: String,
    /// Its cron expression, or `null` for an interval schedule.
    pub cron: Option<String>,
    /// The time zone of a cron schedule (`null`: UTC).
    pub time_zone: Option<String>,
    /// The interval of an `every` schedule, ms.
    pub every_ms: Option<u64>,
    /// What happens to ticks missed while no worker ran: `once` or `skip`.
    pub missed: String,
    /// Its next tick (`null`: it never ticks again).
    pub next: Option<String>,
}

impl From<&ScheduleInfo> for ScheduleOut {
    fn from(s: &ScheduleInfo) -> ScheduleOut {
        ScheduleOut {
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
        }
    }
}

/// A periodic schedule to store: a cron expression (in a time zone) or an interval, and the
/// payload of each tick's job.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleRequest {
    /// The topic its jobs go to.
    pub topic: String,
    /// A cron expression (`0 9 * * MON-FRI`); not with `every`.
    #[serde(default)]
    pub cron: Option<String>,
    /// The time zone of the cron expression (`Europe/Paris`; default UTC).
    #[serde(default)]
    pub time_zone: Option<String>,
    /// An interval (`15m`); not with `cron`.
    #[serde(default)]
    pub every: Option<String>,
    /// Ticks missed while no worker ran: `once` (the latest runs once; default) or `skip`.
    #[serde(default)]
    pub missed: Option<String>,
    /// Each tick's payload, as for an enqueue.
    #[schema(value_type = Object)]
    pub payload: serde_json::Value,
}

/// What storing a schedule did.
#[derive(Debug, Serialize, ToSchema)]
pub struct ScheduleResponse {
    /// Its name.
    pub name: String,
    /// `created`, `updated` (another definition was replaced) or `unchanged`.
    pub outcome: String,
}

/// A store time (Unix ms) as RFC 3339, to the millisecond.
pub fn rfc3339(ms: u64) -> String {
    let ms = i64::try_from(ms).unwrap_or(i64::MAX);
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(t) => format!("{t:.3}"),
        Err(_) => format!("{ms} ms"),
    }
}

/// Which batches to list.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct BatchesQuery {
    /// Most batches on the page (1 to 1000; default 100).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Continue after this batch id (the `next` of the page before).
    #[serde(default)]
    pub after: Option<String>,
}

/// Which members of a batch to list.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct MembersQuery {
    /// Only the members in this state: reserved, enqueued, succeeded, dead, cancelled,
    /// expired, discarded, refused or never_enqueued.
    #[serde(default)]
    pub state: Option<String>,
    /// About this many members (1 to 1000; default 100): members are read page by page, so
    /// a few more may be listed.
    #[serde(default)]
    pub limit: Option<usize>,
    /// Continue from this cursor (the `next` of the page before).
    #[serde(default)]
    pub after: Option<u64>,
}

/// A batch's members by state.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchCountsOut {
    /// Reserved by an add, their job not seen yet.
    pub reserved: u64,
    /// Enqueued, not ended.
    pub enqueued: u64,
    /// Succeeded.
    pub succeeded: u64,
    /// Dead.
    pub dead: u64,
    /// Cancelled.
    pub cancelled: u64,
    /// Expired before they started.
    pub expired: u64,
    /// Discarded by a retry function.
    pub discarded: u64,
    /// Refused at their add (their key was taken by another job, or by its window).
    pub refused: u64,
    /// Never enqueued (their producer died after reserving them).
    pub never_enqueued: u64,
}

impl BatchCountsOut {
    /// The view of `c`.
    pub fn new(c: &dq_core::BatchCounts) -> BatchCountsOut {
        BatchCountsOut {
            reserved: c.reserved,
            enqueued: c.enqueued,
            succeeded: c.succeeded,
            dead: c.dead,
            cancelled: c.cancelled,
            expired: c.expired,
            discarded: c.discarded,
            refused: c.refused,
            never_enqueued: c.never_enqueued,
        }
    }
}

/// A batch in a listing: its status and counts.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchSummaryOut {
    /// Its id (a flow's children: `flow.<topic>.<parent key>`).
    pub id: String,
    /// `open`, `closed` (members not ended), `complete` (its callback not enqueued yet) or
    /// `done`.
    pub status: String,
    /// Its members.
    pub members: u64,
    /// Members that have not ended.
    pub pending: u64,
    /// Members that ended other than by succeeding.
    pub failed: u64,
    /// Its members by state.
    pub counts: BatchCountsOut,
    /// When it was opened.
    pub created: String,
}

impl BatchSummaryOut {
    /// The view of `b`.
    pub fn new(b: &dq_core::BatchInfo) -> BatchSummaryOut {
        BatchSummaryOut {
            id: b.id.to_string(),
            status: b.status().to_string(),
            members: b.counts.total(),
            pending: b.counts.pending(),
            failed: b.counts.failures(),
            counts: BatchCountsOut::new(&b.counts),
            created: rfc3339(b.created_ms),
        }
    }
}

/// One page of the batches not done, oldest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchList {
    /// The batches.
    pub batches: Vec<BatchSummaryOut>,
    /// The id to list after for the next page (`after=`), or `null` on the last page.
    pub next: Option<String>,
}

/// What a batch's completion does to a job, and that job now.
#[derive(Debug, Serialize, ToSchema)]
pub struct FollowUpOut {
    /// `callback` (enqueued once the batch is complete, under the key `batch:<id>`) or
    /// `parent` (a flow's parent, released then).
    pub kind: String,
    /// The job's topic.
    pub topic: String,
    /// Its key.
    pub key: String,
    /// Its state now: `scheduled`, `ready`, `active`, `retry`, `dead`, or, kept by its
    /// topic, `succeeded`, `cancelled`, `expired`; `null` when not found (a callback not
    /// enqueued yet, or one that ran and is not kept).
    pub state: Option<String>,
    /// A flow's parent still waiting for its children.
    pub waiting_for_children: bool,
}

impl FollowUpOut {
    /// The view of `f`.
    pub fn new(f: &dq_core::client::admin::BatchFollowUp) -> FollowUpOut {
        FollowUpOut {
            kind: f.kind.as_str().to_owned(),
            topic: f.topic.to_string(),
            key: f.key.to_string(),
            state: f.job.state().map(str::to_owned),
            waiting_for_children: f.waiting_for_children(),
        }
    }
}

/// One batch: its status, policy, what its completion does, its counts and times.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchOut {
    /// Its id.
    pub id: String,
    /// `open`, `closed`, `complete` or `done`.
    pub status: String,
    /// When it is complete: `wait_all`, `fail_fast` or `ignore`.
    pub policy: String,
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
    pub counts: BatchCountsOut,
    /// When it was opened.
    pub created: String,
    /// When it was closed to new members, if it was.
    pub closed: Option<String>,
    /// When it was marked done (its callback enqueued, its parent released), if it was.
    pub done: Option<String>,
    /// How long it is kept once done, ms.
    pub retention_ms: u64,
}

impl BatchOut {
    /// The view of `b` and its follow-up job `f`.
    pub fn new(
        b: &dq_core::BatchInfo,
        f: Option<&dq_core::client::admin::BatchFollowUp>,
    ) -> BatchOut {
        BatchOut {
            id: b.id.to_string(),
            status: b.status().to_string(),
            policy: match serde_json::to_value(b.policy) {
                Ok(serde_json::Value::String(name)) => name,
                _ => format!("{:?}", b.policy),
            },
            then: f.map(FollowUpOut::new),
            members: b.counts.total(),
            pending: b.counts.pending(),
            failed: b.counts.failures(),
            counts: BatchCountsOut::new(&b.counts),
            created: rfc3339(b.created_ms),
            closed: b.closed.then(|| rfc3339(b.closed_ms)),
            done: b.done.then(|| rfc3339(b.done_ms)),
            retention_ms: u64::try_from(b.retention.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

/// One member of a batch.
#[derive(Debug, Serialize, ToSchema)]
pub struct MemberOut {
    /// Its topic.
    pub topic: String,
    /// Its key.
    pub key: String,
    /// Its state in the batch.
    pub state: String,
}

/// A page of a batch's members.
#[derive(Debug, Serialize, ToSchema)]
pub struct MemberList {
    /// The members.
    pub members: Vec<MemberOut>,
    /// The cursor of the next page (`after=`), or `null` once every member was read.
    pub next: Option<u64>,
}
