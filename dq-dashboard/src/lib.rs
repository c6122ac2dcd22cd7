//! dq's web dashboard: server-rendered pages over a [`Client`](dq_core::Client) for the
//! operator on call — topics with their depths, throughput and lateness and whether each is
//! paused, throttled or limited, a topic's scheduled and retrying jobs, the dead queue (errors
//! grouped by message; requeue or purge one job, a selection, or every job matching a filter),
//! one job's attempts and payload, the periodic schedules, and the batches not done (a batch's
//! counts by state, its callback's or flow parent's state, its members by state).
//!
//! Two ways to run it:
//!
//! - [`serve`] listens on an address of its own (what `dq dashboard --listen …` does);
//! - [`router`] returns an [`axum::Router`] to mount inside your own app, e.g.
//!   `app.nest("/dq", dq_dashboard::router(client, DashboardOptions::default().base_path("/dq")))`.
//!
//! # Safe by default
//!
//! - Every state change is a `POST` carrying this process's CSRF token in a form field, and
//!   is refused unless the browser says it comes from the dashboard's own origin
//!   (`Origin` / `Sec-Fetch-Site`), so another site cannot make an operator's browser
//!   requeue or purge anything.
//! - [`DashboardOptions::read_only`] renders no form, CSRF token or button and answers every
//!   `POST` with 403.
//! - [`Auth`] asks for a bearer token or a basic-auth password on every request; the secret
//!   is compared in constant time and never logged (its `Debug` is redacted). Read it from
//!   the environment ([`Auth::from_env`]), not from the command line.
//! - Pages send `Content-Security-Policy` (no scripts at all), `X-Frame-Options: DENY`,
//!   `Referrer-Policy: same-origin` (with `no-referrer`, browsers send `Origin: null` on form posts) and `Cache-Control: no-store`.
//!
//! The dashboard only reads topics that are in the store's topic registry
//! ([`Client::topics`](dq_core::Client::topics)), and reads each with the partition count
//! recorded there, so it never records a topic of its own and needs no partition settings.
//!
//! Charts: a background task samples every topic's stats every
//! [`DashboardOptions::sample_every`] (default 10 s) into a ring buffer holding the last
//! hour; the charts (inline SVG) are drawn from it. It stops when the router is dropped.

mod chart;
mod dead;
mod history;
mod pages;
mod sampler;
mod security;
mod state;

use std::net::SocketAddr;
use std::time::Duration;

pub use dead::last_error;
pub use security::Auth;

/// How a dashboard behaves: read-only or not, who may see it, where it is mounted, how often
/// it samples stats. Build it from [`DashboardOptions::default`] with its setters.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DashboardOptions {
    /// No forms that change anything (no buttons, no CSRF token), and every `POST` is
    /// refused with 403 (default `false`).
    pub read_only: bool,
    /// Who may see the dashboard (default [`Auth::None`]).
    pub auth: Auth,
    /// The path the router is mounted under (`""` at the root, `"/dq"` when nested at
    /// `/dq`): every link the pages make starts with it.
    pub base_path: String,
    /// How often the charts' sampler reads every topic's stats (default 10 s; at least 100 ms).
    pub sample_every: Duration,
    /// How often the overview and topic pages reload themselves (default 10 s; `None`: never).
    pub refresh: Option<Duration>,
}

impl Default for DashboardOptions {
    fn default() -> Self {
        DashboardOptions {
            read_only: false,
            auth: Auth::None,
            base_path: String::new(),
            sample_every: Duration::from_secs(10),
            refresh: Some(Duration::from_secs(10)),
        }
    }
}

impl DashboardOptions {
    /// Sets [`DashboardOptions::read_only`].
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Sets [`DashboardOptions::auth`].
    pub fn auth(mut self, auth: Auth) -> Self {
        self.auth = auth;
        self
    }

    /// Sets [`DashboardOptions::base_path`] (a trailing `/` is dropped).
    pub fn base_path(mut self, path: impl Into<String>) -> Self {
        let path: String = path.into();
        self.base_path = path.trim_end_matches('/').to_owned();
        self
    }

    /// Sets [`DashboardOptions::sample_every`].
    pub fn sample_every(mut self, every: Duration) -> Self {
        self.sample_every = every.max(Duration::from_millis(100));
        self
    }

    /// Sets [`DashboardOptions::refresh`].
    pub fn refresh(mut self, refresh: Option<Duration>) -> Self {
        self.refresh = refresh;
        self
    }
}

/// The dashboard as an [`axum::Router`], to serve by itself ([`serve`]) or to mount in your
/// own app (`nest` it and set [`DashboardOptions::base_path`] to the same path). Starts the
/// stats sampler on the current Tokio runtime (or on the first request, when called outside
/// one).
pub fn router(client: dq_core::Client, opts: DashboardOptions) -> axum::Router {
    let shared = std::sync::Arc::new(state::Shared::new(client, opts));
    if tokio::runtime::Handle::try_current().is_ok() {
        sampler::ensure(&shared);
    }
    pages::routes(shared)
}

/// Serves the dashboard on `listen` until Ctrl-C (then finishes the requests in flight).
///
/// Bind to loopback (`127.0.0.1:8080`) unless you put authentication ([`Auth`]) in front of
/// it; a non-loopback address without auth is served, with a warning in the log.
pub async fn serve(
    listen: SocketAddr,
    client: dq_core::Client,
    opts: DashboardOptions,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    serve_on(listener, client, opts, async {
        // An error here means no signal handler could be installed: serve until killed.
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    })
    .await
}

/// [`serve`] on a listener you bound, until `shutdown` completes (for tests and for tools
/// that handle signals themselves).
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    client: dq_core::Client,
    opts: DashboardOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    if !addr.ip().is_loopback() && matches!(opts.auth, Auth::None) {
        tracing::warn!(
            %addr,
            "dq dashboard listens beyond loopback without authentication: anyone who can reach it can requeue and purge jobs"
        );
    }
    tracing::info!(%addr, read_only = opts.read_only, auth = opts.auth.kind(), "dq dashboard listening");
    axum::serve(listener, router(client, opts))
        .with_graceful_shutdown(shutdown)
        .await
}
