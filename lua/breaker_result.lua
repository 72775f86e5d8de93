-- breaker_result.lua: report the outcome of a send to one pacing key's
-- breaker. Run by bucket.Limiter.BreakerResult.
--
-- KEYS[1]  breaker hash, fields as in breaker_allow.lua (opens, until_us,
--          probe_us, owner, reason)
-- ARGV[1]  ok: "1" for a success, "0" for a halt (the provider refuses
--          everything from this key, or it is throttled at its floor)
-- ARGV[2]  open_ms: first open period, integer >= 1
-- ARGV[3]  max_open_ms: longest open period, integer >= open_ms
-- ARGV[4]  idle_ms: the hash expires this many ms after the open period ends, integer >= 1
-- ARGV[5]  reason: why it opens (string, may be empty; ignored when ok)
--
-- Reply: array of 3 integers {state, opens, open_left_us}
--   state         after the call: 0 closed, 1 open, 2 half-open
--   opens         the opens field after the call; 0 when closed
--   open_left_us  µs left of the open period; 0 unless open
-- Error reply "ERR breaker: ..." for malformed ARGV.
--
-- Success: closes a half-open breaker. While open it comes from a send that
-- left before the breaker opened, and changes nothing; closed stays closed.
-- Halt: opens a closed breaker with opens = 1, and reopens a half-open one
-- with opens + 1 (the probe failed); the open period is open_ms doubled
-- opens - 1 times, at most max_open_ms. While open it changes nothing (a
-- send that left before the breaker opened).
--
-- Writes: closing: DEL KEYS[1]. Opening: HSET of all five fields (probe_us
-- 0, owner "", DEL first if KEYS[1] has the wrong type) and PEXPIRE KEYS[1]
-- to the open period + idle_ms. Otherwise nothing.

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

local ok = ARGV[1]
local open_ms = tonumber(ARGV[2])
local max_open_ms = tonumber(ARGV[3])
local idle_ms = tonumber(ARGV[4])
local reason = ARGV[5] or ''
if ok ~= '0' and ok ~= '1' then
  return redis.error_reply('ERR breaker: ok must be "0" or "1"')
end
if not int(open_ms, 1) or not int(idle_ms, 1) or not int(max_open_ms, open_ms) then
  return redis.error_reply('ERR breaker: open_ms, max_open_ms and idle_ms must be integers >= 1, max_open_ms >= open_ms')
end

local b, state, wrongtype = read()
if state == 1 then
  return {1, b.opens, b.until_us - now}
end
if ok == '1' then
  if state == 2 then
    redis.call('DEL', KEYS[1])
  end
  return {0, 0, 0}
end

local opens = 1
if state == 2 then
  opens = b.opens + 1
end
local d = open_ms
for _ = 2, opens do
  if d >= max_open_ms then
    break
  end
  d = d * 2
end
d = math.min(d, max_open_ms)

if wrongtype then
  redis.call('DEL', KEYS[1])
end
b = {opens = opens, until_us = now + d * 1000, probe_us = 0}
redis.call('HSET', KEYS[1], 'opens', string.format('%.0f', opens),
  'until_us', string.format('%.0f', b.until_us), 'probe_us', '0', 'owner', '', 'reason', reason)
expire(b, idle_ms)
return {1, opens, d * 1000}
