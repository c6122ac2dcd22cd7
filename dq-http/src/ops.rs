//! The operator endpoints: topics and stats, the dead queue, pause, resume and limits, the
//! limits and holds of a topic's groups, the periodic schedules.

use axum::Json;
use axum::extract::{Path, Query, State};
use dq_core::{DeadAction, DeadFilter};

use crate::error::{ApiError, ErrorBody};
use crate::jobs::{bad_query, page, payload};
use crate::model::{
    ControlOut, DeadActionRequest, DeadActionResponse, DeadListQuery, GroupHoldRequest,
    GroupLimitsRequest, GroupOut, JobList, JobOut, LimitsRequest, ScheduleOut, ScheduleRequest,
    ScheduleResponse, StatsOut, TopicOut,
};
use crate::state::{AppState, JsonBody, duration};

/// The topics recorded in the namespace.
#[utoipa::path(
    get, path = "/v1/topics", tag = "topics",
    responses(
        (status = 200, description = "The topics, by name", body = [TopicOut]),
        (status = 401, description = "unauthorized", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn topics(
    State(shared): State<AppState>,
) -> Result<Json<Vec<TopicOut>>, ApiError> {
    let topics = shared.client.topics().await?;
    Ok(Json(topics.iter().map(TopicOut::from).collect()))
}

/// Every topic's depths and counters.
#[utoipa::path(
    get, path = "/v1/stats", tag = "topics",
    responses(
        (status = 200, description = "Every topic's stats, by name", body = [StatsOut]),
        (status = 401, description = "unauthorized", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn stats_all(
    State(shared): State<AppState>,
) -> Result<Json<Vec<StatsOut>>, ApiError> {
    let rows = shared.client.admin().stats().await?;
    Ok(Json(
        rows.iter()
            .map(|(meta, s)| StatsOut::new(meta.topic.as_str(), s))
            .collect(),
    ))
}

/// One topic's depths and counters.
#[utoipa::path(
    get, path = "/v1/topics/{topic}/stats", tag = "topics",
    params(("topic" = String, Path, description = "The topic")),
    responses(
        (status = 200, description = "The topic's stats", body = StatsOut),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 404, description = "unknown_topic", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn stats(
    State(shared): State<AppState>,
    Path(topic): Path<String>,
) -> Result<Json<StatsOut>, ApiError> {
    let t = shared.topic(&topic, false).await?;
    Ok(Json(StatsOut::new(&topic, &t.stats().await?)))
}

/// A dead-queue filter from its parts.
fn filter(
    error_contains: Option<String>,
    older_than: Option<&str>,
) -> Result<DeadFilter, ApiError> {
    let filter = DeadFilter {
        error_contains,
        older_than: older_than.map(|t| duration("older_than", t)).transpose()?,
    };
    filter.check()?;
    Ok(filter)
}

/// One page of a topic's dead jobs, oldest death first.
#[utoipa::path(
    get, path = "/v1/topics/{topic}/dead", tag = "dead",
    params(("topic" = String, Path, description = "The topic"), DeadListQuery),
    responses(
        (status = 200, description = "A page of dead jobs", body = JobList),
        (status = 400, description = "invalid_request", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 404, description = "unknown_topic", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn dead_list(
    State(shared): State<AppState>,
    Path(topic): Path<String>,
    query: Result<Query<DeadListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<JobList>, ApiError> {
    let Query(q) = query.map_err(bad_query)?;
    let filter = filter(q.error_contains, q.older_than.as_deref())?;
    let page = page(q.limit, q.after.as_deref())?;
    let t = shared.topic(&topic, false).await?;
    let p = t.list_dead(&filter, page).await?;
    Ok(Json(JobList {
        jobs: p.jobs.iter().map(|j| JobOut::new(&topic, j)).collect(),
        next: p.next.map(|c| c.to_string()),
    }))
}

/// Requeue or purge dead jobs: named ones, or every one matching a filter.
async fn dead_act(
    shared: AppState,
    topic: String,
    r: DeadActionRequest,
    action: DeadAction,
) -> Result<Json<DeadActionResponse>, ApiError> {
    let verb = match action {
        DeadAction::Requeue => "requeue",
        DeadAction::Purge => "purge",
    };
    let named = !r.keys.is_empty();
    let filtered = r.all || r.error_contains.is_some() || r.older_than.is_some();
    if named == filtered {
        return Err(ApiError::invalid(
            "name the dead jobs (keys), or give all: true (optionally with error_contains / \
             older_than), not both",
        ));
    }
    let t = shared.topic(&topic, false).await?;
    if named {
        let mut out = DeadActionResponse {
            action: verb.to_owned(),
            scanned: r.keys.len() as u64,
            matched: 0,
            done: 0,
            not_dead: Vec::new(),
        };
        for key in r.keys {
            let n = match action {
                DeadAction::Requeue => t.requeue_dead(&[key.as_str()]).await?,
                DeadAction::Purge => t.purge_dead(&[key.as_str()]).await?,
            };
            if n > 0 {
                out.matched += 1;
                out.done += 1;
            } else {
                out.not_dead.push(key);
            }
        }
        return Ok(Json(out));
    }
    let filter = filter(r.error_contains, r.older_than.as_deref())?;
    let mut sweep = t.sweep_dead(action, filter).await?;
    while !sweep.is_finished() {
        sweep.step().await?;
    }
    let p = sweep.progress();
    Ok(Json(DeadActionResponse {
        action: verb.to_owned(),
        scanned: p.scanned,
        matched: p.matched,
        done: p.done,
        not_dead: Vec::new(),
    }))
}

/// Move dead jobs back to ready, attempts reset (history kept).
#[utoipa::path(
    post, path = "/v1/topics/{topic}/dead/requeue", tag = "dead",
    params(("topic" = String, Path, description = "The topic")),
    request_body = DeadActionRequest,
    responses(
        (status = 200, description = "What was requeued", body = DeadActionResponse),
        (status = 400, description = "invalid_json, invalid_request", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden", body = ErrorBody),
        (status = 404, description = "unknown_topic", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn dead_requeue(
    State(shared): State<AppState>,
    Path(topic): Path<String>,
    body: JsonBody<DeadActionRequest>,
) -> Result<Json<DeadActionResponse>, ApiError> {
    dead_act(shared, topic, body.value, DeadAction::Requeue).await
}

/// Delete dead jobs.
#[utoipa::path(
    post, path = "/v1/topics/{topic}/dead/purge", tag = "dead",
    params(("topic" = String, Path, description = "The topic")),
    request_body = DeadActionRequest,
    responses(
        (status = 200, description = "What was purged", body = DeadActionResponse),
        (status = 400, description = "invalid_json, invalid_request", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden", body = ErrorBody),
        (status = 404, description = "unknown_topic", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn dead_purge(
    State(shared): State<AppState>,
    Path(topic): Path<String>,
    body: JsonBody<DeadActionRequest>,
) -> Result<Json<DeadActionResponse>, ApiError> {
    dead_act(shared, topic, body.value, DeadAction::Purge).await
}

/// Pause a topic: no worker leases its jobs until it is resumed (enqueue still works).
#[utoipa::path(
    post, path = "/v1/topics/{topic}/pause", tag = "control",
    params(("topic" = String, Path, description = "The topic")),
    responses(
        (status = 200, description = "The topic's control now", body = ControlOut),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden", body = ErrorBody),
        (status = 404, description = "unknown_topic", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn pause(
    State(shared): State<AppState>,
    Path(topic): Path<String>,
) -> Result<Json<ControlOut>, ApiError> {
    let t = shared.topic(&topic, false).await?;
    Ok(Json(ControlOut::new(&topic, &t.pause().await?)))
}

/// Resume a paused topic (its workers are woken at once).
#[utoipa::path(
    post, path = "/v1/topics/{topic}/resume", tag = "control",
    params(("topic" = String, Path, description = "The topic")),
    responses(
        (status = 200, description = "The topic's control now", body = ControlOut),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden", body = ErrorBody),
        (status = 404, description = "unknown_topic", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn resume(
    State(shared): State<AppState>,
    Path(topic): Path<String>,
) -> Result<Json<ControlOut>, ApiError> {
    let t = shared.topic(&topic, false).await?;
    Ok(Json(ControlOut::new(&topic, &t.resume().await?)))
}

/// A topic's pause and limits.
#[utoipa::path(
    get, path = "/v1/topics/{topic}/limits", tag = "control",
    params(("topic" = String, Path, description = "The topic")),
    responses(
        (status = 200, description = "The topic's control", body = ControlOut),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 404, description = "unknown_topic", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn limits(
    State(shared): State<AppState>,
    Path(topic): Path<String>,
) -> Result<Json<ControlOut>, ApiError> {
    let t = shared.topic(&topic, false).await?;
    Ok(Json(ControlOut::new(&topic, &t.control().await?)))
}

/// Set or remove a topic's limits across every worker: a rate, a concurrency cap.
#[utoipa::path(
    put, path = "/v1/topics/{topic}/limits", tag = "control",
    params(("topic" = String, Path, description = "The topic")),
    request_body = LimitsRequest,
    responses(
        (status = 200, description = "The topic's control now", body = ControlOut),
        (status = 400, description = "invalid_json, invalid_request", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden", body = ErrorBody),
        (status = 404, description = "unknown_topic", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn set_limits(
    State(shared): State<AppState>,
    Path(topic): Path<String>,
    body: JsonBody<LimitsRequest>,
) -> Result<Json<ControlOut>, ApiError> {
    let rate = match body.value.rate {
        None => None,
        Some(None) => Some(None),
        Some(Some(text)) => {
            Some(Some(text.parse::<dq_core::Rate>().map_err(|e| {
                ApiError::invalid(format!("rate {text:?}: {e}"))
            })?))
        }
    };
    let t = shared.topic(&topic, false).await?;
    if let Some(rate) = rate {
        t.set_rate(rate).await?;
    }
    if let Some(cap) = body.value.concurrency {
        t.set_concurrency(cap).await?;
    }
    Ok(Json(ControlOut::new(&topic, &t.control().await?)))
}

/// A group's view after `state` was read or written.
async fn group_out(
    shared: &AppState,
    topic: &str,
    group: Option<&str>,
    state: &dq_core::GroupState,
) -> Result<Json<GroupOut>, ApiError> {
    let now_ms = shared.client.store().now_ms().await?;
    Ok(Json(GroupOut::new(topic, group, state, now_ms)))
}

/// Reads a group (or, with `None`, every group), then applies `change` to its limits: new
/// ones over those that apply now, or their removal. Everything is checked before anything
/// is written.
async fn change_group(
    shared: AppState,
    topic: String,
    group: Option<String>,
    change: Option<GroupLimitsRequest>,
) -> Result<Json<GroupOut>, ApiError> {
    let name = group.as_deref();
    if let Some(g) = name {
        dq_core::GroupName::new(g)?;
    }
    let rate = match change.as_ref().and_then(|c| c.rate.as_ref()) {
        None => None,
        Some(None) => Some(None),
        Some(Some(text)) => {
            Some(Some(text.parse::<dq_core::Rate>().map_err(|e| {
                ApiError::invalid(format!("rate {text:?}: {e}"))
            })?))
        }
    };
    let t = shared.topic(&topic, false).await?;
    let now = t.group_state(name).await?;
    let limits = match change {
        None => None,
        Some(c) => {
            let mut l = now.limits.or(now.default_limits).unwrap_or_default();
            if let Some(rate) = rate {
                l.rate = rate;
            }
            if let Some(cap) = c.concurrency {
                l.concurrency = cap;
            }
            if let Some(w) = c.weight {
                l.weight = w;
            }
            l.check(t.partitions())?;
            Some(l)
        }
    };
    let state = t.set_group_limits(name, limits).await?;
    group_out(&shared, &topic, name, &state).await
}

/// The default limits of the topic's groups, and every group's running and waiting jobs.
#[utoipa::path(
    get, path = "/v1/topics/{topic}/groups", tag = "control",
    params(("topic" = String, Path, description = "The topic")),
    responses(
        (status = 200, description = "The default limits, every group's jobs", body = GroupOut),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 404, description = "unknown_topic", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn groups(
    State(shared): State<AppState>,
    Path(topic): Path<String>,
) -> Result<Json<GroupOut>, ApiError> {
    let t = shared.topic(&topic, false).await?;
    let state = t.group_state(None).await?;
    group_out(&shared, &topic, None, &state).await
}

/// Set the default limits of every group without its own: a field left out keeps what the
/// default has now, `null` removes a limit.
#[utoipa::path(
    put, path = "/v1/topics/{topic}/groups", tag = "control",
    params(("topic" = String, Path, description = "The topic")),
    request_body = GroupLimitsRequest,
    responses(
        (status = 200, description = "The default limits now", body = GroupOut),
        (status = 400, description = "invalid_json, invalid_request", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden", body = ErrorBody),
        (status = 404, description = "unknown_topic", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn set_default_group_limits(
    State(shared): State<AppState>,
    Path(topic): Path<String>,
    body: JsonBody<GroupLimitsRequest>,
) -> Result<Json<GroupOut>, ApiError> {
    change_group(shared, topic, None, Some(body.value)).await
}

/// Remove the default limits of the topic's groups.
#[utoipa::path(
    delete, path = "/v1/topics/{topic}/groups", tag = "control",
    params(("topic" = String, Path, description = "The topic")),
    responses(
        (status = 200, description = "No default limits now", body = GroupOut),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden", body = ErrorBody),
        (status = 404, description = "unknown_topic", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn clear_default_group_limits(
    State(shared): State<AppState>,
    Path(topic): Path<String>,
) -> Result<Json<GroupOut>, ApiError> {
    change_group(shared, topic, None, None).await
}

/// One group's own limits (if any), the default ones, its hold, its running and waiting
/// jobs.
#[utoipa::path(
    get, path = "/v1/topics/{topic}/groups/{group}", tag = "control",
    params(
        ("topic" = String, Path, description = "The topic"),
        ("group" = String, Path, description = "The group"),
    ),
    responses(
        (status = 200, description = "The group", body = GroupOut),
        (status = 400, description = "invalid_request: a bad group name", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 404, description = "unknown_topic", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn group(
    State(shared): State<AppState>,
    Path((topic, group)): Path<(String, String)>,
) -> Result<Json<GroupOut>, ApiError> {
    dq_core::GroupName::new(group.as_str())?;
    let t = shared.topic(&topic, false).await?;
    let state = t.group_state(Some(&group)).await?;
    group_out(&shared, &topic, Some(&group), &state).await
}

/// Set a group's own limits, over those that apply to it now (its own, else the default): a
/// field left out is kept, `null` removes a limit.
#[utoipa::path(
    put, path = "/v1/topics/{topic}/groups/{group}", tag = "control",
    params(
        ("topic" = String, Path, description = "The topic"),
        ("group" = String, Path, description = "The group"),
    ),
    request_body = GroupLimitsRequest,
    responses(
        (status = 200, description = "The group now", body = GroupOut),
        (status = 400, description = "invalid_json, invalid_request", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden", body = ErrorBody),
        (status = 404, description = "unknown_topic", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn set_group_limits(
    State(shared): State<AppState>,
    Path((topic, group)): Path<(String, String)>,
    body: JsonBody<GroupLimitsRequest>,
) -> Result<Json<GroupOut>, ApiError> {
    change_group(shared, topic, Some(group), Some(body.value)).await
}

/// Remove a group's own limits: it follows the default again.
#[utoipa::path(
    delete, path = "/v1/topics/{topic}/groups/{group}", tag = "control",
    params(
        ("topic" = String, Path, description = "The topic"),
        ("group" = String, Path, description = "The group"),
    ),
    responses(
        (status = 200, description = "The group now", body = GroupOut),
        (status = 400, description = "invalid_request: a bad group name", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden", body = ErrorBody),
        (status = 404, description = "unknown_topic", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn clear_group_limits(
    State(shared): State<AppState>,
    Path((topic, group)): Path<(String, String)>,
) -> Result<Json<GroupOut>, ApiError> {
    change_group(shared, topic, Some(group), None).await
}

/// Hold a group: start none of its jobs for `duration` from now, in every partition (what a
/// handler's `JobError::rate_limited` does for its group). A hold under way is never
/// shortened.
#[utoipa::path(
    post, path = "/v1/topics/{topic}/groups/{group}/hold", tag = "control",
    params(
        ("topic" = String, Path, description = "The topic"),
        ("group" = String, Path, description = "The group"),
    ),
    request_body = GroupHoldRequest,
    responses(
        (status = 200, description = "The group now", body = GroupOut),
        (status = 400, description = "invalid_json, invalid_request", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden", body = ErrorBody),
        (status = 404, description = "unknown_topic", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn hold_group(
    State(shared): State<AppState>,
    Path((topic, group)): Path<(String, String)>,
    body: JsonBody<GroupHoldRequest>,
) -> Result<Json<GroupOut>, ApiError> {
    let hold = duration("duration", &body.value.duration)?;
    let name = dq_core::GroupName::new(group.as_str())?;
    dq_core::group::check_change(&dq_core::GroupChange {
        group: Some(name),
        limits: None,
        hold: Some(hold),
    })?;
    let t = shared.topic(&topic, false).await?;
    let state = t.hold_group(&group, hold).await?;
    group_out(&shared, &topic, Some(&group), &state).await
}

/// The periodic schedules, by name.
#[utoipa::path(
    get, path = "/v1/schedules", tag = "schedules",
    responses(
        (status = 200, description = "The schedules", body = [ScheduleOut]),
        (status = 401, description = "unauthorized", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn schedules(
    State(shared): State<AppState>,
) -> Result<Json<Vec<ScheduleOut>>, ApiError> {
    let rows = shared.client.schedules().await?;
    Ok(Json(rows.iter().map(ScheduleOut::from).collect()))
}

/// Store a periodic schedule: each tick enqueues one job to `topic` (by key
/// `<name>@<tick ms>`, once however many workers run it). The same definition again changes
/// nothing (`unchanged`): safe to repeat.
#[utoipa::path(
    put, path = "/v1/schedules/{name}", tag = "schedules",
    params(("name" = String, Path, description = "The schedule's name")),
    request_body = ScheduleRequest,
    responses(
        (status = 200, description = "created, updated or unchanged", body = ScheduleResponse),
        (status = 400, description = "invalid_json, invalid_request", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden", body = ErrorBody),
        (status = 404, description = "unknown_topic", body = ErrorBody),
        (status = 422, description = "payload_mismatch", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn schedule(
    State(shared): State<AppState>,
    Path(name): Path<String>,
    body: JsonBody<ScheduleRequest>,
) -> Result<Json<ScheduleResponse>, ApiError> {
    let r = body.value;
    let mut schedule = match (&r.cron, &r.every) {
        (Some(cron), None) => {
            let s = dq_core::Schedule::cron(cron)?;
            match &r.time_zone {
                Some(zone) => s.tz(zone)?,
                None => s,
            }
        }
        (None, Some(every)) if r.time_zone.is_none() => {
            dq_core::Schedule::every(duration("every", every)?)?
        }
        _ => {
            return Err(ApiError::invalid(
                "give cron (with an optional time_zone) or every, not both",
            ));
        }
    };
    if let Some(missed) = &r.missed {
        let policy =
            dq_core::retry_syntax::schedule::parse_missed(missed).map_err(ApiError::invalid)?;
        schedule = schedule.missed(policy);
    }
    // the topic must be known as for an enqueue (a typo creates nothing)
    shared.topic(&r.topic, true).await?;
    let shape = shared.shape(&r.topic).await;
    let bytes = payload(&shared, &r.topic, r.payload, shape.as_deref())?;
    let outcome = match shared
        .client
        .schedule_raw(&name, &r.topic, schedule, bytes)
        .await?
    {
        dq_core::ScheduleOutcome::Created => "created",
        dq_core::ScheduleOutcome::Updated => "updated",
        dq_core::ScheduleOutcome::Unchanged => "unchanged",
    };
    Ok(Json(ScheduleResponse {
        name,
        outcome: outcome.to_owned(),
    }))
}

/// Remove a periodic schedule (a worker whose handler declares it stores it again when it
/// starts).
#[utoipa::path(
    delete, path = "/v1/schedules/{name}", tag = "schedules",
    params(("name" = String, Path, description = "The schedule's name")),
    responses(
        (status = 204, description = "Removed"),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden", body = ErrorBody),
        (status = 404, description = "not_found", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn unschedule(
    State(shared): State<AppState>,
    Path(name): Path<String>,
) -> Result<axum::http::StatusCode, ApiError> {
    if shared.client.unschedule(&name).await? {
        Ok(axum::http::StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!("no schedule {name:?}")))
    }
}
