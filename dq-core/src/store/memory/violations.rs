//! The embedded store's audit, the counterpart of the Redis key-space check
//! (`layout::check_invariants`): every broken invariant of every partition, for test harnesses.

use super::partition::{Partition, Place, Record};
use super::store::MemoryStore;
use crate::job::{JobState, MAX_HISTORY};
use crate::names::JobKey;

impl MemoryStore {
    /// Every broken internal invariant, one line each (empty when all is well): each job sits
    /// in exactly the structure its state names, nothing dangles, ready jobs are due, leased
    /// and retried jobs have a token and an attempt, histories are bounded, no partition past
    /// its topic's recorded count holds a job, and each batch's counts are its members'. For
    /// test harnesses (the counterpart of the Redis key-space check).
    #[doc(hidden)]
    pub fn violations(&self) -> Vec<String> {
        // Registry, then partitions: the one order both locks are taken in.
        let topics = self.lock_topics();
        let state = self.lock();
        let now = self.clock.now_ms();
        let mut v = Vec::new();
        for (queue, p) in state.iter() {
            p.violations(now, &mut |what| {
                v.push(format!("{}#{}: {what}", queue.topic, queue.partition));
            });
            // The Redis checker's rule: no job where the topic's recorded count says no
            // worker looks.
            if let Some(meta) = topics.get(&queue.topic)
                && queue.partition >= meta.partitions
                && !p.jobs.is_empty()
            {
                v.push(format!(
                    "{}#{}: {} job(s) beyond the topic's {} recorded partition(s)",
                    queue.topic,
                    queue.partition,
                    p.jobs.len(),
                    meta.partitions
                ));
            }
        }
        drop((topics, state));
        // (the batches' lock is never taken with the partitions')
        self.lock_batches().violations(&mut |what| v.push(what));
        v
    }
}

impl Partition {
    /// Reports every broken invariant of this partition to `report`.
    fn violations(&self, now: u64, report: &mut dyn FnMut(String)) {
        let s = &self.sets;
        for (key, rec) in &self.jobs {
            let held = match rec.place {
                Place::Scheduled(seq) => s.scheduled.get(&(rec.due_ms, seq)) == Some(key),
                Place::Retry(seq) => s.retry.get(&(rec.due_ms, seq)) == Some(key),
                Place::Ready(band, pos) => match &rec.group {
                    // a grouped ready job lives in its group's queue
                    Some(g) => {
                        s.groups.queues.get(g).and_then(|q| q.get(&(band, pos))) == Some(key)
                    }
                    None => s.ready.get(&(band, pos)) == Some(key),
                },
                Place::Active(deadline) => s.active.contains(&(deadline, key.clone())),
                Place::Dead(died) => s.dead.contains(&(died, key.clone())),
            };
            if !held {
                report(format!("{key:?} is {:?} but not held there", rec.place));
            }
            let state = rec.state();
            if state == JobState::Ready && rec.due_ms > now {
                report(format!(
                    "ready job {key:?} is due at {} (now {now})",
                    rec.due_ms
                ));
            }
            if matches!(state, JobState::Scheduled | JobState::Retry) && rec.due_ms < rec.created_ms
            {
                report(format!("{key:?} is due before it was created"));
            }
            if matches!(state, JobState::Retry | JobState::Active)
                && (rec.token == 0 || rec.attempts == 0)
            {
                report(format!("{state} job {key:?} has never run"));
            }
            if let Some(g) = &rec.group {
                // a running grouped job counts against its group's cap while it runs
                let counted = s.groups.running.get(g).is_some_and(|r| r.contains(key));
                if (state == JobState::Active) != counted {
                    report(format!(
                        "{key:?} of group {g:?} in state {state} is{} counted as running",
                        if counted { "" } else { " not" }
                    ));
                }
            }
            if rec.history.len() > MAX_HISTORY {
                report(format!(
                    "{key:?} keeps {} history entries",
                    rec.history.len()
                ));
            }
            if rec.token > self.counters.token {
                report(format!("{key:?} has a token never handed out"));
            }
        }
        // A cancel request names a running job: every end of a delivery drops it.
        for key in self.control.cancels.keys() {
            let state = self.jobs.get(key).map(Record::state);
            if state != Some(JobState::Active) {
                report(format!(
                    "a cancel request for {key:?}, which is not running ({state:?})"
                ));
            }
        }
        let mut members = 0;
        let mut check = |key: &JobKey, want: JobState, what: &str| {
            members += 1;
            match self.jobs.get(key) {
                None => report(format!("`{what}` member {key:?} has no record")),
                Some(rec) if rec.state() != want => report(format!(
                    "`{what}` member {key:?} has a record in state {}",
                    rec.state()
                )),
                Some(_) => {}
            }
        };
        s.scheduled
            .values()
            .for_each(|k| check(k, JobState::Scheduled, "scheduled"));
        s.retry
            .values()
            .for_each(|k| check(k, JobState::Retry, "retry"));
        s.ready
            .values()
            .for_each(|k| check(k, JobState::Ready, "ready"));
        s.groups
            .queues
            .values()
            .flat_map(|q| q.values())
            .for_each(|k| check(k, JobState::Ready, "gready"));
        s.active
            .iter()
            .for_each(|(_, k)| check(k, JobState::Active, "active"));
        s.dead
            .iter()
            .for_each(|(_, k)| check(k, JobState::Dead, "dead"));
        if members != self.jobs.len() {
            report(format!(
                "{} jobs but {members} entries in the ordered structures",
                self.jobs.len()
            ));
        }
        let queued: usize = s
            .groups
            .queues
            .values()
            .map(std::collections::BTreeMap::len)
            .sum();
        if queued != s.groups.queued {
            report(format!(
                "the group queues hold {queued} jobs but count {}",
                s.groups.queued
            ));
        }
        for (g, q) in &s.groups.queues {
            if q.is_empty() {
                report(format!("group {g:?} has an empty queue"));
            }
            // a group with due jobs has a turn or waits: none is forgotten
            if !s.groups.in_rotation(g) && !s.groups.waiting.iter().any(|(_, w)| w == g) {
                report(format!(
                    "group {g:?} has {} due jobs but neither a turn nor a wait",
                    q.len()
                ));
            }
            for key in q.values() {
                if self.jobs.get(key).and_then(|r| r.group.as_ref()) != Some(g) {
                    report(format!("{key:?} is queued in group {g:?}, not its own"));
                }
            }
        }
        for (g, running) in &s.groups.running {
            for key in running {
                let rec = self.jobs.get(key);
                if rec.map(Record::state) != Some(JobState::Active)
                    || rec.and_then(|r| r.group.as_ref()) != Some(g)
                {
                    report(format!(
                        "{key:?} counts as running in group {g:?} but is not its running job"
                    ));
                }
            }
        }
        // (the Redis checker's rule: a `uniq` entry is a live job's window)
        for key in self.windows.live.keys() {
            if !self.jobs.contains_key(key) {
                report(format!("`uniq` holds {key}, which has no record"));
            }
        }
    }
}
