-- claim.lua: claim an envelope id before its send, so that a re-delivered
-- record is never sent twice. Run by bucket.Ledger.Claim.
--
-- KEYS[1]  id key, a string: "d:<provider id>" once delivered,
--          "c:<owner>" while claimed by the process <owner>
-- ARGV[1]  owner: the claiming process, non-empty string without spaces
-- ARGV[2]  ttl_ms: lifetime of the claim, integer >= 1
-- ARGV[3]  force: "1" to take over a claim left by another owner, else "0"
--
-- Reply: string "claimed", "delivered" or "abandoned" (claimed by another
-- owner, which may or may not have sent it; nothing written).
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
if v and v ~= ('c:' .. owner) and string.sub(v, 1, 2) == 'c:' and force ~= '1' then
  return 'abandoned'
end
redis.call('SET', KEYS[1], 'c:' .. owner, 'PX', ttl)
return 'claimed'
