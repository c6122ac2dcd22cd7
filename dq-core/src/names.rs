//! Topic names and job keys: validation, generated keys, and the key → partition hash.
//!
//! Topic names end up inside Redis key names (`dq:{orders.close#0}:ready`), so they are held to
//! a strict alphabet. Job keys never appear in a Redis key name — they are hash fields, sorted-set
//! members and list elements — so they may be any printable text, bounded in length.

use std::fmt;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};

pub use dq_syntax::MAX_TOPIC_LEN;
/// Longest accepted job key, in bytes.
pub const MAX_KEY_LEN: usize = 256;

/// A validated topic name: 1–128 characters of `[A-Za-z0-9._-]`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Topic(String);

impl Topic {
    /// Validates `name` as a topic.
    pub fn new(name: impl Into<String>) -> Result<Self> {
        let name = name.into();
        match dq_syntax::check_topic(&name) {
            Err(reason) => Err(Error::InvalidTopic { name, reason }),
            Ok(()) => Ok(Topic(name)),
        }
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl AsRef<str> for Topic {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// A validated job key: 1–256 bytes of printable text (no whitespace or control characters).
///
/// A key identifies a job within its topic: enqueueing an existing key creates no second job,
/// and cancel, reschedule and lookup find the job by it.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobKey(String);

impl JobKey {
    /// Validates `key` as a job key.
    pub fn new(key: impl Into<String>) -> Result<Self> {
        let key = key.into();
        let reason = if key.is_empty() {
            Some("must not be empty")
        } else if key.len() > MAX_KEY_LEN {
            Some("longer than 256 bytes")
        } else if key.chars().any(|c| c.is_whitespace() || c.is_control()) {
            Some("whitespace and control characters are not allowed")
        } else {
            None
        };
        match reason {
            Some(reason) => Err(Error::InvalidKey { key, reason }),
            None => Ok(JobKey(key)),
        }
    }

    /// A fresh, unique key that sorts by creation time (16 characters).
    ///
    /// 48 bits of milliseconds, a 16-bit counter that keeps keys made in the same millisecond in
    /// order, and 32 random bits chosen once per process, in an alphabet whose ASCII order is its
    /// numeric order.
    pub fn generate() -> Self {
        JobKey(KEY_GENERATOR.next())
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The partition of this key in a topic with `partitions` partitions (a stable hash).
    pub fn partition(&self, partitions: u16) -> u16 {
        partition_of(self.0.as_bytes(), partitions)
    }
}

impl fmt::Display for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl AsRef<str> for JobKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// The partition of a job key: CRC-32 of its bytes, modulo the partition count.
///
/// Stable across processes, versions and platforms; producers and workers must agree on it.
pub fn partition_of(key: &[u8], partitions: u16) -> u16 {
    if partitions <= 1 {
        return 0;
    }
    (crc32fast::hash(key) % u32::from(partitions)) as u16
}

/// Sortable alphabet: ASCII order equals digit order.
const ALPHABET: &[u8; 64] = b"-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz";

struct KeyGenerator {
    state: Mutex<(u64, u16)>,
    salt: u32,
}

static KEY_GENERATOR: std::sync::LazyLock<KeyGenerator> =
    std::sync::LazyLock::new(|| KeyGenerator {
        state: Mutex::new((0, 0)),
        salt: rand::random(),
    });

impl KeyGenerator {
    fn next(&self) -> String {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let (ms, counter) = {
            let mut state = self
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let (last_ms, last_counter) = *state;
            // Never go backwards: a clock step back or a counter overflow borrows the next ms.
            *state = if now > last_ms {
                (now, 0)
            } else if last_counter == u16::MAX {
                (last_ms + 1, 0)
            } else {
                (last_ms, last_counter + 1)
            };
            *state
        };
        let value: u128 = (u128::from(ms & 0xFFFF_FFFF_FFFF) << 48)
            | (u128::from(counter) << 32)
            | u128::from(self.salt);
        (0..16)
            .rev()
            .map(|i| ALPHABET[((value >> (i * 6)) & 63) as usize] as char)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_accept_the_documented_alphabet() {
        for ok in ["orders.close", "a", "A-b_c.9", &"x".repeat(128)] {
            assert!(Topic::new(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a:b", "{a}", "a b", "é", "a\n", &"x".repeat(129)] {
            assert!(
                matches!(Topic::new(bad), Err(Error::InvalidTopic { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn keys_reject_blank_and_control() {
        for ok in ["order-7", "order:7", "{x}", "Ünïcødé", &"k".repeat(256)] {
            assert!(JobKey::new(ok).is_ok(), "{ok}");
        }
        for bad in ["", " ", "a b", "a\tb", "a\0b", "\u{7f}", &"k".repeat(257)] {
            assert!(
                matches!(JobKey::new(bad), Err(Error::InvalidKey { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn generated_keys_are_unique_valid_and_sorted() {
        let keys: Vec<String> = (0..100_000).map(|_| JobKey::generate().0).collect();
        assert!(
            keys.windows(2).all(|w| w[0] < w[1]),
            "not strictly increasing"
        );
        assert!(
            keys.iter()
                .all(|k| k.len() == 16 && JobKey::new(k.clone()).is_ok())
        );
    }

    #[test]
    fn partition_is_stable_and_in_range() {
        assert_eq!(partition_of(b"order-7", 1), 0);
        let p = partition_of(b"order-7", 8);
        assert!(p < 8);
        assert_eq!(p, partition_of(b"order-7", 8));
        // Pinned so that a change of hash (which would strand jobs) fails loudly.
        assert_eq!(
            partition_of(b"order-7", 1024),
            (crc32fast::hash(b"order-7") % 1024) as u16
        );
    }
}
