-- aimd_state.lua: read one pacing key's adapted rate and cooldown without
-- changing them. Run by bucket.Limiter.Adapted (caches, `pacer status`).
--
-- KEYS[1]  aimd hash, fields as in aimd_throttle.lua (urate, last_us,
--          hold_us, win_us, streak)
-- KEYS[2]  cooldown key, as in cooldown.lua
-- ARGV[1]  ceil_u: ceiling in millionths of a message per second, integer in [1, 1e15]
-- ARGV[2]  floor_u: floor, same unit, integer in [1, ceil_u]
--
-- Reply: array of 4 integers {urate, change, cooldown_ms, streak}
--   urate        adapted rate, clamped to [floor_u, ceil_u]; ceil_u when the
--                hash is missing or corrupt
--   change       always 0
--   cooldown_ms  ms left of the cooldown; 0 when there is none
--   streak       the streak field; 0 when the hash is missing or corrupt
-- Error reply "ERR aimd: ..." for malformed ARGV.
--
-- Writes: none.

-- BEGIN aimd read (identical in aimd_throttle.lua, aimd_recover.lua and aimd_state.lua)
local ceil_u = tonumber(ARGV[1])
local floor_u = tonumber(ARGV[2])
if not ceil_u or ceil_u < 1 or ceil_u > 1e15 or ceil_u ~= math.floor(ceil_u) then
  return redis.error_reply('ERR aimd: ceil_u must be an integer in [1, 1e15]')
end
if not floor_u or floor_u < 1 or floor_u > ceil_u or floor_u ~= math.floor(floor_u) then
  return redis.error_reply('ERR aimd: floor_u must be an integer in [1, ceil_u]')
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- int returns v as a number if it is a finite integer >= lo, else nil.
local function int(v, lo)
  local n = tonumber(v)
  if not n or n ~= n or n == math.huge or n < lo or n ~= math.floor(n) then
    return nil
  end
  return n
end

-- read returns the state in KEYS[1] with urate clamped to [floor_u, ceil_u],
-- or nil when the hash is missing or corrupt, and whether KEYS[1] has the
-- wrong type.
local function read()
  local ok, h = pcall(redis.call, 'HMGET', KEYS[1], 'urate', 'last_us', 'hold_us', 'win_us', 'streak')
  if not ok or type(h) ~= 'table' or h.err then
    return nil, true
  end
  local s = {urate = int(h[1], 1), last_us = int(h[2], 0), hold_us = int(h[3], 0),
    win_us = int(h[4], 0), streak = int(h[5], 0)}
  if not (s.urate and s.last_us and s.hold_us and s.win_us and s.streak) then
    return nil, false
  end
  s.urate = math.max(floor_u, math.min(ceil_u, s.urate))
  return s, false
end

-- cooldown_end returns the end (µs) of the cooldown in KEYS[2], or 0 when
-- there is none (missing, corrupt, wrong type or over).
local function cooldown_end()
  local ok, cd = pcall(redis.call, 'GET', KEYS[2])
  cd = ok and tonumber(cd) or nil
  if cd and cd == cd and cd ~= math.huge and cd > now then
    return cd
  end
  return 0
end

-- left_ms returns the ms from now until end_us, rounded up; 0 if past.
local function left_ms(end_us)
  if end_us <= now then
    return 0
  end
  return math.ceil((end_us - now) / 1000)
end
-- END aimd read

local cd = left_ms(cooldown_end())
local s = read()
if not s then
  return {ceil_u, 0, cd, 0}
end
return {s.urate, 0, cd, s.streak}
