-- window_read.lua: a fragment, not a script. compose splices it in place of
-- the line "-- @include window_read" of each script that counts a
-- sliding-window quota (window.lua, quota.lua), so that both read, count and
-- store a window with the same code.
--
-- Reads no KEYS or ARGV and not the clock: the including script defines now
-- (Redis TIME in µs since the Unix epoch) before the include. Defines the
-- functions window_read, window_count, window_wait and window_store.
--
-- The sliding-window counter: the count at now is
--   cur + ceil(prev * (period - elapsed) / period)
-- where elapsed is the time since the start of the current fixed window:
-- the previous window's events are taken as spread evenly over it, and the
-- part of it still inside the sliding window counts. Rounding up never lets
-- more through than that. Every fixed window holds at most max events; a
-- sliding window may hold more only when the previous window's events
-- bunched at its end.
--
-- A missing or corrupt hash is an empty window; one whose window started two
-- or more periods ago too. A hash whose window starts after now (the clock
-- stepped back) keeps its counts as the current window's and is re-based to
-- now's window on the next grant: no counts are lost, and the key stalls at
-- most for the clock step.

-- window_read returns, for the window hash at key of period_us: cur and
-- prev at now, the start of now's fixed window, the microseconds elapsed in
-- it, and whether key has the wrong type.
local function window_read(key, period)
  local w = now - now % period
  local cur, prev = 0, 0
  local ok, h = pcall(redis.call, 'HMGET', key, 'start_us', 'cur', 'prev')
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
  return cur, prev, w, now - w, wrongtype
end

-- window_count is the sliding count e microseconds into a window.
local function window_count(c, p, e, period)
  return c + math.ceil(p * (period - e) / period)
end

-- window_need returns the fewest microseconds e into a window (0 <= e <=
-- period) at which window_count(c, p, e) + n <= max, or nil if even
-- e = period is too early.
local function window_need(c, p, n, max, period)
  local room = max - n - c
  if room < 0 then
    return nil
  end
  if p <= room then
    return 0
  end
  -- ceil(p * (period - e) / period) <= room  <=>  p * (period - e) <= room * period
  local e = period - math.floor(room * period / p)
  while e > 0 and window_count(c, p, e - 1, period) + n <= max do
    e = e - 1
  end
  while e <= period and window_count(c, p, e, period) + n > max do
    e = e + 1
  end
  return e
end

-- window_wait returns the microseconds (>= 1) until n more events fit, for
-- a window holding cur and prev at elapsed, if nothing else is counted.
local function window_wait(cur, prev, n, max, period, elapsed)
  local e = window_need(cur, prev, n, max, period)
  local wait
  if e and e < period then
    wait = e - elapsed
  else
    -- In the next window cur becomes prev and nothing is counted yet.
    wait = (period - elapsed) + (window_need(0, cur, n, max, period) or period)
  end
  if wait < 1 then
    wait = 1
  end
  return wait
end

-- window_store writes the counts of the fixed window starting at w and
-- expires the hash at the end of the next window (when both counts are
-- irrelevant) + 1 ms.
local function window_store(key, w, cur, prev, period, wrongtype)
  if wrongtype then
    redis.call('DEL', key)
  end
  redis.call('HSET', key, 'start_us', string.format('%.0f', w),
    'cur', string.format('%.0f', cur), 'prev', string.format('%.0f', prev))
  redis.call('PEXPIRE', key, math.ceil((w + 2 * period - now) / 1000) + 1)
end
