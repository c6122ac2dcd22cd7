-- formats: the namespace's record-format registry (ARCHITECTURE.md §4, docs/UPGRADING.md). One
-- hash, no TTL (the level must outlive every process):
--   'level'    the format new records are written in (absent = 1, the legacy format); it only
--              ever rises;
--   'hold'     optional: the level never rises past it (an operator keeping a rollback open);
--   'p:<id>'   one field per live process: '<expires_ms>|<beat_ms>|<reads>|<record>' (the
--              record is the process's MessagePack description, opaque here).
-- The level rises to the lowest format every live process reads (capped by the hold and by
-- what the caller saw in the live workers' registry); a process reading less than the level is
-- refused. Namespace-wide: called on its own, never with a partition's keys. All times are
-- Redis TIME.
--
-- KEYS[1] formats  dq:formats
--
-- ARGV[1] op: 'beat', 'list', 'remove', 'hold' or 'release'
--   beat:    ARGV[2] process id, ARGV[3] ttl ms (>= 1), ARGV[4] reads (1-31), ARGV[5] the lowest
--            format a live worker of the workers' registry reads as the caller listed it (1-31;
--            the caller's own reads when it did not list), ARGV[6] record
--   list:    no more arguments
--   remove:  ARGV[2] process id
--   hold:    ARGV[2] level (1-31)
--   release: no more arguments
--
-- Returns, for beat: {1, level, hold} (registered) or {0, level, hold} (refused: it reads less
--   than the level; its field is deleted), hold 0 when none; for list: {level, hold, then
--   expires_ms, beat_ms, reads, record, … of the live processes} (expired fields are deleted,
--   at most 1000 per call); for remove: 1 if the process had a field, else 0; for hold:
--   {1, level, hold} (set) or {0, level, hold} (refused: below the level, which never
--   lowers); for release: {level, 0}.

local formats = KEYS[1]
local op = ARGV[1]
local now = now_ms()
local LEGACY, HIGHEST = 1, 31

local function level_of()
  return tonumber(redis.call('HGET', formats, 'level') or '') or LEGACY
end

local function hold_of()
  return tonumber(redis.call('HGET', formats, 'hold') or '') or 0
end

local function format_arg(v)
  local n = tonumber(v)
  if not n or n ~= math.floor(n) or n < LEGACY or n > HIGHEST then return nil end
  return n
end

-- The live processes' fields as {reads, field, value}; deletes at most 1000 expired ones.
local function live()
  local out, stale = {}, {}
  local all = redis.call('HGETALL', formats)
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'p:' then
      local expires, reads = string.match(all[i + 1], '^(%d+)|%d+|(%d+)|')
      if not expires or tonumber(expires) <= now then
        if #stale < 1000 then stale[#stale + 1] = all[i] end
      else
        out[#out + 1] = {tonumber(reads), all[i], all[i + 1]}
      end
    end
  end
  if #stale > 0 then redis.call('HDEL', formats, unpack(stale)) end
  return out
end

if op == 'beat' then
  local id, ttl = ARGV[2], tonumber(ARGV[3])
  local reads, workers_read, record = format_arg(ARGV[4]), format_arg(ARGV[5]), ARGV[6]
  if not id or id == '' or not ttl or ttl < 1 or not reads or not workers_read or not record then
    return redis.error_reply(
      'ERR dq bad arguments: process id, ttl >= 1, reads and workers_read in 1-31, a record')
  end
  local field = 'p:' .. id
  local processes = live()
  local level, hold = level_of(), hold_of()
  if reads < level then
    redis.call('HDEL', formats, field)
    return {0, level, hold}
  end
  redis.call('HSET', formats, field,
    string.format('%d|%d|%d|', now + math.floor(ttl), now, reads) .. record)
  local target = math.min(reads, workers_read)
  for _, p in ipairs(processes) do
    if p[2] ~= field then target = math.min(target, p[1]) end
  end
  if hold > 0 then target = math.min(target, hold) end
  if target > level then
    level = target
    redis.call('HSET', formats, 'level', level)
  end
  return {1, level, hold}
elseif op == 'list' then
  local processes = live()
  local out = {level_of(), hold_of()}
  for _, p in ipairs(processes) do
    local expires, beat, reads, record = string.match(p[3], '^(%d+)|(%d+)|(%d+)|(.*)$')
    out[#out + 1] = expires
    out[#out + 1] = beat
    out[#out + 1] = reads
    out[#out + 1] = record
  end
  return out
elseif op == 'remove' then
  if not ARGV[2] or ARGV[2] == '' then
    return redis.error_reply('ERR dq bad arguments: process id')
  end
  return redis.call('HDEL', formats, 'p:' .. ARGV[2])
elseif op == 'hold' then
  local hold = format_arg(ARGV[2])
  if not hold then
    return redis.error_reply('ERR dq bad arguments: a hold level in 1-31')
  end
  local level = level_of()
  if hold < level then
    return {0, level, hold_of()}
  end
  redis.call('HSET', formats, 'hold', hold)
  return {1, level, hold}
elseif op == 'release' then
  redis.call('HDEL', formats, 'hold')
  return {level_of(), 0}
end
return redis.error_reply('ERR dq bad arguments: unknown op')
