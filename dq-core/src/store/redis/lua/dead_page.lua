-- dead_page: one page of the dead queue, oldest first, with records and histories, read in
-- one step. Writes nothing (declared `no-writes`, so it runs at `maxmemory`).
--
-- KEYS[1] dead  dq:{topic#p}:dead
-- KEYS[2] jobs  dq:{topic#p}:jobs
-- KEYS[3] hist  dq:{topic#p}:hist
--
-- ARGV[1] offset (>= 0)
-- ARGV[2] limit (> 0)
--
-- Returns a flat array of {key, died (score, as text), record, history (nil if none)} per
-- dead job of the page that has a record.

local dead, jobs, hist = KEYS[1], KEYS[2], KEYS[3]
local offset, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
if not offset or not limit or offset < 0 or limit <= 0 then
  return redis.error_reply('ERR dq bad arguments: page')
end
local page = redis.call('ZRANGE', dead, offset, offset + limit - 1, 'WITHSCORES')
local keys = {}
for i = 1, #page, 2 do keys[#keys + 1] = page[i] end
if #keys == 0 then return {} end
local recs, hists = hmget(jobs, keys), hmget(hist, keys)
local out = {}
for i, key in ipairs(keys) do
  if recs[i] then
    out[#out + 1] = key
    out[#out + 1] = page[2 * i]
    out[#out + 1] = recs[i]
    out[#out + 1] = hists[i]
  end
end
return out
