-- enqueue: store one or many new jobs in one partition.
--
-- KEYS[1] scheduled  dq:{topic#p}:scheduled  ZSET key -> due score
-- KEYS[2] retry      dq:{topic#p}:retry      ZSET key -> next attempt score
-- KEYS[3] ready      dq:{topic#p}:ready      LIST of keys (hints)
-- KEYS[4] dead       dq:{topic#p}:dead       ZSET key -> died ms
-- KEYS[5] jobs       dq:{topic#p}:jobs       HASH key -> record
-- KEYS[6] hist       dq:{topic#p}:hist       HASH key -> attempt history
-- KEYS[7] stats      dq:{topic#p}:stats      HASH counters
-- KEYS[8] wake       dq:{topic#p}:wake       LIST wake-up tokens
-- KEYS[9] calls      dq:{topic#p}:calls      ZSET receipts: applied call id -> when (ms)
--
-- ARGV[1]            n, the number of jobs
-- ARGV[2]            call id: the same for every try of one client call
-- ARGV[3]            '0' first try, '1' a retry after an ambiguous error
-- then per job i (5 arguments each, starting at ARGV[4 + 5*(i-1)]):
--   key              job key
--   mode             'n' due now | 'd' delay (value = ms from Redis TIME) | 'a' at (value = Unix ms)
--   value            integer ms (ignored for 'n')
--   replace          '1' replace an existing non-running job, '0' keep it
--   payload          bytes
--
-- Every argument is checked before the first write; a bad one writes nothing.
--
-- Receipts: a call that created or replaced a job leaves its id in `calls`, scored with the
-- time. A retry whose id is found there was applied by an earlier try whose reply was lost:
-- it writes nothing and reports what is there now, so a job that has run since is not
-- created again. Receipts are kept at least RECEIPT_MS (clients retry for less): about one
-- call in ten removes up to TRIM older ones, and the set expires 2 * RECEIPT_MS after the
-- last call that wrote to it. Lookups and writes are O(log n); no call does unbounded work.
--
-- What the applied try did per job: a job it created or replaced carries the try's time as
-- its `created` ms, the receipt's score. A call that did not create every one of its jobs
-- also stores its outcomes, one character per job, as the member 'o' .. id .. ':' ..
-- outcomes with the same score (found again among the few members of that score); a call
-- that created all its jobs, the common case, stores nothing more. At one score, digits
-- sort before 'o', so a trim by rank removes a receipt before its outcomes: a receipt never
-- outlives them. A retry reports '+' / '~' again for a job the earlier try created or
-- replaced that is still there (same `created` ms and payload, in any state).
--
-- Returns an array with one string per job:
--   '+'  created (by this try, or by an earlier try of this call: the job is still there)
--   '~'  replaced (the old job removed; attempts and history start again); also on a retry,
--        as '+'
--   'S' | 'R' | 'A' | 'F' | 'D'  a job with this key exists in that state; nothing written
--   ('A' is also the answer with replace: a running job is never replaced)
--   'E'  (retries only) an earlier try of this call was applied, and the job is gone since
--        (it ran, or was cancelled or purged); nothing written
-- Errors: 'ERR dq bad arguments: ...' when the arguments are malformed.
--
-- Never fails after a write: the call reads jobs and scheduled, then decides every job, then
-- writes, `calls` first. Checked before that: ready when a job is due at once (its first
-- touch is a write after the receipt); retry, dead and hist when a job is replaced (rare).
-- Counters and wake-ups cannot fail.

local scheduled, retry, ready, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local jobs, hist, stats, wake_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local RECEIPT_MS = 30000
local TRIM = 64

local n, call, is_retry = tonumber(ARGV[1]), ARGV[2], ARGV[3]
if not n or n < 1 or #ARGV ~= 3 + 5 * n then
  return redis.error_reply('ERR dq bad arguments: job count does not match')
end
if call == '' or (is_retry ~= '0' and is_retry ~= '1') then
  return redis.error_reply('ERR dq bad arguments: call')
end
for i = 0, n - 1 do
  local base = 4 + 5 * i
  local mode, value, replace = ARGV[base + 1], ARGV[base + 2], ARGV[base + 3]
  if ARGV[base] == '' or (mode ~= 'n' and mode ~= 'd' and mode ~= 'a')
      or not tonumber(value) or (replace ~= '0' and replace ~= '1') then
    return redis.error_reply('ERR dq bad arguments: job ' .. (i + 1))
  end
end

local calls = KEYS[9]
local now = now_ms()
local keys = {}
for i = 0, n - 1 do keys[i + 1] = ARGV[4 + 5 * i] end
local olds = hmget(jobs, keys)
local applied = is_retry == '1' and redis.call('ZSCORE', calls, call)
if applied then
  -- An earlier try of this call was applied at `applied` ms: report, write nothing.
  applied = tonumber(applied)
  -- The try's outcomes, if it stored them: among the members of its score (the calls of one
  -- millisecond), the one that starts with 'o' .. id .. ':'.
  local outcomes
  local mark = 'o' .. call .. ':'
  for _, m in ipairs(redis.call('ZRANGE', calls, applied, applied, 'BYSCORE')) do
    if string.sub(m, 1, #mark) == mark then outcomes = string.sub(m, #mark + 1) end
  end
  local results = {}
  for i = 0, n - 1 do
    local old = olds[i + 1]
    local then_ = outcomes and string.sub(outcomes, i + 1, i + 1) or '+'
    if not old then
      results[i + 1] = 'E'
    elseif not is_record(old) then
      results[i + 1] = 'D' -- a damaged value is no job of this call's; nothing written
    else
      -- Still the job that try stored: created at its time, with this call's payload (a job
      -- stored in the same ms by another call would have to carry the same payload too).
      local state, _, _, created = unpack_record(old)
      local payload = ARGV[4 + 5 * i + 4]
      if (then_ == '+' or then_ == '~') and created == applied
          and #old == HEADER_LEN + #payload and string.sub(old, HEADER_LEN + 1) == payload then
        results[i + 1] = then_
      else
        results[i + 1] = state
      end
    end
  end
  return results
end

-- The earliest scheduled job before this call: a fetcher's timer is set for it, so a new job
-- due earlier must wake one (checked once per call, not per job).
local head = redis.call('ZRANGE', scheduled, 0, 0, 'WITHSCORES')
local head_due = head[2] and math.floor(tonumber(head[2]))

-- Decide every job first (reads only): `now_state` is a key's state after the jobs before
-- it in this call, so a key named twice behaves as in two calls.
local results, records, hints, moves = {}, {}, {}, {}
local now_state = {}
local replaced = false
for i = 0, n - 1 do
  local base = 4 + 5 * i
  local key, mode, value, replace, payload =
    ARGV[base], ARGV[base + 1], tonumber(ARGV[base + 2]), ARGV[base + 3], ARGV[base + 4]
  local outcome = '+'
  local state = now_state[key] or (olds[i + 1] and string.sub(olds[i + 1], 1, 1))
  if state then
    if replace == '1' and state ~= 'A' then
      outcome = '~'
      replaced = true
    else
      outcome = state
    end
  end
  if outcome == '+' or outcome == '~' then
    local due = now
    if mode == 'd' then due = now + value elseif mode == 'a' then due = value end
    due = bound_due(due, now)
    local new_state = waiting_state(due, now, 'S')
    records[#records + 1] = key
    records[#records + 1] = pack_record(new_state, 0, due, now, 0, payload)
    if new_state == 'R' then hints[#hints + 1] = key end
    moves[#moves + 1] = {key, outcome == '~' and state, due}
    now_state[key] = new_state
  end
  results[i + 1] = outcome
end
if #moves == 0 then return results end

local checks = {}
if #hints > 0 then checks = {ready, 'list'} end
if replaced then
  for _, t in ipairs({retry, 'zset', dead, 'zset', hist, 'hash'}) do checks[#checks + 1] = t end
end
local bad = check_types(checks)
if bad then return bad end

-- Writes: the receipt first (and the outcomes, when not every job was created).
redis.call('ZADD', calls, now, call)
if #moves < n or replaced then
  redis.call('ZADD', calls, now, 'o' .. call .. ':' .. table.concat(results))
end
redis.call('PEXPIRE', calls, 2 * RECEIPT_MS)
-- About one call in ten (the id is random; its last digit decides) removes up to TRIM
-- receipts past their life.
if string.sub(call, -1) == '0' then
  local expired = redis.call('ZCOUNT', calls, '-inf', '(' .. (now - RECEIPT_MS))
  if expired > 0 then
    redis.call('ZREMRANGEBYRANK', calls, 0, math.min(expired, TRIM) - 1)
  end
end
-- In call order, so that a key named twice is unlinked after its first placing.
local earliest_new
for _, m in ipairs(moves) do
  local key, old_state, due = m[1], m[2], m[3]
  if old_state then
    unlink(old_state, scheduled, retry, dead, key)
    redis.call('HDEL', hist, key)
  end
  if due > now then
    redis.call('ZADD', scheduled, slot_score(scheduled, due), key)
    if not earliest_new or due < earliest_new then earliest_new = due end
  end
end
call_many('HSET', jobs, records)
if #hints > 0 then call_many('RPUSH', ready, hints) end
count(stats, 'enqueued', #moves)
if #hints > 0 or (earliest_new and (not head_due or earliest_new < head_due)) then
  wake(wake_key)
end
return results
