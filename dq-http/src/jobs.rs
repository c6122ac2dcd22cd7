//! The job endpoints: enqueue (one, or many at once), look up, list, cancel, bury, reschedule.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use dq_core::shape::PayloadShape;
use dq_core::{
    BuryOutcome, CancelOutcome, Cursor, EnqueueOutcome, Enqueued, JobSpec, JobState, NewDue, Page,
    Priority, RescheduleOutcome, TopicClient,
};

use crate::error::{ApiError, Code, ErrorBody};
use crate::model::{
    BulkRequest, BulkResponse, BuryRequest, BuryResponse, CancelResponse, EnqueueOutcomeOut,
    EnqueueRequest, EnqueueResponse, JobList, JobOut, ListQuery, RescheduleRequest,
    RescheduleResponse, rfc3339,
};
use crate::state::{
    AppState, JsonBody, OptionalJsonBody, Shared, call_id, derived_key, duration, idempotency_key,
    time,
};

/// Most jobs in one bulk request.
pub const MAX_BULK: usize = 1000;

/// Most jobs on one page of a listing.
pub const MAX_PAGE: usize = 1000;

/// The page size when none is asked for.
const DEFAULT_PAGE: usize = 100;

/// A query that does not parse, as a 400.
pub(crate) fn bad_query(e: axum::extract::rejection::QueryRejection) -> ApiError {
    ApiError::invalid(format!("bad query: {}", e.body_text()))
}

/// A page of at most `limit` jobs after the cursor `after`.
pub(crate) fn page(limit: Option<usize>, after: Option<&str>) -> Result<Page, ApiError> {
    let limit = limit.unwrap_or(DEFAULT_PAGE);
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::invalid(format!(
            "limit must be 1 to {MAX_PAGE}, not {limit}"
        )));
    }
    Ok(match after {
        Some(c) => Page::after(c.parse::<Cursor>()?, limit),
        None => Page::first(limit),
    })
}

/// A request's JSON payload as the topic's MessagePack payload: checked against the topic's
/// type where the server knows it ([`HttpConfig::job`](crate::HttpConfig::job)), else
/// against `shape`, the shape its workers published ([`Shared::shape`]), if any.
pub(crate) fn payload(
    shared: &Shared,
    topic: &str,
    value: serde_json::Value,
    shape: Option<&PayloadShape>,
) -> Result<Vec<u8>, ApiError> {
    let limit = shared.client.config().max_payload;
    match shared.config.jobs.get(topic) {
        Some(t) => (t.convert)(value, limit),
        None if shared.config.typed_only => Err(ApiError::new(
            Code::UnknownTopic,
            format!("this server takes jobs for the topics whose type it knows, not {topic:?}"),
        )),
        None => {
            if let Some(shape) = shape {
                // the error names the field: `order_id: expected an unsigned integer, found a string`
                shape.check(&value).map_err(|m| {
                    ApiError::payload_mismatch(format!(
                        "the payload does not fit the payload type the workers of {topic:?} \
                         published: {m}"
                    ))
                })?;
            }
            Ok(dq_core::payload::encode(&value, limit)?)
        }
    }
}

/// A request's job: its payload converted for the topic, its times parsed. Checks
/// everything before anything is written.
fn spec(
    shared: &Shared,
    topic: &str,
    r: EnqueueRequest,
    shape: Option<&PayloadShape>,
) -> Result<JobSpec<Vec<u8>>, ApiError> {
    let typed = shared.config.jobs.get(topic);
    let mut spec = JobSpec::new(payload(shared, topic, r.payload, shape)?);
    spec.key = r.key;
    match (r.delay, r.at) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid("give delay or at, not both"));
        }
        (Some(d), None) => spec = spec.delay(duration("delay", &d)?),
        (None, Some(at)) => spec = spec.at(time("at", &at)?),
        (None, None) => {}
    }
    if r.replace {
        spec = spec.replace();
    }
    match (r.expires_after, typed.and_then(|t| t.expires_after)) {
        (Some(e), _) => spec = spec.expires_after(duration("expires_after", &e)?),
        (None, Some(default)) => spec = spec.expires_after(default),
        (None, None) => {}
    }
    match (r.unique_for, r.debounce, r.throttle) {
        (None, None, None) => spec.window = typed.and_then(|t| t.window),
        (Some(d), None, None) => spec = spec.unique_for(duration("unique_for", &d)?),
        (None, Some(d), None) => spec = spec.debounce(duration("debounce", &d)?),
        (None, None, Some(d)) => spec = spec.throttle(duration("throttle", &d)?),
        _ => {
            return Err(ApiError::invalid(
                "give at most one of unique_for, debounce, throttle",
            ));
        }
    }
    match (r.priority, typed.map(|t| t.priority)) {
        (Some(level), _) => spec = spec.priority(priority(level)?),
        (None, Some(default)) => spec = spec.priority(default),
        (None, None) => {}
    }
    if let Some(g) = r.group {
        // checked here, before any write (a bulk request names the job)
        dq_core::GroupName::new(g.as_str())?;
        spec = spec.group(g);
    }
    Ok(spec)
}

/// A request's priority: 0 (lowest) to 9 (highest).
fn priority(level: i64) -> Result<Priority, ApiError> {
    u8::try_from(level)
        .ok()
        .and_then(|l| Priority::new(l).ok())
        .ok_or_else(|| {
            ApiError::invalid(format!(
                "priority must be 0 (lowest) to 9 (highest), 5 being normal; not {level}"
            ))
        })
}

/// The answer for what an enqueue did. A repeated request whose first try stored the job
/// answers `created` (or `replaced`) again, even once the job has run (`Ended`).
fn answer(done: Enqueued) -> (StatusCode, EnqueueResponse) {
    let key = done.key.to_string();
    let mut until_ms = None;
    let (status, outcome, state) = match done.outcome {
        EnqueueOutcome::Created | EnqueueOutcome::Ended => {
            (StatusCode::CREATED, EnqueueOutcomeOut::Created, None)
        }
        EnqueueOutcome::Replaced => (StatusCode::OK, EnqueueOutcomeOut::Replaced, None),
        EnqueueOutcome::Exists(state) => (
            StatusCode::OK,
            EnqueueOutcomeOut::Exists,
            Some(state.to_string()),
        ),
        EnqueueOutcome::Refused { until_ms: until } => {
            until_ms = Some(until);
            (StatusCode::OK, EnqueueOutcomeOut::Refused, None)
        }
    };
    (
        status,
        EnqueueResponse {
            key,
            outcome,
            state,
            until_ms,
        },
    )
}

/// A topic error that may mean the record changed: forget the topic so the next request
/// reads it again.
fn topic_error(shared: &Shared, topic: &str, e: dq_core::Error) -> ApiError {
    if matches!(e, dq_core::Error::TopicMismatch { .. }) {
        shared.forget(topic);
    }
    ApiError::from(e)
}

/// Enqueue one job.
///
/// Safe to retry: a request with an `Idempotency-Key` header (or, without one, a request
/// naming its job `key`) is sent under a call id derived from it, so a repeat within 30 s
/// (dq's enqueue receipts) gives the first answer and stores nothing; later, the job key
/// still keeps a second job from being created while the first exists (answer `exists`).
/// Without a `key`, an `Idempotency-Key` derives the job's key from it.
#[utoipa::path(
    post, path = "/v1/topics/{topic}/jobs", tag = "jobs",
    params(
        ("topic" = String, Path, description = "The topic"),
        ("Idempotency-Key" = Option<String>, Header,
            description = "Repeat it on a retried request: same answer, one job"),
    ),
    request_body = EnqueueRequest,
    responses(
        (status = 201, description = "Created (or, for a repeated request, created by the first)", body = EnqueueResponse),
        (status = 200, description = "Replaced, or a job with the key exists (nothing written)", body = EnqueueResponse),
        (status = 400, description = "invalid_json, invalid_request", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden", body = ErrorBody),
        (status = 404, description = "unknown_topic", body = ErrorBody),
        (status = 409, description = "topic_mismatch: e.g. an expiry, priority or group the namespace's record format cannot hold yet", body = ErrorBody),
        (status = 413, description = "body_too_large, payload_too_large", body = ErrorBody),
        (status = 422, description = "payload_mismatch", body = ErrorBody),
        (status = 503, description = "unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn enqueue(
    State(shared): State<AppState>,
    Path(topic): Path<String>,
    headers: HeaderMap,
    body: JsonBody<EnqueueRequest>,
) -> Result<(StatusCode, Json<EnqueueResponse>), ApiError> {
    let idem = idempotency_key(&headers)?;
    let t = shared.topic(&topic, true).await?;
    let shape = shared.shape(&topic).await;
    let mut spec = spec(&shared, &topic, body.value, shape.as_deref())?;
    let done = match (&idem, &spec.key) {
        (None, None) => send_plain(&t, spec).await,
        (Some(idem), _) => {
            if spec.key.is_none() {
                spec.key = Some(derived_key(&topic, idem, None));
            }
            t.enqueue_repeatable(spec, call_id(&topic, Some(idem), &[]))
                .await
        }
        (None, Some(_)) => {
            t.enqueue_repeatable(spec, call_id(&topic, None, &body.bytes))
                .await
        }
    }
    .map_err(|e| topic_error(&shared, &topic, e))?;
    let (status, out) = answer(done);
    Ok((status, Json(out)))
}

/// An enqueue with a generated key and no `Idempotency-Key`: through group commit when
/// the client has it on.
async fn send_plain(t: &TopicClient, spec: JobSpec<Vec<u8>>) -> dq_core::Result<Enqueued> {
    let mut call = t.enqueue(spec.payload);
    call = match spec.due {
        dq_core::Due::Now => call,
        dq_core::Due::After(d) => call.delay(d),
        dq_core::Due::At(at) => call.at(at),
    };
    if spec.replace {
        call = call.replace();
    }
    match spec.expires {
        Some(dq_core::Expiry::AfterDue(d)) => call = call.expires_after(d),
        Some(dq_core::Expiry::At(at)) => call = call.expires_at(at),
        None => {}
    }
    if let Some(p) = spec.priority {
        call = call.priority(p);
    }
    if let Some(g) = spec.group {
        call = call.group(g);
    }
    call.await
}

/// Enqueue many jobs.
///
/// Every job is checked before any is written (a bad one is refused, naming its index).
/// Jobs without a `key` get one derived from the `Idempotency-Key` and their index, if the
/// request has one; a repeated bulk then creates no job twice while the first exists (such
/// jobs answer `exists`).
#[utoipa::path(
    post, path = "/v1/topics/{topic}/jobs/bulk", tag = "jobs",
    params(
        ("topic" = String, Path, description = "The topic"),
        ("Idempotency-Key" = Option<String>, Header,
            description = "Derives the keys of jobs that name none"),
    ),
    request_body = BulkRequest,
    responses(
        (status = 200, description = "One answer per job, in order", body = BulkResponse),
        (status = 400, description = "invalid_json, invalid_request", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden", body = ErrorBody),
        (status = 404, description = "unknown_topic", body = ErrorBody),
        (status = 409, description = "topic_mismatch: e.g. an expiry, priority or group the namespace's record format cannot hold yet", body = ErrorBody),
        (status = 413, description = "body_too_large, payload_too_large", body = ErrorBody),
        (status = 422, description = "payload_mismatch", body = ErrorBody),
        (status = 503, description = "unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn enqueue_bulk(
    State(shared): State<AppState>,
    Path(topic): Path<String>,
    headers: HeaderMap,
    body: JsonBody<BulkRequest>,
) -> Result<Json<BulkResponse>, ApiError> {
    let idem = idempotency_key(&headers)?;
    let jobs = body.value.jobs;
    if jobs.len() > MAX_BULK {
        return Err(ApiError::invalid(format!(
            "at most {MAX_BULK} jobs per request, not {}",
            jobs.len()
        )));
    }
    let t = shared.topic(&topic, true).await?;
    let shape = shared.shape(&topic).await;
    let mut specs = Vec::with_capacity(jobs.len());
    for (i, job) in jobs.into_iter().enumerate() {
        let mut s = spec(&shared, &topic, job, shape.as_deref()).map_err(|e| ApiError {
            code: e.code,
            message: format!("job {i}: {}", e.message),
        })?;
        if let (None, Some(idem)) = (&s.key, &idem) {
            s.key = Some(derived_key(&topic, idem, Some(i)));
        }
        specs.push(s);
    }
    let done = t
        .enqueue_bulk(specs)
        .await
        .map_err(|e| topic_error(&shared, &topic, e))?;
    Ok(Json(BulkResponse {
        jobs: done.into_iter().map(|d| answer(d).1).collect(),
    }))
}

/// One job: state, due time, attempts and errors, payload as JSON.
#[utoipa::path(
    get, path = "/v1/topics/{topic}/jobs/{key}", tag = "jobs",
    params(("topic" = String, Path, description = "The topic"), ("key" = String, Path, description = "The job's key")),
    responses(
        (status = 200, description = "The job", body = JobOut),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 404, description = "unknown_topic, not_found", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn job(
    State(shared): State<AppState>,
    Path((topic, key)): Path<(String, String)>,
) -> Result<Json<JobOut>, ApiError> {
    let t = shared.topic(&topic, false).await?;
    match t.job(&key).await? {
        Some(info) => Ok(Json(JobOut::new(&topic, &info))),
        None => Err(ApiError::not_found(format!(
            "no job {key:?} in topic {topic:?}"
        ))),
    }
}

/// One page of a topic's jobs in a state.
#[utoipa::path(
    get, path = "/v1/topics/{topic}/jobs", tag = "jobs",
    params(("topic" = String, Path, description = "The topic"), ListQuery),
    responses(
        (status = 200, description = "A page of jobs", body = JobList),
        (status = 400, description = "invalid_request", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 404, description = "unknown_topic", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn list(
    State(shared): State<AppState>,
    Path(topic): Path<String>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<JobList>, ApiError> {
    let Query(q) = query.map_err(bad_query)?;
    let state = [
        JobState::Scheduled,
        JobState::Ready,
        JobState::Active,
        JobState::Retry,
        JobState::Dead,
    ]
    .into_iter()
    .find(|s| s.as_str() == q.state)
    .ok_or_else(|| {
        ApiError::invalid(format!(
            "state {:?} is not one of scheduled, ready, active, retry, dead",
            q.state
        ))
    })?;
    let page = page(q.limit, q.after.as_deref())?;
    let t = shared.topic(&topic, false).await?;
    let p = t.list(state, page).await?;
    Ok(Json(JobList {
        jobs: p.jobs.iter().map(|j| JobOut::new(&topic, j)).collect(),
        next: p.next.map(|c| c.to_string()),
    }))
}

/// Cancel a job: one not started is removed; a running one is asked to stop.
///
/// Safe to repeat: a repeat answers `gone` (it will not run) or `cancelled`.
#[utoipa::path(
    delete, path = "/v1/topics/{topic}/jobs/{key}", tag = "jobs",
    params(("topic" = String, Path, description = "The topic"), ("key" = String, Path, description = "The job's key")),
    responses(
        (status = 200, description = "cancelled, cancel_requested or gone", body = CancelResponse),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden", body = ErrorBody),
        (status = 404, description = "unknown_topic, not_found", body = ErrorBody),
        (status = 409, description = "conflict: the job is dead (purge it)", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn cancel(
    State(shared): State<AppState>,
    Path((topic, key)): Path<(String, String)>,
) -> Result<Json<CancelResponse>, ApiError> {
    let t = shared.topic(&topic, false).await?;
    let outcome = match t.cancel(&key).await? {
        CancelOutcome::Cancelled => "cancelled",
        CancelOutcome::CancelRequested => "cancel_requested",
        CancelOutcome::Gone => "gone",
        CancelOutcome::NotFound => {
            return Err(ApiError::not_found(format!(
                "no job {key:?} in topic {topic:?}"
            )));
        }
        CancelOutcome::Dead => {
            return Err(ApiError::conflict(format!(
                "{key} is in the dead queue; not cancelled (purge it)"
            )));
        }
    };
    Ok(Json(CancelResponse {
        key,
        outcome: outcome.to_owned(),
    }))
}

/// The reason a bury keeps when none is given.
const DEFAULT_BURY_REASON: &str = "buried by an operator";

/// Bury a waiting job: to the dead queue without running it.
///
/// A scheduled, ready or retry job moves to the dead queue, the reason in its history. The
/// body is optional (`{"reason": "…"}`; without it the reason is `buried by an operator`).
/// A running job is not touched (cancel it), nor a dead one. A repeat answers 409 (the job is
/// dead).
#[utoipa::path(
    post, path = "/v1/topics/{topic}/jobs/{key}/bury", tag = "jobs",
    params(("topic" = String, Path, description = "The topic"), ("key" = String, Path, description = "The job's key")),
    request_body(content = Option<BuryRequest>, description = "Optional: why it is buried"),
    responses(
        (status = 200, description = "buried", body = BuryResponse),
        (status = 400, description = "invalid_json, invalid_request", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden", body = ErrorBody),
        (status = 404, description = "unknown_topic, not_found", body = ErrorBody),
        (status = 409, description = "conflict: the job is running (cancel it) or dead", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn bury(
    State(shared): State<AppState>,
    Path((topic, key)): Path<(String, String)>,
    body: OptionalJsonBody<BuryRequest>,
) -> Result<Json<BuryResponse>, ApiError> {
    let reason = body.0.unwrap_or_default().reason;
    let reason = reason.as_deref().unwrap_or(DEFAULT_BURY_REASON);
    let t = shared.topic(&topic, false).await?;
    match t.bury(&key, reason).await? {
        BuryOutcome::Buried => Ok(Json(BuryResponse {
            key,
            outcome: "buried".to_owned(),
        })),
        BuryOutcome::NotFound => Err(ApiError::not_found(format!(
            "no job {key:?} in topic {topic:?}"
        ))),
        BuryOutcome::Running => Err(ApiError::conflict(format!(
            "{key} is running; not buried (cancel it instead)"
        ))),
        BuryOutcome::Dead => Err(ApiError::conflict(format!(
            "{key} is already in the dead queue; not buried"
        ))),
    }
}

/// Give a waiting job a new due time.
///
/// Safe to repeat: `at` sets the same time again; `delay` counts from the repeat.
#[utoipa::path(
    post, path = "/v1/topics/{topic}/jobs/{key}/reschedule", tag = "jobs",
    params(("topic" = String, Path, description = "The topic"), ("key" = String, Path, description = "The job's key")),
    request_body = RescheduleRequest,
    responses(
        (status = 200, description = "Rescheduled", body = RescheduleResponse),
        (status = 400, description = "invalid_json, invalid_request", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden", body = ErrorBody),
        (status = 404, description = "unknown_topic, not_found", body = ErrorBody),
        (status = 409, description = "conflict: the job is running or dead", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn reschedule(
    State(shared): State<AppState>,
    Path((topic, key)): Path<(String, String)>,
    body: JsonBody<RescheduleRequest>,
) -> Result<Json<RescheduleResponse>, ApiError> {
    let due = match (body.value.at, body.value.delay) {
        (Some(at), None) => NewDue::At(time("at", &at)?),
        (None, Some(d)) => NewDue::After(duration("delay", &d)?),
        _ => {
            return Err(ApiError::invalid(
                "give exactly one of at and delay (\"delay\": \"0s\" for now)",
            ));
        }
    };
    let t = shared.topic(&topic, false).await?;
    match t.reschedule(&key, due).await? {
        RescheduleOutcome::Rescheduled { due_ms } => Ok(Json(RescheduleResponse {
            key,
            outcome: "rescheduled".to_owned(),
            due: rfc3339(due_ms),
        })),
        RescheduleOutcome::NotFound => Err(ApiError::not_found(format!(
            "no job {key:?} in topic {topic:?}"
        ))),
        RescheduleOutcome::Running => Err(ApiError::conflict(format!(
            "{key} is running; not rescheduled"
        ))),
        RescheduleOutcome::Dead => Err(ApiError::conflict(format!(
            "{key} is in the dead queue; not rescheduled (requeue it)"
        ))),
    }
}
