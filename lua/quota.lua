-- quota.lua: the tiered ingest quota. One request is checked against every
-- tier (token buckets and sliding windows, e.g. per client IP, per tenant,
-- per tenant per day, per channel) and the envelope ids it carries are
-- claimed, all in one step: either every tier grants and every new id is
-- claimed, or nothing is written (a refusal by one tier takes nothing from
-- the others). Run by quota.Limiter.Take.
--
-- KEYS[1]..KEYS[T] the tiers' state: a bucket hash (utokens, ts_us: see
--                 refill.lua) or a window hash (start_us, cur, prev: see
--                 window_read.lua), in the order of the tiers in ARGV
-- KEYS[T+1]       when ARGV[3] is 1: the request's idempotency-key record
-- KEYS[T+1+I..]   N id records, one per distinct envelope id (I = ARGV[3]);
--                 a record holds "p:<token>" while a request is producing
--                 that id and "d" (or "d:<pacing key>") once Kafka acknowledged it
-- ARGV[1]  T: number of tiers, integer in [1, 16]
-- ARGV[2]  N: number of id records, integer >= 0
-- ARGV[3]  1 if KEYS[T+1] is an idempotency-key record, else 0
-- ARGV[4]  token: the caller's claim token (non-empty string)
-- ARGV[5]  claim_ms: TTL of a claim in milliseconds, integer >= 1
-- ARGV[6+4(i-1)..9+4(i-1)] tier i: kind, a, b, unit
--            kind "bucket": a = rate in tokens per second (> 0), b = burst in tokens (integer >= 1)
--            kind "window": a = max events per period (integer in [1, 1e9]),
--                           b = period_us (integer in [1000, 2^48])
--            unit "request": the tier costs 1; "message": it costs the
--            number of new ids (0 costs nothing and writes nothing)
--
-- Reply: array {status, tier, counted, stored, then per tier i: remaining_i,
-- wait_us_i, reset_us_i, then per id record: state}
--   status     0 granted; 1 refused (tier names the tier); 2 the
--              idempotency-key record exists (stored holds it): the tiers
--              and ids are reported as they stand, nothing is written
--   tier       status 1: the 1-based tier with the longest wait; else 0
--   counted    new ids (neither claimed nor done): the message cost
--   stored     status 2: the idempotency-key record's value; else ""
--   remaining  units the tier could still grant now (after a grant), floor
--   wait_us    microseconds until the tier could grant this request's cost
--              if nothing else is counted; 0 if it can now
--   reset_us   microseconds until the tier gains quota: a bucket its next
--              whole token (0 when full), a window the time until
--              remaining + 1 units fit (0 when it counts nothing), as
--              window_wait reckons it: what a refusal of one unit more
--              would answer as its wait
--   state      0 new (claimed when granted), 1 claimed by another request
--              (p:...), 2 done (d)
-- Error reply "ERR quota: ..." for malformed ARGV.
--
-- Clock: redis.call('TIME') (refill.lua's now), for every tier.
--
-- Writes: only when granted, each tier whose cost is > 0 (a bucket with
-- refill.lua's store, a window with window_store); each new id record
-- SET "p:<token>" PX claim_ms; the idempotency-key record likewise.
-- A refusal, or status 2, writes nothing.

-- @include int_arg
-- @include claim_args

local T = tonumber(ARGV[1])
local N = tonumber(ARGV[2])
local I = tonumber(ARGV[3])
local token = ARGV[4]
local claim_ms = tonumber(ARGV[5])
if not T or T < 1 or T > 16 or T ~= math.floor(T) then
  return redis.error_reply('ERR quota: T must be an integer in [1, 16]')
end
if not N or N < 0 or N ~= math.floor(N) or #KEYS ~= T + N + (I or 0) then
  return redis.error_reply('ERR quota: N must match the keys')
end
local bad = claim_error('quota', I, 'ARGV[3]', token) or int_error('quota', 'claim_ms', claim_ms, 1)
if bad then
  return bad
end

-- @include refill
-- @include window_read

local stored = false
if I == 1 then
  stored = redis.call('GET', KEYS[T + 1])
end

-- The id records are read with MGET, in chunks of at most 500 keys (one
-- call instead of one per id; unpack's stack stays small).
local states = {}
local counted = 0
for from = 1, N, 500 do
  local to = math.min(from + 499, N)
  local vals = redis.call('MGET', unpack(KEYS, T + I + from, T + I + to))
  for k = from, to do
    local v = vals[k - from + 1]
    if not v then
      states[k] = 0
      counted = counted + 1
    elseif string.sub(v, 1, 2) == 'p:' then
      states[k] = 1
    else
      states[k] = 2
    end
  end
end

local tiers = {}
local refused, longest = 0, 0
for i = 1, T do
  local base = 6 + 4 * (i - 1)
  local kind, a, b, unit = ARGV[base], tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]), ARGV[base + 3]
  local cost
  if unit == 'request' then
    cost = 1
  elseif unit == 'message' then
    cost = counted
  else
    return redis.error_reply('ERR quota: tier ' .. i .. ' unit must be request or message')
  end
  local key = KEYS[i]
  local tier = {kind = kind, key = key, a = a, b = b, cost = cost}
  if kind == 'bucket' then
    if not a or a <= 0 or a ~= a or a == math.huge or not b or b < 1 or b ~= math.floor(b) or b > 1e9 then
      return redis.error_reply('ERR quota: tier ' .. i .. ' bucket needs rate > 0 and an integer burst in [1, 1e9]')
    end
    local burst_u = b * 1000000
    local u, _, wrongtype = read(key, a, burst_u)
    tier.u, tier.burst_u, tier.wrongtype = u, burst_u, wrongtype
    local need = cost * 1000000
    if cost > b then
      tier.wait = -1
    elseif u >= need then
      tier.wait = 0
    else
      tier.wait = slot(need - u, a)
    end
  elseif kind == 'window' then
    if not a or a < 1 or a ~= math.floor(a) or a > 1e9 or not b or b < 1000 or b ~= math.floor(b) or b > 281474976710656 then
      return redis.error_reply('ERR quota: tier ' .. i .. ' window needs an integer max in [1, 1e9] and period_us in [1000, 2^48]')
    end
    local cur, prev, w, elapsed, wrongtype = window_read(key, b)
    tier.cur, tier.prev, tier.w, tier.elapsed, tier.wrongtype = cur, prev, w, elapsed, wrongtype
    tier.est = window_count(cur, prev, elapsed, b)
    if cost > a then
      tier.wait = -1
    elseif cost == 0 or tier.est + cost <= a then
      tier.wait = 0
    else
      tier.wait = window_wait(cur, prev, cost, a, b, elapsed)
    end
  else
    return redis.error_reply('ERR quota: tier ' .. i .. ' kind must be bucket or window')
  end
  -- A cost the tier can never grant (-1) is the longest wait of all.
  if tier.wait ~= 0 and (refused == 0 or tier.wait == -1 or (longest ~= -1 and tier.wait > longest)) then
    refused, longest = i, tier.wait
  end
  tiers[i] = tier
end

local granted = refused == 0 and not stored
local reply = {granted and 0 or 1, refused, counted, ''}
if stored then
  reply = {2, 0, counted, stored}
end
for i = 1, T do
  local t = tiers[i]
  local remaining, reset
  if t.kind == 'bucket' then
    local v = t.u
    if granted and t.cost > 0 then
      v = v - t.cost * 1000000
      store(t.key, v, t.a, t.burst_u, t.wrongtype)
    end
    remaining = math.floor(v / 1000000)
    if remaining < 0 then
      remaining = 0
    end
    if v >= t.burst_u then
      reset = 0
    else
      reset = slot((math.floor(v / 1000000) + 1) * 1000000 - v, t.a)
    end
  else
    local est = t.est
    if granted and t.cost > 0 then
      window_store(t.key, t.w, t.cur + t.cost, t.prev, t.b, t.wrongtype)
      est = est + t.cost
    end
    remaining = t.a - est
    if remaining < 0 then
      remaining = 0
    end
    -- The sliding count falls gradually, not at the fixed window's end:
    -- reset is when one unit more than remaining fits (0 when the window
    -- is empty), as a bucket's is its next whole token.
    if est <= 0 then
      reset = 0
    else
      local cur = t.cur
      if granted then
        cur = cur + t.cost
      end
      reset = window_wait(cur, t.prev, remaining + 1, t.a, t.b, t.elapsed)
    end
  end
  reply[#reply + 1] = remaining
  reply[#reply + 1] = t.wait
  reply[#reply + 1] = reset
end
if granted then
  local claim = 'p:' .. token
  if I == 1 then
    redis.call('SET', KEYS[T + 1], claim, 'PX', claim_ms)
  end
  for k = 1, N do
    if states[k] == 0 then
      redis.call('SET', KEYS[T + I + k], claim, 'PX', claim_ms)
    end
  end
end
for k = 1, N do
  reply[#reply + 1] = states[k]
end
return reply
