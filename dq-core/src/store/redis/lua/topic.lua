-- topic: records a topic's metadata in the namespace's registry unless it has some already
-- (the first caller wins: a script runs atomically), and returns the record stored.
-- Namespace-wide: called on its own, never with a partition's keys (another slot on a cluster).
-- The record's format is layout::TopicRecord's (version 1); keep the two in step.
--
-- KEYS[1] topics  dq:topics
--
-- ARGV[1] topic name (validated by the client)
-- ARGV[2] partitions: the caller's partition count, 1 to 65535
--
-- Returns the topic's record as stored: 'v=1;partitions=<P>;created_ms=<ms>' (the caller's,
--   if it was first; the first caller's otherwise). Writes only when there was none; an
--   existing record is returned as it is, read-only, so at maxmemory the check still works.

local topics = KEYS[1]
local topic, partitions = ARGV[1], tonumber(ARGV[2])

if not topic or topic == '' or not partitions or partitions ~= math.floor(partitions)
    or partitions < 1 or partitions > 65535 then
  return redis.error_reply('ERR dq bad arguments: topic and a partition count 1-65535')
end

local stored = redis.call('HGET', topics, topic)
if stored then return stored end
local record = string.format('v=1;partitions=%d;created_ms=%d', partitions, now_ms())
redis.call('HSET', topics, topic, record)
return record
