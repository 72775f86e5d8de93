-- state.lua: read one token bucket and its cooldown without changing them.
-- Run by bucket.Limiter.State (for `pacer status`).
--
-- KEYS[1]  bucket hash, fields as in take.lua (utokens, ts_us)
-- KEYS[2]  cooldown key
-- ARGV[1]  rate: refill in tokens per second, decimal number, finite and > 0
-- ARGV[2]  burst: capacity in tokens, integer >= 1
--
-- Reply: array of 2 integers {utokens, cooldown_ms}
--   utokens      tokens in the bucket now, in millionths of a token, computed
--                with the same refill maths as take.lua (0 <= utokens <= burst * 10^6)
--   cooldown_ms  milliseconds left of the cooldown; 0 when there is none
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

local u = read(KEYS[1])
local okc, cd = pcall(redis.call, 'GET', KEYS[2])
cd = okc and tonumber(cd) or nil
local left = 0
if cd and cd == cd and cd ~= math.huge and cd > now then
  left = math.ceil((cd - now) / 1000)
end
return {u, left}
