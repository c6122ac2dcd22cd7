-- extend: renew the leases of running jobs. Many at once.
--
-- KEYS[1] active  dq:{topic#p}:active
-- KEYS[2] jobs    dq:{topic#p}:jobs
-- KEYS[3] control dq:{topic#p}:control   HASH; 'x:<key>': a cancel was requested
--
-- ARGV[1] lease length from now, ms (> 0)
-- ARGV[2..] pairs key, token
--
-- Returns a string with one character per pair:
--   '1' extended to now + ARGV[1]
--   '2' extended, and a cancel of the running job was requested: the worker stops it
--   '0' lost: the job is gone, not active, or leased under another token; nothing done
-- Errors: 'ERR dq bad arguments: ...'

local active, jobs, control = KEYS[1], KEYS[2], KEYS[3]
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
local codes = {}
for i = 2, #ARGV, 2 do
  local key, token = ARGV[i], tonumber(ARGV[i + 1])
  local rec = redis.call('HGET', jobs, key)
  local ok = '0'
  if is_record(rec) then
    local state, _, _, _, owner = unpack_record(rec)
    if state == STATE.active and owner == token then
      redis.call('ZADD', active, 'XX', deadline, key)
      ok = '1'
      if has_control and redis.call('HEXISTS', control, cancel_field(key)) == 1 then ok = '2' end
    end
  end
  codes[#codes + 1] = ok
end
return table.concat(codes)
