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

local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
if not rate or rate ~= rate or rate <= 0 or rate == math.huge then
  return redis.error_reply('ERR state: rate must be a finite number > 0')
end
if not burst or burst < 1 or burst ~= math.floor(burst) or burst > 1e9 then
  return redis.error_reply('ERR state: burst must be an integer in [1, 1e9]')
end
local burst_u = burst * 1000000

-- @include refill

local u = read(KEYS[1], rate, burst_u)
return {u, math.ceil(cooldown_left(KEYS[2]) / 1000)}
