-- window.lua: count n events against a sliding-window quota of max events
-- per period, unless that would exceed it. Run by window.Counter.Admit.
--
-- KEYS[1]  window hash, fields (decimal integer strings):
--            start_us  start of the current fixed window, in microseconds
--                      of Redis TIME since the Unix epoch, a multiple of period_us
--            cur       events counted in the current window
--            prev      events counted in the window before it
-- ARGV[1]  max: events allowed per period, integer in [1, 1e9]
-- ARGV[2]  period_us: window length in microseconds, integer in [1000, 2^48]
-- ARGV[3]  n: events to count, integer in [1, max]
--
-- Reply: array of 3 integers {allowed, remaining, wait_us}
--   allowed    1 if the n events were counted, else 0
--   remaining  events that could still be counted now (after the call)
--   wait_us    refused: microseconds until n events would be allowed if
--              nothing else is counted (>= 1); allowed: 0
-- Error reply "ERR window: ..." for malformed ARGV.
--
-- The counting (sliding-window counter, clock steps, corrupt hashes) is
-- window_read.lua's, shared with quota.lua. Clock: redis.call('TIME').
--
-- Writes: when allowed, HSET start_us cur prev and PEXPIRE KEYS[1] to the
-- end of the next window (when both counts are irrelevant) + 1 ms.
-- A refusal writes nothing.

local max = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
if not max or max < 1 or max ~= math.floor(max) or max > 1e9 then
  return redis.error_reply('ERR window: max must be an integer in [1, 1e9]')
end
if not period or period < 1000 or period ~= math.floor(period) or period > 281474976710656 then
  return redis.error_reply('ERR window: period_us must be an integer in [1000, 2^48]')
end
if not n or n < 1 or n ~= math.floor(n) or n > max then
  return redis.error_reply('ERR window: n must be an integer in [1, max]')
end

-- @include clock
-- @include window_read

local cur, prev, w, elapsed, wrongtype = window_read(KEYS[1], period)
local est = window_count(cur, prev, elapsed, period)

if est + n <= max then
  window_store(KEYS[1], w, cur + n, prev, period, wrongtype)
  return {1, max - est - n, 0}
end

local remaining = max - est
if remaining < 0 then
  remaining = 0
end
return {0, remaining, window_wait(cur, prev, n, max, period, elapsed)}
