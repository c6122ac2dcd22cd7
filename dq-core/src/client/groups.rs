//! A topic's groups at run time: their limits and holds, and what each is doing
//! ([`crate::group`]; README "Groups").

use std::time::Duration;

use super::handle::TopicClient;
use super::retrying::retry_harmless;
use crate::control::Rate;
use crate::error::Result;
use crate::group::{GroupChange, GroupLimits, GroupName, GroupState};

impl TopicClient {
    /// Sets (or with `None` removes) the limits of `group`, or with no group the default
    /// limits of every group of the topic without its own: at most `concurrency` of a group's
    /// jobs running at once, `rate` started per period, `weight` started per turn. Each
    /// partition enforces its share, as for the topic's limits (a cap must be at least the
    /// partition count). Takes effect from each partition's next fetch; a group's own limits
    /// replace the default ones whole. Refused before any change when
    /// [`GroupLimits::check`] or [`GroupName::new`] refuses its input.
    pub async fn set_group_limits(
        &self,
        group: Option<&str>,
        limits: Option<GroupLimits>,
    ) -> Result<GroupState> {
        let group = group.map(GroupName::new).transpose()?;
        let partitions = self.ensure().await?;
        if let Some(l) = &limits {
            l.check(partitions)?;
        }
        self.change_groups(
            GroupChange {
                group,
                limits: Some(limits),
                hold: None,
            },
            partitions,
        )
        .await
    }

    /// Starts none of `group`'s jobs for `hold` from now (each partition's clock), in every
    /// partition: what a handler's [`JobError::rate_limited`](crate::JobError::rate_limited)
    /// does for its group, by hand. Never shortens a hold in place.
    pub async fn hold_group(&self, group: &str, hold: Duration) -> Result<GroupState> {
        let group = GroupName::new(group)?;
        let partitions = self.ensure().await?;
        self.change_groups(
            GroupChange {
                group: Some(group),
                limits: None,
                hold: Some(hold),
            },
            partitions,
        )
        .await
    }

    /// The limits, hold and jobs of `group` (with `None`: the default limits, and every
    /// group's running and waiting jobs), summed over the topic's partitions.
    pub async fn group_state(&self, group: Option<&str>) -> Result<GroupState> {
        let group = group.map(GroupName::new).transpose()?;
        let partitions = self.ensure().await?;
        self.change_groups(
            GroupChange {
                group,
                ..GroupChange::default()
            },
            partitions,
        )
        .await
    }

    /// Applies `change` to every partition (each its share of the limits), in order; each
    /// call is harmless to repeat, so each is retried through connection trouble. Reports the
    /// topic's whole limits (partition 0's, scaled back), the latest hold, the sums.
    async fn change_groups(&self, change: GroupChange, partitions: u16) -> Result<GroupState> {
        crate::group::check_change(&change)?;
        let mut out = GroupState::default();
        // (the caps' shares, summed over the partitions)
        let (mut own_cap, mut default_cap) = (0u32, 0u32);
        let store = &self.client.store;
        for queue in self.queues(partitions) {
            let share = GroupChange {
                limits: change
                    .limits
                    .map(|l| l.map(|l| l.share(partitions, queue.partition))),
                ..change.clone()
            };
            let (state, _) = retry_harmless(|| store.group(&queue, &share), true).await?;
            let cap = |l: Option<GroupLimits>| l.and_then(|l| l.concurrency).unwrap_or(0);
            own_cap = own_cap.saturating_add(cap(state.limits));
            default_cap = default_cap.saturating_add(cap(state.default_limits));
            if queue.partition == 0 {
                // a rate's share is the count over `partitions` times the period
                let whole = |l: GroupLimits| GroupLimits {
                    rate: l.rate.map(|r| Rate {
                        count: r.count,
                        per: r.per / u32::from(partitions.max(1)),
                    }),
                    ..l
                };
                out.limits = state.limits.map(whole);
                out.default_limits = state.default_limits.map(whole);
            }
            out.held_until_ms = out.held_until_ms.max(state.held_until_ms);
            out.running += state.running;
            out.waiting += state.waiting;
        }
        if let Some(l) = &mut out.limits {
            l.concurrency = l.concurrency.map(|_| own_cap);
        }
        if let Some(l) = &mut out.default_limits {
            l.concurrency = l.concurrency.map(|_| default_cap);
        }
        Ok(out)
    }
}
