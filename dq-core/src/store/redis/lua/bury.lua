-- bury: move a waiting job to the dead queue without running it, by key (an operator's
-- "kill" of a scheduled or retry job; a flow's parent whose child died under FailFast).
-- A job in scheduled, retry or ready goes to the dead queue as fail.lua's bury ('b') takes a
-- running one there: its record to state dead (attempts, due time, format and payload kept),
-- the reason the last entry of its history (HISTORY.buried), counted in stats `buried`, a
-- `dead` event when the topic records events, its unique_for window started (lib.lua
-- `end_unique`), the dead queue trimmed to its cap and retention, and, for a member of a
-- batch (lib.lua `batch_of`), its end noted as dead in the outbox (lib.lua `note_end`).
--
-- KEYS[1] scheduled  dq:{topic#p}:scheduled
-- KEYS[2] retry      dq:{topic#p}:retry
-- KEYS[3] dead       dq:{topic#p}:dead
-- KEYS[4] jobs       dq:{topic#p}:jobs
-- KEYS[5] hist       dq:{topic#p}:hist
-- KEYS[6] stats      dq:{topic#p}:stats     HASH: `buried`, `trimmed` (and the events' counter)
-- KEYS[7] control    dq:{topic#p}:control   HASH: only its `events` field is read
-- KEYS[8] leases     dq:{topic#p}:leases    HASH key -> token: the leases of lean (format 3) records
-- KEYS[9] events     dq:{topic#p}:events    STREAM: a `dead` event, when the control hash has
--                                           `events`
-- KEYS[10] uniq      dq:{topic#p}:uniq      HASH key -> unique_for ms: a buried job's
-- KEYS[11] uniq_at   dq:{topic#p}:uniq_at   ZSET moves to uniq_at (lib.lua `end_unique`)
-- KEYS[12] outbox    dq:{topic#p}:outbox    STREAM: a buried member of a batch's end is noted
--                                           ('d', lib.lua `note_end`)
--
-- ARGV[1] key
-- ARGV[2] dead-queue cap for this partition (at least 1)
-- ARGV[3] dead-queue retention, ms
-- ARGV[4] reason: kept in the job's history and its event (cut as an error text is; empty:
--         'buried')
--
-- Returns {code, trimmed}
--   code  the job's state before the call, one character:
--         'S' | 'R' | 'F'  it was waiting and is dead now (a ready hint, in ready, pready or
--                          gready, is left to go stale: fetch drops it)
--         'A'              running: not touched
--         'D'              dead: not touched (also a value that is not a record: fetch buries it)
--         'N'              no such job
--   trimmed  dead jobs removed by the cap or the retention (0 unless buried)
-- Burying twice answers 'D' the second time.
-- Errors: 'ERR dq bad arguments: bury'; 'ERR dq newer format <f>' when the job's record is of
-- a newer format than this dq reads (lib.lua `is_newer`): nothing written.
--
-- Never fails after a write: the arguments are checked, then jobs, leases (for a lean record),
-- hist and control are read (HGET), and dead (and the outbox, for a member of a batch)
-- type-checked; the first write is the one to scheduled or retry (or jobs, for a ready job).
-- After it only commands that cannot fail on the data they meet: counters through `count`,
-- the window through `end_unique`, the event through `flush_events`.

local scheduled, retry, dead, jobs, hist = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local stats, control, leases, events = KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local uniq, uniq_at, outbox = KEYS[10], KEYS[11], KEYS[12]
local key, reason = ARGV[1], ARGV[4]
local dead_cap, retention = tonumber(ARGV[2]), tonumber(ARGV[3])
if not key or key == '' or not reason or not dead_cap or dead_cap < 1 or not retention
    or retention < 0 then
  return redis.error_reply('ERR dq bad arguments: bury')
end
if reason == '' then reason = 'buried' end

-- (reads)
local rec = redis.call('HGET', jobs, key)
if not rec then return {'N', 0} end
if is_newer(rec) then return newer_error(rec) end
if not is_record(rec) then return {STATE.dead, 0} end
local state = job_state(rec, lease_of(leases, key, rec))
if state == STATE.active or state == STATE.dead then return {state, 0} end
local entries = read_history(hist, key)
local events_setting = redis.call('HGET', control, 'events')
local checks = {dead, 'zset'}
if batch_of(rec) then
  checks[#checks + 1] = outbox
  checks[#checks + 1] = 'stream'
end
local bad = check_types(checks)
if bad then return bad end

-- (writes) the first: out of scheduled or retry (a ready job's hint goes stale)
unlink(state, scheduled, retry, nil, key)
local now = now_ms()
local _, attempts = unpack_record(rec)
add_history(hist, key, entries, attempts, now, HISTORY.buried, reason)
bury(dead, jobs, stats, key, rec, now, attempts)
BATCH.note(outbox, rec, key, BATCH.OUTCOME.dead)
end_unique(uniq, uniq_at, now, {key})
local trimmed = trim_dead(dead, jobs, hist, stats, now, dead_cap, retention, 100)
local ev = events_of(events, events_setting, stats, now)
emit(ev, EVENT.dead, key, attempts, reason)
flush_events(ev)
return {state, trimmed}
