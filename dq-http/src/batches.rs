//! The batch endpoints (batches and flows, ARCHITECTURE.md §16): the batches not done, one
//! batch with what its completion does and that job's state, its members by state, close
//! and cancel — through the operator API (`dq_core::client::admin`) and the batch's handle.

use axum::Json;
use axum::extract::{Path, Query, State};
use dq_core::MemberState;

use crate::error::{ApiError, ErrorBody};
use crate::jobs::{MAX_PAGE, bad_query};
use crate::model::{
    BatchList, BatchOut, BatchSummaryOut, BatchesQuery, MemberList, MemberOut, MembersQuery,
};
use crate::state::AppState;

/// The page size when none is asked for.
const DEFAULT_PAGE: usize = 100;

/// A page size of 1 to [`MAX_PAGE`] (default [`DEFAULT_PAGE`]).
fn limit(limit: Option<usize>) -> Result<usize, ApiError> {
    let limit = limit.unwrap_or(DEFAULT_PAGE);
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::invalid(format!(
            "limit must be 1 to {MAX_PAGE}, not {limit}"
        )));
    }
    Ok(limit)
}

/// A store error, with an unknown batch said as 404 `not_found`.
fn batch_error(e: dq_core::Error, id: &str) -> ApiError {
    match e {
        dq_core::Error::BatchNotFound(_) => no_batch(id),
        e => ApiError::from(e),
    }
}

fn no_batch(id: &str) -> ApiError {
    ApiError::not_found(format!(
        "no batch {id:?} (never opened, or kept past its retention)"
    ))
}

/// The batch `id` as it is now, with its follow-up job's state.
async fn batch_out(shared: &AppState, info: &dq_core::BatchInfo) -> Result<BatchOut, ApiError> {
    let follow_up = shared.client.admin().batch_follow_up(info).await?;
    Ok(BatchOut::new(info, follow_up.as_ref()))
}

/// One page of the batches not done (open, closed, or complete with their callback not
/// enqueued yet), oldest first; flows' batches among them.
#[utoipa::path(
    get, path = "/v1/batches", tag = "batches",
    params(BatchesQuery),
    responses(
        (status = 200, description = "A page of batches", body = BatchList),
        (status = 400, description = "invalid_request", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn batches(
    State(shared): State<AppState>,
    query: Result<Query<BatchesQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<BatchList>, ApiError> {
    let Query(q) = query.map_err(bad_query)?;
    let limit = limit(q.limit)?;
    let list = shared
        .client
        .admin()
        .batches(q.after.as_deref(), limit)
        .await?;
    Ok(Json(BatchList {
        batches: list.batches.iter().map(BatchSummaryOut::new).collect(),
        next: list.next.map(|id| id.to_string()),
    }))
}

/// One batch: status, policy, what its completion does (a callback, or a flow's parent) and
/// that job's state, its members by state, its times.
#[utoipa::path(
    get, path = "/v1/batches/{id}", tag = "batches",
    params(("id" = String, Path, description = "The batch's id")),
    responses(
        (status = 200, description = "The batch", body = BatchOut),
        (status = 400, description = "invalid_request (not a batch id)", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 404, description = "not_found", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn batch(
    State(shared): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<BatchOut>, ApiError> {
    let handle = shared.client.batch(&id)?;
    let info = handle.info().await?.ok_or_else(|| no_batch(&id))?;
    Ok(Json(batch_out(&shared, &info).await?))
}

/// A page of a batch's members with their states, optionally only those in one state.
#[utoipa::path(
    get, path = "/v1/batches/{id}/members", tag = "batches",
    params(("id" = String, Path, description = "The batch's id"), MembersQuery),
    responses(
        (status = 200, description = "A page of members", body = MemberList),
        (status = 400, description = "invalid_request", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 404, description = "not_found", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn members(
    State(shared): State<AppState>,
    Path(id): Path<String>,
    query: Result<Query<MembersQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<MemberList>, ApiError> {
    let Query(q) = query.map_err(bad_query)?;
    let limit = limit(q.limit)?;
    let state = match q.state.as_deref() {
        None => None,
        Some(name) => Some(
            MemberState::ALL
                .into_iter()
                .find(|s| s.name() == name)
                .ok_or_else(|| {
                    ApiError::invalid(format!(
                        "state {name:?} is not a member state: reserved, enqueued, succeeded, \
                         dead, cancelled, expired, discarded, refused or never_enqueued"
                    ))
                })?,
        ),
    };
    let page = shared
        .client
        .admin()
        .batch_members(&id, state, q.after.unwrap_or(0), limit)
        .await
        .map_err(|e| batch_error(e, &id))?;
    Ok(Json(MemberList {
        members: page
            .members
            .iter()
            .map(|(m, s)| MemberOut {
                topic: m.topic.to_string(),
                key: m.key.to_string(),
                state: s.name().to_owned(),
            })
            .collect(),
        next: page.next,
    }))
}

/// Close a batch to new members: once every member has ended, its callback is enqueued (or
/// its flow's parent released) — at once if they all have. Closing twice changes nothing.
#[utoipa::path(
    post, path = "/v1/batches/{id}/close", tag = "batches",
    params(("id" = String, Path, description = "The batch's id")),
    responses(
        (status = 200, description = "The batch now", body = BatchOut),
        (status = 400, description = "invalid_request (not a batch id)", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden", body = ErrorBody),
        (status = 404, description = "not_found", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn close(
    State(shared): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<BatchOut>, ApiError> {
    let handle = shared.client.batch(&id)?;
    let info = handle.close().await.map_err(|e| batch_error(e, &id))?;
    Ok(Json(batch_out(&shared, &info).await?))
}

/// Cancel a batch: close it, and cancel every member that has not ended (a running one is
/// asked to stop); each ends as cancelled, and the callback follows once all have ended.
/// The answer is the batch right after the cancels (their ends reach it through the
/// workers' relay).
#[utoipa::path(
    post, path = "/v1/batches/{id}/cancel", tag = "batches",
    params(("id" = String, Path, description = "The batch's id")),
    responses(
        (status = 200, description = "The batch now", body = BatchOut),
        (status = 400, description = "invalid_request (not a batch id)", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden", body = ErrorBody),
        (status = 404, description = "not_found", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn cancel(
    State(shared): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<BatchOut>, ApiError> {
    let handle = shared.client.batch(&id)?;
    let info = handle.cancel().await.map_err(|e| batch_error(e, &id))?;
    Ok(Json(batch_out(&shared, &info).await?))
}
