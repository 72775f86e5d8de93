-- aimd_achieved.lua: read the achieved rate of one pacing key, as
-- aimd_recover.lua records it. Run by adapt.Adapter.Achieved.
--
-- KEYS[1]  the key's achieved hash, fields as in aimd_recover.lua (KEYS[4])
-- ARGV[1]  none: the script takes no arguments (pass none)
--
-- Reply: integer, accepted sends per second over the last window of at
--   least 5 s, in thousandths; -1 when no window has closed (or the hash is
--   missing or corrupt).
--
-- Writes: none.

local ok, r = pcall(redis.call, 'HGET', KEYS[1], 'r')
local n = ok and tonumber(r) or nil
if not n or n ~= n or n < 0 or n == math.huge then
  return -1
end
return math.floor(n)
