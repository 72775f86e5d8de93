-- aimd_throttle.lua: record a throttle of one pacing key. A lone throttle
-- (a refusal at the edge of the provider's burst, from jitter between our
-- slots and the provider's ingress) only sets the cooldown; throttles that
-- persist lower the adapted rate to an estimate of what the provider
-- accepts. Run by adapt.Adapter.Throttled.
--
-- KEYS[1]  aimd hash, fields (decimal integer strings):
--            urate    adapted rate, in millionths of a message per second
--            last_us  Redis TIME of the last counted throttle, in µs since the
--                     Unix epoch (0: none yet)
--            hold_us  throttles before this time (µs) belong to the last counted one
--            win_us   start of the current clean window (µs); no increase
--                     before win_us + window_us
--            streak   counted throttles in a row that found the rate at the floor
--            ep_us    start (µs) of the current throttle episode: the
--                     counted throttle that began it (a lone one, or the
--                     persistent one that ended the episode before)
--            n        throttles since ep_us, not counting the one at ep_us
--            k        increases in a row since the last counted throttle
--                     (aimd_recover.lua accelerates with it)
--            acc      sends the provider accepted since ep_us, as reported by
--                     every replica (ARGV[9] here, ARGV[8] of aimd_recover.lua)
--            cap      the provider's capacity as last estimated, in
--                     millionths of a message per second (0: none)
--            wacc     sends accepted since win_us (see aimd_recover.lua);
--                     every throttle sets it to 0
--            ceil     the ceiling (ceil_u) the hash was last written under: a
--                     rate at it follows a changed ceiling (see aimd_read.lua)
--            cut_us   Redis TIME (µs) of the last decrease (0: none yet):
--                     replicas keep the slots granted after it (see the
--                     reply's since_us)
-- KEYS[2]  cooldown key, as in cooldown.lua: a string, the cooldown's end in
--          µs of Redis TIME; its TTL only cleans it up
-- KEYS[3]  the key's token bucket hash (optional): a decrease clears its
--          debt (see reschedule in aimd_read.lua)
-- KEYS[4]  the key's achieved hash (optional): ARGV[9] counts there as in
--          aimd_recover.lua (achieve in aimd_read.lua), so `pacer status`
--          counts the sends of a key being throttled
-- ARGV[1]  ceil_u: ceiling in millionths of a message per second, integer in [1, 1e15]
-- ARGV[2]  floor_u: floor, same unit, integer in [1, ceil_u]
-- ARGV[3]  decrease: the deepest cut of one decrease, decimal number in (0, 1)
-- ARGV[4]  coalesce_us: a throttle less than this many µs after a counted
--          one is part of it, integer >= 1
-- ARGV[5]  cooldown_ms: cooldown to set, integer >= 1
-- ARGV[6]  idle_ms: the hash expires this many ms after win_us, integer >= 1
-- ARGV[7]  persist_us: a counted throttle less than this many µs after the
--          last counted one means throttles persist, integer >= 1
-- ARGV[8]  backoff: a decrease goes to this fraction of the estimated
--          capacity, decimal number in (0, 1]
-- ARGV[9]  accepted: sends of this key the caller saw accepted since it last
--          reported, integer >= 0
-- ARGV[10] pause_tokens: the ceiling's burst, integer >= 0; after a
--          persistent throttle (a decrease, or a rate kept below the
--          estimate), the cooldown lasts at least until the provider's
--          bucket has earned the pacer's burst at the new rate:
--          max(1, pause_tokens * new rate / ceil_u) tokens, that is
--          pause_tokens / ceiling s (at least one token interval at the new
--          rate); 0: no pause
-- ARGV[11] paced_u: the adapted rate the throttled send was paced at, in
--          millionths, integer >= 0; 0: unknown
-- ARGV[12] min_ep_us: the shortest episode (now - ep_us) whose accepted
--          sends estimate the capacity, integer in [1, persist_us]; absent,
--          0 or above persist_us: persist_us / 2
-- ARGV[13] factor: the probe's first step, as in aimd_recover.lua: a
--          decimal number > 1, or 0 (absent: 0) to step by step_u
-- ARGV[14] step_u: the probe's additive step, integer >= 1 (absent: 1)
--
-- Reply: array of 5 integers {urate, change, cooldown_ms, streak, since_us}
--   urate        adapted rate after the call, floor_u <= urate <= ceil_u
--   change       -1 if this call lowered the rate, else 0
--   cooldown_ms  ms left of the cooldown after the call, >= ARGV[5]
--   streak       the streak field after the call
--   since_us     µs from the last decrease (cut_us) to now, 0 when this
--                call made it; -1 when none is recorded
-- Error reply "ERR aimd: ..." for malformed ARGV.
--
-- A missing or corrupt hash (wrong type, a field missing, not an integer,
-- out of range) is a key at its ceiling with no throttle yet. The stored rate
-- is clamped to [floor_u, ceil_u] on every read, so a lowered ceiling applies
-- at once.
--
-- Three cases, each counting the throttle in n or starting a new count:
-- - now < hold_us, or paced_u > urate (coalesced): a reply to the same
--   burst of in-flight requests as the last counted throttle, or a send
--   paced above the current rate by a replica that had not yet seen the
--   last decrease: n grows by one; the rate, streak and last_us stay;
--   hold_us and win_us only move out to the cooldown's end.
-- - last_us = 0 or now >= last_us + persist_us, or the provider accepted
--   99% or more of the episode's requests (acc >= 99 * (n + 2), this
--   throttle and the one at ep_us counted: refusals that sporadic are the
--   jitter of a busy key at a burst edge, not a saturated provider) (lone):
--   a new episode starts:
--   ep_us = last_us = now, n = 0, k = 0, hold_us = max(now + coalesce_us,
--   cooldown end), win_us = max(win_us, cooldown end). Without a capacity
--   found (cap = 0) the rate stays; with one, cap steps down by one probe
--   step (ARGV[13], ARGV[14]) if urate >= cap, and is raised to at least
--   acc / (now - ep_us) when that span is 2 * persist_us or more (persist_us
--   for a rate above cap) and the
--   pacer was busy (acc + n + 1 >= 90% of min(urate, cap) over it); urate goes to at most cap (a
--   rate at cap keeps its slots: the debt scaled as by reschedule's keep;
--   a rate above cap drops them as a decrease does: the debt cleared,
--   cut_us = now), and the refill pause below is set, as after a decrease.
-- - persistent (as below) with acc > 0 but now - ep_us < min_ep_us, while
--   the episode's refusals (n + 2) are under a fifth of its requests
--   (acc + n + 2) (short): n grows by one, last_us = now, hold_us and
--   win_us as for a lone one; the rate, cap and ep_us stay: the episode
--   goes on until it is long enough to measure.
-- - otherwise (persistent): n grows by one. A provider that keeps refusing
--   is saturated, so what it accepted over the episode is its capacity:
--   est = acc / (now - ep_us), or, within -20%..+25% of the last estimate
--   cap, the mean of the two (the same capacity met again: the mean evens
--   out the replicas' late reports), and, when the episode's refusals (n + 1)
--   are 10% or less of its requests (acc + n + 1), at least cap * backoff
--   (a provider that refused so few was not saturated: the sends it
--   accepted are the pacer's, short of its rate after a cut, not its
--   capacity); the rate then goes to that estimate, not Backoff below it;
--   with refusals that few the rate also goes to at least Backoff of
--   upper = urate - n / (now - ep_us) (what the provider took had the
--   pacer sent its rate; reports err low); cap stays the estimate (upper
--   exceeds the capacity by what the pacer sent short of its rate, and a
--   return to it would meet the limit again).
--   Without reports of accepted sends (acc = 0)
--   the refusals give a weaker estimate: est = urate - n / (now - ep_us).
--   The rate becomes max(floor_u, floor(urate * decrease),
--   floor(min(est, urate) * backoff)), and, for a rate above cap > 0 with
--   no measured estimate (acc = 0, or an episode shorter than min_ep_us),
--   at least floor(cap * backoff): a probe met the limit the provider took
--   moments ago; the rate stays when an estimate from acc
--   exceeds it (urate < est: below the provider's capacity, the refusals
--   come from its bucket emptied moments ago, by a probe or bunched sends;
--   the pause refills it; an estimate above 1.25 * cap then raises cap to
--   urate at most, never to the estimate); cap becomes the estimate from acc
--   (within [floor_u, ceil_u], even when Decrease kept the new rate above
--   it: aimd_recover.lua then holds the rate there, not probing, for 4
--   windows; the weaker estimate, and one from an episode shorter than
--   min_ep_us, leave cap as it was), and a new episode starts as above,
--   with win_us = cooldown end and ep_us = now, the refill pause included
--   (the provider's bucket, empty now, earns tokens through it that the
--   sends after it take).
-- accepted is added to acc first in every case; a new episode sets acc = 0.
-- A counted (lone or persistent) throttle adds one to streak if urate was at
-- the floor already, else sets it to 0.
--
-- Writes: always. KEYS[4] as achieve does. On a decrease, KEYS[3] as reschedule does (keep for a lone one of a rate at cap). SET KEYS[2] <end_us> PX cooldown_ms unless the cooldown
-- already ends later (never shortened); HSET of all thirteen fields of KEYS[1]
-- (DEL first if it has the wrong type) and PEXPIRE KEYS[1] to
-- (win_us - now) / 1000 + idle_ms.

-- @include aimd_read

local decrease, coalesce_us, cooldown_ms, idle_ms, persist_us, backoff, accepted = numbers(3, 9)
if not int(accepted, 0) then
  return redis.error_reply('ERR aimd: accepted must be an integer >= 0')
end
local pause_tokens = tonumber(ARGV[10])
if not int(pause_tokens, 0) then
  return redis.error_reply('ERR aimd: pause_tokens must be an integer >= 0')
end
local paced_u = tonumber(ARGV[11] or '0')
if not int(paced_u, 0) then
  return redis.error_reply('ERR aimd: paced_u must be an integer >= 0')
end
local min_ep_us = tonumber(ARGV[12] or '0')
local factor = tonumber(ARGV[13] or '0')
local step_u = tonumber(ARGV[14] or '1')
if not factor or not (factor == 0 or (factor > 1 and factor ~= math.huge)) then
  return redis.error_reply('ERR aimd: factor must be 0 or a finite number > 1')
end
if not int(step_u, 1) then
  return redis.error_reply('ERR aimd: step_u must be an integer >= 1')
end
if not int(min_ep_us, 0) then
  return redis.error_reply('ERR aimd: min_ep_us must be an integer >= 0')
end
if not decrease or not (decrease > 0 and decrease < 1) then
  return redis.error_reply('ERR aimd: decrease must be a number in (0, 1)')
end
if not int(coalesce_us, 1) or not int(cooldown_ms, 1) or not int(idle_ms, 1) or not int(persist_us, 1) then
  return redis.error_reply('ERR aimd: coalesce_us, cooldown_ms, idle_ms and persist_us must be integers >= 1')
end
if not backoff or not (backoff > 0 and backoff <= 1) then
  return redis.error_reply('ERR aimd: backoff must be a number in (0, 1]')
end
if min_ep_us == 0 or min_ep_us > persist_us then
  min_ep_us = math.floor(persist_us / 2)
end

achieve(accepted)

-- The cooldown, as cooldown.lua sets it: never shortened.
local cd = cooldown_end()
local want = now + cooldown_ms * 1000
if cd < want then
  redis.call('SET', KEYS[2], string.format('%.0f', want), 'PX', cooldown_ms)
  cd = want
end

-- refill_pause extends the cooldown (never shortens it) until a provider
-- whose bucket is empty now has earned, at rate u (millionths), the burst
-- the pacer takes at u: max(1, pause_tokens * u / ceil_u) tokens. Nothing
-- when pause_tokens is 0.
local function refill_pause(u)
  if pause_tokens == 0 then
    return
  end
  local pause_end = now + math.floor(math.max(1, pause_tokens * u / ceil_u) * 1e12 / u)
  if cd < pause_end then
    redis.call('SET', KEYS[2], string.format('%.0f', pause_end), 'PX', math.ceil((pause_end - now) / 1000))
    cd = pause_end
  end
end

local s, wrongtype = read()
local change = 0
if not s then
  s = {urate = ceil_u, last_us = 0, hold_us = 0, win_us = 0, streak = 0, ep_us = 0, n = 0, k = 0, acc = 0, cap = 0,
    cut_us = 0}
end
s.acc = s.acc + accepted
-- A counted throttle within persist_us of the last, with the provider
-- having refused more than 1% of the episode's requests: throttles persist.
local dt = math.max(1, now - s.ep_us)
local persistent = s.last_us > 0 and now < s.last_us + persist_us and s.acc < 99 * (s.n + 2)
local function count_streak()
  if s.urate <= floor_u then
    s.streak = s.streak + 1
  else
    s.streak = 0
  end
end
if now < s.hold_us or (paced_u > 0 and paced_u > s.urate) then
  s.n = s.n + 1
  s.hold_us = math.max(s.hold_us, cd)
  s.win_us = math.max(s.win_us, cd)
elseif persistent and s.acc > 0 and dt < min_ep_us and (s.n + 2) * 5 < s.acc + s.n + 2 then
  -- Persistent, but the episode is too short to measure the capacity
  -- (under min_ep_us: by default half of persist_us, a second at 80/s):
  -- one report more or less per replica moves its estimate by 20% and
  -- more either way; a high one cut nothing, set a capacity that is not
  -- there and started the episode over, as short; a low one cut by
  -- Decrease below the capacity. Unless the refusals (counted here at
  -- once, not reported late) are a fifth of the episode's requests or
  -- more (the rate is 1.25 times the capacity or more: the cut is
  -- Decrease's, whatever the error), the throttle is counted and the
  -- episode goes on: the rate, the capacity and ep_us stay.
  count_streak()
  s.n = s.n + 1
  s.last_us = now
  s.hold_us = math.max(now + coalesce_us, cd)
  s.win_us = math.max(s.win_us, cd)
else
  count_streak()
  if persistent then
    s.n = s.n + 1
    local est
    local above = false -- est is more than 1.25 times cap
    local few = false -- est is cap * backoff: few refusals (see below)
    local upper -- with few refusals: the rate less the refusals per second
    -- The rate less the refusals per second (counted here at once): what
    -- the provider took had the pacer sent its rate.
    local weak = s.urate - s.n * 1e12 / dt
    -- The episode's refusals are 10% of its requests or fewer.
    local sporadic = (s.n + 1) * 10 <= s.acc + s.n + 1
    if s.acc > 0 then
      est = s.acc * 1e12 / dt
      -- An estimate near the last one (within -20%..+25%) meets the same
      -- capacity: their mean evens out the replicas' late reports.
      if s.cap > 0 and est >= 0.8 * s.cap and est <= 1.25 * s.cap then
        est = (est + s.cap) / 2
      elseif s.cap > 0 and est > 1.25 * s.cap then
        above = true
      end
      -- An episode whose refusals are 10% of its requests or fewer did not
      -- saturate the provider: what it accepted is what the pacer sent
      -- (short of its rate after a cut: the pause, the slots dropped and
      -- taken anew), a bound below the capacity, not the capacity. It
      -- lowers the capacity found by Backoff at most, so throttles that
      -- persist walk it down gently, never through a chain of cuts below
      -- it; the rate goes to that capacity.
      if s.cap > 0 and sporadic and est < s.cap * backoff then
        est = s.cap * backoff
        few = true
      end
      -- With refusals that few, the cut goes no lower than Backoff of
      -- weak (the capacity stays the estimate): what was reported errs
      -- low. Reports of replicas that have seen no throttle come once a
      -- second (three replicas at 80/s with 3 refusals in 1.5 s estimated
      -- 68), and the pacer sends a few % short of a rate it was cut to
      -- (32.8/s with a provider at 30 estimated 27.7, and the rate
      -- cruised there).
      if sporadic then
        upper = weak
      end
    else
      est = weak
    end
    -- The cut goes to Backoff of the estimate, room below it for the
    -- probe; after an episode of few refusals, to the lowered capacity
    -- itself: lowering it by Backoff is the room.
    local margin = backoff
    if few then
      margin = 1
    end
    local u = math.max(floor_u, math.floor(s.urate * decrease), math.floor(math.min(est, s.urate) * margin))
    if upper then
      u = math.max(u, math.floor(upper * backoff))
    end
    -- A rate at or probing above a capacity found (cap > 0, urate >=
    -- cap; a lone throttle may have just stepped it there), cut with no
    -- estimate to go by (an episode too short to measure, or no
    -- reports): the probe is what met the limit, and the provider took
    -- the capacity moments ago; Decrease would cut well below it (a probe
    -- to 34.6 with a capacity of 30 went to 25.9 and stayed under 90% of
    -- the limit for a minute). The cut goes no lower than Backoff of the
    -- capacity; a limit really lowered meets the next, measured episode.
    if s.cap > 0 and s.urate >= s.cap and (s.acc == 0 or dt < min_ep_us) then
      u = math.max(u, math.floor(s.cap * backoff))
    end
    u = math.min(u, s.urate)
    if s.urate - u <= 1 then
      u = s.urate -- a millionth of a message per second: rounding, not a cut
    end
    local refill = u < s.urate
    if s.acc > 0 and s.urate < est then
      refill = true
      -- The provider accepted more than the rate over the episode: the
      -- rate is below its capacity, and the refusals come from its bucket,
      -- emptied moments ago (by the probe a cut just ended, or by sends
      -- bunched on their way). Cutting again would only dip below the
      -- capacity; the pause below refills the bucket.
      u = s.urate
    end
    if u < s.urate then
      change = -1
      reschedule(s.urate, u)
      s.cut_us = now
    end
    -- A provider that kept refusing has an empty bucket: sending on at
    -- once, even below its rate, meets its edge again. Pause until it has
    -- earned the burst the pacer takes at the new rate (pause_tokens
    -- scaled by u / ceil_u, at least one token): enough for the pacer's
    -- bunched slots to fit. Earning the provider's whole burst back
    -- would cost that many sends at every cut, a dip below the capacity
    -- the cut has just found; the new rate, below it, refills the rest.
    if refill then
      refill_pause(u)
    end
    -- The next episode is counted from now, the pause included: the
    -- provider's bucket is empty now and earns tokens through the pause
    -- (fewer than its burst), which the sends after the pause take, so
    -- what it accepts from now on is its rate times the time since now.
    -- (Counted from the pause's end, the estimate came out above the
    -- capacity by the pause's share of the episode: 12% of a 1 s one.)
    if s.acc > 0 and dt >= min_ep_us then
      -- (An episode shorter than that ends here only in a cut by
      -- Decrease: its estimate, too rough to keep, sets no capacity.)
      local c = est -- upper bounds the cut, not the capacity (see above)
      if above and s.urate < est then
        -- No cut, and an estimate far above the capacity found (a short
        -- episode, bunched reports): it raises the capacity to the rate
        -- at most, so the next clean window does not jump to it; a probe
        -- finds a capacity really raised.
        c = math.max(s.cap, s.urate)
      end
      s.cap = math.min(ceil_u, math.max(floor_u, math.floor(c)))
    end
    s.urate = u
    s.win_us = cd
  else
    -- A lone throttle of a key with a capacity found (cap > 0), at or
    -- above it: the provider's bucket is empty at a rate near what it
    -- takes (a capacity found 4% too high, 31 with a provider at 30, met a
    -- refusal every 2-3 s, each lone, for ten seconds, until a chain of
    -- them persisted), or a probe above cap met its limit: the capacity
    -- steps down by one probe step (divided by factor, or less step_u).
    -- The provider's bucket was empty at the throttle that began the
    -- episode too, so what it accepted since, per second, is at most its
    -- rate, and near it when the pacer was busy all along (sent, acc + n +
    -- 1, at least 90% of min(urate, cap) over the episode): over an
    -- episode of 2 * persist_us or longer (4 s by default; the replicas'
    -- reports, up to 100 ms late, err by a few % there) the capacity is
    -- at least that. (Taken as the capacity down as well as up, it
    -- measured the pacer, not the provider, whenever the rate had been
    -- below the capacity: a rate cut to 23 with a provider at 30 set a
    -- capacity of 23.) So a step down never goes below what the provider
    -- was seen to take, and a rate below the capacity lowers nothing. A
    -- rate above the capacity goes to it (its slots dropped, see below),
    -- and the key pauses as after a
    -- decrease, so the provider's bucket, empty now, earns the burst the
    -- pacer takes (with no pause, 4-5 refusals more followed each probe,
    -- from sends at the provider's own rate). Without a capacity found (a
    -- key at its ceiling) a lone throttle is the jitter of sends at the
    -- configured limit: the rate stays.
    if s.cap > 0 then
      local c = s.cap
      local probing = s.urate > s.cap -- a probe above the capacity met the limit
      if s.urate >= s.cap then
        c = s.cap - step_u
        if factor > 1 then
          c = math.floor(s.cap / factor)
        end
      end
      -- Over a rate above the capacity (a probe, or a cut that Decrease
      -- or few refusals kept above an estimate) the capacity is unproven:
      -- the episode's own sends bound it from below once it has lasted
      -- persist_us (2 s), as the provider took them with its bucket empty
      -- at the start; with reports every 100 ms they err by a few % there.
      -- (Only 4 s bounds a capacity the rate cruised at.)
      local span = 2 * persist_us
      if probing then
        span = persist_us
      end
      if s.acc > 0 and dt >= span and
          (s.acc + s.n + 1) * 1e12 >= 0.9 * math.min(s.urate, s.cap) * dt then
        c = math.max(c, math.floor(s.acc * 1e12 / dt))
      end
      s.cap = math.min(ceil_u, math.max(floor_u, c))
      if s.urate > s.cap then
        change = -1
        -- The slots granted ahead at a rate above the capacity (a probe,
        -- or a cut that Decrease or few refusals kept above the estimate)
        -- would go on sending that rate to an empty provider bucket after
        -- its refusal: every replica holds its reserve of them, about 2 s
        -- of the key's rate with 3 replicas, and kept they sent 40-60
        -- requests above the capacity after each probe. They are dropped,
        -- as after a decrease (cut_us: every replica drops those granted
        -- before it; the debt cleared), and taken anew at the new rate. A
        -- rate at the capacity, stepped down by one probe step, keeps its
        -- slots: the step is too small to be worth a gap.
        reschedule(s.urate, s.cap, not probing)
        if probing then
          s.cut_us = now
        end
        s.urate = s.cap
      end
      refill_pause(s.urate)
    end
    s.win_us = math.max(s.win_us, cd)
  end
  s.ep_us = now
  s.n = 0
  s.k = 0
  s.acc = 0
  s.last_us = now
  s.hold_us = math.max(now + coalesce_us, cd)
end

if wrongtype then
  redis.call('DEL', KEYS[1])
end
local f = '%.0f'
redis.call('HSET', KEYS[1], 'urate', string.format(f, s.urate), 'last_us', string.format(f, s.last_us),
  'hold_us', string.format(f, s.hold_us), 'win_us', string.format(f, s.win_us),
  'streak', string.format(f, s.streak), 'ep_us', string.format(f, s.ep_us), 'n', string.format(f, s.n),
  'k', string.format(f, s.k), 'acc', string.format(f, s.acc), 'cap', string.format(f, s.cap), 'wacc', '0',
  'ceil', string.format(f, ceil_u), 'cut_us', string.format(f, s.cut_us))
redis.call('PEXPIRE', KEYS[1], left_ms(s.win_us) + idle_ms)
return {s.urate, change, left_ms(cd), s.streak, since_cut(s)}
