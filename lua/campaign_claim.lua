-- campaign_claim.lua: claims campaigns and pacing keys for a tenant of the
-- ingest API (package control): each belongs to the tenant that first
-- publishes to it. Run by control.Store.Claim, before the envelopes are
-- produced, so a campaign or pacing key owned by another is refused before
-- any record is written.
--
-- KEYS[1]   the tenant's campaign index of the channel
--           (bucket.Keys.TenantCampaigns), a sorted set: campaign -> Unix
--           ms of the tenant's last publish to it
-- KEYS[2]   the channel's pacing key owners (bucket.Keys.KeyOwners), a
--           hash: pacing key -> tenant id
-- KEYS[3..] the campaigns' hashes (bucket.Keys.Campaign), one per campaign
--           of ARGV[4..3+n] (n = #KEYS - 2), in the same order; all keys in
--           the channel's slot
-- ARGV[1]   tenant: the tenant id, a non-empty string
-- ARGV[2]   now_ms: the index's score of the campaigns, integer (Unix ms)
-- ARGV[3]   keep: how many campaigns the index keeps (the most recent),
--           integer >= 1
-- ARGV[4..3+n]  the campaigns' names
-- ARGV[4+n..]   the pacing keys, non-empty
--
-- A campaign whose hash does not exist, or a pacing key without an owner,
-- is free. A campaign that exists keeps its owner: the tenant its field
-- tenant names, or none when it has no such field (published, counted or
-- controlled outside the API: by pacer publish, a pacer, or an operator)
-- or its key holds another type than a hash. A pacing key's owner is its
-- field of KEYS[2].
--
-- All or nothing: only when every campaign and pacing key is free or the
-- tenant's does the call write; one owned by another (or by none) writes
-- nothing, not even the free ones.
--
-- Reply: {campaign owners, key owners}: two arrays of one owner each, in
-- argument order: a tenant id, or "" for none; a free one is reported as
-- ARGV[1]. The call claimed (and wrote) when every owner is ARGV[1].
-- Error reply "ERR campaign claim: ..." for malformed ARGV (nothing
-- written).
--
-- Writes: only when nothing is another's: HSET tenant of each campaign
-- hash that did not exist, HSET of each free pacing key to ARGV[1] in
-- KEYS[2]; ZADD of the campaigns to KEYS[1] at now_ms and ZREMRANGEBYRANK
-- of all but its keep most recent.

-- @include int_arg

local tenant = ARGV[1]
if not tenant or tenant == '' then
  return redis.error_reply('ERR campaign claim: tenant must be a non-empty string')
end
local now_ms, keep = tonumber(ARGV[2]), tonumber(ARGV[3])
local err = int_error('campaign claim', 'now_ms', now_ms, nil, true) or int_error('campaign claim', 'keep', keep, 1, true)
if err then
  return err
end
local n = #KEYS - 2
if n < 0 or #ARGV - 3 < n then
  return redis.error_reply('ERR campaign claim: ' .. n .. ' campaign hashes for ' .. (#ARGV - 3) .. ' names and keys')
end
for i = 4 + n, #ARGV do
  if ARGV[i] == '' then
    return redis.error_reply('ERR campaign claim: pacing key ' .. (i - 3 - n) .. ' is empty')
  end
end

-- Check everything first.
local campaigns, keys, newCampaigns, newKeys = {}, {}, {}, {}
local taken = false
for i = 3, #KEYS do
  local k = KEYS[i]
  local kind = redis.call('TYPE', k)['ok']
  local owner = ''
  if kind == 'none' then
    owner = tenant
    newCampaigns[#newCampaigns + 1] = k
  elseif kind == 'hash' then
    owner = redis.call('HGET', k, 'tenant') or ''
  end
  if owner ~= tenant then
    taken = true
  end
  campaigns[#campaigns + 1] = owner
end
for i = 4 + n, #ARGV do
  local owner = redis.call('HGET', KEYS[2], ARGV[i])
  if not owner then
    owner = tenant
    newKeys[#newKeys + 1] = ARGV[i]
    newKeys[#newKeys + 1] = tenant
  end
  if owner ~= tenant then
    taken = true
  end
  keys[#keys + 1] = owner
end
if taken then
  return {campaigns, keys}
end

-- Then set.
for _, k in ipairs(newCampaigns) do
  redis.call('HSET', k, 'tenant', tenant)
end
if #newKeys > 0 then
  redis.call('HSET', KEYS[2], unpack(newKeys))
end
if n > 0 then
  local mine = {}
  for i = 1, n do
    mine[#mine + 1] = now_ms
    mine[#mine + 1] = ARGV[3 + i]
  end
  redis.call('ZADD', KEYS[1], unpack(mine))
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -keep - 1)
end
return {campaigns, keys}
