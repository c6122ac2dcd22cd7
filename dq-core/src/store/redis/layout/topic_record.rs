//! The topic registry's records: the value of one field of `<ns>:topics`, the metadata of
//! one topic (ARCHITECTURE.md §4).
//!
//! A record is text, readable with `redis-cli HGETALL <ns>:topics`:
//! `v=1;partitions=4;created_ms=1790000000000`. `v` is the format version; fields are
//! `name=value` pairs separated by `;`, in any order. A reader ignores fields it does not know
//! (so a field can be added without a new version) and refuses a version it does not know.
//! `topic.lua` writes it; this module reads it.

use crate::error::{Error, Result};

/// The format version this dq writes and reads.
pub const TOPIC_RECORD_VERSION: u32 = 1;

/// One topic's record in the registry, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopicRecord {
    /// The topic's partition count (at least 1).
    pub partitions: u16,
    /// When it was recorded, Unix ms by Redis's clock.
    pub created_ms: u64,
}

impl TopicRecord {
    /// Decodes a record; a protocol error names what is wrong with it.
    pub fn decode(text: &str) -> Result<TopicRecord> {
        let bad = |what: String| Error::Protocol(format!("topic record {text:?}: {what}"));
        let (mut version, mut partitions, mut created_ms) = (None, None, None);
        for field in text.split(';') {
            let (name, value) = field
                .split_once('=')
                .ok_or_else(|| bad(format!("field {field:?} is not name=value")))?;
            let number = || {
                value
                    .parse::<u64>()
                    .map_err(|_| bad(format!("{name} = {value:?} is not a number")))
            };
            match name {
                "v" => version = Some(number()?),
                "partitions" => partitions = Some(number()?),
                "created_ms" => created_ms = Some(number()?),
                _ => {} // a later field: this version does not need it
            }
        }
        match version {
            Some(v) if v == u64::from(TOPIC_RECORD_VERSION) => {}
            Some(v) => return Err(bad(format!("format version {v} is not known to this dq"))),
            None => return Err(bad("no format version".into())),
        }
        let partitions = partitions
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p >= 1)
            .ok_or_else(|| bad("no partition count from 1 to 65535".into()))?;
        Ok(TopicRecord {
            partitions,
            created_ms: created_ms.ok_or_else(|| bad("no created_ms".into()))?,
        })
    }

    /// Encodes a record as `topic.lua` writes it (for tests that plant records by hand).
    pub fn encode(&self) -> String {
        format!(
            "v={TOPIC_RECORD_VERSION};partitions={};created_ms={}",
            self.partitions, self.created_ms
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_what_it_encodes_and_names_what_is_wrong() {
        let r = TopicRecord {
            partitions: 4,
            created_ms: 1_790_000_000_000,
        };
        assert_eq!(r.encode(), "v=1;partitions=4;created_ms=1790000000000");
        assert_eq!(TopicRecord::decode(&r.encode()).unwrap(), r);
        // Fields in any order; unknown ones ignored.
        let later = "created_ms=5;future=x;partitions=2;v=1";
        assert_eq!(
            TopicRecord::decode(later).unwrap(),
            TopicRecord {
                partitions: 2,
                created_ms: 5
            }
        );
        for (text, needle) in [
            ("v=2;partitions=2;created_ms=5", "format version 2"),
            ("partitions=2;created_ms=5", "no format version"),
            ("v=1;partitions=0;created_ms=5", "no partition count"),
            ("v=1;partitions=70000;created_ms=5", "no partition count"),
            ("v=1;partitions=2", "no created_ms"),
            ("v=1;partitions=x;created_ms=5", "is not a number"),
            ("4", "is not name=value"),
        ] {
            let e = TopicRecord::decode(text).unwrap_err().to_string();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }
}
