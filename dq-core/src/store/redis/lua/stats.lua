-- stats: depths and counters of one partition, read in one consistent step. Writes nothing.
--
-- KEYS[1] scheduled  dq:{topic#p}:scheduled
-- KEYS[2] retry      dq:{topic#p}:retry
-- KEYS[3] ready      dq:{topic#p}:ready
-- KEYS[4] active     dq:{topic#p}:active
-- KEYS[5] dead       dq:{topic#p}:dead
-- KEYS[6] jobs       dq:{topic#p}:jobs
-- KEYS[7] stats      dq:{topic#p}:stats
-- KEYS[8] control    dq:{topic#p}:control
-- KEYS[9] kept_at    dq:{topic#p}:kept_at   ZSET: the finished jobs kept
--
-- ARGV none
--
-- Returns {scheduled, ready, active, retry, dead, oldest_overdue_ms, overdue, counters...}
--   ready is derived: every record not in another state is ready (hints may be stale)
--   oldest_overdue_ms: how long the most overdue waiting job has been due (0 if none)
--   overdue: jobs in scheduled or retry whose due time has come (not yet moved to ready)
--   counters: flat field, value pairs of the stats hash, then 'paused', 0|1 and
--     'throttled', 0|1: due work is held back now by the throttle time, a spent rate budget
--     or a full concurrency share, then 'kept', the finished jobs kept

local scheduled, retry, ready, active = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local dead, jobs, stats, control, kept_at = KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]

local now = now_ms()
local n_sched, n_retry = redis.call('ZCARD', scheduled), redis.call('ZCARD', retry)
local n_active, n_dead = redis.call('ZCARD', active), redis.call('ZCARD', dead)
local n_ready = redis.call('HLEN', jobs) - n_sched - n_retry - n_active - n_dead
if n_ready < 0 then n_ready = 0 end

local oldest = 0
local overdue = 0
for _, z in ipairs({scheduled, retry}) do
  overdue = overdue + redis.call('ZCOUNT', z, '-inf', string.format('(%d', now + 1))
  local head = redis.call('ZRANGE', z, 0, 0, 'WITHSCORES')
  if head[2] then
    local late = now - math.floor(tonumber(head[2]))
    if late > oldest then oldest = late end
  end
end
-- the first live hint in ready is the longest-waiting ready job
local hints = redis.call('LRANGE', ready, 0, 15)
for _, key in ipairs(hints) do
  local rec = redis.call('HGET', jobs, key)
  if is_record(rec) and state_of(rec) == STATE.ready then
    local _, _, due = unpack_record(rec)
    if now - due > oldest then oldest = now - due end
    break
  end
end

local reply = {n_sched, n_ready, n_active, n_retry, n_dead, oldest, overdue}
for _, v in ipairs(redis.call('HGETALL', stats)) do reply[#reply + 1] = v end
local ctl = redis.call('HMGET', control, 'paused', 'until', 'conc', 'rate_n', 'rate_ms', 'tat')
local throttled = 0
if n_ready + overdue > 0 then
  local until_ms, conc = tonumber(ctl[2]), tonumber(ctl[3])
  local rate_n, rate_ms, tat = tonumber(ctl[4]), tonumber(ctl[5]), tonumber(ctl[6])
  if until_ms and until_ms > now then throttled = 1 end
  if conc and n_active >= conc then throttled = 1 end
  if rate_n and rate_ms and tat then
    local t = rate_ms / rate_n
    if tat - math.max(0, 50 - t) > now then throttled = 1 end
  end
end
reply[#reply + 1] = 'paused'
reply[#reply + 1] = ctl[1] == '1' and 1 or 0
reply[#reply + 1] = 'throttled'
reply[#reply + 1] = throttled
reply[#reply + 1] = 'kept'
reply[#reply + 1] = redis.call('ZCARD', kept_at)
return reply
