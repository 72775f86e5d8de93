-- reserve.lua: reserve the next free slot of one or more token buckets, all
-- or nothing, or lease up to n slots of one bucket. Run by bucket.Limiter
-- Reserve, ReserveMulti and Lease (and their mirror, bucket.Local).
--
-- A grant takes the tokens now even when its slot is later: the bucket goes
-- into debt (negative utokens), and later callers are given later slots, so
-- each caller sleeps once until its own slot. Sent at its slot, every
-- message conforms to every bucket: in any window of T seconds a bucket
-- passes at most burst + rate * T tokens.
--
-- KEYS[1]     bucket hash 1, fields (decimal integer strings):
--               utokens  tokens in the bucket at ts_us, in millionths of a
--                        token; negative while slots granted ahead are not
--                        yet refilled (a debt, at most 10^9 tokens)
--               ts_us    Redis TIME of that count, in µs since the Unix epoch
-- KEYS[2]     cooldown key 1: a string, the cooldown's end in µs of Redis
--             TIME; while TIME is before it the bucket grants nothing
-- KEYS[2i-1], KEYS[2i]
--             bucket hash and cooldown key i (i = 1 .. #KEYS / 2); while
--             any cooldown has not ended, nothing is granted
-- ARGV[1]     maxwait_us: latest slot to grant, microseconds after now,
--             integer in [0, 2^52]; 0 grants only what is there now (a take)
-- ARGV[2]     n: slots wanted, integer in [1, 10^9]; n > 1 (a lease) only
--             with one bucket
-- ARGV[3], ARGV[4], ARGV[5]: rate, burst, cost of bucket 1, and generally
-- ARGV[3i], ARGV[3i+1], ARGV[3i+2]
--             rate_i (tokens per second, finite > 0), burst_i (tokens,
--             integer in [1, 10^9]) and cost_i (tokens per slot, integer in
--             [1, burst_i]) of bucket i
--
-- Reply: array of 7 integers {granted, delay_us, wait_us, cooldown, remaining, u0, now_us}
--   granted    slots granted: 0 (refused) to n
--   delay_us   granted: microseconds from now until the first slot (0: now;
--              <= maxwait_us); refused: 0
--   wait_us    refused: microseconds until a retry could be granted (>= 1):
--              until the cooldown ends, or until the first slot is within
--              maxwait_us; granted: 0
--   cooldown   1 if refused because a cooldown has not ended, else 0
--   remaining  fewest whole tokens left in any bucket after the call (0 in debt)
--   u0         bucket 1 before the call, in millionths at now (< 0: debt);
--              slot k of a lease (k = 1 .. granted) starts at the fewest
--              whole microseconds s with floor(s * rate_1) >= k * cost_1 * 10^6 - u0
--   now_us     Redis TIME of the call, microseconds since the Unix epoch
-- Error reply "ERR reserve: ..." for malformed KEYS or ARGV.
--
-- Several buckets: the slot is the latest of the buckets' own slots, and
-- every bucket is debited as if its tokens were taken at that slot
-- (refill up to it capped at burst, less cost), so a bucket whose own slot
-- was earlier does not pass its tokens on to a later caller.
--
-- Clock: redis.call('TIME'), one clock for every client. A bucket refills
-- by floor((now - ts_us) * rate) millionths per call (refill() of
-- refill.lua), capped at burst (a lower burst than the one stored clamps at
-- once). A missing or corrupt hash (wrong type, fields missing, not finite,
-- ts_us < 0, a debt beyond 10^9 tokens) is a full bucket. State stamped
-- after now (Redis clock stepped back) gets no refill; a refusal re-stamps
-- it to now, keeping its tokens, so the bucket neither mints tokens nor
-- stalls until the clock catches up.
--
-- Writes: when granted, HSET utokens ts_us of every bucket and PEXPIRE it to
-- the time it needs to refill to burst (at least burst / rate) + 1 ms. A
-- refusal writes nothing, except re-stamping to now (tokens kept) a bucket
-- stamped after now. A cooldown refusal never writes.

-- @include limit_args

local nb = #KEYS / 2
if nb < 1 or nb ~= math.floor(nb) or #ARGV ~= 2 + 3 * nb then
  return redis.error_reply('ERR reserve: want 2 keys and 3 ARGV per bucket')
end
local maxwait = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
if not maxwait or maxwait < 0 or maxwait ~= math.floor(maxwait) or maxwait > 4503599627370496 then
  return redis.error_reply('ERR reserve: maxwait_us must be an integer in [0, 2^52]')
end
if not n or n < 1 or n ~= math.floor(n) or n > 1e9 or (n > 1 and nb > 1) then
  return redis.error_reply('ERR reserve: n must be an integer in [1, 1e9], 1 with several buckets')
end
local rates, bursts, costs = {}, {}, {}
for i = 1, nb do
  local rate, burst, cost = numbers(3 * i, 3 * i + 2)
  local bad = limit_error('reserve', rate, burst, cost)
  if bad then
    return bad
  end
  rates[i], bursts[i], costs[i] = rate, burst * 1000000, cost * 1000000
end

-- @include refill

local us, ahead, wrong = {}, {}, {}
for i = 1, nb do
  us[i], ahead[i], wrong[i] = read(KEYS[2 * i - 1], rates[i], bursts[i])
end
local function remaining(vs)
  local r
  for i = 1, nb do
    local w = 0
    if vs[i] > 0 then
      w = math.floor(vs[i] / 1000000)
    end
    if not r or w < r then
      r = w
    end
  end
  return r
end

local cd = 0
for i = 1, nb do
  local left = cooldown_left(KEYS[2 * i])
  if left > cd then
    cd = left
  end
end
if cd > 0 then
  return {0, 0, cd, 1, remaining(us), us[1], now}
end

-- refuse re-stamps buckets stamped after now, then replies wait_us.
local function refuse(wait)
  for i = 1, nb do
    if ahead[i] then
      store(KEYS[2 * i - 1], us[i], rates[i], bursts[i], wrong[i])
    end
  end
  if wait < 1 then
    wait = 1
  end
  return {0, 0, wait, 0, remaining(us), us[1], now}
end

if nb == 1 then
  local u, rate, cost_u = us[1], rates[1], costs[1]
  local first = slot(cost_u - u, rate)
  -- slot k <= maxwait exactly when refill(maxwait) >= k * cost_u - u.
  local g = math.floor((u + refill(maxwait, rate)) / cost_u)
  if g > n then
    g = n
  end
  local floor_debt = math.floor((u + max_debt) / cost_u)
  if g > floor_debt then
    g = floor_debt
  end
  if g < 1 or first > maxwait then
    return refuse(first - maxwait)
  end
  local v = u - g * cost_u
  store(KEYS[1], v, rate, bursts[1], wrong[1])
  return {g, first, 0, 0, remaining({v}), u, now}
end

local s = 0
for i = 1, nb do
  local si = slot(costs[i] - us[i], rates[i])
  if si > s then
    s = si
  end
end
if s > maxwait then
  return refuse(s - maxwait)
end
local vs = {}
for i = 1, nb do
  local r = refill(s, rates[i])
  local c = us[i] + r
  if c > bursts[i] then
    c = bursts[i]
  end
  vs[i] = c - costs[i] - r
  if vs[i] < -max_debt then
    return refuse(1)
  end
end
for i = 1, nb do
  store(KEYS[2 * i - 1], vs[i], rates[i], bursts[i], wrong[i])
end
return {1, s, 0, 0, remaining(vs), us[1], now}
