-- aimd_recover.lua: raise one pacing key's adapted rate after a clean
-- window. Run by adapt.Adapter.Recover after successful sends.
--
-- KEYS[1]  aimd hash, fields as in aimd_throttle.lua (urate, last_us,
--          hold_us, win_us, streak)
-- KEYS[2]  cooldown key, as in cooldown.lua (read only)
-- ARGV[1]  ceil_u: ceiling in millionths of a message per second, integer in [1, 1e15]
-- ARGV[2]  floor_u: floor, same unit, integer in [1, ceil_u]
-- ARGV[3]  step_u: additive increase per clean window, same unit, integer >= 1
-- ARGV[4]  factor: multiplicative increase, decimal number > 1, or 0 to
--          add step_u instead
-- ARGV[5]  window_us: length of a clean window in µs, integer >= 1
-- ARGV[6]  idle_ms: the hash expires this many ms after an increase, integer >= 1
--
-- Reply: array of 4 integers {urate, change, cooldown_ms, streak}
--   urate        adapted rate after the call, floor_u <= urate <= ceil_u
--   change       1 if this call raised the rate, else 0
--   cooldown_ms  ms left of the cooldown; 0 when there is none
--   streak       the streak field after the call (0 after an increase)
-- Error reply "ERR aimd: ..." for malformed ARGV.
--
-- A missing or corrupt hash is a key at its ceiling (reply {ceil_u, 0, cd, 0}).
-- Once Redis TIME reaches win_us + window_us, with no counted throttle since
-- (a throttle moves win_us), the rate rises to urate * factor (at least
-- urate + 1) or urate + step_u, capped at ceil_u, and a new window starts
-- now. One call raises the rate at most once, however long the key was idle.
--
-- Writes: nothing before the window is over. After it, when the new rate
-- reaches ceil_u, DEL KEYS[1] (a key at its ceiling has no state, so a
-- raised ceiling applies at once); else HSET urate, win_us = now, streak = 0
-- and PEXPIRE KEYS[1] idle_ms.

-- @include aimd_read

local step_u = tonumber(ARGV[3])
local factor = tonumber(ARGV[4])
local window_us = tonumber(ARGV[5])
local idle_ms = tonumber(ARGV[6])
if not int(step_u, 1) or not int(window_us, 1) or not int(idle_ms, 1) then
  return redis.error_reply('ERR aimd: step_u, window_us and idle_ms must be integers >= 1')
end
if not factor or not (factor == 0 or (factor > 1 and factor ~= math.huge)) then
  return redis.error_reply('ERR aimd: factor must be 0 or a finite number > 1')
end

local cd = left_ms(cooldown_end())
local s = read()
if not s then
  return {ceil_u, 0, cd, 0}
end
if now < s.win_us + window_us then
  return {s.urate, 0, cd, s.streak}
end

local u
if factor > 1 then
  u = math.max(s.urate + 1, math.floor(s.urate * factor))
else
  u = s.urate + step_u
end
if u >= ceil_u then
  redis.call('DEL', KEYS[1])
  if s.urate < ceil_u then
    return {ceil_u, 1, cd, 0}
  end
  return {ceil_u, 0, cd, 0}
end
redis.call('HSET', KEYS[1], 'urate', string.format('%.0f', u), 'win_us', string.format('%.0f', now),
  'streak', '0')
redis.call('PEXPIRE', KEYS[1], idle_ms)
return {u, 1, cd, 0}
