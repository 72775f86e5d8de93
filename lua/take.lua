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

-- BEGIN refill (identical in every bucket script; lua/embed_test.go checks)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
-- A debt (negative utokens) deeper than 10^9 tokens marks a corrupt hash.
local max_debt = 1e15

-- read returns, for the bucket hash at key refilling at rate tokens per
-- second up to burst_u millionths: the tokens at now in millionths (< 0 is a
-- debt of slots granted ahead), whether the hash is stamped after now, and
-- whether key has the wrong type. A missing or corrupt hash reads as full.
-- State stamped after now gets no refill: no tokens appear from a clock step.
local function read(key, rate, burst_u)
  local ok, h = pcall(redis.call, 'HMGET', key, 'utokens', 'ts_us')
  if not ok or type(h) ~= 'table' or h.err then
    return burst_u, false, true
  end
  local u, ts = tonumber(h[1]), tonumber(h[2])
  if not u or not ts or u ~= u or ts ~= ts or u < -max_debt or ts < 0
      or u == math.huge or ts == math.huge then
    return burst_u, false, false
  end
  if now > ts then
    u = u + math.floor((now - ts) * rate)
  end
  if u > burst_u then
    u = burst_u
  end
  return u, ts > now, false
end

-- ttl_ms is the PEXPIRE of a bucket left holding v millionths: the time it
-- needs to refill to burst_u, and at least the time from empty, plus 1 ms,
-- so it expires only once it is full.
local function ttl_ms(v, rate, burst_u)
  local need = burst_u
  if v < 0 then
    need = burst_u - v
  end
  return math.ceil(need / rate / 1000) + 1
end

-- store writes v millionths stamped now to the bucket hash at key.
local function store(key, v, rate, burst_u, wrongtype)
  if wrongtype then
    redis.call('DEL', key)
  end
  redis.call('HSET', key, 'utokens', string.format('%.0f', v), 'ts_us', string.format('%.0f', now))
  redis.call('PEXPIRE', key, ttl_ms(v, rate, burst_u))
end

-- slot returns the fewest whole microseconds after which a bucket refilling
-- at rate has refilled deficit millionths (0 if deficit <= 0), with the
-- refill maths of read: floor(slot * rate) >= deficit.
local function slot(deficit, rate)
  if deficit <= 0 then
    return 0
  end
  local s = math.ceil(deficit / rate)
  if math.floor(s * rate) < deficit then
    s = s + 1
  elseif s > 1 and math.floor((s - 1) * rate) >= deficit then
    s = s - 1
  end
  return s
end

-- cooldown_left returns the microseconds left of the cooldown at key, 0 when
-- there is none (missing, not a number, or over).
local function cooldown_left(key)
  local ok, cd = pcall(redis.call, 'GET', key)
  cd = ok and tonumber(cd) or nil
  if cd and cd == cd and cd ~= math.huge and cd > now then
    return cd - now
  end
  return 0
end
-- END refill

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
