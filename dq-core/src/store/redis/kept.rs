//! Kept jobs as Redis stores them (`lua/lib.lua` `pack_kept`): a finished job that its topic's
//! retention keeps, in the partition's `kept` hash.
//!
//! Format 1, the first byte: u8 version, u8 outcome letter ([`FinishedAs::code`]), u48
//! finished ms, u48 started ms (0: none), u8 attempts, u8 result status (0 none, 1 value,
//! 2 not stored, the bytes saying why), u32 result length and bytes, u16 worker id length and
//! bytes, u32 history length and bytes (as the `hist` hash keeps it), u32 progress length and
//! bytes (as the `progress` hash keeps it), then the job's record as it was, in its own record
//! format.

use super::record::{Record, decode_history};
use crate::error::{Error, Result};
use crate::finished::{FinishedAs, FinishedJob, StoredResult};
use crate::names::JobKey;

/// The kept-job format this dq writes and reads (`lua/lib.lua` `KEPT_FORMAT`, tied by a test).
pub(crate) const KEPT_FORMAT: u8 = 1;

/// Reads a kept value of `key`, its record in a format `reads` covers; `kept_until_ms` is its
/// score in `kept_at`.
pub(crate) fn decode_kept(
    key: JobKey,
    bytes: &[u8],
    reads: u8,
    kept_until_ms: u64,
) -> Result<FinishedJob> {
    let bad = |what: &str| Error::Protocol(format!("kept job {key}: {what}"));
    let mut r = Cursor { bytes, at: 0 };
    let version = r.take(1).ok_or_else(|| bad("empty"))?[0];
    if version != KEPT_FORMAT {
        return Err(bad(&format!(
            "kept-job format {version}, this dq reads {KEPT_FORMAT}"
        )));
    }
    let short = || bad("cut short");
    let outcome = FinishedAs::from_code(r.take(1).ok_or_else(short)?[0])
        .ok_or_else(|| bad("unknown outcome"))?;
    let finished_ms = r.uint(6).ok_or_else(short)?;
    let started_ms = r.uint(6).ok_or_else(short)?;
    let attempts = r.uint(1).ok_or_else(short)? as u32;
    let status = r.uint(1).ok_or_else(short)?;
    let result_len = r.uint(4).ok_or_else(short)? as usize;
    let result = r.take(result_len).ok_or_else(short)?.to_vec();
    let worker_len = r.uint(2).ok_or_else(short)? as usize;
    let worker = r.take(worker_len).ok_or_else(short)?;
    let hist_len = r.uint(4).ok_or_else(short)? as usize;
    let hist = r.take(hist_len).ok_or_else(short)?;
    let progress_len = r.uint(4).ok_or_else(short)? as usize;
    let progress = r.take(progress_len).ok_or_else(short)?;
    let record = Record::decode_leased(r.rest().to_vec(), reads, None)?;
    let result = match status {
        0 => StoredResult::None,
        1 => StoredResult::Value(result),
        2 => StoredResult::NotStored(String::from_utf8_lossy(&result).into_owned()),
        other => return Err(bad(&format!("result status {other}"))),
    };
    Ok(FinishedJob {
        key,
        outcome,
        due_ms: record.due_ms,
        created_ms: record.created_ms,
        started_ms: (started_ms > 0).then_some(started_ms),
        finished_ms,
        kept_until_ms,
        attempts,
        worker: (!worker.is_empty()).then(|| String::from_utf8_lossy(worker).into_owned()),
        result,
        history: if hist.is_empty() {
            Vec::new()
        } else {
            decode_history(hist)?
        },
        progress: if progress.is_empty() {
            None
        } else {
            Some(crate::progress::decode(progress)?)
        },
        payload: record.payload,
    })
}

/// The script argument of a result for `ack.lua`: '' none, 'v' + bytes, 'x' + why not stored.
pub(super) fn result_arg(result: &StoredResult) -> Vec<u8> {
    match result {
        StoredResult::None => Vec::new(),
        StoredResult::Value(v) => {
            let mut out = Vec::with_capacity(v.len() + 1);
            out.push(b'v');
            out.extend_from_slice(v);
            out
        }
        StoredResult::NotStored(why) => {
            let mut out = vec![b'x'];
            out.extend_from_slice(why.as_bytes());
            out
        }
    }
}

/// A reader of big-endian fields.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let out = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(out)
    }

    fn uint(&mut self, n: usize) -> Option<u64> {
        Some(
            self.take(n)?
                .iter()
                .fold(0u64, |acc, b| (acc << 8) | u64::from(*b)),
        )
    }

    fn rest(&self) -> &'a [u8] {
        &self.bytes[self.at..]
    }
}
