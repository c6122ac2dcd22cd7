//! `dq-bench worker`: one worker process running one scenario's topic with concurrency C
//! until N jobs have succeeded (or `--timeout-s` passes).
//!
//! It connects, prints `{"ready":true}`, and starts its clock just before the worker is
//! created. After the N-th successful completion it lingers (3 s by default) so that any
//! duplicate run shows up, shuts the worker down, and prints one line:
//!
//! `{secs, completed, jobs_per_s, timed_out, last_done_ms, attempts_hist,
//!   jobs_not_exactly_expected, lateness_ms{p50,p90,p99,max}, ...}`
//!
//! `secs` runs from worker start to the N-th successful completion; `attempts_hist` maps
//! "runs of a job" to "how many jobs ran that often"; `jobs_not_exactly_expected` counts jobs
//! that ran other than once (S5: twice); lateness is `now_ms - due_ms` of each successful run.

use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use serde_json::json;

use crate::jobs::{BATCH_DONE_TOPIC, CallbackSeen, Recorder, now_ms};
use crate::{Result, Scenario};

/// Arguments of `dq-bench worker`.
#[derive(Args, Debug, Clone)]
pub struct WorkerArgs {
    /// The scenario (S3, S3R, S4, S5; MASS, SCALE, IDLE are used by `all`).
    #[arg(long, ignore_case = true)]
    pub scenario: Scenario,
    /// The topic's concurrency in this worker.
    #[arg(long)]
    pub conc: usize,
    /// Successful completions to wait for.
    #[arg(long)]
    pub n: u64,
    /// Give up after this many seconds (the result then says `timed_out`).
    #[arg(long)]
    pub timeout_s: f64,
    /// How long to keep running after the N-th completion, ms (catches duplicate runs).
    #[arg(long, default_value_t = 3000)]
    pub linger_ms: u64,
    /// Extra: most jobs one fetch leases (dq's default when not given).
    #[arg(long)]
    pub max_fetch_batch: Option<usize>,
    /// Extra: install a metrics recorder (Prometheus, nothing scraped) before the worker
    /// starts, so dq's metrics are recorded for real (`all --only s3r-metrics` compares).
    #[arg(long)]
    pub metrics: bool,
    /// Extra: the topic keeps its succeeded jobs for an hour (a retention set before the
    /// worker starts, removed after), so every ack also keeps the job (`all --only s3r-keep`
    /// compares).
    #[arg(long)]
    pub keep: bool,
    /// Extra: the topic records its events (turned on before the worker starts, off after),
    /// so every fetch and ack also appends to the partition's stream, and a reader in this
    /// process follows them as a dashboard would (`all --only s3r-events` compares).
    #[arg(long)]
    pub events: bool,
    /// Extra: the jobs carry `enqueue --priorities`' mix; the line reports each priority
    /// class's mean completion rank (`priority_mean_rank`: 0 = first, 1 = last), so a run
    /// shows the priorities took effect (`all --only s3r-priority` compares).
    #[arg(long)]
    pub priorities: bool,
    /// Extra: the jobs are members of `enqueue --batch`'s batch; the worker also runs its
    /// callback's topic (`bench.batch.done`) and finishes only once the callback has run too,
    /// so the relay's work up to the callback is inside the run (`all --only batches`
    /// compares). The line reports the callback (`callback_runs`, `callback_after_secs`,
    /// `callback_lag_ms` after the last member's end). `--n 0`: waits for the callback alone.
    #[arg(long)]
    pub batch: bool,
    /// Extra: the tokio runtime (`multi`, the default, or `current`: one thread).
    #[arg(long, value_enum, default_value = "multi")]
    pub runtime: crate::Flavor,
}

/// Runs `dq-bench worker` and prints its two lines.
pub async fn run(args: WorkerArgs) -> Result<()> {
    if (args.n == 0 && !args.batch) || args.conc == 0 {
        return Err("--n (but with --batch) and --conc must be at least 1".into());
    }
    if matches!(args.scenario, Scenario::S1 | Scenario::Fill) {
        return Err(format!("no worker runs {}", args.scenario.name()).into());
    }
    let topic = args.scenario.topic();
    let prometheus = if args.metrics {
        let handle = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
        dq::metrics::describe();
        Some(handle)
    } else {
        None
    };
    let client = crate::connect(dq::DEFAULT_BULK_CHUNK).await?;
    let retention = dq::Retention::default()
        .succeeded(Duration::from_secs(3600))
        .max_kept(args.n.clamp(1, 10_000_000));
    client
        .topic(topic)?
        .set_retention(args.keep.then_some(retention))
        .await?;
    // With --events: on before the worker starts, and a reader from now, counting.
    let read_events = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let reader = if args.events {
        client
            .topic(topic)?
            .set_events(Some(dq::EventsPolicy::keep(
                (2 * args.n).clamp(1, 10_000_000),
            )?))
            .await?;
        let mut stream = client
            .events_with(dq::EventsOptions::default().topics([topic]))
            .await?;
        let count = read_events.clone();
        Some(tokio::spawn(async move {
            while let Some(Ok(_)) = stream.next().await {
                count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }))
    } else {
        None
    };
    crate::emit(&json!({"ready": true}));
    // The clock starts here, just before the worker is created.
    let recorder = Recorder::new(args.n, args.scenario.fail_first(), args.priorities);
    let callback = args.batch.then(|| CallbackSeen::new(recorder.started()));
    let client_for_stats = client.clone();
    let mut topics = vec![topic];
    if args.batch {
        topics.push(BATCH_DONE_TOPIC);
    }
    let mut builder = dq::Worker::builder(client)
        .topics(topics)
        .concurrency(topic, args.conc)
        .data(recorder.clone());
    if let Some(seen) = &callback {
        builder = builder.data(seen.clone());
    }
    if let Some(batch) = args.max_fetch_batch {
        builder = builder.max_fetch_batch(batch);
    }
    let handle = builder.build()?.start().await?;
    let deadline = recorder.started() + Duration::from_secs_f64(args.timeout_s.max(0.0));
    // the N successes, then (--batch) the callback
    let done = async {
        if args.n > 0 {
            recorder.wait_done().await;
        }
        if let Some(seen) = &callback {
            seen.wait().await;
        }
    };
    let timed_out = tokio::select! {
        () = done => false,
        () = tokio::time::sleep_until(deadline.into()) => true,
    };
    if !timed_out {
        tokio::time::sleep(Duration::from_millis(args.linger_ms)).await;
    }
    let report = handle.shutdown().await;
    let events = if let Some(reader) = reader {
        // every job's started and succeeded events, read (bounded: the reader polls every
        // 100 ms, so a few rounds at most)
        let want = 2 * recorder.completed().min(args.n);
        for _ in 0..100 {
            if read_events.load(std::sync::atomic::Ordering::Relaxed) >= want {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        reader.abort();
        let t = client_for_stats.topic(topic)?;
        let lost = t.stats().await?.events_lost;
        t.set_events(None).await?;
        Some((read_events.load(std::sync::atomic::Ordering::Relaxed), lost))
    } else {
        None
    };
    let kept = if args.keep {
        let t = client_for_stats.topic(topic)?;
        let kept = t.stats().await?.kept;
        t.set_retention(None).await?;
        Some(kept)
    } else {
        None
    };
    // What a scrape would see: proof the recorder recorded (the line reports it).
    let recorded = prometheus.map(|p| {
        p.render()
            .lines()
            .filter(|l| l.starts_with("dq_jobs_succeeded_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    });
    let mut line = result(&args, &recorder, timed_out, report.drained);
    if let (Some(n), serde_json::Value::Object(m)) = (recorded, &mut line) {
        m.insert("metrics_succeeded".into(), json!(n));
    }
    if let (Some(n), serde_json::Value::Object(m)) = (kept, &mut line) {
        m.insert("kept".into(), json!(n));
    }
    if let (Some(ranks), serde_json::Value::Object(m)) =
        (recorder.mean_rank_by_priority(), &mut line)
    {
        m.insert("priority_mean_rank".into(), ranks);
    }
    if let (Some((read, lost)), serde_json::Value::Object(m)) = (events, &mut line) {
        m.insert("events_read".into(), json!(read));
        m.insert("events_lost".into(), json!(lost));
    }
    if let (Some(seen), serde_json::Value::Object(m)) = (&callback, &mut line) {
        let at = seen.first_ms();
        let last = recorder.last_done_ms();
        if args.n == 0
            && let Some(secs) = seen.after_secs()
        {
            // nothing to run but the callback: the run lasts until it ran
            m.insert("secs".into(), json!(secs));
        }
        m.insert("callback_runs".into(), json!(seen.runs()));
        m.insert("callback_after_secs".into(), json!(seen.after_secs()));
        m.insert("callback_batch".into(), json!(seen.batch()));
        m.insert(
            "callback_lag_ms".into(),
            json!((at > 0 && last > 0).then(|| at as i64 - last as i64)),
        );
    }
    crate::emit(&line);
    Ok(())
}

/// The result line.
fn result(
    args: &WorkerArgs,
    recorder: &Arc<Recorder>,
    timed_out: bool,
    drained: bool,
) -> serde_json::Value {
    let completed = recorder.completed();
    let secs = recorder
        .done_after_secs()
        .unwrap_or_else(|| args.timeout_s.max(1e-9));
    let expected = args.scenario.expected_runs();
    let hist = recorder.runs_histogram();
    let not_expected: u64 = hist
        .iter()
        .filter(|(runs, _)| **runs != expected)
        .map(|(_, jobs)| jobs)
        .sum();
    let lateness = recorder.lateness_sorted();
    json!({
        "secs": secs,
        "completed": completed,
        "jobs_per_s": completed.min(args.n) as f64 / secs,
        "timed_out": timed_out,
        "last_done_ms": recorder.last_done_ms(),
        "attempts_hist": hist.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "jobs_not_exactly_expected": not_expected,
        "expected_runs": expected,
        "lateness_ms": percentiles(&lateness),
        "stray_runs": recorder.strays(),
        "scenario": args.scenario.name(),
        "conc": args.conc,
        "n": args.n,
        "drained_at_shutdown": drained,
        "finished_ms": now_ms(),
    })
}

/// `{p50, p90, p99, max}` of sorted values (nulls when empty).
pub fn percentiles(sorted: &[i64]) -> serde_json::Value {
    let at = |q: f64| -> Option<i64> {
        if sorted.is_empty() {
            return None;
        }
        // Nearest rank.
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        Some(sorted[rank - 1])
    };
    json!({
        "p50": at(0.50),
        "p90": at(0.90),
        "p99": at(0.99),
        "max": sorted.last(),
        "count": sorted.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<i64> = (1..=100).collect();
        let p = percentiles(&v);
        assert_eq!(p["p50"], 50);
        assert_eq!(p["p90"], 90);
        assert_eq!(p["p99"], 99);
        assert_eq!(p["max"], 100);
        assert!(percentiles(&[])["p50"].is_null());
    }
}
