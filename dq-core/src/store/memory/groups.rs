//! Groups in the embedded store: the mirror of `lua/lib.lua`'s groups section, `group.lua`
//! and the group passes of `fetch.lua` (see `crate::group`).

use std::collections::HashMap;

use crate::group::{GroupChange, GroupLimits, GroupName, GroupState};

/// One partition's group settings and state (the `gctl`, `groups`, `gwait`, `gactive` and
/// `gready` keys on Redis).
#[derive(Default)]
pub(super) struct Groups {
    /// The default limits of every group without its own (`*`).
    pub(super) default: Option<GroupLimits>,
    /// Groups' own limits (`l:<group>`).
    pub(super) own: HashMap<GroupName, GroupLimits>,
    /// When each held group may start jobs again (`h:<group>`).
    pub(super) holds: HashMap<GroupName, u64>,
}

impl Groups {
    /// `group.lua`: applies `change` (checked by the caller) and reports the group's state.
    pub(super) fn change(&mut self, change: &GroupChange, now: u64) -> GroupState {
        match (&change.group, change.limits) {
            (None, Some(l)) => self.default = l,
            (Some(g), Some(Some(l))) => {
                self.own.insert(g.clone(), l);
            }
            (Some(g), Some(None)) => {
                self.own.remove(g);
            }
            _ => {}
        }
        if let (Some(g), Some(hold)) = (&change.group, change.hold) {
            let until = now.saturating_add(u64::try_from(hold.as_millis()).unwrap_or(u64::MAX));
            let h = self.holds.entry(g.clone()).or_insert(0);
            *h = (*h).max(until);
        }
        GroupState {
            limits: change.group.as_ref().and_then(|g| self.own.get(g).copied()),
            default_limits: self.default,
            held_until_ms: change
                .group
                .as_ref()
                .and_then(|g| self.holds.get(g).copied())
                .filter(|&h| h > now),
            running: 0,
            waiting: 0,
        }
    }
}
