"""Drives dq's HTTP API from Python (requests) as a producer would, and checks every answer.

Run by dq-http's test `python_client_enqueues_cancels_and_reschedules` against a real server
with a Rust worker behind it; the same calls are the examples of docs/HTTP.md. Environment:
DQ_URL (base URL), DQ_TOKEN (read-write), DQ_READ_TOKEN (read-only), DQ_TOPIC, DQ_PREFIX (a
prefix for job keys). Prints one JSON line of what it did; exits non-zero on a wrong answer.
"""

import json
import os
import sys

import requests

URL = os.environ["DQ_URL"].rstrip("/")
TOPIC = os.environ["DQ_TOPIC"]
PREFIX = os.environ.get("DQ_PREFIX", "py")

api = requests.Session()  # keep-alive: one connection for every call
api.headers["Authorization"] = f"Bearer {os.environ['DQ_TOKEN']}"


def expect(response, status, code=None):
    """The response has `status` (and, for an error, the stable `code`); returns its JSON."""
    body = response.json() if response.content else None
    if response.status_code != status:
        sys.exit(f"{response.request.method} {response.url}: want {status}, got "
                 f"{response.status_code}: {response.text}")
    if code is not None and body["error"]["code"] != code:
        sys.exit(f"want error code {code}, got {body}")
    return body


def jobs_url(key=""):
    return f"{URL}/v1/topics/{TOPIC}/jobs" + (f"/{key}" if key else "")


# 1. Enqueue a job due now: the Rust worker runs it.
run = expect(api.post(jobs_url(), json={
    "key": f"{PREFIX}-run", "payload": {"order_id": 1, "note": "from python"},
}), 201)
assert run == {"key": f"{PREFIX}-run", "outcome": "created"}, run

# 2. Enqueue one an hour out, then cancel it: it never runs.
expect(api.post(jobs_url(), json={
    "key": f"{PREFIX}-cancel", "payload": {"order_id": 2, "note": "cancel me"}, "delay": "1h",
}), 201)
job = expect(api.get(jobs_url(f"{PREFIX}-cancel")), 200)
assert job["state"] == "scheduled", job
cancelled = expect(api.delete(jobs_url(f"{PREFIX}-cancel")), 200)
assert cancelled["outcome"] == "cancelled", cancelled
expect(api.get(jobs_url(f"{PREFIX}-cancel")), 404, "not_found")

# 3. Enqueue one an hour out, then reschedule it to now: the worker runs it.
expect(api.post(jobs_url(), json={
    "key": f"{PREFIX}-resched", "payload": {"order_id": 3, "note": "sooner"}, "delay": "1h",
}), 201)
moved = expect(api.post(jobs_url(f"{PREFIX}-resched") + "/reschedule", json={"delay": "0s"}),
               200)
assert moved["outcome"] == "rescheduled", moved

# 4. A retried request (same Idempotency-Key): the same answer, one job.
headers = {"Idempotency-Key": f"{PREFIX}-retry-1"}
body = {"payload": {"order_id": 4, "note": "once"}, "delay": "1h"}
first = expect(api.post(jobs_url(), json=body, headers=headers), 201)
again = expect(api.post(jobs_url(), json=body, headers=headers), 201)
assert first == again, (first, again)
assert first["outcome"] == "created", first

# 5. A bad token, and a read-only token that asks for a change: refused, nothing written.
expect(requests.post(jobs_url(), json={"key": f"{PREFIX}-badtoken", "payload": {}},
                     headers={"Authorization": "Bearer not-a-token"}), 401, "unauthorized")
expect(requests.post(jobs_url(), json={"key": f"{PREFIX}-badtoken", "payload": {}}),
       401, "unauthorized")
read_only = {"Authorization": f"Bearer {os.environ['DQ_READ_TOKEN']}"}
expect(requests.post(jobs_url(), json={"key": f"{PREFIX}-badtoken", "payload": {}},
                     headers=read_only), 403, "forbidden")
expect(requests.get(jobs_url(f"{PREFIX}-badtoken"), headers=read_only), 404, "not_found")

# 6. A body that is not JSON.
expect(api.post(jobs_url(), data="{not json", headers={"Content-Type": "application/json"}),
       400, "invalid_json")

# 7. A payload that does not fit the topic's type (checked against the shape the worker
#    published, where the server does not know the type): refused, naming the field; not
#    enqueued.
mismatch = expect(api.post(jobs_url(), json={
    "key": f"{PREFIX}-mismatch", "payload": {"order_id": "seven", "note": "n"},
}), 422, "payload_mismatch")
assert "order_id" in mismatch["error"]["message"], mismatch
missing = expect(api.post(jobs_url(), json={
    "key": f"{PREFIX}-mismatch", "payload": {"order_id": 7},
}), 422, "payload_mismatch")
assert "note" in missing["error"]["message"], missing
expect(api.get(jobs_url(f"{PREFIX}-mismatch")), 404, "not_found")

print(json.dumps({
    "ran": [f"{PREFIX}-run", f"{PREFIX}-resched"],
    "cancelled": f"{PREFIX}-cancel",
    "retried": first["key"],
    "refused": [f"{PREFIX}-badtoken", f"{PREFIX}-mismatch"],
}))
