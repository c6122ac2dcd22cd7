//! The routes and their pages: overview, topic, dead queue (and its one POST endpoint), job,
//! a topic's events, schedules, batches; any other path is a 404 in the page frame.
//! Everything is rendered on the server with `maud` (which escapes every value); the pages
//! carry no script. Each page is its own file; `layout.rs` holds what they share. This file
//! only assembles them.

mod batches;
mod dead_queue;
mod events;
mod job;
mod layout;
mod overview;
mod schedules;
mod style;
mod topic;

use std::sync::Arc;

use axum::Router;
use axum::routing::get;

use crate::security;
use crate::state::Shared;

/// The dashboard's routes over `shared`.
pub(crate) fn routes(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", get(overview::overview))
        .route("/topics/{topic}", get(topic::topic_page))
        .route(
            "/topics/{topic}/dead",
            get(dead_queue::dead_page).post(dead_queue::dead_action),
        )
        .route("/topics/{topic}/jobs/{key}", get(job::job_page))
        .route("/topics/{topic}/events", get(events::events_page))
        .route("/schedules", get(schedules::schedules_page))
        .route("/batches", get(batches::batches_page))
        .route("/batches/{id}", get(batches::batch_page))
        .fallback(layout::no_such_page)
        .layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            layout::frame_errors,
        ))
        .layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            security::guard,
        ))
        .with_state(shared)
}
