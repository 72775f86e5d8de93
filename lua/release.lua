-- release.lua: drop a claim after the provider refused the message, so a
-- later retry can claim it again. Run by ledger.Ledger.Release.
--
-- KEYS[1]  id key (see claim.lua)
-- ARGV[1]  owner: only a claim "c:<owner>" is dropped
--
-- Reply: integer 1 if the claim was dropped, else 0.
--
-- Writes: DEL KEYS[1] when it holds "c:<owner>".

local ok, v = pcall(redis.call, 'GET', KEYS[1])
if ok and v == ('c:' .. ARGV[1]) then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
