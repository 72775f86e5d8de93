-- count_args.lua: a fragment, not a script. compose (lua/compose.go)
-- splices it in place of the line "-- @include count_args" of
-- campaign_count.lua and outcome_count.lua, after int_arg.
--
-- Defines count_args(script, ttl_name), which reads the three arguments
-- both counts lead with: ARGV[1], how long what the call writes is kept
-- (ms, integer >= 1, named ttl_name in errors); ARGV[2], now_ms (Unix ms,
-- integer); ARGV[3], keep, how many campaigns the index keeps (integer
-- >= 1). Returns the three as numbers, then nil or the error reply of
-- int_error for the first one malformed.

local function count_args(script, ttl_name)
  local ttl_ms, now_ms, keep = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
  return ttl_ms, now_ms, keep,
    int_error(script, ttl_name, ttl_ms, 1) or int_error(script, 'now_ms', now_ms) or int_error(script, 'keep', keep, 1)
end
