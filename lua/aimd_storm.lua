-- aimd_storm.lua: count one server error (an HTTP 5xx answer) of a pacing
-- key and, when errors come in a burst, lower the key's adapted rate once
-- by a mild factor. A provider that answers 5xx in bursts is overloaded
-- and asks senders to slow down (FCM: "slow down on bursts of errors").
-- Run by adapt.Adapter.ServerError.
--
-- KEYS[1]  aimd hash, fields as in aimd_throttle.lua
-- KEYS[2]  cooldown key, as in cooldown.lua (read only)
-- KEYS[3]  the key's token bucket hash (optional): a decrease clears its
--          debt (see reschedule in aimd_read.lua)
-- KEYS[4]  the key's achieved hash (unused; kept for the KEYS of every
--          aimd script)
-- KEYS[5]  server-error hash, fields (decimal integer strings):
--            n     server errors counted in the current window
--            w_us  start of the current window, µs of Redis TIME
-- ARGV[1]  ceil_u: ceiling in millionths of a message per second, integer in [1, 1e15]
-- ARGV[2]  floor_u: floor, same unit, integer in [1, ceil_u]
-- ARGV[3]  burst: server errors within one window that lower the rate,
--          integer >= 1
-- ARGV[4]  window_us: length of a window in µs, integer >= 1
-- ARGV[5]  decrease: the rate is multiplied by this, decimal number in (0, 1)
-- ARGV[6]  idle_ms: the aimd hash expires this many ms after a decrease,
--          integer >= 1
--
-- Reply: array of 5 integers {urate, change, cooldown_ms, streak, since_us}
--   as aimd_throttle.lua's; change is -1 when this call lowered the rate.
-- Error reply "ERR aimd: ..." for malformed ARGV.
--
-- The window starts at the first error after the last one ended (or after
-- a decrease); the burst-th error within it lowers the rate to
-- max(floor_u, floor(urate * decrease)) and starts the count again, so a
-- storm lowers the rate at most once per window, whatever the number of
-- replicas that see it. A missing or corrupt aimd hash is a key at its
-- ceiling. The decrease is an AIMD decrease like a throttle's: the clean
-- window before the next increase starts now (win_us, or later if a
-- throttle's cooldown set it so), the probe starts
-- gently (k = 0), cut_us = now (replicas drop the slots granted before
-- it), and the bucket's debt is cleared. It sets no cooldown: the failed
-- messages wait their own retry delay. The capacity estimate (cap) and
-- the throttle episode are left alone: a server error says nothing of the
-- provider's rate limit.
--
-- Writes: KEYS[5] (HSET n, w_us; PEXPIRE at the window's end; DEL at a
-- burst's last error); on a decrease, KEYS[1]
-- (HSET urate, win_us, k = 0, wacc = 0, cut_us, ceil, and last_us,
-- hold_us, streak when the hash was missing; PEXPIRE to win_us + idle_ms) and KEYS[3]
-- as reschedule does.

-- @include aimd_read

local burst, window_us, decrease, idle_ms = numbers(3, 6)
if not int(burst, 1) or not int(window_us, 1) or not int(idle_ms, 1) then
  return redis.error_reply('ERR aimd: burst, window_us and idle_ms must be integers >= 1')
end
if not decrease or not (decrease > 0 and decrease < 1) then
  return redis.error_reply('ERR aimd: decrease must be a number in (0, 1)')
end

local cd = left_ms(cooldown_end())
local s, wrongtype = read()

local n, w = 0, nil
local ok, h = pcall(redis.call, 'HMGET', KEYS[5], 'n', 'w_us')
if ok and type(h) == 'table' and not h.err then
  n, w = int(h[1], 0) or 0, int(h[2], 0)
else
  redis.call('DEL', KEYS[5])
end
if not w or w > now or now >= w + window_us then
  n, w = 0, now
end
n = n + 1
if n < burst then
  redis.call('HSET', KEYS[5], 'n', n, 'w_us', string.format('%.0f', w))
  redis.call('PEXPIRE', KEYS[5], math.max(1, left_ms(w + window_us)))
  if not s then
    return {ceil_u, 0, cd, 0, -1}
  end
  return {s.urate, 0, cd, s.streak, since_cut(s)}
end
-- The burst is complete: the count starts again with the next error.
redis.call('DEL', KEYS[5])

local fresh = not s
if fresh then
  if wrongtype then
    redis.call('DEL', KEYS[1])
  end
  s = {urate = ceil_u, streak = 0, cut_us = 0, win_us = 0}
end
local to = math.max(floor_u, math.floor(s.urate * decrease))
if to >= s.urate then -- at the floor already
  return {s.urate, 0, cd, s.streak, since_cut(s)}
end
reschedule(s.urate, to, false)
local win = math.max(s.win_us, now) -- a throttle's cooldown may have moved it later
redis.call('HSET', KEYS[1], 'urate', string.format('%.0f', to), 'win_us', string.format('%.0f', win), 'k', 0,
  'wacc', 0, 'cut_us', string.format('%.0f', now), 'ceil', string.format('%.0f', ceil_u))
if fresh then
  redis.call('HSET', KEYS[1], 'last_us', 0, 'hold_us', 0, 'streak', 0)
end
redis.call('PEXPIRE', KEYS[1], left_ms(win) + idle_ms)
return {to, -1, cd, s.streak, 0}
