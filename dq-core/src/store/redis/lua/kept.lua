-- kept: one finished job that the topic keeps, by key, read in one step. Writes nothing
-- (declared `no-writes`, so it runs at `maxmemory`).
--
-- KEYS[1] kept     dq:{topic#p}:kept      HASH key -> kept job (lib.lua `pack_kept`)
-- KEYS[2] kept_at  dq:{topic#p}:kept_at   ZSET key -> when its keeping ends (ms)
--
-- ARGV[1] key
--
-- Returns {kept value, when its keeping ends (a score, as text)}, each nil when absent (or
-- when its keeping has ended: it waits for a trim, and is no more to be seen).

local kept, kept_at = KEYS[1], KEYS[2]
local key = ARGV[1]
if not key then return redis.error_reply('ERR dq bad arguments: key') end
local v, ends = redis.call('HGET', kept, key), redis.call('ZSCORE', kept_at, key)
if not v or not ends or tonumber(ends) <= now_ms() then return {false, false} end
return {v, ends}
