-- fetch: the worker's one call per round trip. In order:
--   0. (retries) find this call's receipt and lease its jobs again, under fresh tokens;
--   1. recover at most ARGV[4] expired leases: each counts as a failed attempt
--      ("lease expired") and goes to retry after the delay the topic's retry policy gives
--      that attempt (`retry_delay`, the mirror of RetryPolicy::delay_with, with a fresh
--      draw of math.random per job), or to dead when the policy has no more (a retry
--      function's decisions, policy kind 4: retry, dead, or discarded: deleted, counted);
--   2g. lease grouped jobs (lib.lua's groups section) with the room, or half of it while jobs of
--      no group are queued (a room of one: all or nothing by the clock's parity): the groups
--      whose turn it is (at most GROUP_SCAN, those whose wait in gwait ended first) in
--      rounds, each at most its weight per round, within its cap, rate and hold; at the end
--      (3g) they get the room left after the other jobs;
--   2. lease due jobs by priority (lib.lua `push_ready`): first `pready`'s members above
--      normal priority, then up to ARGV[1] keys of `ready`, skipping stale hints, with fresh
--      tokens;
--   3. take the due jobs of scheduled and retry, merged by due time, and lease band by band
--      while room is left: those found above normal priority (before the ready list of 2),
--      then the found normal ones, then `pready`'s members below normal, then the found ones
--      below normal; move at most ARGV[3] more to the due queue;
--   4. pass a wake-up token on if ready work is left behind (chained wake-ups);
--   5. on a fetch that leased nothing, audit up to 32 records (HSCAN, cursor in stats) and
--      re-link any whose sorted-set entry is missing;
--   (2, 3) a job whose expiry (format 4) has come is not leased or promoted: it is deleted
--      with its history and counted ('expired_before_start'), and kept as expired when the
--      control hash's `keep` policy keeps expired jobs;
--   (1) a recovered job whose cancel was requested is kept as cancelled when the policy
--      keeps cancelled jobs; (5) an idle fetch also drops kept jobs whose time has come;
--   6. leave a receipt of what this call leased.
--
-- Newer records (lib.lua `is_newer`: written by a dq that reads more formats than this one)
-- are never consumed, moved, rewritten or buried. The first one met in the ready list, in
-- scheduled or retry, or among the expired leases ends this call's pass over that index (it
-- stays where it is, with what lies behind it, for a newer worker), and is reported. So that a
-- worker does not poll on such a record, an index stopped at one is not counted as work left
-- (next_ms waits at least NEWER_WAIT_MS for it). The audit (5) skips and reports them too.
--
-- Controls (KEYS[10], absent for a topic without any: one HMGET of nothing). Read first, by
-- Redis TIME: while `paused` = '1', or before the throttle time `until`, nothing new is
-- leased; with a concurrency share `conc`, at most conc minus the jobs active after lease
-- recovery; with a rate share (`rate_n` jobs per `rate_ms`), at most what the GCRA budget
-- allows (state `tat`, the theoretical arrival time; bursts up to ~50 ms of the rate). Jobs
-- held back keep their due times (they may be promoted to ready), no chained wake-up is
-- passed on, and next_ms says when the limit may allow more (-1 for a pause or a full cap:
-- a resume, an ack or a failure wakes the fetchers). An expired lease whose job had a cancel
-- requested ('x:<key>') is deleted as cancelled instead of retried.
--
-- Receipts: a reply lost on its way (a dropped connection, a timeout) would leave the jobs
-- this call leased to nobody until their lease runs out, and that expiry costs an attempt.
-- So a call that leased jobs (or any retry) stores {try, key1, token1, ...} in its receipt key,
-- for ARGV[7] ms. A retry of the same call (ARGV[8] > 0) that finds the receipt leases those
-- of its jobs that are still active under the recorded token again, with fresh tokens and a
-- fresh deadline and WITHOUT counting an attempt (the lost lease never reached a worker),
-- then fills the rest of its room as any fetch does. A try older than the receipt's (held up
-- on an old connection while a later try ran) does nothing: nobody waits for its reply. The
-- fetcher names in KEYS[25..] the receipts of its earlier calls whose replies arrived; they
-- are deleted, so receipts do not pile up while they wait to expire.
--
-- Leases (ARCHITECTURE.md §6.3): a job of format 1 or 2 is leased by rewriting its record
-- (state A, attempts + 1, the token); a lean one (format 3) is leased without touching its
-- record: its token goes into `leases` (key -> token), and its record keeps its waiting state
-- and its finished attempts. Either way its key goes into `active` with the deadline, and the
-- reply carries the token beside the record.
--
-- KEYS[1] scheduled  dq:{topic#p}:scheduled
-- KEYS[2] retry      dq:{topic#p}:retry
-- KEYS[3] ready      dq:{topic#p}:ready
-- KEYS[4] active     dq:{topic#p}:active     ZSET key -> lease deadline ms
-- KEYS[5] dead       dq:{topic#p}:dead
-- KEYS[6] jobs       dq:{topic#p}:jobs
-- KEYS[7] hist       dq:{topic#p}:hist
-- KEYS[8] stats      dq:{topic#p}:stats
-- KEYS[9] wake       dq:{topic#p}:wake
-- KEYS[10] control   dq:{topic#p}:control    HASH pause, limits, throttle, cancel requests
-- KEYS[11] leases    dq:{topic#p}:leases     HASH key -> token: the leases of lean records
-- KEYS[12] kept      dq:{topic#p}:kept       HASH key -> kept job (lib.lua `pack_kept`)
-- KEYS[13] kept_at   dq:{topic#p}:kept_at    ZSET key -> when its keeping ends (ms)
-- KEYS[14] progress  dq:{topic#p}:progress   HASH key -> a running job's progress: deleted
--                                            when its lease is recovered
-- KEYS[15] events    dq:{topic#p}:events     STREAM: started, expired, and the ends of recovered
--                                            leases (failed, dead, cancelled), when the
--                                            control hash has `events`
-- KEYS[16] uniq      dq:{topic#p}:uniq       HASH key -> unique_for ms: an expired or buried
-- KEYS[17] uniq_at   dq:{topic#p}:uniq_at    ZSET job's moves to uniq_at (lib.lua `end_unique`)
-- KEYS[18] pready    dq:{topic#p}:pready     ZSET the due queue of jobs whose priority is not
--                                            normal (lib.lua `push_ready`)
-- KEYS[19] gready    dq:{topic#p}:gready     ZSET the due queue of grouped jobs (lib.lua's
-- KEYS[20] groups    dq:{topic#p}:groups     ZSET groups section): the groups' rotation, those
-- KEYS[21] gwait     dq:{topic#p}:gwait      ZSET waiting, the running grouped jobs and the
-- KEYS[22] gactive   dq:{topic#p}:gactive    ZSET groups' limits and state: a topic without
-- KEYS[23] gctl      dq:{topic#p}:gctl       HASH groups pays one EXISTS per fetch
-- KEYS[24] outbox    dq:{topic#p}:outbox     STREAM: the end (dead, cancelled, discarded by a
--                                            recovered lease; expired) of each member of a
--                                            batch is noted (lib.lua `note_end`), in a
--                                            partition whose control hash says `batched`
-- KEYS[25] receipt   dq:{topic#p}:fetch:<call id>   STRING this call's receipt
-- then any number of further keys dq:{topic#p}:fetch:<id>: receipts to delete
--
-- ARGV[1] max jobs to lease (0 allowed: only promote and recover)
-- ARGV[2] lease length, ms (> 0)
-- ARGV[3] promote batch: most due jobs moved to ready, beyond those leased (> 0)
-- ARGV[4] recover batch (> 0)
-- ARGV[5] dead-queue cap for this partition
-- ARGV[6] dead-queue retention, ms
-- ARGV[7] receipt life, ms (> 0)
-- ARGV[8] try of this call: 0 the first, n the n-th retry
-- ARGV[9] random seed, an integer in [0, 2^31), drawn afresh by the caller for every call:
--         seeds math.random, which gives each recovered job its own jitter draw
-- ARGV[10..] the topic's retry policy, as RetryPolicy::script_args writes it (lib.lua's
--         read_retry_policy): what a job whose lease expired after attempt n waits
--
-- Returns {now, next_ms, trimmed, n_jobs, n_buried, n_newer, key1, record1, token1, ...,
--          buried_key1, ..., newer_key1, newer_format1, ...}
--   now      Redis TIME in ms (the lease start)
--   next_ms  -1 if nothing is pending; 0 if more ready work remains; else ms until the
--            earliest due time or lease deadline in this partition
--   records are full records (header + payload, in the record's own format): a format-1/2
--   one already marked active with its token, a lean one as stored (waiting state, attempts
--   finished); token is the delivery token of each; the jobs of a found receipt come first
--   newer    records of a newer format this call met and left untouched: key, its format
-- Errors: 'ERR dq bad arguments: ...'
--
-- Never fails after a write. A leasing fetch reads first (active, ready, jobs, scheduled,
-- retry; ready by LRANGE, trimmed once at the end) and then writes, the token counter first:
-- no TYPE call. Checked: everything, when leases expired (recovery writes before those reads);
-- dead and hist when a record is damaged, and on a fetch that leases nothing (the audit and
-- the dead-queue trim touch them after writing); hist when a job expired (its history goes).
-- Counters and wake-ups cannot fail; the receipt is read with GET before any write, and SET
-- and DEL of receipts cannot fail.

local scheduled, retry, ready, active = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local dead, jobs, hist, stats, wake_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local control, leases, kept, kept_at = KEYS[10], KEYS[11], KEYS[12], KEYS[13]
local progress, events, pready, receipt_key = KEYS[14], KEYS[15], KEYS[18], KEYS[25]
local outbox = KEYS[24]
local uniq, uniq_at = KEYS[16], KEYS[17]
local gready, groups, gwait, gactive, gctl = KEYS[19], KEYS[20], KEYS[21], KEYS[22], KEYS[23]
local q = due_queue(ready, pready, stats, gready, groups)
local gs = {gactive = gactive, gwait = gwait, groups = groups, stats = stats}

local max_jobs, lease = tonumber(ARGV[1]), tonumber(ARGV[2])
local promote_batch, recover_batch = tonumber(ARGV[3]), tonumber(ARGV[4])
local dead_cap, retention = tonumber(ARGV[5]), tonumber(ARGV[6])
local receipt_ms, try_no = tonumber(ARGV[7]), tonumber(ARGV[8])
if not (max_jobs and lease and promote_batch and recover_batch and dead_cap and retention)
    or max_jobs < 0 or lease <= 0 or promote_batch <= 0 or recover_batch <= 0 then
  return redis.error_reply('ERR dq bad arguments: fetch limits')
end
if not (receipt_ms and try_no and receipt_key) or receipt_ms <= 0 or try_no < 0 then
  return redis.error_reply('ERR dq bad arguments: fetch call')
end
local seed = tonumber(ARGV[9])
if not seed or seed < 0 or seed >= 2147483648 or seed ~= math.floor(seed) then
  return redis.error_reply('ERR dq bad arguments: random seed')
end
local policy, policy_error = read_retry_policy(ARGV, 10)
if not policy then return redis.error_reply('ERR dq bad arguments: ' .. policy_error) end

-- A member (and a field) no job key can be (job keys hold no control characters), longer
-- than the listpack limits (zset-max-listpack-value, hash-max-listpack-value: 64): see the
-- lease writes below.
local ACTIVE_ENCODING_HINT = string.rep('\0', 72)
-- The state byte of a ready record (the ready list's hot path reads it by byte).
local READY_BYTE = byte(STATE.ready)
-- The least wait before looking again at an index stopped at a newer record.
local NEWER_WAIT_MS = 1000

local now = now_ms()
local trimmed = 0
local buried = {}
local cancelled_keys = {} -- (recovered leases of cancelled jobs: lib.lua `end_unique`)
-- (read first: HMGET refuses a control key of another type before anything is written)
local ctl = redis.call('HMGET', control, 'paused', 'until', 'conc', 'rate_n', 'rate_ms', 'tat',
  'keep', 'events', 'batched')
-- (a partition that has held a batch's member: its outbox's type is checked before any write)
local is_batched, members_bad = BATCH.batched(ctl[9], outbox)
if members_bad then return members_bad end
-- a member's end noted in the outbox (nil: not batched)
local ob = is_batched and outbox or nil
local has_control = ctl[1] or ctl[2] or ctl[3] or ctl[4]
local keep_by = keep_policy(ctl[7])
local ev = events_of(events, ctl[8], stats, now)

-- 0. this call's receipt. (A value that does not decode is taken for no receipt.)
local receipt = nil
local stored = redis.call('GET', receipt_key)
if stored then
  local ok, r = pcall(cmsgpack.unpack, stored)
  if ok and type(r) == 'table' and type(r[1]) == 'number' then receipt = r end
end
if receipt and receipt[1] > try_no then
  return {now, 0, 0, 0, 0, 0} -- a later try of this call ran already: this one is stale
end

local seen = {} -- a key may have two hints in ready (one stale): lease it once
-- Newer records met (key, format, ...) and the indexes stopped at one (by key name).
local newer, stopped = {}, {}
local function met_newer(index, key, rec)
  seen[key] = true -- reported once (the audit skips it)
  newer[#newer + 1] = key
  newer[#newer + 1] = format_of(rec)
  stopped[index] = true
end
local lease_keys, lease_recs = {}, {}
-- 0. (continued, reads) a retry gets back the jobs its receipt names that are still leased
--    under the recorded token: nobody else has them (a recovered or acked job has another
--    token or no record). Marked seen before step 1, so that a lease of theirs that ran out
--    is not charged; they are leased again below without spending an attempt.
local from_receipt = 0
if receipt and try_no > 0 then
  local keys, tokens = {}, {}
  for i = 2, #receipt - 1, 2 do
    if #keys >= max_jobs then break end
    keys[#keys + 1] = receipt[i]
    tokens[#tokens + 1] = receipt[i + 1]
  end
  if #keys > 0 then
    local recs = hmget(jobs, keys)
    local owner = owners(leases, keys, recs)
    for i, key in ipairs(keys) do
      local rec = recs[i]
      if owner[i] and owner[i] == tokens[i] and not seen[key] then
        seen[key] = true
        lease_keys[#lease_keys + 1] = key
        lease_recs[#lease_recs + 1] = rec
      end
    end
  end
  from_receipt = #lease_keys
end

-- A value in `jobs` that is not a record (written by hand, or damaged) must not stop the
-- rest of the batch: it goes to the dead queue as it is, for someone to look at.
local function bury_corrupt(key, rec)
  redis.call('ZREM', scheduled, key)
  redis.call('ZREM', retry, key)
  redis.call('ZREM', active, key)
  redis.call('HDEL', leases, key) -- (checked: a damaged record makes the call check leases)
  -- wrapped as a format-1 record: readable by every dq
  redis.call('HSET', jobs, key, pack_record(FORMAT.legacy, STATE.dead, 0, now, now, 0, rec))
  add_history(hist, key, read_history(hist, key), 0, now, HISTORY.buried, 'corrupt record')
  redis.call('ZADD', dead, now, key)
  count(stats, 'buried', 1)
  buried[#buried + 1] = key
  emit(ev, EVENT.dead, key, nil, 'corrupt record')
end

-- 1. expired leases: deadline < now
local expired = redis.call('ZRANGEBYSCORE', active, '-inf', string.format('(%d', now),
  'LIMIT', 0, recover_batch)
if #expired > 0 then
  -- (rare) recovery writes before the reads below: check every key the call may touch
  local bad = check_types({scheduled, 'zset', retry, 'zset', ready, 'list', dead, 'zset',
    jobs, 'hash', hist, 'hash', stats, 'hash', leases, 'hash', kept, 'hash', kept_at, 'zset',
    progress, 'hash', pready, 'zset', gready, 'zset', groups, 'zset', gwait, 'zset',
    gactive, 'zset', gctl, 'hash'})
  if bad then return bad end
  -- Redis 7 does not reseed math.random between calls (older versions reset it to one
  -- seed): either way, the caller's seed makes this call's draws its own.
  math.randomseed(seed)
end
-- (a receipt's job, seen above, is leased again below and not charged)
for _, key in ipairs(expired) do
  local rec = not seen[key] and redis.call('HGET', jobs, key)
  if is_newer(rec) then
    met_newer(active, key, rec)
    break
  end
  if not seen[key] then
    redis.call('ZREM', active, key)
    local group = rec and is_record(rec) and GROUP.of(rec)
    if group then GROUP.done(gs, {group, key}) end
    -- running: a format-1/2 record in state A; a lean one with a lease (which ends here)
    local running = false
    if rec and is_record(rec) then
      if is_lean(rec) then
        running = redis.call('HGET', leases, key) ~= false
        if running then redis.call('HDEL', leases, key) end
      else
        running = state_of(rec) == STATE.active
      end
    end
    if rec and not is_record(rec) then
      bury_corrupt(key, rec)
    elseif running and redis.call('HEXISTS', control, cancel_field(key)) == 1 then
      -- its cancel was requested while it ran: it ends as cancelled, never retried
      drop_cancelled(active, jobs, hist, stats, control, leases, progress, key,
        keeps(keep_by, KEPT.cancelled) and {kept, kept_at, keep_by, now} or nil, ev, ob)
      cancelled_keys[#cancelled_keys + 1] = key
    elseif running then
      local _, _, due, _, token = unpack_record(rec)
      local attempts = started(rec)
      count(stats, 'expired', 1)
      redis.call('HDEL', progress, key)
      add_history(hist, key, read_history(hist, key), attempts, now, HISTORY.lease_expired, 'lease expired')
      local delay, verdict = retry_delay(policy, attempts, math.random())
      if verdict == 'discard' then
        -- a retry function's decision for this attempt: deleted with its history, counted
        redis.call('HDEL', jobs, key)
        redis.call('HDEL', hist, key)
        count(stats, 'discarded', 1)
        emit(ev, EVENT.discarded, key, attempts, 'lease expired')
        if ob then BATCH.note(ob, rec, key, BATCH.OUTCOME.discarded) end
      elseif delay then
        local at = bound_due(now + delay, now)
        redis.call('HSET', jobs, key, with_header(rec, STATE.retry, attempts, at, token))
        redis.call('ZADD', retry, slot_score(retry, at), key)
        count(stats, 'retried', 1)
        emit(ev, EVENT.failed, key, attempts, 'lease expired', at)
      else
        bury(dead, jobs, stats, key, rec, now, attempts)
        buried[#buried + 1] = key
        emit(ev, EVENT.dead, key, attempts, 'lease expired')
        if ob then BATCH.note(ob, rec, key, BATCH.OUTCOME.dead) end
      end
    end
  end
end
if #buried > 0 then
  trimmed = trimmed + trim_dead(dead, jobs, hist, stats, now, dead_cap, retention, 100)
end

-- The GCRA of a rate of `n` jobs per `ms` (the topic's share, or a group's): the emission
-- interval, the burst tolerance (~50 ms worth of the rate), the theoretical arrival time from
-- the stored `tat` (nil: none), and how many jobs may start now.
local function gcra(n, ms, tat)
  local t = ms / n
  local tau = math.max(0, 50 - t)
  tat = math.max(tat or 0, now)
  return t, tau, tat, math.floor((now + tau - tat) / t) + 1
end

-- Limits: how many this call may lease beyond its receipt's jobs (already active).
local limited = false -- a limit, not the worker's room, capped this call
local limit_wait = -1 -- ms until the limit may allow more; -1: a wake-up or a lease expiry
local rate_t, rate_tau, rate_tat
if has_control then
  local allowed = max_jobs - from_receipt
  local until_ms = tonumber(ctl[2])
  if ctl[1] == '1' then
    allowed = 0
  elseif until_ms and until_ms > now then
    allowed, limit_wait = 0, until_ms - now
  end
  local conc = tonumber(ctl[3])
  if conc and allowed > 0 then
    local room = conc - redis.call('ZCARD', active)
    if room < allowed then allowed = math.max(room, 0) end
  end
  local rate_n, rate_ms = tonumber(ctl[4]), tonumber(ctl[5])
  if rate_n and rate_ms and rate_n > 0 and allowed > 0 then
    local budget
    rate_t, rate_tau, rate_tat, budget = gcra(rate_n, rate_ms, tonumber(ctl[6]))
    if budget < allowed then
      allowed = math.max(budget, 0)
      limit_wait = -2 -- computed once the leases are counted
    end
  end
  if from_receipt + allowed < max_jobs then
    limited = true
    max_jobs = from_receipt + allowed
  end
end

-- 2. (reads) ready jobs, FIFO: LRANGE one more than wanted, to know whether more are left,
--    and one HMGET; stale hints are skipped, and all read entries are trimmed at the end.
local corrupt_keys, corrupt_recs = {}, {}
local function corrupt(key, rec)
  seen[key] = true
  corrupt_keys[#corrupt_keys + 1] = key
  corrupt_recs[#corrupt_recs + 1] = rec
end
-- Jobs whose expiry came before they started: deleted with the writes (never leased).
local expired_keys, expired_recs = {}, {}
-- Leases the ready jobs a due queue's hints named (`keys`, their records `recs`, in queue
-- order): a job `held` names is running (a stale hint, whatever its expiry says), one whose
-- expiry has come is dropped with the writes, the others are leased.
local function lease_hinted(keys, recs, held)
  for j, key in ipairs(keys) do
    if held[key] then
      -- left alone
    elseif is_expired(recs[j], now) then
      expired_keys[#expired_keys + 1] = key
      expired_recs[#expired_keys] = recs[j]
    else
      lease_keys[#lease_keys + 1] = key
      lease_recs[#lease_recs + 1] = recs[j]
    end
  end
end

-- pready's members read by this call (leased, expired, damaged or stale hints): removed with
-- the writes. A newer record among them stops the pass there (left with what is behind it).
local pready_read = {}
-- How many members pready holds: one read per fetch (it refuses a key of another type before
-- any write of the passes below); a topic without priorities reads pready no further.
local pready_n = redis.call('ZCARD', pready)
-- Leases `pready`'s ready jobs scored in [lo, hi) (its priorities' band) while room is left.
local function take_pready(lo, hi)
  local offset, rounds = 0, 0
  while pready_n > 0 and #lease_keys < max_jobs and rounds < 4 and not stopped[pready] do
    rounds = rounds + 1
    local want = max_jobs - #lease_keys
    local got = redis.call('ZRANGEBYSCORE', pready, string.format('%d', lo),
      string.format('(%d', hi), 'LIMIT', offset, want)
    if #got == 0 then return end
    offset = offset + #got
    local recs = hmget(jobs, got)
    local cand_keys, cand_recs = {}, {}
    for i, key in ipairs(got) do
      local rec = recs[i]
      if rec and is_newer(rec) then
        met_newer(pready, key, rec)
        break
      end
      pready_read[#pready_read + 1] = key
      if rec and not is_record(rec) then
        if not seen[key] then corrupt(key, rec) end
      elseif rec and state_of(rec) == STATE.ready and not seen[key]
          and priority_of(rec) ~= NORMAL_PRIORITY and not GROUP.of(rec) then
        -- (a grouped job's is a stale hint: it waits in gready, within its group's limits)
        seen[key] = true
        cand_keys[#cand_keys + 1] = key
        cand_recs[#cand_recs + 1] = rec
      end
    end
    -- (every record in pready is lean: format 5 on)
    lease_hinted(cand_keys, cand_recs, held_leases(leases, cand_keys))
    if #got < want then return end
  end
end
-- Groups (lib.lua's groups section): the groups whose turn it is are served in rounds, each
-- leasing at most its weight per round, while room is left and its limits allow; a group
-- that gets to the end of its queue leaves the rotation, one held back by its cap, rate or
-- hold waits in gwait, one served that still has work gets a turn at the back. At most
-- GROUP_SCAN groups are looked at (group.rs): the cost of a fetch does not grow with the
-- number of groups. Reads only; the writes come with the others (`write_groups`).
local GROUP_SCAN = 32
-- Groups looked at beyond the room left (group.rs GROUP_SPARE).
local GROUP_SPARE = 4
local GROUP_ROUNDS = 64
-- How long a group at its cap waits if no job of its ends meanwhile (group.rs CAP_RECHECK).
local CAP_RECHECK_MS = 2000
-- Whether any group has work: one EXISTS for a topic without groups.
local has_groups = redis.call('EXISTS', groups, gwait) > 0
local cands = nil -- the groups looked at, in order (built on the first pass)
local serial = 0 -- counts the groups' services: the last served get the last turns
local gread = {} -- gready's members read (leased, stale, expired, damaged): removed
local gleased = {} -- members of gactive for the grouped jobs leased
-- A group's budget by its limits: how many it may start now (math.huge: no limit), and why
-- it may start no more ('cap', 'rate' or 'hold') with when to look again.
local function group_budget(st)
  if st.hold and st.hold > now then return 0, 'hold', st.hold end
  local allow = math.huge
  local l = st.limits
  if not l then return allow end
  if l.conc then
    local lo, hi = GROUP.range(st.group)
    st.running = redis.call('ZLEXCOUNT', gactive, lo, hi)
    allow = l.conc - st.running
    if allow <= 0 then return 0, 'cap', now + CAP_RECHECK_MS end
  end
  if l.rate_n then
    local budget
    st.rate_t, st.rate_tau, st.tat, budget = gcra(l.rate_n, l.rate_ms, st.tat)
    if budget <= 0 then
      return 0, 'rate', math.max(now + 1, math.ceil(st.tat - st.rate_tau))
    end
    if budget < allow then allow = budget end
  end
  return allow
end
local function group_candidates()
  cands = {}
  local names, from_wait = {}, {}
  -- (no more than the room left and a few for groups that turn out empty: a small fetch reads
  -- a few groups' settings, not GROUP_SCAN's)
  local scan = math.min(GROUP_SCAN, max_jobs - #lease_keys + GROUP_SPARE)
  -- (at most half of them groups whose wait ended: many groups at their cap, looked at again
  -- every CAP_RECHECK_MS, never crowd out the rotation)
  local waited = math.max(1, math.floor(scan / 2))
  for _, g in ipairs(redis.call('ZRANGEBYSCORE', gwait, '-inf', now, 'LIMIT', 0, waited)) do
    names[#names + 1] = g
    from_wait[g] = true
  end
  if #names < scan then
    for _, g in ipairs(redis.call('ZRANGE', groups, 0, scan - 1 - #names)) do
      if not from_wait[g] then names[#names + 1] = g end
    end
  end
  if #names == 0 then return end
  local fields = {'*'}
  for i, g in ipairs(names) do
    fields[3 * i - 1], fields[3 * i], fields[3 * i + 1] = 'l:' .. g, 't:' .. g, 'h:' .. g
  end
  local vals = hmget(gctl, fields)
  local default = GROUP.limits(vals[1])
  for i, g in ipairs(names) do
    local st = {group = g, waited = from_wait[g], offset = 0, leased = 0,
      limits = GROUP.limits(vals[3 * i - 1]) or default,
      tat = tonumber(vals[3 * i]), hold = tonumber(vals[3 * i + 1])}
    st.allow, st.why, st.until_ms = group_budget(st)
    cands[#cands + 1] = st
  end
end
-- Leases up to `want` grouped jobs, round by round over the groups.
local function take_groups(want)
  if not has_groups or want <= 0 then return end
  if not cands then group_candidates() end
  local left = math.min(want, max_jobs - #lease_keys)
  for _ = 1, GROUP_ROUNDS do
    -- (each takes its weight times m: a round per weight while room is short, fewer rounds
    -- when it is not: one group alone with room for 100 takes them in one read)
    local weights = 0
    for _, st in ipairs(cands) do
      if not st.done and st.allow > st.leased then
        weights = weights + (st.limits and st.limits.weight or 1)
      end
    end
    local m = math.max(1, math.floor(left / math.max(weights, 1)))
    -- This round's reads: each group's next members, then one HMGET and one lease lookup for
    -- all of them. (`planned`: the room this round's reads may fill.)
    local planned, round, keys = left, {}, {}
    for _, st in ipairs(cands) do
      if planned <= 0 then break end
      st.reached = true
      local n = math.min((st.limits and st.limits.weight or 1) * m, st.allow - st.leased,
        planned)
      if not st.done and n > 0 then
        serial = serial + 1
        st.served = serial
        local lo, hi = GROUP.range(st.group)
        local got = redis.call('ZRANGEBYLEX', gready, lo, hi, 'LIMIT', st.offset, n)
        st.offset = st.offset + #got
        if #got < n then st.done, st.empty = true, true end
        planned = planned - #got
        for _, member in ipairs(got) do
          round[#round + 1] = {st, member}
          keys[#keys + 1] = GROUP.key(st.group, member)
        end
      end
    end
    if #keys == 0 then break end
    local recs = hmget(jobs, keys)
    local cand, cand_keys = {}, {}
    for j, key in ipairs(keys) do
      local st, member, rec = round[j][1], round[j][2], recs[j]
      if st.stopped then
        -- behind a newer record of its group: left
      elseif rec and is_newer(rec) then
        -- left where it is, with the rest of its group's queue, for a newer worker
        met_newer(gready, key, rec)
        st.done, st.empty, st.stopped = true, false, true
      else
        gread[#gread + 1] = member
        if rec and not is_record(rec) then
          if not seen[key] then corrupt(key, rec) end
        elseif rec and state_of(rec) == STATE.ready and not seen[key]
            and GROUP.of(rec) == st.group then
          seen[key] = true
          cand[#cand + 1] = {st, key, rec}
          cand_keys[#cand_keys + 1] = key
        end
      end
    end
    local held = held_leases(leases, cand_keys)
    for _, c in ipairs(cand) do
      local st, key, rec = c[1], c[2], c[3]
      if held[key] then
        -- a stale hint of a running job
      elseif is_expired(rec, now) then
        expired_keys[#expired_keys + 1] = key
        expired_recs[#expired_keys] = rec
      else
        lease_keys[#lease_keys + 1] = key
        lease_recs[#lease_recs + 1] = rec
        gleased[#gleased + 1] = st.group .. '\0' .. key
        st.leased = st.leased + 1
        left = left - 1
      end
    end
    for _, st in ipairs(cands) do
      if st.leased >= st.allow and not st.why then
        -- its budget is spent: why, and until when
        if st.limits.rate_n and (not st.limits.conc
            or st.allow < st.limits.conc - st.running) then
          st.why = 'rate'
          local tat = st.tat + st.leased * st.rate_t
          st.until_ms = math.max(now + 1, math.ceil(tat - st.rate_tau))
        else
          st.why, st.until_ms = 'cap', now + CAP_RECHECK_MS
        end
      end
    end
    if left <= 0 then break end
  end
end
-- The group writes (after the other writes' reads): gready's read members go, the leased
-- jobs join gactive, the rates' times move on, and each group looked at leaves the rotation
-- (empty), waits (held back) or gets a turn at the back (served, work left); a group whose
-- wait ended and was not reached gets a turn at the back. Returns true when a group looked
-- at has work left that it may start now.
local function write_groups()
  if not cands then return false end
  if #gread > 0 then call_many('ZREM', gready, gread) end
  if #gleased > 0 then
    local members = {}
    for i, m in ipairs(gleased) do members[2 * i - 1], members[2 * i] = 0, m end
    call_many('ZADD', gactive, members)
  end
  local more = false
  local turns, waits, gone, unwait, tats = {}, {}, {}, {}, {}
  local place = GROUP.places(stats, #cands, false)
  -- (new turns in the order the groups were last served; those not served first)
  local order = {}
  for i, st in ipairs(cands) do
    order[i] = st
    st.at = i
  end
  table.sort(order, function(x, y)
    if (x.served or 0) ~= (y.served or 0) then return (x.served or 0) < (y.served or 0) end
    return x.at < y.at
  end)
  for _, st in ipairs(order) do
    local g = st.group
    if st.leased > 0 and st.rate_t then
      tats[#tats + 1] = 't:' .. g
      tats[#tats + 1] = string.format('%.3f', st.tat + st.leased * st.rate_t)
    end
    if st.empty then
      gone[#gone + 1] = g
      if st.waited then unwait[#unwait + 1] = g end
    elseif st.why then
      -- held back: waits (a group with nothing left is dropped when next looked at)
      gone[#gone + 1] = g
      waits[#waits + 1] = st.until_ms
      waits[#waits + 1] = g
    elseif st.reached or st.waited then
      turns[#turns + 1] = place()
      turns[#turns + 1] = g
      if st.waited then unwait[#unwait + 1] = g end
      more = more or st.reached
    end
  end
  if #tats > 0 then call_many('HSET', gctl, tats) end
  if #gone > 0 then call_many('ZREM', groups, gone) end
  if #unwait > 0 then call_many('ZREM', gwait, unwait) end
  if #waits > 0 then call_many('ZADD', gwait, waits) end
  if #turns > 0 then call_many('ZADD', groups, turns) end
  -- (more groups than were looked at may have work)
  return more or redis.call('ZCARD', groups) > #turns
end

-- 2g. grouped jobs: the whole room, or half of it while jobs of no group are queued (the
--     other half for them, below; a room of one goes to either, by the clock's parity)
if has_groups then
  local first = max_jobs - #lease_keys
  if pready_n > 0 or redis.call('LLEN', ready) > 0 then
    if first > 1 then first = math.floor(first / 2) elseif now % 2 == 1 then first = 0 end
  end
  take_groups(first)
end
-- 2a. the due jobs above normal priority
take_pready(0, NORMAL_READY_SCORE)

local consumed = 0
local ready_more = false
if max_jobs == 0 then
  ready_more = redis.call('LLEN', ready) > 0
end
local rounds = 0
local function take_ready()
  while #lease_keys < max_jobs and rounds < 4 and not stopped[ready] do
    rounds = rounds + 1
    local want = max_jobs - #lease_keys
    local got = redis.call('LRANGE', ready, consumed, consumed + want)
    ready_more = #got > want
    if ready_more then got[#got] = nil end
    if #got == 0 then break end
    consumed = consumed + #got
    local recs = hmget(jobs, got)
    -- this round's ready records, in list order; the lean ones are leasable only if `leases`
    -- does not hold them (a second hint of a job leased since: its record still says ready)
    local cand_keys, cand_recs, lean_keys = {}, {}, {}
    local function candidate(key, rec)
      seen[key] = true
      cand_keys[#cand_keys + 1] = key
      cand_recs[#cand_recs + 1] = rec
      if is_lean(rec) then lean_keys[#lean_keys + 1] = key end
    end
    for i, key in ipairs(got) do
      local rec = recs[i]
      -- the common case first, by bytes: a well-formed ready record of a format this dq reads
      -- (what is_record and state_of would say, without their calls)
      local b1, b2 = nil, nil
      if rec then b1, b2 = byte(rec, 1, 2) end
      if b1 == READY_BYTE and #rec >= HEADER_LEN and not seen[key] then
        candidate(key, rec)
      elseif b1 and b1 >= FIRST_VERSIONED and b1 <= NEWEST_FORMAT and b2 == READY_BYTE
          and #rec >= header_len(rec) then
        -- (a grouped job's hint here is stale: it waits in gready, within its group's limits;
        -- a record of format 6 on says so by its group length byte)
        if not seen[key] and (b1 < GROUP.FORMAT or byte(rec, GROUP.LEN_AT) == 0) then
          candidate(key, rec)
        end
      elseif rec and not is_record(rec) and is_newer(rec) then
        -- left in the list with every entry behind it; not work this fetch can do
        met_newer(ready, key, rec)
        consumed = consumed - #got + i - 1
        ready_more = false
        break
      elseif rec and not is_record(rec) then
        if not seen[key] then corrupt(key, rec) end
      end
    end
    lease_hinted(cand_keys, cand_recs, held_leases(leases, lean_keys))
    if not ready_more or stopped[ready] then break end
  end
end

-- 3. (reads) due jobs (score < now + 1) of scheduled and retry, merged by due ms (scheduled
--    first on a tie), at most room + ARGV[3], then by priority: those above normal are leased
--    while room is left before the ready list (2b: `take_ready`) is read, the others after
--    it (ready's jobs were due before them; below normal they join pready: 3b leases those);
--    at most ARGV[3] more move to the due queue for other fetchers, the rest stay in their
--    sets.
local room = max_jobs - #lease_keys
local limit = room + promote_batch
local s_list = redis.call('ZRANGEBYSCORE', scheduled, '-inf', string.format('(%d', now + 1),
  'WITHSCORES', 'LIMIT', 0, limit)
local r_list = redis.call('ZRANGEBYSCORE', retry, '-inf', string.format('(%d', now + 1),
  'WITHSCORES', 'LIMIT', 0, limit)
local taken, taken_from, from_set = {}, {}, {{}, {}}
local indexes = {scheduled, retry}
local si, ri = 1, 1
while #taken < limit and (si <= #s_list or ri <= #r_list) do
  local key, from
  if ri > #r_list or (si <= #s_list
      and math.floor(tonumber(s_list[si + 1])) <= math.floor(tonumber(r_list[ri + 1]))) then
    key, from, si = s_list[si], 1, si + 2
  else
    key, from, ri = r_list[ri], 2, ri + 2
  end
  taken[#taken + 1] = key
  taken_from[#taken] = from
end
local promote_more = #taken == limit and limit > 0
local records, hints, hint_recs = {}, {}, {}
local grouped_hints = false -- a grouped job among the hints (gready and groups are written)
-- taken's records, its order of priority then due time (taken's own unless a record of
-- another priority than normal is among them), priorities, and leased lean jobs (stale)
local recs_of, order, prio, held = {}, {}, {}, {}
if #taken > 0 then
  local recs = hmget(jobs, taken)
  local mixed = false
  for i = 1, #taken do
    order[i] = i
    prio[i] = is_record(recs[i]) and priority_of(recs[i]) or NORMAL_PRIORITY
    if prio[i] ~= NORMAL_PRIORITY then mixed = true end
  end
  if mixed then
    table.sort(order, function(a, b)
      if prio[a] ~= prio[b] then return prio[a] > prio[b] end
      return a < b
    end)
  end
  -- (a lean job found leased here is a stale entry: it is removed from the set, not leased)
  local lean_keys = {}
  for i, key in ipairs(taken) do
    local rec = recs[i]
    if rec and is_record(rec) and is_lean(rec) then lean_keys[#lean_keys + 1] = key end
  end
  held = held_leases(leases, lean_keys)
  recs_of = recs
end
-- Leases or queues taken[order[n]] for n from `start` on while its priority is at least
-- `least`; returns where it stopped.
local function take_due(start, least)
  local n = start
  while n <= #order and prio[order[n]] >= least do
    if #lease_keys >= max_jobs and #hints >= promote_batch then
      promote_more = true -- the rest stay in their sets
      break
    end
    local i = order[n]
    n = n + 1
    local key = taken[i]
    local rec = recs_of[i]
    local from = taken_from[i]
    local ok = is_record(rec)
    if stopped[indexes[from]] then
      -- behind a newer record of this index: left where it is
    elseif not ok and is_newer(rec) then
      met_newer(indexes[from], key, rec)
    else
      from_set[from][#from_set[from] + 1] = key
      local state = ok and state_of(rec)
      if rec and not ok and not seen[key] then
        corrupt(key, rec)
      elseif (state == STATE.scheduled or state == STATE.retry) and not seen[key]
          and not held[key] then
        seen[key] = true
        if is_expired(rec, now) then
          expired_keys[#expired_keys + 1] = key
          expired_recs[#expired_keys] = rec
        elseif #lease_keys < max_jobs and not GROUP.of(rec) then
          lease_keys[#lease_keys + 1] = key
          lease_recs[#lease_recs + 1] = rec
        else
          local _, attempts, due, _, old_token = unpack_record(rec)
          -- (a grouped one waits for its group's turn: queued in gready)
          if not grouped_hints and GROUP.of(rec) then grouped_hints = true end
          local ready_rec = with_header(rec, STATE.ready, attempts, due, old_token)
          records[#records + 1] = key
          records[#records + 1] = ready_rec
          hints[#hints + 1] = key
          hint_recs[#hints] = ready_rec
        end
      end
    end
  end
  return n
end
-- Each priority band in turn: the found jobs above normal, the ready list (due before the
-- found ones), the found normal ones, pready's below normal (queued before the found ones),
-- the found ones below normal.
local rest = take_due(1, NORMAL_PRIORITY + 1)
take_ready()
rest = take_due(rest, NORMAL_PRIORITY)
take_pready(NORMAL_READY_SCORE, (MAX_PRIORITY + 1) * PRIO_SPAN)
take_due(rest, 0)
-- 3g. grouped jobs again, with the room left
take_groups(max_jobs - #lease_keys)
if stopped[scheduled] or stopped[retry] then promote_more = false end
local n_jobs = #lease_keys

-- 5a. (reads) a fetch that leases nothing audits a few records (see 5 below).
local scan
if n_jobs == 0 then
  local cursor = redis.call('HGET', stats, 'audit_cursor') or '0'
  -- a damaged cursor would make HSCAN fail: start over instead
  if #cursor > 19 or not string.find(cursor, '^%d+$') then cursor = '0' end
  scan = redis.call('HSCAN', jobs, cursor, 'COUNT', 32)
end

-- Every key the writes below touch has been read, but these (rare, or idle) paths':
local checks = {}
if #corrupt_keys > 0 or n_jobs == 0 then
  checks = {dead, 'zset', hist, 'hash', leases, 'hash', kept, 'hash', kept_at, 'zset',
    groups, 'zset', gwait, 'zset', gready, 'zset'}
elseif #expired_keys > 0 then
  checks = {hist, 'hash', kept, 'hash', kept_at, 'zset'}
end
-- (the group keys the writes touch and no read checked: gactive for grouped jobs leased;
-- gready and groups for grouped jobs queued when no group was looked at. When groups were
-- looked at, ZRANGE of groups, ZRANGEBYSCORE of gwait, HMGET of gctl and ZRANGEBYLEX of
-- gready, all before any write, refused a key of another type.)
if #gleased > 0 then
  checks[#checks + 1] = gactive; checks[#checks + 1] = 'zset'
end
if grouped_hints and not cands then
  for _, k in ipairs({gready, 'zset', groups, 'zset'}) do checks[#checks + 1] = k end
end
local bad = check_types(checks)
if bad then return bad end

-- Writes. The token counter first (it raises only if stats is not a hash).
-- The reply, built in place: six header slots (filled at the end), then key, record, token
-- of each job leased, then the buried and newer keys.
local out = {0, 0, 0, 0, 0, 0}
local receipt_out = {try_no} -- this call's receipt: try, then key, token of each job leased
local legacy_writes, lease_writes = {}, {}
if n_jobs > 0 then
  -- one counter bump for the whole call; tokens are base+1 .. base+max_jobs
  local token = next_tokens(stats, max_jobs)
  -- (as the string redis.call sends: a number is formatted once, not once per job)
  local deadline = string.format('%d', now + lease)
  local members = {}
  for i, key in ipairs(lease_keys) do
    token = token + 1
    local rec = lease_recs[i]
    if is_lean(rec) then
      -- a lean lease: the record stays as it is; the token goes into `leases`
      lease_writes[#lease_writes + 1] = key
      lease_writes[#lease_writes + 1] = token
    else
      -- a receipt's job keeps its attempt: its earlier lease never reached a worker
      rec = leased_record(rec, token, i <= from_receipt and 0 or 1)
      legacy_writes[#legacy_writes + 1] = key
      legacy_writes[#legacy_writes + 1] = rec
    end
    -- (indexes computed once: a table append by #t costs a length walk each)
    receipt_out[2 * i] = key
    receipt_out[2 * i + 1] = token
    members[2 * i - 1] = deadline
    members[2 * i] = key
    out[3 * i + 4] = key
    out[3 * i + 5] = rec
    out[3 * i + 6] = token
    -- (a receipt's job was started by the try whose reply was lost: no second event)
    if ev and i > from_receipt then emit(ev, EVENT.started, key, started(rec)) end
  end
  -- With a member longer than 64 bytes Redis stores `active` as a skiplist (it keeps that
  -- encoding until the set is empty): a small sorted set is otherwise a flat listpack, where
  -- every insert scans and shifts the whole set, many times the cost of a job's other work at
  -- a busy worker's batch sizes. The hint (NUL bytes: never a job key) leaves in the same call.
  members[#members + 1] = 0
  members[#members + 1] = ACTIVE_ENCODING_HINT
  call_many('ZADD', active, members)
  redis.call('ZREM', active, ACTIVE_ENCODING_HINT)
  if rate_t and n_jobs > from_receipt then
    rate_tat = rate_tat + (n_jobs - from_receipt) * rate_t
    redis.call('HSET', control, 'tat', string.format('%.3f', rate_tat))
  end
end
for i, key in ipairs(corrupt_keys) do bury_corrupt(key, corrupt_recs[i]) end
if #expired_keys > 0 then
  if keeps(keep_by, KEPT.expired) then
    local hists, entries = hmget(hist, expired_keys), {}
    for i, key in ipairs(expired_keys) do
      local rec = expired_recs[i]
      local _, attempts = unpack_record(rec)
      entries[i] = {key, pack_kept(KEPT.expired, now, 0, attempts, nil, nil, hists[i] or nil, nil,
        rec)}
    end
    keep_jobs(kept, kept_at, keep_by, KEPT.expired, now, entries)
    trim_kept(kept, kept_at, stats, keep_by, now, #entries + 16)
  end
  -- (their index entries go with the others: ready is trimmed, the due sets' ZREM below)
  call_many('HDEL', jobs, expired_keys)
  call_many('HDEL', hist, expired_keys)
  count(stats, 'expired_before_start', #expired_keys)
  for _, key in ipairs(expired_keys) do emit(ev, EVENT.expired, key) end
  if ob then
    for i, key in ipairs(expired_keys) do BATCH.note(ob, expired_recs[i], key, BATCH.OUTCOME.expired) end
  end
end
if consumed > 0 then redis.call('LTRIM', ready, consumed, -1) end
-- the leases: lean ones in `leases`, format-1/2 records rewritten; then the records promoted
if #lease_writes > 0 then
  -- `leases` as a hash table, not a listpack (where every field is found by a scan of the
  -- whole hash, and every write shifts it): a field longer than hash-max-listpack-value
  -- (64) converts it, and Redis never converts a hash back. The field leaves in this call.
  lease_writes[#lease_writes + 1] = ACTIVE_ENCODING_HINT
  lease_writes[#lease_writes + 1] = '0'
  call_many('HSET', leases, lease_writes)
  redis.call('HDEL', leases, ACTIVE_ENCODING_HINT)
end
if #legacy_writes > 0 then call_many('HSET', jobs, legacy_writes) end
if #records > 0 then call_many('HSET', jobs, records) end
if #pready_read > 0 then call_many('ZREM', pready, pready_read) end
-- (the groups first: a group this call emptied and whose due jobs it queues gets its turn back)
local groups_left = write_groups()
if #hints > 0 then push_ready_many(q, hints, hint_recs) end
call_many('ZREM', scheduled, from_set[1])
call_many('ZREM', retry, from_set[2])
local ready_left = ready_more or #hints > 0 or groups_left
-- (pready's members this call did not read: due jobs left, unless behind a newer record)
if not ready_left and not stopped[pready] and pready_n > #pready_read then
  ready_left = true
end

-- 5. (idle fetches only) audit a few records: one whose sorted-set entry is missing (deleted by
--    hand, or a damaged restore) would otherwise wait for ever. Re-link it where its state
--    says; a ready record is re-hinted only when ready is empty (the one cheap proof it has no
--    hint). The HSCAN cursor lives in stats, so successive idle fetches walk the whole `jobs` hash.
--    Records this call has just moved (seen) were read before the move: they are skipped.
local repaired = 0
if scan then
  redis.call('HSET', stats, 'audit_cursor', scan[1])
  -- (a ready list stopped at a newer record is not empty, though nothing is left for this dq)
  local ready_empty = not ready_left and not stopped[ready]
  local entries = scan[2]
  for i = 1, #entries, 2 do
    local key, rec = entries[i], entries[i + 1]
    if seen[key] then
      -- moved (or buried) by this call
    elseif is_newer(rec) then
      newer[#newer + 1] = key -- a newer dq's: reported, never touched
      newer[#newer + 1] = format_of(rec)
    elseif not is_record(rec) then
      bury_corrupt(key, rec)
    else
      local state, _, due = unpack_record(rec)
      -- a lean record is running while `leases` holds it, whatever its state byte says
      if is_lean(rec) and redis.call('HEXISTS', leases, key) == 1 then state = STATE.active end
      if state == STATE.scheduled and not redis.call('ZSCORE', scheduled, key) then
        redis.call('ZADD', scheduled, slot_score(scheduled, due), key)
        repaired = repaired + 1
      elseif state == STATE.retry and not redis.call('ZSCORE', retry, key) then
        redis.call('ZADD', retry, slot_score(retry, due), key)
        repaired = repaired + 1
      elseif state == STATE.active and not redis.call('ZSCORE', active, key) then
        redis.call('ZADD', active, now, key) -- recovered as an expired lease next time
        repaired = repaired + 1
      elseif state == STATE.dead and not redis.call('ZSCORE', dead, key) then
        redis.call('ZADD', dead, now, key)
        repaired = repaired + 1
      elseif state == STATE.ready and GROUP.of(rec) then
        -- (its hint is a member of gready, not found by key: a group with no member at all
        -- gets this one's again; a group with members must have a turn or a wait)
        local g = GROUP.of(rec)
        local lo, hi = GROUP.range(g)
        if redis.call('ZLEXCOUNT', gready, lo, hi) == 0 then
          push_ready(q, key, rec)
          ready_left = true
          repaired = repaired + 1
        elseif not redis.call('ZSCORE', groups, g) and not redis.call('ZSCORE', gwait, g) then
          redis.call('ZADD', groups, GROUP.places(stats, 1, false)(), g)
          ready_left = true
          repaired = repaired + 1
        end
      elseif state == STATE.ready and priority_of(rec) ~= NORMAL_PRIORITY then
        -- (its hint, if any, is its member of pready: found by key)
        if not redis.call('ZSCORE', pready, key) then
          push_ready(q, key, rec)
          ready_left = true
          repaired = repaired + 1
        end
      elseif state == STATE.ready and ready_empty then
        redis.call('RPUSH', ready, key)
        ready_left = true
        repaired = repaired + 1
      end
    end
  end
  if repaired > 0 then count(stats, 'repaired', repaired) end
end

-- 4. what next
local next_ms = -1
if limited and (ready_left or promote_more) then
  -- a limit holds due work back: no chained wake-up; come back when it may allow more, or
  -- when the earliest lease expires (to recover it)
  if limit_wait == -2 then
    -- until half the burst (at least one job) is allowed again: batches, not a poll per job
    local k = math.max(1, math.floor(rate_tau / rate_t / 2))
    limit_wait = math.max(1, math.ceil(rate_tat - rate_tau + (k - 1) * rate_t - now))
  end
  next_ms = limit_wait
  local head = redis.call('ZRANGE', active, 0, 0, 'WITHSCORES')
  if head[2] then
    local wait = math.max(0, math.floor(tonumber(head[2])) + 1 - now)
    if stopped[active] then wait = math.max(wait, NEWER_WAIT_MS) end
    if next_ms < 0 or wait < next_ms then next_ms = wait end
  end
elseif ready_left or promote_more or repaired > 0 then
  next_ms = 0
  if n_jobs > 0 then wake(wake_key) end
else
  for _, z in ipairs({scheduled, retry, active, gwait}) do
    local head = redis.call('ZRANGE', z, 0, 0, 'WITHSCORES')
    if head[2] then
      local at = math.floor(tonumber(head[2]))
      if z == active then at = at + 1 end -- a lease expires once now > deadline
      local wait = at - now
      if wait < 0 then wait = 0 end
      if stopped[z] then wait = math.max(wait, NEWER_WAIT_MS) end
      if next_ms < 0 or wait < next_ms then next_ms = wait end
    end
  end
  if n_jobs == 0 and retention > 0 then
    trimmed = trimmed + trim_dead(dead, jobs, hist, stats, now, dead_cap, retention, 100)
  end
  -- kept jobs go when their time comes, also while nothing finishes (kept and kept_at are
  -- checked above on a fetch that leased nothing)
  if n_jobs == 0 then trim_kept(kept, kept_at, stats, keep_by, now, 100) end
end

-- 6. the receipt: only for a call that leased something (or a retry, whose receipt also
--    tells a stale earlier try that it is stale); and the receipts whose replies arrived go.
if n_jobs > 0 or try_no > 0 then
  redis.call('SET', receipt_key, cmsgpack.pack(receipt_out), 'PX', receipt_ms)
end
for i = 26, #KEYS do redis.call('DEL', KEYS[i]) end
end_unique(uniq, uniq_at, now, expired_keys, buried)
if #cancelled_keys > 0 then end_unique(uniq, uniq_at, now, cancelled_keys) end

out[1], out[2], out[3], out[4], out[5], out[6] = now, next_ms, trimmed, n_jobs, #buried,
  #newer / 2
for _, k in ipairs(buried) do out[#out + 1] = k end
for _, v in ipairs(newer) do out[#out + 1] = v end
flush_events(ev)
return out
