-- aimd_pairs.lua: read the pairs of one pacing key in cooldown, as
-- aimd_pair.lua set them. Run by adapt.Adapter.PairCooldowns.
--
-- KEYS[1]  pairs hash of the pacing key, as in aimd_pair.lua
-- ARGV[1]  none: the script takes no arguments (pass none)
--
-- Reply: flat array {sub_1, left_ms_1, sub_2, left_ms_2, ...}: each pair
--   whose cooldown has not ended, with the ms left (integer >= 1); empty
--   when there are none or the hash is missing or corrupt.
--
-- Writes: none.

-- @include adapt_base

local ok, all = pcall(redis.call, 'HGETALL', KEYS[1])
if not ok or type(all) ~= 'table' or all.err then
  return {}
end
local out = {}
for i = 1, #all, 2 do
  local e = tonumber(string.match(all[i + 1] or '', '^(%d+) '))
  if e and e > now then
    out[#out + 1] = all[i]
    out[#out + 1] = math.ceil((e - now) / 1000)
  end
end
return out
