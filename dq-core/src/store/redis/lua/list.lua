-- list: one page of the jobs of one state in one partition, in that state's order, with
-- records and histories, read in one step. Writes nothing (declared `no-writes`, so it runs at
-- `maxmemory`). Bounded: at most `limit` records returned, O(log^2 n) to find the start in a
-- sorted set, at most 4 * limit + 64 queue entries read in `ready`.
--
-- KEYS[1] scheduled  dq:{topic#p}:scheduled
-- KEYS[2] retry      dq:{topic#p}:retry
-- KEYS[3] ready      dq:{topic#p}:ready
-- KEYS[4] active     dq:{topic#p}:active
-- KEYS[5] dead       dq:{topic#p}:dead
-- KEYS[6] jobs       dq:{topic#p}:jobs     the records hash
-- KEYS[7] hist       dq:{topic#p}:hist
-- KEYS[8] leases     dq:{topic#p}:leases   HASH key -> token: the leases of lean (format 3) records
-- KEYS[9] kept       dq:{topic#p}:kept     HASH key -> kept job (lib.lua `pack_kept`)
-- KEYS[10] kept_at   dq:{topic#p}:kept_at  ZSET key -> when its keeping ends
-- KEYS[11] pready    dq:{topic#p}:pready   ZSET the due queue of jobs whose priority is not
--                                          normal, highest first (lib.lua `push_ready`)
-- KEYS[12] gready    dq:{topic#p}:gready   ZSET the due queue of grouped jobs, group by group
-- (The listed state's index is one of KEYS[1..5] or kept_at, chosen by ARGV[2]; all are
-- passed so that the script's key list is the same for every state.)
--
-- ARGV[1] mode: 'z' (the index is a sorted set), 'r' (the due queue: pready's jobs above
--         normal priority, the ready list, then pready's below normal, as fetch leases them,
--         then the grouped jobs, group by group)
--         or 'k' (kept jobs: kept_at, in the order their keeping ends; the values come from
--         kept)
-- ARGV[2] state code the records must have (S, F, A, D; R for the ready list; for 'k' the
--         kept outcome: s succeeded, c cancelled, e expired)
-- ARGV[3] limit (> 0)
-- 'z', 'k': ARGV[4] score of the place to start after ('' from the start; a score as Redis prints
--      it), ARGV[5] key of that place (members with that score sort after it by byte order)
-- 'r': ARGV[4] queue position to start from (>= 0; stale entries count): positions run
--      over pready's members above normal, then the ready list, then pready's other members,
--      then gready's
--
-- Returns {more (0/1), next position ('r': where reading stopped; 'z': 0), ['k' only: the
-- place and key of the last entry read, '' and '' if none], then per job:
-- key, place (the score as text for 'z', the queue position as text for 'r'), record,
-- history (nil if none), lease token (nil unless a lean record's job is running)}. A job is
-- listed in the state it is in: a lean record under a lease is active, whatever its state
-- byte says. A queue entry is listed only if its job is ready and its key was not listed
-- before in this call (stale hints are skipped).

local records, hist, leases = KEYS[6], KEYS[7], KEYS[8]
local mode, state, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local index = ({[STATE.scheduled] = KEYS[1], [STATE.retry] = KEYS[2], [STATE.ready] = KEYS[3],
  [STATE.active] = KEYS[4], [STATE.dead] = KEYS[5]})[state or '']
local kept_outcome = nil
if mode == 'k' then
  -- kept jobs: the same walk as 'z' over kept_at, values from kept, matched by outcome
  index, records = KEYS[10], KEYS[9]
  if state ~= KEPT.succeeded and state ~= KEPT.cancelled and state ~= KEPT.expired then
    index = nil
  end
  kept_outcome, mode = state, 'z'
end
if (mode ~= 'z' and mode ~= 'r') or not index or (mode == 'r') ~= (state == STATE.ready)
    or not limit or limit <= 0 then
  return redis.error_reply('ERR dq bad arguments: mode, state, limit')
end

-- a <= b in byte order, as Redis orders members of equal score (Lua's `<` on strings follows
-- the server's locale, not bytes).
local function bytes_le(a, b)
  if a == b then return true end
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

local out = {0, 0}
local keys, places, recs, tokens = {}, {}, {}, {}

if mode == 'z' then
  local after_score, after_key = ARGV[4], ARGV[5]
  if not after_score or not after_key then
    return redis.error_reply('ERR dq bad arguments: cursor')
  end
  local start = 0
  if after_score ~= '' then
    if not tonumber(after_score) then return redis.error_reply('ERR dq bad arguments: score') end
    -- Members with the cursor's score are ranks [lo, lo + n); the first one after its key is
    -- found by binary search (the cursor's own member may be gone).
    local lo = redis.call('ZCOUNT', index, '-inf', '(' .. after_score)
    local n = redis.call('ZCOUNT', index, after_score, after_score)
    local a, b = lo, lo + n
    while a < b do
      local mid = math.floor((a + b) / 2)
      local m = redis.call('ZRANGE', index, mid, mid)[1]
      if bytes_le(m, after_key) then a = mid + 1 else b = mid end
    end
    start = a
  end
  local page = redis.call('ZRANGE', index, start, start + limit - 1, 'WITHSCORES')
  if kept_outcome then out[3], out[4] = '', '' end
  if start + limit < redis.call('ZCARD', index) then out[1] = 1 end
  local got = {}
  for i = 1, #page, 2 do got[#got + 1] = page[i] end
  if #got > 0 and kept_outcome then
    out[3], out[4] = page[#page], page[#page - 1]
    -- a kept value's outcome is its second byte; its history is inside it. One whose
    -- keeping has ended waits for a trim, and is no more to be seen.
    local found = hmget(records, got)
    local now = now_ms()
    for i, key in ipairs(got) do
      local v = found[i]
      if v and sub(v, 2, 2) == kept_outcome and tonumber(page[2 * i]) > now then
        keys[#keys + 1], places[#places + 1], recs[#recs + 1] = key, page[2 * i], v
        tokens[#keys] = false
      end
    end
  elseif #got > 0 then
    local found = hmget(records, got)
    local owner = owners(leases, got, found)
    for i, key in ipairs(got) do
      local rec = found[i]
      if is_record(rec) and job_state(rec, owner[i]) == state then
        keys[#keys + 1], places[#places + 1], recs[#recs + 1] = key, page[2 * i], rec
        tokens[#keys] = is_lean(rec) and owner[i]
      end
    end
  end
else
  local from = tonumber(ARGV[4])
  if not from or from < 0 then return redis.error_reply('ERR dq bad arguments: position') end
  -- the window [from, to] of the due queue: pready above normal (ranks 0..high-1), the
  -- ready list (positions high..high+len-1), pready below normal (the ranks after high)
  local pready = KEYS[11]
  local to = from + 4 * limit + 64 - 1
  local high = redis.call('ZCOUNT', pready, '-inf', string.format('(%d', NORMAL_READY_SCORE))
  local len = redis.call('LLEN', index)
  local n_pready = redis.call('ZCARD', pready)
  local gready, grouped_from = KEYS[12], len + n_pready
  local total = grouped_from + redis.call('ZCARD', gready)
  local hints = {}
  local function add(part)
    for _, key in ipairs(part) do hints[#hints + 1] = key end
  end
  if from < high then add(redis.call('ZRANGE', pready, from, math.min(high - 1, to))) end
  if to >= high and from < high + len then
    add(redis.call('LRANGE', index, math.max(from, high) - high, math.min(to, high + len - 1) - high))
  end
  if to >= high + len and from < grouped_from then
    add(redis.call('ZRANGE', pready, math.max(from, high + len) - len,
      math.min(to, grouped_from - 1) - len))
  end
  if to >= grouped_from then
    -- (a member: group, NUL, priority digit, 16 hex digits of place, then the job key)
    for _, m in ipairs(redis.call('ZRANGE', gready, math.max(from, grouped_from) - grouped_from,
        to - grouped_from)) do
      hints[#hints + 1] = sub(m, string.find(m, '\0', 1, true) + 18)
    end
  end
  local seen, read = {}, 0
  -- One record at a time: a stale hint's record is not kept, and reading stops at `limit`.
  for i, key in ipairs(hints) do
    if #keys >= limit then break end
    read = i
    if not seen[key] then
      local rec = redis.call('HGET', records, key)
      if is_record(rec) and job_state(rec, lease_of(leases, key, rec)) == state then
        seen[key] = true
        keys[#keys + 1], places[#places + 1], recs[#recs + 1] = key, tostring(from + i - 1), rec
        tokens[#keys] = false
      end
    end
  end
  out[2] = from + read
  if out[2] < total then out[1] = 1 end
end

if #keys > 0 then
  local hists = {}
  if kept_outcome then
    for i = 1, #keys do hists[i] = false end
  else
    hists = hmget(hist, keys)
  end
  for i, key in ipairs(keys) do
    out[#out + 1] = key
    out[#out + 1] = places[i]
    out[#out + 1] = recs[i]
    out[#out + 1] = hists[i]
    out[#out + 1] = tokens[i]
  end
end
return out
