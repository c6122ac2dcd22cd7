-- events: a page of a partition's events after a given event number (reads only). Events
-- are numbered 1, 2, 3… per partition and written one stream entry per script call
-- (lib.lua `flush_events`), whose id is '<number of its first event>-0' and whose field `n`
-- says how many it holds: the entry holding event <after> + 1 is the last one whose id is at
-- most '<after + 1>-0'.
--
-- KEYS[1] events  dq:{topic#p}:events   STREAM of event entries (lib.lua `flush_events`)
--
-- ARGV[1] after: the number of the last event the reader has (0: none)
-- ARGV[2] most entries to return (> 0)
--
-- Returns the entries, oldest first, as XRANGE answers them ({id, {field, value, ...}}),
-- starting with the one holding event <after> + 1 (which may also hold earlier events: the
-- reader skips them); an empty array when there is nothing after, or no stream.
-- Errors: 'ERR dq bad arguments: ...'; WRONGTYPE for an events key of another type.

local events = KEYS[1]
local after, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
if not after or after < 0 or after ~= math.floor(after) or not limit or limit < 1 then
  return redis.error_reply('ERR dq bad arguments: events')
end
local bad = check_types({events, 'stream'})
if bad then return bad end
local from = '-'
local prev = redis.call('XREVRANGE', events, string.format('%d-0', after + 1), '-', 'COUNT', 1)
if prev[1] then
  local first = tonumber(string.match(prev[1][1], '^(%d+)')) or 0
  local n, f = 1, prev[1][2]
  for i = 1, #f - 1, 2 do
    if f[i] == 'n' then n = tonumber(f[i + 1]) or 1 end
  end
  if first + n - 1 > after then from = prev[1][1] else from = '(' .. prev[1][1] end
end
return redis.call('XRANGE', events, from, '+', 'COUNT', limit)
