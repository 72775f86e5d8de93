-- outcome_count.lua: counts the outcomes providers reported after the
-- send (delivered to the device, read, failed, bounced, suppressed) in
-- their campaigns' hashes, once per message and outcome kind: an event
-- applied again (a provider's duplicate webhook, a replayed events-topic
-- record) adds nothing. Run by control.Store.CountOutcomes.
--
-- KEYS[1]   the channel's campaign index, a sorted set: campaign -> Unix
--           ms of its last activity
-- KEYS[2..] two keys per outcome of ARGV, in the same order: the
--           message's outcome hash (bucket.Keys.Outcomes: kind -> Unix ms heard) and
--           the campaign's hash (bucket.Keys.Campaign), all in the
--           channel's slot
-- ARGV[1]   ttl_ms: how long a message's outcome hash is kept after its
--           last new kind, integer >= 1 (ms)
-- ARGV[2]   now_ms: the index's score of the campaigns counted, integer
--           (Unix ms)
-- ARGV[3]   keep: how many campaigns the index keeps (the most recent),
--           integer >= 1
-- ARGV[4..] four arguments per outcome: campaign, kind (the name the
--           message is counted once under: device_delivered, read,
--           failed, bounced, suppressed, resolved), field (the campaign
--           hash's counter it adds one to: device_delivered, read,
--           <kind>:<reason>, or delivered for resolved) and undo (a
--           counter it takes one from, "" none: dlq:unknown-outcome for
--           resolved)
--
-- Reply: an array with one integer per outcome, in order: 1 counted now,
-- 0 counted before (its kind is in the message's hash), -1 refused (the
-- campaign's key holds another type than a hash: nothing written for it).
-- Error reply "ERR outcome count: ..." for malformed ARGV or KEYS
-- (nothing written).
--
-- Writes: per outcome counted now, HSETNX kind now_ms (when it was heard)
-- and PEXPIRE ttl_ms of its outcome hash and HINCRBY field 1 (and undo -1)
-- of its campaign's hash; ZADD of
-- the campaigns counted to KEYS[1] at now_ms and ZREMRANGEBYRANK of all
-- but its keep most recent.

-- @include int_arg
-- @include count_args

local ttl_ms, now_ms, keep, bad = count_args('outcome count', 'ttl_ms')
if bad then
  return bad
end
local n = (#ARGV - 3) / 4
if n < 1 or n ~= math.floor(n) or #KEYS ~= 2 * n + 1 then
  return redis.error_reply('ERR outcome count: want 4 arguments and 2 keys per outcome')
end
for i = 1, n do
  local at = 3 + 4 * (i - 1)
  if ARGV[at + 1] == '' or ARGV[at + 2] == '' or ARGV[at + 3] == '' then
    return redis.error_reply('ERR outcome count: outcome ' .. i .. ' needs a campaign, a kind and a field')
  end
end

local out, z, seen = {}, {}, {}
for i = 1, n do
  local at = 3 + 4 * (i - 1)
  local campaign, kind, field, undo = ARGV[at + 1], ARGV[at + 2], ARGV[at + 3], ARGV[at + 4]
  local ok, camp = KEYS[2 * i], KEYS[2 * i + 1]
  local t = redis.call('TYPE', camp)['ok']
  if t ~= 'hash' and t ~= 'none' then
    out[i] = -1
  elseif redis.call('HSETNX', ok, kind, ARGV[2]) == 1 then
    redis.call('PEXPIRE', ok, ttl_ms)
    redis.call('HINCRBY', camp, field, 1)
    if undo ~= '' then redis.call('HINCRBY', camp, undo, -1) end
    out[i] = 1
    if not seen[campaign] then
      seen[campaign] = true
      z[#z + 1] = now_ms
      z[#z + 1] = campaign
    end
  else
    out[i] = 0
  end
end
if #z > 0 then
  redis.call('ZADD', KEYS[1], unpack(z))
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -keep - 1)
end
return out
