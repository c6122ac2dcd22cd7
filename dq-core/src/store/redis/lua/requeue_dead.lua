-- requeue_dead: move dead jobs back to ready with their attempts reset (history kept).
--
-- KEYS[1] dead   dq:{topic#p}:dead
-- KEYS[2] ready  dq:{topic#p}:ready
-- KEYS[3] jobs   dq:{topic#p}:jobs
-- KEYS[4] wake   dq:{topic#p}:wake
-- KEYS[5] stats  dq:{topic#p}:stats   HASH its pready_back counter (lib.lua `push_ready`)
-- KEYS[6] pready dq:{topic#p}:pready  ZSET the due queue of jobs whose priority is not normal
-- KEYS[7] gready dq:{topic#p}:gready  ZSET the due queue of grouped jobs (lib.lua `push_grouped`)
-- KEYS[8] groups dq:{topic#p}:groups  ZSET the groups' rotation
--
-- ARGV: job keys (at least one)
--
-- Returns a string with one character per key: '1' requeued, '0' not in the dead queue.
-- Errors: 'ERR dq newer format <f>' when a named job's record is of a newer format than this dq
-- reads (lib.lua `is_newer`): nothing written.
--
-- Never fails after a write: jobs is read first and ZREM dead is the first write. Checked:
-- ready, once, before the first job is moved (its first touch is a write after that).

local dead, ready, jobs, wake_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local stats, pready = KEYS[5], KEYS[6]
local q = due_queue(ready, pready, stats, KEYS[7], KEYS[8])
if #ARGV == 0 then return redis.error_reply('ERR dq bad arguments: no keys') end

local recs = hmget(jobs, ARGV)
for _, rec in ipairs(recs) do
  if is_newer(rec) then return newer_error(rec) end
end
local now = now_ms()
local codes = {}
local moved = 0
local checked = false
for i, key in ipairs(ARGV) do
  local ok = '0'
  local rec = recs[i]
  if is_record(rec) and state_of(rec) == STATE.dead then
    if not checked then
      local bad = check_types({ready, 'list', pready, 'zset', q.gready, 'zset', q.groups, 'zset'})
      if bad then return bad end
      checked = true
    end
    if redis.call('ZREM', dead, key) == 1 then
      local _, _, _, _, token = unpack_record(rec)
      -- (an operator's requeue runs the job: a passed expiry would drop it, so it goes)
      local ready_rec = with_header(rec, STATE.ready, 0, now, token, 0)
      redis.call('HSET', jobs, key, ready_rec)
      push_ready(q, key, ready_rec)
      moved = moved + 1
      ok = '1'
    end
  end
  codes[#codes + 1] = ok
end
if moved > 0 then wake(wake_key) end
return table.concat(codes)
