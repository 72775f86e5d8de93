package ledger

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Pair is the pair limit a claim takes a turn of: at most Burst messages
// at once from one pacing key to one recipient, then one per Every, on the
// Redis clock, shared by every process that claims through the same Redis.
// It is WhatsApp's pair rate limit: about 1 message per 6 s from a
// business number to one user, up to 45 in a burst, answered 131056
// beyond (Meta, "Pair rate limits":
// https://developers.facebook.com/documentation/business-messaging/whatsapp/about-the-platform).
// The zero Pair is none.
type Pair struct {
	Every time.Duration // the interval between turns once the burst is spent; >= 1µs
	Burst int           // turns free at once; >= 1
}

// Off reports whether p is the zero Pair: no pair limit.
func (p Pair) Off() bool { return p == Pair{} }

// Validate returns an error naming the field at fault, nil for a usable
// Pair or the zero one.
func (p Pair) Validate() error {
	if p.Off() {
		return nil
	}
	var errs []error
	if p.Every < time.Microsecond {
		errs = append(errs, fmt.Errorf("Every: %v must be at least 1µs (or 0 with Burst 0 for no pair limit)", p.Every))
	}
	if p.Burst < 1 {
		errs = append(errs, fmt.Errorf("Burst: %d must be at least 1", p.Burst))
	}
	if p.Every > 0 && float64(p.Burst)*float64(p.Every.Microseconds()) > 1<<50 {
		errs = append(errs, fmt.Errorf("Every x Burst: %v x %d is beyond what the Redis clock's µs hold exactly", p.Every, p.Burst))
	}
	return errors.Join(errs...)
}

// args are p's ARGV pair of one pair key: interval in µs, burst.
func (p Pair) args() (int64, int) {
	return max(p.Every.Microseconds(), 1), p.Burst
}

// pairWait reads the µs of a "pair:<us>" reply, rounded up to whole µs.
func pairWait(us int64) time.Duration {
	return time.Duration(min(us, math.MaxInt64/1000)) * time.Microsecond
}
