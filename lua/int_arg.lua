-- int_arg.lua: a fragment, not a script. compose (lua/compose.go) splices
-- it in place of the line "-- @include int_arg" of cooldown.lua,
-- slow_start.lua, ledger.lua, campaign_count.lua, campaign_claim.lua, outcome_count.lua,
-- quota.lua and quota_finish.lua.
--
-- Reads no KEYS or ARGV. Defines int_error(script, name, v, min, finite):
-- nil when v (an ARGV as a number; nil when missing or not a number) is an
-- integer, at least min unless min is nil, and not math.huge when finite;
-- else the error reply "ERR <script>: <name> must be an integer", with
-- " >= <min>" when min is given.

local function int_error(script, name, v, min, finite)
  if not v or v ~= math.floor(v) or (min and v < min) or (finite and v == math.huge) then
    return redis.error_reply('ERR ' .. script .. ': ' .. name .. ' must be an integer' .. (min and ' >= ' .. min or ''))
  end
  return nil
end
