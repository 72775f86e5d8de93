-- portfolio.lua: the WhatsApp messaging-limit guard of one business
-- portfolio (package portfolio): admit a business-initiated message to a
-- recipient (or N of them, in order, in one call), or give a reservation
-- back. Run by portfolio.Store.Admit, GiveBack and portfolio.Batch.
--
-- KEYS[1]  the portfolio's window: a sorted set, recipient hash -> the
--          Redis TIME (Unix ms) of its last business-initiated message
-- KEYS[2]  the portfolio's hash: "tier" (unique recipients per window;
--          -1 or absent: unlimited), "deferred" (messages deferred, ever),
--          "paused" (present: marketing is paused after a quality
--          downgrade; its value is the event that paused it)
-- ARGV[1]  op: "a" admit, "b" admit a batch, "r" give back
-- ARGV[2]  the recipient's hash
-- ARGV[3]  "a": window_ms, integer >= 1 (24 h in production)
--          "r": the score the admit answered; the entry is removed only
--          if it still has it (a later message to the recipient keeps it)
-- ARGV[4]  "a": "m" when the message is category marketing; absent or
--          "" otherwise
-- "b": ARGV[2] window_ms as for "a", then 2 per message, in the order
--          they are admitted: ARGV[2i+1] its recipient's hash, ARGV[2i+2]
--          "m" (marketing) or "" (i = 1..N, N >= 1)
--
-- Reply: an array for "a", an array of N such arrays for "b" (each what
-- "a" would have answered for that message called in that order at the
-- same TIME), an integer for "r".
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
-- Commands: TIME, ZREMRANGEBYSCORE (entries out of the window), HGET of
-- the tier, ZCARD, HEXISTS of "paused" (if a message is marketing), then
-- per message ZSCORE, and ZADD (admitted) or ZRANGE of the oldest
-- (deferred); at the end one PEXPIRE (if any was admitted) and one
-- HINCRBY of the deferrals (if any). "a" is "b" of one message: 7
-- commands when admitted; "b" of N admitted runs 2N + 5 (7N as N calls
-- of "a"). "r": ZSCORE and ZREM.
--
-- Writes: "a" and "b" remove entries older than the window, then ZADD of
-- each admitted recipient at Redis TIME (ms) and PEXPIRE of the window by
-- window_ms, and HINCRBY of "deferred" by the messages deferred or
-- paused; "r" ZREM of the recipient when its score is the one given.

local op = ARGV[1]
if op == 'r' then
  local h, want = ARGV[2], ARGV[3]
  if not h or h == '' then
    return redis.error_reply('ERR portfolio: the recipient hash is empty')
  end
  local s = redis.call('ZSCORE', KEYS[1], h)
  if s and tonumber(s) == tonumber(want) then
    return redis.call('ZREM', KEYS[1], h)
  end
  return 0
end
-- msgs: {hash, marketing, hash, marketing, ...}
local window, msgs
if op == 'a' then
  window, msgs = ARGV[3], {ARGV[2] or '', ARGV[4] or ''}
elseif op == 'b' then
  window, msgs = ARGV[2], {}
  if #ARGV < 4 or #ARGV % 2 ~= 0 then
    return redis.error_reply('ERR portfolio: b takes window_ms and pairs of hash, marketing')
  end
  for i = 3, #ARGV do msgs[#msgs + 1] = ARGV[i] end
else
  return redis.error_reply('ERR portfolio: op must be a, b or r')
end
local marketing = false
for i = 1, #msgs, 2 do
  if msgs[i] == '' then
    return redis.error_reply('ERR portfolio: the recipient hash is empty')
  end
  if msgs[i + 1] == 'm' then marketing = true end
end
window = tonumber(window)
if not window or window < 1 or window ~= math.floor(window) then
  return redis.error_reply('ERR portfolio: window_ms must be an integer >= 1')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local tier = tonumber(redis.call('HGET', KEYS[2], 'tier')) or -1
local used = redis.call('ZCARD', KEYS[1])
local paused = marketing and redis.call('HEXISTS', KEYS[2], 'paused') == 1
local deferred, admitted = 0, false
local out = {}
for i = 1, #msgs, 2 do
  local h = msgs[i]
  local seen = redis.call('ZSCORE', KEYS[1], h)
  if paused and msgs[i + 1] == 'm' then
    deferred = deferred + 1
    out[#out + 1] = {'paused', 0, used, tier}
  elseif not seen and tier >= 0 and used >= tier then
    deferred = deferred + 1
    local wait = window
    local old = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    if old[2] then wait = tonumber(old[2]) + window - now + 1 end
    if wait < 1 then wait = 1 end
    out[#out + 1] = {'deferred', wait, used, tier}
  else
    redis.call('ZADD', KEYS[1], now, h)
    admitted = true
    if seen then
      out[#out + 1] = {'seen', now, used, tier}
    else
      used = used + 1
      out[#out + 1] = {'new', now, used, tier}
    end
  end
end
if admitted then redis.call('PEXPIRE', KEYS[1], window) end
if deferred > 0 then redis.call('HINCRBY', KEYS[2], 'deferred', deferred) end
if op == 'a' then return out[1] end
return out
