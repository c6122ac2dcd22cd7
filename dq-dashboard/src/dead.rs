//! Dead jobs grouped by the error they died of, for the dead-queue page; and the dashboard's
//! error-text filter as the library's [`DeadFilter`], so that listing and bulk requeue or purge
//! go through the library's filtered listing and sweep (`dq_core::client`).

use dq_core::{DeadFilter, JobInfo, JobState, Page, TopicClient};

/// The error a dead job died of: the last of its history (empty when it has none).
pub fn last_error(job: &JobInfo) -> &str {
    job.history.last().map_or("", |a| a.error.as_str())
}

/// The filter of the dashboard's error text: every dead job for an empty text, else those
/// whose last error contains it.
pub(crate) fn filter_of(text: &str) -> DeadFilter {
    if text.is_empty() {
        DeadFilter::all()
    } else {
        DeadFilter::all().error_contains(text)
    }
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
