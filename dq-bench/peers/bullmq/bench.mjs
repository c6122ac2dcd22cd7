// BullMQ peer of dq-bench: the command-line contract of shared/bench/SCENARIOS.md, so that
// `dq-bench all` (section `bullmq`) drives BullMQ exactly as it drives dq, on the same private
// redis-server, in the same run.
//
//   node bench.mjs enqueue --scenario S1 --mode single|bulk|concurrent --n N [--chunk 1000] [--tasks 64]
//   node bench.mjs enqueue --scenario S3|S3R|S5 --n N [--mode bulk] [--delay-ms 5000]
//   node bench.mjs enqueue --scenario S4 --n N --start-ms T --window-ms W
//   node bench.mjs worker  --scenario S3|S3R|S4|S5 --conc C --n N --timeout-s T [--linger-ms 3000]
//
// Every command prints exactly one JSON line (workers print {"ready":true} first, just before
// the Worker is created; the clock starts right after it). Connects to REDIS_URL
// (default redis://127.0.0.1:6379/). Jobs use `removeOnComplete: true` (no completed-job
// history kept, like dq). The orchestrator FLUSHALLs between runs.

import { Queue, Worker } from 'bullmq';

const QUEUES = { S1: 'bench-s1', S3: 'bench-s3', S3R: 'bench-s3r', S4: 'bench-s4', S5: 'bench-s5' };

function parseArgs(argv) {
  const [command, ...rest] = argv;
  const opts = {};
  for (let i = 0; i < rest.length; i++) {
    const a = rest[i];
    if (!a.startsWith('--')) throw new Error(`unexpected argument ${a}`);
    const key = a.slice(2);
    const value = rest[i + 1];
    if (value === undefined || value.startsWith('--')) throw new Error(`${a} needs a value`);
    opts[key] = value;
    i++;
  }
  return { command, opts };
}

function connection() {
  const url = new URL(process.env.REDIS_URL || 'redis://127.0.0.1:6379/');
  const db = url.pathname.length > 1 ? Number(url.pathname.slice(1)) : 0;
  return {
    host: url.hostname || '127.0.0.1',
    port: Number(url.port || 6379),
    db,
    // Required by BullMQ for workers' blocking connections.
    maxRetriesPerRequest: null,
  };
}

function emit(value) {
  process.stdout.write(JSON.stringify(value) + '\n');
}

function order(i, dueMs) {
  return { order_id: i, user: `u${i}`, amount_cents: 1234, note: 'x'.repeat(32), due_ms: dueMs };
}

// splitmix64 over BigInt: the same random delays as dq-bench's producer.
function splitmix(seed) {
  let state = BigInt.asUintN(64, BigInt(seed));
  return () => {
    state = BigInt.asUintN(64, state + 0x9e3779b97f4a7c15n);
    let z = state;
    z = BigInt.asUintN(64, (z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n);
    z = BigInt.asUintN(64, (z ^ (z >> 27n)) * 0x94d049bb133111ebn);
    return z ^ (z >> 31n);
  };
}

// When job i of n is due: [delay ms passed to BullMQ, due time in the payload].
function dueRule(scenario, opts, n) {
  switch (scenario) {
    case 'S1': {
      return (i, rng) => {
        const ms = 600000 + Number(rng() % 3000001n);
        return [ms, Date.now() + ms];
      };
    }
    case 'S3': {
      const d = Number(opts['delay-ms'] ?? 5000);
      return () => [d, Date.now() + d];
    }
    case 'S3R':
    case 'S5':
      return () => [0, Date.now()];
    case 'S4': {
      if (opts['start-ms'] === undefined || opts['window-ms'] === undefined) {
        throw new Error('S4 needs --start-ms and --window-ms');
      }
      const start = Number(opts['start-ms']);
      const window = Number(opts['window-ms']);
      return (i) => {
        const at = start + Math.floor((i * window) / Math.max(n, 1));
        return [Math.max(0, at - Date.now()), at];
      };
    }
    default:
      throw new Error(`no enqueue for scenario ${scenario}`);
  }
}

function jobOpts(scenario, delay) {
  const o = { removeOnComplete: true };
  if (delay > 0) o.delay = delay;
  if (scenario === 'S5') {
    o.attempts = 2;
    o.backoff = { type: 'fixed', delay: 1000 };
  }
  return o;
}

async function enqueue(opts) {
  const scenario = String(opts.scenario || '').toUpperCase();
  const queueName = QUEUES[scenario];
  if (!queueName) throw new Error(`unknown scenario ${opts.scenario}`);
  const n = Number(opts.n);
  if (!(n >= 1)) throw new Error('--n must be at least 1');
  const mode = opts.mode || 'single';
  const chunk = Math.max(1, Number(opts.chunk ?? 1000));
  const tasks = Math.max(1, Number(opts.tasks ?? 64));
  const rule = dueRule(scenario, opts, n);
  const queue = new Queue(queueName, { connection: connection() });
  await queue.waitUntilReady();
  let lastDue = 0;
  const firstAddMs = Date.now();
  const started = process.hrtime.bigint();
  const one = async (i, rng) => {
    const [delay, dueMs] = rule(i, rng);
    if (dueMs > lastDue) lastDue = dueMs;
    await queue.add('order', order(i, dueMs), jobOpts(scenario, delay));
  };
  if (mode === 'single') {
    const rng = splitmix(0x5eed0000 ^ n);
    for (let i = 0; i < n; i++) await one(i, rng);
  } else if (mode === 'bulk') {
    const rng = splitmix(0x5eed0000 ^ n);
    for (let i = 0; i < n; i += chunk) {
      const jobs = [];
      for (let j = i; j < Math.min(n, i + chunk); j++) {
        const [delay, dueMs] = rule(j, rng);
        if (dueMs > lastDue) lastDue = dueMs;
        jobs.push({ name: 'order', data: order(j, dueMs), opts: jobOpts(scenario, delay) });
      }
      await queue.addBulk(jobs);
    }
  } else if (mode === 'concurrent') {
    let next = 0;
    const task = async (t) => {
      const rng = splitmix(0x5eed0000 ^ n ^ (t + 1));
      for (;;) {
        const i = next++;
        if (i >= n) return;
        await one(i, rng);
      }
    };
    await Promise.all(Array.from({ length: tasks }, (_, t) => task(t)));
  } else {
    throw new Error(`unknown mode ${mode}`);
  }
  const secs = Number(process.hrtime.bigint() - started) / 1e9;
  await queue.close();
  emit({
    secs,
    jobs_per_s: n / secs,
    first_add_ms: firstAddMs,
    last_due_ms: lastDue,
    last_add_ms: Date.now(),
    scenario,
    mode,
    n,
    chunk,
    tasks: mode === 'concurrent' ? tasks : undefined,
    not_created: 0,
    peer: 'bullmq',
  });
}

function percentiles(sorted) {
  const at = (q) => {
    if (sorted.length === 0) return null;
    const rank = Math.min(Math.max(Math.ceil(q * sorted.length), 1), sorted.length);
    return sorted[rank - 1];
  };
  return {
    p50: at(0.5),
    p90: at(0.9),
    p99: at(0.99),
    max: sorted.length ? sorted[sorted.length - 1] : null,
    count: sorted.length,
  };
}

async function worker(opts) {
  const scenario = String(opts.scenario || '').toUpperCase();
  const queueName = QUEUES[scenario];
  if (!queueName || scenario === 'S1') throw new Error(`no worker runs ${opts.scenario}`);
  const n = Number(opts.n);
  const conc = Number(opts.conc);
  if (!(n >= 1) || !(conc >= 1)) throw new Error('--n and --conc must be at least 1');
  const timeoutMs = Number(opts['timeout-s'] ?? 600) * 1000;
  const lingerMs = Number(opts['linger-ms'] ?? 3000);
  const failFirst = scenario === 'S5';
  const expected = failFirst ? 2 : 1;
  const runs = new Uint32Array(n);
  const lateness = new Float64Array(n).fill(NaN);
  let completed = 0;
  let strays = 0;
  let lastDoneMs = 0;
  let doneAfter = null;
  let resolveDone;
  const done = new Promise((r) => (resolveDone = r));

  emit({ ready: true });
  const started = process.hrtime.bigint();
  const w = new Worker(
    queueName,
    async (job) => {
      const o = job.data;
      const id = o.order_id;
      if (!(id >= 0 && id < n)) {
        strays++;
        return;
      }
      const run = ++runs[id];
      if (failFirst && run === 1) throw new Error('the first attempt fails by design (S5)');
      const now = Date.now();
      lateness[id] = now - o.due_ms;
      if (now > lastDoneMs) lastDoneMs = now;
      completed++;
      if (completed === n) {
        doneAfter = Number(process.hrtime.bigint() - started) / 1e9;
        resolveDone();
      }
    },
    { connection: connection(), concurrency: conc },
  );
  w.on('error', (e) => process.stderr.write(`bullmq worker error: ${e}\n`));
  let timer;
  const timedOut = await Promise.race([
    done.then(() => false),
    new Promise((r) => (timer = setTimeout(() => r(true), timeoutMs))),
  ]);
  clearTimeout(timer);
  if (!timedOut) await new Promise((r) => setTimeout(r, lingerMs));
  // Bounded close: a worker that cannot close in 15 s is left to process.exit.
  await Promise.race([w.close(), new Promise((r) => setTimeout(r, 15000))]);
  const hist = {};
  let notExpected = 0;
  for (const r of runs) {
    hist[r] = (hist[r] || 0) + 1;
    if (r !== expected) notExpected++;
  }
  const late = Array.from(lateness).filter((x) => !Number.isNaN(x));
  late.sort((a, b) => a - b);
  const secs = doneAfter ?? Math.max(timeoutMs / 1000, 1e-9);
  emit({
    secs,
    completed,
    jobs_per_s: Math.min(completed, n) / secs,
    timed_out: timedOut,
    last_done_ms: lastDoneMs,
    attempts_hist: hist,
    jobs_not_exactly_expected: notExpected,
    expected_runs: expected,
    lateness_ms: percentiles(late),
    stray_runs: strays,
    scenario,
    conc,
    n,
    finished_ms: Date.now(),
    peer: 'bullmq',
  });
}

async function main() {
  const { command, opts } = parseArgs(process.argv.slice(2));
  if (command === 'enqueue') await enqueue(opts);
  else if (command === 'worker') await worker(opts);
  else throw new Error('usage: node bench.mjs enqueue|worker --scenario S… (see the header)');
}

main().then(
  () => process.exit(0),
  (e) => {
    process.stderr.write(`bullmq peer: ${e && e.stack ? e.stack : e}\n`);
    process.exit(1);
  },
);
