// Package lua holds the Redis scripts run by package bucket and its
// subpackages (adapt, ledger, window), and nothing else. Each script begins with its contract: KEYS, ARGV with units, and the
// reply shape (integers or strings only, never Lua floats, which Redis
// truncates to integers).
//
// Redis Lua has no require, so code that several scripts share lives once,
// in a fragment (refill.lua, limit_args.lua, argv.lua, int_arg.lua, clock.lua, aimd_read.lua, breaker_read.lua,
// adapt_base.lua):
// a script's line "-- @include refill" is replaced by refill.lua when the
// package is initialised (see compose). The exported strings are the
// composed scripts, ready for EVAL.
//
// Only package bucket and its subpackages may import lua.
package lua

// State is state.lua with limit_args.lua and refill.lua: read a bucket and its cooldown without
// writing; reply {utokens, cooldown_ms}.
var State = compose("state.lua")

// Cooldown is cooldown.lua with int_arg.lua: set a cooldown to at least ms milliseconds,
// never shortening a longer one; reply: the TTL left in milliseconds.
var Cooldown = compose("cooldown.lua")

// Reserve is reserve.lua with limit_args.lua and refill.lua: reserve the next free slot of one
// or more token buckets (all or nothing), or lease up to n slots of one,
// letting a bucket go into bounded debt; reply {granted, delay_us, wait_us,
// cooldown, remaining, u0, now_us}.
var Reserve = compose("reserve.lua")

// LeaseReturn is lease_return.lua with limit_args.lua and refill.lua: give back the unused, not
// yet started slots of a lease; reply: the slots given back.
var LeaseReturn = compose("lease_return.lua")

// Window is window.lua: count events against a sliding-window quota; reply
// {allowed, remaining, wait_us}.
var Window = compose("window.lua")
