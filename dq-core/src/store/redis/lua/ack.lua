-- ack: jobs succeeded; delete them. Many at once.
--
-- KEYS[1] active  dq:{topic#p}:active
-- KEYS[2] jobs    dq:{topic#p}:jobs
-- KEYS[3] hist    dq:{topic#p}:hist
-- KEYS[4] stats   dq:{topic#p}:stats     'succeeded' counts every acked job, and
--                                         'succeeded_after_cancel_request' those of them whose
--                                         cancel was requested while they ran
-- KEYS[5] control dq:{topic#p}:control   cancel requests of the acked jobs are dropped; with a
--                                         concurrency cap, a freed slot wakes a fetcher
-- KEYS[6] wake    dq:{topic#p}:wake
-- KEYS[7] leases  dq:{topic#p}:leases    HASH key -> token: the leases of lean (format 3) records
-- KEYS[8] kept    dq:{topic#p}:kept      HASH key -> kept job (lib.lua `pack_kept`)
-- KEYS[9] kept_at dq:{topic#p}:kept_at   ZSET key -> when its keeping ends (ms)
-- KEYS[10] progress dq:{topic#p}:progress HASH key -> the run's progress and log lines: deleted
--                                         (kept with the job when the topic keeps it)
-- KEYS[11] events dq:{topic#p}:events    STREAM: one `succeeded` event per acked job (attempt,
--                                         worker id), when the control hash has `events`
-- KEYS[12] uniq   dq:{topic#p}:uniq      HASH key -> unique_for ms: an acked job's moves to
-- KEYS[13] uniq_at dq:{topic#p}:uniq_at  ZSET key -> window end ms (lib.lua `end_unique`)
-- KEYS[14] gactive dq:{topic#p}:gactive  ZSET the running grouped jobs: an acked one leaves it,
-- KEYS[15] groups dq:{topic#p}:groups    ZSET and its group, if waiting in gwait, gets its turn
-- KEYS[16] gwait  dq:{topic#p}:gwait     ZSET back (lib.lua `groups_done`); a topic without
--                                         running grouped jobs pays one ZCARD per call
-- KEYS[17] outbox dq:{topic#p}:outbox    STREAM: the end of each acked member of a batch is
--                                         noted (lib.lua `note_end`), in a partition whose
--                                         control hash says `batched`
--
-- ARGV[1] the worker's id (kept with each job when the topic keeps succeeded jobs)
-- ARGV[2..]: quads key, token, started, result — token: the delivery token from fetch
--   (integer); started: when the run was leased (ms); result: '' none, 'v' .. bytes the
--   handler's encoded value, 'x' .. text why the value was not stored (too large, not
--   encodable). started and result are used only when the control hash's `keep` policy keeps
--   succeeded jobs: then each acked job is kept (lib.lua `keep_jobs`), its record and history
--   with it, and kept jobs past their time or beyond the cap are trimmed.
--
-- Returns a string with one character per pair:
--   'A' acked: the record is deleted
--   'G' gone: no such job (already acked, cancelled, purged), or a key named twice in the
--       batch (acked once); nothing done
--   'S' stale: the job exists but this token no longer owns it; nothing done
-- Errors: 'ERR dq bad arguments: ...'
--
-- A lean job's lease is read from `leases` (one HMGET of small values for the batch); only
-- the keys it does not hold (jobs of format 1 or 2, gone or stale ones) have their records
-- read, so acking lean jobs reads no record.
--
-- Never fails after a write: leases, hist and control are read (HMGET, HLEN) before the first
-- write; jobs too, unless every key was found in leases, and then TYPE checks it; ZREM active
-- is the first write, and the counters cannot fail.

local active, jobs, hist, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local control, wake_key, leases = KEYS[5], KEYS[6], KEYS[7]
local kept, kept_at, progress, events = KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local uniq, uniq_at = KEYS[12], KEYS[13]
local gs = {gactive = KEYS[14], groups = KEYS[15], gwait = KEYS[16], stats = stats}
local outbox = KEYS[17]
if #ARGV < 5 or (#ARGV - 1) % 4 ~= 0 then
  return redis.error_reply('ERR dq bad arguments: expected a worker id, then key, token, started, result quads')
end
local worker = ARGV[1]
local keys, tokens, starts, results = {}, {}, {}, {}
for i = 1, (#ARGV - 1) / 4 do
  local at = 4 * i - 2
  local token, started_ms = tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  if not token or not started_ms then
    return redis.error_reply('ERR dq bad arguments: token, started')
  end
  local r = ARGV[at + 3]
  local kind = sub(r, 1, 1)
  if kind == 'v' then
    results[i] = {1, sub(r, 2)}
  elseif kind == 'x' then
    results[i] = {2, sub(r, 2)}
  elseif r ~= '' then
    return redis.error_reply('ERR dq bad arguments: result')
  end
  keys[i], tokens[i], starts[i] = ARGV[at], token, started_ms
end

-- One HMGET of leases (and of records for the keys it lacks), then one variadic HDEL/ZREM
-- for the whole batch.
local held = hmget(leases, keys)
-- Reply codes (AckOutcome), not states.
local ACKED, STALE, GONE = 'A', 'S', 'G'
local codes, done, seen = {}, {}, {}
local done_at = {} -- index in ARGV order of each key acked
local n_done, n_lean = 0, 0
local rest = {} -- indexes of keys without a lease in `leases`
for i, key in ipairs(keys) do
  local lease = held[i]
  if not lease then
    rest[#rest + 1] = i
  elseif seen[key] then
    codes[i] = GONE -- named twice: acked once
  elseif tonumber(lease) == tokens[i] then
    codes[i] = ACKED
    seen[key] = true
    n_done = n_done + 1
    done[n_done] = key
    done_at[n_done] = i
    n_lean = n_lean + 1
  else
    codes[i] = STALE -- leased again since, under another token
  end
end
local jobs_read = #rest > 0
if jobs_read then
  local rest_keys = {}
  for j, i in ipairs(rest) do rest_keys[j] = keys[i] end
  local recs = hmget(jobs, rest_keys)
  for j, i in ipairs(rest) do
    local key, rec = keys[i], recs[j]
    if seen[key] or not rec then
      codes[i] = GONE -- gone (or named twice: acked once)
    elseif leased_by(rec, tokens[i]) then
      codes[i] = ACKED
      seen[key] = true
      n_done = n_done + 1
      done[n_done] = key
      done_at[n_done] = i
    else
      codes[i] = STALE -- a format-1/2 job under another token, or a lean one not running
    end
  end
end
if #done > 0 then
  if not jobs_read then
    local bad = check_types({jobs, 'hash'})
    if bad then return bad end
  end
  -- the history hash exists only while some job of the partition has failed before
  local has_hist = redis.call('HLEN', hist) > 0
  -- a topic without controls pays one EXISTS per batch; HGET checks the type before writes
  local has_control = redis.call('EXISTS', control) == 1
  local capped, policy, events_setting, members = false, nil, nil, false
  -- whether the control hash may hold a cancel request: only if it holds more fields than
  -- the settings (a topic that keeps jobs or records events has a control hash, and would
  -- otherwise look up and delete a cancel field per acked job)
  local may_cancel = false
  if has_control then
    local ctl = redis.call('HMGET', control, 'conc', 'keep', 'events', 'paused', 'until',
      'rate_n', 'rate_ms', 'tat', 'max_delay', 'batched')
    capped, policy, events_setting = ctl[1], keep_policy(ctl[2]), ctl[3]
    local bad
    members, bad = BATCH.batched(ctl[10], outbox)
    if bad then return bad end
    local settings = 0
    for i = 1, 10 do
      if ctl[i] then settings = settings + 1 end
    end
    may_cancel = redis.call('HLEN', control) > settings
  end
  -- (Redis TIME only for a topic that keeps jobs or records events: the hot path pays none)
  local now = (policy or events_setting) and now_ms() or nil
  local ev = now and events_of(events, events_setting, stats, now)
  if ev then ev[6] = worker end
  -- a topic that keeps succeeded jobs: read their records and histories, check kept's keys
  local keeping = keeps(policy, KEPT.succeeded)
  -- the progress hash exists only while some running job of the partition has reported
  local has_progress = redis.call('EXISTS', progress) == 1
  if has_progress then
    local bad = check_types({progress, 'hash'})
    if bad then return bad end
  end
  -- grouped jobs running: the acked ones' groups are read from their records
  -- (ZCARD refuses a gactive of another type before any write; 0 when absent)
  local grouped = redis.call('ZCARD', gs.gactive) > 0
  if grouped then
    local bad = check_types({gs.groups, 'zset', gs.gwait, 'zset'})
    if bad then return bad end
  end
  local recs, hists, progs
  if keeping then
    local bad = check_types({kept, 'hash', kept_at, 'zset'})
    if bad then return bad end
    recs, hists = hmget(jobs, done), hmget(hist, done)
    progs = has_progress and hmget(progress, done) or {}
  elseif ev or grouped or members then
    -- (each event names the attempt; a grouped job, its group; a member, its batch)
    recs = hmget(jobs, done)
  end
  -- a job whose cancel was requested that succeeds anyway is counted as what happened
  local after_cancel = 0
  if may_cancel then
    local fields = {}
    for i, key in ipairs(done) do fields[i] = cancel_field(key) end
    for _, request in ipairs(hmget(control, fields)) do
      if request then after_cancel = after_cancel + 1 end
    end
    call_many('HDEL', control, fields)
  end
  call_many('ZREM', active, done)
  local woke = false
  if grouped then
    local ended = {}
    for j, key in ipairs(done) do
      local rec = recs[j]
      local group = rec and is_record(rec) and group_of(rec)
      if group then
        ended[#ended + 1] = group
        ended[#ended + 1] = key
      end
    end
    if #ended > 0 then woke = groups_done(gs, ended) end
  end
  if capped or woke then wake(wake_key) end
  if keeping then
    local entries = {}
    for j, key in ipairs(done) do
      local i, rec = done_at[j], recs[j]
      -- (a lean job is acked on `leases` alone: a damaged record is not kept, and nothing
      -- here may raise after the writes above)
      if is_record(rec) then
        entries[#entries + 1] = {key, pack_kept(KEPT.succeeded, now, starts[i], started(rec),
          results[i], worker, hists[j] or nil, progs[j] or nil, rec)}
      end
    end
    keep_jobs(kept, kept_at, policy, KEPT.succeeded, now, entries)
    trim_kept(kept, kept_at, stats, policy, now, #entries + 16)
  end
  if members then
    for j, key in ipairs(done) do BATCH.note(outbox, recs[j], key, BATCH.OUTCOME.succeeded) end
  end
  call_many('HDEL', jobs, done)
  if n_lean > 0 then call_many('HDEL', leases, done) end
  if has_hist then call_many('HDEL', hist, done) end
  if has_progress then call_many('HDEL', progress, done) end
  count(stats, 'succeeded', #done)
  end_unique(uniq, uniq_at, now, done)
  if ev then
    for j, key in ipairs(done) do
      local rec = recs[j]
      emit(ev, EVENT.succeeded, key, rec and is_record(rec) and started(rec) or nil)
    end
    flush_events(ev)
  end
  if after_cancel > 0 then count(stats, 'succeeded_after_cancel_request', after_cancel) end
end
return table.concat(codes)
