//! The soak's load: one `dq::Client` enqueuing jobs one at a time at a steady rate with a mix
//! of due times, keys and topics, cancelling a sample of waiting jobs and rescheduling a
//! sample by key — every outcome recorded, so the end can reconcile.
//!
//! | choice | share |
//! |---|---|
//! | due now / in 0.1–5 s / in 5 s–`--max-delay` | 40 % / 30 % / 30 % |
//! | business key (`soak-<n>`) / generated key | 50 % / 50 % |
//! | topic `fault.flaky` (first attempt fails, retried 500 ms later) / `fault.work` | 10 % / 90 % |
//! | cancelled 1 s after enqueue (jobs of the far band only: they are waiting) | 10 % of them |
//! | rescheduled 0.5 s after enqueue to 0.1–10 s from then (business keys not due now) | 10 % of them |
//!
//! Handlers work 1–20 ms (the payload's `sleep_ms`).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dq::{CancelOutcome, Client, Job, NewDue, RescheduleOutcome};
use dq_faults::ledger::now_ms;
use dq_faults::{Expected, FaultPayload, FlakyJob, WorkJob};
use serde::Serialize;

use super::args::{FAR_FROM, Plan};
use crate::enqueue::SplitMix64;

/// How long after its enqueue a sampled job is cancelled.
const CANCEL_AFTER: Duration = Duration::from_secs(1);
/// How long after its enqueue a sampled job is rescheduled.
const RESCHEDULE_AFTER: Duration = Duration::from_millis(500);
/// The farthest a reschedule moves a job (from the time of the reschedule).
pub const RESCHEDULE_MAX: Duration = Duration::from_secs(10);
/// The most enqueues in one pass of the loop, so that cancels and reschedules keep their
/// time after a stall.
const BURST: u64 = 1_000;

/// What the load did, by outcome.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Counts {
    /// Enqueues that returned `Ok` (each created a job: every key is new).
    pub enqueued: u64,
    /// Enqueues that returned an error (their jobs may or may not exist).
    pub enqueue_errors: u64,
    /// Of the enqueued: with a business key.
    pub business_keys: u64,
    /// Of the enqueued: in `fault.flaky`.
    pub flaky: u64,
    /// Of the enqueued: due now, in 0.1–5 s, in 5 s or more.
    pub due_now: u64,
    /// See `due_now`.
    pub due_soon: u64,
    /// See `due_now`.
    pub due_far: u64,
    /// Cancel outcomes.
    pub cancel: CancelCounts,
    /// Reschedule outcomes.
    pub reschedule: RescheduleCounts,
}

/// Cancel outcomes, one counter each.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CancelCounts {
    /// Removed while waiting.
    pub cancelled: u64,
    /// Running: a cancel request was recorded.
    pub requested: u64,
    /// Not found (it had run already).
    pub not_found: u64,
    /// In the dead queue.
    pub dead: u64,
    /// Gone after a retried call.
    pub gone: u64,
    /// The call failed (it may have cancelled the job).
    pub errors: u64,
}

/// Reschedule outcomes, one counter each.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RescheduleCounts {
    /// Moved.
    pub rescheduled: u64,
    /// Running: not touched.
    pub running: u64,
    /// Not found (it had run already).
    pub not_found: u64,
    /// In the dead queue.
    pub dead: u64,
    /// The call failed.
    pub errors: u64,
}

/// What the load leaves for the reconciliation.
#[derive(Debug, Default)]
pub struct Produced {
    /// Accepted, ambiguous and cancelled keys.
    pub expected: Expected,
    /// Outcome counters.
    pub counts: Counts,
    /// How long the load ran.
    pub elapsed: Duration,
}

/// A later action on a job.
#[derive(Debug)]
enum Action {
    Cancel,
    Reschedule(Duration),
}

/// A job's topic.
#[derive(Clone, Copy, Debug)]
enum Topic {
    Work,
    Flaky,
}

/// The producer: run it on a task, stop it with the flag.
pub struct Load {
    client: Client,
    plan: Plan,
    rng: SplitMix64,
    out: Produced,
    /// Due actions, in time order (each kind has one fixed lag, so pushing keeps the order).
    cancels: VecDeque<(Instant, String, Topic)>,
    reschedules: VecDeque<(Instant, String, Topic, Duration)>,
    /// Jobs enqueued so far, for progress lines.
    progress: Arc<AtomicU64>,
}

impl Load {
    /// A load with its own random stream; `progress` counts accepted enqueues as they happen.
    pub fn new(client: Client, plan: Plan, progress: Arc<AtomicU64>) -> Load {
        Load {
            client,
            rng: SplitMix64(0x50a6_0000 ^ plan.seed),
            plan,
            out: Produced::default(),
            cancels: VecDeque::new(),
            reschedules: VecDeque::new(),
            progress,
        }
    }

    /// Produces until `stop` is set; returns what was done. Pending cancels and reschedules
    /// are dropped (they were never sent, so there is nothing to record).
    pub async fn run(mut self, stop: Arc<AtomicBool>) -> Produced {
        let start = Instant::now();
        let mut n: u64 = 0;
        while !stop.load(Ordering::Relaxed) {
            let target = (start.elapsed().as_secs_f64() * self.plan.rate) as u64;
            let burst_end = target.min(n + BURST);
            while n < burst_end {
                self.enqueue(n).await;
                n += 1;
            }
            self.due_actions().await;
            // Pacing: the next slice of the rate.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.out.elapsed = start.elapsed();
        self.out
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.rng.next() % 100 < percent
    }

    fn millis(&mut self, from: Duration, to: Duration) -> Duration {
        let (a, b) = (from.as_millis() as u64, to.as_millis() as u64);
        Duration::from_millis(a + self.rng.next() % (b - a).max(1))
    }

    async fn enqueue(&mut self, n: u64) {
        let topic = if self.chance(10) {
            Topic::Flaky
        } else {
            Topic::Work
        };
        let key = self.chance(50).then(|| format!("soak-{n}"));
        let band = self.rng.next() % 10;
        let delay = match band {
            0..=3 => None,
            4..=6 => Some(self.millis(Duration::from_millis(100), FAR_FROM)),
            _ => Some(self.millis(FAR_FROM, self.plan.max_delay)),
        };
        let payload = FaultPayload::new(n, 1 + self.rng.next() % 20);
        let result = match topic {
            Topic::Work => send::<WorkJob>(&self.client, payload, key.as_deref(), delay).await,
            Topic::Flaky => send::<FlakyJob>(&self.client, payload, key.as_deref(), delay).await,
        };
        let c = &mut self.out.counts;
        let key = match result {
            Ok(key) => key,
            Err(e) => {
                c.enqueue_errors += 1;
                if c.enqueue_errors <= 5 {
                    eprintln!("soak: enqueue {n} failed: {e}");
                }
                if let Some(k) = key {
                    self.out.expected.ambiguous.insert(k);
                }
                return;
            }
        };
        self.out.expected.ok.insert(key.clone(), now_ms());
        self.progress.fetch_add(1, Ordering::Relaxed);
        c.enqueued += 1;
        c.business_keys += u64::from(key.starts_with("soak-"));
        c.flaky += u64::from(matches!(topic, Topic::Flaky));
        match band {
            0..=3 => c.due_now += 1,
            4..=6 => c.due_soon += 1,
            _ => c.due_far += 1,
        }
        let now = Instant::now();
        if band >= 7 && self.chance(10) {
            self.cancels.push_back((now + CANCEL_AFTER, key, topic));
        } else if band >= 4 && key.starts_with("soak-") && self.chance(10) {
            let to = self.millis(Duration::from_millis(100), RESCHEDULE_MAX);
            self.reschedules
                .push_back((now + RESCHEDULE_AFTER, key, topic, to));
        }
    }

    /// Sends the cancels and reschedules whose time has come.
    async fn due_actions(&mut self) {
        let now = Instant::now();
        while self.cancels.front().is_some_and(|(at, ..)| *at <= now) {
            let Some((_, key, topic)) = self.cancels.pop_front() else {
                break;
            };
            self.act(&key, topic, Action::Cancel).await;
        }
        while self.reschedules.front().is_some_and(|(at, ..)| *at <= now) {
            let Some((_, key, topic, to)) = self.reschedules.pop_front() else {
                break;
            };
            self.act(&key, topic, Action::Reschedule(to)).await;
        }
    }

    async fn act(&mut self, key: &str, topic: Topic, action: Action) {
        let client = &self.client;
        match action {
            Action::Cancel => {
                let result = match topic {
                    Topic::Work => client.cancel::<WorkJob>(key).await,
                    Topic::Flaky => client.cancel::<FlakyJob>(key).await,
                };
                let c = &mut self.out.counts.cancel;
                // Whether the job may end cancelled (and so without a finished run).
                let cancelled = match result {
                    Ok(CancelOutcome::Cancelled) => {
                        c.cancelled += 1;
                        true
                    }
                    Ok(CancelOutcome::CancelRequested) => {
                        c.requested += 1;
                        true
                    }
                    Ok(CancelOutcome::Gone) => {
                        c.gone += 1;
                        true
                    }
                    Ok(CancelOutcome::NotFound) => {
                        c.not_found += 1;
                        false
                    }
                    Ok(CancelOutcome::Dead) => {
                        c.dead += 1;
                        false
                    }
                    Err(e) => {
                        eprintln!("soak: cancel {key} failed: {e}");
                        c.errors += 1;
                        true
                    }
                };
                if cancelled {
                    self.out.expected.cancelled.insert(key.to_owned());
                }
            }
            Action::Reschedule(to) => {
                let due = NewDue::After(to);
                let result = match topic {
                    Topic::Work => client.reschedule::<WorkJob>(key, due).await,
                    Topic::Flaky => client.reschedule::<FlakyJob>(key, due).await,
                };
                let c = &mut self.out.counts.reschedule;
                match result {
                    Ok(RescheduleOutcome::Rescheduled { .. }) => c.rescheduled += 1,
                    Ok(RescheduleOutcome::Running) => c.running += 1,
                    Ok(RescheduleOutcome::NotFound) => c.not_found += 1,
                    Ok(RescheduleOutcome::Dead) => c.dead += 1,
                    Err(e) => {
                        eprintln!("soak: reschedule {key} failed: {e}");
                        c.errors += 1;
                    }
                }
            }
        }
    }
}

/// One enqueue of `J`; returns the job's key.
async fn send<J: Job<Payload = FaultPayload>>(
    client: &Client,
    payload: FaultPayload,
    key: Option<&str>,
    delay: Option<Duration>,
) -> dq::Result<String> {
    let mut call = client.enqueue::<J>(payload);
    if let Some(k) = key {
        call = call.key(k);
    }
    if let Some(d) = delay {
        call = call.delay(d);
    }
    Ok(call.await?.key.to_string())
}
