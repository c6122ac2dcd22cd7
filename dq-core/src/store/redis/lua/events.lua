-- events: a page of a partition's events after a given event number (reads only). Events
-- are numbered 1, 2, 3… per partition and written one stream entry per script call
-- (lib.lua `flush_events`), whose id is '<number of its first event>-0' and whose field `n`
-- says how many it holds: the entry holding event <after> + 1 is the last one whose id is at
-- most '<after + 1>-0'.
--
-- KEYS[1] events  dq:{topic#p}:events   STREAM of event entries (lib.lua `flush_events`)
--
-- ARGV[1] after: the number of the last event the reader has (0: none)
-- ARGV[2] most events wanted (> 0): entries are returned until they hold that many events
--         after <after> (the last one may take the page beyond it)
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
-- The first event's number and the count of an entry.
local function span(entry)
  local first = tonumber(string.match(entry[1], '^(%d+)')) or 0
  local n, f = 1, entry[2]
  for i = 1, #f - 1, 2 do
    if f[i] == 'n' then n = tonumber(f[i + 1]) or 1 end
  end
  return first, n
end
local from = '-'
local prev = redis.call('XREVRANGE', events, string.format('%d-0', after + 1), '-', 'COUNT', 1)
if prev[1] then
  local first, n = span(prev[1])
  if first + n - 1 > after then from = prev[1][1] else from = '(' .. prev[1][1] end
end
-- (at most `limit` entries: each holds at least one event)
local entries = redis.call('XRANGE', events, from, '+', 'COUNT', limit)
local page, held = {}, 0
for _, entry in ipairs(entries) do
  page[#page + 1] = entry
  local first, n = span(entry)
  held = held + math.max(0, first + n - 1 - math.max(after, first - 1))
  if held >= limit then break end
end
return page
