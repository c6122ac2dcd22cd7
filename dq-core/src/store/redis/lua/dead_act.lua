-- dead_act: requeue or delete dead jobs, each only if it is still dead with the time of death
-- the caller listed. A sweep by filter acts through this: a job that was requeued and died
-- again since it was listed (its last error and its age are no longer the ones the filter saw)
-- is left alone.
--
-- KEYS[1] dead   dq:{topic#p}:dead
-- KEYS[2] ready  dq:{topic#p}:ready
-- KEYS[3] jobs   dq:{topic#p}:jobs
-- KEYS[4] hist   dq:{topic#p}:hist
-- KEYS[5] wake   dq:{topic#p}:wake
-- KEYS[6] stats  dq:{topic#p}:stats   HASH its pready_back counter (lib.lua `push_ready`)
-- KEYS[7] pready dq:{topic#p}:pready  ZSET the due queue of jobs whose priority is not normal
-- KEYS[8] gready dq:{topic#p}:gready  ZSET the due queue of grouped jobs (lib.lua `push_grouped`)
-- KEYS[9] groups dq:{topic#p}:groups  ZSET the groups' rotation
--
-- ARGV[1] action: 'R' requeue (attempts reset, history kept, to the back of ready, as
--         requeue_dead) or 'P' purge (record and history deleted, as purge_dead)
-- ARGV[2..] pairs: job key, its time of death in ms as listed; 1 to 1000 pairs
--
-- Returns a string with one character per pair: '1' done, '0' not dead with that time of
-- death (gone, requeued, died again, or named twice).
-- Errors: 'ERR dq newer format <f>' when a named job's record is of a newer format than this dq
-- reads (lib.lua `is_newer`): nothing written.
--
-- Never fails after a write: the arguments, the dead set and every record are read first;
-- ZREM dead is the first write. Checked: ready (requeue) or hist (purge), once, before it.

local dead, ready, jobs, hist, wake_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local stats, pready = KEYS[6], KEYS[7]
local q = due_queue(ready, pready, stats, KEYS[8], KEYS[9])
-- The action codes of ARGV[1], not states.
local REQUEUE, PURGE = 'R', 'P'
local action = ARGV[1]
local n = (#ARGV - 1) / 2
if (action ~= REQUEUE and action ~= PURGE) or n < 1 or n > 1000 or n ~= math.floor(n) then
  return redis.error_reply('ERR dq bad arguments: action, pairs')
end

-- Reads only: which pairs still stand. Records are not kept (payloads may be large): the
-- second pass reads each one again.
local take, seen, any = {}, {}, false
for i = 1, n do
  local key, died = ARGV[2 * i], tonumber(ARGV[2 * i + 1])
  if not died then return redis.error_reply('ERR dq bad arguments: time of death') end
  take[i] = false
  if not seen[key] then
    local score = redis.call('ZSCORE', dead, key)
    if score and tonumber(score) == died then
      local rec = redis.call('HGET', jobs, key)
      if is_newer(rec) then return newer_error(rec) end
      if is_record(rec) and state_of(rec) == STATE.dead then
        take[i], seen[key], any = true, true, true
      end
    end
  end
end
if not any then return string.rep('0', n) end
local bad
if action == REQUEUE then bad = check_types({ready, 'list', pready, 'zset', q.gready, 'zset',
  q.groups, 'zset'}) else bad = check_types({hist, 'hash'}) end
if bad then return bad end

local now = now_ms()
local codes = {}
for i = 1, n do
  codes[i] = '0'
  if take[i] then
    local key = ARGV[2 * i]
    redis.call('ZREM', dead, key)
    if action == REQUEUE then
      local rec = redis.call('HGET', jobs, key)
      local _, _, _, _, token = unpack_record(rec)
      -- (an operator's requeue runs the job: a passed expiry would drop it, so it goes)
      local ready_rec = with_header(rec, STATE.ready, 0, now, token, 0)
      redis.call('HSET', jobs, key, ready_rec)
      push_ready(q, key, ready_rec)
    else
      redis.call('HDEL', jobs, key)
      redis.call('HDEL', hist, key)
    end
    codes[i] = '1'
  end
end
if action == REQUEUE then wake(wake_key) end
return table.concat(codes)
