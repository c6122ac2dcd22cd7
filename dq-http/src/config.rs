//! How an API behaves: its bearer tokens (read-write or read-only), the request body limit,
//! and the job types whose payloads it checks ([`HttpConfig::job`]).

use std::collections::HashMap;
use std::sync::Arc;

use dq_core::Job;

use crate::error::ApiError;

/// What a token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Every call: enqueue, cancel, reschedule, the dead queue, pause, limits.
    ReadWrite,
    /// Only reads (`GET`): a job, listings, stats, schedules.
    ReadOnly,
}

/// One bearer token and what it may do. The secret is compared in constant time and never
/// logged: `Debug` prints `<redacted>`.
#[derive(Clone)]
pub struct Token {
    secret: String,
    access: Access,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("secret", &"<redacted>")
            .field("access", &self.access)
            .finish()
    }
}

impl Token {
    /// A token with `secret` that may do what `access` says.
    pub fn new(secret: impl Into<String>, access: Access) -> Token {
        Token {
            secret: secret.into(),
            access,
        }
    }

    /// What it may do.
    pub fn access(&self) -> Access {
        self.access
    }

    pub(crate) fn secret(&self) -> &[u8] {
        self.secret.as_bytes()
    }
}

/// Environment variable holding read-write tokens, separated by commas ([`HttpConfig::from_env`]).
pub const TOKENS_ENV: &str = "DQ_API_TOKENS";
/// Environment variable holding read-only tokens, separated by commas.
pub const READ_TOKENS_ENV: &str = "DQ_API_READ_TOKENS";

/// Default largest request body: 2 MiB (a payload's JSON is larger than its MessagePack,
/// whose limit is 1 MiB by default).
pub const DEFAULT_MAX_BODY: usize = 2 * 1024 * 1024;

/// Turns a request's JSON payload into a topic's MessagePack payload, or says why it does
/// not fit.
pub(crate) type Convert =
    Arc<dyn Fn(serde_json::Value, usize) -> Result<Vec<u8>, ApiError> + Send + Sync>;

/// A topic whose payload type the API knows ([`HttpConfig::job`]).
#[derive(Clone)]
pub(crate) struct Typed {
    /// The payload type's name, for errors.
    pub(crate) type_name: &'static str,
    /// JSON to the type, to MessagePack.
    pub(crate) convert: Convert,
    /// The handler's default expiry, as the typed client gives it.
    pub(crate) expires_after: Option<std::time::Duration>,
    /// The handler's default key window, as the typed client gives it.
    pub(crate) window: Option<dq_core::KeyWindow>,
    /// The handler's default priority, as the typed client gives it.
    pub(crate) priority: dq_core::Priority,
}

/// How an API behaves. Build it from [`HttpConfig::default`] (no tokens: anyone who can
/// reach it may do anything; keep it on loopback) or [`HttpConfig::from_env`], with its
/// setters.
#[derive(Clone)]
pub struct HttpConfig {
    pub(crate) tokens: Vec<Token>,
    pub(crate) max_body: usize,
    pub(crate) jobs: HashMap<String, Typed>,
    pub(crate) typed_only: bool,
}

impl std::fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut jobs: Vec<_> = self
            .jobs
            .iter()
            .map(|(t, typed)| (t, typed.type_name))
            .collect();
        jobs.sort();
        f.debug_struct("HttpConfig")
            .field("tokens", &self.tokens)
            .field("max_body", &self.max_body)
            .field("jobs", &jobs)
            .field("typed_only", &self.typed_only)
            .finish()
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            tokens: Vec::new(),
            max_body: DEFAULT_MAX_BODY,
            jobs: HashMap::new(),
            typed_only: false,
        }
    }
}

impl HttpConfig {
    /// The default configuration with the tokens the environment gives: read-write ones
    /// from `DQ_API_TOKENS`, read-only ones from `DQ_API_READ_TOKENS` (each a comma-separated
    /// list; empty entries are ignored).
    pub fn from_env() -> HttpConfig {
        let mut config = HttpConfig::default();
        for (var, access) in [
            (TOKENS_ENV, Access::ReadWrite),
            (READ_TOKENS_ENV, Access::ReadOnly),
        ] {
            if let Ok(list) = std::env::var(var) {
                for secret in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    config = config.token(Token::new(secret, access));
                }
            }
        }
        config
    }

    /// Adds a token. With none, every request is served (keep such a server on loopback).
    pub fn token(mut self, token: Token) -> Self {
        self.tokens.push(token);
        self
    }

    /// Whether any token is configured.
    pub fn has_tokens(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// Sets the largest request body in bytes (default [`DEFAULT_MAX_BODY`]); a larger one is
    /// refused with 413 `body_too_large` before it is read.
    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// Checks payloads for `J::TOPIC` against `J::Payload`: a request's JSON payload is
    /// decoded into it by field name (a payload that does not fit is refused with 422
    /// `payload_mismatch`, naming the field, before anything is written) and encoded as the
    /// typed client encodes it. The topic is recorded on first use, as the typed client
    /// does. Topics not named this way take a JSON value that fits the payload shape their
    /// workers published (`dq_core::shape`; any JSON value where none was), stored by field
    /// name.
    pub fn job<J: Job>(mut self) -> Self {
        let type_name = std::any::type_name::<J::Payload>();
        let convert: Convert = Arc::new(move |value, limit| {
            // the error names the field: `order_id: invalid type: string "7", expected u64`
            let payload: J::Payload = serde_path_to_error::deserialize(value).map_err(|e| {
                ApiError::payload_mismatch(format!("the payload does not fit {type_name}: {e}"))
            })?;
            dq_core::payload::encode(&payload, limit).map_err(ApiError::from)
        });
        let typed = Typed {
            type_name,
            convert,
            expires_after: J::EXPIRES_AFTER,
            window: J::WINDOW,
            priority: J::PRIORITY,
        };
        self.jobs.insert(J::TOPIC.to_owned(), typed);
        self
    }

    /// Refuses to enqueue to a topic not named with [`HttpConfig::job`] (404 `unknown_topic`)
    /// instead of storing any JSON value (default `false`).
    pub fn typed_only(mut self, typed_only: bool) -> Self {
        self.typed_only = typed_only;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_prints_a_secret() {
        let c = HttpConfig::default()
            .token(Token::new("s3cret-rw", Access::ReadWrite))
            .token(Token::new("s3cret-ro", Access::ReadOnly));
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }
}
