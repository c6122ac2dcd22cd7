-- fail: attempts failed; retry each job later, defer it, bury it, or discard it. Many at once (the worker
-- batches the failures of a partition as it batches acks: one call for all that ended while
-- the previous call was being written).
--
-- KEYS[1] scheduled  dq:{topic#p}:scheduled
-- KEYS[2] retry      dq:{topic#p}:retry
-- KEYS[3] ready      dq:{topic#p}:ready
-- KEYS[4] active     dq:{topic#p}:active
-- KEYS[5] dead       dq:{topic#p}:dead
-- KEYS[6] jobs       dq:{topic#p}:jobs
-- KEYS[7] hist       dq:{topic#p}:hist
-- KEYS[8] stats      dq:{topic#p}:stats
-- KEYS[9] wake       dq:{topic#p}:wake
-- KEYS[10] control   dq:{topic#p}:control   cancel requests, throttle time, concurrency cap
-- KEYS[11] leases    dq:{topic#p}:leases    HASH key -> token: the leases of lean (format 3) records
-- KEYS[12] kept      dq:{topic#p}:kept      HASH key -> kept job: a cancelled job is kept there
-- KEYS[13] kept_at   dq:{topic#p}:kept_at   ZSET    when the topic keeps cancelled jobs
-- KEYS[14] progress  dq:{topic#p}:progress  HASH key -> the run's progress: deleted (kept with
--                                           a cancelled job the topic keeps)
-- KEYS[15] events    dq:{topic#p}:events    STREAM: one event per failure (failed, deferred,
--                                           dead, cancelled or discarded), when the control hash has
--                                           `events`
-- KEYS[16] uniq      dq:{topic#p}:uniq      HASH key -> unique_for ms: a buried or cancelled
-- KEYS[17] uniq_at   dq:{topic#p}:uniq_at   ZSET job's moves to uniq_at (lib.lua `end_unique`)
-- KEYS[18] pready    dq:{topic#p}:pready    ZSET the due queue of jobs whose priority is not
--                                           normal: a deferral due at once of such a job
-- KEYS[19] gready    dq:{topic#p}:gready    ZSET the due queue of grouped jobs, and the groups'
-- KEYS[20] groups    dq:{topic#p}:groups    ZSET rotation (lib.lua `push_grouped`)
-- KEYS[21] gwait     dq:{topic#p}:gwait     ZSET the groups waiting, and the running grouped
-- KEYS[22] gactive   dq:{topic#p}:gactive   ZSET jobs: a failed one's group gets its turn back
--                                           (lib.lua `groups_done`)
-- KEYS[23] gctl      dq:{topic#p}:gctl      HASH a throttle ('t') of a grouped job holds its
--                                           group only: 'h:<group>', the group waits in gwait
--                                           until then; the topic's `until` is not touched
-- KEYS[24] outbox    dq:{topic#p}:outbox    STREAM: the end (dead, cancelled, discarded) of
--                                           each member of a batch is noted (lib.lua
--                                           `note_end`)
--
-- ARGV[1] dead-queue cap for this partition
-- ARGV[2] dead-queue retention, ms
-- then five per failure:
--   key
--   delivery token
--   action: 'r' retry after `delay` ms (the attempt counts)
--           'd' defer: run again after `delay` ms, the attempt is given back
--           'b' bury: to the dead queue now
--           'c' cancel: the job was cancelled while it ran; deleted, not retried
--           't' throttle: defer by `delay` ms, and lease nothing of this partition
--               before then (control 'until'; of its group only, for a grouped job: gctl
--               'h:<group>'); counted in stats 'throttles'
--           'x' discard (a retry function's decision): deleted with its history, counted
--               in stats 'discarded', never kept
--           Whatever the action, a job whose cancel was requested is cancelled.
--   delay, ms (ignored for 'b' and 'c')
--   error text (kept in the job's history)
--
-- Returns three integers per failure, in order: {code, at_ms, trimmed, ...}
--   code  1 waiting for the next attempt at at_ms (retry, or scheduled when deferred)
--         2 buried (trimmed: dead jobs removed by cap or retention, on the batch's last burial)
--         3 cancelled: deleted, counted as cancelled
--         4 discarded: deleted, counted as discarded
--         0 gone: no such job (e.g. already acked); nothing done
--        -1 stale token: the job exists but this delivery no longer owns it (or its record is
--           damaged: fetch buries it); nothing done
--        A key named twice in a batch is failed once, by its first naming; the later ones get
--        what a second call would: -1 (0 if the first deleted it as cancelled).
-- Errors: 'ERR dq bad arguments: ...' (nothing written)
--
-- Never fails after a write: every argument is checked first; jobs, hist and control are read
-- (HMGET), and scheduled or retry (slot_score's ZREVRANGEBYSCORE) when a job goes there,
-- before the first write; ready and dead, first touched by a write, are type-checked
-- (check_types) when a job goes there. After the first write only commands that cannot fail
-- on the data they meet. Each job's outcome depends only on its own record, as if failed one
-- by one; the writes are one variadic command per key for the whole batch.

local scheduled, retry, ready, active = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local dead, jobs, hist, stats, wake_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local control, leases, kept, kept_at = KEYS[10], KEYS[11], KEYS[12], KEYS[13]
local progress, events = KEYS[14], KEYS[15]
local uniq, uniq_at = KEYS[16], KEYS[17]
local pready = KEYS[18]
local q = due_queue(ready, pready, stats, KEYS[19], KEYS[20])
local gs = {gactive = KEYS[22], gwait = KEYS[21], groups = KEYS[20], stats = stats}
local gctl = KEYS[23]
local outbox = KEYS[24]
-- key, record, OUTCOME of each member of a batch this call ends
local notes = {}

local dead_cap, retention = tonumber(ARGV[1]), tonumber(ARGV[2])
if not dead_cap or not retention or #ARGV < 7 or (#ARGV - 2) % 5 ~= 0 then
  return redis.error_reply('ERR dq bad arguments: fail')
end
local n = (#ARGV - 2) / 5
local keys = {}
for i = 1, n do
  local b = 2 + (i - 1) * 5
  local token, action, delay = tonumber(ARGV[b + 2]), ARGV[b + 3], tonumber(ARGV[b + 4])
  if not token or not delay or delay < 0
      or (action ~= 'r' and action ~= 'd' and action ~= 'b' and action ~= 'c' and action ~= 't'
        and action ~= 'x') then
    return redis.error_reply('ERR dq bad arguments: fail')
  end
  keys[i] = ARGV[b + 1]
end

-- (reads) the records, the leases of the lean ones, and the control hash: HMGET checks its
-- type before any write
local recs = hmget(jobs, keys)
local owner = owners(leases, keys, recs)
local reply, live = {}, {}
local any_lean = false
local seen, dups = {}, {} -- dups: index of a key named again -> index of its first naming
for i, key in ipairs(keys) do
  local rec = recs[i]
  local code = nil
  if seen[key] then
    dups[i] = seen[key]
    code = -1 -- as if failed one after the other: the first leaves the job under no lease
  elseif not rec then
    code = 0
  elseif not is_record(rec) then
    code = -1 -- damaged: this delivery cannot own it; fetch buries it
  elseif owner[i] ~= tonumber(ARGV[2 + (i - 1) * 5 + 2]) then
    code = -1
  elseif is_lean(rec) then
    any_lean = true
  end
  if code then
    reply[3 * i - 2], reply[3 * i - 1], reply[3 * i] = code, 0, 0
  else
    seen[key] = i
    live[#live + 1] = i
  end
end
if #live == 0 then return reply end

local now = now_ms()
local capped, cancels, policy, events_setting = false, {}, nil, nil
if redis.call('EXISTS', control) == 1 then
  local fields = {'conc', 'keep', 'events'}
  for j, i in ipairs(live) do fields[j + 3] = cancel_field(keys[i]) end
  local ctl = hmget(control, fields)
  capped = ctl[1] ~= false
  policy = keep_policy(ctl[2])
  events_setting = ctl[3]
  for j, i in ipairs(live) do
    if ctl[j + 3] then cancels[i] = true end
  end
end
local ev = events_of(events, events_setting, stats, now)
-- the events of this batch, emitted after the writes: {kind, key, fields}
local evs = {}
local live_keys = {}
for j, i in ipairs(live) do live_keys[j] = keys[i] end
local histories = hmget(hist, live_keys)
-- the progress hash exists only while some running job of the partition has reported
local progs = {}
if redis.call('EXISTS', progress) == 1 then progs = hmget(progress, live_keys) end

-- (reads) each job's outcome, its new record and history, and its place; slot_score reads
-- scheduled or retry (checking its type) before any write.
local cancelled, buried, discarded = {}, {}, {}
local kept_entries = {} -- the cancelled jobs, when the topic keeps them
local job_writes, hist_writes = {}, {}
local to_ready, to_ready_recs = {}, {}
local members = {[scheduled] = {}, [retry] = {}}
local placed = {[scheduled] = {}, [retry] = {}}
local slot = {} -- set .. ms -> the last k given in this batch (see slot_score)
local retried, throttles, throttle_until = 0, 0, nil
local group_holds, done_groups = {}, {} -- group -> hold end ms; {group, key} of grouped jobs
local function history(j, attempt, code, err)
  local entries = {}
  local old = histories[j]
  if old then
    local ok, decoded = pcall(cmsgpack.unpack, old)
    if ok and type(decoded) == 'table' then entries = decoded end
  end
  entries[#entries + 1] = {attempt, now, code, cut_error(err)}
  while #entries > MAX_HISTORY do table.remove(entries, 1) end
  hist_writes[#hist_writes + 1] = live_keys[j]
  hist_writes[#hist_writes + 1] = cmsgpack.pack(entries)
end
for j, i in ipairs(live) do
  local b = 2 + (i - 1) * 5
  local key, rec = keys[i], recs[i]
  local action, delay, err = ARGV[b + 3], tonumber(ARGV[b + 4]), ARGV[b + 5]
  local _, _, due, _, token = unpack_record(rec)
  local attempts = started(rec)
  local group = group_of(rec)
  if group then
    done_groups[#done_groups + 1] = group
    done_groups[#done_groups + 1] = key
  end
  if cancels[i] then action = 'c' end
  local member = batch_of(rec)
  if member and (action == 'c' or action == 'x' or action == 'b') then
    local o = action == 'c' and BATCH.OUTCOME.cancelled
      or action == 'x' and BATCH.OUTCOME.discarded or BATCH.OUTCOME.dead
    notes[#notes + 1] = {key, rec, o}
  end
  if action == 'c' then
    cancelled[#cancelled + 1] = key
    if keeps(policy, KEPT.cancelled) then
      kept_entries[#kept_entries + 1] = {key, pack_kept(KEPT.cancelled, now, 0, attempts, nil,
        nil, histories[j] or nil, progs[j] or nil, rec)}
    end
    reply[3 * i - 2], reply[3 * i - 1], reply[3 * i] = 3, now, 0
    if ev then evs[#evs + 1] = {EVENT.cancelled, key, attempts} end
  elseif action == 'x' then
    discarded[#discarded + 1] = key
    reply[3 * i - 2], reply[3 * i - 1], reply[3 * i] = 4, now, 0
    if ev then evs[#evs + 1] = {EVENT.discarded, key, attempts, err} end
  elseif action == 'b' then
    history(j, attempts, HISTORY.buried, err)
    job_writes[#job_writes + 1] = key
    job_writes[#job_writes + 1] = with_header(rec, STATE.dead, attempts, due, token)
    buried[#buried + 1] = now
    buried[#buried + 1] = key
    reply[3 * i - 2], reply[3 * i - 1], reply[3 * i] = 2, now, 0
    if ev then evs[#evs + 1] = {EVENT.dead, key, attempts, err} end
  else
    local at = bound_due(now + delay, now)
    local code, later, zset = HISTORY.failed, STATE.retry, retry
    if action == 't' then
      -- the partner is rate-limiting us: the whole partition (the job's group, for a grouped
      -- job) leases nothing before `at`
      throttles = throttles + 1
      if group then
        if not group_holds[group] or at > group_holds[group] then group_holds[group] = at end
      elseif not throttle_until or at > throttle_until then
        throttle_until = at
      end
    end
    if action == 'd' or action == 't' then
      -- "not yet": the attempt is given back and the job waits like a scheduled one
      code, later, zset = HISTORY.deferred, STATE.scheduled, scheduled
    end
    history(j, attempts, code, err)
    if ev then
      local kind = code == HISTORY.deferred and EVENT.deferred or EVENT.failed
      evs[#evs + 1] = {kind, key, attempts, err, at}
    end
    if code == HISTORY.deferred then attempts = attempts - 1 else retried = retried + 1 end
    local new_rec = with_header(rec, waiting_state(at, now, later), attempts, at, token)
    job_writes[#job_writes + 1] = key
    job_writes[#job_writes + 1] = new_rec
    if at <= now then
      to_ready[#to_ready + 1] = key
      to_ready_recs[#to_ready] = new_rec
    else
      -- slot_score once per set and ms; the batch's later jobs for that ms follow on
      local s = zset .. '\0' .. at
      local score
      if slot[s] then
        slot[s] = math.min(slot[s] + 1, 2047)
        score = at + slot[s] / 4096
      else
        score = slot_score(zset, at)
        slot[s] = math.floor((score - at) * 4096 + 0.5)
      end
      local m = members[zset]
      m[#m + 1] = score
      m[#m + 1] = key
      placed[zset][key] = true
    end
    reply[3 * i - 2], reply[3 * i - 1], reply[3 * i] = 1, at, 0
  end
end
-- the two keys first written without a read before
local checks = {}
if #to_ready > 0 then
  checks[#checks + 1] = ready; checks[#checks + 1] = 'list'
  checks[#checks + 1] = pready; checks[#checks + 1] = 'zset'
end
if #done_groups > 0 then
  for _, k in ipairs({q.gready, gs.groups, gs.gwait, gs.gactive}) do
    checks[#checks + 1] = k; checks[#checks + 1] = 'zset'
  end
  checks[#checks + 1] = gctl; checks[#checks + 1] = 'hash'
end
if #buried > 0 then checks[#checks + 1] = dead; checks[#checks + 1] = 'zset' end
if #notes > 0 then checks[#checks + 1] = outbox; checks[#checks + 1] = 'stream' end
if #kept_entries > 0 then
  checks[#checks + 1] = kept; checks[#checks + 1] = 'hash'
  checks[#checks + 1] = kept_at; checks[#checks + 1] = 'zset'
end
local bad = check_types(checks)
if bad then return bad end

-- Writes.
call_many('ZREM', active, live_keys)
if next(progs) then call_many('HDEL', progress, live_keys) end -- (read above)
if any_lean then call_many('HDEL', leases, live_keys) end -- (read above)
if #cancelled > 0 then
  call_many('HDEL', jobs, cancelled)
  call_many('HDEL', hist, cancelled)
  count(stats, 'cancelled', #cancelled)
end
if #discarded > 0 then
  call_many('HDEL', jobs, discarded)
  call_many('HDEL', hist, discarded)
  count(stats, 'discarded', #discarded)
end
if #kept_entries > 0 then
  keep_jobs(kept, kept_at, policy, KEPT.cancelled, now, kept_entries)
  trim_kept(kept, kept_at, stats, policy, now, #kept_entries + 16)
end
if next(cancels) then
  local fields = {}
  for i in pairs(cancels) do fields[#fields + 1] = cancel_field(keys[i]) end
  call_many('HDEL', control, fields) -- control is a hash: read above
end
if throttle_until then
  local until_ms = tonumber(redis.pcall('HGET', control, 'until')) or 0
  if throttle_until > until_ms then redis.pcall('HSET', control, 'until', throttle_until) end
end
if throttles > 0 then count(stats, 'throttles', throttles) end
if #hist_writes > 0 then call_many('HSET', hist, hist_writes) end
if #job_writes > 0 then call_many('HSET', jobs, job_writes) end
if #to_ready > 0 then push_ready_many(q, to_ready, to_ready_recs) end
local woke = false
if #done_groups > 0 then woke = groups_done(gs, done_groups) end
-- a held group waits in gwait until its hold ends (fetch looks at `h:` again then)
for group, at in pairs(group_holds) do
  local field = 'h:' .. group
  local old = tonumber(redis.call('HGET', gctl, field)) or 0
  if at > old then redis.call('HSET', gctl, field, at) end
  redis.call('ZREM', gs.groups, group)
  redis.call('ZADD', gs.gwait, math.max(at, old), group)
end
if #buried > 0 then
  call_many('ZADD', dead, buried)
  count(stats, 'buried', #buried / 2)
end
if retried > 0 then count(stats, 'retried', retried) end
local wake_up = capped or woke or #to_ready > 0
for _, z in ipairs({scheduled, retry}) do
  if #members[z] > 0 then
    call_many('ZADD', z, members[z])
    -- a new earliest job wakes a fetcher (its wait was computed for a later one)
    if not wake_up then
      local head = redis.call('ZRANGE', z, 0, 0)
      if head[1] and placed[z][head[1]] then wake_up = true end
    end
  end
end
if wake_up then wake(wake_key) end
for _, e in ipairs(evs) do emit(ev, e[1], e[2], e[3], e[4], e[5]) end
for _, e in ipairs(notes) do BATCH.note(outbox, e[2], e[1], e[3]) end
for i, first in pairs(dups) do
  local code = reply[3 * first - 2]
  if code == 3 or code == 4 then reply[3 * i - 2] = 0 end -- the first deleted it: gone
end
if #buried > 0 then
  -- (the trim's count goes with the batch's last burial)
  local last = 0
  for i = 1, n do if reply[3 * i - 2] == 2 then last = i end end
  reply[3 * last] = trim_dead(dead, jobs, hist, stats, now, dead_cap, retention, 100)
end
end_unique(uniq, uniq_at, now, cancelled, buried, 2)
flush_events(ev)
return reply
