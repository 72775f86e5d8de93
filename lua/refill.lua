-- refill.lua: a fragment, not a script. compose (lua/compose.go) splices it
-- in place of the line "-- @include refill" of each script that reads a
-- token bucket, so that all of them read, refill and store a bucket with
-- the same code (Redis Lua has no require).
--
-- Reads no KEYS or ARGV. Defines now (clock.lua: Redis TIME in µs since the Unix
-- epoch), max_debt, and the functions refill, read, ttl_ms, store, slot and
-- cooldown_left. refill is the one place in Lua that computes a bucket's
-- refill; its one twin in Go is bucket/refill.go (for bucket.Local).

-- @include clock
-- A debt (negative utokens) deeper than 10^9 tokens marks a corrupt hash.
local max_debt = 1e15

-- refill returns the millionths a bucket refilling at rate tokens per
-- second gains in us microseconds.
local function refill(us, rate)
  return math.floor(us * rate)
end

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
    u = u + refill(now - ts, rate)
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
-- refill maths of read: refill(slot, rate) >= deficit.
local function slot(deficit, rate)
  if deficit <= 0 then
    return 0
  end
  local s = math.ceil(deficit / rate)
  if refill(s, rate) < deficit then
    s = s + 1
  elseif s > 1 and refill(s - 1, rate) >= deficit then
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
