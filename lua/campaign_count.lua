-- campaign_count.lua: adds one batch of campaign counts (package control)
-- once per token: a batch sent again under the same token (its answer was
-- lost, though Redis may have applied it) adds nothing the second time and
-- answers what the first time did. Run by control.Store.
--
-- KEYS[1]   the batch's token key (bucket.Keys.CountToken), in the
--           channel's slot
-- KEYS[2]   the channel's campaign index, a sorted set: campaign -> Unix
--           ms of its last activity
-- KEYS[3..] the campaigns' hashes (bucket.Keys.Campaign), one per campaign
--           of ARGV, in the same order, all in the channel's slot
-- ARGV[1]   token_ms: how long the token is kept, integer >= 1 (ms)
-- ARGV[2]   now_ms: the index's score of the campaigns, integer (Unix ms)
-- ARGV[3]   keep: how many campaigns the index keeps (the most recent),
--           integer >= 1
-- ARGV[4..] the campaigns, 6 + 2n arguments each: name, delivered,
--           first_ms, last_ms, duplicates, n, then n pairs of a dead-letter
--           reason and its count; counts are integers >= 0, first_ms and
--           last_ms Unix ms of the batch's first and last delivery (0 when
--           none)
--
-- A campaign whose hash holds another type than a hash is refused: nothing
-- of it is written, the others are. Everything else of the batch is
-- written, or nothing when the token was seen.
--
-- Reply: an array: {1 (added now) or 0 (the token was seen: added before),
-- then the 1-based positions among KEYS[3..] of the campaigns refused, by
-- this call or by the one that added the batch}.
-- Error reply "ERR campaign count: ..." for malformed ARGV (nothing
-- written).
--
-- Writes: SET of KEYS[1] to the refused positions ("1,3"; "" if none), PX
-- token_ms; per campaign: HINCRBY of delivered, dlq:<reason> and duplicates
-- by their counts (those > 0), HSETNX first_ms and HSET last_ms unless the
-- hash holds a later one (when delivered > 0); ZADD of the campaigns to
-- KEYS[2] at now_ms and ZREMRANGEBYRANK of all but its keep most recent.

-- @include int_arg
-- @include count_args

local token_ms, now_ms, keep, bad = count_args('campaign count', 'token_ms')
if bad then
  return bad
end

local function count(v)
  local n = tonumber(v)
  if not n or n < 0 or n ~= math.floor(n) then return nil end
  return n
end

-- Read and check every campaign before writing anything.
local camps = {}
local at = 4
while at <= #ARGV do
  local j = #camps + 1
  local c = {name = ARGV[at], delivered = count(ARGV[at + 1]), first = count(ARGV[at + 2]),
    last = count(ARGV[at + 3]), dups = count(ARGV[at + 4]), dlq = {}}
  local n = count(ARGV[at + 5])
  if not c.name or c.name == '' or not c.delivered or not c.first or not c.last or not c.dups or not n then
    return redis.error_reply('ERR campaign count: campaign ' .. j .. ' needs a name and integer counts >= 0')
  end
  at = at + 6
  for _ = 1, n do
    local r, v = ARGV[at], count(ARGV[at + 1])
    if not r or r == '' or not v then
      return redis.error_reply('ERR campaign count: campaign ' .. j .. ' needs a reason and an integer count >= 0 per dead letter')
    end
    c.dlq[#c.dlq + 1] = {r, v}
    at = at + 2
  end
  camps[j] = c
end
if #camps == 0 or #KEYS ~= #camps + 2 then
  return redis.error_reply('ERR campaign count: want one key per campaign after the token and the index')
end

local seen = redis.call('GET', KEYS[1])
if seen then
  local out = {0}
  for p in string.gmatch(seen, '%d+') do out[#out + 1] = tonumber(p) end
  return out
end

local out, refused, z = {1}, {}, {}
for j, c in ipairs(camps) do
  local k = KEYS[j + 2]
  local t = redis.call('TYPE', k)['ok']
  if t ~= 'hash' and t ~= 'none' then
    out[#out + 1] = j
    refused[#refused + 1] = j
  else
    if c.delivered > 0 then
      redis.call('HINCRBY', k, 'delivered', c.delivered)
      redis.call('HSETNX', k, 'first_ms', c.first)
      local last = tonumber(redis.call('HGET', k, 'last_ms'))
      if not last or last < c.last then
        redis.call('HSET', k, 'last_ms', c.last)
      end
    end
    for _, d in ipairs(c.dlq) do
      if d[2] > 0 then redis.call('HINCRBY', k, 'dlq:' .. d[1], d[2]) end
    end
    if c.dups > 0 then redis.call('HINCRBY', k, 'duplicates', c.dups) end
    z[#z + 1] = now_ms
    z[#z + 1] = c.name
  end
end
redis.call('SET', KEYS[1], table.concat(refused, ','), 'PX', token_ms)
if #z > 0 then
  redis.call('ZADD', KEYS[2], unpack(z))
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -keep - 1)
end
return out
