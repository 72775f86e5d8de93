-- cooldown.lua: set a pacing key's cooldown to at least a duration, never
-- shortening a longer one. Run by bucket.Limiter.Cooldown.
--
-- KEYS[1]  cooldown key (a string; its TTL is the cooldown left)
-- ARGV[1]  ms: cooldown in milliseconds, integer >= 1
--
-- Reply: integer, the key's TTL after the call in milliseconds (>= ms).
-- Error reply "ERR cooldown: ..." for malformed ARGV.
--
-- Writes: PSETEX KEYS[1] ms ms when the key is missing, has no TTL, or has a
-- TTL shorter than ms; otherwise nothing.

local ms = tonumber(ARGV[1])
if not ms or ms < 1 or ms ~= math.floor(ms) or ms == math.huge then
  return redis.error_reply('ERR cooldown: ms must be an integer >= 1')
end

local left = redis.call('PTTL', KEYS[1])
if left >= ms then
  return left
end
redis.call('PSETEX', KEYS[1], ARGV[1], ARGV[1])
return ms
