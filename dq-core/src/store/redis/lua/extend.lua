-- extend: renew the leases of running jobs. Many at once.
--
-- KEYS[1] active  dq:{topic#p}:active
-- KEYS[2] jobs    dq:{topic#p}:jobs
-- KEYS[3] control dq:{topic#p}:control   HASH; 'x:<key>': a cancel was requested
-- KEYS[4] leases  dq:{topic#p}:leases    HASH key -> token: the leases of lean (format 3) records
--
-- ARGV[1] lease length from now, ms (> 0)
-- ARGV[2..] pairs key, token
--
-- Returns a string with one character per pair:
--   '1' extended to now + ARGV[1]
--   '2' extended, and a cancel of the running job was requested: the worker stops it
--   '0' lost: the job is gone, not active, or leased under another token; nothing done
-- Errors: 'ERR dq bad arguments: ...'

local active, jobs, control, leases = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local lease = tonumber(ARGV[1])
if not lease or lease <= 0 or #ARGV < 3 or (#ARGV - 1) % 2 ~= 0 then
  return redis.error_reply('ERR dq bad arguments: extend')
end
for i = 3, #ARGV, 2 do
  if not tonumber(ARGV[i]) then return redis.error_reply('ERR dq bad arguments: token') end
end

-- control is read only if it exists (a topic with no controls pays one EXISTS), and its
-- type is checked before the first write
local has_control = redis.call('EXISTS', control) == 1
if has_control then
  local bad = check_types({control, 'hash'})
  if bad then return bad end
end
local deadline = now_ms() + lease
-- One HMGET for the batch, one variadic ZADD XX for the leases still owned; a cancel request
-- is looked up only for those (one HMGET of the control hash, when it exists).
local keys, tokens = {}, {}
for i = 2, #ARGV, 2 do
  keys[#keys + 1] = ARGV[i]
  tokens[#tokens + 1] = tonumber(ARGV[i + 1])
end
local owner = owners(leases, keys, hmget(jobs, keys))
local codes, owned, members = {}, {}, {}
for i, key in ipairs(keys) do
  if owner[i] == tokens[i] then
    codes[i] = '1'
    owned[#owned + 1] = i
    members[#members + 1] = deadline
    members[#members + 1] = key
  else
    codes[i] = '0'
  end
end
for i = 1, #members, SLICE do
  redis.call('ZADD', active, 'XX', unpack(members, i, math.min(i + SLICE - 1, #members)))
end
if has_control and #owned > 0 then
  local fields = {}
  for j, i in ipairs(owned) do fields[j] = cancel_field(keys[i]) end
  local requested = hmget(control, fields)
  for j, i in ipairs(owned) do
    if requested[j] then codes[i] = '2' end
  end
end
return table.concat(codes)
