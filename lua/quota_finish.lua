-- quota_finish.lua: settle the claims quota.lua made for one request once
-- Kafka answered: the ids it produced become done records, the ids it could
-- not produce are released so that a retry may claim them. Run by
-- quota.Limiter.Finish.
--
-- KEYS[1]        when ARGV[1] is 1: the request's idempotency-key record
-- KEYS[1+I..]    D done id records, then R released id records (I = ARGV[1])
-- ARGV[1]  1 if KEYS[1] is an idempotency-key record, else 0
-- ARGV[2]  token: the claim token given to quota.lua
-- ARGV[3]  D: number of id records to mark done, integer >= 0
-- ARGV[4]  done_ms: TTL of a done record in milliseconds, integer >= 1
-- ARGV[5]  stored: the value to keep in the idempotency-key record (the
--          answer to replay); "" releases the record instead
-- ARGV[6..5+D] optional: the pacing key of each done id record, in order;
--          the record then holds "d:<pacing key>" (the ingest API's
--          message lookup reads it), "d" without
--
-- Reply: integer, the records written or deleted.
-- Error reply "ERR quota_finish: ..." for malformed ARGV.
--
-- Writes: each done id record SET "d" (or "d:<pacing key>") PX done_ms; each released id record
-- DEL, only while it still holds "p:<token>" (a claim that expired and was
-- taken by another request is not ours to drop); the idempotency-key record
-- SET stored PX done_ms, or DEL (only while it holds "p:<token>").

-- @include int_arg
-- @include claim_args

local I = tonumber(ARGV[1])
local token = ARGV[2]
local D = tonumber(ARGV[3])
local done_ms = tonumber(ARGV[4])
local stored = ARGV[5]
local bad = claim_error('quota_finish', I, 'ARGV[1]', token)
if bad then
  return bad
end
if not D or D < 0 or D ~= math.floor(D) or D > #KEYS - I then
  return redis.error_reply('ERR quota_finish: D must be an integer in [0, ids]')
end
bad = int_error('quota_finish', 'done_ms', done_ms, 1)
if bad then
  return bad
end

local claim = 'p:' .. token
local n = 0
local function release(key)
  if redis.call('GET', key) == claim then
    redis.call('DEL', key)
    n = n + 1
  end
end
if I == 1 then
  if stored and stored ~= '' then
    redis.call('SET', KEYS[1], stored, 'PX', done_ms)
    n = n + 1
  else
    release(KEYS[1])
  end
end
for k = 1 + I, #KEYS do
  if k <= I + D then
    local pk = ARGV[5 + k - I]
    redis.call('SET', KEYS[k], (pk and pk ~= '') and ('d:' .. pk) or 'd', 'PX', done_ms)
    n = n + 1
  else
    release(KEYS[k])
  end
end
return n
