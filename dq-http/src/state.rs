//! What every request shares: the client, the configuration, the topics resolved so far; and
//! the pieces requests are read with (the JSON body, times and durations, the
//! `Idempotency-Key`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime};

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode};
use dq_core::shape::PayloadShape;
use dq_core::{Client, TopicClient};
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

use crate::config::HttpConfig;
use crate::error::{ApiError, Code};

/// Shared by every request of one router.
pub(crate) struct Shared {
    pub(crate) client: Client,
    pub(crate) config: HttpConfig,
    /// Topics found in the registry (or typed ones), by name: one registry read per topic.
    topics: RwLock<HashMap<String, TopicClient>>,
    /// The payload shapes read from the store, by topic, with when they were read: each is
    /// read again once [`SHAPE_FRESH`] old.
    shapes: Mutex<HashMap<String, ReadShape>>,
}

/// A topic's payload shape as read from the store (`None`: none, or not read), and when.
type ReadShape = (Instant, Option<Arc<PayloadShape>>);

/// How long a payload shape read from the store is used before it is read again: a request
/// to a busy topic reads it at most once in this time, and a worker that starts with a new
/// payload type is seen within it.
pub(crate) const SHAPE_FRESH: Duration = Duration::from_secs(5);

impl Shared {
    pub(crate) fn new(client: Client, config: HttpConfig) -> Shared {
        Shared {
            client,
            config,
            topics: RwLock::new(HashMap::new()),
            shapes: Mutex::new(HashMap::new()),
        }
    }

    /// The payload shape to check a JSON payload for topic `name` against: the one its
    /// workers published (`Catalog::payload_shape`), read at most once per [`SHAPE_FRESH`].
    /// `None` — nothing is checked — for a topic named with `HttpConfig::job` (its type
    /// checks it exactly), one without a published shape, and when the store cannot be read
    /// (logged at debug: the enqueue that follows reports the store's error).
    pub(crate) async fn shape(&self, name: &str) -> Option<Arc<PayloadShape>> {
        if self.config.typed_only || self.config.jobs.contains_key(name) {
            return None;
        }
        let topic = dq_core::Topic::new(name).ok()?;
        if let Some((at, shape)) = self
            .shapes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            && at.elapsed() < SHAPE_FRESH
        {
            return shape.clone();
        }
        let shape = match self.client.store().payload_shape(&topic).await {
            Ok(shape) => shape.map(Arc::new),
            Err(e) => {
                tracing::debug!(topic = name, error = %e, "payload shape not read: the payload is not checked");
                None
            }
        };
        self.shapes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned(), (Instant::now(), shape.clone()));
        shape
    }

    /// The client of topic `name`: one in the namespace's registry, with its recorded
    /// partition count, or (`record`) a typed one ([`HttpConfig::job`]), recorded on first
    /// use. Anything else is 404 `unknown_topic`, and nothing is recorded.
    pub(crate) async fn topic(&self, name: &str, record: bool) -> Result<TopicClient, ApiError> {
        dq_core::Topic::new(name)?;
        if let Some(t) = self
            .topics
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
        {
            return Ok(t.clone());
        }
        let admin = self.client.admin();
        let found = match admin.find(name).await? {
            Some((_, t)) => t,
            None if record && self.config.jobs.contains_key(name) => self.client.topic(name)?,
            None => {
                return Err(ApiError::new(
                    Code::UnknownTopic,
                    format!(
                        "no topic {name:?} in this namespace (a topic exists once a worker or \
                         producer has used it)"
                    ),
                ));
            }
        };
        self.topics
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned(), found.clone());
        Ok(found)
    }

    /// Forgets a topic resolved before (its record changed under us).
    pub(crate) fn forget(&self, name: &str) {
        self.topics
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
    }
}

/// A JSON body of type `T`, and its bytes: read within the body limit (413
/// `body_too_large`), parsed with a clear 400 `invalid_json` naming what is wrong.
pub(crate) struct JsonBody<T> {
    pub(crate) value: T,
    pub(crate) bytes: Bytes,
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = body_bytes(req, state).await?;
        let value = parse_body(&bytes)?;
        Ok(JsonBody { value, bytes })
    }
}

/// An optional JSON body of type `T`: `None` when the request has no body (or only white
/// space); otherwise read and parsed as [`JsonBody`] is (413 `body_too_large`, 400
/// `invalid_json`).
pub(crate) struct OptionalJsonBody<T>(pub(crate) Option<T>);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for OptionalJsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = body_bytes(req, state).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJsonBody(None));
        }
        Ok(OptionalJsonBody(parse_body(&bytes)?))
    }
}

/// The request's body, read within the body limit.
async fn body_bytes<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    Bytes::from_request(req, state).await.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                Code::BodyTooLarge,
                "the request body is over the server's limit",
            )
        } else {
            ApiError::new(Code::InvalidJson, format!("cannot read the body: {e}"))
        }
    })
}

/// The body parsed as `T`, or a 400 `invalid_json` naming what is wrong.
fn parse_body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::new(
            Code::InvalidJson,
            format!("the body is not what this call takes: {e}"),
        )
    })
}

/// A duration as people write it: `90s`, `10m`, `2h30m`, `7d`.
pub(crate) fn duration(field: &str, text: &str) -> Result<Duration, ApiError> {
    humantime::parse_duration(text).map_err(|e| {
        ApiError::invalid(format!(
            "{field} {text:?} is not a duration: {e} (write e.g. 90s, 10m, 2h, 7d)"
        ))
    })
}

/// An RFC 3339 time with an offset or `Z`.
pub(crate) fn time(field: &str, text: &str) -> Result<SystemTime, ApiError> {
    text.parse::<jiff::Timestamp>()
        .map(SystemTime::from)
        .map_err(|e| {
            ApiError::invalid(format!(
                "{field} {text:?} is not a time: {e} (write RFC 3339, e.g. 2026-11-24T08:00:00Z)"
            ))
        })
}

/// The header a client repeats on a retried request.
pub(crate) const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The longest `Idempotency-Key` taken.
pub(crate) const MAX_IDEMPOTENCY_KEY: usize = 255;

/// The request's `Idempotency-Key`, if any: 1 to 255 visible ASCII characters.
pub(crate) fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let bad = || {
        ApiError::invalid(format!(
            "Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters"
        ))
    };
    let text = value.to_str().map_err(|_| bad())?;
    if text.is_empty()
        || text.len() > MAX_IDEMPOTENCY_KEY
        || !text.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(bad());
    }
    Ok(Some(text.to_owned()))
}

/// SHA-256 of the parts, each followed by a zero byte, under a version tag: the same
/// request gives the same digest in every process and every version of this crate.
fn digest(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"dq-http/1\0");
    for p in parts {
        h.update(p);
        h.update([0]);
    }
    h.finalize().into()
}

/// The enqueue call id of a request: from its topic and `Idempotency-Key`, or, without one,
/// from its topic and exact body (which names the job's key).
pub(crate) fn call_id(topic: &str, idempotency: Option<&str>, body: &[u8]) -> u64 {
    let d = match idempotency {
        Some(k) => digest(&[b"call", topic.as_bytes(), b"idem", k.as_bytes()]),
        None => digest(&[b"call", topic.as_bytes(), b"body", body]),
    };
    let mut id = [0u8; 8];
    id.copy_from_slice(&d[..8]);
    u64::from_be_bytes(id)
}

/// The job key of a request that names none but has an `Idempotency-Key` (`index`: its
/// place in a bulk): `idem-` and 32 hex digits, the same on every retry.
pub(crate) fn derived_key(topic: &str, idempotency: &str, index: Option<usize>) -> String {
    let index = index.map(|i| i.to_string()).unwrap_or_default();
    let d = digest(&[
        b"key",
        topic.as_bytes(),
        idempotency.as_bytes(),
        index.as_bytes(),
    ]);
    let mut key = String::from("idem-");
    for b in &d[..16] {
        key.push_str(&format!("{b:02x}"));
    }
    key
}

/// The shared state of a router.
pub(crate) type AppState = Arc<Shared>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_ids_are_stable_and_distinct() {
        let a = call_id("t", Some("k1"), b"{}");
        assert_eq!(a, call_id("t", Some("k1"), b"other body"));
        assert_ne!(a, call_id("t", Some("k2"), b"{}"));
        assert_ne!(a, call_id("u", Some("k1"), b"{}"));
        assert_ne!(call_id("t", None, b"{}"), call_id("t", None, b"{ }"));
        let k = derived_key("t", "k1", None);
        assert_eq!(k.len(), 5 + 32);
        assert_eq!(k, derived_key("t", "k1", None));
        assert_ne!(k, derived_key("t", "k1", Some(0)));
    }
}
