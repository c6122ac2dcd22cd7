//! Payload encoding: typed values to MessagePack bytes and back, with a size limit.

use serde::{Serialize, de::DeserializeOwned};

use crate::error::{Error, Result};

/// Default largest encoded payload: 1 MiB.
pub const DEFAULT_MAX_PAYLOAD: usize = 1024 * 1024;

/// Encodes a payload as compact MessagePack (structs as arrays), refusing one over `limit` bytes.
pub fn encode<T: Serialize + ?Sized>(value: &T, limit: usize) -> Result<Vec<u8>> {
    let bytes = rmp_serde::to_vec(value).map_err(|e| Error::Encode(e.to_string()))?;
    check_size(&bytes, limit)?;
    Ok(bytes)
}

/// Refuses raw payload bytes over `limit`.
pub fn check_size(bytes: &[u8], limit: usize) -> Result<()> {
    if bytes.len() > limit {
        return Err(Error::PayloadTooLarge {
            size: bytes.len(),
            limit,
        });
    }
    Ok(())
}

/// Decodes a MessagePack payload into the handler's type (past the trace context a producer
/// with the `otel` feature may have stored in front of it: see [`crate::trace`]).
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    let (_, bytes) = crate::trace::split(bytes);
    rmp_serde::from_slice(bytes).map_err(|e| Error::Decode(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Order {
        id: u64,
        note: String,
    }

    #[test]
    fn round_trip_and_limit() {
        let o = Order {
            id: 7,
            note: "x".into(),
        };
        let bytes = encode(&o, 100).unwrap();
        assert_eq!(decode::<Order>(&bytes).unwrap(), o);
        let big = Order {
            id: 1,
            note: "y".repeat(200),
        };
        assert!(matches!(
            encode(&big, 100),
            Err(Error::PayloadTooLarge { limit: 100, .. })
        ));
        assert!(matches!(
            decode::<Order>(b"\xc1garbage"),
            Err(Error::Decode(_))
        ));
    }
}
