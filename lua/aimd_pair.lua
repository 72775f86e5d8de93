-- aimd_pair.lua: record a pair-scoped throttle (one recipient of a pacing
-- key: WhatsApp 131056, APNs or FCM per device) and set the pair's
-- cooldown and learned rate, shared by every replica. Run by
-- adapt.Adapter.PairThrottled.
--
-- KEYS[1]  pairs hash of the pacing key; field: the pair's sub (a hash of
--          the recipient), value "<end_us> <n> <last_us> <rate_u>": the
--          cooldown's end (µs of Redis TIME), throttles counted, the last
--          one (µs), the pair's learned rate (millionths of a message per
--          second; a value of three fields, from before rates, has none)
-- ARGV[1]  sub: the pair's field name, non-empty string
-- ARGV[2]  base_us: cooldown of a pair's first throttle, integer >= 1
-- ARGV[3]  again_us: least cooldown of each later one, integer >= 1
-- ARGV[4]  max_us: longest cooldown, integer >= base_us
-- ARGV[5]  forget_us: a pair quiet this long starts counting anew, and its
--          field is dropped, integer >= 1
-- ARGV[6]  rate_u: the pair's rate after its first throttle, millionths of
--          a message per second, integer >= 1
-- ARGV[7]  min_u: the least rate halving reaches, integer in [1, rate_u]
--
-- Reply: array of 3 integers {cooldown_ms, n, rate_u}
--   cooldown_ms  ms left of the pair's cooldown after the call, >= 1
--   n            throttles of the pair counted, this one included
--   rate_u       the pair's learned rate after the call
-- Error reply "ERR aimd_pair: ..." for malformed ARGV.
--
-- The n-th throttle sets the cooldown to base_us when n = 1, else
-- max(again_us, base_us), capped at max_us; a cooldown already ending later
-- is kept. With again_us of a minute, a pair throttled once is throttled at
-- most once more a minute, and its messages are retried further apart than
-- WhatsApp's 4^X s for X <= 2 asks. It does not grow further: a pair's
-- provider bucket refills while it waits, so longer cooldowns would only
-- starve it. The pair's rate is rate_u after its first throttle and halves
-- (never below min_u) with each later one: once the cooldown ends, the
-- pacer sends the pair's waiting messages at that rate instead of all at
-- once, which the provider's emptied pair bucket would refuse again.
--
-- Writes: HSET KEYS[1] sub; HDEL of fields whose cooldown ended forget_us
-- ago; PEXPIRE KEYS[1] to the latest end + forget_us.

-- @include adapt_base

local sub = ARGV[1]
local base_us, again_us, max_us, forget_us = int(ARGV[2], 1), int(ARGV[3], 1), int(ARGV[4], 1), int(ARGV[5], 1)
local first_u, min_u = int(ARGV[6], 1), int(ARGV[7], 1)
if not sub or sub == '' or not base_us or not again_us or not max_us or not forget_us or max_us < base_us
    or not first_u or not min_u or min_u > first_u then
  return redis.error_reply('ERR aimd_pair: want sub, base_us, again_us, max_us >= base_us, forget_us, rate_u, min_u <= rate_u')
end

-- parse returns end_us, n and last_us of a field's value, or nil.
local function parse(v)
  if type(v) ~= 'string' then
    return nil
  end
  local e, n, l, r = string.match(v, '^(%d+) (%d+) (%d+) ?(%d*)$')
  if not e then
    return nil
  end
  return tonumber(e), tonumber(n), tonumber(l), tonumber(r) or 0
end

local ok, all = pcall(redis.call, 'HGETALL', KEYS[1])
if not ok or type(all) ~= 'table' or all.err then
  redis.call('DEL', KEYS[1])
  all = {}
end
local latest = now
local stale = {}
local end_us, n, last_us, rate = 0, 0, 0, 0
for i = 1, #all, 2 do
  local e, c, l, r = parse(all[i + 1])
  if all[i] == sub then
    if e then
      end_us, n, last_us, rate = e, c, l, r
    end
  elseif not e or e + forget_us < now then
    stale[#stale + 1] = all[i]
  elseif e > latest then
    latest = e
  end
end
if now - last_us > forget_us then
  n = 0
end
n = n + 1
local d = base_us
if n > 1 and rate > 0 then
  d = math.max(again_us, base_us)
  rate = math.max(min_u, math.floor(rate / 2))
else
  rate = first_u
end
d = math.min(d, max_us)
end_us = math.max(end_us, now + d)
if end_us > latest then
  latest = end_us
end
if #stale > 0 then
  redis.call('HDEL', KEYS[1], unpack(stale))
end
redis.call('HSET', KEYS[1], sub, string.format('%.0f %d %.0f %.0f', end_us, n, now, rate))
redis.call('PEXPIRE', KEYS[1], math.ceil((latest - now + forget_us) / 1000))
return {math.ceil((end_us - now) / 1000), n, rate}
