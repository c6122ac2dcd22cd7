-- ack: jobs succeeded; delete them. Many at once.
--
-- KEYS[1] active  dq:{topic#p}:active
-- KEYS[2] jobs    dq:{topic#p}:jobs
-- KEYS[3] hist    dq:{topic#p}:hist
-- KEYS[4] stats   dq:{topic#p}:stats     'succeeded' counts every acked job, and
--                                         'succeeded_after_cancel_request' those of them whose
--                                         cancel was requested while they ran
-- KEYS[5] control dq:{topic#p}:control   cancel requests of the acked jobs are dropped; with a
--                                         concurrency cap, a freed slot wakes a fetcher
-- KEYS[6] wake    dq:{topic#p}:wake
--
-- ARGV: pairs key, token (token: the delivery token from fetch, integer)
--
-- Returns a string with one character per pair:
--   'A' acked: the record is deleted
--   'G' gone: no such job (already acked, cancelled, purged), or a key named twice in the
--       batch (acked once); nothing done
--   'S' stale: the job exists but this token no longer owns it; nothing done
-- Errors: 'ERR dq bad arguments: ...'
--
-- Never fails after a write, with no TYPE call: jobs, hist and control are read (HMGET, HLEN)
-- before the first write, ZREM active is that first write, and the counters cannot fail.

local active, jobs, hist, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local control, wake_key = KEYS[5], KEYS[6]
if #ARGV == 0 or #ARGV % 2 ~= 0 then
  return redis.error_reply('ERR dq bad arguments: expected key, token pairs')
end
for i = 2, #ARGV, 2 do
  if not tonumber(ARGV[i]) then return redis.error_reply('ERR dq bad arguments: token') end
end

-- One HMGET, then one variadic HDEL/ZREM for the whole batch.
local keys = {}
for i = 1, #ARGV, 2 do keys[#keys + 1] = ARGV[i] end
local recs = hmget(jobs, keys)
-- Reply codes (AckOutcome), not states.
local ACKED, STALE, GONE = 'A', 'S', 'G'
local codes, done, seen = {}, {}, {}
for i, key in ipairs(keys) do
  local rec = recs[i]
  if seen[key] or not rec then
    codes[i] = GONE -- gone (or named twice: acked once)
  elseif not is_record(rec) or state_of(rec) ~= STATE.active
      or token_of(rec) ~= tonumber(ARGV[2 * i]) then
    codes[i] = STALE
  else
    codes[i] = ACKED
    seen[key] = true
    done[#done + 1] = key
  end
end
if #done > 0 then
  -- the history hash exists only while some job of the partition has failed before
  local has_hist = redis.call('HLEN', hist) > 0
  -- a topic without controls pays one EXISTS per batch; HGET checks the type before writes
  local has_control = redis.call('EXISTS', control) == 1
  local capped = has_control and redis.call('HGET', control, 'conc')
  -- a job whose cancel was requested that succeeds anyway is counted as what happened
  local after_cancel = 0
  if has_control then
    local fields = {}
    for i, key in ipairs(done) do fields[i] = cancel_field(key) end
    for _, request in ipairs(hmget(control, fields)) do
      if request then after_cancel = after_cancel + 1 end
    end
    call_many('HDEL', control, fields)
  end
  if capped then wake(wake_key) end
  call_many('ZREM', active, done)
  call_many('HDEL', jobs, done)
  if has_hist then call_many('HDEL', hist, done) end
  count(stats, 'succeeded', #done)
  if after_cancel > 0 then count(stats, 'succeeded_after_cancel_request', after_cancel) end
end
return table.concat(codes)
