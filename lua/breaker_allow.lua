-- breaker_allow.lua: ask one pacing key's breaker whether a send may go.
-- Run by adapt.Adapter.BreakerAllow.
--
-- KEYS[1]  breaker hash, fields:
--            opens     opens in a row without a success since (decimal integer >= 1)
--            until_us  end of the open period, µs of Redis TIME since the Unix epoch
--            probe_us  end of the half-open probe lease (µs); 0 when none was granted
--            owner     holder of the probe lease (string; "" when none)
--            reason    why the breaker opened, as given to breaker_result.lua (string)
--          No hash (or a corrupt one: a number field missing or not an
--          integer) is a closed breaker.
-- ARGV[1]  owner: the asking replica, non-empty string
-- ARGV[2]  probe_ms: lifetime of a probe lease, integer >= 1
-- ARGV[3]  idle_ms: the hash expires this many ms after the lease ends, integer >= 1
--
-- Reply: array of 4 integers {allowed, probe, wait_us, state}
--   allowed  1 if the send may go, else 0
--   probe    1 if the send is the half-open probe (owner holds the lease), else 0
--   wait_us  refused: µs until the open period or the other owner's lease
--            ends (>= 1); allowed: 0
--   state    0 closed, 1 open (TIME before until_us), 2 half-open
-- Error reply "ERR breaker: ..." for malformed ARGV.
--
-- Closed: allowed. Open: refused. Half-open: allowed as the probe if no
-- lease is live (probe_us <= now) or owner holds it; refused while another
-- owner's lease is live. A lease is not renewed by asking again, so an
-- owner that never reports loses it after probe_ms.
--
-- Writes: only when granting a new lease: HSET probe_us = now + probe_ms
-- and owner, PEXPIRE KEYS[1] probe_ms + idle_ms.

-- @include breaker_read

local owner = ARGV[1]
local probe_ms = tonumber(ARGV[2])
local idle_ms = tonumber(ARGV[3])
if not owner or owner == '' then
  return redis.error_reply('ERR breaker: owner must be non-empty')
end
if not int(probe_ms, 1) or not int(idle_ms, 1) then
  return redis.error_reply('ERR breaker: probe_ms and idle_ms must be integers >= 1')
end

local b, state = read()
if state == 0 then
  return {1, 0, 0, 0}
end
if state == 1 then
  return {0, 0, b.until_us - now, 1}
end
if now < b.probe_us then
  if b.owner == owner then
    return {1, 1, 0, 2}
  end
  return {0, 0, b.probe_us - now, 2}
end
b.probe_us = now + probe_ms * 1000
redis.call('HSET', KEYS[1], 'probe_us', string.format('%.0f', b.probe_us), 'owner', owner)
expire(b, idle_ms)
return {1, 1, 0, 2}
