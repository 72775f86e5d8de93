-- pair_limit.lua: a fragment of ledger.lua (no contract of its own): the
-- pair limit its claims take, one bucket per (pacing key, recipient) on
-- the Redis clock, as GCRA: a pair key holds tat, the theoretical arrival
-- time of the next message in µs of Redis TIME (the bucket is full once
-- Redis TIME reaches it). With interval iv (µs) and burst b, a claim at
-- now is admitted when tat - (b - 1) * iv <= now, and then tat = max(tat,
-- now) + iv: b at once, then one per iv. A refused claim is told how long
-- until the next turn; it takes nothing, so the claims refused together
-- all come back for that turn, and one of them gets it.

local pair_tat, pair_dirty = {}, {}

-- pair_read reads the p pair keys KEYS[first .. first+p-1].
local function pair_read(first, p)
  if p == 0 then return end
  local vs = redis.call('MGET', unpack(KEYS, first, first + p - 1))
  for i = 1, p do
    pair_tat[i] = tonumber(vs[i]) or 0
  end
end

-- pair_take takes a turn of pair i (interval iv µs, burst b) at now_us:
-- nil when admitted, else the µs until the next turn.
local function pair_take(i, iv, b, now_us)
  local tat = math.max(pair_tat[i], now_us)
  local turn = tat - (b - 1) * iv
  if turn > now_us then
    return turn - now_us
  end
  pair_tat[i] = tat + iv
  pair_dirty[i] = true
  return nil
end

-- pair_write writes the pairs whose turns were taken, each kept until its
-- bucket is full again (PX, at least 1 ms).
local function pair_write(first, now_us)
  for i in pairs(pair_dirty) do
    redis.call('SET', KEYS[first + i - 1], string.format('%.0f', pair_tat[i]),
      'PX', string.format('%.0f', math.max(math.ceil((pair_tat[i] - now_us) / 1000), 1)))
  end
end
