-- aimd_recover.lua: raise one pacing key's adapted rate after a clean
-- window. Run by adapt.Adapter.Recover after successful sends.
--
-- KEYS[1]  aimd hash, fields as in aimd_throttle.lua
-- KEYS[2]  cooldown key, as in cooldown.lua (read only)
-- KEYS[3]  the key's token bucket hash (optional): an increase scales its
--          debt (see reschedule in aimd_read.lua)
-- KEYS[4]  the key's achieved hash (optional): accepted sends of every
--          replica, fields a (sends in the current window), w_us (its start)
--          and r (accepted per second over the last window of >= 5 s, in
--          thousandths); read by `pacer status`
-- ARGV[1]  ceil_u: ceiling in millionths of a message per second, integer in [1, 1e15]
-- ARGV[2]  floor_u: floor, same unit, integer in [1, ceil_u]
-- ARGV[3]  step_u: additive increase of the first clean window, same unit,
--          integer >= 1
-- ARGV[4]  factor: multiplicative increase of the first clean window,
--          decimal number > 1, or 0 to add step_u instead
-- ARGV[5]  window_us: length of a clean window in µs, integer >= 1
-- ARGV[6]  idle_ms: the hash expires this many ms after an increase, integer >= 1
-- ARGV[7]  accel: each increase in a row is this many times the one
--          before, decimal number >= 1 (1: constant steps)
-- ARGV[8]  accepted: sends of this key the caller saw accepted since it last
--          reported, integer >= 0; added to the hash's acc (see
--          aimd_throttle.lua) when the hash exists
-- ARGV[9]  in_use: 1 to raise only a rate in use (the callers report their
--          accepted sends), 0 to raise after any clean window
--
-- Reply: array of 5 integers {urate, change, cooldown_ms, streak, since_us}
--   urate        adapted rate after the call, floor_u <= urate <= ceil_u
--   change       1 if this call raised the rate, else 0
--   cooldown_ms  ms left of the cooldown; 0 when there is none
--   streak       the streak field after the call (0 after an increase)
--   since_us     µs since the last decrease (cut_us, see aimd_throttle.lua),
--                -1 when none is recorded (no hash, or a rate back at the
--                ceiling): a replica that learns of a decrease keeps the
--                slots it was granted after it (the decrease cleared the
--                debt of those before)
-- Error reply "ERR aimd: ..." for malformed ARGV.
--
-- A missing or corrupt hash is a key at its ceiling (reply {ceil_u, 0, cd, 0, -1}).
-- Once Redis TIME reaches win_us + window_us, with no counted throttle since
-- (a throttle moves win_us), and, with in_use, once the sends accepted
-- since win_us (wacc, from every replica's reports) reach 90% of urate over
-- the window less a second (at or above cap > 0: over the window less
-- a quarter of a second), the rate rises by inc * accel^k, where inc is
-- urate * (factor - 1) (or step_u when factor is 0) and k the increases in a
-- row since the last counted throttle: the probe starts gently near the
-- rate the last decrease found and accelerates while the provider accepts.
-- The rate rises by at least 1 and is capped at ceil_u. A rate below the
-- last estimated capacity (cap) goes straight to cap after one clean window
-- (the provider took that much moments ago; the cut left a margin below it
-- and the clean window shows the dip that caused it is over), and the probe
-- starts over gently (k = 0) from there, since that is where the provider
-- refused last; otherwise k grows by one. A new window starts now. The
-- first increase of a rate at or above a known capacity (cap > 0, urate >=
-- cap, k = 0: after a return to cap, a cut that left the rate at or above
-- the estimate, or a lone throttle) waits 4 windows, not one: the rate
-- cruises at the capacity found and probes above it rarely, since a probe
-- that meets the limit costs a cut below it. Above cap, with in_use, k
-- grows only once wacc averages at least (cap + urate) / 2 per second since win_us (the
-- provider took more than cap); else it stays, and so does the step. One
-- call raises the rate at most once, however long the key was idle.
--
-- Writes: KEYS[4] as described above (a window of at least 5 s; PEXPIRE
-- 5 min), HINCRBY acc when accepted > 0 and the hash exists; nothing else
-- before the window is over. After it, KEYS[3] as reschedule does; when the
-- new rate
-- reaches ceil_u, DEL KEYS[1] (a key at its ceiling has no state, so a
-- raised ceiling applies at once); else HSET urate, win_us = now, streak = 0,
-- k and PEXPIRE KEYS[1] idle_ms.

-- @include aimd_read

local step_u, factor, window_us, idle_ms, accel, accepted = numbers(3, 8)
-- Windows a rate at a capacity found cruises there, beyond a clean
-- window, before the probe above it.
local cruise = 3
if not int(accepted, 0) then
  return redis.error_reply('ERR aimd: accepted must be an integer >= 0')
end
if not accel or not (accel >= 1 and accel <= 1000) then
  return redis.error_reply('ERR aimd: accel must be a number in [1, 1000]')
end
if not int(step_u, 1) or not int(window_us, 1) or not int(idle_ms, 1) then
  return redis.error_reply('ERR aimd: step_u, window_us and idle_ms must be integers >= 1')
end
if not factor or not (factor == 0 or (factor > 1 and factor ~= math.huge)) then
  return redis.error_reply('ERR aimd: factor must be 0 or a finite number > 1')
end

-- The achieved rate, whatever the adaptive state.
achieve(accepted)

local cd = left_ms(cooldown_end())
local s = read()
if not s then
  return {ceil_u, 0, cd, 0, -1}
end
if accepted > 0 then
  redis.call('HINCRBY', KEYS[1], 'acc', accepted)
  redis.call('HINCRBY', KEYS[1], 'wacc', accepted)
  s.wacc = s.wacc + accepted
end
-- The first probe above a capacity found (k = 0 at or above cap) waits
-- cruise windows more: a capacity found is probed rarely, since each probe
-- that meets it costs a cut below it.
local span = window_us
if s.k == 0 and s.cap > 0 and s.urate >= s.cap then
  span = (1 + cruise) * window_us
end
if now < s.win_us + span then
  return {s.urate, 0, cd, s.streak, since_cut(s)}
end
-- Only a rate in use is raised: a probe that outruns what the replicas
-- really send (slots granted ahead at an older rate, a key short of
-- messages) would climb blind. The sends accepted since win_us must reach
-- 90% of the rate over the window less a second (the reports of other
-- replicas arrive up to a second late). Above a capacity found, where a
-- blind probe ends in a burst the provider refuses, 90% over the window
-- less a quarter of a second: the pacer reads (and reports) the state of
-- a key below its ceiling every 100 ms, so a replica whose report is late
-- holds the probe until a later call. (Less
-- half a second, as when replicas reported once a second, let a probe
-- climb from 38 to 44 and 51 msgs/s while 31 were sent.)
local lag = 1000000
if s.cap > 0 and s.urate >= s.cap then
  lag = 250000
end
if ARGV[9] == '1' and s.wacc * 1e12 < 0.9 * s.urate * math.max(0, now - s.win_us - lag) then
  return {s.urate, 0, cd, s.streak, since_cut(s)}
end

local inc
if factor > 1 then
  inc = s.urate * (factor - 1)
else
  inc = step_u
end
-- accel^k overflows nothing: k stops growing once a step reaches the ceiling.
inc = math.min(inc * accel ^ math.min(s.k, 64), ceil_u)
local u = math.max(s.urate + 1, math.floor(s.urate + inc))
local k = math.min(s.k + 1, 64)
-- Above a capacity found, a probe step accelerates the next only once the
-- sends accepted over the window average at least halfway from cap to the
-- rate: the provider really took more than cap. Replicas that do not send
-- the raised rate (their reports a second late pass the in-use rule
-- above) keep the step they have rather than doubling it blind.
if ARGV[9] == '1' and s.cap > 0 and s.urate > s.cap and s.k > 0 and
    s.wacc * 1e12 < (s.cap + s.urate) / 2 * math.max(1, now - s.win_us) then
  k = s.k
end
if s.urate < s.cap then
  u, k = s.cap, 0
end
reschedule(s.urate, math.min(u, ceil_u))
if u >= ceil_u then
  redis.call('DEL', KEYS[1])
  if s.urate < ceil_u then
    return {ceil_u, 1, cd, 0, -1}
  end
  return {ceil_u, 0, cd, 0, -1}
end
redis.call('HSET', KEYS[1], 'urate', string.format('%.0f', u), 'win_us', string.format('%.0f', now),
  'streak', '0', 'k', string.format('%.0f', k), 'wacc', '0', 'ceil', string.format('%.0f', ceil_u))
redis.call('PEXPIRE', KEYS[1], idle_ms)
return {u, 1, cd, 0, since_cut(s)}
