//! The record header: the first bytes of every value in a partition's records hash, in each
//! record format this dq reads, and the rule that tells the formats apart.
//!
//! Format 1 ([`LEGACY_FORMAT`], written before records carried a version): the 20-byte header,
//! Lua `struct` format `>c1BI6I6I6` (see `lua/lib.lua`): state (1 byte) · attempts (u8) · due
//! ms (u48) · created ms (u48) · token (u48), then the payload. Format 2: the version byte
//! `0x02`, then the same 20 bytes (21 in all), then the payload. Format 3 ([`LEAN_FORMAT`]):
//! the version byte `0x03`, state · attempts · due · created (15 bytes in all, no token), then
//! the payload; its state is never active (a lease leaves the record as it is and keeps its
//! token in the partition's `leases` hash) and its attempts count the attempts finished (a
//! running job's current attempt is one more: [`RecordHeader::leased`]). Format 4
//! ([`EXPIRING_FORMAT`]): format 3's 15 bytes, then the job's expiry, Unix ms (u48, 0: none;
//! 21 bytes in all), then the payload; leased like format 3. Format 5 ([`PRIORITY_FORMAT`]):
//! format 4's 21 bytes, then the job's priority (u8, 0..=9: [`crate::Priority`]; 22 bytes in
//! all), then the payload. Format 6 ([`GROUP_FORMAT`]): format 5's 22 bytes, then the length
//! of the job's group (u8, 0: none; 23 bytes in all), then the group's bytes, then the payload
//! ([`RecordHeader::payload_start`]). Format 7 ([`BATCH_FORMAT`]): format 6's header and group,
//! then the length of the id of the batch the job is a member of (u8, 0: none), then the id's
//! bytes, then the payload. The rule
//! ([`record_format`]): a first byte that is a state letter is format 1; a first byte in
//! 2..=[`MAX_FORMAT`] is that format; a format above what the process reads is newer
//! ([`Error::NewerFormat`]: left untouched); anything else is not a record. A 100-byte job's
//! record fits a 112-byte allocation in format 3 (128 before); see the memory benchmark.

use crate::error::{Error, Result};
use crate::format::{
    BATCH_FORMAT, EXPIRING_FORMAT, GROUP_FORMAT, LEAN_FORMAT, LEGACY_FORMAT, NEWEST_FORMAT,
    PRIORITY_FORMAT,
};
use crate::job::JobState;

/// Header length in bytes of a format-1 record; the payload starts here. A versioned record
/// has its version byte before it: see [`header_len`].
pub const HEADER_LEN: usize = 20;

/// The largest format number a version byte may hold: a first byte in `2..=MAX_FORMAT` is a
/// version byte (state letters are above it).
pub const MAX_FORMAT: u8 = 31;

/// The fixed header length of a record of `format` (one this dq reads): where its payload
/// starts, but for a format-6 record, whose group's bytes come between
/// ([`RecordHeader::payload_start`]).
pub const fn header_len(format: u8) -> usize {
    if format <= LEGACY_FORMAT {
        HEADER_LEN
    } else if format < LEAN_FORMAT {
        HEADER_LEN + 1
    } else if format < EXPIRING_FORMAT {
        LEAN_HEADER_LEN
    } else if format < PRIORITY_FORMAT {
        LEAN_HEADER_LEN + 6
    } else if format < GROUP_FORMAT {
        LEAN_HEADER_LEN + 7
    } else {
        LEAN_HEADER_LEN + 8
    }
}

/// Header length of a format-3 record: version, state, attempts, due, created (no token).
pub const LEAN_HEADER_LEN: usize = 15;

/// What the first byte of a stored value says about it, for a process that reads formats
/// up to `reads`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordFormat {
    /// A record of this format, one the process reads (it may still be too short or hold an
    /// unknown state: [`RecordHeader::decode`] checks those).
    Known(u8),
    /// A record of a newer format than the process reads: never rewritten, buried or deleted.
    Newer(u8),
    /// Not a record (empty, or a first byte that is neither a version nor a state letter).
    Corrupt,
}

/// Classifies a stored value by its first byte (the rule of `lua/lib.lua`'s `format_of`,
/// tied by a test), for a process that reads formats up to `reads`.
pub fn record_format(record: &[u8], reads: u8) -> RecordFormat {
    match record.first() {
        Some(&b) if (2..=MAX_FORMAT).contains(&b) && b > reads => RecordFormat::Newer(b),
        Some(&b) if (2..=MAX_FORMAT).contains(&b) => RecordFormat::Known(b),
        Some(&b) if JobState::from_code(b).is_some() => RecordFormat::Known(LEGACY_FORMAT),
        _ => RecordFormat::Corrupt,
    }
}

/// A decoded record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// The format the record was written in (1: no version byte).
    pub format: u8,
    /// The job's state: the truth the sorted sets and the ready list index.
    pub state: JobState,
    /// Attempts started (a release or a deferral gives one back); in a format-3 record the
    /// attempts finished (a running job's current one is not counted: see [`Self::leased`]).
    pub attempts: u8,
    /// Due time, Unix ms (for a retry: the next attempt; for a dead job: unchanged).
    pub due_ms: u64,
    /// First enqueue, Unix ms.
    pub created_ms: u64,
    /// Delivery token of the current or last lease (0 before the first); always 0 in a
    /// format-3 record, whose lease token is in the `leases` hash.
    pub token: u64,
    /// The job's expiry, Unix ms; 0: none (always 0 before format 4).
    pub expires_ms: u64,
    /// The job's priority, 0..=9 (always [`crate::Priority::NORMAL`], 5, before format 5).
    pub priority: u8,
    /// The length of the job's group name, whose bytes follow the fixed header (0: no group;
    /// always 0 before format 6): [`RecordHeader::group`].
    pub group_len: u8,
    /// The length of the id of the job's batch, whose bytes follow the group's (0: in no
    /// batch; always 0 before format 7): [`RecordHeader::batch`].
    pub batch_len: u8,
}

fn u48(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x))
}

impl RecordHeader {
    /// Decodes the header at the start of `record`, of any format this dq reads; the payload
    /// is `&record[header_len(h.format)..]`. Fails with [`Error::NewerFormat`] for a record
    /// of a newer format, and with a protocol error for a value that is not a record (too
    /// short for its header, an unknown state or first byte).
    pub fn decode(record: &[u8]) -> Result<RecordHeader> {
        RecordHeader::decode_reading(record, NEWEST_FORMAT)
    }

    /// As [`decode`](RecordHeader::decode), for a process that reads formats up to `reads`.
    pub fn decode_reading(record: &[u8], reads: u8) -> Result<RecordHeader> {
        let format = match record_format(record, reads) {
            RecordFormat::Known(f) => f,
            RecordFormat::Newer(format) => return Err(Error::NewerFormat { format, reads }),
            RecordFormat::Corrupt => {
                return Err(match record.first() {
                    None => Error::Protocol("empty record".into()),
                    Some(b) => Error::Protocol(format!("unknown state byte {b:#x}")),
                });
            }
        };
        let fixed = header_len(format);
        let group_len = if format >= GROUP_FORMAT {
            record.get(fixed - 1).copied().unwrap_or(0)
        } else {
            0
        };
        let mut len = fixed + usize::from(group_len);
        let batch_len = if format >= BATCH_FORMAT {
            let n = record.get(len).copied().unwrap_or(0);
            len += 1 + usize::from(n);
            n
        } else {
            0
        };
        if record.len() < len {
            return Err(Error::Protocol(format!(
                "record of {} bytes is shorter than its header",
                record.len()
            )));
        }
        let h = &record[usize::from(format > LEGACY_FORMAT)..fixed];
        let state = JobState::from_code(h[0])
            .filter(|s| format < LEAN_FORMAT || *s != JobState::Active)
            .ok_or_else(|| Error::Protocol(format!("unknown state byte {:#x}", h[0])))?;
        Ok(RecordHeader {
            format,
            state,
            attempts: h[1],
            due_ms: u48(&h[2..8]),
            created_ms: u48(&h[8..14]),
            token: if format < LEAN_FORMAT {
                u48(&h[14..20])
            } else {
                0
            },
            expires_ms: if format >= EXPIRING_FORMAT {
                u48(&h[14..20])
            } else {
                0
            },
            // (a damaged byte above the highest counts as the highest, as lib.lua's priority_of)
            priority: if format >= PRIORITY_FORMAT {
                h[20].min(crate::job::Priority::MAX)
            } else {
                crate::job::Priority::NORMAL.level()
            },
            group_len,
            batch_len,
        })
    }

    /// Where the payload of the record this header was decoded from starts: after the fixed
    /// header and the group's bytes.
    pub fn payload_start(&self) -> usize {
        let batch = if self.format >= BATCH_FORMAT {
            1 + usize::from(self.batch_len)
        } else {
            0
        };
        header_len(self.format) + usize::from(self.group_len) + batch
    }

    /// The id of the batch the record this header was decoded from is a member of
    /// (`record`: the same bytes), if any (format 7 on).
    pub fn batch<'a>(&self, record: &'a [u8]) -> Option<&'a str> {
        if self.batch_len == 0 {
            return None;
        }
        let at = header_len(self.format) + usize::from(self.group_len) + 1;
        std::str::from_utf8(record.get(at..at + usize::from(self.batch_len))?).ok()
    }

    /// The group of the record this header was decoded from (`record`: the same bytes), if
    /// it has one.
    pub fn group<'a>(&self, record: &'a [u8]) -> Option<&'a str> {
        if self.group_len == 0 {
            return None;
        }
        let at = header_len(self.format);
        std::str::from_utf8(record.get(at..at + usize::from(self.group_len))?).ok()
    }

    /// The header of a job known to be running under lease `token` (read beside its record:
    /// the `leases` hash of a format-3 record): active, that token, and — for format 3, whose
    /// header counts the attempts finished — the running attempt counted. A header of format
    /// 1 or 2 already says all of it and is returned as it is.
    pub fn leased(self, token: u64) -> RecordHeader {
        if self.format < LEAN_FORMAT {
            return self;
        }
        RecordHeader {
            state: JobState::Active,
            attempts: self.attempts.saturating_add(1),
            token,
            ..self
        }
    }

    /// Encodes the header in its format followed by `payload`, as the scripts write a record
    /// (for tests and tools that plant records by hand; format 3 writes no token, and a
    /// state it never holds, active, as given). Times and tokens beyond 48 bits are
    /// cut to their low bits. A format above [`MAX_FORMAT`] is written as [`MAX_FORMAT`].
    pub fn encode(&self, payload: &[u8]) -> Vec<u8> {
        self.encode_in_group("", payload)
    }

    /// As [`encode_in_group`](RecordHeader::encode_in_group), with the id of the job's batch
    /// (format 7 on; empty: none; `batch_len` is taken from `batch`, cut at 255 bytes).
    pub fn encode_in_batch(&self, group: &str, batch: &str, payload: &[u8]) -> Vec<u8> {
        self.encode_parts(group, batch, payload)
    }

    /// As [`encode`](RecordHeader::encode), with the job's group (format 6 on; empty: none;
    /// `group_len` is taken from `group`, cut at 255 bytes).
    pub fn encode_in_group(&self, group: &str, payload: &[u8]) -> Vec<u8> {
        self.encode_in_batch(group, "", payload)
    }

    fn encode_parts(&self, group: &str, batch: &str, payload: &[u8]) -> Vec<u8> {
        let format = self.format.clamp(LEGACY_FORMAT, MAX_FORMAT);
        let mut r = Vec::with_capacity(header_len(format) + payload.len());
        if format > LEGACY_FORMAT {
            r.push(format);
        }
        r.push(self.state.code());
        r.push(self.attempts);
        for v in [self.due_ms, self.created_ms] {
            r.extend_from_slice(&v.to_be_bytes()[2..]);
        }
        if format < LEAN_FORMAT {
            r.extend_from_slice(&self.token.to_be_bytes()[2..]);
        } else if format >= EXPIRING_FORMAT {
            r.extend_from_slice(&self.expires_ms.to_be_bytes()[2..]);
        }
        if format >= PRIORITY_FORMAT {
            r.push(self.priority);
        }
        if format >= GROUP_FORMAT {
            let g = &group.as_bytes()[..group.len().min(255)];
            r.push(g.len() as u8);
            r.extend_from_slice(g);
        }
        if format >= BATCH_FORMAT {
            let b = &batch.as_bytes()[..batch.len().min(255)];
            r.push(b.len() as u8);
            r.extend_from_slice(b);
        }
        r.extend_from_slice(payload);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_what_it_encodes_in_every_format() {
        for format in LEGACY_FORMAT..=NEWEST_FORMAT {
            let lean = format >= LEAN_FORMAT;
            let h = RecordHeader {
                format,
                state: if lean {
                    JobState::Retry
                } else {
                    JobState::Active
                },
                attempts: 3,
                due_ms: 1_790_000_000_123,
                created_ms: 1_790_000_000_000,
                token: if lean { 0 } else { 42 },
                expires_ms: if format >= EXPIRING_FORMAT {
                    1_790_000_060_000
                } else {
                    0
                },
                priority: if format >= PRIORITY_FORMAT { 8 } else { 5 },
                group_len: 0,
                batch_len: 0,
            };
            let bytes = h.encode(b"payload");
            // (format 7 on: the batch's length byte, 0, after the fixed header)
            let start = header_len(format) + usize::from(format >= BATCH_FORMAT);
            assert_eq!(h.payload_start(), start);
            assert_eq!(bytes.len(), start + 7);
            assert_eq!(RecordHeader::decode(&bytes).unwrap(), h);
            assert_eq!(&bytes[start..], b"payload");
        }
        // format 7: the group's bytes, the batch's length and bytes, then the payload
        let member = RecordHeader {
            format: BATCH_FORMAT,
            state: JobState::Ready,
            attempts: 0,
            due_ms: 1,
            created_ms: 1,
            token: 0,
            expires_ms: 0,
            priority: 5,
            group_len: 2,
            batch_len: 8,
        };
        let bytes = member.encode_in_batch("g1", "order-17", b"p");
        assert_eq!(bytes.len(), 23 + 2 + 1 + 8 + 1);
        let back = RecordHeader::decode(&bytes).unwrap();
        assert_eq!(back, member);
        assert_eq!(back.group(&bytes), Some("g1"));
        assert_eq!(back.batch(&bytes), Some("order-17"));
        assert_eq!(&bytes[back.payload_start()..], b"p");
        // a batch past the record's end is no record
        assert!(RecordHeader::decode(&bytes[..bytes.len() - 3]).is_err());
        assert_eq!(
            (
                header_len(1),
                header_len(2),
                header_len(3),
                header_len(4),
                header_len(5),
                header_len(6)
            ),
            (20, 21, 15, 21, 22, 23)
        );
        // format 6: the group's bytes between the fixed header and the payload
        let grouped = RecordHeader {
            format: GROUP_FORMAT,
            state: JobState::Ready,
            attempts: 0,
            due_ms: 7,
            created_ms: 6,
            token: 0,
            expires_ms: 0,
            priority: 5,
            group_len: 8,
            batch_len: 0,
        };
        let bytes = grouped.encode_in_group("tenant-7", b"p");
        let back = RecordHeader::decode(&bytes).unwrap();
        assert_eq!(back, grouped);
        assert_eq!(back.group(&bytes), Some("tenant-7"));
        assert_eq!(&bytes[back.payload_start()..], b"p");
        // a group length past the record's end: not a record
        assert!(RecordHeader::decode(&bytes[..bytes.len() - 2]).is_err());
        // format 3: never active in the record; leased() says what a lease adds
        let lean = RecordHeader {
            format: LEAN_FORMAT,
            state: JobState::Ready,
            attempts: 2,
            due_ms: 5,
            created_ms: 4,
            token: 0,
            expires_ms: 0,
            priority: 5,
            group_len: 0,
            batch_len: 0,
        };
        let mut active = lean.encode(b"p");
        active[1] = JobState::Active.code();
        let e = RecordHeader::decode(&active).unwrap_err().to_string();
        assert!(e.contains("unknown state byte 0x41"), "{e}");
        let running = lean.leased(9);
        assert_eq!(
            (running.state, running.attempts, running.token),
            (JobState::Active, 3, 9)
        );
        let two = RecordHeader {
            format: 2,
            ..running
        };
        assert_eq!(two.leased(1), two);
        let e = RecordHeader::decode(&[b'A'; 5]).unwrap_err().to_string();
        assert!(e.contains("shorter than its header"), "{e}");
        let e = RecordHeader::decode(&[2, b'A', 0]).unwrap_err().to_string();
        assert!(e.contains("shorter than its header"), "{e}");
        let e = RecordHeader::decode(&[b'Z'; 25]).unwrap_err().to_string();
        assert!(e.contains("unknown state byte 0x5a"), "{e}");
    }

    #[test]
    fn a_newer_format_is_newer_not_corrupt() {
        let mut rec = vec![NEWEST_FORMAT + 1];
        rec.extend_from_slice(&[0; 30]);
        assert!(matches!(
            RecordHeader::decode(&rec),
            Err(Error::NewerFormat {
                format,
                reads: NEWEST_FORMAT
            }) if format == NEWEST_FORMAT + 1
        ));
        let two = RecordHeader {
            format: 2,
            state: JobState::Ready,
            attempts: 0,
            due_ms: 1,
            created_ms: 1,
            token: 0,
            expires_ms: 0,
            priority: 5,
            group_len: 0,
            batch_len: 0,
        }
        .encode(b"x");
        assert!(matches!(
            RecordHeader::decode_reading(&two, LEGACY_FORMAT),
            Err(Error::NewerFormat {
                format: 2,
                reads: 1
            })
        ));
        assert_eq!(record_format(&[32], 2), RecordFormat::Corrupt);
        assert_eq!(record_format(&[1], 2), RecordFormat::Corrupt);
        assert_eq!(record_format(&[], 2), RecordFormat::Corrupt);
        assert_eq!(record_format(b"D", 2), RecordFormat::Known(1));
    }
}
