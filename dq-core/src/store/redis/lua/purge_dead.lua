-- purge_dead: delete dead jobs: the named ones, or the oldest ARGV[1].
--
-- KEYS[1] dead  dq:{topic#p}:dead
-- KEYS[2] jobs  dq:{topic#p}:jobs
-- KEYS[3] hist  dq:{topic#p}:hist
--
-- ARGV[1] limit: most jobs deleted by this call (> 0)
-- ARGV[2..] job keys; none means "the oldest ARGV[1] dead jobs"
--
-- Returns the number of jobs deleted. Only dead jobs are ever deleted.
-- Errors: 'ERR dq newer format <f>' when a job it would delete has a record of a newer format
-- than this dq reads (lib.lua `is_newer`): nothing deleted.
--
-- Never fails after a write: dead is read first and ZREM dead is the first write. Checked:
-- jobs and hist, whose first touch is a write after that.

local dead, jobs, hist = KEYS[1], KEYS[2], KEYS[3]
local limit = tonumber(ARGV[1])
if not limit or limit <= 0 then return redis.error_reply('ERR dq bad arguments: limit') end

local keys = {}
if #ARGV > 1 then
  for i = 2, #ARGV do
    if #keys < limit and redis.call('ZSCORE', dead, ARGV[i]) then keys[#keys + 1] = ARGV[i] end
  end
else
  keys = redis.call('ZRANGE', dead, 0, limit - 1)
end
if #keys == 0 then return 0 end
for _, rec in ipairs(hmget(jobs, keys)) do
  if is_newer(rec) then return newer_error(rec) end
end
local bad = check_types({jobs, 'hash', hist, 'hash'})
if bad then return bad end
local deleted = 0
for _, key in ipairs(keys) do
  -- a key named twice is deleted (and counted) once
  if redis.call('ZREM', dead, key) == 1 then
    redis.call('HDEL', jobs, key)
    redis.call('HDEL', hist, key)
    deleted = deleted + 1
  end
end
return deleted
