-- release: hand running jobs back without charging the attempt (graceful shutdown).
-- Released jobs go to the FRONT of ready (or of their priority in pready: lib.lua
-- `push_ready`), in the order given: they were due before anything queued behind them.
--
-- KEYS[1] active  dq:{topic#p}:active
-- KEYS[2] ready   dq:{topic#p}:ready
-- KEYS[3] jobs    dq:{topic#p}:jobs
-- KEYS[4] wake    dq:{topic#p}:wake
-- KEYS[5] hist    dq:{topic#p}:hist
-- KEYS[6] stats   dq:{topic#p}:stats
-- KEYS[7] control dq:{topic#p}:control   a job whose cancel was requested is deleted as
--                                         cancelled instead (it never runs again)
-- KEYS[8] leases  dq:{topic#p}:leases    HASH key -> token: the leases of lean (format 3) records
-- KEYS[9] kept    dq:{topic#p}:kept      HASH key -> kept job: a cancelled job is kept there
-- KEYS[10] kept_at dq:{topic#p}:kept_at  ZSET    when the topic keeps cancelled jobs
-- KEYS[11] progress dq:{topic#p}:progress HASH key -> the run's progress: deleted (a released
--                                        job's next run starts afresh)
--
-- ARGV: pairs key, token
-- KEYS[12] events dq:{topic#p}:events    STREAM: one event per job (released, or cancelled),
--                                         when the control hash has `events`
-- KEYS[13] uniq   dq:{topic#p}:uniq      HASH key -> unique_for ms: a cancelled job's moves
-- KEYS[14] uniq_at dq:{topic#p}:uniq_at  ZSET to uniq_at (lib.lua `end_unique`)
-- KEYS[15] pready dq:{topic#p}:pready    ZSET the due queue of jobs whose priority is not
--                                         normal: such a job goes to the front of its priority
-- KEYS[16] gready dq:{topic#p}:gready    ZSET the due queue of grouped jobs: such a job goes to
--                                         the front of its group (lib.lua `push_grouped`)
-- KEYS[17] groups dq:{topic#p}:groups    ZSET the groups' rotation
-- KEYS[18] gwait  dq:{topic#p}:gwait     ZSET the groups waiting: a released or cancelled job's
-- KEYS[19] gactive dq:{topic#p}:gactive  ZSET group gets its turn back (lib.lua `groups_done`)
-- KEYS[20] outbox dq:{topic#p}:outbox    STREAM: a cancelled member of a batch's end is noted
--                                         (lib.lua `note_end`), in a partition whose control
--                                         hash says `batched`
--
-- Returns a string with one character per pair: '1' released, '0' not owned (nothing done).
-- Errors: 'ERR dq bad arguments: ...'
--
-- Never fails after a write: jobs is read first and ZREM active is the first write. Checked:
-- ready, once, before the first job is released (its first touch is a write after that).

local active, ready, jobs, wake_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local hist, stats, control, leases = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local kept, kept_at, progress, events = KEYS[9], KEYS[10], KEYS[11], KEYS[12]
local uniq, uniq_at, cancelled = KEYS[13], KEYS[14], {}
local pready = KEYS[15]
local q = due_queue(ready, pready, stats, KEYS[16], KEYS[17])
local gs = {gactive = KEYS[19], gwait = KEYS[18], groups = KEYS[17], stats = stats}
local outbox = nil -- (KEYS[20], for a batched partition: its type checked)
if #ARGV == 0 or #ARGV % 2 ~= 0 then
  return redis.error_reply('ERR dq bad arguments: expected key, token pairs')
end
for i = 2, #ARGV, 2 do
  if not tonumber(ARGV[i]) then return redis.error_reply('ERR dq bad arguments: token') end
end

local bad = check_types({progress, 'hash', gs.gactive, 'zset', gs.gwait, 'zset', q.groups, 'zset',
  q.gready, 'zset'})
if bad then return bad end
local has_control = redis.call('EXISTS', control) == 1
local keep = nil -- {kept, kept_at, policy, now} when cancelled jobs are kept
local ev = nil -- the event context when the partition records events
if has_control then
  bad = check_types({control, 'hash', hist, 'hash', ready, 'list', pready, 'zset'})
  if bad then return bad end
  local ctl = redis.call('HMGET', control, 'keep', 'events', 'batched')
  local is_batched
  is_batched, bad = BATCH.batched(ctl[3], KEYS[20])
  if bad then return bad end
  if is_batched then outbox = KEYS[20] end
  local policy = keep_policy(ctl[1])
  local now = (keeps(policy, KEPT.cancelled) or ctl[2]) and now_ms()
  if keeps(policy, KEPT.cancelled) then
    bad = check_types({kept, 'hash', kept_at, 'zset'})
    if bad then return bad end
    keep = {kept, kept_at, policy, now}
  end
  if now then ev = events_of(events, ctl[2], stats, now) end
end
-- (reads) every record, and the lease of the lean ones
local keys, tokens = {}, {}
for i = 1, #ARGV / 2 do keys[i], tokens[i] = ARGV[2 * i - 1], tonumber(ARGV[2 * i]) end
local recs = hmget(jobs, keys)
local owner = owners(leases, keys, recs)
local codes, done = {}, {}
local released = 0
for i = #keys, 1, -1 do
  local key, rec = keys[i], recs[i]
  local ok = '0'
  if owner[i] and owner[i] == tokens[i] and not done[key] then
    local group = group_of(rec)
    if has_control and redis.call('HEXISTS', control, cancel_field(key)) == 1 then
      drop_cancelled(active, jobs, hist, stats, control, leases, progress, key, keep, ev,
        outbox)
      cancelled[#cancelled + 1] = key
      if group then groups_done(gs, {group, key}) end
    else
      if released == 0 then
        local bad = check_types({ready, 'list', pready, 'zset'})
        if bad then return bad end
      end
      local _, _, due, _, token = unpack_record(rec)
      redis.call('ZREM', active, key)
      if group then groups_done(gs, {group, key}) end
      if is_lean(rec) then redis.call('HDEL', leases, key) end -- (read above)
      -- the attempt is given back
      local ready_rec = with_header(rec, STATE.ready, started(rec) - 1, due, token)
      redis.call('HSET', jobs, key, ready_rec)
      push_ready(q, key, ready_rec, true)
      redis.call('HDEL', progress, key)
      released = released + 1
      emit(ev, EVENT.released, key, started(rec))
    end
    done[key] = true -- (a key named twice is released once)
    ok = '1'
  end
  codes[i] = ok
end
if released > 0 then wake(wake_key) end
if #cancelled > 0 then end_unique(uniq, uniq_at, nil, cancelled) end
flush_events(ev)
return table.concat(codes)
