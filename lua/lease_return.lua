-- lease_return.lua: give back the slots of a lease (reserve.lua with n > 1)
-- that the caller will not use and that have not started yet. Run by
-- bucket.Limiter.Return.
--
-- KEYS[1]  bucket hash, fields as in take.lua
-- ARGV[1]  rate: refill in tokens per second, decimal number, finite and > 0
-- ARGV[2]  burst: capacity in tokens, integer >= 1
-- ARGV[3]  cost: tokens per slot, integer, 1 <= cost <= burst
-- ARGV[4]  now0_us: now_us of the lease's reply, integer >= 0
-- ARGV[5]  u0: u0 of the lease's reply, integer millionths (may be < 0)
-- ARGV[6]  granted: slots of the lease, integer >= 1
-- ARGV[7]  used: slots the caller used or will use (the first ones), integer in [0, granted]
--
-- Reply: integer, slots given back: those after the used ones whose start
-- (as reserve.lua defines it) is still after now. Slots already started
-- lapse, as do all of them if the Redis clock is behind now0_us.
--
-- Why this cannot exceed the limit: had the lease taken only the slots it
-- keeps, the bucket would now hold less than one slot's cost more than it
-- does after the return, so it never reached burst in between and the
-- refill lost nothing: the return leaves the bucket exactly as if the given
-- back slots had never been granted (and is capped at burst besides).
-- Return each lease at most once: a second return would mint tokens.
--
-- Writes: when it gives back >= 1 slot, HSET utokens ts_us and PEXPIRE as
-- take.lua does; otherwise nothing.
-- Error reply "ERR lease_return: ..." for malformed ARGV.

local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local now0 = tonumber(ARGV[4])
local u0 = tonumber(ARGV[5])
local granted = tonumber(ARGV[6])
local used = tonumber(ARGV[7])
if not rate or rate ~= rate or rate <= 0 or rate == math.huge then
  return redis.error_reply('ERR lease_return: rate must be a finite number > 0')
end
if not burst or burst < 1 or burst ~= math.floor(burst) or burst > 1e9 then
  return redis.error_reply('ERR lease_return: burst must be an integer in [1, 1e9]')
end
if not cost or cost < 1 or cost ~= math.floor(cost) or cost > burst then
  return redis.error_reply('ERR lease_return: cost must be an integer in [1, burst]')
end
if not now0 or now0 < 0 or now0 ~= math.floor(now0) or not u0 or u0 ~= math.floor(u0)
    or u0 < -1e15 or u0 > burst * 1000000 then
  return redis.error_reply('ERR lease_return: now0_us and u0 must be those of the lease')
end
if not granted or granted < 1 or granted ~= math.floor(granted) or granted > 1e9
    or not used or used < 0 or used ~= math.floor(used) or used > granted then
  return redis.error_reply('ERR lease_return: need 0 <= used <= granted')
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

if now < now0 then
  return 0
end
local cost_u = cost * 1000000
local started = math.floor((u0 + math.floor((now - now0) * rate)) / cost_u)
local from = used
if started > from then
  from = started
end
local r = granted - from
if r <= 0 then
  return 0
end
local u, _, wrongtype = read(KEYS[1], rate, burst_u)
u = u + r * cost_u
if u > burst_u then
  u = burst_u
end
store(KEYS[1], u, rate, burst_u, wrongtype)
return r
