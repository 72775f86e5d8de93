-- argv.lua: a fragment, not a script. compose (lua/compose.go) splices it
-- in place of the line "-- @include argv" of adapt_base.lua and
-- limit_args.lua.
--
-- Reads no KEYS or ARGV by itself. Defines numbers(first, last): ARGV[first]
-- to ARGV[last] as numbers, as that many values (nil for one missing or
-- not a number), for the script to check.

local function numbers(first, last)
  local v = {}
  for i = first, last do
    v[i - first + 1] = tonumber(ARGV[i])
  end
  return unpack(v, 1, last - first + 1)
end
