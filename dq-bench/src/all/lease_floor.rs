//! The lease floor (section `lease-floor`): what a lease and its ack cost Redis at the least,
//! measured beside a dq drain of the same run.
//!
//! Each repetition drains S3R with dq (its Redis time per job, lease + ack, from `INFO
//! commandstats`), then drives three stripped-down versions of the same work over the same
//! kind of data (ready jobs with 117-byte records under 16-character keys, batches of 25, two
//! batches in flight) from this process:
//!
//! - `script`: `lease_floor.lua`'s `ceil_fetch` and `ceil_ack`: only the commands of dq's lean
//!   lease, in two Redis Functions, with none of dq's checks (receipts of retries, expired
//!   leases, controls, due sets, stale hints, newer formats, wake-ups);
//! - `keys`: the same, but the fetch returns keys and tokens only and the records are read
//!   with a plain `HMGET` (the payloads never pass through Lua);
//! - `commands`: the same commands sent as plain commands, no script at all (what Redis's data
//!   structures cost; not a protocol: nothing makes it atomic);
//! - `dq`: dq's own `fetch` and `ack` Functions on records dq wrote (`dq-bench enqueue`), driven
//!   by this process the same way: dq's protocol in the floor's conditions. The drain's figure
//!   is higher than this one by what sharing two cores with a busy worker costs Redis.
//!
//! The `script` pass's Redis time per job is the bound a script-held lease cannot go under on
//! this machine; `dq` minus `script` is what dq's checks cost.

use super::*;
use dq::store::redis::layout::{self, PartitionKeys};

/// The Functions library of the `script` and `keys` passes.
const LIBRARY: &str = include_str!("lease_floor.lua");

/// Jobs per fetch (S3R's worker with 50 slots fetches ~25 at a time).
const BATCH: usize = 25;

/// Keys of the floor's data (one hash slot, like a dq partition).
const READY: &str = "ceil:{lease}:ready";
const JOBS: &str = "ceil:{lease}:jobs";
const ACTIVE: &str = "ceil:{lease}:active";
const LEASES: &str = "ceil:{lease}:leases";
const STATS: &str = "ceil:{lease}:stats";
const RECEIPT: &str = "ceil:{lease}:fetch:1";

/// One way of doing the lease + ack work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    Script,
    Keys,
    Commands,
    Dq,
}

impl Pass {
    const ALL: [Pass; 4] = [Pass::Script, Pass::Keys, Pass::Commands, Pass::Dq];

    fn name(self) -> &'static str {
        match self {
            Pass::Script => "script",
            Pass::Keys => "keys",
            Pass::Commands => "commands",
            Pass::Dq => "dq",
        }
    }
}

/// A leased batch waiting for its ack: keys and tokens.
type Batch = Vec<(String, i64)>;

impl Orchestrator {
    pub(super) fn lease_floor(&mut self) -> Result<()> {
        let (n, conc) = (self.plan.s3_n, self.plan.conc);
        let reps = self.plan.reps;
        self.reps("lease-floor", reps, |o, rep| {
            let v = o.drain(Scenario::S3R, n, conc, false)?;
            let dq = num(&v, "/redis/script_usec_per_job")?;
            o.push_labeled(
                "floor_drain_us_per_job",
                "lease floor: dq's S3R drain, lease + ack per job (same rep)",
                "µs/job",
                dq,
            );
            let mut passes = serde_json::Map::new();
            // alternate the order, so the machine's drift hits every pass alike
            let mut order = Pass::ALL.to_vec();
            order.rotate_left(rep % Pass::ALL.len());
            for pass in order {
                let (us, detail) = o.floor_pass(pass, n)?;
                o.push_labeled(
                    &format!("floor_{}_us_per_job", pass.name()),
                    &format!("lease floor, {}: lease + ack per job", pass.name()),
                    "µs/job",
                    us,
                );
                passes.insert(pass.name().into(), detail);
            }
            Ok(json!({"drain_us_per_job": dq, "passes": passes}))
        })
    }

    /// Seeds `n` ready jobs and leases and acks them all the `pass` way: Redis time per job.
    fn floor_pass(&mut self, pass: Pass, n: u64) -> Result<(f64, Value)> {
        self.flush()?;
        let mut dq = None;
        if pass == Pass::Dq {
            let args = [
                s("--scenario"),
                s("S3R"),
                s("--mode"),
                s("bulk"),
                s("--n"),
                s(n),
            ];
            self.enqueue(&args)?;
            dq = Some(DqCalls::find(self)?);
        } else {
            self.cmd::<String>(&["FUNCTION", "LOAD", "REPLACE", LIBRARY])?;
            self.floor_seed(n)?;
        }
        self.resetstat()?;
        let mut in_flight: std::collections::VecDeque<Batch> = Default::default();
        let mut acked = 0u64;
        let mut token = 0i64;
        let mut rounds = 0u64;
        let mut ack_usec = 0u64;
        // each round leases a batch and acks the one before the last: two batches in flight
        while acked < n {
            rounds += 1;
            if rounds > n + 10 {
                return Err(format!("lease floor ({}): no progress", pass.name()).into());
            }
            let batch = match &dq {
                Some(dq) => dq.fetch(self, rounds)?,
                None => self.floor_fetch(pass, &mut token)?,
            };
            let empty = batch.is_empty();
            if !empty {
                in_flight.push_back(batch);
            }
            if in_flight.len() > 1 || (empty && !in_flight.is_empty()) {
                let done = in_flight.pop_front().unwrap_or_default();
                // (INFO is a command of its own: it adds nothing to `fcall`'s time)
                let before = self.fcall_usec()?;
                acked += match &dq {
                    Some(dq) => dq.ack(self, &done)?,
                    None => self.floor_ack(pass, &done)?,
                };
                ack_usec += self.fcall_usec()? - before;
            } else if empty {
                return Err(
                    format!("lease floor ({}): the ready list ran dry", pass.name()).into(),
                );
            }
        }
        let stats = self.commandstats()?;
        let measured: Vec<&str> = match pass {
            Pass::Script | Pass::Keys | Pass::Dq => vec!["fcall", "hmget"],
            Pass::Commands => vec![
                "lrange", "hmget", "hincrby", "zadd", "hset", "ltrim", "set", "zrem", "hdel",
            ],
        };
        // (in the script passes, `hmget` counts the scripts' own HMGETs too: they are inside
        // `fcall`'s time already; only the client's HMGET of the records is added)
        let fcall = stats.get("fcall").copied().unwrap_or_default();
        let usec = match pass {
            Pass::Script | Pass::Dq => fcall.usec,
            Pass::Keys => {
                // 2 script HMGETs per round (leases in fetch, in ack) + the client's one
                let hmget = stats.get("hmget").copied().unwrap_or_default();
                let client_calls = hmget.calls.saturating_sub(fcall.calls);
                fcall.usec
                    + (hmget.usec as f64 * client_calls as f64 / hmget.calls.max(1) as f64) as u64
            }
            Pass::Commands => measured
                .iter()
                .filter_map(|c| stats.get(*c))
                .map(|s| s.usec)
                .sum(),
        };
        let per_job = usec as f64 / n as f64;
        if pass != Pass::Commands {
            let ack = ack_usec as f64 / n as f64;
            o_push_split(self, pass, per_job - ack, ack);
        }
        let detail = json!({
            "usec": usec,
            "per_job": per_job,
            "ack_usec": ack_usec,
            "rounds": rounds,
            "commandstats": measured.iter()
                .filter_map(|c| stats.get(*c).map(|s| (c.to_string(), json!(s))))
                .collect::<serde_json::Map<_, _>>(),
        });
        Ok((per_job, detail))
    }

    /// `fcall`'s total time so far (`INFO commandstats`), µs.
    fn fcall_usec(&mut self) -> Result<u64> {
        Ok(self.commandstats()?.get("fcall").map_or(0, |s| s.usec))
    }

    /// `n` ready jobs: 117-byte records (a 15-byte header and a 102-byte payload, dq's
    /// format 3 with S3R's payload) under 16-character keys; `active` and `leases` in the
    /// encodings dq keeps them in (skiplist, hash table).
    fn floor_seed(&mut self, n: u64) -> Result<()> {
        let record = "r".repeat(117);
        let long = "\0".repeat(72);
        let mut pipe = redis::pipe();
        for i in 0..n {
            let key = format!("{i:016x}");
            pipe.cmd("HSET").arg(JOBS).arg(&key).arg(&record).ignore();
            pipe.cmd("RPUSH").arg(READY).arg(&key).ignore();
            if pipe.len() >= 2_000 || i + 1 == n {
                pipe.query::<()>(&mut self.admin)?;
                pipe = redis::pipe();
            }
        }
        // a member and a field longer than the listpack limits (64) convert both for good;
        // one stays in each for the whole pass (so neither key ever empties)
        self.cmd::<i64>(&["ZADD", ACTIVE, "0", &long])?;
        self.cmd::<i64>(&["HSET", LEASES, &long, "0"])?;
        Ok(())
    }

    fn floor_fetch(&mut self, pass: Pass, token: &mut i64) -> Result<Batch> {
        let batch = s(BATCH);
        match pass {
            Pass::Script | Pass::Keys | Pass::Dq => {
                let function = if pass == Pass::Script {
                    "ceil_fetch"
                } else {
                    "ceil_fetch_keys"
                };
                let reply: Vec<redis::Value> = self.cmd(&[
                    "FCALL", function, "6", READY, JOBS, ACTIVE, LEASES, STATS, RECEIPT, &batch,
                    "300000",
                ])?;
                let stride = if pass == Pass::Script { 3 } else { 2 };
                let mut out = Batch::new();
                for job in reply.chunks(stride) {
                    let key: String = redis::from_redis_value(job[0].clone())?;
                    let token: i64 = redis::from_redis_value(job[stride - 1].clone())?;
                    out.push((key, token));
                }
                if pass == Pass::Keys && !out.is_empty() {
                    let mut hmget = redis::cmd("HMGET");
                    hmget.arg(JOBS);
                    for (key, _) in &out {
                        hmget.arg(key);
                    }
                    let records: Vec<Option<Vec<u8>>> = hmget.query(&mut self.admin)?;
                    if records.iter().any(Option::is_none) {
                        return Err("lease floor: a leased job has no record".into());
                    }
                }
                Ok(out)
            }
            Pass::Commands => {
                let keys: Vec<String> = self.cmd(&["LRANGE", READY, "0", &s(BATCH - 1)])?;
                if keys.is_empty() {
                    return Ok(Batch::new());
                }
                let base = *token;
                *token += keys.len() as i64;
                let deadline = s(now_ms() + 300_000);
                let mut pipe = redis::pipe();
                pipe.cmd("HMGET").arg(JOBS).arg(&keys);
                pipe.cmd("HMGET").arg(LEASES).arg(&keys).ignore();
                pipe.cmd("HINCRBY")
                    .arg(STATS)
                    .arg("token")
                    .arg(keys.len())
                    .ignore();
                let zadd = pipe.cmd("ZADD").arg(ACTIVE);
                for key in &keys {
                    zadd.arg(&deadline).arg(key);
                }
                zadd.ignore();
                let hset = pipe.cmd("HSET").arg(LEASES);
                let mut receipt = Vec::new();
                for (i, key) in keys.iter().enumerate() {
                    let t = base + i as i64 + 1;
                    hset.arg(key).arg(t);
                    receipt.push(format!("{key}{t}"));
                }
                hset.ignore();
                pipe.cmd("LTRIM")
                    .arg(READY)
                    .arg(keys.len())
                    .arg(-1)
                    .ignore();
                pipe.cmd("SET")
                    .arg(RECEIPT)
                    .arg(receipt.concat())
                    .arg("PX")
                    .arg(60_000)
                    .ignore();
                let (records,): (Vec<Option<Vec<u8>>>,) = pipe.query(&mut self.admin)?;
                if records.iter().any(Option::is_none) {
                    return Err("lease floor: a leased job has no record".into());
                }
                Ok(keys
                    .into_iter()
                    .enumerate()
                    .map(|(i, k)| (k, base + i as i64 + 1))
                    .collect())
            }
        }
    }

    fn floor_ack(&mut self, pass: Pass, batch: &Batch) -> Result<u64> {
        match pass {
            Pass::Script | Pass::Keys | Pass::Dq => {
                let mut fcall = redis::cmd("FCALL");
                fcall
                    .arg("ceil_ack")
                    .arg(4)
                    .arg(ACTIVE)
                    .arg(LEASES)
                    .arg(JOBS)
                    .arg(STATS);
                for (key, token) in batch {
                    fcall.arg(key).arg(token);
                }
                let done: u64 = fcall.query(&mut self.admin)?;
                if done != batch.len() as u64 {
                    return Err(format!("lease floor: {done} of {} acked", batch.len()).into());
                }
                Ok(done)
            }
            Pass::Commands => {
                let keys: Vec<&str> = batch.iter().map(|(k, _)| k.as_str()).collect();
                let mut pipe = redis::pipe();
                pipe.cmd("HMGET").arg(LEASES).arg(&keys).ignore();
                pipe.cmd("ZREM").arg(ACTIVE).arg(&keys).ignore();
                pipe.cmd("HDEL").arg(LEASES).arg(&keys).ignore();
                pipe.cmd("HDEL").arg(JOBS).arg(&keys);
                pipe.cmd("HINCRBY")
                    .arg(STATS)
                    .arg("done")
                    .arg(keys.len())
                    .ignore();
                let (done,): (u64,) = pipe.query(&mut self.admin)?;
                if done != batch.len() as u64 {
                    return Err(format!("lease floor: {done} of {} acked", batch.len()).into());
                }
                Ok(done)
            }
        }
    }
}

/// dq's own `fetch` and `ack` Functions on S3R's partition, called as dq's worker calls them
/// (batch 25, a new receipt per call, the previous one deleted by the next fetch).
struct DqCalls {
    fetch: String,
    ack: String,
}

/// S3R's partition keys (namespace `bench`, one partition).
/// The keys of the partition the S3R drain filled (`bench.s3r`, partition 0, namespace
/// `bench`).
fn dq_keys() -> Result<PartitionKeys> {
    let topic = dq::Topic::new("bench.s3r")?;
    Ok(PartitionKeys::new(
        "bench",
        &dq::store::Queue::new(topic, 0),
    ))
}

/// The KEYS of dq's `script`, in its order, from `k`; `receipt` stands for the one key per
/// call (a fetch receipt).
fn script_keys_of(script: &str, k: &PartitionKeys, receipt: Option<String>) -> Result<Vec<String>> {
    let names = layout::script_keys(script)
        .ok_or_else(|| format!("lease floor: dq has no script {script}"))?;
    names
        .iter()
        .map(|name| match k.get(*name) {
            Some(key) => Ok(key.to_owned()),
            None => receipt
                .clone()
                .ok_or_else(|| format!("lease floor: no key for {name} of {script}").into()),
        })
        .collect()
}

impl DqCalls {
    /// The Functions dq loaded while enqueueing (`dq_<hash>_fetch`, `dq_<hash>_ack`).
    fn find(o: &mut Orchestrator) -> Result<DqCalls> {
        let list: redis::Value = o.cmd(&["FUNCTION", "LIST", "LIBRARYNAME", "dq_*"])?;
        let text = format!("{list:?}");
        let name = |suffix: &str| {
            text.split('"')
                .find(|w| w.starts_with("dq_") && w.ends_with(suffix))
                .map(str::to_owned)
                .ok_or_else(|| format!("lease floor: no dq Function *{suffix} loaded: {text}"))
        };
        Ok(DqCalls {
            fetch: name("_fetch")?,
            ack: name("_ack")?,
        })
    }

    fn fetch(&self, o: &mut Orchestrator, round: u64) -> Result<Batch> {
        // dq's own KEYS for the script, in its order (layout::script_keys), the receipt of
        // this round in its place and the previous round's after them (to delete)
        let k = dq_keys()?;
        let mut keys = script_keys_of("fetch", &k, Some(k.fetch_receipt(round)))?;
        if round > 1 {
            keys.push(k.fetch_receipt(round - 1));
        }
        let mut fcall = redis::cmd("FCALL");
        fcall.arg(&self.fetch).arg(keys.len()).arg(&keys[..]);
        // batch, lease ms, promote, recover, dead cap, retention ms, receipt ms, try, seed,
        // then the retry policy (tiered: 15 s, 3 min, no jitter)
        fcall
            .arg(BATCH)
            .arg(300_000)
            .arg(100)
            .arg(100)
            .arg(10_000)
            .arg(3_600_000);
        fcall
            .arg(10_000)
            .arg(0)
            .arg(12_345)
            .arg(1)
            .arg(0)
            .arg(15_000)
            .arg(180_000);
        let reply: Vec<redis::Value> = fcall.query(&mut o.admin)?;
        let count: i64 = redis::from_redis_value(reply[3].clone())?;
        let mut out = Batch::new();
        for job in reply[6..].chunks(3).take(count.max(0) as usize) {
            let key: String = redis::from_redis_value(job[0].clone())?;
            let token: i64 = redis::from_redis_value(job[2].clone())?;
            out.push((key, token));
        }
        Ok(out)
    }

    fn ack(&self, o: &mut Orchestrator, batch: &Batch) -> Result<u64> {
        let keys = script_keys_of("ack", &dq_keys()?, None)?;
        let mut fcall = redis::cmd("FCALL");
        fcall.arg(&self.ack).arg(keys.len()).arg(&keys[..]);
        // the worker's id, then key, token, started ms, result ('' none) per job
        fcall.arg("bench");
        for (key, token) in batch {
            fcall.arg(key).arg(token).arg(0).arg("");
        }
        let codes: String = fcall.query(&mut o.admin)?;
        let done = codes.bytes().filter(|&c| c == b'A').count() as u64;
        if done != batch.len() as u64 {
            return Err(format!("lease floor: dq acked {codes:?} of {}", batch.len()).into());
        }
        Ok(done)
    }
}

/// The fetch and ack shares of a script pass, per job, as figures of their own.
fn o_push_split(o: &mut Orchestrator, pass: Pass, fetch: f64, ack: f64) {
    o.push_labeled(
        &format!("floor_{}_fetch_us_per_job", pass.name()),
        &format!("lease floor, {}: fetch per job", pass.name()),
        "µs/job",
        fetch,
    );
    o.push_labeled(
        &format!("floor_{}_ack_us_per_job", pass.name()),
        &format!("lease floor, {}: ack per job", pass.name()),
        "µs/job",
        ack,
    );
}
