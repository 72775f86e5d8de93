package lua

// AIMDThrottle is aimd_throttle.lua with aimd_read.lua: lower a pacing key's
// adapted rate once per burst of throttles and set its cooldown; reply
// {urate, change, cooldown_ms, streak}.
var AIMDThrottle = compose("aimd_throttle.lua")

// AIMDRecover is aimd_recover.lua with aimd_read.lua: raise a pacing key's
// adapted rate after a clean window; reply {urate, change, cooldown_ms,
// streak}.
var AIMDRecover = compose("aimd_recover.lua")

// AIMDState is aimd_state.lua with aimd_read.lua: read a pacing key's
// adapted rate without writing; reply {urate, 0, cooldown_ms, streak}.
var AIMDState = compose("aimd_state.lua")

// AIMDPair is aimd_pair.lua: record a pair-scoped throttle and set the
// pair's shared cooldown; reply {cooldown_ms, n}.
var AIMDPair = compose("aimd_pair.lua")

// AIMDPairs is aimd_pairs.lua: the pairs of a pacing key in cooldown; reply
// {sub, left_ms, ...}.
var AIMDPairs = compose("aimd_pairs.lua")

// AIMDAchieved is aimd_achieved.lua: a pacing key's achieved rate, in
// thousandths of a message per second, or -1.
var AIMDAchieved = compose("aimd_achieved.lua")

// BreakerAllow is breaker_allow.lua with breaker_read.lua: whether a send to
// a pacing key may go, granting one owner the half-open probe; reply
// {allowed, probe, wait_us, state}.
var BreakerAllow = compose("breaker_allow.lua")

// BreakerResult is breaker_result.lua with breaker_read.lua: open, reopen or
// close a pacing key's breaker after a send; reply {state, opens,
// open_left_us}.
var BreakerResult = compose("breaker_result.lua")

// BreakerStatus is breaker_status.lua with breaker_read.lua: read a breaker
// without writing; reply {state, opens, open_left_us, probe_left_us, owner,
// reason}.
var BreakerStatus = compose("breaker_status.lua")

// AIMDStorm is aimd_storm.lua with aimd_read.lua: count a server error of a
// pacing key and lower its adapted rate once per burst of them; reply
// {urate, change, cooldown_ms, streak, since_us}.
var AIMDStorm = compose("aimd_storm.lua")

// SlowStart is slow_start.lua with int_arg.lua: mark a pacing key active and return the µs
// since its active spell began.
var SlowStart = compose("slow_start.lua")
