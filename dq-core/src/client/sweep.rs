//! Operating on the dead queue by filter: which dead jobs a filter takes ([`DeadFilter`]),
//! listing them page by page ([`TopicClient::list_dead`]), and requeueing or purging them in
//! bounded chunks with progress ([`DeadSweep`]).
//!
//! Everything here is built on the bounded store calls the client already has — one `list`
//! call per partition per page, one `requeue_dead` or `purge_dead` call per partition per
//! chunk — so a sweep of a million dead jobs is thousands of short script calls, never one
//! long one: Redis keeps serving the workers in between.

use std::collections::BTreeMap;
use std::time::Duration;

use super::handle::TopicClient;
use crate::error::{Error, Result};
use crate::inspect::{Cursor, DeadAction, JobPage, MAX_PAGE, Page};
use crate::job::{JobInfo, JobState, MAX_ERROR_LEN, Queue};
use crate::names::JobKey;

/// Most dead jobs one step of a [`DeadSweep`] reads and acts on (its default chunk): one
/// `list` and at most one requeue or purge call per partition, each over at most this many
/// jobs, which keeps every script call in the low milliseconds.
pub const MAX_SWEEP_CHUNK: usize = 500;

/// How many dead jobs one [`TopicClient::list_dead`] call reads at most while looking for
/// matches: a filter that matches little returns a short (or empty) page with a cursor
/// rather than reading the whole dead queue in one call.
pub const MAX_LIST_SCAN: usize = 5 * MAX_PAGE;

/// Which dead jobs an operation takes: all of them ([`DeadFilter::all`]), or those whose last
/// error contains a text, or that died longer ago than some age — or both.
///
/// "Last error" is the error text of the job's latest attempt in its history (the one that
/// sent it to the dead queue); a job with no history matches no text. The match is
/// case-sensitive, on the text as stored (cut to [`MAX_ERROR_LEN`] bytes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeadFilter {
    /// Only jobs whose last error contains this text.
    pub error_contains: Option<String>,
    /// Only jobs that died more than this long ago (on the store's clock).
    pub older_than: Option<Duration>,
}

impl DeadFilter {
    /// Every dead job.
    pub fn all() -> DeadFilter {
        DeadFilter::default()
    }

    /// Only jobs whose last error contains `text`.
    pub fn error_contains(mut self, text: impl Into<String>) -> DeadFilter {
        self.error_contains = Some(text.into());
        self
    }

    /// Only jobs that died more than `age` ago.
    pub fn older_than(mut self, age: Duration) -> DeadFilter {
        self.older_than = Some(age);
        self
    }

    /// Refuses a filter that cannot mean what was asked: an empty text (it would take every
    /// job, which [`DeadFilter::all`] says plainly), a text longer than an error is ever kept
    /// ([`MAX_ERROR_LEN`]; it could match nothing), or an age past the store's time range.
    pub fn check(&self) -> Result<()> {
        if let Some(text) = &self.error_contains {
            if text.is_empty() {
                return Err(Error::InvalidConfig(
                    "the error text to match is empty (to take every dead job, use no filter)"
                        .into(),
                ));
            }
            if text.len() > MAX_ERROR_LEN {
                return Err(Error::InvalidConfig(format!(
                    "the error text to match is {} bytes; errors are kept to {MAX_ERROR_LEN}, so it could match nothing",
                    text.len()
                )));
            }
        }
        if let Some(age) = self.older_than
            && u64::try_from(age.as_millis()).is_err()
        {
            return Err(Error::InvalidConfig(format!("age {age:?} is out of range")));
        }
        Ok(())
    }

    /// Whether dead job `job` passes this filter at store time `now_ms`. A job that is not
    /// dead never does.
    pub fn matches(&self, job: &JobInfo, now_ms: u64) -> bool {
        let Some(died) = job.died_ms else {
            return false;
        };
        if job.state != JobState::Dead {
            return false;
        }
        if let Some(age) = self.older_than {
            let age = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
            if died.saturating_add(age) >= now_ms {
                return false;
            }
        }
        if let Some(text) = &self.error_contains {
            match job.history.last() {
                Some(last) if last.error.contains(text.as_str()) => {}
                _ => return false,
            }
        }
        true
    }
}

/// How far a [`DeadSweep`] has got.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SweepProgress {
    /// Dead jobs read so far.
    pub scanned: u64,
    /// Of those, the ones the filter took.
    pub matched: u64,
    /// Of those, the ones requeued or deleted (a job taken by the filter that another client
    /// requeued or purged in between is not counted).
    pub done: u64,
}

/// Requeues or purges every dead job of a topic that a [`DeadFilter`] takes, one bounded
/// chunk per [`DeadSweep::step`], oldest death first ([`TopicClient::sweep_dead`]).
///
/// The sweep covers the jobs that were dead when it started: it reads the store's clock
/// first and stops at the first job that died after that, so jobs requeued by the sweep
/// that fail again are not swept twice, and it always ends. Each step reads one page of the
/// dead queue (one read-only call per partition), then requeues or deletes the matches of
/// that page (one [`Operate::act_on_dead`](crate::store::Operate::act_on_dead) call per
/// partition): the filter is checked on the page as read, and each job is acted on only if
/// it is still dead with the time of death listed — one that was requeued (and perhaps died
/// again, with another error) in between is left alone. Stopping between steps (an
/// error, Ctrl-C) leaves every job either done or untouched; starting a new sweep finishes
/// the work.
#[derive(Debug)]
pub struct DeadSweep {
    topic: TopicClient,
    /// The topic's recorded partition count, which the sweep routes with.
    partitions: u16,
    action: DeadAction,
    filter: DeadFilter,
    chunk: usize,
    started_ms: u64,
    /// Where the next step starts; `None` before the first step.
    cursor: Option<Cursor>,
    finished: bool,
    progress: SweepProgress,
}

impl DeadSweep {
    /// Sets how many dead jobs one step reads at most (1 to [`MAX_SWEEP_CHUNK`]; default
    /// [`MAX_SWEEP_CHUNK`]).
    pub fn chunk(mut self, jobs: usize) -> Result<DeadSweep> {
        if jobs == 0 || jobs > MAX_SWEEP_CHUNK {
            return Err(Error::InvalidConfig(format!(
                "sweep chunk {jobs} is not within 1..={MAX_SWEEP_CHUNK}"
            )));
        }
        self.chunk = jobs;
        Ok(self)
    }

    /// What this sweep does.
    pub fn action(&self) -> DeadAction {
        self.action
    }

    /// Progress so far.
    pub fn progress(&self) -> SweepProgress {
        self.progress
    }

    /// Whether the sweep has reached the end of the jobs it covers.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Reads and acts on the next chunk; returns the progress after it. Does nothing once
    /// the sweep is finished ([`DeadSweep::is_finished`]).
    pub async fn step(&mut self) -> Result<SweepProgress> {
        if self.finished {
            return Ok(self.progress);
        }
        let page = match self.cursor.clone() {
            Some(c) => Page::after(c, self.chunk),
            None => Page::first(self.chunk),
        };
        let JobPage { jobs, next } = self.topic.list(JobState::Dead, page).await?;
        let mut taken: Vec<(JobKey, u64)> = Vec::new();
        let mut past_start = false;
        for job in &jobs {
            if job.died_ms.is_some_and(|d| d > self.started_ms) {
                // Died after the sweep started (perhaps requeued by it and failed again):
                // everything from here on is newer still.
                past_start = true;
                break;
            }
            self.progress.scanned += 1;
            if let Some(died) = job.died_ms
                && self.filter.matches(job, self.started_ms)
            {
                taken.push((job.key.clone(), died));
            }
        }
        self.progress.matched += taken.len() as u64;
        // One call per partition, each acting only on jobs still dead as listed.
        let mut by_partition: BTreeMap<u16, Vec<(JobKey, u64)>> = BTreeMap::new();
        for (key, died) in taken {
            let queue = self.topic.queue_of(&key, self.partitions);
            by_partition
                .entry(queue.partition)
                .or_default()
                .push((key, died));
        }
        for (partition, seen) in by_partition {
            let queue = Queue::new(self.topic.topic.clone(), partition);
            let done = self
                .topic
                .client
                .store
                .act_on_dead(&queue, self.action, &seen)
                .await?;
            self.progress.done += done.into_iter().filter(|d| *d).count() as u64;
        }
        match next {
            Some(c) if !past_start => self.cursor = Some(c),
            _ => self.finished = true,
        }
        Ok(self.progress)
    }

    /// Runs the sweep to its end; returns the final progress.
    pub async fn run(mut self) -> Result<SweepProgress> {
        // Each step reads at least one job or finishes; the bound only guards a store that
        // returned empty pages with cursors forever.
        for _ in 0..u32::MAX {
            if self.finished {
                break;
            }
            self.step().await?;
        }
        Ok(self.progress)
    }
}

impl TopicClient {
    /// Starts a sweep that requeues or purges the topic's dead jobs that `filter` takes, in
    /// bounded chunks ([`DeadSweep`]). Reads the store's clock (the filter's ages count from
    /// it, and the sweep covers the jobs dead by then); a filter that cannot mean what was
    /// asked is refused first ([`DeadFilter::check`]).
    ///
    /// ```no_run
    /// # async fn demo(t: dq_core::TopicClient) -> dq_core::Result<()> {
    /// use dq_core::client::{DeadAction, DeadFilter};
    /// let mut sweep = t
    ///     .sweep_dead(DeadAction::Requeue, DeadFilter::all().error_contains("503"))
    ///     .await?;
    /// while !sweep.is_finished() {
    ///     let p = sweep.step().await?;
    ///     eprintln!("{} read, {} requeued", p.scanned, p.done);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn sweep_dead(&self, action: DeadAction, filter: DeadFilter) -> Result<DeadSweep> {
        filter.check()?;
        let partitions = self.ensure().await?;
        let started_ms = self.client.store.now_ms().await?;
        Ok(DeadSweep {
            topic: self.clone(),
            partitions,
            action,
            filter,
            chunk: MAX_SWEEP_CHUNK,
            started_ms,
            cursor: None,
            finished: false,
            progress: SweepProgress::default(),
        })
    }

    /// Requeues every dead job that `filter` takes, in bounded chunks; returns how many
    /// moved. See [`TopicClient::sweep_dead`] to show progress.
    pub async fn requeue_dead_where(&self, filter: DeadFilter) -> Result<u64> {
        let sweep = self.sweep_dead(DeadAction::Requeue, filter).await?;
        Ok(sweep.run().await?.done)
    }

    /// Deletes every dead job that `filter` takes, in bounded chunks; returns how many. See
    /// [`TopicClient::sweep_dead`] to show progress.
    pub async fn purge_dead_where(&self, filter: DeadFilter) -> Result<u64> {
        let sweep = self.sweep_dead(DeadAction::Purge, filter).await?;
        Ok(sweep.run().await?.done)
    }

    /// One page of the dead jobs that `filter` takes, oldest death first, and where the next
    /// page starts: [`TopicClient::list`] of [`JobState::Dead`], filtered.
    ///
    /// Reads at most [`MAX_LIST_SCAN`] dead jobs per call, so with a filter that matches few
    /// jobs a page may hold fewer than `page.limit` (even none) and still have a next one:
    /// stop when [`JobPage::next`] is `None`. The cursor is an ordinary dead-listing cursor.
    pub async fn list_dead(&self, filter: &DeadFilter, page: Page) -> Result<JobPage<JobInfo>> {
        filter.check()?;
        page.check(JobState::Dead)?;
        self.ensure().await?;
        let now_ms = self.client.store.now_ms().await?;
        let mut cursor = page.after;
        let mut jobs = Vec::new();
        let mut scanned = 0;
        // Each read asks for no more jobs than are still wanted, so every page read is used
        // up entirely and its own cursor is where the next one starts.
        while jobs.len() < page.limit && scanned < MAX_LIST_SCAN {
            let want = page.limit - jobs.len();
            let read = match cursor.clone() {
                Some(c) => Page::after(c, want),
                None => Page::first(want),
            };
            let got = self.list(JobState::Dead, read).await?;
            scanned += got.jobs.len().max(1);
            jobs.extend(got.jobs.into_iter().filter(|j| filter.matches(j, now_ms)));
            cursor = got.next;
            if cursor.is_none() {
                break;
            }
        }
        Ok(JobPage { jobs, next: cursor })
    }
}
