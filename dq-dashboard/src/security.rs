//! Who may see the dashboard and which requests may change anything: authentication,
//! read-only mode, CSRF (a per-process token plus the browser's origin headers) and the
//! security headers every response carries.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use subtle::ConstantTimeEq;

use crate::state::Shared;

/// Who may see the dashboard. The secret is compared in constant time and never logged:
/// `Debug` prints `<redacted>`.
#[derive(Clone, Default)]
pub enum Auth {
    /// Anyone who can reach the address (keep it on loopback).
    #[default]
    None,
    /// Requests must carry `Authorization: Bearer <token>` — or, so that a browser can log
    /// in, basic auth with any user name and the token as password.
    Bearer(String),
    /// Requests must carry basic auth with this user name and password (the browser asks).
    Basic {
        /// The user name.
        username: String,
        /// The password.
        password: String,
    },
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::None => f.write_str("None"),
            Auth::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            Auth::Basic { username, .. } => f
                .debug_struct("Basic")
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
        }
    }
}

/// Environment variable holding a bearer token ([`Auth::from_env`]).
pub const TOKEN_ENV: &str = "DQ_DASHBOARD_TOKEN";
/// Environment variable holding a basic-auth password ([`Auth::from_env`]).
pub const PASSWORD_ENV: &str = "DQ_DASHBOARD_PASSWORD";
/// Environment variable holding the basic-auth user name (default `dq`).
pub const USER_ENV: &str = "DQ_DASHBOARD_USER";

impl Auth {
    /// The authentication the environment asks for: a bearer token from
    /// `DQ_DASHBOARD_TOKEN`, else a basic-auth password from `DQ_DASHBOARD_PASSWORD` (user
    /// `DQ_DASHBOARD_USER`, default `dq`), else none. Empty values count as unset.
    pub fn from_env() -> Auth {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        if let Some(token) = var(TOKEN_ENV) {
            Auth::Bearer(token)
        } else if let Some(password) = var(PASSWORD_ENV) {
            Auth::Basic {
                username: var(USER_ENV).unwrap_or_else(|| "dq".to_owned()),
                password,
            }
        } else {
            Auth::None
        }
    }

    /// Which kind of authentication this is, for logs (never the secret).
    pub fn kind(&self) -> &'static str {
        match self {
            Auth::None => "none",
            Auth::Bearer(_) => "bearer",
            Auth::Basic { .. } => "basic",
        }
    }

    /// Whether `headers` carry the credentials this asks for.
    fn admits(&self, headers: &HeaderMap) -> bool {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let (scheme, rest) = given.split_once(' ').unwrap_or((given, ""));
        let basic = || -> Option<(String, String)> {
            if !scheme.eq_ignore_ascii_case("basic") {
                return None;
            }
            let raw = base64::engine::general_purpose::STANDARD
                .decode(rest.trim())
                .ok()?;
            let text = String::from_utf8(raw).ok()?;
            let (user, pass) = text.split_once(':')?;
            Some((user.to_owned(), pass.to_owned()))
        };
        match self {
            Auth::None => true,
            Auth::Bearer(token) => {
                if scheme.eq_ignore_ascii_case("bearer") {
                    same(rest.trim(), token)
                } else {
                    basic().is_some_and(|(_, pass)| same(&pass, token))
                }
            }
            Auth::Basic { username, password } => {
                basic().is_some_and(|(user, pass)| same(&user, username) & same(&pass, password))
            }
        }
    }
}

/// Constant-time equality of two secrets (their lengths may leak, their contents do not).
pub(crate) fn same(given: &str, expected: &str) -> bool {
    given.as_bytes().ct_eq(expected.as_bytes()).into()
}

/// Every request: authentication first, then, for anything but GET/HEAD, read-only mode and
/// the origin check; every response gets the security headers.
pub(crate) async fn guard(
    State(shared): State<Arc<Shared>>,
    request: Request,
    next: Next,
) -> Response {
    crate::sampler::ensure(&shared);
    let mut response = match check(&shared, &request) {
        Some(refused) => refused,
        None => next.run(request).await,
    };
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// The refusal for `request`, if it is refused before reaching a page.
fn check(shared: &Shared, request: &Request) -> Option<Response> {
    if !shared.opts.auth.admits(request.headers()) {
        return Some(
            (
                StatusCode::UNAUTHORIZED,
                [
                    (header::WWW_AUTHENTICATE, "Basic realm=\"dq dashboard\""),
                    (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
                ],
                "authentication required\n",
            )
                .into_response(),
        );
    }
    if request.method() == Method::GET || request.method() == Method::HEAD {
        return None;
    }
    if shared.opts.read_only {
        return Some(forbidden("the dashboard is read-only"));
    }
    if !same_origin(request.headers()) {
        return Some(forbidden("cross-site request refused"));
    }
    None
}

/// Whether the browser's headers say the request comes from a page of this origin. Headers
/// a browser did not send (a script or `curl`) do not refuse it: the CSRF token, which only
/// a page of the dashboard holds, still has to be right.
fn same_origin(headers: &HeaderMap) -> bool {
    let text = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site"))
        && site != "same-origin"
        && site != "none"
    {
        return false;
    }
    if let Some(origin) = text(header::ORIGIN) {
        let host = text(header::HOST).unwrap_or("");
        // The origin is scheme://host[:port]; the Host header is host[:port].
        let origin_host = origin.split_once("://").map_or("", |(_, h)| h);
        if origin == "null" || origin_host != host {
            return false;
        }
    }
    true
}

/// Checks a form's CSRF token against this process's.
pub(crate) fn token_ok(shared: &Shared, given: Option<&str>) -> bool {
    given.is_some_and(|t| same(t, &shared.csrf))
}

/// A 403 with a short reason.
pub(crate) fn forbidden(why: &'static str) -> Response {
    (
        StatusCode::FORBIDDEN,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("forbidden: {why}\n"),
    )
        .into_response()
}
