//! `dq-bench enqueue`: one producer enqueues N jobs of a scenario, one by one (`single`:
//! each add awaited before the next), with the bulk API (`bulk`: chunks of `--chunk`), or from
//! `--tasks` tokio tasks at once (`concurrent`: each task awaits its own one-by-one adds, N in
//! total — what a web service that schedules a job per request does).
//!
//! Due times per scenario:
//!
//! | scenario | due |
//! |---|---|
//! | S1, FILL | a random delay in [600 s, 3600 s] (none fires during a run) |
//! | S3 | 5 s from now (`--delay-ms` overrides) |
//! | S3R, S5 | now |
//! | S4, MASS | `T + i*W/N` with `--start-ms T --window-ms W` (MASS: W defaults to 0) |
//! | SCALE | `--delay-ms` from now (default 1 s), or `T + i*W/N` with `--start-ms` |
//! | FILL | as S1, or `T + i*W/N` with `--start-ms` (the dense-due scale variant) |
//!
//! Prints `{secs, jobs_per_s, first_add_ms, last_due_ms, ...}`: `secs` runs from the first
//! add sent to the last one acknowledged.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, UNIX_EPOCH};

use clap::{Args, ValueEnum};
use dq::{Client, Due, EnqueueOutcome, Job, JobSpec};
use serde_json::json;

use crate::jobs::{
    Order, bench_batch_done, bench_mass, bench_s1, bench_s3, bench_s3r, bench_s4, bench_s5,
    bench_scale, mixed_priority, now_ms,
};
use crate::{Result, Scenario};

/// How jobs are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// One add at a time, each awaited before the next.
    Single,
    /// The bulk API, `--chunk` jobs per call.
    Bulk,
    /// `--tasks` tasks in this process, each awaiting its own one-at-a-time adds.
    Concurrent,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Single => "single",
            Mode::Bulk => "bulk",
            Mode::Concurrent => "concurrent",
        }
    }
}

/// Arguments of `dq-bench enqueue`.
#[derive(Args, Debug, Clone)]
pub struct EnqueueArgs {
    /// The scenario (S1, S3, S3R, S4, S5; MASS, FILL, SCALE are used by `all`).
    #[arg(long, ignore_case = true)]
    pub scenario: Scenario,
    /// `single` (await each add), `bulk` (the bulk API) or `concurrent` (`--tasks` tasks, each
    /// awaiting its own adds).
    #[arg(long, value_enum, default_value = "single")]
    pub mode: Mode,
    /// `concurrent`: how many tasks share the N adds.
    #[arg(long, default_value_t = 64)]
    pub tasks: usize,
    /// How many jobs.
    #[arg(long)]
    pub n: u64,
    /// Jobs per bulk call.
    #[arg(long, default_value_t = 1000)]
    pub chunk: usize,
    /// S4/MASS: due time of the first job, Unix ms.
    #[arg(long)]
    pub start_ms: Option<u64>,
    /// S4/MASS: due times spread over this many ms (`due = T + i*W/N`).
    #[arg(long)]
    pub window_ms: Option<u64>,
    /// S3/SCALE: the delay, ms (defaults: S3 5000, SCALE 1000).
    #[arg(long)]
    pub delay_ms: Option<u64>,
    /// Number of the first order (FILL uses a high one so fillers never count as results).
    #[arg(long, default_value_t = 0)]
    pub first_id: u64,
    /// Extra: the tokio runtime (`multi`, the default, or `current`: one thread).
    #[arg(long, value_enum, default_value = "multi")]
    pub runtime: crate::Flavor,
    /// Extra (bulk only): payloads encoded by position (`rmp_serde::to_vec`, structs as
    /// arrays, as dq wrote them before field names) and enqueued raw, to measure what naming
    /// the fields costs beside dq's own encoding.
    #[arg(long)]
    pub positional: bool,
    /// Extra: priorities mixed in (`jobs::mixed_priority`: one job in ten HIGH, one in ten
    /// LOW, the rest NORMAL, interleaved), to measure what priorities cost a drain
    /// (`all --only s3r-priority` compares).
    #[arg(long)]
    pub priorities: bool,
    /// Extra: the jobs spread over this many groups (order `id` in group `g<id % N>`), to
    /// measure what groups cost a drain (`all --only s3r-groups` compares); 0: none.
    #[arg(long, default_value_t = 0)]
    pub groups: u64,
    /// Extra (bulk only): the jobs are the members of one batch, added with
    /// `BatchHandle::add` (a chunk per call), the batch opened first (a generated id, its
    /// callback a job of `bench.batch.done`) and closed after the last add, to measure what
    /// a batch costs per member (`all --only batches` compares). The line reports its id.
    #[arg(long)]
    pub batch: bool,
}

/// What `--priorities` and `--groups` mix into the jobs.
#[derive(Clone, Copy)]
struct Mix {
    priorities: bool,
    groups: u64,
}

impl Mix {
    fn of(args: &EnqueueArgs) -> Mix {
        Mix {
            priorities: args.priorities,
            groups: args.groups,
        }
    }
}

/// The group of order `order_id` with `--groups n` (none for 0).
fn group_of(order_id: u64, n: u64) -> Option<String> {
    (n > 0).then(|| format!("g{}", order_id % n))
}

/// The payload of order `order_id` as `dq-bench enqueue` stores it: fields by name (dq's
/// encoding), or by position with `--positional`.
fn encoded(order: &Order, positional: bool) -> Result<Vec<u8>> {
    Ok(if positional {
        rmp_serde::to_vec(order)?
    } else {
        dq::payload::encode(order, dq::payload::DEFAULT_MAX_PAYLOAD)?
    })
}

/// When job `i` of `n` is due.
#[derive(Clone, Copy, Debug)]
enum DueRule {
    /// A random delay in [600 s, 3600 s].
    RandomFar,
    /// This many ms from now.
    Delay(u64),
    /// Now.
    Now,
    /// `start + i * window / n`, Unix ms.
    Spread { start: u64, window: u64 },
}

impl DueRule {
    fn of(args: &EnqueueArgs) -> Result<DueRule> {
        Ok(match args.scenario {
            Scenario::Fill | Scenario::Scale if args.start_ms.is_some() => DueRule::Spread {
                start: args.start_ms.unwrap_or(0),
                window: args.window_ms.unwrap_or(0),
            },
            Scenario::S1 | Scenario::Fill => DueRule::RandomFar,
            Scenario::S3 => DueRule::Delay(args.delay_ms.unwrap_or(5000)),
            Scenario::Scale => DueRule::Delay(args.delay_ms.unwrap_or(1000)),
            Scenario::S3R | Scenario::S5 => DueRule::Now,
            Scenario::S4 | Scenario::Mass => {
                let start = args
                    .start_ms
                    .ok_or("S4 and MASS need --start-ms (Unix ms of the first due time)")?;
                let window = match (args.scenario, args.window_ms) {
                    (_, Some(w)) => w,
                    (Scenario::Mass, None) => 0,
                    _ => return Err("S4 needs --window-ms".into()),
                };
                DueRule::Spread { start, window }
            }
            Scenario::Idle => return Err("nothing is enqueued for IDLE".into()),
        })
    }

    /// The job's due (as dq takes it) and the due time in its payload, Unix ms.
    fn due(self, i: u64, n: u64, rng: &mut SplitMix64) -> (Due, u64) {
        match self {
            DueRule::RandomFar => {
                let ms = 600_000 + rng.next() % 3_000_001;
                (Due::After(Duration::from_millis(ms)), now_ms() + ms)
            }
            DueRule::Delay(ms) => (Due::After(Duration::from_millis(ms)), now_ms() + ms),
            DueRule::Now => (Due::Now, now_ms()),
            DueRule::Spread { start, window } => {
                let at = start + (u128::from(i) * u128::from(window) / u128::from(n.max(1))) as u64;
                (Due::At(UNIX_EPOCH + Duration::from_millis(at)), at)
            }
        }
    }
}

/// A small deterministic generator for the random delays (splitmix64); the soak's mix too.
pub(crate) struct SplitMix64(pub(crate) u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Runs `dq-bench enqueue` and prints its result line.
pub async fn run(args: EnqueueArgs) -> Result<()> {
    if args.n == 0 {
        return Err("--n must be at least 1".into());
    }
    if args.positional && args.mode != Mode::Bulk {
        return Err("--positional needs --mode bulk".into());
    }
    if args.batch && args.mode != Mode::Bulk {
        return Err("--batch needs --mode bulk".into());
    }
    let rule = DueRule::of(&args)?;
    let client = crate::connect(args.chunk).await?;
    let out = match args.scenario {
        Scenario::S1 => send::<bench_s1>(&client, &args, rule).await?,
        Scenario::S3 => send::<bench_s3>(&client, &args, rule).await?,
        Scenario::S3R => send::<bench_s3r>(&client, &args, rule).await?,
        Scenario::S4 => send::<bench_s4>(&client, &args, rule).await?,
        Scenario::S5 => send::<bench_s5>(&client, &args, rule).await?,
        Scenario::Mass => send::<bench_mass>(&client, &args, rule).await?,
        Scenario::Fill | Scenario::Scale => send::<bench_scale>(&client, &args, rule).await?,
        Scenario::Idle => unreachable!("rejected by DueRule::of"),
    };
    crate::emit(&out);
    Ok(())
}

/// Enqueues job `i` of `n` with one awaited call; returns its due time (Unix ms) and whether
/// it was created.
async fn add_one<J: Job<Payload = Order>>(
    client: &Client,
    first_id: u64,
    i: u64,
    n: u64,
    rule: DueRule,
    rng: &mut SplitMix64,
    mix: Mix,
) -> Result<(u64, bool)> {
    let (due, due_ms) = rule.due(i, n, rng);
    let order = Order::new(first_id + i, due_ms);
    let mut pending = client.enqueue::<J>(order);
    if mix.priorities {
        pending = pending.priority(mixed_priority(first_id + i));
    }
    if let Some(group) = group_of(first_id + i, mix.groups) {
        pending = pending.group(group);
    }
    let pending = match due {
        Due::Now => pending,
        Due::After(d) => pending.delay(d),
        Due::At(t) => pending.at(t),
    };
    let done = pending.await?;
    Ok((due_ms, done.outcome == EnqueueOutcome::Created))
}

async fn send<J: Job<Payload = Order> + 'static>(
    client: &Client,
    args: &EnqueueArgs,
    rule: DueRule,
) -> Result<serde_json::Value> {
    let n = args.n;
    let mut rng = SplitMix64(0x5eed_0000 ^ args.first_id ^ n);
    let mut last_due_ms = 0;
    let mut not_created = 0u64;
    let first_add_ms = now_ms();
    let started = Instant::now();
    // --batch: opened before the first add (its callback's payload: the members' number)
    let batch = if args.batch {
        Some(
            client
                .new_batch()
                .on_complete::<bench_batch_done>(&n)
                .open()
                .await?,
        )
    } else {
        None
    };
    match args.mode {
        Mode::Single => {
            for i in 0..n {
                let (due_ms, created) =
                    add_one::<J>(client, args.first_id, i, n, rule, &mut rng, Mix::of(args))
                        .await?;
                last_due_ms = last_due_ms.max(due_ms);
                not_created += u64::from(!created);
            }
        }
        Mode::Concurrent => {
            // Each task claims the next job number and awaits its add before claiming another.
            let next = Arc::new(AtomicU64::new(0));
            let mut tasks = tokio::task::JoinSet::new();
            for t in 0..args.tasks.max(1) as u64 {
                let (client, next, first_id) = (client.clone(), next.clone(), args.first_id);
                let mix = Mix::of(args);
                tasks.spawn(async move {
                    let mut rng = SplitMix64(0x5eed_0000 ^ first_id ^ n ^ ((t + 1) << 40));
                    let (mut last_due, mut not_created) = (0u64, 0u64);
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n {
                            return Ok::<_, crate::BoxError>((last_due, not_created));
                        }
                        let (due_ms, created) =
                            add_one::<J>(&client, first_id, i, n, rule, &mut rng, mix).await?;
                        last_due = last_due.max(due_ms);
                        not_created += u64::from(!created);
                    }
                });
            }
            while let Some(joined) = tasks.join_next().await {
                let (due, missed) = joined??;
                last_due_ms = last_due_ms.max(due);
                not_created += missed;
            }
        }
        Mode::Bulk => {
            let chunk = args.chunk.max(1) as u64;
            let mut i = 0;
            while i < n {
                let end = (i + chunk).min(n);
                let jobs: Vec<JobSpec<Order>> = (i..end)
                    .map(|i| {
                        let (due, due_ms) = rule.due(i, n, &mut rng);
                        last_due_ms = last_due_ms.max(due_ms);
                        let mut job = JobSpec::new(Order::new(args.first_id + i, due_ms));
                        job.due = due;
                        if args.priorities {
                            job.priority = Some(mixed_priority(args.first_id + i));
                        }
                        job.group = group_of(args.first_id + i, args.groups);
                        job
                    })
                    .collect();
                let done = if args.positional {
                    let raw = jobs
                        .into_iter()
                        .map(|job| {
                            let mut raw = JobSpec::new(encoded(&job.payload, true)?);
                            raw.due = job.due;
                            raw.priority = job.priority;
                            raw.group = job.group;
                            Ok(raw)
                        })
                        .collect::<Result<Vec<_>>>()?;
                    match &batch {
                        Some(b) => b.add_raw(J::TOPIC, raw).await?,
                        None => client.topic(J::TOPIC)?.enqueue_bulk(raw).await?,
                    }
                } else {
                    match &batch {
                        Some(b) => b.add::<J>(jobs).await?,
                        None => client.enqueue_bulk::<J>(jobs).await?,
                    }
                };
                not_created += done
                    .iter()
                    .filter(|d| d.outcome != EnqueueOutcome::Created)
                    .count() as u64;
                i = end;
            }
        }
    }
    let closed = match &batch {
        Some(b) => Some(b.close().await?),
        None => None,
    };
    let secs = started.elapsed().as_secs_f64();
    let batch = closed.map(|info| {
        json!({
            "id": info.id.as_str(),
            "closed": info.closed,
            "reserved": info.counts.reserved,
            "enqueued": info.counts.enqueued,
            "refused": info.counts.refused,
        })
    });
    Ok(json!({
        "secs": secs,
        "jobs_per_s": n as f64 / secs,
        "first_add_ms": first_add_ms,
        "last_due_ms": last_due_ms,
        "last_add_ms": now_ms(),
        "scenario": args.scenario.name(),
        "mode": args.mode.name(),
        "tasks": (args.mode == Mode::Concurrent).then_some(args.tasks.max(1)),
        "n": n,
        "chunk": args.chunk,
        "not_created": not_created,
        "encoding": if args.positional { "positional" } else { "named" },
        "priorities": if args.priorities { "mixed" } else { "normal" },
        "groups": args.groups,
        "batch": batch,
        "payload_bytes": encoded(&Order::new(args.first_id, first_add_ms), args.positional)?.len(),
    }))
}

/// Unix ms of a `SystemTime` (for tests of the due rule).
#[cfg(test)]
fn unix_ms(t: std::time::SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_due_times_cover_the_window() {
        let rule = DueRule::Spread {
            start: 1_000_000,
            window: 30_000,
        };
        let mut rng = SplitMix64(1);
        let (first, first_ms) = rule.due(0, 10_000, &mut rng);
        let (_, last_ms) = rule.due(9_999, 10_000, &mut rng);
        assert_eq!(first_ms, 1_000_000);
        assert_eq!(last_ms, 1_000_000 + 29_997);
        match first {
            Due::At(t) => assert_eq!(unix_ms(t), 1_000_000),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn dense_fill_and_concurrent_mode_parse() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: EnqueueArgs,
        }
        let parse = |s: &str| Cli::try_parse_from(s.split(' ')).map(|c| c.args);
        let fill = parse("x --scenario FILL --mode bulk --n 10 --start-ms 5000 --window-ms 60000")
            .unwrap();
        match DueRule::of(&fill).unwrap() {
            DueRule::Spread { start, window } => assert_eq!((start, window), (5000, 60_000)),
            other => panic!("{other:?}"),
        }
        // Without --start-ms the filler stays far and random.
        let far = parse("x --scenario FILL --mode bulk --n 10").unwrap();
        assert!(matches!(DueRule::of(&far).unwrap(), DueRule::RandomFar));
        let conc = parse("x --scenario S1 --mode concurrent --tasks 8 --n 100").unwrap();
        assert_eq!((conc.mode, conc.tasks), (Mode::Concurrent, 8));
        assert_eq!(conc.mode.name(), "concurrent");
        assert!(parse("x --scenario S1 --mode sometimes --n 1").is_err());
        assert!(
            parse("x --scenario S3R --mode bulk --n 10 --positional")
                .unwrap()
                .positional
        );
        assert!(
            parse("x --scenario S3R --mode bulk --n 10 --priorities")
                .unwrap()
                .priorities
        );
        assert!(
            parse("x --scenario S3R --mode bulk --n 10 --batch")
                .unwrap()
                .batch
        );
    }

    #[test]
    fn both_encodings_decode_to_the_same_order_and_only_named_has_names() {
        let order = Order::new(7, 1_700_000_000_000);
        let (named, positional) = (
            encoded(&order, false).unwrap(),
            encoded(&order, true).unwrap(),
        );
        for bytes in [&named, &positional] {
            let back: Order = dq::payload::decode(bytes).unwrap();
            assert_eq!((back.order_id, back.due_ms), (7, 1_700_000_000_000));
        }
        let has = |b: &[u8], name: &str| b.windows(name.len()).any(|w| w == name.as_bytes());
        assert!(has(&named, "amount_cents") && !has(&positional, "amount_cents"));
        assert!(named.len() > positional.len());
    }

    #[test]
    fn random_far_delays_stay_in_range() {
        let mut rng = SplitMix64(7);
        for i in 0..10_000 {
            let before = now_ms();
            let (due, due_ms) = DueRule::RandomFar.due(i, 10_000, &mut rng);
            let Due::After(d) = due else {
                panic!("{due:?}")
            };
            assert!((600_000..=3_600_000).contains(&(d.as_millis() as u64)));
            assert!(due_ms >= before + 600_000);
        }
    }
}
