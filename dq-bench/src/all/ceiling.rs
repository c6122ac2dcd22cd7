//! Redis's own ceilings on this machine (`redis-benchmark` of the commands dq's scripts use),
//! printed beside dq's figures so they can be read against what the server can do at all.

use super::*;

impl Orchestrator {
    pub(super) fn ceilings(&mut self) -> Result<()> {
        let p = self.plan.clone();
        let port = s(self.server.port());
        let n = s(p.bench_requests);
        let mut rows = Vec::new();
        let mut raw = serde_json::Map::new();
        self.flush()?;
        for pipeline in [None, Some("16")] {
            let mut args = vec!["-p", &port, "-n", &n, "-t", "set,lpush,zadd,hset", "-q"];
            if let Some(depth) = pipeline {
                args.extend(["-P", depth]);
            }
            let text = run_captured("redis-benchmark", &args, Duration::from_secs(300))?;
            let parsed = parse_benchmark(&text);
            for (cmd, rps) in &parsed {
                let label = match pipeline {
                    Some(d) => format!("{cmd} -P {d}"),
                    None => cmd.clone(),
                };
                rows.push(json!({"label": label, "rps": rps, "ops_per_s": rps}));
            }
            raw.insert(
                format!("-t set,lpush,zadd,hset -P {}", pipeline.unwrap_or("1")),
                json!(parsed),
            );
            self.flush()?;
        }
        // EVALSHA of a ZADD + HSET with a ~120-byte payload: 50 clients, pipelined, and one
        // client awaiting each call (the round-trip ceiling of one-at-a-time enqueues).
        for (clients, pipeline) in [(None, None), (None, Some("16")), (Some(1), None)] {
            let rps = self.evalsha_zadd_hset(clients, pipeline, p.bench_requests)?;
            let label = match (clients, pipeline) {
                (_, Some(d)) => format!("EVALSHA ZADD+HSET 120 B -P {d}"),
                (Some(c), None) => format!("EVALSHA ZADD+HSET 120 B, -c {c}"),
                (None, None) => "EVALSHA ZADD+HSET 120 B".to_owned(),
            };
            rows.push(json!({"label": label, "rps": rps, "ops_per_s": rps}));
            raw.insert(label, json!(rps));
            self.flush()?;
        }
        // EVALSHA of ZRANGEBYSCORE … LIMIT 0 100 + ZREM over a big zset, one client.
        let fill = "for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do \
                    redis.call('ZADD', KEYS[1], i, 'm' .. i) end return 1";
        let step = 100_000u64;
        let mut from = 1;
        while from <= p.zset_members {
            let to = (from + step - 1).min(p.zset_members);
            self.cmd::<i64>(&["EVAL", fill, "1", "ceil:z", &s(from), &s(to)])?;
            from = to + 1;
        }
        let pop = "local m = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '+inf', 'LIMIT', 0, 100) \
                   if #m > 0 then redis.call('ZREM', KEYS[1], unpack(m)) end return #m";
        let sha: String = self.cmd(&["SCRIPT", "LOAD", pop])?;
        let calls = s(p.zrem_calls);
        let text = run_captured(
            "redis-benchmark",
            &[
                "-p", &port, "-n", &calls, "-c", "1", "-q", "EVALSHA", &sha, "1", "ceil:z",
            ],
            Duration::from_secs(300),
        )?;
        let members_left: u64 = self.cmd(&["ZCARD", "ceil:z"])?;
        let parsed = parse_benchmark(&text);
        let rps = parsed.values().next().copied();
        let label = format!(
            "EVALSHA ZRANGEBYSCORE 100 + ZREM ({} zset, 1 client)",
            pretty_count(p.zset_members)
        );
        rows.push(
            json!({"label": label, "rps": rps, "ops_per_s": rps.map(|r| r * 100.0),
                         "note": "ops = members popped"}),
        );
        raw.insert(
            label,
            json!({"results": parsed, "zset_members_after": members_left}),
        );
        self.flush()?;
        // The dense fill's chunk without dq: EVALSHA of 100 × (ZADD + HSET of a 117-byte
        // record), 16 jobs per due ms, one client; calls over 2 ms in the slow log (the
        // dense fill's target) say how often this machine alone stretches a ~0.5 ms call.
        let chunk = "local base = tonumber(ARGV[1]) * 100 for i = 1, 100 do \
                     local k = 'k' .. (base + i) \
                     redis.call('ZADD', KEYS[1], 1795000000000 + math.floor((base + i) / 16), k) \
                     redis.call('HSET', KEYS[2], k, ARGV[2]) end return 1";
        let sha: String = self.cmd(&["SCRIPT", "LOAD", chunk])?;
        let record = "r".repeat(117);
        let calls = s(p.zrem_calls * 2);
        self.slowlog_on(2_000)?;
        self.resetstat()?;
        let text = run_captured(
            "redis-benchmark",
            &[
                "-p",
                &port,
                "-n",
                &calls,
                "-c",
                "1",
                "-r",
                "100000000",
                "-q",
                "EVALSHA",
                &sha,
                "2",
                "ceil:{d}:z",
                "ceil:{d}:h",
                "__rand_int__",
                &record,
            ],
            Duration::from_secs(600),
        );
        let slow = admin::slowlog(&mut self.admin);
        let stat = self.commandstats().map(|s| admin::script_calls(&s));
        self.slowlog_default()?;
        let (_, slow, stat) = (text?, slow?, stat?);
        let over = slow
            .iter()
            .filter(|e| admin::is_script_call(&e.args))
            .count();
        let label = format!("EVALSHA 100 × ZADD+HSET, dense (calls over 2 ms of {calls})");
        raw.insert(
            label,
            json!({"over_2ms": over, "calls": stat.calls,
                                 "usec_per_call": stat.usec_per_call()}),
        );
        self.push_labeled(
            "ceiling_dense_chunk_over_2ms",
            "plain 100-job script (no dq), dense: calls over 2 ms",
            "calls",
            over as f64,
        );
        self.push_labeled(
            "ceiling_dense_chunk_us",
            "plain 100-job script (no dq), dense: mean per call",
            "µs",
            stat.usec_per_call(),
        );
        self.flush()?;
        self.ceilings = json!({"rows": rows, "raw": raw});
        for r in &rows {
            eprintln!(
                "   {:<52} {:>10} calls/s",
                r["label"].as_str().unwrap_or("?"),
                pretty(r["rps"].as_f64().unwrap_or(f64::NAN))
            );
        }
        Ok(())
    }
}

impl Orchestrator {
    /// `redis-benchmark` of `EVALSHA` of a one-ZADD-one-HSET script with a 120-byte payload
    /// (random members), `requests` calls with `clients` clients (its default, 50, when
    /// `None`) and an optional pipeline depth: calls per second.
    pub(super) fn evalsha_zadd_hset(
        &mut self,
        clients: Option<u32>,
        pipeline: Option<&str>,
        requests: u64,
    ) -> Result<f64> {
        let zadd_hset = "redis.call('ZADD', KEYS[1], ARGV[1], ARGV[1]) \
                         redis.call('HSET', KEYS[2], ARGV[1], ARGV[2]) return 1";
        let sha: String = self.cmd(&["SCRIPT", "LOAD", zadd_hset])?;
        let payload = "p".repeat(120);
        let (port, n) = (s(self.server.port()), s(requests));
        let c = clients.map(s);
        let mut args = vec!["-p", &port, "-n", &n, "-r", "100000000", "-q"];
        if let Some(c) = &c {
            args.extend(["-c", c]);
        }
        if let Some(depth) = pipeline {
            args.extend(["-P", depth]);
        }
        args.extend([
            "EVALSHA",
            &sha,
            "2",
            "ceil:{x}:z",
            "ceil:{x}:h",
            "__rand_int__",
            &payload,
        ]);
        let text = run_captured("redis-benchmark", &args, Duration::from_secs(300))?;
        parse_benchmark(&text)
            .values()
            .next()
            .copied()
            .ok_or_else(|| format!("redis-benchmark printed no rate: {text}").into())
    }
}

/// Runs a command with a time limit and returns its stdout.
pub(super) fn run_captured(program: &str, args: &[&str], timeout: Duration) -> Result<String> {
    run_captured_in(None, program, args, timeout)
}

/// [`run_captured`] in directory `dir` (the current one when `None`).
pub(super) fn run_captured_in(
    dir: Option<&Path>,
    program: &str,
    args: &[&str],
    timeout: Duration,
) -> Result<String> {
    let mut command = Command::new(program);
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    let mut child = command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{program} did not finish within {timeout:?}").into());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = reader.join().unwrap_or_default();
    if !status.success() {
        return Err(format!("{program} failed ({status}): {text}").into());
    }
    Ok(text)
}

/// `NAME: 123.45 requests per second, …` lines of `redis-benchmark -q` (progress lines are
/// separated by `\r`) → NAME → requests per second.
pub(super) fn parse_benchmark(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for segment in text.split(['\r', '\n']) {
        let Some((head, _)) = segment.split_once(" requests per second") else {
            continue;
        };
        let Some((name, rps)) = head.rsplit_once(": ") else {
            continue;
        };
        if let Ok(rps) = rps.trim().parse::<f64>() {
            out.insert(name.trim().to_owned(), rps);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn benchmark_output_parses() {
        let text = "SET: rps=0.0 (overall: nan) avg_msec=nan (overall: nan)\r\
                    SET: 98765.43 requests per second, p50=0.255 msec\n\
                    LPUSH: 100000.00 requests per second, p50=0.247 msec\n\
                    EVALSHA abc 2 ceil:{x}:z ceil:{x}:h __rand_int__ ppp: 45000.50 requests per second, p50=1 msec\n";
        let r = parse_benchmark(text);
        assert_eq!(r["SET"], 98765.43);
        assert_eq!(r["LPUSH"], 100000.0);
        assert_eq!(r.len(), 3);
    }
}
