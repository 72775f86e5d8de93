package bucket

import "math"

// The refill arithmetic of a token bucket in Go, for [Local] and for the
// slots of a [Lease]: the same float64 steps as lua/refill.lua, its one
// copy in Lua, so that a Local answers what Redis would and a lease's
// slots fall where reserve.lua counted them. Tokens are in millionths,
// time in whole microseconds, rates in tokens per second.

// refill returns the millionths a bucket gains in us microseconds at rate
// tokens per second: floor(us * rate), as refill() of lua/refill.lua.
func refill(us, rate float64) float64 {
	return math.Floor(us * rate)
}

// tokensAt returns the millionths in a bucket that held u at ts_us, read at
// now: refilled for the time since ts (none if ts is after now: no tokens
// from a clock step), capped at burstU. As read() of lua/refill.lua, for a
// bucket that exists.
func tokensAt(u float64, ts, now int64, rate, burstU float64) float64 {
	if now > ts {
		u += refill(float64(now-ts), rate)
	}
	return math.Min(u, burstU)
}

// slotUS returns the fewest whole microseconds s >= 0 after which a bucket
// refilling at rate has refilled deficit millionths: refill(s, rate) >=
// deficit (0 if deficit <= 0). As slot() of lua/refill.lua.
func slotUS(deficit, rate float64) int64 {
	if deficit <= 0 {
		return 0
	}
	s := math.Ceil(deficit / rate)
	if refill(s, rate) < deficit {
		s++
	} else if s > 1 && refill(s-1, rate) >= deficit {
		s--
	}
	if s >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(s)
}

// slotsStarted returns how many slots of cost costU millionths, of a lease
// whose bucket held u0 at now0, have started by now, as lease_return.lua
// counts them: floor((u0 + refill(now - now0)) / costU).
func slotsStarted(u0 float64, now0, now int64, rate, costU float64) float64 {
	return math.Floor((u0 + refill(float64(now-now0), rate)) / costU)
}
