//! dq's HTTP+JSON API: any producer, in any language, enqueues, cancels and reschedules dq
//! jobs and operates the queues (the dead queue, pause, limits, schedules, batches) over HTTP,
//! through the same [`Client`](dq_core::Client) a Rust producer uses. docs/HTTP.md is the guide.
//!
//! Three ways to run it:
//!
//! - `dq serve --listen 127.0.0.1:8081` runs it alone;
//! - `dq dashboard --api` serves it under `/api` next to the dashboard;
//! - [`router`] returns an [`axum::Router`] to mount in your own service
//!   (`app.nest("/dq", dq_http::router(client, config))`), where [`HttpConfig::job`] can name
//!   your job types so that a payload that does not fit one is refused before it is written.
//!
//! # What it promises
//!
//! - **Payloads by field name**: a JSON payload is stored as MessagePack with its fields by
//!   name, as the Rust handler's payload type reads it; with [`HttpConfig::job`], it is first
//!   decoded into that type (422 `payload_mismatch`, naming the field, otherwise). Without,
//!   it is checked against the payload shape the topic's workers published when they started
//!   (`dq_core::shape`; the same 422 for a payload the worker could not decode; no shape, no
//!   check).
//! - **Safe to retry**: an enqueue with an `Idempotency-Key` header (or naming its job key)
//!   is sent under a call id derived from it: a repeat gives the same answer and stores one
//!   job (dq's enqueue receipts within 30 s, the job key after that; docs/HTTP.md).
//! - **Tokens**: bearer tokens, read-write or read-only ([`Token`], [`HttpConfig::from_env`]),
//!   compared in constant time and never logged.
//! - **Clear errors**: every error is `{"error": {"code", "message"}}` with a stable
//!   [`Code`]; bad input is refused before anything is written.
//! - **Described**: [`openapi`] is the OpenAPI document, generated from this code and served
//!   at `/openapi.json` (docs/openapi.json is a copy that a test keeps current).
//!
//! Single enqueues without a key or an `Idempotency-Key` go through the client's group commit
//! when it is on, so concurrent requests share Redis calls.

mod batches;
mod config;
mod error;
mod jobs;
mod model;
mod ops;
mod state;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use subtle::ConstantTimeEq;
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

pub use config::{Access, DEFAULT_MAX_BODY, HttpConfig, READ_TOKENS_ENV, TOKENS_ENV, Token};
pub use error::{ApiError, Code, ErrorBody, ErrorDetail};
pub use jobs::{MAX_BULK, MAX_PAGE};
pub use model::*;

use state::{AppState, Shared};

/// The API's OpenAPI document, as generated from the handlers and types.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "dq HTTP API",
        description = "Enqueue, cancel, reschedule and operate dq jobs over HTTP+JSON. Guide: docs/HTTP.md.",
        license(name = "MIT OR Apache-2.0"),
    ),
    paths(
        jobs::enqueue, jobs::enqueue_bulk, jobs::job, jobs::list, jobs::cancel, jobs::bury,
        jobs::reschedule,
        ops::topics, ops::stats_all, ops::stats, ops::dead_list, ops::dead_requeue,
        ops::dead_purge, ops::pause, ops::resume, ops::limits, ops::set_limits, ops::groups,
        ops::set_default_group_limits, ops::clear_default_group_limits, ops::group,
        ops::set_group_limits, ops::clear_group_limits, ops::hold_group, ops::schedules,
        ops::schedule, ops::unschedule, batches::batches, batches::batch, batches::members,
        batches::close, batches::cancel,
    ),
    components(schemas(Code)),
    modifiers(&BearerScheme),
    tags(
        (name = "jobs", description = "Enqueue, look up, list, cancel, bury and reschedule jobs"),
        (name = "topics", description = "Topics and their stats"),
        (name = "dead", description = "The dead queue"),
        (name = "control", description = "Pause, resume and limits; the limits and holds of groups"),
        (name = "schedules", description = "Periodic schedules"),
        (name = "batches", description = "Batches and flows: the batches not done, one batch and its members, close and cancel"),
    )
)]
struct ApiDoc;

/// Adds the bearer security scheme.
struct BearerScheme;

impl utoipa::Modify for BearerScheme {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A read-write token, or a read-only one for GET requests",
                    ))
                    .build(),
            ),
        );
    }
}

/// The API's OpenAPI document (served at `/openapi.json`).
pub fn openapi() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// The OpenAPI document as pretty JSON with a final newline: what docs/openapi.json holds.
pub fn openapi_json() -> String {
    let mut text = openapi()
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    text.push('\n');
    text
}

/// The API as an [`axum::Router`] over `client`, to serve alone ([`serve_on`]) or to mount
/// in your own app with `nest`.
pub fn router(client: dq_core::Client, config: HttpConfig) -> axum::Router {
    let max_body = config.max_body;
    let shared: AppState = Arc::new(Shared::new(client, config));
    let api = axum::Router::new()
        .route("/v1/topics", get(ops::topics))
        .route("/v1/stats", get(ops::stats_all))
        .route("/v1/topics/{topic}/stats", get(ops::stats))
        .route(
            "/v1/topics/{topic}/jobs",
            post(jobs::enqueue).get(jobs::list),
        )
        .route("/v1/topics/{topic}/jobs/bulk", post(jobs::enqueue_bulk))
        .route(
            "/v1/topics/{topic}/jobs/{key}",
            get(jobs::job).delete(jobs::cancel),
        )
        .route(
            "/v1/topics/{topic}/jobs/{key}/reschedule",
            post(jobs::reschedule),
        )
        .route("/v1/topics/{topic}/jobs/{key}/bury", post(jobs::bury))
        .route("/v1/topics/{topic}/dead", get(ops::dead_list))
        .route("/v1/topics/{topic}/dead/requeue", post(ops::dead_requeue))
        .route("/v1/topics/{topic}/dead/purge", post(ops::dead_purge))
        .route("/v1/topics/{topic}/pause", post(ops::pause))
        .route("/v1/topics/{topic}/resume", post(ops::resume))
        .route(
            "/v1/topics/{topic}/limits",
            get(ops::limits).put(ops::set_limits),
        )
        .route(
            "/v1/topics/{topic}/groups",
            get(ops::groups)
                .put(ops::set_default_group_limits)
                .delete(ops::clear_default_group_limits),
        )
        .route(
            "/v1/topics/{topic}/groups/{group}",
            get(ops::group)
                .put(ops::set_group_limits)
                .delete(ops::clear_group_limits),
        )
        .route(
            "/v1/topics/{topic}/groups/{group}/hold",
            post(ops::hold_group),
        )
        .route("/v1/batches", get(batches::batches))
        .route("/v1/batches/{id}", get(batches::batch))
        .route("/v1/batches/{id}/members", get(batches::members))
        .route("/v1/batches/{id}/close", post(batches::close))
        .route("/v1/batches/{id}/cancel", post(batches::cancel))
        .route("/v1/schedules", get(ops::schedules))
        .route(
            "/v1/schedules/{name}",
            axum::routing::put(ops::schedule).delete(ops::unschedule),
        )
        .fallback(no_route)
        .method_not_allowed_fallback(no_method)
        .layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            authenticate,
        ))
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(shared);
    axum::Router::new()
        .route("/openapi.json", get(serve_openapi))
        .merge(api)
}

/// `/openapi.json` (no token needed: it holds no data).
async fn serve_openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], openapi_json()).into_response()
}

async fn no_route() -> ApiError {
    ApiError::not_found("no such route (the API is under /v1; /openapi.json describes it)")
}

async fn no_method() -> ApiError {
    ApiError::new(
        Code::MethodNotAllowed,
        "this route does not take this method",
    )
}

/// Lets a request through if it carries a token the server knows that may do what it asks
/// (`GET` and `HEAD` need any token, everything else a read-write one); with no tokens
/// configured, every request. Tokens are compared in constant time and never logged.
async fn authenticate(State(shared): State<AppState>, req: Request, next: Next) -> Response {
    let tokens = &shared.config.tokens;
    if tokens.is_empty() {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    let Some(given) = given else {
        return ApiError::new(
            Code::Unauthorized,
            "send Authorization: Bearer <token> (a token this server knows)",
        )
        .into_response();
    };
    // Compare with every token, whatever matches first, so that timing tells nothing.
    let mut access = None;
    for t in tokens {
        if bool::from(t.secret().ct_eq(given.as_bytes())) {
            access = access.or(Some(t.access()));
        }
    }
    let reads = matches!(*req.method(), Method::GET | Method::HEAD);
    match access {
        None => ApiError::new(
            Code::Unauthorized,
            "this token is not one this server knows",
        )
        .into_response(),
        Some(Access::ReadOnly) if !reads => ApiError::new(
            Code::Forbidden,
            "this token is read-only: it may only read (GET)",
        )
        .into_response(),
        Some(_) => next.run(req).await,
    }
}

/// `listener` with Nagle's algorithm off on every connection it accepts: a keep-alive client
/// sending one small request after another's answer would otherwise wait for a delayed ACK
/// (tens of ms) on each. Serve your own router with it (`axum::serve(no_delay(listener), app)`).
pub fn no_delay(
    listener: tokio::net::TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr> {
    use axum::serve::ListenerExt;
    listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
    })
}

/// Serves the API on `listener` until `shutdown` completes (then finishes the requests in
/// flight), with Nagle's algorithm off ([`no_delay`]). Logs the address and how many tokens
/// there are, never a token.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    client: dq_core::Client,
    config: HttpConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    tracing::info!(%addr, tokens = config.tokens.len(), "dq HTTP API listening");
    axum::serve(no_delay(listener), router(client, config))
        .with_graceful_shutdown(shutdown)
        .await
}
