//! The `batches` section: what a batch costs per member, in Redis time and in bytes, against
//! the same jobs without a batch, in the same run (ARCHITECTURE.md §16 "Costs").
//!
//! Per repetition:
//!
//! 1. **Redis time over a drain.** Three S3R drains of N jobs due now by one worker
//!    (concurrency 50), in an order rotating with the repetition so drift in the machine's
//!    load hits them alike:
//!    - `plain`: `dq-bench enqueue --mode bulk` (chunks of 1,000), the worker stops after the
//!      N-th success;
//!    - `member`: the same jobs as the members of one batch (`dq-bench enqueue --batch`:
//!      `BatchHandle::add` per chunk, the batch opened first with a callback and closed after
//!      the last add); the worker (`--batch`) also runs the callback's topic and stops only
//!      once the callback ran, so the relay's work up to the callback is inside the run;
//!    - `tax`: the plain jobs in a partition that has held a member (one member due in an
//!      hour, added first by this process, in a batch that stays open): what batches cost
//!      the jobs that are no members (the ack reads their records in a partition whose
//!      control hash says `batched`, and the relay reads the outbox every 100 ms while a
//!      batch is open).
//!
//!    Redis time is read from `INFO commandstats`, reset before the producer and again
//!    before the worker: the script calls (dq's `FCALL`s, their inner commands included)
//!    plus the relay's plain `XRANGE`s, `XTRIM`s and `XDEL`s of the outbox (no script runs
//!    those). The index's `ZCARD` (one per relay tick, in every run), `ZADD` and `ZREM` (one each per
//!    batch) are left out: scripts run those commands too, so their line mixes both, and
//!    they do not grow with members. The server's CPU time (`INFO cpu`, user + system)
//!    over the same phases is reported beside it: it counts everything, parsing and replies
//!    included. During each drain a thread samples the outbox (`XLEN`, `MEMORY USAGE`)
//!    every 10 ms: its peak is the backlog the relay left behind the acks.
//!
//! 2. **Bytes.** N jobs due in 10–60 minutes (S1's due times and payloads, on the scale topic
//!    `bench.scale`, which a worker may run) enqueued plain, then as the members of one
//!    batch: `used_memory` above the emptied server per pending job, and `MEMORY USAGE` of
//!    the batch's hash and of the partition's `jobs` hash (the records carry the batch id).
//!    Then the outbox's bytes per note: the batch is closed and every member cancelled by
//!    key (`TopicClient::cancel`, as `BatchHandle::cancel` does, without the relay that call
//!    runs after) while **no worker runs**, so nothing relays: each cancel script notes its member's end
//!    in the partition's outbox (`b` batch, `m` key, `o` outcome) exactly as an ack would
//!    (the same three fields; the outcome is one letter either way), and the N notes stay.
//!    `MEMORY USAGE` of the outbox over its `XLEN` is the bytes per note, measured with no
//!    relay racing the read. Last, a worker with nothing to run but the callback's topic
//!    starts: its relay applies the N notes and the callback runs; Redis's time over that
//!    run, per note, is the relay's cost alone.

use dq::JobSpec;
use dq::store::redis::layout::{self, PartitionKeys};

use super::*;
use crate::jobs::{Order, bench_s3r};

/// How often the outbox is sampled during a drain.
const SAMPLE_EVERY: Duration = Duration::from_millis(10);

/// How long a worker of this section may run, s (then its result says `timed_out`).
const WORKER_TIMEOUT_S: u64 = 600;

/// The orders of the `tax` drain's one member: far past N, so the worker's recorder would
/// count it a stray if it ever ran (it is due in an hour).
const TAX_MEMBER_ID: u64 = 1_000_000_000;

/// One drain's variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    /// N plain jobs.
    Plain,
    /// N members of one batch, until its callback ran.
    Member,
    /// N plain jobs in a partition that has held a member, a batch open.
    Tax,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Plain => "plain",
            Variant::Member => "member",
            Variant::Tax => "tax",
        }
    }
}

/// Redis's time in one phase (`INFO commandstats` reset at its start).
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
struct Spent {
    /// Script calls and their µs (inner commands included).
    script_calls: u64,
    script_usec: u64,
    /// The relay's `XRANGE` and `XDEL` of outboxes: calls and µs.
    outbox_calls: u64,
    outbox_usec: u64,
    /// The server's CPU time (user + system), µs.
    cpu_usec: f64,
}

impl Spent {
    /// Script and outbox µs.
    fn usec(&self) -> u64 {
        self.script_usec + self.outbox_usec
    }

    /// Script and outbox calls (round trips a client sent, but the index's few).
    fn calls(&self) -> u64 {
        self.script_calls + self.outbox_calls
    }

    fn plus(self, o: Spent) -> Spent {
        Spent {
            script_calls: self.script_calls + o.script_calls,
            script_usec: self.script_usec + o.script_usec,
            outbox_calls: self.outbox_calls + o.outbox_calls,
            outbox_usec: self.outbox_usec + o.outbox_usec,
            cpu_usec: self.cpu_usec + o.cpu_usec,
        }
    }

    /// Per `n` (jobs or notes) as JSON.
    fn per(&self, n: u64) -> Value {
        let n = n.max(1) as f64;
        json!({
            "us": self.usec() as f64 / n,
            "script_us": self.script_usec as f64 / n,
            "outbox_us": self.outbox_usec as f64 / n,
            "calls": self.calls() as f64 / n,
            "cpu_us": self.cpu_usec / n,
        })
    }
}

/// The outbox's peak during a drain, sampled on a thread.
struct OutboxWatch {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<(u64, u64, u64)>,
}

impl OutboxWatch {
    /// Samples `key`'s `XLEN` and `MEMORY USAGE … SAMPLES 0` every [`SAMPLE_EVERY`] until
    /// stopped or for at most `max`.
    fn start(mut conn: Connection, key: String, max: Duration) -> OutboxWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let end = Instant::now() + max;
            let (mut peak_len, mut peak_bytes, mut samples) = (0u64, 0u64, 0u64);
            while !flag.load(Ordering::Relaxed) && Instant::now() < end {
                let len: u64 = admin::cmd(&mut conn, &["XLEN", &key]).unwrap_or(0);
                let bytes: Option<u64> =
                    admin::cmd(&mut conn, &["MEMORY", "USAGE", &key, "SAMPLES", "0"])
                        .unwrap_or(None);
                peak_len = peak_len.max(len);
                peak_bytes = peak_bytes.max(bytes.unwrap_or(0));
                samples += 1;
                std::thread::sleep(SAMPLE_EVERY);
            }
            (peak_len, peak_bytes, samples)
        });
        OutboxWatch { stop, thread }
    }

    /// Stops; the peak length, the peak bytes, and how many samples were taken.
    fn finish(self) -> (u64, u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// The keys of partition 0 of `topic` in the benchmark's namespace.
fn partition_keys(topic: &str) -> Result<PartitionKeys> {
    Ok(PartitionKeys::new(
        crate::NAMESPACE,
        &dq::store::Queue::new(dq::Topic::new(topic)?, 0),
    ))
}

/// `MEMORY USAGE key SAMPLES 0` (0 for a key that does not exist).
fn usage(conn: &mut Connection, key: &str) -> Result<u64> {
    let bytes: Option<u64> = admin::cmd(conn, &["MEMORY", "USAGE", key, "SAMPLES", "0"])?;
    Ok(bytes.unwrap_or(0))
}

/// The batch id an `enqueue --batch` line reports.
fn batch_id(enqueued: &Value) -> Result<String> {
    enqueued
        .pointer("/batch/id")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| format!("enqueue --batch reported no batch id: {enqueued}").into())
}

/// Checks a `worker --batch` line: the callback ran once, for `batch`, in time.
fn check_callback(worker: &Value, batch: &str) -> Result<()> {
    let runs = worker["callback_runs"].as_u64().unwrap_or(0);
    let seen = worker["callback_batch"].as_str().unwrap_or("");
    if worker["timed_out"] == Value::Bool(true) || runs != 1 || seen != batch {
        return Err(format!(
            "the batch's callback should have run once for {batch}: {runs} run(s), batch \
             {seen:?}, timed out {}",
            worker["timed_out"]
        )
        .into());
    }
    Ok(())
}

impl Orchestrator {
    pub(super) fn batches(&mut self) -> Result<()> {
        let (drain_n, bytes_n, conc) = (self.plan.s3_n, self.plan.s1_n, self.plan.conc);
        let reps = self.plan.reps;
        self.reps("batches", reps, |o, rep| {
            let drains = o.batch_drains(drain_n, conc, rep)?;
            let bytes = o.batch_bytes(bytes_n, conc, rep)?;
            Ok(json!({"drains": drains, "bytes": bytes}))
        })
    }

    /// Resets `INFO commandstats`; returns the server's CPU time so far, µs.
    fn phase_start(&mut self) -> Result<f64> {
        self.resetstat()?;
        self.redis_cpu_us()
    }

    /// Redis's time since [`Orchestrator::phase_start`] returned `cpu0`.
    fn phase_end(&mut self, cpu0: f64) -> Result<(Spent, BTreeMap<String, CmdStat>)> {
        let stats = self.commandstats()?;
        let cpu = self.redis_cpu_us()?;
        let scripts = admin::script_calls(&stats);
        let outbox = ["xrange", "xdel", "xtrim"]
            .iter()
            .filter_map(|c| stats.get(*c))
            .fold(CmdStat::default(), |a, s| CmdStat {
                calls: a.calls + s.calls,
                usec: a.usec + s.usec,
            });
        let spent = Spent {
            script_calls: scripts.calls,
            script_usec: scripts.usec,
            outbox_calls: outbox.calls,
            outbox_usec: outbox.usec,
            cpu_usec: cpu - cpu0,
        };
        Ok((spent, stats))
    }

    /// The server's CPU time so far (`INFO cpu`: `used_cpu_user` + `used_cpu_sys`), µs.
    fn redis_cpu_us(&mut self) -> Result<f64> {
        let info = admin::info(&mut self.admin, "cpu")?;
        let field = |name: &str| -> Result<f64> {
            admin::info_field(&info, name)
                .and_then(|v| v.parse::<f64>().ok())
                .ok_or_else(|| format!("INFO cpu has no {name}").into())
        };
        Ok((field("used_cpu_user")? + field("used_cpu_sys")?) * 1e6)
    }

    /// Runs `f` with a dq client of the benchmark's namespace, on a runtime of its own.
    fn with_client<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: FnOnce(dq::Client) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let url = self.url();
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(async move {
                let client = dq::Client::builder()
                    .namespace(crate::NAMESPACE)
                    .connect(&url)
                    .await?;
                f(client).await
            })
    }

    /// The three drains of a repetition, in an order rotating with `rep`; pushes the
    /// `batches_*` time figures.
    fn batch_drains(&mut self, n: u64, conc: usize, rep: usize) -> Result<Value> {
        let mut order = [Variant::Plain, Variant::Member, Variant::Tax];
        order.rotate_left(rep % 3);
        let mut runs = BTreeMap::new();
        for variant in order {
            let v = self.batch_drain(variant, n, conc)?;
            runs.insert(variant.name(), v);
        }
        let total = |v: Variant| -> Result<(f64, f64)> {
            let r = &runs[v.name()];
            Ok((num(r, "/total/us")?, num(r, "/total/cpu_us")?))
        };
        let (plain, plain_cpu) = total(Variant::Plain)?;
        let (member, member_cpu) = total(Variant::Member)?;
        let (tax, tax_cpu) = total(Variant::Tax)?;
        let per_member = member - plain;
        let per_member_cpu = member_cpu - plain_cpu;
        let m = &runs["member"];
        let p = &runs["plain"];
        let t = &runs["tax"];
        let figures: Vec<(&str, String, &'static str, f64)> = vec![
            (
                "batches_plain_us_per_job",
                format!("plain jobs: Redis time per job, enqueue + drain (N={n})"),
                "µs/job",
                plain,
            ),
            (
                "batches_member_us_per_job",
                "batch members: the same, until the callback ran".into(),
                "µs/job",
                member,
            ),
            (
                "batches_us_per_member",
                "Redis time a batch adds per member (same rep)".into(),
                "µs",
                per_member,
            ),
            (
                "batches_plain_enqueue_us_per_job",
                "  of which enqueue: plain".into(),
                "µs/job",
                num(p, "/enqueue/us")?,
            ),
            (
                "batches_member_enqueue_us_per_job",
                "  of which enqueue: members (reserve, enqueue, apply)".into(),
                "µs/job",
                num(m, "/enqueue/us")?,
            ),
            (
                "batches_plain_drain_us_per_job",
                "  of which drain: plain".into(),
                "µs/job",
                num(p, "/drain/us")?,
            ),
            (
                "batches_member_drain_us_per_job",
                "  of which drain + relay: members".into(),
                "µs/job",
                num(m, "/drain/us")?,
            ),
            (
                "batches_member_outbox_us_per_job",
                "  of which the relay's XRANGE + XTRIM/XDEL: members".into(),
                "µs/job",
                num(m, "/drain/outbox_us")?,
            ),
            (
                "batches_plain_calls_per_job",
                "plain jobs: script + outbox calls per job".into(),
                "calls",
                num(p, "/total/calls")?,
            ),
            (
                "batches_member_calls_per_job",
                "batch members: script + outbox calls per job".into(),
                "calls",
                num(m, "/total/calls")?,
            ),
            (
                "batches_plain_cpu_us_per_job",
                "plain jobs: Redis CPU per job, enqueue + drain".into(),
                "µs/job",
                plain_cpu,
            ),
            (
                "batches_member_cpu_us_per_job",
                "batch members: Redis CPU per job, to the callback".into(),
                "µs/job",
                member_cpu,
            ),
            (
                "batches_cpu_us_per_member",
                "Redis CPU a batch adds per member (same rep)".into(),
                "µs",
                per_member_cpu,
            ),
            (
                "batches_tax_us_per_job",
                "plain jobs where a member was: Redis time per job".into(),
                "µs/job",
                tax,
            ),
            (
                "batches_tax_over_plain_us_per_job",
                "  beyond plain jobs (same rep)".into(),
                "µs",
                tax - plain,
            ),
            (
                "batches_tax_cpu_over_plain_us_per_job",
                "  the same in Redis CPU".into(),
                "µs",
                tax_cpu - plain_cpu,
            ),
            (
                "batches_plain_rate",
                "plain jobs: drain to the N-th success".into(),
                "jobs/s",
                num(p, "/worker/jobs_per_s")?,
            ),
            (
                "batches_member_rate",
                "batch members: drain to the N-th success".into(),
                "jobs/s",
                num(m, "/worker/jobs_per_s")?,
            ),
            (
                "batches_tax_rate",
                "plain jobs where a member was: drain".into(),
                "jobs/s",
                num(t, "/worker/jobs_per_s")?,
            ),
            (
                "batches_callback_lag_ms",
                "callback run after the last member's end".into(),
                "ms",
                num(m, "/worker/callback_lag_ms")?,
            ),
            (
                "batches_outbox_peak_notes",
                "outbox peak in the members' drain (XLEN, sampled)".into(),
                "notes",
                num(m, "/outbox/peak_notes")?,
            ),
            (
                "batches_outbox_peak_bytes",
                "outbox peak in the members' drain (MEMORY USAGE)".into(),
                "B",
                num(m, "/outbox/peak_bytes")?,
            ),
        ];
        for (key, label, unit, value) in figures {
            self.push_labeled(key, &label, unit, value);
        }
        for variant in order {
            self.push(
                &format!("batches_{}_not_once", variant.name()),
                num(&runs[variant.name()], "/worker/jobs_not_exactly_expected")?,
            );
        }
        Ok(json!({
            "n": n,
            "order": order.map(Variant::name),
            "plain_us_per_job": plain,
            "member_us_per_job": member,
            "us_per_member": per_member,
            "cpu_us_per_member": per_member_cpu,
            "tax_us_per_job": tax,
            "tax_over_plain_us_per_job": tax - plain,
            "runs": runs,
        }))
    }

    /// One drain of N S3R jobs as `variant`: Redis's time in the producer's phase and in the
    /// worker's (to its N-th success; for members, to the callback's run too).
    fn batch_drain(&mut self, variant: Variant, n: u64, conc: usize) -> Result<Value> {
        self.flush()?;
        let keys = partition_keys(Scenario::S3R.topic())?;
        if variant == Variant::Tax {
            // one member in the partition, due in an hour, its batch closed but not done
            self.with_client(|client| async move {
                let batch = client.new_batch().open().await?;
                let due_ms = now_ms() + 3_600_000;
                let member = JobSpec::new(Order::new(TAX_MEMBER_ID, due_ms))
                    .delay(Duration::from_secs(3600));
                batch.add::<bench_s3r>([member]).await?;
                batch.close().await?;
                Ok(())
            })?;
        }
        let mut args = vec![
            s("--scenario"),
            s(Scenario::S3R.name()),
            s("--mode"),
            s("bulk"),
            s("--n"),
            s(n),
        ];
        if variant == Variant::Member {
            args.push(s("--batch"));
        }
        let cpu0 = self.phase_start()?;
        let produced = self.enqueue(&args)?;
        let (enqueue, _) = self.phase_end(cpu0)?;
        let batch = match variant {
            Variant::Member => Some(batch_id(&produced)?),
            _ => None,
        };
        if variant == Variant::Member {
            self.worker_extra = vec![s("--batch")];
        }
        let cpu0 = self.phase_start()?;
        let running = self.start_worker(Scenario::S3R, conc, n, WORKER_TIMEOUT_S);
        self.worker_extra.clear();
        let running = running?;
        let watch = OutboxWatch::start(
            self.server.connection(),
            keys.outbox.clone(),
            Duration::from_secs(WORKER_TIMEOUT_S + 60),
        );
        let finished = self.finish_worker(running, Duration::from_secs(WORKER_TIMEOUT_S + 100));
        let (peak_notes, peak_bytes, samples) = watch.finish();
        let (worker, cpu) = finished?;
        let (drain, stats) = self.phase_end(cpu0)?;
        if let Some(batch) = &batch {
            check_callback(&worker, batch)?;
        }
        let left: u64 = self.cmd(&["XLEN", &keys.outbox])?;
        let total = enqueue.plus(drain);
        Ok(json!({
            "variant": variant.name(),
            "batch": batch,
            "enqueue": enqueue.per(n),
            "drain": drain.per(n),
            "total": total.per(n),
            "spent": {"enqueue": enqueue, "drain": drain},
            "outbox": {"peak_notes": peak_notes, "peak_bytes": peak_bytes, "samples": samples,
                       "left_after": left},
            "produced": produced,
            "worker": worker,
            "cpu": cpu,
            "commandstats": stats,
        }))
    }

    /// Bytes per pending job, plain and as members (far due times), then the outbox's bytes
    /// per note and the relay's time per note; pushes the `batches_*` byte figures.
    fn batch_bytes(&mut self, n: u64, conc: usize, rep: usize) -> Result<Value> {
        let keys = partition_keys(Scenario::Fill.topic())?;
        let mut per_job = [0.0; 2];
        let mut jobs_hash = [0u64; 2];
        let mut runs = Vec::new();
        let mut outbox = Value::Null;
        let first = rep % 2 == 1;
        for member in [first, !first] {
            self.flush()?;
            let empty = self.used_memory()?;
            let mut args = vec![
                s("--scenario"),
                s(Scenario::Fill.name()),
                s("--mode"),
                s("bulk"),
                s("--n"),
                s(n),
            ];
            if member {
                args.push(s("--batch"));
            }
            let produced = self.enqueue(&args)?;
            let used = self.used_memory()?;
            let i = usize::from(member);
            per_job[i] = used.saturating_sub(empty) as f64 / n as f64;
            jobs_hash[i] = usage(&mut self.admin, &keys.jobs)?;
            let scheduled = usage(&mut self.admin, &keys.scheduled)?;
            let control = usage(&mut self.admin, &keys.control)?;
            let index = usage(&mut self.admin, &layout::batch_index_key(crate::NAMESPACE))?;
            let mut run = json!({
                "member": member,
                "used_memory_empty": empty,
                "used_memory": used,
                "bytes_per_job": per_job[i],
                "usage": {"jobs": jobs_hash[i], "scheduled": scheduled, "control": control,
                          "batch_index": index},
                "produced": produced,
            });
            if member {
                let id = batch_id(&produced)?;
                let hash = usage(&mut self.admin, &layout::batch_key(crate::NAMESPACE, &id))?;
                run["usage"]["batch"] = json!(hash);
                outbox = self.outbox_notes(&id, n, conc, &keys)?;
                outbox["batch_hash_bytes"] = json!(hash);
            }
            runs.push(run);
        }
        let [plain, member] = per_job;
        let hash = num(&outbox, "/batch_hash_bytes")?;
        let figures: Vec<(&str, String, &'static str, f64)> = vec![
            (
                "batches_plain_bytes_per_job",
                format!("plain jobs pending (far due): used_memory/job (N={n})"),
                "B/job",
                plain,
            ),
            (
                "batches_member_bytes_per_job",
                "batch members pending: used_memory/job".into(),
                "B/job",
                member,
            ),
            (
                "batches_bytes_per_member",
                "bytes a batch adds per pending member (same rep)".into(),
                "B",
                member - plain,
            ),
            (
                "batches_hash_bytes_per_member",
                "  of which the batch's hash (MEMORY USAGE / N)".into(),
                "B",
                hash / n as f64,
            ),
            (
                "batches_record_bytes_per_member",
                "  of which the longer records (jobs hash MEMORY USAGE)".into(),
                "B",
                (jobs_hash[1] as f64 - jobs_hash[0] as f64) / n as f64,
            ),
            (
                "batches_outbox_bytes_per_note",
                "outbox bytes per end not relayed (MEMORY USAGE / XLEN)".into(),
                "B",
                num(&outbox, "/bytes_per_note")?,
            ),
            (
                "batches_relay_us_per_note",
                "relay alone: Redis time per note, until the callback".into(),
                "µs",
                num(&outbox, "/relay/us")?,
            ),
            (
                "batches_relay_xdel_us_per_note",
                "  of which XTRIM/XDEL of the applied notes".into(),
                "µs",
                num(&outbox, "/xdel_us_per_note")?,
            ),
            (
                "batches_relay_xrange_us_per_note",
                "  of which XRANGE of the outbox".into(),
                "µs",
                num(&outbox, "/xrange_us_per_note")?,
            ),
            (
                "batches_relay_cpu_us_per_note",
                "relay alone: Redis CPU per note".into(),
                "µs",
                num(&outbox, "/relay/cpu_us")?,
            ),
            (
                "batches_cancel_us_per_member",
                "cancel of a waiting member: Redis time per member".into(),
                "µs",
                num(&outbox, "/cancel/us")?,
            ),
        ];
        for (key, label, unit, value) in figures {
            self.push_labeled(key, &label, unit, value);
        }
        self.flush()?;
        Ok(json!({
            "n": n,
            "plain_bytes_per_job": plain,
            "member_bytes_per_job": member,
            "bytes_per_member": member - plain,
            "hash_bytes_per_member": hash / n as f64,
            "record_bytes_per_member": (jobs_hash[1] as f64 - jobs_hash[0] as f64) / n as f64,
            "outbox": outbox,
            "runs": runs,
        }))
    }

    /// The batch `id`'s N waiting members cancelled with no worker running (each end noted in
    /// the outbox, nothing relaying): the outbox's bytes per note; then a worker relays them
    /// until the callback ran: the relay's time per note (and its `XRANGE`s' and `XDEL`s'
    /// share).
    fn outbox_notes(
        &mut self,
        id: &str,
        n: u64,
        conc: usize,
        keys: &PartitionKeys,
    ) -> Result<Value> {
        let cpu0 = self.phase_start()?;
        let owned = id.to_owned();
        // (each waiting member cancelled by key, as `BatchHandle::cancel` does, without the
        // relay of their notes that call then runs itself)
        let cancelled = self.with_client(|client| async move {
            let batch = client.batch(&owned)?;
            batch.close().await?;
            let mut cursor = 0;
            let mut cancelled = 0u64;
            for _ in 0..1_000_000 {
                let page = batch.members(cursor, 1_000).await?;
                for (m, _) in page.members {
                    let t = client.topic(m.topic.as_str())?;
                    if t.cancel(m.key.as_str()).await? == dq::CancelOutcome::Cancelled {
                        cancelled += 1;
                    }
                }
                match page.next {
                    Some(next) => cursor = next,
                    None => break,
                }
            }
            Ok(cancelled)
        })?;
        let (cancel, _) = self.phase_end(cpu0)?;
        let notes: u64 = self.cmd(&["XLEN", &keys.outbox])?;
        let bytes = usage(&mut self.admin, &keys.outbox)?;
        let stream: Value = {
            let info =
                admin::cmd::<redis::Value>(&mut self.admin, &["XINFO", "STREAM", &keys.outbox]);
            match info {
                Ok(redis::Value::Array(items)) => {
                    let mut m = serde_json::Map::new();
                    for pair in items.chunks(2) {
                        if let [redis::Value::BulkString(k), redis::Value::Int(v)] = pair {
                            m.insert(String::from_utf8_lossy(k).into_owned(), json!(v));
                        }
                    }
                    Value::Object(m)
                }
                _ => Value::Null,
            }
        };
        if notes != n {
            return Err(format!(
                "the outbox holds {notes} notes after cancelling {n} members (no worker ran)"
            )
            .into());
        }
        // the relay alone: a worker with nothing to run but the callback's topic
        let cpu0 = self.phase_start()?;
        self.worker_extra = vec![s("--batch")];
        let running = self.start_worker(Scenario::Scale, conc, 0, WORKER_TIMEOUT_S);
        self.worker_extra.clear();
        let (worker, _) =
            self.finish_worker(running?, Duration::from_secs(WORKER_TIMEOUT_S + 100))?;
        let (relay, stats) = self.phase_end(cpu0)?;
        check_callback(&worker, id)?;
        let left: u64 = self.cmd(&["XLEN", &keys.outbox])?;
        let per_note = |c: &str| {
            stats
                .get(c)
                .map_or(0.0, |s| s.usec as f64 / n.max(1) as f64)
        };
        Ok(json!({
            "xrange_us_per_note": per_note("xrange"),
            "xdel_us_per_note": per_note("xdel") + per_note("xtrim"),
            "cancelled_counted_before_relay": cancelled,
            "notes": notes,
            "outbox_bytes": bytes,
            "bytes_per_note": bytes as f64 / notes.max(1) as f64,
            "stream": stream,
            "cancel": cancel.per(n),
            "relay": relay.per(n),
            "spent": {"cancel": cancel, "relay": relay},
            "left_after_relay": left,
            "worker": worker,
            "relay_commandstats": stats,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spent_adds_up_and_divides_per_job() {
        let a = Spent {
            script_calls: 10,
            script_usec: 300,
            outbox_calls: 2,
            outbox_usec: 100,
            cpu_usec: 500.0,
        };
        let total = a.plus(a);
        assert_eq!((total.usec(), total.calls()), (800, 24));
        let per = total.per(100);
        assert_eq!(per["us"], 8.0);
        assert_eq!(per["script_us"], 6.0);
        assert_eq!(per["outbox_us"], 2.0);
        assert_eq!(per["cpu_us"], 10.0);
        assert_eq!(Spent::default().per(0)["us"], 0.0);
    }

    #[test]
    fn a_callback_counts_only_once_for_its_batch() {
        let ok = json!({"callback_runs": 1, "callback_batch": "b", "timed_out": false});
        assert!(check_callback(&ok, "b").is_ok());
        assert!(check_callback(&ok, "c").is_err());
        let twice = json!({"callback_runs": 2, "callback_batch": "b", "timed_out": false});
        assert!(check_callback(&twice, "b").is_err());
        let late = json!({"callback_runs": 1, "callback_batch": "b", "timed_out": true});
        assert!(check_callback(&late, "b").is_err());
        assert_eq!(batch_id(&json!({"batch": {"id": "x"}})).unwrap(), "x");
        assert!(batch_id(&json!({"batch": null})).is_err());
    }
}
