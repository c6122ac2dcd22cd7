-- enqueue: store one or many new jobs in one partition.
--
-- KEYS[1] scheduled  dq:{topic#p}:scheduled  ZSET key -> due score
-- KEYS[2] retry      dq:{topic#p}:retry      ZSET key -> next attempt score
-- KEYS[3] ready      dq:{topic#p}:ready      LIST of keys (hints)
-- KEYS[4] dead       dq:{topic#p}:dead       ZSET key -> died ms
-- KEYS[5] jobs       dq:{topic#p}:jobs       HASH key -> record
-- KEYS[6] hist       dq:{topic#p}:hist       HASH key -> attempt history
-- KEYS[7] stats      dq:{topic#p}:stats      HASH counters
-- KEYS[8] wake       dq:{topic#p}:wake       LIST wake-up tokens
-- KEYS[9] calls      dq:{topic#p}:calls      ZSET outcomes of applied calls that did not
--                                            create every job: 'o<id hex>:<outcomes>' -> ms
-- KEYS[10] receipts  dq:{topic#p}:receipts:<b>      STRING receipts, current generation
-- KEYS[11] old_receipts dq:{topic#p}:receipts:<b>:old STRING receipts, the generation before
--   (<b>: the call id's low byte, two hex digits; any pair works as long as every try of a
--   call names the same one)
-- KEYS[12] leases    dq:{topic#p}:leases     HASH key -> token: the leases of lean records
--                                            (read only for a key whose lean record exists)
-- KEYS[13] control   dq:{topic#p}:control    HASH: only its `events` and `max_delay` fields
--                                            are read (one HMGET); `batched` is written
--                                            when a job of a batch is stored (the scripts
--                                            that end jobs note a member's end then)
-- KEYS[14] events    dq:{topic#p}:events     STREAM: one `enqueued` event per job created or
--                                            replaced, when the partition records events
-- KEYS[15] uniq      dq:{topic#p}:uniq       HASH key -> unique_for ms of a live job (written
--                                            for a job enqueued with one)
-- KEYS[16] uniq_at   dq:{topic#p}:uniq_at    ZSET key -> when its window ends (ms): read for
--                                            every call (a TYPE, then ZMSCORE if it exists),
--                                            written by a throttle
-- KEYS[17] pready    dq:{topic#p}:pready     ZSET the due queue of jobs whose priority is not
--                                            normal (lib.lua `push_ready`)
-- KEYS[18] gready    dq:{topic#p}:gready     ZSET the due queue of grouped jobs, and the
-- KEYS[19] groups    dq:{topic#p}:groups     ZSET groups' rotation (lib.lua `push_grouped`)
--
-- ARGV[1]            n, the number of jobs
-- ARGV[2]            call id: 8 bytes, big-endian; the same for every try of one client call
-- ARGV[3]            '0' first try, '1' a retry after an ambiguous error
-- ARGV[4]            the record format to write new records in (1..NEWEST_FORMAT: the
--                    store's `formats().write()`); a replaced job's record is written anew
--                    in it too
-- then per job i (5 arguments each, starting at ARGV[5 + 5*(i-1)]):
--   key              job key
--   mode             'n' due now | 'd' delay (value = ms from Redis TIME) | 'a' at (value = Unix ms),
--                    optionally followed by the job's expiry: '+<ms>' that long after the due
--                    time asked for (> 0; a due time in the past counts from it, not from
--                    now), or '@<Unix ms>' at that time (after its due time); only with
--                    a record format of 4 or more (ARGV[4]); then optionally the job's
--                    priority: '!<0..9>' (absent: normal, 5), other than 5 only with a
--                    record format of 5 or more; then optionally '|' and the
--                    key's window: 'u<ms>' unique_for, 'b<ms>' debounce (mode 'n' only: due
--                    ms from now, and a waiting job of the key is replaced), 't<ms>' throttle
--                    (ms > 0); then optionally '~' and the id of the batch the job is a
--                    member of (1 to 128 bytes of [A-Za-z0-9._:-]; only with a record format
--                    of 7 or more); then optionally '#' and the job's group (1 to 64 bytes, no
--                    control character; only with a record format of 6 or more). A job
--                    replacing a member of a batch without naming one stays its member.
--   value            integer ms (ignored for 'n')
--   replace          '1' replace an existing non-running job, '0' keep it
--   payload          bytes
--
-- Every argument is checked before the first write; a bad one writes nothing.
--
-- Receipts: a call that created or replaced a job appends a 14-byte entry, its id (8 bytes)
-- and the time (6 bytes, ms), to `receipts`, the current generation of its bucket. A retry
-- whose id is found there or in `old_receipts` was applied by an earlier try whose reply was
-- lost: it writes nothing and reports what is there now, so a job that has run since is not
-- created again. Generations: `receipts` starts (with its first entry, and an expiry of
-- 2 * RECEIPT_MS) when absent; a call that finds its first entry RECEIPT_MS old or more first
-- RENAMEs it to `old_receipts` (dropping the generation before) and starts a new one. An
-- entry is written while its generation is younger than RECEIPT_MS, and that generation is
-- dropped only by the rotation after next, itself RECEIPT_MS after the next generation
-- started, or by its expiry, 2 * RECEIPT_MS after it started: so every receipt is kept at
-- least RECEIPT_MS, at most 2 * RECEIPT_MS. A first try costs one GETRANGE (the generation's
-- age) and one APPEND (plus a RENAME and a PEXPIRE once per generation); a retry's lookup
-- reads the two strings of its bucket and scans them for its id at entry boundaries.
-- Bounds: a first try does O(1) receipt work (APPEND is amortised O(1)); a retry's lookup is
-- O(the bucket's entries), 14 bytes per call of that bucket (1/256 of the partition's calls,
-- by the id's low byte) in the last 2 * RECEIPT_MS at most.
--
-- What the applied try did per job: a job it created or replaced carries the try's time as
-- its `created` ms, the receipt's time. A call that did not create every one of its jobs
-- (rare) also stores its outcomes, one character per job, as the member
-- 'o' .. hex(id) .. ':' .. outcomes of `calls`, scored with that time (found again among the
-- few members of that score); a call that created all its jobs, the common case, stores
-- nothing more. Outcomes are kept at least 2 * RECEIPT_MS (each such call removes up to TRIM
-- older ones; the set expires 2 * RECEIPT_MS after the last one), so a receipt never
-- outlives its outcomes. A retry reports '+' / '~' again for a job the earlier try created
-- or replaced that is still there (same `created` ms and payload, in any state).
--
-- Order: jobs due in the same millisecond keep their enqueue order (lib.lua: scores
-- due + k / 4096). Each distinct due millisecond of the call is looked up once (slot_after),
-- before any write, and the call counts on from there; the lookup of the call's earliest
-- due ms also covers every earlier one, which tells whether that job is earlier than every
-- job already scheduled (then a fetcher's timer may be set too late: wake one). A single
-- job costs one lookup in all.
--
-- Returns an array with one string per job:
--   '+'  created (by this try, or by an earlier try of this call: the job is still there)
--   '~'  replaced (the old job removed; attempts and history start again); also on a retry,
--        as '+'
--   'S' | 'R' | 'A' | 'F' | 'D'  a job with this key exists in that state; nothing written
--   ('A' is also the answer with replace: a running job is never replaced)
--   'E'  (retries only) an earlier try of this call was applied, and the job is gone since
--        (it ran, or was cancelled or purged); nothing written
--   'U<ms>' the key is inside a window (`uniq_at`: a finished unique_for job's, or a throttle's)
--        ending at <ms>; nothing written for it. Checked first: it refuses the key whether
--        a job holds it or not. Debounce: a waiting job is replaced ('~', due now + ms); a
--        running one is reported 'A'
-- Errors: 'ERR dq bad arguments: ...' when the arguments are malformed (an expiry with a
-- record format below 4 too); 'ERR dq expiry not after due: job <i>' when a job's expiry
-- is not after its due time by Redis's clock; 'ERR dq delay too long: job <i> <ms> <max ms>'
-- when a job's due time is more than control's `max_delay` from now; 'WRONGTYPE dq: ...'
-- when a key holds another type; 'ERR dq newer format <f>' when a key names a record of a
-- newer format than this dq reads (lib.lua `is_newer`): nothing written in each case.
--
-- Never fails after a write: the call reads jobs, scheduled (one lookup per due ms) and the
-- age of `receipts` (a GETRANGE that fails cleanly on a damaged key), then decides every
-- job, then writes, the receipt first. Checked before that: ready when a job is due at once
-- (its first touch is a write after the receipt); scheduled (not read when every job is due
-- at once), retry, dead and hist when a job is replaced (rare); calls when outcomes are
-- stored (rare); old_receipts when a generation is rotated (RENAME would overwrite it: a
-- damaged one is reported rather than replaced). Counters and wake-ups cannot fail.

local scheduled, retry, ready, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local jobs, hist, stats, wake_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local calls, receipts, old_receipts, leases = KEYS[9], KEYS[10], KEYS[11], KEYS[12]
local control, events = KEYS[13], KEYS[14]
local uniq, uniq_at = KEYS[15], KEYS[16]
local pready = KEYS[17]
local q = due_queue(ready, pready, stats, KEYS[18], KEYS[19])
local RECEIPT_MS = 30000
local ENTRY = 14
local TRIM = 64

-- The first job's arguments.
local FIRST = 5
local n, call, is_retry = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local format = tonumber(ARGV[4])
if not n or n < 1 or #ARGV ~= FIRST - 1 + 5 * n then
  return redis.error_reply('ERR dq bad arguments: job count does not match')
end
if #call ~= 8 or (is_retry ~= '0' and is_retry ~= '1') then
  return redis.error_reply('ERR dq bad arguments: call')
end
if not format or format ~= math.floor(format) or format < FORMAT.legacy
    or format > NEWEST_FORMAT then
  return redis.error_reply('ERR dq bad arguments: record format')
end
-- A job's mode argument without its group, and the group (nil for none, false for a bad
-- one: empty, over 64 bytes, or with a control character).
local function split_group(arg)
  local hash = string.find(arg, '#', 1, true)
  if not hash then return arg, nil end
  local group = string.sub(arg, hash + 1)
  if #group == 0 or #group > 64 or string.find(group, '[%z\1-\31\127]') then
    return string.sub(arg, 1, hash - 1), false
  end
  return string.sub(arg, 1, hash - 1), group
end
-- A job's mode argument (without its group) split at its batch: the rest, then the batch
-- id (nil for none, false for a bad one).
local function split_batch(arg)
  local tilde = string.find(arg, '~', 1, true)
  if not tilde then return arg, nil end
  local batch = string.sub(arg, tilde + 1)
  if #batch == 0 or #batch > 128 or string.find(batch, '[^%w%._:%-]') then
    return string.sub(arg, 1, tilde - 1), false
  end
  return string.sub(arg, 1, tilde - 1), batch
end
-- A job's mode argument split: the mode (letter and expiry), then its window's kind ('u',
-- 'b' or 't') and ms, nil for none, false for a malformed one.
local function split_mode(arg)
  local bar = string.find(arg, '|', 1, true)
  if not bar then return arg, nil end
  local kind, ms = string.sub(arg, bar + 1, bar + 1), tonumber(string.sub(arg, bar + 2))
  if (kind ~= 'u' and kind ~= 'b' and kind ~= 't') or not ms or ms <= 0
      or ms ~= math.floor(ms) or ms > MAX_DUE then
    return string.sub(arg, 1, bar - 1), false
  end
  return string.sub(arg, 1, bar - 1), kind, ms
end
-- A job's mode argument taken apart: its expiry ('+' and the ms after due, or '@' and Unix
-- ms; nil for none) and its priority (NORMAL_PRIORITY when not given); false for a malformed
-- one. (The due letter is checked by the caller.)
local function mode_spec(mode)
  if #mode == 1 then return nil, nil, NORMAL_PRIORITY end
  local kind, digits, bang, level = string.match(mode, '^.([+@]?)(%d*)(!?)(%d*)$')
  if not kind or (kind == '') ~= (digits == '') or (bang == '') ~= (level == '') then
    return false
  end
  local ms, priority = nil, NORMAL_PRIORITY
  if kind ~= '' then
    ms = tonumber(digits)
    if ms <= 0 then return false end
  else
    kind = nil
  end
  if bang ~= '' then
    priority = tonumber(level)
    if #level ~= 1 or priority > MAX_PRIORITY then return false end
  end
  return kind, ms, priority
end
for i = 0, n - 1 do
  local base = FIRST + 5 * i
  local spec, group = split_group(ARGV[base + 1])
  local batch
  spec, batch = split_batch(spec)
  local mode, window = split_mode(spec)
  local value, replace = ARGV[base + 2], ARGV[base + 3]
  local letter = string.sub(mode, 1, 1)
  if ARGV[base] == '' or (letter ~= 'n' and letter ~= 'd' and letter ~= 'a')
      or not tonumber(value) or (replace ~= '0' and replace ~= '1')
      or mode_spec(mode) == false or window == false
      or (window == 'b' and letter ~= 'n') or group == false or batch == false then
    return redis.error_reply('ERR dq bad arguments: job ' .. (i + 1))
  end
  if batch and format < FORMAT.batch then
    return redis.error_reply('ERR dq bad arguments: a batch needs record format 7')
  end
  if group and format < FORMAT.group then
    return redis.error_reply('ERR dq bad arguments: a group needs record format 6')
  end
  local kind, _, priority = mode_spec(mode)
  if kind and format < FORMAT.expiring then
    return redis.error_reply('ERR dq bad arguments: an expiry needs record format 4')
  end
  if priority ~= NORMAL_PRIORITY and format < FORMAT.priority then
    return redis.error_reply('ERR dq bad arguments: a priority needs record format 5')
  end
end

-- A read of a receipt generation (`cmd` is GET or GETRANGE): its value, or nil and a
-- WRONGTYPE error reply when the key holds something else than a string.
local function read_receipts(key, cmd, ...)
  local v = redis.pcall(cmd, key, ...)
  if type(v) == 'table' and v.err then
    return nil, redis.error_reply('WRONGTYPE dq: ' .. key .. ' holds a '
      .. redis.call('TYPE', key).ok .. ', not a string; nothing written')
  end
  return v
end

-- The ms at which `call` was applied according to generation `gen` (a string of ENTRY-byte
-- entries, or false), or nil. Only matches at entry boundaries count; the last one wins.
local function applied_in(gen)
  if not gen then return nil end
  local found
  local from = 1
  while true do
    local at = string.find(gen, call, from, true)
    if not at then return found end
    if (at - 1) % ENTRY == 0 and at + ENTRY - 1 <= #gen then
      found = struct.unpack('>I6', gen, at + 8)
      from = at + ENTRY
    else
      from = at + 1
    end
  end
end

local function hex(s)
  return (string.gsub(s, '.', function(c) return string.format('%02x', string.byte(c)) end))
end

local now = now_ms()
-- (read before any write: a control key of another type is refused here)
local settings = redis.pcall('HMGET', control, 'events', 'max_delay')
if settings.err then
  return redis.error_reply('WRONGTYPE dq: ' .. control .. ' holds a '
    .. redis.call('TYPE', control).ok .. ', not a hash; nothing written')
end
local events_setting, max_delay = settings[1], tonumber(settings[2])
local keys = {}
for i = 0, n - 1 do keys[i + 1] = ARGV[FIRST + 5 * i] end
-- The keys' windows: one TYPE for a topic without any, else ZMSCORE in slices.
local window_ends = {}
local uniq_at_type = redis.call('TYPE', uniq_at).ok
if uniq_at_type == 'zset' then
  for i = 1, n, SLICE do
    local part = redis.call('ZMSCORE', uniq_at, unpack(keys, i, math.min(i + SLICE - 1, n)))
    for j = 1, #part do window_ends[i + j - 1] = part[j] end
  end
elseif uniq_at_type ~= 'none' then
  return redis.error_reply('WRONGTYPE dq: ' .. uniq_at .. ' holds a ' .. uniq_at_type
    .. ', not a zset; nothing written')
end
local olds = hmget(jobs, keys)
-- A key that holds a newer dq's record: this dq can neither read nor replace it.
for i = 1, n do
  if is_newer(olds[i]) then return newer_error(olds[i]) end
end
-- The keys whose lean record exists and is running (a lease in `leases`): reported as active,
-- never replaced. One HMGET, only when such a record exists (rare for an enqueue).
local running = {}
local lean_keys = {}
for i = 1, n do
  local old = olds[i]
  if old and is_record(old) and is_lean(old) then lean_keys[#lean_keys + 1] = keys[i] end
end
if #lean_keys > 0 then
  local held = hmget(leases, lean_keys)
  for j, key in ipairs(lean_keys) do
    if held[j] then running[key] = true end
  end
end
-- The state of an existing record, as a job is reported (running: active).
local function existing_state(key, old)
  if running[key] then return STATE.active end
  return state_of(old)
end
local applied
if is_retry == '1' then
  local current, bad = read_receipts(receipts, 'GET')
  if bad then return bad end
  local older, bad_old = read_receipts(old_receipts, 'GET')
  if bad_old then return bad_old end
  applied = applied_in(current) or applied_in(older)
end
if applied then
  -- An earlier try of this call was applied at `applied` ms: report, write nothing.
  -- The try's outcomes, if it stored them: among the members of its score (the calls of one
  -- millisecond that did not create every job), the one that starts with 'o' .. id .. ':'.
  local outcomes
  local mark = 'o' .. hex(call) .. ':'
  for _, m in ipairs(redis.call('ZRANGE', calls, applied, applied, 'BYSCORE')) do
    if string.sub(m, 1, #mark) == mark then outcomes = string.sub(m, #mark + 1) end
  end
  local results = {}
  for i = 0, n - 1 do
    local old = olds[i + 1]
    local then_ = outcomes and string.sub(outcomes, i + 1, i + 1) or '+'
    local ends = tonumber(window_ends[i + 1])
    if then_ == 'U' and ends then
      results[i + 1] = 'U' .. string.format('%d', ends)
    elseif not old then
      results[i + 1] = 'E'
    elseif not is_record(old) then
      results[i + 1] = STATE.dead -- a damaged value is no job of this call's; nothing written
    else
      -- Still the job that try stored: created at its time, with this call's payload (a job
      -- stored in the same ms by another call would have to carry the same payload too).
      local _, _, _, created = unpack_record(old)
      local state = existing_state(keys[i + 1], old)
      local payload = ARGV[FIRST + 5 * i + 4]
      local len = header_len(old)
      if (then_ == '+' or then_ == '~') and created == applied
          and #old == len + #payload and string.sub(old, len + 1) == payload then
        results[i + 1] = then_
      else
        results[i + 1] = state
      end
    end
  end
  return results
end

-- Decide every job first (reads only): `now_state` is a key's state after the jobs before
-- it in this call, so a key named twice behaves as in two calls.
local results, records, hints = {}, {}, {}
-- priority, key of each job due at once whose priority is not normal (for pready)
local phints = {}
-- key, record of each grouped job due at once (for gready: lib.lua `push_grouped`)
local ghints = {}
-- One character per job for `calls` ('U' for a window's refusal), and the window writes.
local letters, uniq_set, uniq_del, throttles = {}, {}, {}, {}
local window_until = {}
-- The moves (jobs created or replaced), in call order, as parallel arrays (no table per job):
-- key, the state to unlink (or false), due ms (nil when due at once), then score.
local move_key, move_unlink, move_at = {}, {}, {}
local now_state, last_move = {}, {}
-- the batch id ('' for none) of each key's record written by a job before it in this call
local now_batch = {}
local replaced = false
local any_member = false -- a job of a batch stored: control's `batched` is written
local earliest_new
-- Every new record's header ends with created = now and token 0: packed once per call; it
-- starts with the version byte of a versioned format.
local header_tail = struct.pack('>I6I6', now, 0)
-- (a lean record has no token: created ends its header)
if format >= FORMAT.lean then header_tail = struct.pack('>I6', now) end
local version = ''
if format ~= FORMAT.legacy then version = string.char(format) end
for i = 0, n - 1 do
  local base = FIRST + 5 * i
  local key, mode, value, replace, payload =
    ARGV[base], ARGV[base + 1], tonumber(ARGV[base + 2]), ARGV[base + 3], ARGV[base + 4]
  local window, window_ms, group, batch
  mode, group = split_group(mode)
  mode, batch = split_batch(mode)
  mode, window, window_ms = split_mode(mode)
  local kind, expiry_ms, priority = mode_spec(mode)
  mode = string.sub(mode, 1, 1)
  local outcome = '+'
  local old = olds[i + 1]
  -- (a damaged value answers its first byte, as before records carried a format)
  local state = now_state[key]
    or (old and (is_record(old) and existing_state(key, old) or string.sub(old, 1, 1)))
  local asked_due = now
  if mode == 'd' then asked_due = now + value elseif mode == 'a' then asked_due = value end
  if window == 'b' then asked_due = now + window_ms end
  if max_delay and asked_due - now > max_delay then
    return redis.error_reply(string.format('ERR dq delay too long: job %d %d %d', i + 1,
      asked_due - now, max_delay))
  end
  local ends = window_until[key] or tonumber(window_ends[i + 1])
  if ends and ends > now then
    outcome = 'U'
  elseif state then
    local waiting = state == STATE.scheduled or state == STATE.ready or state == STATE.retry
    if (replace == '1' and state ~= STATE.active) or (window == 'b' and waiting) then
      outcome = '~'
      replaced = true
    else
      outcome = state
    end
  end
  if outcome == '+' or outcome == '~' then
    local due = asked_due
    if window == 'u' then
      uniq_set[#uniq_set + 1] = key
      uniq_set[#uniq_set + 1] = window_ms
    elseif outcome == '~' then
      uniq_del[#uniq_del + 1] = key
    end
    if window == 't' then
      window_until[key] = now + window_ms
      throttles[#throttles + 1] = now + window_ms
      throttles[#throttles + 1] = key
    end
    -- (an expiry after due counts from the due time asked for, even one already past)
    local asked = due
    due = bound_due(due, now)
    local new_state = waiting_state(due, now, STATE.scheduled)
    local expires = 0
    if kind == '+' then expires = asked + expiry_ms elseif kind == '@' then expires = expiry_ms end
    if kind and expires <= due then
      -- (the client checks only what needs no clock: this is the store clock's word, and
      -- no write has been made yet)
      return redis.error_reply('ERR dq expiry not after due: job ' .. (i + 1))
    end
    if expires > MAX_DUE then expires = MAX_DUE end
    records[#records + 1] = key
    -- pack_record(format, new_state, 0, due, now, 0, payload, expires, priority, group), with
    -- the header shared by the call packed once.
    if format >= FORMAT.expiring then
      -- format 4's expiry, then format 5's priority, then format 6's group
      local tail = struct.pack('>I6', expires)
      if format >= FORMAT.priority then tail = tail .. string.char(priority) end
      if format >= FORMAT.group then
        local g = group or ''
        tail = tail .. string.char(#g) .. g
      end
      if format >= FORMAT.batch then
        -- (a job replacing a batch's member without naming a batch stays its member: the
        -- batch waits for it; a key named before in this call replaces that job's record)
        local b = batch or (outcome == '~' and (now_batch[key]
          or (old and is_record(old) and batch_of(old)))) or ''
        now_batch[key] = b
        tail = tail .. string.char(#b) .. b
        if #b > 0 then any_member = true end
      end
      records[#records + 1] = version .. new_state .. '\0' .. struct.pack('>I6', due)
        .. header_tail .. tail .. payload
    else
      records[#records + 1] = version .. new_state .. '\0' .. struct.pack('>I6', due)
        .. header_tail .. payload
    end
    if new_state == STATE.ready then
      if group then
        ghints[#ghints + 1] = key
        ghints[#ghints + 1] = records[#records]
      elseif priority == NORMAL_PRIORITY then
        hints[#hints + 1] = key
      else
        phints[#phints + 1] = priority
        phints[#phints + 1] = key
      end
      due = nil
    elseif not earliest_new or due < earliest_new then
      earliest_new = due
    end
    -- The state to unlink: the one before the call, for a key's first move only (a later
    -- move of the same key supersedes the earlier placement of this call).
    local m = #move_key + 1
    move_key[m], move_at[m] = key, due
    move_unlink[m] = outcome == '~' and not last_move[key] and state
    last_move[key] = m
    now_state[key] = new_state
  end
  letters[i + 1] = outcome
  results[i + 1] = outcome == 'U' and 'U' .. string.format('%d', ends) or outcome
end
local moves = #move_key
if moves == 0 then return results end

-- Scores, in call order: one lookup per distinct due ms (the earliest one's also tells
-- whether anything was scheduled before it), then counting on.
local slots = {}
local new_earliest = false
if earliest_new then
  slots[earliest_new], new_earliest = slot_after(scheduled, earliest_new, true)
end
for m = 1, moves do
  local due = move_at[m]
  if due then
    local k = slots[due]
    if not k then k = slot_after(scheduled, due, false) end
    move_at[m] = due + math.min(k, 2047) / 4096
    slots[due] = k + 1
  end
end

-- The receipt's generation: its first entry's time is when it started.
local began, bad = read_receipts(receipts, 'GETRANGE', 8, 13)
if bad then return bad end
local rotate = false
if #began == 6 then
  rotate = now - struct.unpack('>I6', began) >= RECEIPT_MS
end
local partial = moves < n or replaced

local checks = {}
if #hints > 0 then checks = {ready, 'list'} end
if #phints > 0 then checks[#checks + 1] = pready; checks[#checks + 1] = 'zset' end
if #ghints > 0 then
  checks[#checks + 1] = q.gready; checks[#checks + 1] = 'zset'
  checks[#checks + 1] = q.groups; checks[#checks + 1] = 'zset'
end
if replaced then
  for _, t in ipairs({scheduled, 'zset', retry, 'zset', dead, 'zset', hist, 'hash'}) do
    checks[#checks + 1] = t
  end
end
if partial then checks[#checks + 1] = calls; checks[#checks + 1] = 'zset' end
if any_member then checks[#checks + 1] = control; checks[#checks + 1] = 'hash' end
if rotate then checks[#checks + 1] = old_receipts; checks[#checks + 1] = 'string' end
if #uniq_set > 0 or #uniq_del > 0 then checks[#checks + 1] = uniq; checks[#checks + 1] = 'hash' end
local bad_type = check_types(checks)
if bad_type then return bad_type end

-- Writes: the receipt first (and the outcomes, when not every job was created).
if rotate then redis.call('RENAME', receipts, old_receipts) end
local entry = call .. struct.pack('>I6', now)
local len = redis.call('APPEND', receipts, entry)
if len % ENTRY ~= 0 then
  -- Damaged (not whole entries, so none would be found again): start the generation afresh.
  redis.call('DEL', receipts)
  len = redis.call('APPEND', receipts, entry)
end
if len == ENTRY then redis.call('PEXPIRE', receipts, 2 * RECEIPT_MS) end
if partial then
  redis.call('ZADD', calls, now, 'o' .. hex(call) .. ':' .. table.concat(letters))
  redis.call('PEXPIRE', calls, 2 * RECEIPT_MS)
  local expired = redis.call('ZCOUNT', calls, '-inf', '(' .. (now - 2 * RECEIPT_MS))
  if expired > 0 then
    redis.call('ZREMRANGEBYRANK', calls, 0, math.min(expired, TRIM) - 1)
  end
end
-- Replaced jobs leave their old place; then each key's last placement of this call goes
-- into scheduled (one variadic ZADD), ready jobs' hints were collected in call order.
local zadd = {}
for i = 1, moves do
  local key, unlink_state, score = move_key[i], move_unlink[i], move_at[i]
  if unlink_state then
    unlink(unlink_state, scheduled, retry, dead, key)
    redis.call('HDEL', hist, key)
  end
  if score and last_move[key] == i then
    zadd[#zadd + 1] = score
    zadd[#zadd + 1] = key
  end
end
if #zadd > 0 then call_many('ZADD', scheduled, zadd) end
call_many('HSET', jobs, records)
if #uniq_set > 0 then call_many('HSET', uniq, uniq_set) end
if #uniq_del > 0 then call_many('HDEL', uniq, uniq_del) end
if #throttles > 0 then
  call_many('ZADD', uniq_at, throttles)
  trim_windows(uniq_at, now, #throttles / 2 + 16)
end
if #hints > 0 then call_many('RPUSH', ready, hints) end
if #phints > 0 then
  local place = ready_places(stats, #phints / 2, false)
  for i = 1, #phints, 2 do phints[i] = place(phints[i]) end
  call_many('ZADD', pready, phints)
end
if #ghints > 0 then push_grouped(q, ghints, false) end
if any_member then redis.call('HSET', control, 'batched', '1') end
count(stats, 'enqueued', moves)
local ev = events_of(events, events_setting, stats, now)
if ev then
  for i = 1, moves do
    local at = move_at[i]
    emit(ev, EVENT.enqueued, move_key[i], nil, nil, at and math.floor(at) or now)
  end
  flush_events(ev)
end
if #hints > 0 or #phints > 0 or #ghints > 0 or new_earliest then
  wake(wake_key)
end
return results
