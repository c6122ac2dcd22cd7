//! The benchmark's payload, its handlers (one topic per scenario) and the [`Recorder`] they
//! write to.
//!
//! Handlers are no-op async functions that only record completion: how often each order ran,
//! when the last one finished, and how late each one was (`now_ms - due_ms`, wall clock —
//! producer and worker run on the same machine). The S5 handler fails the first run of every
//! order and succeeds on the second; its retry policy (`fixed(1s, 1)`: one retry after 1 s)
//! is declared on the handler.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use dq::{JobContext, JobError};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

/// The payload of every benchmark job (about 100 bytes as JSON):
/// `{"order_id":<i>,"user":"u<i>","amount_cents":1234,"note":"x"*32,"due_ms":<epoch ms>}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Order {
    /// The job's number, 0-based; the recorder's index.
    pub order_id: u64,
    /// `u<order_id>`.
    pub user: String,
    /// Always 1234.
    pub amount_cents: u64,
    /// 32 times `x`.
    pub note: String,
    /// When the producer meant the job to be due, Unix ms.
    pub due_ms: u64,
}

impl Order {
    /// The payload of order `order_id`, due at `due_ms`.
    pub fn new(order_id: u64, due_ms: u64) -> Order {
        Order {
            order_id,
            user: format!("u{order_id}"),
            amount_cents: 1234,
            note: "x".repeat(32),
            due_ms,
        }
    }
}

/// The priority of order `order_id` in the mixed runs (`dq-bench enqueue --priorities`, the
/// `s3r-priority` section): one in ten [`dq::Priority::HIGH`], one in ten
/// [`dq::Priority::LOW`], the rest [`dq::Priority::NORMAL`], interleaved.
pub fn mixed_priority(order_id: u64) -> dq::Priority {
    match order_id % 10 {
        0 => dq::Priority::HIGH,
        5 => dq::Priority::LOW,
        _ => dq::Priority::NORMAL,
    }
}

/// Now, in Unix ms (wall clock).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What the handlers of one worker process record; shared through the worker's `.data(…)`.
pub struct Recorder {
    /// Successful completions to wait for.
    target: u64,
    /// Runs per order (index = order_id); orders outside 0..target are counted apart.
    runs: Vec<AtomicU32>,
    /// `now_ms - due_ms` of each order's successful run, ms (`i64::MIN`: none yet).
    lateness: Vec<AtomicI64>,
    /// Successful completions so far.
    completed: AtomicU64,
    /// Runs of orders outside 0..target (left-overs of another run; should stay 0).
    strays: AtomicU64,
    /// Whether the first run of every order fails (S5).
    fail_first: bool,
    /// When the worker was started (the clock of `secs`).
    started: Instant,
    /// Micros after `started` of the target-th successful completion (0: not yet).
    done_after_us: AtomicU64,
    /// Unix ms of the latest successful completion.
    last_done_ms: AtomicU64,
    /// Signalled once the target is reached.
    done: Notify,
    /// With `--priorities`: the completion rank (1-based) of each order's successful run
    /// (0: none yet), to show in what order the priority classes ran.
    ranks: Option<Vec<AtomicU64>>,
}

impl Recorder {
    /// A recorder waiting for `target` successful completions; with `fail_first`, every
    /// order's first run fails; with `ranks`, each order's completion rank is kept too
    /// ([`Recorder::mean_rank_by_priority`]).
    pub fn new(target: u64, fail_first: bool, ranks: bool) -> Arc<Recorder> {
        let n = target as usize;
        Arc::new(Recorder {
            target,
            runs: (0..n).map(|_| AtomicU32::new(0)).collect(),
            lateness: (0..n).map(|_| AtomicI64::new(i64::MIN)).collect(),
            completed: AtomicU64::new(0),
            strays: AtomicU64::new(0),
            fail_first,
            started: Instant::now(),
            done_after_us: AtomicU64::new(0),
            last_done_ms: AtomicU64::new(0),
            done: Notify::new(),
            ranks: ranks.then(|| (0..n).map(|_| AtomicU64::new(0)).collect()),
        })
    }

    /// Records one run of `order`; fails it if it is the first run and `fail_first` is set.
    pub fn record(&self, order: &Order) -> Result<(), JobError> {
        let Some(runs) = self.runs.get(order.order_id as usize) else {
            self.strays.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        };
        let run = runs.fetch_add(1, Ordering::Relaxed) + 1;
        if self.fail_first && run == 1 {
            return Err(JobError::retry("the first attempt fails by design (S5)"));
        }
        let now = now_ms();
        self.lateness[order.order_id as usize]
            .store(now as i64 - order.due_ms as i64, Ordering::Relaxed);
        self.last_done_ms.fetch_max(now, Ordering::Relaxed);
        let done = self.completed.fetch_add(1, Ordering::AcqRel) + 1;
        if let Some(ranks) = &self.ranks {
            ranks[order.order_id as usize].store(done, Ordering::Relaxed);
        }
        if done == self.target {
            let us = self.started.elapsed().as_micros() as u64;
            self.done_after_us.store(us.max(1), Ordering::Release);
            self.done.notify_one();
        }
        Ok(())
    }

    /// Completes once the target is reached (at once if it already was).
    pub async fn wait_done(&self) {
        self.done.notified().await;
    }

    /// When the worker was started.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Seconds from start to the target-th completion, if reached.
    pub fn done_after_secs(&self) -> Option<f64> {
        match self.done_after_us.load(Ordering::Acquire) {
            0 => None,
            us => Some(us as f64 / 1e6),
        }
    }

    /// Successful completions so far.
    pub fn completed(&self) -> u64 {
        self.completed.load(Ordering::Acquire)
    }

    /// Unix ms of the latest successful completion (0 if none).
    pub fn last_done_ms(&self) -> u64 {
        self.last_done_ms.load(Ordering::Relaxed)
    }

    /// Runs of orders outside 0..target.
    pub fn strays(&self) -> u64 {
        self.strays.load(Ordering::Relaxed)
    }

    /// Runs per order, as a histogram: runs -> number of orders.
    pub fn runs_histogram(&self) -> std::collections::BTreeMap<u32, u64> {
        let mut hist = std::collections::BTreeMap::new();
        for r in &self.runs {
            *hist.entry(r.load(Ordering::Relaxed)).or_insert(0) += 1;
        }
        hist
    }

    /// With ranks kept: the mean completion rank of each class of [`mixed_priority`], as a
    /// fraction of the target (0 = first, 1 = last): `{"high", "normal", "low"}`. `None`
    /// without ranks.
    pub fn mean_rank_by_priority(&self) -> Option<serde_json::Value> {
        let ranks = self.ranks.as_ref()?;
        let mut sum = [0.0f64; 3];
        let mut count = [0u64; 3];
        for (id, r) in ranks.iter().enumerate() {
            let r = r.load(Ordering::Relaxed);
            if r == 0 {
                continue;
            }
            let p = mixed_priority(id as u64);
            let class = if p == dq::Priority::HIGH {
                0
            } else if p == dq::Priority::LOW {
                2
            } else {
                1
            };
            sum[class] += r as f64;
            count[class] += 1;
        }
        let n = self.target.max(1) as f64;
        let mean = |c: usize| (count[c] > 0).then(|| sum[c] / count[c] as f64 / n);
        Some(serde_json::json!({"high": mean(0), "normal": mean(1), "low": mean(2)}))
    }

    /// The lateness of every successful run, ms, sorted.
    pub fn lateness_sorted(&self) -> Vec<i64> {
        let mut v: Vec<i64> = self
            .lateness
            .iter()
            .map(|l| l.load(Ordering::Relaxed))
            .filter(|l| *l != i64::MIN)
            .collect();
        v.sort_unstable();
        v
    }
}

/// The topic of the batch callback that `dq-bench enqueue --batch` opens its batch with (the
/// `batches` section): [`bench_batch_done()`] runs once every member has ended.
pub const BATCH_DONE_TOPIC: &str = "bench.batch.done";

/// What a worker with `--batch` learns of its batch's callback: how often it ran, when, and
/// for which batch; shared through the worker's `.data(…)`.
pub struct CallbackSeen {
    /// The worker's clock (the recorder's start).
    started: Instant,
    /// Runs of the callback so far (exactly one expected).
    runs: AtomicU64,
    /// Micros after `started` of the first run (0: none yet).
    first_after_us: AtomicU64,
    /// Unix ms of the first run (0: none yet).
    first_ms: AtomicU64,
    /// The batch the first run's key named.
    batch: std::sync::Mutex<Option<String>>,
    /// Signalled at the first run.
    done: Notify,
}

impl CallbackSeen {
    /// Nothing seen yet; times count from `started` (the worker's clock).
    pub fn new(started: Instant) -> Arc<CallbackSeen> {
        Arc::new(CallbackSeen {
            started,
            runs: AtomicU64::new(0),
            first_after_us: AtomicU64::new(0),
            first_ms: AtomicU64::new(0),
            batch: std::sync::Mutex::new(None),
            done: Notify::new(),
        })
    }

    /// Records one run of the callback of `batch`.
    pub fn record(&self, batch: Option<String>) {
        if self.runs.fetch_add(1, Ordering::AcqRel) == 0 {
            *self
                .batch
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = batch;
            self.first_ms.store(now_ms(), Ordering::Relaxed);
            let us = self.started.elapsed().as_micros() as u64;
            self.first_after_us.store(us.max(1), Ordering::Release);
            self.done.notify_one();
        }
    }

    /// Completes once the callback has run (at once if it already has).
    pub async fn wait(&self) {
        self.done.notified().await;
    }

    /// Runs so far.
    pub fn runs(&self) -> u64 {
        self.runs.load(Ordering::Acquire)
    }

    /// Seconds from the worker's start to the first run, if any.
    pub fn after_secs(&self) -> Option<f64> {
        match self.first_after_us.load(Ordering::Acquire) {
            0 => None,
            us => Some(us as f64 / 1e6),
        }
    }

    /// Unix ms of the first run (0 if none).
    pub fn first_ms(&self) -> u64 {
        self.first_ms.load(Ordering::Relaxed)
    }

    /// The batch the first run's key named.
    pub fn batch(&self) -> Option<String> {
        self.batch
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// The recorder of the worker that runs `ctx`'s job.
fn recorder(ctx: &JobContext) -> Result<&Arc<Recorder>, JobError> {
    ctx.data::<Arc<Recorder>>()
}

/// S1 jobs (due in 10–60 minutes; never run during the benchmark).
#[dq::delayed_job(topic = "bench.s1", retry = "none")]
pub(crate) async fn bench_s1(order: Order, ctx: JobContext) -> Result<(), JobError> {
    recorder(&ctx)?.record(&order)
}

/// S3 jobs: delayed 5 s, drained by one worker.
#[dq::delayed_job(topic = "bench.s3", retry = "none")]
pub(crate) async fn bench_s3(order: Order, ctx: JobContext) -> Result<(), JobError> {
    recorder(&ctx)?.record(&order)
}

/// S3R jobs: ready at once, drained by one worker.
#[dq::delayed_job(topic = "bench.s3r", retry = "none")]
pub(crate) async fn bench_s3r(order: Order, ctx: JobContext) -> Result<(), JobError> {
    recorder(&ctx)?.record(&order)
}

/// S4 jobs: due times spread over a window; lateness is what matters.
#[dq::delayed_job(topic = "bench.s4", retry = "none")]
pub(crate) async fn bench_s4(order: Order, ctx: JobContext) -> Result<(), JobError> {
    recorder(&ctx)?.record(&order)
}

/// S5 jobs: the first attempt fails, the retry 1 s later succeeds.
#[dq::delayed_job(topic = "bench.s5", retry = "fixed(1s, 1)")]
pub(crate) async fn bench_s5(order: Order, ctx: JobContext) -> Result<(), JobError> {
    recorder(&ctx)?.record(&order)
}

/// Mass-expiry jobs: all due in the same millisecond.
#[dq::delayed_job(topic = "bench.mass", retry = "none")]
pub(crate) async fn bench_mass(order: Order, ctx: JobContext) -> Result<(), JobError> {
    recorder(&ctx)?.record(&order)
}

/// Scale jobs: the far-future filler and the measured jobs share this topic.
#[dq::delayed_job(topic = "bench.scale", retry = "none")]
pub(crate) async fn bench_scale(order: Order, ctx: JobContext) -> Result<(), JobError> {
    recorder(&ctx)?.record(&order)
}

/// The callback of `dq-bench enqueue --batch`'s batch (payload: the number of members added):
/// records that it ran, and for which batch (its key names it).
#[dq::delayed_job(topic = "bench.batch.done", retry = "none")]
pub(crate) async fn bench_batch_done(_members: u64, ctx: JobContext) -> Result<(), JobError> {
    let batch = ctx.completed_batch().map(|id| id.as_str().to_owned());
    ctx.data::<Arc<CallbackSeen>>()?.record(batch);
    Ok(())
}

/// Idle-cost worker's topic: nothing is ever enqueued here.
#[dq::delayed_job(topic = "bench.idle", retry = "none")]
pub(crate) async fn bench_idle(order: Order, ctx: JobContext) -> Result<(), JobError> {
    recorder(&ctx)?.record(&order)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_batch_callback_runs_on_its_topic_and_counts_every_run() {
        use dq::Job;
        assert_eq!(<bench_batch_done as Job>::TOPIC, BATCH_DONE_TOPIC);
        let seen = CallbackSeen::new(Instant::now());
        assert_eq!(
            (seen.runs(), seen.after_secs(), seen.first_ms()),
            (0, None, 0)
        );
        seen.record(Some("b1".into()));
        seen.record(Some("b2".into()));
        assert_eq!(seen.runs(), 2);
        assert_eq!(
            seen.batch().as_deref(),
            Some("b1"),
            "the first run's batch is kept"
        );
        assert!(seen.after_secs().is_some() && seen.first_ms() > 0);
    }

    #[test]
    fn the_priority_mix_is_one_in_ten_high_and_low() {
        let mix: Vec<dq::Priority> = (0..1000).map(mixed_priority).collect();
        let count = |p: dq::Priority| mix.iter().filter(|m| **m == p).count();
        assert_eq!(count(dq::Priority::HIGH), 100);
        assert_eq!(count(dq::Priority::LOW), 100);
        assert_eq!(count(dq::Priority::NORMAL), 800);
    }

    #[test]
    fn mean_ranks_follow_the_completion_order() {
        let n = 100;
        // HIGH first, then NORMAL, then LOW.
        let mut order: Vec<u64> = (0..n).collect();
        order.sort_by_key(|id| std::cmp::Reverse(mixed_priority(*id)));
        let recorder = Recorder::new(n, false, true);
        for id in order {
            recorder.record(&Order::new(id, 0)).unwrap();
        }
        let ranks = recorder.mean_rank_by_priority().unwrap();
        let rank = |c: &str| ranks[c].as_f64().unwrap();
        assert!(rank("high") < rank("normal") && rank("normal") < rank("low"));
        assert!((rank("high") - 0.055).abs() < 1e-9, "{ranks}");
        assert!(
            Recorder::new(n, false, false)
                .mean_rank_by_priority()
                .is_none()
        );
    }
}
