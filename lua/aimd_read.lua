-- aimd_read.lua: a fragment, not a script. compose (lua/compose.go) splices
-- it in place of the line "-- @include aimd_read" of each aimd_*.lua script,
-- so that all of them check ARGV[1..2] and read the aimd hash with the same
-- code (Redis Lua has no require).
--
-- Reads ARGV[1] (ceil_u) and ARGV[2] (floor_u), returning an error reply if
-- they are malformed, and KEYS[1] (aimd hash), KEYS[2] (cooldown key) and
-- KEYS[3] (the key's token bucket hash, optional) in its functions. Defines
-- ceil_u, floor_u, now, and the functions int, read, cooldown_end,
-- reschedule, since_cut, left_ms and achieve (KEYS[4], optional).

local ceil_u = tonumber(ARGV[1])
local floor_u = tonumber(ARGV[2])
if not ceil_u or ceil_u < 1 or ceil_u > 1e15 or ceil_u ~= math.floor(ceil_u) then
  return redis.error_reply('ERR aimd: ceil_u must be an integer in [1, 1e15]')
end
if not floor_u or floor_u < 1 or floor_u > ceil_u or floor_u ~= math.floor(floor_u) then
  return redis.error_reply('ERR aimd: floor_u must be an integer in [1, ceil_u]')
end

-- @include adapt_base

-- read returns the state in KEYS[1] (fields as in aimd_throttle.lua) with urate clamped to [floor_u, ceil_u],
-- or nil when the hash is missing or corrupt, and whether KEYS[1] has the
-- wrong type.
local function read()
  local ok, h = pcall(redis.call, 'HMGET', KEYS[1], 'urate', 'last_us', 'hold_us', 'win_us', 'streak',
    'ep_us', 'n', 'k', 'acc', 'cap', 'wacc', 'ceil', 'cut_us')
  if not ok or type(h) ~= 'table' or h.err then
    return nil, true
  end
  local s = {urate = int(h[1], 1), last_us = int(h[2], 0), hold_us = int(h[3], 0),
    win_us = int(h[4], 0), streak = int(h[5], 0)}
  if not (s.urate and s.last_us and s.hold_us and s.win_us and s.streak) then
    return nil, false
  end
  -- ep_us, n, k, acc, cap and cut_us came later: a hash without them (or with a
  -- corrupt one) reads them as 0, which starts a fresh episode, a slow
  -- probe and no known capacity.
  s.ep_us = int(h[6], 0) or 0
  s.n = int(h[7], 0) or 0
  s.k = int(h[8], 0) or 0
  s.acc = int(h[9], 0) or 0
  s.cap = int(h[10], 0) or 0
  s.wacc = int(h[11], 0) or 0
  s.cut_us = int(h[13], 0) or 0
  -- A rate at the ceiling it was written under (never cut: lone throttles
  -- only) follows a changed ceiling, so an operator's raise applies at
  -- once; a rate the provider cut stays where it was (within the new one).
  local was = int(h[12], 1)
  if was and was ~= ceil_u and s.urate >= was then
    s.urate = ceil_u
  end
  s.urate = math.max(floor_u, math.min(ceil_u, s.urate))
  return s, false
end

-- cooldown_end returns the end (µs) of the cooldown in KEYS[2], or 0 when
-- there is none (missing, corrupt, wrong type or over).
local function cooldown_end()
  local ok, cd = pcall(redis.call, 'GET', KEYS[2])
  cd = ok and tonumber(cd) or nil
  if cd and cd == cd and cd ~= math.huge and cd > now then
    return cd
  end
  return 0
end

-- reschedule moves the debt of the token bucket hash KEYS[3] (slots
-- granted ahead, utokens < 0 at now; see reserve.lua and refill.lua) when
-- the adapted rate changes from from_u to to_u (millionths of a message per
-- second, the rate the bucket refills at). The debt is in tokens, so left
-- alone it would move the next grant: a faster rate would put new slots
-- among those granted already (a burst the provider refuses), a slower one
-- far behind them (a gap). A higher rate scales the debt by to_u / from_u,
-- so new slots follow the granted ones at the new spacing. A lower rate
-- clears it: the pacer drops the slots it was granted before a decrease and
-- takes new ones at the new rate, from now; with keep (a step down that
-- drops nothing), it scales the debt as a higher rate does. Does nothing without KEYS[3],
-- when the hash is missing or corrupt, or when it holds no debt.
local function reschedule(from_u, to_u, keep)
  if #KEYS < 3 or from_u == to_u then
    return
  end
  local ok, h = pcall(redis.call, 'HMGET', KEYS[3], 'utokens', 'ts_us')
  if not ok or type(h) ~= 'table' or h.err then
    return
  end
  local u, ts = tonumber(h[1]), tonumber(h[2])
  if not u or not ts or u ~= u or ts ~= ts or u == math.huge or ts == math.huge or u < -1e15 then
    return
  end
  if now > ts then
    u = u + math.floor((now - ts) * from_u / 1e6)
  end
  if u >= 0 then
    return
  end
  local v = 0
  if to_u > from_u or keep then
    v = math.floor(u * to_u / from_u)
  end
  redis.call('HSET', KEYS[3], 'utokens', string.format('%.0f', v), 'ts_us', string.format('%.0f', now))
end

-- since_cut returns the µs from the last decrease (cut_us of s) to now, or
-- -1 when s is nil or records none: the fifth integer of every aimd
-- script's reply.
local function since_cut(s)
  if not s or s.cut_us <= 0 or s.cut_us > now then
    return -1
  end
  return now - s.cut_us
end

-- left_ms returns the ms from now until end_us, rounded up; 0 if past.
local function left_ms(end_us)
  if end_us <= now then
    return 0
  end
  return math.ceil((end_us - now) / 1000)
end

-- achieve adds accepted (sends of the key one replica saw accepted since it
-- last reported, an integer >= 0) to the key's achieved hash KEYS[4]
-- (optional; fields a: sends in the current window, w_us: its start in µs
-- of Redis TIME, r: accepted per second over the last window of >= 5 s, in
-- thousandths; read by `pacer status`), closing the window once it is 5 s
-- long. Every report counts, whether it comes with a recover or with a
-- throttle: a key being throttled is still sending. A window that closes
-- more than 15 s after it began went without reports for over 10 s (a key
-- with messages reports every second or two, one paced at 0.1/s every
-- 10 s): the key sat idle for part of it, so its count is no measure of
-- the key's pace (a key back at 80/s
-- after a pause read a fraction of that); r is removed and a new window
-- begins, and
-- `pacer status` says the key is warming up until a window closes in
-- time. A hash of the wrong type is replaced. PEXPIRE 5 min on every
-- write.
local function achieve(accepted)
  if #KEYS < 4 then
    return
  end
  local ok, h = pcall(redis.call, 'HMGET', KEYS[4], 'a', 'w_us')
  local a, w = 0, nil
  if ok and type(h) == 'table' and not h.err then
    a, w = int(h[1], 0) or 0, int(h[2], 0)
  else
    redis.call('DEL', KEYS[4])
  end
  if not w or w > now then
    redis.call('HSET', KEYS[4], 'a', accepted, 'w_us', string.format('%.0f', now))
    redis.call('PEXPIRE', KEYS[4], 300000)
  elseif now - w > 15000000 then
    redis.call('HDEL', KEYS[4], 'r')
    redis.call('HSET', KEYS[4], 'a', accepted, 'w_us', string.format('%.0f', now))
    redis.call('PEXPIRE', KEYS[4], 300000)
  elseif now - w >= 5000000 then
    redis.call('HSET', KEYS[4], 'r', string.format('%.0f', math.floor((a + accepted) * 1e9 / (now - w))), 'a', 0,
      'w_us', string.format('%.0f', now))
    redis.call('PEXPIRE', KEYS[4], 300000)
  elseif accepted > 0 then
    redis.call('HINCRBY', KEYS[4], 'a', accepted)
    redis.call('PEXPIRE', KEYS[4], 300000)
  end
end
