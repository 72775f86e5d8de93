-- claim_args.lua: a fragment, not a script. compose (lua/compose.go)
-- splices it in place of the line "-- @include claim_args" of quota.lua
-- and quota_finish.lua.
--
-- Reads no KEYS or ARGV. Defines claim_error(script, I, i_name, token): nil
-- when I (the ARGV named i_name, as a number: 1 when KEYS holds the
-- request's idempotency-key record, else 0) is 0 or 1 and token (the
-- request's claim token) is not empty; else the error reply "ERR <script>:
-- <i_name> must be 0 or 1" or "ERR <script>: token must not be empty".

local function claim_error(script, I, i_name, token)
  if I ~= 0 and I ~= 1 then
    return redis.error_reply('ERR ' .. script .. ': ' .. i_name .. ' must be 0 or 1')
  end
  if not token or token == '' then
    return redis.error_reply('ERR ' .. script .. ': token must not be empty')
  end
  return nil
end
