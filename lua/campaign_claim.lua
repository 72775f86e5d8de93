-- campaign_claim.lua: claims campaigns for a tenant of the ingest API
-- (package control): a campaign belongs to the tenant that first publishes
-- to it. Run by control.Store.ClaimCampaigns, before the envelopes are
-- produced, so a campaign owned by another is refused before any of its
-- records is written.
--
-- KEYS[1]   the tenant's campaign index of the channel
--           (bucket.Keys.TenantCampaigns), a sorted set: campaign -> Unix
--           ms of the tenant's last publish to it
-- KEYS[2..] the campaigns' hashes (bucket.Keys.Campaign), one per campaign
--           of ARGV[4..], in the same order, all in the channel's slot
-- ARGV[1]   tenant: the tenant id, a non-empty string
-- ARGV[2]   now_ms: the index's score of the campaigns, integer (Unix ms)
-- ARGV[3]   keep: how many campaigns the index keeps (the most recent),
--           integer >= 1
-- ARGV[4..] the campaigns' names
--
-- A campaign whose hash does not exist becomes the tenant's (its field
-- tenant set to ARGV[1]). One that exists keeps its owner: the tenant its
-- field tenant names, or none when it has no such field (published,
-- counted or controlled outside the API: by pacer publish, a pacer, or an
-- operator) or its key holds another type than a hash.
--
-- Reply: an array of one owner per campaign, in KEYS[2..] order: a tenant
-- id, or "" for none. The call's tenant owns a campaign when its owner is
-- ARGV[1].
-- Error reply "ERR campaign claim: ..." for malformed ARGV (nothing
-- written).
--
-- Writes: HSET tenant of each hash that did not exist; ZADD of the
-- campaigns the tenant owns to KEYS[1] at now_ms and ZREMRANGEBYRANK of all
-- but its keep most recent.

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
if #ARGV - 3 ~= #KEYS - 1 then
  return redis.error_reply('ERR campaign claim: ' .. (#KEYS - 1) .. ' campaign hashes for ' .. (#ARGV - 3) .. ' names')
end

local owners, mine = {}, {}
for i = 2, #KEYS do
  local k = KEYS[i]
  local kind = redis.call('TYPE', k)['ok']
  local owner = ''
  if kind == 'none' then
    redis.call('HSET', k, 'tenant', tenant)
    owner = tenant
  elseif kind == 'hash' then
    owner = redis.call('HGET', k, 'tenant') or ''
  end
  owners[#owners + 1] = owner
  if owner == tenant then
    mine[#mine + 1] = now_ms
    mine[#mine + 1] = ARGV[i + 2]
  end
end
if #mine > 0 then
  redis.call('ZADD', KEYS[1], unpack(mine))
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -keep - 1)
end
return owners
