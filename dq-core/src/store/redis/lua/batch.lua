-- batch: one batch's record (ARCHITECTURE.md §16).
--
-- KEYS[1] batch  dq:{batch:<id>}   HASH, the batch's record, in a slot of its own:
--   v     the record's format ('1')
--   then  'n' nothing | 'c' enqueue a callback | 'r' release a flow's parent
--   tt    the callback's (or parent's) topic; tk the parent's key; tp the callback's payload
--   pol   failure policy: 'w' wait for all | 'f' fail fast | 'i' ignore failures
--   ret   retention once done, ms
--   cr    opened (ms); cl closed (ms, absent while open); dn done (ms, absent before);
--   rs    last reservation (ms)
--   c:<s> the count of members in state s (batch.rs `MemberState::code`)
--   m:<topic>#<key> -> the member's state letter: p reserved, a enqueued, or its end
--     (s succeeded, d dead, c cancelled, e expired, x discarded, r refused, n never enqueued)
--
-- ARGV[1] the operation (`open` and `reserve`, which grow it, are batch_grow.lua's: refused
-- at maxmemory; these run there, so the ends of members are never held behind a full server):
--   apply member, state, ...: moves members forward only (p -> a -> an end; the first end
--         stays), counting each move once; a member not there is added. Unknown batch: nil.
--   close: closes the batch (no more reservations)
--   done: marks it done, and keeps it for `ret` ms from now
--   get: reads only
--   members cursor, count: HSCAN of the members (reads only)
--
-- Returns, but for `members`: the record as {open?, v, then, tt, tk, tp, pol, ret, cr, cl,
-- dn, rs, then the counts in the order of lib.lua's BATCH.COUNTS}: open? is 1 when this call
-- created it (only batch_grow.lua's `open`), else 0; nil for an unknown batch (get, apply).
-- `members`: {cursor, m1, s1, ...} (the `m:` prefix removed).
-- Errors: 'ERR dq batch not found', 'ERR dq bad arguments: ...'.
-- Never fails after a write: the key's type is checked first (HMGET refuses another type).

local batch = KEYS[1]
local op = ARGV[1]
-- how far each state is: a member moves only to a state further on
local RANK = {p = 0, a = 1, s = 2, d = 2, c = 2, e = 2, x = 2, r = 2, n = 2}
local function read(created) return BATCH.read(batch, created) end

if op == 'members' then
  local cursor, count = ARGV[2], tonumber(ARGV[3])
  if not tonumber(cursor) or not count or count < 1 then
    return redis.error_reply('ERR dq bad arguments: members cursor, count')
  end
  if redis.call('EXISTS', batch) == 0 then return {'0'} end
  local r = redis.call('HSCAN', batch, cursor, 'MATCH', 'm:*', 'COUNT', count)
  local out = {r[1]}
  for i = 1, #r[2], 2 do
    out[#out + 1] = string.sub(r[2][i], 3)
    out[#out + 1] = r[2][i + 1]
  end
  return out
end

local state = read(false)
if op == 'get' then return state end
if op == 'apply' then
  if not state then return nil end
  if (#ARGV - 1) % 2 ~= 0 then return redis.error_reply('ERR dq bad arguments: member, state pairs') end
  for i = 3, #ARGV, 2 do
    if not RANK[ARGV[i]] then return redis.error_reply('ERR dq bad arguments: member state') end
  end
  local fields = {}
  for i = 2, #ARGV, 2 do fields[#fields + 1] = 'm:' .. ARGV[i] end
  local olds = hmget(batch, fields) -- (lib.lua: in slices, any number of members)
  local now_of, delta, writes = {}, {}, {}
  for j, f in ipairs(fields) do
    local new = ARGV[2 * j + 1]
    local old = now_of[f]
    if old == nil then old = olds[j] end
    if not old or RANK[new] > RANK[old] then
      if old then delta[old] = (delta[old] or 0) - 1 end
      delta[new] = (delta[new] or 0) + 1
      now_of[f] = new
    end
  end
  for f, s in pairs(now_of) do
    writes[#writes + 1] = f
    writes[#writes + 1] = s
  end
  if #writes > 0 then call_many('HSET', batch, writes) end
  for s, d in pairs(delta) do
    if d ~= 0 then redis.call('HINCRBY', batch, 'c:' .. s, d) end
  end
  return read(false)
end
if not state then return redis.error_reply('ERR dq batch not found') end
if op == 'close' or op == 'done' then
  local field = op == 'close' and 'cl' or 'dn'
  local at = op == 'close' and 10 or 11
  if state[at] == '' then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('HSET', batch, field, now)
    if op == 'done' then
      if state[10] == '' then redis.call('HSET', batch, 'cl', now) end
      redis.call('PEXPIRE', batch, tonumber(state[8]))
    end
  end
  return read(false)
end
return redis.error_reply('ERR dq bad arguments: operation')
