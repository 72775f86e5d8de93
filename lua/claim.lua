-- claim.lua: claim an envelope id before its send, so that a re-delivered
-- record is never sent twice. Run by ledger.Ledger.Claim.
--
-- KEYS[1]  id key, a string: "d:<provider id>" once delivered,
--          "c:<owner>" while claimed by the process <owner>
-- KEYS[2]  the pacing key's cooldown key (bucket's): its value is the
--          cooldown's end in microseconds of Redis TIME
-- ARGV[1]  owner: the claiming process, non-empty string without spaces
-- ARGV[2]  ttl_ms: lifetime of the claim, integer >= 1
-- ARGV[3]  force: "1" to take over a claim left by another owner, else "0"
--
-- Reply: string "claimed", "delivered", "abandoned" (claimed by another
-- owner, which may or may not have sent it; nothing written) or
-- "cooldown:<us>" (the pacing key is in cooldown for <us> more
-- microseconds; nothing written). A delivered id answers "delivered" even
-- in a cooldown. Checking the cooldown here, right before the request,
-- stops a sender that slept on a reservation while a cooldown began.
-- Error reply "ERR claim: ..." for malformed ARGV.
--
-- Writes: SET KEYS[1] "c:<owner>" PX ttl_ms when the reply is "claimed".

local owner, ttl, force = ARGV[1], tonumber(ARGV[2]), ARGV[3]
if not owner or owner == '' then
  return redis.error_reply('ERR claim: owner must be non-empty')
end
if not ttl or ttl < 1 or ttl ~= math.floor(ttl) then
  return redis.error_reply('ERR claim: ttl_ms must be an integer >= 1')
end

local ok, v = pcall(redis.call, 'GET', KEYS[1])
if not ok then
  v = false -- wrong type: treat as no record, overwritten below
end
if v and string.sub(v, 1, 2) == 'd:' then
  return 'delivered'
end
local okc, cd = pcall(redis.call, 'GET', KEYS[2])
cd = okc and tonumber(cd) or nil
if cd and cd == cd and cd ~= math.huge then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if cd > now then
    return 'cooldown:' .. string.format('%.0f', cd - now)
  end
end
if v and v ~= ('c:' .. owner) and string.sub(v, 1, 2) == 'c:' and force ~= '1' then
  return 'abandoned'
end
redis.call('SET', KEYS[1], 'c:' .. owner, 'PX', ttl)
return 'claimed'
