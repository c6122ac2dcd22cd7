-- batch_grow: the calls that grow a batch's record (ARCHITECTURE.md §16): open it, reserve
-- members. Declared without `allow-oom`, so Redis refuses them at maxmemory before they run
-- (OOM, nothing written), as it refuses an enqueue; batch.lua, which only moves members
-- forward, closes and reads, runs there.
--
-- KEYS[1] batch  dq:{batch:<id>}   HASH, the batch's record (batch.lua's header lists its fields)
--
-- ARGV[1] the operation:
--   open  then, tt, tk, tp, pol, ret: opens the batch unless it exists (then nothing written)
--   reserve  member...: each member not there yet is written 'p'; stamps `rs` (a closed or
--         unknown batch: an error, nothing written)
--
-- Returns the record as batch.lua does ({open?, v, then, ...}; open? is 1 when this `open`
-- created it). `reserve` appends, one per member named, its state before this call: its
-- letter, or '' for a member that was not there (a member named twice: '' both times).
-- Errors: 'ERR dq batch not found', 'ERR dq batch closed', 'ERR dq bad arguments: ...'.
-- Never fails after a write: the key's type is checked first (HMGET refuses another type).

local batch = KEYS[1]
local op = ARGV[1]
local state = BATCH.read(batch, false)

if op == 'open' then
  if state then return state end
  local thenk, pol, ret = ARGV[2], ARGV[6], tonumber(ARGV[7])
  if (thenk ~= 'n' and thenk ~= 'c' and thenk ~= 'r') or (pol ~= 'w' and pol ~= 'f' and pol ~= 'i')
      or not ret or ret < 1 then
    return redis.error_reply('ERR dq bad arguments: batch settings')
  end
  local now = now_ms()
  redis.call('HSET', batch, 'v', '1', 'then', thenk, 'tt', ARGV[3], 'tk', ARGV[4], 'tp', ARGV[5],
    'pol', pol, 'ret', ret, 'cr', now, 'rs', now)
  return BATCH.read(batch, true)
end
if op == 'reserve' then
  if not state then return redis.error_reply('ERR dq batch not found') end
  if state[10] ~= '' then return redis.error_reply('ERR dq batch closed') end
  local fields = {}
  for i = 2, #ARGV do fields[#fields + 1] = 'm:' .. ARGV[i] end
  local olds = hmget(batch, fields) -- (lib.lua: in slices, any number of members)
  local before, writes, seen = {}, {}, {}
  for j, f in ipairs(fields) do
    before[j] = olds[j] or ''
    if not olds[j] and not seen[f] then
      seen[f] = true
      writes[#writes + 1] = f
      writes[#writes + 1] = 'p'
    end
  end
  if #writes > 0 then
    call_many('HSET', batch, writes)
    redis.call('HINCRBY', batch, 'c:p', #writes / 2)
  end
  redis.call('HSET', batch, 'rs', now_ms())
  local out = BATCH.read(batch, false)
  for _, b in ipairs(before) do out[#out + 1] = b end
  return out
end
return redis.error_reply('ERR dq bad arguments: operation')
