-- workers: the namespace's live workers, one hash field per worker whose value is
-- '<expires_ms>|<beat_ms>|<record>' (the record is the worker's MessagePack description, opaque
-- here). Expiry is per field, by the server's clock; the hash itself expires when no worker
-- has beaten for longer than the longest heartbeat, so a namespace whose workers are all gone
-- keeps nothing. Namespace-wide: called on its own, never with a partition's keys (another
-- slot on a cluster).
--
-- KEYS[1] workers  dq:workers
--
-- ARGV[1] op: 'beat', 'list' or 'remove'
--   beat:   ARGV[2] worker id, ARGV[3] ttl ms (>= 1), ARGV[4] record
--   list:   no more arguments
--   remove: ARGV[2] worker id
--
-- Returns, for beat: the expiry (ms); for list: a flat array expires_ms, beat_ms, record, … of
--   the live workers (expired fields are deleted, at most 1000 per call); for remove: 1 if
--   the worker had a heartbeat, else 0.

local workers = KEYS[1]
local op = ARGV[1]
local now = now_ms()

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
  return expires
elseif op == 'list' then
  local out, stale = {}, {}
  local all = redis.call('HGETALL', workers)
  for i = 1, #all, 2 do
    local expires, beat, record = string.match(all[i + 1], '^(%d+)|(%d+)|(.*)$')
    if not expires or tonumber(expires) <= now then
      if #stale < 1000 then stale[#stale + 1] = all[i] end
    else
      out[#out + 1] = expires
      out[#out + 1] = beat
      out[#out + 1] = record
    end
  end
  if #stale > 0 then redis.call('HDEL', workers, unpack(stale)) end
  return out
elseif op == 'remove' then
  return redis.call('HDEL', workers, ARGV[2])
end
return redis.error_reply('ERR dq bad arguments: unknown op')
