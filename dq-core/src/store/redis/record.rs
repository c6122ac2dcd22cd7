//! The job record as stored in the records hash: a header ([`RecordHeader`], see the layout
//! module; format 1 to 5), then the payload; and the attempt history kept beside it.

use super::layout::RecordHeader;
use crate::error::{Error, Result};
use crate::job::{AttemptOutcome, AttemptRecord, JobState};

/// A decoded record.
#[derive(Debug)]
pub(crate) struct Record {
    pub state: JobState,
    pub attempts: u32,
    pub due_ms: u64,
    pub created_ms: u64,
    pub token: u64,
    /// The job's expiry (format 4), Unix ms.
    pub expires_ms: Option<u64>,
    /// The job's priority (format 5; normal before).
    pub priority: u8,
    /// The job's group (format 6; none before).
    pub group: Option<crate::group::GroupName>,
    /// The job's batch (format 7; none before).
    pub batch: Option<crate::batch::BatchId>,
    pub payload: Vec<u8>,
}

impl Record {
    /// Decodes a record of a format up to `reads`; a newer one is [`Error::NewerFormat`].
    #[cfg(test)]
    pub fn decode(bytes: Vec<u8>, reads: u8) -> Result<Record> {
        Record::decode_leased(bytes, reads, None)
    }

    /// Decodes a record read beside the lease its job runs under, if a script found one (the
    /// `leases` hash of a format-3 record: [`RecordHeader::leased`]).
    pub fn decode_leased(mut bytes: Vec<u8>, reads: u8, lease: Option<u64>) -> Result<Record> {
        let mut h = RecordHeader::decode_reading(&bytes, reads)?;
        if let Some(token) = lease {
            h = h.leased(token);
        }
        let group = h
            .group(&bytes)
            .map(|g| crate::group::GroupName::stored(g.to_owned()));
        let batch = h
            .batch(&bytes)
            .map(|b| crate::batch::BatchId::stored(b.to_owned()));
        bytes.drain(..h.payload_start());
        Ok(Record {
            state: h.state,
            attempts: u32::from(h.attempts),
            due_ms: h.due_ms,
            created_ms: h.created_ms,
            token: h.token,
            expires_ms: (h.expires_ms > 0).then_some(h.expires_ms),
            priority: h.priority,
            group,
            batch,
            payload: bytes,
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
        let r = Record::decode(bytes.clone(), 2).unwrap();
        assert_eq!(r.state, JobState::Active);
        let mut two = vec![2];
        two.extend_from_slice(&bytes);
        let r2 = Record::decode(two.clone(), 2).unwrap();
        assert_eq!((r2.token, &r2.payload[..]), (42, &b"payload"[..]));
        assert!(matches!(
            Record::decode(two, 1),
            Err(Error::NewerFormat {
                format: 2,
                reads: 1
            })
        ));
        assert_eq!(
            (r.attempts, r.due_ms, r.created_ms, r.token),
            (3, 1_790_000_000_123, 1_790_000_000_000, 42)
        );
        assert_eq!(r.payload, b"payload");
        assert!(Record::decode(vec![b'A'; 5], 2).is_err());
        assert!(Record::decode(vec![b'Z'; 25], 2).is_err());
    }
}
