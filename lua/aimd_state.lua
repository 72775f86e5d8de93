-- aimd_state.lua: read one pacing key's adapted rate and cooldown without
-- changing them. Run by adapt.Adapter.Adapted (caches, `pacer status`).
--
-- KEYS[1]  aimd hash, fields as in aimd_throttle.lua
-- KEYS[2]  cooldown key, as in cooldown.lua
-- ARGV[1]  ceil_u: ceiling in millionths of a message per second, integer in [1, 1e15]
-- ARGV[2]  floor_u: floor, same unit, integer in [1, ceil_u]
--
-- Reply: array of 5 integers {urate, change, cooldown_ms, streak, since_us}
--   urate        adapted rate, clamped to [floor_u, ceil_u]; ceil_u when the
--                hash is missing or corrupt
--   change       always 0
--   cooldown_ms  ms left of the cooldown; 0 when there is none
--   streak       the streak field; 0 when the hash is missing or corrupt
--   since_us     µs since the last decrease, -1 when none is recorded (see
--                aimd_recover.lua)
-- Error reply "ERR aimd: ..." for malformed ARGV.
--
-- Writes: none.

-- @include aimd_read

local cd = left_ms(cooldown_end())
local s = read()
if not s then
  return {ceil_u, 0, cd, 0, -1}
end
return {s.urate, 0, cd, s.streak, since_cut(s)}
