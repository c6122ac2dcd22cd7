//! Bulk work on the dead queue: requeue or purge every dead job whose last error matches a
//! filter, page by page in bounded chunks so Redis never stalls; and grouping dead jobs by
//! their error for the dead-queue page.

use dq_core::{JobInfo, JobState, Page, TopicClient};

/// Dead jobs read (and acted on) per step of [`apply_to_matching_dead`]: one listing call
/// and at most one requeue or purge call per partition, each on at most this many jobs.
pub const CHUNK: usize = 200;

/// What to do with dead jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeadAction {
    /// Back to `ready`, attempts reset.
    Requeue,
    /// Deleted.
    Purge,
}

/// The error a dead job died of: the last of its history (empty when it has none).
pub fn last_error(job: &JobInfo) -> &str {
    job.history.last().map_or("", |a| a.error.as_str())
}

/// Whether `job`'s last error contains `filter` (every job matches an empty filter).
pub fn matches(job: &JobInfo, filter: &str) -> bool {
    filter.is_empty() || last_error(job).contains(filter)
}

/// Requeues or purges every dead job of `topic` whose last error contains `filter` (every
/// dead job for an empty filter); returns how many were requeued or purged.
///
/// Walks the dead queue oldest death first, [`CHUNK`] jobs per step, acting on each step's
/// matches with the per-key calls. Bounded: it reads at most the queue's depth at the start
/// plus one chunk, so jobs that die while it runs (a requeued job failing again) do not keep
/// it going.
pub async fn apply_to_matching_dead(
    topic: &TopicClient,
    filter: &str,
    action: DeadAction,
) -> dq_core::Result<u64> {
    let depth = topic.stats().await?.dead;
    let max_steps = depth / CHUNK as u64 + 2;
    let mut page = Page::first(CHUNK);
    let mut done = 0;
    for _ in 0..max_steps {
        let listed = topic.list(JobState::Dead, page).await?;
        let keys: Vec<&str> = listed
            .jobs
            .iter()
            .filter(|j| matches(j, filter))
            .map(|j| j.key.as_ref())
            .collect();
        if !keys.is_empty() {
            done += match action {
                DeadAction::Requeue => topic.requeue_dead(&keys).await?,
                DeadAction::Purge => topic.purge_dead(&keys).await?,
            };
        }
        match listed.next {
            Some(next) => page = Page::after(next, CHUNK),
            None => break,
        }
    }
    Ok(done)
}

/// Most dead jobs read to group them by error on one page view.
pub(crate) const GROUP_SCAN: usize = 5000;

/// Dead jobs grouped by last error, most frequent first, from the first [`GROUP_SCAN`] of
/// the queue; also how many were read.
pub(crate) async fn group_errors(
    topic: &TopicClient,
) -> dq_core::Result<(Vec<(String, u64)>, usize)> {
    let mut counts = std::collections::HashMap::<String, u64>::new();
    let mut page = Page::first(500);
    let mut read = 0;
    for _ in 0..GROUP_SCAN / 500 {
        let listed = topic.list(JobState::Dead, page).await?;
        read += listed.jobs.len();
        for j in &listed.jobs {
            *counts.entry(last_error(j).to_owned()).or_default() += 1;
        }
        match listed.next {
            Some(next) => page = Page::after(next, 500),
            None => break,
        }
    }
    let mut groups: Vec<(String, u64)> = counts.into_iter().collect();
    groups.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Ok((groups, read))
}
