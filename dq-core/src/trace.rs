//! Trace context carried with a job, from the producer's span to the handler's (feature
//! `otel`): the W3C `traceparent` of the span a job was enqueued under.
//!
//! The job record has no field for it, so it travels in front of the payload bytes, in an
//! envelope no MessagePack value can be mistaken for: `0xC1` (a byte MessagePack never uses),
//! `b't'`, one length byte, then the `traceparent` text, then the payload as encoded. It is
//! written only by a producer built with `otel` whose current span has a valid OpenTelemetry
//! context; without the feature nothing is written and nothing is looked up. Every decoder
//! ([`payload::decode`](crate::payload::decode), hence handlers and typed inspection) strips
//! an envelope whatever its own features, so a worker without `otel` still runs such jobs.
//! Raw payload bytes read through the untyped API ([`JobInfo::payload`](crate::JobInfo))
//! include it: [`split`] separates the two.

/// How an envelope starts: a byte MessagePack never uses, then `t`.
const MARK: [u8; 2] = [0xc1, b't'];

/// The trace context and the payload of stored payload bytes: `(Some(traceparent), payload)`
/// for bytes in a trace envelope, `(None, bytes)` otherwise (a malformed envelope too: it is
/// then not a valid payload either, and decoding it fails).
pub fn split(bytes: &[u8]) -> (Option<&str>, &[u8]) {
    let Some(rest) = bytes.strip_prefix(&MARK[..]) else {
        return (None, bytes);
    };
    let Some((&len, rest)) = rest.split_first() else {
        return (None, bytes);
    };
    let len = usize::from(len);
    match (rest.get(..len), rest.get(len..)) {
        (Some(tp), Some(payload)) => match std::str::from_utf8(tp) {
            Ok(tp) => (Some(tp), payload),
            Err(_) => (None, bytes),
        },
        _ => (None, bytes),
    }
}

/// `payload` in an envelope carrying `traceparent` (at most 255 bytes; a longer one is not
/// carried).
#[cfg_attr(not(feature = "otel"), allow(dead_code))]
pub(crate) fn wrap(traceparent: &str, payload: Vec<u8>) -> Vec<u8> {
    let Ok(len) = u8::try_from(traceparent.len()) else {
        return payload;
    };
    let mut out = Vec::with_capacity(MARK.len() + 1 + traceparent.len() + payload.len());
    out.extend_from_slice(&MARK);
    out.push(len);
    out.extend_from_slice(traceparent.as_bytes());
    out.extend_from_slice(&payload);
    out
}

/// The W3C `traceparent` of the current tracing span's OpenTelemetry context, if it has a
/// valid one.
#[cfg(feature = "otel")]
pub fn current_traceparent() -> Option<String> {
    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    let cx = tracing::Span::current().context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = std::collections::HashMap::new();
    opentelemetry_sdk::propagation::TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    carrier.remove("traceparent")
}

/// The OpenTelemetry context a `traceparent` names (a remote parent), or `None` if it does not
/// parse.
#[cfg(feature = "otel")]
pub fn context_of(traceparent: &str) -> Option<opentelemetry::Context> {
    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::TraceContextExt;

    let carrier =
        std::collections::HashMap::from([("traceparent".to_string(), traceparent.to_string())]);
    let cx = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&carrier);
    cx.span().span_context().is_valid().then_some(cx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_round_trip_and_plain_payloads_pass() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let payload = rmp_serde::to_vec(&(7u32, "x")).unwrap();
        let wrapped = wrap(tp, payload.clone());
        assert_eq!(split(&wrapped), (Some(tp), &payload[..]));
        assert_eq!(split(&payload), (None, &payload[..]));
        assert_eq!(
            crate::payload::decode::<(u32, String)>(&wrapped).unwrap(),
            (7, "x".to_string())
        );
        // Cut short: not an envelope, and not a payload either.
        let cut = &wrapped[..10];
        assert_eq!(split(cut), (None, cut));
        assert!(crate::payload::decode::<(u32, String)>(cut).is_err());
        assert_eq!(split(&[]), (None, &[][..]));
    }
}
