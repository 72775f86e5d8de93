-- slow_start.lua: mark a pacing key active and return how long it has been
-- active since it was last idle, for the slow start of a key that comes
-- back from idle (adapt.Adapter.Active; the pacer then ramps its rate).
--
-- KEYS[1]  start hash, fields (decimal integer strings, µs of Redis TIME
--          since the Unix epoch):
--            start_us  the start of the key's current active spell
--            seen_us   the last mark
-- ARGV[1]  idle_ms: a key not marked for this long is idle, integer >= 1
--
-- Reply: integer, µs from the start of the active spell to now (0 when
-- this call starts it).
-- Error reply "ERR slow start: ..." for malformed ARGV.
--
-- The start is kept while the key is marked at least every idle_ms (by any
-- replica); a key left unmarked that long, or a missing, corrupt or
-- future hash, starts a new spell now. Idleness is judged on TIME, not on
-- the TTL, which only cleans up.
--
-- Writes: HSET KEYS[1] start_us, seen_us (DEL first if it has the wrong
-- type) and PEXPIRE KEYS[1] idle_ms.

-- @include int_arg

local idle_ms = tonumber(ARGV[1])
local bad = int_error('slow start', 'idle_ms', idle_ms, 1, true)
if bad then
  return bad
end

-- @include clock

local start, seen
local ok, h = pcall(redis.call, 'HMGET', KEYS[1], 'start_us', 'seen_us')
if ok and type(h) == 'table' and not h.err then
  start, seen = tonumber(h[1]), tonumber(h[2])
else
  redis.call('DEL', KEYS[1])
end
if not start or not seen or start ~= start or seen ~= seen or start > now or seen > now or start > seen or
    now - seen >= idle_ms * 1000 then
  start = now
end
redis.call('HSET', KEYS[1], 'start_us', string.format('%.0f', start), 'seen_us', string.format('%.0f', now))
redis.call('PEXPIRE', KEYS[1], string.format('%.0f', idle_ms))
return now - start
