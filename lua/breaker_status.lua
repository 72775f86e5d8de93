-- breaker_status.lua: read one pacing key's breaker without changing it.
-- Run by adapt.Adapter.BreakerStatus (for `pacer status`).
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

-- @include breaker_read

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
