//! Per-key windows of an enqueue (issue 25 item 4): [`KeyWindow`] — `unique_for`,
//! `debounce` and `throttle`, all by the store's clock (ARCHITECTURE.md §2, docs/UNIQUE.md).

use std::time::Duration;

use crate::error::{Error, Result};

/// A window an enqueue opens on its key, set with `.unique_for(d)`, `.debounce(d)` or
/// `.throttle(d)` on the enqueue builder or a [`JobSpec`](crate::JobSpec). An enqueue
/// refused by a window writes nothing and reports
/// [`EnqueueOutcome::Refused`](crate::EnqueueOutcome::Refused) with the time it ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyWindow {
    /// The key cannot be enqueued again while its job exists (reported as `Exists`, as
    /// always) and until `d` after the job finished (succeeded, dead, cancelled or expired):
    /// then `Refused`.
    UniqueFor(Duration),
    /// Last wins: the job runs `d` after the last enqueue of its key. An enqueue while the
    /// job waits (scheduled, ready or retry) replaces its payload and makes it due `d` from
    /// now (attempts start again); while it runs, the enqueue is refused as `Exists(Active)`
    /// and nothing is queued behind it (BullMQ's debounce answers the same). The job's due
    /// time is the window's: `debounce` with `delay` or `at` is refused.
    Debounce(Duration),
    /// First wins: for `d` after an accepted enqueue of the key, every later enqueue of it is
    /// refused (`Refused`), even if the first job has already run.
    Throttle(Duration),
}

impl KeyWindow {
    /// The longest window (ms): what a due time can hold, [`MAX_DUE_MS`](crate::MAX_DUE_MS).
    pub const MAX_MS: u64 = (1 << 48) - 1;

    /// The window's length.
    pub fn length(&self) -> Duration {
        match *self {
            KeyWindow::UniqueFor(d) | KeyWindow::Debounce(d) | KeyWindow::Throttle(d) => d,
        }
    }

    /// The window's name, as the builder method spells it.
    pub fn name(&self) -> &'static str {
        match self {
            KeyWindow::UniqueFor(_) => "unique_for",
            KeyWindow::Debounce(_) => "debounce",
            KeyWindow::Throttle(_) => "throttle",
        }
    }

    /// The window's length in ms (at least 1: a sub-ms window is a ms).
    pub fn ms(&self) -> u64 {
        u64::try_from(self.length().as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// Refuses, before anything is written, a window of zero or past what dq can store, and
    /// a debounce with a due time of its own (`due_given`: the job has a `delay` or an `at`;
    /// [`Error::InvalidWindow`]).
    pub fn check(&self, due_given: bool) -> Result<()> {
        let d = self.length();
        if d.is_zero() {
            return Err(Error::InvalidWindow(format!(
                "{} must be longer than zero (leave it out for none)",
                self.name()
            )));
        }
        if d.as_millis() > u128::from(Self::MAX_MS) {
            return Err(Error::InvalidWindow(format!(
                "{} of {d:?} is past what dq can store",
                self.name()
            )));
        }
        if matches!(self, KeyWindow::Debounce(_)) && due_given {
            return Err(Error::InvalidWindow(
                "debounce sets the due time (d after the last enqueue): leave out delay and at"
                    .into(),
            ));
        }
        Ok(())
    }

    /// How the enqueue script reads it: `u<ms>`, `b<ms>` or `t<ms>` (after a `|` in the
    /// job's mode argument).
    pub(crate) fn wire(&self) -> String {
        let kind = match self {
            KeyWindow::UniqueFor(_) => 'u',
            KeyWindow::Debounce(_) => 'b',
            KeyWindow::Throttle(_) => 't',
        };
        format!("{kind}{}", self.ms())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_checked() {
        assert_eq!(KeyWindow::MAX_MS, crate::job::MAX_DUE_MS);
        let s = Duration::from_secs(1);
        assert!(KeyWindow::UniqueFor(s).check(true).is_ok());
        assert!(KeyWindow::Throttle(s).check(false).is_ok());
        assert!(KeyWindow::Debounce(s).check(false).is_ok());
        assert!(matches!(
            KeyWindow::Debounce(s).check(true),
            Err(Error::InvalidWindow(_))
        ));
        assert!(matches!(
            KeyWindow::Throttle(Duration::ZERO).check(false),
            Err(Error::InvalidWindow(_))
        ));
        assert!(matches!(
            KeyWindow::UniqueFor(Duration::from_secs(u64::MAX / 1000)).check(false),
            Err(Error::InvalidWindow(_))
        ));
        assert_eq!(KeyWindow::Debounce(s).wire(), "b1000");
    }
}
