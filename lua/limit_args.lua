-- limit_args.lua: a fragment, not a script. compose (lua/compose.go)
-- splices it in place of the line "-- @include limit_args" of state.lua,
-- reserve.lua and lease_return.lua, the scripts that take a bucket's limit
-- in ARGV.
--
-- Reads no KEYS or ARGV. Defines numbers (argv.lua) and
-- limit_error(script, rate, burst, cost):
-- nil when rate is a finite number > 0, burst an integer in [1, 1e9] and
-- cost an integer in [1, burst] (false: no cost to check); else the error
-- reply "ERR <script>: ..." naming the first of them that is wrong.

-- @include argv

local function limit_error(script, rate, burst, cost)
  local bad
  if not rate or rate ~= rate or rate <= 0 or rate == math.huge then
    bad = 'rate must be a finite number > 0'
  elseif not burst or burst < 1 or burst ~= math.floor(burst) or burst > 1e9 then
    bad = 'burst must be an integer in [1, 1e9]'
  elseif cost ~= false and (not cost or cost < 1 or cost ~= math.floor(cost) or cost > burst) then
    bad = 'cost must be an integer in [1, burst]'
  end
  if bad then
    return redis.error_reply('ERR ' .. script .. ': ' .. bad)
  end
  return nil
end
