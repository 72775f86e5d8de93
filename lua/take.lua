-- take.lua: take cost tokens from one token bucket now, unless its pacing
-- key is in cooldown. Run by bucket.Limiter.Take.
--
-- KEYS[1]  bucket hash, fields (decimal integer strings):
--            utokens  tokens in the bucket at ts_us, in millionths of a token;
--                     negative while slots granted ahead by reserve.lua are
--                     not yet refilled (a debt, at most 10^9 tokens)
--            ts_us    Redis TIME of that count, in microseconds since the Unix epoch
-- KEYS[2]  cooldown key: a string, the cooldown's end in microseconds of
--          Redis TIME; while TIME is before it the pacing key is refused
-- ARGV[1]  rate: refill in tokens per second, decimal number, finite and > 0
-- ARGV[2]  burst: capacity in tokens, integer >= 1
-- ARGV[3]  cost: tokens to take, integer, 1 <= cost <= burst
--
-- Reply: array of 4 integers {allowed, remaining, wait_us, cooldown}
--   allowed    1 if cost tokens were taken, else 0
--   remaining  whole tokens left in the bucket after the call (0 in debt)
--   wait_us    refused: microseconds until cost tokens are there (>= 1), or
--              until the cooldown ends; allowed: 0
--   cooldown   1 if refused because the cooldown in KEYS[2] has not ended, else 0
-- Error reply "ERR take: ..." for malformed ARGV.
--
-- Clock: redis.call('TIME'), one clock for every client. The bucket refills
-- by floor((now - ts_us) * rate) millionths per call, capped at burst (a
-- lower burst than the one stored clamps at once).
-- A missing or corrupt hash (wrong type, fields missing, not finite,
-- ts_us < 0, a debt beyond 10^9 tokens) is a full bucket. State stamped after
-- now (Redis clock stepped back) gets no refill; a refusal re-stamps it to
-- now, keeping its tokens, so the bucket neither mints tokens nor stalls
-- until the clock catches up.
--
-- Writes: when allowed, HSET utokens ts_us and PEXPIRE KEYS[1] to the time
-- the bucket needs to refill to burst (at least burst / rate) + 1 ms, so an
-- idle bucket expires only when it is full anyway. A refusal writes nothing,
-- except the re-stamp above. A cooldown refusal never writes.

local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
if not rate or rate ~= rate or rate <= 0 or rate == math.huge then
  return redis.error_reply('ERR take: rate must be a finite number > 0')
end
if not burst or burst < 1 or burst ~= math.floor(burst) or burst > 1e9 then
  return redis.error_reply('ERR take: burst must be an integer in [1, 1e9]')
end
if not cost or cost < 1 or cost ~= math.floor(cost) or cost > burst then
  return redis.error_reply('ERR take: cost must be an integer in [1, burst]')
end
local burst_u = burst * 1000000

-- @include refill

local u, ahead, wrongtype = read(KEYS[1], rate, burst_u)
local function whole(v)
  if v <= 0 then
    return 0
  end
  return math.floor(v / 1000000)
end

local cd = cooldown_left(KEYS[2])
if cd > 0 then
  return {0, whole(u), cd, 1}
end

local cost_u = cost * 1000000
if u >= cost_u then
  u = u - cost_u
  store(KEYS[1], u, rate, burst_u, wrongtype)
  return {1, whole(u), 0, 0}
end

if ahead then
  store(KEYS[1], u, rate, burst_u, wrongtype)
end
return {0, whole(u), slot(cost_u - u, rate), 0}
