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
-- The sliding-window counter: the count at now is
--   cur + ceil(prev * (period - elapsed) / period)
-- where elapsed is the time since start_us: the previous window's events
-- are taken as spread evenly over it, and the part of it still inside the
-- sliding window counts. Rounding up never lets more through than that.
-- Every fixed window holds at most max events; a sliding window may hold
-- more only when the previous window's events bunched at its end.
--
-- Clock: redis.call('TIME'). A missing or corrupt hash is an empty window;
-- one whose window started two or more periods ago too. A hash whose window
-- starts after now (the clock stepped back) keeps its counts as the current
-- window's and is re-based to now's window on the next grant: no counts are
-- lost, and the key stalls at most for the clock step.
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

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local w = now - now % period

local cur, prev = 0, 0
local ok, h = pcall(redis.call, 'HMGET', KEYS[1], 'start_us', 'cur', 'prev')
local wrongtype = not ok or type(h) ~= 'table' or h.err
if not wrongtype then
  local s, c, p = tonumber(h[1]), tonumber(h[2]), tonumber(h[3])
  if s and c and p and s == math.floor(s) and c == math.floor(c) and p == math.floor(p)
      and s >= 0 and c >= 0 and p >= 0 and c <= 1e15 and p <= 1e15 then
    if s >= w then
      cur, prev = c, p
    elseif s == w - period then
      prev = c
    end
  end
end

local elapsed = now - w
local function count(c, p, e)
  return c + math.ceil(p * (period - e) / period)
end
local est = count(cur, prev, elapsed)

if est + n <= max then
  cur = cur + n
  if wrongtype then
    redis.call('DEL', KEYS[1])
  end
  redis.call('HSET', KEYS[1], 'start_us', string.format('%.0f', w),
    'cur', string.format('%.0f', cur), 'prev', string.format('%.0f', prev))
  redis.call('PEXPIRE', KEYS[1], math.ceil((w + 2 * period - now) / 1000) + 1)
  return {1, max - est - n, 0}
end

-- need returns the fewest microseconds e into a window (0 <= e <= period)
-- at which count(c, p, e) + n <= max, or nil if even e = period is too early.
local function need(c, p)
  local room = max - n - c
  if room < 0 then
    return nil
  end
  if p <= room then
    return 0
  end
  -- ceil(p * (period - e) / period) <= room  <=>  p * (period - e) <= room * period
  local e = period - math.floor(room * period / p)
  while e > 0 and count(c, p, e - 1) + n <= max do
    e = e - 1
  end
  while e <= period and count(c, p, e) + n > max do
    e = e + 1
  end
  return e
end

local remaining = max - est
if remaining < 0 then
  remaining = 0
end
local e = need(cur, prev)
local wait
if e and e < period then
  wait = e - elapsed
else
  -- In the next window cur becomes prev and nothing is counted yet.
  wait = (period - elapsed) + (need(0, cur) or period)
end
if wait < 1 then
  wait = 1
end
return {0, remaining, wait}
