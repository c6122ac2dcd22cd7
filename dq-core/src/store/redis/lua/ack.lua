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
-- KEYS[7] leases  dq:{topic#p}:leases    HASH key -> token: the leases of lean (format 3) records
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
-- A lean job's lease is read from `leases` (one HMGET of small values for the batch); only
-- the keys it does not hold (jobs of format 1 or 2, gone or stale ones) have their records
-- read, so acking lean jobs reads no record.
--
-- Never fails after a write: leases, hist and control are read (HMGET, HLEN) before the first
-- write; jobs too, unless every key was found in leases, and then TYPE checks it; ZREM active
-- is the first write, and the counters cannot fail.

local active, jobs, hist, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local control, wake_key, leases = KEYS[5], KEYS[6], KEYS[7]
if #ARGV == 0 or #ARGV % 2 ~= 0 then
  return redis.error_reply('ERR dq bad arguments: expected key, token pairs')
end
local keys, tokens = {}, {}
for i = 1, #ARGV / 2 do
  local token = tonumber(ARGV[2 * i])
  if not token then return redis.error_reply('ERR dq bad arguments: token') end
  keys[i], tokens[i] = ARGV[2 * i - 1], token
end

-- One HMGET of leases (and of records for the keys it lacks), then one variadic HDEL/ZREM
-- for the whole batch.
local held = hmget(leases, keys)
-- Reply codes (AckOutcome), not states.
local ACKED, STALE, GONE = 'A', 'S', 'G'
local codes, done, seen = {}, {}, {}
local n_done, n_lean = 0, 0
local rest = {} -- indexes of keys without a lease in `leases`
for i, key in ipairs(keys) do
  local lease = held[i]
  if not lease then
    rest[#rest + 1] = i
  elseif seen[key] then
    codes[i] = GONE -- named twice: acked once
  elseif tonumber(lease) == tokens[i] then
    codes[i] = ACKED
    seen[key] = true
    n_done = n_done + 1
    done[n_done] = key
    n_lean = n_lean + 1
  else
    codes[i] = STALE -- leased again since, under another token
  end
end
local jobs_read = #rest > 0
if jobs_read then
  local rest_keys = {}
  for j, i in ipairs(rest) do rest_keys[j] = keys[i] end
  local recs = hmget(jobs, rest_keys)
  for j, i in ipairs(rest) do
    local key, rec = keys[i], recs[j]
    if seen[key] or not rec then
      codes[i] = GONE -- gone (or named twice: acked once)
    elseif leased_by(rec, tokens[i]) then
      codes[i] = ACKED
      seen[key] = true
      n_done = n_done + 1
      done[n_done] = key
    else
      codes[i] = STALE -- a format-1/2 job under another token, or a lean one not running
    end
  end
end
if #done > 0 then
  if not jobs_read then
    local bad = check_types({jobs, 'hash'})
    if bad then return bad end
  end
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
  if n_lean > 0 then call_many('HDEL', leases, done) end
  if has_hist then call_many('HDEL', hist, done) end
  count(stats, 'succeeded', #done)
  if after_cancel > 0 then count(stats, 'succeeded_after_cancel_request', after_cancel) end
end
return table.concat(codes)
