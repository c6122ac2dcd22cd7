-- cancel: remove a job that has not started, by key; ask a running one to stop.
--
-- KEYS[1] scheduled  dq:{topic#p}:scheduled
-- KEYS[2] retry      dq:{topic#p}:retry
-- KEYS[3] jobs       dq:{topic#p}:jobs
-- KEYS[4] hist       dq:{topic#p}:hist
-- KEYS[5] stats      dq:{topic#p}:stats
-- KEYS[6] control    dq:{topic#p}:control   HASH; 'x:<key>' -> token: cancel requests
-- KEYS[7] leases     dq:{topic#p}:leases    HASH key -> token: the leases of lean (format 3) records
-- KEYS[8] kept       dq:{topic#p}:kept      HASH key -> kept job: a cancelled job is kept there
-- KEYS[9] kept_at    dq:{topic#p}:kept_at   ZSET    when the topic keeps cancelled jobs
-- KEYS[10] events    dq:{topic#p}:events    STREAM: a `cancelled` event for a waiting job
--                                           cancelled, when the control hash has `events`
--                                           (a running one's comes when it stops)
-- KEYS[11] uniq      dq:{topic#p}:uniq      HASH key -> unique_for ms: a cancelled job's
-- KEYS[12] uniq_at   dq:{topic#p}:uniq_at   ZSET moves to uniq_at (lib.lua `end_unique`)
-- KEYS[13] outbox    dq:{topic#p}:outbox    STREAM: a cancelled waiting member of a batch's
--                                           end is noted (lib.lua `note_end`)
--
-- ARGV[1] key
--
-- Returns the job's state before the call, one character:
--   'S' | 'R' | 'F'  it was waiting and is now cancelled (a ready hint is left to go stale)
--   'C'              running: a cancel request is recorded (control 'x:<key>' -> token); the
--                    worker's next extend reports it, and fail, release and lease recovery
--                    delete the job as cancelled
--   'D'              dead: not touched (also a value that is not a record: fetch buries it)
--   'N'              no such job
-- Cancelling twice answers 'N' the second time (a running job: 'C' again, the same request).
-- Errors: 'ERR dq newer format <f>' when the job's record is of a newer format than this dq
-- reads (lib.lua `is_newer`): nothing written.
--
-- Never fails after a write: jobs, leases (for a lean record), hist and control are read
-- (HGET) first, and kept and kept_at type-checked when the topic keeps cancelled jobs;
-- the first write is the one to scheduled or retry (or jobs, for a ready job).

local scheduled, retry, jobs, hist, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local control, leases, kept, kept_at, events = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local uniq, uniq_at, outbox = KEYS[11], KEYS[12], KEYS[13]
local key = ARGV[1]
if not key or key == '' then return redis.error_reply('ERR dq bad arguments: key') end

local rec = redis.call('HGET', jobs, key)
if not rec then return 'N' end
if is_newer(rec) then return newer_error(rec) end
if not is_record(rec) then return STATE.dead end
local lease = lease_of(leases, key, rec)
local state = job_state(rec, lease)
if state == STATE.active then
  -- the only write: HSET raises, writing nothing, on a control key of another type
  redis.call('HSET', control, cancel_field(key), lease)
  return 'C'
end
if state == STATE.dead then return state end
local h = redis.call('HGET', hist, key)
local ctl = redis.call('HMGET', control, 'keep', 'events')
local policy = keep_policy(ctl[1])
if keeps(policy, KEPT.cancelled) then
  local bad = check_types({kept, 'hash', kept_at, 'zset'})
  if bad then return bad end
end
local member = batch_of(rec)
if member then
  local bad = check_types({outbox, 'stream'})
  if bad then return bad end
end
unlink(state, scheduled, retry, nil, key)
local now = (keeps(policy, KEPT.cancelled) or ctl[2]) and now_ms()
local _, attempts = unpack_record(rec)
if keeps(policy, KEPT.cancelled) then
  keep_jobs(kept, kept_at, policy, KEPT.cancelled, now,
    {{key, pack_kept(KEPT.cancelled, now, 0, attempts, nil, nil, h or nil, nil, rec)}})
  trim_kept(kept, kept_at, stats, policy, now, 17)
end
redis.call('HDEL', jobs, key)
if h then redis.call('HDEL', hist, key) end
count(stats, 'cancelled', 1)
if member then BATCH.note(outbox, rec, key, BATCH.OUTCOME.cancelled) end
end_unique(uniq, uniq_at, now or nil, {key})
if now then
  local ev = events_of(events, ctl[2], stats, now)
  emit(ev, EVENT.cancelled, key, attempts)
  flush_events(ev)
end
return state
