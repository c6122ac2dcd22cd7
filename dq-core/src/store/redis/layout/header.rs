//! The record header: the first 20 bytes of every value in a partition's records hash.
//!
//! Layout (big-endian, Lua `struct` format `>c1BI6I6I6`, see `lua/lib.lua`):
//! state (1 byte) · attempts (u8) · due ms (u48) · created ms (u48) · token (u48), then the
//! payload. 20 bytes keep a 100-byte job's record inside a small allocation; see the memory
//! benchmark.

use crate::error::{Error, Result};
use crate::job::JobState;

/// Header length in bytes; the payload starts here.
pub const HEADER_LEN: usize = 20;

/// A decoded record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// The job's state: the truth the sorted sets and the ready list index.
    pub state: JobState,
    /// Attempts started (a release or a deferral gives one back).
    pub attempts: u8,
    /// Due time, Unix ms (for a retry: the next attempt; for a dead job: unchanged).
    pub due_ms: u64,
    /// First enqueue, Unix ms.
    pub created_ms: u64,
    /// Delivery token of the current or last lease (0 before the first).
    pub token: u64,
}

fn u48(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x))
}

impl RecordHeader {
    /// Decodes the header at the start of `record`; the payload is `&record[HEADER_LEN..]`.
    /// Fails with a protocol error for a record shorter than its header or an unknown state.
    pub fn decode(record: &[u8]) -> Result<RecordHeader> {
        if record.len() < HEADER_LEN {
            return Err(Error::Protocol(format!(
                "record of {} bytes is shorter than its header",
                record.len()
            )));
        }
        let state = JobState::from_code(record[0])
            .ok_or_else(|| Error::Protocol(format!("unknown state byte {:#x}", record[0])))?;
        Ok(RecordHeader {
            state,
            attempts: record[1],
            due_ms: u48(&record[2..8]),
            created_ms: u48(&record[8..14]),
            token: u48(&record[14..20]),
        })
    }

    /// Encodes the header followed by `payload`, as the scripts write a record (for tests
    /// that plant records by hand). Times and tokens beyond 48 bits are cut to their low bits.
    pub fn encode(&self, payload: &[u8]) -> Vec<u8> {
        let mut r = Vec::with_capacity(HEADER_LEN + payload.len());
        r.push(self.state.code());
        r.push(self.attempts);
        for v in [self.due_ms, self.created_ms, self.token] {
            r.extend_from_slice(&v.to_be_bytes()[2..]);
        }
        r.extend_from_slice(payload);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_what_it_encodes() {
        let h = RecordHeader {
            state: JobState::Active,
            attempts: 3,
            due_ms: 1_790_000_000_123,
            created_ms: 1_790_000_000_000,
            token: 42,
        };
        let bytes = h.encode(b"payload");
        assert_eq!(bytes.len(), HEADER_LEN + 7);
        assert_eq!(RecordHeader::decode(&bytes).unwrap(), h);
        let e = RecordHeader::decode(&[b'A'; 5]).unwrap_err().to_string();
        assert!(e.contains("shorter than its header"), "{e}");
        let e = RecordHeader::decode(&[b'Z'; 25]).unwrap_err().to_string();
        assert!(e.contains("unknown state byte 0x5a"), "{e}");
    }
}
