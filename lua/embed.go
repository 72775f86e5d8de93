// Package lua holds the Redis scripts run by package bucket, and nothing
// else. Each script begins with its contract: KEYS, ARGV with units, and the
// reply shape (integers or strings only, never Lua floats, which Redis
// truncates to integers).
//
// Only package bucket may import lua.
package lua

import _ "embed"

// Take is take.lua: take cost tokens from a token bucket unless its pacing
// key is in cooldown; reply {allowed, remaining, wait_us, cooldown}.
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
