//! The embedded store's clock and time arithmetic: Unix ms from a base read once, plus the time
//! elapsed on tokio's clock (virtual under `tokio::time::pause()`), and due times bounded as
//! the Redis record bounds them.

use std::time::{Duration, SystemTime};

use crate::job::unix_ms;

/// The latest due time the Redis record can hold (48 bits of ms); kept here so both stores
/// clamp alike.
pub(super) const MAX_DUE: u64 = crate::job::MAX_DUE_MS;

/// Unix ms from a fixed base plus tokio's elapsed time.
pub(super) struct Clock {
    pub(super) base_ms: u64,
    pub(super) start: tokio::time::Instant,
}

impl Clock {
    pub(super) fn new(start: SystemTime) -> Self {
        Clock {
            base_ms: unix_ms(start),
            start: tokio::time::Instant::now(),
        }
    }

    pub(super) fn now_ms(&self) -> u64 {
        let elapsed = tokio::time::Instant::now().saturating_duration_since(self.start);
        self.base_ms.saturating_add(ms(elapsed))
    }
}

pub(super) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A due time as stored: not before `now`, not past [`MAX_DUE`] (Lua `bound_due`).
pub(super) fn bound_due(due: i128, now: u64) -> u64 {
    due.clamp(i128::from(now), i128::from(MAX_DUE.max(now))) as u64
}
