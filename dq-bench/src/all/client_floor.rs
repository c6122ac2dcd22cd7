//! The client floor (section `client-floor`): how close to Redis's one-client round-trip
//! ceiling a Rust program on the `redis` crate gets at all, measured beside dq's one-at-a-time
//! enqueue in the same repetition.
//!
//! Each repetition runs, one after the other on an emptied server:
//! - the ceiling: `redis-benchmark -c 1` of `EVALSHA` of a one-`ZADD`-one-`HSET` script with a
//!   120-byte payload (what S1's target divides by);
//! - the same `EVALSHA`, awaited one at a time from this process over a
//!   `redis::aio::ConnectionManager` (the connection dq uses), on a multi-thread and on a
//!   current-thread tokio runtime: the same Redis work as the ceiling, with the client's
//!   runtime and connection task in between;
//! - dq's S1 `single` enqueue (`dq-bench enqueue`, multi-thread runtime).
//!
//! The redis-crate rows over the ceiling are what one-at-a-time enqueues can reach through
//! this client before any queue logic.

use super::*;

/// One `EVALSHA` loop on a tokio runtime: calls per second.
fn crate_loop(url: &str, flavor: crate::Flavor, n: u64) -> Result<f64> {
    let rt = match flavor {
        crate::Flavor::Multi => tokio::runtime::Builder::new_multi_thread(),
        crate::Flavor::Current => tokio::runtime::Builder::new_current_thread(),
    }
    .enable_all()
    .build()?;
    let url = url.to_owned();
    rt.block_on(async move {
        let client = redis::Client::open(url)?;
        let mut conn = redis::aio::ConnectionManager::new(client).await?;
        let script = redis::Script::new(
            "redis.call('ZADD', KEYS[1], ARGV[1], ARGV[1]) \
             redis.call('HSET', KEYS[2], ARGV[1], ARGV[2]) return 1",
        );
        let payload = "p".repeat(120);
        // loaded once, outside the timed loop (redis-benchmark's EVALSHA finds it loaded)
        script.prepare_invoke().load_async(&mut conn).await?;
        let started = Instant::now();
        for i in 0..n {
            let _: i64 = script
                .key("ceil:{x}:z")
                .key("ceil:{x}:h")
                .arg(i)
                .arg(&payload)
                .invoke_async(&mut conn)
                .await?;
        }
        Ok::<f64, crate::BoxError>(n as f64 / started.elapsed().as_secs_f64())
    })
}

impl Orchestrator {
    pub(super) fn client_floor(&mut self) -> Result<()> {
        let n = self.plan.s1_n.min(20_000);
        let reps = self.plan.reps;
        let url = self.url();
        self.reps("client-floor", reps, |o, _| {
            o.flush()?;
            let ceiling = o.evalsha_zadd_hset(Some(1), None, n)?;
            o.flush()?;
            let multi = crate_loop(&url, crate::Flavor::Multi, n)?;
            o.flush()?;
            let current = crate_loop(&url, crate::Flavor::Current, n)?;
            o.flush()?;
            let args = [
                s("--scenario"),
                s("S1"),
                s("--mode"),
                s("single"),
                s("--n"),
                s(n),
            ];
            let dq = num(&o.enqueue(&args)?, "/jobs_per_s")?;
            o.flush()?;
            for (key, label, value) in [
                (
                    "client_floor_ceiling",
                    "client floor: redis-benchmark -c 1 EVALSHA",
                    ceiling,
                ),
                (
                    "client_floor_crate_multi",
                    "client floor: redis crate, multi-thread",
                    multi,
                ),
                (
                    "client_floor_crate_current",
                    "client floor: redis crate, current-thread",
                    current,
                ),
                (
                    "client_floor_dq_single",
                    "client floor: dq single enqueue",
                    dq,
                ),
            ] {
                o.push_labeled(key, label, "calls/s", value);
            }
            for (key, label, value) in [
                (
                    "client_floor_crate_multi_ratio",
                    "redis crate multi-thread / ceiling",
                    multi,
                ),
                (
                    "client_floor_crate_current_ratio",
                    "redis crate current-thread / ceiling",
                    current,
                ),
                ("client_floor_dq_ratio", "dq single / ceiling", dq),
            ] {
                o.push_labeled(key, label, "×", value / ceiling);
            }
            Ok(json!({"n": n, "ceiling": ceiling, "crate_multi": multi,
                      "crate_current": current, "dq_single": dq}))
        })
    }
}
