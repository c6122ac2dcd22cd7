-- progress: a running job reports its progress or a log line, under its lease.
--
-- KEYS[1] jobs      dq:{topic#p}:jobs
-- KEYS[2] leases    dq:{topic#p}:leases    HASH key -> token: the leases of lean (format 3) records
-- KEYS[3] progress  dq:{topic#p}:progress  HASH key -> cmsgpack {v = value, l = {{ms, text}}, d = dropped}
--
-- ARGV[1] key
-- ARGV[2] token: the delivery token of the reporting lease
-- ARGV[3] kind: 'p' the progress value (replaces the last), 'l' a log line (appended)
-- ARGV[4] the value (MessagePack bytes, at most MAX_PROGRESS_LEN) or the line (cut like an
--         error; at most MAX_LOG_LINES are kept, the oldest dropped and counted)
--
-- Returns 1 written, 0 not written: the job does not run under this token (lease lost, job
-- gone). Errors: 'ERR dq bad arguments: ...', 'ERR dq progress too large' (nothing written).
-- Never fails after a write: the one write is the HSET, after the reads.

local jobs, leases, progress = KEYS[1], KEYS[2], KEYS[3]
local key, token, kind, value = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
if not key or not token or not value or (kind ~= 'p' and kind ~= 'l') then
  return redis.error_reply('ERR dq bad arguments: key, token, kind, value')
end
if kind == 'p' and #value > MAX_PROGRESS_LEN then
  return redis.error_reply('ERR dq progress too large')
end
local rec = redis.call('HGET', jobs, key)
if not is_record(rec) then return 0 end
if lease_of(leases, key, rec) ~= token then return 0 end
local state = {}
local old = redis.call('HGET', progress, key)
if old then
  local ok, decoded = pcall(cmsgpack.unpack, old)
  if ok and type(decoded) == 'table' then state = decoded end
end
if kind == 'p' then
  state.v = value
else
  local lines = state.l or {}
  lines[#lines + 1] = {now_ms(), cut_error(value)}
  local dropped = state.d or 0
  while #lines > MAX_LOG_LINES do
    table.remove(lines, 1)
    dropped = dropped + 1
  end
  state.l, state.d = lines, dropped
end
redis.call('HSET', progress, key, cmsgpack.pack(state))
return 1
