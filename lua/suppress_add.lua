-- suppress_add.lua: adds or replaces suppression entries of one pacing key
-- and removes expired ones, in one call. Run by suppress.Store.
--
-- KEYS[1]  the key's suppression hash: recipient hash -> entry
--          "<expires_ms> <a|m> <reason> <at_ms>" (expires_ms 0 = until
--          removed; a = every message, m = marketing messages only; at_ms
--          the provider's time of the event, 0 if none)
-- KEYS[2]  the key's expiry index, a sorted set: recipient hash -> its
--          entry's expires_ms (entries that expire only), in KEYS[1]'s slot
-- ARGV[1]  prune: how many expired entries to remove at most, integer >= 0
-- ARGV[2..] entries, 3 arguments each: recipient hash, entry, expires_ms
--          (the entry's own, integer >= 0: Unix ms of Redis TIME's clock)
--
-- An entry that expires goes to KEYS[2] too; one until removed leaves it
-- (it may replace one that expired). Then at most ARGV[1] entries whose
-- expiry is at or before Redis TIME are removed from both.
--
-- Reply: an array of two integers: {entries new in KEYS[1], expired
-- entries removed}.
-- Error reply "ERR suppress: ..." for malformed ARGV.
--
-- Writes: HSET of KEYS[1]; ZADD and ZREM of KEYS[2]; HDEL and ZREM of the
-- expired. Neither key expires as a whole: each entry leaves on its own
-- (removed, or expired and pruned by a later add).

local prune = tonumber(ARGV[1])
if not prune or prune < 0 or prune ~= math.floor(prune) then
  return redis.error_reply('ERR suppress: prune must be an integer >= 0')
end
local n = (#ARGV - 1) / 3
if n ~= math.floor(n) then
  return redis.error_reply('ERR suppress: entries must come in threes')
end

local added = 0
local hs, zadd, zrem = {}, {}, {}
for j = 0, n - 1 do
  local at = 2 + 3 * j
  local f, v, e = ARGV[at], ARGV[at + 1], tonumber(ARGV[at + 2])
  if f == '' or not e or e < 0 or e ~= math.floor(e) then
    return redis.error_reply('ERR suppress: entry ' .. (j + 1) .. ' needs a hash and an integer expires_ms >= 0')
  end
  hs[#hs + 1] = f
  hs[#hs + 1] = v
  if e > 0 then
    zadd[#zadd + 1] = string.format('%.0f', e)
    zadd[#zadd + 1] = f
  else
    zrem[#zrem + 1] = f
  end
  -- HSET in chunks keeps unpack within Lua's stack.
  if #hs >= 2000 then
    added = added + redis.call('HSET', KEYS[1], unpack(hs))
    hs = {}
  end
  if #zadd >= 2000 then
    redis.call('ZADD', KEYS[2], unpack(zadd))
    zadd = {}
  end
  if #zrem >= 1000 then
    redis.call('ZREM', KEYS[2], unpack(zrem))
    zrem = {}
  end
end
if #hs > 0 then added = added + redis.call('HSET', KEYS[1], unpack(hs)) end
if #zadd > 0 then redis.call('ZADD', KEYS[2], unpack(zadd)) end
if #zrem > 0 then redis.call('ZREM', KEYS[2], unpack(zrem)) end

local removed = 0
if prune > 0 then
  local t = redis.call('TIME')
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', string.format('%.0f', now_ms), 'LIMIT', 0, prune)
  if #old > 0 then
    redis.call('HDEL', KEYS[1], unpack(old))
    redis.call('ZREM', KEYS[2], unpack(old))
    removed = #old
  end
end
return {added, removed}
