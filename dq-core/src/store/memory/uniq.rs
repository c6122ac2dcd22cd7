//! The key windows of a partition in memory (the Redis `uniq` hash and `uniq_at` sorted set):
//! `unique_for` of live jobs, and the windows that refuse an enqueue of their key until they
//! end (`KeyWindow`, `lib.lua` `end_unique`).

use std::collections::HashMap;

use crate::names::JobKey;

/// One partition's key windows.
#[derive(Default)]
pub(super) struct Windows {
    /// Job key → the `unique_for` window (ms) of a live job enqueued with one (`uniq`).
    pub(super) live: HashMap<JobKey, u64>,
    /// Job key → when its window ends (ms, `uniq_at`).
    pub(super) until: HashMap<JobKey, u64>,
    /// The size of `until` after its last prune (it is pruned when it doubles).
    pruned_at: usize,
}

impl Windows {
    /// When the window on `key` ends, if it has not by `now`.
    pub(super) fn ends(&self, key: &JobKey, now: u64) -> Option<u64> {
        self.until.get(key).copied().filter(|&until| until > now)
    }

    /// A job of `key` ended at `now` (succeeded, dead, cancelled, expired): its `unique_for`
    /// window starts (`end_unique`).
    pub(super) fn ended(&mut self, key: &JobKey, now: u64) {
        if let Some(d) = self.live.remove(key) {
            self.open(key, now.saturating_add(d), now);
        }
    }

    /// Opens a window on `key` until `until` (a throttle's, or a finished unique job's).
    pub(super) fn open(&mut self, key: &JobKey, until: u64, now: u64) {
        self.until.insert(key.clone(), until);
        if self.until.len() > 2 * self.pruned_at.max(32) {
            self.until.retain(|_, &mut u| u > now);
            self.pruned_at = self.until.len();
        }
    }
}
