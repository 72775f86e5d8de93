// Package wire converts between Go values and what the Lua scripts of
// package lua take and reply, for every package that runs those scripts
// (bucket, its subpackages, and the ledger, controls and ingest quotas
// under pacer/).
package wire

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Rate writes a rate so that Lua's tonumber reads back the same float64:
// the shortest decimal that round-trips, without an exponent, which
// gopher-lua (miniredis) does not parse.
func Rate(perSecond float64) string {
	return strconv.FormatFloat(perSecond, 'f', -1, 64)
}

// Duration returns n units, saturating at the longest time.Duration (a
// cooldown of nearly 292 years would overflow it in microseconds).
func Duration(n int64, unit time.Duration) time.Duration {
	if n > math.MaxInt64/int64(unit) {
		return math.MaxInt64
	}
	return time.Duration(n) * unit
}

// Ints copies a script reply that is an array of len(dst) integers into
// dst. It reports false for any other shape.
func Ints(v any, dst []int64) bool {
	a, ok := v.([]any)
	if !ok || len(a) != len(dst) {
		return false
	}
	for i, e := range a {
		n, ok := e.(int64)
		if !ok {
			return false
		}
		dst[i] = n
	}
	return true
}

// Describe names a reply's shape for an error, without its contents beyond
// a short prefix.
func Describe(v any) string {
	s := fmt.Sprintf("%T %v", v, v)
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return s
}

// NoScript reports whether err is Redis's answer to an EVALSHA of a script
// it has not cached (NOSCRIPT): the script did not run, and running it
// with EVAL (redis.Script.Run) loads it.
func NoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// EvalAgain hands send the calls whose EVALSHA found no script in the
// server's cache (NoScript of err(c): a Redis restart, SCRIPT FLUSH), all
// at once, for one more pipeline with the script's text; send is not
// called when none did.
func EvalAgain[C any](calls []C, err func(C) error, send func(again []C)) {
	var again []C
	for _, c := range calls {
		if NoScript(err(c)) {
			again = append(again, c)
		}
	}
	if len(again) > 0 {
		send(again)
	}
}
