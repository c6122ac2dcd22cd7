-- release: hand running jobs back without charging the attempt (graceful shutdown).
-- Released jobs go to the FRONT of ready, in the order given: they were due before anything
-- queued behind them.
--
-- KEYS[1] active  dq:{topic#p}:active
-- KEYS[2] ready   dq:{topic#p}:ready
-- KEYS[3] jobs    dq:{topic#p}:jobs
-- KEYS[4] wake    dq:{topic#p}:wake
-- KEYS[5] hist    dq:{topic#p}:hist
-- KEYS[6] stats   dq:{topic#p}:stats
-- KEYS[7] control dq:{topic#p}:control   a job whose cancel was requested is deleted as
--                                         cancelled instead (it never runs again)
--
-- ARGV: pairs key, token
--
-- Returns a string with one character per pair: '1' released, '0' not owned (nothing done).
-- Errors: 'ERR dq bad arguments: ...'
--
-- Never fails after a write: jobs is read first and ZREM active is the first write. Checked:
-- ready, once, before the first job is released (its first touch is a write after that).

local active, ready, jobs, wake_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local hist, stats, control = KEYS[5], KEYS[6], KEYS[7]
if #ARGV == 0 or #ARGV % 2 ~= 0 then
  return redis.error_reply('ERR dq bad arguments: expected key, token pairs')
end
for i = 2, #ARGV, 2 do
  if not tonumber(ARGV[i]) then return redis.error_reply('ERR dq bad arguments: token') end
end

local has_control = redis.call('EXISTS', control) == 1
if has_control then
  local bad = check_types({control, 'hash', hist, 'hash', ready, 'list'})
  if bad then return bad end
end
local codes = {}
local released = 0
-- Backwards, so that after the LPUSHes the jobs stand at the front in the order given.
for i = #ARGV - 1, 1, -2 do
  local key, token = ARGV[i], tonumber(ARGV[i + 1])
  local rec = redis.call('HGET', jobs, key)
  local ok = '0'
  if is_record(rec) then
    local state, attempts, due, _, owner = unpack_record(rec)
    if state == STATE.active and owner == token and has_control
        and redis.call('HEXISTS', control, cancel_field(key)) == 1 then
      drop_cancelled(active, jobs, hist, stats, control, key)
      ok = '1'
    elseif state == STATE.active and owner == token then
      if released == 0 then
        local bad = check_types({ready, 'list'})
        if bad then return bad end
      end
      redis.call('ZREM', active, key)
      redis.call('HSET', jobs, key, with_header(rec, STATE.ready, attempts - 1, due, owner))
      redis.call('LPUSH', ready, key)
      released = released + 1
      ok = '1'
    end
  end
  codes[(i + 1) / 2] = ok
end
if released > 0 then wake(wake_key) end
return table.concat(codes)
