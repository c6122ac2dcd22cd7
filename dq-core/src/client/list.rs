//! Listing a topic's jobs by state, page by page, across its partitions
//! ([`TopicClient::list`]): each partition's part is read by one bounded store call, and the
//! parts are merged into one order with an exact cursor.

use super::handle::TopicClient;
use crate::error::Result;
use crate::inspect::{Cursor, JobPage, ListChunk, ListFrom, ListPos, Page};
use crate::job::{JobInfo, JobState};

impl TopicClient {
    /// One page of the topic's jobs in `state`, across all its partitions, merged in one
    /// order:
    ///
    /// - `scheduled` and `retry` by due time (a retry's next attempt), `active` by lease
    ///   deadline, `dead` by time of death; jobs of the same millisecond in the order the store
    ///   keeps them, then by key. Paging by [`Cursor`] is exact: the next page starts right
    ///   after the last job of this one, so however jobs move in between, no job is listed
    ///   twice and none that stayed in place is skipped, at any depth.
    /// - `ready` in queue order (the order workers take them) within a partition; partitions
    ///   are merged by due time. The queue moves as workers take jobs from its front, so a
    ///   later page may miss jobs that moved up past its cursor. (Redis only: a job made ready
    ///   again while a stale entry of it is still queued may be listed on two pages.)
    ///
    /// Each page costs one read-only call per partition, each reading at most `limit` jobs
    /// (`ready`: skipping at most a bounded number of stale entries), so a page reads up to
    /// `partitions × limit` jobs to return `limit`. `limit` is 1 to [`MAX_PAGE`](crate::inspect::MAX_PAGE); a page may
    /// hold fewer jobs and still have a next one: stop when [`JobPage::next`] is `None`.
    /// Listing writes nothing, so it works when Redis is at `maxmemory`.
    pub async fn list(&self, state: JobState, page: Page) -> Result<JobPage<JobInfo>> {
        page.check(state)?;
        let partitions = self.ensure().await?;
        let mut parts = Vec::with_capacity(usize::from(partitions));
        for queue in self.queues(partitions) {
            let from = match &page.after {
                Some(cursor) => cursor.start_of(queue.partition, partitions)?,
                None => ListFrom::Start,
            };
            parts.push(
                self.client
                    .store
                    .list(&queue, state, &from, page.limit)
                    .await?,
            );
        }
        Ok(if state == JobState::Ready {
            merge_ready(parts, page.after.as_ref(), partitions, page.limit)?
        } else {
            merge_sorted(parts, state, page.limit)
        })
    }
}

/// Merges the partitions' parts of a time-ordered listing: the first `limit` by place. The
/// next page starts after the last one taken, if anything is left beyond it.
fn merge_sorted(parts: Vec<ListChunk>, state: JobState, limit: usize) -> JobPage<JobInfo> {
    let more = parts.iter().any(|p| p.more);
    let mut all: Vec<(ListPos, JobInfo)> = parts.into_iter().flat_map(|p| p.jobs).collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    let left_over = all.len() > limit;
    all.truncate(limit);
    let next = match all.last() {
        Some((pos, _)) if more || left_over => Some(Cursor::sorted(state, pos.clone())),
        _ => None,
    };
    JobPage {
        jobs: all.into_iter().map(|(_, info)| info).collect(),
        next,
    }
}

/// Merges the partitions' parts of the `ready` listing: each partition's jobs stay in queue
/// order; the next job is the earliest due of the partitions' next ones. The cursor keeps,
/// per partition, the queue position after the last job taken (or where its call stopped).
fn merge_ready(
    parts: Vec<ListChunk>,
    after: Option<&Cursor>,
    partitions: u16,
    limit: usize,
) -> Result<JobPage<JobInfo>> {
    let mut next = Vec::with_capacity(parts.len());
    let mut heads = Vec::with_capacity(parts.len());
    for (p, part) in parts.iter().enumerate() {
        let start = match after {
            Some(c) => match c.start_of(p as u16, partitions)? {
                ListFrom::Index(i) => i,
                _ => 0,
            },
            None => 0,
        };
        next.push(start);
        heads.push(part.jobs.iter().peekable());
    }
    let mut jobs = Vec::new();
    while jobs.len() < limit {
        let pick = heads
            .iter_mut()
            .enumerate()
            .filter_map(|(p, h)| h.peek().map(|(_, info)| (info.due_ms, p)))
            .min();
        let Some((_, p)) = pick else { break };
        let Some((pos, info)) = heads[p].next() else {
            break;
        };
        next[p] = pos.order.0 + 1;
        jobs.push(info.clone());
    }
    let mut more = false;
    for (p, (part, head)) in parts.iter().zip(heads.iter_mut()).enumerate() {
        if head.peek().is_some() {
            more = true;
        } else {
            // Everything this partition returned was taken: resume where its call stopped.
            next[p] = next[p].max(part.next_index);
            more |= part.more;
        }
    }
    Ok(JobPage {
        jobs,
        next: more.then(|| Cursor::ready(next)),
    })
}
