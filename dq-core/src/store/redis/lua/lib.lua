-- lib.lua: helpers shared by every dq script; prepended to each script's body at load time.
--
-- A job record is one value in the partition's `jobs` hash, field = job key. Its first byte
-- says which format wrote it (FORMAT below; ARCHITECTURE.md §4):
--   format 1 (legacy, no version byte): the 20-byte header, then the payload;
--   format 2: the version byte 0x02, then the same 20-byte header, then the payload.
--   The 20-byte header, struct '>c1BI6I6I6':
--     state    1 char   STATE below (S scheduled, R ready, A active, F retry, D dead)
--     attempts u8      attempts started (a release or a deferral gives one back)
--     due      u48     due time, ms (for F: the next attempt; for D: unchanged)
--     created  u48     first enqueue, ms
--     token    u48     delivery token of the current/last lease (0 before the first)
--   followed by the payload bytes, opaque here.
-- Version rules: a first byte that is a state letter is format 1; a first byte in
-- 2..FORMAT.max is that format; a format above NEWEST_FORMAT is newer than this dq reads
-- (`is_newer`): such a record is never consumed, moved, rewritten, buried or deleted; anything
-- else is not a record (corrupt). A record moved from one state to another keeps its format
-- (`with_header`); new records are written in the format the caller names.
-- A job's failed attempts live in the `hist` hash (same field), a cmsgpack array of
-- {attempt, at_ms, code, error}; codes: HISTORY below.
--
-- Sorted-set scores are `due + k / 4096`, k one more than that of the last job already in the
-- set for the same millisecond (at most 2047), so jobs due in the same millisecond come out in
-- the order they were queued. A job is due when its score is below now + 1. Due times are
-- capped at MAX_DUE, the largest value the record's 48-bit field holds.

-- The job states, by name: the letter each is stored as (a record's first byte) and answered
-- as. The one place a script spells a state letter: JobState::code in Rust is held to this
-- table by a test, which also fails on a state letter written anywhere else.
local STATE = {scheduled = 'S', ready = 'R', active = 'A', retry = 'F', dead = 'D'}

-- Which states exist, by byte (a record's state is checked as a byte: no string is made for
-- it on the hot path).
local IS_STATE_BYTE = {}
for _, letter in pairs(STATE) do IS_STATE_BYTE[string.byte(letter)] = true end

-- How an attempt ended, as a history entry's code (AttemptOutcome in Rust).
local HISTORY = {failed = 'F', lease_expired = 'L', deferred = 'd', buried = 'B'}

-- The newest record format this script reads. The loader writes a lower number here for a
-- process that reads less (a dq acting as an older one: ClientBuilder::format_level), so the
-- line must stay exactly `local NEWEST_FORMAT = <n>` (scripts.rs, tied by a test).
local NEWEST_FORMAT = 2
-- Record formats (dq-core/src/format.rs, tied by a test): `legacy` has no version byte;
-- a first byte in 2..max is a version byte.
local FORMAT = {legacy = 1, versioned = 2, max = 31}
-- The same, as locals for the helpers below (a table field costs a lookup per record).
local LEGACY_FORMAT, FIRST_VERSIONED, MAX_FORMAT = FORMAT.legacy, FORMAT.versioned, FORMAT.max

local HEADER = '>c1BI6I6I6'
-- The header of a versioned record: its version byte, then HEADER.
local VERSIONED_HEADER = '>Bc1BI6I6I6'
-- The header of a format-1 record; a versioned record has its version byte before it.
local HEADER_LEN = 20
local MAX_HISTORY = 32
local MAX_ERROR_LEN = 1024
local CUT_MARK = '… [cut from '

-- An error text as a history keeps it (job.rs `truncate_error`, bound by a test): at most
-- MAX_ERROR_LEN bytes; a longer one is cut where a UTF-8 character starts and ends with
-- CUT_MARK, its length in bytes and ']'.
local function cut_error(err)
  if #err <= MAX_ERROR_LEN then return err end
  local marker = CUT_MARK .. #err .. ' bytes]'
  local keep = MAX_ERROR_LEN - #marker
  -- the byte after the kept ones must not be a continuation byte (10xxxxxx)
  while keep > 0 do
    local b = string.byte(err, keep + 1)
    if b < 0x80 or b >= 0xC0 then break end
    keep = keep - 1
  end
  return string.sub(err, 1, keep) .. marker
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The format a value says it was written in (any number, newer ones too), or nil when its
-- first byte is neither a version byte nor a state letter (not a record).
local function format_of(rec)
  local b = string.byte(rec, 1)
  if not b then return nil end
  if b >= FIRST_VERSIONED and b <= MAX_FORMAT then return b end
  if IS_STATE_BYTE[b] then return LEGACY_FORMAT end
  return nil
end

-- The header length of a record of a format this dq reads: 20 for format 1, one more for
-- the version byte of a later one.
local function header_len(rec)
  if string.byte(rec, 1) <= MAX_FORMAT then return HEADER_LEN + 1 end
  return HEADER_LEN
end

-- True for a value of a format newer than this dq reads: left untouched, reported.
local function is_newer(rec)
  if not rec then return false end
  local b = string.byte(rec, 1)
  return b ~= nil and b > NEWEST_FORMAT and b <= MAX_FORMAT
end

-- True for a value that is a well-formed record of a format this dq reads: long enough for
-- its header, with a known state. (Hot: bytes only, no string made.)
local function is_record(rec)
  if not rec then return false end
  local b = string.byte(rec, 1)
  if not b then return false end
  if IS_STATE_BYTE[b] then return #rec >= HEADER_LEN end
  if b < FIRST_VERSIONED or b > NEWEST_FORMAT then return false end
  return #rec > HEADER_LEN and IS_STATE_BYTE[string.byte(rec, 2)] == true
end

-- The state letter of a record (is_record), read without decoding the header.
local function state_of(rec)
  if string.byte(rec, 1) <= MAX_FORMAT then return string.sub(rec, 2, 2) end
  return string.sub(rec, 1, 1)
end

-- Returns state, attempts, due, created, token of a record (the payload is not copied).
local function unpack_record(rec)
  local at = 1
  if string.byte(rec, 1) <= MAX_FORMAT then at = 2 end
  local state, attempts, due, created, token = struct.unpack(HEADER, rec, at)
  return state, attempts, due, created, token
end

-- A record of `format` (one this dq reads): its header, then `payload`.
local function pack_record(format, state, attempts, due, created, token, payload)
  if attempts > 255 then attempts = 255 end
  if attempts < 0 then attempts = 0 end
  if due < 0 then due = 0 end
  if format == LEGACY_FORMAT then
    return struct.pack(HEADER, state, attempts, due, created, token) .. payload
  end
  return struct.pack(VERSIONED_HEADER, format, state, attempts, due, created, token) .. payload
end

-- The format of a record as `pack_record` takes it (the record's own).
local function record_format(rec)
  local b = string.byte(rec, 1)
  if b <= MAX_FORMAT then return b end
  return LEGACY_FORMAT
end

-- The error a script answers, before any write, when an operation names a newer record:
-- Rust reads it as Error::NewerFormat (scripts.rs `script_error`).
local function newer_error(rec)
  return redis.error_reply('ERR dq newer format ' .. format_of(rec))
end

-- Variadic commands take many arguments, but Lua's unpack only a few thousand at once.
local SLICE = 4000

-- Runs `cmd key args...` over `args` in slices (keep pairs whole: SLICE is even).
local function call_many(cmd, key, args)
  for i = 1, #args, SLICE do
    redis.call(cmd, key, unpack(args, i, math.min(i + SLICE - 1, #args)))
  end
end

-- HMGET over any number of fields; the result is aligned with `fields` (false: missing).
local function hmget(key, fields)
  local out = {}
  for i = 1, #fields, SLICE do
    local part = redis.call('HMGET', key, unpack(fields, i, math.min(i + SLICE - 1, #fields)))
    for j = 1, #part do out[#out + 1] = part[j] end
  end
  return out
end

-- ---- never fail after a write ----
-- Redis does not roll a script back: whatever it wrote before an error stays. So a script
-- checks everything that could fail before its first write: its arguments and its records
-- (is_record). A command that meets a key of another type fails (WRONGTYPE); a key's first
-- command fails the call cleanly if it is a read, or if it is the call's first write. So a
-- script reads before it writes where that is free, and checks (check_types) only the keys
-- that the path taken first touches after a write; each script's header says which. After
-- the first write only commands that cannot fail on the data they meet are used: counters go
-- through `count`, tokens through `next_tokens`, histories through `add_history`, wake-ups
-- through `wake`, which never raise.

-- Returns an error reply if a key holds another type than the one given, nil if all are well
-- (or absent). `types` is a flat list: key, type, key, type, ... (one O(1) TYPE per key).
-- The error keeps Redis's own WRONGTYPE code, so callers classify it as before.
local function check_types(types)
  for i = 1, #types, 2 do
    local t = redis.call('TYPE', types[i]).ok
    if t ~= 'none' and t ~= types[i + 1] then
      return redis.error_reply('WRONGTYPE dq: ' .. types[i] .. ' holds a ' .. t
        .. ', not a ' .. types[i + 1] .. '; nothing written')
    end
  end
  return nil
end

-- Adds `n` (> 0) to the counter `field` of the stats hash, without ever failing: one HINCRBY
-- under pcall. HINCRBY refuses, writing nothing, a sum past 2^63 - 1, a value that is not an
-- integer, or a stats key that is not a hash; the counter is then left as it is: it saturates
-- at its maximum, it never wraps, and the call goes on.
local function count(stats, field, n)
  redis.pcall('HINCRBY', stats, field, n)
end

-- Tokens are 48 bits in a record: the largest is MAX_TOKEN.
local MAX_TOKEN = 281474976710655

-- Reserves `n` delivery tokens from the `token` counter of the stats hash and returns the
-- one before the first (the tokens are base+1 .. base+n): one HINCRBY. A counter that is not
-- an integer, negative, or past MAX_TOKEN starts again from 0 (tokens only have to differ
-- between the deliveries of one job; a restart after 2^48 tokens cannot meet a lease still
-- held under the same number). Raises only when stats is not a hash: the caller makes this
-- its first write or has checked stats.
local function next_tokens(stats, n)
  local top = redis.pcall('HINCRBY', stats, 'token', n)
  if type(top) == 'number' and top >= n and top <= MAX_TOKEN then return top - n end
  redis.call('HSET', stats, 'token', n)
  return 0
end

-- The delivery token of a record, read without copying the payload.
local function token_of(rec)
  if string.byte(rec, 1) <= MAX_FORMAT then return (struct.unpack('>I6', rec, 16)) end
  return (struct.unpack('>I6', rec, 15))
end

-- Rewrites the header of `rec` in place of the old one, keeping its format, `created` and
-- the payload.
local function with_header(rec, state, attempts, due, token)
  local format = record_format(rec)
  local len = format == LEGACY_FORMAT and HEADER_LEN or HEADER_LEN + 1
  local created = struct.unpack('>I6', rec, len - 11) -- no second full decode
  return pack_record(format, state, attempts, due, created, token, string.sub(rec, len + 1))
end

-- The latest due time a record can hold (48 bits): about the year 10889.
local MAX_DUE = 281474976710655

-- A due time as stored: not before `now`, not past MAX_DUE.
local function bound_due(due, now)
  if due < now then due = now end
  if due > MAX_DUE then due = MAX_DUE end
  return due
end

-- The sorted-set score for a job due at `due` that joins `zset` now: after every job already
-- there for the same millisecond, so that enqueue order is kept within the millisecond.
-- (A per-partition counter modulo 2048 would wrap and put later jobs first.)
local function slot_score(zset, due)
  local last = redis.call('ZREVRANGEBYSCORE', zset, string.format('(%d', due + 1), due,
    'WITHSCORES', 'LIMIT', 0, 1)
  local k = 0
  if last[2] then
    k = math.floor((tonumber(last[2]) - due) * 4096 + 0.5) + 1
    if k > 2047 then k = 2047 end
  end
  return due + k / 4096
end

-- For jobs due at `due` that join `zset` now: the k of the slot after every job already there
-- for that millisecond (0 if none), as slot_score finds it, with one O(log n) lookup done
-- before the caller's first write; a caller that places several jobs due in one millisecond
-- looks it up once and counts on locally (k, k + 1, ..., capped at 2047 as in slot_score),
-- which keeps their order. With `earliest` the lookup also covers every earlier millisecond
-- and the second result says whether `zset` holds no job due before due + 1 (then a job placed
-- at `due` is its new earliest); without, the range is that millisecond only, which Redis
-- answers without a walk when it lies past the last (or before the first) member.
local function slot_after(zset, due, earliest)
  local last = redis.call('ZREVRANGEBYSCORE', zset, string.format('(%d', due + 1),
    earliest and '-inf' or due, 'WITHSCORES', 'LIMIT', 0, 1)
  if not last[2] then return 0, true end
  local score = tonumber(last[2])
  if score < due then return 0, false end
  return math.floor((score - due) * 4096 + 0.5) + 1, false
end

-- A job's history entries, to pass to `add_history`; a read, so a caller can do it before
-- its first write. A stored history that does not decode (damaged) counts as empty: it is
-- started afresh rather than failing the script after its first writes.
local function read_history(hist, key)
  local old = redis.call('HGET', hist, key)
  if old then
    local ok, decoded = pcall(cmsgpack.unpack, old)
    if ok and type(decoded) == 'table' then return decoded end
  end
  return {}
end

-- Appends one attempt to a job's bounded history, `entries` as read by `read_history`.
local function add_history(hist, key, entries, attempt, at, code, err)
  entries[#entries + 1] = {attempt, at, code, cut_error(err)}
  while #entries > MAX_HISTORY do table.remove(entries, 1) end
  redis.call('HSET', hist, key, cmsgpack.pack(entries))
end

-- Pushes one wake-up token unless one is already waiting (the list never grows past 1).
-- Never fails: a wake key of another type (damage) only loses this nudge; the fetchers'
-- BLPOP on that key reports the damage.
local function wake(wake_key)
  if redis.pcall('LLEN', wake_key) == 0 then
    redis.call('RPUSH', wake_key, '1')
  end
end

-- Removes at most `limit` dead jobs older than the retention or beyond the cap.
-- Returns how many were removed, and counts them in stats.trimmed. Writes dead, jobs and
-- hist: a caller that has written before has checked or read all three.
local function trim_dead(dead, jobs, hist, stats, now, cap, retention, limit)
  local removed = 0
  local old = redis.call('ZRANGEBYSCORE', dead, '-inf', string.format('(%d', now - retention), 'LIMIT', 0, limit)
  for _, k in ipairs(old) do
    redis.call('ZREM', dead, k)
    redis.call('HDEL', jobs, k)
    redis.call('HDEL', hist, k)
    removed = removed + 1
  end
  local excess = redis.call('ZCARD', dead) - cap
  if excess > 0 then
    if excess > limit - removed then excess = limit - removed end
    if excess > 0 then
      local oldest = redis.call('ZPOPMIN', dead, excess)
      for i = 1, #oldest, 2 do
        redis.call('HDEL', jobs, oldest[i])
        redis.call('HDEL', hist, oldest[i])
        removed = removed + 1
      end
    end
  end
  if removed > 0 then count(stats, 'trimmed', removed) end
  return removed
end

-- Moves an active/failed job to the dead queue.
local function bury(dead, jobs, stats, key, rec, now)
  local _, attempts, due, _, token = unpack_record(rec)
  redis.call('HSET', jobs, key, with_header(rec, STATE.dead, attempts, due, token))
  redis.call('ZADD', dead, now, key)
  count(stats, 'buried', 1)
end

-- Removes a job from whichever waiting structure holds it (ready hints are left to go stale).
local function unlink(state, scheduled, retry, dead, key)
  if state == STATE.scheduled then
    redis.call('ZREM', scheduled, key)
  elseif state == STATE.retry then
    redis.call('ZREM', retry, key)
  elseif state == STATE.dead then
    redis.call('ZREM', dead, key)
  end
end

-- The state a waiting job has at `due`: ready if due now, else `later` (scheduled or retry).
local function waiting_state(due, now, later)
  if due <= now then return STATE.ready end
  return later
end

-- Queues a job whose record is already written with `waiting_state(due, now, ...)`:
-- onto `ready` if due now, else into `zset` (scheduled or retry) at `score`, the
-- `slot_score(zset, due)` the caller read before its first write.
-- Returns true when a fetcher should be woken: the job is ready, or is the new earliest.
local function place(zset, ready, key, due, now, score)
  if due <= now then
    redis.call('RPUSH', ready, key)
    return true
  end
  redis.call('ZADD', zset, score, key)
  local head = redis.call('ZRANGE', zset, 0, 0)
  return head[1] == key
end

-- The partition's control hash (KEYS name `control`) holds the topic's pause, limits and
-- throttle, and one field per running job whose cancel was requested: 'x:' .. key -> token.
local function cancel_field(key)
  return 'x:' .. key
end

-- Deletes an active job whose cancel was requested while it ran: gone, counted as
-- cancelled, never retried. Callers have read (or type-checked) every key first.
local function drop_cancelled(active, jobs, hist, stats, control, key)
  redis.call('ZREM', active, key)
  redis.call('HDEL', jobs, key)
  redis.call('HDEL', hist, key)
  redis.call('HDEL', control, cancel_field(key))
  count(stats, 'cancelled', 1)
end

-- ---- retry delays: the Lua mirror of RetryPolicy::delay_with (dq-core/src/retry.rs) ----
-- A test runs these on Redis against the Rust function over many (policy, attempt, draw)
-- triples: change both or neither.

-- Reads a retry policy from `args` (ARGV) at `from`, as RetryPolicy::script_args writes it:
-- kind, jitter %, then none (0): nothing; tiered (1): delay ms of each retry; fixed (2):
-- delay ms, retries; exponential (3): initial ms, max ms, retries.
-- Returns the policy, or nil and the reason it is malformed.
local function read_retry_policy(args, from)
  local kind, pct = tonumber(args[from]), tonumber(args[from + 1])
  if not kind or not pct or pct < 0 or pct > 100 then return nil, 'retry policy' end
  local nums = {}
  for i = from + 2, #args do
    local n = tonumber(args[i])
    if not n or n < 0 then return nil, 'retry policy numbers' end
    nums[#nums + 1] = n
  end
  if kind == 0 and #nums == 0 then
    return {retries = 0, pct = 0}
  elseif kind == 1 and #nums <= 100 then
    return {retries = #nums, pct = pct, delays = nums}
  elseif kind == 2 and #nums == 2 and nums[2] <= 100 then
    return {retries = nums[2], pct = pct, fixed = nums[1]}
  elseif kind == 3 and #nums == 3 and nums[1] > 0 and nums[2] >= nums[1] and nums[3] <= 100 then
    return {retries = nums[3], pct = pct, initial = nums[1], max = nums[2]}
  end
  return nil, 'retry policy kind'
end

-- `base` ms plus its jitter share for the draw `unit` in [0, 1): base + floor(base * pct *
-- unit / 100), in this order (doubles, as in Rust).
local function jittered(base, pct, unit)
  if pct == 0 then return base end
  if unit < 0 then unit = 0 elseif unit > 1 then unit = 1 end
  return base + math.floor(base * pct * unit / 100)
end

-- The delay in ms before the next attempt after attempt `attempt` failed, for the draw
-- `unit`; nil when the job is out of attempts (it is dead).
local function retry_delay(policy, attempt, unit)
  if attempt < 1 or attempt > policy.retries then return nil end
  if policy.delays then return jittered(policy.delays[attempt], policy.pct, unit) end
  if policy.fixed then return jittered(policy.fixed, policy.pct, unit) end
  if policy.initial then
    -- exactly doubling in whole ms, capped at max
    local base = policy.initial
    for _ = 2, attempt do
      base = base * 2
      if base >= policy.max then base = policy.max break end
    end
    if base > policy.max then base = policy.max end
    return math.min(jittered(base, policy.pct, unit), policy.max)
  end
  return nil
end

-- ---- end of lib.lua ----
