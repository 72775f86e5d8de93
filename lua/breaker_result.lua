-- breaker_result.lua: report the outcome of a send to one pacing key's
-- breaker. Run by adapt.Adapter.BreakerResult.
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

-- @include breaker_read

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
