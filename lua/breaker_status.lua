-- breaker_status.lua: read one pacing key's breaker without changing it.
-- Run by bucket.Limiter.BreakerStatus (for `pacer status`).
--
-- KEYS[1]  breaker hash, fields as in breaker_allow.lua (opens, until_us,
--          probe_us, owner, reason)
-- ARGV[1]  none: the script takes no arguments
--
-- Reply: array {state, opens, open_left_us, probe_left_us, owner, reason}:
-- four integers, then two strings
--   state          0 closed, 1 open, 2 half-open
--   opens          opens in a row; 0 when closed
--   open_left_us   µs left of the open period; 0 unless open
--   probe_left_us  µs left of a live probe lease; 0 when none
--   owner          holder of the live probe lease; "" when none
--   reason         why the breaker opened; "" when closed
--
-- Writes: none.

-- BEGIN breaker read (identical in breaker_allow.lua, breaker_result.lua and breaker_status.lua)
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

-- read returns the breaker in KEYS[1] and its state (0 closed, 1 open,
-- 2 half-open), and whether KEYS[1] has the wrong type. A missing or corrupt
-- hash is a closed breaker (nil state table).
local function read()
  local ok, h = pcall(redis.call, 'HMGET', KEYS[1], 'opens', 'until_us', 'probe_us', 'owner', 'reason')
  if not ok or type(h) ~= 'table' or h.err then
    return nil, 0, true
  end
  local b = {opens = int(h[1], 1), until_us = int(h[2], 0), probe_us = int(h[3], 0),
    owner = type(h[4]) == 'string' and h[4] or '', reason = type(h[5]) == 'string' and h[5] or ''}
  if not (b.opens and b.until_us and b.probe_us) then
    return nil, 0, false
  end
  if b.owner == '' then
    b.probe_us = 0 -- a lease without an owner is no lease
  end
  if now < b.until_us then
    return b, 1, false
  end
  return b, 2, false
end

-- expire sets KEYS[1] to expire idle_ms after the later of until_us and probe_us.
local function expire(b, idle_ms)
  local last = math.max(b.until_us, b.probe_us, now)
  redis.call('PEXPIRE', KEYS[1], math.ceil((last - now) / 1000) + idle_ms)
end
-- END breaker read

local b, state = read()
if state == 0 then
  return {0, 0, 0, 0, '', ''}
end
local open_left, probe_left, owner = 0, 0, ''
if state == 1 then
  open_left = b.until_us - now
end
if b.probe_us > now then
  probe_left, owner = b.probe_us - now, b.owner
end
return {state, b.opens, open_left, probe_left, owner, b.reason}
