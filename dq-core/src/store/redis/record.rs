//! The job record as stored in the `pool` hash: a 20-byte header, then the payload.
//!
//! Layout (big-endian, Lua `struct` format `>c1BI6I6I6`, see `lua/lib.lua`):
//! state (1 byte) · attempts (u8) · due ms (u48) · created ms (u48) · token (u48) · payload.
//! 20 bytes keep a 100-byte job's record inside a small allocation; see the memory benchmark.

use crate::error::{Error, Result};
use crate::job::{AttemptOutcome, AttemptRecord, JobState};

/// Header length in bytes.
pub(crate) const HEADER_LEN: usize = 20;

/// A decoded record.
#[derive(Debug)]
pub(crate) struct Record {
    pub state: JobState,
    pub attempts: u32,
    pub due_ms: u64,
    pub created_ms: u64,
    pub token: u64,
    pub payload: Vec<u8>,
}

fn u48(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x))
}

impl Record {
    pub fn decode(mut bytes: Vec<u8>) -> Result<Record> {
        if bytes.len() < HEADER_LEN {
            return Err(Error::Protocol(format!(
                "job record of {} bytes is shorter than its header",
                bytes.len()
            )));
        }
        let state = JobState::from_code(bytes[0])
            .ok_or_else(|| Error::Protocol(format!("unknown job state byte {:#x}", bytes[0])))?;
        let record = Record {
            state,
            attempts: u32::from(bytes[1]),
            due_ms: u48(&bytes[2..8]),
            created_ms: u48(&bytes[8..14]),
            token: u48(&bytes[14..20]),
            payload: Vec::new(),
        };
        bytes.drain(..HEADER_LEN);
        Ok(Record {
            payload: bytes,
            ..record
        })
    }
}

/// Decodes a job's history (a MessagePack array of `[attempt, at_ms, code, error]`).
pub(crate) fn decode_history(bytes: &[u8]) -> Result<Vec<AttemptRecord>> {
    let entries: Vec<(u32, u64, String, String)> =
        rmp_serde::from_slice(bytes).map_err(|e| Error::Protocol(format!("job history: {e}")))?;
    Ok(entries
        .into_iter()
        .map(|(attempt, at_ms, code, error)| AttemptRecord {
            attempt,
            at_ms,
            outcome: AttemptOutcome::from_code(&code),
            error,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_header_and_payload() {
        let mut bytes = vec![b'A', 3];
        bytes.extend_from_slice(&1_790_000_000_123u64.to_be_bytes()[2..]);
        bytes.extend_from_slice(&1_790_000_000_000u64.to_be_bytes()[2..]);
        bytes.extend_from_slice(&42u64.to_be_bytes()[2..]);
        bytes.extend_from_slice(b"payload");
        let r = Record::decode(bytes).unwrap();
        assert_eq!(r.state, JobState::Active);
        assert_eq!(
            (r.attempts, r.due_ms, r.created_ms, r.token),
            (3, 1_790_000_000_123, 1_790_000_000_000, 42)
        );
        assert_eq!(r.payload, b"payload");
        assert!(Record::decode(vec![b'A'; 5]).is_err());
        assert!(Record::decode(vec![b'Z'; 25]).is_err());
    }
}
