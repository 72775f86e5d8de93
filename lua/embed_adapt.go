package lua

import _ "embed"

// AIMDThrottle is aimd_throttle.lua: lower a pacing key's adapted rate once
// per burst of throttles and set its cooldown; reply {urate, change,
// cooldown_ms, streak}.
//
//go:embed aimd_throttle.lua
var AIMDThrottle string

// AIMDRecover is aimd_recover.lua: raise a pacing key's adapted rate after a
// clean window; reply {urate, change, cooldown_ms, streak}.
//
//go:embed aimd_recover.lua
var AIMDRecover string

// AIMDState is aimd_state.lua: read a pacing key's adapted rate without
// writing; reply {urate, 0, cooldown_ms, streak}.
//
//go:embed aimd_state.lua
var AIMDState string

// BreakerAllow is breaker_allow.lua: whether a send to a pacing key may go,
// granting one owner the half-open probe; reply {allowed, probe, wait_us,
// state}.
//
//go:embed breaker_allow.lua
var BreakerAllow string

// BreakerResult is breaker_result.lua: open, reopen or close a pacing key's
// breaker after a send; reply {state, opens, open_left_us}.
//
//go:embed breaker_result.lua
var BreakerResult string

// BreakerStatus is breaker_status.lua: read a breaker without writing;
// reply {state, opens, open_left_us, probe_left_us, owner, reason}.
//
//go:embed breaker_status.lua
var BreakerStatus string
