-- control: change and read one partition's control settings (pause, rate, concurrency,
-- the retention of finished jobs).
--
-- KEYS[1] control  dq:{topic#p}:control   HASH paused, rate_n, rate_ms, tat, conc, until, keep, events,
--                                          max_delay, x:<key> (ack.lua counts the nine settings:
--                                          keep the lists together)
-- KEYS[2] wake     dq:{topic#p}:wake
--
-- ARGV[1] paused:      '' unchanged, '1' pause, '0' resume
-- ARGV[2] rate:        '' unchanged, '-' remove, '<n>/<ms>' this partition's share (n jobs per ms)
-- ARGV[3] concurrency: '' unchanged, '-' remove, '<n>' this partition's share (n > 0)
-- ARGV[4] throttle:    '' none, '<ms>' lease nothing before now + ms (never shortens `until`)
-- ARGV[5] keep:        '' unchanged, '-' remove, '<succeeded ms>/<cancelled ms>/<expired
--                      ms>/<cap>' which finished jobs this partition keeps, how long, and
--                      at most how many (lib.lua `keep_policy`; a cap > 0, some ms > 0)
-- ARGV[6] events:      '' unchanged, '-' off, '<n>' record events, keeping the last n (> 0) of
--                      this partition (lib.lua `events_cap`)
-- ARGV[7] max_delay:   '' unchanged, '-' remove, '<ms>' (> 0) the furthest from now a due time
--                      may be (read by enqueue.lua and reschedule.lua)
--
-- Returns {paused 0|1, rate_n or '', rate_ms or '', conc or '', until ms or '', keep or '',
--          events or '', max_delay or ''}
-- A change wakes the partition's fetchers (a resume must not wait for their idle timer). A
-- new rate starts with a fresh budget.
-- Errors: 'ERR dq bad arguments: ...'; WRONGTYPE for a control key of another type (checked
-- before any write).

local control, wake_key = KEYS[1], KEYS[2]
local paused, rate, conc, throttle, keep = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5] or ''
local events = ARGV[6] or ''
local max_delay = ARGV[7] or ''
if max_delay ~= '' and max_delay ~= '-' then
  local d = tonumber(max_delay)
  if not d or d <= 0 or d ~= math.floor(d) then
    return redis.error_reply('ERR dq bad arguments: max_delay')
  end
end
if keep ~= '' and keep ~= '-' and not keep_policy(keep) then
  return redis.error_reply('ERR dq bad arguments: keep')
end
if events ~= '' and events ~= '-' and not events_cap(events) then
  return redis.error_reply('ERR dq bad arguments: events')
end
local throttle_ms = nil
if throttle and throttle ~= '' then
  throttle_ms = tonumber(throttle)
  if not throttle_ms or throttle_ms < 0 then
    return redis.error_reply('ERR dq bad arguments: throttle')
  end
end
if not (paused == '' or paused == '0' or paused == '1') then
  return redis.error_reply('ERR dq bad arguments: paused')
end
local rate_n, rate_ms
if rate ~= '' and rate ~= '-' then
  local n, ms = string.match(rate, '^(%d+)/(%d+)$')
  rate_n, rate_ms = tonumber(n), tonumber(ms)
  if not rate_n or not rate_ms or rate_n <= 0 or rate_ms <= 0 then
    return redis.error_reply('ERR dq bad arguments: rate')
  end
end
local cap
if conc ~= '' and conc ~= '-' then
  cap = tonumber(conc)
  if not cap or cap <= 0 or cap ~= math.floor(cap) then
    return redis.error_reply('ERR dq bad arguments: concurrency')
  end
end
local bad = check_types({control, 'hash'})
if bad then return bad end

local changed = false
if paused == '1' then
  redis.call('HSET', control, 'paused', '1')
  changed = true
elseif paused == '0' then
  redis.call('HDEL', control, 'paused')
  changed = true
end
if rate == '-' then
  redis.call('HDEL', control, 'rate_n', 'rate_ms', 'tat')
  changed = true
elseif rate_n then
  redis.call('HSET', control, 'rate_n', rate_n, 'rate_ms', rate_ms)
  redis.call('HDEL', control, 'tat')
  changed = true
end
if conc == '-' then
  redis.call('HDEL', control, 'conc')
  changed = true
elseif cap then
  redis.call('HSET', control, 'conc', cap)
  changed = true
end
if keep == '-' then
  redis.call('HDEL', control, 'keep')
elseif keep ~= '' then
  redis.call('HSET', control, 'keep', keep)
end
if events == '-' then
  redis.call('HDEL', control, 'events')
elseif events ~= '' then
  redis.call('HSET', control, 'events', events_cap(events))
end
if max_delay == '-' then
  redis.call('HDEL', control, 'max_delay')
elseif max_delay ~= '' then
  redis.call('HSET', control, 'max_delay', max_delay)
end
local now = now_ms()
if throttle_ms then
  local until_ms = tonumber(redis.call('HGET', control, 'until')) or 0
  if now + throttle_ms > until_ms then
    redis.call('HSET', control, 'until', string.format('%d', now + throttle_ms))
  end
end
if changed then wake(wake_key) end

local v = redis.call('HMGET', control, 'paused', 'rate_n', 'rate_ms', 'conc', 'until', 'keep',
  'events', 'max_delay')
local until_ms = tonumber(v[5])
if until_ms and until_ms <= now then
  -- a throttle time that has passed is of no use any more
  redis.call('HDEL', control, 'until')
  until_ms = nil
end
return {v[1] == '1' and 1 or 0, v[2] or '', v[3] or '', v[4] or '',
  until_ms and string.format('%d', until_ms) or '', v[6] or '', v[7] or '', v[8] or ''}
