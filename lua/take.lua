-- take.lua: take cost tokens from one token bucket, unless its pacing key is
-- in cooldown. Run by bucket.Limiter.Take.
--
-- KEYS[1]  bucket hash, fields (decimal integer strings):
--            utokens  tokens in the bucket at ts_us, in millionths of a token
--            ts_us    Redis TIME of that count, in microseconds since the Unix epoch
-- KEYS[2]  cooldown key: a string, the cooldown's end in microseconds of
--          Redis TIME; while TIME is before it the pacing key is refused
-- ARGV[1]  rate: refill in tokens per second, decimal number, finite and > 0
-- ARGV[2]  burst: capacity in tokens, integer >= 1
-- ARGV[3]  cost: tokens to take, integer, 1 <= cost <= burst
--
-- Reply: array of 4 integers {allowed, remaining, wait_us, cooldown}
--   allowed    1 if cost tokens were taken, else 0
--   remaining  whole tokens left in the bucket after the call
--   wait_us    refused: microseconds until cost tokens are there (>= 1), or
--              until the cooldown ends; allowed: 0
--   cooldown   1 if refused because the cooldown in KEYS[2] has not ended, else 0
-- Error reply "ERR take: ..." for malformed ARGV.
--
-- Clock: redis.call('TIME'), one clock for every client. The bucket refills
-- by floor((now - ts_us) * rate) millionths per call, capped at burst.
-- A missing or corrupt hash (wrong type, fields missing, not finite, < 0) is a
-- full bucket. State stamped after now (Redis clock stepped back) gets no
-- refill; a refusal re-stamps it to now, keeping its tokens, so the bucket
-- neither mints tokens nor stalls until the clock catches up.
--
-- Writes: when allowed, HSET utokens ts_us and PEXPIRE KEYS[1] to the time a
-- bucket needs to refill from empty (burst / rate) + 1 ms, so an idle bucket
-- expires only when it is full anyway. A refusal writes nothing, except the
-- re-stamp above. A cooldown refusal never writes.

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

-- BEGIN refill (identical in take.lua and state.lua; lua/embed_test.go checks)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local burst_u = burst * 1000000

-- read returns the tokens at now in millionths, the stored stamp (nil when
-- the hash is missing or corrupt) and whether KEYS[1] has the wrong type.
local function read(key)
  local ok, h = pcall(redis.call, 'HMGET', key, 'utokens', 'ts_us')
  if not ok or type(h) ~= 'table' or h.err then
    return burst_u, nil, true
  end
  local u, ts = tonumber(h[1]), tonumber(h[2])
  if not u or not ts or u ~= u or ts ~= ts or u < 0 or ts < 0
      or u == math.huge or ts == math.huge then
    return burst_u, nil, false
  end
  if now > ts then
    u = u + math.floor((now - ts) * rate)
  end
  if u > burst_u then
    u = burst_u
  end
  return u, ts, false
end
-- END refill

local u, ts, wrongtype = read(KEYS[1])

local okc, cd = pcall(redis.call, 'GET', KEYS[2])
cd = okc and tonumber(cd) or nil
if cd and cd == cd and cd ~= math.huge and cd > now then
  return {0, math.floor(u / 1000000), cd - now, 1}
end

local cost_u = cost * 1000000
local function store(v)
  if wrongtype then
    redis.call('DEL', KEYS[1])
  end
  redis.call('HSET', KEYS[1], 'utokens', string.format('%.0f', v),
    'ts_us', string.format('%.0f', now))
  redis.call('PEXPIRE', KEYS[1], math.ceil(burst_u / rate / 1000) + 1)
end

if u >= cost_u then
  u = u - cost_u
  store(u)
  return {1, math.floor(u / 1000000), 0, 0}
end

local deficit = cost_u - u
local wait = math.ceil(deficit / rate)
if math.floor(wait * rate) < deficit then
  wait = wait + 1
end
if ts and ts > now then
  store(u)
end
return {0, math.floor(u / 1000000), wait, 0}
