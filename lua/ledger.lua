-- ledger.lua: the idempotency ledger's operations of one flush (claims,
-- delivered marks, releases, reads of envelope ids) in one call. Run by
-- ledger.Ledger and ledger.Batcher.
--
-- Layout: the ledger keeps ids as fields of one hash per generation of
-- gen_ms milliseconds of Redis TIME (generation g = floor(now_ms / gen_ms),
-- gen_ms = the ledger's TTL / 4). An entry is written to the current
-- generation's hash, which expires at the end of generation g + 4, and read
-- from the current hash and the 4 before it: it is seen for at least 4
-- generations (the TTL) and kept for at most 5 (1.25 x the TTL). A field's
-- value is "d:<provider id>" once delivered, "c:<owner>" while claimed,
-- "x:<reason>" once dead-lettered while claimed (its DLQ copy written: a
-- copy read again is not dead-lettered again). Across generations: "d:"
-- anywhere is delivered; otherwise the newest generation holding a "c:" or
-- an "x:" value decides: the claim's owner, or dead-lettered.
--
-- Provider ids: a delivered mark with a provider id also writes, in the
-- same hash, the provider-id field the caller names ("<pacing key>\n\1<provider
-- id>", or "\1<provider id>" in a pacing key's hash: no envelope id holds a
-- control character, so it names no id) with value "i:<envelope id>",
-- then "\n<campaign>" if it has one: an event that names only the provider's
-- message id finds its envelope id for as long as the mark is kept.
--
-- Attempts: field "<field>\na" (an id holds no control character, so it
-- names no id) holds the attempts written to that generation, oldest
-- first, one line each: "<ms> <outcome> <code>" (ms of Redis TIME, then
-- the caller's words: see ledger.Attempt), at most 5 lines: an attempt
-- appends to the current generation's field and drops its oldest line
-- beyond 5. A read ("h") gives every generation's lines, oldest first.
--
-- KEYS[1]         the first cooldown key: KEYS[1..c] are the cooldown keys
--                 of the claimed ids' pacing keys (bucket's: the cooldown's
--                 end in µs of Redis TIME); c may be 0
-- KEYS[c+1..2c]   the suppression hashes of the same pacing keys, in the
--                 same order (package suppress: recipient hash ->
--                 "<expires_ms> <a|m> <reason> <at_ms>", expires_ms 0 =
--                 until removed, m = marketing messages only)
-- KEYS[2c+1..2c+p] the pair keys of the claims' pair limits (see
--                 pair_limit.lua: the pair's next arrival time in µs of
--                 Redis TIME); p may be 0
-- KEYS[2c+p+1..2c+p+7] the generation hashes of generations base ..
--                 base+6, all in one Redis Cluster slot with the cooldown
--                 and pair keys
-- ARGV[1]         gen_ms: generation length, integer >= 1 (ms)
-- ARGV[2]         base: the generation of KEYS[2c+p+1], integer; the caller
--                 passes its own clock's generation - 5, so Redis TIME's
--                 generation must be base+4 .. base+6 (clocks apart by less
--                 than one generation), else an error
-- ARGV[3]         c: how many of KEYS are cooldown keys, integer >= 0
-- ARGV[4]         p: how many of KEYS are pair keys, integer >= 0
-- ARGV[5..4+2p]   the limit of each pair key, in order: its interval
--                 (µs, integer >= 1) and its burst (messages, integer >= 1)
-- ARGV[5+2p..]    operations, 6 arguments each, run in order:
--                   op, field, arg, cooldown index (1..c, or 0), recipient,
--                   pair index (1..p: the claim takes a turn of that pair
--                   key, see "pair:" below; 0 none)
--                 recipient: "" (not checked), else the recipient's hash
--                   in the suppression hash of the cooldown index ("m"
--                   before it: a marketing message); claims only
--                 op "d": mark field delivered, arg = provider id (may be
--                         ""); its cooldown index is the provider-id field
--                         ("" none) and its recipient that field's value
--                         after "i:" (the envelope id, then
--                         "\n<campaign>" if any)
--                 op "x": mark field dead-lettered, arg = reason (may be
--                         ""), unless it is delivered
--                 op "r": release arg's (the owner's) claim on field
--                 op "c": claim field for owner arg; "f": the same, taking
--                         over a claim left by another owner (force)
--                 op "q": read field, writing nothing
--                 op "u": the same, with a dead-letter's reason
--                 op "p": read the provider-id field field, writing nothing
--                 op "a": append attempt line arg ("<outcome> <code>",
--                         non-empty) to field's attempts, prefixed with
--                         the ms of Redis TIME; reads the current
--                         generation's attempts only
--                 op "h": read field and its attempts, writing nothing
--
-- Reply: an array, one string per operation in order:
--   "d", "x": "ok"
--   "r": "released" (it was arg's claim, now dropped) or "kept"
--   "c"/"f": "claimed", "delivered" (final, even in a cooldown),
--        "deadlettered" (its DLQ copy was written; "c" only, nothing
--        written, even in a cooldown: "f" takes it over as a claim),
--        "suppressed:<reason>" (the recipient is suppressed, its entry
--        not expired at Redis TIME; nothing written, even in a cooldown),
--        "abandoned" (claimed by another owner, which may or may not have
--        sent it; "c" only, nothing written) or "cooldown:<us>" (the
--        pacing key cools down <us> more microseconds; nothing written)
--        or "pair:<us>" (a new claim or a takeover whose pair has no turn
--        free: the next comes in <us> microseconds; nothing written)
--   "q": "delivered", "deadlettered", "claimed" or "none"
--   "u": "delivered", "deadlettered:<reason>", "claimed" or "none"
--   "p": the provider-id field's value "i:..." (the newest), or "none"
--   "a": "ok"
--   "h": the value that decides the field's state ("d:<provider id>",
--        "c:<owner>", "x:<reason>", or "" for none), then, each after a
--        "\n", the attempt lines of every generation, oldest first
-- Error reply "ERR ledger: ..." for malformed ARGV or a clock off by more
-- than a generation.
--
-- Commands: TIME; MGET of the cooldown keys when a claim is made; one HMGET
-- per suppression hash a claim with a recipient reads; one HMGET
-- per generation read (5) when a claim, release, read or dead-lettered
-- mark is made (delivered marks alone read nothing); one HMGET of the
-- current hash when attempts are appended; one HSET and one PEXPIREAT of the current hash when
-- anything is written; one HDEL per hash a release drops a claim from;
-- with pair keys, one MGET of them and one SET per pair key a claim took
-- a turn of.
--
-- Writes: HSET of the current generation's hash (claims "c:<owner>",
-- marks "d:<provider id>" and "x:<reason>", attempts "<field>\na", provider-id fields), PEXPIREAT of it at the end of generation
-- g + 4; HDEL of a released claim from every generation that holds it
-- (older claims it shadowed included, so none comes back); SET of each
-- pair key changed, with PX until its bucket is full again.

-- @include pair_limit
-- @include int_arg

local gen_ms, base, c = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local bad = int_error('ledger', 'gen_ms', gen_ms, 1) or int_error('ledger', 'base', base)
if bad then
  return bad
end
local p = tonumber(ARGV[4])
if not c or c < 0 or c ~= math.floor(c) or not p or p < 0 or p ~= math.floor(p) or #KEYS ~= 2 * c + p + 7 then
  return redis.error_reply('ERR ledger: c and p must be integers >= 0 with 2c + p + 7 keys')
end
local piv, pb = {}, {} -- pair key index -> interval (µs), burst
for i = 1, p do
  piv[i], pb[i] = tonumber(ARGV[3 + 2 * i]), tonumber(ARGV[4 + 2 * i])
  if not piv[i] or piv[i] < 1 or piv[i] ~= math.floor(piv[i]) or not pb[i] or pb[i] < 1 or pb[i] ~= math.floor(pb[i]) then
    return redis.error_reply('ERR ledger: the interval and burst of pair key ' .. i .. ' must be integers >= 1')
  end
end
local op1 = 5 + 2 * p -- the first operation's first argument
local nops = (#ARGV - op1 + 1) / 6
if nops < 1 or nops ~= math.floor(nops) then
  return redis.error_reply('ERR ledger: operations must come in sixes')
end

local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local g = math.floor(math.floor(now_us / 1000) / gen_ms)
local cur = g - base + 1 -- index of the current generation among KEYS[2c+p+1..2c+p+7]
if cur < 5 or cur > 7 then
  return redis.error_reply('ERR ledger: the caller\'s clock is off Redis TIME by more than a generation (' .. gen_ms .. ' ms)')
end
local function hkey(i) return KEYS[2 * c + p + i] end -- i: cur-4 .. cur

-- The fields to read: those of claims, releases and reads.
local valid = {d = true, x = true, r = true, c = true, f = true, q = true, u = true, p = true, a = true, h = true}
local fields, seen = {}, {}
local afields, aseen = {}, {} -- attempts fields appended to (current generation read)
local ishist = {}             -- attempts fields of reads ("h"), read in every generation
local needcool = false
local supf = {} -- cooldown index -> the recipient hashes its claims check
for j = 0, nops - 1 do
  local at = op1 + 6 * j
  local op, f = ARGV[at], ARGV[at + 1]
  if not valid[op] then
    return redis.error_reply('ERR ledger: operation ' .. (j + 1) .. ' is not d, x, r, c, f, q, u, p, a or h')
  end
  if op == 'a' then
    if ARGV[at + 2] == '' then
      return redis.error_reply('ERR ledger: the attempt of operation ' .. (j + 1) .. ' is empty')
    end
    local af = f .. '\na'
    if not aseen[af] then
      aseen[af] = true
      afields[#afields + 1] = af
    end
  elseif op ~= 'd' then
    if op == 'h' then
      local af = f .. '\na'
      if not ishist[af] then
        ishist[af] = true
        fields[#fields + 1] = af
      end
    end
    if (op == 'r' or op == 'c' or op == 'f') and ARGV[at + 2] == '' then
      return redis.error_reply('ERR ledger: the owner of operation ' .. (j + 1) .. ' is empty')
    end
    if op == 'c' or op == 'f' then
      needcool = true
      local ci = tonumber(ARGV[at + 3])
      if not ci or ci < 1 or ci > c then
        return redis.error_reply('ERR ledger: cooldown index of operation ' .. (j + 1) .. ' is outside 1..c')
      end
      local to = ARGV[at + 4]
      if to ~= '' then
        if string.byte(to, 1) == 109 then to = string.sub(to, 2) end -- 'm'
        supf[ci] = supf[ci] or {}
        table.insert(supf[ci], to)
      end
      local pi = tonumber(ARGV[at + 5])
      if not pi or pi < 0 or pi > p or pi ~= math.floor(pi) then
        return redis.error_reply('ERR ledger: pair index of operation ' .. (j + 1) .. ' is outside 0..p')
      end
    end
    if not seen[f] then
      seen[f] = true
      fields[#fields + 1] = f
    end
  end
end

-- A cooldown's end in µs of Redis TIME, or nil; MGET answers nil for a key
-- of another type, which counts as no cooldown.
local cool = {}
if needcool then
  local cds = redis.call('MGET', unpack(KEYS, 1, c))
  for i = 1, c do
    local cd = tonumber(cds[i])
    if cd and cd == cd and cd ~= math.huge and cd > now_us then
      cool[i] = 'cooldown:' .. string.format('%.0f', cd - now_us)
    end
  end
end
pair_read(2 * c + 1, p)

-- The suppressions of the claims' recipients: sup[ci][hash] = the entry
-- ("<expires_ms> <a|m> <reason> <at_ms>") while it has not expired.
local sup = {}
for ci, hs in pairs(supf) do
  local vals = redis.call('HMGET', KEYS[c + ci], unpack(hs))
  for k = 1, #hs do
    local v = vals[k]
    if v then
      local e, sc, rs = string.match(v, '^(%d+) (%a) (%S+)')
      local ems = tonumber(e)
      if ems and (ems == 0 or ems * 1000 > now_us) then
        sup[ci] = sup[ci] or {}
        sup[ci][hs[k]] = {sc, rs}
      end
    end
  end
end
-- suppressed returns the reason the claim of operation at is refused for,
-- or nil.
local function suppressed(at)
  local to = ARGV[at + 4]
  if to == '' then return nil end
  local marketing = string.byte(to, 1) == 109
  if marketing then to = string.sub(to, 2) end
  local s = sup[tonumber(ARGV[at + 3])]
  local e = s and s[to]
  if e and (e[1] == 'a' or marketing) then return e[2] end
  return nil
end

-- A field read (seen[f]) has: dl[f], its "d:" value if delivered; cl[f],
-- the newest "c:" or "x:" value (a claim, or dead-lettered); held[f][i],
-- generation i holds a value for it. Plain tables by field, no table per
-- field unless a generation holds one: a new id's claim allocates nothing.
local dl, cl, held, ix = {}, {}, {}, {}
local hist = {} -- attempts field of a read -> generation -> its lines
local nf = #fields
if nf > 0 then
  for i = cur, cur - 4, -1 do -- newest first
    local vals = redis.call('HMGET', hkey(i), unpack(fields))
    for k = 1, nf do
      local v = vals[k]
      local f = fields[k]
      if v and ishist[f] then
        hist[f] = hist[f] or {}
        hist[f][i] = v
      elseif v then
        local h = held[f]
        if not h then
          h = {}
          held[f] = h
        end
        h[i] = true
        local b1, b2 = string.byte(v, 1, 2)
        if b2 == 58 then -- ':'
          if b1 == 100 then -- 'd'
            if not dl[f] then dl[f] = v end
          elseif (b1 == 99 or b1 == 120) and not cl[f] then -- 'c', 'x'
            cl[f] = v
          elseif b1 == 105 and not ix[f] then -- 'i': a provider-id field
            ix[f] = v
          end
        end
      end
    end
  end
end

-- The current generation's attempts of the fields appended to.
local acur = {}
if #afields > 0 then
  local vals = redis.call('HMGET', hkey(cur), unpack(afields))
  for k = 1, #afields do acur[afields[k]] = vals[k] or false end
end
local now_ms = string.format('%.0f', math.floor(now_us / 1000))
local keep_attempts = 5

-- Run the operations in order; collect the writes.
local set = {}    -- field -> value for the current hash
local setn = {}   -- fields in the order first set
local del = {}    -- i -> {field = true}: HDEL from generation i
local function put(f, v)
  if set[f] == nil then setn[#setn + 1] = f end
  set[f] = v
  if del[cur] then del[cur][f] = nil end
end
local function drop(f, i)
  del[i] = del[i] or {}
  del[i][f] = true
  if i == cur and set[f] then set[f] = false end
end

local out = {}
for j = 0, nops - 1 do
  local at = op1 + 6 * j
  local op, f, arg = ARGV[at], ARGV[at + 1], ARGV[at + 2]
  local r
  if op == 'd' then
    local v = 'd:' .. arg
    put(f, v)
    if seen[f] then dl[f] = v end
    local pf = ARGV[at + 3]
    if arg ~= '' and pf ~= '' and pf ~= '0' then
      local pv = 'i:' .. ARGV[at + 4]
      put(pf, pv)
      if seen[pf] then ix[pf] = pv end
    end
    r = 'ok'
  elseif op == 'x' then
    if not dl[f] then -- a delivered mark stays (in its generation too)
      local v = 'x:' .. arg
      put(f, v)
      cl[f] = v
    end
    r = 'ok'
  elseif op == 'a' then
    local af = f .. '\na'
    local v = now_ms .. ' ' .. arg
    local old = acur[af]
    if old then
      v = old .. '\n' .. v
      local n = select(2, string.gsub(v, '\n', '')) + 1
      while n > keep_attempts do
        v = string.sub(v, string.find(v, '\n', 1, true) + 1)
        n = n - 1
      end
    end
    acur[af] = v
    if hist[af] then hist[af][cur] = v end
    put(af, v)
    r = 'ok'
  elseif op == 'h' then
    local af = f .. '\na'
    local parts = {dl[f] or cl[f] or ''}
    local h = hist[af]
    if h then
      for i = cur - 4, cur do
        if h[i] then parts[#parts + 1] = h[i] end
      end
    end
    r = table.concat(parts, '\n')
  elseif op == 'q' then
    local claim = cl[f]
    local dead = claim and string.byte(claim, 1) == 120
    r = (dl[f] and 'delivered') or (dead and 'deadlettered') or (claim and 'claimed') or 'none'
  elseif op == 'u' then
    local claim = cl[f]
    local dead = claim and string.byte(claim, 1) == 120
    r = (dl[f] and 'delivered') or (dead and 'deadlettered:' .. string.sub(claim, 3)) or (claim and 'claimed') or 'none'
  elseif op == 'p' then
    r = ix[f] or 'none'
  elseif op == 'r' then
    if not dl[f] and cl[f] == 'c:' .. arg then
      cl[f] = nil
      local h = held[f]
      for i = cur - 4, cur do
        if (h and h[i]) or (i == cur and set[f]) then drop(f, i) end
      end
      r = 'released'
    else
      r = 'kept'
    end
  else -- 'c' or 'f'
    local claim = cl[f]
    local mine = 'c:' .. arg
    local why = suppressed(at)
    if dl[f] then
      r = 'delivered'
    elseif op == 'c' and claim and string.byte(claim, 1) == 120 then
      r = 'deadlettered'
    elseif why then
      r = 'suppressed:' .. why
    elseif cool[tonumber(ARGV[at + 3])] then
      r = cool[tonumber(ARGV[at + 3])]
    elseif claim and claim ~= mine and op ~= 'f' then
      r = 'abandoned'
    elseif claim == mine then
      r = 'claimed' -- claimed again (a slot that lapsed): nothing to write
    else
      -- A new claim, or a takeover (older generations' claims stay,
      -- shadowed by this newer one; a release drops them all), once its
      -- pair, if any, has a turn free.
      local pi = tonumber(ARGV[at + 5])
      local wait = pi > 0 and pair_take(pi, piv[pi], pb[pi], now_us)
      if wait then
        r = 'pair:' .. string.format('%.0f', wait)
      else
        put(f, mine)
        cl[f] = mine
        r = 'claimed'
      end
    end
  end
  out[j + 1] = r
end

local hs = {}
for _, f in ipairs(setn) do
  if set[f] then
    hs[#hs + 1] = f
    hs[#hs + 1] = set[f]
  end
end
if #hs > 0 then
  redis.call('HSET', hkey(cur), unpack(hs))
  redis.call('PEXPIREAT', hkey(cur), string.format('%.0f', (g + 5) * gen_ms))
end
pair_write(2 * c + 1, now_us)
for i = cur - 4, cur do
  if del[i] then
    local fs = {}
    for f in pairs(del[i]) do fs[#fs + 1] = f end
    if #fs > 0 then redis.call('HDEL', hkey(i), unpack(fs)) end
  end
end
return out
