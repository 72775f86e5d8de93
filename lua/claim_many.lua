-- claim_many.lua: claim several envelope ids at once, each as claim.lua
-- would, in one script call (one round trip for a batch of the ids a
-- process has in hand). Run by ledger.Batcher.
--
-- KEYS[1]         the first cooldown key; KEYS[1..c] are the cooldown keys of
--                 the ids' pacing keys (see claim.lua)
-- KEYS[c+1..c+n]  id keys. Under Redis Cluster every key of one call must
--                 be of one pacing key (one slot): then c = 1.
-- ARGV[1]         owner: the claiming process, non-empty string without spaces
-- ARGV[2]         ttl_ms: lifetime of each claim, integer >= 1
-- ARGV[3]         force: "1" to take over claims left by another owner, else "0"
-- ARGV[4]         c: how many of KEYS are cooldown keys, integer >= 1
-- ARGV[4+j]       for id key j (1..n): the index (1..c) of its cooldown key
--
-- Reply: an array of n strings, one per id key in order, each as
-- claim.lua answers: "claimed", "delivered", "abandoned" or
-- "cooldown:<us>". Error reply "ERR claim: ..." for malformed ARGV.
--
-- Commands: one MGET of the cooldowns, TIME only while one is set, one MGET
-- of the ids, one SET per id newly claimed.
--
-- Writes: SET KEYS[c+j] "c:<owner>" PX ttl_ms for each id answered "claimed"
-- that did not already hold that value.

local owner, ttl, force, c = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
if not owner or owner == '' then
  return redis.error_reply('ERR claim: owner must be non-empty')
end
if not ttl or ttl < 1 or ttl ~= math.floor(ttl) then
  return redis.error_reply('ERR claim: ttl_ms must be an integer >= 1')
end
if not c or c < 1 or c ~= math.floor(c) or c >= #KEYS or #ARGV ~= 4 + #KEYS - c then
  return redis.error_reply('ERR claim: c must be an integer in 1..#KEYS-1 and one cooldown index per id')
end

-- A cooldown's end in µs of Redis TIME, or nil; MGET answers nil for a
-- key of another type, which counts as no cooldown.
local cds = redis.call('MGET', unpack(KEYS, 1, c))
local now = nil
local cool = {}
for i = 1, c do
  local cd = tonumber(cds[i])
  if cd and cd == cd and cd ~= math.huge then
    if not now then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    if cd > now then
      cool[i] = 'cooldown:' .. string.format('%.0f', cd - now)
    end
  end
end

-- An id key of another type reads as nil: no record, overwritten, as
-- claim.lua does.
local vals = redis.call('MGET', unpack(KEYS, c + 1))
local mine = 'c:' .. owner
local out = {}
for j = 1, #KEYS - c do
  local v = vals[j]
  local ci = tonumber(ARGV[4 + j])
  if not ci or ci < 1 or ci > c then
    return redis.error_reply('ERR claim: cooldown index of id ' .. j .. ' is outside 1..c')
  end
  local r
  if v and string.sub(v, 1, 2) == 'd:' then
    r = 'delivered'
  elseif cool[ci] then
    r = cool[ci]
  elseif v and v ~= mine and string.sub(v, 1, 2) == 'c:' and force ~= '1' then
    r = 'abandoned'
  elseif v == mine then
    r = 'claimed' -- claimed again (a slot that lapsed): nothing to write
  else
    redis.call('SET', KEYS[c + j], mine, 'PX', ttl)
    r = 'claimed'
  end
  out[j] = r
end
return out
