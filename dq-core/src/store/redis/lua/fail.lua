-- fail: an attempt failed; retry the job later, defer it, or bury it.
--
-- KEYS[1] scheduled  dq:{topic#p}:scheduled
-- KEYS[2] retry      dq:{topic#p}:retry
-- KEYS[3] ready      dq:{topic#p}:ready
-- KEYS[4] active     dq:{topic#p}:active
-- KEYS[5] dead       dq:{topic#p}:dead
-- KEYS[6] jobs       dq:{topic#p}:jobs
-- KEYS[7] hist       dq:{topic#p}:hist
-- KEYS[8] stats      dq:{topic#p}:stats
-- KEYS[9] wake       dq:{topic#p}:wake
-- KEYS[10] control   dq:{topic#p}:control   cancel requests, throttle time, concurrency cap
--
-- ARGV[1] key
-- ARGV[2] delivery token
-- ARGV[3] action: 'r' retry after ARGV[4] ms (the attempt counts)
--                 'd' defer: run again after ARGV[4] ms, the attempt is given back
--                 'b' bury: to the dead queue now
--                 'c' cancel: the job was cancelled while it ran; deleted, not retried
--                 't' throttle: defer by ARGV[4] ms, and lease nothing of this partition
--                     before then (control 'until'); counted in stats 'throttles'
--                 Whatever the action, a job whose cancel was requested is cancelled.
-- ARGV[4] delay, ms (ignored for 'b' and 'c')
-- ARGV[5] error text (kept in the job's history)
-- ARGV[6] dead-queue cap for this partition
-- ARGV[7] dead-queue retention, ms
--
-- Returns {code, at_ms, trimmed}
--   code  1 waiting for the next attempt at at_ms (retry, or scheduled when deferred)
--         2 buried (trimmed: dead jobs removed by cap or retention)
--         3 cancelled: deleted, counted as cancelled
--         0 gone: no such job (e.g. already acked); nothing done
--        -1 stale token: the job exists but this delivery no longer owns it; nothing done
-- Errors: 'ERR dq bad arguments: ...'
--
-- Never fails after a write: jobs, hist and (for a later time) the target set are read before
-- the first write, ZREM active, so a retry or deferral needs no TYPE call; counters and
-- wake-ups cannot fail. Checked: ready when the job is due at once, dead when burying (each
-- first touched by a write after that one).

local scheduled, retry, ready, active = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local dead, jobs, hist, stats, wake_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local control = KEYS[10]

local key, token, action = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local delay, err = tonumber(ARGV[4]), ARGV[5]
local dead_cap, retention = tonumber(ARGV[6]), tonumber(ARGV[7])
if not token or not delay or delay < 0 or not dead_cap or not retention or not err
    or (action ~= 'r' and action ~= 'd' and action ~= 'b' and action ~= 'c' and action ~= 't') then
  return redis.error_reply('ERR dq bad arguments: fail')
end

local rec = redis.call('HGET', jobs, key)
if not rec then return {0, 0, 0} end
-- not a record (damaged): this delivery cannot own it; fetch buries it
if not is_record(rec) then return {-1, 0, 0} end
local state, attempts, due, _, owner = unpack_record(rec)
if state ~= 'A' or owner ~= token then return {-1, 0, 0} end

local now = now_ms()
-- (reads) the control hash, if any: HMGET checks its type before any write
local capped = false
if redis.call('EXISTS', control) == 1 then
  local ctl = redis.call('HMGET', control, 'conc', cancel_field(key))
  capped = ctl[1] ~= false
  if ctl[2] then action = 'c' end
end
if action == 'c' then
  local bad = check_types({hist, 'hash'})
  if bad then return bad end
  drop_cancelled(active, jobs, hist, stats, control, key)
  if capped then wake(wake_key) end
  return {3, now, 0}
end
local entries = read_history(hist, key)
if action == 'b' then
  local bad = check_types({dead, 'zset'})
  if bad then return bad end
  redis.call('ZREM', active, key)
  add_history(hist, key, entries, attempts, now, 'B', err)
  bury(dead, jobs, stats, key, rec, now)
  if capped then wake(wake_key) end
  return {2, now, trim_dead(dead, jobs, hist, stats, now, dead_cap, retention, 100)}
end

local at = bound_due(now + delay, now)
local code, later, zset = 'F', 'F', retry
local throttle = action == 't'
if throttle then action = 'd' end
if action == 'd' then
  -- "not yet": the attempt is given back and the job waits like a scheduled one
  code, later, zset = 'd', 'S', scheduled
end
local score
if at > now then
  score = slot_score(zset, at)
else
  local bad = check_types({ready, 'list'})
  if bad then return bad end
end
redis.call('ZREM', active, key)
if throttle then
  -- the partner is rate-limiting us: the whole partition leases nothing before `at`
  -- (control is a hash or absent: checked above when it exists)
  local until_ms = tonumber(redis.call('HGET', control, 'until')) or 0
  if at > until_ms then redis.call('HSET', control, 'until', at) end
  count(stats, 'throttles', 1)
end
add_history(hist, key, entries, attempts, now, code, err)
if action == 'd' then
  attempts = attempts - 1
else
  count(stats, 'retried', 1)
end
redis.call('HSET', jobs, key, with_header(rec, waiting_state(at, now, later), attempts, at, owner))
if place(zset, ready, key, at, now, score) or capped then wake(wake_key) end
return {1, at, 0}
