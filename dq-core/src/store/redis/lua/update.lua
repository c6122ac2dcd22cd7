-- update: give a waiting job a new payload, by key, keeping everything else: its due time,
-- attempts, history, expiry and place in line.
--
-- KEYS[1] jobs    dq:{topic#p}:jobs
-- KEYS[2] leases  dq:{topic#p}:leases    HASH key -> token: the leases of lean (format 3) records
--
-- ARGV[1] key
-- ARGV[2] the new payload (MessagePack; its size is checked by the client)
--
-- Returns the job's state, one character: 'S' | 'R' | 'F' its payload was replaced;
--   'A' running, 'D' dead: not touched; 'N' no such job (a value that is not a record counts
--   as dead: fetch buries it).
-- Errors: 'ERR dq bad arguments: ...'; 'ERR dq newer format <f>' (nothing written).
-- Never fails after a write: the one write is the HSET of a hash just read.

local jobs, leases = KEYS[1], KEYS[2]
local key, payload = ARGV[1], ARGV[2]
if not key or key == '' or not payload then
  return redis.error_reply('ERR dq bad arguments: key, payload')
end
local rec = redis.call('HGET', jobs, key)
if not rec then return 'N' end
if is_newer(rec) then return newer_error(rec) end
if not is_record(rec) then return STATE.dead end
local state = job_state(rec, lease_of(leases, key, rec))
if state == STATE.active or state == STATE.dead then return state end
redis.call('HSET', jobs, key, sub(rec, 1, header_len(rec)) .. payload)
return state
