-- lease_return.lua: give back the slots of a lease (reserve.lua with n > 1)
-- that the caller will not use and that have not started yet. Run by
-- bucket.Limiter.Return.
--
-- KEYS[1]  bucket hash, fields as in reserve.lua
-- ARGV[1]  rate: refill in tokens per second, decimal number, finite and > 0
-- ARGV[2]  burst: capacity in tokens, integer >= 1
-- ARGV[3]  cost: tokens per slot, integer, 1 <= cost <= burst
-- ARGV[4]  now0_us: now_us of the lease's reply, integer >= 0
-- ARGV[5]  u0: u0 of the lease's reply, integer millionths (may be < 0)
-- ARGV[6]  granted: slots of the lease, integer >= 1
-- ARGV[7]  used: slots the caller used or will use (the first ones), integer in [0, granted]
--
-- Reply: integer, slots given back: those after the used ones whose start
-- (as reserve.lua defines it) is still after now. Slots already started
-- lapse, as do all of them if the Redis clock is behind now0_us, and all
-- of them unless the lease is still the bucket's last write (its utokens
-- and ts_us are those the lease stored: u0 - granted * cost, stamped
-- now0_us): nothing was granted after it, and no decrease cleared or
-- increase rescaled the debt it took.
--
-- Why only the last write: the bucket holds one count, not the slots. A
-- lease granted after this one was placed behind its slots; giving them
-- back would have the next lease start that many slots earlier, on top of
-- the later lease's slots (two replicas sending at twice the rate), while
-- the given-back span goes unused (a gap): a provider that enforces its
-- limit strictly refuses the first and the second is lost. And after a
-- decrease that cleared the debt, the slots were already forgiven: giving
-- them back would mint tokens, a burst just after a throttle. Such slots
-- lapse instead.
--
-- Why this cannot exceed the limit: had the lease taken only the slots it
-- keeps, the bucket would now hold less than one slot's cost more than it
-- does after the return, so it never reached burst in between and the
-- refill lost nothing: the return leaves the bucket exactly as if the given
-- back slots had never been granted (and is capped at burst besides).
-- Return each lease at most once: a second return would mint tokens.
--
-- Writes: when it gives back >= 1 slot, HSET utokens ts_us and PEXPIRE as
-- reserve.lua does; otherwise nothing.
-- Error reply "ERR lease_return: ..." for malformed ARGV.

-- @include limit_args

local rate, burst, cost, now0, u0, granted, used = numbers(1, 7)
local bad = limit_error('lease_return', rate, burst, cost)
if bad then
  return bad
end
if not now0 or now0 < 0 or now0 ~= math.floor(now0) or not u0 or u0 ~= math.floor(u0)
    or u0 < -1e15 or u0 > burst * 1000000 then
  return redis.error_reply('ERR lease_return: now0_us and u0 must be those of the lease')
end
if not granted or granted < 1 or granted ~= math.floor(granted) or granted > 1e9
    or not used or used < 0 or used ~= math.floor(used) or used > granted then
  return redis.error_reply('ERR lease_return: need 0 <= used <= granted')
end
local burst_u = burst * 1000000

-- @include refill

if now < now0 then
  return 0
end
local cost_u = cost * 1000000
local h = redis.call('HMGET', KEYS[1], 'utokens', 'ts_us')
if tonumber(h[2]) ~= now0 or tonumber(h[1]) ~= u0 - granted * cost_u then
  return 0
end
local started = math.floor((u0 + refill(now - now0, rate)) / cost_u)
local from = used
if started > from then
  from = started
end
local r = granted - from
if r <= 0 then
  return 0
end
local u, _, wrongtype = read(KEYS[1], rate, burst_u)
u = u + r * cost_u
if u > burst_u then
  u = burst_u
end
store(KEYS[1], u, rate, burst_u, wrongtype)
return r
