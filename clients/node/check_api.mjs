// Drives dq's HTTP API from Node (built-in fetch, no dependencies) as a producer would, and
// checks every answer.
//
// Run by dq-http's test `node_client_enqueues_cancels_and_reschedules` against a real server
// with a Rust worker behind it; the same calls are the examples of docs/HTTP.md. Environment:
// DQ_URL, DQ_TOKEN (read-write), DQ_READ_TOKEN (read-only), DQ_TOPIC, DQ_PREFIX. Prints one
// JSON line of what it did; exits non-zero on a wrong answer.

const URL = process.env.DQ_URL.replace(/\/$/, "");
const TOPIC = process.env.DQ_TOPIC;
const PREFIX = process.env.DQ_PREFIX ?? "node";
const auth = { Authorization: `Bearer ${process.env.DQ_TOKEN}` };

function fail(message) {
  console.error(message);
  process.exit(1);
}

// Sends a request (JSON body unless `raw`), checks its status (and, for an error, the stable
// code), returns its JSON.
async function call(method, path, { body, raw, headers = auth, status, code } = {}) {
  const response = await fetch(`${URL}${path}`, {
    method,
    headers: { "Content-Type": "application/json", ...headers },
    body: raw ?? (body === undefined ? undefined : JSON.stringify(body)),
  });
  const text = await response.text();
  const json = text ? JSON.parse(text) : null;
  if (response.status !== status) fail(`${method} ${path}: want ${status}, got ${response.status}: ${text}`);
  if (code !== undefined && json.error.code !== code) fail(`want error code ${code}, got ${text}`);
  return json;
}

const jobs = `/v1/topics/${TOPIC}/jobs`;
const assert = (ok, what) => ok || fail(`failed: ${what}`);

// 1. Enqueue a job due now: the Rust worker runs it.
const run = await call("POST", jobs, {
  body: { key: `${PREFIX}-run`, payload: { order_id: 1, note: "from node" } }, status: 201,
});
assert(run.key === `${PREFIX}-run` && run.outcome === "created", JSON.stringify(run));

// 2. Enqueue one an hour out, then cancel it: it never runs.
await call("POST", jobs, {
  body: { key: `${PREFIX}-cancel`, payload: { order_id: 2, note: "cancel me" }, delay: "1h" },
  status: 201,
});
const job = await call("GET", `${jobs}/${PREFIX}-cancel`, { status: 200 });
assert(job.state === "scheduled", JSON.stringify(job));
const cancelled = await call("DELETE", `${jobs}/${PREFIX}-cancel`, { status: 200 });
assert(cancelled.outcome === "cancelled", JSON.stringify(cancelled));
await call("GET", `${jobs}/${PREFIX}-cancel`, { status: 404, code: "not_found" });

// 3. Enqueue one an hour out, then reschedule it to now: the worker runs it.
await call("POST", jobs, {
  body: { key: `${PREFIX}-resched`, payload: { order_id: 3, note: "sooner" }, delay: "1h" },
  status: 201,
});
const moved = await call("POST", `${jobs}/${PREFIX}-resched/reschedule`, {
  body: { delay: "0s" }, status: 200,
});
assert(moved.outcome === "rescheduled", JSON.stringify(moved));

// 4. A retried request (same Idempotency-Key): the same answer, one job.
const retry = { ...auth, "Idempotency-Key": `${PREFIX}-retry-1` };
const once = { payload: { order_id: 4, note: "once" }, delay: "1h" };
const first = await call("POST", jobs, { body: once, headers: retry, status: 201 });
const again = await call("POST", jobs, { body: once, headers: retry, status: 201 });
assert(JSON.stringify(first) === JSON.stringify(again), `${JSON.stringify(first)} vs ${JSON.stringify(again)}`);
assert(first.outcome === "created", JSON.stringify(first));

// 5. A bad token, and a read-only token that asks for a change: refused, nothing written.
const refused = { key: `${PREFIX}-badtoken`, payload: {} };
await call("POST", jobs, { body: refused, headers: { Authorization: "Bearer not-a-token" }, status: 401, code: "unauthorized" });
await call("POST", jobs, { body: refused, headers: {}, status: 401, code: "unauthorized" });
const readOnly = { Authorization: `Bearer ${process.env.DQ_READ_TOKEN}` };
await call("POST", jobs, { body: refused, headers: readOnly, status: 403, code: "forbidden" });
await call("GET", `${jobs}/${PREFIX}-badtoken`, { headers: readOnly, status: 404, code: "not_found" });

// 6. A body that is not JSON.
await call("POST", jobs, { raw: "{not json", status: 400, code: "invalid_json" });

// 7. A payload that does not fit the topic's type (checked against the shape the worker
//    published, where the server does not know the type): refused, naming the field; not
//    enqueued.
const mismatch = await call("POST", jobs, {
  body: { key: `${PREFIX}-mismatch`, payload: { order_id: "seven", note: "n" } }, status: 422, code: "payload_mismatch",
});
assert(mismatch.error.message.includes("order_id"), JSON.stringify(mismatch));
const missing = await call("POST", jobs, {
  body: { key: `${PREFIX}-mismatch`, payload: { order_id: 7 } }, status: 422, code: "payload_mismatch",
});
assert(missing.error.message.includes("note"), JSON.stringify(missing));
await call("GET", `${jobs}/${PREFIX}-mismatch`, { status: 404, code: "not_found" });

console.log(JSON.stringify({
  ran: [`${PREFIX}-run`, `${PREFIX}-resched`],
  cancelled: `${PREFIX}-cancel`,
  retried: first.key,
  refused: [`${PREFIX}-badtoken`, `${PREFIX}-mismatch`],
}));
