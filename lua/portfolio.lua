-- portfolio.lua: the WhatsApp messaging-limit guard of one business
-- portfolio (package portfolio): admit a business-initiated message to a
-- recipient, or give a reservation back. Run by portfolio.Guard.
--
-- KEYS[1]  the portfolio's window: a sorted set, recipient hash -> the
--          Redis TIME (Unix ms) of its last business-initiated message
-- KEYS[2]  the portfolio's hash: "tier" (unique recipients per window;
--          -1 or absent: unlimited), "deferred" (messages deferred, ever),
--          "paused" (present: marketing is paused after a quality
--          downgrade; its value is the event that paused it)
-- ARGV[1]  op: "a" admit, "r" give back
-- ARGV[2]  the recipient's hash
-- ARGV[3]  "a": window_ms, integer >= 1 (24 h in production)
--          "r": the score the admit answered; the entry is removed only
--          if it still has it (a later message to the recipient keeps it)
-- ARGV[4]  "a": "m" when the message is category marketing; absent or
--          "" otherwise
--
-- Reply: an array for "a", an integer for "r".
-- "a": {verdict, score_or_wait_ms, used, tier}
--   verdict "new": the recipient entered the window at score (ms)
--   verdict "seen": it was there; its last-seen time is now score (a
--     moving window counts a user until 24 h after its last message)
--   verdict "deferred": the window is full and the recipient new: nothing
--     written but the deferred count; wait_ms until the oldest entry
--     leaves the window
--   verdict "paused": a marketing message while "paused" is set: nothing
--     written but the deferred count; wait_ms 0 (until the operator or an
--     upgrade webhook resumes it)
--   used: entries in the window after the call; tier as read (-1 none)
-- "r": 1 (removed) or 0 (not there or refreshed since)
-- Error "ERR portfolio: ..." for malformed ARGV.
--
-- Commands: TIME, ZREMRANGEBYSCORE (entries out of the window), ZSCORE,
-- HGET of the tier, ZCARD, HEXISTS of "paused" (marketing only), then
-- ZADD and PEXPIRE (admitted) or ZRANGE of the oldest and HINCRBY
-- (deferred) or HINCRBY (paused); "r": ZSCORE and ZREM.
--
-- Writes: "a" removes entries older than the window, then ZADD of the
-- recipient at Redis TIME (ms) and PEXPIRE of the window by window_ms
-- when admitted, or HINCRBY of "deferred" when deferred; "r" ZREM of
-- the recipient when its score is the one given.

local op, h = ARGV[1], ARGV[2]
if not h or h == '' then
  return redis.error_reply('ERR portfolio: the recipient hash is empty')
end
if op == 'r' then
  local want = ARGV[3]
  local s = redis.call('ZSCORE', KEYS[1], h)
  if s and tonumber(s) == tonumber(want) then
    return redis.call('ZREM', KEYS[1], h)
  end
  return 0
end
if op ~= 'a' then
  return redis.error_reply('ERR portfolio: op must be a or r')
end
local window = tonumber(ARGV[3])
if not window or window < 1 or window ~= math.floor(window) then
  return redis.error_reply('ERR portfolio: window_ms must be an integer >= 1')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local tier = tonumber(redis.call('HGET', KEYS[2], 'tier')) or -1
local seen = redis.call('ZSCORE', KEYS[1], h)
local used = redis.call('ZCARD', KEYS[1])
if ARGV[4] == 'm' and redis.call('HEXISTS', KEYS[2], 'paused') == 1 then
  redis.call('HINCRBY', KEYS[2], 'deferred', 1)
  return {'paused', 0, used, tier}
end
if not seen and tier >= 0 and used >= tier then
  redis.call('HINCRBY', KEYS[2], 'deferred', 1)
  local wait = window
  local old = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if old[2] then wait = tonumber(old[2]) + window - now + 1 end
  if wait < 1 then wait = 1 end
  return {'deferred', wait, used, tier}
end
redis.call('ZADD', KEYS[1], now, h)
redis.call('PEXPIRE', KEYS[1], window)
if seen then
  return {'seen', now, used, tier}
end
return {'new', now, used + 1, tier}
