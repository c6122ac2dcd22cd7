//! Topic names and job keys: validation, generated keys, and the key → partition hash.
//!
//! Topic names end up inside Redis key names (`dq:{orders.close#0}:ready`), so they are held to
//! a strict alphabet. Job keys never appear in a Redis key name — they are hash fields, sorted-set
//! members and list elements — so they may be any visible text, bounded in length: no
//! whitespace, no control characters, and no invisible format characters (a zero-width space
//! or a byte-order mark makes a key that looks like another in every tool).

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
            Err(reason) => {
                // Name the first character at fault: an invisible one cannot be seen in the name.
                let reason = match name
                    .char_indices()
                    .find(|(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
                {
                    Some((at, c)) => format!("{reason}; found {} at byte {at}", describe(c)),
                    None => reason.to_owned(),
                };
                Err(Error::InvalidTopic { name, reason })
            }
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

/// A validated job key: 1–256 bytes of visible text: no whitespace, no control characters,
/// and no invisible format characters (Unicode category `Cf`: zero-width spaces and joiners,
/// the byte-order mark, direction marks, …), which would make a key look like another.
///
/// A key identifies a job within its topic: enqueueing an existing key creates no second job,
/// and cancel, reschedule and lookup find the job by it.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobKey(String);

impl JobKey {
    /// Validates `key` as a job key; [`Error::InvalidKey`] says why a key is refused and
    /// names the position (in bytes) of a character at fault.
    pub fn new(key: impl Into<String>) -> Result<Self> {
        let key = key.into();
        let reason = Self::check_length(&key).map(str::to_owned).or_else(|| {
            let (at, c) = key
                .char_indices()
                .find(|(_, c)| c.is_whitespace() || c.is_control() || is_format(*c))?;
            let what = if is_format(c) {
                "invisible format characters (zero-width spaces and joiners, byte-order marks, \
                 direction marks) are not allowed"
            } else {
                "whitespace and control characters are not allowed"
            };
            Some(format!("{what}; found {} at byte {at}", describe(c)))
        });
        match reason {
            Some(reason) => Err(Error::InvalidKey { key, reason }),
            None => Ok(JobKey(key)),
        }
    }

    /// A key read back from the store. Held to the rule keys were stored under before
    /// invisible format characters were refused, so that a job stored then is still read
    /// (listed, leased, acknowledged); new keys go through [`JobKey::new`].
    pub(crate) fn stored(key: impl Into<String>) -> Result<Self> {
        let key = key.into();
        let reason = Self::check_length(&key).or_else(|| {
            key.chars()
                .any(|c| c.is_whitespace() || c.is_control())
                .then_some("whitespace and control characters are not allowed")
        });
        match reason {
            Some(reason) => Err(Error::InvalidKey {
                key,
                reason: reason.to_owned(),
            }),
            None => Ok(JobKey(key)),
        }
    }

    fn check_length(key: &str) -> Option<&'static str> {
        if key.is_empty() {
            Some("must not be empty")
        } else if key.len() > MAX_KEY_LEN {
            Some("longer than 256 bytes")
        } else {
            None
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

/// Whether `c` is an invisible format character (Unicode general category `Cf`, as of Unicode
/// 16): it takes no room on screen, so a key holding one looks like a key without it.
pub fn is_format(c: char) -> bool {
    const FORMAT: &[(u32, u32)] = &[
        (0x00AD, 0x00AD),
        (0x0600, 0x0605),
        (0x061C, 0x061C),
        (0x06DD, 0x06DD),
        (0x070F, 0x070F),
        (0x0890, 0x0891),
        (0x08E2, 0x08E2),
        (0x180E, 0x180E),
        (0x200B, 0x200F),
        (0x202A, 0x202E),
        (0x2060, 0x2064),
        (0x2066, 0x206F),
        (0xFEFF, 0xFEFF),
        (0xFFF9, 0xFFFB),
        (0x110BD, 0x110BD),
        (0x110CD, 0x110CD),
        (0x13430, 0x1343F),
        (0x1BCA0, 0x1BCA3),
        (0x1D173, 0x1D17A),
        (0xE0001, 0xE0001),
        (0xE0020, 0xE007F),
    ];
    let c = u32::from(c);
    FORMAT.iter().any(|&(from, to)| (from..=to).contains(&c))
}

/// A character as an error names it: its code point, and itself when it can be seen.
fn describe(c: char) -> String {
    if c.is_whitespace() || c.is_control() || is_format(c) {
        format!("U+{:04X}", u32::from(c))
    } else {
        format!("{c:?} (U+{:04X})", u32::from(c))
    }
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
    fn keys_reject_invisible_format_characters_naming_where() {
        for (bad, at, code) in [
            ("order\u{200b}7", 5, "U+200B"),
            ("\u{feff}order-7", 0, "U+FEFF"),
            ("a\u{200d}b", 1, "U+200D"),
            ("a\u{2060}", 1, "U+2060"),
            ("é\u{200e}", 2, "U+200E"),
            ("tag\u{e0041}", 3, "U+E0041"),
            ("soft\u{ad}hyphen", 4, "U+00AD"),
            ("a\tb", 1, "U+0009"),
        ] {
            match JobKey::new(bad) {
                Err(Error::InvalidKey { key, reason }) => {
                    assert_eq!(key, bad);
                    assert!(
                        reason.ends_with(&format!("found {code} at byte {at}")),
                        "{reason}"
                    );
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        // Keys stored before the rule are still read back.
        assert!(JobKey::stored("order\u{200b}7").is_ok());
        assert!(JobKey::stored("a b").is_err());
        // Visible non-ASCII text stays allowed.
        for ok in ["zürich-7", "注文-7", "🦀", "a\u{301}"] {
            assert!(JobKey::new(ok).is_ok(), "{ok:?}");
        }
    }

    #[test]
    fn topic_errors_name_the_character_at_fault() {
        match Topic::new("orders\u{200b}.close") {
            Err(Error::InvalidTopic { reason, .. }) => {
                assert!(reason.ends_with("found U+200B at byte 6"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        match Topic::new("a:b") {
            Err(Error::InvalidTopic { reason, .. }) => {
                assert!(reason.ends_with("found ':' (U+003A) at byte 1"), "{reason}");
            }
            other => panic!("{other:?}"),
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
