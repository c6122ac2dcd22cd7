-- schedules: the namespace's periodic schedules, one hash field per schedule whose value is
-- '<cursor_ms>|<definition>' (the cursor is the next tick to run, Unix ms, or
-- 18446744073709551615 for none; the definition is the schedule's MessagePack record, opaque
-- here and compared byte for byte). Namespace-wide: called on its own, never with a
-- partition's keys (another slot on a cluster). Cursors are compared as text, never as Lua
-- numbers (a double cannot hold every u64).
--
-- KEYS[1] schedules  dq:schedules
--
-- ARGV[1] op: 'put', 'remove', 'list' or 'advance'
--   put:     ARGV[2] name, ARGV[3] cursor (digits), ARGV[4] definition
--   remove:  ARGV[2] name
--   list:    no more arguments
--   advance: ARGV[2] name, ARGV[3] expected cursor, ARGV[4] new cursor (digits)
--
-- Returns, for put: 1 created, 2 replaced (another definition: cursor and definition are the
--   new ones), 0 unchanged (the same definition: the stored cursor is kept); for remove: 1 if
--   there was a schedule, else 0; for list: a flat array name, cursor, definition, … (a field
--   whose value does not parse is returned with cursor '' for the caller to report); for
--   advance: 1 if the cursor was the expected one and was moved, 0 if not (or no such
--   schedule).

local schedules = KEYS[1]
local op = ARGV[1]

if op == 'put' then
  local name, cursor, def = ARGV[2], ARGV[3], ARGV[4]
  if not name or name == '' or not cursor or not string.match(cursor, '^%d+$') or not def or def == '' then
    return redis.error_reply('ERR dq bad arguments: name, cursor digits and a definition')
  end
  local cur = redis.call('HGET', schedules, name)
  if cur then
    local _, old = string.match(cur, '^(%d+)|(.*)$')
    if old == def then return 0 end
  end
  redis.call('HSET', schedules, name, cursor .. '|' .. def)
  if cur then return 2 end
  return 1
elseif op == 'remove' then
  return redis.call('HDEL', schedules, ARGV[2])
elseif op == 'list' then
  local out = {}
  local all = redis.call('HGETALL', schedules)
  for i = 1, #all, 2 do
    local cursor, def = string.match(all[i + 1], '^(%d+)|(.*)$')
    out[#out + 1] = all[i]
    out[#out + 1] = cursor or ''
    out[#out + 1] = def or all[i + 1]
  end
  return out
elseif op == 'advance' then
  local name, from, to = ARGV[2], ARGV[3], ARGV[4]
  if not name or not from or not to or not string.match(to, '^%d+$') then
    return redis.error_reply('ERR dq bad arguments: name, expected cursor, new cursor digits')
  end
  local cur = redis.call('HGET', schedules, name)
  if not cur then return 0 end
  local cursor, def = string.match(cur, '^(%d+)|(.*)$')
  if cursor ~= from then return 0 end
  redis.call('HSET', schedules, name, to .. '|' .. def)
  return 1
end
return redis.error_reply('ERR dq bad arguments: unknown op')
