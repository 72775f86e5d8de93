-- cooldown.lua: set a pacing key's cooldown to end no earlier than ms from
-- now (Redis TIME), never shortening a longer one. Run by bucket.Limiter.Cooldown.
--
-- KEYS[1]  cooldown key, a string: the cooldown's end, in microseconds of
--          Redis TIME since the Unix epoch; its TTL only cleans it up
-- ARGV[1]  ms: cooldown in milliseconds, integer >= 1
--
-- Reply: integer, milliseconds left of the cooldown after the call (>= ms).
-- Error reply "ERR cooldown: ..." for malformed ARGV.
--
-- Writes: SET KEYS[1] <end_us> PX ms when the key is missing, corrupt, or
-- ends sooner than now + ms; otherwise nothing. The end is compared against
-- TIME, not the TTL, so every replica (and every Redis that honours TIME but
-- not expiry in real time) sees the same end.

-- @include int_arg

local ms = tonumber(ARGV[1])
local bad = int_error('cooldown', 'ms', ms, 1, true)
if bad then
  return bad
end

-- @include clock
local want = now + ms * 1000

local ok, cur = pcall(redis.call, 'GET', KEYS[1])
cur = ok and tonumber(cur) or nil
if cur and cur == cur and cur ~= math.huge and cur >= want then
  return math.ceil((cur - now) / 1000)
end
redis.call('SET', KEYS[1], string.format('%.0f', want), 'PX', ARGV[1])
return ms
