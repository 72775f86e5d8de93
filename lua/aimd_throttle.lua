-- aimd_throttle.lua: record a throttle of one pacing key: lower its adapted
-- rate multiplicatively (once per burst of throttles) and set its cooldown.
-- Run by adapt.Adapter.Throttled.
--
-- KEYS[1]  aimd hash, fields (decimal integer strings):
--            urate    adapted rate, in millionths of a message per second
--            last_us  Redis TIME of the last counted throttle, in µs since the Unix epoch
--            hold_us  throttles before this time (µs) belong to the last counted one
--            win_us   start of the current clean window (µs); no increase
--                     before win_us + window_us
--            streak   counted throttles in a row that found the rate at the floor
-- KEYS[2]  cooldown key, as in cooldown.lua: a string, the cooldown's end in
--          µs of Redis TIME; its TTL only cleans it up
-- ARGV[1]  ceil_u: ceiling in millionths of a message per second, integer in [1, 1e15]
-- ARGV[2]  floor_u: floor, same unit, integer in [1, ceil_u]
-- ARGV[3]  decrease: multiplicative factor, decimal number in (0, 1)
-- ARGV[4]  coalesce_us: a throttle less than this many µs after a counted
--          one is part of it, integer >= 1
-- ARGV[5]  cooldown_ms: cooldown to set, integer >= 1
-- ARGV[6]  idle_ms: the hash expires this many ms after win_us, integer >= 1
--
-- Reply: array of 4 integers {urate, change, cooldown_ms, streak}
--   urate        adapted rate after the call, floor_u <= urate <= ceil_u
--   change       -1 if this call lowered the rate, else 0
--   cooldown_ms  ms left of the cooldown after the call, >= ARGV[5]
--   streak       the streak field after the call
-- Error reply "ERR aimd: ..." for malformed ARGV.
--
-- A missing or corrupt hash (wrong type, a field missing, not an integer,
-- out of range) is a key at its ceiling. The stored rate is clamped to
-- [floor_u, ceil_u] on every read, so a lowered ceiling applies at once.
--
-- A throttle at or after hold_us is counted: the rate becomes
-- max(floor_u, floor(urate * decrease)), streak grows by one if urate was at
-- the floor already and is 0 otherwise, last_us = now,
-- hold_us = max(now + coalesce_us, cooldown end) and win_us = cooldown end
-- (the clean window starts when sending resumes). A throttle before hold_us
-- comes from the same burst of in-flight requests: the rate and streak stay,
-- and hold_us and win_us only move out to the cooldown's end.
--
-- Writes: always. SET KEYS[2] <end_us> PX cooldown_ms unless the cooldown
-- already ends later (never shortened); HSET of all five fields of KEYS[1]
-- (DEL first if it has the wrong type) and PEXPIRE KEYS[1] to
-- (win_us - now) / 1000 + idle_ms.

-- @include aimd_read

local decrease = tonumber(ARGV[3])
local coalesce_us = tonumber(ARGV[4])
local cooldown_ms = tonumber(ARGV[5])
local idle_ms = tonumber(ARGV[6])
if not decrease or not (decrease > 0 and decrease < 1) then
  return redis.error_reply('ERR aimd: decrease must be a number in (0, 1)')
end
if not int(coalesce_us, 1) or not int(cooldown_ms, 1) or not int(idle_ms, 1) then
  return redis.error_reply('ERR aimd: coalesce_us, cooldown_ms and idle_ms must be integers >= 1')
end

-- The cooldown, as cooldown.lua sets it: never shortened.
local cd = cooldown_end()
local want = now + cooldown_ms * 1000
if cd < want then
  redis.call('SET', KEYS[2], string.format('%.0f', want), 'PX', cooldown_ms)
  cd = want
end

local s, wrongtype = read()
local change = 0
if not s then
  s = {urate = ceil_u, last_us = 0, hold_us = 0, win_us = 0, streak = 0}
end
if now < s.hold_us then
  s.hold_us = math.max(s.hold_us, cd)
  s.win_us = math.max(s.win_us, cd)
else
  if s.urate <= floor_u then
    s.streak = s.streak + 1
  else
    s.streak = 0
  end
  local u = math.max(floor_u, math.floor(s.urate * decrease))
  if u < s.urate then
    change = -1
  end
  s.urate = u
  s.last_us = now
  s.hold_us = math.max(now + coalesce_us, cd)
  s.win_us = cd
end

if wrongtype then
  redis.call('DEL', KEYS[1])
end
local f = '%.0f'
redis.call('HSET', KEYS[1], 'urate', string.format(f, s.urate), 'last_us', string.format(f, s.last_us),
  'hold_us', string.format(f, s.hold_us), 'win_us', string.format(f, s.win_us),
  'streak', string.format(f, s.streak))
redis.call('PEXPIRE', KEYS[1], left_ms(s.win_us) + idle_ms)
return {s.urate, change, left_ms(cd), s.streak}
