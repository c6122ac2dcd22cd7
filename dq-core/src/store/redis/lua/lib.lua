-- lib.lua: helpers shared by every dq script: one Redis Functions library holds it and every
-- script body (scripts.rs builds it), and its top level runs once per load, on the first call.
--
-- A job record is one value in the partition's `jobs` hash, field = job key. Its first byte
-- says which format wrote it (FORMAT below; ARCHITECTURE.md §4):
--   format 1 (legacy, no version byte): the 20-byte header, then the payload;
--   format 2: the version byte 0x02, then the same 20-byte header, then the payload;
--   format 3 (lean): the version byte 0x03, then state, attempts, due, created (LEAN_HEADER:
--   15 bytes in all, no token), then the payload. A lease leaves a format-3 record as it is:
--   the job is running while the partition's `leases` hash holds its key (-> its delivery
--   token), its state byte keeps the waiting state it was leased from (never A), and its
--   attempts count the attempts finished (the running one is attempts + 1: `started`).
--   format 4 (expiring): format 3's header, then the expiry (u48 Unix ms, 0: none): 21 bytes.
--   format 5 (priority): format 4's header, then the priority (u8, 0..9; 5 normal): 22 bytes.
--   format 6 (group): format 5's header, then the length of the job's group (u8, 0: none):
--   23 bytes; then the group's bytes (`group_of`), then the payload.
--   format 7 (batch): format 6's header and group, then the length of the id of the job's
--   batch (u8, 0: none), then the id's bytes (`batch_of`), then the payload.
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
local NEWEST_FORMAT = 7
-- Record formats (dq-core/src/format.rs, tied by a test): `legacy` has no version byte;
-- a first byte in 2..max is a version byte.
-- `lean` is the first format whose lease leaves the record as it is (format.rs LEAN_FORMAT);
-- `expiring` the first whose header ends with the job's expiry (EXPIRING_FORMAT);
-- `priority` the first with the job's priority after it (PRIORITY_FORMAT); `group` the first
-- with the job's group after that (GROUP_FORMAT); `batch` the first with the job's batch
-- after its group (BATCH_FORMAT).
local FORMAT = {legacy = 1, versioned = 2, lean = 3, expiring = 4, priority = 5, group = 6, batch = 7, max = 31}
-- The same, as locals for the helpers below (a table field costs a lookup per record).
local LEGACY_FORMAT, FIRST_VERSIONED, MAX_FORMAT = FORMAT.legacy, FORMAT.versioned, FORMAT.max
local LEAN_FORMAT, EXPIRING_FORMAT, PRIORITY_FORMAT = FORMAT.lean, FORMAT.expiring, FORMAT.priority
local GROUP_FORMAT, BATCH_FORMAT = FORMAT.group, FORMAT.batch
-- A job's priority when its record has none (formats 1..4) or its enqueue gave none
-- (Priority::NORMAL in Rust, tied by a test); 0 is the lowest, 9 the highest.
local NORMAL_PRIORITY, MAX_PRIORITY = 5, 9

-- The string functions the hot paths call, as locals (a global table lookup each otherwise).
local byte, sub, char = string.byte, string.sub, string.char
-- The state byte of an active record, for the hot paths that read a record's state by byte.
local ACTIVE_BYTE = byte(STATE.active)

local HEADER = '>c1BI6I6I6'
-- The header of a versioned record: its version byte, then HEADER.
local VERSIONED_HEADER = '>Bc1BI6I6I6'
-- The header of a format-1 record; a format-2 record has its version byte before it.
local HEADER_LEN = 20
-- A format-3 record's header, after its version byte (no token), and its whole length.
local LEAN_HEADER = '>c1BI6I6'
local LEAN_HEADER_LEN = 15
-- A format-4 record's header: format 3's, then the expiry (u48 Unix ms, 0: none).
local EXPIRING_HEADER_LEN = 21
-- A format-5 record's header: format 4's, then the priority (u8).
local PRIORITY_HEADER_LEN = 22
-- A format-6 record's fixed header: format 5's, then the group's length (u8); the group's
-- bytes follow it.
local GROUP_HEADER_LEN = 23
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
    local b = byte(err, keep + 1)
    if b < 0x80 or b >= 0xC0 then break end
    keep = keep - 1
  end
  return sub(err, 1, keep) .. marker
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The format a value says it was written in (any number, newer ones too), or nil when its
-- first byte is neither a version byte nor a state letter (not a record).
local function format_of(rec)
  local b = byte(rec, 1)
  if not b then return nil end
  if b >= FIRST_VERSIONED and b <= MAX_FORMAT then return b end
  if IS_STATE_BYTE[b] then return LEGACY_FORMAT end
  return nil
end

-- Where a format-7 record's batch length byte is (after its group's bytes).
local function batch_len_at(rec)
  return GROUP_HEADER_LEN + (byte(rec, GROUP_HEADER_LEN) or 0) + 1
end

-- The header length of a record of a format this dq reads (where its payload starts): 20 for
-- format 1, one more for the version byte of format 2; format 6's counts its group's bytes,
-- format 7's its batch length byte and its batch id's bytes too.
local function header_len(rec)
  local b = byte(rec, 1)
  if b > MAX_FORMAT then return HEADER_LEN end
  if b >= BATCH_FORMAT then
    local at = batch_len_at(rec)
    return at + (byte(rec, at) or 0)
  end
  if b >= GROUP_FORMAT then return GROUP_HEADER_LEN + (byte(rec, GROUP_HEADER_LEN) or 0) end
  if b >= PRIORITY_FORMAT then return PRIORITY_HEADER_LEN end
  if b >= EXPIRING_FORMAT then return EXPIRING_HEADER_LEN end
  if b >= LEAN_FORMAT then return LEAN_HEADER_LEN end
  return HEADER_LEN + 1
end

-- The expiry of a record (format 4 on), Unix ms; 0 for none (and for every older format).
local function expiry_of(rec)
  local b = byte(rec, 1)
  if b >= EXPIRING_FORMAT and b <= MAX_FORMAT then return struct.unpack('>I6', rec, 16) end
  return 0
end

-- The priority of a record (format 5 on), 0..9; NORMAL_PRIORITY for every older format.
local function priority_of(rec)
  local b = byte(rec, 1)
  if b >= PRIORITY_FORMAT and b <= MAX_FORMAT then
    -- (a damaged byte above the highest counts as the highest: RecordHeader::decode too)
    local p = byte(rec, PRIORITY_HEADER_LEN)
    if p > MAX_PRIORITY then return MAX_PRIORITY end
    return p
  end
  return NORMAL_PRIORITY
end

-- The group of a record (format 6 on), or nil for none (and for every older format).
local function group_of(rec)
  local b = byte(rec, 1)
  if b >= GROUP_FORMAT and b <= MAX_FORMAT then
    local n = byte(rec, GROUP_HEADER_LEN)
    if n and n > 0 then return sub(rec, GROUP_HEADER_LEN + 1, GROUP_HEADER_LEN + n) end
  end
  return nil
end

-- The id of the batch a record is a member of (format 7 on), or nil for none (and for every
-- older format).
local function batch_of(rec)
  local b = byte(rec, 1)
  if b >= BATCH_FORMAT and b <= MAX_FORMAT then
    local at = batch_len_at(rec)
    local n = byte(rec, at)
    if n and n > 0 then return sub(rec, at + 1, at + n) end
  end
  return nil
end

-- How a batch member ended, as its outbox note says (batch.rs `MemberState` in Rust).
local OUTCOME = {succeeded = 's', dead = 'd', cancelled = 'c', expired = 'e', discarded = 'x'}

-- Notes the end of a batch member in its partition's outbox (a stream), in the script that
-- ends it (ARCHITECTURE.md §16): fields b (batch id), m (job key), o (OUTCOME). Nothing for
-- a record in no batch. The caller has checked the outbox's type before its first write
-- (`batched` below).
local function note_end(outbox, rec, key, outcome)
  local b = rec and batch_of(rec)
  if b then redis.call('XADD', outbox, '*', 'b', b, 'm', key, 'o', outcome) end
end

-- True for a partition that has held a member of a batch (its control hash's `batched`,
-- written by the enqueue of a member and never removed: `flag`, the field's value as read),
-- after checking that its outbox is a stream or absent; or nil and the WRONGTYPE reply.
local function batched(flag, outbox)
  if not flag then return false end
  local t = redis.call('TYPE', outbox).ok
  if t ~= 'none' and t ~= 'stream' then
    return nil, redis.error_reply('WRONGTYPE dq: ' .. outbox .. ' holds a ' .. t
      .. ', not a stream; nothing written')
  end
  return true
end

-- The batch helpers, in one table (a function may hold at most 60 upvalues: see GROUP).
local BATCH = {note = note_end, OUTCOME = OUTCOME, batched = batched}

-- A batch's record (batch.lua's header lists its fields): the counts' states in the order a
-- reply gives them, and every field a reply gives, in order.
BATCH.COUNTS = {'p', 'a', 's', 'd', 'c', 'e', 'x', 'r', 'n'}
BATCH.FIELDS = {'v', 'then', 'tt', 'tk', 'tp', 'pol', 'ret', 'cr', 'cl', 'dn', 'rs'}
for _, c in ipairs(BATCH.COUNTS) do BATCH.FIELDS[#BATCH.FIELDS + 1] = 'c:' .. c end

-- Batch `key`'s record as batch.lua and batch_grow.lua answer it: {created, v, then, ...}
-- (created: 1 when `created` is true, else 0), or nil for no batch. HMGET refuses a key of
-- another type before any write.
function BATCH.read(key, created)
  local v = redis.call('HMGET', key, unpack(BATCH.FIELDS))
  if not v[1] then return nil end
  local out = {created and 1 or 0}
  for i = 1, #BATCH.FIELDS do out[i + 1] = v[i] or '' end
  return out
end

-- True for a record whose expiry has come by `now`: it is never started again.
local function is_expired(rec, now)
  local e = expiry_of(rec)
  return e > 0 and e <= now
end

-- True for a record of a lean format this dq reads (format 3 on): its lease is in `leases`.
local function is_lean(rec)
  local b = byte(rec, 1)
  return b >= LEAN_FORMAT and b <= NEWEST_FORMAT
end

-- True for a value of a format newer than this dq reads: left untouched, reported.
local function is_newer(rec)
  if not rec then return false end
  local b = byte(rec, 1)
  return b ~= nil and b > NEWEST_FORMAT and b <= MAX_FORMAT
end

-- True for a value that is a well-formed record of a format this dq reads: long enough for
-- its header, with a known state. (Hot: bytes only, no string made.)
local function is_record(rec)
  if not rec then return false end
  local b = byte(rec, 1)
  if not b then return false end
  if IS_STATE_BYTE[b] then return #rec >= HEADER_LEN end
  if b < FIRST_VERSIONED or b > NEWEST_FORMAT then return false end
  if b >= LEAN_FORMAT then
    -- (a lean record is never active: its lease is in `leases`)
    local s = byte(rec, 2)
    local len = (b >= BATCH_FORMAT and batch_len_at(rec))
      or (b >= GROUP_FORMAT and GROUP_HEADER_LEN + (byte(rec, GROUP_HEADER_LEN) or 0))
      or (b >= PRIORITY_FORMAT and PRIORITY_HEADER_LEN)
      or (b >= EXPIRING_FORMAT and EXPIRING_HEADER_LEN) or LEAN_HEADER_LEN
    if b >= BATCH_FORMAT and #rec >= len then len = len + byte(rec, len) end
    return #rec >= len and IS_STATE_BYTE[s] == true and s ~= ACTIVE_BYTE
  end
  return #rec > HEADER_LEN and IS_STATE_BYTE[byte(rec, 2)] == true
end

-- The state letter of a record (is_record), read without decoding the header.
local function state_of(rec)
  if byte(rec, 1) <= MAX_FORMAT then return sub(rec, 2, 2) end
  return sub(rec, 1, 1)
end

-- Returns state, attempts, due, created, token of a record (the payload is not copied). A
-- lean record answers token 0 and the attempts finished (see `started` for a running job).
local function unpack_record(rec)
  local b = byte(rec, 1)
  if b <= MAX_FORMAT and b >= LEAN_FORMAT then
    local state, attempts, due, created = struct.unpack(LEAN_HEADER, rec, 2)
    return state, attempts, due, created, 0
  end
  local at = 1
  if b <= MAX_FORMAT then at = 2 end
  local state, attempts, due, created, token = struct.unpack(HEADER, rec, at)
  return state, attempts, due, created, token
end

-- The attempts a running job's record says were started, this lease's one included: a
-- format-1/2 record counts it (its lease rewrote the header), a lean one does not.
local function started(rec)
  local b = byte(rec, 1)
  if b <= MAX_FORMAT and b >= LEAN_FORMAT then return byte(rec, 3) + 1 end
  if b <= MAX_FORMAT then return byte(rec, 3) end
  return byte(rec, 2)
end

-- A record of `format` (one this dq reads): its header, then `payload`; `expires` (Unix ms,
-- 0 or nil: none) is kept by format 4 on and dropped by older ones, `priority` (nil: normal)
-- by format 5 on, `group` (nil: none) by format 6 on, `batch` (nil: none) by format 7 on.
local function pack_record(format, state, attempts, due, created, token, payload, expires,
    priority, group, batch)
  if attempts > 255 then attempts = 255 end
  if attempts < 0 then attempts = 0 end
  if due < 0 then due = 0 end
  if format == LEGACY_FORMAT then
    return struct.pack(HEADER, state, attempts, due, created, token) .. payload
  end
  if format < LEAN_FORMAT then
    return struct.pack(VERSIONED_HEADER, format, state, attempts, due, created, token) .. payload
  end
  -- a lean header, then what each later format adds after it
  local tail = ''
  if format >= BATCH_FORMAT then
    batch = batch or ''
    tail = char(#batch) .. batch
  end
  if format >= GROUP_FORMAT then
    group = group or ''
    tail = char(#group) .. group .. tail
  end
  if format >= PRIORITY_FORMAT then tail = char(priority or NORMAL_PRIORITY) .. tail end
  if format >= EXPIRING_FORMAT then tail = struct.pack('>I6', expires or 0) .. tail end
  return char(format) .. struct.pack(LEAN_HEADER, state, attempts, due, created) .. tail
    .. payload
end

-- The format of a record as `pack_record` takes it (the record's own).
local function record_format(rec)
  local b = byte(rec, 1)
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

-- Runs `cmd key t[from..to]` in slices (keep pairs whole: SLICE is even, and so must be
-- to - from + 1 for pairs).
local function call_range(cmd, key, t, from, to)
  for i = from, to, SLICE do
    redis.call(cmd, key, unpack(t, i, math.min(i + SLICE - 1, to)))
  end
end

-- HMGET over any number of fields; the result is aligned with `fields` (false: missing).
local function hmget(key, fields)
  if #fields == 0 then return {} end
  if #fields <= SLICE then return redis.call('HMGET', key, unpack(fields)) end
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

-- ---- events: the partition's event stream (dq-core/src/events.rs, docs/EVENTS.md) ----
-- A topic that records events has `events` = '<most kept>' (this partition's share, > 0) in
-- its partitions' control hash; every script that changes a job then records one event per
-- change, and writes the events of the call as ONE entry of the partition's `events` stream,
-- at its end (one XADD per call, not per event: a fetch of 100 jobs writes one entry).
-- Events are numbered 1, 2, 3… per partition (the stats field `event_seq` is the last number
-- given); an entry's id is '<number of its LAST event>-0', so ids grow with the numbers and
-- the entry holding event n is the first whose id is at least 'n-0': one XRANGE from there. Event format 1, an entry's fields: v = '1', n = how many
-- events, t = ms (the script's clock), w = worker id (ack only), b = cmsgpack array of
-- {kind (EVENT below), job key, attempt (0: none), error ('' : none; cut as a history's), due
-- ms (0: none)}. Readers skip fields they do not know. The stream keeps about the last
-- <most kept> events: XADD MINID ~ trims whole nodes of entries whose events are all older
-- than that, never the entry just written.
local EVENT = {enqueued = 'q', started = 's', succeeded = 'k', failed = 'f', deferred = 'l',
  released = 'r', dead = 'd', cancelled = 'c', expired = 'x', discarded = 'g'}

-- The events setting read from a control hash's `events` field: the most events kept, or
-- nil (off; a malformed value too: a damaged setting never stops a job's change).
local function events_cap(text)
  local n = tonumber(text)
  if n and n >= 1 and n == math.floor(n) then return n end
  return nil
end

-- The event context of a call: nil when the partition records no events, else
-- {stream key, cap, stats key, now, events of the call, worker id or nil}.
local function events_of(events, cap_text, stats, now)
  local cap = events_cap(cap_text)
  if not cap then return nil end
  return {events, cap, stats, now, {}, nil}
end

-- Records one event of the call (nothing when `ev` is nil); `flush_events` writes them.
local function emit(ev, kind, key, attempt, err, due)
  if not ev then return end
  local list = ev[5]
  list[#list + 1] = {kind, key, attempt or 0, err and cut_error(err) or '', due or 0}
end

-- Writes the call's events as one stream entry (nothing when there are none). Never raises:
-- an XADD refused (the stream key holds another type, a Redis user without XADD) is counted
-- in stats `events_lost` (by event) and the call goes on, so a damaged stream never stops a
-- job's change. The caller's writes are done: this is the call's last write.
local function flush_events(ev)
  if not ev or #ev[5] == 0 then return end
  local n = #ev[5]
  local last = redis.pcall('HINCRBY', ev[3], 'event_seq', n)
  if type(last) ~= 'number' then
    count(ev[3], 'events_lost', n)
    return
  end
  local body = cmsgpack.pack(ev[5])
  local function add()
    -- (trim the entries whose events are all older than the last `cap`: never this one)
    local fields = {'XADD', ev[1], 'MINID', '~', string.format('%d-0', math.max(1, last - ev[2] + 1)),
      string.format('%d-0', last), 'v', '1', 'n', n, 't', string.format('%d', ev[4]), 'b', body}
    if ev[6] then
      fields[#fields + 1] = 'w'
      fields[#fields + 1] = ev[6]
    end
    return redis.pcall(unpack(fields))
  end
  local r = add()
  if type(r) == 'table' and r.err and string.find(r.err, 'equal or smaller', 1, true) then
    -- the counter fell behind the stream (a stats hash deleted by hand): go on after the
    -- stream's top entry, whose id is its last event's number
    local top = redis.pcall('XREVRANGE', ev[1], '+', '-', 'COUNT', 1)
    local top_last = type(top) == 'table' and top[1] and tonumber(string.match(top[1][1], '^(%d+)'))
    if top_last then
      last = top_last + n
      redis.pcall('HSET', ev[3], 'event_seq', last)
      r = add()
    end
  end
  if type(r) == 'table' and r.err then count(ev[3], 'events_lost', n) end
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
  local b = byte(rec, 1)
  if b <= MAX_FORMAT and b >= LEAN_FORMAT then return 0 end
  if b <= MAX_FORMAT then return (struct.unpack('>I6', rec, 16)) end
  return (struct.unpack('>I6', rec, 15))
end

-- True when `rec` is a well-formed format-1/2 record, active, and leased under `token` (a
-- number): what ack, extend, fail and release check before they act on such a record (a
-- lean record's lease is in `leases`: see `owners`). (Hot: reads bytes and the token only.)
local function leased_by(rec, token)
  if not rec then return false end
  local b1, b2 = byte(rec, 1, 2)
  if b1 == ACTIVE_BYTE then
    return #rec >= HEADER_LEN and struct.unpack('>I6', rec, 15) == token
  end
  return b1 ~= nil and b1 >= FIRST_VERSIONED and b1 < LEAN_FORMAT and b2 == ACTIVE_BYTE
    and #rec > HEADER_LEN and struct.unpack('>I6', rec, 16) == token
end

-- The lease each job of `keys` runs under now, from their records `recs` (HMGET of jobs,
-- aligned): its token, or false when the job is not running (gone, waiting, dead, damaged).
-- A format-1/2 record says it itself (state A, its token); a lean record's lease is read
-- from `leases`, in one HMGET for all of them (none when no record is lean).
local function owners(leases, keys, recs)
  local tokens, lean_keys, lean_at = {}, {}, {}
  for i = 1, #keys do
    local rec = recs[i]
    tokens[i] = false
    if rec and is_record(rec) then
      if is_lean(rec) then
        lean_keys[#lean_keys + 1] = keys[i]
        lean_at[#lean_keys] = i
      elseif state_of(rec) == STATE.active then
        tokens[i] = token_of(rec)
      end
    end
  end
  if #lean_keys > 0 then
    local held = hmget(leases, lean_keys)
    for j, i in ipairs(lean_at) do tokens[i] = tonumber(held[j]) or false end
  end
  return tokens
end

-- The leases `leases` holds for `keys` (of lean records), by key: key -> token; one HMGET,
-- none for no keys.
local function held_leases(leases, keys)
  local held = {}
  if #keys > 0 then
    local tokens = hmget(leases, keys)
    for j, key in ipairs(keys) do held[key] = tokens[j] end
  end
  return held
end

-- The lease one job runs under (its record `rec` is a record this dq reads): its token, or
-- false when it is not running. One HGET of `leases` for a lean record.
local function lease_of(leases, key, rec)
  if is_lean(rec) then return tonumber(redis.call('HGET', leases, key)) or false end
  if state_of(rec) == STATE.active then return token_of(rec) end
  return false
end

-- The state a job is in: active while it runs (`lease`, from lease_of or owners, is not
-- false), else the state its record says.
local function job_state(rec, lease)
  if lease then return STATE.active end
  return state_of(rec)
end

-- `rec` (a record this dq reads, as is_record checks) leased under `token`: state active,
-- `spent` (0 or 1) added to its attempts (capped at 255), its format, due, created and
-- payload kept. One concatenation, no decoding: the lease's hot path.
local function leased_record(rec, token, spent)
  local o = 0
  if byte(rec, 1) <= MAX_FORMAT then o = 1 end
  local attempts = byte(rec, o + 2) + spent
  if attempts > 255 then attempts = 255 end
  return sub(rec, 1, o) .. STATE.active .. char(attempts) .. sub(rec, o + 3, o + 14)
    .. struct.pack('>I6', token) .. sub(rec, o + 21)
end

-- Rewrites the header of `rec` in place of the old one, keeping its format, `created`, its
-- expiry (unless `expires` is given: 0 clears it), its priority, its group, its batch and the
-- payload.
-- (A lean record has no token: `token` is ignored for it.)
local function with_header(rec, state, attempts, due, token, expires)
  local format = record_format(rec)
  local len = header_len(rec)
  -- created: the 6 bytes before the token, or bytes 10..15 of a lean header
  local created = struct.unpack('>I6', rec, format >= LEAN_FORMAT and 10 or len - 11)
  return pack_record(format, state, attempts, due, created, token, sub(rec, len + 1),
    expires or expiry_of(rec), priority_of(rec), group_of(rec), batch_of(rec))
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
-- (One call in the common case: the push answers the length, and only a token already
-- waiting makes a second call take the extra one back.)
local function wake(wake_key)
  local len = redis.pcall('RPUSH', wake_key, '1')
  if type(len) == 'number' and len > 1 then redis.pcall('RPOP', wake_key) end
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

-- Moves a running job whose attempt failed to the dead queue, with `attempts` started.
local function bury(dead, jobs, stats, key, rec, now, attempts)
  local _, _, due, _, token = unpack_record(rec)
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

-- ---- the due queue: `ready` and `pready` (ARCHITECTURE.md §2, priorities) ----
-- A due job of normal priority waits in `ready` (a list, FIFO); one of any other priority in
-- `pready`, a sorted set scored by PRIO_SPAN * (MAX_PRIORITY - priority) + its place: FIFO
-- within a priority by the partition's counters (`stats` fields `pready_back`, counting up
-- from PRIO_MID, and `pready_front`, counting down from it for releases). Both hold hints:
-- fetch leases a member only if its record still says ready, and drops the others. Fetch
-- leases `pready`'s members above normal first, then `ready`, then the jobs it finds due
-- (above and at normal priority), then `pready`'s members below normal.
local PRIO_SPAN = 17592186044416 -- 2^44
local PRIO_MID = 8796093022208 -- 2^43: a priority's places, front below, back above
-- pready's scores below this are above normal priority; from it on, below normal.
local NORMAL_READY_SCORE = (MAX_PRIORITY - NORMAL_PRIORITY) * PRIO_SPAN

-- The due queue's keys, as the scripts that make jobs ready pass them on: `ready`, `pready`,
-- `stats` (the places' counters), `gready` and `groups` (the grouped jobs, below).
local function due_queue(ready, pready, stats, gready, groups)
  return {ready = ready, pready = pready, stats = stats, gready = gready, groups = groups}
end

-- ---- groups (ARCHITECTURE.md §2, groups; dq-core/src/group.rs) ----
-- A due job of a group (record format 6) waits in `gready`, a sorted set whose members all
-- score 0 and sort by bytes: `<group> NUL <9 - priority, a digit> <place, 16 hex digits>
-- <job key>`, so that ZRANGEBYLEX reads one group's queue, highest priority first, FIFO within
-- a priority (places from the same counters as pready's). Its group is then in `groups`
-- (group -> turn, a place), the rotation fetch serves, unless it waits in `gwait` (group ->
-- ms: at its cap, over its rate, held); fetch moves groups between the two. A running grouped
-- job is a member `<group> NUL <key>` of `gactive` (ZLEXCOUNT: the group's running jobs), from
-- its lease to its end (`groups_done`). `gctl` holds the limits and the state: '*' the default
-- limits, 'l:' .. group a group's own, 't:' .. group its rate's GCRA time, 'h:' .. group the
-- end of its hold.
-- A grouped job's member of gready (its place `at` from `places`).
local function group_member(group, priority, at, key)
  return group .. '\0' .. char(48 + MAX_PRIORITY - priority) .. string.format('%016x', at) .. key
end
-- The job key of a member of gready read from `group`'s range.
local function member_key(group, member)
  return sub(member, #group + 19)
end
-- The ZRANGEBYLEX bounds of `group`'s members (gready, gactive): group names hold no control
-- characters, so every member of the group, and no other, starts with group .. NUL.
local function group_range(group)
  return '[' .. group .. '\0', '(' .. group .. '\1'
end

-- A group's limits as gctl keeps them ('<conc>/<n>/<ms>/<weight>', group.rs
-- GroupLimits::encode): {conc, rate_n, rate_ms, weight} (nil for what is not set), or nil for
-- anything else.
local function parse_group_limits(text)
  if not text then return nil end
  local c, n, ms, w = string.match(text, '^(%d*)/(%d*)/(%d*)/(%d+)$')
  if not c then return nil end
  local l = {conc = tonumber(c), rate_n = tonumber(n), rate_ms = tonumber(ms),
    weight = tonumber(w)}
  if (l.conc and l.conc <= 0) or (l.rate_n == nil) ~= (l.rate_ms == nil)
      or (l.rate_n and (l.rate_n <= 0 or l.rate_ms <= 0)) or l.weight < 1
      or l.weight > 1000 then
    return nil
  end
  return l
end

-- The places of `n` jobs queued at the back (or, with `front`, the front) of their queue: a
-- function giving the next one (one counter bump per call).
local function places(stats, n, front)
  local field = front and 'pready_front' or 'pready_back'
  -- (never fails: a damaged or spent counter starts again, FIFO lost for that moment only)
  local top = redis.pcall('HINCRBY', stats, field, n)
  if type(top) ~= 'number' or top < n or top >= PRIO_MID then
    redis.pcall('HSET', stats, field, n)
    top = n
  end
  local last = top - n
  return function()
    last = last + 1
    return front and PRIO_MID - last or PRIO_MID + last
  end
end

-- Queues grouped jobs: members of gready, and their groups in the rotation unless there
-- already (a group waiting in gwait is also put there: the fetch that serves it looks at
-- its limits again). `jobs` is {key, rec, ...}.
local function push_grouped(q, jobs, front)
  local place = places(q.stats, #jobs / 2, front)
  local members, turns = {}, {}
  for i = 1, #jobs, 2 do
    local rec = jobs[i + 1]
    local g, at = group_of(rec), place()
    members[#members + 1] = 0
    members[#members + 1] = group_member(g, priority_of(rec), at, jobs[i])
    turns[#turns + 1] = at
    turns[#turns + 1] = g
  end
  call_many('ZADD', q.gready, members)
  for i = 1, #turns, SLICE do
    redis.call('ZADD', q.groups, 'NX', unpack(turns, i, math.min(i + SLICE - 1, #turns)))
  end
end

-- Grouped jobs left `active` (their end, a release, a recovered lease): `ended` is
-- {group, key, ...}. They no longer count against their groups' caps (one ZREM of gactive),
-- and the groups found waiting in gwait (one ZMSCORE) get their turn back: the fetch that
-- serves them looks at their limits again. Returns true when one did (the caller wakes a
-- fetcher). `gs` is {gactive =, gwait =, groups =, stats =}.
local function groups_done(gs, ended)
  local members, names, seen = {}, {}, {}
  for i = 1, #ended, 2 do
    members[#members + 1] = ended[i] .. '\0' .. ended[i + 1]
    if not seen[ended[i]] then
      seen[ended[i]] = true
      names[#names + 1] = ended[i]
    end
  end
  call_many('ZREM', gs.gactive, members)
  local waiting = {}
  for i = 1, #names, SLICE do
    local scores = redis.call('ZMSCORE', gs.gwait, unpack(names, i, math.min(i + SLICE - 1, #names)))
    for j, score in ipairs(scores) do
      if score then waiting[#waiting + 1] = names[i + j - 1] end
    end
  end
  if #waiting == 0 then return false end
  call_many('ZREM', gs.gwait, waiting)
  local place, turns = places(gs.stats, #waiting, false), {}
  for _, g in ipairs(waiting) do
    turns[#turns + 1] = place()
    turns[#turns + 1] = g
  end
  for i = 1, #turns, SLICE do
    redis.call('ZADD', gs.groups, 'NX', unpack(turns, i, math.min(i + SLICE - 1, #turns)))
  end
  return true
end

-- The group helpers a fetch uses, in one table (a function may hold at most 60 upvalues, and
-- fetch's body uses many of this library's locals).
local GROUP = {of = group_of, range = group_range, key = member_key, limits = parse_group_limits,
  done = groups_done, places = places, FORMAT = GROUP_FORMAT, LEN_AT = GROUP_HEADER_LEN}

-- The places of `n` jobs queued at the back (or, with `front`, the front) of their priority:
-- a function giving the score of the next one of `priority` (one counter bump per call).
local function ready_places(stats, n, front)
  local place = places(stats, n, front)
  return function(priority)
    return (MAX_PRIORITY - priority) * PRIO_SPAN + place()
  end
end

-- Queues `key` (its record `rec`, already written ready) at the back of the due queue of its
-- priority (of its group, for a grouped job), or at the front with `front` (a release gives
-- the job its place back). `q`: `due_queue`.
local function push_ready(q, key, rec, front)
  if group_of(rec) then
    push_grouped(q, {key, rec}, front)
    return
  end
  local p = priority_of(rec)
  if p == NORMAL_PRIORITY then
    redis.call(front and 'LPUSH' or 'RPUSH', q.ready, key)
  else
    redis.call('ZADD', q.pready, ready_places(q.stats, 1, front)(p), key)
  end
end

-- Queues hints (`keys`, their records `recs`, already written ready) at the back of the due
-- queue of their priorities (and groups), in order: one RPUSH and at most one ZADD to each
-- zset. Returns how many.
local function push_ready_many(q, keys, recs)
  local normal, others, grouped = {}, {}, {}
  for i, key in ipairs(keys) do
    local rec = recs[i]
    local p = priority_of(rec)
    if group_of(rec) then
      grouped[#grouped + 1] = key
      grouped[#grouped + 1] = rec
    elseif p == NORMAL_PRIORITY then
      normal[#normal + 1] = key
    else
      others[#others + 1] = p
      others[#others + 1] = key
    end
  end
  if #normal > 0 then call_many('RPUSH', q.ready, normal) end
  if #others > 0 then
    local place = ready_places(q.stats, #others / 2, false)
    for i = 1, #others, 2 do others[i] = place(others[i]) end
    call_many('ZADD', q.pready, others)
  end
  if #grouped > 0 then push_grouped(q, grouped, false) end
  return #keys
end

-- Queues a job whose record is already written with `waiting_state(due, now, ...)`:
-- onto the due queue (`push_ready`, `q`: `due_queue`) if due now, else into `zset`
-- (scheduled or retry) at `score`, the `slot_score(zset, due)` the caller read before its
-- first write. Returns true when a fetcher should be woken: the job is ready, or is the new
-- earliest.
local function place(zset, q, key, due, now, score, rec)
  if due <= now then
    push_ready(q, key, rec)
    return true
  end
  redis.call('ZADD', zset, score, key)
  local head = redis.call('ZRANGE', zset, 0, 0)
  return head[1] == key
end

-- The partition's control hash (KEYS name `control`) holds the topic's pause, limits and
-- throttle, and one field per running job whose cancel was requested: 'x:' .. key -> token.
-- ---- kept jobs: finished jobs a topic's retention keeps (docs/ARCHITECTURE.md §4) ----
-- A kept job is one value in the partition's `kept` hash (field = job key), listed in the
-- `kept_at` sorted set by the time it goes (finished + the retention of its outcome). Its own
-- format, KEPT_FORMAT (dq-core/src/store/redis/kept.rs reads it, tied by a test):
--   u8 version (KEPT_FORMAT), c1 outcome (KEPT below), u48 finished ms, u48 started ms (0:
--   never started), u8 attempts started, u8 result status (0 none, 1 value, 2 not stored:
--   the bytes say why), u32 result length + bytes, u16 worker id length + bytes, u32 history
--   length + bytes (cmsgpack, as `hist` keeps it), u32 progress length + bytes (cmsgpack, as
--   `progress` keeps it: the last run's progress and log lines), then the job's record as it
--   was (any record format: its payload, due and created times).
local KEPT_FORMAT = 1
local KEPT_HEADER = '>Bc1I6I6BB'
local KEPT = {succeeded = 's', cancelled = 'c', expired = 'e'}

-- The retention policy in the control hash's `keep` field: '<succeeded ms>/<cancelled
-- ms>/<expired ms>/<cap>' (0: that outcome is not kept; cap: most kept jobs of the
-- partition). nil when absent or malformed (nothing is kept: a damaged policy loses no job,
-- only its inspection).
local function keep_policy(text)
  if not text then return nil end
  local s, c, e, cap = string.match(text, '^(%d+)/(%d+)/(%d+)/(%d+)$')
  if not s then return nil end
  s, c, e, cap = tonumber(s), tonumber(c), tonumber(e), tonumber(cap)
  if cap <= 0 or (s == 0 and c == 0 and e == 0) then return nil end
  return {[KEPT.succeeded] = s, [KEPT.cancelled] = c, [KEPT.expired] = e, cap = cap}
end

-- Whether `policy` keeps jobs ending as `outcome`.
local function keeps(policy, outcome)
  return policy ~= nil and policy[outcome] > 0
end

-- One kept value (the format above). `result`: nil, or {status, bytes}.
local function pack_kept(outcome, finished, started_ms, attempts, result, worker, history,
                         progress, rec)
  if attempts > 255 then attempts = 255 end
  local status, bytes = 0, ''
  if result then status, bytes = result[1], result[2] end
  worker = worker or ''
  history = history or ''
  progress = progress or ''
  return struct.pack(KEPT_HEADER, KEPT_FORMAT, outcome, finished, started_ms or 0, attempts, status)
    .. struct.pack('>I4', #bytes) .. bytes
    .. struct.pack('>I2', #worker) .. worker
    .. struct.pack('>I4', #history) .. history
    .. struct.pack('>I4', #progress) .. progress
    .. rec
end

-- ---- progress and log lines of a running job (the `progress` hash) ----
-- A value of the partition's `progress` hash (field = job key) is a cmsgpack map, written by
-- `progress.lua` only while the job runs under the reporting lease: `v` the last progress
-- value (MessagePack bytes from the handler, at most MAX_PROGRESS_LEN), `l` the log lines
-- {at_ms, text} (at most MAX_LOG_LINES, the oldest dropped; each cut like an error), `d` how
-- many were dropped. Every end of a run deletes it (ack, fail, release, lease recovery); ack
-- and a cancel keep it in the kept job when the topic keeps the job.
local MAX_PROGRESS_LEN = 65536
local MAX_LOG_LINES = 100

-- Keeps finished jobs: `entries` is a list of {key, value} (pack_kept) all of `outcome`, at
-- `now`. Each replaces what the key had kept before. The caller has checked kept and kept_at.
local function keep_jobs(kept, kept_at, policy, outcome, now, entries)
  if #entries == 0 then return end
  local fields, members = {}, {}
  local gone = string.format('%d', now + policy[outcome])
  for i, e in ipairs(entries) do
    fields[2 * i - 1], fields[2 * i] = e[1], e[2]
    members[2 * i - 1], members[2 * i] = gone, e[1]
  end
  call_many('HSET', kept, fields)
  call_many('ZADD', kept_at, members)
end

-- Removes at most `limit` kept jobs whose time has come, then (with a policy) beyond its
-- cap, the soonest to go first; those beyond the cap are counted in stats.kept_trimmed.
-- Writes kept and kept_at: the caller has checked both (or read them).
local function trim_kept(kept, kept_at, stats, policy, now, limit)
  local old = redis.call('ZRANGEBYSCORE', kept_at, '-inf', string.format('%d', now), 'LIMIT', 0, limit)
  if #old > 0 then
    call_many('ZREM', kept_at, old)
    call_many('HDEL', kept, old)
  end
  if not policy then return end
  local excess = redis.call('ZCARD', kept_at) - policy.cap
  if excess > limit - #old then excess = limit - #old end
  if excess > 0 then
    local first = redis.call('ZPOPMIN', kept_at, excess)
    local keys = {}
    for i = 1, #first, 2 do keys[#keys + 1] = first[i] end
    call_many('HDEL', kept, keys)
    count(stats, 'kept_trimmed', #keys)
  end
end

local function cancel_field(key)
  return 'x:' .. key
end

-- Deletes an active job whose cancel was requested while it ran: gone, counted as
-- cancelled, never retried. Callers have read (or type-checked) every key first.
-- With `keep` ({kept, kept_at, policy, now}, the kept keys checked) and a policy that keeps
-- cancelled jobs, the job is kept as cancelled. `ev`: the call's event context (`events_of`) or nil.
local function drop_cancelled(active, jobs, hist, stats, control, leases, progress, key, keep, ev,
    outbox)
  local p = redis.call('HGET', progress, key)
  -- (read when kept, for the event's attempt, or for a member's note: `outbox` is given for a
  -- batched partition, its type checked)
  local rec = (keep or ev or outbox) and redis.call('HGET', jobs, key)
  if keep and keeps(keep[3], KEPT.cancelled) then
    if rec then
      local h = redis.call('HGET', hist, key)
      keep_jobs(keep[1], keep[2], keep[3], KEPT.cancelled, keep[4],
        {{key, pack_kept(KEPT.cancelled, keep[4], 0, started(rec), nil, nil, h or nil, p or nil,
          rec)}})
    end
  end
  if p then redis.call('HDEL', progress, key) end
  redis.call('ZREM', active, key)
  redis.pcall('HDEL', leases, key) -- (a lean job's lease; never fails)
  redis.call('HDEL', jobs, key)
  redis.call('HDEL', hist, key)
  redis.call('HDEL', control, cancel_field(key))
  count(stats, 'cancelled', 1)
  emit(ev, EVENT.cancelled, key, rec and is_record(rec) and started(rec) or nil)
  if outbox and rec then note_end(outbox, rec, key, OUTCOME.cancelled) end
end

-- ---- retry delays: the Lua mirror of RetryPolicy::delay_with (dq-core/src/retry.rs) ----
-- A test runs these on Redis against the Rust function over many (policy, attempt, draw)
-- triples: change both or neither.

-- Reads a retry policy from `args` (ARGV) at `from`, as RetryPolicy::script_args writes it:
-- kind, jitter %, then none (0): nothing; tiered (1): delay ms of each retry; fixed (2):
-- delay ms, retries; exponential (3): initial ms, max ms, retries; a retry function's
-- decisions (4, jitter 0): a (verdict, ms) pair per attempt from 1, verdict 0 retry after ms,
-- 1 dead, 2 discard (RetryFn::lease_expiry_policy).
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
  if kind == 4 and pct == 0 and #nums >= 2 and #nums <= 202 and #nums % 2 == 0 then
    local rows = {}
    for i = 1, #nums, 2 do
      if nums[i] > 2 or nums[i] ~= math.floor(nums[i]) then return nil, 'retry policy verdict' end
      rows[#rows + 1] = {nums[i], nums[i + 1]}
    end
    return {retries = #rows - 1, pct = 0, table = rows}
  elseif kind == 0 and #nums == 0 then
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
-- `unit`; nil when the job is out of attempts (it is dead), and nil, 'discard' when a retry
-- function's decision for that attempt discards it (RetryPolicy::decision_with).
local function retry_delay(policy, attempt, unit)
  if policy.table then
    local entry = policy.table[attempt]
    if not entry then return nil end
    if entry[1] == 0 and attempt <= policy.retries then return entry[2] end
    if entry[1] == 2 then return nil, 'discard' end
    return nil
  end
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

-- ---- key windows (unique_for, throttle: ARCHITECTURE.md §2, dq-core/src/unique.rs) ----
-- `uniq` HASH key -> the unique_for window (ms) of a live job; `uniq_at` ZSET key -> when the
-- key's window ends (ms): an enqueue of the key before then is refused.

-- Drops at most `limit` windows of `uniq_at` that have ended by `now`; never fails.
local function trim_windows(uniq_at, now, limit)
  local gone = redis.pcall('ZCOUNT', uniq_at, '-inf', now)
  if type(gone) == 'number' and gone > 0 then
    redis.pcall('ZREMRANGEBYRANK', uniq_at, 0, math.min(gone, limit) - 1)
  end
end

-- Called by every script that ends jobs (ack, fail to dead or cancelled, cancel, fetch's
-- expiry and lease recovery), after its writes, with the keys it ended: `keys`, and `more`
-- read at every `step`th place from `step` (fail's {ms, key, ...} burials: step 2). Each
-- ended unique_for job's key moves from `uniq` to `uniq_at`, its window ending `now` (nil:
-- read here) + its ms. One EXISTS when the partition has no live unique job; never fails (a
-- key of another type is left alone).
local function end_unique(uniq, uniq_at, now, keys, more, step)
  if redis.call('EXISTS', uniq) == 0 then return end
  if redis.call('TYPE', uniq).ok ~= 'hash' then return end
  local ended = {}
  for _, k in ipairs(keys or {}) do ended[#ended + 1] = k end
  if more then
    for i = step or 1, #more, step or 1 do ended[#ended + 1] = more[i] end
  end
  if #ended == 0 then return end
  local ds = hmget(uniq, ended)
  now = now or now_ms()
  local found, windows = {}, {}
  for i, k in ipairs(ended) do
    local d = tonumber(ds[i])
    if d then
      found[#found + 1] = k
      windows[#windows + 1] = now + d
      windows[#windows + 1] = k
    end
  end
  if #found == 0 then return end
  local at_type = redis.call('TYPE', uniq_at).ok
  if at_type ~= 'none' and at_type ~= 'zset' then return end
  call_many('HDEL', uniq, found)
  call_many('ZADD', uniq_at, windows)
  trim_windows(uniq_at, now, #found + 16)
end

-- ---- end of lib.lua ----
