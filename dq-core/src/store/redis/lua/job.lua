-- job: one job's record, history and lease or death time, read in one step. Writes nothing
-- (declared `no-writes`, so it runs at `maxmemory`, where a MULTI of the same reads is refused).
--
-- KEYS[1] active  dq:{topic#p}:active
-- KEYS[2] dead    dq:{topic#p}:dead
-- KEYS[3] jobs    dq:{topic#p}:jobs
-- KEYS[4] hist    dq:{topic#p}:hist
-- KEYS[5] leases  dq:{topic#p}:leases    HASH key -> token: the leases of lean (format 3) records
-- KEYS[6] progress dq:{topic#p}:progress HASH key -> a running job's progress and log lines
--
-- ARGV[1] key
--
-- Returns {record, history, lease deadline, died, lease token, progress}, each nil when absent (record
-- nil: no such job); the two times are sorted-set scores, as text; the lease token is a lean
-- record's (its job is running under it), nil for a format-1/2 record (its own says it).

local active, dead, jobs, hist, leases, progress = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local key = ARGV[1]
if not key then return redis.error_reply('ERR dq bad arguments: key') end
return {
  redis.call('HGET', jobs, key),
  redis.call('HGET', hist, key),
  redis.call('ZSCORE', active, key),
  redis.call('ZSCORE', dead, key),
  redis.call('HGET', leases, key),
  redis.call('HGET', progress, key),
}
