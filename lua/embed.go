// Package lua holds the Redis scripts run by package bucket, and nothing
// else. Each script begins with its contract: KEYS, ARGV with units, and the
// reply shape (integers or strings only, never Lua floats, which Redis
// truncates to integers).
//
// Only package bucket may import lua.
package lua

import _ "embed"

// Take is take.lua: take cost tokens from a token bucket now unless its
// pacing key is in cooldown; reply {allowed, remaining, wait_us, cooldown}.
//
//go:embed take.lua
var Take string

// State is state.lua: read a bucket and its cooldown without writing; reply
// {utokens, cooldown_ms}.
//
//go:embed state.lua
var State string

// Cooldown is cooldown.lua: set a cooldown to at least ms milliseconds,
// never shortening a longer one; reply: the TTL left in milliseconds.
//
//go:embed cooldown.lua
var Cooldown string

// Reserve is reserve.lua: reserve the next free slot of one or more token
// buckets (all or nothing), or lease up to n slots of one, letting a bucket
// go into bounded debt; reply {granted, delay_us, wait_us, cooldown,
// remaining, u0, now_us}.
//
//go:embed reserve.lua
var Reserve string

// LeaseReturn is lease_return.lua: give back the unused, not yet started
// slots of a lease; reply: the slots given back.
//
//go:embed lease_return.lua
var LeaseReturn string

// Window is window.lua: count events against a sliding-window quota;
// reply {allowed, remaining, wait_us}.
//
//go:embed window.lua
var Window string
