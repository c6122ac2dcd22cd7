#!lua name=ceil_lease
-- The lease floor (dq-bench all, section lease-floor): the least a script-held lease and its
-- ack can cost in Redis. It does only the commands of dq's lean lease (format 3) for a batch
-- of ready jobs, with none of dq's checks (receipts of retries, expired leases, controls,
-- due sets, stale hints, newer formats, wake-ups): what is left is the commands and the Lua
-- bridge around them.
--
-- ceil_fetch / ceil_fetch_keys
--   KEYS: ready, jobs, active, leases, stats, receipt   ARGV: batch, lease ms
--   LRANGE the batch, (ceil_fetch only: HMGET its records), HMGET leases, one token counter
--   bump, ZADD active, HSET leases, LTRIM, SET the receipt. Returns key, record, token of
--   each (ceil_fetch) or key, token (ceil_fetch_keys: the caller reads the records itself).
-- ceil_ack
--   KEYS: active, leases, jobs, stats   ARGV: key, token, ...
--   HMGET leases; for the keys still held under their token: ZREM active, HDEL leases,
--   HDEL jobs, one counter bump. Returns how many were acked.
local function fetch(keys, args, with_records)
  local ready, jobs, active, leases, stats, receipt =
    keys[1], keys[2], keys[3], keys[4], keys[5], keys[6]
  local n, lease = tonumber(args[1]), tonumber(args[2])
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  local got = redis.call('LRANGE', ready, 0, n - 1)
  if #got == 0 then return {} end
  local records
  if with_records then records = redis.call('HMGET', jobs, unpack(got)) end
  local held = redis.call('HMGET', leases, unpack(got))
  local base = redis.call('HINCRBY', stats, 'token', #got) - #got
  local deadline = string.format('%d', now + lease)
  local members, writes, receipt_out, out = {}, {}, {0}, {}
  local stride = with_records and 3 or 2
  for i, key in ipairs(got) do
    local token = base + i
    members[2 * i - 1] = deadline
    members[2 * i] = key
    if not held[i] then
      writes[#writes + 1] = key
      writes[#writes + 1] = token
    end
    receipt_out[2 * i] = key
    receipt_out[2 * i + 1] = token
    out[stride * i - stride + 1] = key
    if with_records then out[3 * i - 1] = records[i] end
    out[stride * i] = token
  end
  redis.call('ZADD', active, unpack(members))
  if #writes > 0 then redis.call('HSET', leases, unpack(writes)) end
  redis.call('LTRIM', ready, #got, -1)
  redis.call('SET', receipt, cmsgpack.pack(receipt_out), 'PX', 60000)
  return out
end

redis.register_function('ceil_fetch', function(keys, args) return fetch(keys, args, true) end)
redis.register_function('ceil_fetch_keys',
  function(keys, args) return fetch(keys, args, false) end)
redis.register_function('ceil_ack', function(keys, args)
  local active, leases, jobs, stats = keys[1], keys[2], keys[3], keys[4]
  local ks, tokens = {}, {}
  for i = 1, #args - 1, 2 do
    ks[#ks + 1] = args[i]
    tokens[#tokens + 1] = args[i + 1]
  end
  if #ks == 0 then return 0 end
  local held = redis.call('HMGET', leases, unpack(ks))
  local done = {}
  for i, key in ipairs(ks) do
    if held[i] == tokens[i] then done[#done + 1] = key end
  end
  if #done > 0 then
    redis.call('ZREM', active, unpack(done))
    redis.call('HDEL', leases, unpack(done))
    redis.call('HDEL', jobs, unpack(done))
    redis.call('HINCRBY', stats, 'done', #done)
  end
  return #done
end)
