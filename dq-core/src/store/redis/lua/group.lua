-- group: change and read one partition's group settings (dq-core/src/group.rs; lib.lua's
-- groups section says what each key holds).
--
-- KEYS[1] gctl     dq:{topic#p}:gctl      HASH '*' default limits, 'l:<group>' a group's own,
--                                          't:<group>' its GCRA time, 'h:<group>' its hold end
-- KEYS[2] groups   dq:{topic#p}:groups    ZSET the groups' rotation
-- KEYS[3] gwait    dq:{topic#p}:gwait     ZSET the groups waiting: a group whose limits change
--                                          gets its turn back; a held one waits here
-- KEYS[4] gactive  dq:{topic#p}:gactive   ZSET the running grouped jobs (counted)
-- KEYS[5] gready   dq:{topic#p}:gready    ZSET the due grouped jobs (counted)
-- KEYS[6] wake     dq:{topic#p}:wake
--
-- ARGV[1] group: '' the default limits of every group, else a group name (1 to 64 bytes, no
--         control character)
-- ARGV[2] limits: '' unchanged, '-' remove, '<conc>/<n>/<ms>/<weight>' this partition's share
--         (conc: '' none or > 0; n and ms: both '' or both > 0; weight 1..1000)
-- ARGV[3] hold: '' none, '<ms>' (> 0) start none of the group's jobs before now + ms (never
--         shortens a hold in place; only with a group)
--
-- Returns {own limits or '', default limits or '', hold end ms or '', running, waiting}: for
-- a group, its own limits, its hold if still to come, its running and due jobs; for none,
-- '' and '' and the partition's running and due grouped jobs.
-- A change wakes the partition's fetchers. A group's new limits give it its turn back at
-- once, and a new rate starts with a fresh budget; new default limits reach a group waiting
-- at its cap when a job of its ends, or within dq's recheck (group.rs CAP_RECHECK).
-- Errors: 'ERR dq bad arguments: ...'; WRONGTYPE for a key of another type (checked before
-- any write).

local gctl, groups, gwait, gactive, gready, wake_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local group, limits, hold = ARGV[1] or '', ARGV[2] or '', ARGV[3] or ''
if #group > 64 or string.find(group, '[%z\1-\31\127]') then
  return redis.error_reply('ERR dq bad arguments: group')
end
if limits ~= '' and limits ~= '-' and not parse_group_limits(limits) then
  return redis.error_reply('ERR dq bad arguments: group limits')
end
local hold_ms = nil
if hold ~= '' then
  hold_ms = tonumber(hold)
  if group == '' or not hold_ms or hold_ms <= 0 or hold_ms ~= math.floor(hold_ms) then
    return redis.error_reply('ERR dq bad arguments: group hold')
  end
end
local bad = check_types({gctl, 'hash', groups, 'zset', gwait, 'zset', gactive, 'zset',
  gready, 'zset'})
if bad then return bad end

local field = group == '' and '*' or 'l:' .. group
local changed = false
if limits == '-' then
  redis.call('HDEL', gctl, field)
  changed = true
elseif limits ~= '' then
  redis.call('HSET', gctl, field, limits)
  changed = true
end
local now = now_ms()
if group ~= '' and limits ~= '' then
  redis.call('HDEL', gctl, 't:' .. group) -- a fresh budget
  if redis.call('ZREM', gwait, group) == 1 then
    redis.call('ZADD', groups, 'NX', 0, group) -- its turn back, first
  end
end
if hold_ms then
  local until_ms = now + hold_ms
  local old = tonumber(redis.call('HGET', gctl, 'h:' .. group)) or 0
  if until_ms > old then
    redis.call('HSET', gctl, 'h:' .. group, until_ms)
    redis.call('ZREM', groups, group)
    redis.call('ZADD', gwait, until_ms, group)
  end
  changed = true
end
if changed then wake(wake_key) end

local own, default = '', redis.call('HGET', gctl, '*') or ''
local until_ms, running, waiting = '', 0, 0
if group == '' then
  running, waiting = redis.call('ZCARD', gactive), redis.call('ZCARD', gready)
else
  own = redis.call('HGET', gctl, 'l:' .. group) or ''
  local h = tonumber(redis.call('HGET', gctl, 'h:' .. group))
  if h and h > now then until_ms = string.format('%d', h) end
  local lo, hi = group_range(group)
  running = redis.call('ZLEXCOUNT', gactive, lo, hi)
  waiting = redis.call('ZLEXCOUNT', gready, lo, hi)
end
return {own, default, until_ms, running, waiting}
