-- ack: jobs succeeded; delete them. Many at once.
--
-- KEYS[1] active  dq:{topic#p}:active
-- KEYS[2] pool    dq:{topic#p}:pool
-- KEYS[3] hist    dq:{topic#p}:hist
-- KEYS[4] stats   dq:{topic#p}:stats
--
-- ARGV: pairs key, token (token: the delivery token from fetch, integer)
--
-- Returns a string with one character per pair:
--   'A' acked: the record is deleted
--   'G' gone: no such job (already acked, cancelled, purged); nothing done
--   'S' stale: the job exists but this token no longer owns it; nothing done
-- Errors: 'ERR dq bad arguments: ...'

local active, pool, hist, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if #ARGV == 0 or #ARGV % 2 ~= 0 then
  return redis.error_reply('ERR dq bad arguments: expected key, token pairs')
end
for i = 2, #ARGV, 2 do
  if not tonumber(ARGV[i]) then return redis.error_reply('ERR dq bad arguments: token') end
end

local codes = {}
local acked = 0
for i = 1, #ARGV, 2 do
  local key, token = ARGV[i], tonumber(ARGV[i + 1])
  local rec = redis.call('HGET', pool, key)
  if not rec then
    codes[#codes + 1] = 'G'
  else
    local state, _, _, _, owner = unpack_record(rec)
    if state ~= 'A' or owner ~= token then
      codes[#codes + 1] = 'S'
    else
      redis.call('HDEL', pool, key)
      redis.call('HDEL', hist, key)
      redis.call('ZREM', active, key)
      acked = acked + 1
      codes[#codes + 1] = 'A'
    end
  end
end
if acked > 0 then redis.call('HINCRBY', stats, 'succeeded', acked) end
return table.concat(codes)
