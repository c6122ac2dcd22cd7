-- workers: the namespace's live workers, one hash field per worker whose value is
-- '<expires_ms>|<beat_ms>|<record>' (the record is the worker's MessagePack description, opaque
-- here). Expiry is per field, by the server's clock; the hash itself expires when no worker
-- has beaten for longer than the longest heartbeat, so a namespace whose workers are all gone
-- keeps nothing. Namespace-wide: called on its own, never with a partition's keys (another
-- slot on a cluster).
--
-- One more field, '\0schedules' (never a worker id: ids have no control characters), holds
-- the schedules generation: a counter every process that stores or removes a schedule bumps
-- ('touch'), and every beat returns, so that a worker's scheduler learns of a change made
-- elsewhere from its next heartbeat, at no extra command. It goes with the hash; a generation
-- that starts again from nothing only costs a scheduler pass.
--
-- KEYS[1] workers  dq:workers
--
-- ARGV[1] op: 'beat', 'list', 'remove' or 'touch'
--   beat:   ARGV[2] worker id, ARGV[3] ttl ms (>= 1), ARGV[4] record
--   list:   no more arguments
--   remove: ARGV[2] worker id
--   touch:  ARGV[2] ttl ms (>= 1): how long a hash that no worker keeps lives
--
-- Returns, for beat: {expiry ms, schedules generation} (the generation 0 when never bumped);
--   for list: a flat array expires_ms, beat_ms, record, … of the live workers (expired fields
--   are deleted, at most 1000 per call); for remove: 1 if the worker had a heartbeat, else 0;
--   for touch: the new generation.

local workers = KEYS[1]
local op = ARGV[1]
local now = now_ms()
local GENERATION = '\0schedules'

if op == 'beat' then
  local id, ttl, record = ARGV[2], tonumber(ARGV[3]), ARGV[4]
  if not id or id == '' or not ttl or ttl < 1 or not record then
    return redis.error_reply('ERR dq bad arguments: worker id, ttl >= 1 and a record')
  end
  local expires = now + math.floor(ttl)
  redis.call('HSET', workers, id, string.format('%d|%d|', expires, now) .. record)
  -- Never shorten the hash's life below another worker's heartbeat.
  if redis.call('PTTL', workers) < ttl then
    redis.call('PEXPIRE', workers, math.floor(ttl))
  end
  return {expires, tonumber(redis.call('HGET', workers, GENERATION) or '0')}
elseif op == 'list' then
  local out, stale = {}, {}
  local all = redis.call('HGETALL', workers)
  for i = 1, #all, 2 do
    if all[i] ~= GENERATION then
      local expires, beat, record = string.match(all[i + 1], '^(%d+)|(%d+)|(.*)$')
      if not expires or tonumber(expires) <= now then
        if #stale < 1000 then stale[#stale + 1] = all[i] end
      else
        out[#out + 1] = expires
        out[#out + 1] = beat
        out[#out + 1] = record
      end
    end
  end
  if #stale > 0 then redis.call('HDEL', workers, unpack(stale)) end
  return out
elseif op == 'remove' then
  return redis.call('HDEL', workers, ARGV[2])
elseif op == 'touch' then
  local ttl = tonumber(ARGV[2])
  if not ttl or ttl < 1 then
    return redis.error_reply('ERR dq bad arguments: ttl >= 1')
  end
  local generation = redis.call('HINCRBY', workers, GENERATION, 1)
  -- A hash no worker has beaten into yet must not stay for ever.
  if redis.call('PTTL', workers) < 0 then
    redis.call('PEXPIRE', workers, math.floor(ttl))
  end
  return generation
end
return redis.error_reply('ERR dq bad arguments: unknown op')
