-- breaker_read.lua: a fragment, not a script. compose (lua/compose.go)
-- splices it in place of the line "-- @include breaker_read" of each
-- breaker_*.lua script, so that all of them read the breaker hash with the
-- same code (Redis Lua has no require).
--
-- Reads KEYS[1] (breaker hash) in its functions, no ARGV. Defines now, and
-- the functions int, read and expire.

-- @include adapt_base

-- read returns the breaker in KEYS[1] and its state (0 closed, 1 open,
-- 2 half-open), and whether KEYS[1] has the wrong type. A missing or corrupt
-- hash is a closed breaker (nil state table).
local function read()
  local ok, h = pcall(redis.call, 'HMGET', KEYS[1], 'opens', 'until_us', 'probe_us', 'owner', 'reason')
  if not ok or type(h) ~= 'table' or h.err then
    return nil, 0, true
  end
  local b = {opens = int(h[1], 1), until_us = int(h[2], 0), probe_us = int(h[3], 0),
    owner = type(h[4]) == 'string' and h[4] or '', reason = type(h[5]) == 'string' and h[5] or ''}
  if not (b.opens and b.until_us and b.probe_us) then
    return nil, 0, false
  end
  if b.owner == '' then
    b.probe_us = 0 -- a lease without an owner is no lease
  end
  if now < b.until_us then
    return b, 1, false
  end
  return b, 2, false
end

-- expire sets KEYS[1] to expire idle_ms after the later of until_us and probe_us.
local function expire(b, idle_ms)
  local last = math.max(b.until_us, b.probe_us, now)
  redis.call('PEXPIRE', KEYS[1], math.ceil((last - now) / 1000) + idle_ms)
end
