-- reschedule: give a waiting job a new due time, by key.
-- A job in scheduled, retry or ready moves to scheduled (or to ready if the new time has
-- come); its attempts and history are kept.
--
-- KEYS[1] scheduled  dq:{topic#p}:scheduled
-- KEYS[2] retry      dq:{topic#p}:retry
-- KEYS[3] ready      dq:{topic#p}:ready
-- KEYS[4] jobs       dq:{topic#p}:jobs
-- KEYS[5] wake       dq:{topic#p}:wake
-- KEYS[6] leases     dq:{topic#p}:leases    HASH key -> token: the leases of lean (format 3) records
-- KEYS[7] control    dq:{topic#p}:control   HASH: only its `max_delay` field is read
-- KEYS[8] stats      dq:{topic#p}:stats     HASH its pready_back counter (lib.lua `push_ready`)
-- KEYS[9] pready     dq:{topic#p}:pready    ZSET the due queue of jobs whose priority is not normal
-- KEYS[10] gready    dq:{topic#p}:gready    ZSET the due queue of grouped jobs (lib.lua `push_grouped`)
-- KEYS[11] groups    dq:{topic#p}:groups    ZSET the groups' rotation
--
-- ARGV[1] key
-- ARGV[2] mode: 'a' at ARGV[3] Unix ms | 'd' ARGV[3] ms after now | 's' shift the current
--         due time by ARGV[3] ms (negative: earlier)
-- ARGV[3] integer ms
--
-- Returns {code, due_ms}
--   code 'K' rescheduled; due_ms is the new due time (never before now)
--        'A' running, 'D' dead: not touched;  'N' no such job
--        (a value that is not a record counts as dead: fetch buries it)
-- Errors: 'ERR dq bad arguments: ...'; 'ERR dq delay too long: job 1 <ms> <max ms>' when the
-- new due time is more than control's `max_delay` from now; 'ERR dq newer format <f>' when the job's record is of a
-- newer format than this dq reads (lib.lua `is_newer`): nothing written.
--
-- Never fails after a write: jobs, and scheduled for a later time, are read first; the first
-- write is the one to the set that held the job (or jobs). Checked: ready, when the job
-- becomes due at once (its first touch is a write after those).

local scheduled, retry, ready, jobs, wake_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local leases, control = KEYS[6], KEYS[7]
local stats, pready = KEYS[8], KEYS[9]
local q = due_queue(ready, pready, stats, KEYS[10], KEYS[11])
local key, mode, value = ARGV[1], ARGV[2], tonumber(ARGV[3])
if not key or key == '' or not value or (mode ~= 'a' and mode ~= 'd' and mode ~= 's') then
  return redis.error_reply('ERR dq bad arguments: reschedule')
end

local rec = redis.call('HGET', jobs, key)
if not rec then return {'N', 0} end
if is_newer(rec) then return newer_error(rec) end
if not is_record(rec) then return {STATE.dead, 0} end
local _, attempts, due, _, token = unpack_record(rec)
local state = job_state(rec, lease_of(leases, key, rec))
if state == STATE.active or state == STATE.dead then return {state, 0} end

local now = now_ms()
local at
if mode == 'a' then at = value elseif mode == 'd' then at = now + value else at = due + value end
local max_delay = redis.pcall('HGET', control, 'max_delay')
if type(max_delay) == 'table' and max_delay.err then
  return redis.error_reply('WRONGTYPE dq: ' .. control .. ' holds a '
    .. redis.call('TYPE', control).ok .. ', not a hash; nothing written')
end
max_delay = tonumber(max_delay)
if max_delay and at - now > max_delay then
  return redis.error_reply(string.format('ERR dq delay too long: job 1 %d %d', at - now,
    max_delay))
end
at = bound_due(at, now)

local new_state = waiting_state(at, now, STATE.scheduled)
local score
if new_state ~= STATE.ready then
  score = slot_score(scheduled, at)
elseif state ~= STATE.ready then
  local bad = check_types({ready, 'list', pready, 'zset', q.gready, 'zset', q.groups, 'zset'})
  if bad then return bad end
end
unlink(state, scheduled, retry, nil, key)
local new_rec = with_header(rec, new_state, attempts, at, token)
redis.call('HSET', jobs, key, new_rec)
if new_state == STATE.ready and state == STATE.ready then
  -- already has a live hint in ready: keep its place in line
  return {'K', at}
end
if place(scheduled, q, key, at, now, score, new_rec) then wake(wake_key) end
return {'K', at}
