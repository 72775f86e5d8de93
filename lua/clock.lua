-- clock.lua: a fragment, not a script. compose (lua/compose.go) splices it
-- in place of the line "-- @include clock" of refill.lua, adapt_base.lua,
-- window.lua, cooldown.lua and slow_start.lua.
--
-- Reads no KEYS or ARGV. Defines t (Redis TIME's reply) and now: Redis
-- TIME in µs since the Unix epoch, one clock for every client.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
