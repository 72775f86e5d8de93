-- state.lua: read one token bucket and its cooldown without changing them.
-- Run by bucket.Limiter.State (for `pacer status`).
--
-- KEYS[1]  bucket hash, fields as in reserve.lua (utokens, ts_us)
-- KEYS[2]  cooldown key
-- ARGV[1]  rate: refill in tokens per second, decimal number, finite and > 0
-- ARGV[2]  burst: capacity in tokens, integer >= 1
--
-- Reply: array of 2 integers {utokens, cooldown_ms}
--   utokens      tokens in the bucket now, in millionths of a token, computed
--                with the same refill maths as reserve.lua
--                (-10^15 <= utokens <= burst * 10^6; negative is a debt)
--   cooldown_ms  milliseconds left of the cooldown, rounded up; 0 when there is none
-- Error reply "ERR state: ..." for malformed ARGV.
--
-- Writes: none.

-- @include limit_args

local rate, burst = numbers(1, 2)
local bad = limit_error('state', rate, burst, false)
if bad then
  return bad
end
local burst_u = burst * 1000000

-- @include refill

local u = read(KEYS[1], rate, burst_u)
return {u, math.ceil(cooldown_left(KEYS[2]) / 1000)}
