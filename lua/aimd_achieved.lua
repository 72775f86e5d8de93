-- aimd_achieved.lua: read the achieved rate of one pacing key, as
-- aimd_recover.lua records it. Run by adapt.Adapter.Achieved.
--
-- KEYS[1]  the key's achieved hash, fields as in aimd_recover.lua (KEYS[4])
-- ARGV[1]  none: the script takes no arguments (pass none)
--
-- Reply: integer, accepted sends per second over the last window of at
--   least 5 s, in thousandths; -2 while the key is warming up (a window is
--   open and none has closed since the key became active, or since it was
--   idle for part of one: see achieve in aimd_read.lua); -1 when the hash
--   is missing or corrupt (no report in the last 5 minutes).
--
-- Writes: none.

local ok, h = pcall(redis.call, 'HMGET', KEYS[1], 'r', 'w_us')
if not ok or type(h) ~= 'table' or h.err then
  return -1
end
local n = tonumber(h[1])
if n and n == n and n >= 0 and n ~= math.huge then
  return math.floor(n)
end
local w = tonumber(h[2])
if w and w == w and w >= 0 and w ~= math.huge then
  return -2
end
return -1
