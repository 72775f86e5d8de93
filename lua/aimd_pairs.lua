-- aimd_pairs.lua: read the throttled pairs of one pacing key, as
-- aimd_pair.lua set them. Run by adapt.Adapter.Pairs.
--
-- KEYS[1]  pairs hash of the pacing key, as in aimd_pair.lua
-- ARGV[1]  forget_us: a pair throttled last this long ago is left out,
--          integer >= 1
--
-- Reply: flat array {sub_1, left_ms_1, rate_u_1, sub_2, ...}: each pair
--   whose cooldown has not ended or whose last throttle is less than
--   forget_us ago, with the ms left of its cooldown (integer >= 0) and its
--   learned rate (millionths of a message per second, 0: none); empty when
--   there are none or the hash is missing or corrupt.
--
-- Writes: none.

-- @include adapt_base

local ok, all = pcall(redis.call, 'HGETALL', KEYS[1])
if not ok or type(all) ~= 'table' or all.err then
  return {}
end
local forget_us = int(ARGV[1], 1)
if not forget_us then
  return redis.error_reply('ERR aimd_pairs: want forget_us')
end
local out = {}
for i = 1, #all, 2 do
  local e, l, r = string.match(all[i + 1] or '', '^(%d+) %d+ (%d+) ?(%d*)$')
  e, l, r = tonumber(e), tonumber(l), tonumber(r) or 0
  if e and (e > now or (r > 0 and l + forget_us > now)) then
    out[#out + 1] = all[i]
    out[#out + 1] = math.max(0, math.ceil((e - now) / 1000))
    out[#out + 1] = r
  end
end
return out
