-- adapt_base.lua: a fragment, not a script. compose (lua/compose.go)
-- splices it in place of the line "-- @include adapt_base" of aimd_read.lua
-- and breaker_read.lua.
--
-- Reads no KEYS or ARGV. Defines now (clock.lua: Redis TIME in µs since the Unix
-- epoch), the function int, and numbers (argv.lua).

-- @include argv

-- @include clock

-- int returns v as a number if it is a finite integer >= lo, else nil.
local function int(v, lo)
  local n = tonumber(v)
  if not n or n ~= n or n == math.huge or n < lo or n ~= math.floor(n) then
    return nil
  end
  return n
end
